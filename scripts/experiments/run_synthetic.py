#!/usr/bin/env python3
"""Synthetic expressivity experiments of chapter 5, recorded as JSON with provenance.

This is the earlier, time-budgeted runner: each run fits its schedule into a wall-clock budget, so
models get unequal training. The equal-training runs (same steps, batches and schedule for every
model, three seeds, SBA included, resumable) are ``scripts/experiments/run_equal.py``; see
``scripts/experiments/gpu_plan.md``.

    PYTHONPATH=$PWD python3 scripts/experiments/run_synthetic.py --preset full --out results/synthetic/

Runs, in parallel worker processes (one GPU is shared; small models are launch-bound, so several
processes keep it busy), within one wall-clock budget:

* flip_flop.json  flip-flop LM (FFL(0.8), length 512): error on ID / OOD sparse (98% ignore) /
                  OOD dense (10% ignore) for RoPE, FoX, PaTH, PaTH-FoX; 1 layer, 2 heads, d_model 64.
* a5_layers.json  the A5 word problem at a fixed length: accuracy for 1..4 layers and each model,
                  the fewest layers reaching 90%, and accuracy by position at the training length
                  and at twice it (does the model fail as the sequence grows?).
* mqrar.json      MQRAR-N, N = 1..4, for PaTH and RoPE (2 layers, d_model 256, 2 heads).

Every training run fits its warm-up + cosine schedule into its time budget (``path_lib.training.loop.train``
measures the step time and cuts the number of steps; ``steps_done`` is recorded). PaTH uses the
Triton kernels when ``path_lib.kernels.is_available()`` and they match the reference on a quick check,
otherwise path_lib's blockwise PyTorch mirror.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing as mp
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODELS = ["rope", "fox", "path", "path_fox"]
PATH_MODELS = ("path", "path_fox")


def pick_path_backend(device: str, head_dims=(32, 64, 128)) -> str:
    """'triton' where :func:`path_lib.impl.resolve_backend` picks the kernels for ``"auto"`` at every head dim
    the runs use and they agree with the reference (forward and backward) on a small random problem;
    else 'blockwise'."""
    from path_lib.impl import resolve_backend
    import torch
    if any(resolve_backend("auto", device=device, dtype=torch.float32, head_dim=D) != "triton" for D in head_dims):
        return "blockwise"
    return "triton" if all(_kernel_ok(D) for D in head_dims) else "blockwise"


def _kernel_ok(D: int) -> bool:
    try:
        import torch
        import path_lib.kernels as kernels
        from path_lib.impl import path_attention
        from path_lib.reference.householder import normalize
        g = torch.Generator(device="cuda").manual_seed(0)
        B, T, H = 2, 128, 2
        q, k, v = (torch.randn(B, T, H, D, device="cuda", generator=g, requires_grad=True) for _ in range(3))
        w = normalize(torch.randn(B, T, H, D, device="cuda", generator=g))
        beta = (2 * torch.rand(B, T, H, device="cuda", generator=g)).requires_grad_()
        w.requires_grad_()
        o1 = kernels.path_attention(q, k, v, w, beta)
        gr1 = torch.autograd.grad(o1.sum(), (q, k, v, w, beta))
        o2 = path_attention(q, k, v, w, beta, impl="parallel")
        gr2 = torch.autograd.grad(o2.sum(), (q, k, v, w, beta))
        ok = (o1 - o2).abs().max().item() < 1e-2 and all(
            (a - b).abs().max().item() < 5e-2 * (1 + b.abs().max().item()) for a, b in zip(gr1, gr2))
        return bool(ok)
    except Exception:  # any failure (e.g. a kernel out of shared memory): fall back to the mirror
        return False


def run_job(job: dict) -> dict:
    """One training run in a worker process. Returns a compact, JSON-ready dict."""
    import torch
    torch.set_num_threads(1)
    from path_lib.training.loop import task_preset, task_eval_sets, train_task
    t0 = time.time()
    try:
        preset = task_preset(job["task"], job["preset"])
        if job.get("n_layers"):
            preset.model["n_layers"] = job["n_layers"]
        if job.get("n_back"):
            preset.task["n_back"] = job["n_back"]
        preset = apply_overrides(preset, job["task"], job.get("overrides") or {})
        eval_sets = task_eval_sets(job["task"], preset)
        if job["task"] == "a5":   # also at twice the training length: does accuracy fall with position?
            long_sets = task_eval_sets("a5", preset, seed=777, length=2 * preset.task["length"])
            eval_sets["long"] = long_sets["id"]
        kw = {}
        if job["attention"] in PATH_MODELS:
            kw = {"backend": job["backend"], "block_size": 128}
        deadline_left = job["deadline"] - time.time() - job["eval_margin_s"]
        budget = max(5.0, min(job["budget_s"], deadline_left))
        res = train_task(job["task"], job["attention"], preset, device=job["device"], progress=False,
                         eval_sets=eval_sets, time_limit_s=budget, per_position=job["task"] == "a5", **kw)
        res["history"] = res["history"][:: max(1, len(res["history"]) // 50)]
        res["evals"] = [{"step": e["step"], **{k: round(v["accuracy"], 5) for k, v in e.items() if k != "step"}}
                        for e in res["evals"]]   # the learning curve: accuracy per eval set
        res.update({"job": {k: v for k, v in job.items() if k not in ("deadline",)},
                    "wall_seconds": time.time() - t0, "time_budget_s": budget})
        return res
    except Exception:
        return {"job": {k: v for k, v in job.items() if k != "deadline"}, "error": traceback.format_exc()}


def apply_overrides(preset, task: str, ov: dict):
    """The command line's overrides of a preset: ``lr``, ``steps`` (the cap; the time budget may cut
    it), ``eval_every``, ``batch_size``, and per task ``length`` (A5's sequence length)."""
    import dataclasses
    cfg = preset.config
    cfg_kw = {k: ov[k] for k in ("lr", "steps", "eval_every") if ov.get(k) is not None}
    if cfg_kw:
        cfg = dataclasses.replace(cfg, **cfg_kw)
    preset = preset.replace(config=cfg)
    if ov.get("batch_size"):
        preset = preset.replace(batch_size=ov["batch_size"])
    if task == "a5" and ov.get("a5_length"):
        preset.task["length"] = ov["a5_length"]
    return preset


def job_tag(j: dict) -> str:
    return f"{j['task']}/{j['attention']}" + (f"/L{j['n_layers']}" if j.get("n_layers") else "") + \
           (f"/N{j['n_back']}" if j.get("n_back") else "")


def summarise(task: str, results: list) -> dict:
    ok = [r for r in results if "error" not in r]
    out = {"task": task, "runs": results}
    if task == "flip_flop":
        out["table"] = {r["attention"]: {f"{k}_error": r["final"][k]["error"] for k in ("id", "ood_sparse", "ood_dense")}
                        | {"steps": r["steps_done"]} for r in ok}
    elif task == "a5":
        acc = {}
        for r in ok:
            acc.setdefault(r["attention"], {})[str(r["model"]["n_layers"])] = {
                "accuracy": r["final"]["id"]["accuracy"], "accuracy_2x_length": r["final"]["long"]["accuracy"],
                "steps": r["steps_done"]}
        fewest = {}
        for att, by_layers in acc.items():
            good = sorted(int(L) for L, v in by_layers.items() if v["accuracy"] >= 0.9)
            fewest[att] = good[0] if good else None
        out["table"] = acc
        out["fewest_layers_90"] = fewest
    elif task == "mqrar":
        acc = {}
        for r in ok:
            acc.setdefault(r["attention"], {})[str(r["task_kwargs"]["n_back"])] = {
                "accuracy": r["final"]["id"]["accuracy"], "steps": r["steps_done"]}
        out["table"] = acc
    return out


def main(argv=None):
    from path_lib.impl import CHOICES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=["tiny", "full"], default="full")
    ap.add_argument("--out", default="results/synthetic/")
    ap.add_argument("--budget-s", type=float, default=230.0, help="wall-clock budget for all training")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--tasks", default="flip_flop,mqrar,a5", help="comma-separated subset")
    ap.add_argument("--layers", default="1,2,3,4")
    ap.add_argument("--mqrar-models", default="path,rope")
    ap.add_argument("--models", default=",".join(MODELS), help="models for flip-flop and A5")
    ap.add_argument("--backend", choices=CHOICES["path_layer"], default="auto",
                    help="PaTH backend: auto = Triton kernels if they pass a check at every head dim")
    ap.add_argument("--job-budget-s", type=float, default=None,
                    help="training seconds of every job (default: a fraction of --budget-s per task)")
    ap.add_argument("--lr", type=float, default=None, help="override the presets' learning rate")
    ap.add_argument("--steps", type=int, default=None, help="override the presets' step cap")
    ap.add_argument("--eval-every", type=int, default=None, help="evaluate every this many steps (curves)")
    ap.add_argument("--batch-size", type=int, default=None, help="override the presets' batch size")
    ap.add_argument("--a5-length", type=int, default=None, help="override A5's sequence length")
    ap.add_argument("--merge-from", default=None,
                    help="folder of earlier JSONs: keep their successful runs not re-run here "
                         "(their provenance is kept under 'merged_from')")
    args = ap.parse_args(argv)

    import torch
    from path_lib.training.loop import save_result
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tasks = args.tasks.split(",")
    if args.backend == "auto":   # check the kernels at the head dims these runs use
        from path_lib.training.loop import task_preset
        dims = sorted({task_preset(t, args.preset).model["d_model"] // task_preset(t, args.preset).model["n_heads"]
                       for t in tasks})
        backend = pick_path_backend(device, head_dims=tuple(dims))
    else:
        backend = args.backend
    command = "python3 scripts/experiments/run_synthetic.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"device={device} path backend={backend} workers={args.workers}", flush=True)
    t_start = time.time()
    deadline = t_start + args.budget_s
    B = args.budget_s
    jobs = []
    overrides = {"lr": args.lr, "steps": args.steps, "eval_every": args.eval_every,
                 "batch_size": args.batch_size, "a5_length": args.a5_length}
    common = {"preset": args.preset, "device": device, "backend": backend, "deadline": deadline,
              "overrides": {k: v for k, v in overrides.items() if v is not None}}
    # priority order: flip-flop (the headline table), MQRAR PaTH, A5, MQRAR RoPE
    if "flip_flop" in tasks:
        jobs += [dict(common, task="flip_flop", attention=m, budget_s=0.55 * B, eval_margin_s=15)
                 for m in args.models.split(",")]
    mq_models = args.mqrar_models.split(",")
    if "mqrar" in tasks and "path" in mq_models:
        jobs += [dict(common, task="mqrar", attention="path", n_back=n, budget_s=0.45 * B, eval_margin_s=15)
                 for n in (1, 2, 3, 4)]
    if "a5" in tasks:
        jobs += [dict(common, task="a5", attention=m, n_layers=L, budget_s=0.3 * B, eval_margin_s=10)
                 for L in map(int, args.layers.split(",")) for m in args.models.split(",")]
    if "mqrar" in tasks:
        jobs += [dict(common, task="mqrar", attention=m, n_back=n, budget_s=0.35 * B, eval_margin_s=15)
                 for m in mq_models if m != "path" for n in (1, 2, 3, 4)]

    if args.job_budget_s:
        for j in jobs:
            j["budget_s"] = args.job_budget_s
    out_dir = Path(args.out)
    results = {t: [] for t in tasks}
    files = {"flip_flop": "flip_flop.json", "a5": "a5_layers.json", "mqrar": "mqrar.json"}
    earlier = {}
    if args.merge_from:
        import json
        new_tags = {t: {job_tag(j) for j in jobs if j["task"] == t} for t in tasks}
        for t in tasks:
            f = Path(args.merge_from) / files[t]
            if f.exists():
                old = json.loads(f.read_text())
                keep = [r for r in old["runs"] if "error" not in r and job_tag(r["job"]) not in new_tags[t]]
                earlier[t] = {"provenance": old["provenance"], "runs_kept": [job_tag(r["job"]) for r in keep],
                              "merged_from": old.get("merged_from", [])}
                results[t] = keep
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool:
        futs = {pool.submit(run_job, j): j for j in jobs}
        for fut in cf.as_completed(futs):
            r = fut.result()
            j = r["job"]
            tag = job_tag(j)
            if "error" in r:
                print(f"[{time.time() - t_start:6.1f}s] {tag} FAILED\n{r['error']}", flush=True)
            else:
                fin = {k: round(v["accuracy"], 5) for k, v in r["final"].items()}
                print(f"[{time.time() - t_start:6.1f}s] {tag} steps={r['steps_done']} "
                      f"train={r['train_seconds']:.0f}s acc={fin}", flush=True)
            results[j["task"]].append(r)
            summary = summarise(j["task"], results[j["task"]])
            summary.update({"preset": args.preset, "path_backend": backend, "budget_s": args.budget_s})
            if j["task"] in earlier:
                summary["merged_from"] = [earlier[j["task"]]]
            save_result(out_dir / files[j["task"]], summary, command=command)
    print(f"done in {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
