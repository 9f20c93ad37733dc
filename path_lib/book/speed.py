"""Helpers of the speed chapter (``book/part3/10_speed``): time floors, the benchmark record, profiles by phase.

    from path_lib.book import speed
    from path_lib.book.notebook import optional_record

    bench = speed.normalize_bench(optional_record("bench"))       # None when there is no record
    f = speed.time_floor("path", "fwd", T=4096, D=64, B=8, H=32, ceilings=bench["ceilings"])
    f.ms, f.bound                                                 # the floor and what sets it

**Floors.** A GPU has two ceilings: the rate of its matrix products (``matmul_tflops``, bf16) and its
memory bandwidth (``copy_gbs``). A computation that needs ``ops`` matrix-product operations and must
move ``nbytes`` bytes cannot take less than ``max(ops / rate, nbytes / bandwidth)``:

* operations (:func:`floor_flops`): attention's forward is FlashAttention's count
  (:func:`path_lib.theory.costs.flash_attention_cost`, causal, two products per tile); its backward does five
  products per tile (recompute ``S = Q K^T``, ``dP = dO V^T``, ``dV = P^T dO``, ``dQ = dS K``,
  ``dK = dS^T Q``), so forward+backward is 3.5 times the forward. PaTH's forward is the segmented
  kernel's count (:func:`path_lib.theory.costs.path_segmented_cost`); its backward contains at least
  attention's five products, so PaTH's forward+backward floor is its forward plus attention's backward.
* bytes (:func:`floor_bytes`): every input read once and every output written once: q, k, v, o (and
  do, dq, dk, dv) in the 16-bit input dtype; w, beta, g (and dw, dbeta, dg) in float32.

**Records.** :func:`normalize_bench` turns the benchmark record (``load_record("bench")``, written by
``benchmarks/bench_path.py``) into one form: schema 2 as is; the older format (no ``schema`` key, its
``sdpa`` rows the FlashAttention backend forced, no ceilings) with ``sdpa`` renamed ``sdpa_flash`` and a
plain note that the default SDPA and the ceilings are missing.

**Profiles.** :func:`phase_of` maps a CUDA kernel name of the recorded profile (``"profile"``) to the
phase of the algorithm it belongs to (:data:`PHASES`); unknown names go to ``"other"``.

**T4.** :func:`launcher_config` replays the kernels' launcher (block length, then one segment) against
the recorded ahead-of-time compile reports; :data:`T4` holds the datasheet figures of an NVIDIA T4.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..theory import costs

__all__ = ["METHODS", "KINDS", "KIND_OF", "FLA_PAIR", "BACKEND_NAMES", "BENCH_SHAPES", "TOKENS", "T4",
           "PHASES", "KERNEL_PHASES",
           "normalize_bench", "method_label", "sdpa_backends", "lookup", "measured_ms", "shapes",
           "methods_present", "reference_method", "check_ceilings",
           "floor_flops", "floor_bytes", "Floor", "time_floor", "path_config", "floor_for",
           "time_table", "versus_fla", "ratios_between", "floor_ratios", "count_table", "memory_table",
           "repeat_check", "PHASE_GROUPS", "phase_of", "phase_ms", "phase_groups", "unmapped_kernels", "phase_table",
           "group_table",
           "compile_summary", "compile_table", "launcher_config", "t4_floors", "agrees",
           "plot_times", "plot_floor_ratios", "plot_memory", "plot_phases", "render_floor", "decode_tables",
           "lm_throughput_tables", "LM_NAMES", "cp_tables", "short_conv_table", "KERNEL_TARGETS", "target_status"]

#: method key in the record -> (label, colour, line style, marker). ``sdpa``'s label gets its backend.
METHODS = {
    "sdpa": ("SDPA default", "#264653", "-", "o"),
    "sdpa_flash": ("SDPA, FlashAttention backend forced", "#8d99ae", "--", "o"),
    "ours_path": ("this book's PaTH", "#e76f51", "-", "s"),
    "ours_pathfox": ("this book's PaTH-FoX", "#e76f51", "--", "s"),
    "fla_path": ("fla PaTH", "#2a9d8f", "-", "^"),
    "fla_pathfox": ("fla PaTH-FoX", "#2a9d8f", "--", "^"),
    "fla_fox": ("fla FoX", "#e9c46a", ":", "v"),
}
#: what each kind of computation is, for its floor
KINDS = {"attention": "causal softmax attention", "fox": "attention with a forget gate (FoX)",
         "path": "PaTH attention", "pathfox": "PaTH attention with a forget gate (PaTH-FoX)"}
KIND_OF = {"sdpa": "attention", "sdpa_flash": "attention", "fla_fox": "fox", "ours_path": "path",
           "fla_path": "path", "ours_pathfox": "pathfox", "fla_pathfox": "pathfox"}
#: this book's kernel -> fla's implementation of the same computation
FLA_PAIR = {"ours_path": "fla_path", "ours_pathfox": "fla_pathfox"}
BACKEND_NAMES = {"cudnn": "cuDNN", "flash": "FlashAttention", "efficient": "memory-efficient",
                 "math": "math", "unknown": "backend not identified"}
#: tokens per benchmark batch (B * T), except at T = 65536 (B = 1)
TOKENS = 32768
#: the benchmark's shapes (D, T, B, H) in the record's schema 2: B * T = 32768 up to T = 16384, then B = 1
BENCH_SHAPES = tuple((D, T, max(1, TOKENS // T), 2048 // D) for D in (64, 128) for T in (1024, 4096, 16384, 65536))
#: NVIDIA T4 datasheet figures (not measured here): dense fp16 tensor-core rate, memory bandwidth, and
#: the most shared memory one program (thread block) may use on compute capability 7.5
T4 = {"name": "NVIDIA T4", "matmul_tflops": 65.0, "copy_gbs": 320.0, "smem_bytes": 64 * 1024, "sms": 40,
      "source": "NVIDIA T4 datasheet: 65 TFLOP/s fp16 (tensor cores), 320 GB/s GDDR6, 40 multiprocessors"}

_HALF, _FP32 = 2, 4


# ------------------------------------------------------------------------------------------------
# the benchmark record
# ------------------------------------------------------------------------------------------------

def check_ceilings(ceilings) -> Optional[dict]:
    """``{"matmul_tflops": float, "copy_gbs": float, ...}`` if both rates are positive finite numbers, else None."""
    if not isinstance(ceilings, dict):
        return None
    try:
        rate, bw = float(ceilings["matmul_tflops"]), float(ceilings["copy_gbs"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(rate) and math.isfinite(bw) and rate > 0 and bw > 0):
        return None
    return dict(ceilings, matmul_tflops=rate, copy_gbs=bw)


def normalize_bench(rec: Optional[dict]) -> Optional[dict]:
    """The benchmark record in one form (a copy), or None for None.

    Adds ``schema`` (1 for the older format), ``ceilings`` (checked, or None), ``has_default_sdpa`` and
    ``notes`` (plain sentences on what the record lacks). In the older format the ``sdpa`` rows are
    PyTorch's FlashAttention backend forced: they become ``sdpa_flash``. Raises ValueError for rows
    without their shape, method or mode.
    """
    if rec is None:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("rows"), list):
        raise ValueError("a benchmark record is a dict with a list of rows")
    out = copy.deepcopy(rec)
    schema = out.get("schema", 1)
    notes = []
    for i, r in enumerate(out["rows"]):
        missing = [k for k in ("D", "T", "B", "H", "method", "mode") if k not in r]
        if missing:
            raise ValueError(f"row {i} of the benchmark record lacks {missing}: {r}")
        if schema == 1 and r["method"] == "sdpa":
            r["method"] = "sdpa_flash"
    if schema == 1:
        notes.append("This record is of the older format: its SDPA rows are PyTorch's FlashAttention "
                     "backend forced, and PyTorch's default SDPA dispatch is not in it.")
    out["schema"] = schema
    out["ceilings"] = check_ceilings(out.get("ceilings"))
    if out["ceilings"] is None:
        notes.append("The record has no measured ceilings of its GPU, so no time floors are computed from it.")
    out["has_default_sdpa"] = any(r["method"] == "sdpa" for r in out["rows"])
    if schema != 1 and not out["has_default_sdpa"]:
        notes.append("The record has no rows for PyTorch's default SDPA dispatch.")
    timed = out.get("kernel_code_sha256")
    try:
        import path_lib.kernels
        verified, equivalent = path_lib.kernels._VERIFIED_CODE_SHA256, path_lib.kernels.TIMING_EQUIVALENT
    except ImportError:         # the kernels package is not importable here: nothing to compare with
        verified, equivalent = timed, {}
    if timed is not None and timed != verified:
        notes.append(f"This record timed kernel code {timed[:8]}, not the verified code here ({verified[:8]}): "
                     + equivalent.get(timed, "no equivalence between the two is recorded, so these times are "
                                             "not the current kernels'") + ".")
    out["notes"] = notes
    return out


def sdpa_backends(rec: Optional[dict]) -> Dict[str, int]:
    """How many measured default-SDPA rows ran each backend (``cudnn``, ``flash``, ...), most first."""
    counts: Dict[str, int] = {}
    for r in (rec or {}).get("rows", []):
        if r["method"] == "sdpa" and r.get("ms") is not None:
            b = str(r.get("backend") or "unknown")
            counts[b] = counts.get(b, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def method_label(rec: Optional[dict], method: str) -> str:
    """The label of ``method``; the default SDPA's names its backend from the record: "SDPA default (cuDNN)"."""
    label = METHODS[method][0] if method in METHODS else method
    if method == "sdpa":
        names = [BACKEND_NAMES.get(b, b) for b in sdpa_backends(rec)]
        label += f" ({', '.join(names)})" if names else ""
    return label


