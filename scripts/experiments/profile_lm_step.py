#!/usr/bin/env python3
"""Where one training step of the equal-training language model spends its time (one process alone).

    python scripts/experiments/profile_lm_step.py --models NoPE,RoPE,PaTH,PaTH-FoX --out $OUT

For each model and each precision (``tf32``: float32 weights and activations with TF32 matmuls, as the
records so far; ``bf16``: the same under bfloat16 autocast) it times ``--steps`` steps (median wall time,
device synchronised around each step) and profiles 5 more with ``torch.profiler``: the GPU's busy time
per step (sum of kernel times), the number of kernels per step, and the kernels that take most of it.
A step whose busy time is far below its wall time is bound by launching kernels, not by the GPU's work:
then several processes (or CUDA graphs) help and a cheaper precision does not. Writes
``$OUT/profile_lm_step.json`` with provenance. Runs on a CPU too (no kernel times there).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def profile_model(name: str, precision: str, steps: int, preset: str) -> dict:
    """Median step seconds, GPU-busy seconds per step, kernels per step and the top kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from path_lib.experiments.lm import PRESETS, _batch, build_model, pick_backend
    from path_lib.training.corpus import load_stdlib_corpus
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    cfg = dataclasses.replace(PRESETS[preset], corpus_bytes=2_000_000)
    corpus = load_stdlib_corpus(max_bytes=cfg.corpus_bytes)
    backend = pick_backend(cfg, device)
    model = build_model(name, cfg, device=device, path_backend_name=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    use_bf16 = precision == "bf16" and cuda

    def step():
        x, y = _batch(corpus, cfg, g, device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    times = []
    for i in range(steps + 3):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    times.sort()
    n_prof = 5
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(n_prof):
            step()
        if cuda:
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    busy = sum(e.device_time for e in kernels) / 1e6 / n_prof     # device_time is in microseconds
    by_name: dict = {}
    for e in kernels:
        by_name[e.name] = by_name.get(e.name, 0.0) + e.device_time / 1e6 / n_prof
    top = sorted(by_name.items(), key=lambda kv: -kv[1])[:8]
    return {"model": name, "precision": precision, "backend": backend,
            "median_step_s": times[len(times) // 2], "gpu_busy_s_per_step": busy,
            "kernels_per_step": len(kernels) / n_prof,
            "top_kernels": [{"name": k[:120], "s_per_step": v} for k, v in top]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="NoPE,RoPE,PaTH,PaTH-FoX")
    ap.add_argument("--precisions", default="tf32,bf16")
    ap.add_argument("--preset", default="decide")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    from path_lib.records import write_result
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    rows = []
    for name in args.models.split(","):
        for prec in args.precisions.split(","):
            r = profile_model(name, prec, args.steps, args.preset)
            rows.append(r)
            print(f"{name:10s} {prec:5s} step {r['median_step_s'] * 1e3:7.2f} ms  GPU busy "
                  f"{r['gpu_busy_s_per_step'] * 1e3:7.2f} ms  kernels {r['kernels_per_step']:.0f}", flush=True)
            for k in r["top_kernels"][:4]:
                print(f"    {k['s_per_step'] * 1e3:7.3f} ms  {k['name'][:90]}")
    if args.out:
        write_result(Path(args.out) / "profile_lm_step.json", {"preset": args.preset, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
