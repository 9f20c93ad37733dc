"""Context parallelism for PaTH attention: one long sequence split across the ranks of a process group.

Layout and gates are those of :func:`path_lib.reference.attention.path_attention`: rank ``r`` of a group of ``R``
holds the contiguous chunk of tokens ``[r L, (r + 1) L)`` as q ``[B, L, Hq, D]``, k, w ``[B, L, Hk, D]``,
v ``[B, L, Hk, Dv]``, beta ``[B, L, Hk]``, g ``[B, L, Hq]`` (or None) and gets its rows of the output,
``[B, L, Hq, Dv]``, differentiable in all six inputs.

What a chunk needs from the chunks before it
--------------------------------------------
For a query ``i`` in chunk ``r`` and a key ``j`` in an earlier chunk ``s`` the PaTH logit factorises at
the chunk boundaries (``P_c = H_{(c+1)L-1} ... H_{cL}`` is chunk ``c``'s ``D x D`` transform product):

    q_i^T H_i ... H_{j+1} k_j = [q_i^T H_i ... H_{rL}] P_{r-1} ... P_{s+1} [H_{(s+1)L-1} ... H_{j+1} k_j].

The left bracket is the query moved to its chunk's start (local to rank ``r``), the right one the key
moved to its chunk's end (local to rank ``s``). So each rank publishes a **chunk summary**: its keys moved
to the chunk's end ``K->`` (``L x D`` per key head), its values ``V`` (``L x Dv``), its product ``P``
(``D x D``: not ``L`` Householder vectors) and its local cumulative gates (``L`` per query head; the last
one is the chunk's gate total). The product of the chunks in between is never formed: rank ``r`` scans
the earlier chunks right to left, as the blockwise algorithm scans key blocks, attending with its
running query state ``Q^`` (an online softmax) and then moving it across the chunk, ``Q^ <- Q^ P_s``
(``L D^2`` multiply-adds per head and chunk). The gate bias is ``G_i - G_j = G^loc_i + (gate totals of chunks s..r-1)
- G^loc_j``.

Algorithm (what :func:`context_parallel_path_attention` does)
-------------------------------------------------------------
1. Locally, block by block (UT transforms, as :mod:`path_lib.decoding`'s ``keys_to_end``): the chunk's
   keys moved to its end, its product ``P``, the local gate cumsum; packed in one flat buffer.
2. One all-gather of the buffers (an autograd-aware collective: its backward sums each rank's gradient
   over the ranks, a reduce-scatter on NCCL and an all-reduce elsewhere).
3. Locally, per query block: the blockwise scan over the chunk's own key blocks (diagonal block,
   then right to left), continued across the earlier chunks ``s = r-1, ..., 0`` from their summaries.

The gradients of the summaries flow back to the ranks that produced them through the collective's
backward (every rank's output is tied to the gathered buffer, so every rank runs that backward
collective, rank 0 included); everything else is local autograd.

With the kernels (``impl="triton"``, which ``"auto"`` picks on CUDA) step 3 splits in two. The chunk's own keys are
PaTH attention of the chunk alone: :mod:`path_lib.kernels.context` runs the verified kernels and returns
each query's log-sum-exp with the output. The earlier chunks' keys are plain softmax attention of the
queries moved to the chunk's start (and across each earlier chunk by its product), in PyTorch, float32,
with the queries and the summary formed for all blocks at once (one batched UT transform, the running
block products by a doubling scan). The two parts merge by their log-sum-exps. The backward needs no
gradient of a log-sum-exp: given the merged output ``o``, log-sum-exp ``lse`` and ``delta = rowsum(do *
o)``, the gradient of every logit is ``p (do . v - delta)``, ``p = exp(s - lse)``, which the kernels'
backward computes when handed the merged statistics, and which the earlier part gets by differentiating
``sum p (do . v - delta)`` (``lse`` and ``delta`` held fixed).

Cost per rank (``T = R L`` tokens, ``Hk`` key heads; :func:`context_parallel_costs` computes it)
------------------------------------------------------------------------------------------------
* Communication: ``(R - 1)`` summaries of ``B Hk (L (D + Dv) + D^2) + B Hq L`` numbers, the same in the
  backward. Ring attention for softmax attention passes ``B Hk L (D + Dv)`` per chunk (plus the gates
  for FoX): PaTH adds ``D^2`` per key head and chunk, a fraction ``D^2 / (L (D + Dv))`` of the traffic
  (0.8 % at ``D = 64``, ``L = 4096``).
* Work on rank ``r``: the causal diagonal chunk, ``r`` full ``L x L`` off-diagonal blocks (as ring
  attention) and ``r L D^2`` multiply-adds per head to move the query state (a fraction ``D / (2 L)``
  of the off-diagonal attention at ``Dv = D``). Contiguous chunks leave the last rank the most work
  (``R - 1`` blocks against none on rank 0), the same imbalance as plain ring attention.
* Memory: the all-gather holds all ``R`` summaries (``O(T (D + Dv))`` per key head, and as much again
  for their gradients in the backward); a ring holds two at a time. The ring is the same algorithm:
  the summaries arrive in the order ``r-1, r-2, ...``, which is exactly the order of the scan, so it
  can overlap each transfer with the previous chunk's attention. This module implements the all-gather
  (one collective, simplest to make fail cleanly).

Checks
------
Before any data moves, every rank's shapes, dtype, gate presence, scale, whether it records gradients,
and whether its own inputs passed validation, are all-gathered in one small float64 tensor; a
disagreement (chunks of different lengths, different heads, a rank whose inputs are invalid) raises the
same ``ValueError`` on every rank (the rank with the bad input raises its own error, naming the
argument) instead of leaving some ranks waiting in a collective. That small collective (and its host
read) runs on every call: the summaries' all-gather is only well-formed when every rank sends a buffer of
the same size and dtype, and a mismatch there would abort the process (gloo) or hang it. Since that exchange
runs anyway, every field is always compared: ``check_ranks=False`` no longer skips the agreement on the scale
and on gradient recording (ranks with different scales would return a silently wrong result, a rank without
the backward would hang the others), so a switch that turns checks off cannot turn bad input into a wrong
answer.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

import torch

from .impl import resolve_backend
from .validation import (check_block_size, check_bool, check_int, check_path_params, check_qkv,
                         check_scale, dtype_name as _name_dtype)
from .reference.householder import (_block_product, _boundary_adjusted_keys, _boundary_adjusted_queries,
                                    _ut_transform)

__all__ = ["context_parallel_path_attention", "chunked_path_attention", "context_parallel_costs",
           "summary_numel"]

#: local work of a chunk: "blockwise" (the PyTorch scan, any device and dtype), "triton" (the kernels for
#: the chunk's own keys, PyTorch for the earlier chunks'), "auto" (triton on CUDA when the kernels fit and
#: are GPU-verified, else blockwise)

_DTYPE_CODES = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.float64: 4}
_FIELDS = ("B", "T_local", "Hq", "Hk", "D", "Dv", "has_g", "dtype", "scale", "grad", "valid")


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _local_gate_cumsum(g: Optional[torch.Tensor], dt: torch.dtype) -> Optional[torch.Tensor]:
    """The chunk's own gate cumsum, ``g [B, L, Hq]`` -> ``G [B, Hq, L]`` in ``dt`` (None for None), summed
    along the contiguous last dim of a heads-first copy (as ``kernels._api._gate_cumsum``: torch's scan
    along the strided time dim of ``[B, L, H]`` runs only ``B * H`` scans in parallel)."""
    return None if g is None else torch.cumsum(g.to(dt).transpose(1, 2).contiguous(), dim=-1)


# ----------------------------------------------------------------------------------------------
# the chunk summary (keys moved to the chunk's end, the chunk's product) and the local scan
# ----------------------------------------------------------------------------------------------

def _blocks(kh, wh, bh, block_size):
    """Per block of the chunk (heads-first ``[B, H, L, D]`` inputs): spans, UT matrices ``T_b``, keys moved
    to the block's end ``K->_b`` and ``T_b W_b``; plus the chunk's keys moved to the chunk's end ``[B, H, L, D]``
    and its product ``P = H_{L-1} ... H_0`` ``[B, H, D, D]`` (suffix products of block products)."""
    B, H, L, D = kh.shape
    spans = [(s, min(s + block_size, L)) for s in range(0, L, block_size)]
    Ts = [_ut_transform(wh[:, :, s:e], bh[:, :, s:e]) for s, e in spans]
    K_blk = [_boundary_adjusted_keys(kh[:, :, s:e], wh[:, :, s:e], Tb) for (s, e), Tb in zip(spans, Ts)]
    TW = [Tb @ wh[:, :, s:e] for (s, e), Tb in zip(spans, Ts)]
    S = torch.eye(D, dtype=kh.dtype, device=kh.device).expand(B, H, D, D)
    K_chunk: List[torch.Tensor] = []                       # the blocks' keys, last block first
    for b in reversed(range(len(spans))):
        s, e = spans[b]
        K_chunk.append(K_blk[b] @ S.transpose(-1, -2))        # rows (S k)^T, S = later blocks' product
        S = S @ _block_product(wh[:, :, s:e], bh[:, :, s:e], Ts[b])
    K_end = torch.cat(K_chunk[::-1], dim=2) if spans else kh
    return spans, Ts, K_blk, TW, K_end, S


def _repeat(x, n_rep):
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def _online(m, l, acc, logits, v):
    m_new = torch.maximum(m, logits.amax(dim=-1))
    alpha = torch.exp(m - m_new)
    p = torch.exp(logits - m_new[..., None])
    return m_new, l * alpha + p.sum(dim=-1), acc * alpha[..., None] + p @ v


def _scan(qh, kh, vh, wh, blk, G, scale, earlier):
    """Rank r's output ``[B, Hq, L, Dv]``: per query block, the chunk's own key blocks (the diagonal block,
    then right to left) and then the earlier chunks ``c = r-1, ..., 0`` from their summaries.

    qh, kh, wh ``[B, Hq, L, D]``, vh ``[B, Hq, L, Dv]`` and the block tensors ``blk = (spans, T_b, K->_b,
    T_b W_b)`` in Hq heads; G ``[B, Hq, L]`` the local gate cumsum or None; ``earlier``: a list over
    c = 0..r-1 of ``(K->_c [B, Hq, L, D], V_c [B, Hq, L, Dv], P_c [B, Hq, D, D], G_c [B, Hq, L] or None)``.
    """
    spans, Ts, K_blk, TW = blk
    width = max((e - s for s, e in spans), default=0)
    causal = torch.ones(width, width, dtype=torch.bool, device=qh.device).tril()
    outs = []
    for i, (s, e) in enumerate(spans):
        Qi, Ki, Wi, n = qh[:, :, s:e], kh[:, :, s:e], wh[:, :, s:e], e - s
        # the diagonal block: all pairs inside it (the UT all-pairs form)
        S = torch.tril(Qi @ Ki.transpose(-1, -2)) - torch.tril(Qi @ Wi.transpose(-1, -2)) @ Ts[i] @ \
            torch.tril(Wi @ Ki.transpose(-1, -2), diagonal=-1)
        logits = scale * S
        if G is not None:
            logits = logits + G[:, :, s:e, None] - G[:, :, None, s:e]
        logits = logits.masked_fill(~causal[:n, :n], float("-inf"))
        m = logits.amax(dim=-1)
        p = torch.exp(logits - m[..., None])
        l, acc = p.sum(dim=-1), p @ vh[:, :, s:e]
        Q = _boundary_adjusted_queries(Qi, Wi, Ts[i])        # the queries moved to their block's start
        for j in range(i - 1, -1, -1):                       # the chunk's earlier blocks, right to left
            sj, ej = spans[j]
            logits = scale * (Q @ K_blk[j].transpose(-1, -2))
            if G is not None:
                logits = logits + G[:, :, s:e, None] - G[:, :, None, sj:ej]
            m, l, acc = _online(m, l, acc, logits, vh[:, :, sj:ej])
            Q = Q - (Q @ wh[:, :, sj:ej].transpose(-1, -2)) @ TW[j]
        # Q is at the chunk's start now: continue across the earlier chunks, right to left
        gap = None                                           # gate totals of the chunks c..r-1
        for c in range(len(earlier) - 1, -1, -1):
            K_c, V_c, P_c, G_c = earlier[c]
            logits = scale * (Q @ K_c.transpose(-1, -2))
            if G is not None:
                gap = G_c[:, :, -1] if gap is None else gap + G_c[:, :, -1]
                logits = logits + (G[:, :, s:e] + gap[..., None])[..., None] - G_c[:, :, None, :]
            m, l, acc = _online(m, l, acc, logits, V_c)
            if c:
                Q = Q @ P_c                                  # across chunk c: q^T ... H_{cL} = (q^T ...) P_c
        outs.append(acc / l[..., None])
    return torch.cat(outs, dim=2)


class _Local:
    """One rank's inputs heads-first in the compute dtype, its blocks and its chunk summary.

    Attributes: q ``[B, Hq, L, D]``; k, w ``[B, Hk, L, D]``; v ``[B, Hk, L, Dv]``; beta ``[B, Hk, L]``;
    G ``[B, Hq, L]`` (local gate cumsum) or None; the summary ``K_end [B, Hk, L, D]``, ``P [B, Hk, D, D]``.
    """

    def __init__(self, q, k, v, w, beta, g, block_size):
        dt = _compute_dtype(q)
        self.dtype, self.n_rep = dt, q.shape[2] // k.shape[2]
        self.q, self.k, self.v = (x.to(dt).transpose(1, 2) for x in (q, k, v))
        self.w, self.beta = w.to(dt).transpose(1, 2), beta.to(dt).transpose(1, 2)
        self.G = _local_gate_cumsum(g, dt)
        self.spans, self.Ts, self.K_blk, self.TW, self.K_end, self.P = _blocks(self.k, self.w, self.beta,
                                                                              block_size)

    def summary(self):
        return (self.K_end, self.v, self.P, self.G)

    def output(self, scale, earlier):
        """``[B, Hq, L, Dv]`` given the earlier chunks' summaries (in Hk heads, gates in Hq heads)."""
        r = lambda x: _repeat(x, self.n_rep)                 # noqa: E731
        blk = (self.spans, [r(x) for x in self.Ts], [r(x) for x in self.K_blk], [r(x) for x in self.TW])
        earlier = [(r(K), r(V), r(P), G) for K, V, P, G in earlier]
        return _scan(self.q, r(self.k), r(self.v), r(self.w), blk, self.G, scale, earlier)


