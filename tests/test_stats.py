"""path_lib.ledger.stats against cases small enough to count by hand, and the simulations that check
what the docstrings state: the interval's coverage at n = 3 and n = 5, and the sign-flip test's
false-positive rate at level 1/32 with five seeds."""
import math
import random

import pytest

from path_lib.ledger import stats as S

SYMMETRIC = ("normal", "laplace", "uniform", "mixed scales")


def test_sign_flip_counts_sign_patterns():
    # all three differences positive: only the observed pattern is as large -> 1 of 8
    assert S.sign_flip_p([1.0, 2.0, 3.0], "greater") == 1 / 8
    assert S.sign_flip_p([-1.0, -2.0, -3.0], "less") == 1 / 8
    # in the wrong direction every pattern is at least as extreme
    assert S.sign_flip_p([1.0, 2.0, 3.0], "less") == 1.0
    # d = (1, 2, -0.5), observed sum 2.5; the 8 signed sums are 3.5, 2.5, 1.5, 0.5, -0.5, -1.5, -2.5, -3.5
    assert S.sign_flip_p([1.0, 2.0, -0.5], "greater") == 2 / 8
    # no difference at all: every pattern ties
    assert S.sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    # ties that differ only by rounding count as ties
    assert S.sign_flip_p([0.1 + 0.2, -0.3]) == 3 / 4
    # the tolerance scales with the values: tiny differences of one sign are not ties
    assert S.sign_flip_p([5e-12, 6e-12, 4e-12]) == 1 / 8
    # five seeds all one way reach 1/32
    assert S.sign_flip_p([0.1, 0.3, 0.2, 0.5, 0.4]) == 1 / 32


def test_permutation_counts_relabellings():
    # three against three, fully separated: 1 of C(6, 3) = 20 labellings
    assert S.permutation_p([4.0, 5.0, 6.0], [1.0, 2.0, 3.0], "greater") == 1 / 20
    assert S.permutation_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], "less") == 1 / 20
    # a = {3, 5, 6} (sum 14): the triples of 1..6 summing to 14 or more are {4,5,6} and {3,5,6} -> 2 of 20
    assert S.permutation_p([3.0, 5.0, 6.0], [1.0, 2.0, 4.0], "greater") == 2 / 20
    assert S.permutation_p([1.0, 1.0], [1.0, 1.0]) == 1.0
    # unequal sizes: a = {3} against b = {1, 2}: 1 of C(3, 1) = 3
    assert S.permutation_p([3.0], [1.0, 2.0]) == 1 / 3


def test_tost_needs_both_sides_inside():
    assert S.tost_sign_flip_p([0.01, 0.015, 0.017], -0.02, 0.02) == 1 / 8
    # one value above the upper margin: shifted by -0.02 the diffs are (-0.01, 0.01, -0.02), observed
    # sum -0.02; the signed sums at or below it are -0.04, -0.02, -0.02 -> 3 of 8
    assert S.tost_sign_flip_p([0.01, 0.03, 0.0], -0.02, 0.02) == 3 / 8
    with pytest.raises(ValueError, match="low must be below high"):
        S.tost_sign_flip_p([0.0], 0.1, -0.1)


def test_smallest_attainable_p():
    assert S.smallest_p_paired(3) == 1 / 8
    assert S.smallest_p_unpaired(3, 3) == 1 / 20
    assert S.smallest_p_paired(5) == 1 / 32
    with pytest.raises(ValueError, match="n must be"):
        S.smallest_p_paired(0)
    assert S.smallest_p_paired(2 ** 63 - 1) == 0.0 and S.smallest_p_unpaired(2 ** 63 - 1, 2 ** 62) == 0.0
    with pytest.raises(ValueError, match="n_b must be <="):       # past int64, as every count of the library
        S.smallest_p_unpaired(3, 2 ** 70)
    with pytest.raises(TypeError, match="n must be an int"):
        S.smallest_p_paired(3.0)


def test_subset_means_and_the_interval_by_hand():
    # (1, 2, 4): singletons 1, 2, 4; pairs 1.5, 2.5, 3; all three 7/3
    assert S.subset_means([1.0, 2.0, 4.0]) == [1.0, 1.5, 2.0, 7 / 3, 2.5, 3.0, 4.0]
    # three values at any level above 3/4: j = 1, the interval [min, max], coverage 1 - 2/8
    assert S.interval_rank(3, 0.9) == 1 and S.sign_flip_coverage(3, 0.9) == 0.75
    assert S.sign_flip_interval([1.0, 2.0, 4.0], 0.9) == (1.0, 4.0)
    # at level 1/2: j = 2 (coverage 1 - 4/8), from the 2nd smallest to the 2nd largest subset mean
    assert S.interval_rank(3, 0.5) == 2 and S.sign_flip_interval([1.0, 2.0, 4.0], 0.5) == (1.5, 3.0)
    # five values at 15/16: j = 1, [min, max], coverage 1 - 2/32; at 0.8: j = 3, coverage 1 - 6/32
    assert S.sign_flip_coverage(5, 15 / 16) == 15 / 16 and S.sign_flip_coverage(5, 0.8) == 1 - 6 / 32


