"""Context-parallel PaTH attention (path_lib.distributed) on CPU with gloo: 2 and 4 ranks in float64
against single-process path_attention(impl="explicit") on the gathered sequence (outputs and all six
gradients), bad input on one rank (an error on every rank, no hang), the single-process chunked form,
the cost model, and the CPU group launcher. The per-rank code is in tests/dist_workers.py."""
from __future__ import annotations

import pytest
import torch

import dist_workers
from helpers import random_path_inputs
from path_lib.impl import path_attention
from path_lib.book.gloo_group import run_gloo_group, self_check_rank
from path_lib.distributed import (chunked_path_attention, context_parallel_costs,
                                  context_parallel_path_attention, summary_numel)


def run_case(fn, world, timeout=60.0):
    try:
        return run_gloo_group(fn, world, timeout=timeout)
    except TimeoutError as e:
        pytest.fail(str(e))


@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_matches_explicit(world):
    results = run_case(dist_workers.run_cp, world)
    for rank, res in enumerate(results):
        for case, r in res.items():
            assert r["out_err"] < 1e-12 * max(1.0, r["out_scale"]), (world, rank, case, r)
            grads = [n for n in ("q", "k", "v", "w", "beta", "g") if f"d{n}_err" in r]
            assert len(grads) == (6 if "gate" in case else 5), (case, grads)
            for n in grads:
                assert r[f"d{n}_err"] < 1e-11 * max(1.0, r[f"d{n}_norm"]), (world, rank, case, n, r)
        # the earlier ranks' k, v, w, beta get gradient from later ranks' queries: nonzero everywhere
        if rank < world - 1:
            assert all(r["dk_norm"] > 0 and r["dw_norm"] > 0 for r in res.values())


def test_bad_input_fails_on_every_rank():
    r0, r1 = run_case(dist_workers.run_bad, 2)
    for case in ("lengths", "bad_beta", "gate_presence", "heads", "dtype", "not_tensor"):
        assert r0[case] is not None and r1[case] is not None, (case, r0[case], r1[case])
    for r in (r0, r1):
        assert r["lengths"]["type"] == "ValueError" and "T_local" in r["lengths"]["msg"]
        assert "rank 0: 4, rank 1: 5" in r["lengths"]["msg"]
        assert "whether g is given" in r["gate_presence"]["msg"]
        assert "Hq" in r["heads"]["msg"] and "dtype" in r["dtype"]["msg"]
    # the rank with the bad input names its argument; the other rank names that rank
    assert r1["bad_beta"]["type"] == "ValueError" and "beta must have shape" in r1["bad_beta"]["msg"]
    assert r0["bad_beta"]["type"] == "ValueError" and "rank(s) [1]" in r0["bad_beta"]["msg"]
    assert r0["not_tensor"]["type"] == "TypeError" and "q must be a torch.Tensor" in r0["not_tensor"]["msg"]
    assert "rank(s) [0]" in r1["not_tensor"]["msg"]
    # no rank fell out of step: a good call afterwards is right
    assert r0["after_err"] < 1e-12 and r1["after_err"] < 1e-12


def test_unchecked_ranks_still_refuse_chunks_that_cannot_be_gathered():
    """check_ranks=False: chunks of different lengths (or dtypes) would abort gloo's all-gather; the shapes
    the ranks exchange first make it the same named ValueError on every rank instead."""
    r0, r1 = run_case(dist_workers.run_unchecked_mismatch, 2)
    for r in (r0, r1):
        assert r["lengths"]["type"] == "ValueError", r["lengths"]
        assert "T_local" in r["lengths"]["msg"] and "rank 0: 4, rank 1: 6" in r["lengths"]["msg"]
        assert r["dtype"]["type"] == "ValueError" and "dtype" in r["dtype"]["msg"], r["dtype"]
        # ranks with different scales would each compute a wrong answer: refused even with the checks off
        assert r["scale"]["type"] == "ValueError" and "the scale differs" in r["scale"]["msg"], r["scale"]
        assert "float32" in r["dtype"]["msg"] and "float64" in r["dtype"]["msg"]
        assert r["after_err"] < 1e-12
    assert "beta must have shape" in r1["bad_beta"]["msg"] and "rank(s) [1]" in r0["bad_beta"]["msg"]


