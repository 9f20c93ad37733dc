"""Launching the Triton kernels (``_triton_kernels``): every argument by parameter name, the optional
sync checks around each launch (``PATH_KERNELS_SYNC=1``), and the attention loops' pipelining fallback
(fewer stages where shared memory runs out, remembered in :class:`FallbackState`).
"""

from __future__ import annotations

import torch

from ._config import KernelConfig, _stage_key, env_overrides, fallback_state


def _triton():
    import triton  # noqa: F401
    from . import _triton_kernels
    return _triton_kernels


def _tl(name: str):
    """The Triton dtype of a KernelConfig dtype name."""
    import triton.language as tl
    return getattr(tl, name)


# PATH_KERNELS_SYNC=1: synchronize before and after every kernel launch and name the kernel in the
# error (a CUDA fault is otherwise reported asynchronously, at some later call); read at import
_SYNC = env_overrides().sync


def _blocks_of(cfg: KernelConfig, T: int):
    """``(BT, SB, NB, NS)`` of ``cfg`` for padded tensors of length ``T`` (a multiple of the block)."""
    BT, SB = cfg.block, cfg.seg_blocks
    if T % BT or T // BT != cfg.n_blocks:
        raise RuntimeError(f"PaTH kernels: tensors of length {T} do not match the configuration "
                           f"({cfg.n_blocks} blocks of {BT} tokens)")
    return BT, SB, cfg.n_blocks, cfg.n_segments


def _sync_check(name, where, meta=None):
    if not _SYNC or not torch.cuda.is_available():
        return
    try:
        torch.cuda.synchronize()
    except Exception as e:  # pragma: no cover - GPU only
        what = f"before kernel {name} (an earlier torch op)" if where == "before" else f"in kernel {name}"
        cfg = {k: str(v) for k, v in (meta or {}).items() if not isinstance(v, torch.Tensor)}
        raise RuntimeError(f"PaTH: CUDA error {what} {cfg}: {e}") from e


def _name(kernel) -> str:
    return kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)


def _run(kernel, grid, num_warps: int, **args):
    """Launch at one pipelining stage, every argument by parameter name (the per-block, per-segment,
    intra, diagonal and delta kernels), with the optional sync checks."""
    name = _name(kernel)
    _sync_check(name, "before", args)
    kernel[grid](**args, num_warps=num_warps, num_stages=1)
    _sync_check(name, "after", args)


def _launch(kernel, grid, cfg: KernelConfig, loop: str, **args):
    """Launch attention loop ``loop`` (``STAGE_KEYS``) at ``cfg``'s warps and stages, every argument by
    parameter name; on an out-of-resources error (less shared memory, e.g. a T4) retry with fewer stages
    and record the depth that fitted in the fallback state (:class:`FallbackState`), which later
    configurations of this device, dtype, head dim, block length, warps and rows then start from."""
    import triton
    name = _name(kernel)
    warps = cfg.warps[loop]
    key = _stage_key(cfg._key, cfg.torch_dtype, cfg.head_dim, cfg.block, loop, warps,
                     dict(fwd_rows=cfg.fwd_rows, query_rows=cfg.query_rows, key_rows=cfg.key_rows), cfg.n_segments)
    stages = min(cfg.stages[loop], fallback_state().stages.get(key, cfg.stages[loop]))
    first = stages
    _sync_check(name, "before", args)
    while True:
        try:
            kernel[grid](**args, num_warps=warps, num_stages=stages)
            break
        except triton.runtime.errors.OutOfResources:
            if stages <= 1:
                raise
            stages -= 1
    if stages < first and cfg._key is not None:
        fallback_state().stages[key] = stages
    _sync_check(name, "after", dict(args, num_stages=stages))

