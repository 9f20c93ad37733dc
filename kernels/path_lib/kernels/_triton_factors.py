"""The per-block factors and per-segment products, forward and backward: the UT transform
(``_ut_a_kernel``, ``_ut_kernel`` with its 16 x 16 block inverses), ``_prep_kernel`` (``T W``, ``M``,
``K->``), ``_seg_fwd_kernel`` and ``_pair_kernel`` (segment and pair products); the chain rule back
through them: ``_seg_bwd_kernel`` and ``_seg_grad_kernel`` (segments), ``_bwd_block_kernel`` (blocks,
into dk, dw and dbeta).
"""

import triton
import triton.language as tl

from ._triton_common import _chunk, _sq, _tile


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

