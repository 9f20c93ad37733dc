"""path_lib.theory.costs against direct counting on tiny cases.

Matrix-product operations are counted by torch's FlopCounterMode while the library's own code runs
(and while a tile-by-tile emulation of the Triton kernel's forward loops runs);
the UT solve by an instrumented forward substitution; memory by the sizes of the tensors the
library's building blocks actually produce; tiles by explicit loops.
"""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from path_lib.theory import costs
from path_lib.impl import path_attention
from path_lib.decoding import PaTHCache
from path_lib.reference.householder import (boundary_adjusted_keys, normalize, ut_transform)

SHAPES = [(1, 4, 4), (7, 3, 2), (10, 4, 4), (13, 2, 5), (16, 4, 8), (17, 3, 3), (33, 5, 8)]


def _inputs(T, D, Dv, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, T, 1, D, generator=g, dtype=torch.float64)
    k = torch.randn(1, T, 1, D, generator=g, dtype=torch.float64)
    v = torch.randn(1, T, 1, Dv, generator=g, dtype=torch.float64)
    w = normalize(torch.randn(1, T, 1, D, generator=g, dtype=torch.float64))
    beta = 2 * torch.rand(1, T, 1, generator=g, dtype=torch.float64)
    return q, k, v, w, beta


def _counted(fn):
    with FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops()


@pytest.mark.parametrize("T,D,Dv", [(1, 4, 4), (10, 4, 4), (13, 3, 5), (33, 4, 2)])
@pytest.mark.parametrize("block_size", [1, 4, 8, 64])
def test_blockwise_matmul_flops_match_flop_counter(T, D, Dv, block_size):
    q, k, v, w, beta = _inputs(T, D, Dv)
    counted = _counted(lambda: path_attention(q, k, v, w, beta, impl="blockwise_scan", block_size=block_size))
    assert costs.path_blockwise_cost(T, D, Dv, block_size=block_size).matmul_flops == counted


@pytest.mark.parametrize("T,D,Dv", [(1, 4, 4), (10, 4, 4), (13, 3, 5), (24, 2, 6)])
def test_allpairs_matmul_flops_match_flop_counter(T, D, Dv):
    q, k, v, w, beta = _inputs(T, D, Dv)
    counted = _counted(lambda: path_attention(q, k, v, w, beta, impl="parallel"))
    assert costs.path_allpairs_cost(T, D, Dv).matmul_flops == counted


def _flash_by_tiles(q, k, v, block_size):
    """Causal FlashAttention forward, tile by tile (the test's own direct implementation)."""
    T = q.shape[0]
    out = []
    for s in range(0, T, block_size):
        e = min(s + block_size, T)
        m = torch.full((e - s,), float("-inf"), dtype=q.dtype)
        l = torch.zeros(e - s, dtype=q.dtype)
        acc = torch.zeros(e - s, v.shape[1], dtype=q.dtype)
        for sj in range(0, e, block_size):
            ej = min(sj + block_size, T)
            S = q[s:e] @ k[sj:ej].T
            if sj == s:
                S = S.masked_fill(~torch.ones(e - s, ej - sj, dtype=torch.bool).tril(), float("-inf"))
            m_new = torch.maximum(m, S.amax(-1))
            p = torch.exp(S - m_new[:, None])
            l = l * torch.exp(m - m_new) + p.sum(-1)
            acc = acc * torch.exp(m - m_new)[:, None] + p @ v[sj:ej]
            m = m_new
        out.append(acc / l[:, None])
    return torch.cat(out)


@pytest.mark.parametrize("T,D,Dv", SHAPES)
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_flash_flops_match_tiled_implementation(T, D, Dv, block_size):
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(T, D, generator=g, dtype=torch.float64), torch.randn(T, D, generator=g, dtype=torch.float64)
    v = torch.randn(T, Dv, generator=g, dtype=torch.float64)
    box = {}
    counted = _counted(lambda: box.setdefault("o", _flash_by_tiles(q, k, v, block_size)))
    ref = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, scale=1.0)[0]
    torch.testing.assert_close(box["o"], ref)  # the counted code is correct attention
    assert costs.flash_attention_cost(T, D, Dv, block_size=block_size).flops == counted


