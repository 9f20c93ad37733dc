"""Identities of PATH_NOTES sections 2-3: Householder-like matrices and the UT transform."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from path_lib.reference.householder import (block_product, boundary_adjusted_keys, boundary_adjusted_queries,
                                            householder, householder_product, normalize, ut_transform,
                                            ut_transform_loop)

f64 = torch.float64


def rand_unit(*shape, gen):
    return normalize(torch.randn(*shape, generator=gen, dtype=f64))


def rand_beta(*shape, gen, mode):
    u = torch.rand(*shape, generator=gen, dtype=f64)
    return {"uniform": 2 * u, "zero": 0 * u, "one": 0 * u + 1, "two": 0 * u + 2, "near2": 1.999 + 0.001 * u}[mode]


@given(d=st.integers(1, 9), beta=st.floats(0, 2), seed=st.integers(0, 10**6))
@settings(max_examples=40, deadline=None)
def test_eigenvalues(d, beta, seed):
    gen = torch.Generator().manual_seed(seed)
    w = rand_unit(d, gen=gen)
    H = householder(w, beta)
    ev = np.sort(np.linalg.eigvalsh(H.numpy()))
    expected = np.sort(np.array([1.0] * (d - 1) + [1.0 - beta]))
    np.testing.assert_allclose(ev, expected, atol=1e-12)
    torch.testing.assert_close(H @ w, (1 - beta) * w)   # w is the eigenvector of 1 - beta


@pytest.mark.parametrize("d", [2, 5, 16])
def test_beta_regimes(d):
    gen = torch.Generator().manual_seed(d)
    w = rand_unit(d, gen=gen)
    eye = torch.eye(d, dtype=f64)
    torch.testing.assert_close(householder(w, 0.0), eye)                      # identity
    P = householder(w, 1.0)
    torch.testing.assert_close(P @ P, P)                                        # projection
    assert abs(torch.linalg.det(P)) < 1e-12                                     # singular
    R = householder(w, 2.0)
    torch.testing.assert_close(R @ R.T, eye)                                    # orthogonal
    torch.testing.assert_close(R @ R, eye)                                      # involutory
    assert abs(torch.linalg.det(R) + 1) < 1e-12                                 # det -1
    C = householder(w, 0.5)                                                     # contraction along w
    assert torch.linalg.matrix_norm(C, ord=2) <= 1 + 1e-12
    assert abs(torch.linalg.norm(C @ w) - 0.5) < 1e-12


def test_transposition_and_permutations():
    d = 5
    eye = torch.eye(d, dtype=f64)

    def swap(a, b):
        return normalize(eye[a] - eye[b])

    for a in range(d):
        for b in range(d):
            if a != b:
                P = householder(swap(a, b), 2.0)
                perm = list(range(d))
                perm[a], perm[b] = perm[b], perm[a]
                torch.testing.assert_close(P, eye[perm])
    # a product of reflections is the composed permutation (later swaps act last, on the left)
    rng = np.random.default_rng(0)
    swaps = [tuple(rng.choice(d, 2, replace=False)) for _ in range(12)]
    W = torch.stack([swap(a, b) for a, b in swaps])
    M = householder_product(W, torch.full((len(swaps),), 2.0, dtype=f64))
    perm = np.arange(d)
    for a, b in swaps:
        Pm = np.eye(d)[[b if i == a else a if i == b else i for i in range(d)]]
        perm = Pm @ (np.eye(d)[perm] if perm.ndim == 1 else perm)
    torch.testing.assert_close(M, torch.from_numpy(perm))


@given(theta1=st.floats(0, math.pi), theta2=st.floats(0, math.pi))
@settings(max_examples=30, deadline=None)
def test_two_reflections_make_a_rotation(theta1, theta2):
    """H(n2) H(n1) rotates the plane by 2 (theta2 - theta1), the angle between the reflection lines."""
    n1 = torch.tensor([math.cos(theta1), math.sin(theta1)], dtype=f64)
    n2 = torch.tensor([math.cos(theta2), math.sin(theta2)], dtype=f64)
    R = householder(n2, 2.0) @ householder(n1, 2.0)
    a = 2 * (theta2 - theta1)
    expected = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=f64)
    torch.testing.assert_close(R, expected)


@pytest.mark.parametrize("mode", ["uniform", "zero", "one", "two", "near2"])
@pytest.mark.parametrize("L,d", [(1, 3), (2, 2), (7, 5), (16, 16), (13, 33)])
def test_ut_transform_is_the_product(mode, L, d):
    gen = torch.Generator().manual_seed(L * 100 + d)
    W = rand_unit(3, L, d, gen=gen)
    beta = rand_beta(3, L, gen=gen, mode=mode)
    T = ut_transform(W, beta)
    assert T.shape == (3, L, L)
    torch.testing.assert_close(T, torch.tril(T))                                 # lower triangular
    torch.testing.assert_close(torch.eye(d, dtype=f64) - W.transpose(-1, -2) @ T @ W,
                               householder_product(W, beta), atol=1e-12, rtol=0)
    torch.testing.assert_close(block_product(W, beta), householder_product(W, beta), atol=1e-12, rtol=0)
    torch.testing.assert_close(ut_transform_loop(W, beta), T, atol=1e-12, rtol=0)


def test_inverse_is_a_sum_over_paths():
    gen = torch.Generator().manual_seed(1)
    L, d = 9, 4
    W, beta = rand_unit(L, d, gen=gen), rand_beta(L, gen=gen, mode="uniform")
    A = torch.tril(beta[:, None] * (W @ W.T), diagonal=-1)
    neumann = sum(torch.linalg.matrix_power(-A, n) for n in range(L))   # A is nilpotent: A^L = 0
    assert torch.linalg.matrix_power(A, L).abs().max() == 0
    torch.testing.assert_close(neumann @ torch.diag(beta), ut_transform(W, beta))


def test_householder_product_empty_block_is_identity():
    W = torch.zeros(0, 4, dtype=f64)
    torch.testing.assert_close(householder_product(W, torch.zeros(0, dtype=f64)), torch.eye(4, dtype=f64))


@pytest.mark.parametrize("L,d", [(1, 3), (6, 4), (11, 7)])
def test_boundary_adjusted_queries_and_keys(L, d):
    gen = torch.Generator().manual_seed(L + d)
    W, beta = rand_unit(L, d, gen=gen), rand_beta(L, gen=gen, mode="uniform")
    Q, K = torch.randn(L, d, generator=gen, dtype=f64), torch.randn(L, d, generator=gen, dtype=f64)
    T = ut_transform(W, beta)
    Qa, Ka = boundary_adjusted_queries(Q, W, T), boundary_adjusted_keys(K, W, T)
    for r in range(L):
        # q_r^T H_r ... H_0
        torch.testing.assert_close(Qa[r], Q[r] @ householder_product(W[: r + 1], beta[: r + 1]))
        # H_{L-1} ... H_{r+1} k_r
        torch.testing.assert_close(Ka[r], householder_product(W[r + 1:], beta[r + 1:]) @ K[r])


def test_all_pairs_logits_inside_a_block():
    gen = torch.Generator().manual_seed(3)
    L, d = 10, 6
    W, beta = rand_unit(L, d, gen=gen), rand_beta(L, gen=gen, mode="uniform")
    Q, K = torch.randn(L, d, generator=gen, dtype=f64), torch.randn(L, d, generator=gen, dtype=f64)
    T = ut_transform(W, beta)
    S = torch.tril(Q @ K.T) - torch.tril(Q @ W.T) @ T @ torch.tril(W @ K.T, diagonal=-1)
    for i in range(L):
        for j in range(i + 1):
            expected = Q[i] @ householder_product(W[j + 1: i + 1], beta[j + 1: i + 1]) @ K[j]
            assert abs(S[i, j] - expected) < 1e-12


def test_gradcheck_ut_transform():
    gen = torch.Generator().manual_seed(0)
    W = rand_unit(4, 3, gen=gen).requires_grad_()
    beta = rand_beta(4, gen=gen, mode="uniform").requires_grad_()
    assert torch.autograd.gradcheck(ut_transform, (W, beta))


def test_bad_input():
    w = torch.randn(3, 4, dtype=f64)
    with pytest.raises(ValueError, match="beta"):
        ut_transform(w, torch.ones(4, dtype=f64))
    with pytest.raises(TypeError, match="W must be a torch.Tensor"):   # named as in the signature
        ut_transform([[1.0]], torch.ones(1))
    with pytest.raises(ValueError, match="W contains NaN"):
        householder_product(torch.full((2, 3), float("nan"), dtype=f64), torch.ones(2, dtype=f64))
    with pytest.raises(TypeError, match="w"):
        householder(torch.ones(3, dtype=torch.int64), 1.0)
