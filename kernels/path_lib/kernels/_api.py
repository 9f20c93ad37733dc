"""The kernels' entry points: validation, padding (time to whole blocks, head dim 32 to 64 on
Hopper, packed sequences to a batch) and the calls of the autograd Function; ``transform_keys_to_end``.
"""

from __future__ import annotations

from typing import Optional

import torch

from path_lib.validation import check_path_params, check_qkv, check_scale, check_tensor

from ._autograd import _is_oor, _PathAttnFn
from ._config import _QDTYPES, HEAD_DIMS, _interpret, env_overrides, kernel_config
from ._keys_to_end import _keys_to_end_torch, _keys_to_end_triton
from ._precompute import _pad_time


def _check_device(q: torch.Tensor):
    if q.device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(q.device)
        if q.dtype == torch.bfloat16 and major < 8:
            raise TypeError("q, k, v in bfloat16 need a GPU of compute capability >= 8.0 "
                            f"(this one is {torch.cuda.get_device_name(q.device)}); use float16")
        return
    if q.device.type == "cpu" and _interpret():
        if q.dtype != torch.float32:
            raise TypeError("on the CPU (TRITON_INTERPRET=1) the kernels run in float32 only, "
                            f"got q in {str(q.dtype).replace('torch.', '')}")
        return
    raise ValueError(f"the Triton kernels need a CUDA tensor (or TRITON_INTERPRET=1 on the CPU), "
                     f"got q on {q.device}")


def _check_cu_seqlens(cu_seqlens, B, T, device):
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens must be int32 (or int64), got {str(cu_seqlens.dtype).replace('torch.', '')}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D with N + 1 >= 2 entries, got shape {tuple(cu_seqlens.shape)}")
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1 (sequences packed along T), got B={B}")
    cs = cu_seqlens.detach().to("cpu", torch.int64)
    if int(cs[0]) != 0 or int(cs[-1]) != T:
        raise ValueError(f"cu_seqlens must start at 0 and end at T={T}, got {int(cs[0])} ... {int(cs[-1])}")
    if bool((cs[1:] < cs[:-1]).any()):
        raise ValueError("cu_seqlens must be non-decreasing")
    return cs


def _validate(q, k, v, w, beta, g, scale, check_values):
    check_tensor(q, "q", ndim=4, dtypes=_QDTYPES, finite=False)
    if check_values:
        B, T, Hq, Hk, D = check_qkv(q, k, v, head_dims=HEAD_DIMS)
    else:  # shapes and dtypes only (no device sync): check empty time slices, then the lengths
        for name, x in (("k", k), ("v", v)):
            if isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[1] != q.shape[1]:
                raise ValueError(f"{name} must have time length {q.shape[1]} like q, got {tuple(x.shape)}")
        B, T, Hq, Hk, D = check_qkv(q[:, :0], k[:, :0], v[:, :0], head_dims=HEAD_DIMS)
        T = q.shape[1]
    if v.shape[3] != D:
        raise ValueError(f"v must have head dim {D} like q (the kernels need Dv == D), got {v.shape[3]}")
    check_path_params(q, k, w, beta, g, param_dtypes=(torch.float32,), check_values=check_values)
    scale = check_scale(scale, D)
    _check_device(q)
    return B, T, Hq, Hk, D, scale


def _gate_cumsum(g):
    """``G = cumsum(g)`` over time, ``[B, T, H]`` float32 (a view), summed along the contiguous last dim
    of a ``[B, H, T]`` copy: torch's scan along the strided time dim of ``[B, T, H]`` runs only B * H
    scans in parallel (a large share of PaTH-FoX's time at long T, benchmarks/HISTORY.md), and the
    kernels read the gates as ``[B, H, T]`` anyway."""
    return torch.cumsum(g.float().transpose(1, 2).contiguous(), dim=-1).transpose(1, 2)


