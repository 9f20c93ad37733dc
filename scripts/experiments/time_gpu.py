#!/usr/bin/env python3
"""Step rates of the equal-training runs, to size them (scripts/experiments/gpu_plan.md).

    python scripts/experiments/time_gpu.py --what lm --sizes 256x4x64,256x4x128 --procs 1,9 --steps 30 --out $OUT

For each LM size ``d_model x n_layers x batch`` (train length 256, 4 heads) it times ``--steps`` training
steps of every model of path_lib.experiments.lm.COMPARISON_MODELS, one process alone, and then ``P`` processes at once
(each its own model, the way scripts/experiments/run_equal.py shares the GPU), and reports seconds per step and the
aggregate steps per second (``--bf16``: the LM steps under the training loop's autocast, bfloat16 from
Ampere on). ``--what tasks`` does the same for the synthetic tasks' models. Writes ``$OUT/timing.json``
(with provenance) and prints a table. On a CPU it runs too (the plan's CPU estimate).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (str(ROOT), str(ROOT / "scripts" / "experiments")):
    if p not in sys.path:
        sys.path.insert(0, p)


def _step_times(step, next_batch, steps, device):
    """Sorted wall times of ``steps`` optimizer steps (``step(x, y)`` on ``next_batch()``), after 3
    warm-up steps; the device is synchronised around each timed step."""
    import torch
    ts = []
    for i in range(steps + 3):
        x, y = next_batch()
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(x, y)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            ts.append(time.perf_counter() - t0)
    return sorted(ts)


def _time_lm(args):
    name, size, steps, device, backend, start_at, bf16 = args
    import torch
    torch.set_num_threads(1)
    from path_lib.training.corpus import load_stdlib_corpus
    from path_lib.experiments.lm import PRESETS, _batch, build_model
    from path_lib.hardware import compute_dtype
    d, L, B = size
    cfg = dataclasses.replace(PRESETS["equal"], d_model=d, n_layers=L, batch=B, corpus_bytes=2_000_000)
    corpus = load_stdlib_corpus(max_bytes=cfg.corpus_bytes)
    model = build_model(name, cfg, device=device, path_backend_name=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    while time.time() < start_at:      # start together when several processes share the GPU
        time.sleep(0.01)

    def step(x, y):
        with torch.autocast(device, dtype=compute_dtype(device), enabled=bf16 and device == "cuda"):
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    ts = _step_times(step, lambda: _batch(corpus, cfg, g, device), steps, device)
    return name, ts[len(ts) // 2], sum(ts)


def _time_task(args):
    task, att, steps, device, backend, start_at, layers = args
    import torch
    torch.set_num_threads(1)
    from run_equal import MQ_SIZES
    from path_lib.nn.model import TinyLM
    from path_lib.training.tasks import make_task
    from path_lib.training.loop import masked_loss, task_preset
    p = task_preset(task, "full")
    if task == "mqrar":
        p.task.update(MQ_SIZES["small"]["task"])
        p.model.update(MQ_SIZES["small"]["model"])
        p = p.replace(batch_size=MQ_SIZES["small"]["batch"])
    if layers:
        p.model["n_layers"] = layers
    _, _, vocab = make_task(task, 1, seed=0, **p.task)
    kw = {"backend": backend, "block_size": 128} if att in ("path", "path_fox") else {}
    model = TinyLM(len(vocab), attention=att, **p.model, **kw).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    while time.time() < start_at:
        time.sleep(0.01)

    def step(x, y):
        loss = masked_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def next_batch():
        x, y, _ = make_task(task, p.batch_size, generator=g, **p.task)
        return x.to(device), y.to(device)
    ts = _step_times(step, next_batch, steps, device)
    return f"{task}/{att}" + (f"/L{layers}" if layers else ""), ts[len(ts) // 2], sum(ts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=["lm", "tasks"], default="lm")
    ap.add_argument("--sizes", default="256x4x64", help="d_model x n_layers x batch, comma-separated (lm)")
    ap.add_argument("--models", default=None)
    ap.add_argument("--tasks", default="flip_flop,mqrar,a5", help="synthetic tasks to time (--what tasks)")
    ap.add_argument("--procs", default="1,9")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--bf16", action="store_true", help="LM steps under autocast as the training loop's (CUDA only)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    from path_lib.experiments.lm import COMPARISON_MODELS
    from run_synthetic import pick_path_backend
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = pick_path_backend(device)
    ctx = mp.get_context("spawn")
    res = {"device": device, "backend": backend, "bf16": args.bf16, "rows": []}
    print(f"device {device}, PaTH backend {backend}", flush=True)
    if args.what == "lm":
        models = args.models.split(",") if args.models else COMPARISON_MODELS
        cases = [(tuple(int(v) for v in s.split("x")), models) for s in args.sizes.split(",")]
    else:
        models = args.models.split(",") if args.models else ["rope", "fox", "sba", "path", "path_fox"]
        cases = [(t, models) for t in args.tasks.split(",")]
    for size, ms in cases:
        for P in (int(p) for p in args.procs.split(",")):
            if P == 1:      # every model alone, one after another, in one worker process
                groups, workers = [[m] for m in ms], 1
            else:           # P processes at once, cycling through the models
                groups, workers = [(ms * ((P + len(ms) - 1) // len(ms)))[:P]], P
            with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                for grp in groups:
                    start_at = time.time() + (30 if P > 1 else 0)
                    if args.what == "lm":
                        futs = [pool.submit(_time_lm, (m, size, args.steps, device, backend, start_at, args.bf16))
                                for m in grp]
                    else:
                        futs = [pool.submit(_time_task, (size, m, args.steps, device, backend, start_at,
                                                         4 if size == "a5" else None)) for m in grp]
                    out = [f.result() for f in futs]
                    wall = max(o[2] for o in out)
                    row = {"case": str(size), "procs": len(grp),
                           "per_step_s": {o[0]: round(o[1], 5) for o in out},
                           "aggregate_steps_per_s": round(len(grp) * args.steps / wall, 2)}
                    res["rows"].append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        from path_lib.records import write_result
        write_result(Path(args.out) / f"timing_{args.what}.json", res,
                     command="python scripts/experiments/time_gpu.py " + " ".join(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
