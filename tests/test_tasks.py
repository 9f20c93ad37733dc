"""Synthetic tasks: determinism, definitions checked against direct re-implementations, bad input."""
import pytest
import torch
from hypothesis import given, settings, strategies as st

from path_lib.training.tasks import (A5_ELEMENTS, A5_GENERATORS, FLIP_FLOP_VOCAB, IGNORE_INDEX, a5_vocab,
                                        a5_word_problem, compose, flip_flop, make_task, mqrar)

torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------- flip-flop

def test_flip_flop_definition():
    x, y, vocab = flip_flop(64, 128, 0.5, seed=1)
    assert vocab == FLIP_FLOP_VOCAB and x.shape == y.shape == (64, 128) and x.dtype == y.dtype == torch.long
    for b in range(64):
        toks = [vocab[i] for i in x[b]]
        assert toks[0] == "w" and toks[-2] == "r"
        memory = None
        for t in range(0, 128, 2):
            instr, bit = toks[t], toks[t + 1]
            assert instr in "wri" and bit in "01"
            if instr == "w":
                memory = bit
            if instr == "r":
                assert bit == memory and y[b, t] == x[b, t + 1]
            else:
                assert y[b, t] == IGNORE_INDEX
            assert y[b, t + 1] == IGNORE_INDEX


@pytest.mark.parametrize("p", [0.1, 0.8, 0.98])
def test_flip_flop_ignore_rate(p):
    x, _, _ = flip_flop(256, 512, p, seed=0)
    instr = x[:, 2:-2:2]                         # first and last are fixed
    frac_i = (instr == 2).float().mean().item()
    assert abs(frac_i - p) < 0.01
    assert abs((instr == 0).float().mean().item() - (instr == 1).float().mean().item()) < 0.01


def test_determinism_and_generator():
    a = flip_flop(4, 32, seed=7)
    b = flip_flop(4, 32, seed=7)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for fn in (lambda g: flip_flop(3, 16, generator=g), lambda g: a5_word_problem(3, 9, generator=g),
               lambda g: mqrar(3, 2, length=40, n_keys=4, n_pairs=16, generator=g)):
        u, v = fn(g1), fn(g2)
        assert torch.equal(u[0], v[0]) and torch.equal(u[1], v[1])
    assert not torch.equal(flip_flop(4, 32, seed=8)[0], a[0])


# ---------------------------------------------------------------------------------------------- A5

def test_a5_group():
    assert len(A5_ELEMENTS) == 60 and A5_ELEMENTS[0] == (0, 1, 2, 3, 4)
    gens = [p for _, p in A5_GENERATORS]
    assert len(gens) == 6 and all(p in A5_ELEMENTS for p in gens)
    assert compose(gens[0], gens[1]) == (0, 1, 2, 3, 4)       # (1 2 3)(1 2 3)^-1
    assert gens[0] == (1, 2, 0, 3, 4)                          # 1->2, 2->3, 3->1 (1-based)
    # the generators generate all of A5
    seen, frontier = {A5_ELEMENTS[0]}, [A5_ELEMENTS[0]]
    while frontier:
        nxt = []
        for s in frontier:
            for g in gens:
                c = compose(g, s)
                if c not in seen:
                    seen.add(c)
                    nxt.append(c)
        frontier = nxt
    assert len(seen) == 60


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(1, 40))
def test_a5_running_product(seed, T):
    x, y, vocab = a5_word_problem(3, T, seed=seed)
    assert len(vocab) == 66 and vocab == a5_vocab()
    gens = [p for _, p in A5_GENERATORS]
    for b in range(3):
        state = (0, 1, 2, 3, 4)
        for t in range(T):
            state = compose(gens[int(x[b, t])], state)
            assert A5_ELEMENTS[int(y[b, t]) - 6] == state


# ---------------------------------------------------------------------------------------------- MQRAR

@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(1, 4))
def test_mqrar_definition(seed, n_back):
    K, P, T = 4, 16, 45
    x, y, vocab = mqrar(2, n_back, length=T, n_keys=K, n_pairs=P, seed=seed)
    assert x.shape == (2, T) and len(vocab) == 2 * K + 1
    for b in range(2):
        toks = [vocab[i] for i in x[b]]
        ctx = toks[:2 * P]
        assert toks[2 * P] == "?"
        keys, vals = ctx[0::2], ctx[1::2]
        assert all(k.startswith("k") for k in keys) and all(v.startswith("v") for v in vals)
        assert sorted(keys) == sorted([f"k{i}" for i in range(K)] * (P // K))
        assert (y[b, :2 * P + 1] == IGNORE_INDEX).all()
        for t in range(2 * P + 1, T):
            hist = [v for k, v in zip(keys, vals) if k == toks[t]]
            assert vocab[int(y[b, t])] == hist[-n_back]


def test_full_sizes():
    x, y, vocab = mqrar(2, 4, seed=0)
    assert x.shape == (2, 768) and (y != IGNORE_INDEX).sum(1).tolist() == [255, 255]
    x, y, _ = flip_flop(2, seed=0)
    assert x.shape == (2, 512)


# ---------------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("call,exc,word", [
    (lambda: flip_flop(0, 8, seed=0), ValueError, "batch_size"),
    (lambda: flip_flop(2.0, 8, seed=0), TypeError, "batch_size"),
    (lambda: flip_flop(2, 7, seed=0), ValueError, "length"),
    (lambda: flip_flop(2, 8, 1.0, seed=0), ValueError, "p_ignore"),
    (lambda: flip_flop(2, 8, "x", seed=0), TypeError, "p_ignore"),
    (lambda: flip_flop(2, 8), ValueError, "seed"),
    (lambda: flip_flop(2, 8, seed=1, generator=torch.Generator()), ValueError, "seed"),
    (lambda: flip_flop(2, 8, generator=3), TypeError, "generator"),
    (lambda: flip_flop(2, 8, seed=-1), ValueError, "seed"),
    (lambda: a5_word_problem(2, 0, seed=0), ValueError, "length"),
    (lambda: mqrar(2, 5, length=100, n_keys=4, n_pairs=16, seed=0), ValueError, "n_back"),
    (lambda: mqrar(2, 1, length=100, n_keys=5, n_pairs=16, seed=0), ValueError, "n_pairs"),
    (lambda: mqrar(2, 1, length=33, n_keys=4, n_pairs=16, seed=0), ValueError, "length"),
    (lambda: mqrar(2, 0, seed=0), ValueError, "n_back"),
    (lambda: make_task("nope", 2, seed=0), ValueError, "task"),
])
def test_bad_parameters(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
