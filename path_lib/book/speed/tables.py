"""Markdown tables of the benchmark record: times, this book's kernels against fla's, memory, the
run-to-run check, operation counts, and the kernels' targets cell by cell."""
from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Tuple

from .bench_record import (FLA_PAIR, _cell, _per_tokens, lookup, measured_ms, method_label, methods_present,
                           reference_method, shapes)
from .floors import Floor, floor_for, path_config, time_floor

def time_table(rec: dict, mode: str) -> str:
    """Markdown: median ms per shape and method for ``mode``, each with its ratio to the reference SDPA
    (:func:`reference_method`); 'failed', 'not measured' or '-' where the record has no time."""
    ref = reference_method(rec)
    present = methods_present(rec)
    lines = ["| D | T | B | " + " | ".join(method_label(rec, m) for m in present) + " |",
             "|---|---|---|" + "---|" * len(present)]
    for D, T, B, _ in shapes(rec):
        base = measured_ms(rec, D, T, ref, mode) if ref else None
        cells = []
        for m in present:
            ms = measured_ms(rec, D, T, m, mode)
            if ms is None:                               # 'failed', 'not measured' or '-' (_cell)
                cells.append(_cell(rec, D, T, m, mode) or "-")
                continue
            cells.append(f"{ms:.2f}" + (f" ({ms / base:.2f}x)" if base and m != ref else ""))
        lines.append(f"| {D} | {T} | {B} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versus_fla(rec: dict) -> Tuple[str, List[float]]:
    """Markdown table of this book's time / fla's (PaTH, PaTH-FoX) per shape and mode (bold: ours slower),
    and the list of all ratios."""
    lines = ["| D | T | mode | PaTH: ours / fla | PaTH-FoX: ours / fla |", "|---|---|---|---|---|"]
    ratios = []
    for D, T, _, _ in shapes(rec):
        for mode in ("fwd", "fwdbwd"):
            cells = []
            for ours, fla in FLA_PAIR.items():
                a, b = measured_ms(rec, D, T, ours, mode), measured_ms(rec, D, T, fla, mode)
                if a is None or b is None:
                    cells.append("-")
                    continue
                ratios.append(a / b)
                cells.append(f"{a / b:.2f}" if a < b else f"**{a / b:.2f}**")
            lines.append(f"| {D} | {T} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines), ratios


def floor_ratios(rec: dict) -> Dict[Tuple[str, str, int, int], float]:
    """``{(method, mode, D, T): measured ms / floor ms}`` for every measured row (empty without ceilings)."""
    out: Dict[Tuple[str, str, int, int], float] = {}
    if rec is None or rec.get("ceilings") is None:
        return out
    for r in rec["rows"]:
        ms = measured_ms(rec, r["D"], r["T"], r["method"], r["mode"])
        f = floor_for(rec, r["method"], r["D"], r["T"], r["mode"]) if ms is not None else None
        if ms is not None and f is not None and f.ms:
            out[r["method"], r["mode"], r["D"], r["T"]] = ms / f.ms
    return out


def ratios_between(rec: Optional[dict], a: str, b: str, mode: str) -> List[Tuple[int, int, float]]:
    """``[(D, T, ms of a / ms of b)]`` at every shape where both were measured in ``mode``."""
    out = []
    for D, T, _, _ in shapes(rec) if rec is not None else []:
        x, y = measured_ms(rec, D, T, a, mode), measured_ms(rec, D, T, b, mode)
        if x is not None and y is not None:
            out.append((D, T, x / y))
    return out


def memory_table(rec: dict) -> str:
    """Markdown: per method, D and mode, the peak MiB above the inputs per 32768 tokens at the shortest and
    the longest recorded T, and their ratio (1: memory linear in T at a fixed number of tokens)."""
    Ds = sorted({s[0] for s in shapes(rec)})
    cols = [(D, mode) for D in Ds for mode in ("fwd", "fwdbwd")]
    lines = ["| method | " + " | ".join(f"D = {D}, {mode}" for D, mode in cols) + " |", "|---|" + "---|" * len(cols)]
    for m in methods_present(rec):
        cells = []
        for D, mode in cols:
            pts = []
            for d, T, B, _ in shapes(rec):
                r = lookup(rec, D, T, m, mode) if d == D else None
                if r is not None and r.get("peak_mib") is not None and measured_ms(rec, D, T, m, mode):
                    pts.append((T, _per_tokens(rec, float(r["peak_mib"]), B, T)))
            if len(pts) < 2:
                cells.append("-")
                continue
            (_, lo), (_, hi) = pts[0], pts[-1]
            cells.append(f"{lo:,.0f} -> {hi:,.0f} ({hi / lo:.2f}x)")
        lines.append(f"| {method_label(rec, m)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def repeat_check(repeat: dict, bench: Optional[dict] = None) -> Tuple[str, List[Tuple[str, float, float]]]:
    """The run-to-run record (ours and fla interleaved, several rounds): a Markdown table of its summary
    with the benchmark record's own ratio at the same cell, and ``(what, recomputed, stated)`` for every
    ratio of medians in the summary, recomputed from the rounds."""
    import statistics

    lines = ["| D | T | mode | ours / fla, median of rounds | range over rounds | ours faster | "
             "in the benchmark record |", "|---|---|---|---|---|---|---|"]
    checks = []
    for s in repeat.get("summary", []):
        by_round: Dict[int, dict] = {}
        for r in repeat.get("rows", []):
            if (r["D"], r["T"], r["mode"]) == (s["D"], s["T"], s["mode"]) and r["method"] in (s["ours"], s["theirs"]):
                by_round.setdefault(r["round"], {})[r["method"]] = r["ms"]
        both = [v for v in by_round.values() if s["ours"] in v and s["theirs"] in v]
        if both:
            a = statistics.median(v[s["ours"]] for v in both)
            b = statistics.median(v[s["theirs"]] for v in both)
            checks.append((f"D={s['D']} T={s['T']} {s['mode']} ratio of medians", a / b, s["ratio_of_medians"]))
        x = measured_ms(bench, s["D"], s["T"], s["ours"], s["mode"]) if bench else None
        y = measured_ms(bench, s["D"], s["T"], s["theirs"], s["mode"]) if bench else None
        here = f"{x / y:.3f}" if x and y else "-"
        lines.append(f"| {s['D']} | {s['T']} | {s['mode']} | {s['ratio_of_medians']:.3f} | {s['ratio_min']:.3f} - "
                     f"{s['ratio_max']:.3f} | {s['ours_faster_rounds']} of {s['rounds']} | {here} |")
    return "\n".join(lines), checks


def count_table(shape_list: Iterable[Tuple[int, int, int, int]], rec: Optional[dict] = None,
                ceilings: Optional[dict] = None) -> Tuple[str, List[dict]]:
    """Markdown: per shape, attention's and PaTH's operations (forward, forward+backward), the bytes that
    must move, the operations per byte and (with ``ceilings``) the floors in ms; and the numbers as dicts."""
    head = ("| D | T | B | attention fwd, GFLOP | PaTH fwd / attention | PaTH fwd+bwd / attention fwd | "
            "PaTH fwd, MB moved | PaTH fwd, flop per byte |")
    sep = "|---|---|---|---|---|---|---|---|"
    if ceilings:
        head += " attention floor fwd / fwd+bwd, ms | PaTH floor fwd / fwd+bwd, ms |"
        sep += "---|---|"
    lines, data = [head, sep], []
    for D, T, B, H in shape_list:
        f: Dict[str, Dict[str, Floor]] = {"attention": {}, "path": {}}         # kind -> mode -> floor
        for mode in ("fwd", "fwdbwd"):
            bt, sb = path_config(rec, D, T, mode)
            f["attention"][mode] = time_floor("attention", mode, T, D, B, H, ceilings)
            f["path"][mode] = time_floor("path", mode, T, D, B, H, ceilings, block_size=bt, seg_blocks=sb)
        a, p = f["attention"], f["path"]
        row = dict(D=D, T=T, B=B, H=H, attention=a, path=p,
                   path_fwd_ratio=p["fwd"].flops / a["fwd"].flops, path_fwdbwd_ratio=p["fwdbwd"].flops / a["fwd"].flops)
        data.append(row)
        line = (f"| {D} | {T} | {B} | {a['fwd'].flops / 1e9:,.0f} | {row['path_fwd_ratio']:.2f}x | "
                f"{row['path_fwdbwd_ratio']:.2f}x | {p['fwd'].nbytes / 1e6:,.0f} | {p['fwd'].intensity:,.0f} |")
        if ceilings:
            line += (f" {a['fwd'].ms:.2f} / {a['fwdbwd'].ms:.2f} | {p['fwd'].ms:.2f} / {p['fwdbwd'].ms:.2f} |")
        lines.append(line)
    return "\n".join(lines), data


def agrees(what: str, computed: float, stated: float, rel: float = 1e-3) -> bool:
    """Print ``what: computed ..., stated ...: agrees`` (or ``DIFFERS``) and return whether they agree
    within ``rel`` (relative)."""
    ok = math.isfinite(computed) and math.isclose(computed, stated, rel_tol=rel, abs_tol=0.0)
    print(f"{what}: computed {computed:.6g}, stated {stated:.6g}: {'agrees' if ok else 'DIFFERS'}")
    return ok


# ----------------------------------------------------------------------------------------------
# the kernels' targets, cell by cell
# ----------------------------------------------------------------------------------------------

#: The kernels' targets (ratios to PyTorch's default SDPA measured in the same run): forward at most 2x
#: at T = 1024 and 1.5x at T >= 4096, forward+backward at most 3x and 2x, for PaTH and PaTH-FoX; peak
#: memory at or below fla's; and the must: faster than fla in every cell.
KERNEL_TARGETS = {"fwd": {1024: 2.0, "longer": 1.5}, "fwdbwd": {1024: 3.0, "longer": 2.0}}


def _target(mode: str, T: int) -> float:
    return KERNEL_TARGETS[mode][1024] if T <= 1024 else KERNEL_TARGETS[mode]["longer"]


def target_status(rec: dict) -> Tuple[str, str]:
    """The speed record's cells against :data:`KERNEL_TARGETS` as ``(table, sentence)``.

    One row per (D, T): for each pass the worse of PaTH's and PaTH-FoX's ratio to the default SDPA with
    its target, the peak memory's ratio to fla's (the worse of the two pairs), and the slower of the
    two ratios to fla's time. "met" where the cell meets its target; the sentence counts the cells
    met per target. Cells the record lacks are left out."""
    pairs = (("ours_path", "fla_path"), ("ours_pathfox", "fla_pathfox"))
    lines = ["| D | T | forward x SDPA (target) | fwd+bwd x SDPA (target) | peak fwd x fla | peak fwd+bwd x fla | "
             "time x fla (must: < 1) |", "|---|---|---|---|---|---|---|"]
    met = {"speed": [0, 0], "memory": [0, 0], "fla": [0, 0]}
    gaps = []                                 # (ratio / target, D, T, mode, ratio) of every speed cell

    def mark(x, limit, kind, strict=False):
        ok = x < limit if strict else x <= limit
        met[kind][0] += ok
        met[kind][1] += 1
        return f"{x:.2f}x" + (" met" if ok else "")
    for D, T, _, _ in shapes(rec):
        cells = []
        for mode in ("fwd", "fwdbwd"):
            x = _worse_ratio(rec, D, T, mode, pairs)
            cells.append(f"{mark(x, _target(mode, T), 'speed')} ({_target(mode, T):g}x)" if x is not None else "-")
            if x is not None:
                gaps.append((x / _target(mode, T), D, T, mode, x))
        for mode in ("fwd", "fwdbwd"):
            peaks = [(lookup(rec, D, T, o, mode) or {}).get("peak_mib") for pair in pairs for o in pair]
            known = [p for p in peaks if p]
            cells.append(mark(max(known[0] / known[1], known[2] / known[3]), 1.0, "memory")
                         if len(known) == len(peaks) else "-")
        times = [(measured_ms(rec, D, T, o, mode), measured_ms(rec, D, T, f, mode))
                 for mode in ("fwd", "fwdbwd") for o, f in pairs]
        ratios = [a / b for a, b in times if a and b]
        cells.append(mark(max(ratios), 1.0, "fla", strict=True) if ratios else "-")
        lines.append(f"| {D} | {T:,} | " + " | ".join(cells) + " |")
    sentence = (f"Speed targets against SDPA met in {met['speed'][0]} of {met['speed'][1]} cells; memory targets "
                f"(at or below fla's peak) in {met['memory'][0]} of {met['memory'][1]}; faster than fla in "
                f"{met['fla'][0]} of {met['fla'][1]} shapes (every pass, PaTH and PaTH-FoX).")
    if gaps:
        far = max(gaps)
        sentence += (f" The farthest speed cell is D = {far[1]}, T = {far[2]:,} "
                     f"({'forward' if far[3] == 'fwd' else 'forward+backward'}, {far[4]:.1f}x SDPA against "
                     f"{_target(far[3], far[2]):g}x).")
    return "\n".join(lines), sentence


def _worse_ratio(rec, D, T, mode, pairs) -> Optional[float]:
    """The worse of PaTH's and PaTH-FoX's time over the default SDPA's at (D, T, mode), or None."""
    sdpa = measured_ms(rec, D, T, "sdpa", mode)
    ours = [measured_ms(rec, D, T, m, mode) for m, _ in pairs]
    known = [t for t in ours if t]
    return max(known) / sdpa if sdpa and len(known) == len(ours) else None
