"""Synthetic tasks of the expressivity chapter: flip-flop, the A5 word problem, MQRAR-N.

Every generator is deterministic given ``seed`` (or a ``torch.Generator``), validates its
parameters (TypeError / ValueError naming the argument) and returns

    inputs  [B, T] long   token ids in ``range(len(vocab))``
    targets [B, T] long   the token id the model must output at that position, -100 where no loss
    vocab   list of str   one shared vocabulary for inputs and targets (``TinyLM(len(vocab))`` fits)

Targets are aligned with inputs: ``logits[:, t]`` of a causal model that has read ``inputs[:, :t+1]``
is scored against ``targets[:, t]`` (use :func:`path_lib.training.loop.masked_loss`).
"""
from __future__ import annotations

import itertools
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ..validation import check_choice, check_generator, check_int, check_probability, check_seed

__all__ = [
    "IGNORE_INDEX", "FLIP_FLOP_VOCAB", "flip_flop", "A5_ELEMENTS", "A5_GENERATORS", "a5_vocab",
    "a5_word_problem", "compose", "mqrar", "mqrar_vocab", "phonebook", "phonebook_vocab", "TASKS", "make_task",
]

IGNORE_INDEX = -100
_MAX_VOCAB = 2 ** 20            # MQRAR's keys and values: a vocabulary a token embedding can hold
Batch = Tuple[torch.Tensor, torch.Tensor, List[str]]


# ----------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------

def _int(value, name: str, minimum: int = 1) -> int:
    return check_int(value, name, minimum=minimum)


def _prob(value, name: str) -> float:
    return check_probability(value, name, open_max=True)


def _generator(seed, generator) -> torch.Generator:
    if generator is not None:
        if seed is not None:
            raise ValueError("pass either seed or generator, not both")
        return check_generator(generator)
    if seed is None:
        raise ValueError("pass seed (an int) or generator (a torch.Generator): tasks are deterministic")
    g = torch.Generator()
    g.manual_seed(check_seed(seed))
    return g


# ----------------------------------------------------------------------------------------------
# flip-flop language modelling (Liu et al. 2023)
# ----------------------------------------------------------------------------------------------

FLIP_FLOP_VOCAB = ["w", "r", "i", "0", "1"]
_W, _R, _I, _B0 = 0, 1, 2, 3


def flip_flop(batch_size: int, length: int = 512, p_ignore: float = 0.8, *, seed: Optional[int] = None,
              generator: Optional[torch.Generator] = None) -> Batch:
    """Flip-flop language modelling, FFL(p_ignore) of Liu et al. (2023).

    A sequence is ``length / 2`` instruction-bit pairs ``x_1 b_1 x_2 b_2 ...``, instructions in
    {w, r, i}. The first instruction is ``w`` and the last is ``r``; the others are ``i`` with
    probability ``p_ignore`` and ``w`` or ``r`` with probability ``(1 - p_ignore) / 2`` each. The bit
    after ``w`` or ``i`` is uniform; the bit after ``r`` equals the bit of the most recent ``w``.
    Loss only on those read bits: ``targets[t] = inputs[t + 1]`` where ``inputs[t] == r``, else -100.

    In-distribution FFL(0.8): ``p_ignore=0.8``; out of distribution: sparse ``0.98``, dense ``0.1``.

    Returns ``(inputs [B, length], targets [B, length], FLIP_FLOP_VOCAB)``; ids: w=0, r=1, i=2, 0=3, 1=4.
    """
    B = _int(batch_size, "batch_size")
    T = _int(length, "length", minimum=4)
    if T % 2:
        raise ValueError(f"length must be even (instruction-bit pairs), got {T}")
    p_ignore = _prob(p_ignore, "p_ignore")
    g = _generator(seed, generator)
    n = T // 2
    u = torch.rand(B, n, generator=g)
    p_wr = (1.0 - p_ignore) / 2
    instr = torch.full((B, n), _I, dtype=torch.long)
    instr[u < 2 * p_wr] = _R
    instr[u < p_wr] = _W
    instr[:, 0] = _W
    instr[:, -1] = _R
    bits = torch.randint(0, 2, (B, n), generator=g)
    # the bit of the most recent write, carried forward
    is_w = instr == _W
    idx = torch.where(is_w, torch.arange(n).expand(B, n), torch.zeros(B, n, dtype=torch.long))
    last_w = torch.cummax(idx, dim=1).values                 # position 0 is always a write
    memory = torch.gather(bits, 1, last_w)
    bits = torch.where(instr == _R, memory, bits)
    inputs = torch.stack([instr, _B0 + bits], dim=2).reshape(B, T)
    targets = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
    reads = instr == _R
    tg = torch.where(reads, _B0 + bits, torch.full_like(bits, IGNORE_INDEX))
    targets[:, 0::2] = tg
    return inputs, targets, list(FLIP_FLOP_VOCAB)


