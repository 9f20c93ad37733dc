#!/usr/bin/env python3
"""Equal-training GPU runs, resumable across calls: every compared model gets the same optimiser steps
on the same batches with the same schedule, for several seeds; no wall-clock deadline changes a schedule.

    python scripts/experiments/run_equal.py --phases flip_flop,lm,mqrar,a5 --state runs/gpu_state \\
        --out $OUT --budget-s 500 --workers 12

Phases (run in the order given, each a list of (model, seed, ...) jobs):

* ``flip_flop``: RoPE, FoX, SBA, PaTH, PaTH-FoX; 1 layer, 2 heads, d_model 64, length 512, 1,500 steps of
  128 sequences, 3 seeds; errors on ID (0.8), OOD dense (0.1) and OOD sparse (0.98) with at least
  ``--ff-sparse-reads`` (10^6) scored reads, generated on the fly (path_lib.training.loop.GeneratedEval).
* ``lm``: the nine models of path_lib.experiments.lm.COMPARISON_MODELS at the ``--lm-preset`` sizes, 3 seeds; perplexity
  ratios up to 64x the training length, passkey probe, far attention mass (path_lib.experiments.farmass).
* ``mqrar``: RoPE and PaTH (and ``--mq-models``), N = 1..4, at ``--mq-size``, 3 seeds.
* ``a5``: ``--a5-models`` (RoPE, PaTH, PaTH-FoX; FoX and SBA optional) x 1..4 layers x ``--a5-lengths``
  (16 first, then 8), 3 seeds, ``--a5-steps`` (3,000) each; the fewest layers whose seed-mean accuracy reaches 90%.

State (``--state``): ``done/<job>.json`` for finished runs, ``ckpt/<job>.pt`` for runs interrupted by the
call's deadline (model, optimiser, schedule position, data generator: the next call resumes them). At
the end of a call the state is packed into ``$OUT/state.tar`` (split in ``state.tar.partNN`` when larger
than 15 MiB, at most 3 parts: a language-model checkpoint is about 38 MiB, so at most one survives);
the next call unpacks ``--resume-from`` (that tarball, copied back into a git-ignored folder) before
it starts. A job is started only if its predicted time (from the step rate of runs
finished earlier, recorded in the state) fits before the deadline.

Records (written after every finished job, ``complete: false`` until a phase is done; a phase already
finished in an earlier call is not rewritten; every record lists the provenance of all calls under
``calls``):
``$OUT/flip_flop.json``, ``$OUT/lm_full.json``, ``$OUT/mqrar.json``, ``$OUT/a5_layers.json`` (the stable
names of path_lib.records.RECORDS; formats compatible with the chapters that read them), each through
``path_lib.records.write_result`` (device, versions, ``PATH_BOOK_COMMIT``, date, command).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import io
import json
import math
import multiprocessing as mp
import sys
import tarfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (str(ROOT), str(ROOT / "scripts" / "experiments")):
    if p not in sys.path:
        sys.path.insert(0, p)

PHASES = ("flip_flop", "lm", "mqrar", "a5", "phonebook")
FILES = {"flip_flop": "flip_flop.json", "lm": "lm_full.json", "mqrar": "mqrar.json", "a5": "a5_layers.json",
         "phonebook": "phonebook.json"}
TASK_MODELS = ["rope", "fox", "sba", "path", "path_fox"]
PHONEBOOK_MODELS = ["nope", "rope", "fox", "path", "path_fox"]
PART = 15 * 2 ** 20

# MQRAR sizes: "paper" = the paper's (length 768, 32 keys, 256 pairs, d_model 256); "small" = a size at
# which RoPE learns N = 1 within a few thousand steps (measured on the CPU, see gpu_plan.md).
MQ_SIZES = {
    "paper": dict(task=dict(length=768, n_keys=32, n_pairs=256), model=dict(d_model=256, n_layers=2, n_heads=2),
                  steps=4000, lr=1e-3, batch=64),
    "small": dict(task=dict(length=160, n_keys=8, n_pairs=32), model=dict(d_model=128, n_layers=2, n_heads=2),
                  steps=3000, lr=2e-3, batch=64),
}


# ----------------------------------------------------------------------------------------------
# jobs
# ----------------------------------------------------------------------------------------------

def build_jobs(phase: str, args) -> list:
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = []
    if phase == "flip_flop":
        size = ff_tag(args)
        for sd in seeds:
            for m in args.ff_models.split(","):
                jobs.append({"phase": phase, "task": "flip_flop", "attention": m, "seed": sd,
                             "id": f"ff-{m}-s{sd}" if not size else f"ff-{size}-{m}-s{sd}"})
    elif phase == "phonebook":
        for sd in seeds:
            for m in args.pb_models.split(","):
                jobs.append({"phase": phase, "task": "phonebook", "attention": m, "seed": sd,
                             "id": f"pb-{m}-s{sd}"})
    elif phase == "lm":
        from path_lib.experiments.lm import COMPARISON_MODELS
        models = COMPARISON_MODELS if not args.lm_models else args.lm_models.split(",")
        tag = lm_tag(args)
        for sd in seeds:
            for m in models:
                jobs.append({"phase": phase, "model": m, "seed": sd,
                             "id": f"lm-{m}-s{sd}" if not tag else f"lm-{tag}-{m}-s{sd}"})
    elif phase == "mqrar":
        for sd in seeds:
            for n in (1, 2, 3, 4):
                for m in args.mq_models.split(","):
                    jobs.append({"phase": phase, "task": "mqrar", "attention": m, "n_back": n, "seed": sd,
                                 "id": f"mq-{m}-N{n}-s{sd}"})
    elif phase == "a5":      # setting by setting (all seeds of one length and depth first): partial progress
        for length in (int(x) for x in args.a5_lengths.split(",")):     # still yields whole comparisons
            for L in (int(x) for x in args.a5_layers.split(",")):
                for sd in seeds:
                    for m in args.a5_models.split(","):
                        jobs.append({"phase": phase, "task": "a5", "attention": m, "n_layers": L, "length": length,
                                     "seed": sd, "id": f"a5-{m}-L{L}-T{length}-s{sd}"})
    else:
        raise ValueError(f"unknown phase {phase!r}")
    for j in jobs:
        j["steps_override"] = args.steps
    return jobs


def task_setup(job: dict, args):
    """The preset and eval sets of a synthetic job (the same for every model of a phase)."""
    from path_lib.training.loop import GeneratedEval, TrainConfig, task_eval_sets, task_preset
    task = job["task"]
    if task == "flip_flop":
        p = task_preset("flip_flop", "full")
        steps = job["steps_override"] or p.config.steps
        p = p.replace(config=dataclasses.replace(p.config, steps=steps, warmup=min(p.config.warmup, steps)))
        if args.ff_length:
            p.task["length"] = args.ff_length
        if args.ff_layers:
            p.model["n_layers"] = args.ff_layers
        if args.ff_d_model:
            p.model["d_model"] = args.ff_d_model
        kw = dict(p.task)
        ev = {"id": GeneratedEval("flip_flop", 128, min_scored=args.ff_other_reads, seed=10_000, **kw),
              "ood_dense": GeneratedEval("flip_flop", 128, min_scored=args.ff_other_reads, seed=20_000,
                                         **dict(kw, p_ignore=0.1)),
              "ood_sparse": GeneratedEval("flip_flop", 128, min_scored=args.ff_sparse_reads, seed=30_000,
                                          **dict(kw, p_ignore=0.98))}
        return p, ev
    if task == "mqrar":
        size = MQ_SIZES[args.mq_size]
        p = task_preset("mqrar", "full")
        steps = job["steps_override"] or args.mq_steps or size["steps"]
        p = p.replace(config=TrainConfig(steps=steps, lr=size["lr"], warmup=min(100, steps), eval_every=0),
                      batch_size=size["batch"], eval_batch_size=256, eval_batches=8)
        p.task.update(size["task"], n_back=job["n_back"])
        p.model.update(size["model"])
        return p, task_eval_sets("mqrar", p)
    if task == "phonebook":
        p = task_preset("phonebook", "full")
        steps = job["steps_override"] or args.pb_steps or p.config.steps
        p = p.replace(config=dataclasses.replace(p.config, steps=steps, warmup=min(p.config.warmup, steps)))
        ev = task_eval_sets("phonebook", p)          # the training size: the positive control
        for m in (2, 4):                              # books of 2x and 4x the entries
            ev[f"x{m}"] = task_eval_sets("phonebook", p, seed=777 + m, n_pairs=m * p.task["n_pairs"])["id"]
        return p, ev
    if task == "a5":
        p = task_preset("a5", "full")
        steps = job["steps_override"] or args.a5_steps
        p = p.replace(config=dataclasses.replace(p.config, steps=steps, warmup=min(p.config.warmup, steps),
                                                 eval_every=min(1000, steps)))
        p.model["n_layers"] = job["n_layers"]
        p.task["length"] = job["length"]
        ev = task_eval_sets("a5", p)
        ev["long"] = task_eval_sets("a5", p, seed=777, length=2 * job["length"])["id"]
        return p, ev
    raise ValueError(task)


_CORPUS = {}


def run_job(job: dict) -> dict:
    """One run in a worker process: train (resuming from the job's checkpoint), evaluate when complete,
    write ``done/<id>.json``. Returns a small status dict."""
    import torch
    torch.set_num_threads(1)
    if job["device"] == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    args = argparse.Namespace(**job["args"])
    state = Path(job["state"])
    ck = state / "ckpt" / f"{job['id']}.pt"
    t0 = time.time()
    try:
        if job["phase"] == "lm":
            out = _run_lm(job, args, ck)
        else:
            out = _run_task(job, args, ck)
        out["job"] = {k: v for k, v in job.items() if k not in ("args", "state")}
        out["wall_seconds_call"] = time.time() - t0
        if out["complete"]:
            (state / "done").mkdir(parents=True, exist_ok=True)
            tmp = state / "done" / f"{job['id']}.json.tmp"
            tmp.write_text(json.dumps(out, default=_jsonable))
            tmp.replace(state / "done" / f"{job['id']}.json")
        return {"id": job["id"], "complete": out["complete"], "steps_done": out["record"]["steps_done"],
                "steps_planned": out["record"]["steps_planned"], "train_seconds": out.get("train_seconds_call"),
                "wall": time.time() - t0}
    except Exception:
        return {"id": job["id"], "complete": False, "error": traceback.format_exc(), "wall": time.time() - t0}
    finally:
        if job["device"] == "cuda":
            torch.cuda.empty_cache()


def _jsonable(x):
    try:
        return x.tolist()
    except AttributeError:
        return str(x)


def ff_tag(args) -> str:
    """'' for flip-flop at its preset size (1 layer, width 64), else ``L<layers>d<width>``."""
    if not (args.ff_layers or args.ff_d_model):
        return ""
    return f"L{args.ff_layers or 1}d{args.ff_d_model or 64}"


def lm_tag(args) -> str:
    """'' for the earlier preset ``equal`` on the code corpus (its job names and record name stay), else
    ``<preset>-<corpus>``: each preset and corpus is its own comparison, record and set of jobs."""
    return "" if (args.lm_preset, args.lm_corpus) == ("equal", "stdlib") else f"{args.lm_preset}-{args.lm_corpus}"


def phase_file(phase: str, args) -> str:
    """The record's file name: FILES, or ``lm_<preset>_<corpus>.json`` for the tagged LM comparisons."""
    if phase == "lm" and lm_tag(args):
        return f"lm_{args.lm_preset}_{args.lm_corpus}.json"
    if phase == "flip_flop" and ff_tag(args):
        return f"flip_flop_{ff_tag(args)}.json"
    return FILES[phase]


def lm_config(args):
    from path_lib.experiments.lm import PRESETS
    cfg = dataclasses.replace(PRESETS[args.lm_preset], corpus=args.lm_corpus)
    kw = {}
    if args.steps:
        kw.update(steps=args.steps, warmup=min(cfg.warmup, args.steps))
    if args.lm_eval_mults:
        kw["eval_mults"] = tuple(int(x) for x in args.lm_eval_mults.split(","))
    if args.lm_bf16:
        kw["autocast_bf16"] = True
    return dataclasses.replace(cfg, far_mass_windows=args.lm_far_mass_windows, **kw)


def _run_lm(job, args, ck):
    from path_lib.training.corpus import load_corpus
    from path_lib.experiments.lm import run_model
    cfg = lm_config(args)
    key = (cfg.corpus, cfg.corpus_bytes)
    if key not in _CORPUS:
        _CORPUS[key] = load_corpus(cfg.corpus, max_bytes=cfg.corpus_bytes)
    corpus = _CORPUS[key]
    r = run_model(job["model"], cfg, corpus, steps=cfg.steps, device=job["device"],
                  path_backend_name=job["backend"], seed=job["seed"], deadline=job["deadline"],
                  checkpoint_path=str(ck), stop_after_steps=args.pause_after_steps,
                  eval_guard=lambda: EvalSlot(Path(job["state"]) / "locks", args.eval_slots))
    r["train_seconds_call"] = r["train"]["seconds"]
    r["corpus"] = corpus.info
    r["train"]["loss_curve"] = r["train"]["loss_curve"][:: max(1, len(r["train"]["loss_curve"]) // 100)]
    return r


class EvalSlot:
    """One of ``n`` slots, shared by the worker processes through ``flock`` on files in ``folder``: at
    most ``n`` long-context evaluations (tens of GB each for the materialised-attention baselines at
    16K) run at once."""

    def __init__(self, folder: Path, n: int):
        self.folder, self.n, self.fh = Path(folder), max(1, int(n)), None

    def __enter__(self):
        import fcntl
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            for i in range(self.n):
                fh = open(self.folder / f"slot{i}", "a")
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self.fh = fh
                    return self
                except OSError:
                    fh.close()
            time.sleep(0.5)

    def __exit__(self, *exc):
        import fcntl
        import torch
        if torch.cuda.is_available():
            # hand the evaluation's cached blocks back before the next process takes the slot: a worker
            # that kept them (tens of GB at 16K) starved the next evaluations on the H200 (first call)
            torch.cuda.empty_cache()
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
        return False


def _run_task(job, args, ck):
    from path_lib.training.loop import train_task
    preset, ev = task_setup(job, args)
    kw = {"backend": job["backend"], "block_size": 128} if job["attention"] in ("path", "path_fox") else {}
    r = train_task(job["task"], job["attention"], preset, device=job["device"], progress=False, eval_sets=ev,
                   per_position=job["task"] == "a5", seed=job["seed"], checkpoint_path=str(ck),
                   deadline=job["deadline"], stop_after_steps=args.pause_after_steps, **kw)
    r["train_seconds_call"] = r["train_seconds"]
    r["history"] = r["history"][:: max(1, len(r["history"]) // 50)]
    r["evals"] = [{"step": e["step"], **{k: round(v["accuracy"], 5) for k, v in e.items() if k != "step"}}
                  for e in r["evals"]]
    if job["task"] != "a5":
        for v in r["final"].values():
            v.pop("accuracy_by_position", None)
    return r


# ----------------------------------------------------------------------------------------------
# records
# ----------------------------------------------------------------------------------------------

def _seed_stats(values):
    """Mean, sample sd, min, max over seeds."""
    n = len(values)
    m = sum(values) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    return {"mean": m, "std": sd, "min": min(values), "max": max(values), "n": n}


def summarise(phase: str, runs: list, expected: int, meta: dict) -> dict:
    """The record of a phase from its finished runs (chapter-compatible layout, seed means, the check)."""
    from path_lib.training.loop import check_equal_training
    runs = sorted(runs, key=lambda r: r["job"]["id"])
    complete = len(runs) == expected
    out = dict(meta, phase=phase, complete=complete, runs_expected=expected, runs_done=len(runs))
    if phase == "lm":
        return _summarise_lm(runs, out, complete)
    groups = {}
    for r in runs:
        j = r["job"]
        key = {"flip_flop": lambda: (j["attention"],), "phonebook": lambda: (j["attention"],),
               "mqrar": lambda: (j["attention"], j["n_back"]),
               "a5": lambda: (j["attention"], j["n_layers"], j["length"])}[phase]()
        groups.setdefault(key, []).append(r)
    # equal training across every compared model at each setting (same seeds, steps, schedule, data)
    settings = {}
    for key, rs in groups.items():
        settings.setdefault(key[1:], []).extend(r["record"] for r in rs)
    reasons = {str(k): check_equal_training(v, min_seeds=3) for k, v in settings.items()}
    bad = {k: v for k, v in reasons.items() if v}
    reason = (f"{len(runs)} of {expected} runs are done." if not complete else
              (next(iter(bad.values())) if bad else None))
    out["equal_training"] = {"ok": reason is None, "reason": reason, "by_setting": reasons}
    mean = lambda rs, f: sum(f(r) for r in rs) / len(rs)
    out["summary"] = {"/".join(map(str, key)): {m: _seed_stats([r["record"]["metrics"][m] for r in rs])
                                                 for m in rs[0]["record"]["metrics"]}
                      for key, rs in groups.items()}
    if phase == "flip_flop":
        out["table"] = {k[0]: {"id_error": mean(rs, lambda r: r["final"]["id"]["error"]),
                               "ood_sparse_error": mean(rs, lambda r: r["final"]["ood_sparse"]["error"]),
                               "ood_dense_error": mean(rs, lambda r: r["final"]["ood_dense"]["error"]),
                               "steps": rs[0]["steps_done"], "seeds": len(rs),
                               "ood_sparse_reads": rs[0]["final"]["ood_sparse"]["n_tokens"]}
                        for k, rs in groups.items()}
        out["runs"] = runs
    elif phase == "phonebook":
        out["table"] = {k[0]: {**{f"{name}_accuracy": mean(rs, lambda r, n=name: r["final"][n]["accuracy"])
                                  for name in ("id", "x2", "x4")},
                               "steps": rs[0]["steps_done"], "seeds": len(rs)} for k, rs in groups.items()}
        out["runs"] = runs
    elif phase == "mqrar":
        tab = {}
        for (att, n), rs in groups.items():
            tab.setdefault(att, {})[str(n)] = {"accuracy": mean(rs, lambda r: r["final"]["id"]["accuracy"]),
                                               "steps": rs[0]["steps_done"], "seeds": len(rs)}
        out["table"], out["runs"] = tab, runs
    else:
        lengths = sorted({k[2] for k in groups})
        by_len = {}
        for (att, L, T), rs in groups.items():
            by_len.setdefault(T, {}).setdefault(att, {})[str(L)] = {
                "accuracy": mean(rs, lambda r: r["final"]["id"]["accuracy"]),
                "accuracy_2x_length": mean(rs, lambda r: r["final"]["long"]["accuracy"]),
                "steps": rs[0]["steps_done"], "seeds": len(rs),
                "per_seed": [r["final"]["id"]["accuracy"] for r in rs]}
        fewest = {T: {att: min([int(L) for L, v in t.items() if v["accuracy"] >= 0.9], default=None)
                      for att, t in tab.items()} for T, tab in by_len.items()}
        first = str((out.get("settings") or {}).get("a5_lengths", "")).split(",")[0]
        primary = int(first) if first.isdigit() and int(first) in lengths else (lengths[0] if lengths else None)
        out["primary_length"] = primary     # "table", "fewest_layers_90" and "runs" are at this length
        out["lengths"] = lengths
        out["by_length"] = {str(T): v for T, v in by_len.items()}
        out["fewest_layers_90_by_length"] = {str(T): v for T, v in fewest.items()}
        out["table"] = by_len.get(primary, {})
        out["fewest_layers_90"] = fewest.get(primary, {})
        out["runs"] = [r for r in runs if r["job"]["length"] == primary]
        out["runs_other_lengths"] = [r for r in runs if r["job"]["length"] != primary]
    return out


def _summarise_lm(runs, out, complete):
    from path_lib.experiments.lm import PAPER_A_CURVES, PAPER_B_RATIOS, COMPARISON_MODELS
    from path_lib.training.loop import check_equal_training
    recs = [r["record"] for r in runs]
    why = check_equal_training(recs, min_seeds=3) if complete else f"{len(runs)} of {out['runs_expected']} runs are done."
    out["equal_training"] = {"ok": why is None, "reason": why}
    seeds = sorted({r["seed"] for r in runs})
    out["seeds"] = seeds
    out["models"] = {r["model"]: r for r in sorted(runs, key=lambda r: COMPARISON_MODELS.index(r["model"])
                                                  if r["model"] in COMPARISON_MODELS else 99)
                     if seeds and r["seed"] == seeds[0]}
    out["runs"], out["records"] = runs, recs
    # seed statistics per model and metric (mean, sample sd, min, max, n): what the ledger and the
    # chapter read, so a claim's number is one look-up, not a recomputation
    by_model = {}
    for r in recs:
        by_model.setdefault(r["model"], []).append(r["metrics"])
    out["summary"] = {m: {k: _seed_stats([x[k] for x in ms]) for k in ms[0] if all(k in x for x in ms)}
                      for m, ms in by_model.items()}
    out["corpus"] = runs[0]["corpus"] if runs else None
    out["steps"] = runs[0]["record"]["steps_planned"] if runs else None
    out["paper_b_ratios"], out["paper_a_curves"] = PAPER_B_RATIOS, PAPER_A_CURVES
    return out


# ----------------------------------------------------------------------------------------------
# state: pack / unpack
# ----------------------------------------------------------------------------------------------

def unpack_state(sources, state: Path) -> int:
    """Extract ``state.tar`` (or its ``.partNN`` pieces, concatenated) into ``state``; returns files."""
    parts = []
    for s in sources:
        s = Path(s)
        if s.is_dir():
            parts += sorted(s.glob("state.tar*"))
        elif s.exists():
            parts.append(s)
        else:
            parts += sorted(s.parent.glob(s.name + ".part*"))
    if not parts:
        return 0
    data = b"".join(p.read_bytes() for p in sorted(parts, key=lambda p: p.name))
    state.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(state, filter="data")
        return len(tf.getnames())


#: the shortest slice of training worth starting a fresh run for when it will pause before it ends
MIN_SLICE_S = 45.0


def skip_reason(phase: str, predicted_s, resumed: bool, left: float, margin: float):
    """Why a job is not started with ``left`` seconds of the call remaining (None: start it). A run needs
    ``margin`` seconds after its deadline to evaluate and save. A fresh run predicted (``predicted_s``, from
    the rates of earlier calls) not to finish still starts when its checkpoint comes back in the state
    (every phase but lm, whose checkpoints are over the return limit) and it gets at least
    :data:`MIN_SLICE_S` of training: it pauses at the deadline and the next call resumes it."""
    if left < margin + 15:
        return f"{left:.0f}s left"
    if predicted_s is not None and not resumed and predicted_s > left - 5 and (
            phase == "lm" or left - margin < MIN_SLICE_S):
        return f"predicted {predicted_s:.0f}s > {left:.0f}s left"
    return None


def pack_state(state: Path, out: Path, log) -> list:
    """Pack ``state`` into ``out/state.tar`` (split into 15 MiB parts if needed). Checkpoints that would
    push the total past 3 parts are dropped (their runs restart next call) and reported: with the four
    records and the log that keeps a call's return at 8 files."""
    buf = io.BytesIO()
    files = sorted(p for p in state.rglob("*") if p.is_file() and not p.name.endswith(".tmp"))
    ckpts = sorted((p for p in files if p.suffix == ".pt"), key=lambda p: p.stat().st_size)
    budget = 3 * PART - sum(p.stat().st_size for p in files if p.suffix != ".pt") - 2 ** 20
    keep = []
    for p in ckpts:
        if p.stat().st_size <= budget:
            keep.append(p)
            budget -= p.stat().st_size
        else:
            log(f"checkpoint {p.name} ({p.stat().st_size / 2**20:.1f} MiB) dropped: over the return limit; "
                "that run restarts from step 0 next call")
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for p in files:
            if p.suffix != ".pt" or p in keep:
                tf.add(p, arcname=str(p.relative_to(state)))
    data = buf.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    if len(data) <= PART:
        (out / "state.tar").write_bytes(data)
        return [out / "state.tar"]
    paths = []
    for i in range(0, len(data), PART):
        p = out / f"state.tar.part{i // PART:02d}"
        p.write_bytes(data[i:i + PART])
        paths.append(p)
    return paths


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------

def _rates(state: Path) -> dict:
    f = state / "rates.json"
    return json.loads(f.read_text()) if f.exists() else {}


def _rate_key(job) -> str:
    return job["id"].rsplit("-s", 1)[0]


def main(argv=None):
    from path_lib.impl import CHOICES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", default="flip_flop,lm,mqrar,a5", help=f"comma list of {PHASES}")
    ap.add_argument("--state", default="runs/gpu_state")
    ap.add_argument("--resume-from", nargs="*", default=[], help="state.tar (or its parts) of the previous call")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=500.0, help="wall-clock budget of this call")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=None, help="override every phase's steps (smoke tests)")
    ap.add_argument("--backend", choices=CHOICES["path_layer"], default="auto")
    ap.add_argument("--device", default=None)
    ap.add_argument("--ff-models", default=",".join(TASK_MODELS))
    ap.add_argument("--ff-sparse-reads", type=int, default=1_000_000)
    ap.add_argument("--ff-other-reads", type=int, default=200_000)
    ap.add_argument("--ff-length", type=int, default=None, help="override flip-flop's length 512 (CPU tests)")
    ap.add_argument("--ff-layers", type=int, default=None, help="flip-flop models' depth (default the preset's 1)")
    ap.add_argument("--ff-d-model", type=int, default=None, help="flip-flop models' width (default the preset's 64)")
    ap.add_argument("--pb-models", default=",".join(PHONEBOOK_MODELS))
    ap.add_argument("--pb-steps", type=int, default=None, help="phone-book steps (default the preset's 3,000)")
    ap.add_argument("--pause-after-steps", type=int, default=None,
                    help="testing: every run stops (checkpointed) after this many steps, as at a deadline")
    ap.add_argument("--lm-preset", default="equal", help="path_lib.experiments.lm.PRESETS: equal, decide, decide_large")
    ap.add_argument("--lm-corpus", default="stdlib", choices=["stdlib", "brown"],
                    help="the code corpus (Python's standard library) or English prose (the Brown Corpus, .corpus/)")
    ap.add_argument("--lm-models", default=None)
    ap.add_argument("--lm-bf16", action="store_true",
                    help="train the language models under bfloat16 autocast (evaluation stays float32)")
    ap.add_argument("--lm-eval-mults", default=None)
    ap.add_argument("--lm-far-mass-windows", type=int, default=8)
    ap.add_argument("--mq-models", default="rope,path")
    ap.add_argument("--mq-size", choices=sorted(MQ_SIZES), default="small")
    ap.add_argument("--mq-steps", type=int, default=None, help="MQRAR steps (default: the size's)")
    ap.add_argument("--a5-models", default="rope,path,path_fox")
    ap.add_argument("--a5-layers", default="1,2,3,4")
    ap.add_argument("--a5-lengths", default="16,8")
    ap.add_argument("--a5-steps", type=int, default=3000)
    ap.add_argument("--eval-margin-s", type=float, default=None, help="seconds kept for evaluation at the end")
    ap.add_argument("--eval-slots", type=int, default=2, help="LM evaluations allowed to run at once (memory)")
    args = ap.parse_args(argv)
    t_start = time.time()
    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out, state = Path(args.out), Path(args.state)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "log.txt", "a")

    def log(msg):
        line = f"[{time.time() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    n = unpack_state(args.resume_from, state)
    log(f"device={device}; resumed {n} state files from {args.resume_from or 'nothing'}")
    phases = [p for p in args.phases.split(",") if p]
    if args.backend == "auto":
        from run_synthetic import pick_path_backend
        dims = sorted({{"flip_flop": 32, "lm": 64, "mqrar": 64, "a5": 64, "phonebook": 64}[p] for p in phases})
        backend = pick_path_backend(device, head_dims=tuple(dims))
    else:
        backend = args.backend
    log(f"path backend={backend}, workers={args.workers}, phases={phases}")
    deadline_call = t_start + args.budget_s
    command = "python scripts/experiments/run_equal.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rates = _rates(state)
    from path_lib.records import provenance, write_result
    calls_file = state / "calls.json"
    calls = json.loads(calls_file.read_text()) if calls_file.exists() else []
    calls.append(provenance(command))
    state.mkdir(parents=True, exist_ok=True)
    calls_file.write_text(json.dumps(calls, indent=1))

    def write_phase(phase, jobs):
        done = [json.loads((state / "done" / f"{j['id']}.json").read_text()) for j in jobs
                if (state / "done" / f"{j['id']}.json").exists()]
        meta = {"path_backend": backend, "device_kind": device, "calls": calls,
                "settings": {k: v for k, v in vars(args).items() if k not in ("resume_from",)}}
        if phase == "lm":
            meta["config"] = dataclasses.asdict(lm_config(args))
        rec = summarise(phase, done, len(jobs), meta)
        write_result(out / phase_file(phase, args), rec, command=command)
        return rec

    # one queue in phase order: a later phase's jobs fill the workers while an earlier phase finishes
    jobs_by_phase = {ph: build_jobs(ph, args) for ph in phases}
    queue, touched = [], []
    for ph in phases:
        todo = [j for j in jobs_by_phase[ph] if not (state / "done" / f"{j['id']}.json").exists()]
        if todo:
            touched.append(ph)
        todo.sort(key=lambda j: not (state / "ckpt" / f"{j['id']}.pt").exists())   # resumed runs first
        log(f"phase {ph}: {len(jobs_by_phase[ph])} jobs, {len(jobs_by_phase[ph]) - len(todo)} already done")
        queue += todo
    margins = {"lm": 120.0, "flip_flop": 45.0, "mqrar": 20.0, "a5": 20.0, "phonebook": 20.0}
    ctx = mp.get_context("spawn")
    running = {}
    with cf.ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool:
        while queue or running:
            while queue and len(running) < args.workers:
                j = queue.pop(0)
                margin = args.eval_margin_s if args.eval_margin_s is not None else margins[j["phase"]]
                left = deadline_call - time.time()
                rate = rates.get(_rate_key(j))
                resumed = (state / "ckpt" / f"{j['id']}.pt").exists()
                why = skip_reason(j["phase"], rate and rate["seconds"], resumed, left, margin)
                if why:
                    log(f"  skip {j['id']}: {why}")
                    continue
                j = dict(j, args=vars(args), state=str(state), device=device, backend=backend,
                         deadline=deadline_call - margin)
                running[pool.submit(run_job, j)] = j
            if not running:
                break
            fin, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for f in fin:
                j = running.pop(f)
                r = f.result()
                if "error" in r:
                    log(f"  {j['id']} FAILED\n{r['error']}")
                    continue
                log(f"  {j['id']}: {'complete' if r['complete'] else 'paused'} at {r['steps_done']}/"
                    f"{r['steps_planned']} steps, {r['wall']:.0f}s")
                if r["complete"] and not args.steps:
                    rates[_rate_key(j)] = {"seconds": r["wall"], "steps": r["steps_planned"]}
                    (state / "rates.json").write_text(json.dumps(rates, indent=1))
                if r["complete"]:
                    write_phase(j["phase"], jobs_by_phase[j["phase"]])
    for ph in touched:       # a phase finished in an earlier call keeps the record written then
        rec = write_phase(ph, jobs_by_phase[ph])
        log(f"phase {ph}: {rec['runs_done']}/{rec['runs_expected']} runs done; equal training: "
            f"{rec['equal_training']['ok']} ({rec['equal_training']['reason']})")
    paths = pack_state(state, out, log)
    log(f"state packed: {[p.name for p in paths]} ({sum(p.stat().st_size for p in paths) / 2**20:.1f} MiB)")
    log(f"call done in {time.time() - t_start:.0f}s")
    logf.close()


if __name__ == "__main__":
    main()
