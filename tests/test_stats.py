"""path_lib.ledger.stats against cases small enough to count by hand."""
import math

import pytest

from path_lib.ledger import stats as S


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


def test_bootstrap_interval_exact_enumeration():
    # resampling (0, 0, 1): the mean is k/3 with k ~ Binomial(3, 1/3): P = 8/27, 12/27, 6/27, 1/27.
    # 5% point: P(mean <= 0) = 0.296 >= 0.05 -> 0; 95% point: P(<= 1/3) = 0.741, P(<= 2/3) = 0.963 -> 2/3
    lo, hi = S.bootstrap_interval([0.0, 0.0, 1.0], level=0.9)
    assert lo == 0.0 and math.isclose(hi, 2 / 3)
    # at 99%: the 99.5% point needs P(<= 1) = 1 -> 1
    assert S.bootstrap_interval([0.0, 0.0, 1.0], level=0.99)[1] == 1.0
    assert S.bootstrap_interval([2.5, 2.5, 2.5]) == (2.5, 2.5)
    # two values: the mean is 0, 0.5, 1 with P = 1/4, 1/2, 1/4; an 80% interval is (0, 1), a 40% one (0.5, 0.5)
    assert S.bootstrap_interval([0.0, 1.0], level=0.8) == (0.0, 1.0)
    assert S.bootstrap_interval([0.0, 1.0], level=0.4) == (0.5, 0.5)


def test_bootstrap_interval_sampled_agrees_with_the_exact_one():
    lo, hi = S.bootstrap_interval([0.0, 0.0, 1.0], level=0.9, exact_max=0, n_resamples=20_000, seed=3)
    assert lo == 0.0 and math.isclose(hi, 2 / 3)


def test_bootstrap_interval_of_a_difference():
    assert S.bootstrap_interval_two([1.0, 1.0, 1.0], [0.0, 0.0, 0.0]) == (1.0, 1.0)
    lo, hi = S.bootstrap_interval_two([0.0, 0.0, 1.0], [0.0, 0.0, 0.0], level=0.9)
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
        S.bootstrap_interval([1.0, 2.0], level=1.5)
