"""Which implementation computes attention: one vocabulary, one rule, asked by every caller.

    from path_lib.impl import path_attention, resolve_backend, plan_path

* :data:`IMPLEMENTATIONS` names every implementation (PaTH's and softmax attention's) and says what it
  computes; :data:`CHOICES` says which of them each kind of call takes: ``impl`` of :func:`path_attention`
  and of context parallelism, ``backend`` of the PaTH layer (and the Hugging Face model) and of the
  softmax layers. No other module holds a list of these names.
* :func:`path_attention` is the library's PaTH attention with ``impl`` picking the implementation:
  ``"explicit"`` and ``"parallel"`` are the float64 references (:mod:`path_lib.reference.attention`),
  ``"blockwise"`` the kernels' algorithm in PyTorch (:mod:`path_lib.blockwise.mirror`),
  ``"blockwise_scan"`` chapter 6's scan (:mod:`path_lib.blockwise.scan`), ``"triton"`` the kernels
  (:mod:`path_lib.kernels`) and ``"auto"`` whichever :func:`resolve_backend` picks.
* :func:`resolve_backend` turns a requested name into the one that runs. For PaTH, ``"auto"`` runs the
  Triton kernels only where all of these hold: a CUDA device, a head dim the kernels take, a dtype they
  take, the kernels import, and their code passed the recorded GPU correctness sweep with this Triton
  version (:func:`kernels_state`); a caller may add its own reason against (``unfit``). Anywhere else it
  runs the blockwise mirror, with one warning per process when that happens on CUDA. ``"triton"`` asks
  for the kernels explicitly (verified or not) and is a named error where they cannot be imported. For
  softmax attention, ``"auto"`` is ``"sdpa"`` on CUDA and ``"reference"`` elsewhere.
* :func:`plan_path` decides, once per call of a PaTH layer, everything that depends on that choice: the
  attention, the short convolution that makes w (the kernels' fused pass or PyTorch) and the decoding
  cache (the kernels' GPU cache or :class:`path_lib.decoding.PaTHCache`). :func:`run_path` runs a
  chosen implementation without checking its name again.

The layers (:mod:`path_lib.nn.layers`), context parallelism (:mod:`path_lib.distributed`), the experiments
(:func:`path_lib.experiments.lm.path_backend`) and the Hugging Face model ask this module; no other module
reads the kernels' verification or names a list of implementations (tests/test_impl.py checks both).
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Dict, Optional, Tuple

import torch

from .blockwise.mirror import blockwise_path_attention
from .blockwise.scan import blockwise_scan
from .reference import attention as _reference
from .validation import as_device, check_block_size, check_bool, check_choice, check_instance, check_int

__all__ = ["path_attention", "resolve_backend", "plan_path", "run_path", "PathPlan", "kernels_state",
           "IMPLEMENTATIONS", "CHOICES"]

#: Every implementation by name, and what it computes: the one vocabulary of ``impl`` and ``backend``.
IMPLEMENTATIONS: Dict[str, str] = {
    "auto": "the fastest implementation verified for the inputs (resolve_backend)",
    "explicit": "PaTH's reference with the Householder products multiplied out (ground truth, float64-capable)",
    "parallel": "PaTH's reference in the UT all-pairs form (float64-capable)",
    "reference": "the library's reference of the layer's attention: PaTH's 'parallel', softmax's explicit form",
    "blockwise": "PaTH by the kernels' blocks and segments, in PyTorch (exact, any device)",
    "blockwise_scan": "PaTH by chapter 6's block scan without segments, in PyTorch",
    "triton": "PaTH on the Triton kernels (path_lib.kernels; CUDA, or the CPU interpreter)",
    "sdpa": "softmax attention through torch.nn.functional.scaled_dot_product_attention",
}
#: Which implementations each kind of call takes (every name a key of :data:`IMPLEMENTATIONS`).
CHOICES: Dict[str, Tuple[str, ...]] = {
    "path_attention": _reference.IMPLEMENTATIONS + ("blockwise", "blockwise_scan", "triton", "auto"),
    "path_layer": ("auto", "reference", "blockwise", "triton"),
    "softmax_layer": ("auto", "reference", "sdpa"),
    "context_parallel": ("auto", "blockwise", "triton"),
}
#: head dims the Triton kernels take
KERNEL_HEAD_DIMS = (32, 64, 128)
#: input dtypes the Triton kernels take (float64 stays on the exact PyTorch paths)
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_FALLBACK_WARNED = False


def kernels_state() -> Tuple[bool, bool, str]:
    """``(importable, verified, why_not)`` of :mod:`path_lib.kernels` in this process: whether it imports
    (Triton present), whether its code passed the recorded GPU sweep under this Triton version
    (``GPU_VERIFIED``, :func:`path_lib.kernels.verification`), and, when either is False, why."""
    try:
        import path_lib.kernels as kernels
    except ImportError as e:
        return False, False, f"the kernels cannot be imported ({e})"
    if not kernels.GPU_VERIFIED:
        found = kernels.verification()
        why = found.reason or "set so in this process"
        return True, False, f"path_lib.kernels.GPU_VERIFIED is False: {why}"
    return True, True, ""


def _warn_fallback(reason: str) -> None:
    global _FALLBACK_WARNED
    if not _FALLBACK_WARNED:
        _FALLBACK_WARNED = True
        warnings.warn(f'backend="auto" on CUDA falls back to the blockwise PyTorch path: {reason}. '
                      'Pass backend="triton" to use the kernels anyway.', RuntimeWarning, stacklevel=4)


def _is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def resolve_backend(backend: str, *, device, dtype: Optional[torch.dtype] = None, head_dim: int = 0,
                    unfit: Optional[str] = None, name: str = "backend", call: str = "path_layer") -> str:
    """The implementation that runs for a requested ``backend`` in a call of kind ``call``.

    Args:
        backend: one of ``CHOICES[call]``.
        device: the inputs' device (``torch.device`` or its name).
        dtype: the inputs' dtype (q's); None where unknown (never the kernels' under ``"auto"``).
        head_dim: the head dim ``D``.
        unfit: the caller's own reason against the kernels for these inputs (e.g. a context-parallel chunk
            they cannot take), or None.
        name: the argument's name in error messages.
        call: a key of :data:`CHOICES`: ``"path_layer"`` (the default), ``"path_attention"``,
            ``"context_parallel"`` or ``"softmax_layer"``.
    Returns:
        ``backend`` itself, except for ``"auto"``: PaTH's ``"triton"`` only on CUDA, at a head dim in
        ``KERNEL_HEAD_DIMS``, a dtype in ``KERNEL_DTYPES``, no ``unfit`` reason, with kernels that
        import and are verified (:func:`kernels_state`), otherwise ``"blockwise"``; softmax's ``"sdpa"``
        on CUDA, otherwise ``"reference"``.
    Raises:
        ValueError: naming ``name``, for a name ``call`` does not take; ``"triton"`` where the kernels
            do not import or ``unfit`` says they cannot take the inputs.
    """
    check_choice(call, "call", tuple(CHOICES))
    check_choice(backend, name, CHOICES[call])
    device = as_device(device, available=False)     # a question about a device: it need not be here
    check_instance(dtype, "dtype", torch.dtype, "a torch.dtype", optional=True)
    check_int(head_dim, "head_dim", minimum=0)
    check_instance(unfit, "unfit", str, optional=True)
    if call == "softmax_layer":
        return ("sdpa" if _is_cuda(device) else "reference") if backend == "auto" else backend
    if backend == "triton":
        importable, _, why = kernels_state()
        if not importable:
            raise ValueError(f"{name}='triton': {why}")
        if unfit:
            raise ValueError(f"{name}='triton': {unfit}; use {name}='blockwise'")
        return "triton"
    if backend != "auto":
        return backend
    if not _is_cuda(device) or head_dim not in KERNEL_HEAD_DIMS or dtype not in KERNEL_DTYPES or unfit:
        return "blockwise"
    importable, verified, why = kernels_state()
    if importable and verified:
        return "triton"
    _warn_fallback(why)
    return "blockwise"


@dataclasses.dataclass(frozen=True)
class PathPlan:
    """How one call of a PaTH layer runs (:func:`plan_path`).

    ``attention``: ``"triton"``, ``"blockwise"`` or ``"reference"`` (the UT all-pairs form), what
    :func:`run_path` takes; ``short_conv``: ``"triton"`` (the kernels' fused pass,
    :func:`path_lib.kernels.short_conv.short_conv_normalize`) or ``"torch"``; ``cache``: the decoding
    cache, ``"triton"`` (``path_lib.kernels.decode.TritonPaTHCache``) or ``"torch"``
    (:class:`path_lib.decoding.PaTHCache`, exact for backpropagation)."""

    attention: str
    short_conv: str
    cache: str


def plan_path(backend: str, *, device, dtype: Optional[torch.dtype], head_dim: int, batch: int = 1,
              records_grad: bool = False, name: str = "backend") -> PathPlan:
    """Everything a PaTH layer's call runs on, decided once: the attention by :func:`resolve_backend`
    (``backend`` one of ``CHOICES["path_layer"]``); w's short convolution on the kernels' fused pass where
    the attention runs on the kernels and the inputs are not float64; decoding on the kernels' GPU cache
    where the attention runs on the kernels on CUDA, the batch is not empty (``batch``) and no gradient is
    recorded (``records_grad``: the GPU cache is not differentiable)."""
    attention = resolve_backend(backend, device=device, dtype=dtype, head_dim=head_dim, name=name)
    kernels = attention == "triton"
    short_conv = "triton" if kernels and dtype != torch.float64 else "torch"
    cache = "triton" if kernels and _is_cuda(device) and batch > 0 and not records_grad else "torch"
    return PathPlan(attention, short_conv, cache)


def run_path(implementation: str, q, k, v, w, beta, g=None, *, scale=None, block_size: int = 64,
             seg_blocks: Optional[int] = None, check_values: bool = True) -> torch.Tensor:
    """PaTH attention by an implementation already chosen (a name :func:`resolve_backend` returns, or
    any of ``CHOICES["path_attention"]`` but ``"auto"``; ``"reference"`` is ``"parallel"``), without
    checking that name and these options again: the implementation checks its inputs itself, once.
    Shapes as :func:`path_attention`."""
    if implementation == "triton":
        from path_lib.kernels import path_attention as kernel_path_attention
        return kernel_path_attention(q, k, v, w, beta, g, scale=scale, check_values=check_values)
    if implementation == "blockwise":
        return blockwise_path_attention(q, k, v, w, beta, g, scale=scale, block_size=block_size,
                                        seg_blocks=seg_blocks, check_values=check_values)
    if implementation == "blockwise_scan":
        qh, kh, vh, wh, bh, scale, dt = _reference._prepare(q, k, v, w, beta, g, scale, check_values)
        G = None if g is None else torch.cumsum(g.to(dt), dim=1).transpose(1, 2)
        return _reference._finish(blockwise_scan(qh, kh, vh, wh, bh, G, scale, block_size), q)
    form = "parallel" if implementation == "reference" else implementation
    return _reference.path_attention(q, k, v, w, beta, g, scale=scale, impl=form, check_values=check_values)


def path_attention(q, k, v, w, beta, g=None, *, scale=None, impl: str = "blockwise",
                   block_size: int = 64, seg_blocks: Optional[int] = None,
                   check_values: bool = True) -> torch.Tensor:
    """Causal PaTH attention (PaTH-FoX when ``g`` is given) by the implementation ``impl``.

    ``q, k, v, w, beta, g, scale, check_values`` are those of
    :func:`path_lib.reference.attention.path_attention` (described there): q ``[B, T, Hq, D]``;
    k, w ``[B, T, Hk, D]``; v ``[B, T, Hk, Dv]``; beta ``[B, T, Hk]``; g ``[B, T, Hq]`` or None.

    Args:
        impl: one of ``CHOICES["path_attention"]``: ``"explicit"`` (ground truth), ``"parallel"`` (UT
            all-pairs), ``"blockwise"`` (the kernels' blocks and segments in PyTorch),
            ``"blockwise_scan"`` (chapter 6's scan, no segments), ``"triton"`` (the kernels) or
            ``"auto"`` (:func:`resolve_backend`).
        block_size: block length of the blockwise algorithms.
        seg_blocks: blocks per segment of ``"blockwise"`` (default: the kernels' choice).
    Returns:
        ``[B, T, Hq, Dv]`` in q's dtype.
    """
    check_choice(impl, "impl", CHOICES["path_attention"])
    check_block_size(block_size)
    check_bool(check_values, "check_values")
    if seg_blocks is not None:
        check_int(seg_blocks, "seg_blocks", minimum=1)
    if impl in ("auto", "triton"):
        if impl == "auto" and not isinstance(q, torch.Tensor):
            raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
        impl = resolve_backend(impl, device=getattr(q, "device", "cpu"), dtype=getattr(q, "dtype", None),
                               head_dim=q.shape[-1] if impl == "auto" and q.dim() else 0, name="impl",
                               call="path_attention")
    return run_path(impl, q, k, v, w, beta, g, scale=scale, block_size=block_size, seg_blocks=seg_blocks,
                    check_values=check_values)