def summary_numel(batch: int, chunk_len: int, n_heads: int, n_kv_heads: int, head_dim: int,
                  value_dim: Optional[int] = None, *, gate: bool = False) -> int:
    """Numbers in one rank's chunk summary: ``B Hk (L (D + Dv) + D^2)`` plus ``B Hq L`` gates with a gate."""
    for name, x in (("batch", batch), ("chunk_len", chunk_len), ("n_heads", n_heads),
                    ("n_kv_heads", n_kv_heads), ("head_dim", head_dim)):
        check_int(x, name, minimum=0)
    value_dim = head_dim if value_dim is None else check_int(value_dim, "value_dim", minimum=0)
    check_bool(gate, "gate")
    return batch * n_kv_heads * (chunk_len * (head_dim + value_dim) + head_dim ** 2) + \
        (batch * n_heads * chunk_len if gate else 0)


def _pack(summary) -> torch.Tensor:
    return torch.cat([x.reshape(-1) for x in summary if x is not None])


def _unpack(flat, B, L, Hq, Hk, D, Dv, gate):
    sizes = [B * Hk * L * D, B * Hk * L * Dv, B * Hk * D * D] + ([B * Hq * L] if gate else [])
    parts = torch.split(flat, sizes)
    K, V, P = parts[0].view(B, Hk, L, D), parts[1].view(B, Hk, L, Dv), parts[2].view(B, Hk, D, D)
    return K, V, P, (parts[3].view(B, Hq, L) if gate else None)