def test_the_interval_is_the_sign_flip_test_inverted():
    """The one-sided test of "centre = mu" rejects at level j / 2^n exactly when mu is below the
    interval's lower end (above its upper end for the other side)."""
    rng = random.Random(5)
    for n, level in ((5, 15 / 16), (5, 0.8), (6, 0.9), (3, 0.9)):
        d = [rng.gauss(0.3, 1.0) for _ in range(n)]
        lo, hi = S.sign_flip_interval(d, level)
        alpha = S.interval_rank(n, level) / 2 ** n
        eps = 1e-7
        assert S.sign_flip_p([x - (lo - eps) for x in d], "greater") <= alpha
        assert S.sign_flip_p([x - (lo + eps) for x in d], "greater") > alpha
        assert S.sign_flip_p([x - (hi + eps) for x in d], "less") <= alpha
        assert S.sign_flip_p([x - (hi - eps) for x in d], "less") > alpha


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("noise", SYMMETRIC)
def test_simulated_coverage_matches_the_stated_coverage(n, noise):
    """Under independent differences symmetric about the centre (equal or unequal spreads) the interval
    covers the centre with the stated probability: 75 % at n = 3, 93.75 % at n = 5."""
    draws = 3000
    stated = S.sign_flip_coverage(n, 15 / 16)
    assert stated == {3: 0.75, 5: 0.9375}[n]
    got = S.simulated_coverage(lambda x: S.sign_flip_interval(x, 15 / 16), n, draws=draws, seed=11, noise=noise)
    se = math.sqrt(stated * (1 - stated) / draws)
    assert abs(got - stated) < 4 * se, (got, stated)


def test_percentile_bootstrap_covers_far_less_than_it_says():
    """Why the ledger dropped it: a "90 %" percentile bootstrap interval of three values covers the
    mean about 61 % of the time under a normal law."""
    got = S.simulated_coverage(lambda x: S.bootstrap_interval(x, 0.9), 3, draws=3000, seed=11)
    assert 0.55 < got < 0.67


@pytest.mark.parametrize("noise", SYMMETRIC)
def test_sign_flip_false_positive_rate_at_one_in_32(noise):
    """Under a symmetric null the test at level 1/32 with five seeds rejects at most 1/32 of the time
    (exactly 1/32 for a continuous law: only "all five on one side" reaches it)."""
    draws = 4000
    for alternative in ("greater", "less"):
        rate = S.simulated_rejection_rate(5, 1 / 32, alternative=alternative, draws=draws, seed=3, noise=noise)
        assert rate <= 1 / 32 + 3 * math.sqrt((1 / 32) * (31 / 32) / draws), (alternative, rate)
    # with three seeds it can never reject at 1/32
    assert S.simulated_rejection_rate(3, 1 / 32, draws=500, seed=3, noise=noise) == 0.0


def test_the_test_is_not_exact_for_a_skewed_null():
    """The exactness holds for the symmetric null only: a skewed difference with mean zero (an
    exponential minus 1) is negative in all five seeds with probability (1 - 1/e)^5 = 0.10, so the
    "less" test at 1/32 rejects about 10 % of the time."""
    rate = S.simulated_rejection_rate(5, 1 / 32, alternative="less", draws=4000, seed=3, noise="skewed")
    assert abs(rate - (1 - math.exp(-1)) ** 5) < 0.015 and rate > 2 / 32


def test_bootstrap_interval_exact_enumeration():
    # resampling (0, 0, 1): the mean is k/3 with k ~ Binomial(3, 1/3): P = 8/27, 12/27, 6/27, 1/27.
    # 5% point: P(mean <= 0) = 0.296 >= 0.05 -> 0; 95% point: P(<= 1/3) = 0.741, P(<= 2/3) = 0.963 -> 2/3
    lo, hi = S.bootstrap_interval([0.0, 0.0, 1.0], level=0.9)
    assert lo == 0.0 and math.isclose(hi, 2 / 3)
    assert S.bootstrap_interval([2.5, 2.5, 2.5]) == (2.5, 2.5)
    # sampled resamples agree with the enumeration
    lo, hi = S.bootstrap_interval([0.0, 0.0, 1.0], level=0.9, exact_max=0, n_resamples=20_000, seed=3)
    assert lo == 0.0 and math.isclose(hi, 2 / 3)


def test_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="diffs"):
        S.sign_flip_p("123")
    with pytest.raises(ValueError, match="diffs"):
        S.sign_flip_p([1.0, float("nan")])
    with pytest.raises(ValueError, match="diffs"):
        S.sign_flip_p([])
    with pytest.raises(ValueError, match="alternative"):
        S.sign_flip_p([1.0], "two-sided")
    with pytest.raises(TypeError, match="b must hold numbers"):
        S.permutation_p([1.0], [None])
    with pytest.raises(ValueError, match="level"):
        S.sign_flip_interval([1.0, 2.0], level=1.5)
    with pytest.raises(ValueError, match="diffs has 21"):
        S.subset_means([0.0] * 21)
    with pytest.raises(ValueError, match="noise"):
        S.simulated_coverage(lambda x: (0.0, 0.0), 3, noise="cauchy")
    with pytest.raises(ValueError, match="draws"):
        S.simulated_rejection_rate(3, 0.1, draws=0)
    assert S.sign_flip_coverage(1024, 0.9) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="n must be <= 1024"):          # not float's OverflowError
        S.sign_flip_coverage(1025, 0.9)
