"""Exact small-sample statistics for comparisons over a few seeds.

With three seeds per model a t-test's assumptions cannot be checked, so the claims ledger uses tests
whose p-values are exact whatever the distribution:

* :func:`sign_flip_p`: the paired test. Under "no difference" each seed's difference ``d_s`` is as
  likely to be ``+d_s`` as ``-d_s``; the p-value is the share of the ``2^n`` sign patterns whose mean
  is at least as far in the tested direction as the observed one. Smallest value ``1 / 2^n``
  (1/8 for three seeds).
* :func:`permutation_p`: the unpaired two-sample test. Under "no difference" the ``n_a + n_b`` values
  are exchangeable; the p-value is the share of the ``C(n_a + n_b, n_a)`` relabellings whose
  difference of means is at least the observed one. Smallest value ``1 / C(n_a + n_b, n_a)``
  (1/20 for three against three).
* :func:`bootstrap_interval`, :func:`bootstrap_interval_two`: percentile bootstrap intervals of a mean
  and of a difference of means. For small samples every resample is enumerated with its multinomial
  weight (exact, no randomness); above ``exact_max`` distinct resamples a fixed generator draws them.

Every function takes plain sequences of floats (one value per seed) and returns floats.
"""
from __future__ import annotations

import itertools
import math
import random
from typing import Iterator, List, Sequence, Tuple

from ..validation import check_int, check_number, check_seed

__all__ = ["ALTERNATIVES", "sign_flip_p", "permutation_p", "tost_sign_flip_p", "smallest_p_paired",
           "smallest_p_unpaired", "bootstrap_interval", "bootstrap_interval_two"]

#: ``"greater"``: the mean (difference) is above zero; ``"less"``: below zero
ALTERNATIVES = ("greater", "less")
_TOL = 1e-12  # ties within rounding count as "at least as extreme"


def _floats(x, name: str, min_len: int = 1) -> List[float]:
    if isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(x).__name__}")
    out = []
    for v in x:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{name} must hold numbers, got {type(v).__name__}")
        if not math.isfinite(v):
            raise ValueError(f"{name} must hold finite numbers, got {v}")
        out.append(float(v))
    if len(out) < min_len:
        raise ValueError(f"{name} needs at least {min_len} value(s), got {len(out)}")
    return out


def _check_alternative(alternative: str) -> float:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    return 1.0 if alternative == "greater" else -1.0


def sign_flip_p(diffs: Sequence[float], alternative: str = "greater") -> float:
    """Exact one-sided p-value of the paired sign-flip test of ``mean(diffs) = 0`` against
    ``mean(diffs) > 0`` (``"greater"``) or ``< 0`` (``"less"``). ``diffs``: [n], one per seed."""
    d = _floats(diffs, "diffs")
    sgn = _check_alternative(alternative)
    if len(d) > 20:
        raise ValueError(f"diffs has {len(d)} values; the exact test enumerates 2^n patterns (n <= 20)")
    obs = sgn * sum(d)
    hits = sum(1 for signs in itertools.product((1.0, -1.0), repeat=len(d))
               if sgn * sum(s * x for s, x in zip(signs, d)) >= obs - _TOL)
    return hits / 2 ** len(d)


def permutation_p(a: Sequence[float], b: Sequence[float], alternative: str = "greater") -> float:
    """Exact one-sided p-value of the two-sample permutation test of ``mean(a) - mean(b)`` (``"greater"``:
    a above b). ``a``: [n_a], ``b``: [n_b], independent samples."""
    xa, xb = _floats(a, "a"), _floats(b, "b")
    sgn = _check_alternative(alternative)
    pooled, na = xa + xb, len(xa)
    if math.comb(len(pooled), na) > 10 ** 6:
        raise ValueError("a and b are too large for the exact test (more than 10^6 relabellings)")
    total = sum(pooled)

    def stat(sum_a: float) -> float:
        return sgn * (sum_a / na - (total - sum_a) / len(xb))

    obs = stat(sum(xa))
    splits = list(itertools.combinations(range(len(pooled)), na))
    hits = sum(1 for idx in splits if stat(sum(pooled[i] for i in idx)) >= obs - _TOL)
    return hits / len(splits)


def tost_sign_flip_p(diffs: Sequence[float], low: float, high: float) -> float:
    """Equivalence (two one-sided tests): p-value of "the mean of ``diffs`` lies in (low, high)",
    the larger of the sign-flip p-values of ``diffs - low > 0`` and ``diffs - high < 0``."""
    d = _floats(diffs, "diffs")
    low, high = check_number(low, "low"), check_number(high, "high")
    if not low < high:
        raise ValueError(f"low must be below high, got low={low}, high={high}")
    return max(sign_flip_p([x - low for x in d], "greater"), sign_flip_p([x - high for x in d], "less"))