# ----------------------------------------------------------------------------------------------
# the A5 word problem (Merrill et al.)
# ----------------------------------------------------------------------------------------------

def _parity(p) -> int:
    return sum(1 for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] > p[j]) % 2


# The 60 even permutations of {0..4} in lexicographic order; a permutation is the tuple
# (p(0), ..., p(4)). Class k of the word problem is A5_ELEMENTS[k]; A5_ELEMENTS[0] is the identity.
A5_ELEMENTS: List[Tuple[int, ...]] = [p for p in itertools.permutations(range(5)) if _parity(p) == 0]
_INDEX = {p: i for i, p in enumerate(A5_ELEMENTS)}


def _permutation(p, name: str) -> Tuple[int, ...]:
    """A permutation of ``range(len(p))`` as a tuple of ints."""
    if isinstance(p, (str, bytes, dict)) or not hasattr(p, "__len__"):
        raise TypeError(f"{name} must be a permutation (a tuple of ints), got {type(p).__name__}")
    items = tuple(check_int(x, f"{name}[{i}]") for i, x in enumerate(p))
    if sorted(items) != list(range(len(items))):
        raise ValueError(f"{name} must be a permutation of 0..{len(items) - 1}, got {items}")
    return items


def compose(p, q) -> Tuple[int, ...]:
    """``(p q)(a) = p(q(a))``: apply q first, then p (two permutations of ``range(n)``, one n)."""
    p, q = _permutation(p, "p"), _permutation(q, "q")
    if len(p) != len(q):
        raise ValueError(f"p and q must permute one set 0..n-1, got {len(p)} and {len(q)} elements")
    return tuple(p[q[a]] for a in range(len(q)))


def _cycle(*elems) -> Tuple[int, ...]:
    """The cycle ``(e_0 e_1 ... )`` on {0..4} given 1-based elements (the paper's notation)."""
    perm = list(range(5))
    e = [x - 1 for x in elems]
    for a, b in zip(e, e[1:] + e[:1]):
        perm[a] = b
    return tuple(perm)


def _inverse(p) -> Tuple[int, ...]:
    inv = [0] * len(p)
    for a, b in enumerate(p):
        inv[b] = a
    return tuple(inv)


# Generators (1 2 3), (1 2 4), (1 2 5) and their inverses, as tokens 0..5.
A5_GENERATORS: List[Tuple[str, Tuple[int, ...]]] = []
for _c in ((1, 2, 3), (1, 2, 4), (1, 2, 5)):
    A5_GENERATORS.append(("(" + " ".join(map(str, _c)) + ")", _cycle(*_c)))
    A5_GENERATORS.append(("(" + " ".join(map(str, _c)) + ")^-1", _inverse(_cycle(*_c))))
# multiplication table: _MUL[state, gen] = index of gen o state (the new generator applied last)
_MUL = torch.tensor([[_INDEX[compose(gp, s)] for _, gp in A5_GENERATORS] for s in A5_ELEMENTS])


def a5_vocab() -> List[str]:
    """6 generator tokens (ids 0..5), then the 60 elements of A5 as target tokens (ids 6..65)."""
    return [name for name, _ in A5_GENERATORS] + ["=" + "".join(map(str, p)) for p in A5_ELEMENTS]


