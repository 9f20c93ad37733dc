"""The hand-built Theorem 2.1 network decides the swap word problem exactly (float64, length <= 1000+)."""
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from path_lib.experiments.constructions import (SWAP_PAIRS, VOCAB, encode_swaps, is_identity,
                                                logit_scale, nonidentity_margin, rope_recipe_weight, solve_swaps,
                                                swap_word_problem_model, SwapWordProblemModel)

torch.set_num_threads(1)   # tiny ops: threads only add overhead (and the CI machine has 2 cores)

MODEL64 = swap_word_problem_model()
pair = st.tuples(st.integers(0, 4), st.integers(0, 4)).filter(lambda p: p[0] != p[1])


def direct(swaps):
    """Compose by 5x5 permutation matrices, independently of path_lib."""
    P = torch.eye(5, dtype=torch.long)
    for x, y in swaps:
        S = torch.eye(5, dtype=torch.long)
        S[[x, y]] = S[[y, x]]
        P = S @ P
    return bool((P == torch.eye(5, dtype=torch.long)).all())


def test_vocab_and_tokens():
    assert len(VOCAB) == 11 and len(SWAP_PAIRS) == 10
    assert encode_swaps([(1, 3)]).tolist() == encode_swaps([(3, 1)]).tolist()
    assert encode_swaps([]).tolist() == [0]


@pytest.mark.parametrize("swaps,expected", [
    ([], True), ([(0, 1)], False), ([(0, 1), (1, 0)], True), ([(0, 1), (0, 1)], True),
    ([(0, 1), (1, 2)], False), ([(0, 1), (1, 2), (0, 1), (1, 2), (0, 1), (1, 2)], True),
    ([(3, 4)] * 999, False), ([(3, 4)] * 1000, True),
])
def test_small_and_edge_cases(swaps, expected):
    assert is_identity(swaps) == direct(swaps) == expected
    assert solve_swaps(MODEL64, swaps) is expected


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(pair, min_size=0, max_size=1000))
def test_random_sequences(swaps):
    assert solve_swaps(MODEL64, swaps) == direct(swaps)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(pair, min_size=0, max_size=500), st.data())
def test_identity_composing_sequences(half, data):
    """w followed by its reverse is the identity; a near-identity variant (one extra swap) is not."""
    seq = half + half[::-1]
    assert direct(seq)
    assert solve_swaps(MODEL64, seq) is True
    extra = data.draw(pair)
    pos = data.draw(st.integers(0, len(seq)))
    near = seq[:pos] + [extra] + seq[pos:]                     # one transposition away: odd, never identity
    assert not direct(near)
    assert solve_swaps(MODEL64, near) is False


def test_adversarial_near_identity_long():
    """Length 1001-1002: products that differ from the identity by one 3-cycle or one transposition."""
    rng = random.Random(1)
    half = [tuple(rng.sample(range(5), 2)) for _ in range(500)]
    base = half + half[::-1]
    three_cycle = base + [(0, 1), (1, 2)]                      # even, not the identity
    assert solve_swaps(MODEL64, three_cycle) is False
    assert solve_swaps(MODEL64, base + [(0, 1), (0, 1)]) is True
    assert solve_swaps(MODEL64, base[:-1]) is False


def test_every_prefix_at_once():
    """The network answers for every prefix in one forward pass (batch of several sequences)."""
    rng = random.Random(2)
    seqs = [[tuple(rng.sample(range(5), 2)) for _ in range(300)] for _ in range(4)]
    seqs[0] = seqs[0][:150] + seqs[0][:150][::-1]
    out = MODEL64(torch.stack([encode_swaps(s) for s in seqs]))
    for b, s in enumerate(seqs):
        expected = [direct(s[:i]) for i in range(len(s) + 1)]
        assert out["identity"][b].tolist() == expected


def test_margins_and_scale():
    for n in (1, 10, 1000, 10 ** 6):
        assert logit_scale(n) > logit_scale(n - 1) if n > 1 else True
        assert 0 < nonidentity_margin(n) <= 1
    # weight on '#' for the identity is > 1/2, for any other permutation < 1/(e n (n+1)) + tiny
    out = MODEL64(encode_swaps([(0, 1)] * 100)[None])
    assert out["weight_path"][0, -1] > 0.5
    out = MODEL64(encode_swaps([(0, 1)] * 101)[None])
    assert out["weight_path"][0, -1] < 1.0 / (2.718 * 101 * 102)


def test_float32_length_1000():
    model = swap_word_problem_model(torch.float32)
    rng = random.Random(3)
    half = [tuple(rng.sample(range(5), 2)) for _ in range(500)]
    assert solve_swaps(model, half + half[::-1]) is True
    assert solve_swaps(model, half + half[::-1][:-1]) is False