def lookup(rec: Optional[dict], D: int, T: int, method: str, mode: str) -> Optional[dict]:
    """The row of (D, T, method, mode), or None."""
    for r in (rec or {}).get("rows", []):
        if (r["D"], r["T"], r["method"], r["mode"]) == (D, T, method, mode):
            return r
    return None


def measured_ms(rec: Optional[dict], D: int, T: int, method: str, mode: str) -> Optional[float]:
    """The measured median ms of (D, T, method, mode); None when not recorded, failed or not measured."""
    r = lookup(rec, D, T, method, mode)
    ms = None if r is None else r.get("ms")
    return float(ms) if ms is not None and math.isfinite(float(ms)) and float(ms) > 0 else None


def shapes(rec: Optional[dict]) -> List[Tuple[int, int, int, int]]:
    """The (D, T, B, H) of the record, sorted; :data:`BENCH_SHAPES` without a record."""
    if rec is None:
        return list(BENCH_SHAPES)
    return sorted({(r["D"], r["T"], r["B"], r["H"]) for r in rec["rows"]})


def methods_present(rec: Optional[dict]) -> List[str]:
    """The methods with at least one row, in the order of :data:`METHODS`."""
    have = {r["method"] for r in (rec or {}).get("rows", [])}
    return [m for m in METHODS if m in have] + sorted(have - set(METHODS))


def reference_method(rec: Optional[dict]) -> Optional[str]:
    """The SDPA the ratios are taken to: the default dispatch when recorded, else the forced FlashAttention backend."""
    have = methods_present(rec)
    return "sdpa" if "sdpa" in have else ("sdpa_flash" if "sdpa_flash" in have else None)


def _cell(rec, D, T, method, mode) -> Optional[str]:
    """'failed' / 'not measured' / '-' for a row without a time, None when it has one."""
    r = lookup(rec, D, T, method, mode)
    if r is None:
        return "-"
    if measured_ms(rec, D, T, method, mode) is None:
        return "not measured" if str(r.get("error", "")).startswith("not measured") else "failed"
    return None


# ------------------------------------------------------------------------------------------------
# floors
# ------------------------------------------------------------------------------------------------

def _check_kind_mode(kind: str, mode: str):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if mode not in ("fwd", "fwdbwd"):
        raise ValueError(f"mode must be 'fwd' or 'fwdbwd', got {mode!r}")


def _attention_counts(T: int, D: int) -> Tuple[int, int]:
    """(forward, backward) matrix-product operations of causal attention on one head."""
    parts = costs.flash_attention_cost(T, D).flops_by_part
    # forward: Q K^T and P V; backward: S = Q K^T again, dQ = dS K, dK = dS^T Q (over D), dP = dO V^T, dV = P^T dO
    return parts["logits"] + parts["values"], 3 * parts["logits"] + 2 * parts["values"]


def floor_flops(kind: str, mode: str, T: int, D: int, B: int = 1, H: int = 1, *, block_size: int = 64,
                seg_blocks: Optional[int] = None) -> int:
    """Operations that ``kind`` (attention, fox, path, pathfox) must do for ``mode`` (fwd, fwdbwd), B * H heads.

    Attention and FoX: FlashAttention's count; forward+backward 3.5 times the forward (five products
    per tile in the backward where the forward has two). PaTH and PaTH-FoX: the segmented kernel's
    forward count (``block_size``, ``seg_blocks``: the kernel's blocking; default
    :func:`path_lib.theory.costs.default_seg_blocks`); forward+backward adds attention's backward, a lower
    bound for PaTH's backward, which does at least those products.
    """
    _check_kind_mode(kind, mode)
    fwd, bwd = _attention_counts(T, D)
    if kind in ("path", "pathfox"):
        fwd = costs.path_segmented_cost(T, D, block_size=block_size, seg_blocks=seg_blocks).flops
    return (fwd + (bwd if mode == "fwdbwd" else 0)) * B * H


