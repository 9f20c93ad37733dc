"""Far attention mass inside trained models: the recomputed attention rows are the layers' own (they
rebuild each layer's output), far mass and the chapter 11 bound are what their definitions say."""

import numpy as np
import pytest
import torch

from path_lib.theory import decoherence as theory
from path_lib.experiments.farmass import attention_inputs, far_mass, far_mass_by_length, far_mass_table, last_query_row
from path_lib.nn.model import TinyLM
from path_lib.nn.rotations import TokenRotationAttention, rotate_pairs

torch.set_num_threads(1)

KINDS = ["nope", "rope", "alibi", "fox", "path", "path_fox", "sba", "tok_rot_qk", "tok_rot_qkv",
         "tok_rot_learned", "hid_rot_qk", "hid_rot_qkv", "hid_rot_learned"]


def _last_output(layer, row, x, ids):
    """The layer's output at the last position rebuilt from the attention row alone."""
    q, k, v = layer.qkv(x)
    rep = layer.n_heads // layer.n_kv_heads
    v = v.repeat_interleave(rep, dim=2)                                 # [B, T, Hq, D]
    rot_values = getattr(layer, "rotate_values", False)
    if rot_values:
        theta = layer.angles(ids, x.dtype) if isinstance(layer, TokenRotationAttention) else layer.angles(x)
        phi = torch.cumsum(theta, 1).repeat_interleave(rep, dim=2)
        v = rotate_pairs(v, -phi)
    o = torch.einsum("bht,bthd->bhd", row["weights"], v)
    if rot_values:
        o = rotate_pairs(o, phi[:, -1])
    return layer.out(o[:, None])[:, 0]


@pytest.mark.parametrize("kind", KINDS)
def test_rows_rebuild_every_layer_output(kind):
    torch.manual_seed(0)
    kw = {"block_size": 4} if kind.startswith("path") else {}
    model = TinyLM(11, d_model=16, n_layers=2, n_heads=4, attention=kind, n_kv_heads=2, **kw).double()
    with torch.no_grad():           # make the rows far from uniform: larger q, k, gates
        for blk in model.blocks:
            blk.attn.q_proj.weight.mul_(40)
            blk.attn.k_proj.weight.mul_(40)
    tokens = torch.randint(0, 11, (3, 13))
    caught = attention_inputs(model, tokens)
    assert len(caught) == 2
    for rec in caught:
        layer, x = rec["layer"], rec["x"]
        row = last_query_row(layer, x, rec["token_ids"])
        assert row["weights"].shape == (3, 4, 13)
        with torch.no_grad():
            layer.token_ids = rec["token_ids"]
            y = layer(x)[:, -1]
            layer.token_ids = None
        torch.testing.assert_close(_last_output(layer, row, x, rec["token_ids"]), y, atol=1e-10, rtol=1e-10)
        sums = row["weights"].sum(-1)
        if row["softmax"]:
            torch.testing.assert_close(sums, torch.ones_like(sums))
        else:
            assert bool((sums <= 1 + 1e-12).all())


def test_far_mass_of_uniform_attention_and_the_bound():
    """q = 0: every logit 0, uniform rows: far mass = n_far / T exactly, lambda = 0, and the bound
    M_L / (M_L + K e^0) equals it (the bound is tight when all logits are equal)."""
    torch.manual_seed(1)
    model = TinyLM(7, d_model=8, n_layers=1, n_heads=2, attention="nope").double()
    with torch.no_grad():
        model.blocks[0].attn.q_proj.weight.zero_()
    tokens = torch.randint(0, 7, (4, 20))
    fm = far_mass(model, tokens, distance=5)
    assert fm["n_far"] == 14 and fm["n_near"] == 6 and fm["far_mass"].shape == (1, 2, 4)
    np.testing.assert_allclose(fm["far_mass"], 14 / 20, rtol=1e-12)
    np.testing.assert_allclose(fm["lam"], 0.0, atol=1e-12)
    np.testing.assert_allclose(fm["bound"], theory.far_mass_bound(14, 6, 0.0), rtol=1e-12)


def test_bound_uses_each_rows_centred_lambda_and_holds():
    torch.manual_seed(2)
    model = TinyLM(9, d_model=16, n_layers=2, n_heads=2, attention="rope").double()
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.q_proj.weight.mul_(30)
    tokens = torch.randint(0, 9, (2, 24))
    fm = far_mass(model, tokens, distance=7)
    rec = attention_inputs(model, tokens)[1]
    lg = last_query_row(rec["layer"], rec["x"])["logits"][1, 0]
    lam = float((lg.max() - lg.min()) / 2)
    assert fm["lam"][1, 0, 1] == pytest.approx(lam)
    assert fm["bound"][1, 0, 1] == pytest.approx(theory.far_mass_bound(16, 8, lam))
    assert bool((fm["far_mass"] >= fm["bound"] - 1e-12).all())          # the theorem, row by row


def test_by_length_shapes_sba_and_table():
    torch.manual_seed(3)
    data = torch.randint(0, 256, (3000,), dtype=torch.uint8)
    res = {}
    for kind in ("alibi", "sba", "tok_rot_qkv"):
        m = TinyLM(256, d_model=16, n_layers=2, n_heads=2, attention=kind)
        r = far_mass_by_length(m, data, [16, 32, 64], distance=8, n_windows=3, chunk_tokens=64)
        assert r["far_mass"].shape == r["bound"].shape == (2, 2, 3) and r["mean_far_mass"].shape == (3,)
        assert bool(((r["far_mass"] >= 0) & (r["far_mass"] <= 1 + 1e-6)).all()) and r["bound_violations"] == 0
        res[kind] = r
    assert np.isnan(res["sba"]["bound"]).all()                      # no softmax: no bound
    table = far_mass_table(res)
    assert table.count("\n") == 4 and "n/a (no softmax)" in table
    with pytest.raises(ValueError, match="exceed"):
        far_mass_by_length(m, data, [8], distance=8)


def test_huge_logit_range_gives_zero_bound_not_overflow():
    """A gate summed over a long context makes lambda enormous: e^{2 lambda} overflows; the bound is 0."""
    torch.manual_seed(4)
    m = TinyLM(5, d_model=8, n_layers=1, n_heads=2, attention="fox")
    with torch.no_grad():
        m.blocks[0].attn.g_proj.bias.fill_(-50.0)          # log f ~ -50 per token
    fm = far_mass(m, torch.randint(0, 5, (1, 40)), distance=3)
    assert np.all(fm["bound"] == 0.0) and np.all(fm["lam"] > 400)
    assert np.all(fm["far_mass"] < 1e-12)


def test_far_mass_over_seeds():
    from path_lib.experiments.farmass import far_mass_over_seeds
    runs = [{"model": "A", "far_mass": {"lengths": [8, 16], "mean_far_mass": [0.2 + s / 10, 0.5],
                                        "bound": [[[0.1, 0.2]]], "bound_violations": 0}} for s in range(3)]
    runs.append({"model": "B", "far_mass": None})
    out = far_mass_over_seeds(runs)
    assert set(out) == {"A"} and out["A"]["n"] == 3 and out["A"]["lengths"] == [8, 16]
    np.testing.assert_allclose(out["A"]["mean"], [0.3, 0.5])
    np.testing.assert_allclose(out["A"]["min"], [0.2, 0.5])
    np.testing.assert_allclose(out["A"]["bound"], [0.1, 0.2])