def _pad_head_dim(q) -> bool:
    """Run head dim 32 as 64 (zero-padded q, k, v, w) on Hopper (compute capability 9.x).

    Triton 3.6's Hopper (wgmma) code for ``_bwd_intra_kernel`` at D = 32 (4 warps) faults with an
    illegal memory access on an H200 (found by the GPU sweep, located with ``PATH_KERNELS_SYNC=1``), while the
    kernels at D = 64 / 128 run clean and every access of the D = 32 kernels is in bounds under the
    interpreter's bounds checker (``tests/kernel_bounds.py``): a compiler-side fault (cf.
    triton-lang/triton#11366, an IMA on sm_90 for BLOCK_D = 32 with num_warps = 4 and several dots).
    Zero dims change nothing: ``q.k``, ``w``'s unit norm and the transforms act on the first 32 dims
    only, ``v``'s extra dims give zero outputs.
    ``PATH_KERNELS_PAD_D32=0`` / ``1`` forces it off / on (diagnosis, CPU tests)."""
    if q.shape[-1] != 32:
        return False
    env = env_overrides().pad_d32
    if env is not None:
        return env
    return q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] == 9


def path_attention(q, k, v, w, beta, g=None, *, scale=None, cu_seqlens=None, check_values: bool = True,
                   block_size: Optional[int] = None, seg_blocks: Optional[int] = None) -> torch.Tensor:
    """Causal PaTH attention (PaTH-FoX with a gate) with Triton kernels; differentiable in every input.

    Args:
        q: ``[B, T, Hq, D]`` float16 / bfloat16 / float32, ``D`` in {32, 64, 128}.
        k, v: ``[B, T, Hk, D]``, q's dtype; ``Hq % Hk == 0`` (query head h uses key head h // (Hq // Hk)).
        w: ``[B, T, Hk, D]`` float32, unit rows.  beta: ``[B, T, Hk]`` float32 in [0, 2].
        g: optional ``[B, T, Hq]`` float32 log forget gates (<= 0), added unscaled (``+ G_i - G_j``).
        scale: logit scale, default ``D ** -0.5``.
        cu_seqlens: optional int32 ``[N + 1]`` sequence offsets (FlashAttention convention, B == 1,
            sequences packed along T); neither attention nor transforms cross a boundary.
        check_values: check finiteness, beta range and unit w (a device sync); shapes/dtypes always.
        block_size, seg_blocks: override the block length and the blocks per segment (tests). Without
            them, a call that records no gradient (``torch.no_grad()``, inference) may use longer
            segments than one that does (``_FWD_ONLY_SEG_BLOCKS``): the same result, a faster forward.
            The whole launch configuration is ``kernel_config(q.device, q.dtype, D, T, forward_only,
            block_size=..., seg_blocks=...)`` (head dim 32 on Hopper: ``D = 64``, see ``_pad_head_dim``).
    Returns:
        ``[B, T, Hq, D]`` in q's dtype.
    """
    B, T, Hq, Hk, D, scale = _validate(q, k, v, w, beta, g, scale, check_values)
    if T == 0:
        return q.new_zeros(B, 0, Hq, D)
    # no gradient will be asked for: the segment length may suit the forward alone (kernel_config)
    fwd_only = not (torch.is_grad_enabled() and any(x is not None and x.requires_grad
                                                    for x in (q, k, v, w, beta, g)))
    if _pad_head_dim(q):  # D = 32 as D = 64 (see _pad_head_dim); scale stays 32 ** -0.5
        pad = lambda x: torch.nn.functional.pad(x, (0, 64 - D))  # noqa: E731
        o = path_attention(pad(q), pad(k), pad(v), pad(w), beta, g, scale=scale, cu_seqlens=cu_seqlens,
                           check_values=False, block_size=block_size, seg_blocks=seg_blocks)
        return o[..., :D].contiguous()
    if cu_seqlens is not None:
        cs = _check_cu_seqlens(cu_seqlens, B, T, q.device)
        lens = (cs[1:] - cs[:-1]).tolist()
        Tmax = max(max(lens), 1)
        cfg = kernel_config(q.device, q.dtype, D, Tmax, fwd_only, block_size=block_size, seg_blocks=seg_blocks)
        Tp = cfg.n_blocks * cfg.block
        Nseq = len(lens)
        # gather index into [N, Tp]: packed row, or T (a zero row appended) for padding
        idx = torch.full((Nseq, Tp), T, dtype=torch.long)
        for i, (s0, L) in enumerate(zip(cs[:-1].tolist(), lens)):
            idx[i, :L] = torch.arange(s0, s0 + L)
        idx = idx.to(q.device)

        def pack(x):
            ext = torch.cat([x[0], x.new_zeros(1, *x.shape[2:])], 0)
            return ext[idx].contiguous()
        qp, kp, vp, wp, bp = pack(q), pack(k), pack(v), pack(w), pack(beta)
        Gp = _gate_cumsum(pack(g)) if g is not None else None
        op = _PathAttnFn.apply(qp, kp, vp, wp, bp, Gp, scale, cfg)
        valid = (idx < T).reshape(-1)
        return op.reshape(Nseq * Tp, Hq, D)[valid].unsqueeze(0)
    cfg = kernel_config(q.device, q.dtype, D, T, fwd_only, block_size=block_size, seg_blocks=seg_blocks)
    Tp = cfg.n_blocks * cfg.block
    G = _gate_cumsum(g) if g is not None else None
    args = [_pad_time(x, Tp) for x in (q, k, v, w, beta)]
    Gp = None
    if G is not None:
        Gp = _pad_time(G, Tp)
        if Tp > T:  # keep the padded tail's G finite (it only meets padded rows)
            Gp = Gp.clone()
            Gp[:, T:] = G[:, T - 1:T]
    o = _PathAttnFn.apply(*args, Gp, scale, cfg)
    return o[:, :T] if Tp > T else o