def test_not_initialised_is_a_clear_error():
    import torch.distributed as dist
    if dist.is_initialized():
        pytest.skip("a process group is initialised in this process")
    q, k, v, w, beta, g = random_path_inputs(B=1, T=4, Hq=2, D=4, seed=0)
    with pytest.raises(ValueError, match="init_process_group"):
        context_parallel_path_attention(q, k, v, w, beta)
    with pytest.raises(TypeError, match="group must be"):
        context_parallel_path_attention(q, k, v, w, beta, group="world")


@pytest.mark.parametrize("gate", [False, True])
def test_chunked_form_matches_explicit_with_gradients(gate):
    """The per-rank computation, chunks side by side in one process (3 chunks of 4, blocks of 3)."""
    full = random_path_inputs(B=2, T=12, Hq=4, Hk=2, D=5, Dv=3, gate=gate, seed=int(gate) + 5,
                              requires_grad=True)
    cot = torch.randn(2, 12, 4, 3, dtype=torch.float64)
    ref = path_attention(*full, impl="explicit")
    g_ref = torch.autograd.grad((ref * cot).sum(), [x for x in full if x is not None])
    out = chunked_path_attention(*full, n_chunks=3, block_size=3)
    g_out = torch.autograd.grad((out * cot).sum(), [x for x in full if x is not None])
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_chunked_form_float32_and_bad_arguments():
    full = random_path_inputs(B=1, T=8, Hq=2, D=4, gate=True, seed=3, dtype=torch.float32)
    out = chunked_path_attention(*full, n_chunks=4, block_size=64)
    ref = path_attention(*[x.double() for x in full], impl="explicit")
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="n_chunks"):
        chunked_path_attention(*full, n_chunks=3)
    with pytest.raises(TypeError, match="n_chunks"):
        chunked_path_attention(*full, n_chunks=2.0)


def test_cost_model_counts():
    c = context_parallel_costs(16384, 4, n_heads=8, n_kv_heads=2, head_dim=64, gate=True, bytes_per_element=2)
    L = 4096
    assert c["chunk_len"] == L and c["rank"] == 3
    assert c["summary_numel"] == summary_numel(1, L, 8, 2, 64, gate=True) == 2 * (L * 128 + 64 * 64) + 8 * L
    assert c["extra_received"] == 3 * 2 * 64 * 64
    assert c["extra_fraction"] == pytest.approx(3 * 2 * 64 * 64 / (3 * (2 * L * 128 + 8 * L)))
    assert c["path_received_bytes"] == 2 * c["path_received"]
    # the last rank attends to its causal diagonal and 3 full chunks: 3.5 / 2 of the mean rank's pairs
    assert c["imbalance"] == pytest.approx((L * (L + 1) / 2 + 3 * L * L) / (L * (L + 1) / 2 + 1.5 * L * L))
    assert 0 < c["split_fraction"] < 0.01
    assert c["allgather_memory"] == 2 * c["ring_memory"]        # R = 4 summaries against 2
    one = context_parallel_costs(1024, 1, n_heads=2, head_dim=32)
    assert one["path_received"] == one["ring_received"] == 0 and one["imbalance"] == 1
    for bad, exc in (({"world_size": 3}, ValueError), ({"head_dim": 0}, ValueError),
                     ({"n_kv_heads": 3}, ValueError), ({"gate": 1}, TypeError), ({"rank": 2}, ValueError)):
        kw = dict(seq_len=1024, world_size=2, n_heads=2, head_dim=32)
        kw.update(bad)
        with pytest.raises(exc):
            context_parallel_costs(**kw)