def a5_word_problem(batch_size: int, length: int = 64, *, seed: Optional[int] = None,
                    generator: Optional[torch.Generator] = None) -> Batch:
    """The A5 word problem: ``inputs`` are uniform generators ``g_1 ... g_T`` (ids 0..5 =
    (1 2 3), its inverse, (1 2 4), its inverse, (1 2 5), its inverse); ``targets[t]`` is the running
    product ``g_t o ... o g_1`` (apply g_1 first) as the token ``6 + k`` of the element
    ``A5_ELEMENTS[k]``; every position is scored. Returns ``(inputs, targets, a5_vocab())``.
    """
    B = _int(batch_size, "batch_size")
    T = _int(length, "length")
    g = _generator(seed, generator)
    inputs = torch.randint(0, len(A5_GENERATORS), (B, T), generator=g)
    state = torch.zeros(B, dtype=torch.long)                  # identity
    states = []
    for t in range(T):
        state = _MUL[state, inputs[:, t]]
        states.append(state)
    targets = torch.stack(states, dim=1) + len(A5_GENERATORS)
    return inputs, targets, a5_vocab()


# ----------------------------------------------------------------------------------------------
# MQRAR-N: multi-query repeated associative recall
# ----------------------------------------------------------------------------------------------

def mqrar_vocab(n_keys: int, n_values: int) -> List[str]:
    """Keys ``k0..`` (ids ``0..n_keys-1``), values ``v0..`` (next ``n_values`` ids), then ``?``."""
    check_int(n_keys, "n_keys", minimum=1, maximum=_MAX_VOCAB)
    check_int(n_values, "n_values", minimum=1, maximum=_MAX_VOCAB)
    return [f"k{i}" for i in range(n_keys)] + [f"v{i}" for i in range(n_values)] + ["?"]


def mqrar(batch_size: int, n_back: int = 1, *, length: int = 768, n_keys: int = 32, n_pairs: int = 256,
          n_values: Optional[int] = None, seed: Optional[int] = None,
          generator: Optional[torch.Generator] = None) -> Batch:
    """MQRAR-N, multi-query repeated associative recall: recall the ``n_back``-th most recent value of
    a queried key. Our precise definition (after the PaTH paper's description):

    * **Context**: ``n_pairs`` key-value pairs ``k v k v ...`` (``2 n_pairs`` tokens). Each of the
      ``n_keys`` keys occurs exactly ``r = n_pairs / n_keys`` times (``n_pairs`` must be a multiple of
      ``n_keys`` and ``r >= n_back``), in a uniformly random order; every occurrence gets a fresh
      uniform value among ``n_values`` (default ``n_keys``), so a key is re-bound again and again.
    * **Separator** ``?``, then **queries**: ``Q = length - 2 n_pairs - 1`` key tokens, uniform with
      replacement. At a query of key ``k`` the target is the value bound to ``k`` at its ``n_back``-th
      most recent occurrence in the context (``n_back = 1``: the latest binding). Queries do not
      rebind keys. Only query positions are scored.

    Full preset: ``n_keys=32, n_pairs=256`` (each key re-bound 8 times), ``length=768`` (255 queries).
    Returns ``(inputs [B, length], targets [B, length], mqrar_vocab(n_keys, n_values))``.
    """
    B = _int(batch_size, "batch_size")
    N = _int(n_back, "n_back")
    T = _int(length, "length", minimum=4)
    K = check_int(n_keys, "n_keys", minimum=1, maximum=_MAX_VOCAB)
    P = _int(n_pairs, "n_pairs")
    V = K if n_values is None else check_int(n_values, "n_values", minimum=1, maximum=_MAX_VOCAB)
    if P % K:
        raise ValueError(f"n_pairs ({P}) must be a multiple of n_keys ({K}): each key occurs n_pairs/n_keys times")
    r = P // K
    if r < N:
        raise ValueError(f"n_back ({N}) exceeds the occurrences per key n_pairs/n_keys = {r}")
    Q = T - 2 * P - 1
    if Q < 1:
        raise ValueError(f"length ({T}) must exceed 2 * n_pairs + 1 = {2 * P + 1} to leave room for queries")
    g = _generator(seed, generator)
    keys = torch.arange(K).repeat_interleave(r).expand(B, P)
    perm = torch.argsort(torch.rand(B, P, generator=g), dim=1)
    ctx_keys = torch.gather(keys, 1, perm)                     # [B, P]
    ctx_vals = torch.randint(0, V, (B, P), generator=g)
    # value of the N-th most recent occurrence of each key: scan the context once
    occ = torch.zeros(B, K, N, dtype=torch.long)             # occ[b, k, j]: (j+1)-th most recent value
    rows = torch.arange(B)
    for p in range(P):
        kk = ctx_keys[:, p]
        occ[rows, kk] = torch.cat([ctx_vals[:, p, None], occ[rows, kk, :-1]], dim=1)
    q_keys = torch.randint(0, K, (B, Q), generator=g)
    answers = torch.gather(occ[:, :, N - 1], 1, q_keys)       # [B, Q]
    sep = torch.full((B, 1), K + V, dtype=torch.long)
    context = torch.stack([ctx_keys, K + ctx_vals], dim=2).reshape(B, 2 * P)
    inputs = torch.cat([context, sep, q_keys], dim=1)
    targets = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
    targets[:, 2 * P + 1:] = K + answers
    return inputs, targets, mqrar_vocab(K, V)