# ----------------------------------------------------------------------------------------------
# the kernel path: the chunk's own keys on the Triton kernels, the earlier chunks' in PyTorch
# ----------------------------------------------------------------------------------------------

def _resolve_impl(impl: str, q: torch.Tensor, v: torch.Tensor) -> str:
    """``"blockwise"`` or ``"triton"`` for ``impl`` (one of ``path_lib.impl.CHOICES["context_parallel"]``)
    on these inputs, by :func:`path_lib.impl.resolve_backend` with the chunk's own reason against the
    kernels; a named error when ``"triton"`` is asked for and the kernels cannot run them."""
    unfit = None
    if impl != "blockwise" and (impl == "triton" or q.is_cuda):
        try:
            from path_lib.kernels.context import chunk_unfit
        except ImportError:
            pass                                          # resolve_backend names the import failure
        else:
            unfit = chunk_unfit(q, v)
    return resolve_backend(impl, device=q.device, dtype=q.dtype, head_dim=q.shape[-1], unfit=unfit, name="impl",
                           call="context_parallel")


def _doubling_scan(A: torch.Tensor, suffix: bool) -> torch.Tensor:
    """Inclusive products of ``A [..., NB, D, D]`` along the blocks in ``ceil(log2 NB)`` batched steps, later
    blocks on the left: ``suffix`` gives ``U_b = A_{NB-1} ... A_b``, else ``V_b = A_b ... A_0``."""
    NB, s = A.shape[-3], 1
    while s < NB:
        if suffix:
            A = torch.cat([A[..., s:, :, :] @ A[..., :NB - s, :, :], A[..., NB - s:, :, :]], dim=-3)
        else:
            A = torch.cat([A[..., :s, :, :], A[..., s:, :, :] @ A[..., :NB - s, :, :]], dim=-3)
        s *= 2
    return A


