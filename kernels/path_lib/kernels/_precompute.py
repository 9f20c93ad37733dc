"""Preparation before the attention kernels: inputs padded to whole blocks, then the per-block
factors, per-segment products and segment-pair products (``_triton_factors``' kernels), in float32 but
the token tensors (the input dtype).

Memory beyond inputs and outputs: O(T D) per head (per-block factors ``T``, ``T W``, ``K->``, ``Kseg``,
``Q0``, per-block ``D x D`` products during pre/post-processing, per-head float32 gradient buffers) plus
the segment-pair products ``Om`` (``NS (NS - 1) / 2`` matrices of ``D x D``; ``NS`` is chosen so that this
stays below ``T D``).
"""

from __future__ import annotations

import torch

from ._config import KernelConfig
from ._launch import _blocks_of, _run, _triton


def _pad_time(x, Tp):
    T = x.shape[1]
    if Tp == T:
        return x.contiguous()
    pad = [0, 0] * (x.dim() - 2) + [0, Tp - T]
    return torch.nn.functional.pad(x, pad).contiguous()


def _precompute(k, w, beta, cfg: KernelConfig):
    """Per-block factors, per-segment products and the segment-pair products ``Om`` (``NS (NS-1)/2``
    matrices of ``D x D``), all in Triton, at ``cfg``'s block length, segments, warps and precisions.
    Inputs padded ``[B, T, Hk, D]``; w, beta float32 contiguous. For a call that records no gradient
    (``cfg.forward_only``) the factors only the backward reads, ``N`` and the suffix products ``R_j``,
    are neither allocated nor written: ``NM`` and ``RS`` are then None. ``OM`` is in k's dtype, the
    rest float32 but the token tensors ``KA`` and ``KS`` (k's dtype)."""
    kern = _triton()
    B, T, HK, D = k.shape
    BT, SB, NB, NS = _blocks_of(cfg, T)
    dev = k.device
    f32 = dict(dtype=torch.float32, device=dev)
    TW = torch.empty(B, T, HK, D, **f32)
    KA = torch.empty(B, T, HK, D, dtype=k.dtype, device=dev)
    TM = torch.empty(B, HK, NB, BT, BT, **f32)
    MM = torch.empty(B, HK, NB, BT, BT, **f32)
    keep = not cfg.forward_only
    NM = torch.empty(B, HK, NB, BT, BT, **f32) if keep else None
    _run(kern._ut_a_kernel, (NB, B * HK), cfg.warps.ut_a,
         W=w, BETA=beta, UT_T=TM, T=T, NB=NB, HK=HK, D=D, BT=BT, SOLVE_PREC=cfg.solve_precision)
    _run(kern._ut_kernel, (NB, B * HK), cfg.warps.ut,
         BETA=beta, UT_T=TM, UT_N=NM if keep else TM, T=T, NB=NB,
         HK=HK, BT=BT, SOLVE_PREC=cfg.solve_precision, STORE_N=keep)
    _run(kern._prep_kernel, (NB, B * HK), cfg.warps.prep,
         K=k, W=w, UT_TW=TW, K_BLOCK_END=KA, UT_T=TM, UT_M=MM, T=T, NB=NB,
         HK=HK, D=D, BT=BT, PREC=cfg.block_precision)
    if NS == 1:  # one segment: no segment products (the kernels compile their segment loops out and
        # read none of them; an expanded identity holds their place without memory)
        OM = torch.eye(D, **f32).expand(B, HK, 1, D, D)
        return dict(TW=TW, KA=KA, KS=KA, TM=TM, MM=MM, NM=NM, RS=OM, SEG=OM, OM=OM)
    KS = torch.empty(B, T, HK, D, dtype=k.dtype, device=dev)
    RS = torch.empty(B, HK, NB, D, D, **f32) if keep else None
    Seg = torch.empty(B, HK, NS, D, D, **f32)
    _run(kern._seg_fwd_kernel, (NS, B * HK), cfg.warps.seg,
         W=w, UT_TW=TW, K_BLOCK_END=KA, K_SEG_END=KS, SUFFIX_R=RS if keep else Seg, SEG_PROD=Seg, T=T, NB=NB,
         NS=NS, SB=SB, HK=HK, D=D, BT=BT, PREC=cfg.block_precision, STORE_R=keep)
    # Om in the input dtype: the forward's and the backward's products read it only rounded to it
    OM = torch.empty(B, HK, NS * (NS - 1) // 2, D, D, dtype=k.dtype, device=dev)
    _run(kern._pair_kernel, (NS - 1, B * HK), cfg.warps.seg,
         SEG_PROD=Seg, PAIR_PROD=OM, NS=NS, HK=HK, D=D, PREC=cfg.solve_precision)
    return dict(TW=TW, KA=KA, KS=KS, TM=TM, MM=MM, NM=NM, RS=RS, SEG=Seg, OM=OM)