@pytest.mark.parametrize("L", [1, 2, 3, 5, 8, 13])
def test_ut_solve_flops_by_instrumented_substitution(L):
    g = torch.Generator().manual_seed(L)
    W = normalize(torch.randn(L, 4, generator=g, dtype=torch.float64))
    beta = 2 * torch.rand(L, generator=g, dtype=torch.float64)
    A = torch.tril(beta[:, None] * (W @ W.T), diagonal=-1)
    rows, ops = [], 0
    for r in range(L):
        row = beta[r] * torch.eye(L, dtype=torch.float64)[r]
        for s in range(r):
            row = row - A[r, s] * rows[s]
            ops += 2 * row.numel()  # one multiply and one subtract per entry
        rows.append(row)
    torch.testing.assert_close(torch.stack(rows), ut_transform(W, beta))
    assert costs.ut_solve_flops(L) == ops


@pytest.mark.parametrize("T,D,Dv", SHAPES)
@pytest.mark.parametrize("block_size", [1, 4, 8])
def test_pair_and_block_sums_by_loops(T, D, Dv, block_size):
    Ls = costs.block_lengths(T, block_size)
    assert sum(Ls) == T and all(1 <= L <= block_size for L in Ls)
    pairs = sum(Ls[i] * Ls[j] for i in range(len(Ls)) for j in range(i))
    c = costs.path_blockwise_cost(T, D, Dv, block_size=block_size)
    assert c.flops_by_part["logits_values"] == 2 * pairs * (D + Dv)
    assert c.flops_by_part["query_updates"] == 4 * pairs * D
    f = costs.flash_attention_cost(T, D, Dv, block_size=block_size)
    assert f.flops == 2 * (pairs + sum(L * L for L in Ls)) * (D + Dv)


@pytest.mark.parametrize("T,D,Dv", SHAPES)
@pytest.mark.parametrize("block_size", [2, 4, 64])
def test_blockwise_memory_matches_tensors_built(T, D, Dv, block_size):
    q, k, v, w, beta = _inputs(T, D, Dv)
    kh, wh, bh = k[0, :, 0], w[0, :, 0], beta[0, :, 0]
    n_end = n_tw = n_ut = 0
    for s in range(0, T, block_size):
        e = min(s + block_size, T)
        Tj = ut_transform(wh[s:e], bh[s:e])
        n_ut += Tj.numel()
        n_end += boundary_adjusted_keys(kh[s:e], wh[s:e], Tj).numel()
        n_tw += (Tj @ wh[s:e]).numel()
    c = costs.path_blockwise_cost(T, D, Dv, block_size=block_size)
    assert (c.hbm["keys_to_block_end"], c.hbm["TW"], c.hbm["ut_matrices"]) == (n_end, n_tw, n_ut)
    inputs = sum(x.numel() for x in (q, k, v, w, beta))
    out = path_attention(q, k, v, w, beta, block_size=block_size).numel()
    assert c.hbm_elements - c.extra_elements == inputs + out
    assert c.extra_elements == n_end + n_tw + n_ut + T
    f = costs.flash_attention_cost(T, D, Dv, block_size=block_size)
    assert f.hbm_elements == q.numel() + k.numel() + v.numel() + out + T


@pytest.mark.parametrize("T,D,Dv", [(1, 4, 4), (9, 3, 5), (20, 4, 4)])
def test_allpairs_memory_is_quadratic(T, D, Dv):
    c = costs.path_allpairs_cost(T, D, Dv)
    assert c.extra_elements == 5 * T * T
    assert c.hbm["ut_matrix"] == ut_transform(torch.zeros(T, D), torch.zeros(T)).numel()


