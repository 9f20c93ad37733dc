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

Parameters. The launcher (``_path.py``) passes every argument by name, and a name means the same tensor
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
  ``PREC`` / ``SOLVE_PREC`` (``KernelConfig`` in ``_path.py``), ``HAS_G``, ``SEGS``, ``SPLIT``, and
  ``STORE_N`` / ``STORE_R`` (whether ``UT_N`` and ``SUFFIX_R``, read only by the backward, are written).

``LOG2E`` (log2 e, a ``tl.constexpr`` global as Triton requires of globals read in a kernel) turns
natural-log quantities (logits times ``scale``, the gates) into the base-2 exponent of ``tl.exp2``.
"""
import os

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


def _interpreter_compat():
    """Triton 3.6's interpreter converts loop bounds with ``int(array)``, which NumPy >= 2.4 refuses
    for 1-element, 1-d arrays; convert through ``.reshape(-1)[0]`` instead (interpreter only)."""
    try:
        from triton.runtime import interpreter as _it
    except Exception:  # pragma: no cover
        return
    orig = getattr(_it, "_patch_lang_tensor", None)
    if orig is None or getattr(orig, "_path_compat", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._path_compat = True
    _it._patch_lang_tensor = patched


if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    _interpreter_compat()


@triton.jit
def _tile(ptr, base, t0, H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr):
    """Pointers of a ``[BT, D]`` tile of a ``[B, T, H, D]`` tensor (base: int64 offset of (b, 0, h, 0))."""
    rt = tl.arange(0, BT)
    rd = tl.arange(0, D)
    return ptr + base + (t0 + rt).to(tl.int64)[:, None] * (H * D) + rd[None, :]


@triton.jit
def _chunk(ptr, base, t0, d0, H: tl.constexpr, D: tl.constexpr, DC: tl.constexpr, BT: tl.constexpr):
    """Pointers of the ``[BT, DC]`` chunk at columns ``d0 : d0 + DC`` of a ``[BT, D]`` tile of a
    ``[B, T, H, D]`` tensor (base as in ``_tile``)."""
    rt = tl.arange(0, BT)
    rc = tl.arange(0, DC)
    return ptr + base + (t0 + rt).to(tl.int64)[:, None] * (H * D) + d0 + rc[None, :]


@triton.jit
def _sq(ptr, base, idx, N: tl.constexpr):
    """Pointers of the ``idx``-th ``[N, N]`` matrix of a contiguous stack starting at ``base``."""
    rn = tl.arange(0, N)
    return ptr + base + idx * (N * N) + rn[:, None] * N + rn[None, :]



@triton.jit
def _query_head(i_bh, T, HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr):
    """A program's batch ``i_b``, query head ``i_hq`` and key head ``i_hk`` (grouped-query heads) from its
    index ``i_bh`` over ``B * HQ``, and the int64 offsets of ``(b, 0, h, 0)`` in the query-head and
    key-head ``[B, T, H, D]`` tensors (``qbase``, ``kbase``) and of ``(b, h, 0)`` in the ``[B, HQ, T]``
    row statistics and gates (``gbase``)."""
    i_b = i_bh // HQ
    i_hq = i_bh % HQ
    i_hk = i_hq // (HQ // HK)
    qbase = (i_b.to(tl.int64) * T * HQ + i_hq) * D
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    gbase = (i_b.to(tl.int64) * HQ + i_hq) * T
    return i_b, i_hq, i_hk, qbase, kbase, gbase


@triton.jit
def _delta_kernel(DO, O, DELTA, T, HQ: tl.constexpr, D: tl.constexpr, BT: tl.constexpr):
    """``delta_i = do_i . o_i`` in float32 for one block of one query head (``DELTA``: ``[B, HQ, T]``)."""
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // HQ
    i_hq = i_bh % HQ
    rt = tl.arange(0, BT)
    qbase = (i_b.to(tl.int64) * T * HQ + i_hq) * D
    do = tl.load(_tile(DO, qbase, i_c * BT, HQ, D, BT)).to(tl.float32)
    o = tl.load(_tile(O, qbase, i_c * BT, HQ, D, BT)).to(tl.float32)
    tl.store(DELTA + i_bh.to(tl.int64) * T + i_c * BT + rt, tl.sum(do * o, 1))

@triton.jit
def _earlier_segments(m_i, l_i, acc, Q_SEG_START, K_SEG_END, V, PAIR_PROD, GATE_CUMSUM,
                      qbase, kbase, obase, gbase, c0, ks, SB, sl2, gref,
                      HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, QR: tl.constexpr,
                      HAS_G: tl.constexpr, CDT: tl.constexpr, PREC: tl.constexpr):
    """Online softmax (state ``m_i, l_i, acc``) of ``QR`` query rows starting at ``c0`` over the keys of the
    earlier segments ``ks - 1 ... 0``, right to left: keys moved to their segment's end; the query state
    at the end of segment k is ``Q0 Om(ks, k)``, by random access as in the backward (the same rounding:
    ``Q0`` as stored in ``Q_SEG_START``, products in the input dtype), so no float32 query state is carried through the
    loop. ``gref``: the rows' gate reference (the query's gate is in the log-sum-exp)."""
    rt = tl.arange(0, BT)
    for jk in range(0, ks):
        kseg = ks - 1 - jk
        om = tl.load(_sq(PAIR_PROD, obase, (ks * (ks - 1)) // 2 + kseg, D))
        q0 = tl.load(_tile(Q_SEG_START, qbase, c0, HQ, D, QR))
        qc = tl.dot(q0.to(CDT), om.to(CDT), input_precision=PREC).to(CDT)
        for jb in range(0, SB):
            t0 = (kseg * SB + jb) * BT
            kk = tl.load(_tile(K_SEG_END, kbase, t0, HK, D, BT))
            vb = tl.load(_tile(V, kbase, t0, HK, D, BT))
            s2 = tl.dot(qc, tl.trans(kk.to(CDT)), input_precision=PREC) * sl2
            if HAS_G:
                s2 -= ((tl.load(GATE_CUMSUM + gbase + t0 + rt) - gref) * LOG2E)[None, :]
            m_new = tl.maximum(m_i, tl.max(s2, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s2 - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(CDT), vb.to(CDT), input_precision=PREC)
            m_i = m_new
    return m_i, l_i, acc


@triton.jit
def _fwd_kernel(Q, K, V, W, UT_TW, K_BLOCK_END, K_SEG_END, UT_M, PAIR_PROD, GATE_CUMSUM,
                O, LSE, Q_SEG_START, O_PARTIAL,
                scale, T, NB, NS, SB,
                HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
                HAS_G: tl.constexpr, CDT: tl.constexpr, TDT: tl.constexpr, PREC: tl.constexpr,
                SEGS: tl.constexpr = True, SPLIT: tl.constexpr = False):
    """One query block (``BT`` rows), one query head: diagonal block, own segment and (unless ``SPLIT``)
    the earlier segments. With ``SPLIT`` the earlier segments are left to ``_fwd_inter_kernel``: rows
    outside the first segment store their partial result (normalized, float32, in ``O_PARTIAL``;
    its log-sum-exp in ``LSE``) instead of ``O``."""
    i_c = tl.program_id(0)
    i_b, i_hq, i_hk, qbase, kbase, gbase = _query_head(tl.program_id(1), T, HQ, HK, D)
    rt = tl.arange(0, BT)
    mbase = (i_b.to(tl.int64) * HK + i_hk) * NB * BT * BT
    obase = (i_b.to(tl.int64) * HK + i_hk) * ((NS * (NS - 1)) // 2) * D * D
    sl2 = scale * LOG2E
    c0 = i_c * BT

    q = tl.load(_tile(Q, qbase, c0, HQ, D, BT)).to(tl.float32)
    wc = tl.load(_tile(W, kbase, c0, HK, D, BT))
    twc = tl.load(_tile(UT_TW, kbase, c0, HK, D, BT))
    causal = rt[:, None] >= rt[None, :]
    bm = tl.dot(q.to(TDT), tl.trans(wc.to(TDT)), input_precision=PREC)
    bm = tl.where(causal, bm, 0.0)
    qs = q - tl.dot(bm.to(TDT), twc.to(TDT), input_precision=PREC)

    # diagonal block: S = tril(Q K^T) - tril(Q W^T) M,  M = T strictLower(W K^T)
    kc = tl.load(_tile(K, kbase, c0, HK, D, BT))
    vc = tl.load(_tile(V, kbase, c0, HK, D, BT))
    mc = tl.load(_sq(UT_M, mbase, i_c, BT))
    s = tl.dot(q.to(CDT), tl.trans(kc.to(CDT)), input_precision=PREC) \
        - tl.dot(bm.to(TDT), mc.to(TDT), input_precision=PREC)
    s2 = s * sl2
    gref = 0.0
    if HAS_G:
        # the query's gate is a constant of each softmax row: it leaves the loops and is added to the
        # log-sum-exp at the end; keys enter as (g_k - gref) log2(e), gref one reference per
        # program, so that the difference is taken before anything large is rounded
        gq = tl.load(GATE_CUMSUM + gbase + c0 + rt)
        gref = tl.max(gq, 0)
        s2 -= ((gq - gref) * LOG2E)[None, :]
    s2 = tl.where(causal, s2, float("-inf"))
    m_i = tl.max(s2, 1)
    p = tl.exp2(s2 - m_i[:, None])
    l_i = tl.sum(p, 1)
    acc = tl.dot(p.to(CDT), vc.to(CDT), input_precision=PREC)

    # own segment: thin scan over blocks c-1 ... a
    a_blk = (i_c // SB) * SB
    for j in range(0, i_c - a_blk):
        t0 = (i_c - 1 - j) * BT
        ka = tl.load(_tile(K_BLOCK_END, kbase, t0, HK, D, BT))
        vb = tl.load(_tile(V, kbase, t0, HK, D, BT))
        s2 = tl.dot(qs.to(CDT), tl.trans(ka.to(CDT)), input_precision=PREC) * sl2
        if HAS_G:
            s2 -= ((tl.load(GATE_CUMSUM + gbase + t0 + rt) - gref) * LOG2E)[None, :]
        m_new = tl.maximum(m_i, tl.max(s2, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s2 - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(CDT), vb.to(CDT), input_precision=PREC)
        m_i = m_new
        wb = tl.load(_tile(W, kbase, t0, HK, D, BT))
        twb = tl.load(_tile(UT_TW, kbase, t0, HK, D, BT))
        u = tl.dot(qs.to(TDT), tl.trans(wb.to(TDT)), input_precision=PREC)
        qs = qs - tl.dot(u.to(TDT), twb.to(TDT), input_precision=PREC)
    tl.store(_tile(Q_SEG_START, qbase, c0, HQ, D, BT), qs.to(Q_SEG_START.dtype.element_ty))

    # earlier segments, right to left (SEGS=False compiles this out: single-segment mode for GPUs with
    # little shared memory; SPLIT=True leaves it to _fwd_inter_kernel, on more rows per program)
    if SEGS and not SPLIT:
        tl.debug_barrier()
        m_i, l_i, acc = _earlier_segments(m_i, l_i, acc, Q_SEG_START, K_SEG_END, V, PAIR_PROD, GATE_CUMSUM,
                                          qbase, kbase, obase, gbase, c0, i_c // SB, SB, sl2, gref,
                                          HQ, HK, D, BT, BT, HAS_G, CDT, PREC)

    o = acc / l_i[:, None]
    lse = m_i + tl.log2(l_i)
    if HAS_G:
        lse += (gq - gref) * LOG2E
    tl.store(LSE + gbase + c0 + rt, lse)
    if SPLIT and i_c >= SB:
        tl.store(_tile(O_PARTIAL, qbase, c0, HQ, D, BT), o)
    else:
        tl.store(_tile(O, qbase, c0, HQ, D, BT), o.to(O.dtype.element_ty))


@triton.jit
def _fwd_inter_kernel(Q_SEG_START, K_SEG_END, V, PAIR_PROD, GATE_CUMSUM, O, LSE, O_PARTIAL,
                      scale, T, NB, NS, SB,
                      HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
                      HAS_G: tl.constexpr, CDT: tl.constexpr, PREC: tl.constexpr, QR: tl.constexpr):
    """Earlier segments of the forward for ``QR`` query rows (``QR / BT`` consecutive blocks of one
    segment, which share their ``Om``), after ``_fwd_kernel`` with ``SPLIT``: plain attention of
    ``Q0 Om(ks, k)`` against the keys moved to the end of segment ``k``, right to left, continuing the
    online softmax from the partial result (``O_PARTIAL``, ``LSE``) of the diagonal block and own segment."""
    i_c = tl.program_id(0)
    i_b, i_hq, i_hk, qbase, kbase, gbase = _query_head(tl.program_id(1), T, HQ, HK, D)
    rq = tl.arange(0, QR)
    obase = (i_b.to(tl.int64) * HK + i_hk) * ((NS * (NS - 1)) // 2) * D * D
    sl2 = scale * LOG2E
    c0 = i_c * QR
    ks = (c0 // BT) // SB
    if ks > 0:  # rows of the first segment were finished by _fwd_kernel
        m_i = tl.load(LSE + gbase + c0 + rq)
        l_i = tl.full([QR], 1.0, dtype=tl.float32)
        acc = tl.load(_tile(O_PARTIAL, qbase, c0, HQ, D, QR))
        gref = 0.0
        if HAS_G:  # the query's gate as in _fwd_kernel: out of the loop, back in at the end
            gq = tl.load(GATE_CUMSUM + gbase + c0 + rq)
            gref = tl.max(gq, 0)
            m_i -= (gq - gref) * LOG2E
        m_i, l_i, acc = _earlier_segments(m_i, l_i, acc, Q_SEG_START, K_SEG_END, V, PAIR_PROD, GATE_CUMSUM,
                                          qbase, kbase, obase, gbase, c0, ks, SB, sl2, gref,
                                          HQ, HK, D, BT, QR, HAS_G, CDT, PREC)
        o = acc / l_i[:, None]
        tl.store(_tile(O, qbase, c0, HQ, D, QR), o.to(O.dtype.element_ty))
        lse = m_i + tl.log2(l_i)
        if HAS_G:
            lse += (gq - gref) * LOG2E
        tl.store(LSE + gbase + c0 + rq, lse)


@triton.jit
def _bwd_inter_q_kernel(Q_SEG_START, K_SEG_END, V, GATE_CUMSUM, DO, LSE, DELTA, SEG_PROD, PAIR_PROD,
                        DQ_SEG_START, DSEG_PROD, DGATE,
                        scale, T, NB, NS, SB,
                        HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
                        HAS_G: tl.constexpr, CDT: tl.constexpr, TDT: tl.constexpr, PREC: tl.constexpr,
                        DC: tl.constexpr, QR: tl.constexpr):
    """Query side, earlier segments: gradient of Q0 and of every Seg_k (atomics, per query head) for
    ``QR`` query rows (``QR / BT`` consecutive blocks of one segment, which share their ``Om``), against
    the keys in tiles of ``BT`` rows."""
    i_c = tl.program_id(0)
    i_b, i_hq, i_hk, qbase, kbase, gbase = _query_head(tl.program_id(1), T, HQ, HK, D)
    rt = tl.arange(0, BT)
    rq = tl.arange(0, QR)
    rd = tl.arange(0, D)
    rc = tl.arange(0, DC)
    sbase = (i_b.to(tl.int64) * HK + i_hk) * NS * D * D
    dsbase = (i_b.to(tl.int64) * HQ + i_hq) * NS * D * D
    obase = (i_b.to(tl.int64) * HK + i_hk) * ((NS * (NS - 1)) // 2) * D * D
    sl2 = scale * LOG2E
    c0 = i_c * QR
    ks = (c0 // BT) // SB
    x = tl.zeros([QR, D], dtype=tl.float32)
    if ks > 0:
        q0 = tl.load(_tile(Q_SEG_START, qbase, c0, HQ, D, QR))
        do = tl.load(_tile(DO, qbase, c0, HQ, D, QR))
        lse = tl.load(LSE + gbase + c0 + rq)
        delta = tl.load(DELTA + gbase + c0 + rq)
        if HAS_G:  # the query's gate into the log-sum-exp once (as in the forward)
            gq = tl.load(GATE_CUMSUM + gbase + c0 + rq)
            gref = tl.max(gq, 0)
            lse -= (gq - gref) * LOG2E
        dgr = tl.zeros([QR], dtype=tl.float32)
        for k in range(0, ks):
            om = tl.load(_sq(PAIR_PROD, obase, (ks * (ks - 1)) // 2 + k, D))
            qe = tl.dot(q0.to(TDT), om.to(TDT), input_precision=PREC).to(CDT)
            # x: the gradient of the query state met by segment k - 1; first its share of dSeg_k and
            # its transport across segment k, before the attention loop, which then accumulates
            # into x itself: one float32 [QR, D] tile through the loop instead of two
            if k > 0:
                if DC == D:
                    dseg = tl.dot(tl.trans(qe).to(TDT), x.to(TDT), input_precision=PREC)
                    tl.atomic_add(DSEG_PROD + dsbase + k * D * D + rd[:, None] * D + rd[None, :], dseg)
                else:
                    # dSeg_k += qe^T x by column chunks of x (through these rows' DQ0 tile, which holds
                    # x at the end): a D x DC float32 tile at a time instead of the whole D x D
                    tl.store(_tile(DQ_SEG_START, qbase, c0, HQ, D, QR), x)
                    tl.debug_barrier()
                    for d0 in range(0, D, DC):
                        xc = tl.load(_chunk(DQ_SEG_START, qbase, c0, d0, HQ, D, DC, QR))
                        dseg = tl.dot(tl.trans(qe).to(TDT), xc.to(TDT), input_precision=PREC)
                        tl.atomic_add(DSEG_PROD + dsbase + k * D * D + rd[:, None] * D + d0 + rc[None, :], dseg)
                    tl.debug_barrier()
                segm = tl.load(_sq(SEG_PROD, sbase, k, D))
                x = tl.dot(x.to(TDT), tl.trans(segm).to(TDT), input_precision=PREC)
            for jb in range(0, SB):
                t0 = (k * SB + jb) * BT
                kk = tl.load(_tile(K_SEG_END, kbase, t0, HK, D, BT))
                vb = tl.load(_tile(V, kbase, t0, HK, D, BT))
                s2 = tl.dot(qe, tl.trans(kk.to(CDT)), input_precision=PREC) * sl2
                if HAS_G:
                    s2 -= ((tl.load(GATE_CUMSUM + gbase + t0 + rt) - gref) * LOG2E)[None, :]
                p = tl.exp2(s2 - lse[:, None])
                dp = tl.dot(do.to(CDT), tl.trans(vb.to(CDT)), input_precision=PREC)
                ds = p * (dp - delta[:, None])
                dgr += tl.sum(ds, 1)
                x = tl.dot((ds * scale).to(CDT), kk.to(CDT), x, input_precision=PREC)
        if HAS_G:
            pg = DGATE + gbase + c0 + rq
            tl.store(pg, tl.load(pg) + dgr)
    tl.store(_tile(DQ_SEG_START, qbase, c0, HQ, D, QR), x)


@triton.jit
def _bwd_inter_kv_kernel(Q_SEG_START, K_SEG_END, V, GATE_CUMSUM, DO, LSE, DELTA, PAIR_PROD, DK_SEG_END, DV, DGATE,
                         scale, T, NB, NS, SB,
                         HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
                         HAS_G: tl.constexpr, CDT: tl.constexpr, TDT: tl.constexpr, PREC: tl.constexpr,
                         KR: tl.constexpr, DC: tl.constexpr):
    """Key side, later segments: dKseg and dV of ``KR`` key rows (``KR / BT`` consecutive blocks of one
    segment) for one query head (no atomics). Per later query segment kc the keys are moved once,
    ``Ke = Kseg Om(kc, kb)^T``, met by the stored ``Q0`` (``Q_SEG_START``) of each query block (``BT`` rows), and
    ``dKseg += (sum_c dS^T Q0_c) Om(kc, kb)``. Logits are formed key-major (``S^T = Ke Q0^T``), so that
    ``P^T`` and ``dS^T`` feed ``dV += P^T dO`` and ``dKe += dS^T Q0`` without a transpose. With one block
    of keys (``KR == BT``) dKseg is a register tile; with more it is accumulated in ``DK_SEG_END``
    (stored at the first later segment, added to after) in ``KR x DC`` column chunks, so that only ``dV`` and
    ``dKe`` are float32 tiles through the loop."""
    i_kb = tl.program_id(0)
    i_b, i_hq, i_hk, qbase, kbase, gbase = _query_head(tl.program_id(1), T, HQ, HK, D)
    rt = tl.arange(0, BT)
    rk = tl.arange(0, KR)
    rd = tl.arange(0, D)
    rc = tl.arange(0, DC)
    obase = (i_b.to(tl.int64) * HK + i_hk) * ((NS * (NS - 1)) // 2) * D * D
    sl2 = scale * LOG2E
    t0 = i_kb * KR
    kb = (t0 // BT) // SB
    vb = tl.load(_tile(V, kbase, t0, HK, D, KR))
    if HAS_G:
        gk = tl.load(GATE_CUMSUM + gbase + t0 + rk)
        gref = tl.min(gk, 0)
        gk2 = (gk - gref) * LOG2E
    if KR == BT:
        dk = tl.zeros([KR, D], dtype=tl.float32)
    dv = tl.zeros([KR, D], dtype=tl.float32)
    dgc = tl.zeros([KR], dtype=tl.float32)
    for kc in range(kb + 1, NS):
        # the keys meet the queries of segment kc as Kseg Om^T (q_e k^T = Q0 Om k^T): one D x D
        # product per (key rows, query segment), not one per (key rows, query block)
        oidx = (kc * (kc - 1)) // 2 + kb
        om = tl.load(_sq(PAIR_PROD, obase, oidx, D))
        kk = tl.load(_tile(K_SEG_END, kbase, t0, HK, D, KR))
        ke = tl.dot(kk.to(TDT), tl.trans(om).to(TDT), input_precision=PREC).to(CDT)
        dke = tl.zeros([KR, D], dtype=tl.float32)
        c_hi = tl.minimum((kc + 1) * SB, NB)
        for c in range(kc * SB, c_hi):
            c0 = c * BT
            q0 = tl.load(_tile(Q_SEG_START, qbase, c0, HQ, D, BT)).to(CDT)
            do = tl.load(_tile(DO, qbase, c0, HQ, D, BT)).to(CDT)
            lse = tl.load(LSE + gbase + c0 + rt)
            delta = tl.load(DELTA + gbase + c0 + rt)
            st = tl.dot(ke, tl.trans(q0), input_precision=PREC) * sl2          # [KR, BT]
            if HAS_G:
                st -= gk2[:, None]
                lse -= (tl.load(GATE_CUMSUM + gbase + c0 + rt) - gref) * LOG2E
            pt = tl.exp2(st - lse[None, :])
            dpt = tl.dot(vb.to(CDT), tl.trans(do), input_precision=PREC)
            dst = pt * (dpt - delta[None, :])
            dv += tl.dot(pt.to(CDT), do, input_precision=PREC)
            dke += tl.dot(dst.to(CDT), q0, input_precision=PREC)
            dgc += tl.sum(dst, 1)
        if KR == BT:
            dk += tl.dot(dke.to(TDT), om.to(TDT), input_precision=PREC)
        else:
            dket = dke.to(TDT)
            for d0 in range(0, D, DC):
                omc = tl.load(PAIR_PROD + obase + oidx * (D * D) + rd[:, None] * D + d0 + rc[None, :])
                pc = _chunk(DK_SEG_END, qbase, t0, d0, HQ, D, DC, KR)
                dks_c = scale * tl.dot(dket, omc.to(TDT), input_precision=PREC)
                if kc == kb + 1:  # first later segment: stored (no zeroing), added to afterwards
                    tl.store(pc, dks_c)
                else:
                    tl.store(pc, tl.load(pc) + dks_c)
    if KR == BT:
        tl.store(_tile(DK_SEG_END, qbase, t0, HQ, D, BT), dk * scale)
    elif kb == NS - 1:  # the last segment's keys meet no later segment
        tl.store(_tile(DK_SEG_END, qbase, t0, HQ, D, KR), tl.zeros([KR, D], dtype=tl.float32))
    tl.store(_tile(DV, qbase, t0, HQ, D, KR), dv)
    if HAS_G:
        pg = DGATE + gbase + t0 + rk
        tl.store(pg, tl.load(pg) - dgc)


@triton.jit
def _bwd_intra_kernel(Q, V, W, UT_TW, K_BLOCK_END, GATE_CUMSUM, DO, LSE, DELTA, DQ_SEG_START, Q_STATE_SCRATCH,
                      DK_BLOCK_END, DV, DW, DUT_TW, DGATE,
                      scale, T, NB, NS, SB,
                      HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
                      HAS_G: tl.constexpr, CDT: tl.constexpr, TDT: tl.constexpr, PREC: tl.constexpr):
    """One segment, one query head: the own-segment pairs and the transports inside the segment,
    sequentially over its query blocks (so the per-block accumulators need no atomics). Query states of
    the current block are kept in a per-program scratch (``SB`` tiles, in the dtype of the products
    that read them). The diagonal blocks are left to ``_bwd_diag_kernel``, which reads the
    gradient carried to ``Q<-`` in ``DQ_SEG_START`` (which held the gradient at ``Q0`` before).

    A crossing of block m is ``Q' = Q - (Q W^T) (T W)``: its gradients are taken with respect to ``W``
    and to the stored ``T W`` (as fla's intra-chunk kernel), ``d(T W) = -(Q W^T)^T x`` into
    ``DUT_TW``, which ``_bwd_block_kernel`` turns into ``dT`` and ``dW`` once per block, instead of
    ``dT`` and the ``T``-side terms of ``dW`` per pair (five products per pair instead of nine)."""
    i_s = tl.program_id(0)
    i_b, i_hq, i_hk, qbase, kbase, gbase = _query_head(tl.program_id(1), T, HQ, HK, D)
    rt = tl.arange(0, BT)
    scbase = ((i_b.to(tl.int64) * HQ + i_hq) * NS + i_s) * SB * BT * D
    sl2 = scale * LOG2E
    causal = rt[:, None] >= rt[None, :]
    a_blk = i_s * SB
    e_blk = tl.minimum(a_blk + SB, NB)
    for c in range(a_blk, e_blk):
        tl.debug_barrier()
        c0 = c * BT
        lse = tl.load(LSE + gbase + c0 + rt)
        delta = tl.load(DELTA + gbase + c0 + rt)
        if HAS_G:  # the query's gate into the log-sum-exp once (as in the forward)
            gq = tl.load(GATE_CUMSUM + gbase + c0 + rt)
            gref = tl.max(gq, 0)
            lse -= (gq - gref) * LOG2E
        # ---- own segment: query states Qst(c, m), m = c-1 ... a, into the scratch (Q<-_c first)
        q = tl.load(_tile(Q, qbase, c0, HQ, D, BT)).to(tl.float32)
        wc = tl.load(_tile(W, kbase, c0, HK, D, BT))
        twc = tl.load(_tile(UT_TW, kbase, c0, HK, D, BT))
        bm = tl.dot(q.to(TDT), tl.trans(wc.to(TDT)), input_precision=PREC)
        bm = tl.where(causal, bm, 0.0)
        qs = q - tl.dot(bm.to(TDT), twc.to(TDT), input_precision=PREC)
        for j in range(0, c - a_blk):
            mb = c - 1 - j
            tl.store(_tile(Q_STATE_SCRATCH, scbase, (mb - a_blk) * BT, 1, D, BT),
                     qs.to(Q_STATE_SCRATCH.dtype.element_ty))
            wb = tl.load(_tile(W, kbase, mb * BT, HK, D, BT))
            twb = tl.load(_tile(UT_TW, kbase, mb * BT, HK, D, BT))
            u = tl.dot(qs.to(TDT), tl.trans(wb.to(TDT)), input_precision=PREC)
            qs = qs - tl.dot(u.to(TDT), twb.to(TDT), input_precision=PREC)
        tl.debug_barrier()
        # gradient w.r.t. Q0_c (the state after crossing the whole own segment), from earlier segments;
        # carried back to Q<-_c across the own segment's blocks
        do = tl.load(_tile(DO, qbase, c0, HQ, D, BT))
        dgr = tl.zeros([BT], dtype=tl.float32)
        x = tl.load(_tile(DQ_SEG_START, qbase, c0, HQ, D, BT))
        for mb in range(a_blk, c):
            t0 = mb * BT
            qm = tl.load(_tile(Q_STATE_SCRATCH, scbase, (mb - a_blk) * BT, 1, D, BT))
            ka = tl.load(_tile(K_BLOCK_END, kbase, t0, HK, D, BT))
            vb = tl.load(_tile(V, kbase, t0, HK, D, BT))
            s2 = tl.dot(qm.to(CDT), tl.trans(ka.to(CDT)), input_precision=PREC) * sl2
            if HAS_G:
                s2 -= ((tl.load(GATE_CUMSUM + gbase + t0 + rt) - gref) * LOG2E)[None, :]
            p = tl.exp2(s2 - lse[:, None])
            dp = tl.dot(do.to(CDT), tl.trans(vb.to(CDT)), input_precision=PREC)
            ds = p * (dp - delta[:, None])
            dgr += tl.sum(ds, 1)
            if HAS_G:
                pg = DGATE + gbase + t0 + rt
                tl.store(pg, tl.load(pg) - tl.sum(ds, 0))
            pv = _tile(DV, qbase, t0, HQ, D, BT)
            tl.store(pv, tl.load(pv) + tl.dot(tl.trans(p).to(CDT), do.to(CDT), input_precision=PREC))
            pka = _tile(DK_BLOCK_END, qbase, t0, HQ, D, BT)
            tl.store(pka, tl.load(pka) + scale * tl.dot(tl.trans(ds).to(CDT), qm.to(CDT), input_precision=PREC))
            # transport across block mb: Qst(c, mb-1) = Qst(c, mb) - (Qst(c, mb) W^T) (T W), upstream
            # gradient x: d(T W) = -u^T x, dW = -(x (T W)^T)^T Qst, dQst = x - (x (T W)^T) W
            wb = tl.load(_tile(W, kbase, t0, HK, D, BT)).to(TDT)
            twb = tl.load(_tile(UT_TW, kbase, t0, HK, D, BT)).to(TDT)
            u = tl.dot(qm.to(TDT), tl.trans(wb), input_precision=PREC)
            xtw = tl.dot(x.to(TDT), tl.trans(twb), input_precision=PREC)
            ptw = _tile(DUT_TW, qbase, t0, HQ, D, BT)
            tl.store(ptw, tl.load(ptw) - tl.dot(tl.trans(u).to(TDT), x.to(TDT), input_precision=PREC))
            pw = _tile(DW, qbase, t0, HQ, D, BT)
            tl.store(pw, tl.load(pw) - tl.dot(tl.trans(xtw).to(TDT), qm.to(TDT), input_precision=PREC))
            x = x - tl.dot(xtw.to(TDT), wb, input_precision=PREC) \
                + scale * tl.dot(ds.to(CDT), ka.to(CDT), input_precision=PREC)

        # the diagonal block is left to _bwd_diag_kernel (in parallel over blocks): hand it the
        # gradient carried to Q<-_c and this block's gate row sums so far
        tl.store(_tile(DQ_SEG_START, qbase, c0, HQ, D, BT), x)
        if HAS_G:
            pg = DGATE + gbase + c0 + rt
            tl.store(pg, tl.load(pg) + dgr)


@triton.jit
def _bwd_diag_kernel(Q, K, V, W, UT_TW, UT_T, UT_M, GATE_CUMSUM, DO, LSE, DELTA, DQ_BLOCK_START,
                     DQ, DK, DV, DW, DUT_T, DGATE,
                     scale, T, NB,
                     HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, DC: tl.constexpr,
                     HAS_G: tl.constexpr, CDT: tl.constexpr, TDT: tl.constexpr, PREC: tl.constexpr):
    """One block, one query head, after ``_bwd_intra_kernel``: the diagonal block
    ``S = tril(Q K^T) - tril(Q W^T) M`` and the chain through ``Q<- = Q - tril(Q W^T) T W`` and the block's
    factors, from the gradient ``x`` of ``Q<-`` that the intra kernel left in the ``DQ0`` buffer
    (``DQ_BLOCK_START``); writes ``dq`` and ``dk`` and ``dT`` of the block and adds to its ``dv``, ``dw``
    and gate gradient.

    The head dim is walked in ``DC``-column chunks, three times (whole ``[BT, D]`` tiles would spill
    registers at D = 128): the products over D that the softmax needs, then those the block
    factors' gradients need, then the ``[BT, D]`` outputs; only ``[BT, BT]`` matrices stay live."""
    c = tl.program_id(0)
    i_b, i_hq, i_hk, qbase, kbase, gbase = _query_head(tl.program_id(1), T, HQ, HK, D)
    rt = tl.arange(0, BT)
    mbase = (i_b.to(tl.int64) * HK + i_hk) * NB * BT * BT
    dtbase = (i_b.to(tl.int64) * HQ + i_hq) * NB * BT * BT
    sl2 = scale * LOG2E
    causal = rt[:, None] >= rt[None, :]
    strict = rt[:, None] > rt[None, :]
    c0 = c * BT
    lse = tl.load(LSE + gbase + c0 + rt)
    delta = tl.load(DELTA + gbase + c0 + rt)
    if HAS_G:  # the query's gate into the log-sum-exp (as in the intra kernel)
        gq = tl.load(GATE_CUMSUM + gbase + c0 + rt)
        gref = tl.max(gq, 0)
        lse -= (gq - gref) * LOG2E
    # pass 1: Q K^T, Q W^T and dO V^T
    qk = tl.zeros([BT, BT], dtype=tl.float32)
    bm = tl.zeros([BT, BT], dtype=tl.float32)
    dp = tl.zeros([BT, BT], dtype=tl.float32)
    for d0 in range(0, D, DC):
        q = tl.load(_chunk(Q, qbase, c0, d0, HQ, D, DC, BT))
        kc = tl.load(_chunk(K, kbase, c0, d0, HK, D, DC, BT))
        wc = tl.load(_chunk(W, kbase, c0, d0, HK, D, DC, BT))
        qk += tl.dot(q.to(CDT), tl.trans(kc.to(CDT)), input_precision=PREC)
        bm += tl.dot(q.to(tl.float32).to(TDT), tl.trans(wc.to(TDT)), input_precision=PREC)
        do = tl.load(_chunk(DO, qbase, c0, d0, HQ, D, DC, BT))
        vc = tl.load(_chunk(V, kbase, c0, d0, HK, D, DC, BT))
        dp += tl.dot(do.to(CDT), tl.trans(vc.to(CDT)), input_precision=PREC)
    bm = tl.where(causal, bm, 0.0)
    mc = tl.load(_sq(UT_M, mbase, c, BT))
    s2 = (qk - tl.dot(bm.to(TDT), mc.to(TDT), input_precision=PREC)) * sl2
    if HAS_G:
        s2 -= ((gq - gref) * LOG2E)[None, :]
    p = tl.where(causal, tl.exp2(s2 - lse[:, None]), 0.0)
    ds = tl.where(causal, p * (dp - delta[:, None]), 0.0)
    if HAS_G:
        pg = DGATE + gbase + c0 + rt
        tl.store(pg, tl.load(pg) + tl.sum(ds, 1) - tl.sum(ds, 0))
    dss = ds * scale
    dmc = -tl.dot(tl.trans(bm).to(TDT), dss.to(TDT), input_precision=PREC)
    dbm = -tl.dot(dss.to(TDT), tl.trans(mc).to(TDT), input_precision=PREC)
    # pass 2: x (T W)^T, x W^T and W K^T
    xw = tl.zeros([BT, BT], dtype=tl.float32)
    cm = tl.zeros([BT, BT], dtype=tl.float32)
    for d0 in range(0, D, DC):
        x = tl.load(_chunk(DQ_BLOCK_START, qbase, c0, d0, HQ, D, DC, BT)).to(TDT)
        twc = tl.load(_chunk(UT_TW, kbase, c0, d0, HK, D, DC, BT))
        wc = tl.load(_chunk(W, kbase, c0, d0, HK, D, DC, BT)).to(TDT)
        kc = tl.load(_chunk(K, kbase, c0, d0, HK, D, DC, BT)).to(tl.float32).to(TDT)
        dbm -= tl.dot(x, tl.trans(twc).to(TDT), input_precision=PREC)
        xw += tl.dot(x, tl.trans(wc), input_precision=PREC)
        cm += tl.dot(wc, tl.trans(kc), input_precision=PREC)
    dbm = tl.where(causal, dbm, 0.0)
    cm = tl.where(strict, cm, 0.0)
    # dT = dTW W^T + dM C^T with dTW = -tril(Q W^T)^T x
    dtc = -tl.dot(tl.trans(bm).to(TDT), xw.to(TDT), input_precision=PREC) \
        + tl.dot(dmc.to(TDT), tl.trans(cm).to(TDT), input_precision=PREC)
    tl.store(_sq(DUT_T, dtbase, c, BT), dtc)  # the only writer of dT (the intra kernel writes d(T W))
    tc = tl.load(_sq(UT_T, mbase, c, BT))
    dcm = tl.where(strict, tl.dot(tl.trans(tc).to(TDT), dmc.to(TDT), input_precision=PREC), 0.0)
    # pass 3: the [BT, D] outputs, chunk by chunk
    pt_c = tl.trans(p).to(CDT)
    dss_c = dss.to(CDT)
    dss_t = tl.trans(dss).to(CDT)
    dbm_t = dbm.to(TDT)
    dbm_tt = tl.trans(dbm).to(TDT)
    bm_tt = tl.trans(bm).to(TDT)
    tc_tt = tl.trans(tc).to(TDT)
    dcm_t = dcm.to(TDT)
    dcm_tt = tl.trans(dcm).to(TDT)
    for d0 in range(0, D, DC):
        q = tl.load(_chunk(Q, qbase, c0, d0, HQ, D, DC, BT))
        kc = tl.load(_chunk(K, kbase, c0, d0, HK, D, DC, BT))
        wc = tl.load(_chunk(W, kbase, c0, d0, HK, D, DC, BT)).to(TDT)
        do = tl.load(_chunk(DO, qbase, c0, d0, HQ, D, DC, BT))
        x = tl.load(_chunk(DQ_BLOCK_START, qbase, c0, d0, HQ, D, DC, BT))
        pv = _chunk(DV, qbase, c0, d0, HQ, D, DC, BT)
        tl.store(pv, tl.load(pv) + tl.dot(pt_c, do.to(CDT), input_precision=PREC))
        dq = x + tl.dot(dss_c, kc.to(CDT), input_precision=PREC) + tl.dot(dbm_t, wc, input_precision=PREC)
        tl.store(_chunk(DQ, qbase, c0, d0, HQ, D, DC, BT), dq.to(DQ.dtype.element_ty))
        dkc = tl.dot(dss_t, q.to(CDT), input_precision=PREC) + tl.dot(dcm_tt, wc, input_precision=PREC)
        tl.store(_chunk(DK, qbase, c0, d0, HQ, D, DC, BT), dkc)
        dtw = -tl.dot(bm_tt, x.to(TDT), input_precision=PREC)
        dwc = tl.dot(dbm_tt, q.to(tl.float32).to(TDT), input_precision=PREC) \
            + tl.dot(tc_tt, dtw.to(TDT), input_precision=PREC) \
            + tl.dot(dcm_t, kc.to(tl.float32).to(TDT), input_precision=PREC)
        pw = _chunk(DW, qbase, c0, d0, HQ, D, DC, BT)
        tl.store(pw, tl.load(pw) + dwc)


@triton.jit
def _inv16_diag(A, abase, NC: tl.constexpr, BT: tl.constexpr):
    """``(I + A_cc)^-1`` for the ``NC`` (1, 2 or 4) 16 x 16 diagonal blocks ``c`` of the strictly lower
    ``[BT, BT]`` float32 matrix stored row-major at ``A + abase``: exact float32 forward substitution (no
    tensor cores). Step r forms row r of each block's inverse, ``n_r = e_r - A[r, :] N``, from the rows
    already done (as fla's ``solve_tril``). The ``NC`` substitutions are independent and advance in the
    same loop, so one warp interleaves them; the blocks are loaded once, transposed, and step r
    takes row r out of the registers, so that no step waits on a load from memory."""
    rs = tl.arange(0, 16)
    eye = tl.where(rs[:, None] == rs[None, :], 1.0, 0.0)
    blk_t = (rs[None, :] * BT + rs[:, None])                      # element [k, r] points at A[r, k]
    at1 = tl.load(A + abase + blk_t)
    at2 = at1
    at3 = at1
    at4 = at1
    if NC > 1:
        at2 = tl.load(A + abase + 16 * BT + 16 + blk_t)
    if NC > 2:
        at3 = tl.load(A + abase + 32 * BT + 32 + blk_t)
        at4 = tl.load(A + abase + 48 * BT + 48 + blk_t)
    n1 = eye
    n2 = eye
    n3 = eye
    n4 = eye
    for r in range(1, 16):
        row = rs[:, None] == r
        col = rs[None, :] == r
        a1 = tl.sum(tl.where(col, at1, 0.0), 1)                     # row r of block 0 (zero from r on)
        n1 = tl.where(row, eye - tl.sum(a1[:, None] * n1, 0)[None, :], n1)
        if NC > 1:
            a2 = tl.sum(tl.where(col, at2, 0.0), 1)
            n2 = tl.where(row, eye - tl.sum(a2[:, None] * n2, 0)[None, :], n2)
        if NC > 2:
            a3 = tl.sum(tl.where(col, at3, 0.0), 1)
            n3 = tl.where(row, eye - tl.sum(a3[:, None] * n3, 0)[None, :], n3)
            a4 = tl.sum(tl.where(col, at4, 0.0), 1)
            n4 = tl.where(row, eye - tl.sum(a4[:, None] * n4, 0)[None, :], n4)
    return n1, n2, n3, n4


@triton.jit
def _blk16(A, abase, i: tl.constexpr, j: tl.constexpr, BT: tl.constexpr):
    """Pointers of the 16 x 16 block ``(i, j)`` of a row-major ``[BT, BT]`` matrix at ``A + abase``."""
    rs = tl.arange(0, 16)
    return A + abase + (i * 16 + rs)[:, None] * BT + j * 16 + rs[None, :]


@triton.jit
def _put16(UT_N, UT_T, mbase, BETA, bbase, n, i: tl.constexpr, j: tl.constexpr, BT: tl.constexpr, HK: tl.constexpr,
           STORE_N: tl.constexpr):
    """Stores block ``(i, j)`` of ``T = N diag(beta)`` and, if ``STORE_N``, of ``N``."""
    rs = tl.arange(0, 16)
    beta_j = tl.load(BETA + bbase + (j * 16 + rs) * HK)
    if STORE_N:
        tl.store(_blk16(UT_N, mbase, i, j, BT), n)
    tl.store(_blk16(UT_T, mbase, i, j, BT), n * beta_j[None, :])


@triton.jit
def _ut_a_kernel(W, BETA, UT_T, T, NB,
                 HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, SOLVE_PREC: tl.constexpr):
    """Per block, ``A = strictLower(diag(beta) W W^T)`` (``[BT, BT]``, float32, ``SOLVE_PREC``) into the
    block's ``UT_T`` slot, where ``_ut_kernel`` reads it and writes ``T`` over it. One ``BT x BT x D``
    product per block on a whole tile, apart from the solve, which runs best at one warp (as fla's
    ``chunk_scaled_dot_kkt`` before its ``solve_tril``)."""
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // HK
    i_hk = i_bh % HK
    rt = tl.arange(0, BT)
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    mbase = (i_b.to(tl.int64) * HK + i_hk) * NB * BT * BT + i_c * BT * BT
    c0 = i_c * BT
    w = tl.load(_tile(W, kbase, c0, HK, D, BT))
    beta = tl.load(BETA + (i_b.to(tl.int64) * T + c0) * HK + i_hk + rt * HK)
    wwt = tl.dot(w, tl.trans(w), input_precision=SOLVE_PREC)
    tl.store(UT_T + mbase + rt[:, None] * BT + rt[None, :],
             tl.where(rt[:, None] > rt[None, :], beta[:, None] * wwt, 0.0))


@triton.jit
def _ut_kernel(BETA, UT_T, UT_N, T, NB,
               HK: tl.constexpr, BT: tl.constexpr, SOLVE_PREC: tl.constexpr, STORE_N: tl.constexpr = True):
    """Per block, the UT transform: ``N = (I + A)^-1`` and ``T = N diag(beta)`` from
    ``A = strictLower(diag(beta) W W^T)``, which ``_ut_a_kernel`` left in this block's ``UT_T`` slot, in
    float32 accuracy (``SOLVE_PREC``: tf32x3 on tensor cores, or ieee).

    After fla's ``solve_tril``: the 16 x 16 diagonal blocks of ``I + A`` are inverted by substitution
    (``_inv16_diag``), then merged block by block with 16 x 16 products,
    ``N_ij = -N_ii (sum_{j <= k < i} A_ik N_kj)``; ``N`` and ``T`` are written block by block (BT in
    {16, 32, 64}). ``N`` is read only by the backward: a call that records no gradient leaves it out
    (``STORE_N``). Every step works on 16 x 16 blocks, so that one warp per program runs the
    solve without shared-memory reductions. ``T``
    overwrites ``A`` in place: every block of ``A`` is read before the barrier that precedes the writes."""
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // HK
    i_hk = i_bh % HK
    c0 = i_c * BT
    mbase = (i_b.to(tl.int64) * HK + i_hk) * NB * BT * BT + i_c * BT * BT
    bbase = (i_b.to(tl.int64) * T + c0) * HK + i_hk
    tl.static_assert(BT == 16 or BT == 32 or BT == 64, "block length must be 16, 32 or 64")
    NC: tl.constexpr = BT // 16
    n11, n22, n33, n44 = _inv16_diag(UT_T, mbase, NC, BT)
    if NC > 1:
        a21 = tl.load(_blk16(UT_T, mbase, 1, 0, BT))
    if NC > 2:
        a31 = tl.load(_blk16(UT_T, mbase, 2, 0, BT))
        a32 = tl.load(_blk16(UT_T, mbase, 2, 1, BT))
        a41 = tl.load(_blk16(UT_T, mbase, 3, 0, BT))
        a42 = tl.load(_blk16(UT_T, mbase, 3, 1, BT))
        a43 = tl.load(_blk16(UT_T, mbase, 3, 2, BT))
    tl.debug_barrier()
    _put16(UT_N, UT_T, mbase, BETA, bbase, n11, 0, 0, BT, HK, STORE_N)
    zero = tl.zeros([16, 16], dtype=tl.float32)
    if NC > 1:
        n21 = -tl.dot(tl.dot(n22, a21, input_precision=SOLVE_PREC), n11, input_precision=SOLVE_PREC)
        _put16(UT_N, UT_T, mbase, BETA, bbase, zero, 0, 1, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n21, 1, 0, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n22, 1, 1, BT, HK, STORE_N)
    if NC > 2:
        n32 = -tl.dot(tl.dot(n33, a32, input_precision=SOLVE_PREC), n22, input_precision=SOLVE_PREC)
        n31 = -tl.dot(n33, tl.dot(a31, n11, input_precision=SOLVE_PREC)
                      + tl.dot(a32, n21, input_precision=SOLVE_PREC), input_precision=SOLVE_PREC)
        n43 = -tl.dot(tl.dot(n44, a43, input_precision=SOLVE_PREC), n33, input_precision=SOLVE_PREC)
        n42 = -tl.dot(n44, tl.dot(a42, n22, input_precision=SOLVE_PREC)
                      + tl.dot(a43, n32, input_precision=SOLVE_PREC), input_precision=SOLVE_PREC)
        n41 = -tl.dot(n44, tl.dot(a41, n11, input_precision=SOLVE_PREC)
                      + tl.dot(a42, n21, input_precision=SOLVE_PREC)
                      + tl.dot(a43, n31, input_precision=SOLVE_PREC), input_precision=SOLVE_PREC)
        _put16(UT_N, UT_T, mbase, BETA, bbase, zero, 0, 2, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, zero, 0, 3, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, zero, 1, 2, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, zero, 1, 3, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, zero, 2, 3, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n31, 2, 0, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n32, 2, 1, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n33, 2, 2, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n41, 3, 0, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n42, 3, 1, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n43, 3, 2, BT, HK, STORE_N)
        _put16(UT_N, UT_T, mbase, BETA, bbase, n44, 3, 3, BT, HK, STORE_N)


@triton.jit
def _prep_kernel(K, W, UT_TW, K_BLOCK_END, UT_T, UT_M, T, NB,
                 HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr):
    """Per block, after ``_ut_kernel``: ``T W``, ``M = T strictLower(W K^T)`` and the keys moved to the
    block's end ``K-> = K - M^T W`` (``PREC``: tf32 for half-precision inputs)."""
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // HK
    i_hk = i_bh % HK
    rt = tl.arange(0, BT)
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    mbase = (i_b.to(tl.int64) * HK + i_hk) * NB * BT * BT
    c0 = i_c * BT
    w = tl.load(_tile(W, kbase, c0, HK, D, BT))
    tm = tl.load(_sq(UT_T, mbase, i_c, BT))
    tl.store(_tile(UT_TW, kbase, c0, HK, D, BT), tl.dot(tm, w, input_precision=PREC))
    k = tl.load(_tile(K, kbase, c0, HK, D, BT)).to(tl.float32)
    cm = tl.where(rt[:, None] > rt[None, :], tl.dot(w, tl.trans(k), input_precision=PREC), 0.0)
    mm = tl.dot(tm, cm, input_precision=PREC)
    tl.store(_sq(UT_M, mbase, i_c, BT), mm)
    ka = k - tl.dot(tl.trans(mm), w, input_precision=PREC)
    tl.store(_tile(K_BLOCK_END, kbase, c0, HK, D, BT), ka.to(K_BLOCK_END.dtype.element_ty))


@triton.jit
def _bwd_block_kernel(K, W, BETA, UT_TW, UT_T, UT_M, UT_N,
                      DK_BLOCK_END, DK, DW, DUT_T, DUT_TW, OUT_DK, OUT_DW, OUT_DBETA,
                      T, NB, GROUP,
                      HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr,
                      DC: tl.constexpr, PREC: tl.constexpr):
    """Per block, float32: chain rule through T W, K-> = K - M^T W, M = T strictLower(W K^T) and the
    UT transform, summing the query heads of the group. DK_BLOCK_END, DK, DW, DUT_T, DUT_TW (the intra
    kernel's d(T W)) are per query head (attention kernels; the segment chain's contributions to
    dK->, d(T W) and dW already added by ``_seg_grad_kernel``).

    Two passes over the head dim in chunks of ``DC`` columns, so that only ``BT x BT`` tiles and
    ``BT x DC`` chunks are live (seven whole ``BT x D`` float32 tiles would spill at D = 128):
    pass 1 accumulates the contractions over D (``dTW W^T``, ``W dK->^T``, ``W K^T``),
    then the ``BT x BT`` algebra of the UT transform; pass 2 writes dk, dw chunk by chunk (every term
    is a ``BT x BT`` matrix times a ``BT x DC`` chunk) and dbeta."""
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // HK
    i_hk = i_bh % HK
    rt = tl.arange(0, BT)
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    mbase = (i_b.to(tl.int64) * HK + i_hk) * NB * BT * BT
    c0 = i_c * BT
    strict = rt[:, None] > rt[None, :]
    causal = rt[:, None] >= rt[None, :]
    # pass 1: contractions over the head dim
    dt = tl.zeros([BT, BT], dtype=tl.float32)
    dm = tl.zeros([BT, BT], dtype=tl.float32)
    cm = tl.zeros([BT, BT], dtype=tl.float32)
    for j in range(0, D // DC):
        d0 = j * DC
        w = tl.load(_chunk(W, kbase, c0, d0, HK, D, DC, BT))
        k = tl.load(_chunk(K, kbase, c0, d0, HK, D, DC, BT)).to(tl.float32)
        dka = tl.zeros([BT, DC], dtype=tl.float32)
        dtw = tl.zeros([BT, DC], dtype=tl.float32)
        for g in range(0, GROUP):
            qbase = (i_b.to(tl.int64) * T * HQ + i_hk * GROUP + g) * D
            dka += tl.load(_chunk(DK_BLOCK_END, qbase, c0, d0, HQ, D, DC, BT))
            dtw += tl.load(_chunk(DUT_TW, qbase, c0, d0, HQ, D, DC, BT))
        dt += tl.dot(dtw, tl.trans(w), input_precision=PREC)      # T W
        dm -= tl.dot(w, tl.trans(dka), input_precision=PREC)      # K-> = K - M^T W
        cm += tl.dot(w, tl.trans(k), input_precision=PREC)        # M = T C, C = strictLower(W K^T)
    for g in range(0, GROUP):
        dtbase = (i_b.to(tl.int64) * HQ + i_hk * GROUP + g) * NB * BT * BT
        dt += tl.load(_sq(DUT_T, dtbase, i_c, BT))
    cm = tl.where(strict, cm, 0.0)
    dt += tl.dot(dm, tl.trans(cm), input_precision=PREC)
    tm = tl.load(_sq(UT_T, mbase, i_c, BT))
    dc = tl.where(strict, tl.dot(tl.trans(tm), dm, input_precision=PREC), 0.0)
    # T = N diag(beta), N = (I + A)^-1, A = strictLower(diag(beta) W W^T)
    nm = tl.load(_sq(UT_N, mbase, i_c, BT))
    beta = tl.load(BETA + (i_b.to(tl.int64) * T + c0 + rt) * HK + i_hk)
    dt = tl.where(causal, dt, 0.0)
    db = tl.sum(dt * nm, 0)
    dn = dt * beta[None, :]
    nt = tl.trans(nm)
    da = -tl.dot(tl.dot(nt, dn, input_precision=PREC), nt, input_precision=PREC)
    da = tl.where(strict, da, 0.0)
    dwwt = tl.trans(beta[:, None] * da)
    # pass 2: dk, dw chunk by chunk
    mm = tl.load(_sq(UT_M, mbase, i_c, BT))
    for j in range(0, D // DC):
        d0 = j * DC
        w = tl.load(_chunk(W, kbase, c0, d0, HK, D, DC, BT))
        k = tl.load(_chunk(K, kbase, c0, d0, HK, D, DC, BT)).to(tl.float32)
        dka = tl.zeros([BT, DC], dtype=tl.float32)
        dw = tl.zeros([BT, DC], dtype=tl.float32)
        dtw = tl.zeros([BT, DC], dtype=tl.float32)
        dk = tl.zeros([BT, DC], dtype=tl.float32)
        for g in range(0, GROUP):
            qbase = (i_b.to(tl.int64) * T * HQ + i_hk * GROUP + g) * D
            dka += tl.load(_chunk(DK_BLOCK_END, qbase, c0, d0, HQ, D, DC, BT))
            dk += tl.load(_chunk(DK, qbase, c0, d0, HQ, D, DC, BT))
            dw += tl.load(_chunk(DW, qbase, c0, d0, HQ, D, DC, BT))
            dtw += tl.load(_chunk(DUT_TW, qbase, c0, d0, HQ, D, DC, BT))
        dw += tl.dot(tl.trans(tm), dtw, input_precision=PREC)     # T W
        dk += dka + tl.dot(tl.trans(dc), w, input_precision=PREC)
        # A = strictLower(diag(beta) W W^T): dbeta_i += sum_j dA_ij (w_i . w_j) = sum_d (dA W)_id W_id,
        # dW += diag(beta) dA W + (diag(beta) dA)^T W (no BT x BT W W^T tile needed)
        y = tl.dot(da, w, input_precision=PREC)
        db += tl.sum(y * w, 1)
        dw += tl.dot(dc, k, input_precision=PREC) - tl.dot(mm, dka, input_precision=PREC) \
            + beta[:, None] * y + tl.dot(dwwt, w, input_precision=PREC)
        tl.store(_chunk(OUT_DK, kbase, c0, d0, HK, D, DC, BT), dk.to(OUT_DK.dtype.element_ty))
        tl.store(_chunk(OUT_DW, kbase, c0, d0, HK, D, DC, BT), dw)
    tl.store(OUT_DBETA + (i_b.to(tl.int64) * T + c0 + rt) * HK + i_hk, db)

@triton.jit
def _seg_fwd_kernel(W, UT_TW, K_BLOCK_END, K_SEG_END, SUFFIX_R, SEG_PROD, T, NB, NS, SB,
                    HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr,
                    STORE_R: tl.constexpr = True):
    """One segment, one key head: suffix products ``R_j = P_e ... P_{j+1}`` (``R_e = I``) by thin updates
    ``R <- R - (R W_j^T)(T W)_j`` from the segment's last block to its first; stores every ``R_j``
    (``SUFFIX_R``, for the backward), the keys moved to the segment's end ``Kseg_j = K->_j R_j^T`` and the
    segment product ``Seg = R_0 P_0``. Float32 ``D x D`` state. The ``R_j`` are read only by the backward:
    a call that records no gradient leaves them out (``STORE_R``)."""
    i_s = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // HK
    i_hk = i_bh % HK
    rd = tl.arange(0, D)
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    rbase = (i_b.to(tl.int64) * HK + i_hk) * NB * D * D
    sbase = (i_b.to(tl.int64) * HK + i_hk) * NS * D * D
    r = tl.where(rd[:, None] == rd[None, :], 1.0, 0.0)
    a_blk = i_s * SB
    e_blk = tl.minimum(a_blk + SB, NB)
    for jj in range(0, e_blk - a_blk):
        j = e_blk - 1 - jj
        t0 = j * BT
        if STORE_R:
            tl.store(_sq(SUFFIX_R, rbase, j, D), r)
        ka = tl.load(_tile(K_BLOCK_END, kbase, t0, HK, D, BT)).to(tl.float32)
        tl.store(_tile(K_SEG_END, kbase, t0, HK, D, BT),
                 tl.dot(ka, tl.trans(r), input_precision=PREC).to(K_SEG_END.dtype.element_ty))
        wb = tl.load(_tile(W, kbase, t0, HK, D, BT))
        twb = tl.load(_tile(UT_TW, kbase, t0, HK, D, BT))
        r = r - tl.dot(tl.dot(r, tl.trans(wb), input_precision=PREC), twb, input_precision=PREC)
    tl.store(_sq(SEG_PROD, sbase, i_s, D), r)


@triton.jit
def _seg_bwd_kernel(W, UT_TW, K_BLOCK_END, DK_SEG_END, DSEG_PROD, SEG_GRAD_STATE, T, NB, NS, SB,
                    HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, DR: tl.constexpr,
                    PREC: tl.constexpr):
    """Chain rule through ``_seg_fwd_kernel``, the sequential part (one segment, one key head, rows
    ``r0 : r0 + DR`` of the carried gradient; grid axis 2 runs over the ``D / DR`` row blocks), first
    block to last: ``X`` is the gradient of ``R_{j-1}`` (``X = dSeg`` at the start); before block j it
    is stored as ``XS_j`` (``SEG_GRAD_STATE``), then ``X <- X - (X (T W)_j^T) W_j + dKseg_j^T K->_j``,
    which acts on each row of ``X`` alone (a whole ``D x D`` state would spill at D = 128). The per-block
    gradients that need ``X`` are computed in parallel afterwards by ``_seg_grad_kernel``."""
    i_s = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_r = tl.program_id(2)
    i_b = i_bh // HK
    i_hk = i_bh % HK
    r0 = i_r * DR
    rr = tl.arange(0, DR)
    rd = tl.arange(0, D)
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    xbase = (i_b.to(tl.int64) * HK + i_hk) * NB * D * D
    sbase = (i_b.to(tl.int64) * HK + i_hk) * NS * D * D
    rows = (r0 + rr)[:, None] * D + rd[None, :]     # rows r0 : r0 + DR of a D x D matrix
    x = tl.load(DSEG_PROD + sbase + i_s * D * D + rows)
    a_blk = i_s * SB
    e_blk = tl.minimum(a_blk + SB, NB)
    for j in range(a_blk, e_blk):
        t0 = j * BT
        tl.store(SEG_GRAD_STATE + xbase + j * D * D + rows, x)
        wb = tl.load(_tile(W, kbase, t0, HK, D, BT))
        twb = tl.load(_tile(UT_TW, kbase, t0, HK, D, BT))
        ka = tl.load(_tile(K_BLOCK_END, kbase, t0, HK, D, BT)).to(tl.float32)
        dksr = tl.load(_chunk(DK_SEG_END, kbase, t0, r0, HK, D, DR, BT))
        x = x - tl.dot(tl.dot(x, tl.trans(twb), input_precision=PREC), wb, input_precision=PREC) \
            + tl.dot(tl.trans(dksr), ka, input_precision=PREC)


@triton.jit
def _seg_grad_kernel(W, UT_TW, DK_SEG_END, SUFFIX_R, SEG_GRAD_STATE, DK_BLOCK_END, DUT_TW, DW, T, NB,
                     HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr, BT: tl.constexpr, DC: tl.constexpr,
                     PREC: tl.constexpr):
    """Per block j and key head, after ``_seg_bwd_kernel``: with ``dP = R_j^T XS_j``,
    ``dK->_j += dKseg_j R_j``, ``d(T W)_j -= W_j dP``, ``dW_j -= (T W)_j dP^T``; over column chunks
    ``DC`` of ``dP`` so that only ``R_j`` is a whole ``D x D`` tile. The three are added in place to the
    attention kernels' per-query-head gradients, at the group's first query head (``_bwd_block_kernel``
    sums the group), so that the chain needs no float32 token tensors of its own."""
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // HK
    i_hk = i_bh % HK
    rd = tl.arange(0, D)
    rc = tl.arange(0, DC)
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    qbase = (i_b.to(tl.int64) * T * HQ + i_hk * (HQ // HK)) * D
    xbase = (i_b.to(tl.int64) * HK + i_hk) * NB * D * D + i_c * D * D
    t0 = i_c * BT
    r = tl.load(_sq(SUFFIX_R, xbase, 0, D))
    wb = tl.load(_tile(W, kbase, t0, HK, D, BT))
    dks = tl.load(_tile(DK_SEG_END, kbase, t0, HK, D, BT))
    dw = tl.zeros([BT, D], dtype=tl.float32)
    for jc in range(0, D // DC):
        d0 = jc * DC
        xc = tl.load(SEG_GRAD_STATE + xbase + rd[:, None] * D + d0 + rc[None, :])      # XS_j[:, d0 : d0 + DC]
        rcol = tl.load(SUFFIX_R + xbase + rd[:, None] * D + d0 + rc[None, :])    # R_j[:, d0 : d0 + DC]
        dp = tl.dot(tl.trans(r), xc, input_precision=PREC)                 # dP[:, d0 : d0 + DC]
        dtw_ptr = _chunk(DUT_TW, qbase, t0, d0, HQ, D, DC, BT)
        tl.store(dtw_ptr, tl.load(dtw_ptr) - tl.dot(wb, dp, input_precision=PREC))
        dka_ptr = _chunk(DK_BLOCK_END, qbase, t0, d0, HQ, D, DC, BT)
        tl.store(dka_ptr, tl.load(dka_ptr) + tl.dot(dks, rcol, input_precision=PREC))
        twc = tl.load(_chunk(UT_TW, kbase, t0, d0, HK, D, DC, BT))
        dw -= tl.dot(twc, tl.trans(dp), input_precision=PREC)
    dw_ptr = _tile(DW, qbase, t0, HQ, D, BT)
    tl.store(dw_ptr, tl.load(dw_ptr) + dw)

@triton.jit
def _pair_kernel(SEG_PROD, PAIR_PROD, NS, HK: tl.constexpr, D: tl.constexpr, PREC: tl.constexpr):
    """Segment-pair products for one later segment ``kc`` and one key head:
    ``Om(kc, k) = Seg_{kc-1} ... Seg_{k+1}`` for ``k = kc-1 ... 0`` (``Om(kc, kc-1) = I``), by
    ``Om(kc, k-1) = Om(kc, k) Seg_k``; stored triangularly at index ``kc (kc - 1) / 2 + k``."""
    i_kc = tl.program_id(0) + 1
    i_bh = tl.program_id(1)
    rd = tl.arange(0, D)
    sbase = i_bh.to(tl.int64) * NS * D * D
    obase = i_bh.to(tl.int64) * ((NS * (NS - 1)) // 2) * D * D
    m = tl.where(rd[:, None] == rd[None, :], 1.0, 0.0)
    first = (i_kc * (i_kc - 1)) // 2
    for j in range(0, i_kc):
        k = i_kc - 1 - j
        # stored in the input dtype: every reader rounds Om to it before its product
        tl.store(_sq(PAIR_PROD, obase, first + k, D), m.to(PAIR_PROD.dtype.element_ty))
        if k > 0:
            m = tl.dot(m, tl.load(_sq(SEG_PROD, sbase, k, D)), input_precision=PREC)