@pytest.mark.parametrize("gate,B,L,Hq,Hk,D,Dv,bs,R", [(True, 2, 5, 4, 2, 3, 6, 2, 3), (False, 1, 8, 2, 1, 4, 4, 3, 4),
                                                      (False, 1, 6, 2, 2, 5, 5, 64, 2)])
def test_cost_model_matches_the_implementation(gate, B, L, Hq, Hk, D, Dv, bs, R):
    """The summary the cost model counts is the buffer the implementation sends, and its operation count
    is what torch's FLOP counter measures on the last rank's computation (chunks side by side)."""
    from torch.utils.flop_counter import FlopCounterMode
    from path_lib.distributed import _Local, _pack
    x = random_path_inputs(B=B, T=R * L, Hq=Hq, Hk=Hk, D=D, Dv=Dv, gate=gate, seed=L)
    cut = lambda c: [None if t is None else t[:, c * L:(c + 1) * L] for t in x]   # noqa: E731
    earlier = [_Local(*cut(c), bs).summary() for c in range(R - 1)]
    assert _pack(earlier[0]).numel() == summary_numel(B, L, Hq, Hk, D, Dv, gate=gate)
    with FlopCounterMode(display=False) as counter:
        _Local(*cut(R - 1), bs).output(D ** -0.5, earlier)
    c = context_parallel_costs(R * L, R, n_heads=Hq, n_kv_heads=Hk, head_dim=D, value_dim=Dv, batch=B,
                               gate=gate, block_size=bs)
    assert counter.get_total_flops() == c["path_flops"]


def test_launcher_reports_failures_and_kills_hangs():
    import time
    with pytest.raises(RuntimeError, match="rank 1 fails on purpose"):
        run_gloo_group(dist_workers.fail_on_rank1, 2, timeout=30.0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 3"):
        run_gloo_group(dist_workers.hang_on_rank1, 2, timeout=3.0)
    assert time.monotonic() - t0 < 20
    with pytest.raises(TypeError, match="module-level function"):
        run_gloo_group(lambda r, w: r, 2)
    with pytest.raises(ValueError, match="timeout"):
        run_gloo_group(dist_workers.fail_on_rank1, 2, timeout=0)


def test_self_check_on_two_ranks():
    """The book's self-check (the scale-out chapter's demonstration) finds float64 agreement."""
    for gate in (True, False):
        res = run_case(self_check_rank, 2) if gate else run_gloo_group(dist_workers.self_check_no_gate, 2)
        assert [r["rank"] for r in res] == [0, 1]
        assert all(r["max_error"] < 1e-12 and r["seq_len"] == 12 for r in res)
        assert len(res[0]["errors"]) == (7 if gate else 6)


def test_impl_choice_is_checked():
    """impl must be one of path_lib.impl.CHOICES["context_parallel"]; impl='triton' names why the kernels cannot run these inputs (float64, a
    head dim they do not take, no GPU and no interpreter); 'auto' on the CPU is the blockwise scan."""
    from path_lib.impl import CHOICES
    assert CHOICES["context_parallel"] == ("auto", "blockwise", "triton")
    full = random_path_inputs(B=1, T=8, Hq=2, D=4, seed=3)
    with pytest.raises(ValueError, match="impl"):
        chunked_path_attention(*full, n_chunks=2, impl="kernels")
    pytest.importorskip("triton")
    with pytest.raises(ValueError, match=r"impl='triton': the kernels take head dims"):
        chunked_path_attention(*full, n_chunks=2, impl="triton")
    wide = random_path_inputs(B=1, T=8, Hq=2, D=32, seed=3)
    with pytest.raises(ValueError, match=r"impl='triton': .*(CUDA|float32)"):
        chunked_path_attention(*wide, n_chunks=2, impl="triton")
    torch.testing.assert_close(chunked_path_attention(*wide, n_chunks=2, impl="auto"),   # float64 on the CPU
                               path_attention(*wide, impl="explicit"), rtol=0, atol=1e-12)