def floor_bytes(kind: str, mode: str, T: int, D: int, B: int = 1, H: int = 1, *, io_bytes: int = _HALF,
                param_bytes: int = _FP32) -> int:
    """Bytes that must move: every input read once, every output written once (B * H heads).

    q, k, v, o (and do, dq, dk, dv for the backward) have ``io_bytes`` per element (bf16: 2); PaTH's w
    ``[T, D]`` and beta ``[T]``, the gate g ``[T]`` (FoX, PaTH-FoX) and their gradients ``param_bytes``
    (float32: 4).
    """
    _check_kind_mode(kind, mode)
    n = 2 if mode == "fwdbwd" else 1                     # the backward reads do and writes one gradient per input
    elems_io = 3 * T * D + T * D + (4 * T * D if mode == "fwdbwd" else 0)   # q, k, v, o; do, dq, dk, dv
    params = (T * D + T if kind in ("path", "pathfox") else 0) + (T if kind in ("fox", "pathfox") else 0)
    return (elems_io * io_bytes + n * params * param_bytes) * B * H


@dataclass(frozen=True)
class Floor:
    """A time floor: ``flops`` and ``nbytes`` (all heads), and the times they take at the two ceilings
    (``compute_ms``, ``memory_ms``; None without ceilings)."""

    kind: str
    mode: str
    flops: int
    nbytes: int
    compute_ms: Optional[float]
    memory_ms: Optional[float]

    @property
    def ms(self) -> Optional[float]:
        """The floor, ``max(compute_ms, memory_ms)`` (None without ceilings)."""
        return None if self.compute_ms is None else max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> Optional[str]:
        """``"compute"`` or ``"memory"``: which ceiling sets the floor (None without ceilings)."""
        return None if self.compute_ms is None else ("compute" if self.compute_ms >= self.memory_ms else "memory")

    @property
    def intensity(self) -> float:
        """Operations per byte moved (compare the GPU's ``matmul_tflops * 1e3 / copy_gbs``)."""
        return self.flops / self.nbytes


def time_floor(kind: str, mode: str, T: int, D: int, B: int = 1, H: int = 1, ceilings: Optional[dict] = None,
               **count_kw) -> Floor:
    """The :class:`Floor` of ``kind`` in ``mode`` at (T, D, B, H) with ``ceilings`` (``matmul_tflops``,
    ``copy_gbs``); ``count_kw`` (``block_size``, ``seg_blocks``) go to :func:`floor_flops`."""
    flops = floor_flops(kind, mode, T, D, B, H, **count_kw)
    nbytes = floor_bytes(kind, mode, T, D, B, H)
    c = check_ceilings(ceilings)
    if c is None:
        return Floor(kind, mode, flops, nbytes, None, None)
    return Floor(kind, mode, flops, nbytes, flops / (c["matmul_tflops"] * 1e12) * 1e3,
                 nbytes / (c["copy_gbs"] * 1e9) * 1e3)


def path_config(rec: Optional[dict], D: int, T: int, mode: str) -> Tuple[int, int]:
    """(block length, blocks per segment) of this book's kernels at (D, T, mode).

    From the record's ``config`` of its ``ours_path`` (or ``ours_pathfox``) row, else what
    ``path_lib.kernels.blocking`` picks on an H200. A record's ``config`` is the whole ``path_lib.kernels.KernelConfig``
    (``as_dict``, with ``forward_only``) from v17 on; older ones hold only ``block`` and ``seg_blocks``,
    and may give a ``fwd`` row the configuration of a call with gradients: for those the launcher's rule
    for calls that record no gradient is applied on top (``path_lib.kernels.kernel_config(..., forward_only=True)``:
    at least ``_FWD_ONLY_SEG_BLOCKS`` blocks per segment with 16-bit inputs at block 64)."""
    import torch
    import path_lib.kernels

    found = None
    for method in ("ours_path", "ours_pathfox"):
        cfg = (lookup(rec, D, T, method, mode) or {}).get("config")
        if isinstance(cfg, dict) and cfg.get("block") and cfg.get("seg_blocks"):
            found = int(cfg["block"]), int(cfg["seg_blocks"]), "forward_only" in cfg
            break
    if found is None:
        return path_lib.kernels.blocking(T, D, forward_only=mode == "fwd")
    bt, sb, full = found
    if mode == "fwd" and not full:
        rule = path_lib.kernels.kernel_config(path_lib.kernels.H200, torch.bfloat16, D, T, forward_only=True, block_size=bt)
        sb = max(sb, rule.seg_blocks)
    return bt, sb


def floor_for(rec: Optional[dict], method: str, D: int, T: int, mode: str) -> Optional[Floor]:
    """The floor of ``method``'s kind at a recorded shape, with the record's ceilings (None: shape not recorded).

    PaTH methods (this book's and fla's) are held to the segmented count at this book's blocking."""
    shp = [s for s in shapes(rec) if s[:2] == (D, T)]
    if not shp:
        return None
    _, _, B, H = shp[0]
    kind = KIND_OF.get(method, "attention")
    kw = {}
    if kind in ("path", "pathfox"):
        bt, sb = path_config(rec, D, T, mode)
        kw = dict(block_size=bt, seg_blocks=sb)
    return time_floor(kind, mode, T, D, B, H, (rec or {}).get("ceilings"), **kw)


# ------------------------------------------------------------------------------------------------
# tables
# ------------------------------------------------------------------------------------------------

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
            empty = _cell(rec, D, T, m, mode)
            if empty is not None:
                cells.append(empty)
                continue
            ms = measured_ms(rec, D, T, m, mode)
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
    out = {}
    if rec is None or rec.get("ceilings") is None:
        return out
    for r in rec["rows"]:
        ms = measured_ms(rec, r["D"], r["T"], r["method"], r["mode"])
        f = floor_for(rec, r["method"], r["D"], r["T"], r["mode"]) if ms is not None else None
        if f is not None and f.ms:
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
        f = {k: {m: None for m in ("fwd", "fwdbwd")} for k in ("attention", "path")}
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


# ------------------------------------------------------------------------------------------------
# profiles by phase
# ------------------------------------------------------------------------------------------------

#: phases of the algorithm, in order, with their colours
PHASES = {
    "precompute: per block (UT transform)": "#a8dadc",
    "precompute: per segment (products)": "#457b9d",
    "forward: diagonal block and own segment": "#2a9d8f",
    "forward: earlier segments": "#8ab17d",
    "forward: all segments in one kernel (fla)": "#52796f",
    "backward: query side": "#e9c46a",
    "backward: key side": "#f4a261",
    "backward: intra-segment": "#e76f51",
    "backward: chain rule through the segment products": "#bc4749",
    "backward: chain rule through the UT transform": "#6a040f",
    "gate cumsum": "#9d4edd",
    "PyTorch glue": "#adb5bd",
    "other": "#000000",
}

#: coarser groups of the phases, to compare two algorithms that split their work differently
PHASE_GROUPS = {
    "precompute": ("precompute: per block (UT transform)", "precompute: per segment (products)"),
    "forward attention loops": ("forward: diagonal block and own segment", "forward: earlier segments",
                                "forward: all segments in one kernel (fla)"),
    "backward attention loops": ("backward: query side", "backward: key side", "backward: intra-segment"),
    "backward chain rule": ("backward: chain rule through the segment products",
                            "backward: chain rule through the UT transform"),
    "gate cumsum": ("gate cumsum",),
    "PyTorch glue": ("PyTorch glue",),
    "other": ("other",),
}

