"""Estimated seconds of every page on a T4 (the free Colab GPU) with the ``small`` preset; an estimate,
not a measurement (``benchmarks/run_chapters.py --installed --preset small`` on a T4 measures it).

    PYTHONPATH=. python benchmarks/estimate_t4.py [--cpu-record benchmarks/results/chapter_times_tiny.json]

Per page, from the CPU record of the book build (``run_chapters.py --installed --preset tiny``, same
commit) and the small preset's sizes, read from the library's tables (the preset table
``path_lib.hardware.PRESET_TABLE`` and the experiments' ``PRESETS``; no notebook code runs here):

* the cells whose work a preset sizes and that run on the GPU (:data:`WORK`): their operations, bytes
  and kernel launches are *counted* for the small preset and turned into seconds by
  :func:`path_lib.hardware.estimate_seconds`, on a T4 and, for comparison, on an H200::

      seconds = flops / (peak rate * ATTAINED) + bytes / (bandwidth * ATTAINED) + launches * LAUNCH_S

* every other cell: its CPU seconds in the book build (Colab's CPU is of the same kind; on a GPU such
  cells are no slower), which also covers imports and start-up.

The counts are coarse on purpose (documented in each ``*_work`` function): training ``6 * params *
tokens`` plus attention ``12 * B * T^2 * d`` per layer, doubled for PaTH; the attention algorithms by
:mod:`path_lib.theory.costs`. Compile times (Triton) are not in it. Writes
``benchmarks/results/chapter_estimates_t4.json``, which :mod:`path_lib.book.chapter_times` reads.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 256


def train_work(d, layers, batch, length, steps, path=False):
    """(flops, bytes, launches) of ``steps`` AdamW steps of a TinyLM: ``6 * params * tokens`` for the
    dense layers, ``3 * 4 * B * T^2 * d`` per layer for attention (forward and backward; twice that for
    PaTH's transforms), 60 activations of ``d`` floats per token and layer moved, the parameters 16 times
    per step (AdamW's state); 150 launches per layer and 100 more per step."""
    params = 12 * layers * d * d + 2 * VOCAB * d
    tokens = batch * length
    flops = 6 * params * tokens + 12 * batch * length ** 2 * d * layers * (2 if path else 1)
    nbytes = 4 * (60 * layers * tokens * d + 16 * params)
    return steps * flops, steps * nbytes, steps * (150 * layers + 100)


def eval_work(d, layers, tokens, length, path=False):
    """(flops, bytes, launches) of forward passes over ``tokens`` tokens in windows of ``length``."""
    params = 12 * layers * d * d + 2 * VOCAB * d
    flops = 2 * params * tokens + 4 * tokens * length * d * layers * (2 if path else 1)
    return flops, 4 * 20 * layers * tokens * d, max(1, tokens // 8192) * 50 * layers


def _add(*works):
    return tuple(sum(w[i] for w in works) for i in range(3))


def flip_flop_work(preset):
    """Chapter 5: 3 seeds of a PaTH and a RoPE model on flip-flop, then the evaluation batches."""
    d, layers = preset.model["d_model"], preset.model.get("n_layers", 1)
    T, steps = preset.task["length"], preset.config.steps
    ev = preset.eval_batches * preset.eval_batch_size * T
    runs = [train_work(d, layers, preset.batch_size, T, steps, path) for path in (True, False)]
    evals = [eval_work(d, layers, ev, T, path) for path in (True, False)]
    return dict(work=_add(*runs, *evals, *runs, *evals, *runs, *evals), precision="fp32")


def blockwise_timing_work(lengths):
    """Chapter 6: 4 calls (a warm-up, 3 timed) of impl="parallel" and impl="blockwise_scan" per length,
    one head, D = 64; 50 launches for the all-pairs form, 20 per block of 64 for the scan."""
    from path_lib.theory import costs

    parts = []
    for T in lengths:
        a, b = costs.path_allpairs_cost(T, 64), costs.path_blockwise_cost(T, 64, block_size=64)
        parts.append((4 * a.flops, 16 * a.hbm_elements, 4 * 50))
        parts.append((4 * b.flops, 16 * b.hbm_elements, 4 * 20 * (T // 64)))
    return dict(work=_add(*parts), precision="fp32")


def decode_kernel_work(n):
    """Chapter 8: ``n`` decode steps of the Triton cache (8 launches a step); its arithmetic is tiny."""
    return dict(work=(0, 0, 8 * n), precision="half")


def precision_work(T_values):
    """Chapter 9: per length, 3 clip levels x (a float64 reference and 3 lower-precision runs) of the
    blockwise algorithm (one head, D = 64); 20 launches per block of 64."""
    from path_lib.theory import costs

    parts = []
    for T in T_values:
        c = costs.path_blockwise_cost(T, 64, block_size=64)
        parts.append((3 * c.flops, 3 * 8 * 4 * c.hbm_elements, 3 * 4 * 20 * (T // 64)))
    flops64 = sum(3 * costs.path_blockwise_cost(T, 64, block_size=64).flops for T in T_values)
    work = _add(*parts)
    return dict(work=work, precision="fp64", note=f"{flops64:.3g} of the flops in float64, all counted so")


def lm_work(cfg, models=("NoPE", "RoPE", "ALiBi", "PaTH", "PaTH-FoX", "TokRot-QKV"), seeds=3):
    """Chapter 12: every model and seed trained ``cfg.steps`` steps (or ``cfg.train_seconds`` each, when
    set), then evaluated at every length of ``cfg.eval_mults`` on ``cfg.eval_tokens`` tokens."""
    parts, budget = [], 0.0
    for name in models:
        path = name.startswith("PaTH")
        for _ in range(seeds):
            if cfg.train_seconds:
                budget += cfg.train_seconds
            else:
                parts.append(train_work(cfg.d_model, cfg.n_layers, cfg.batch, cfg.train_len, cfg.steps, path))
            for m in cfg.eval_mults:
                parts.append(eval_work(cfg.d_model, cfg.n_layers, cfg.eval_tokens, m * cfg.train_len, path))
    return dict(work=_add(*parts), precision="fp32", fixed_seconds=budget)


def conversion_work(cfg, seeds=3):
    """Chapter 12b: per seed the teacher, then 4 arms through stage 1 and 2 (each step also runs the
    teacher forward: 4/3 of a step), a flip-flop probe on 5 arms, and the evaluation of 5 arms."""
    parts = []
    for _ in range(seeds):
        parts.append(train_work(cfg.d_model, cfg.n_layers, cfg.batch, cfg.train_len, cfg.teacher_steps))
        stages = round(4 * (cfg.stage1_steps + cfg.stage2_steps) * 4 / 3)
        parts.append(train_work(cfg.d_model, cfg.n_layers, cfg.batch, cfg.train_len, stages, True))
        parts.append(train_work(cfg.d_model, cfg.n_layers, cfg.probe_batch, cfg.train_len, 5 * cfg.probe_steps, True))
        for m in cfg.eval_mults:
            parts.append(eval_work(cfg.d_model, cfg.n_layers, 5 * cfg.eval_tokens, m * cfg.train_len, True))
    return dict(work=_add(*parts), precision="fp32")


def _sizes(key):
    """The sizes ``key`` of :data:`path_lib.hardware.PRESET_TABLE` in a preset."""
    def get(preset):
        from path_lib.hardware import preset_sizes
        return preset_sizes(key, preset=preset)
    return get


def _experiment(module, task=None):
    """An experiment's configuration in a preset: ``module.PRESETS[preset]`` (a task's, for the training
    loop's table)."""
    def get(preset):
        import importlib
        presets = importlib.import_module(module).PRESETS
        return (presets[task] if task else presets)[preset]
    return get


#: page -> (a text of the cells whose work is counted, the counting function, the sizes it counts as a
#: function of the preset's name: a row of the preset table or an experiment's configuration)
WORK = {
    "book/part2/05_expressivity": ('train_task("flip_flop", att, preset', flip_flop_work,
                                   _experiment("path_lib.training.loop", "flip_flop")),
    "book/part3/06_blockwise": ("timings[impl].append(best_time(", blockwise_timing_work, _sizes("blockwise.lengths")),
    "book/part3/08_decoding": ("got = gpu.step(", decode_kernel_work, _sizes("decoding.kernel_steps")),
    "book/part3/09_precision": ("errors[T, bmax, mode] =", precision_work, _sizes("precision.lengths")),
    "book/part4/12_lm_experiments": ("live = run_experiment(live_cfg", lm_work, _experiment("path_lib.experiments.lm")),
    "book/part4/12b_conversion": ("live = run_conversion(live_cfg", conversion_work,
                                  _experiment("path_lib.experiments.convert_lm")),
}


def code_cells(page: str) -> dict:
    nb = json.loads((ROOT / f"{page}.ipynb").read_text())
    return {i: "".join(c["source"]) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"}


def estimate_page(row: dict) -> dict:
    """The estimate of one page from its CPU row (``run_chapters.py``'s ``pages`` entry)."""
    from path_lib.hardware import estimate_seconds

    page = row["page"]
    cpu_cells = {i: s for i, s in row["cells"]}
    out = dict(page=page, preset="small", ok=True, cpu_seconds=row["seconds"])
    if page not in WORK:
        out.update(seconds=row["seconds"], basis="CPU seconds of the book build (no preset sizes GPU work here)")
        return out
    marker, count, sizes = WORK[page]
    counted = count(sizes("small"))
    cells = [i for i, src in code_cells(page).items() if marker in src]
    if not cells:
        raise ValueError(f"{page}: no cell holds {marker!r}")
    flops, nbytes, launches = counted["work"]
    fixed = counted.get("fixed_seconds", 0.0)
    gpu = {g: fixed + estimate_seconds(flops, nbytes, launches, gpu=g, precision=counted["precision"])
           for g in ("t4", "h200")}
    rest = row["seconds"] - sum(cpu_cells.get(i, 0.0) for i in cells)
    out.update(seconds=round(rest + gpu["t4"], 1), counted_cells=cells, flops=flops, bytes=nbytes,
               launches=launches, precision=counted["precision"], fixed_seconds=fixed,
               counted_seconds_t4=round(gpu["t4"], 2), counted_seconds_h200=round(gpu["h200"], 2),
               other_cells_cpu_seconds=round(rest, 1),
               basis="counted work of the preset's cells on a T4 + CPU seconds of the other cells")
    if counted.get("note"):
        out["note"] = counted["note"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-record", default=str(ROOT / "benchmarks/results/chapter_times_tiny.json"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/chapter_estimates_t4.json"))
    args = ap.parse_args(argv)
    from path_lib import hardware
    from path_lib.records import write_result

    cpu = json.loads(Path(args.cpu_record).read_text())
    if not str(cpu["provenance"]["device"]).upper().startswith("CPU") or cpu.get("preset") != "tiny":
        raise ValueError(f"--cpu-record must be a CPU record of the tiny preset, got {args.cpu_record}")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if head and not str(cpu["provenance"]["commit"]).startswith(head):
        print(f"note: the CPU record is of commit {cpu['provenance']['commit']}, this checkout is {head}")
    rows = [estimate_page(r) for r in cpu["pages"] if r["ok"]]
    for r in rows:
        print(f"{r['page']:<36} T4 estimate {r['seconds']:7.1f} s   (CPU {r['cpu_seconds']:6.1f} s)")
    data = dict(gpu="T4", preset="small", estimate=True, cpu_record=str(Path(args.cpu_record).name),
                cpu_record_commit=cpu["provenance"]["commit"],
                formula="flops / (peak * ATTAINED) + bytes / (bandwidth * ATTAINED) + launches * LAUNCH_S",
                attained=hardware.ATTAINED, launch_s=hardware.LAUNCH_S,
                rates={k: vars(v) for k, v in hardware.GPUS.items()}, pages=rows)
    write_result(args.out, data, command="PYTHONPATH=. python benchmarks/estimate_t4.py"
                 + "".join(" " + a for a in (sys.argv[1:] if argv is None else argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
