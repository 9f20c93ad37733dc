"""Exact small-sample statistics for comparisons over a few seeds, and the simulations that check them.

Runs of one seed share their batches, so two models are compared seed by seed: ``d_s = a_s - b_s``.
Every test and interval here is exact under one stated null and nothing else:

* :func:`sign_flip_p`: the paired sign-flip (permutation) test. It is exact under the null that the
  seeds' differences are independent and each is **symmetric about zero** (``d_s`` as likely as
  ``-d_s``); then each of the ``2^n`` sign patterns is equally likely and the p-value is the share of
  patterns whose sum lies at least as far in the tested direction as the observed one. Its smallest
  value is ``1 / 2^n``: 1/8 for three seeds, 1/32 for five. Under other nulls (a skewed difference
  with mean zero, say) it is not exact: :func:`simulated_rejection_rate` measures by how much.
* :func:`sign_flip_interval`: the same test inverted. The ``2^n - 1`` means of the non-empty subsets
  of the differences cut the line into ``2^n`` pieces; when the differences are independent,
  continuous and symmetric about a common centre, the centre falls in each piece with probability
  ``1 / 2^n`` (Hartigan, 1969). From the ``j``-th smallest to the ``j``-th largest subset mean is
  therefore an interval for the centre whose coverage is exactly ``1 - 2 j / 2^n``
  (:func:`sign_flip_coverage`); ``j = 1`` gives ``[min, max]``: 75 % with three seeds, 93.75 % with
  five. The one-sided test of "centre = mu" rejects at level ``j / 2^n`` exactly when ``mu`` lies
  outside it. :func:`simulated_coverage` checks the coverage by simulation.
* :func:`permutation_p`: the unpaired two-sample test, exact under the null that all ``n_a + n_b``
  values are exchangeable (independent draws of one distribution). Smallest value
  ``1 / C(n_a + n_b, n_a)``.
* :func:`bootstrap_interval`: the percentile bootstrap interval of a mean, every resample enumerated.
  The ledger does not use it: with a few values its real coverage is far below its nominal level
  (about 61 % for a "90 %" interval of three values, :func:`simulated_coverage`).

Every function takes plain sequences of floats (one value per seed) and returns floats.
"""
from __future__ import annotations

import itertools
import math
import random
from typing import Callable, Iterator, List, Sequence, Tuple

from ..validation import check_int, check_number, check_seed

__all__ = ["ALTERNATIVES", "NOISES", "sign_flip_p", "sign_flip_interval", "sign_flip_coverage", "interval_rank",
           "subset_means", "permutation_p", "tost_sign_flip_p", "smallest_p_paired", "smallest_p_unpaired",
           "bootstrap_interval", "simulated_coverage", "simulated_rejection_rate"]

#: ``"greater"``: the mean (difference) is above zero; ``"less"``: below zero
ALTERNATIVES = ("greater", "less")
#: the noise laws of the simulations: four symmetric about zero (``"normal"``, ``"laplace"``, ``"uniform"``,
#: and ``"mixed scales"``, normal with a different spread for every seed) and one skewed with mean zero
#: (``"skewed"``: an exponential variable minus its mean 1)
NOISES = ("normal", "laplace", "uniform", "mixed scales", "skewed")
_TOL = 1e-12     # ties within rounding (relative to the size of the values) count as "at least as extreme"
_MAX_N = 20      # the exact methods enumerate 2^n sign patterns or subsets


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


def _check_n(n, name: str = "n") -> int:
    """A count of seeds or draws: an int from 1 to 2^63 - 1 (check_int's default bound)."""
    return check_int(n, name, minimum=1)


def _check_level(level: float) -> None:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def sign_flip_p(diffs: Sequence[float], alternative: str = "greater") -> float:
    """Exact one-sided p-value of the paired sign-flip test: the share of the ``2^n`` sign patterns
    ``s`` with ``sum(s * diffs)`` at least as far in the direction ``alternative`` (``"greater"``: above
    zero, ``"less"``: below) as ``sum(diffs)``. ``diffs``: [n], one paired difference per seed, n <= 20.
    Exact under the null that the differences are independent and each symmetric about zero."""
    d = _floats(diffs, "diffs")
    sgn = _check_alternative(alternative)
    if len(d) > _MAX_N:
        raise ValueError(f"diffs has {len(d)} values; the exact test enumerates 2^n patterns (n <= {_MAX_N})")
    obs = sgn * sum(d)
    tol = _TOL * sum(abs(x) for x in d)
    hits = sum(1 for signs in itertools.product((1.0, -1.0), repeat=len(d))
               if sgn * sum(s * x for s, x in zip(signs, d)) >= obs - tol)
    return hits / 2 ** len(d)


