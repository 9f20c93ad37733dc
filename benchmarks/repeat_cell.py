"""Run-to-run check of the benchmark's closest cells: time our kernels and fla-core's on the same inputs,
interleaved, several rounds in one process (the order of the methods alternates between rounds), and
record every round's median of ``triton.testing.do_bench``; the summary gives each method's median
over the rounds, the ratio of those medians and in how many rounds ours was the faster.

Same setup as ``bench_path.py`` (bf16, B*T = 32768, H*D = 2048, fresh inputs per round).

    PYTHONPATH=. python3 benchmarks/repeat_cell.py --shapes 128:4096,128:1024 --modes fwd,fwdbwd \
        --pairs ours_path:fla_path --rounds 7 --out benchmarks/results/repeat_cell.json
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_path import bench_one, fla_ops, make, methods  # noqa: E402
from path_lib.records import write_result  # noqa: E402


def summarize(rows, pairs):
    """Per (D, T, mode, ours, theirs): medians over the rounds, their ratio, and the rounds ours won."""
    out = []
    keys = sorted({(r["D"], r["T"], r["mode"]) for r in rows})
    for D, T, mode in keys:
        for ours, theirs in pairs:
            by_round = {}
            for r in rows:
                if (r["D"], r["T"], r["mode"]) == (D, T, mode) and r["method"] in (ours, theirs):
                    by_round.setdefault(r["round"], {})[r["method"]] = r["ms"]
            both = [v for v in by_round.values() if ours in v and theirs in v]
            if not both:
                continue
            a = statistics.median(v[ours] for v in both)
            b = statistics.median(v[theirs] for v in both)
            ratios = [v[ours] / v[theirs] for v in both]
            out.append(dict(D=D, T=T, mode=mode, ours=ours, theirs=theirs, rounds=len(both),
                            ours_median_ms=round(a, 4), theirs_median_ms=round(b, 4), ratio_of_medians=round(a / b, 4),
                            ratio_min=round(min(ratios), 4), ratio_max=round(max(ratios), 4),
                            ours_faster_rounds=sum(x < 1 for x in ratios)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/repeat_cell.json")
    ap.add_argument("--shapes", default="128:4096", help="D:T list")
    ap.add_argument("--modes", default="fwdbwd")
    ap.add_argument("--pairs", default="ours_path:fla_path", help="ours:theirs list")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rep", type=int, default=25)
    args = ap.parse_args()
    fla_path, fla_fox, fla_ver = fla_ops()
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")]
    rows = []
    for spec in args.shapes.split(","):
        D, T = (int(x) for x in spec.split(":"))
        H = 2048 // D
        fns = methods(fla_path, fla_fox, D)
        names = [m for pair in pairs for m in pair]
        missing = [m for m in names if m not in fns]
        if missing:
            raise SystemExit(f"methods not available: {missing} (fla: {fla_ver})")
        for rnd in range(args.rounds):
            ins = make(32768 // T, T, H, D, torch.Generator(device="cuda").manual_seed(1000 + rnd))
            order = names if rnd % 2 == 0 else names[::-1]
            for mode in args.modes.split(","):
                for name in order:
                    ms, _ = bench_one(fns[name], ins, mode, args.warmup, args.rep)
                    r = dict(D=D, T=T, mode=mode, method=name, round=rnd, ms=round(ms, 4))
                    rows.append(r)
                    print(r, flush=True)
    summary = summarize(rows, pairs)
    for s in summary:
        print(s, flush=True)
    write_result(args.out, dict(fla=fla_ver, dtype="bfloat16", tokens=32768, hidden=2048,
                                do_bench=dict(warmup=args.warmup, rep=args.rep, return_mode="median"),
                                rows=rows, summary=summary),
                 command="PYTHONPATH=. python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
