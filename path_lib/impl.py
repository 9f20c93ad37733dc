"""Which implementation of PaTH attention runs: one rule, asked by every caller.

    from path_lib.impl import path_attention, resolve_backend

* :func:`path_attention` is the library's PaTH attention with ``impl`` picking the implementation:
  ``"explicit"`` and ``"parallel"`` are the float64 references (:mod:`path_lib.reference.attention`),
  ``"blockwise"`` the kernels' algorithm in PyTorch (:mod:`path_lib.blockwise.mirror`),
  ``"blockwise_scan"`` chapter 6's scan (:mod:`path_lib.blockwise.scan`), ``"triton"`` the kernels
  (:mod:`path_lib.kernels`) and ``"auto"`` whichever :func:`resolve_backend` picks.
* :func:`resolve_backend` turns a requested backend into the one that runs. ``"auto"`` runs the Triton
  kernels only where all of these hold: a CUDA device, a head dim the kernels take, a dtype they take,
  the kernels import, and their code passed the recorded GPU correctness sweep
  (``path_lib.kernels.GPU_VERIFIED``); a caller may add its own reason against (``unfit``). Anywhere
  else it runs the blockwise mirror, with one warning per process when that happens on CUDA.
  ``"triton"`` asks for the kernels explicitly (verified or not) and is a named error where they cannot
  be imported.

The layers (:class:`path_lib.nn.layers.PaTHAttention`), context parallelism (:mod:`path_lib.distributed`),
the experiments (:func:`path_lib.experiments.lm.path_backend`) and the Hugging Face model all ask
:func:`resolve_backend`; no other module reads ``GPU_VERIFIED`` (tests/test_impl.py checks both).
"""
from __future__ import annotations

import warnings
from typing import Optional, Tuple

import torch

from .blockwise.mirror import blockwise_path_attention
from .blockwise.scan import blockwise_scan
from .reference import attention as _reference
from .validation import check_block_size, check_bool, check_choice, check_int

__all__ = ["path_attention", "resolve_backend", "kernels_state", "IMPLEMENTATIONS", "BACKENDS"]

#: what :func:`path_attention` takes as ``impl``
IMPLEMENTATIONS = ("explicit", "parallel", "blockwise", "blockwise_scan", "triton", "auto")
#: what :func:`resolve_backend` takes: the layers' ``backend`` argument ("reference" is the UT all-pairs form)
BACKENDS = ("auto", "triton", "blockwise", "reference")
#: head dims the Triton kernels take
KERNEL_HEAD_DIMS = (32, 64, 128)
#: input dtypes the Triton kernels take (float64 stays on the exact PyTorch paths)
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_FALLBACK_WARNED = False


def kernels_state() -> Tuple[bool, bool, str]:
    """``(importable, verified, why_not)`` of :mod:`path_lib.kernels` in this process: whether it imports
    (Triton present), whether its code passed the recorded GPU sweep, and, when either is False, why."""
    try:
        import path_lib.kernels as kernels
    except ImportError as e:
        return False, False, f"the kernels cannot be imported ({e})"
    if not kernels.GPU_VERIFIED:
        return True, False, ("path_lib.kernels.GPU_VERIFIED is False: this kernel code has not passed the GPU "
                             "correctness sweep (benchmarks/DESIGN.md, How to change a kernel)")
    return True, True, ""


def _warn_fallback(reason: str) -> None:
    global _FALLBACK_WARNED
    if not _FALLBACK_WARNED:
        _FALLBACK_WARNED = True
        warnings.warn(f'backend="auto" on CUDA falls back to the blockwise PyTorch path: {reason}. '
                      'Pass backend="triton" to use the kernels anyway.', RuntimeWarning, stacklevel=3)


