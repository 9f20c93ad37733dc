#!/usr/bin/env python3
"""Convert a trained RoPE byte model to PaTH and PaTH-FoX (paper A's two distillation stages) and compare
with the teacher and with PaTH trained from scratch for the same total steps (path_lib.experiments.convert_lm).

    python scripts/experiments/run_conversion.py --preset tiny --out results/lm/conversion_tiny.json     # CPU, ~1-2 min
    python scripts/experiments/run_conversion.py --preset full --workers 3 --out results/lm/conversion.json \\
        --state runs/conversion_state --budget-s 540                                            # one H200

Every arm of a seed sees the same batches with the same three-phase schedule (teacher steps, stage 1,
stage 2); three seeds by default. The record (JSON, ``path_lib.records.write_result``: device,
versions, commit, date, command) holds every run's phases, the converted students' metrics after each
stage, the per-run records of ``path_lib.training.loop.run_record``, ``equal_training`` (from
``path_lib.training.loop.check_equal_training``) and ``claims`` (``path_lib.experiments.convert_lm.conversion_claims``, which
a chapter recomputes from the records). It is rewritten after every seed, ``complete: false`` until all
runs are done.

Resumable: with ``--state DIR`` finished runs, finished phases and phases interrupted by the call's
``--budget-s`` (a deadline that never changes a schedule) are kept in DIR, and the same command run
again continues where it stopped (bit-identically on a CPU). Overrides (``--teacher-steps`` ...) change
the preset for smoke tests; the record's ``config`` says what ran.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from path_lib.experiments.convert_lm import PRESETS, run_conversion, stage_table  # noqa: E402
from path_lib.records import write_result  # noqa: E402

INT_OVERRIDES = ("teacher_steps", "stage1_steps", "stage2_steps", "probe_steps", "probe_eval_seqs", "eval_tokens",
                 "corpus_bytes", "batch", "train_len", "d_model", "n_layers", "n_heads")
FLOAT_OVERRIDES = ("beta_init", "forget_init", "teacher_lr", "stage1_lr", "stage2_lr", "ff_mix")


def build_config(args):
    cfg = PRESETS[args.preset]
    kw = {k: getattr(args, k) for k in INT_OVERRIDES + FLOAT_OVERRIDES if getattr(args, k) is not None}
    if args.eval_mults:
        kw["eval_mults"] = tuple(int(m) for m in args.eval_mults.split(","))
    if args.probe_mults:
        kw["probe_mults"] = tuple(int(m) for m in args.probe_mults.split(","))
    if args.init_ablation is not None:
        kw["init_ablation"] = args.init_ablation == "on"
    if args.scratch_fox is not None:
        kw["scratch_fox"] = args.scratch_fox == "on"
    for name in ("teacher", "stage1", "stage2", "probe"):      # a warm-up never longer than its phase
        steps = kw.get(f"{name}_steps", getattr(cfg, f"{name}_steps"))
        kw[f"{name}_warmup"] = min(getattr(cfg, f"{name}_warmup"), steps)
    return dataclasses.replace(cfg, **kw)


def main(argv=None):
    from path_lib.impl import CHOICES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--out", default=None, help="record path (default results/lm/conversion_<preset>.json)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--state", default=None, help="folder for resumable state (finished runs and phases)")
    ap.add_argument("--budget-s", type=float, default=None, help="wall-clock budget of this call (then pause)")
    ap.add_argument("--workers", type=int, default=1, help="seeds in parallel processes")
    ap.add_argument("--device", default=None)
    ap.add_argument("--backend", choices=CHOICES["path_layer"], default=None,
                    help="PaTH backend (default: triton when the kernels run here, else blockwise)")
    ap.add_argument("--stop-after-steps", type=int, default=None, help="pause every phase after N steps (tests)")
    for k in INT_OVERRIDES:
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None)
    for k in FLOAT_OVERRIDES:
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=None)
    ap.add_argument("--eval-mults", default=None, help="e.g. 1,2,4,8")
    ap.add_argument("--probe-mults", default=None, help="e.g. 1,4")
    ap.add_argument("--init-ablation", choices=["on", "off"], default=None)
    ap.add_argument("--scratch-fox", choices=["on", "off"], default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)        # tiny models: more threads only add synchronisation (as in the chapter)
    cfg = build_config(args)
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(args.out or f"results/lm/conversion_{args.preset}.json")
    command = "python scripts/experiments/run_conversion.py " + " ".join(argv if argv is not None else sys.argv[1:])
    backend = args.backend
    if backend is None:
        from path_lib.experiments.lm import LMConfig, pick_backend
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        backend = pick_backend(LMConfig(d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads), device)
    deadline = time.time() + args.budget_s if args.budget_s else None
    t0 = time.time()

    def save(res):
        data = {k: v for k, v in res.items()}
        data["preset"], data["wall_seconds"] = args.preset, time.time() - t0
        write_result(out, data, command=command)

    res = run_conversion(cfg, seeds, device=args.device, backend=backend, state_dir=args.state, deadline=deadline,
                         stop_after_steps=args.stop_after_steps, workers=args.workers, on_seed_done=save,
                         verbose=args.workers == 1)
    save(res)
    print(f"wrote {out}: {len(res['records'])} of {len(res['arms']) * len(seeds)} runs, complete {res['complete']}, "
          f"equal training: {res['equal_training']}")
    if res["complete"]:
        print(stage_table(res))
        for claim, ok in res["claims"].items():
            print(("holds    " if ok else "DOES NOT ") + claim)
    return res


if __name__ == "__main__":
    main()