def phonebook_vocab(n_keys: int, n_values: int) -> List[str]:
    """Names ``n0..`` (ids ``0..n_keys-1``), numbers ``#0..`` (next ``n_values`` ids), then ``?``."""
    return [f"n{i}" for i in range(n_keys)] + [f"#{i}" for i in range(n_values)] + ["?"]


def phonebook(batch_size: int, *, n_pairs: int = 32, n_queries: int = 32, n_keys: int = 256,
              n_values: int = 256, seed: Optional[int] = None,
              generator: Optional[torch.Generator] = None) -> Batch:
    """Phone-book retrieval: ``n_pairs`` entries ``name number`` with distinct names, a separator
    ``?``, then ``n_queries`` names drawn (with replacement) from the book; at each query the target is
    that name's number. Only query positions are scored. Length ``2 n_pairs + 1 + n_queries``; a longer
    book (more pairs) tests retrieval past the training length. Chance accuracy is ``1 / n_values``.

    Returns ``(inputs [B, T], targets [B, T], phonebook_vocab(n_keys, n_values))``.
    """
    B = _int(batch_size, "batch_size")
    P = _int(n_pairs, "n_pairs")
    Q = _int(n_queries, "n_queries")
    K = _int(n_keys, "n_keys")
    V = _int(n_values, "n_values")
    if P > K:
        raise ValueError(f"n_pairs ({P}) must not exceed n_keys ({K}): the names of a book are distinct")
    g = _generator(seed, generator)
    names = torch.argsort(torch.rand(B, K, generator=g), dim=1)[:, :P]          # [B, P], distinct
    numbers = torch.randint(0, V, (B, P), generator=g)
    asked = torch.randint(0, P, (B, Q), generator=g)                            # which entries are queried
    q_names = torch.gather(names, 1, asked)
    answers = torch.gather(numbers, 1, asked)
    sep = torch.full((B, 1), K + V, dtype=torch.long)
    book = torch.stack([names, K + numbers], dim=2).reshape(B, 2 * P)
    inputs = torch.cat([book, sep, q_names], dim=1)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, 2 * P + 1:] = K + answers
    return inputs, targets, phonebook_vocab(K, V)


# ----------------------------------------------------------------------------------------------
# registry
# ----------------------------------------------------------------------------------------------

TASKS: Dict[str, Callable[..., Batch]] = {"flip_flop": flip_flop, "a5": a5_word_problem, "mqrar": mqrar,
                                          "phonebook": phonebook}


def make_task(name: str, batch_size: int, *, seed=None, generator=None, **kwargs) -> Batch:
    """``make_task("flip_flop" | "a5" | "mqrar" | "phonebook", batch_size, seed=..., **task_kwargs)``."""
    check_choice(name, "task name", tuple(TASKS))
    return TASKS[name](batch_size, seed=seed, generator=generator, **kwargs)
