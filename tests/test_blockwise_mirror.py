"""path_lib.blockwise.mirror: the kernels' decomposition (blocks, segments, split forward) in PyTorch.

* float64, fresh random inputs: outputs and every gradient (q, k, v, w, beta, g) against the explicit
  ground truth (``path_attention(impl="explicit")``, one ``D x D`` product per pair), for ragged T,
  several segments with a short last one, 1 / 2 / 4 blocks per segment, one segment, the split forward,
  the gate on and off, grouped-query heads, ``Dv != D`` and ``cu_seqlens``;
* the intermediates (keys at segment ends, pair products, segment-start queries, log-sum-exp) against
  explicit Householder products;
* under ``TRITON_INTERPRET=1`` (a subprocess, float32, tiny shapes): ``path_lib.kernels.path_attention`` against
  the mirror at the same block and segment lengths, outputs and gradients;
* bad input: a named ``TypeError`` / ``ValueError``.
"""
from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers import random_path_inputs
from path_lib.impl import path_attention
from path_lib.reference.attention import path_logits
from path_lib.blockwise.mirror import LOG2E, blockwise_path_attention, forward, gate_cumsum
from path_lib.reference.householder import householder_product

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
NAMES = ("q", "k", "v", "w", "beta", "g")


def _fresh_seed():
    return random.SystemRandom().randrange(2**31)


def _grads(out, inputs, do):
    used = [x for x in inputs if x is not None]
    return torch.autograd.grad(out, used, do)


# ----------------------------------------------------------------------------------------------
# float64 against the explicit ground truth
# ----------------------------------------------------------------------------------------------

CASES = [  # B, T, Hq, Hk, D, Dv, block, seg_blocks, fwd_rows, gate
    (1, 22, 4, 2, 5, 5, 4, 2, None, True),      # ragged T, 3 segments, the last one short
    (1, 18, 2, 2, 4, 3, 3, 1, None, False),     # one block per segment: no own-segment scan
    (1, 21, 3, 1, 4, 4, 2, 4, None, True),      # 4 blocks per segment, 3 segments (last short)
    (2, 14, 2, 1, 6, 4, 4, None, None, True),   # default segments, B = 2
    (1, 17, 2, 2, 3, 3, 4, 9, None, True),      # one segment: the thin scan over everything
    (1, 24, 2, 1, 4, 4, 2, 4, 4, True),         # split forward: earlier segments on 4-row tiles
    (1, 32, 1, 1, 4, 2, 2, 4, 8, False),        # split forward, whole-segment tiles, no gate
]


@pytest.mark.parametrize("B,T,Hq,Hk,D,Dv,block,seg,rows,gate", CASES)
def test_matches_explicit_with_gradients(B, T, Hq, Hk, D, Dv, block, seg, rows, gate):
    seed = _fresh_seed()
    ins = random_path_inputs(B=B, T=T, Hq=Hq, Hk=Hk, D=D, Dv=Dv, gate=gate, beta_mode="mixed", seed=seed,
                             requires_grad=True)
    o = blockwise_path_attention(*ins, block_size=block, seg_blocks=seg, fwd_rows=rows)
    ref = path_attention(*ins, impl="explicit")
    assert o.shape == (B, T, Hq, Dv) and o.dtype == torch.float64
    torch.testing.assert_close(o, ref, atol=1e-10, rtol=0, msg=lambda m: f"seed {seed}: output: {m}")
    do = torch.randn_like(ref)
    for name, a, b in zip(NAMES, _grads(o, ins, do), _grads(ref, ins, do)):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0, msg=lambda m: f"seed {seed}: d{name}: {m}")


@pytest.mark.parametrize("gate", [False, True])
def test_cu_seqlens_match_explicit_per_sequence(gate):
    seed = _fresh_seed()
    cu = torch.tensor([0, 9, 9, 26, 31], dtype=torch.int32)         # lengths 9, 0, 17, 5
    ins = random_path_inputs(B=1, T=31, Hq=4, Hk=2, D=4, gate=gate, seed=seed, requires_grad=True)
    o = blockwise_path_attention(*ins, block_size=4, seg_blocks=2, cu_seqlens=cu)
    bounds = cu.tolist()
    ref = torch.cat([path_attention(*[x if x is None else x[:, s0:s1] for x in ins], impl="explicit")
                     for s0, s1 in zip(bounds[:-1], bounds[1:])], dim=1)
    torch.testing.assert_close(o, ref, atol=1e-10, rtol=0, msg=lambda m: f"seed {seed}: output: {m}")
    do = torch.randn_like(ref)
    for name, a, b in zip(NAMES, _grads(o, ins, do), _grads(ref, ins, do)):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0, msg=lambda m: f"seed {seed}: d{name}: {m}")


