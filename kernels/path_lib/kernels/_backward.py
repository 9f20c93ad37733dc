"""The backward pass: ``do . o``, the inter-segment kernels, the chain through the segment
products, the intra-segment and diagonal kernels, then the per-block chain rule into dk, dw and dbeta,
in batch slices where that lowers the peak memory (:func:`backward_slices`).
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from ._config import DeviceInfo, KernelConfig, env_overrides
from ._forward import Saved
from ._launch import _blocks_of, _launch, _run, _tl, _triton


# the backward's batch slices: at least this many programs per multiprocessor in the narrowest
# launches of a slice, and at most this many slices (past four the peak hardly falls: the saved factors
# and the gradients of the inputs are full size)
_BWD_PROGRAMS_PER_SM = 4


_BWD_MAX_SLICES = 4


def backward_slices(device, cfg: KernelConfig, batch: int, key_heads: int) -> int:
    """The number of batch slices ``_backward_impl`` runs the backward in, for ``batch`` sequences of
    ``key_heads`` key heads at configuration ``cfg`` on ``device`` (a ``torch.device`` or a
    :class:`DeviceInfo`). Each slice takes its own float32 working buffers (about nine ``[b, T, Hq, D]``
    tensors at the diagonal kernel), so slices lower the peak; each launch then has fewer programs.
    The rule keeps the narrowest launches (the ``NS x b x Hk`` programs of the segment-sequential
    kernels) at ``_BWD_PROGRAMS_PER_SM`` programs per multiprocessor or more:
    ``min(_BWD_MAX_SLICES, batch, NS batch Hk // (4 SMs))``, at least 1 (1 where the multiprocessors are
    not known, e.g. on the CPU interpreter). ``PATH_KERNELS_BWD_SLICES=n`` sets it (capped at ``batch``)."""
    forced = env_overrides().bwd_slices
    if forced is not None:
        return max(1, min(forced, batch))
    sms = DeviceInfo.of(device).sms
    if sms <= 0:
        return 1
    wide = cfg.n_segments * batch * key_heads // (_BWD_PROGRAMS_PER_SM * sms)
    return max(1, min(_BWD_MAX_SLICES, batch, wide))


def _backward_impl(saved: Saved, do, scale, cfg: KernelConfig, has_g):
    """Backward kernels and the float32 segment chain at configuration ``cfg``; returns
    (dq, dk, dv, dw, dbeta, dG). With more than one batch slice (:func:`backward_slices`) the
    gradients of the inputs are allocated first and each slice writes its rows of them; the same
    kernels, the same results."""
    q, k, v = saved.q, saved.k, saved.v
    B, T, HQ, D = q.shape
    HK = k.shape[2]
    n = backward_slices(q.device, cfg, B, HK)
    do = do.contiguous()
    if n == 1:
        return _backward_slice(saved, do, scale, cfg, has_g)
    f32: Dict[str, Any] = dict(dtype=torch.float32, device=q.device)
    out = dict(dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty_like(v),
               dw=torch.empty(B, T, HK, D, **f32), db=torch.empty(B, T, HK, **f32),
               dg=torch.zeros(B, HQ, T, **f32))
    step = -(-B // n)
    for b0 in range(0, B, step):
        rows = slice(b0, min(B, b0 + step))
        _backward_slice(Saved._make(None if x is None else x[rows] for x in saved), do[rows], scale, cfg, has_g,
                        out={name: x[rows] for name, x in out.items()})
    return (out["dq"], out["dk"], out["dv"], out["dw"], out["db"],
            out["dg"].transpose(1, 2) if has_g else None)


def _backward_slice(saved: Saved, do, scale, cfg: KernelConfig, has_g, out=None):
    """The backward of the batch rows in ``saved`` and ``do`` (contiguous in the batch: slices of it are
    views). Without ``out`` it allocates the gradients of the inputs when they are first written (the
    peak of one slice); with ``out`` (views of the full gradients: dq, dk, dv, dw, db, dg zeroed) it
    writes into them. Returns (dq, dk, dv, dw, dbeta, dG)."""
    kern = _triton()
    s = saved
    q, k, v, wf, bf, Gh, o, lse, q0 = s.q, s.k, s.v, s.w, s.beta, s.gate_cumsum, s.o, s.lse, s.q_seg_start
    TW, KA, KS, TM, MM, NM = s.ut_tw, s.k_block_end, s.k_seg_end, s.ut_t, s.ut_m, s.ut_n
    RS, SEG, OM = s.suffix_r, s.seg_prod, s.pair_prod
    B, T, HQ, D = q.shape
    HK = k.shape[2]
    grp = HQ // HK
    BT, SB, NB, NS = _blocks_of(cfg, T)
    dev = q.device
    f32: Dict[str, Any] = dict(dtype=torch.float32, device=dev)
    delta = torch.empty(B, HQ, T, **f32)  # do . o per query row
    _run(kern._delta_kernel, (NB, B * HQ), cfg.warps.delta, DO=do, O=o, DELTA=delta, T=T, HQ=HQ, D=D, BT=BT)
    # the kernels run in the order of the memory they hold: the inter kernels, then the segment chain
    # (which reads only their gradients), so that dKseg, dSeg and the chain's state are freed before the
    # intra and diagonal kernels take their buffers; the peak is the live buffers' sum at one launch
    dq0 = torch.empty(B, T, HQ, D, **f32)
    dg = torch.zeros(B, HQ, T, **f32) if out is None else out["dg"]
    dv = torch.empty(B, T, HQ, D, **f32)
    Garg = Gh if has_g else lse  # without a gate: any [B, HQ, T] (not read)
    # gradients flow through the transport matmuls of the backward: they are in the input dtype (bf16's
    # range), not the forward's fp16, where the ~1e-6 gradients of a mean-reduced loss would be subnormal
    meta = dict(HQ=HQ, HK=HK, D=D, BT=BT, HAS_G=has_g, CDT=_tl(cfg.compute_dtype),
                TDT=_tl(cfg.backward_transport_dtype), PREC=cfg.precision)
    common = dict(GATE_CUMSUM=Garg, DO=do, LSE=lse, DELTA=delta, scale=scale, T=T, NB=NB)
    # dK->, dW and d(T W), accumulated in place by the segment chain and the intra kernel (zeroed
    # here: zeroing them inside the kernels is no faster)
    dka = torch.zeros(B, T, HQ, D, **f32)
    dw = torch.zeros(B, T, HQ, D, **f32)
    dtwq = torch.zeros(B, T, HQ, D, **f32)
    bprec = cfg.block_precision
    if NS > 1:
        dseg = torch.zeros(B, HQ, NS, D, D, **f32)
        dks = torch.empty(B, T, HQ, D, **f32)  # gradient of Kseg, written by the key side
        # the segment products in the transport dtype (Om is stored in it): the inter kernels use
        # them only rounded to it
        if SEG is None:
            raise RuntimeError("PaTH kernels: the backward needs the segment products, which a forward "
                               "without gradients does not keep")
        segt = SEG if q.dtype == torch.float32 else SEG.to(q.dtype)
        QR, KR = cfg.query_rows, cfg.key_rows
        _launch(kern._bwd_inter_q_kernel, (NB // (QR // BT), B * HQ), cfg, "inter_q",
                Q_SEG_START=q0, K_SEG_END=KS, V=v, SEG_PROD=segt, PAIR_PROD=OM,
                DQ_SEG_START=dq0, DSEG_PROD=dseg, DGATE=dg, **common, NS=NS, SB=SB,
                **meta, DC=cfg.seg_split, QR=QR)
        _launch(kern._bwd_inter_kv_kernel, (NB // (KR // BT), B * HQ), cfg, "inter_kv",
                Q_SEG_START=q0, K_SEG_END=KS, V=v, PAIR_PROD=OM, DK_SEG_END=dks, DV=dv, DGATE=dg,
                **common, NS=NS, SB=SB, **meta, KR=KR, DC=cfg.seg_split)
        del segt
        if grp > 1:
            dks = dks.view(B, T, HK, grp, D).sum(3)
            dseg = dseg.view(B, HK, grp, NS, D, D).sum(2)
        dks, dseg = dks.contiguous(), dseg.contiguous()
        # chain through Kseg = K-> R^T and Seg = R_0 P_0 (segment suffix products)
        XS = torch.empty(B, HK, NB, D, D, **f32)
        DR = cfg.seg_split
        _run(kern._seg_bwd_kernel, (NS, B * HK, D // DR), cfg.warps.seg_bwd,
             W=wf, UT_TW=TW, K_BLOCK_END=KA, DK_SEG_END=dks, DSEG_PROD=dseg,
             SEG_GRAD_STATE=XS, T=T, NB=NB, NS=NS, SB=SB, HK=HK, D=D, BT=BT, DR=DR, PREC=bprec)
        del dseg  # read only by _seg_bwd_kernel
        # the chain's dK->, d(T W), dW added in place to the per-query-head gradients
        _run(kern._seg_grad_kernel, (NB, B * HK), cfg.warps.seg,
             W=wf, UT_TW=TW, DK_SEG_END=dks, SUFFIX_R=RS, SEG_GRAD_STATE=XS,
             DK_BLOCK_END=dka, DUT_TW=dtwq, DW=dw, T=T, NB=NB,
             HQ=HQ, HK=HK, D=D, BT=BT, DC=DR, PREC=bprec)
        del XS, dks
    else:  # single segment: every pair is inside the segment (intra kernel)
        dq0.zero_()
        dv.zero_()
    # the intra kernel's query states, in the dtype of the products that read them
    scr = torch.empty(B, HQ, NS, SB * BT, D, dtype=q.dtype, device=dev)
    # W and T W for the intra and diagonal kernels in the backward's transport dtype: each of
    # their products rounds them to it anyway, so the copies change no result and halve those loads
    wt, twt = (wf, TW) if q.dtype == torch.float32 else (wf.to(q.dtype), TW.to(q.dtype))
    _run(kern._bwd_intra_kernel, (NS, B * HQ), cfg.warps.intra,
         Q=q, V=v, W=wt, UT_TW=twt, K_BLOCK_END=KA, DQ_SEG_START=dq0, Q_STATE_SCRATCH=scr,
         DK_BLOCK_END=dka, DV=dv, DW=dw, DUT_TW=dtwq, DGATE=dg, **common, NS=NS, SB=SB, **meta)
    del scr
    # written once, by the diagonal kernel: allocated only now, when the intra kernel's scratch is
    # freed
    dq = torch.empty(B, T, HQ, D, dtype=q.dtype, device=dev) if out is None else out["dq"]
    dk = torch.empty(B, T, HQ, D, **f32)
    dt = torch.empty(B, HQ, NB, BT, BT, **f32)
    # the diagonal blocks, one program each, all in parallel
    _run(kern._bwd_diag_kernel, (NB, B * HQ), cfg.warps.diag,
         Q=q, K=k, V=v, W=wt, UT_TW=twt, UT_T=TM, UT_M=MM, DQ_BLOCK_START=dq0,
         DQ=dq, DK=dk, DV=dv, DW=dw, DUT_T=dt, DGATE=dg, **common, **meta, DC=cfg.diag_cols)
    del dq0, wt, twt
    if grp > 1:
        dv = dv.view(B, T, HK, grp, D).sum(3)
    if out is None:
        dv = dv.to(v.dtype)                                              # before the block kernel's outputs
        dk_out = torch.empty_like(k)
        dw_out = torch.empty(B, T, HK, D, **f32)
        db_out = torch.empty(B, T, HK, **f32)
    else:
        dv = out["dv"].copy_(dv)
        dk_out, dw_out, db_out = out["dk"], out["dw"], out["db"]
    _run(kern._bwd_block_kernel, (NB, B * HK), cfg.warps.block,
         K=k, W=wf, BETA=bf, UT_TW=TW, UT_T=TM, UT_M=MM, UT_N=NM,
         DK_BLOCK_END=dka, DK=dk, DW=dw, DUT_T=dt,
         DUT_TW=dtwq, OUT_DK=dk_out, OUT_DW=dw_out, OUT_DBETA=db_out, T=T, NB=NB, GROUP=grp,
         HQ=HQ, HK=HK, D=D, BT=BT, DC=cfg.block_cols, PREC=bprec)
    dG = dg.transpose(1, 2) if has_g else None
    return dq, dk_out, dv, dw_out, db_out, dG

