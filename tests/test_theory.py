"""The simulations of path_lib.theory.decoherence against closed forms and bounds (each check can fail)."""
import math

import numpy as np
import pytest

from path_lib.theory import decoherence as th


def test_haar_samples_are_rotations():
    Q = th.haar_so(5, 200, np.random.default_rng(0))
    np.testing.assert_allclose(Q @ np.swapaxes(Q, -1, -2), np.broadcast_to(np.eye(5), Q.shape), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(Q), 1.0, atol=1e-12)


@pytest.mark.parametrize("kind,kw", [("haar", {}), ("householder", dict(beta_lo=0.0, beta_hi=2.0)),
                                     ("householder", dict(beta_lo=0.5, beta_hi=1.0)),
                                     ("householder", dict(beta_lo=2.0, beta_hi=2.0)),
                                     ("so2", dict(sigma=1.0)), ("rope", {})])
def test_spectral_gap_matches_closed_form(kind, kw):
    r = th.mean_step_opnorm(kind, 8, n=20000, seed=1, **kw)
    assert abs(r["estimate"] - r["exact"]) <= 4 * r["err"] + 1e-9, r
    if kind == "householder":
        assert abs(r["exact"] - (1 - 0.5 * (kw["beta_lo"] + kw["beta_hi"]) / 8)) < 1e-12
    if kind == "rope":
        assert abs(r["exact"] - 1) < 1e-12           # no gap: |E e^{i theta}| = 1
    else:
        assert r["exact"] < 1 - 0.05                 # a gap


def test_so2_gap_is_largest_block_characteristic_function():
    table = th.so2_angle_table(64, 8, 0.7, np.random.default_rng(0))
    phi = np.abs(np.exp(1j * table).mean(0))
    exact = np.linalg.norm(th.closed_form_mean_step("so2", 8, sigma=0.7), 2)
    assert abs(exact - phi.max()) < 1e-12
    # Gaussian angles: |E e^{i theta}| -> e^{-sigma^2/2} as the vocabulary grows
    big = th.so2_angle_table(200000, 2, 0.7, np.random.default_rng(1))
    assert abs(abs(np.exp(1j * big).mean()) - math.exp(-0.49 / 2)) < 5 / math.sqrt(200000)


@pytest.mark.parametrize("kind,kw", [("householder", dict(beta_lo=0.0, beta_hi=2.0)), ("so2", dict(sigma=1.0))])
def test_mean_transport_is_mean_step_power(kind, kw):
    r = th.mean_transport_decay(kind, 6, [0, 1, 2, 4, 8, 16], n_routes=3000, seed=2, **kw)
    assert np.all(np.abs(r["estimate"] - r["predicted"]) <= 4 * r["err"] + 1e-9), r
    assert r["predicted"][-1] < 0.5 * r["predicted"][1]       # geometric decay


def test_rope_transport_never_decays():
    r = th.mean_transport_decay("rope", 6, [1, 8, 32], n_routes=50, seed=0)
    np.testing.assert_allclose(r["estimate"], 1.0, atol=1e-9)


def test_products_of_random_reflections_become_haar():
    d, n = 8, 3000
    s = th.route_score_samples("householder", d, [1, 64], n_routes=n, seed=3, beta_lo=2.0, beta_hi=2.0)
    cdf = lambda x: th.haar_coordinate_cdf(x, d)
    ks1, ks64 = th.ks_distance(s[0], cdf), th.ks_distance(s[1], cdf)
    assert ks64 < 1.63 / math.sqrt(n)     # KS 99% critical value: consistent with Haar
    assert ks1 > 0.3                      # one reflection is far from Haar
    # Levy width: std of q^T u for u uniform on the sphere is exactly 1/sqrt(d)
    se = 1 / math.sqrt(d) / math.sqrt(2 * n) * 1.2
    assert abs(s[1].std() - 1 / math.sqrt(d)) < 4 * se


def test_concentration_bounds_hold():
    d, n = 16, 4000
    u = th.route_score_samples("haar", d, [3], n_routes=n, seed=4)[0]
    ts = np.array([0.2, 0.4, 0.6])
    emp = np.array([(np.abs(u) >= t).mean() for t in ts])
    assert np.all(emp <= th.levy_tail_bound(ts, d) + 3 * np.sqrt(th.levy_tail_bound(ts, d) / n) + 1e-3)
    # SO(2) blocks after many steps: Hoeffding in the block norms
    q = np.ones(d) / math.sqrt(d)
    s = th.route_score_samples("so2", d, [64], n_routes=n, seed=5, sigma=2.0)[0]
    emp = np.array([(np.abs(s) >= t).mean() for t in ts])
    bound = th.hoeffding_tail_bound(ts, q, q)
    assert np.all(emp <= bound + 3 * np.sqrt(bound / n) + 1e-3)
    assert abs(s.mean()) < 5 * s.std() / math.sqrt(n)


def test_score_gap_near_vs_far():
    p = th.score_profile("householder", 16, 64, n_routes=1000, lam=4.0, seed=6, beta_lo=2.0, beta_hi=2.0)
    assert p["mean"][0] == pytest.approx(4.0)
    assert p["mean"][1] > 3.0                               # one reflection changes little in d = 16
    far = p["mean"][48:]
    assert np.all(np.abs(far) < 5 * 4.0 / math.sqrt(16) / math.sqrt(1000) + 0.05)


def test_far_mass_bound_and_bias_escape():
    ctx = [64, 1024, 16384]
    r = th.far_mass_rotation(ctx, n_near=16, lam=3.0, d=32, n_trials=16, seed=7)
    assert np.all(r["min"] >= r["bound"])                   # the theorem
    assert r["mean"][-1] > 0.8 and np.all(np.diff(r["mean"]) > 0)
    np.testing.assert_allclose(th.far_mass_bound([0, 10**9], 16, 3.0), [0.0, 1.0], atol=1e-5)
    for gate in (False, True):
        b = th.far_mass_bias(ctx, n_near=16, lam=3.0, d=32, slope=0.1, n_trials=16, seed=8, gate=gate)
        assert np.all(b["max"] <= b["upper"])               # bounded for every context length
        assert b["mean"][-1] < 2 * b["mean"][0] + 1e-3      # and flat
    assert th.bias_far_mass_upper_bound(16, 3.0, 0.1) < 1


def test_value_transport_incoherent():
    for M in (16, 128):
        rot = th.value_far_energy(M, n_trials=3000, seed=9)
        flat = th.value_far_energy(M, n_trials=3000, seed=9, transport=False)
        assert abs(rot["mean"] - rot["closed_form"]) < 4 * rot["err"], rot
        assert abs(flat["mean"] - flat["closed_form"]) < 4 * flat["err"], flat
        assert flat["closed_form"] > 1.0                    # coherent: the background survives
    big = th.value_far_energy(128, n_trials=500, seed=9)
    small = th.value_far_energy(16, n_trials=500, seed=9)
    assert big["closed_form"] < 0.25 * small["closed_form"]  # ~ 1/M


def test_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        th.sample_steps("nope", 4, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="even"):
        th.sample_steps("so2", 5, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="beta"):
        th.sample_steps("householder", 4, 2, np.random.default_rng(0), beta_lo=1.5, beta_hi=2.5)
