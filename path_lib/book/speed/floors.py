"""Time floors: the operations and bytes a computation cannot avoid, and the time they take at a GPU's
two ceilings (``matmul_tflops``, ``copy_gbs``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from ...theory import costs
from .bench_record import KIND_OF, KINDS, check_ceilings, lookup, shapes

_HALF, _FP32 = 2, 4


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
        if self.compute_ms is None or self.memory_ms is None:        # (both are None or neither)
            return None
        return max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> Optional[str]:
        """``"compute"`` or ``"memory"``: which ceiling sets the floor (None without ceilings)."""
        if self.compute_ms is None or self.memory_ms is None:
            return None
        return "compute" if self.compute_ms >= self.memory_ms else "memory"

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