def smallest_p_paired(n: int) -> float:
    """The smallest p-value the exact sign-flip test can give with ``n`` paired seeds: ``1 / 2^n``."""
    check_int(n, "n", minimum=1)
    return math.ldexp(1.0, -n)


def smallest_p_unpaired(n_a: int, n_b: int) -> float:
    """The smallest p-value of the exact two-sample permutation test: ``1 / C(n_a + n_b, n_a)``."""
    check_int(n_a, "n_a", minimum=1, maximum=10_000)
    check_int(n_b, "n_b", minimum=1, maximum=10_000)
    try:
        return 1.0 / math.comb(n_a + n_b, n_a)
    except OverflowError:                   # beyond float range: the smallest p rounds to 0
        return 0.0


def _resample_means(x: List[float], exact_max: int, n_resamples: int, seed: int) -> Iterator[Tuple[float, float]]:
    """(mean of a bootstrap resample of x, its probability): every multiset with its multinomial weight
    when there are at most ``exact_max`` of them, else ``n_resamples`` draws of a seeded generator."""
    n = len(x)
    if math.comb(2 * n - 1, n) <= exact_max:
        for combo in itertools.combinations_with_replacement(range(n), n):
            counts = [combo.count(i) for i in range(n)]
            w = math.factorial(n)
            for c in counts:
                w //= math.factorial(c)
            yield sum(c * v for c, v in zip(counts, x)) / n, w / n ** n
    else:
        rng = random.Random(seed)
        for _ in range(n_resamples):
            yield sum(rng.choice(x) for _ in range(n)) / n, 1.0 / n_resamples


def _quantiles(dist: List[Tuple[float, float]], level: float) -> Tuple[float, float]:
    """Lower and upper percentile points of a discrete distribution [(value, prob)]: the smallest values
    whose cumulative probability reaches (1 - level) / 2 and (1 + level) / 2."""
    dist = sorted(dist)
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
    lo = hi = dist[-1][0]
    cum, got_lo = 0.0, False
    for v, p in dist:
        cum += p
        if not got_lo and cum >= lo_q - _TOL:
            lo, got_lo = v, True
        if cum >= hi_q - _TOL:
            hi = v
            break
    return lo, hi


def _check_level(level: float) -> None:
    check_number(level, "level", minimum=0.0, maximum=1.0, open_min=True, open_max=True)


def _check_resampling(exact_max: int, n_resamples: int, seed: int) -> None:
    check_int(exact_max, "exact_max", minimum=0)
    check_int(n_resamples, "n_resamples", minimum=1, maximum=10 ** 8)
    check_seed(seed)


def bootstrap_interval(values: Sequence[float], level: float = 0.9, exact_max: int = 100_000,
                       n_resamples: int = 20_000, seed: int = 0) -> Tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` [n] at ``level`` (two-sided).
    Exact enumeration of the resamples when there are at most ``exact_max`` distinct ones (n <= 10),
    else ``n_resamples`` draws of ``random.Random(seed)``."""
    x = _floats(values, "values")
    _check_level(level)
    _check_resampling(exact_max, n_resamples, seed)
    return _quantiles(list(_resample_means(x, exact_max, n_resamples, seed)), level)


def bootstrap_interval_two(a: Sequence[float], b: Sequence[float], level: float = 0.9, exact_max: int = 100_000,
                           n_resamples: int = 20_000, seed: int = 0) -> Tuple[float, float]:
    """Percentile bootstrap interval of ``mean(a) - mean(b)`` for independent samples a [n_a], b [n_b],
    each resampled within itself (exact when both enumerations together stay within ``exact_max``)."""
    xa, xb = _floats(a, "a"), _floats(b, "b")
    _check_level(level)
    _check_resampling(exact_max, n_resamples, seed)
    da = list(_resample_means(xa, exact_max, n_resamples, seed))
    db = list(_resample_means(xb, exact_max, n_resamples, seed + 1))
    if len(da) * len(db) > exact_max:
        rng = random.Random(seed)
        va, wa = zip(*da)
        vb, wb = zip(*db)
        draws = [(rng.choices(va, wa)[0] - rng.choices(vb, wb)[0]) for _ in range(n_resamples)]
        return _quantiles([(d, 1.0 / n_resamples) for d in draws], level)
    return _quantiles([(ma - mb, pa * pb) for ma, pa in da for mb, pb in db], level)
