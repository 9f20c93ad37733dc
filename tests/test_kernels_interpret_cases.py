"""Cases for the Triton kernels under the Triton interpreter (TRITON_INTERPRET=1) on the CPU, float32.

Run by ``tests/test_kernels_interpret.py``, one pytest item per case there (so that ``pytest -n 2``
spreads them), each case run in a worker process that has ``TRITON_INTERPRET=1``; or directly:
``TRITON_INTERPRET=1 pytest tests/test_kernels_interpret_cases.py``. Skipped otherwise.

Forward and every gradient (q, k, v, w, beta, g) against the float64 UT all-pairs reference
(``path_lib.reference.attention.path_attention(..., impl="parallel")``) on tiny shapes with a small block length
(16) and small segments, so that a few dozen tokens exercise the diagonal block, the own-segment scan,
the earlier-segment path, ragged last blocks and partial last segments. Also grouped-query heads,
the gate, ``cu_seqlens``, ``transform_keys_to_end`` and the input checks.

Why a subprocess: Triton decides between compiled and interpreted functions when a ``@triton.jit``
function is decorated, and ``triton.language.standard`` (``tl.max``, ``tl.sum``...) is decorated when
triton is first imported; so the variable must be set before anything in the process imports triton.
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
# tests/test_kernels_interpret.py imports this module under CASE_LIST_MODULE, without the interpreter, only
# to read the test functions and their parameters (it runs them elsewhere)
CASE_LIST_MODULE = "kernels_interpret_case_list"
if os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and __name__ != CASE_LIST_MODULE:
    pytest.skip("run with TRITON_INTERPRET=1 (tests/test_kernels_interpret.py does)", allow_module_level=True)

from path_lib.reference.attention import path_attention as ref_attention  # noqa: E402


def _inputs(B, T, Hq, Hk, D, gate, seed, beta_mode="uniform"):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, Hq, D, generator=gen)
    k = torch.randn(B, T, Hk, D, generator=gen)
    v = torch.randn(B, T, Hk, D, generator=gen)
    w = F.normalize(torch.randn(B, T, Hk, D, generator=gen), dim=-1)
    u = torch.rand(B, T, Hk, generator=gen)
    if beta_mode == "uniform":
        beta = 2 * u
        beta.view(-1)[:: 5] = 1.99  # values near 2 always present
    else:  # mixed: exact 0, 1, 2 and near-2 values
        choices = torch.tensor([0.0, 1.0, 2.0, 1.999, 0.5, 1.5])
        beta = choices[torch.randint(0, 6, u.shape, generator=gen)]
    g = F.logsigmoid(torch.randn(B, T, Hq, generator=gen) + 2.0) if gate else None
    return q, k, v, w, beta, g


def _close(a, b, rtol=2e-5, atol=1e-6, name=""):
    a, b = a.detach().double(), b.detach().double()
    assert torch.isfinite(a).all(), f"{name}: non-finite values"
    err = float((a - b).norm())
    bound = rtol * float(b.norm()) + atol * (b.numel() ** 0.5)
    assert err <= bound, f"{name}: |err| = {err:.3g} > {bound:.3g} (|ref| = {float(b.norm()):.3g})"


def _check_against_reference(B, T, Hq, Hk, D, gate, block, seg, seed, beta_mode="uniform", cu=None):
    import path_lib.kernels
    ins = [x.requires_grad_() if x is not None else None for x in _inputs(B, T, Hq, Hk, D, gate, seed, beta_mode)]
    o = path_lib.kernels.path_attention(*ins, cu_seqlens=cu, block_size=block, seg_blocks=seg)
    assert o.shape == (B, T, Hq, D) and o.dtype == torch.float32
    do = torch.randn_like(o)
    used = [x for x in ins if x is not None]
    grads = torch.autograd.grad(o, used, do)

    ins64 = [x.detach().double().requires_grad_() if x is not None else None for x in ins]
    if cu is None:
        o64 = ref_attention(*ins64, impl="parallel")
    else:
        bounds = cu.tolist()
        parts = [ref_attention(*[x[:, s0:s1] if x is not None else None for x in ins64], impl="parallel")
                 for s0, s1 in zip(bounds[:-1], bounds[1:])]
        o64 = torch.cat(parts, dim=1)
    used64 = [x for x in ins64 if x is not None]
    g64 = torch.autograd.grad(o64, used64, do.double())
    _close(o, o64, name="o")
    for name, a, b in zip(["dq", "dk", "dv", "dw", "dbeta", "dg"], grads, g64):
        _close(a, b, name=name)


@pytest.mark.parametrize("B,T,Hq,Hk,gate,seg,beta_mode", [
    (1, 40, 2, 2, False, 2, "uniform"),   # 3 blocks: two segments, ragged last block
    (2, 17, 2, 1, True, 1, "mixed"),      # GQA, batch 2, one block per segment
    (1, 1, 2, 2, True, None, "uniform"),  # a single token
    (1, 100, 2, 1, True, 3, "uniform"),   # 7 blocks, segments of 3 (partial last segment)
])
def test_forward_and_gradients(B, T, Hq, Hk, gate, seg, beta_mode):
    _check_against_reference(B, T, Hq, Hk, 32, gate, 16, seg, seed=1000 + T, beta_mode=beta_mode)


@pytest.mark.parametrize("split", ["seg_split", "block_cols", "diag_cols", "all"])
def test_gradients_with_row_and_column_splits(split, monkeypatch):
    """The backward's segment kernel on row blocks of its D x D state, and the block kernel and the
    diagonal-block kernel on column chunks of the head dim (what D = 128 uses on a GPU), here at D = 32
    split in halves."""
    from path_lib.kernels import _config as kp
    if split in ("seg_split", "all"):
        monkeypatch.setattr(kp, "_SEG_SPLIT", {32: 16})
    if split in ("block_cols", "all"):
        monkeypatch.setattr(kp, "_BLOCK_COLS", {32: 16})
    if split in ("diag_cols", "all"):
        monkeypatch.setattr(kp, "_DIAG_COLS", {32: 16})
    cfg = kp.kernel_config("cpu", torch.float32, 32, 90, block_size=16, seg_blocks=2)
    assert (cfg.seg_split, cfg.block_cols, cfg.diag_cols) == (
        {"seg_split": (16, 32, 32), "block_cols": (32, 16, 32), "diag_cols": (32, 32, 16),
         "all": (16, 16, 16)}[split])
    _check_against_reference(1, 90, 4, 2, 32, True, 16, 2, seed=77)


@pytest.mark.parametrize("T,seg", [(150, 4), (150, 3)])
def test_gradients_with_two_blocks_of_keys_per_program(T, seg, monkeypatch):
    """The key side on 2 BT key rows per program (what half-precision D = 128 uses on a GPU), its dKseg
    accumulated in column chunks: here BT = 16, 32 rows, 10 blocks in segments of 4 (pairs tile the
    segments, partial last segment); with segments of 3 a pair would straddle two segments, so the
    launcher falls back to one block."""
    from path_lib.kernels import _config as kp
    monkeypatch.setenv("PATH_KERNELS_SPLIT", "key_rows=32")
    monkeypatch.setattr(kp, "_SEG_SPLIT", {32: 16})
    assert kp.kernel_config("cpu", torch.float32, 32, T, block_size=16, seg_blocks=seg).key_rows == (
        32 if seg % 2 == 0 else 16)
    _check_against_reference(1, T, 4, 2, 32, True, 16, seg, seed=91 + seg)


def test_strong_gates_forward_and_gradients():
    """Forget gates of about -2.6 per token (G down to about -400 over the sequence): the kernels take the
    query's gate out of their loops (v9: logits S sl2 - (G_k - r) log2 e with one reference r per
    program, the row term in the log-sum-exp), which must not lose accuracy when G is large."""
    import path_lib.kernels
    q, k, v, w, beta, g = _inputs(1, 150, 4, 2, 32, True, seed=131)
    ins = [x.requires_grad_() for x in (q, k, v, w, beta, g - 2.5)]
    o = path_lib.kernels.path_attention(*ins, block_size=16, seg_blocks=4)
    do = torch.randn_like(o)
    grads = torch.autograd.grad(o, ins, do)
    ins64 = [x.detach().double().requires_grad_() for x in ins]
    o64 = ref_attention(*ins64, impl="parallel")
    g64 = torch.autograd.grad(o64, ins64, do.double())
    _close(o, o64, name="o")
    for name, a, b in zip(["dq", "dk", "dv", "dw", "dbeta", "dg"], grads, g64):
        _close(a, b, name=name)


@pytest.mark.parametrize("T,seg,gate", [(150, 4, True), (150, 3, False), (90, 2, False)])
def test_forward_with_earlier_segments_in_a_second_kernel(T, seg, gate, monkeypatch):
    """The forward split in two (what half-precision D = 128 uses on a GPU): _fwd_kernel for the
    diagonal block and own segment, _fwd_inter_kernel for the earlier segments on 2 BT query rows per
    program, from the partial results. BT = 16, 32 rows; segments of 3 fall back to the one kernel."""
    from path_lib.kernels import _config as kp
    from path_lib.kernels import _forward
    monkeypatch.setenv("PATH_KERNELS_SPLIT", "fwd_rows=32")
    cfg = kp.kernel_config("cpu", torch.float32, 32, T, block_size=16, seg_blocks=seg)
    assert cfg.fwd_rows == (32 if seg % 2 == 0 else 16) and cfg.fwd_split == (seg % 2 == 0)
    launched = []
    real = _forward._launch
    monkeypatch.setattr(_forward, "_launch", lambda kernel, *a, **kw: (launched.append(kernel.fn.__name__),
                                                                  real(kernel, *a, **kw))[1])
    _check_against_reference(1, T, 4, 2, 32, gate, 16, seg, seed=103 + seg)
    assert ("_fwd_inter_kernel" in launched) == (seg % 2 == 0)


@pytest.mark.parametrize("T,seg", [(150, 4), (150, 3)])
def test_gradients_with_two_blocks_of_queries_per_program(T, seg, monkeypatch):
    """The query side on 2 BT query rows per program (what half-precision D = 128 uses on a GPU), its
    dSeg in column chunks: BT = 16, 32 rows, 10 blocks in segments of 4; with segments of 3 the
    launcher falls back to one block."""
    from path_lib.kernels import _config as kp
    monkeypatch.setenv("PATH_KERNELS_SPLIT", "query_rows=32")
    monkeypatch.setattr(kp, "_SEG_SPLIT", {32: 16})
    assert kp.kernel_config("cpu", torch.float32, 32, T, block_size=16, seg_blocks=seg).query_rows == (
        32 if seg % 2 == 0 else 16)
    _check_against_reference(1, T, 4, 2, 32, True, 16, seg, seed=97 + seg)


def test_split_override_is_parsed_and_checked(monkeypatch):
    import path_lib.kernels as kp
    monkeypatch.setenv("PATH_KERNELS_SPLIT", "seg_split=16, block_cols=64")
    cfg128 = kp.kernel_config("cpu", torch.float32, 128, 64)
    assert cfg128.seg_split == 16 and cfg128.block_cols == 64
    assert kp.kernel_config("cpu", torch.float32, 32, 64).block_cols == 32
    for bad in ("seg_split", "rows=16", "seg_split=24"):
        monkeypatch.setenv("PATH_KERNELS_SPLIT", bad)
        with pytest.raises(ValueError, match="PATH_KERNELS_SPLIT"):
            kp.kernel_config("cpu", torch.float32, 64, 64)
        q, k, v, w, beta, g = _inputs(1, 8, 2, 2, 32, True, seed=5)
        with pytest.raises(ValueError, match="PATH_KERNELS_SPLIT"):
            kp.path_attention(q, k, v, w, beta, g)


@pytest.mark.parametrize("B,T,Hq,Hk,seg,slices", [
    (3, 40, 2, 1, 2, 2),    # GQA, gate, two segments; uneven slices (2 + 1)
    (4, 24, 2, 2, None, 4),  # one segment, one sequence per slice
])
def test_backward_in_batch_slices(B, T, Hq, Hk, seg, slices, monkeypatch):
    """v22: the backward on batch slices (``PATH_KERNELS_BWD_SLICES``), each writing its rows of the
    gradients: against the float64 reference, and equal bit for bit to the backward in one slice (the
    same kernels on views of the same rows)."""
    import path_lib.kernels as kp
    from path_lib.kernels import _backward
    counts = []
    real = _backward._backward_slice
    monkeypatch.setattr(_backward, "_backward_slice", lambda saved, *a, **kw: (counts.append(saved.q.shape[0]),
                                                                        real(saved, *a, **kw))[1])
    monkeypatch.setenv("PATH_KERNELS_BWD_SLICES", str(slices))
    _check_against_reference(B, T, Hq, Hk, 32, True, 16, seg, seed=300 + B)
    step = -(-B // slices)
    assert counts == [min(step, B - b0) for b0 in range(0, B, step)]     # (3, 2) -> [2, 1]; (4, 4) -> [1] * 4
    ins = [x.requires_grad_() for x in _inputs(B, T, Hq, Hk, 32, True, seed=301)]
    grads = {}
    for n in (slices, 1):
        monkeypatch.setenv("PATH_KERNELS_BWD_SLICES", str(n))
        o = kp.path_attention(*ins, block_size=16, seg_blocks=seg)
        grads[n] = torch.autograd.grad(o, ins, torch.ones_like(o))
    for name, a, b in zip(["dq", "dk", "dv", "dw", "dbeta", "dg"], grads[slices], grads[1]):
        assert torch.equal(a, b), name


def test_backward_slices_rule_and_override(monkeypatch):
    """The rule on an H200's 132 multiprocessors, bf16 (B * T = 32768, 2048 / D heads): the D = 64 cells
    at T <= 16384 and D = 128 at T = 1024 are sliced, one slice where the narrowest launches would fall
    under four programs per multiprocessor, or where the multiprocessors are unknown (the interpreter);
    the override is capped at the batch and checked."""
    import path_lib.kernels as kp
    monkeypatch.delenv("PATH_KERNELS_BWD_SLICES", raising=False)
    got = {(D, T): kp.backward_slices(kp.H200, kp.kernel_config(kp.H200, torch.bfloat16, D, T),
                                      max(1, 32768 // T), 2048 // D)
           for D in (64, 128) for T in (1024, 4096, 16384, 65536)}
    assert got == {(64, 1024): 4, (64, 4096): 4, (64, 16384): 2, (64, 65536): 1,
                   (128, 1024): 3, (128, 4096): 1, (128, 16384): 1, (128, 65536): 1}
    lm = kp.kernel_config(kp.H200, torch.bfloat16, 64, 4096)
    assert kp.backward_slices(kp.H200, lm, 2, 12) == 1          # bench_lm_throughput's layer
    assert kp.backward_slices("cpu", kp.kernel_config("cpu", torch.float32, 32, 64), 8, 4) == 1
    monkeypatch.setenv("PATH_KERNELS_BWD_SLICES", "3")
    assert kp.backward_slices(kp.H200, lm, 2, 12) == 2
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("PATH_KERNELS_BWD_SLICES", bad)
        with pytest.raises(ValueError, match="PATH_KERNELS_BWD_SLICES"):
            kp.env_overrides()
    monkeypatch.delenv("PATH_KERNELS_BWD_SLICES")
    import path_lib.kernels as pk
    if torch.cuda.is_available():
        assert pk.backward_slices("cuda:0", lm, 2, 12) >= 1
    else:
        with pytest.raises(ValueError, match="CUDA is not available"):
            pk.backward_slices("cuda:0", lm, 2, 12)
    for args, exc, name in ((("cpu", None, 2, 2), TypeError, "cfg"), (("cpu", lm, 0, 2), ValueError, "batch"),
                            (("cpu", lm, 2, 1.5), ValueError, "key_heads"), ((3, lm, 2, 2), TypeError, "device"),
                            (("gpu!", lm, 2, 2), ValueError, "device")):
        with pytest.raises(exc, match=name):
            pk.backward_slices(*args)


def test_single_segment_skips_the_segment_kernels(monkeypatch):
    """One segment (NS == 1): no segment products are computed (v6: this is what lets fp16 at D = 128
    run on a T4's shared memory), and the results still match the reference."""
    from path_lib.kernels import _backward, _precompute
    launched = []
    for module in (_precompute, _backward):      # every launch of a non-attention kernel goes through _run
        monkeypatch.setattr(module, "_run", lambda kern, *a, real=module._run, **kw: (
            launched.append(kern.fn.__name__), real(kern, *a, **kw))[1])
    _check_against_reference(1, 40, 2, 1, 32, True, 16, 3, seed=5)
    assert "_seg_fwd_kernel" not in launched and "_seg_bwd_kernel" not in launched
    assert "_bwd_block_kernel" in launched


def test_varlen_cu_seqlens():
    cu = torch.tensor([0, 17, 18, 50], dtype=torch.int32)  # lengths 17, 1, 32
    _check_against_reference(1, 50, 2, 1, 32, True, 16, 1, seed=7, cu=cu)


def test_default_config_and_availability():
    import path_lib.kernels
    assert path_lib.kernels.is_available()
    q, k, v, w, beta, g = _inputs(1, 24, 2, 2, 32, True, seed=3)
    o = path_lib.kernels.path_attention(q, k, v, w, beta, g)
    o64 = ref_attention(*[x.double() for x in (q, k, v, w, beta, g)], impl="parallel")
    _close(o, o64, name="o")


def test_default_block_64_several_blocks():
    """The production block length (64) and the automatic segment choice, forward only."""
    import path_lib.kernels
    q, k, v, w, beta, g = _inputs(1, 150, 2, 1, 32, True, seed=4)
    o = path_lib.kernels.path_attention(q, k, v, w, beta, g)
    o64 = ref_attention(*[x.double() for x in (q, k, v, w, beta, g)], impl="parallel")
    _close(o, o64, name="o")


def _keys_to_end_reference(k, w, beta, bounds):
    k, w, beta = k.double(), w.double(), beta.double()
    out = torch.empty_like(k)
    for s0, s1 in zip(bounds[:-1], bounds[1:]):
        for j in range(s0, s1):
            x = k[:, j]
            for t in range(j + 1, s1):
                x = x - beta[:, t, :, None] * (w[:, t] * x).sum(-1, keepdim=True) * w[:, t]
            out[:, j] = x
    return out


@pytest.mark.parametrize("T,cu", [(37, None), (50, [0, 17, 18, 50]), (150, None), (150, [0, 100, 150])])
def test_transform_keys_to_end(T, cu):
    """On the forward's kernels (here under the interpreter; BT = 32, so T = 150 has 5 blocks in
    segments of 2, a partial last one), against a token-by-token float64 loop, and the same as the
    block-level torch path that CPUs without the interpreter (and devices where a kernel does not fit)
    take."""
    import path_lib.kernels
    from path_lib.kernels import _keys_to_end
    _, k, _, w, beta, _ = _inputs(1, T, 2, 2, 32, False, seed=11)
    cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int32)
    out = path_lib.kernels.transform_keys_to_end(k, w, beta, cu_seqlens=cu_t)
    ref = _keys_to_end_reference(k, w, beta, cu if cu is not None else [0, T])
    _close(out, ref, name="keys")
    if cu is None:
        _close(_keys_to_end._keys_to_end_torch(k, w, beta), ref, name="keys (torch path)")