def subset_means(diffs: Sequence[float]) -> List[float]:
    """The means of the ``2^n - 1`` non-empty subsets of ``diffs`` [n] (n <= 20), sorted."""
    d = _floats(diffs, "diffs")
    if len(d) > _MAX_N:
        raise ValueError(f"diffs has {len(d)} values; at most {_MAX_N} (2^n subsets)")
    sums = [(0.0, 0)]
    for x in d:
        sums += [(s + x, k + 1) for s, k in sums]
    return sorted(s / k for s, k in sums[1:])


def interval_rank(n: int, level: float) -> int:
    """The rank ``j`` of the subset means that bound :func:`sign_flip_interval`: the largest ``j`` with
    coverage ``1 - 2 j / 2^n`` at least ``level``, and at least 1 (below that ``n`` values cannot reach
    ``level``; the interval is then ``[min, max]`` with coverage ``1 - 2 / 2^n``). ``n``: an int from 1 to
    1024 (``2^(n - 1)`` is computed as a float)."""
    check_int(n, "n", minimum=1, maximum=1024)
    _check_level(level)
    return max(1, math.floor(2 ** (n - 1) * (1 - level) + 1e-9))


def sign_flip_coverage(n: int, level: float) -> float:
    """The exact coverage of :func:`sign_flip_interval` for ``n`` values at ``level``: ``1 - 2 j / 2^n``
    with ``j = interval_rank(n, level)``, for independent, continuous differences symmetric about a
    common centre. It is at least ``level`` whenever ``n`` values can reach it. ``n``: 1 to 1024."""
    return 1 - 2 * interval_rank(n, level) / 2 ** n


def sign_flip_interval(diffs: Sequence[float], level: float = 0.9) -> Tuple[float, float]:
    """Interval for the centre of symmetry of ``diffs`` [n]: from the ``j``-th smallest to the ``j``-th
    largest of the subset means (:func:`subset_means`, ``j = interval_rank(n, level)``). Its exact
    coverage is :func:`sign_flip_coverage` (n, level) when the differences are independent, continuous
    and symmetric about one centre; for a symmetric law the centre is the mean."""
    means = subset_means(diffs)
    j = interval_rank(len(_floats(diffs, "diffs")), level)
    return means[j - 1], means[-j]


def permutation_p(a: Sequence[float], b: Sequence[float], alternative: str = "greater") -> float:
    """Exact one-sided p-value of the two-sample permutation test of ``mean(a) - mean(b)`` (``"greater"``:
    a above b). ``a``: [n_a], ``b``: [n_b]. Exact under the null that the pooled values are exchangeable."""
    xa, xb = _floats(a, "a"), _floats(b, "b")
    sgn = _check_alternative(alternative)
    pooled, na = xa + xb, len(xa)
    if math.comb(len(pooled), na) > 10 ** 6:
        raise ValueError("a and b are too large for the exact test (more than 10^6 relabellings)")
    total = sum(pooled)
    tol = _TOL * sum(abs(x) for x in pooled)

    def stat(sum_a: float) -> float:
        return sgn * (sum_a / na - (total - sum_a) / len(xb))

    obs = stat(sum(xa))
    splits = list(itertools.combinations(range(len(pooled)), na))
    hits = sum(1 for idx in splits if stat(sum(pooled[i] for i in idx)) >= obs - tol)
    return hits / len(splits)


def tost_sign_flip_p(diffs: Sequence[float], low: float, high: float) -> float:
    """Equivalence (two one-sided tests): p-value of "the centre of ``diffs`` lies in (low, high)", the
    larger of the sign-flip p-values of ``diffs - low > 0`` and ``diffs - high < 0``."""
    d = _floats(diffs, "diffs")
    low, high = check_number(low, "low"), check_number(high, "high")
    if not low < high:
        raise ValueError(f"low must be below high, got low={low}, high={high}")
    return max(sign_flip_p([x - low for x in d], "greater"), sign_flip_p([x - high for x in d], "less"))


