"""Simulations behind "why accumulated transforms extrapolate, and where they stop" (paper B).

Stylized single-head model. A route is the ordered interval from a source (key) ``j`` to a query ``i``;
its transport is the product of the per-token steps strictly after the source,

    P_{j->i} = M_i M_{i-1} ... M_{j+1}            (route length n = i - j; P = I for n = 0),

and the score of the route is ``q^T P k``. The steps are i.i.d. random matrices of one of these kinds
(all ``[n, d, d]`` float64 from :func:`sample_steps`):

* ``"haar"``: Haar-random rotations in SO(d);
* ``"so2"``: block-diagonal 2 x 2 rotations whose angles come from the token: a vocabulary of ``vocab``
  tokens, each with fixed per-block angles drawn once from ``N(0, sigma^2)``; tokens uniform;
* ``"rope"``: RoPE's fixed block rotation (angles ``base^{-2m/d}``), the same at every token;
* ``"householder"``: PaTH's ``I - beta w w^T`` with ``w`` uniform on the sphere and ``beta`` uniform on
  ``[beta_lo, beta_hi]`` (``beta_lo = beta_hi = 2``: random reflections, orthogonal).

Closed forms that the simulations are checked against (``closed_form_mean_step``): E[Haar] = 0;
E[householder] = I - E[beta] E[w w^T] = (1 - E[beta]/d) I; E[so2] per block = mean over tokens of the
rotation, whose norm is ``|mean_v e^{i theta_v}|``; E[rope] = the rotation itself (norm 1: no gap). For
i.i.d. steps E[P_n] = E[M]^n (independence), so the mean transport decays like ``||E[M]||^n``.

Everything is vectorised over samples and seeded (``seed`` arguments; numpy ``default_rng``).
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence, Union

import numpy as np

from ..validation import (check_bool, check_callable, check_choice, check_instance, check_int, check_ints,
                          check_number, check_seed)

__all__ = [
    "STEP_KINDS", "haar_so", "random_unit", "so2_angle_table", "rope_angles", "block_rotation",
    "sample_steps", "closed_form_mean_step", "mean_step_opnorm", "route_products", "mean_transport_decay",
    "haar_coordinate_cdf", "ks_distance", "route_score_samples", "levy_tail_bound", "hoeffding_tail_bound",
    "score_profile", "far_mass_bound", "far_mass_rotation", "far_mass_bias", "bias_far_mass_upper_bound",
    "value_far_energy", "value_far_energy_closed_form",
]

STEP_KINDS = ("haar", "so2", "rope", "householder")

#: the sizes the simulations take: dimensions up to 4096, sample counts up to 2**31 (the arrays are
#: ``[n, d, d]`` float64: the limits refuse what no machine holds, not what is merely slow)
_MAX_D, _MAX_N = 4096, 2 ** 31


def _dim(d, name: str = "d", *, even: bool = False) -> int:
    d = check_int(d, name, minimum=2 if even else 1, maximum=_MAX_D)
    if even and d % 2:
        raise ValueError(f"{name} must be even (SO(2) blocks pair the coordinates), got {d}")
    return d


def _count(n, name: str, minimum: int = 0) -> int:
    return check_int(n, name, minimum=minimum, maximum=_MAX_N)


def _rng(rng) -> np.random.Generator:
    return check_instance(rng, "rng", np.random.Generator, "a numpy.random.Generator (np.random.default_rng)")


def _array(x, name: str, *, ndim: Optional[int] = None, size: Optional[int] = None, minimum=None) -> np.ndarray:
    """A finite float64 array (``ndim`` dims, ``size`` entries, every entry >= ``minimum`` when given)."""
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be an array of numbers, got {type(x).__name__}")
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be an array of numbers ({e})") from None
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {a.shape}")
    if size is not None and a.size != size:
        raise ValueError(f"{name} must have {size} entries, got {a.size}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    if minimum is not None and a.size and not (a >= minimum).all():
        raise ValueError(f"{name} must be >= {minimum}, got a minimum of {a.min()}")
    return a


# ----------------------------------------------------------------------------------------------
# step distributions
# ----------------------------------------------------------------------------------------------

def haar_so(d: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` Haar-random rotations of SO(d): ``[n, d, d]`` (QR of a Gaussian with sign fix, det forced to +1)."""
    d, n, rng = _dim(d), _count(n, "n"), _rng(rng)
    A = rng.standard_normal((n, d, d))
    Q, R = np.linalg.qr(A)
    Q = Q * np.sign(np.diagonal(R, axis1=-2, axis2=-1))[:, None, :]
    det = np.linalg.det(Q)
    Q[det < 0, :, 0] *= -1  # a reflection of one column: Haar on O(d) -> Haar on SO(d)
    return Q


