"""The autograd Function over padded inputs, and the out-of-resources fallback around it: a kernel
that does not fit the device's shared memory makes the pass retry with half the block length, down to
16 tokens, then with a single segment (remembered in :class:`FallbackState`).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from ._backward import _backward_impl
from ._config import KernelConfig, _segments, fallback_state, kernel_config
from ._forward import Saved, _forward_impl


def _is_oor(e: Exception) -> bool:
    import triton
    return isinstance(e, triton.runtime.errors.OutOfResources)


def _next_config(q, cfg: KernelConfig) -> Optional[KernelConfig]:
    """After an out-of-resources error at ``cfg``: half the block length down to 16, then a single
    segment (no ``D x D`` segment products in the kernels: less shared memory, less parallelism),
    recorded in the fallback state (:class:`FallbackState`) for later calls on this device, dtype and
    head dim; the rest of the configuration is rebuilt by :func:`kernel_config` for the new blocks.
    Returns None when nothing smaller is left."""
    T, D = q.shape[1], q.shape[-1]
    key = (str(q.device), q.dtype, D)
    BT, SB = cfg.block, cfg.seg_blocks
    if BT > 16:
        fallback_state().max_block[key] = BT // 2
        BT, SB = BT // 2, _segments(T // (BT // 2), BT // 2, D)
    elif cfg.n_segments > 1:
        fallback_state().one_segment.add(key)
        SB = max(1, T // BT)
    else:
        return None
    nxt = kernel_config(q.device, q.dtype, D, T, cfg.forward_only, block_size=BT, seg_blocks=SB)
    return dataclasses.replace(nxt, notes=nxt.notes + (f"out-of-resources retry after BT = {cfg.block}, "
                                                       f"SB = {cfg.seg_blocks}",))


def _no_fit(q, e):
    D = q.shape[-1]
    dt = str(q.dtype).replace("torch.", "")
    return RuntimeError(f"PaTH kernels: head dim {D} in {dt} does not fit this GPU's shared memory even with "
                        f"16-token blocks and one segment ({e}); use float16 or a smaller head dim here")


def _retry_smaller(q, cfg: KernelConfig, attempt):
    """Run ``attempt(cfg)``; if a kernel does not fit the device's shared memory (an ``OutOfResources``
    at launch), retry with the next smaller configuration. Returns ``(result, configuration that ran)``."""
    while True:
        try:
            return attempt(cfg), cfg
        except Exception as e:
            if not _is_oor(e):
                raise
            nxt = _next_config(q, cfg)
            if nxt is None:
                raise _no_fit(q, e) from e
            cfg = nxt


class _PathAttnFn(torch.autograd.Function):
    """Autograd wrapper over padded inputs (T a multiple of the block length). If a kernel does not fit
    the device's shared memory (an ``OutOfResources`` at launch, before any work), the block length is
    halved and the pass redone (the backward then recomputes the forward factors at the smaller block
    length)."""

    @staticmethod
    def forward(ctx, q, k, v, w, beta, G, scale, cfg):
        (o, saved), cfg = _retry_smaller(q, cfg, lambda c: _forward_impl(q, k, v, w, beta, G, scale, c))
        ctx.save_for_backward(*saved)
        ctx.cfg = (scale, cfg, G is not None)
        return o

    @staticmethod
    def backward(ctx, do):
        saved = Saved(*ctx.saved_tensors)
        scale, cfg, has_g = ctx.cfg
        q = saved.q

        def attempt(c):
            cur = saved
            if (c.block, c.seg_blocks) != (cfg.block, cfg.seg_blocks):  # smaller: recompute the factors
                G = saved.gate_cumsum.transpose(1, 2) if has_g else None  # type: ignore[union-attr]  # has_g: saved
                cur = _forward_impl(q, saved.k, saved.v, saved.w, saved.beta, G, scale, c)[1]
            return _backward_impl(cur, do, scale, c, has_g)

        grads, _ = _retry_smaller(q, cfg, attempt)
        return (*grads, None, None)