def _bad(**over):
    q, k, v, w, beta, g = _inputs(1, 8, 2, 2, 32, True, seed=5)
    args = dict(q=q, k=k, v=v, w=w, beta=beta, g=g)
    args.update(over)
    return args


@pytest.mark.parametrize("over,exc,match", [
    (dict(w="w64"), TypeError, "w"),
    (dict(beta="beta16"), TypeError, "beta"),
    (dict(g="g64"), TypeError, "g"),
    (dict(q="q64"), TypeError, "q"),
    (dict(beta="beta_big"), ValueError, "beta"),
    (dict(w="w_short"), ValueError, "w"),
    (dict(beta="beta_shape"), ValueError, "beta"),
    (dict(g="g_shape"), ValueError, "g"),
    (dict(g="g_pos"), ValueError, "g"),
    (dict(k="k_heads"), ValueError, "heads"),
    (dict(v="v_dim"), ValueError, "v"),
])
def test_bad_inputs(over, exc, match):
    import path_lib.kernels
    args = _bad()
    key, kind = next(iter(over.items()))
    x = args[key]
    args[key] = {
        "w64": lambda: x.double(), "beta16": lambda: x.half(), "g64": lambda: x.double(),
        "q64": lambda: x.double(), "beta_big": lambda: x + 2.5, "w_short": lambda: x[:, :7],
        "beta_shape": lambda: x[..., :1], "g_shape": lambda: x[..., :1], "g_pos": lambda: x.abs() + 0.1,
        "k_heads": lambda: torch.randn(1, 8, 3, 32), "v_dim": lambda: torch.randn(1, 8, 2, 64),
    }[kind]()
    with pytest.raises(exc, match=match):
        path_lib.kernels.path_attention(**args)