def random_unit(d: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` vectors uniform on the unit sphere S^{d-1}: ``[n, d]``."""
    d, n, rng = _dim(d), _count(n, "n"), _rng(rng)
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def so2_angle_table(vocab: int, d: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Per-token per-block angles ``[vocab, d/2]`` drawn once from ``N(0, sigma^2)`` (fixed "at init")."""
    vocab, d, rng = _count(vocab, "vocab", 1), _dim(d, even=True), _rng(rng)
    sigma = check_number(sigma, "sigma", minimum=0.0)
    return sigma * rng.standard_normal((vocab, d // 2))


def rope_angles(d: int, base: float = 10000.0) -> np.ndarray:
    """RoPE's per-block angles ``base^{-2m/d}``: ``[d/2]``."""
    d = _dim(d, even=True)
    base = check_number(base, "base", positive=True)
    return base ** (-np.arange(0, d, 2) / d)


def block_rotation(angles: np.ndarray) -> np.ndarray:
    """Block-diagonal rotation matrices from angles ``[..., d/2]`` -> ``[..., d, d]``."""
    angles = _array(angles, "angles")
    if angles.ndim == 0 or angles.shape[-1] == 0:
        raise ValueError(f"angles must be [..., d/2] with d/2 >= 1, got shape {angles.shape}")
    m = angles.shape[-1]
    c, s = np.cos(angles), np.sin(angles)
    R = np.zeros(angles.shape[:-1] + (2 * m, 2 * m))
    i = np.arange(m)
    R[..., 2 * i, 2 * i] = c
    R[..., 2 * i, 2 * i + 1] = -s
    R[..., 2 * i + 1, 2 * i] = s
    R[..., 2 * i + 1, 2 * i + 1] = c
    return R


def _step_params(kind: str, d: int, *, beta_lo: float = 0.0, beta_hi: float = 2.0, sigma: float = 1.0,
                 vocab: int = 64, table_seed: int = 0, base: float = 10000.0) -> dict:
    check_choice(kind, "kind", STEP_KINDS)
    _dim(d, even=kind in ("so2", "rope"))
    beta_lo = check_number(beta_lo, "beta_lo", minimum=0.0, maximum=2.0)
    beta_hi = check_number(beta_hi, "beta_hi", minimum=0.0, maximum=2.0)
    if kind == "householder" and not beta_lo <= beta_hi:
        raise ValueError(f"need 0 <= beta_lo <= beta_hi <= 2, got beta_lo {beta_lo}, beta_hi {beta_hi}")
    sigma = check_number(sigma, "sigma", minimum=0.0)
    vocab = _count(vocab, "vocab", 1)
    check_seed(table_seed, "table_seed")
    base = check_number(base, "base", positive=True)
    p: Dict[str, Union[float, np.ndarray]] = dict(beta_lo=beta_lo, beta_hi=beta_hi, sigma=sigma, vocab=vocab,
                                                  base=base)
    if kind == "so2":
        p["table"] = so2_angle_table(vocab, d, sigma, np.random.default_rng(table_seed))
    return p


def sample_steps(kind: str, d: int, n: int, rng: np.random.Generator, **params) -> np.ndarray:
    """``n`` i.i.d. steps ``M_t`` of the given kind: ``[n, d, d]`` float64 (params: see module doc).

    Keyword params: ``beta_lo, beta_hi`` (householder), ``sigma, vocab, table_seed`` (so2), ``base`` (rope).
    """
    p = _step_params(kind, d, **params)
    n, rng = _count(n, "n"), _rng(rng)
    if kind == "haar":
        return haar_so(d, n, rng)
    if kind == "rope":
        return np.broadcast_to(block_rotation(rope_angles(d, p["base"])), (n, d, d)).copy()
    if kind == "so2":
        tokens = rng.integers(0, p["vocab"], size=n)
        return block_rotation(p["table"][tokens])
    w = random_unit(d, n, rng)
    beta = rng.uniform(p["beta_lo"], p["beta_hi"], size=n)
    return np.eye(d)[None] - beta[:, None, None] * w[:, :, None] * w[:, None, :]


def closed_form_mean_step(kind: str, d: int, **params) -> np.ndarray:
    """``E[M]`` exactly: ``[d, d]`` (see the module doc for each kind)."""
    p = _step_params(kind, d, **params)
    if kind == "haar":
        return np.zeros((d, d))
    if kind == "rope":
        return block_rotation(rope_angles(d, p["base"]))
    if kind == "so2":
        return block_rotation(p["table"]).mean(axis=0)
    return (1 - 0.5 * (p["beta_lo"] + p["beta_hi"]) / d) * np.eye(d)


def mean_step_opnorm(kind: str, d: int, n: int = 20000, seed: int = 0, **params) -> Dict[str, float]:
    """Monte Carlo ``||E[M]||_op`` with an error bar, and the closed form.

    The error bar uses ``| ||A_hat|| - ||A|| | <= ||A_hat - A||_op <= ||A_hat - A||_F`` and estimates
    ``E||A_hat - A||_F^2 = sum_ij Var(M_ij) / n`` from the samples: ``err = sqrt(sum_ij var_ij / n)``.
    Returns ``{"estimate", "err", "exact"}``.
    """
    _count(n, "n", 2)
    rng = np.random.default_rng(check_seed(seed))
    M = sample_steps(kind, d, n, rng, **params)
    mean = M.mean(axis=0)
    err = math.sqrt(M.var(axis=0, ddof=1).sum() / n)
    return {"estimate": float(np.linalg.norm(mean, 2)), "err": err,
            "exact": float(np.linalg.norm(closed_form_mean_step(kind, d, **params), 2))}


# ----------------------------------------------------------------------------------------------
# route products and mixing
# ----------------------------------------------------------------------------------------------

def route_products(kind: str, d: int, max_len: int, n_routes: int, seed: int = 0, **params) -> np.ndarray:
    """Transports of every length along ``n_routes`` independent routes: ``[max_len + 1, n_routes, d, d]``.

    Entry ``[n]`` is ``P_n = M_n ... M_1`` (new steps on the left, as the route grows towards the query);
    ``[0]`` is the identity.
    """
    _step_params(kind, d, **params)
    max_len, n_routes = _count(max_len, "max_len"), _count(n_routes, "n_routes", 1)
    if (max_len + 1) * n_routes * d * d > 2 ** 31:
        raise ValueError(f"max_len ({max_len}) x n_routes ({n_routes}) x d^2 ({d * d}) is more than 2**31 numbers")
    rng = np.random.default_rng(check_seed(seed))
    out = np.empty((max_len + 1, n_routes, d, d))
    out[0] = np.eye(d)
    for t in range(1, max_len + 1):
        out[t] = sample_steps(kind, d, n_routes, rng, **params) @ out[t - 1]
    return out


def mean_transport_decay(kind: str, d: int, lengths: Sequence[int], n_routes: int = 4000, seed: int = 0,
                         **params) -> Dict[str, np.ndarray]:
    """``||E[P_n]||_op`` by Monte Carlo (with the Frobenius error bar) against ``||E[M]^n||_op``.

    Returns ``{"lengths", "estimate", "err", "predicted"}`` (arrays ``[len(lengths)]``).
    """
    ns = np.asarray(check_ints(lengths, "lengths", minimum=0, maximum=_MAX_N), dtype=int)
    _count(n_routes, "n_routes", 2)
    P = route_products(kind, d, int(ns.max()), n_routes, seed, **params)[ns]
    mean = P.mean(axis=1)
    est = np.array([np.linalg.norm(m, 2) for m in mean])
    err = np.sqrt(P.var(axis=1, ddof=1).sum(axis=(-1, -2)) / n_routes)
    EM = closed_form_mean_step(kind, d, **params)
    pred = np.array([np.linalg.norm(np.linalg.matrix_power(EM, int(n)), 2) for n in ns])
    return {"lengths": ns, "estimate": est, "err": err, "predicted": pred}


def haar_coordinate_cdf(x: np.ndarray, d: int) -> np.ndarray:
    """CDF of one coordinate ``u_1`` of ``u`` uniform on S^{d-1} (= ``q^T P k`` for unit q, k, Haar P).

    ``(u_1 + 1) / 2 ~ Beta((d-1)/2, (d-1)/2)``.
    """
    from scipy.stats import beta as beta_dist

    x = _array(x, "x")
    d = check_int(d, "d", minimum=2, maximum=_MAX_D)

    a = (d - 1) / 2
    return beta_dist.cdf((np.asarray(x) + 1) / 2, a, a)


def ks_distance(samples: np.ndarray, cdf) -> float:
    """Kolmogorov-Smirnov distance ``sup_x |F_n(x) - F(x)|`` between samples and a CDF (a callable)."""
    x = np.sort(_array(samples, "samples").ravel())
    check_callable(cdf, "cdf")
    n = x.size
    if n == 0:
        raise ValueError("samples must hold at least one value")
    F = _array(cdf(x), "cdf(samples)", size=n)
    return float(max(np.max(np.arange(1, n + 1) / n - F), np.max(F - np.arange(n) / n)))


def route_score_samples(kind: str, d: int, lengths: Union[Sequence[int], np.ndarray], n_routes: int = 4000, seed: int = 0,
                        q: Optional[np.ndarray] = None, k: Optional[np.ndarray] = None, **params) -> np.ndarray:
    """Samples of ``q^T P_n k`` for each route length: ``[len(lengths), n_routes]``.

    Default ``q = k = e_1``-like fixed unit vector (a query and its matching key: score 1 at n = 0).
    """
    _step_params(kind, d, **params)
    q = np.ones(d) / math.sqrt(d) if q is None else _array(q, "q", ndim=1, size=d)
    k = q if k is None else _array(k, "k", ndim=1, size=d)
    ns = np.asarray(check_ints(lengths, "lengths", minimum=0, maximum=_MAX_N), dtype=int)
    P = route_products(kind, d, int(ns.max()), n_routes, seed, **params)[ns]
    return np.einsum("i,lnij,j->ln", q, P, k)


def levy_tail_bound(t, d: int):
    """Concentration on the sphere: for u uniform on S^{d-1} and unit q, ``P(|q^T u| >= t) <= 2 exp(-d t^2 / 2)``."""
    t = _array(t, "t", minimum=0.0)
    d = _dim(d)
    return np.minimum(1.0, 2 * np.exp(-d * np.asarray(t, dtype=float) ** 2 / 2))


def hoeffding_tail_bound(t, q: np.ndarray, k: np.ndarray):
    """SO(2) blocks with independent uniform phases: ``q^T P k = sum_m r_m cos(phi_m)``, ``|term| <= r_m``,
    ``r_m = |q_m| |k_m|`` (block norms). Hoeffding: ``P(|score| >= t) <= 2 exp(-t^2 / (2 sum_m r_m^2))``."""
    t = _array(t, "t", minimum=0.0)
    q, k = _array(q, "q", ndim=1), _array(k, "k", ndim=1)
    if q.size % 2 or q.size == 0 or k.size != q.size:
        raise ValueError(f"q and k must have one even length d (SO(2) blocks), got {q.size} and {k.size}")
    r = np.linalg.norm(q.reshape(-1, 2), axis=1) * np.linalg.norm(k.reshape(-1, 2), axis=1)
    return np.minimum(1.0, 2 * np.exp(-np.asarray(t, dtype=float) ** 2 / (2 * np.sum(r ** 2))))


def score_profile(kind: str, d: int, max_len: int, n_routes: int = 2000, lam: float = 4.0, seed: int = 0,
                  **params) -> Dict[str, np.ndarray]:
    """Logits ``lam * q^T P_n q`` (unit q: logit ``lam`` at n = 0) for route lengths 0..max_len.

    Returns ``{"lengths", "mean", "std", "q05", "q95"}``: the score gap between near and far routes.
    """
    lam = check_number(lam, "lam", positive=True)
    max_len = _count(max_len, "max_len")
    lengths = np.arange(max_len + 1)
    s = lam * route_score_samples(kind, d, lengths, n_routes, seed, **params)
    return {"lengths": lengths, "mean": s.mean(1), "std": s.std(1), "q05": np.quantile(s, 0.05, axis=1),
            "q95": np.quantile(s, 0.95, axis=1)}


# ----------------------------------------------------------------------------------------------
# far mass: the lower bound for bounded logits, and how a distance bias escapes it
# ----------------------------------------------------------------------------------------------

def far_mass_bound(n_far, n_near: int, lam: float):
    """Lower bound on the total softmax mass of far sources when every logit lies in [-lam, lam]:
    ``rho_D >= M_L / (M_L + K e^{2 lam})``."""
    n_far = _array(n_far, "n_far", minimum=0.0)
    n_near = check_int(n_near, "n_near", minimum=1)
    lam = check_number(lam, "lam", minimum=0.0)
    return n_far / (n_far + n_near * math.exp(2 * lam))


def _far_args(contexts, n_near, lam, d, n_trials) -> np.ndarray:
    """The far-mass simulations' arguments checked; the contexts as an int array (each above ``n_near``)."""
    n_near = check_int(n_near, "n_near", minimum=1, maximum=_MAX_N)
    Ns = np.asarray(check_ints(contexts, "contexts", minimum=n_near + 1, maximum=_MAX_N), dtype=int)
    check_number(lam, "lam", minimum=0.0)
    check_int(d, "d", minimum=2, maximum=_MAX_D)
    n_trials = _count(n_trials, "n_trials", 1)
    if n_trials * int(Ns.max()) > 2 ** 31:
        raise ValueError(f"n_trials ({n_trials}) x the longest context ({int(Ns.max())}) is more than 2**31 logits")
    return Ns


def _far_logits(n_near: int, n_far: int, lam: float, d: int, n_trials: int, rng, near_value: Optional[float]):
    """Stylized logits: near sources score ``lam`` (or ``near_value``); far ones ``lam * u_1`` with
    ``u`` uniform on S^{d-1} (fully mixed routes: Haar), so in [-lam, lam]. ``[n_trials, K + M]``."""
    near = np.full((n_trials, n_near), lam if near_value is None else near_value)
    a = (d - 1) / 2
    far = lam * (2 * rng.beta(a, a, size=(n_trials, n_far)) - 1)
    return np.concatenate([near, far], axis=1)


def far_mass_rotation(contexts: Sequence[int], n_near: int = 16, lam: float = 4.0, d: int = 64,
                      n_trials: int = 64, seed: int = 0) -> Dict[str, np.ndarray]:
    """Simulated far mass of rotation-only attention (logits bounded by ``lam``) for each context length.

    Context ``N``: ``K = n_near`` near sources, ``M = N - K`` far ones. Returns ``{"contexts", "mean",
    "min", "bound"}``: mean and minimum over trials of the far mass, and :func:`far_mass_bound`.
    """
    Ns = _far_args(contexts, n_near, lam, d, n_trials)
    rng = np.random.default_rng(check_seed(seed))
    mean, mn = [], []
    for N in Ns:
        l = _far_logits(n_near, N - n_near, lam, d, n_trials, rng, None)
        p = np.exp(l - l.max(1, keepdims=True))
        rho = p[:, n_near:].sum(1) / p.sum(1)
        mean.append(rho.mean())
        mn.append(rho.min())
    return {"contexts": Ns, "mean": np.array(mean), "min": np.array(mn),
            "bound": far_mass_bound(Ns - n_near, n_near, lam)}


def bias_far_mass_upper_bound(n_near: int, lam: float, slope: float, near_logit: Optional[float] = None) -> float:
    """Upper bound on the far mass with a distance bias, valid for EVERY context length.

    Logits ``l_n = c_n - slope * n`` at distance ``n`` (ALiBi; FoX with every log-gate ``<= -slope``), content
    ``c_n <= lam``; near = distances ``0..K-1`` with content ``c_n >= near_logit`` (default ``-lam``: the
    worst case). Then ``far <= F = e^{lam - slope K} / (1 - e^{-slope})`` (a geometric series) and
    ``near >= S = e^{near_logit} (1 - e^{-slope K}) / (1 - e^{-slope})``, so ``rho_D <= F / (S + F)``.
    """
    n_near = check_int(n_near, "n_near", minimum=1)
    lam = check_number(lam, "lam", minimum=0.0, maximum=700.0)
    slope = check_number(slope, "slope", positive=True)
    check_number(near_logit, "near_logit", minimum=-700.0, maximum=700.0, optional=True)
    near_logit = -lam if near_logit is None else near_logit
    F = math.exp(lam - slope * n_near) / (1 - math.exp(-slope))
    S = math.exp(near_logit) * (1 - math.exp(-slope * n_near)) / (1 - math.exp(-slope))
    return F / (S + F)


def far_mass_bias(contexts: Sequence[int], n_near: int = 16, lam: float = 4.0, d: int = 64, slope: float = 0.1,
                  n_trials: int = 64, seed: int = 0, gate: bool = False) -> Dict[str, np.ndarray]:
    """Far mass with the same logits plus a distance bias: ALiBi ``-slope * n`` or, with ``gate=True``,
    a FoX-like data-dependent decay ``sum of log f_s`` with ``log f_s`` uniform in ``[-2 slope, -slope]``.

    Returns ``{"contexts", "mean", "max", "upper"}`` (``upper``: :func:`bias_far_mass_upper_bound` with the
    near content logits at ``lam``, as simulated).
    """
    Ns = _far_args(contexts, n_near, lam, d, n_trials)
    check_number(slope, "slope", positive=True)
    check_bool(gate, "gate")
    rng = np.random.default_rng(check_seed(seed))
    mean, mx = [], []
    for N in Ns:
        l = _far_logits(n_near, N - n_near, lam, d, n_trials, rng, None)
        if gate:
            g = rng.uniform(-2 * slope, -slope, size=(n_trials, N))
            bias = -np.concatenate([np.zeros((n_trials, 1)), np.cumsum(-g, axis=1)[:, :-1]], axis=1)
        else:
            bias = -slope * np.arange(N)[None, :]
        l = l + bias   # column n is distance n from the query
        p = np.exp(l - l.max(1, keepdims=True))
        rho = p[:, n_near:].sum(1) / p.sum(1)
        mean.append(rho.mean())
        mx.append(rho.max())
    return {"contexts": Ns, "mean": np.array(mean), "max": np.array(mx),
            "upper": np.full(len(Ns), bias_far_mass_upper_bound(n_near, lam, slope, near_logit=lam))}


# ----------------------------------------------------------------------------------------------
# value side: transporting values makes far contributions add incoherently (SO(2) blocks)
# ----------------------------------------------------------------------------------------------

def value_far_energy_closed_form(weights: np.ndarray, offsets: np.ndarray, b: np.ndarray, noise_std: float,
                                 phi: Optional[np.ndarray]) -> float:
    """``E || sum_j a_j P_j v_j ||^2`` with ``v_j = b + noise``, ``P_j`` = accumulated SO(2) steps.

    Args:
        weights: ``[M]`` attention weights a_j of the far sources.
        offsets: ``[M]`` their route lengths (distances to the query).
        b: ``[d]`` the background shared by all values; noise i.i.d. ``N(0, noise_std^2 I)``.
        phi: ``[d/2]`` characteristic function ``E e^{i theta_m}`` of one step's angle per block, or None
            for untransported values (``P = I``).
    ``E[b^T P_j^T P_j' b] = sum_m |b_m|^2 Re(phi_m^{|n_j - n_j'|})`` (the angles between two sources on
    one route are a sum of ``|n_j - n_j'|`` i.i.d. steps); the noise term is ``d noise_std^2 sum a_j^2``.
    """
    a = _array(weights, "weights", ndim=1)
    if a.size == 0:
        raise ValueError("weights must hold at least one far source")
    offsets = _array(offsets, "offsets", ndim=1, minimum=0.0)
    if offsets.size != a.size:
        raise ValueError(f"weights and offsets must have one length (one per far source), got {a.size} and "
                         f"{offsets.size}")
    b = _array(b, "b", ndim=1)
    if b.size % 2 or b.size == 0:
        raise ValueError(f"b must have an even length d (SO(2) blocks), got {b.size}")
    noise_std = check_number(noise_std, "noise_std", minimum=0.0)
    if phi is not None:
        if isinstance(phi, (str, bytes)):
            raise TypeError(f"phi must be an array of complex numbers, got {type(phi).__name__}")
        phi = np.asarray(phi, dtype=complex)
        if phi.shape != (b.size // 2,) or not np.isfinite(phi).all() or (np.abs(phi) > 1 + 1e-12).any():
            raise ValueError(f"phi must be [d/2] = [{b.size // 2}] finite values of modulus <= 1 (a characteristic "
                             f"function), got shape {phi.shape}")
    noise = b.size * noise_std ** 2 * np.sum(a ** 2)
    if phi is None:
        return float(np.dot(b, b) * a.sum() ** 2 + noise)
    gaps = np.abs(np.asarray(offsets)[:, None] - np.asarray(offsets)[None, :])
    b2 = (b.reshape(-1, 2) ** 2).sum(1)
    total = 0.0
    for m in range(b2.size):
        total += b2[m] * np.real(a @ (np.power(phi[m], gaps)) @ a)
    return float(total + noise)


def value_far_energy(n_far: int, n_near: int = 16, d: int = 16, sigma: float = 1.0, vocab: int = 64,
                     noise_std: float = 0.5, n_trials: int = 2000, seed: int = 0, table_seed: int = 0,
                     transport: bool = True) -> Dict[str, float]:
    """Monte Carlo energy ``||c||^2`` of the far contribution ``c = sum_far a_j P_{j->i} v_j``.

    Far sources sit at distances ``K .. K + M - 1`` with equal weights ``a_j = 1 / M`` (all of the far
    mass, rho = 1, the worst case); values ``v_j = b + noise`` share the background ``b = 1/sqrt(d)``.
    SO(2) steps with token-dependent angles (:func:`so2_angle_table`). ``transport=False``: ``P = I``.
    Returns ``{"mean", "err", "closed_form"}`` (err: standard error of the mean).
    """
    n_far, n_near = _count(n_far, "n_far", 1), _count(n_near, "n_near")
    _dim(d, even=True)
    check_number(noise_std, "noise_std", minimum=0.0)
    n_trials = _count(n_trials, "n_trials", 2)
    check_bool(transport, "transport")
    check_seed(table_seed, "table_seed")
    if n_trials * (n_far + n_near) * d > 2 ** 31:
        raise ValueError("n_trials x (n_far + n_near) x d is more than 2**31 numbers")
    rng = np.random.default_rng(check_seed(seed))
    table = so2_angle_table(vocab, d, sigma, np.random.default_rng(table_seed))
    offsets = np.arange(n_near, n_near + n_far)
    a = np.full(n_far, 1.0 / n_far)
    b = np.ones(d) / math.sqrt(d)
    v = b[None, None, :] + noise_std * rng.standard_normal((n_trials, n_far, d))
    if transport:
        tok = rng.integers(0, vocab, size=(n_trials, n_near + n_far))
        # angle of the route from source at distance n: sum of the n most recent steps' angles
        ang = np.cumsum(table[tok], axis=1)                     # [trials, K+M, d/2], ang[:, n-1] = n steps
        route = ang[:, offsets - 1]                             # [trials, M, d/2]
        x2 = v.reshape(n_trials, n_far, d // 2, 2)
        c, s = np.cos(route), np.sin(route)
        v = np.stack((x2[..., 0] * c - x2[..., 1] * s, x2[..., 0] * s + x2[..., 1] * c), -1).reshape(v.shape)
    out = np.einsum("m,tmd->td", a, v)
    e = (out ** 2).sum(1)
    phi = np.exp(1j * table).mean(0) if transport else None
    return {"mean": float(e.mean()), "err": float(e.std(ddof=1) / math.sqrt(n_trials)),
            "closed_form": value_far_energy_closed_form(a, offsets, b, noise_std, phi)}
