"""Accumulated SO(2) rotation attention: exact against explicit products of rotation matrices."""
import math

import pytest
import torch

from path_lib.layers import TinyLM, make_attention
from path_lib.rotations import (accumulated_rotation_attention, block_rotation_matrix, rotate_pairs,
                                angle_scales)


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


@pytest.mark.parametrize("kind", ["rand_rot_qk", "rand_rot_qkv", "learned_rot"])
def test_layers_step_equals_forward_and_learning_flag(kind):
    torch.manual_seed(0)
    layer = make_attention(kind, 16, 2).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    y = layer(x)
    state, ys = None, []
    for t in range(6):
        yt, state = layer.step(x[:, t], state)
        ys.append(yt)
    torch.testing.assert_close(torch.stack(ys, 1), y, atol=1e-12, rtol=1e-12)
    trainable = {n for n, p in layer.named_parameters()}
    assert ("angle_proj.weight" in trainable) == (kind == "learned_rot")
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