def transform_keys_to_end(k, w, beta, cu_seqlens=None, *, check_values: bool = True) -> torch.Tensor:
    """Keys moved to the end of their sequence, ``k_j -> H_{T-1} ... H_{j+1} k_j`` (prefill before
    decoding: the cache then holds keys transformed to the current position).

    Args:
        k: ``[B, T, Hk, D]``; w: ``[B, T, Hk, D]`` float32 unit rows; beta: ``[B, T, Hk]`` float32 in [0, 2].
        cu_seqlens: optional int32 ``[N + 1]`` (B == 1): each key moves to the end of its own sequence.
    Returns:
        ``[B, T, Hk, D]`` in k's dtype; no gradient. On CUDA (and under ``TRITON_INTERPRET=1``) the
        forward's Triton kernels do the per-block and per-segment work (UT transforms, keys moved to
        their segment's end, segment products: O(T D^2 / BT) in float32 accuracy, the moved keys stored
        in k's dtype) and the ``NS`` segment products are chained in torch; elsewhere, or where a kernel
        does not fit the device, the same computation block by block in float32 torch.
    """
    check_tensor(k, "k", ndim=4, dtypes=_QDTYPES)
    check_path_params(k, k, w, beta, None, param_dtypes=(torch.float32,), check_values=check_values)
    B, T, H, D = k.shape
    if T == 0:
        return k.clone()
    with torch.no_grad():
        if cu_seqlens is not None:
            cs = _check_cu_seqlens(cu_seqlens, B, T, k.device)
            out = torch.empty_like(k)
            for s0, s1 in zip(cs[:-1].tolist(), cs[1:].tolist()):
                if s1 > s0:
                    out[:, s0:s1] = transform_keys_to_end(k[:, s0:s1], w[:, s0:s1], beta[:, s0:s1],
                                                          check_values=False)
            return out
        if k.device.type == "cuda" or (k.device.type == "cpu" and _interpret() and k.dtype == torch.float32):
            _check_device(k)
            try:
                return _keys_to_end_triton(k, w, beta)
            except Exception as e:  # a kernel that does not fit the device: the torch path below
                if not _is_oor(e):
                    raise
        return _keys_to_end_torch(k, w, beta)

