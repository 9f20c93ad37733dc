"""Operation and memory counts: FlashAttention, PaTH's blockwise algorithm, the all-pairs UT form, decoding.

Conventions (one head, one sequence; multiply by ``B * H`` for a batch):

* **Operations** are floating-point operations of the matrix products, ``2 * m * n * k`` for an
  ``[m, k] @ [k, n]`` product, counted *tile by tile as the algorithm computes them*: a tile on the
  causal diagonal is computed densely and masked afterwards, so its masked entries count. This is
  what :class:`torch.utils.flop_counter.FlopCounterMode` reports for the library's PyTorch code, and
  ``tests/test_costs.py`` checks the formulas against it (and against hand-counted loops).
  Elementwise work (exponentials, masks, the online-softmax rescaling) is ``O(T^2)`` without a
  ``D`` factor and is left out. The forward substitution that solves for the UT matrix is counted
  separately under ``"ut_solve"`` (it is not a matrix product; ``FlopCounterMode`` does not see it).
* **Memory** is counted in *elements* (multiply by 2 for bf16/fp16, 4 for fp32). ``hbm`` lists the
  tensors that live in global memory (inputs, outputs, and what the algorithm writes between its
  phases); ``extra`` is everything in ``hbm`` except the inputs and the output; ``sram`` is the working
  set one program (one query block) keeps on chip at a time.

Functions::

    block_lengths           lengths of the blocks that split a sequence
    flash_attention_cost    causal softmax attention, FlashAttention style (the SDPA baseline)
    path_blockwise_cost     PaTH's blockwise algorithm, as ``path_attention(impl="blockwise")`` runs it
    path_allpairs_cost      PaTH's all-pairs UT form, as ``path_attention(impl="parallel")`` runs it
    path_segmented_cost     the Triton kernel's forward (``path_lib.kernels.path_attention``): the scan inside a
                            segment of blocks, segment products between segments
    decode_step_cost        one generated token against a cache of ``t`` keys (PaTH or plain attention)
    backward_memory         what the backward pass keeps in global memory, by strategy
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..validation import check_bool, check_choice, check_instance, check_int, check_str

__all__ = ["Cost", "block_lengths", "ut_solve_flops", "flash_attention_cost", "path_blockwise_cost",
           "path_allpairs_cost", "path_segmented_cost", "default_seg_blocks", "decode_step_cost",
           "backward_memory"]


@dataclass
class Cost:
    """Operation and memory counts of one algorithm on one head.

    Attributes:
        name: which algorithm.
        flops_by_part: floating-point operations of each phase (matrix products, plus ``"ut_solve"``).
        hbm: elements of each tensor kept in global memory (inputs, output, intermediates).
        extra: names in ``hbm`` that are neither inputs nor the output.
        sram: elements one program keeps on chip at a time (0 when the algorithm has no tiles).
    """

    name: str
    flops_by_part: Dict[str, int]
    hbm: Dict[str, int]
    extra: List[str] = field(default_factory=list)
    sram: int = 0

    def __post_init__(self):
        check_str(self.name, "name")
        for field_name in ("flops_by_part", "hbm"):
            counts = check_instance(getattr(self, field_name), field_name, dict, "a dict of counts")
            for key, value in counts.items():
                check_int(value, f"{field_name}[{key!r}]", minimum=0)
        check_instance(self.extra, "extra", list, "a list of hbm names")
        unknown = [k for k in self.extra if k not in self.hbm]
        if unknown:
            raise ValueError(f"extra names {unknown}, which are not in hbm")
        check_int(self.sram, "sram", minimum=0)

    @property
    def flops(self) -> int:
        """All counted operations (matrix products and the UT solve)."""
        return sum(self.flops_by_part.values())

    @property
    def matmul_flops(self) -> int:
        """Matrix-product operations only (what ``FlopCounterMode`` reports)."""
        return sum(v for k, v in self.flops_by_part.items() if k != "ut_solve")

    @property
    def hbm_elements(self) -> int:
        """Elements in global memory, inputs and output included."""
        return sum(self.hbm.values())

    @property
    def extra_elements(self) -> int:
        """Elements in global memory beyond the inputs and the output."""
        return sum(self.hbm[k] for k in self.extra)


#: the largest sequence length and head dim the counts take (far beyond any GPU's memory, and small
#: enough that the block-by-block sums finish at once)
_MAX_T, _MAX_D = 2 ** 40, 2 ** 20


def _check_sizes(T: int, D: int, Dv: Optional[int], block_size: Optional[int] = None) -> int:
    check_int(T, "T", minimum=0, maximum=_MAX_T)
    check_int(D, "D", minimum=1, maximum=_MAX_D)
    check_int(Dv, "Dv", minimum=1, maximum=_MAX_D, optional=True)
    if block_size is not None:
        _check_block(T, block_size)
    return D if Dv is None else Dv


def _check_block(T: int, block_size: int) -> None:
    """A block length of at least 1 that cuts ``T`` into at most 2**24 blocks (the sums go block by block)."""
    check_int(block_size, "block_size", minimum=1)
    if T // block_size > 2 ** 24:
        raise ValueError(f"block_size {block_size} cuts T={T} into more than 2**24 blocks; take longer blocks")


def block_lengths(T: int, block_size: int) -> List[int]:
    """Lengths of the blocks ``[0, b), [b, 2b), ...`` that split ``T`` tokens (the last may be short)."""
    check_int(T, "T", minimum=0, maximum=_MAX_T)
    _check_block(T, block_size)
    return [min(block_size, T - s) for s in range(0, T, block_size)]


def _pair_sum(lengths: List[int]) -> int:
    """``sum_{j < i} L_i L_j``: the number of query-key entries in the off-diagonal tiles."""
    total = sum(lengths)
    return (total * total - sum(L * L for L in lengths)) // 2


def ut_solve_flops(L: int) -> int:
    """Operations of the forward substitution for the ``L x L`` UT matrix ``T = (I + A)^{-1} diag(beta)``.

    Row ``r`` is ``beta_r e_r - sum_{s<r} A_rs T_s`` with rows of length ``L``
    (:func:`path_lib.reference.householder.ut_transform_loop`): ``r`` multiply-adds of length ``L``, so
    ``2 L * L (L - 1) / 2 = L^2 (L - 1)`` operations. (Skipping the known zeros would save a third.)
    """
    check_int(L, "L", minimum=0)
    return L * L * (L - 1)


def flash_attention_cost(T: int, D: int, Dv: Optional[int] = None, *, block_size: int = 64) -> Cost:
    """Causal softmax attention computed FlashAttention-style with square ``block_size`` tiles.

    For every query block ``i`` and key block ``j <= i``: logits ``Q_i K_j^T`` (``2 L_i L_j D``) and
    ``P V_j`` (``2 L_i L_j Dv``). About ``T^2 (D + Dv)`` operations for ``T >> block_size``.
    Global memory: q, k, v, the output and one log-sum-exp per query (``extra``: ``T``).

    Args:
        T: sequence length; D: query/key head dim; Dv: value head dim (default ``D``).
        block_size: tile length (query and key tiles alike).
    """
    Dv = _check_sizes(T, D, Dv, block_size)
    Ls = block_lengths(T, block_size)
    entries = _pair_sum(Ls) + sum(L * L for L in Ls)  # all computed tiles, the diagonal ones dense
    flops = {"logits": 2 * entries * D, "values": 2 * entries * Dv}
    hbm = {"q": T * D, "k": T * D, "v": T * Dv, "o": T * Dv, "lse": T}
    B = min(block_size, T)
    sram = B * D + B * (D + Dv) + B * Dv + B * B + 2 * B  # Q tile, K and V tiles, acc, scores, (m, l)
    return Cost("FlashAttention", flops, hbm, ["lse"], sram)


def path_blockwise_cost(T: int, D: int, Dv: Optional[int] = None, *, block_size: int = 64) -> Cost:
    """PaTH's blockwise algorithm, phase by phase as ``path_attention(impl="blockwise")`` computes it.

    With block lengths ``L_c`` (operations, dense tiles):

    * ``"preprocess"``, per block: ``W W^T`` for the UT matrix, keys moved to the block's end
      (``W K^T``, ``T (.)``, ``(.)^T W``) and ``T W``: ``8 L^2 D + 2 L^3``;
    * ``"ut_solve"``: :func:`ut_solve_flops` per block;
    * ``"diagonal"``, per block: the intra-block all-pairs logits (``Q K^T``, ``Q W^T``, ``W K^T``,
      two ``L x L`` products) and ``P V``: ``6 L^2 D + 4 L^3 + 2 L^2 Dv``;
    * ``"query_adjust"``, per block: queries moved to the block's start: ``4 L^2 D + 2 L^3``;
    * ``"logits_values"``, per off-diagonal pair ``j < i``: ``2 L_i L_j (D + Dv)``, as FlashAttention;
    * ``"query_updates"``, per off-diagonal pair: ``Q~ W_j^T`` and ``(.) (T_j W_j)``: ``4 L_i L_j D``.

    The query updates double the matmul work of the pairs when ``Dv = D``: that is the ~2x floor
    against FlashAttention. The preprocessing is linear in ``T`` (for a fixed block size).
    Global memory adds w and beta to the inputs, and writes per block the keys moved to the block's
    end (``T D``), ``T_j W_j`` (``T D``) and the UT matrices (``sum L^2 <= T * block_size``): ``O(T D)``.
    """
    Dv = _check_sizes(T, D, Dv, block_size)
    Ls = block_lengths(T, block_size)
    s2 = sum(L * L for L in Ls)
    s3 = sum(L ** 3 for L in Ls)
    pairs = _pair_sum(Ls)
    flops = {
        "preprocess": 8 * s2 * D + 2 * s3,
        "ut_solve": sum(ut_solve_flops(L) for L in Ls),
        "diagonal": 6 * s2 * D + 4 * s3 + 2 * s2 * Dv,
        "query_adjust": 4 * s2 * D + 2 * s3,
        "logits_values": 2 * pairs * (D + Dv),
        "query_updates": 4 * pairs * D,
    }
    hbm = {"q": T * D, "k": T * D, "v": T * Dv, "w": T * D, "beta": T, "o": T * Dv,
           "keys_to_block_end": T * D, "TW": T * D, "ut_matrices": s2, "lse": T}
    B = min(block_size, T)
    # Q~ tile; per key block: K->, V, W and TW tiles; acc; scores and Q~ W^T; (m, l)
    sram = B * D + B * (3 * D + Dv) + B * Dv + 2 * B * B + 2 * B
    return Cost("PaTH blockwise", flops, hbm, ["keys_to_block_end", "TW", "ut_matrices", "lse"], sram)


def path_allpairs_cost(T: int, D: int, Dv: Optional[int] = None) -> Cost:
    """PaTH's all-pairs UT form over the whole sequence, as ``path_attention(impl="parallel")`` runs it.

    ``S = tril(Q K^T) - tril(Q W^T) T strictLower(W K^T)`` with the ``T x T`` UT matrix ``T``:
    four ``T x T x D`` products (``W W^T`` for the UT matrix, ``Q K^T``, ``Q W^T``, ``W K^T``), two
    ``T x T x T`` products, ``P V``, and the solve: ``8 T^2 D + 2 T^2 Dv + 4 T^3 + T^2 (T - 1)``
    operations, cubic in ``T``. Memory: ``T x T`` matrices (the UT matrix, the three score-like
    products, the logits), so quadratic in ``T``.
    """
    Dv = _check_sizes(T, D, Dv)
    flops = {
        "products_TTD": 8 * T * T * D,
        "products_TTT": 4 * T ** 3,
        "ut_solve": ut_solve_flops(T),
        "values": 2 * T * T * Dv,
    }
    hbm = {"q": T * D, "k": T * D, "v": T * Dv, "w": T * D, "beta": T, "o": T * Dv,
           "ut_matrix": T * T, "QK": T * T, "QW": T * T, "WK": T * T, "logits": T * T}
    return Cost("PaTH all-pairs (UT)", flops, hbm, ["ut_matrix", "QK", "QW", "WK", "logits"], 0)


def default_seg_blocks(T: int, D: int, block_size: int = 64) -> int:
    """Blocks per segment that ``path_lib.kernels.path_attention`` picks by default: about ``sqrt(2 T / D)``
    segments (so the ``D x D`` segment-pair products stay below ``T D`` memory), at least 2 blocks each."""
    _check_sizes(T, D, None)
    _check_block(T, block_size)
    n = max(1, -(-T // block_size))
    ns_max = max(1, int(math.sqrt(2.0 * n * block_size / D)))
    return max(2, -(-n // ns_max))


def path_segmented_cost(T: int, D: int, *, block_size: int = 64, seg_blocks: Optional[int] = None) -> Cost:
    """The forward of the Triton kernel (``kernels/path_lib/kernels/_triton_forward.py:_fwd_kernel`` and the float32
    precomputation ``kernels/path_lib/kernels/_precompute.py:_precompute``), which refines the blockwise scan with *segments*.

    The sequence is padded to whole blocks of ``L = block_size`` and grouped into segments of
    ``SB = seg_blocks`` blocks. A query block scans its own segment as the blockwise algorithm does
    (``8 L^2 D`` per key block: logits, values and the two thin query updates). Keys of an earlier
    segment are precomputed *moved to their segment's end*, and the query state at the end of each
    earlier segment is the query's state at its own segment's start times a precomputed segment-pair
    product (one ``D x D`` product, ``2 L D^2``, per earlier segment); it meets that segment's keys
    with plain attention (``4 L^2 D`` per key block, as FlashAttention). The query-update work is then ``O(T * SB L * D + T * NS * D^2)``
    instead of ``O(T^2 D)``: sub-quadratic when ``SB L ~ sqrt(T D)``, so for long sequences the
    kernel's operation count tends to FlashAttention's, not to twice it.

    Parts: ``"kernel_diagonal"``, ``"kernel_own_segment"``, ``"kernel_earlier_segments"`` (the
    attention products of the forward kernel's loops, checked in ``tests/test_costs.py`` against a
    tile-by-tile emulation), ``"kernel_segment_moves"`` (the ``D x D`` products), ``"precompute"`` (a
    model of the float32 precomputation, counted as dense products: per-block UT factors, block
    products ``P = I - W^T T W``, segment suffix products, keys moved to segment ends, segment-pair
    products; the kernel may organise this phase differently, and it is a few percent of the total
    for long sequences), ``"ut_solve"``. Requires ``Dv = D`` (as the kernel does).
    """
    _check_sizes(T, D, None)
    _check_block(T, block_size)
    L = block_size
    NB = max(1, -(-T // L)) if T else 0
    if seg_blocks is None:
        SB = default_seg_blocks(T, D, L)
    else:
        SB = check_int(seg_blocks, "seg_blocks", minimum=1)
    NS = -(-NB // SB) if NB else 0
    diag = own = earlier = moves = 0
    for c in range(NB):
        diag += 2 * L * L * D * 4 + 2 * L ** 3          # q w^T, (.) TW, q k^T, p v; (.) M
        own += 8 * L * L * D * (c - (c // SB) * SB)      # blocks of its own segment, to its left
        ks = c // SB                                     # earlier segments
        earlier += 4 * L * L * D * SB * ks
        moves += 2 * L * D * D * ks                      # Q0 Om(ks, k), for k = ks-1 ... 0
    pre = NB * (2 * L * L * D * 4 + 2 * L ** 3 + 2 * L * D * D)   # W W^T, T W, W K^T, T C, M^T W; W^T TW
    pre += NS * SB * 2 * D ** 3                                    # suffix products R and Seg
    pre += NS * SB * 2 * L * D * D                                 # keys moved to the segment's end
    pre += (max(NS - 2, 0) * max(NS - 1, 0) // 2) * 2 * D ** 3     # segment-pair products Om
    flops = {"kernel_diagonal": diag, "kernel_own_segment": own, "kernel_earlier_segments": earlier,
             "kernel_segment_moves": moves, "precompute": pre, "ut_solve": NB * ut_solve_flops(L)}
    Tp = NB * L
    hbm = {"q": T * D, "k": T * D, "v": T * D, "w": T * D, "beta": T, "o": T * D,
           "TW": Tp * D, "keys_to_block_end": Tp * D, "keys_to_segment_end": Tp * D,
           "ut_and_M_matrices": 2 * NB * L * L, "segment_products": NS * D * D,
           "segment_pair_products": max(NS * (NS - 1) // 2, 1) * D * D, "lse": Tp, "q0": Tp * D}
    extra = [k for k in hbm if k not in ("q", "k", "v", "w", "beta", "o")]
    sram = L * D * 2 + L * D * 4 + L * L * 3 + D * D + 2 * L   # q, qs; k, v, w, TW tiles; s, bm, M; Seg
    return Cost("PaTH Triton kernel (segmented)", flops, hbm, extra, sram)


def decode_step_cost(t: int, D: int, Dv: Optional[int] = None, *, path: bool = True) -> Cost:
    """One generated token attending to a cache of ``t`` keys (after the new key is appended).

    Plain attention: logits ``2 t D`` and values ``2 t Dv``. PaTH first moves the ``t - 1`` cached
    keys across the new token's transform, ``k <- k - beta (w^T k) w`` (``2 (t-1) D`` for the
    projections and ``2 (t-1) D`` for the update), then attends as plain attention does: at most
    ``2x`` the operations when ``Dv = D``, and the key cache is rewritten (read and written) every step.
    """
    check_int(t, "t", minimum=0, maximum=_MAX_T)
    Dv = _check_sizes(t, D, Dv)
    check_bool(path, "path")
    flops = {"logits": 2 * t * D, "values": 2 * t * Dv}
    hbm = {"key_cache": t * D, "value_cache": t * Dv, "q": D, "o": Dv}
    if path:
        n = max(t - 1, 0)
        flops = {"key_projections": 2 * n * D, "key_updates": 2 * n * D, **flops}
        hbm["w"] = D
        return Cost("PaTH decode step", flops, hbm, [], 0)
    return Cost("attention decode step", flops, hbm, [], 0)


def backward_memory(T: int, D: int, Dv: Optional[int] = None, *, method: str = "recompute",
                    boundary: int = 512, block_size: int = 64) -> int:
    """Elements the backward pass keeps in global memory besides inputs, outputs and their gradients.

    * ``"flash"``: FlashAttention's backward: the log-sum-exp (``T``) and ``delta = rowsum(dO * O)`` (``T``).
    * ``"recompute"``: PaTH recomputing everything from the inputs and the log-sum-exp, as FlashAttention
      does: the per-block products of the forward (keys at block ends, ``T W``, UT matrices) are rebuilt
      or kept, plus ``dq`` accumulated across key blocks and the two ``T`` vectors: ``O(T D)``.
    * ``"checkpoint"``: queries materialised at every ``boundary``-token boundary for every later
      query (fla's strategy): about ``T^2 / boundary * D / 2``, i.e. ``O(T^2 D / boundary)``.
    * ``"kernel"``: an upper estimate (every buffer alive at once) of what this project's Triton
      backward holds, read off ``kernels/path_lib/kernels/_autograd.py`` (``_PathAttnFn``) when this count was written
      (``Dv = D``; the kernel changes faster than this docstring, and measured peaks on a GPU are the
      authority). Saved by the forward: the query states at segment starts ``q0``, ``T W``, keys at
      block and segment ends (``4 T D``), three ``L x L`` matrices per block (``3 T L``), the segment and
      segment-pair ``D x D`` products, the per-block suffix products (``D x D`` each), the log-sum-exp.
      Allocated by the backward (v19): ``dq0, dks, dv, dq, dk, dka, dw, d(T W)`` and a scratch
      (``9 T D``; the segment chain adds its gradients to ``dka``, ``d(T W)`` and ``dw`` in place),
      ``dT`` (``T L``), the chain's per-block state (``D x D`` each), ``dSeg``, ``delta`` and ``dg``.
      About ``13 T D + 4 T L``: ``O(T D)``, with ``L = block_size`` and ``default_seg_blocks`` segments.
    """
    Dv = _check_sizes(T, D, Dv, block_size)
    check_choice(method, "method", ("flash", "recompute", "checkpoint", "kernel"))
    check_int(boundary, "boundary", minimum=1)
    if method == "flash":
        return 2 * T
    if method == "kernel":
        L = block_size
        Tp = -(-T // L) * L
        NS = -(-(Tp // L) // default_seg_blocks(T, D, L)) if T else 0
        mats = (2 * NS + max(NS * (NS - 1) // 2, 1) + 2 * (Tp // L)) * D * D
        return 13 * Tp * D + 4 * Tp * L + mats + 3 * Tp
    Ls = block_lengths(T, block_size)
    per_block = 2 * T * D + sum(L * L for L in Ls)
    if method == "recompute":
        return per_block + T * D + 2 * T
    if method == "checkpoint":
        if not isinstance(boundary, int) or boundary < 1:
            raise ValueError(f"boundary must be a positive int, got {boundary!r}")
        # query i is stored once per boundary strictly below its own segment: sum_i floor(i / boundary)
        n, r = divmod(T, boundary)
        stored = boundary * n * (n - 1) // 2 + r * n
        return per_block + stored * D + 2 * T
    raise ValueError(f"method must be one of ('flash', 'recompute', 'checkpoint', 'kernel'), got {method!r}")