def test_bad_head_dim_and_dtypes():
    import path_lib.kernels
    q, k, v, w, beta, g = _inputs(1, 8, 2, 2, 48, True, seed=6)
    with pytest.raises(ValueError, match="head dim"):
        path_lib.kernels.path_attention(q, k, v, w, beta, g)
    q, k, v, w, beta, g = _inputs(1, 8, 2, 2, 32, True, seed=6)
    with pytest.raises(TypeError, match="float32"):  # the interpreter runs float32 only
        path_lib.kernels.path_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), w, beta, g)
    with pytest.raises(TypeError, match="dtype"):
        path_lib.kernels.path_attention(q.half(), k, v, w, beta, g)


def test_bad_cu_seqlens():
    import path_lib.kernels
    q, k, v, w, beta, g = _inputs(1, 8, 2, 2, 32, True, seed=8)
    with pytest.raises(ValueError, match="end at T"):
        path_lib.kernels.path_attention(q, k, v, w, beta, g, cu_seqlens=torch.tensor([0, 5], dtype=torch.int32))
    with pytest.raises(TypeError, match="cu_seqlens"):
        path_lib.kernels.path_attention(q, k, v, w, beta, g, cu_seqlens=torch.tensor([0.0, 8.0]))
    q2, k2, v2, w2, beta2, g2 = _inputs(2, 8, 2, 2, 32, True, seed=8)
    with pytest.raises(ValueError, match="batch size must be 1"):
        path_lib.kernels.path_attention(q2, k2, v2, w2, beta2, g2, cu_seqlens=torch.tensor([0, 8], dtype=torch.int32))