def test_intermediates_are_the_kernels_quantities():
    """R_j, Seg, Kseg, Om, Q0 and the base-2 log-sum-exp, one head, against explicit Householder products."""
    seed = _fresh_seed()
    BT, SB, T, D = 3, 2, 15, 4                       # 5 blocks; segments of tokens [0, 6), [6, 12), [12, 15)
    q, k, v, w, beta, g = random_path_inputs(B=1, T=T, Hq=1, D=D, gate=True, seed=seed)
    o, saved = forward(q, k, v, w, beta, gate_cumsum(g), D ** -0.5, BT, SB)
    Q, K, W, b = (x[0, :, 0] for x in (q, k, w, beta))
    L = BT * SB

    def prod(a, e):                                  # H_{e-1} ... H_a
        return householder_product(W[a:e], b[a:e])

    KS, Q0 = saved["KS"][0, 0].reshape(T, D), saved["Q0"][0, 0].reshape(T, D)
    for t in range(T):
        a, e = (t // L) * L, min((t // L + 1) * L, T)  # its segment's start and end
        torch.testing.assert_close(KS[t], prod(t + 1, e) @ K[t])
        torch.testing.assert_close(Q0[t], Q[t] @ prod(a, t + 1))
    for j in range(T // BT):
        e = min((j // SB + 1) * L, T)
        torch.testing.assert_close(saved["RS"][0, 0, j], prod((j + 1) * BT, e))
    for s in range(3):
        torch.testing.assert_close(saved["SEG"][0, 0, s], prod(s * L, min((s + 1) * L, T)))
    OM = saved["OM"][0, 0]
    assert OM.shape == (3, D, D)
    for kc in range(1, 3):
        for kk in range(kc):
            torch.testing.assert_close(OM[kc * (kc - 1) // 2 + kk], prod((kk + 1) * L, kc * L))
    lse = torch.logsumexp(path_logits(q, k, w, beta, g, impl="explicit")[0, 0], dim=-1) * LOG2E
    torch.testing.assert_close(saved["LSE"][0, 0].reshape(T), lse, msg=lambda m: f"seed {seed}: {m}")
    torch.testing.assert_close(o, path_attention(q, k, v, w, beta, g, impl="explicit"))


def test_float32_inputs_compute_in_float32_within_tolerance():
    seed = _fresh_seed()
    ins = random_path_inputs(B=1, T=26, Hq=2, Hk=1, D=8, gate=True, dtype=torch.float32, seed=seed)
    o = blockwise_path_attention(*ins, block_size=4, seg_blocks=2)
    ref = path_attention(*[None if x is None else x.double() for x in ins], impl="explicit")
    assert o.dtype == torch.float32
    torch.testing.assert_close(o.double(), ref, atol=2e-5, rtol=2e-5, msg=lambda m: f"seed {seed}: {m}")


def test_empty_sequence_and_path_attention_arguments():
    q, k, v, w, beta, g = (x[:, :0] for x in random_path_inputs(B=2, T=3, gate=True, seed=0))
    assert blockwise_path_attention(q, k, v, w, beta, g).shape == (2, 0, 2, 8)
    ins = random_path_inputs(B=1, T=12, Hq=2, D=4, gate=True, seed=_fresh_seed())
    ref = path_attention(*ins, impl="explicit")
    for impl, kw in (("blockwise", dict(seg_blocks=1)), ("blockwise_scan", {})):
        torch.testing.assert_close(path_attention(*ins, impl=impl, block_size=3, **kw), ref, atol=1e-10, rtol=0)


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------

def _good():
    return random_path_inputs(B=1, T=10, Hq=4, Hk=2, D=4, gate=True, seed=3)


BAD = [  # (mutation of (args, kwargs), exception, message fragment)
    (lambda a, kw: a.__setitem__(0, a[0].tolist()), TypeError, "q"),
    (lambda a, kw: a.__setitem__(3, a[3].half()), TypeError, "w"),
    (lambda a, kw: a.__setitem__(4, a[4][..., :1]), ValueError, "beta"),
    (lambda a, kw: a.__setitem__(5, a[5][..., :1]), ValueError, "g"),
    (lambda a, kw: a.__setitem__(4, a[4] + 2.5), ValueError, "beta"),
    (lambda a, kw: a.__setitem__(3, a[3] * 2), ValueError, "w"),
    (lambda a, kw: a.__setitem__(5, a[5].abs() + 0.1), ValueError, "g"),
    (lambda a, kw: a.__setitem__(0, a[0] * math.nan), ValueError, "q"),
    (lambda a, kw: a.__setitem__(0, a[0][:, :, :1].repeat(1, 1, 3, 1)), ValueError, "heads"),
    (lambda a, kw: a.__setitem__(1, a[1].to("meta")), ValueError, "k"),
    (lambda a, kw: kw.update(block_size=0), ValueError, "block_size"),
    (lambda a, kw: kw.update(block_size=2.0), TypeError, "block_size"),
    (lambda a, kw: kw.update(seg_blocks=0), ValueError, "seg_blocks"),
    (lambda a, kw: kw.update(seg_blocks=True), TypeError, "seg_blocks"),
    (lambda a, kw: kw.update(fwd_rows=3, block_size=2, seg_blocks=2), ValueError, "fwd_rows"),
    (lambda a, kw: kw.update(fwd_rows=8, block_size=2, seg_blocks=2), ValueError, "fwd_rows"),
    (lambda a, kw: kw.update(fwd_rows="4"), TypeError, "fwd_rows"),
    (lambda a, kw: kw.update(scale=-1.0), ValueError, "scale"),
    (lambda a, kw: kw.update(check_values="yes"), TypeError, "check_values"),
    (lambda a, kw: kw.update(cu_seqlens=[0, 10]), TypeError, "cu_seqlens"),
    (lambda a, kw: kw.update(cu_seqlens=torch.tensor([0.0, 10.0])), TypeError, "cu_seqlens"),
    (lambda a, kw: kw.update(cu_seqlens=torch.tensor([0, 9])), ValueError, "cu_seqlens"),
    (lambda a, kw: kw.update(cu_seqlens=torch.tensor([0, 6, 4, 10])), ValueError, "non-decreasing"),
    (lambda a, kw: kw.update(cu_seqlens=torch.tensor([[0, 10]])), ValueError, "cu_seqlens"),
]


@pytest.mark.parametrize("mutate,exc,fragment", BAD)
def test_bad_input_is_named(mutate, exc, fragment):
    args, kwargs = list(_good()), {}
    mutate(args, kwargs)
    with pytest.raises(exc, match=fragment):
        blockwise_path_attention(*args, **kwargs)


def test_bad_batch_with_cu_seqlens_and_bad_seg_blocks_in_path_attention():
    q, k, v, w, beta, g = random_path_inputs(B=2, T=6, D=4, seed=4)
    with pytest.raises(ValueError, match="batch size must be 1"):
        blockwise_path_attention(q, k, v, w, beta, cu_seqlens=torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="seg_blocks"):
        path_attention(q, k, v, w, beta, impl="blockwise", seg_blocks=-1)
    with pytest.raises(TypeError, match="seg_blocks"):
        path_attention(q, k, v, w, beta, impl="blockwise_scan", seg_blocks="2")


# ----------------------------------------------------------------------------------------------
# the Triton kernels (interpreted) against the mirror
# ----------------------------------------------------------------------------------------------

def _close32(a, b, name, rtol=2e-5, atol=1e-6):
    a, b = a.detach().double(), b.detach().double()
    assert torch.isfinite(a).all(), f"{name}: non-finite values"
    err, bound = float((a - b).norm()), rtol * float(b.norm()) + atol * b.numel() ** 0.5
    assert err <= bound, f"{name}: |kernel - mirror| = {err:.3g} > {bound:.3g}"


def _inputs32(B, T, Hq, Hk, D, gate, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, H, D, generator=gen) for H in (Hq, Hk, Hk))
    w = F.normalize(torch.randn(B, T, Hk, D, generator=gen), dim=-1)
    beta = 2 * torch.rand(B, T, Hk, generator=gen)
    g = F.logsigmoid(torch.randn(B, T, Hq, generator=gen) + 2.0) if gate else None
    return [None if x is None else x.requires_grad_() for x in (q, k, v, w, beta, g)]


@pytest.mark.skipif(not INTERPRETED, reason="needs TRITON_INTERPRET=1 (test_kernels_match_mirror_interpreted runs it)")
@pytest.mark.parametrize("T,Hq,Hk,seg,rows,gate,cu", [
    (85, 2, 1, 4, None, True, None),     # ragged T, GQA, a short last segment
    (64, 1, 1, 1, None, False, None),    # one block per segment, 4 segments
    (64, 2, 1, 2, 32, True, None),       # split forward on 32-row tiles
    (56, 2, 1, 2, None, True, [0, 9, 9, 56]),   # cu_seqlens (an empty sequence), 2 segments
    (30, 1, 1, 8, None, True, None),     # one segment
])
def test_interpreted_case_kernels_match_mirror(T, Hq, Hk, seg, rows, gate, cu, monkeypatch):
    import path_lib.kernels
    if rows is not None:
        monkeypatch.setenv("PATH_KERNELS_SPLIT", f"fwd_rows={rows}")
    seed = _fresh_seed()
    ins = _inputs32(1, T, Hq, Hk, 32, gate, seed)
    cs = None if cu is None else torch.tensor(cu, dtype=torch.int32)
    o = path_lib.kernels.path_attention(*ins, block_size=16, seg_blocks=seg, cu_seqlens=cs)
    om = blockwise_path_attention(*ins, block_size=16, seg_blocks=seg, cu_seqlens=cs, fwd_rows=rows)
    _close32(o, om, f"seed {seed}: o")
    do = torch.randn_like(o)
    for name, a, b in zip(NAMES, _grads(o, ins, do), _grads(om, ins, do)):
        _close32(a, b, f"seed {seed}: d{name}")


@pytest.mark.skipif(INTERPRETED, reason="TRITON_INTERPRET is set: the interpreted cases run in this process")
def test_kernels_match_mirror_interpreted():
    """The interpreted cases above, in a subprocess: TRITON_INTERPRET must be set before triton is imported."""
    pytest.importorskip("triton")
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider",
                           "-k", "interpreted_case"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"interpreted cases failed:\n{out}"
    assert "5 passed" in proc.stdout, out
