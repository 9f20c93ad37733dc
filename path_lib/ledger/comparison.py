"""Equal training: the compact record of one run (model, seed), the check that runs form an equal-training
comparison, and the comparisons that refuse unequal runs (re-exported by :mod:`path_lib.training.loop`).

    records = [run_record(result, model="path", seed=s, metrics={...}) for ...]
    check_equal_training(records)          # None, or one plain sentence saying why not
    comparison_table(records, "id_error")  # {model: {"mean", "std", "min", "max", "n", "values", "seeds"}}
"""
from __future__ import annotations

import json
import math
from typing import Dict, List, Optional, Sequence

__all__ = ["UnequalTrainingError", "run_record", "check_equal_training", "comparison_table", "paired_differences",
           "format_comparison", "json_key"]



class UnequalTrainingError(ValueError):
    """Raised by :func:`comparison_table` when the runs do not form an equal-training comparison.
    The message is one plain sentence saying why."""


def run_record(result: Dict, *, model: str, seed: int, metrics: Optional[Dict[str, float]] = None,
               data_key: Optional[str] = None, batch_size: Optional[int] = None) -> Dict:
    """The compact per-(model, seed) record every comparison is built from.

    ``result`` is :func:`train`'s dict (or one with the same keys). ``data_key`` names the data stream
    (task, its parameters, batch size, data seed): runs of one seed must share it to have seen the same
    batches. Returns ``{"model", "seed", "steps_done", "steps_planned", "tokens_seen", "final_lr",
    "wall_seconds", "complete", "schedule", "data_key", "metrics"}`` (JSON-ready).
    """
    cfg = result["config"]
    schedule = {k: cfg[k] for k in ("lr", "warmup", "min_lr_ratio", "weight_decay", "grad_clip") if k in cfg}
    schedule["betas"] = list(cfg.get("betas", ()))
    schedule["steps"] = result.get("steps_requested", cfg["steps"])
    if batch_size is not None:
        schedule["batch_size"] = batch_size
    planned = result["steps_requested"] if "steps_requested" in result else result["steps_planned"]
    return {"model": model, "seed": int(seed), "steps_done": int(result["steps_done"]),
            "steps_planned": int(planned),
            "tokens_seen": int(result.get("tokens_seen", 0)), "final_lr": float(result.get("final_lr", float("nan"))),
            "wall_seconds": float(result.get("wall_seconds", result.get("train_seconds", 0.0))),
            "complete": bool(result.get("complete", False)), "schedule": schedule,
            "data_key": data_key if data_key is not None else f"data_seed={result.get('data_seed', seed)}",
            "metrics": dict(metrics or {})}


def check_equal_training(records: Sequence[Dict], *, min_seeds: int = 3) -> Optional[str]:
    """None if ``records`` (from :func:`run_record`) form an equal-training comparison, else one plain
    sentence saying why not. Equal training means: every run complete; the same steps planned and done,
    the same tokens and the same schedule for all; every model with the same seeds, at least
    ``min_seeds`` of them; and, within a seed, the same data stream (``data_key``) for every model."""
    if not records:
        return "There are no runs to compare."
    for r in records:
        if not r.get("complete"):
            return (f"The run of {r['model']} (seed {r['seed']}) is incomplete: {r['steps_done']} of "
                    f"{r['steps_planned']} steps, so no comparison is shown.")
    for key, what in (("steps_planned", "planned steps"), ("steps_done", "steps done"),
                      ("tokens_seen", "training tokens")):
        vals = {r[key] for r in records}
        if len(vals) > 1:
            return f"The runs differ in {what} ({', '.join(map(str, sorted(vals)))}), so they are not comparable."
    sched = {json_key(r["schedule"]) for r in records}
    if len(sched) > 1:
        return "The runs used different optimiser schedules, so they are not comparable."
    seeds: Dict[str, List[int]] = {}
    for r in records:
        seeds.setdefault(r["model"], []).append(r["seed"])
    for m, ss in seeds.items():
        if len(set(ss)) != len(ss):
            return f"{m} has more than one run with the same seed."
    sets = {tuple(sorted(ss)) for ss in seeds.values()}
    if len(sets) > 1:
        return "The models were not all trained with the same seeds."
    n = len(next(iter(sets)))
    if n < min_seeds:
        return f"Each model has {n} seed{'s' if n != 1 else ''}; a comparison needs at least {min_seeds}."
    for seed in next(iter(sets)):
        keys = {r["data_key"] for r in records if r["seed"] == seed}
        if len(keys) > 1:
            return f"With seed {seed} the models did not see the same data, so they are not comparable."
    return None


def json_key(d) -> str:
    """``d`` as canonical JSON (sorted keys): equal for equal content."""
    return json.dumps(d, sort_keys=True, default=str)


def _metric(r: Dict, metric) -> float:
    return float(metric(r)) if callable(metric) else float(r["metrics"][metric])


def comparison_table(records: Sequence[Dict], metric, *, min_seeds: int = 3,
                     models: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Mean and spread of ``metric`` across seeds, per model, from equal-training runs only.

    ``metric``: a key of ``record["metrics"]`` or a callable ``record -> float``. ``models``: a subset
    and order (default: order of first appearance). Raises :class:`UnequalTrainingError` (one plain
    sentence) when :func:`check_equal_training` finds the runs unequal. Returns ``{model: {"mean", "std"
    (sample, ddof 1), "min", "max", "n", "values", "seeds"}}``.
    """
    if models is not None:
        records = [r for r in records if r["model"] in models]
    why = check_equal_training(records, min_seeds=min_seeds)
    if why is not None:
        raise UnequalTrainingError(why)
    order = list(models) if models is not None else list(dict.fromkeys(r["model"] for r in records))
    out = {}
    for m in order:
        rs = sorted((r for r in records if r["model"] == m), key=lambda r: r["seed"])
        vals = [_metric(r, metric) for r in rs]
        mean = math.fsum(vals) / len(vals)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else float("nan")
        out[m] = {"mean": mean, "std": std, "min": min(vals), "max": max(vals), "n": len(vals),
                  "values": vals, "seeds": [r["seed"] for r in rs]}
    return out


def paired_differences(records: Sequence[Dict], metric, a: str, b: str, *, min_seeds: int = 3) -> Dict:
    """``metric(a) - metric(b)`` seed by seed (the same batches per seed): ``{"diffs", "mean",
    "all_negative", "all_positive"}``. Refuses unequal runs like :func:`comparison_table`."""
    t = comparison_table(records, metric, min_seeds=min_seeds, models=[a, b])
    d = [x - y for x, y in zip(t[a]["values"], t[b]["values"])]
    return {"diffs": d, "mean": math.fsum(d) / len(d), "all_negative": all(x < 0 for x in d),
            "all_positive": all(x > 0 for x in d)}


def format_comparison(table: Dict[str, Dict], *, label: str = "value", fmt: str = "{:.3f}") -> str:
    """A Markdown table of :func:`comparison_table`'s result: mean ± sd, min – max, seeds."""
    rows = [f"| model | {label}: mean ± sd | min – max | seeds |", "|---|---|---|---|"]
    for m, t in table.items():
        sd = fmt.format(t["std"]) if math.isfinite(t["std"]) else "-"
        rows.append(f"| {m} | {fmt.format(t['mean'])} ± {sd} | {fmt.format(t['min'])} – {fmt.format(t['max'])} "
                    f"| {t['n']} |")
    return "\n".join(rows)