class _KernelLocal:
    """One rank's chunk on the kernel path: its summary (when a later rank reads it) and its queries moved
    to the chunk's start (when it reads earlier chunks), every block at once: one batched UT transform,
    the block products ``A_b = I - W_b^T T_b W_b`` and their running products by :func:`_doubling_scan`
    (``L / block_size`` products of ``D x D`` in ``log2`` steps), the chunk zero-padded to whole blocks
    (``w = 0``, ``beta = 0``: identity transforms at its end).

    Attributes: ``n_rep``; ``G [B, Hq, L]`` (local gate cumsum) or None; ``Qh [B, Hq, L, D]`` (the queries
    at the chunk's start, ``q_i^T H_i ... H_0`` in local indices) or None; ``summary()`` as :class:`_Local`'s.
    """

    def __init__(self, q, k, v, w, beta, g, block_size, *, summary: bool, queries: bool):
        dt = _compute_dtype(q)
        B, L, Hq, D = q.shape
        Hk = k.shape[2]
        self.n_rep = Hq // Hk
        self.G = _local_gate_cumsum(g, dt)
        self.v = v.to(dt).transpose(1, 2)
        self.Qh = self.K_end = self.P = None
        if not (summary or queries) or L == 0:
            return
        bs = min(block_size, L)
        NB = -(-L // bs)
        pad = lambda x: torch.nn.functional.pad(x, [0, 0] * (x.dim() - 2) + [0, NB * bs - L])   # noqa: E731
        blocks = lambda x, H: pad(x).to(dt).transpose(1, 2).reshape(B, H, NB, bs, *x.shape[3:])  # noqa: E731
        wh, bh = blocks(w, Hk), blocks(beta, Hk)
        T = _ut_transform(wh, bh)                           # [B, Hk, NB, bs, bs]
        A = _block_product(wh, bh, T)                       # [B, Hk, NB, D, D]
        eye = torch.eye(D, dtype=dt, device=q.device).expand(B, Hk, 1, D, D)
        if summary:
            U = _doubling_scan(A, suffix=True)
            S = torch.cat([U[:, :, 1:], eye], dim=2)        # S_b = A_{NB-1} ... A_{b+1}
            K_blk = _boundary_adjusted_keys(blocks(k, Hk), wh, T)
            self.K_end = (K_blk @ S.transpose(-1, -2)).reshape(B, Hk, NB * bs, D)[:, :, :L]
            self.P = U[:, :, 0]
        if queries:
            r = lambda x: _repeat(x, self.n_rep)            # noqa: E731
            V = _doubling_scan(A, suffix=False)
            M = torch.cat([eye, V[:, :, :-1]], dim=2)        # M_b = A_{b-1} ... A_0
            moved = _boundary_adjusted_queries(blocks(q, Hq), r(wh), r(T))
            self.Qh = (moved @ r(M)).reshape(B, Hq, NB * bs, D)[:, :, :L]

    def summary(self):
        return (self.K_end, self.v, self.P, self.G)


def _row_blocks(n: int, B: int, Hq: int, L: int, budget: int = 2 ** 25):
    """Query-row spans whose ``[B, Hq, rows, L]`` logits stay under ``budget`` elements."""
    rows = max(16, budget // max(1, B * Hq * L))
    return [(a, min(a + rows, n)) for a in range(0, n, rows)]


def _earlier_pass(Q, Gq, earlier, scale, n_rep, stats=None):
    """Queries at the chunk's start ``Q [B, Hq, n, D]`` (gate cumsums ``Gq [B, Hq, n]`` or None) over the
    earlier chunks ``c = r-1, ..., 0`` (``earlier[c] = (K->_c, V_c, P_c, G_c)``, key heads; gates in query heads).
    Without ``stats``: ``(o [B, Hq, n, Dv], lse [B, Hq, n])`` of that part alone (online softmax). With
    ``stats = (lse, delta, do)`` of the merged output: the scalar ``sum p (do . v - delta)``, ``p = exp(s -
    lse)``, whose gradient in every input is this part's share of the true gradient."""
    m: Optional[torch.Tensor] = None
    l: Optional[torch.Tensor] = None
    acc: Optional[torch.Tensor] = None
    gap: Optional[torch.Tensor] = None
    sur = Q.new_zeros(())
    for c in range(len(earlier) - 1, -1, -1):
        K, V, P, Gc = earlier[c]
        K, V = _repeat(K, n_rep), _repeat(V, n_rep)
        logits = scale * (Q @ K.transpose(-1, -2))
        if Gq is not None:
            gap = Gc[:, :, -1] if gap is None else gap + Gc[:, :, -1]
            logits = logits + (Gq + gap[..., None])[..., None] - Gc[:, :, None, :]
        if stats is not None:
            lse, delta, do = stats
            sur = sur + (torch.exp(logits - lse[..., None]) * (do @ V.transpose(-1, -2) - delta[..., None])).sum()
        elif m is None:
            m = logits.amax(dim=-1)
            p = torch.exp(logits - m[..., None])
            l, acc = p.sum(dim=-1), p @ V
        else:
            m, l, acc = _online(m, l, acc, logits, V)
        if c:
            Q = Q @ _repeat(P, n_rep)
    if stats is not None:
        return sur
    if m is None or l is None or acc is None:
        raise ValueError("_earlier_pass needs at least one earlier chunk")
    return acc / l[..., None], m + torch.log(l)


class _KernelChunk(torch.autograd.Function):
    """One chunk's output: its own keys by the kernels (:mod:`path_lib.kernels.context`), the earlier
    chunks' from their summaries in PyTorch, merged by log-sum-exp. Backward: the kernels' backward and
    the earlier part's surrogate, both from the merged output and log-sum-exp.

    Inputs: q ``[B, L, Hq, D]``, k, v, w ``[B, L, Hk, D]``, beta ``[B, L, Hk]``, G ``[B, L, Hq]`` (local gate
    cumsum) or None, ``Qh [B, Hq, L, D]`` the queries at the chunk's start, ``rows [R, n]`` the gathered
    summaries (rows ``0 .. rank-1`` read) or None, ``meta = (scale, rank, unpack arguments, n_rep)``."""

    @staticmethod
    def forward(ctx, q, k, v, w, beta, G, Qh, rows, meta):
        from path_lib.kernels.context import chunk_forward
        scale, rank, shape, n_rep = meta
        o, lse, state = chunk_forward(q, k, v, w, beta, G, scale)
        if rows is not None and rank > 0:
            earlier = [_unpack(rows[s], *shape) for s in range(rank)]
            Gh = None if G is None else G.transpose(1, 2)
            B, L, Hq = q.shape[:3]
            parts = [_earlier_pass(Qh[:, :, a:b], None if Gh is None else Gh[:, :, a:b], earlier, scale, n_rep)
                     for a, b in _row_blocks(L, B, Hq, L)]
            o_e, lse_e = torch.cat([p[0] for p in parts], 2), torch.cat([p[1] for p in parts], 2)
            lse_m = torch.logaddexp(lse, lse_e)
            o = (o.float().transpose(1, 2) * torch.exp(lse - lse_m)[..., None]
                 + o_e * torch.exp(lse_e - lse_m)[..., None]).transpose(1, 2).to(q.dtype)
            lse = lse_m
        ctx.state, ctx.meta = state, meta
        ctx.save_for_backward(Qh, G, rows, o, lse)
        return o

    @staticmethod
    def backward(ctx, do):
        from path_lib.kernels.context import chunk_backward
        Qh, G, rows, o, lse = ctx.saved_tensors
        scale, rank, shape, n_rep = ctx.meta
        dq, dk, dv, dw, db, dG = chunk_backward(ctx.state, o, lse, do)
        dQh = drows = None
        if rows is not None and rank > 0:
            do_h, o_h = do.float().transpose(1, 2), o.float().transpose(1, 2)
            delta = (do_h * o_h).sum(-1)
            B, Hq, L = delta.shape
            with torch.enable_grad():
                Qh_l, rows_l = Qh.detach().requires_grad_(), rows.detach().requires_grad_()
                G_l = None if G is None else G.detach().requires_grad_()
                for a, b in _row_blocks(L, B, Hq, L):
                    earlier = [_unpack(rows_l[s], *shape) for s in range(rank)]
                    Gq = None if G_l is None else G_l.transpose(1, 2)[:, :, a:b]
                    _earlier_pass(Qh_l[:, :, a:b], Gq, earlier, scale, n_rep,
                                  stats=(lse[:, :, a:b], delta[:, :, a:b], do_h[:, :, a:b])).backward()
            dQh, drows = Qh_l.grad, rows_l.grad
            if G_l is not None:
                dG = dG + G_l.grad
        return dq, dk, dv, dw, db, dG, dQh, drows, None


def _kernel_output(loc: _KernelLocal, q, k, v, w, beta, scale, rows, rank, shape) -> torch.Tensor:
    """This chunk's output ``[B, L, Hq, Dv]`` (q's dtype) on the kernel path (w, beta in float32, the kernels'
    dtype: float64 ones are cast here, and their gradients cast back by autograd)."""
    G = None if loc.G is None else loc.G.transpose(1, 2)
    return _KernelChunk.apply(q, k, v, w.float(), beta.float(), G, loc.Qh, rows, (scale, rank, shape, loc.n_rep))


# ----------------------------------------------------------------------------------------------
# single process: the same per-chunk computation with the chunks side by side
# ----------------------------------------------------------------------------------------------

def chunked_path_attention(q, k, v, w, beta, g=None, *, n_chunks: int, scale=None, block_size: int = 64,
                           check_values: bool = True, impl: str = "blockwise") -> torch.Tensor:
    """PaTH attention computed as ``n_chunks`` context-parallel ranks would, in one process.

    The sequence (shapes as :func:`path_lib.reference.attention.path_attention`, ``T`` a multiple of ``n_chunks``)
    is cut into contiguous chunks; each chunk's summary is formed on its own, and each chunk's output
    from its own inputs and the earlier chunks' summaries only, by the code that
    :func:`context_parallel_path_attention` runs on each rank (``impl`` as there: ``"triton"`` runs the kernel
    path's merge of statistics on one GPU). Returns ``[B, T, Hq, Dv]`` in q's dtype.
    """
    check_int(n_chunks, "n_chunks", minimum=1)
    check_block_size(block_size)
    check_bool(check_values, "check_values")
    B, T, Hq, Hk, D = check_qkv(q, k, v, finite=check_values)
    check_path_params(q, k, w, beta, g, check_values=check_values)
    scale = check_scale(scale, D)
    if T % n_chunks:
        raise ValueError(f"n_chunks ({n_chunks}) must divide the sequence length T={T}")
    L = T // n_chunks
    if L == 0:
        return q.new_zeros(B, 0, Hq, v.shape[-1])
    cut = lambda x, c: None if x is None else x[:, c * L:(c + 1) * L]   # noqa: E731
    chunk = lambda c: (cut(q, c), cut(k, c), cut(v, c), cut(w, c), cut(beta, c), cut(g, c))   # noqa: E731
    impl = _resolve_impl(impl, q, v)
    if impl == "triton":
        kernel_ranks = [_KernelLocal(*chunk(c), block_size, summary=c < n_chunks - 1, queries=c > 0)
                        for c in range(n_chunks)]
        rows = torch.stack([_pack(loc.summary()) for loc in kernel_ranks[:-1]]) if n_chunks > 1 else None
        shape = (B, L, Hq, Hk, D, v.shape[3], g is not None)
        return torch.cat([_kernel_output(loc, *chunk(c)[:5], scale, rows, c, shape) for c, loc in enumerate(kernel_ranks)],
                         dim=1)
    ranks = [_Local(*chunk(c), block_size) for c in range(n_chunks)]
    summaries = [loc.summary() for loc in ranks]
    outs = [loc.output(scale, summaries[:c]) for c, loc in enumerate(ranks)]
    return torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)


# ----------------------------------------------------------------------------------------------
# across processes
# ----------------------------------------------------------------------------------------------

def _dist():
    import torch.distributed as dist
    return dist


class _AllGather(torch.autograd.Function):
    """``x [n]`` on every rank -> ``[R, n]`` (row s from rank s). Backward: the gradient of row ``r`` summed
    over all ranks goes to rank ``r`` (reduce-scatter on NCCL; all-reduce and a row elsewhere, e.g. gloo,
    which has no reduce-scatter)."""

    @staticmethod
    def forward(ctx, x, group, world, rank):
        dist = _dist()
        ctx.group, ctx.world, ctx.rank = group, world, rank
        out = x.new_empty(world, x.numel())
        dist.all_gather(list(out.unbind(0)), x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        dist = _dist()
        grad = grad.contiguous()
        if "nccl" in str(dist.get_backend(ctx.group)) and grad.is_cuda:
            mine = grad.new_empty(grad.shape[1])
            dist.reduce_scatter_tensor(mine, grad.view(-1), group=ctx.group)
        else:
            dist.all_reduce(grad, group=ctx.group)
            mine = grad[ctx.rank]
        return mine, None, None, None


class _Tie(torch.autograd.Function):
    """``out`` unchanged, with ``rows`` (the gathered summaries) as a second input whose gradient is zero:
    every rank's output then depends on the collective in the autograd graph, so every rank runs its
    backward collective (rank 0 reads no earlier chunk and would otherwise skip it: a hang)."""

    @staticmethod
    def forward(ctx, out, rows):
        ctx.rows_shape, ctx.rows_dtype, ctx.rows_device = rows.shape, rows.dtype, rows.device
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        zero = None
        if ctx.needs_input_grad[1]:
            zero = torch.zeros(ctx.rows_shape, dtype=ctx.rows_dtype, device=ctx.rows_device)
        return grad, zero


def _group_info(group):
    """(group, world size, rank in the group, device for collectives' tensors) or a named error."""
    dist = _dist()
    if not dist.is_available():
        raise ValueError("group: torch.distributed is not available in this build of torch")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed.ProcessGroup or None, got {type(group).__name__}")
    if not dist.is_initialized():
        raise ValueError("group: torch.distributed is not initialised; call "
                         "torch.distributed.init_process_group first (torchrun sets up its environment)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("group: this process is not a member of the given process group")
    return group, dist.get_world_size(group), rank, str(dist.get_backend(group))


def _collective_device(backend: str, q: Optional[torch.Tensor]) -> torch.device:
    """Where the collectives' tensors live: q's device for CUDA q on an NCCL group, the current CUDA
    device on an NCCL-only group (even when q is invalid: every rank must pass CUDA tensors), else the CPU."""
    if "nccl" in backend:
        if q is not None and q.is_cuda:
            return q.device
        if "gloo" not in backend and torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _describe(q, k, v, w, beta, g, scale, valid: bool) -> torch.Tensor:
    """This rank's float64 descriptor (``_FIELDS``); shapes read only where the inputs are valid."""
    if not valid:
        return torch.tensor([-1.0] * (len(_FIELDS) - 1) + [0.0], dtype=torch.float64)
    B, L, Hq, D = q.shape
    grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (k, v, w, beta, g))
    return torch.tensor([B, L, Hq, k.shape[2], D, v.shape[3], float(g is not None),
                         _DTYPE_CODES[q.dtype], scale, float(grad), 1.0], dtype=torch.float64)


def _agree(rows: torch.Tensor, rank: int, own_error: Optional[BaseException], compare=_FIELDS[:-1]):
    """Raise the same error on every rank if a rank's inputs were invalid or the ranks disagree on one of
    the ``compare`` fields. ``rows [R, len(_FIELDS)]``: every rank's :func:`_describe`."""
    bad = [s for s in range(rows.shape[0]) if rows[s, -1] != 1.0]
    if bad:
        if own_error is not None:
            raise own_error
        raise ValueError(f"context_parallel_path_attention: the inputs of rank(s) {bad} failed validation "
                         "(their error says why); no rank computed anything")
    names = {"B": "q's batch size B", "T_local": "the chunk length T_local (q.shape[1])",
             "Hq": "q's heads Hq", "Hk": "k's heads Hk", "D": "the head dim D", "Dv": "v's head dim Dv",
             "has_g": "whether g is given", "dtype": "q's dtype", "scale": "the scale",
             "grad": "whether k, v, w, beta or g require grad"}
    advice = {"T_local": "every rank must hold a contiguous chunk of the same length",
              "grad": "every rank must record gradients (and run the backward) or none",
              "scale": "pass the same scale on every rank"}
    inv = {c: _name_dtype(d) for d, c in _DTYPE_CODES.items()}
    show: Dict[str, Callable[[float], object]] = {"dtype": lambda x: inv[int(x)], "scale": lambda x: f"{x:.6g}",
                                                  "has_g": bool, "grad": bool}
    for f, name in enumerate(_FIELDS[:-1]):
        if name not in compare:
            continue
        col = rows[:, f]
        if bool((col != col[0]).any()):
            shown = ", ".join(f"rank {s}: {show.get(name, int)(x)}" for s, x in enumerate(col.tolist()))
            raise ValueError(f"context_parallel_path_attention: {names[name]} differs across the ranks "
                             f"({shown}); {advice.get(name, 'every rank must hold a chunk of the same shape')}")


def context_parallel_path_attention(q, k, v, w, beta, g=None, *, scale=None, group=None, block_size: int = 64,
                                    check_values: bool = True, check_ranks: bool = True,
                                    impl: str = "auto") -> torch.Tensor:
    """Causal PaTH attention (PaTH-FoX with ``g``) of a sequence split across the ranks of ``group``.

    Rank ``r`` of ``R`` holds tokens ``[r L, (r + 1) L)``; every rank calls this with its own chunk.

    Args:
        q: ``[B, L, Hq, D]`` this rank's queries; k: ``[B, L, Hk, D]``; v: ``[B, L, Hk, Dv]``;
            ``Hq`` a multiple of ``Hk``.
        w: ``[B, L, Hk, D]`` unit directions; beta: ``[B, L, Hk]`` in [0, 2]; g: ``[B, L, Hq]`` log forget
            gates (<= 0) or None on every rank. w, beta, g float32 or float64.
        scale: logit scale, default ``D ** -0.5`` (the same on every rank).
        group: the process group (default: the world); ``torch.distributed`` must be initialised.
        block_size: block length of the local blockwise scan.
        check_values: also check values locally (finite, beta range, unit w, g <= 0).
        check_ranks: a bool, kept for compatibility: the ranks agree on shapes, dtype, validity, scale and
            gradient recording before any data moves whatever it says (the exchange that fixes the
            summaries' size runs anyway, so the rest costs nothing); a disagreement is the same
            ``ValueError`` on every rank, never a wrong answer, a crash or a hang.
        impl: the local work (``path_lib.impl.CHOICES["context_parallel"]``): ``"blockwise"`` the PyTorch scan; ``"triton"`` the kernels for the
            chunk's own keys (q in float16 / bfloat16 / float32, ``D`` in 32 / 64 / 128, ``Dv = D``, CUDA or
            ``TRITON_INTERPRET=1``) and PyTorch for the earlier chunks'; ``"auto"`` triton on CUDA when the
            kernels fit and are GPU-verified (``path_lib.kernels.GPU_VERIFIED``), else blockwise.
    Returns:
        ``[B, L, Hq, Dv]``: this rank's rows of the output, in q's dtype (computed in float64 for float64
        q, else float32), differentiable in q, k, v, w, beta and g; gradients reach the other ranks'
        inputs through the collective's backward, so every rank must run the backward too.
    """
    grp, world, rank, backend = _group_info(group)
    check_bool(check_ranks, "check_ranks")
    err = None
    try:
        check_block_size(block_size)
        check_bool(check_values, "check_values")
        B, L, Hq, Hk, D = check_qkv(q, k, v, finite=check_values)
        check_path_params(q, k, w, beta, g, check_values=check_values)
        scale = check_scale(scale, D)
        impl = _resolve_impl(impl, q, v)
    except (TypeError, ValueError) as e:
        err = e                                 # raised after the exchange, so no rank waits for this one
    cdev = _collective_device(backend, q if err is None else None)
    desc = _describe(q, k, v, w, beta, g, scale, err is None).to(cdev)
    rows = desc.new_empty(world, desc.numel())
    _dist().all_gather(list(rows.unbind(0)), desc, group=grp)
    _agree(rows.cpu(), rank, err, _FIELDS[:-1])              # every field, check_ranks or not: it is free
    Dv = v.shape[3]
    if L == 0:
        return q.new_zeros(B, 0, Hq, Dv)
    shape = (B, L, Hq, Hk, D, Dv, g is not None)
    if impl == "triton":
        # every rank publishes a summary (the all-gather is one collective), the last one unread
        kernel_loc = _KernelLocal(q, k, v, w, beta, g, block_size, summary=world > 1, queries=rank > 0)
        gathered = None
        if world > 1:
            gathered = _AllGather.apply(_pack(kernel_loc.summary()).to(cdev), grp, world, rank).to(q.device)
        out = _kernel_output(kernel_loc, q, k, v, w, beta, scale, gathered, rank, shape)
        return _Tie.apply(out, gathered) if gathered is not None and rank == 0 else out
    loc = _Local(q, k, v, w, beta, g, block_size)
    earlier = []
    if world > 1:
        flat = _pack(loc.summary())
        rows = _AllGather.apply(flat.to(cdev), grp, world, rank).to(flat.device)
        earlier = [_unpack(rows[s], B, L, Hq, Hk, D, Dv, g is not None) for s in range(rank)]
        return _Tie.apply(loc.output(scale, earlier), rows).transpose(1, 2).to(q.dtype)
    return loc.output(scale, earlier).transpose(1, 2).to(q.dtype)


# ----------------------------------------------------------------------------------------------
# the cost model
# ----------------------------------------------------------------------------------------------

def context_parallel_costs(seq_len: int, world_size: int, *, n_heads: int, head_dim: int,
                           n_kv_heads: Optional[int] = None, value_dim: Optional[int] = None, batch: int = 1,
                           gate: bool = False, bytes_per_element: int = 4, block_size: int = 64,
                           rank: Optional[int] = None) -> Dict:
    """Forward communication, work and memory of one rank of context-parallel PaTH, against ring attention.

    ``seq_len = world_size * L``; ``rank`` defaults to the last (the busiest). Numbers are tensor elements,
    operations are ``2 x`` multiply-adds of matrix products, bytes are at ``bytes_per_element``:

    * ``path_received``: elements a rank receives, ``(R - 1)`` chunk summaries (the all-gather and a
      ring alike); ``ring_received``: ring attention's ``(R - 1) B Hk L (D + Dv)`` (+ ``B Hq L`` gates with
      ``gate``); ``extra_received``: the difference, ``(R - 1) B Hk D^2``; ``extra_fraction``: its share.
    * ``path_flops``: the matrix products this module runs on ``rank`` (its summary, its chunk's blockwise
      scan, the earlier chunks), counted from the code (the ``b x b`` triangular solves are left out);
      ``ring_flops``: ideal causal ring attention's ``QK^T`` and ``PV`` for the same pairs;
      ``split_flops``: the products that exist only because the sequence is split (keys moved across
      later blocks to the chunk's end, block and chunk products, the query state moved across earlier
      chunks), ``split_fraction = split_flops / ring_flops``.
    * ``imbalance``: the last rank's attention pairs over the mean rank's.
    * ``allgather_memory`` / ``ring_memory``: bytes of summaries held (``R`` against 2 in a ring).

    The backward moves the same volume again (the summaries' gradients).
    """
    for name, x in (("seq_len", seq_len), ("world_size", world_size), ("n_heads", n_heads),
                    ("head_dim", head_dim), ("batch", batch), ("bytes_per_element", bytes_per_element),
                    ("block_size", block_size)):
        check_int(x, name, minimum=1)
    Hk = n_heads if n_kv_heads is None else check_int(n_kv_heads, "n_kv_heads", minimum=1)
    if n_heads % Hk:
        raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({Hk})")
    Dv = head_dim if value_dim is None else check_int(value_dim, "value_dim", minimum=1)
    check_bool(gate, "gate")
    if seq_len % world_size:
        raise ValueError(f"world_size ({world_size}) must divide seq_len ({seq_len})")
    R, L, D, B, Hq = world_size, seq_len // world_size, head_dim, batch, n_heads
    r = R - 1 if rank is None else check_int(rank, "rank", minimum=0)
    if r >= R:
        raise ValueError(f"rank must be < world_size ({R}), got {r}")
    summary = summary_numel(B, L, Hq, Hk, D, Dv, gate=gate)
    path_recv = (R - 1) * summary
    ring_recv = (R - 1) * (B * Hk * L * (D + Dv) + (B * Hq * L if gate else 0))
    # multiply-adds of the code's matrix products (see _blocks and _scan), per head
    sizes = [min(block_size, L - s) for s in range(0, L, block_size)]
    blocks_kv = sum(5 * n * n * D + n ** 3 for n in sizes)            # UT W W^T, keys to block end, T W
    split_kv = sum(2 * n * D * D + D ** 3 for n in sizes)             # keys to chunk end, block products
    scan_q = 0
    for i, n in enumerate(sizes):
        scan_q += 5 * n * n * D + 3 * n ** 3 + n * n * Dv              # diagonal block, queries to start
        scan_q += sum(nj * n * (3 * D + Dv) for nj in sizes[:i])       # the chunk's earlier blocks
    earlier_q = r * L * L * (D + Dv)                                  # earlier chunks: Q K^T and P V
    split_q = max(r - 1, 0) * L * D * D                               # the query state across chunks
    path_macs = B * Hk * (blocks_kv + split_kv) + B * Hq * (scan_q + earlier_q + split_q)
    pairs = lambda rk: L * (L + 1) / 2 + rk * L * L                   # noqa: E731
    ring_flops = 2 * B * Hq * pairs(r) * (D + Dv)
    split_flops = 2 * (B * Hk * split_kv + B * Hq * split_q)
    return {
        "chunk_len": L, "rank": r, "summary_numel": summary,
        "path_received": path_recv, "ring_received": ring_recv, "extra_received": path_recv - ring_recv,
        "extra_fraction": (path_recv - ring_recv) / ring_recv if ring_recv else 0.0,
        "path_received_bytes": path_recv * bytes_per_element, "ring_received_bytes": ring_recv * bytes_per_element,
        "path_flops": 2 * path_macs, "ring_flops": ring_flops, "split_flops": split_flops,
        "split_fraction": split_flops / ring_flops,
        "imbalance": pairs(R - 1) / (sum(pairs(k) for k in range(R)) / R),
        "allgather_memory": R * summary * bytes_per_element, "ring_memory": min(R, 2) * summary * bytes_per_element,
    }
