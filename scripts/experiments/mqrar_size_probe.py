#!/usr/bin/env python3
"""Does a model learn MQRAR-N at a given size within a step budget? (sizing part (d) of gpu_plan.md)

    python scripts/experiments/mqrar_size_probe.py --sizes small,paper --models rope,path --n-back 1 --steps 3000

Trains one seed per (size, model) and prints the query accuracy every ``--eval-every`` steps
(chance: 1 / n_keys). Sizes are scripts/experiments/run_equal.py's MQ_SIZES. Writes ``$OUT/mqrar_probe.json``
with provenance when ``--out`` is given.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (str(ROOT), str(ROOT / "scripts" / "experiments")):
    if p not in sys.path:
        sys.path.insert(0, p)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="small")
    ap.add_argument("--models", default="rope,path")
    ap.add_argument("--n-back", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    from run_equal import MQ_SIZES
    from run_synthetic import pick_path_backend
    from path_lib.training.loop import TrainConfig, task_eval_sets, task_preset, train_task
    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = pick_path_backend(device)
    rows = []
    for size in args.sizes.split(","):
        sz = MQ_SIZES[size]
        for att in args.models.split(","):
            p = task_preset("mqrar", "full")
            p = p.replace(config=TrainConfig(steps=args.steps, lr=sz["lr"], warmup=min(100, args.steps),
                                             eval_every=args.eval_every),
                          batch_size=sz["batch"], eval_batch_size=256, eval_batches=2)
            p.task.update(sz["task"], n_back=args.n_back)
            p.model.update(sz["model"])
            kw = {"backend": backend, "block_size": 128} if att in ("path", "path_fox") else {}
            t0 = time.time()
            r = train_task("mqrar", att, p, device=device, progress=False, eval_sets=task_eval_sets("mqrar", p), **kw)
            curve = [(e["step"], round(e["id"]["accuracy"], 4)) for e in r["evals"]]
            row = {"size": size, "model": att, "n_back": args.n_back, "steps": args.steps, "seconds": time.time() - t0,
                   "chance": 1 / sz["task"]["n_keys"], "curve": curve}
            rows.append(row)
            print(row, flush=True)
    if args.out:
        from path_lib.records import write_result
        write_result(Path(args.out) / "mqrar_probe.json", {"rows": rows},
                     command="python scripts/experiments/mqrar_size_probe.py " + " ".join(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
