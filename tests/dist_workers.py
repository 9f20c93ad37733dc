"""Per-rank functions for tests/test_distributed.py and tests/test_train_cli.py: each runs inside a gloo
group on the CPU, started by ``path_lib.book.gloo_group.run_gloo_group(fn, world_size, ...)`` (which kills
the group if it outlives its timeout), and returns a picklable result."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers import random_path_inputs  # noqa: E402
from path_lib.impl import path_attention  # noqa: E402
from path_lib.distributed import context_parallel_path_attention  # noqa: E402

NAMES = ("q", "k", "v", "w", "beta", "g")

# (name, gate, Hq, Hk, chunk length L, D, Dv, block_size); 4 ranks use the first two
CP_CASES = [
    ("gqa_gate", True, 4, 2, 5, 4, 3, 2),      # L = 5 not a multiple of the block (2)
    ("plain", False, 2, 2, 4, 3, 3, 3),        # L = 4 against a block of 3
    ("gate_one_block", True, 2, 1, 3, 4, 4, 64),
]


def cp_case(rank, world, spec):
    name, gate, Hq, Hk, L, D, Dv, bs = spec
    T = world * L
    full = random_path_inputs(B=2, T=T, Hq=Hq, Hk=Hk, D=D, Dv=Dv, gate=gate, seed=1234 + T + Hq,
                              requires_grad=True)
    cot = torch.randn(2, T, Hq, Dv, generator=torch.Generator().manual_seed(99), dtype=torch.float64)
    ref = path_attention(*full, impl="explicit")
    (ref * cot).sum().backward()
    local = [None if x is None else x.detach()[:, rank * L:(rank + 1) * L].clone().requires_grad_(True)
             for x in full]
    out = context_parallel_path_attention(*local, block_size=bs)
    (out * cot[:, rank * L:(rank + 1) * L]).sum().backward()
    res = {"out_err": float((out - ref[:, rank * L:(rank + 1) * L]).detach().abs().max()),
           "out_scale": float(ref.detach().abs().max())}
    for n, x, xl in zip(NAMES, full, local):
        if x is None:
            continue
        gref = x.grad[:, rank * L:(rank + 1) * L]
        res[f"d{n}_err"] = float((xl.grad - gref).abs().max())
        res[f"d{n}_norm"] = float(gref.norm())
    return res


def run_cp(rank, world):
    cases = CP_CASES if world == 2 else CP_CASES[:2]
    return {spec[0]: cp_case(rank, world, spec) for spec in cases}


def _error_of(fn):
    try:
        fn()
    except (Exception, SystemExit) as e:                   # noqa: BLE001  reported to the launcher
        return {"type": type(e).__name__, "msg": str(e)}
    return None


def run_bad(rank, world):
    """Bad input on one rank or disagreement across ranks: every rank must raise, none may hang."""
    L = 4
    base = random_path_inputs(B=1, T=L, Hq=2, Hk=2, D=4, gate=True, seed=7 + rank)
    q, k, v, w, beta, g = base
    out = {}
    # rank 1 holds a longer chunk
    longer = random_path_inputs(B=1, T=L + 1, Hq=2, Hk=2, D=4, gate=True, seed=8)
    out["lengths"] = _error_of(lambda: context_parallel_path_attention(*(longer if rank == 1 else base)))
    # rank 1's beta has the wrong shape (its own check fails; rank 0's inputs are fine)
    out["bad_beta"] = _error_of(lambda: context_parallel_path_attention(
        q, k, v, w, beta[:, :, :1] if rank == 1 else beta, g))
    # rank 0 passes g, rank 1 does not
    out["gate_presence"] = _error_of(lambda: context_parallel_path_attention(q, k, v, w, beta,
                                                                          g if rank == 0 else None))
    # different head counts
    other = random_path_inputs(B=1, T=L, Hq=4, Hk=2, D=4, gate=True, seed=9)
    out["heads"] = _error_of(lambda: context_parallel_path_attention(*(other if rank == 1 else base)))
    # different dtypes
    out["dtype"] = _error_of(lambda: context_parallel_path_attention(
        *(x.float() if (rank == 1 and i < 3) else x for i, x in enumerate(base))))
    # q not a tensor on rank 0
    out["not_tensor"] = _error_of(lambda: context_parallel_path_attention(
        "q" if rank == 0 else q, k, v, w, beta, g))
    # after all that, the group still works: a good call agrees with the reference
    full = [torch.cat([random_path_inputs(B=1, T=L, Hq=2, Hk=2, D=4, gate=True, seed=7 + s)[i]
                       for s in range(world)], dim=1) for i in range(6)]
    ref = path_attention(*full, impl="explicit")[:, rank * L:(rank + 1) * L]
    out["after_err"] = float((context_parallel_path_attention(*base, block_size=3) - ref).abs().max())
    return out


def run_unchecked_mismatch(rank, world):
    """``check_ranks=False`` with chunks that cannot be all-gathered (different lengths, float32 against
    float64) or bad input on one rank: every rank raises a named error (no abort, no hang), and the group
    is still in step afterwards."""
    L = 4
    base = random_path_inputs(B=1, T=L, Hq=2, Hk=2, D=4, gate=True, seed=7 + rank)
    q, k, v, w, beta, g = base
    call = lambda *x: context_parallel_path_attention(*x, check_ranks=False, block_size=3)   # noqa: E731
    longer = random_path_inputs(B=1, T=L + 2, Hq=2, Hk=2, D=4, gate=True, seed=8)
    out = {"lengths": _error_of(lambda: call(*(longer if rank == 1 else base))),
           "scale": _error_of(lambda: context_parallel_path_attention(*base, check_ranks=False, block_size=3,
                                                                      scale=0.5 if rank == 0 else 0.25)),
           "dtype": _error_of(lambda: call(*(x.float() if rank == 0 else x for x in base))),
           "bad_beta": _error_of(lambda: call(q, k, v, w, beta[:, :, :1] if rank == 1 else beta, g))}
    full = [torch.cat([random_path_inputs(B=1, T=L, Hq=2, Hk=2, D=4, gate=True, seed=7 + s)[i]
                       for s in range(world)], dim=1) for i in range(6)]
    ref = path_attention(*full, impl="explicit")[:, rank * L:(rank + 1) * L]
    out["after_err"] = float((call(*base) - ref).abs().max())
    return out


TRAIN_ARGS = ["--steps", "6", "--batch", "4", "--seq-len", "24", "--d-model", "32", "--log-every", "1",
              "--corpus-bytes", "600000", "--eval-batches", "1", "--warmup", "2"]


def run_train(rank, world, out_dir):
    """DDP and FSDP2 runs of 6 steps, and runs stopped after 3 steps and resumed (DDP to DDP, FSDP2 to
    FSDP2, and DDP to FSDP2 from the same full-state checkpoint)."""
    from path_lib.training.cli import run
    res = {}
    for mode in ("ddp", "fsdp"):
        r = run(TRAIN_ARGS + ["--parallel", mode, "--out", str(Path(out_dir, f"{mode}.json"))])
        res[mode] = {"history": r["history"], "final": r["final"], "tokens_seen": r["tokens_seen"]}
    for saved_in, resumed_in in (("ddp", "ddp"), ("fsdp", "fsdp"), ("ddp", "fsdp")):
        ck = str(Path(out_dir, f"ck_{saved_in}_{resumed_in}"))
        first = run(TRAIN_ARGS + ["--parallel", saved_in, "--checkpoint-dir", ck, "--stop-after", "3"])
        second = run(TRAIN_ARGS + ["--parallel", resumed_in, "--checkpoint-dir", ck, "--resume"])
        res[f"{saved_in}_{resumed_in}"] = {
            "first_steps": first["steps_done"], "first_complete": first["complete"],
            "history": second["history"], "calls": second["calls"], "final": second["final"],
            "checkpoint_left": Path(ck, "train_state.pt").exists() if rank == 0 else None}
    res["odd_batch"] = _error_of(lambda: run(TRAIN_ARGS + ["--batch", "3"]))
    return res


def fail_on_rank1(rank, world):
    if rank == 1:
        raise ValueError("rank 1 fails on purpose")
    return rank


def hang_on_rank1(rank, world):
    """Rank 1 waits in a collective that rank 0, busy elsewhere, never joins (a hang, until the launcher
    kills both)."""
    if rank == 1:
        dist.all_reduce(torch.zeros(1))
    else:
        import time
        time.sleep(120)
    return rank


def self_check_no_gate(rank, world):
    from path_lib.book.gloo_group import self_check_rank
    return self_check_rank(rank, world, gate=False, block_size=5)


def run_cp_kernels(rank, world):
    """impl="triton" (the kernels for the chunk's own keys; TRITON_INTERPRET=1 on the CPU), float32, against
    float64 explicit PaTH on the gathered sequence: outputs and all gradients, with a gate and GQA, and a
    chunk length (21) that is not a multiple of the kernels' block."""
    L, Hq, Hk, D = 21, 4, 2, 32
    T = world * L
    full = random_path_inputs(B=2, T=T, Hq=Hq, Hk=Hk, D=D, gate=True, seed=4321 + T, requires_grad=True)
    cot = torch.randn(2, T, Hq, D, generator=torch.Generator().manual_seed(98), dtype=torch.float64)
    ref = path_attention(*full, impl="explicit")
    (ref * cot).sum().backward()
    local = [x.detach()[:, rank * L:(rank + 1) * L].float().clone().requires_grad_(True) for x in full]
    out = context_parallel_path_attention(*local, impl="triton")
    (out * cot[:, rank * L:(rank + 1) * L].float()).sum().backward()
    res = {"dtype": str(out.dtype), "out_err": float((out.double() - ref[:, rank * L:(rank + 1) * L]).detach().abs().max()),
           "out_scale": float(ref.detach().abs().max())}
    for n, x, xl in zip(NAMES, full, local):
        gref = x.grad[:, rank * L:(rank + 1) * L]
        res[f"d{n}_err"] = float((xl.grad.double() - gref).abs().max())
        res[f"d{n}_scale"] = float(gref.abs().max())
    return res
