"""Accumulated SO(2) rotations: the attention variants of paper B (PATH_NOTES section 10).

Each token ``t`` carries per-block angles ``theta_t [D/2]`` (one angle per coordinate pair
``(2m, 2m+1)``, as in RoPE). The step of token ``t`` is the block rotation ``M_t = R(theta_t)``.
Because 2 x 2 rotations commute, the route transport from key ``j`` to query ``i`` is

    P_{j->i} = M_i M_{i-1} ... M_{j+1} = R(Phi_i - Phi_j),       Phi = cumsum(theta) over time,

so the exact transport costs one cumulative sum: this is RoPE with data-dependent positions
(RoPE is ``theta_t = const``). With ``R(a)`` acting on a pair as ``[[cos a, -sin a], [sin a, cos a]]``:

    logit(i, j) = scale * q_i^T P_{j->i} k_j = scale * (R(-Phi_i) q_i)^T (R(-Phi_j) k_j)

and, when values are transported along the same route (``rotate_values=True``),

    o_i = sum_j a_ij P_{j->i} v_j = R(Phi_i) sum_j a_ij R(-Phi_j) v_j

(values moved to a common frame, mixed, and the output rotated back into the query's frame).

Variants registered with :func:`path_lib.layers.register_attention`:

* ``"rand_rot_qk"``:  random accumulated rotations of q and k. The angles are a FIXED (never trained)
  random function of the token's input: ``theta_t = sigma * (x_t / rms(x_t)) @ W`` with ``W`` drawn
  once from ``N(0, 1/d_model)`` (a buffer), so each angle is roughly ``N(0, sigma_m^2)`` and equal
  inputs give equal angles. ``sigma_m`` spans ``sigma_max`` .. ``sigma_min`` geometrically over the
  blocks (fast and slow blocks, like RoPE's frequencies).
* ``"rand_rot_qkv"``: the same, and the values are transported too.
* ``"learned_rot"``: ``theta_t = sigma * Linear(x_t)``, trainable, initialised as ``rand_rot_qk``'s
  projection (so it starts as a random accumulated rotation and learns from there); q, k only.

The generic ``AttentionLayer.step`` (recompute over the cached inputs) is exact for these layers.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ._checks import check_tensor
from .attention import softmax_attention
from .layers import AttentionLayer, register_attention

__all__ = ["rotate_pairs", "cumulative_angles", "block_rotation_matrix", "accumulated_rotation_attention",
           "angle_scales", "RandomRotationAttention", "LearnedRotationAttention", "VARIANTS"]


def rotate_pairs(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate each coordinate pair ``(x_{2m}, x_{2m+1})`` of ``x [..., D]`` by ``angle [..., D/2]``.

    ``angle`` broadcasts against ``x``'s leading dims. Returns ``[..., D]`` in x's dtype (computed in
    the promoted dtype of x and angle).
    """
    D = x.shape[-1]
    if D % 2:
        raise ValueError(f"rotations need an even head dim, got {D}")
    if angle.shape[-1] != D // 2:
        raise ValueError(f"angle must have last dimension D/2 = {D // 2}, got {angle.shape[-1]}")
    dt = torch.promote_types(x.dtype, angle.dtype)
    x2 = x.to(dt).unflatten(-1, (D // 2, 2))
    a, b = x2[..., 0], x2[..., 1]
    c, s = angle.to(dt).cos(), angle.to(dt).sin()
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2).to(x.dtype)


def cumulative_angles(theta: torch.Tensor) -> torch.Tensor:
    """``Phi = cumsum(theta)`` over time: ``theta [B, T, H, D/2]`` -> ``[B, T, H, D/2]`` (float64 if theta is)."""
    return torch.cumsum(theta, dim=1)


def block_rotation_matrix(angle: torch.Tensor) -> torch.Tensor:
    """The explicit block-diagonal rotation ``R(angle)``: ``angle [..., D/2]`` -> ``[..., D, D]``.

    For tests and teaching (the layers never form it).
    """
    n = angle.shape[-1]
    c, s = angle.cos(), angle.sin()
    R = angle.new_zeros(*angle.shape[:-1], 2 * n, 2 * n)
    idx = torch.arange(n, device=angle.device)
    R[..., 2 * idx, 2 * idx] = c
    R[..., 2 * idx, 2 * idx + 1] = -s
    R[..., 2 * idx + 1, 2 * idx] = s
    R[..., 2 * idx + 1, 2 * idx + 1] = c
    return R


def accumulated_rotation_attention(q, k, v, theta, *, rotate_values: bool = False, scale=None) -> torch.Tensor:
    """Causal attention with accumulated block rotations ``P_{j->i} = R(Phi_i - Phi_j)``.

    Args:
        q: ``[B, T, Hq, D]``; k, v: ``[B, T, Hk, D]`` (grouped-query heads as everywhere).
        theta: ``[B, T, Hk, D/2]`` per-token step angles (float32 or float64).
        rotate_values: also transport the values along the route (output in the query's frame).
        scale: logit scale (default ``D ** -0.5``).
    Returns:
        ``[B, T, Hq, D]`` in q's dtype.
    """
    check_tensor(theta, "theta", ndim=4, finite=True)
    if theta.shape[:3] != k.shape[:3] or theta.shape[-1] * 2 != k.shape[-1]:
        raise ValueError(f"theta must have shape {tuple(k.shape[:3]) + (k.shape[-1] // 2,)}, got {tuple(theta.shape)}")
    n_rep = q.shape[2] // k.shape[2]
    phi = cumulative_angles(theta.double() if q.dtype == torch.float64 else theta.float())
    phi_q = phi.repeat_interleave(n_rep, dim=2) if n_rep > 1 else phi
    qr, kr = rotate_pairs(q, -phi_q), rotate_pairs(k, -phi)
    if not rotate_values:
        return softmax_attention(qr, kr, v, scale=scale)
    o = softmax_attention(qr, kr, rotate_pairs(v, -phi), scale=scale)
    return rotate_pairs(o, phi_q)


def angle_scales(n_blocks: int, sigma_max: float = math.pi, sigma_min: float = 0.01) -> torch.Tensor:
    """Per-block angle scales ``sigma_m``, geometric from ``sigma_max`` (block 0) to ``sigma_min``: ``[n_blocks]``."""
    if n_blocks == 1:
        return torch.tensor([float(sigma_max)])
    r = torch.arange(n_blocks, dtype=torch.float64) / (n_blocks - 1)
    return (sigma_max * (sigma_min / sigma_max) ** r).float()


class RandomRotationAttention(AttentionLayer):
    """Accumulated random SO(2) rotations with fixed token-dependent angles (module doc).

    Args:
        d_model, n_heads, n_kv_heads, head_dim: sizes (head_dim even).
        rotate_values: transport values too ("rand_rot_qkv").
        sigma_max, sigma_min: range of the per-block angle scales.
        seed: seed of the fixed random angle projection (a buffer, saved with the model).
    """

    learned = False

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, rotate_values: bool = False,
                 sigma_max: float = math.pi, sigma_min: float = 0.01, seed: int = 0):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        if self.head_dim % 2:
            raise ValueError(f"rotation attention needs an even head_dim, got {self.head_dim}")
        self.rotate_values = rotate_values
        n_out = self.n_kv_heads * self.head_dim // 2
        gen = torch.Generator().manual_seed(seed)
        W = torch.randn(n_out, d_model, generator=gen) / math.sqrt(d_model)
        sig = angle_scales(self.head_dim // 2, sigma_max, sigma_min).repeat(self.n_kv_heads)
        self.register_buffer("sigma", sig)
        if self.learned:
            self.angle_proj = nn.Linear(d_model, n_out, bias=False)
            with torch.no_grad():
                self.angle_proj.weight.copy_(W)
        else:
            self.register_buffer("angle_weight", W)

    def angles(self, x: torch.Tensor) -> torch.Tensor:
        """``x [B, T, d_model]`` -> step angles ``theta [B, T, Hk, D/2]`` (float32, float64 for float64 x)."""
        dt = torch.float64 if x.dtype == torch.float64 else torch.float32
        xn = x.to(dt)
        xn = xn * torch.rsqrt(xn.pow(2).mean(-1, keepdim=True) + 1e-6)
        W = self.angle_proj.weight if self.learned else self.angle_weight
        z = xn @ W.to(dt).t()
        theta = z * self.sigma.to(dt)
        return theta.view(*x.shape[:2], self.n_kv_heads, self.head_dim // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor(x, "x", ndim=3, finite=False)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, got {x.shape[-1]}")
        q, k, v = self.qkv(x)
        return self.out(accumulated_rotation_attention(q, k, v, self.angles(x), rotate_values=self.rotate_values))


class LearnedRotationAttention(RandomRotationAttention):
    """Accumulated SO(2) rotations with learned token-dependent angles ``sigma * Linear(x)`` (q, k only)."""

    learned = True


VARIANTS = {
    "rand_rot_qk": lambda *a, **kw: RandomRotationAttention(*a, rotate_values=False, **kw),
    "rand_rot_qkv": lambda *a, **kw: RandomRotationAttention(*a, rotate_values=True, **kw),
    "learned_rot": lambda *a, **kw: LearnedRotationAttention(*a, **kw),
}
for _name, _factory in VARIANTS.items():
    register_attention(_name, _factory)
