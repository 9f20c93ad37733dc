"""The recorded profile (``load_record("profile")``) by phase of the algorithm: CUDA kernel names to
phases (:data:`KERNEL_PHASES`, :func:`phase_of`) and the tables of ms per phase."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from .bench_record import method_label

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


def group_difference(profile: Optional[dict], a: str, b: str, mode: str = "fwdbwd"
                     ) -> Dict[Tuple[int, int], Dict[str, float]]:
    """``{(D, T): {group: ms of a - ms of b}}`` per iteration, for every (D, T) of the profile where
    both methods have a ``mode`` row; the groups of :data:`PHASE_GROUPS` that neither method uses left
    out, and ``"all kernels"`` (the sum) last."""
    out: Dict[Tuple[int, int], Dict[str, float]] = {}
    for D, T in sorted({(r["D"], r["T"]) for r in (profile or {}).get("rows", [])}):
        ra, rb = _profile_row(profile, D, T, a, mode), _profile_row(profile, D, T, b, mode)
        if ra is None or rb is None:
            continue
        ga, gb = phase_groups(ra), phase_groups(rb)
        diff = {g: ga[g] - gb[g] for g in PHASE_GROUPS if ga[g] > 0 or gb[g] > 0}
        diff["all kernels"] = sum(ga.values()) - sum(gb.values())
        out[(D, T)] = diff
    return out