#: Triton kernel name -> phase, this book's kernels (``kernels/path_lib/kernels/_triton_kernels.py``) and fla-core 0.6's.
#: fla's per-chunk preprocessing also computes the diagonal block's attention; the backward's
#: ``delta = do . o`` (one number per query row) is grouped with the query side.
KERNEL_PHASES = {
    # this book's kernels
    "_ut_a_kernel": "precompute: per block (UT transform)",
    "_ut_kernel": "precompute: per block (UT transform)",
    "_prep_kernel": "precompute: per block (UT transform)",
    "_seg_fwd_kernel": "precompute: per segment (products)",
    "_pair_kernel": "precompute: per segment (products)",
    "_fwd_kernel": "forward: diagonal block and own segment",
    "_fwd_inter_kernel": "forward: earlier segments",
    "_delta_kernel": "backward: query side",
    "_bwd_inter_q_kernel": "backward: query side",
    "_bwd_inter_kv_kernel": "backward: key side",
    "_bwd_intra_kernel": "backward: intra-segment",
    "_bwd_diag_kernel": "backward: intra-segment",
    "_seg_bwd_kernel": "backward: chain rule through the segment products",
    "_seg_grad_kernel": "backward: chain rule through the segment products",
    "_bwd_block_kernel": "backward: chain rule through the UT transform",
    # fla-core (fla/ops/path_attn, fla/ops/utils)
    "chunk_scaled_dot_kkt_fwd_kernel": "precompute: per block (UT transform)",
    "merge_16x16_to_64x64_inverse_kernel": "precompute: per block (UT transform)",
    "solve_tril_16x16_kernel": "precompute: per block (UT transform)",
    "intra_chunk_preprocess_fwd_kernel": "precompute: per block (UT transform)",
    "chunk_cumprod_householder_fwd_kernel": "precompute: per segment (products)",
    "transform_q_fwd_kernel": "precompute: per segment (products)",
    "parallel_path_fwd_kernel": "forward: all segments in one kernel (fla)",
    "parallel_attn_bwd_kernel_preprocess": "backward: query side",
    "parallel_path_bwd_dq_kernel": "backward: query side",
    "parallel_path_bwd_dkv_kernel": "backward: key side",
    "parallel_path_bwd_intra_chunk_kernel": "backward: intra-segment",
    "chunk_transform_qk_bwd_kernel_prepare": "backward: intra-segment",
    "chunk_cumprod_householder_bwd_kernel": "backward: chain rule through the segment products",
    "intra_chunk_preprocess_bwd_kernel": "backward: chain rule through the UT transform",
    "chunk_global_cumsum_scalar_kernel": "gate cumsum",
    "chunk_global_cumsum_vector_kernel": "gate cumsum",
}


def phase_of(name: str) -> str:
    """The phase of a CUDA kernel name from the profile (:data:`KERNEL_PHASES`; PyTorch's scans and flips,
    the gate's cumulative sum and its backward, are ``"gate cumsum"``; PyTorch's other kernels (copies,
    fills, additions) ``"PyTorch glue"``; anything else ``"other"``)."""
    if name in KERNEL_PHASES:
        return KERNEL_PHASES[name]
    if "at::native" in name or name.startswith(("Memcpy", "Memset")):
        return "gate cumsum" if ("scan" in name or "flip" in name) else "PyTorch glue"
    return "other"


def phase_ms(row: dict) -> Dict[str, float]:
    """``{phase: ms per iteration}`` of one profile row, in the order of :data:`PHASES` (only phases it has)."""
    out = {p: 0.0 for p in PHASES}
    for name, ms in (row.get("kernels_ms") or {}).items():
        out[phase_of(name)] += float(ms)
    return {p: v for p, v in out.items() if v > 0}


def phase_groups(row: dict) -> Dict[str, float]:
    """``{group: ms per iteration}`` of one profile row (:data:`PHASE_GROUPS`), every group present."""
    per = phase_ms(row)
    return {g: sum(per.get(p, 0.0) for p in ps) for g, ps in PHASE_GROUPS.items()}


def unmapped_kernels(profile: Optional[dict], methods: Optional[Sequence[str]] = None) -> Dict[str, List[str]]:
    """``{method: [kernel names in phase "other"]}`` of the profile's rows (of ``methods`` only, if given)."""
    out: Dict[str, List[str]] = {}
    for r in (profile or {}).get("rows", []):
        if methods is not None and r["method"] not in methods:
            continue
        names = [k for k in (r.get("kernels_ms") or {}) if phase_of(k) == "other"]
        if names:
            out.setdefault(r["method"], [])
            out[r["method"]] += [n for n in names if n not in out[r["method"]]]
    return out


def _profile_row(profile, D, T, method, mode):
    return next((r for r in (profile or {}).get("rows", [])
                 if (r["D"], r["T"], r["method"], r["mode"]) == (D, T, method, mode)), None)


def phase_table(profile: dict, D: int, T: int, mode: str, methods: Sequence[str]) -> Optional[str]:
    """Markdown: ms per iteration of each phase for ``methods`` at (D, T, mode), the sum of the kernels and
    the wall time per iteration (CUDA events); None when the profile has none of these rows."""
    rows = {m: _profile_row(profile, D, T, m, mode) for m in methods}
    rows = {m: r for m, r in rows.items() if r is not None}
    if not rows:
        return None
    per = {m: phase_ms(r) for m, r in rows.items()}
    lines = ["| phase | " + " | ".join(method_label(None, m) for m in rows) + " |", "|---|" + "---|" * len(rows)]
    for p in PHASES:
        if any(p in v for v in per.values()):
            lines.append(f"| {p} | " + " | ".join(f"{per[m].get(p, 0.0):.2f}" for m in rows) + " |")
    lines.append("| sum of the kernels | " + " | ".join(f"{sum(per[m].values()):.2f}" for m in rows) + " |")
    lines.append("| **wall time per iteration** | " + " | ".join(f"**{rows[m]['wall_ms']:.2f}**" for m in rows) + " |")
    return "\n".join(lines)


