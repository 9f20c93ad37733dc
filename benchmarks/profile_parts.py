"""Where the time goes: GPU time per kernel (torch.profiler) of PaTH attention, ours and fla's.

For each shape (bf16 q, k, v; float32 w, beta; B*T = 32768 tokens, H*D = 2048) and each pass
(forward; forward+backward), runs ``--iters`` profiled iterations after two warm-up iterations and
records the summed device time of every kernel name (Triton kernels by their function name, torch
ops by their CUDA kernel name), per iteration, plus the wall time per iteration from CUDA events.

    PYTHONPATH=. python3 benchmarks/profile_parts.py --out benchmarks/results/profile_parts.json
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_path import fla_ops, make, methods  # noqa: E402
from path_lib.records import write_result  # noqa: E402


def profile_one(fn, ins, mode, iters):
    q, k, v, w, b, g = ins
    leaves = [x.detach().requires_grad_() for x in (q, k, v, w, b, g)]
    do = torch.randn_like(q)

    def run():
        if mode == "fwd":
            with torch.no_grad():
                fn(q, k, v, w, b, g)
        else:
            fn(*leaves).backward(do)
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(iters):
        run()
    e1.record()
    torch.cuda.synchronize()
    wall = e0.elapsed_time(e1) / iters
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            run()
        torch.cuda.synchronize()
    per = {}
    for ev in prof.key_averages():
        t = getattr(ev, "self_device_time_total", None)
        if t is None:
            t = getattr(ev, "self_cuda_time_total", 0.0)
        if t and t > 0:
            per[ev.key[:90]] = per.get(ev.key[:90], 0.0) + t / 1000.0 / iters  # ms per iteration
    return wall, dict(sorted(per.items(), key=lambda kv: -kv[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/profile_parts.json")
    ap.add_argument("--shapes", default="64:1024,64:16384,128:4096", help="D:T pairs")
    ap.add_argument("--methods", default="ours_path,fla_path")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--top", type=int, default=14)
    args = ap.parse_args()
    fla_path, fla_fox, fla_ver = fla_ops()
    gen = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    rows = []
    cmd = "PYTHONPATH=. python3 " + " ".join(sys.argv)
    for shape in args.shapes.split(","):
        D, T = (int(x) for x in shape.split(":"))
        H, B = 2048 // D, 32768 // T
        ins = make(B, T, H, D, gen)
        ms = methods(fla_path, fla_fox, D)
        for name in args.methods.split(","):
            if name not in ms:
                continue
            for mode in ("fwd", "fwdbwd"):
                try:
                    wall, per = profile_one(ms[name], ins, mode, args.iters)
                except Exception as e:  # record and go on
                    rows.append(dict(D=D, T=T, B=B, H=H, method=name, mode=mode, error=repr(e)[:300]))
                    print(rows[-1], flush=True)
                    continue
                rows.append(dict(D=D, T=T, B=B, H=H, method=name, mode=mode, wall_ms=round(wall, 4),
                                 kernels_ms={k: round(v, 4) for k, v in per.items()}))
                print(f"== D={D} T={T} {name} {mode}: {wall:.2f} ms/iter (events), "
                      f"profiled sum {sum(per.values()):.2f} ms", flush=True)
                for k, v in list(per.items())[:args.top]:
                    print(f"   {v:8.3f}  {k}", flush=True)
                write_result(args.out, dict(fla=fla_ver, dtype="bfloat16", tokens=32768, hidden=2048,
                                            iters=args.iters, rows=rows), command=cmd)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
