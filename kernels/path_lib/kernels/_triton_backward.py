"""The backward's attention kernels: ``_delta_kernel`` (``do . o``), the inter-segment query and key
sides, the intra-segment kernel and the diagonal blocks.
"""

import triton
import triton.language as tl

from ._triton_common import LOG2E, _chunk, _query_head, _sq, _tile


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