def group_table(profile: dict, mode: str, methods: Sequence[str]) -> Optional[str]:
    """Markdown: for every (D, T) of the profile and each of ``methods``, ms per iteration of each group
    of phases (:data:`PHASE_GROUPS`, the empty groups left out) and the wall time; None without rows."""
    rows = [r for r in (profile or {}).get("rows", []) if r["mode"] == mode and r["method"] in methods]
    if not rows:
        return None
    rows.sort(key=lambda r: (r["D"], r["T"], list(methods).index(r["method"])))
    per = [phase_groups(r) for r in rows]
    groups = [g for g in PHASE_GROUPS if any(p[g] > 0 for p in per)]
    lines = ["| D | T | method | " + " | ".join(groups) + " | wall time |", "|---|---|---|" + "---|" * (len(groups) + 1)]
    for r, p in zip(rows, per):
        lines.append(f"| {r['D']} | {r['T']} | {method_label(None, r['method'])} | "
                     + " | ".join(f"{p[g]:.2f}" for g in groups) + f" | **{r['wall_ms']:.2f}** |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# ahead-of-time compile reports (T4)
# ------------------------------------------------------------------------------------------------

def compile_summary(records: Dict[str, Optional[dict]], smem_bytes: int = T4["smem_bytes"]) -> List[dict]:
    """Per recorded configuration (record, dtype, D, block length, with segments or one): the number of
    kernels, the largest shared memory (and its kernel), the kernels over ``smem_bytes``, the largest
    spill (stack bytes per thread) and whether every kernel fits."""
    groups: Dict[tuple, list] = {}
    for name, rec in records.items():
        for r in (rec or {}).get("rows", []):
            if r.get("error") or "shared_bytes" not in r:
                continue
            single = "SEGS" in r
            groups.setdefault((name, r["dtype"], r["D"], r["BT"], single), []).append(r)
    out = []
    for (name, dtype, D, BT, single), rows in sorted(groups.items(), key=lambda kv: kv[0][1:] + (kv[0][0],)):
        big = max(rows, key=lambda r: r["shared_bytes"])
        over = [r["kernel"] for r in rows if r["shared_bytes"] > smem_bytes]
        out.append(dict(record=name, dtype=dtype, D=D, BT=BT, one_segment=single, kernels=len(rows),
                        max_shared=big["shared_bytes"], max_kernel=big["kernel"], over=over,
                        max_stack=max(r.get("stack_bytes", 0) for r in rows), fits=not over))
    return out


def compile_table(summary: List[dict], smem_bytes: int = T4["smem_bytes"]) -> str:
    """Markdown of :func:`compile_summary`."""
    lines = [f"| dtype | D | block | segments | kernels | largest shared memory | fits {smem_bytes // 1024} KiB | "
             "over the limit | largest spill, bytes/thread |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        over = ", ".join(f"`{k}`" for k in s["over"]) or "-"
        lines.append(f"| {s['dtype']} | {s['D']} | {s['BT']} | {'one' if s['one_segment'] else 'several'} | "
                     f"{s['kernels']} | {s['max_shared'] / 1024:.0f} KiB (`{s['max_kernel']}`) | "
                     f"{'yes' if s['fits'] else '**no**'} | {over} | {s['max_stack']} |")
    return "\n".join(lines)


def launcher_config(summary: List[dict], D: int, dtype: str, smem_bytes: int = T4["smem_bytes"]) -> dict:
    """What the kernels' launcher runs on a GPU with ``smem_bytes`` of shared memory per program, replayed
    against the compile reports (:func:`compile_summary`): the first block length from the launcher's
    table (``path_lib.kernels.kernel_config`` for a device with that much shared memory), halved down to 16
    while a kernel does not fit, then one segment.

    Returns ``{"BT", "one_segment", "fits", "why"}``; ``fits`` is None when a needed configuration was not
    compiled (nothing is claimed then).
    """
    import torch
    import path_lib.kernels

    # the block length depends on the shared memory only (a described device: no fallback state applies)
    device = path_lib.kernels.DeviceInfo("cuda", (8, 0), smem_bytes, f"{smem_bytes} B of shared memory")
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    BT = path_lib.kernels.kernel_config(device, torch_dtype, D, 1024).block
    steps = []
    while True:
        seg = [s for s in summary if (s["dtype"], s["D"], s["BT"], s["one_segment"]) == (dtype, D, BT, False)]
        if not seg:
            return dict(BT=BT, one_segment=False, fits=None, why="; ".join(steps + [f"block {BT} not compiled"]))
        if all(s["fits"] for s in seg):
            return dict(BT=BT, one_segment=False, fits=True, why="; ".join(steps + [f"block {BT}: every kernel fits"]))
        steps.append(f"block {BT}: {', '.join(seg[0]['over'])} too large")
        if BT > 16:
            BT //= 2
            continue
        one = [s for s in summary if (s["dtype"], s["D"], s["BT"], s["one_segment"]) == (dtype, D, BT, True)]
        if not one:
            return dict(BT=BT, one_segment=True, fits=None, why="; ".join(steps + ["one segment not compiled"]))
        ok = all(s["fits"] for s in one)
        return dict(BT=BT, one_segment=True, fits=ok,
                    why="; ".join(steps + [f"one segment: {'every kernel fits' if ok else 'still too large'}"]))


def t4_floors(summary: List[dict], shape_list: Iterable[Tuple[int, int, int, int]], dtype: str = "fp16",
              gpu: dict = T4) -> Tuple[str, List[dict]]:
    """Markdown: floors *computed* from ``gpu``'s datasheet figures (not measured), for attention and for
    PaTH at the blocking the launcher runs on that GPU (:func:`launcher_config`: block length, one
    segment or several), per shape; and the rows. PaTH's cells are '-' where the compile reports do not
    show a configuration that fits."""
    lines = ["| D | T | B | PaTH blocking there | attention floor fwd / fwd+bwd, ms | PaTH floor fwd / fwd+bwd, ms | "
             "PaTH fwd ops / attention's |", "|---|---|---|---|---|---|---|"]
    data = []
    for D, T, B, H in shape_list:
        cfg = launcher_config(summary, D, dtype, gpu["smem_bytes"])
        a = {m: time_floor("attention", m, T, D, B, H, gpu) for m in ("fwd", "fwdbwd")}
        p = None
        if cfg["fits"]:
            bt = cfg["BT"]
            sb = -(-T // bt) if cfg["one_segment"] else costs.default_seg_blocks(T, D, bt)
            p = {m: time_floor("path", m, T, D, B, H, gpu, block_size=bt, seg_blocks=sb) for m in ("fwd", "fwdbwd")}
        data.append(dict(D=D, T=T, B=B, H=H, config=cfg, attention=a, path=p))
        blocking = f"block {cfg['BT']}, {'one segment' if cfg['one_segment'] else 'segments'}" if cfg["fits"] else "-"
        pcell = f"{p['fwd'].ms:.1f} / {p['fwdbwd'].ms:.1f}" if p else "-"
        ratio = f"{p['fwd'].flops / a['fwd'].flops:.2f}x" if p else "-"
        lines.append(f"| {D} | {T} | {B} | {blocking} | {a['fwd'].ms:.1f} / {a['fwdbwd'].ms:.1f} | {pcell} | {ratio} |")
    return "\n".join(lines), data


# ------------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------------

def _per_tokens(rec, value, B, T):
    """``value`` scaled to the record's batch of tokens (B * T is 32768 except at T = 65536, B = 1)."""
    return value * (rec or {}).get("tokens", TOKENS) / (B * T)


SHORT_KIND = {"attention": "attention", "fox": "FoX", "path": "PaTH", "pathfox": "PaTH-FoX"}


def _grid(rec, title):
    import matplotlib.pyplot as plt

    Ds = sorted({s[0] for s in shapes(rec)})
    fig, axes = plt.subplots(len(Ds), 2, figsize=(9.5, 0.9 + 2.9 * len(Ds)), squeeze=False)
    for i, D in enumerate(Ds):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            axes[i, j].set_title(f"D = {D}, {'forward' if mode == 'fwd' else 'forward + backward'}", fontsize=9)
            axes[i, j].set_xlabel("T (log scale)", fontsize=8)
    if rec is not None and "provenance" in rec:
        from ..experiments.provenance import provenance_label
        fig.suptitle(title + "\n" + provenance_label(rec).split("; command:")[0], fontsize=7)
    return fig, axes, Ds


def _finish(fig, axes, rec, ylabel):
    """Log-log axes with the record's T as ticks and plain numbers; one legend for the figure, below."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    Ts = sorted({s[1] for s in shapes(rec)})
    handles = {}
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(Ts, [str(T) for T in Ts], fontsize=7)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="y", labelsize=7)
        ax.set_ylabel(ylabel, fontsize=8)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    rows = -(-len(handles) // 3)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, fontsize=7, frameon=False)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.4, (0.2 + 0.17 * rows) / height), 1, 1))
    return fig


def _plot_methods(ax, rec: dict, points) -> None:
    """One line per method of the record on ``ax``: ``points(method)`` gives its ``[(T, y)]`` (none: no line)."""
    for m in methods_present(rec):
        pts = points(m)
        if pts:
            _, color, ls, marker = METHODS.get(m, (m, "k", "-", "o"))
            ax.plot(*zip(*pts), marker=marker, ms=3.5, color=color, ls=ls, label=method_label(rec, m))


def plot_times(rec: dict):
    """Figure: median ms per 32768 tokens against T (log-log), per D (rows) and mode (columns), every
    method of the record, and the attention and PaTH floors (with ceilings)."""
    fig, axes, Ds = _grid(rec, "measured time")
    for i, D in enumerate(Ds):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            ax = axes[i, j]
            _plot_methods(ax, rec, lambda m: [(T, _per_tokens(rec, measured_ms(rec, D, T, m, mode), B, T))
                                              for d, T, B, _ in shapes(rec)
                                              if d == D and measured_ms(rec, D, T, m, mode) is not None])
            if rec.get("ceilings"):
                for kind, method, ls in (("attention", "sdpa", ":"), ("path", "ours_path", "-.")):
                    pts = [(T, _per_tokens(rec, floor_for(rec, method, D, T, mode).ms, B, T))
                           for d, T, B, _ in shapes(rec) if d == D]
                    ax.plot(*zip(*pts), color="k", lw=0.9, ls=ls, label=f"floor: {KINDS[kind]}")
    return _finish(fig, axes, rec, "ms per 32768 tokens")


def plot_floor_ratios(rec: dict):
    """Figure: measured time / floor against T per D and mode (None without ceilings)."""
    ratios = floor_ratios(rec)
    if not ratios:
        return None
    fig, axes, Ds = _grid(rec, "measured time / floor (1 = at the floor)")
    for i, D in enumerate(Ds):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            ax = axes[i, j]
            _plot_methods(ax, rec, lambda m: sorted((T, v) for (mm, md, d, T), v in ratios.items()
                                                    if (mm, md, d) == (m, mode, D)))
            ax.axhline(1.0, color="k", lw=0.8)
    return _finish(fig, axes, rec, "measured / floor")


def plot_memory(rec: dict):
    """Figure: peak MiB above the inputs per 32768 tokens against T, per D and mode (flat: O(T d) memory)."""
    fig, axes, Ds = _grid(rec, "peak memory above the inputs")
    for i, D in enumerate(Ds):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            def peaks(m, D=D, mode=mode):
                pts = []
                for d, T, B, _ in shapes(rec):
                    r = lookup(rec, D, T, m, mode) if d == D else None
                    if r is not None and r.get("peak_mib") is not None and measured_ms(rec, D, T, m, mode):
                        pts.append((T, _per_tokens(rec, float(r["peak_mib"]), B, T)))
                return pts
            _plot_methods(axes[i, j], rec, peaks)
    return _finish(fig, axes, rec, "peak MiB per 32768 tokens")


def plot_phases(profile: dict, methods: Sequence[str]):
    """Figure: ms per iteration of each method, stacked by phase, one panel per (D, T) and mode of the profile."""
    import matplotlib.pyplot as plt

    keys = sorted({(r["D"], r["T"]) for r in profile["rows"] if r["method"] in methods})
    fig, axes = plt.subplots(len(keys), 2, figsize=(10, 1.0 + 0.45 * len(methods) * len(keys)), squeeze=False)
    seen = set()
    for i, (D, T) in enumerate(keys):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            ax = axes[i, j]
            names = []
            for y, m in enumerate(methods):
                r = _profile_row(profile, D, T, m, mode)
                names.append(method_label(None, m))
                left = 0.0
                for p, ms in (phase_ms(r).items() if r else ()):
                    ax.barh(y, ms, left=left, color=PHASES[p])
                    seen.add(p)
                    left += ms
            ax.set_yticks(range(len(methods)), names, fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel("ms per iteration", fontsize=8)
            ax.set_title(f"D = {D}, T = {T}, {'forward' if mode == 'fwd' else 'forward + backward'}", fontsize=9)
    from matplotlib.patches import Patch

    used = [p for p in PHASES if p in seen]
    fig.legend([Patch(color=PHASES[p]) for p in used], used, loc="lower center", ncol=3, fontsize=7, frameon=False)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.45, (0.2 + 0.17 * -(-len(used) // 3)) / height), 1, 1))
    return fig


def render_floor(rec: Optional[dict], T: int, D: int, mode: str):
    """Figure for the widget: at (T, D, mode), each kind's operations and bytes (left), its two floors
    (bars, with ceilings) and the measured times of the record's methods of that kind (markers, with
    their ratio to the floor) (right)."""
    import matplotlib.pyplot as plt

    shp = [s for s in shapes(rec) if s[:2] == (D, T)] or [(D, T, max(1, TOKENS // T), 2048 // D)]
    B, H = shp[0][2], shp[0][3]
    ceil = (rec or {}).get("ceilings")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw=dict(width_ratios=[1, 1.7]))
    kinds = list(KINDS)
    floors = {}
    for kind in kinds:
        kw = {}
        if kind in ("path", "pathfox"):
            bt, sb = path_config(rec, D, T, mode)
            kw = dict(block_size=bt, seg_blocks=sb)
        floors[kind] = time_floor(kind, mode, T, D, B, H, ceil, **kw)
    ys = list(range(len(kinds)))
    ax1.barh(ys, [floors[k].flops / 1e12 for k in kinds], color="#457b9d", height=0.6)
    for y, k in zip(ys, kinds):
        ax1.text(0.02, y, f"{floors[k].nbytes / 1e9:.2f} GB to move", transform=ax1.get_yaxis_transform(),
                 va="center", fontsize=7, color="white")
    ax1.set_yticks(ys, [SHORT_KIND[k] for k in kinds], fontsize=8)
    ax1.set_ylim(len(kinds) - 0.5, -0.5)
    ax1.set_xlabel("TFLOP counted", fontsize=8)
    ax1.set_title(f"T = {T}, D = {D}, B = {B}, H = {H}: the work", fontsize=9)
    plotted = False
    if ceil:
        ax2.barh([y - 0.3 for y in ys], [floors[k].compute_ms for k in kinds], height=0.16, color="#264653",
                 label=f"floor from operations ({ceil['matmul_tflops']:.0f} TFLOP/s)")
        ax2.barh([y - 0.12 for y in ys], [floors[k].memory_ms for k in kinds], height=0.16, color="#a8dadc",
                 label=f"floor from bytes ({ceil['copy_gbs']:.0f} GB/s)")
        for y, k in zip(ys, kinds):
            ax2.text(floors[k].ms * 1.08, y - 0.3, f"{floors[k].ms:.2f} ms", va="center", fontsize=6)
        plotted = True
    else:
        ax2.text(0.5, 0.5, "no measured ceilings in this record:\nno time floor", transform=ax2.transAxes,
                 ha="center", va="center", fontsize=8, color="0.4")
    slot = {k: 0 for k in kinds}
    for m in methods_present(rec):
        ms, kind = measured_ms(rec, D, T, m, mode), KIND_OF.get(m)
        if ms is None or kind not in kinds:
            continue
        y = kinds.index(kind) + 0.1 + 0.2 * slot[kind]
        slot[kind] += 1
        _, color, _, marker = METHODS[m]
        ax2.plot(ms, y, marker=marker, ms=7, ls="", color=color, mec="k", label=method_label(rec, m))
        if floors[kind].ms:
            ax2.text(ms * 1.12, y, f"{ms / floors[kind].ms:.1f}x", va="center", fontsize=6)
        plotted = True
    if plotted:
        ax2.set_xscale("log")
        ax2.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax2.set_yticks(ys, [""] * len(kinds))
    ax2.set_ylim(len(kinds) - 0.5, -0.5)
    ax2.set_xlabel("ms (log scale)", fontsize=8)
    ax2.set_title(f"{'forward' if mode == 'fwd' else 'forward + backward'}: floors (bars), measured (markers)",
                  fontsize=9)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------
# decoding: benchmarks/bench_decode.py's record
# ----------------------------------------------------------------------------------------------

def decode_tables(rec: dict, *, target: float = 2.0) -> Tuple[str, str, str]:
    """The decode record (``RECORDS["decode"]``) as ``(speed table, precision table, summary sentence)``.

    Speed: one row per batch and cache length, microseconds per step of the Triton cache and of SDPA
    (its backend named), their ratio, the byte floor of that ratio, the host time per step of both and
    the PyTorch cache's ratio to SDPA. Precision: the relative error of the stored keys (median over
    keys) after each checkpoint, per key store. The sentence counts the cells within ``target`` of SDPA
    and names the others with their host times."""
    rows = sorted(rec["rows"], key=lambda r: (r["batch"], r["length"]))
    speed_md = ["| batch | cache length | ours (us) | SDPA (us) | ours / SDPA | byte floor | host per step, ours / SDPA "
                "(us) | PyTorch cache / SDPA |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speed_md.append(f"| {r['batch']} | {r['length']:,} | {1e3 * r['triton_ms']:.0f} | {1e3 * r['sdpa_ms']:.0f} "
                        f"({r['sdpa_backend']}) | {r['ratio_to_sdpa']:.2f} | {r['floor_ratio']:.2f} | "
                        f"{1e3 * r['triton_host_ms']:.0f} / {1e3 * r['sdpa_host_ms']:.0f} | "
                        f"{r['pytorch_ratio_to_sdpa']:.1f} |")
    prec = rec["precision"]["rows"]
    steps = [p["steps"] for p in next(iter(prec.values()))]
    prec_md = ["| key store | " + " | ".join(f"after {s:,} steps" for s in steps) + " |",
               "|---|" + "---|" * len(steps)]
    for name, pts in prec.items():
        prec_md.append(f"| {name} | " + " | ".join(f"{p['key_rel_err_median']:.1e}" for p in pts) + " |")
    slow = [r for r in rows if r["ratio_to_sdpa"] > target]
    summary = f"{len(rows) - len(slow)} of {len(rows)} cells are within {target:g}x of SDPA"
    if slow:
        summary += "; not " + ", ".join(
            f"batch {r['batch']} at {r['length']:,} ({r['ratio_to_sdpa']:.2f}x, host {1e3 * r['triton_host_ms']:.0f} "
            f"against {1e3 * r['sdpa_host_ms']:.0f} us per step)" for r in slow)
    return "\n".join(speed_md), "\n".join(prec_md), summary + "."


# ----------------------------------------------------------------------------------------------
# a training step end to end: benchmarks/bench_lm_throughput.py's record
# ----------------------------------------------------------------------------------------------

LM_NAMES = {"rope": "RoPE", "path": "PaTH", "path_fox": "PaTH-FoX"}


def lm_throughput_tables(rec: dict, *, target: float = 0.8) -> Tuple[str, Optional[str], str]:
    """The end-to-end record (``RECORDS["lm_throughput"]``) as ``(throughput table, GPU-time table or None,
    summary sentence)``.

    Throughput: one row per model and mode (eager; the step captured in a CUDA graph), tokens per second,
    ms per step, the ratio to RoPE's tokens per second in the same mode and, eager, the memory a step adds.
    GPU time (eager rows with a profile): ms per step by kind of kernel and the fraction of the unprofiled
    step the GPU was busy. The sentence gives PaTH's and PaTH-FoX's ratios in both modes against ``target``
    and the attention kernels' GPU time against SDPA's."""
    rows = rec["rows"]
    md = ["| model | attention runs on | mode | tokens / s | ms per step | x RoPE | memory a step adds (MiB) |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        mem = f"{r['step_peak_mib']:,.0f}" if r.get("step_peak_mib") and not r["cuda_graph"] else "-"
        backend = f"SDPA ({rec['rope_sdpa_backend']})" if r["attention"] == "rope" else "Triton kernels"
        md.append(f"| {LM_NAMES[r['attention']]} | {backend} | {'CUDA graph' if r['cuda_graph'] else 'eager'} | "
                  f"{r['tokens_per_second']:,.0f} | {1e3 * r['seconds_per_step']:.1f} | {r['ratio_to_rope']:.2f} | {mem} |")
    prof = [r for r in rows if not r["cuda_graph"] and r.get("profile")]
    att = ("attention (SDPA)", "PaTH kernels")
    gpu_md = None
    if prof:
        kinds = [k for k in dict.fromkeys(k for r in prof for k in r["profile"]["gpu_ms_by_kind"]) if k not in att]
        lines = ["| model | attention kernels | " + " | ".join(kinds) + " | GPU in all | GPU busy |",
                 "|---|" + "---|" * (len(kinds) + 3)]
        for r in prof:
            by = r["profile"]["gpu_ms_by_kind"]
            lines.append(f"| {LM_NAMES[r['attention']]} | {sum(by.get(k, 0.0) for k in att):.1f} | "
                         + " | ".join(f"{by.get(k, 0.0):.1f}" for k in kinds)
                         + f" | {r['profile']['gpu_ms']:.1f} | {r['profile']['gpu_ms'] / (1e3 * r['seconds_per_step']):.0%} |")
        gpu_md = "\n".join(lines)
    parts = []
    for graph in (True, False):
        got = {r["attention"]: r["ratio_to_rope"] for r in rows if r["cuda_graph"] == graph}
        if "path" in got:
            parts.append(f"{got['path']:.2f}x" + (f" (PaTH-FoX {got['path_fox']:.2f}x)" if "path_fox" in got else "")
                         + (" with the step in a CUDA graph" if graph else " eager"))
    ratios = [r["ratio_to_rope"] for r in rows if r["attention"] != "rope"]
    summary = (f"Against RoPE's tokens per second, PaTH trains at {' and at '.join(parts)}: the target of {target:g}x is "
               f"{'met' if all(x >= target for x in ratios) else 'not met'}")
    by = {r["attention"]: r["profile"]["gpu_ms_by_kind"] for r in prof}
    if "path" in by and "rope" in by:
        summary += (f". Of the GPU time per step, the PaTH kernels take {by['path'].get('PaTH kernels', 0.0):.1f} ms "
                    f"where SDPA takes {by['rope'].get('attention (SDPA)', 0.0):.1f} ms in the RoPE model")
    return "\n".join(md), gpu_md, summary + "."


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
            cells.append(mark(max(peaks[0] / peaks[1], peaks[2] / peaks[3]), 1.0, "memory")
                         if all(p for p in peaks) else "-")
        ratios = [measured_ms(rec, D, T, o, mode) / measured_ms(rec, D, T, f, mode)
                  for mode in ("fwd", "fwdbwd") for o, f in pairs
                  if measured_ms(rec, D, T, o, mode) and measured_ms(rec, D, T, f, mode)]
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
    return max(ours) / sdpa if sdpa and all(ours) else None


# ----------------------------------------------------------------------------------------------
# PaTH's direction map w in one pass: benchmarks/bench_short_conv.py's record
# ----------------------------------------------------------------------------------------------

def short_conv_table(rec: dict) -> Tuple[str, str]:
    """The short-convolution record (``RECORDS["short_conv"]``) as ``(table, sentence)``.

    One row per shape and method (``pytorch``: the layer's ``F.conv1d``, SiLU, cast and ``F.normalize``;
    ``fused``: ``path_lib.kernels.short_conv``): forward and forward+backward ms with the ratio to the
    byte floor, and the errors against float64 (w: max abs; du, dweight: relative to the largest). The
    sentence gives the fused pass's speed-up over PyTorch's at each shape."""
    rows = {(r["B"], r["T"], r["C"], r["H"], r["method"], r["mode"]): r for r in rec["rows"]}
    conv_shapes = list(dict.fromkeys(k[:4] for k in rows))
    names = {"pytorch": "PyTorch (conv1d, SiLU, cast, normalize)", "fused": "fused Triton pass"}
    md = ["| B x T x C, heads | method | forward ms (x floor) | forward+backward ms (x floor) | error w | du | dweight |",
          "|---|---|---|---|---|---|---|"]
    gains = []
    for B, T, C, H in conv_shapes:
        for method in ("pytorch", "fused"):
            f, fb = rows[B, T, C, H, method, "fwd"], rows[B, T, C, H, method, "fwdbwd"]
            md.append(f"| {B} x {T:,} x {C}, {H} | {names[method]} | {f['ms']:.3f} ({f['x_floor']:.1f}x) | "
                      f"{fb['ms']:.3f} ({fb['x_floor']:.1f}x) | {f['w_max_abs']:.1e} | {f['du_rel']:.1e} | "
                      f"{f['dweight_rel']:.1e} |")
        ratio = lambda mode: rows[B, T, C, H, "pytorch", mode]["ms"] / rows[B, T, C, H, "fused", mode]["ms"]  # noqa: E731
        gains.append(f"{ratio('fwd'):.1f}x forward and {ratio('fwdbwd'):.1f}x forward+backward at "
                     f"B x T x C = {B} x {T:,} x {C}")
    sentence = "The fused pass is faster than PyTorch's by " + "; by ".join(gains) + "."
    err = {m: max(r["w_max_abs"] for k, r in rows.items() if k[4] == m) for m in ("pytorch", "fused")}
    closer = "closer to" if err["fused"] < err["pytorch"] else "no closer to"
    sentence += (f" Its w is {closer} the float64 map than PyTorch's (largest error {err['fused']:.1e} against "
                 f"{err['pytorch']:.1e}).")
    return "\n".join(md), sentence


# ----------------------------------------------------------------------------------------------
# context parallel on one GPU: benchmarks/cp_single_gpu.py's record
# ----------------------------------------------------------------------------------------------

#: the record's method keys, in the table's order: (key, column label)
CP_METHODS = (("context_parallel", "blockwise (1 rank)"), ("context_parallel_kernels", "kernels (1 rank)"),
              ("chunked_4_kernels", "kernels (4 chunks)"), ("kernels", "kernels alone"))


def _ratio_span(xs: List[float]) -> str:
    f = lambda x: f"{x:.0f}x" if x >= 10 else f"{x:.1f}x"     # noqa: E731
    return f(min(xs)) if max(xs) < 1.05 * min(xs) else f"{f(min(xs))} to {f(max(xs))}"


def cp_tables(rec: dict) -> Tuple[str, str]:
    """The single-GPU context-parallel record (``RECORDS["cp_single_gpu"]``) as ``(table, sentence)``.

    One row per case, one column per method (the context-parallel call with the blockwise scan and with the
    kernels at world size 1, the 4-chunk kernel path, the kernels alone): the worst error over the output
    and the six gradients (``||x - ref|| / ||ref||`` against float64) and, in parentheses, the forward+backward
    ms where the record timed it ("-" where the method did not run). The sentence gives the cases passed and the time ratios to the kernels alone."""
    cases = [c for c in rec["cases"] if "errors" in c]
    md = ["| case | " + " | ".join(label for _, label in CP_METHODS) + " |", "|---|" + "---|" * len(CP_METHODS)]
    ratios = {m: [] for m, _ in CP_METHODS}
    for c in cases:
        err = {m: max(e.values()) for m, e in c["errors"].items()}
        ms = c.get("ms_fwd_bwd", {})
        cell = lambda m: " ".join(([f"{err[m]:.1e}"] if m in err else ["-"]) +   # noqa: E731
                                  ([f"({ms[m]:.0f} ms)" if ms[m] >= 10 else f"({ms[m]:.1f} ms)"] if m in ms else []))
        md.append(f"| {c['name']} | " + " | ".join(cell(m) for m, _ in CP_METHODS) + " |")
        for m, _ in CP_METHODS:
            if m in ms and "kernels" in ms and m != "kernels":
                ratios[m].append(ms[m] / ms["kernels"])
    parts = [f"{label} {_ratio_span(ratios[m])}" for m, label in CP_METHODS if ratios.get(m)]
    sentence = (f"{rec['passed']} of {rec['total']} checks within the tolerances ("
                + ", ".join(f"{k} {v:g}" for k, v in rec["tolerances"].items())
                + f"), world size {rec['world_size']}, {rec['backend']}. Forward+backward time against the kernels "
                "alone: " + "; ".join(parts) + ".")
    return "\n".join(md), sentence
