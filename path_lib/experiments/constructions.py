"""Hand-built PaTH networks: the paper's Theorem 2.1 construction, made executable.

The task (an NC^1-complete problem, by Barrington's theorem): the input is a start token ``#``
followed by ``n`` swap tokens ``[x<->y]`` (``0 <= x < y < 5``, ten of them; ``[y<->x]`` is the same
token), and the question is whether the composition of the ``n`` transpositions is the identity
permutation of five elements.

:func:`swap_word_problem_model` returns a one-layer, two-head PaTH network with every weight set by
hand (no training). With ``D = 6`` dimensions per head:

* **Embedding**: one-hot, 11 token ids (``#`` is id 0, ``[x<->y]`` are ids 1..10, see :data:`VOCAB`).
* **Head 1 (PaTH)**: a swap token ``[x<->y]`` sets ``w = (e_x - e_y)/sqrt(2)`` and ``beta = 2``, so
  ``H = I - 2 w w^T`` is the permutation matrix of the transposition; ``#`` sets ``beta = 0``
  (``H = I``). Every token queries with ``q = (u, 1)``; only ``#`` has a key, ``k_# = (u, -tau)``;
  the value is 1 at ``#`` and 0 elsewhere. With ``P_i = H_i ... H_1`` (a permutation matrix acting
  on the first five coordinates) the logit from position ``i`` to ``#`` is

      s_i = scale * (u^T P_i u - tau),                                        (1)

  all other logits are 0 (their keys are 0), so the head outputs the attention weight on ``#``:
  ``a_i = e^{s_i} / (e^{s_i} + i)``.
* **Head 2 (constant, NoPE-like)**: ``q = k = 0``, ``beta = 0``, same value: all logits equal, so
  it outputs ``r_i = 1 / (i + 1)``.
* **Output layer**: ``d_i = a_i - r_i`` (a linear map with weights ``(1, -1)``), and a two-ReLU
  feed-forward ``y_i = ReLU(1 + gamma d_i) - ReLU(gamma d_i)`` (a clipped step); the answer at
  position ``i`` is ``y_i > 1/2``.

Why it is exact. ``u = (-2, -1, 0, 1, 2) / sqrt(10)`` has ``||u|| = 1`` and distinct entries spaced
``delta = 1/sqrt(10)`` apart. For a permutation matrix ``P`` of ``pi``,
``||u||^2 - u^T P u = (1/2) sum_a (u_a - u_{pi(a)})^2``: zero iff ``pi`` is the identity, and
otherwise at least ``delta^2 = 1/10`` (at least two entries move, each by at least ``delta``;
a transposition of neighbouring entries attains it). With ``tau = 1 - delta^2 / 2 = 0.95`` the logit
(1) is ``+m`` for the identity and at most ``-m`` otherwise, ``m = scale / 20``. Since
``a_i > r_i  <=>  e^{s_i} > 1  <=>  s_i > 0``, the sign of ``d_i`` is the answer (for ``i = 0``,
the empty composition, ``a_0 = r_0 = 1`` and ``d_0 = 0``: identity). The non-identity margin is

    d_i <= -mu_i,   mu_i = 1/(i+1) - e^{-m}/(e^{-m}+i) = i (1 - e^{-m}) / ((i+1)(i+e^{-m}))   (2)

which decreases in ``i`` (about ``1/i``); the step uses ``gamma = 2 / mu_n``. The logit scale grows
with ``log n``: ``m = 1 + ln(n + 1)``, i.e. ``scale = 20 (1 + ln(n + 1))``, so for the identity the
weight on ``#`` is at least ``e(n+1)/(e(n+1)+n) > 1/2`` and for any other permutation it is at most
``1/(1 + e n (n+1))``. The quantities that must be told apart (``d_i`` against 0 and
``-mu_i ~ -1/n``) need ``O(log n)`` bits: the theorem's log precision.

Precision, measured (see ``book/part2/05_expressivity``). In float64 the model is exact on every
sequence tried (tests: hypothesis-generated random sequences up to length 1000, identity-composing
ones and near misses, the empty list, length 1; the chapter: every prefix of sequences of length
1000; spot checks to 30,000), and the computed ``u^T P u`` stays within ~1e-12 of its exact value. In
float32 ``w = (e_x - e_y)/sqrt(2)`` is not exactly representable, so each "reflection" is off by
about 2^-24 and the computed ``u^T P u`` drifts linearly with ``n``: measured about 4e-8 per swap on
``w + reversed(w)`` sequences and 7e-9 per swap when one swap is repeated (float32 agrees with the
truth at every length we ran, up to 3e4 swaps, where the drift is ~1e-3). The logit margin of
``u^T P u`` is ``delta^2 / 2 = 0.05``, so float32 is predicted to start failing near ``n ~ 10^6``
(an extrapolation of the measured slope). The theorem's accounting is fixed point: with the heads'
outputs rounded to ``p`` fractional bits (``forward(..., fixed_point_bits=p)``) the decision needs
``p ~ log2(n)`` bits (measured in the chapter: 10 bits for n = 1024), because ``1/(n+1)`` must be
representable: that is the ``O(log n)`` precision.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..validation import check_block_size, check_choice, check_dtype, check_int, check_number, check_str, check_tokens
from ..impl import path_attention
from ..reference.attention import rope_attention

__all__ = [
    "SWAP_PAIRS", "VOCAB", "START", "U", "TAU", "HEAD_DIM", "swap_token", "encode_swaps", "compose_swaps",
    "is_identity", "validate_swaps", "SwapWordProblemModel", "swap_word_problem_model", "solve_swaps",
    "logit_scale", "nonidentity_margin", "rope_recipe_weight", "FlipFlopPaTHModel", "flip_flop_model",
]

N_ELEMENTS = 5
SWAP_PAIRS: Tuple[Tuple[int, int], ...] = tuple((x, y) for x in range(N_ELEMENTS) for y in range(x + 1, N_ELEMENTS))
START = "#"
VOCAB: Tuple[str, ...] = (START,) + tuple(f"[{x}<->{y}]" for x, y in SWAP_PAIRS)
HEAD_DIM = N_ELEMENTS + 1
_DELTA2 = 0.1                                    # min spacing^2 of U's entries
TAU = 1.0 - _DELTA2 / 2                          # 0.95
U = (-2.0, -1.0, 0.0, 1.0, 2.0)                  # divided by sqrt(10) below (unit norm)


# ----------------------------------------------------------------------------------------------
# inputs: validation, encoding, the ground truth
# ----------------------------------------------------------------------------------------------

def validate_swaps(swaps, name: str = "swaps") -> List[Tuple[int, int]]:
    """Check a list of swaps ``(x, y)``, ``0 <= x, y < 5``, ``x != y``; return them as int tuples.

    Raises TypeError (not a list/tuple of pairs of ints) or ValueError (wrong pair length, range,
    ``x == y``), naming the argument.
    """
    check_str(name, "name")
    if isinstance(swaps, (str, bytes)) or not isinstance(swaps, (list, tuple)):
        raise TypeError(f"{name} must be a list of (x, y) pairs, got {type(swaps).__name__}")
    out = []
    for idx, pair in enumerate(swaps):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, (list, tuple)):
            raise TypeError(f"{name}[{idx}] must be a pair (x, y) of ints, got {type(pair).__name__}")
        if len(pair) != 2:
            raise ValueError(f"{name}[{idx}] must have exactly two entries (x, y), got {len(pair)}")
        for v in pair:
            if isinstance(v, bool) or not isinstance(v, int):
                if not (isinstance(v, torch.Tensor) and v.dim() == 0 and not v.is_floating_point()
                        and v.dtype != torch.bool):
                    raise TypeError(f"{name}[{idx}] entries must be ints, got {type(v).__name__}")
        x, y = int(pair[0]), int(pair[1])
        if not (0 <= x < N_ELEMENTS and 0 <= y < N_ELEMENTS):
            raise ValueError(f"{name}[{idx}] = ({x}, {y}): elements must lie in 0..{N_ELEMENTS - 1}")
        if x == y:
            raise ValueError(f"{name}[{idx}] = ({x}, {y}): a swap needs two different elements")
        out.append((x, y))
    return out


def swap_token(x: int, y: int) -> int:
    """Token id of ``[x<->y]`` (``== [y<->x]``), in 1..10."""
    check_int(x, "x", minimum=0, maximum=N_ELEMENTS - 1)
    check_int(y, "y", minimum=0, maximum=N_ELEMENTS - 1)
    if x == y:
        raise ValueError(f"x and y must be two different elements, got {x} twice")
    a, b = min(x, y), max(x, y)
    return 1 + SWAP_PAIRS.index((a, b))


def encode_swaps(swaps) -> torch.Tensor:
    """``[# s_1 ... s_n]`` as a long tensor ``[n + 1]`` of ids in :data:`VOCAB`."""
    swaps = validate_swaps(swaps)
    return torch.tensor([0] + [swap_token(x, y) for x, y in swaps], dtype=torch.long)


def compose_swaps(swaps) -> Tuple[int, ...]:
    """The composed permutation as a tuple ``pi`` (``pi[a]`` = where element a ends up), directly."""
    perm = list(range(N_ELEMENTS))
    for x, y in validate_swaps(swaps):
        perm[x], perm[y] = perm[y], perm[x]
    return tuple(perm)


def is_identity(swaps) -> bool:
    """Ground truth: does the composition of ``swaps`` equal the identity permutation?"""
    return compose_swaps(swaps) == tuple(range(N_ELEMENTS))


# ----------------------------------------------------------------------------------------------
# the hand-built network
# ----------------------------------------------------------------------------------------------

def logit_scale(n: int) -> float:
    """``scale = 20 (1 + ln(n + 1))``: the logit margin ``m = scale / 20 = 1 + ln(n + 1)`` grows with log n."""
    check_int(n, "n", minimum=0)
    return 20.0 * (1.0 + math.log(n + 1))


def nonidentity_margin(n: int) -> float:
    """``mu_n`` of eq. (2): for a non-identity prefix of length ``i <= n``, ``a_i - r_i <= -mu_n``."""
    check_int(n, "n", minimum=0)
    if n < 1:
        return 1.0
    c = math.exp(-logit_scale(n) / 20.0)
    return n * (1 - c) / ((n + 1) * (n + c))


class SwapWordProblemModel(nn.Module):
    """One layer, two heads of PaTH attention, weights set by hand (see the module docstring).

    ``forward(tokens [B, T] long) -> dict`` with float tensors ``[B, T]``: ``"logit_start"`` (eq. 1,
    the PaTH head's logit from each position to ``#``), ``"weight_path"`` (``a_i``),
    ``"weight_ref"`` (``r_i``), ``"diff"`` (``d_i``), ``"y"`` (the step's output) and the bool
    ``"identity"`` (``y > 1/2``): the prefix ``s_1 ... s_i`` composes to the identity. Position 0
    must hold ``#``. Weights depend on the length only through the logit scale and ``gamma``, both
    computed from ``T`` (``n = T - 1``), as the log-precision theorem allows.
    """

    def __init__(self, dtype: torch.dtype = torch.float64, impl: str = "blockwise", block_size: int = 64,
                 beta: float = 2.0):
        super().__init__()
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not (0 < beta <= 2):
            raise ValueError(f"beta must be a number in (0, 2], got {beta!r}")
        check_dtype(dtype, "dtype", (torch.float32, torch.float64))
        check_choice(impl, "impl", ("explicit", "parallel", "blockwise"))
        check_block_size(block_size)
        self.impl, self.block_size, self.dtype = impl, block_size, dtype
        V, D = len(VOCAB), HEAD_DIM
        f64 = torch.float64                                      # built exactly, then cast
        u = torch.tensor(U, dtype=torch.float64) / math.sqrt(10.0)

        self.embed = nn.Embedding(V, V, dtype=f64)                        # one-hot
        self.q_proj = nn.Linear(V, 2 * D, bias=False, dtype=f64)            # two heads of D
        self.k_proj = nn.Linear(V, 2 * D, bias=False, dtype=f64)
        self.v_proj = nn.Linear(V, 2 * 1, bias=False, dtype=f64)            # one value dim per head
        self.w_proj = nn.Linear(V, 2 * D, bias=False, dtype=f64)
        self.beta_proj = nn.Linear(V, 2, bias=False, dtype=f64)
        self.out_proj = nn.Linear(2, 1, bias=False, dtype=f64)              # d = a - r
        self.ffn_in = nn.Linear(1, 2, bias=True, dtype=f64)                 # (1 + g d, g d); g set per length
        self.ffn_out = nn.Linear(2, 1, bias=False, dtype=f64)               # ReLU(.) - ReLU(.)
        with torch.no_grad():
            for p in self.parameters():
                p.zero_()
                p.requires_grad_(False)
            self.embed.weight.copy_(torch.eye(V))
            # head 1 (columns: token id; rows: output coordinate)
            for tok in range(V):
                self.q_proj.weight[:N_ELEMENTS, tok] = u
                self.q_proj.weight[N_ELEMENTS, tok] = 1.0
            self.k_proj.weight[:N_ELEMENTS, 0] = u
            self.k_proj.weight[N_ELEMENTS, 0] = -TAU
            self.v_proj.weight[0, 0] = 1.0                        # head 1 value: 1 at '#'
            self.v_proj.weight[1, 0] = 1.0                        # head 2 value: 1 at '#'
            # w: '#' gets e_5 (beta 0, inert); [x<->y] gets (e_x - e_y)/sqrt(2), beta 2
            self.w_proj.weight[N_ELEMENTS, 0] = 1.0
            for tok, (x, y) in enumerate(SWAP_PAIRS, start=1):
                self.w_proj.weight[x, tok] = 1 / math.sqrt(2.0)
                self.w_proj.weight[y, tok] = -1 / math.sqrt(2.0)
                self.beta_proj.weight[0, tok] = float(beta)
            self.w_proj.weight[D:, :] = 0.0
            self.w_proj.weight[D + N_ELEMENTS, :] = 1.0           # head 2: w = e_5, beta = 0 (H = I)
            # head 2: q = k = 0 (constant logits)
            self.out_proj.weight.copy_(torch.tensor([[1.0, -1.0]], dtype=f64))
            self.ffn_out.weight.copy_(torch.tensor([[1.0, -1.0]], dtype=f64))
        self.to(dtype)

    def set_length(self, n: int) -> float:
        """Set the FFN's ``gamma = 2 / mu_n`` for sequences of ``n`` swaps; returns gamma."""
        gamma = 2.0 / nonidentity_margin(n)
        with torch.no_grad():
            self.ffn_in.weight.fill_(gamma)
            self.ffn_in.bias.copy_(torch.tensor([1.0, 0.0], dtype=self.ffn_in.bias.dtype))
        return gamma

    def forward(self, tokens: torch.Tensor, fixed_point_bits: Optional[int] = None) -> dict:
        """See the class docstring. ``fixed_point_bits``: if given, round the two heads' outputs to
        that many fractional bits (a fixed-point register) before the output layer, to show how
        many bits the comparison ``a_i`` vs ``r_i`` needs (about ``log2 n``)."""
        if fixed_point_bits is not None and (isinstance(fixed_point_bits, bool)
                                             or not isinstance(fixed_point_bits, int) or fixed_point_bits < 1):
            raise ValueError(f"fixed_point_bits must be a positive int or None, got {fixed_point_bits!r}")
        check_tokens(tokens, len(VOCAB), min_len=1)
        if bool((tokens[:, 0] != 0).any()) or bool((tokens[:, 1:] == 0).any()):
            raise ValueError("tokens must start with '#' (id 0) and contain it only at position 0")
        B, T = tokens.shape
        n = T - 1
        D = HEAD_DIM
        x = self.embed(tokens)                                    # [B, T, 11], one-hot
        q = self.q_proj(x).view(B, T, 2, D)
        k = self.k_proj(x).view(B, T, 2, D)
        v = self.v_proj(x).view(B, T, 2, 1)
        w = self.w_proj(x).view(B, T, 2, D)
        beta = self.beta_proj(x).view(B, T, 2)
        scale = logit_scale(n)
        o = path_attention(q, k, v, w, beta, scale=scale, impl=self.impl, block_size=self.block_size)
        heads = o[..., 0]                                         # [B, T, 2]: (a_i, r_i)
        if fixed_point_bits is not None:
            heads = torch.round(heads * 2.0 ** fixed_point_bits) / 2.0 ** fixed_point_bits
        d = self.out_proj(heads)                                  # [B, T, 1]
        self.set_length(n)
        h = torch.relu(self.ffn_in(d))
        y = self.ffn_out(h)[..., 0]
        return {"weight_path": heads[..., 0], "weight_ref": heads[..., 1], "diff": d[..., 0], "y": y,
                "identity": y > 0.5, "scale": scale}


def swap_word_problem_model(dtype: torch.dtype = torch.float64, *, impl: str = "blockwise",
                            block_size: int = 64, beta: float = 2.0) -> SwapWordProblemModel:
    """The paper's Theorem 2.1 network built by hand (see module docstring); float64 by default.

    ``impl`` picks path_lib's PaTH implementation (``"blockwise"``, ``"parallel"``, ``"explicit"``).
    ``beta`` is the swap tokens' strength: 2 (a true reflection, eigenvalue -1) is the construction;
    other values are for the experiment that shows why the negative eigenvalue is needed.
    """
    return SwapWordProblemModel(dtype=dtype, impl=impl, block_size=block_size, beta=beta).eval()


@torch.no_grad()
def solve_swaps(model: SwapWordProblemModel, swaps) -> bool:
    """True exactly when the composition of ``swaps`` (a list of pairs ``(x, y)``, ``0 <= x, y < 5``,
    ``x != y``) is the identity permutation, decided by ``model``'s forward pass."""
    if not isinstance(model, SwapWordProblemModel):
        raise TypeError(f"model must be a SwapWordProblemModel (from swap_word_problem_model()), "
                        f"got {type(model).__name__}")
    tokens = encode_swaps(swaps)[None]
    return bool(model(tokens)["identity"][0, -1])


# ----------------------------------------------------------------------------------------------
# the same recipe with a fixed rotation (RoPE): it cannot see the swaps
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def rope_recipe_weight(swaps_batch: Sequence, *, scale: float = 1.0, base: float = 10000.0,
                       dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Attention weight on ``#`` at the last position when head 1's Householder path is replaced by
    RoPE's fixed rotation (same one-hot embedding, same q and k). ``swaps_batch``: a list of swap
    lists, all of one length. Returns ``[B]``.

    The logit to ``#`` is ``scale * q^T R^{n} k_#``: it depends on the distance n only, so every
    sequence of one length gets the same weight, whatever its swaps compose to.
    """
    if isinstance(swaps_batch, (str, bytes)) or not isinstance(swaps_batch, (list, tuple)) or not swaps_batch:
        raise TypeError("swaps_batch must be a non-empty list of swap lists")
    check_number(scale, "scale", positive=True)
    check_number(base, "base", positive=True)
    check_dtype(dtype, "dtype", (torch.float32, torch.float64))
    toks = [encode_swaps(s) for s in swaps_batch]
    if len({t.numel() for t in toks}) != 1:
        raise ValueError("swaps_batch: all swap lists must have the same length")
    model = SwapWordProblemModel(dtype=dtype)
    tokens = torch.stack(toks)
    B, T = tokens.shape
    x = model.embed(tokens)
    q = model.q_proj(x).view(B, T, 2, HEAD_DIM)[:, :, :1]
    k = model.k_proj(x).view(B, T, 2, HEAD_DIM)[:, :, :1]
    v = model.v_proj(x).view(B, T, 2, 1)[:, :, :1]
    o = rope_attention(q, k, v, scale=scale, base=base)
    return o[:, -1, 0, 0]


# ----------------------------------------------------------------------------------------------
# flip-flop in two PaTH layers (after the paper's Theorem A.1), built by hand
# ----------------------------------------------------------------------------------------------

class FlipFlopPaTHModel(nn.Module):
    """A two-layer, one-head-per-layer PaTH network for flip-flop language modelling, weights set by
    hand (our construction in the spirit of the paper's Theorem A.1; vocabulary
    ``path_lib.training.tasks.FLIP_FLOP_VOCAB`` = w, r, i, 0, 1 with ids 0..4).

    * Layer 1 (``D = 1``): instruction tokens have key 1 and a projection ``w = e_1, beta = 1``;
      bits have key 0 and ``beta = 0``; every query is 1 with scale ``s = 2 ln(T) + 5``. A bit's
      logits: itself 0 (key 0), the instruction just before it ``s`` (no projection in between),
      everything earlier 0 (killed by that instruction's projection). The value is the instruction's
      one-hot, so a bit learns which instruction precedes it (weight >= 1 - T e^{-s}).
    * MLP: ``written = step(f_w + is_bit - 3/2)``: a bit that follows ``w``.
    * Layer 2 (``D = 1``): written bits have key 1 and a projection ``beta = 1``; all other keys 0,
      ``beta = 0``; query 1 everywhere, same scale. From a read position, the most recent written
      bit has logit ``s``, every older written bit was projected to 0 by a later write, and all other
      keys are 0: the head returns (weight >= 1 - T e^{-s}) the last written bit's value (one-hot bit).
    * Output: logits ``10 * (attention output)`` on tokens 0 / 1, ``-10`` on w, r, i.

    ``forward(tokens [B, T] long) -> logits [B, T, 5]``: at every position the prediction is the most
    recently written bit, which is the flip-flop answer after ``r``. Exact (argmax) whenever the
    margin ``T e^{-s} < 1/2`` holds, i.e. at every length, in float64 and float32.
    """

    def __init__(self, dtype: torch.dtype = torch.float64, impl: str = "blockwise"):
        super().__init__()
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        check_choice(impl, "impl", ("explicit", "parallel", "blockwise"))
        self.impl, self.dtype = impl, dtype
        f64 = torch.float64
        self.embed = nn.Embedding(5, 5, dtype=f64)               # one-hot: w r i 0 1
        self.l1_k = nn.Linear(5, 1, bias=False, dtype=f64)       # 1 on instructions
        self.l1_beta = nn.Linear(5, 1, bias=False, dtype=f64)    # 1 on instructions
        self.l1_v = nn.Linear(5, 3, bias=False, dtype=f64)       # instruction one-hot
        self.mlp = nn.Linear(5 + 3, 1, bias=True, dtype=f64)     # f_w + is_bit - 3/2
        self.l2_v = nn.Linear(5, 2, bias=False, dtype=f64)       # bit one-hot
        self.head = nn.Linear(2, 5, bias=True, dtype=f64)
        with torch.no_grad():
            for p in self.parameters():
                p.zero_()
                p.requires_grad_(False)
            self.embed.weight.copy_(torch.eye(5))
            self.l1_k.weight[0, :3] = 1.0
            self.l1_beta.weight[0, :3] = 1.0
            self.l1_v.weight[:, :3] = torch.eye(3)
            self.mlp.weight[0, 3] = self.mlp.weight[0, 4] = 1.0  # is_bit
            self.mlp.weight[0, 5] = 1.0                          # f_w (layer 1 output, 'w' component)
            self.mlp.bias.fill_(-1.5)
            self.l2_v.weight[0, 3] = self.l2_v.weight[1, 4] = 1.0
            self.head.weight[3, 0] = self.head.weight[4, 1] = 10.0
            self.head.bias[:3] = -10.0
        self.to(dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tokens(tokens, 5, min_len=1, vocab_names="w, r, i, 0, 1")
        B, T = tokens.shape
        scale = 2.0 * math.log(T) + 5.0
        x = self.embed(tokens)                                    # [B, T, 5]
        ones = x.new_ones(B, T, 1, 1)
        w = ones                                                  # D = 1: w = e_1 (unit)
        # layer 1: which instruction precedes each bit
        o1 = path_attention(ones, self.l1_k(x)[..., None], self.l1_v(x)[:, :, None], w,
                            self.l1_beta(x), scale=scale, impl=self.impl)[:, :, 0]       # [B, T, 3]
        # MLP: written bit = a bit after 'w' (a clipped step of width 1/8)
        h = self.mlp(torch.cat([x, o1], dim=-1))
        written = torch.relu(8 * h + 1) - torch.relu(8 * h)                              # [B, T, 1]
        # layer 2: the most recent written bit
        o2 = path_attention(ones, written[..., None], self.l2_v(x)[:, :, None], w, written,
                            scale=scale, impl=self.impl)[:, :, 0]                        # [B, T, 2]
        return self.head(o2)


def flip_flop_model(dtype: torch.dtype = torch.float64, *, impl: str = "blockwise") -> FlipFlopPaTHModel:
    """The hand-built two-layer PaTH flip-flop network (see :class:`FlipFlopPaTHModel`)."""
    return FlipFlopPaTHModel(dtype=dtype, impl=impl).eval()