def test_out_of_shared_memory_falls_back_to_smaller_blocks(monkeypatch):
    """A kernel that does not fit the device's shared memory (OutOfResources at launch) makes the
    forward and the backward retry with half the block length (the backward recomputes the factors)."""
    import triton
    import path_lib.kernels as kp
    from path_lib.kernels import _autograd, _config
    real_fwd, real_bwd = _autograd._forward_impl, _autograd._backward_impl
    seen = []

    def fwd(q, k, v, w, beta, G, scale, cfg):
        seen.append(("fwd", cfg.block))
        if cfg.block > 32:
            raise triton.runtime.errors.OutOfResources(300000, 232448, "shared memory")
        return real_fwd(q, k, v, w, beta, G, scale, cfg)

    def bwd(saved, do, scale, cfg, has_g):
        seen.append(("bwd", cfg.block))
        if cfg.block > 16:
            raise triton.runtime.errors.OutOfResources(300000, 232448, "shared memory")
        return real_bwd(saved, do, scale, cfg, has_g)

    monkeypatch.setattr(_autograd, "_forward_impl", fwd)
    monkeypatch.setattr(_autograd, "_backward_impl", bwd)
    monkeypatch.setattr(_config, "_FALLBACK", _config.FallbackState())
    _check_against_reference(1, 70, 2, 1, 32, True, 64, None, seed=12)
    assert seen[:2] == [("fwd", 64), ("fwd", 32)]
    assert ("bwd", 32) in seen and ("fwd", 16) in seen and seen[-1] == ("bwd", 16)
    # remembered in the one fallback state (consulted by kernel_config on CUDA devices)
    assert kp.fallback_state().max_block == {("cpu", torch.float32, 32): 16}


