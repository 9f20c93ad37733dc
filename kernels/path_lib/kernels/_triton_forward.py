"""The forward's attention kernels: ``_fwd_kernel`` (a query block: diagonal block, own segment, and
the earlier segments unless split) and ``_fwd_inter_kernel`` (the earlier segments on longer row tiles),
with their shared online-softmax loop ``_earlier_segments``.
"""

import triton
import triton.language as tl

from ._triton_common import LOG2E, _query_head, _sq, _tile


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