def test_implementations_agree():
    rng = random.Random(4)
    s = [tuple(rng.sample(range(5), 2)) for _ in range(40)]
    s = s + s[::-1]
    for impl in ("explicit", "parallel", "blockwise"):
        assert solve_swaps(swap_word_problem_model(impl=impl), s) is True


def test_fixed_point_needs_log_n_bits():
    s = [(0, 1)] * 511                                          # n = 511: not the identity
    model = MODEL64
    tokens = encode_swaps(s)[None]
    assert bool(model(tokens, fixed_point_bits=12)["identity"][0, -1]) is False
    assert bool(model(tokens, fixed_point_bits=4)["identity"][0, -1]) is True   # too few bits: wrong


def test_rope_recipe_cannot_see_the_swaps():
    """Same recipe with RoPE's fixed rotation: equal weights on '#' for identity and non-identity."""
    seqs = [[(0, 1), (0, 1)], [(0, 1), (1, 2)], [(3, 4), (3, 4)], [(2, 4), (0, 3)]]
    assert [is_identity(s) for s in seqs] == [True, False, True, False]
    w = rope_recipe_weight(seqs, scale=5.0)
    assert torch.allclose(w, w[0].expand_as(w), atol=0, rtol=1e-12)
    path = MODEL64(torch.stack([encode_swaps(s) for s in seqs]))["weight_path"][:, -1]
    assert path[0] > 0.5 and path[2] > 0.5 and path[1] < 0.01 and path[3] < 0.01


@pytest.mark.parametrize("bad,exc,word", [
    ("01", TypeError, "swaps"), (None, TypeError, "swaps"), ([(0, 1, 2)], ValueError, "swaps[0]"),
    ([(0, 0)], ValueError, "swaps[0]"), ([(0, 5)], ValueError, "swaps[0]"), ([(-1, 2)], ValueError, "swaps[0]"),
    ([(0.0, 1)], TypeError, "swaps[0]"), ([(True, 1)], TypeError, "swaps[0]"), ([[0, 1], "ab"], TypeError, "swaps[1]"),
    ([(0, 1), 3], TypeError, "swaps[1]"),
])
def test_bad_input(bad, exc, word):
    with pytest.raises(exc, match=word.replace("[", r"\[").replace("]", r"\]")):
        solve_swaps(MODEL64, bad)


def test_bad_model_and_tokens():
    with pytest.raises(TypeError, match="model"):
        solve_swaps(object(), [])
    with pytest.raises(TypeError, match="dtype"):
        SwapWordProblemModel(dtype=torch.float16)
    with pytest.raises(ValueError, match="tokens"):
        MODEL64(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="fixed_point_bits"):
        MODEL64(torch.tensor([[0, 2]]), fixed_point_bits=0)


# ---------------------------------------------------------------------------------------------- flip-flop

from path_lib.experiments.constructions import flip_flop_model  # noqa: E402
from path_lib.training.tasks import flip_flop  # noqa: E402
from path_lib.training.loop import evaluate  # noqa: E402


@pytest.mark.parametrize("p_ignore", [0.8, 0.98, 0.1])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_flip_flop_construction_is_exact(p_ignore, dtype):
    model = flip_flop_model(dtype)
    batches = [flip_flop(8, T, p_ignore, seed=T) [:2] for T in (4, 64, 512)]
    for b in batches:
        assert evaluate(model, [b])["error"] == 0.0


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("wri"), st.sampled_from("01")), min_size=1, max_size=300))
def test_flip_flop_construction_tracks_last_write(pairs):
    """At every position the prediction is the most recently written bit (any instruction mix)."""
    pairs = [("w", "0")] + pairs                               # FFL starts with a write
    vocab = ["w", "r", "i", "0", "1"]
    tokens = torch.tensor([[vocab.index(t) for p in pairs for t in p]])
    pred = flip_flop_model()(tokens).argmax(-1)[0].tolist()
    memory, pos = None, 0
    for instr, bit in pairs:
        if memory is not None:
            assert vocab[pred[pos]] == memory                  # at the instruction: the current memory
        if instr == "w":
            memory = bit
        assert vocab[pred[pos + 1]] == memory                  # after the bit (a write updates it)
        pos += 2


def test_flip_flop_construction_bad_input():
    with pytest.raises(ValueError, match="tokens"):
        flip_flop_model()(torch.tensor([[0, 5]]))
    with pytest.raises(TypeError, match="dtype"):
        flip_flop_model(torch.float16)
