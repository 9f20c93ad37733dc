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

from ..validation import check_format, check_int, check_mapping, check_number, check_seed, check_str

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
    check_mapping(result, "result", keys=("config", "steps_done"))
    cfg = check_mapping(result["config"], "result['config']", keys=("steps",))
    check_str(model, "model")
    check_seed(seed)
    for key, value in check_mapping(metrics, "metrics", optional=True).items() if metrics is not None else ():
        check_str(key, "metrics' keys")
        check_number(value, f"metrics[{key!r}]", finite=False)
    check_str(data_key, "data_key", optional=True)
    check_int(batch_size, "batch_size", minimum=1, optional=True)
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
    _check_records(records)
    check_int(min_seeds, "min_seeds", minimum=1)
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


#: what every record of :func:`run_record` holds (the comparisons read these)
_RECORD_KEYS = ("model", "seed", "steps_done", "steps_planned", "tokens_seen", "complete", "schedule", "data_key",
                "metrics")


def _check_records(records, name: str = "records") -> None:
    """A list (or tuple) of :func:`run_record` dicts, or a TypeError / ValueError naming ``name``."""
    if not isinstance(records, (list, tuple)):
        raise TypeError(f"{name} must be a list of run_record() dicts, got {type(records).__name__}")
    for i, r in enumerate(records):
        check_mapping(r, f"{name}[{i}]", keys=_RECORD_KEYS)


def json_key(d) -> str:
    """``d`` as canonical JSON (sorted keys): equal for equal content."""
    return json.dumps(d, sort_keys=True, default=str)


def _metric(r: Dict, metric) -> float:
    """``metric`` of record ``r``: finite, or a ValueError naming ``metric``."""
    if callable(metric):
        value = metric(r)
    else:
        if metric not in r["metrics"]:
            raise ValueError(f"metric {metric!r} is not among the record's metrics {sorted(r['metrics'])}")
        value = r["metrics"][metric]
    return check_number(value, f"metric {metric!r} of {r['model']} (seed {r['seed']})")


def comparison_table(records: Sequence[Dict], metric, *, min_seeds: int = 3,
                     models: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Mean and spread of ``metric`` across seeds, per model, from equal-training runs only.

    ``metric``: a key of ``record["metrics"]`` or a callable ``record -> float``. ``models``: a subset
    and order (default: order of first appearance). Raises :class:`UnequalTrainingError` (one plain
    sentence) when :func:`check_equal_training` finds the runs unequal. Returns ``{model: {"mean", "std"
    (sample, ddof 1), "min", "max", "n", "values", "seeds"}}``.
    """
    _check_records(records)
    if not (isinstance(metric, str) or callable(metric)):
        raise TypeError(f"metric must be a key of the records' metrics or a callable, got {type(metric).__name__}")
    check_int(min_seeds, "min_seeds", minimum=1)
    if models is not None:
        if isinstance(models, str) or not isinstance(models, (list, tuple)):
            raise TypeError(f"models must be a list of model names, got {type(models).__name__}")
        unknown = [m for m in models if m not in {r["model"] for r in records}]
        if unknown:
            raise ValueError(f"models {unknown} have no record (the records hold {sorted({r['model'] for r in records})})")
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
    check_str(a, "a")
    check_str(b, "b")
    if a == b:
        raise ValueError(f"a and b must be two models, got {a!r} twice")
    t = comparison_table(records, metric, min_seeds=min_seeds, models=[a, b])
    d = [x - y for x, y in zip(t[a]["values"], t[b]["values"])]
    return {"diffs": d, "mean": math.fsum(d) / len(d), "all_negative": all(x < 0 for x in d),
            "all_positive": all(x > 0 for x in d)}


def format_comparison(table: Dict[str, Dict], *, label: str = "value", fmt: str = "{:.3f}") -> str:
    """A Markdown table of :func:`comparison_table`'s result: mean ± sd, min – max, seeds."""
    check_mapping(table, "table")
    for m, t in table.items():
        check_mapping(t, f"table[{m!r}]", keys=("mean", "std", "min", "max", "n"))
    check_str(label, "label")
    check_format(fmt)
    rows = [f"| model | {label}: mean ± sd | min – max | seeds |", "|---|---|---|---|"]
    for m, t in table.items():
        sd = fmt.format(t["std"]) if math.isfinite(t["std"]) else "-"
        rows.append(f"| {m} | {fmt.format(t['mean'])} ± {sd} | {fmt.format(t['min'])} – {fmt.format(t['max'])} "
                    f"| {t['n']} |")
    return "\n".join(rows)
