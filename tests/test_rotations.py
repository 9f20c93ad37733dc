"""Accumulated SO(2) rotation attention: exact against explicit products of rotation matrices."""
import math

import pytest
import torch

from helpers import decode_by_steps
from path_lib.nn.layers import ATTENTION_LAYERS, make_attention
from path_lib.nn.model import TinyLM
from path_lib.nn.rotations import (LEGACY_ALIASES, LearnedRotationAttention, RandomRotationAttention,
                                   TokenRotationAttention, accumulated_rotation_attention, angle_scales,
                                   block_rotation_matrix, mixing_windows, rotate_pairs)


def _explicit(q, k, v, theta, rotate_values):
    """Loop over (i, j): P = M_i ... M_{j+1} as a product of explicit D x D matrices (float64)."""
    B, T, Hq, D = q.shape
    Hk = k.shape[2]
    rep = Hq // Hk
    M = block_rotation_matrix(theta)  # [B, T, Hk, D, D]
    out = torch.zeros(B, T, Hq, D, dtype=torch.float64)
    for b in range(B):
        for h in range(Hq):
            hk = h // rep
            for i in range(T):
                P = torch.eye(D, dtype=torch.float64)
                logits, vals = [], []
                for j in range(i, -1, -1):          # P = M_i ... M_{j+1}
                    logits.append(q[b, i, h] @ P @ k[b, j, hk] / math.sqrt(D))
                    vals.append(P @ v[b, j, hk] if rotate_values else v[b, j, hk])
                    P = P @ M[b, j, hk]
                a = torch.softmax(torch.stack(logits), 0)
                out[b, i, h] = (a[:, None] * torch.stack(vals)).sum(0)
    return out


