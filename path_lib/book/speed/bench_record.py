"""The benchmark record of ``benchmarks/bench_path.py`` (``load_record("bench")``): its methods and shapes,
one form for both of its formats (:func:`normalize_bench`), and look-ups of its rows."""
from __future__ import annotations

import copy
import math
from typing import Dict, List, Optional, Tuple

from ...records import schema_version

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
    without their shape, method or mode, and :class:`path_lib.records.SchemaError` (a ValueError) for a
    schema version not in ``path_lib.records.SCHEMAS["bench"]``.
    """
    if rec is None:
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("rows"), list):
        raise ValueError("a benchmark record is a dict with a list of rows")
    out = copy.deepcopy(rec)
    schema = schema_version(out, "bench")
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
        verified, equivalent = path_lib.kernels.VERIFIED["code_sha256"], path_lib.kernels.TIMING_EQUIVALENT
    except ImportError:         # the kernels package is not importable here: nothing to compare with
        verified, equivalent = None, {}
    if timed is not None and verified is not None and timed != verified:
        notes.append("This record timed an earlier version of the kernels' code than the verified one here: "
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


def _per_tokens(rec, value, B, T):
    """``value`` scaled to the record's batch of tokens (B * T is 32768 except at T = 65536, B = 1)."""
    return value * (rec or {}).get("tokens", TOKENS) / (B * T)
