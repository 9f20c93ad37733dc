"""Train TinyLM variants at a short context, evaluate at up to 64x that length, probe retrieval.

    python experiments/run_lm.py --preset tiny --out results/lm/          # CPU, a few minutes
    python experiments/run_lm.py --preset full --out results/lm/          # one H200, ~5 minutes

Writes ``<out>/lm_<preset>.json`` (with a provenance block, rewritten after every model so a run cut
short keeps what it finished) and prints one line per model.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from path_lib.lm import MODELS, PAPER_A_CURVES, PAPER_B_RATIOS, PRESETS, ratio_table, run_experiment  # noqa: E402
from path_lib.provenance import write_result  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--out", default="results/lm/")
    ap.add_argument("--models", nargs="*", default=None, help=f"subset of {list(MODELS)}")
    ap.add_argument("--device", default=None)
    ap.add_argument("--train-seconds", type=float, default=None, help="override the preset's time budget")
    args = ap.parse_args(argv)
    cfg = PRESETS[args.preset]
    if args.train_seconds is not None:
        cfg.train_seconds = args.train_seconds
    out = Path(args.out) / f"lm_{args.preset}.json"
    command = "python experiments/run_lm.py " + " ".join(argv if argv is not None else sys.argv[1:])

    def save(res):
        data = dict(res, preset=args.preset, complete=False,
                    paper_b_ratios=PAPER_B_RATIOS, paper_a_curves=PAPER_A_CURVES)
        write_result(out, data, command=command)

    res = run_experiment(cfg, args.models, device=args.device, on_model_done=save)
    data = dict(res, preset=args.preset, complete=True, paper_b_ratios=PAPER_B_RATIOS,
                paper_a_curves=PAPER_A_CURVES)
    write_result(out, data, command=command)
    print(ratio_table(res))
    print("wrote", out)


if __name__ == "__main__":
    main()