@pytest.mark.parametrize("rotate_values", [False, True])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_matches_explicit_rotation_products(rotate_values, heads):
    g = torch.Generator().manual_seed(1)
    B, T, D = 2, 7, 6
    Hq, Hk = heads
    q = torch.randn(B, T, Hq, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, T, Hk, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, T, Hk, D, generator=g, dtype=torch.float64)
    theta = 3 * torch.randn(B, T, Hk, D // 2, generator=g, dtype=torch.float64)
    fast = accumulated_rotation_attention(q, k, v, theta, rotate_values=rotate_values)
    ref = _explicit(q, k, v, theta, rotate_values)
    torch.testing.assert_close(fast, ref, atol=1e-12, rtol=1e-12)


def test_constant_angles_are_rope_like_and_rotate_pairs_is_matrix():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 8, generator=g, dtype=torch.float64)
    a = torch.randn(5, 4, generator=g, dtype=torch.float64)
    torch.testing.assert_close(rotate_pairs(x, a), (block_rotation_matrix(a) @ x[..., None])[..., 0])
    # constant angles: the logit depends on i - j only (a relative position encoding)
    B, T, H, D = 1, 9, 1, 4
    q = torch.randn(B, T, H, D, generator=g, dtype=torch.float64)
    q = q[:, :1].expand(B, T, H, D).contiguous()
    k = q.clone()

    theta = torch.full((B, T, H, D // 2), 0.7, dtype=torch.float64)
    M = block_rotation_matrix(theta[0, 0, 0])
    s1 = q[0, 5, 0] @ torch.linalg.matrix_power(M, 3) @ k[0, 2, 0]
    s2 = q[0, 7, 0] @ torch.linalg.matrix_power(M, 3) @ k[0, 4, 0]
    assert abs(float(s1 - s2)) < 1e-12


def test_angle_scales_range():
    s = angle_scales(8, 3.0, 0.03)
    assert s.shape == (8,) and abs(float(s[0]) - 3.0) < 1e-6 and abs(float(s[-1]) - 0.03) < 1e-7
    assert bool((s[1:] < s[:-1]).all())


@pytest.mark.parametrize("kind", ["hid_rot_qk", "hid_rot_qkv", "hid_rot_learned", "rand_rot_qk", "rand_rot_qkv",
                                  "learned_rot"])
def test_layers_step_equals_forward_and_learning_flag(kind):
    torch.manual_seed(0)
    layer = make_attention(kind, 16, 2).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    torch.testing.assert_close(decode_by_steps(layer, x)[0], layer(x), atol=1e-12, rtol=1e-12)
    trainable = {n for n, p in layer.named_parameters()}
    assert ("angle_proj.weight" in trainable) == (kind in ("learned_rot", "hid_rot_learned"))
    # equal inputs give equal angles (token-dependent, not position-dependent)
    th = layer.angles(torch.cat([x[:, :1], x[:, :1]], 1))
    torch.testing.assert_close(th[:, 0], th[:, 1])


def test_tinylm_variants_run_and_learned_angles_get_gradients():
    torch.manual_seed(0)
    m = TinyLM(32, d_model=16, n_layers=1, n_heads=2, attention="learned_rot")
    tok = torch.randint(0, 32, (2, 10))
    m(tok).logsumexp(-1).mean().backward()
    assert m.blocks[0].attn.angle_proj.weight.grad.abs().sum() > 0
    for kind in ("rand_rot_qk", "rand_rot_qkv"):
        m = TinyLM(32, d_model=16, n_layers=1, n_heads=2, attention=kind)
        out = m.generate(tok[:, :3], 2)
        assert out.shape == (2, 5)


def test_bad_theta_shape():
    q = torch.randn(1, 3, 1, 4)
    with pytest.raises(ValueError, match="theta"):
        accumulated_rotation_attention(q, q, q, torch.zeros(1, 3, 1, 3))
    with pytest.raises(ValueError, match="even"):
        make_attention("rand_rot_qk", 6, 2)


# ---------------------------------------------------------------------------------------------- token angles

def test_legacy_names_are_the_hidden_state_variants():
    assert LEGACY_ALIASES == {"rand_rot_qk": "hid_rot_qk", "rand_rot_qkv": "hid_rot_qkv", "learned_rot": "hid_rot_learned"}
    for old, new in LEGACY_ALIASES.items():
        a, b = make_attention(old, 16, 2), make_attention(new, 16, 2)
        assert type(a) is type(b) and a.rotate_values == b.rotate_values
    assert isinstance(make_attention("hid_rot_learned", 16, 2), LearnedRotationAttention)
    assert type(make_attention("hid_rot_qk", 16, 2)) is RandomRotationAttention
    for kind in ("tok_rot_qk", "tok_rot_qkv", "tok_rot_learned"):
        assert kind in ATTENTION_LAYERS and isinstance(make_attention(kind, 16, 2), TokenRotationAttention)


@pytest.mark.parametrize("kind", ["tok_rot_qk", "tok_rot_qkv", "tok_rot_learned"])
def test_token_angles_match_explicit_products(kind):
    """Inside TinyLM the step of token t is R(table[token_t]); the layer equals the explicit product of
    those rotation matrices along each route (float64)."""
    torch.manual_seed(0)
    m = TinyLM(20, d_model=12, n_layers=1, n_heads=2, attention=kind, table_size=20).double()
    layer = m.blocks[0].attn
    tok = torch.randint(0, 20, (2, 7))
    x = m.blocks[0].norm1(m.embed(tok))
    q, k, v = layer.qkv(x)
    theta = layer.angle_table.double()[tok]                       # [B, T, Hk, D/2]
    ref = _explicit(q, k, v, theta, layer.rotate_values)
    layer.token_ids = tok
    out = layer(x)
    layer.token_ids = None
    torch.testing.assert_close(out, layer.out(ref), atol=1e-12, rtol=1e-12)


def test_token_angles_depend_on_the_token_only():
    torch.manual_seed(1)
    layer = make_attention("tok_rot_qk", 16, 2, table_size=50)
    ids = torch.tensor([[3, 7, 3, 3]])
    th = layer.angles(ids)
    torch.testing.assert_close(th[0, 0], th[0, 2])                  # same token, same step, at any position
    assert not torch.allclose(th[0, 0], th[0, 1])
    # the hidden state does not enter: other inputs with the same ids give the same transport
    layer.token_ids = ids
    x1, x2 = torch.randn(1, 4, 16), torch.randn(1, 4, 16)
    q1, k1, _ = layer.qkv(x1)
    layer.token_ids = None
    assert torch.equal(layer.angles(ids), th)
    # the per-block scales spread from sigma_max (fast) to sigma_min (slow): a spectral gap in every block,
    # smallest for the slow ones
    s = layer.sigma
    assert float(s[0]) == pytest.approx(1.0) and float(s[-1]) == pytest.approx(0.125)
    t = layer.angle_table.double()
    gap = torch.polar(torch.ones_like(t), t).mean(0).abs()         # |mean over tokens of e^{i theta}|: [Hk, D/2]
    assert bool((gap < 1).all()) and float(gap[:, -1].mean()) > float(gap[:, 0].mean())
    assert float(mixing_windows(0.125)) == pytest.approx(128.0)
    with pytest.raises(ValueError, match="table_size"):
        layer.token_ids = torch.tensor([[60, 1, 2, 3]])
        layer(x2)
    layer.token_ids = None


@pytest.mark.parametrize("kind", ["tok_rot_qk", "tok_rot_qkv", "tok_rot_learned"])
def test_tinylm_token_rotation_step_equals_forward_and_gradients(kind):
    torch.manual_seed(2)
    m = TinyLM(30, d_model=16, n_layers=2, n_heads=4, attention=kind, n_kv_heads=2, table_size=30).double()
    tok = torch.randint(0, 30, (2, 9))
    y = m(tok)
    state, rows = None, []
    for t in range(9):
        lt, state = m.step(tok[:, t], state)
        rows.append(lt)
    torch.testing.assert_close(torch.stack(rows, 1), y, atol=1e-10, rtol=0)
    assert all(b.attn.token_ids is None for b in m.blocks)          # handed over for the call only
    m.float()(tok).logsumexp(-1).mean().backward()
    table = m.blocks[0].attn.angle_table
    assert (table.grad is not None and table.grad.abs().sum() > 0) == (kind == "tok_rot_learned")
    # without token ids (a layer on its own) every token is token 0: constant angles, RoPE-like
    layer = make_attention(kind, 16, 2)
    x = torch.randn(1, 5, 16)
    layer.token_ids = torch.zeros(1, 5, dtype=torch.long)
    torch.testing.assert_close(layer(x), (setattr(layer, "token_ids", None), layer(x))[1])


def test_theta_values_are_checked_only_when_asked():
    from path_lib.nn.rotations import accumulated_rotation_attention
    q, k, v = (torch.randn(1, 5, 2, 4, dtype=torch.float64) for _ in range(3))
    theta = torch.zeros(1, 5, 2, 2, dtype=torch.float64)
    theta[0, 3, 1, 0] = float("nan")
    with pytest.raises(ValueError, match="theta"):
        accumulated_rotation_attention(q, k, v, theta)
    out = accumulated_rotation_attention(q, k, v, theta, check_values=False)    # the layers' path: no sync
    assert torch.isfinite(out[0, :3]).all() and torch.isnan(out[0, 3:, 1]).all()
    with pytest.raises(TypeError, match="check_values"):
        accumulated_rotation_attention(q, k, v, theta, check_values="no")
