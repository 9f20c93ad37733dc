"""Triton kernels of PaTH attention (forward and backward).

All kernels work on padded, contiguous tensors: token tensors ``[B, T, H, D]`` with ``T`` a multiple of
the block length ``BT`` (padding at the end of each sequence: identity transforms, zero q/k/v, so
causality keeps it out of every real row). Block matrices are ``[B, Hk, NB, BT, BT]``; per-segment
``D x D`` matrices ``[B, Hk, NS, D, D]``.

Notation (row-vector convention, ``P_b = I - W_b^T T_b W_b`` the product of block ``b``'s transforms):

* ``Q<-_c``   queries of block c moved to the block's start (``q_i^T H_i ... H_start``);
* ``Qst(c,m)`` the query state when it meets key block m: ``Q<-_c P_{c-1} ... P_{m+1}``;
* ``K->_b``   keys moved to their block's end; ``Kseg_b`` keys moved to their *segment's* end;
* a segment is ``SB`` consecutive blocks; ``Seg_k`` its whole product; ``Q0_c`` the query state at the
  start of its own segment; ``Om(kc, k) = Seg_{kc-1} ... Seg_{k+1}`` so that the query state at the
  end of an earlier segment k is ``Q0_c Om(kc, k)`` (random access, no scan needed).

Kernels. Forward: ``_ut_a_kernel`` and ``_ut_kernel`` (per block: ``A = strictLower(diag(beta) W W^T)``,
then from it the UT transform ``T``, ``N`` in float32 accuracy),
``_prep_kernel`` (per block: ``T W``, ``M``, ``K->``), ``_seg_fwd_kernel`` (per segment: suffix products
``R_j``, ``Kseg``, ``Seg``), ``_pair_kernel`` (``Om``), ``_fwd_kernel`` (per query block: diagonal block
by the UT all-pairs form, own segment with the thin scan ``Q <- Q - (Q W^T)(T W)``, earlier segments as
plain attention against ``Kseg``, the query state there ``Q0 Om`` by random access: one ``D x D``
product per earlier segment; on big GPUs with 16-bit inputs it stops after the own segment and
``_fwd_inter_kernel`` continues over the earlier segments on 128-row tiles). Backward:
``_delta_kernel`` (``do . o``), ``_bwd_inter_q_kernel`` (dQ0, dSeg), ``_bwd_inter_kv_kernel`` (dKseg,
dV), ``_bwd_intra_kernel`` (pairs of blocks inside a segment, transports, dW and d(T W) of crossed
blocks), ``_bwd_diag_kernel`` (the diagonal blocks, in parallel), ``_seg_bwd_kernel`` +
``_seg_grad_kernel`` (chain rule through the segment products) and ``_bwd_block_kernel`` (per-block
chain rule through T W, K->, M and the UT transform into dk, dw, dbeta). The design is in
``benchmarks/DESIGN.md``; how the kernels came to this form, with the measurements, is in
``benchmarks/HISTORY.md``.

Parameters. The launches (``_precompute.py``, ``_forward.py``, ``_backward.py``) passes every argument by name, and a name means the same tensor
in every kernel (per key head ``Hk`` or per query head ``Hq``; token tensors ``[B, T, H, D]``, block
matrices ``[B, H, NB, BT, BT]``, per-segment matrices ``[B, H, NS, D, D]``, row statistics and gates
``[B, Hq, T]``):

* inputs ``Q`` (Hq), ``K``, ``V``, ``W`` (Hk), ``BETA`` (``[B, T, Hk]``), ``GATE_CUMSUM`` (``G = cumsum(g)``,
  ``[B, Hq, T]``; any float32 row tensor when ``HAS_G`` is False), ``DO`` (Hq);
* per-block factors (Hk): ``UT_T`` (``T = N diag(beta)``), ``UT_N`` (``N = (I + A)^-1``), ``UT_M``
  (``M = T strictLower(W K^T)``), ``UT_TW`` (``T W``, a token tensor), ``K_BLOCK_END`` (``K->``);
* per-segment products (Hk): ``SUFFIX_R`` (``R_j``, ``[B, Hk, NB, D, D]``), ``SEG_PROD`` (``Seg_k``),
  ``PAIR_PROD`` (``Om``, ``[B, Hk, NS (NS - 1) / 2, D, D]``, in the input dtype), ``K_SEG_END``
  (``Kseg``);
* forward results (Hq): ``O``, ``LSE`` (log2-sum-exp, ``[B, Hq, T]``), ``Q_SEG_START`` (``Q0``),
  ``O_PARTIAL`` (float32 partial output of the split forward), ``DELTA`` (``do . o``, ``[B, Hq, T]``);
* gradients: ``DQ_SEG_START`` (of ``Q0``; the intra kernel leaves the gradient of ``Q<-`` there, read by
  the diagonal kernel as ``DQ_BLOCK_START``), ``DSEG_PROD`` (Hq), ``DK_SEG_END`` (of ``Kseg``),
  ``DK_BLOCK_END`` (of ``K->``), ``DUT_TW`` (of ``T W``), ``DUT_T`` (of ``T``, block matrices), ``DQ``,
  ``DK``, ``DV``, ``DW``, ``DGATE`` (of ``G``, ``[B, Hq, T]``), all per query head and float32 but ``DQ``
  (``DK_SEG_END`` and ``DSEG_PROD`` are summed over each group of query heads before the segment chain's
  kernels read them per key head);
  the segment chain's state ``SEG_GRAD_STATE`` (``XS``, like ``SUFFIX_R``; its contributions to
  ``DK_BLOCK_END``, ``DUT_TW`` and ``DW`` are added in place); the outputs ``OUT_DK``, ``OUT_DW``,
  ``OUT_DBETA`` (Hk);
* scratch: ``Q_STATE_SCRATCH`` (the intra kernel's query states, ``[B, Hq, NS, SB * BT, D]``);
* scalars: ``scale``, ``T`` (padded length), ``NB`` (blocks), ``NS`` (segments), ``SB`` (blocks per
  segment), ``GROUP`` (query heads per key head); constexprs ``HQ``, ``HK``, ``D``, ``BT``, the rows per
  program ``QR`` / ``KR``, the column chunks ``DC`` / ``DR``, the dtypes ``CDT`` / ``TDT`` and precisions
  ``PREC`` / ``SOLVE_PREC`` (``KernelConfig`` in ``_config.py``), ``HAS_G``, ``SEGS``, ``SPLIT``, and
  ``STORE_N`` / ``STORE_R`` (whether ``UT_N`` and ``SUFFIX_R``, read only by the backward, are written).

Files: ``_triton_common.py`` (shared helpers), ``_triton_forward.py``, ``_triton_backward.py``,
``_triton_factors.py`` (per-block and per-segment work, forward and backward). This module gathers the
kernels and their helpers by name (for the launches and the kernel chapter's listings).
"""
from ._triton_backward import (_bwd_diag_kernel, _bwd_inter_kv_kernel, _bwd_inter_q_kernel, _bwd_intra_kernel,
                               _delta_kernel)
from ._triton_common import LOG2E, _chunk, _query_head, _sq, _tile
from ._triton_factors import (_blk16, _bwd_block_kernel, _inv16_diag, _pair_kernel, _prep_kernel, _put16,
                              _seg_bwd_kernel, _seg_fwd_kernel, _seg_grad_kernel, _ut_a_kernel, _ut_kernel)
from ._triton_forward import _earlier_segments, _fwd_inter_kernel, _fwd_kernel

__all__ = ["LOG2E", "_fwd_kernel", "_fwd_inter_kernel", "_earlier_segments", "_delta_kernel", "_bwd_inter_q_kernel",
           "_bwd_inter_kv_kernel", "_bwd_intra_kernel", "_bwd_diag_kernel", "_ut_a_kernel", "_ut_kernel",
           "_prep_kernel", "_seg_fwd_kernel", "_pair_kernel", "_seg_bwd_kernel", "_seg_grad_kernel",
           "_bwd_block_kernel", "_tile", "_chunk", "_sq", "_query_head", "_inv16_diag", "_blk16", "_put16"]
