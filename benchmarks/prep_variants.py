"""Tuning of the forward's per-block kernels (``_ut_a_kernel`` + ``_ut_kernel``, ``_prep_kernel``) and
``_seg_fwd_kernel``: time each shipped kernel at several warp counts and dot precisions in one GPU call.

History: v4's ``_prep_kernel`` took ~7 ms (bf16, B*T = 32768, H*D = 2048); an earlier version of this
script timed copies of it with one stage off at a time, which showed that 8 warps (255 registers, one
program per SM, spills) and tf32x3 dots in the inverse were what cost, not the solve's arithmetic
(``benchmarks/results/history/prep_variants_v4.json``, ``prep_variants_v5a.json``; ``benchmarks/HISTORY.md``). v5
split the work into ``_ut_kernel`` (the UT transform in float32 accuracy) and ``_prep_kernel`` (T W, M,
K->), so this script now times the shipped kernels directly: there is no copy to keep in step.

    PYTHONPATH=. python3 benchmarks/prep_variants.py --out benchmarks/results/prep_variants.json [--ncu]

``--compile-only K/N`` compiles (launches once) the K-th of N shares of the configurations, to fill
Triton's disk cache from parallel processes before the timing run (``benchmarks/run_device.sh``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

import torch
import triton

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from path_lib.kernels import _triton_kernels as K  # noqa: E402


def make(B, T, H, D, device, dtype=torch.bfloat16, seed=0):
    """Keys, unit directions and beta in [0, 2] in the public layout ``[B, T, H, D]`` / ``[B, T, H]``."""
    g = torch.Generator(device=device).manual_seed(seed)
    k = torch.randn(B, T, H, D, generator=g, device=device).to(dtype)
    w = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=g, device=device), dim=-1)
    beta = 2 * torch.rand(B, T, H, generator=g, device=device)
    return k, w, beta


def outputs(k, BT, SB=4):
    """NaN-filled output buffers: TW, KA, TM, MM, NM, KS, RS, SEG."""
    B, T, H, D = k.shape
    NB = T // BT
    NS = -(-NB // SB)
    f32 = dict(dtype=torch.float32, device=k.device)
    nan = float("nan")
    return dict(TW=torch.full((B, T, H, D), nan, **f32), KA=torch.full_like(k, nan),
                TM=torch.full((B, H, NB, BT, BT), nan, **f32), MM=torch.full((B, H, NB, BT, BT), nan, **f32),
                NM=torch.full((B, H, NB, BT, BT), nan, **f32), KS=torch.full_like(k, nan),
                RS=torch.full((B, H, NB, D, D), nan, **f32), SEG=torch.full((B, H, NS, D, D), nan, **f32))


def launch(kernel, k, w, beta, o, BT, prec, warps, SB=4):
    """One launch of ``kernel`` ("ut", "prep" or "seg") with dot precision ``prec`` and ``warps`` ("ut":
    ``A`` by ``_ut_a_kernel`` at four warps, then the solve, ``_ut_kernel``, at ``warps``)."""
    B, T, H, D = k.shape
    NB = T // BT
    NS = -(-NB // SB)
    grid = (NB, B * H)
    if kernel == "ut":
        K._ut_a_kernel[grid](w, beta, o["TM"], T, NB, HK=H, D=D, BT=BT, SOLVE_PREC=prec,
                             num_warps=4, num_stages=1)
        K._ut_kernel[grid](beta, o["TM"], o["NM"], T, NB, HK=H, BT=BT, SOLVE_PREC=prec,
                           num_warps=warps, num_stages=1)
    elif kernel == "prep":
        K._prep_kernel[grid](k, w, o["TW"], o["KA"], o["TM"], o["MM"], T, NB, HK=H, D=D, BT=BT, PREC=prec,
                             num_warps=warps, num_stages=1)
    else:
        K._seg_fwd_kernel[(NS, B * H)](w, o["TW"], o["KA"], o["KS"], o["RS"], o["SEG"], T, NB, NS, SB,
                                       HK=H, D=D, BT=BT, PREC=prec, num_warps=warps, num_stages=1)


CONFIGS = [("ut", p, wp) for p in ("tf32x3", "tf32") for wp in (1, 2, 4)] + \
          [(kn, "tf32", wp) for kn in ("prep", "seg") for wp in (4, 8)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/prep_variants.json")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--Ds", default="64,128")
    ap.add_argument("--ncu", action="store_true", help="also profile the real kernels with Nsight Compute")
    ap.add_argument("--ncu-target", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compile-only", default="", metavar="K/N")
    args = ap.parse_args()
    if args.ncu_target:  # one forward + backward of the real kernels, for ncu
        import path_lib.kernels
        from benchmarks.bench_path import make as make_bench
        q, k, v, w, b, g = make_bench(32768 // args.T, args.T, 32, 64, torch.Generator(device="cuda").manual_seed(0))
        leaves = [x.detach().requires_grad_() for x in (q, k, v, w, b)]
        path_lib.kernels.path_attention(*leaves, check_values=False).sum().backward()
        torch.cuda.synchronize()
        return
    BT = 64
    todo = [(D, *c) for D in (int(x) for x in args.Ds.split(",")) for c in CONFIGS]
    data = {}
    for D in {t[0] for t in todo}:
        k, w, beta = make(32768 // args.T, args.T, 2048 // D, D, "cuda")
        o = outputs(k, BT)
        launch("ut", k, w, beta, o, BT, "tf32x3", 4)
        launch("prep", k, w, beta, o, BT, "tf32", 4)  # valid inputs for the segment kernel
        data[D] = (k, w, beta, o)
    if args.compile_only:
        kk, nn = (int(x) for x in args.compile_only.split("/"))
        for D, kn, prec, warps in todo[kk::nn]:
            launch(kn, *data[D], BT, prec, warps)
        torch.cuda.synchronize()
        return
    from path_lib.records import write_result
    rows = []
    for D, kn, prec, warps in todo:
        try:
            ms = triton.testing.do_bench(lambda: launch(kn, *data[D], BT, prec, warps), warmup=5, rep=25,
                                         return_mode="median")
            r = dict(D=D, kernel=kn, prec=prec, warps=warps, ms=round(ms, 4))
        except Exception as e:  # e.g. out of shared memory
            r = dict(D=D, kernel=kn, prec=prec, warps=warps, error=repr(e)[:200])
        rows.append(r)
        print(r, flush=True)
    write_result(args.out, dict(shape=dict(B=32768 // args.T, T=args.T, HD=2048, BT=BT, dtype="bfloat16"),
                                rows=rows), command="PYTHONPATH=. python3 " + " ".join(sys.argv))
    if args.ncu and shutil.which("ncu"):
        rep = os.path.join(os.path.dirname(args.out), "prep_ncu.txt")
        cmd = ["ncu", "--clock-control", "none", "--kernel-name",
               "regex:_ut_kernel|_prep_kernel|_bwd_block_kernel|_bwd_intra_kernel",
               "--launch-count", "4", "--section", "SpeedOfLight", "--section", "Occupancy",
               "--section", "LaunchStats", "--section", "WarpStateStats",
               sys.executable, os.path.abspath(__file__), "--ncu-target", "--T", str(args.T)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        with open(rep, "w") as f:
            f.write(res.stdout[-200000:] + "\n" + res.stderr[-20000:])
        print("ncu report:", rep, "exit", res.returncode, flush=True)


if __name__ == "__main__":
    main()
