"""Tuning run: time ``path_lib.kernels.path_attention`` (bf16, B*T = 32768, H*D = 2048 unless ``--tokens`` /
``--hidden`` say otherwise, e.g. ``--tokens 8192 --hidden 768`` for the LM benchmark's layer; PaTH without the gate) at
several segment lengths ``SB`` (blocks per segment) and per-kernel warp counts, forward and
forward+backward, in one GPU call. ``SB`` moves work between the per-segment intra kernel (pairs inside
a segment, sequential per segment) and the inter-segment kernels (plain attention against the keys
moved to their segment's end, one ``D x D`` product per segment); the library's default is
``path_lib.kernels._config._segments``. Warp counts are set through ``PATH_KERNELS_WARPS``.

    PYTHONPATH=. python3 benchmarks/tune_segments.py --out benchmarks/results/tune_segments.json
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import path_lib.kernels  # noqa: E402
from benchmarks.bench_path import bench_one, make  # noqa: E402
from path_lib.kernels._config import _segments  # noqa: E402
from path_lib.records import write_result  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/tune_segments.json")
    ap.add_argument("--shapes", default="64:1024:1,2,4;64:4096:2,3,6;64:16384:6,12;128:1024:1,2,4;128:4096:3,6",
                    help="D:T:SB list; SB 0 = the library's default")
    ap.add_argument("--warps", default="|block=8|intra=8", help="PATH_KERNELS_WARPS settings, '|'-separated")
    ap.add_argument("--env", default="", help="extra settings at the default segment length, '|'-separated, "
                    "each NAME=VALUE or NAME=VALUE&NAME2=VALUE2 (e.g. PATH_KERNELS_STAGES=inter_q=4|PATH_KERNELS_SPLIT=seg_split=16)")
    ap.add_argument("--modes", default="fwdbwd")
    ap.add_argument("--tokens", type=int, default=32768, help="B * T of every shape")
    ap.add_argument("--hidden", type=int, default=2048, help="H * D of every shape")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rep", type=int, default=12)
    args = ap.parse_args()
    rows = []

    def measure(fn, key):
        """Time ``fn`` in every mode on the current inputs; one row per mode (``key`` plus the result)."""
        for mode in args.modes.split(","):
            try:
                ms, peak = bench_one(fn, ins, mode, args.warmup, args.rep)
                r = dict(key, mode=mode, ms=round(ms, 4), peak_mib=round(peak))
            except Exception as e:
                r = dict(key, mode=mode, error=repr(e)[:200])
            rows.append(r)
            print(r, flush=True)

    for spec in args.shapes.split(";"):
        D, T, sbs = spec.split(":")
        D, T = int(D), int(T)
        H = args.hidden // D
        ins = make(max(1, args.tokens // T), T, H, D, torch.Generator(device="cuda").manual_seed(0))
        default = _segments(T // 64, 64, D)
        for warps in args.warps.split("|"):
            os.environ["PATH_KERNELS_WARPS"] = warps
            for sb in sorted({int(x) or default for x in sbs.split(",")} | {default}):
                if warps and sb != default:
                    continue  # warp variants at the default segment length only
                fn = lambda q, k, v, w, b, g, sb=sb: path_lib.kernels.path_attention(q, k, v, w, b, None, check_values=False,  # noqa: E731
                                                                          seg_blocks=sb)
                measure(fn, dict(D=D, T=T, SB=sb, default_SB=default, warps=warps or "default"))
        os.environ.pop("PATH_KERNELS_WARPS", None)
        for setting in filter(None, args.env.split("|")):
            olds = {}
            for item in setting.split("&"):  # several variables at once: A=x&B=y
                name, _, value = item.partition("=")
                olds[name] = os.environ.get(name)
                os.environ[name] = value
            measure(lambda q, k, v, w, b, g: path_lib.kernels.path_attention(q, k, v, w, b, None, check_values=False),
                    dict(D=D, T=T, SB=default, env=setting))
            for name, old in olds.items():
                if old is None:
                    os.environ.pop(name)
                else:
                    os.environ[name] = old
    write_result(args.out, dict(dtype="bfloat16", tokens=args.tokens, hidden=args.hidden, rows=rows),
                 command="PYTHONPATH=. python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
