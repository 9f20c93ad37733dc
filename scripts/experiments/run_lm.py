"""Train TinyLM variants at a short context, evaluate at up to 64x that length, probe retrieval.

For the recorded comparison use ``scripts/experiments/run_equal.py`` (equal steps by construction, three
seeds, resumable across calls; see ``scripts/experiments/gpu_plan.md``). This script runs one process or
several sharing a device; ``--deadline-s`` stops training as a safety, which makes the runs unequal
(the record then says so under ``equal_training``).

    python scripts/experiments/run_lm.py --preset tiny --out results/lm/                 # CPU, a few minutes
    python scripts/experiments/run_lm.py --preset full --workers 9 --out results/lm/     # one H200, ~7 minutes

Writes ``<out>/lm_<preset>.json`` (with a provenance block, rewritten after every model so a run cut
short keeps what it finished) and prints one line per model. With ``--workers N > 1`` the models
train in N parallel processes sharing the GPU (small models are launch-bound, so this uses the GPU
several times better than one process); every model still trains for the same ``steps`` on the same
batches, and ``--deadline-s`` only stops a model early as a safety (its record then says
``stopped_early``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from path_lib.experiments.lm import (COMPARISON_MODELS, MODELS, PAPER_A_CURVES, PAPER_B_RATIOS, PRESETS, ratio_table,  # noqa: E402
                                     run_experiment)
from path_lib.records import write_result  # noqa: E402
from path_lib.training.loop import check_equal_training  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--out", default="results/lm/")
    ap.add_argument("--models", nargs="*", default=None, help=f"subset of {list(MODELS)}")
    ap.add_argument("--device", default=None)
    ap.add_argument("--train-seconds", type=float, default=None, help="override the preset's time budget")
    ap.add_argument("--steps", type=int, default=None, help="override the preset's steps")
    ap.add_argument("--workers", type=int, default=1, help="parallel processes, one model each")
    ap.add_argument("--deadline-s", type=float, default=None, help="safety stop for training (parallel runs)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: the preset's seed)")
    args = ap.parse_args(argv)
    cfg = PRESETS[args.preset]
    if args.train_seconds is not None:
        cfg.train_seconds = args.train_seconds
    if args.steps is not None:
        cfg.steps = args.steps
    models = list(COMPARISON_MODELS) if not args.models else args.models
    out = Path(args.out) / f"lm_{args.preset}.json"
    command = "python scripts/experiments/run_lm.py " + " ".join(argv if argv is not None else sys.argv[1:])

    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None

    def save(res, complete=False):
        why = check_equal_training(res["records"], min_seeds=1) if complete else "the run is not finished"
        data = dict(res, preset=args.preset, complete=complete, equal_training={"ok": why is None, "reason": why},
                    paper_b_ratios=PAPER_B_RATIOS, paper_a_curves=PAPER_A_CURVES)
        write_result(out, data, command=command)

    res = run_experiment(cfg, models, device=args.device, on_model_done=save, workers=args.workers,
                         deadline_s=args.deadline_s, seeds=seeds)
    save(res, complete=True)
    print(ratio_table(res))
    print("wrote", out)


if __name__ == "__main__":
    main()