@pytest.mark.parametrize("t,D,Dv", [(2, 4, 4), (5, 3, 2), (12, 8, 8)])
def test_decode_step_flops_match_cache_step(t, D, Dv):
    g = torch.Generator().manual_seed(t)
    cache = PaTHCache(1, 1, 1, D, Dv, dtype=torch.float64)
    cache.keys = torch.randn(1, 1, t - 1, D, generator=g, dtype=torch.float64)
    cache.values = torch.randn(1, 1, t - 1, Dv, generator=g, dtype=torch.float64)
    cache.gate_prefix = torch.zeros(1, 1, t - 1, dtype=torch.float64)
    q, k = torch.randn(1, 1, D, generator=g, dtype=torch.float64), torch.randn(1, 1, D, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, Dv, generator=g, dtype=torch.float64)
    w = normalize(torch.randn(1, 1, D, generator=g, dtype=torch.float64))
    beta = torch.rand(1, 1, dtype=torch.float64)
    # the contractions of one step, counted by hand from PaTHCache.transform and .attend
    with FlopCounterMode(display=False) as fc:
        cache.step(q, k, v, w, beta)
    c = costs.decode_step_cost(t, D, Dv)
    # FlopCounterMode sees the einsums (projections, logits, values) as bmm; the rank-one update
    # k <- k - beta (w.k) w is elementwise (a multiply and a subtract per entry).
    update = 2 * (t - 1) * D
    assert c.flops == fc.get_total_flops() + update
    assert c.flops_by_part["key_updates"] == update
    plain = costs.decode_step_cost(t, D, Dv, path=False)
    assert plain.flops == 2 * t * (D + Dv)
    assert c.hbm["key_cache"] == cache.keys.numel()


def test_ratio_to_flash_tends_to_two():
    for D in (64, 128):
        ratios = [costs.path_blockwise_cost(T, D, block_size=64).flops
                  / costs.flash_attention_cost(T, D, block_size=64).flops for T in (4096, 16384, 65536)]
        assert all(r > 2 for r in ratios)
        assert ratios[0] > ratios[1] > ratios[2] and ratios[-1] < 2.1