def smallest_p_paired(n: int) -> float:
    """The smallest p-value the exact sign-flip test can give with ``n`` paired seeds: ``1 / 2^n``.
    ``n``: an int from 1 to 2^63 - 1 (a TypeError or ValueError naming it otherwise)."""
    return 2.0 ** -_check_n(n)         # a float power: 0.0 past 1074 seeds, at once for any n


def smallest_p_unpaired(n_a: int, n_b: int) -> float:
    """The smallest p-value of the exact two-sample permutation test: ``1 / C(n_a + n_b, n_a)``.
    ``n_a``, ``n_b``: ints from 1 to 2^63 - 1 (a TypeError or ValueError naming the argument otherwise)."""
    n_a, n_b = _check_n(n_a, "n_a"), _check_n(n_b, "n_b")
    if n_a + n_b > 2000:               # by logarithms (float accuracy), so that a huge n costs nothing
        k, n = min(n_a, n_b), n_a + n_b
        if k > 1100:                   # C(n, k) >= 2^k for n >= 2k: below float's smallest number
            return 0.0
        return math.exp(-sum(math.log(n - k + i) - math.log(i) for i in range(1, k + 1)))
    return 1.0 / math.comb(n_a + n_b, n_a)


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
        if not got_lo and cum >= lo_q - 1e-12:
            lo, got_lo = v, True
        if cum >= hi_q - 1e-12:
            hi = v
            break
    return lo, hi


def _check_resampling(exact_max: int, n_resamples: int, seed: int) -> None:
    check_int(exact_max, "exact_max", minimum=0)
    check_int(n_resamples, "n_resamples", minimum=1, maximum=10 ** 8)
    check_seed(seed)


def bootstrap_interval(values: Sequence[float], level: float = 0.9, exact_max: int = 100_000,
                       n_resamples: int = 20_000, seed: int = 0) -> Tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` [n] at nominal ``level`` (two-sided).
    Exact enumeration of the resamples when there are at most ``exact_max`` distinct ones (n <= 10),
    else ``n_resamples`` draws of ``random.Random(seed)``. Its real coverage with few values is well
    below ``level`` (:func:`simulated_coverage`); the ledger uses :func:`sign_flip_interval`."""
    x = _floats(values, "values")
    _check_level(level)
    _check_resampling(exact_max, n_resamples, seed)
    return _quantiles(list(_resample_means(x, exact_max, n_resamples, seed)), level)


# ----------------------------------------------------------------------------------------------
# simulations: what the exact statements above say, checked by drawing samples
# ----------------------------------------------------------------------------------------------

def _draw(rng: random.Random, noise: str, i: int) -> float:
    """One value of the law ``noise`` (centre 0; ``i`` is the seed's index, for ``"mixed scales"``)."""
    if noise == "normal":
        return rng.gauss(0.0, 1.0)
    if noise == "laplace":
        return rng.expovariate(1.0) * rng.choice((-1.0, 1.0))
    if noise == "uniform":
        return rng.uniform(-1.0, 1.0)
    if noise == "mixed scales":
        return rng.gauss(0.0, 0.2 * 3.0 ** i)
    if noise == "skewed":
        return rng.expovariate(1.0) - 1.0
    raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")


def _samples(n: int, draws: int, seed: int, noise: str) -> Iterator[List[float]]:
    _check_n(n)
    _check_n(draws, "draws")
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    rng = random.Random(seed)
    for _ in range(draws):
        yield [_draw(rng, noise, i) for i in range(n)]


def simulated_coverage(interval: Callable[[List[float]], Tuple[float, float]], n: int, *, draws: int = 2000,
                       seed: int = 0, noise: str = "normal") -> float:
    """The share of ``draws`` samples of ``n`` independent values of the law ``noise`` (see :data:`NOISES`;
    every law has mean 0, the symmetric ones centre 0) whose ``interval(values)`` contains 0."""
    hits = 0
    for x in _samples(n, draws, seed, noise):
        lo, hi = interval(x)
        hits += lo <= 0.0 <= hi
    return hits / draws


def simulated_rejection_rate(n: int, level: float, *, alternative: str = "greater", draws: int = 2000,
                             seed: int = 0, noise: str = "normal") -> float:
    """The share of ``draws`` samples of ``n`` values of the law ``noise`` (mean 0: the null holds) for
    which :func:`sign_flip_p` is at most ``level``: the test's false-positive rate under that law."""
    _check_level(level)
    _check_alternative(alternative)
    return sum(sign_flip_p(x, alternative) <= level + 1e-12
               for x in _samples(n, draws, seed, noise)) / draws