def resolve_backend(backend: str, *, device, dtype: Optional[torch.dtype], head_dim: int,
                    unfit: Optional[str] = None, name: str = "backend") -> str:
    """The backend that runs for a requested ``backend`` (one of :data:`BACKENDS`).

    Args:
        backend: ``"auto"``, ``"triton"``, ``"blockwise"`` or ``"reference"``.
        device: the inputs' device (``torch.device`` or its name).
        dtype: the inputs' dtype (q's); None where unknown (never the kernels' under ``"auto"``).
        head_dim: the head dim ``D``.
        unfit: the caller's own reason against the kernels for these inputs (e.g. a context-parallel chunk
            they cannot take), or None.
        name: the argument's name in error messages.
    Returns:
        ``"triton"``, ``"blockwise"`` or ``"reference"``. ``"auto"`` gives ``"triton"`` only on CUDA, at a
        head dim in ``KERNEL_HEAD_DIMS``, a dtype in ``KERNEL_DTYPES``, no ``unfit`` reason, with
        kernels that import and are verified (:func:`kernels_state`); otherwise ``"blockwise"``.
    Raises:
        ValueError: naming ``name``, for an unknown backend, and for ``"triton"`` where the kernels do
            not import or ``unfit`` says they cannot take the inputs.
    """
    check_choice(backend, name, BACKENDS)
    if backend in ("blockwise", "reference"):
        return backend
    if backend == "triton":
        importable, _, why = kernels_state()
        if not importable:
            raise ValueError(f"{name}='triton': {why}")
        if unfit:
            raise ValueError(f"{name}='triton': {unfit}; use {name}='blockwise'")
        return "triton"
    if torch.device(device).type != "cuda":
        return "blockwise"
    if head_dim not in KERNEL_HEAD_DIMS or dtype not in KERNEL_DTYPES or unfit:
        return "blockwise"
    importable, verified, why = kernels_state()
    if importable and verified:
        return "triton"
    _warn_fallback(why)
    return "blockwise"


def path_attention(q, k, v, w, beta, g=None, *, scale=None, impl: str = "blockwise",
                   block_size: int = 64, seg_blocks: Optional[int] = None,
                   check_values: bool = True) -> torch.Tensor:
    """Causal PaTH attention (PaTH-FoX when ``g`` is given) by the implementation ``impl``.

    ``q, k, v, w, beta, g, scale, check_values`` are those of
    :func:`path_lib.reference.attention.path_attention` (described there): q ``[B, T, Hq, D]``;
    k, w ``[B, T, Hk, D]``; v ``[B, T, Hk, Dv]``; beta ``[B, T, Hk]``; g ``[B, T, Hq]`` or None.

    Args:
        impl: one of :data:`IMPLEMENTATIONS`: ``"explicit"`` (ground truth), ``"parallel"`` (UT
            all-pairs), ``"blockwise"`` (the kernels' blocks and segments in PyTorch),
            ``"blockwise_scan"`` (chapter 6's scan, no segments), ``"triton"`` (the kernels) or
            ``"auto"`` (:func:`resolve_backend`).
        block_size: block length of the blockwise algorithms.
        seg_blocks: blocks per segment of ``"blockwise"`` (default: the kernels' choice).
    Returns:
        ``[B, T, Hq, Dv]`` in q's dtype.
    """
    check_choice(impl, "impl", IMPLEMENTATIONS)
    check_block_size(block_size)
    check_bool(check_values, "check_values")
    if seg_blocks is not None:
        check_int(seg_blocks, "seg_blocks", minimum=1)
    if impl == "auto":
        if not isinstance(q, torch.Tensor):
            raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
        impl = resolve_backend("auto", device=q.device, dtype=q.dtype, head_dim=q.shape[-1] if q.dim() else 0,
                               name="impl")
    if impl == "triton":
        resolve_backend("triton", device=getattr(q, "device", "cpu"), dtype=getattr(q, "dtype", None),
                        head_dim=0, name="impl")
        from path_lib.kernels import path_attention as kernel_path_attention
        return kernel_path_attention(q, k, v, w, beta, g, scale=scale, check_values=check_values)
    if impl == "blockwise":
        return blockwise_path_attention(q, k, v, w, beta, g, scale=scale, block_size=block_size,
                                        seg_blocks=seg_blocks, check_values=check_values)
    if impl == "blockwise_scan":
        qh, kh, vh, wh, bh, scale, dt = _reference._prepare(q, k, v, w, beta, g, scale, check_values)
        G = None if g is None else torch.cumsum(g.to(dt), dim=1).transpose(1, 2)
        return _reference._finish(blockwise_scan(qh, kh, vh, wh, bh, G, scale, block_size), q)
    return _reference.path_attention(q, k, v, w, beta, g, scale=scale, impl=impl, check_values=check_values)