def test_backward_memory():
    assert costs.backward_memory(4096, 64, method="flash") == 2 * 4096
    rec = [costs.backward_memory(T, 64) for T in (1024, 2048, 4096)]
    assert rec[1] == 2 * rec[0] and rec[2] == 2 * rec[1]  # linear in T
    # the checkpoint count equals sum_i floor(i / boundary), counted directly
    for T, b in ((10, 3), (1000, 64), (1024, 512)):
        direct = sum(i // b for i in range(T))
        base = costs.backward_memory(T, 4, method="recompute", block_size=8) - T * 4
        assert costs.backward_memory(T, 4, method="checkpoint", boundary=b, block_size=8) == base + direct * 4
    with pytest.raises(ValueError, match="method"):
        costs.backward_memory(16, 4, method="nope")


@pytest.mark.parametrize("bad", [dict(T=-1, D=4), dict(T=4, D=0), dict(T=4, D=4, Dv=0), dict(T=2.5, D=4)])
def test_bad_sizes_raise(bad):
    with pytest.raises(ValueError if isinstance(bad["T"], int) else TypeError, match="T|D|Dv"):
        costs.path_blockwise_cost(**bad)
    with pytest.raises(ValueError, match="block_size"):
        costs.block_lengths(8, 0)


def _segmented_forward(q, k, v, w, beta, L, SB):
    """The kernel's forward (kernels/path_lib/kernels/_triton_forward.py:_fwd_kernel), tile for tile in torch, one head.

    Inputs ``[T, D]`` with T a multiple of L; returns (output, matmul flops of the kernel part)."""
    T, D = q.shape
    NB = T // L
    NS = -(-NB // SB)
    blocks = [slice(c * L, (c + 1) * L) for c in range(NB)]
    UT = [ut_transform(w[b], beta[b]) for b in blocks]
    TW = [Tc @ w[b] for Tc, b in zip(UT, blocks)]
    M = [Tc @ torch.tril(w[b] @ k[b].T, -1) for Tc, b in zip(UT, blocks)]
    KA = [k[b] - Mc.T @ w[b] for Mc, b in zip(M, blocks)]
    P = [torch.eye(D, dtype=q.dtype) - w[b].T @ TWc for TWc, b in zip(TW, blocks)]
    # keys moved to their segment's end, and the segments' products (right to left inside a segment)
    KS, Seg = [None] * NB, []
    for s in range(NS):
        R = torch.eye(D, dtype=q.dtype)
        for c in range(min((s + 1) * SB, NB) - 1, s * SB - 1, -1):
            KS[c] = KA[c] @ R.T
            R = R @ P[c]
        Seg.append(R)
    # segment-pair products Om(kc, k) = Seg_{kc-1} ... Seg_{k+1} (precomputed, not kernel work)
    Om = {}
    for kc in range(NS):
        om = torch.eye(D, dtype=q.dtype)
        for kk in range(kc - 1, -1, -1):
            Om[kc, kk] = om
            om = om @ Seg[kk]
    out = []
    with FlopCounterMode(display=False) as fc:
        for c, b in enumerate(blocks):
            qc = q[b]
            bm = torch.tril(qc @ w[b].T)
            qs = qc - bm @ TW[c]
            S = torch.tril(qc @ k[b].T) - bm @ M[c]
            S = S.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
            m = S.amax(-1)
            p = torch.exp(S - m[:, None])
            l, acc = p.sum(-1), p @ v[b]

            def visit(x, vb, m, l, acc):
                m_new = torch.maximum(m, x.amax(-1))
                p = torch.exp(x - m_new[:, None])
                a = torch.exp(m - m_new)
                return m_new, l * a + p.sum(-1), acc * a[:, None] + p @ vb
            a_blk = (c // SB) * SB
            for j in range(c - 1, a_blk - 1, -1):
                m, l, acc = visit(qs @ KA[j].T, v[blocks[j]], m, l, acc)
                qs = qs - (qs @ w[blocks[j]].T) @ TW[j]
            ks = c // SB
            for kseg in range(ks - 1, -1, -1):  # the query state at segment kseg's end: Q0 Om(ks, kseg)
                qe = qs @ Om[ks, kseg]
                for j in range(kseg * SB, (kseg + 1) * SB):
                    m, l, acc = visit(qe @ KS[j].T, v[blocks[j]], m, l, acc)
            out.append(acc / l[:, None])
    return torch.cat(out), fc.get_total_flops()


@pytest.mark.parametrize("T,D,L,SB", [(64, 4, 8, 2), (96, 8, 8, 3), (128, 4, 16, 2), (64, 4, 4, 5)])
def test_segmented_kernel_flops_and_algorithm(T, D, L, SB):
    q, k, v, w, beta = _inputs(T, D, D, seed=T + SB)
    o, counted = _segmented_forward(*(x[0, :, 0] for x in (q, k, v, w, beta)), L, SB)
    ref = path_attention(q, k, v, w, beta, impl="explicit", scale=1.0)[0, :, 0]
    torch.testing.assert_close(o, ref)  # the counted algorithm is PaTH attention
    c = costs.path_segmented_cost(T, D, block_size=L, seg_blocks=SB)
    kernel_parts = sum(v for n, v in c.flops_by_part.items() if n.startswith("kernel_"))
    assert kernel_parts == counted


def test_segmented_tends_to_flash():
    for D in (64, 128):
        r = [costs.path_segmented_cost(T, D).flops / costs.flash_attention_cost(T, D).flops for T in (4096, 16384, 65536)]
        assert r[0] > r[1] > r[2] > 1 and r[2] < 1.1


def test_kernel_backward_memory_is_linear_and_below_checkpointing():
    m = [costs.backward_memory(T, 64, method="kernel") for T in (4096, 8192, 16384, 32768)]
    per_token = [x / T for x, T in zip(m, (4096, 8192, 16384, 32768))]
    assert max(per_token) / min(per_token) < 1.1          # O(T D): linear in T
    assert costs.backward_memory(65536, 64, method="kernel") < costs.backward_memory(65536, 64, method="checkpoint")


@pytest.mark.parametrize("T", [100, 1024, 4096, 16384])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("BT", [16, 32, 64])
def test_default_seg_blocks_matches_the_kernels_choice(T, D, BT):
    """The cost model's segment length must be the kernel's (kernels/path_lib/kernels/_config.py:_segments)."""
    _config = pytest.importorskip("path_lib.kernels._config")
    segments = getattr(_config, "_segments", None)
    if segments is None:
        pytest.skip("path_lib.kernels._config._segments is not there")
    assert segments(max(1, -(-T // BT)), BT, D) == costs.default_seg_blocks(T, D, BT)


def test_kernel_blocking_is_what_the_cost_model_counts():
    """``path_lib.kernels.blocking`` reports the launcher's block and segment lengths (CPU only: no kernel runs);
    with gradients they are the cost model's default, without gradients longer at D = 128 (v11)."""
    kernels = pytest.importorskip("path_lib.kernels")
    for D in (64, 128):
        for T in (1024, 4096, 16384):
            BT, SB = kernels.blocking(T, D)
            assert BT == 64 and SB == costs.default_seg_blocks(T, D)
            BT_f, SB_f = kernels.blocking(T, D, forward_only=True)
            assert BT_f == 64 and SB_f == (max(SB, min(T // 64, 16)) if D == 128 else SB)
