"""Why does ``_prep_kernel`` take ~7 ms? Time variants of it that leave one stage out, in one GPU call.

v4's blocked inverse did not move the kernel's time (``benchmarks/NOTES.md``), so the UT solve is
not what costs. Following METHOD.md ("time variants that leave one stage out or do it twice, and
take differences"), this script times a copy of the kernel (``_prep_variant``: the same code as
``kernels._triton_kernels._prep_kernel``, which it checks it reproduces exactly) with each stage
switched off in turn, at two warp counts and three dot precisions:

* ``inverse``: ``blocked`` (v4, shipped), ``substitution`` (v3's 64-step loop) or ``none`` (N = I);
* ``mats``: store the three ``BT x BT`` matrices T, M, N (1) or not (0);
* ``keys``: compute M and the keys moved to the block end, K-> (1) or not (0);
* ``prec``: ``PREC/SOLVE_PREC`` pairs, the dot precision of T W / M / K-> and of W W^T and the
  inverse (v5 ships ``tf32/tf32x3`` for half-precision inputs); ``warps``: 4 or 8.

The copy lives here, not in ``kernels/``, so the verified kernel sources (``kernels.GPU_VERIFIED``)
stay untouched. With ``--ncu`` it also runs Nsight Compute on the real ``_prep_kernel`` and
``_bwd_block_kernel`` (occupancy, stall reasons, memory throughput) when ``ncu`` is installed.

    PYTHONPATH=. python3 benchmarks/prep_variants.py --out benchmarks/results/prep_variants.json [--ncu]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels._triton_kernels import _sq, _tile, _unit_lower_inverse  # noqa: E402

INVERSES = {"none": 0, "blocked": 1, "substitution": 2}


@triton.jit
def _substitution_inverse(a, rt, BT: tl.constexpr):
    """v3: row r of N is e_r - A[r, :] N, 64 steps of two cross-warp reductions."""
    n = tl.zeros([BT, BT], dtype=tl.float32)
    for r in range(0, BT):
        a_r = tl.sum(tl.where(rt[:, None] == r, a, 0.0), 0)
        n_r = tl.where(rt == r, 1.0, 0.0) - tl.sum(a_r[:, None] * n, 0)
        n = tl.where(rt[:, None] == r, n_r[None, :], n)
    return n


@triton.jit
def _prep_variant(K, W, BETA, TW, KA, TM, MM, NM, T, NB,
                  HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr,
                  SOLVE_PREC: tl.constexpr, INV: tl.constexpr, MATS: tl.constexpr, KEYS: tl.constexpr):
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // HK
    i_hk = i_bh % HK
    rt = tl.arange(0, BT)
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    mbase = (i_b.to(tl.int64) * HK + i_hk) * NB * BT * BT
    c0 = i_c * BT
    w = tl.load(_tile(W, kbase, c0, HK, D, BT))
    beta = tl.load(BETA + (i_b.to(tl.int64) * T + c0 + rt) * HK + i_hk)
    strict = rt[:, None] > rt[None, :]
    wwt = tl.dot(w, tl.trans(w), input_precision=SOLVE_PREC)
    a = tl.where(strict, beta[:, None] * wwt, 0.0)
    if INV == 1:
        n = _unit_lower_inverse(a, rt, BT, SOLVE_PREC)
    elif INV == 2:
        n = _substitution_inverse(a, rt, BT)
    else:
        n = tl.where(rt[:, None] == rt[None, :], 1.0, 0.0) + 0.0 * a
    if MATS:
        tl.store(_sq(NM, mbase, i_c, BT), n)
    tm = n * beta[None, :]
    if MATS:
        tl.store(_sq(TM, mbase, i_c, BT), tm)
    tl.store(_tile(TW, kbase, c0, HK, D, BT), tl.dot(tm, w, input_precision=PREC))
    if KEYS:
        k = tl.load(_tile(K, kbase, c0, HK, D, BT)).to(tl.float32)
        cm = tl.where(strict, tl.dot(w, tl.trans(k), input_precision=PREC), 0.0)
        mm = tl.dot(tm, cm, input_precision=PREC)
        if MATS:
            tl.store(_sq(MM, mbase, i_c, BT), mm)
        ka = k - tl.dot(tl.trans(mm), w, input_precision=PREC)
        tl.store(_tile(KA, kbase, c0, HK, D, BT), ka.to(KA.dtype.element_ty))


def make(B, T, H, D, device, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    k = torch.randn(B, T, H, D, generator=g, device=device).to(dtype)
    w = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=g, device=device), dim=-1)
    beta = 2 * torch.rand(B, T, H, generator=g, device=device)
    return k, w, beta


def outputs(k, BT):
    B, T, H, D = k.shape
    NB = T // BT
    f32 = dict(dtype=torch.float32, device=k.device)
    return (torch.full((B, T, H, D), float("nan"), **f32), torch.full_like(k, float("nan")),
            *(torch.full((B, H, NB, BT, BT), float("nan"), **f32) for _ in range(3)))


def launch(k, w, beta, outs, BT, prec, inv, mats, keys, warps, solve_prec=None):
    """One launch of the variant; ``prec`` for the T W / M / K-> products, ``solve_prec`` (default: the
    same) for W W^T and the inverse."""
    B, T, H, D = k.shape
    _prep_variant[(T // BT, B * H)](k, w, beta, *outs, T, T // BT, HK=H, D=D, BT=BT, PREC=prec,
                                    SOLVE_PREC=solve_prec or prec, INV=INVERSES[inv], MATS=mats, KEYS=keys,
                                    num_warps=warps, num_stages=1)


def check_against_shipped(k, w, beta, BT, prec, warps, solve_prec=None):
    """The variant with every stage on must give the shipped kernel's outputs bit for bit."""
    from kernels import _triton_kernels as K
    mine, ref = outputs(k, BT), outputs(k, BT)
    launch(k, w, beta, mine, BT, prec, "blocked", 1, 1, warps, solve_prec)
    B, T, H, D = k.shape
    K._prep_kernel[(T // BT, B * H)](k, w, beta, *ref, T, T // BT, HK=H, D=D, BT=BT, PREC=prec,
                                     SOLVE_PREC=solve_prec or prec, num_warps=warps, num_stages=1)
    return all(torch.equal(a, b) for a, b in zip(mine, ref))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/prep_variants.json")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--ncu", action="store_true", help="also profile the real kernels with Nsight Compute")
    ap.add_argument("--ncu-target", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--precs", default="tf32/tf32x3,tf32/tf32,tf32x3/tf32x3",
                    help="PREC/SOLVE_PREC pairs to time (ieee compiles for minutes)")
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--variants", default="blocked:1:1,none:1:1", help="inverse:mats:keys list")
    ap.add_argument("--compile-only", default="", metavar="K/N",
                    help="only compile (launch once) the K-th of N shares of the variants, to fill Triton's "
                         "disk cache from parallel processes before the timing run")
    args = ap.parse_args()
    if args.ncu_target:  # one forward + backward of the real kernels, for ncu
        import kernels
        from benchmarks.bench_path import make as make_bench
        q, k, v, w, b, g = make_bench(32768 // args.T, args.T, 32, 64, torch.Generator(device="cuda").manual_seed(0))
        leaves = [x.detach().requires_grad_() for x in (q, k, v, w, b)]
        kernels.path_attention(*leaves, check_values=False).sum().backward()
        torch.cuda.synchronize()
        return
    from path_lib.provenance import write_result
    BT, D = 64, args.D
    H = 2048 // D
    k, w, beta = make(32768 // args.T, args.T, H, D, "cuda")
    rows = []
    grid = [(v.split(":")[0], int(v.split(":")[1]), int(v.split(":")[2])) for v in args.variants.split(",")]
    todo = [(prec, warps, v) for prec in args.precs.split(",") for warps in (8, 4) for v in grid]
    if args.compile_only:
        kk, nn = (int(x) for x in args.compile_only.split("/"))
        for prec, warps, (inv, mats, keys) in todo[kk::nn]:
            launch(k, w, beta, outputs(k, BT), BT, *prec.split("/")[:1], inv, mats, keys, warps,
                   prec.split("/")[-1])
        torch.cuda.synchronize()
        return
    same = check_against_shipped(k, w, beta, BT, "tf32", 4, "tf32x3")
    print("variant(blocked, all stages) == shipped _prep_kernel:", same, flush=True)
    for prec, warps, (inv, mats, keys) in todo:
        outs = outputs(k, BT)
        try:
            ms = triton.testing.do_bench(lambda: launch(k, w, beta, outs, BT, prec.split("/")[0], inv, mats, keys,
                                                        warps, prec.split("/")[-1]),
                                         warmup=5, rep=25, return_mode="median")
            r = dict(prec=prec, warps=warps, inverse=inv, mats=mats, keys=keys, ms=round(ms, 4))
        except Exception as e:  # e.g. out of shared memory at 4 warps
            r = dict(prec=prec, warps=warps, inverse=inv, mats=mats, keys=keys, error=repr(e)[:200])
        rows.append(r)
        print(r, flush=True)
    write_result(args.out, dict(shape=dict(B=32768 // args.T, T=args.T, H=H, D=D, BT=BT, dtype="bfloat16"),
                                variant_equals_shipped=same, rows=rows),
                 command="PYTHONPATH=. python3 " + " ".join(sys.argv))
    if args.ncu and shutil.which("ncu"):
        rep = os.path.join(os.path.dirname(args.out), "prep_ncu.txt")
        cmd = ["ncu", "--clock-control", "none", "--kernel-name", "regex:_prep_kernel|_bwd_block_kernel",
               "--launch-count", "2", "--section", "SpeedOfLight", "--section", "Occupancy",
               "--section", "LaunchStats", "--section", "WarpStateStats", "--section", "MemoryWorkloadAnalysis",
               sys.executable, os.path.abspath(__file__), "--ncu-target", "--T", str(args.T)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        with open(rep, "w") as f:
            f.write(res.stdout[-200000:] + "\n" + res.stderr[-20000:])
        print("ncu report:", rep, "exit", res.returncode, flush=True)


if __name__ == "__main__":
    main()
