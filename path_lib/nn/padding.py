"""Padding masks and packed sequences for the layers, without a kernel of their own.

A causal layer run on a row whose real tokens come first and whose padding comes last computes, at the
real positions, exactly what it computes on the real tokens alone: nothing at a later position reaches
an earlier one. So a padded batch is handled by a per-row permutation that moves the real tokens to the
front in their order (a stable sort of the padding flags, on the device: no host sync), the ordinary
computation, and the inverse permutation. This removes padding anywhere in a row (left padding for
generation, right padding, holes), as if the row had been unpadded, which is what fla does with
``unpad_input``. Packed sequences (``cu_seqlens``, FlashAttention's convention: ``x [1, total, C]``) are
laid out as a right-padded batch ``[N, max_len, C]`` and packed back; that needs the offsets on the host
(one read of ``cu_seqlens``, as every varlen kernel does).

Shapes: masks ``[B, T]`` (True or 1 = a real token); index tensors ``[B, T]`` int64.
"""
from __future__ import annotations

from typing import List, Tuple

import torch

from ..validation import (as_device, check_bool, check_cu_seqlens, dtype_name as _name_dtype, check_device,
                          check_int, check_tensor)

__all__ = ["check_attention_mask", "compaction", "gather_time", "check_cu_seqlens", "varlen_layout"]

MASK_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def check_attention_mask(mask, batch_size: int, n_new: int, n_past: int, ref: torch.Tensor, *,
                         check_values: bool) -> torch.Tensor:
    """A padding mask ``[B, T]`` or ``[B, n_past + T]`` (the Hugging Face convention in decoding: the mask
    covers the cached tokens too) -> the bool mask of the ``T`` new tokens.

    Shapes, dtype and device always; that every entry is 0 or 1 only with ``check_values`` (a device sync).
    Float masks are refused: an additive mask (0 / -inf) read as a padding mask would keep the padding.
    """
    check_int(batch_size, "batch_size", minimum=0)
    check_int(n_new, "n_new", minimum=0)
    check_int(n_past, "n_past", minimum=0)
    check_bool(check_values, "check_values")
    if not isinstance(ref, torch.Tensor):
        raise TypeError(f"ref (the layer input x) must be a torch.Tensor, got {type(ref).__name__}")
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, got {type(mask).__name__}")
    check_device(mask, "attention_mask")
    if mask.dtype not in MASK_DTYPES:
        raise TypeError("attention_mask must be a bool or integer padding mask [B, T] (1 = token, 0 = padding), "
                        f"got dtype {_name_dtype(mask.dtype)}; additive float masks are not supported")
    lengths = (n_new,) if n_past == 0 else (n_new, n_past + n_new)
    if mask.dim() != 2 or mask.shape[0] != batch_size or mask.shape[1] not in lengths:
        want = " or ".join(f"({batch_size}, {n})" for n in lengths)
        raise ValueError(f"attention_mask must have shape {want} = [B, T] (a padding mask"
                         f"{', covering the cached tokens too' if n_past else ''}), got {tuple(mask.shape)}")
    if mask.device != ref.device:
        raise ValueError(f"attention_mask must be on the device of x ({ref.device}), got {mask.device}")
    if check_values and mask.dtype != torch.bool and mask.numel() and bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (token)")
    return mask[:, mask.shape[1] - n_new:] != 0


def compaction(valid: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``valid [B, T]`` bool -> ``(perm, inv)`` int64 ``[B, T]``: ``perm[b]`` lists row b's real positions in
    order, then its padding positions in order; ``inv`` is its inverse (``gather_time(gather_time(x, perm),
    inv) == x``)."""
    check_tensor(valid, "valid", ndim=2, dtypes=(torch.bool,), finite=False)
    perm = torch.argsort((~valid).to(torch.int32), dim=1, stable=True)
    ar = torch.arange(valid.shape[1], device=valid.device).expand_as(perm)
    inv = torch.empty_like(perm).scatter_(1, perm, ar)
    return perm, inv


def gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``out[b, t] = x[b, index[b, t]]`` for ``x [B, T, ...]`` and ``index [B, T']`` (int64, values in
    ``[0, T)``: not read here, out-of-range values fail inside ``torch.gather``)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    check_device(x, "x")
    check_tensor(index, "index", ndim=2, dtypes=(torch.int64,), finite=False)
    if x.dim() < 2 or index.shape[0] != x.shape[0]:
        raise ValueError(f"x must be [B, T, ...] with B = {index.shape[0]} like index, got {tuple(x.shape)}")
    if index.device != x.device:
        raise ValueError(f"index must be on the device of x ({x.device}), got {index.device}")
    if x.shape[1] == 0 and index.shape[1] > 0:
        raise ValueError(f"x has no time steps to gather from (shape {tuple(x.shape)})")
    shape = index.shape + (1,) * (x.dim() - 2)
    return torch.gather(x, 1, index.reshape(shape).expand(*index.shape, *x.shape[2:]))


def varlen_layout(offsets: List[int], device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Offsets -> ``(index [N, L], valid [N, L])`` with ``L`` the longest sequence: ``index[i, t]`` is the
    packed position of token t of sequence i, or ``total`` (one past the end: a zero row) beyond its length.
    ``offsets``: the list :func:`check_cu_seqlens` returns (ints from 0, non-decreasing, N + 1 >= 2)."""
    if (not isinstance(offsets, (list, tuple)) or len(offsets) < 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise TypeError("offsets must be a list of N + 1 >= 2 ints (check_cu_seqlens's result), got "
                        + repr(offsets)[:200])
    if offsets[0] != 0 or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ValueError("offsets must start at 0 and be non-decreasing, got " + repr(list(offsets))[:200])
    device = as_device(device)
    starts, lengths = offsets[:-1], [b - a for a, b in zip(offsets, offsets[1:])]
    L = max(lengths)
    t = torch.arange(L, device=device)
    s = torch.tensor(starts, device=device)[:, None]
    valid = t[None, :] < torch.tensor(lengths, device=device)[:, None]
    index = torch.where(valid, s + t[None, :], torch.full_like(s + t[None, :], offsets[-1]))
    return index, valid
