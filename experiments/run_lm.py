"""Train TinyLM variants at a short context, evaluate at up to 64x that length, probe retrieval.

    python experiments/run_lm.py --preset tiny --out results/lm/                 # CPU, a few minutes
    python experiments/run_lm.py --preset full --workers 9 --out results/lm/     # one H200, ~7 minutes

Writes ``<out>/lm_<preset>.json`` (with a provenance block, rewritten after every model so a run cut
short keeps what it finished) and prints one line per model. With ``--workers N > 1`` the models
train in N parallel processes sharing the GPU (small models are launch-bound, so this uses the GPU
several times better than one process); every model still trains for the same ``steps`` on the same
batches, and ``--deadline-s`` only stops a model early as a safety (its record then says
``stopped_early``).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing as mp
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from path_lib.lm import (MODELS, PAPER_A_CURVES, PAPER_B_RATIOS, PRESETS, pick_backend, ratio_table,  # noqa: E402
                         run_experiment, run_model, summary_line)
from path_lib.provenance import write_result  # noqa: E402


def _job(name, cfg, steps, device, backend, deadline):
    """One model in a worker process (the corpus is read there)."""
    import torch
    torch.set_num_threads(1)
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    from path_lib.corpus import load_stdlib_corpus
    corpus = load_stdlib_corpus(max_bytes=cfg.corpus_bytes)
    return name, run_model(name, cfg, corpus, steps=steps, device=device, path_backend_name=backend,
                           deadline=deadline), corpus.info


def run_parallel(cfg, models, workers, device, deadline_s, save):
    backend = pick_backend(cfg, device, verbose=True)
    res = {"config": asdict(cfg), "corpus": None, "device": str(device), "path_backend": backend,
           "steps": cfg.steps, "step_seconds": {}, "workers": workers, "models": {}}
    deadline = time.time() + deadline_s if deadline_s else None
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futs = [pool.submit(_job, name, cfg, cfg.steps, device, backend, deadline) for name in models]
        for fut in cf.as_completed(futs):
            name, r, info = fut.result()
            res["models"][name] = r
            res["corpus"] = info
            print(summary_line(name, r, cfg.train_len), flush=True)
            save(res)
    res["models"] = {n: res["models"][n] for n in models if n in res["models"]}   # the MODELS order
    return res


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
    args = ap.parse_args(argv)
    cfg = PRESETS[args.preset]
    if args.train_seconds is not None:
        cfg.train_seconds = args.train_seconds
    if args.steps is not None:
        cfg.steps = args.steps
    models = list(MODELS) if not args.models else args.models
    out = Path(args.out) / f"lm_{args.preset}.json"
    command = "python experiments/run_lm.py " + " ".join(argv if argv is not None else sys.argv[1:])

    def save(res, complete=False):
        data = dict(res, preset=args.preset, complete=complete,
                    paper_b_ratios=PAPER_B_RATIOS, paper_a_curves=PAPER_A_CURVES)
        write_result(out, data, command=command)

    if args.workers > 1:
        import torch
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        res = run_parallel(cfg, models, args.workers, device, args.deadline_s, save)
    else:
        res = run_experiment(cfg, models, device=args.device, on_model_done=save)
    save(res, complete=True)
    print(ratio_table(res))
    print("wrote", out)


if __name__ == "__main__":
    main()
