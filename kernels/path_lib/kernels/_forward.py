"""The forward pass: the precomputation, then the attention kernels (``_fwd_kernel``, and
``_fwd_inter_kernel`` for the earlier segments where the configuration splits the forward), returning the
output and what the backward reads (:class:`Saved`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from ._config import KernelConfig
from ._launch import _blocks_of, _launch, _tl, _triton
from ._precompute import _precompute


class Saved(NamedTuple):
    """What the forward keeps for the backward, all padded to whole blocks (``T`` below; names as in
    ``_triton_kernels``' glossary). The inputs: ``q`` ``[B, T, Hq, D]``; ``k``, ``v`` ``[B, T, Hk, D]``;
    ``w`` ``[B, T, Hk, D]`` and ``beta`` ``[B, T, Hk]`` float32; ``gate_cumsum`` ``[B, Hq, T]`` float32 or
    None. The forward's results: ``o`` (q's shape and dtype), ``lse`` ``[B, Hq, T]`` float32 (log2),
    ``q_seg_start`` (``Q0``, q's shape). The factors: ``ut_tw`` (``T W``) ``[B, T, Hk, D]`` float32,
    ``k_block_end`` (``K->``) and ``k_seg_end`` (``Kseg``) ``[B, T, Hk, D]``, ``ut_t`` (``T``),
    ``ut_m`` (``M``), ``ut_n`` (``N``) ``[B, Hk, NB, BT, BT]`` float32, ``suffix_r`` (``R_j``)
    ``[B, Hk, NB, D, D]``, ``seg_prod`` (``Seg``) ``[B, Hk, NS, D, D]`` float32, ``pair_prod`` (``Om``)
    ``[B, Hk, NS (NS - 1) / 2, D, D]``. ``ut_n`` and ``suffix_r`` are None after a forward-only call,
    ``ut_t`` and ``seg_prod`` too (nothing reads them then)."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    w: torch.Tensor
    beta: torch.Tensor
    gate_cumsum: Optional[torch.Tensor]
    o: torch.Tensor
    lse: torch.Tensor
    q_seg_start: torch.Tensor
    ut_tw: torch.Tensor
    k_block_end: torch.Tensor
    k_seg_end: torch.Tensor
    ut_t: Optional[torch.Tensor]
    ut_m: torch.Tensor
    ut_n: Optional[torch.Tensor]
    suffix_r: Optional[torch.Tensor]
    seg_prod: Optional[torch.Tensor]
    pair_prod: torch.Tensor


def _forward_impl(q, k, v, w, beta, G, scale, cfg: KernelConfig):
    """Forward kernels at configuration ``cfg`` on padded inputs (shapes as in :class:`Saved`; ``G`` the
    gates' cumulative sum ``[B, T, Hq]`` or None); returns ``(o, Saved)``."""
    kern = _triton()
    B, T, HQ, D = q.shape
    HK = k.shape[2]
    BT, SB, NB, NS = _blocks_of(cfg, T)
    wf, bf = w.float().contiguous(), beta.float().contiguous()
    pre = _precompute(k, wf, bf, cfg)
    if cfg.forward_only:
        # no backward: T (read only by _prep_kernel) and the segment products (read only by _pair_kernel)
        # are freed before the attention kernels' buffers are taken, which lowers the forward's peak
        pre["TM"] = pre["SEG"] = None
    o = torch.empty_like(q)
    lse = torch.empty(B, HQ, T, dtype=torch.float32, device=q.device)
    # the query states at their segment's start: the backward reads them only in the input dtype
    q0 = torch.empty(B, T, HQ, D, dtype=q.dtype, device=q.device)
    Gh = G.transpose(1, 2).contiguous() if G is not None else lse  # without a gate: any [B, HQ, T] (not read)
    # earlier segments on FR query rows per program in a second kernel, from the partial results
    # of the rows outside the first segment (float32, freed on return)
    split = cfg.fwd_split
    op = torch.empty(B, T, HQ, D, dtype=torch.float32, device=q.device) if split else o
    meta = dict(HQ=HQ, HK=HK, D=D, BT=BT, HAS_G=G is not None, CDT=_tl(cfg.compute_dtype), PREC=cfg.precision)
    _launch(kern._fwd_kernel, (NB, B * HQ), cfg, "fwd",
            Q=q, K=k, V=v, W=wf, UT_TW=pre["TW"], K_BLOCK_END=pre["KA"], K_SEG_END=pre["KS"], UT_M=pre["MM"],
            PAIR_PROD=pre["OM"], GATE_CUMSUM=Gh, O=o, LSE=lse, Q_SEG_START=q0, O_PARTIAL=op,
            scale=scale, T=T, NB=NB, NS=NS, SB=SB,
            **meta, TDT=_tl(cfg.transport_dtype), SEGS=NS > 1, SPLIT=split)
    if split:
        _launch(kern._fwd_inter_kernel, (NB // (cfg.fwd_rows // BT), B * HQ), cfg, "fwd_inter",
                Q_SEG_START=q0, K_SEG_END=pre["KS"], V=v, PAIR_PROD=pre["OM"], GATE_CUMSUM=Gh, O=o, LSE=lse,
                O_PARTIAL=op, scale=scale, T=T, NB=NB, NS=NS, SB=SB,
                **meta, QR=cfg.fwd_rows)
    del op
    saved = Saved(q=q, k=k, v=v, w=wf, beta=bf, gate_cumsum=Gh if G is not None else None, o=o, lse=lse,
                  q_seg_start=q0, ut_tw=pre["TW"], k_block_end=pre["KA"], k_seg_end=pre["KS"], ut_t=pre["TM"],
                  ut_m=pre["MM"], ut_n=pre["NM"], suffix_r=pre["RS"], seg_prod=pre["SEG"], pair_prod=pre["OM"])
    return o, saved