def test_out_of_shared_memory_at_16_uses_one_segment(monkeypatch):
    """At the smallest block length the next fallback is the single-segment mode (no D x D segment
    products); when even that does not fit, a clear RuntimeError."""
    import triton
    import path_lib.kernels as kp
    from path_lib.kernels import _autograd, _config
    real_bwd = _autograd._backward_impl
    seen = []

    def bwd(saved, do, scale, cfg, has_g):
        NS = -(-(saved.q.shape[1] // cfg.block) // cfg.seg_blocks)
        assert NS == cfg.n_segments
        seen.append((cfg.block, NS))
        if NS > 1:
            raise triton.runtime.errors.OutOfResources(99328, 65536, "shared memory")
        return real_bwd(saved, do, scale, cfg, has_g)

    monkeypatch.setattr(_autograd, "_backward_impl", bwd)
    monkeypatch.setattr(_config, "_FALLBACK", _config.FallbackState())
    _check_against_reference(1, 70, 2, 1, 32, True, 16, 2, seed=13)
    assert seen[0][1] > 1 and seen[-1] == (16, 1)
    # remembered: a later call on this device, dtype and head dim runs one segment unless told otherwise
    assert kp.fallback_state().one_segment == {("cpu", torch.float32, 32)}
    assert kp.kernel_config("cpu", torch.float32, 32, 70, block_size=16).n_segments == 1

    def always(*a, **k):
        raise triton.runtime.errors.OutOfResources(99328, 65536, "shared memory")
    monkeypatch.setattr(_autograd, "_forward_impl", always)
    q, k, v, w, beta, g = _inputs(1, 40, 2, 2, 32, True, seed=14)
    with pytest.raises(RuntimeError, match="shared memory"):
        kp.path_attention(q, k, v, w, beta, g, block_size=16, seg_blocks=1)


def test_check_values_false_still_checks_shapes_and_dtypes():
    import path_lib.kernels
    q, k, v, w, beta, g = _inputs(1, 8, 2, 2, 32, True, seed=9)
    o1 = path_lib.kernels.path_attention(q, k, v, w, beta, g, check_values=False)
    o2 = path_lib.kernels.path_attention(q, k, v, w, beta, g)
    assert torch.equal(o1, o2)
    with pytest.raises(ValueError, match="time length"):
        path_lib.kernels.path_attention(q, k[:, :7], v, w, beta, g, check_values=False)
    with pytest.raises(TypeError, match="w"):
        path_lib.kernels.path_attention(q, k, v, w.double(), beta, g, check_values=False)
    with pytest.raises(ValueError, match="head dim"):
        path_lib.kernels.path_attention(q[..., :16], k[..., :16], v[..., :16], w[..., :16], beta, g, check_values=False)


@pytest.mark.parametrize("B,T,Hq,Hk,block,seg,cu", [
    (2, 333, 4, 2, 64, None, None),  # the GPU sweep's first case (ragged T, GQA, B=2) at the production BT
    (2, 45, 4, 1, 16, 2, None),      # group of 4, ragged last block, partial last segment
    (1, 50, 4, 2, 16, 1, [0, 17, 18, 50]),  # varlen with GQA
    (1, 70, 2, 1, 16, 99, None),     # single-segment mode (no D x D segment products)
])
def test_bounds_checked(B, T, Hq, Hk, block, seg, cu, monkeypatch):
    """Every load, store and atomic of every kernel stays inside the tensor it addresses (the
    interpreter does not check raw pointers; on a GPU an out-of-bounds access is an illegal memory
    access), every tensor argument is contiguous; values against the reference too, with every
    ``torch.empty`` buffer filled with NaN first (a read of memory no kernel wrote shows up)."""
    try:
        from kernel_bounds import bounds_checking
    except ImportError:
        from tests.kernel_bounds import bounds_checking
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def nan_fill(x):
        return x.fill_(float("nan")) if x.is_floating_point() else x
    monkeypatch.setattr(torch, "empty", lambda *a, **k: nan_fill(real_empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: nan_fill(real_empty_like(*a, **k)))
    cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int32)
    with bounds_checking() as stats:
        before = stats["checked_ops"]
        _check_against_reference(B, T, Hq, Hk, 32, True, block, seg, seed=20 + T, cu=cu_t)
        assert stats["checked_ops"] > before


def test_head_dim_32_padded_to_64(monkeypatch):
    """The Hopper work-around (``PATH_KERNELS_PAD_D32``, on by default on compute capability 9.x): head
    dim 32 runs the D = 64 kernels on zero-padded q, k, v, w; values and gradients (sliced back to 32)
    match the reference, the scale stays 32 ** -0.5."""
    try:
        from kernel_bounds import bounds_checking
    except ImportError:
        from tests.kernel_bounds import bounds_checking
    from path_lib.kernels import _autograd
    seen = []
    real_fwd = _autograd._forward_impl

    def fwd(q, *a, **k):
        seen.append(q.shape[-1])
        return real_fwd(q, *a, **k)
    monkeypatch.setattr(_autograd, "_forward_impl", fwd)
    monkeypatch.setenv("PATH_KERNELS_PAD_D32", "1")
    with bounds_checking():
        _check_against_reference(2, 45, 4, 2, 32, True, 16, 2, seed=31)
    assert seen and all(d == 64 for d in seen)
    monkeypatch.setenv("PATH_KERNELS_PAD_D32", "0")
    seen.clear()
    _check_against_reference(1, 20, 2, 1, 32, True, 16, 1, seed=32)
    assert seen and all(d == 32 for d in seen)


@pytest.mark.parametrize("BT", [16, 32, 64])
@pytest.mark.parametrize("kind", ["random", "near_parallel", "beta_2"])
def test_prep_blocked_inverse_matches_float64(BT, kind):
    """The prep kernel's blocked UT inverse N = (I + A)^-1 (16 x 16 diagonal blocks by forward
    substitution, merged by matmuls) against a float64 inverse, on inputs that make N large: nearly
    parallel directions (|w_i . w_j| ~ 1) and beta = 2 (reflections)."""
    from path_lib.kernels._config import kernel_config
    from path_lib.kernels._precompute import _precompute
    gen = torch.Generator().manual_seed(100 + BT)
    B, T, H, D = 1, 2 * BT, 2, 32
    k = torch.randn(B, T, H, D, generator=gen)
    w = torch.randn(B, T, H, D, generator=gen)
    beta = 2 * torch.rand(B, T, H, generator=gen)
    if kind == "near_parallel":
        w = torch.randn(1, 1, H, D, generator=gen) + 0.05 * w
    if kind in ("near_parallel", "beta_2"):
        beta = torch.full((B, T, H), 2.0)
        beta.view(-1)[::3] = 1.999
    w = F.normalize(w, dim=-1)
    cfg = kernel_config(k.device, k.dtype, D, T, block_size=BT, seg_blocks=2)
    assert (cfg.block_precision, cfg.solve_precision, cfg.warps.ut) == ("ieee", "ieee", 4)
    pre = _precompute(k, w.contiguous(), beta.contiguous(), cfg)
    Wb = w.double().view(B, T // BT, BT, H, D).permute(0, 3, 1, 2, 4)
    bb = beta.double().view(B, T // BT, BT, H).permute(0, 3, 1, 2)
    A = torch.tril(bb[..., :, None] * (Wb @ Wb.transpose(-1, -2)), -1)
    N = torch.linalg.inv(torch.eye(BT, dtype=torch.float64) + A)
    # float32 relative errors seen: ~1e-7 (random, beta = 2) and ~1e-5 (near parallel, where |N| ~ 160:
    # the problem's conditioning; plain forward substitution gave ~5e-6 there)
    _close(pre["NM"], N, rtol=3e-5, atol=1e-6, name=f"N ({kind}, BT={BT})")
    _close(pre["TM"], N * bb[..., None, :], rtol=3e-5, atol=1e-6, name=f"T ({kind}, BT={BT})")


def test_prep_variants_script_launches_the_shipped_kernels():
    """benchmarks/prep_variants.py times the shipped _ut_kernel, _prep_kernel and _seg_fwd_kernel at
    several warp counts; its launches must reproduce what the library computes (_precompute)."""
    import importlib.util
    from pathlib import Path
    from path_lib.kernels._config import kernel_config
    from path_lib.kernels._precompute import _precompute
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "prep_variants.py"
    spec = importlib.util.spec_from_file_location("prep_variants", path)
    pv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pv)
    k, w, beta = pv.make(1, 64, 2, 32, "cpu", dtype=torch.float32)
    o = pv.outputs(k, 16, SB=2)
    for kernel in ("ut", "prep", "seg"):
        pv.launch(kernel, k, w, beta, o, 16, "ieee", 4, SB=2)
    ref = _precompute(k, w, beta, kernel_config(k.device, k.dtype, 32, 64, block_size=16, seg_blocks=2))
    for name in ("TW", "KA", "TM", "MM", "NM", "KS", "RS", "SEG"):
        assert torch.equal(o[name], ref[name]), name


def test_pair_kernel_matches_the_torch_products():
    """_pair_kernel's Om(kc, k) = Seg_{kc-1} ... Seg_{k+1} against the torch recursion
    path_lib.kernels._keys_to_end._pair_products, on random D x D matrices (NS = 5 segments, two heads)."""
    from path_lib.kernels import _triton_kernels as K
    from path_lib.kernels._keys_to_end import _pair_products
    gen = torch.Generator().manual_seed(7)
    B, H, NS, D = 1, 2, 5, 32
    seg = torch.randn(B, H, NS, D, D, generator=gen) / D ** 0.5 + torch.eye(D)
    om = torch.full((B, H, NS * (NS - 1) // 2, D, D), float("nan"))
    K._pair_kernel[(NS - 1, B * H)](SEG_PROD=seg, PAIR_PROD=om, NS=NS, HK=H, D=D, PREC="ieee", num_warps=4)
    _close(om, _pair_products(seg.double()), rtol=1e-5, name="Om")


def test_stage_override_is_parsed_and_checked(monkeypatch):
    """PATH_KERNELS_STAGES (for tuning runs) sets the pipelining depth of the attention loops; the
    interpreter's default is 1; a malformed value is a ValueError that names the variable."""
    from path_lib.kernels._config import kernel_config
    stages = lambda: kernel_config("cpu", torch.float32, 64, 16).stages  # noqa: E731
    monkeypatch.delenv("PATH_KERNELS_STAGES", raising=False)
    assert stages().fwd == 1
    monkeypatch.setenv("PATH_KERNELS_STAGES", "fwd=3, inter_kv=2")
    assert (stages().fwd, stages().inter_kv, stages().inter_q) == (3, 2, 1)
    for bad in ("intra=2", "fwd=5", "fwd"):
        monkeypatch.setenv("PATH_KERNELS_STAGES", bad)
        with pytest.raises(ValueError, match="PATH_KERNELS_STAGES"):
            stages()


def test_warp_override_is_parsed_and_checked(monkeypatch):
    """PATH_KERNELS_WARPS (for tuning runs) sets the warps of every kernel but the delta kernel (under the
    interpreter every kernel defaults to ``4 if D <= 64 else 8``); a malformed value is a ValueError that
    names the variable, not a silent default."""
    import dataclasses
    from path_lib.kernels._config import kernel_config
    warps = lambda D=64: kernel_config("cpu", torch.float32, D, 16).warps  # noqa: E731
    monkeypatch.delenv("PATH_KERNELS_WARPS", raising=False)
    w = warps()
    assert [f.name for f in dataclasses.fields(w)] == ["ut_a", "ut", "prep", "block", "intra", "diag", "seg",
                                                       "seg_bwd", "fwd", "fwd_inter", "inter_q", "inter_kv", "delta"]
    assert {getattr(w, f.name) for f in dataclasses.fields(w)} == {4}
    assert {getattr(warps(128), f.name) for f in dataclasses.fields(w)} == {4, 8} and warps(128).delta == 4
    monkeypatch.setenv("PATH_KERNELS_WARPS", "ut=8, intra=2, inter_kv=8, seg_bwd=4")
    w = warps()
    assert (w.ut, w.intra, w.prep, w.inter_kv, w.fwd, w.seg_bwd, w.seg, w.diag) == (8, 2, 4, 8, 4, 4, 4, 4)
    for bad in ("delta=4", "ut=3", "ut"):
        monkeypatch.setenv("PATH_KERNELS_WARPS", bad)
        with pytest.raises(ValueError, match="PATH_KERNELS_WARPS"):
            warps()


def test_forward_only_calls_may_use_longer_segments(monkeypatch):
    """Without gradients the segment length suits the forward alone (v10: 16 blocks at least for
    half-precision inputs at D = 128 and BT = 64, ``_FWD_ONLY_SEG_BLOCKS``); float32, other head dims
    and an explicit ``seg_blocks`` keep theirs. The launcher tells ``kernel_config`` whether a gradient
    is being recorded."""
    import path_lib.kernels
    from path_lib.kernels import _api
    cpu, bf16 = torch.device("cpu"), torch.bfloat16
    def sb(D, T, dtype, fo, seg=None):
        return _api.kernel_config(cpu, dtype, D, T, fo, seg_blocks=seg).seg_blocks
    assert [sb(128, T, bf16, False) for T in (1024, 4096, 16384)] == [4, 8, 16]
    assert [sb(128, T, bf16, True) for T in (1024, 4096, 16384, 640)] == [16, 16, 16, 10]
    assert sb(64, 1024, bf16, True) == sb(64, 1024, bf16, False)
    assert sb(128, 1024, torch.float32, True) == sb(128, 1024, torch.float32, False)
    assert sb(128, 1024, bf16, True, seg=2) == 2
    seen = []
    real = _api.kernel_config
    monkeypatch.setattr(_api, "kernel_config", lambda *a, **kw: seen.append(a[4]) or real(*a, **kw))
    q, k, v, w, beta, g = _inputs(1, 20, 2, 2, 32, True, seed=5)
    with torch.no_grad():
        o_inf = path_lib.kernels.path_attention(q, k, v, w, beta, g, block_size=16)
    o = path_lib.kernels.path_attention(q.requires_grad_(), k, v, w, beta, g, block_size=16)
    assert seen == [True, False]
    torch.testing.assert_close(o_inf, o.detach(), rtol=1e-5, atol=1e-5)


def test_forward_without_gradient_leaves_out_the_backward_factors():
    """v19: a call that records no gradient neither allocates nor writes ``N`` and the suffix products
    ``R_j`` (read only by the backward); with several segments, GQA and the gate its output still equals
    the float64 reference."""
    import path_lib.kernels
    from path_lib.kernels._config import kernel_config
    from path_lib.kernels._precompute import _pad_time, _precompute
    q, k, v, w, beta, g = _inputs(1, 100, 2, 1, 32, True, seed=77)
    cpu = torch.device("cpu")
    for forward_only in (True, False):
        cfg = kernel_config(cpu, torch.float32, 32, 112, forward_only, block_size=16, seg_blocks=2)
        pre = _precompute(_pad_time(k, 112), _pad_time(w, 112), _pad_time(beta, 112), cfg)
        assert (pre["NM"] is None and pre["RS"] is None) == forward_only
    with torch.no_grad():
        o = path_lib.kernels.path_attention(q, k, v, w, beta, g, block_size=16, seg_blocks=2)
    ref = ref_attention(*(x.double() for x in (q, k, v, w, beta, g)))
    _close(o, ref, name="o without gradient")


def test_gate_cumsum_runs_along_the_contiguous_time_axis():
    """v12 candidate: G = cumsum(g) over time is summed on a ``[B, H, T]`` copy (torch's scan along the
    strided time dim of ``[B, T, H]`` was 36 % of PaTH-FoX's forward at T = 16384 on an H200); same
    values and gradient as ``torch.cumsum(g, dim=1)``, and the result's ``[B, H, T]`` view is the
    contiguous one the kernels read."""
    from path_lib.kernels._api import _gate_cumsum
    g = torch.nn.functional.logsigmoid(torch.randn(2, 37, 3)).requires_grad_()
    G = _gate_cumsum(g)
    ref = torch.cumsum(g, dim=1)
    torch.testing.assert_close(G, ref)
    assert G.shape == (2, 37, 3) and G.transpose(1, 2).is_contiguous()
    up = torch.randn(2, 37, 3)
    (dg,) = torch.autograd.grad(G, g, up)
    (dg_ref,) = torch.autograd.grad(ref, g, up)
    torch.testing.assert_close(dg, dg_ref)
