"""Accumulated SO(2) rotations: the attention variants of paper B (Godavarti 2026).

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

Two families of variants are registered with :func:`path_lib.nn.layers.register_attention`.

**Token-angle rotations (paper B's form).** The step of a token depends on the token only: a table
``theta[v, h, m] = sigma_m * z[v, h, m]`` of per-token, per-head, per-block angles, ``z ~ N(0, 1)``
drawn once (seeded), is indexed by the token ids (``TinyLM`` hands them to the layer). The block
scales ``sigma_m`` run geometrically from ``sigma_max`` (fast blocks) to ``sigma_min`` (slow blocks);
for a token drawn from a large vocabulary the mean step of block ``m`` has norm about
``exp(-sigma_m^2 / 2) < 1`` (the spectral gap of paper B's analysis, chapter 11), so block ``m`` mixes
within about ``2 / sigma_m^2`` tokens. The same table (same seed) is used in every layer: the route's
steps are a property of the tokens on it, as in the stylized model.

* ``"tok_rot_qk"``: fixed random table, q and k rotated;
* ``"tok_rot_qkv"``: the same, values transported too;
* ``"tok_rot_learned"``: the table is a trained parameter, initialised as ``tok_rot_qk``'s; q and k.

**Hidden-state rotations (this project's first instantiation, kept for the earlier records).** The
angles are a function of the layer's INPUT (hidden state), so they depend on the whole prefix and
differ from layer to layer: ``theta_t = sigma * (x_t / rms(x_t)) @ W`` with ``W`` drawn once from
``N(0, 1/d_model)`` (a buffer), ``sigma_m`` from ``pi`` to ``0.01``.

* ``"hid_rot_qk"``, ``"hid_rot_qkv"``, ``"hid_rot_learned"`` (``theta = sigma * Linear(x)``, trained).
  Their former names ``"rand_rot_qk"``, ``"rand_rot_qkv"``, ``"learned_rot"`` (used in the records
  made before the token-angle variants existed) stay registered as aliases.

The generic ``AttentionLayer.step`` (recompute over the cached inputs) is exact for the hidden-state
layers; the token-angle layers keep the accumulated angle and transported keys (and values) in a cache.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..validation import (PARAM_DTYPES, check_bool, check_int, check_number, check_qkv, check_same_device,
                          check_tensor)
from ..reference.attention import softmax_attention
from .layers import AttentionLayer, register_attention

__all__ = ["rotate_pairs", "cumulative_angles", "block_rotation_matrix", "accumulated_rotation_attention",
           "angle_scales", "mixing_windows", "RandomRotationAttention", "LearnedRotationAttention",
           "TokenRotationAttention", "VARIANTS", "TOKEN_VARIANTS", "HIDDEN_VARIANTS", "LEGACY_ALIASES"]


def rotate_pairs(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate each coordinate pair ``(x_{2m}, x_{2m+1})`` of ``x [..., D]`` by ``angle [..., D/2]``.

    ``angle`` broadcasts against ``x``'s leading dims. Returns ``[..., D]`` in x's dtype (computed in
    the promoted dtype of x and angle).
    """
    check_tensor(x, "x", finite=False)
    check_tensor(angle, "angle", finite=False)
    check_same_device(angle, "angle", x, "x")
    if x.dim() == 0 or angle.dim() == 0:
        raise ValueError(f"x and angle need a last dimension, got shapes {tuple(x.shape)} and {tuple(angle.shape)}")
    D = x.shape[-1]
    if D % 2:
        raise ValueError(f"x must have an even last dimension (coordinate pairs), got {D}")
    if angle.shape[-1] != D // 2:
        raise ValueError(f"angle must have last dimension D/2 = {D // 2}, got {angle.shape[-1]}")
    try:
        torch.broadcast_shapes(x.shape[:-1], angle.shape[:-1])
    except RuntimeError:
        raise ValueError(f"angle {tuple(angle.shape)} must broadcast against x {tuple(x.shape)} "
                         "in its leading dimensions") from None
    dt = torch.promote_types(x.dtype, angle.dtype)
    x2 = x.to(dt).unflatten(-1, (D // 2, 2))
    a, b = x2[..., 0], x2[..., 1]
    c, s = angle.to(dt).cos(), angle.to(dt).sin()
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2).to(x.dtype)


def cumulative_angles(theta: torch.Tensor) -> torch.Tensor:
    """``Phi = cumsum(theta)`` over time: ``theta [B, T, H, D/2]`` -> ``[B, T, H, D/2]`` (float64 if theta is)."""
    check_tensor(theta, "theta", ndim=4, finite=False)
    return torch.cumsum(theta, dim=1)


def block_rotation_matrix(angle: torch.Tensor) -> torch.Tensor:
    """The explicit block-diagonal rotation ``R(angle)``: ``angle [..., D/2]`` -> ``[..., D, D]``.

    For tests and teaching (the layers never form it).
    """
    check_tensor(angle, "angle", finite=False)
    if angle.dim() == 0:
        raise ValueError("angle must have a last dimension D/2, got a 0-d tensor")
    n = angle.shape[-1]
    c, s = angle.cos(), angle.sin()
    R = angle.new_zeros(*angle.shape[:-1], 2 * n, 2 * n)
    idx = torch.arange(n, device=angle.device)
    R[..., 2 * idx, 2 * idx] = c
    R[..., 2 * idx, 2 * idx + 1] = -s
    R[..., 2 * idx + 1, 2 * idx] = s
    R[..., 2 * idx + 1, 2 * idx + 1] = c
    return R


def accumulated_rotation_attention(q, k, v, theta, *, rotate_values: bool = False, scale=None,
                                   check_values: bool = True) -> torch.Tensor:
    """Causal attention with accumulated block rotations ``P_{j->i} = R(Phi_i - Phi_j)``.

    Args:
        q: ``[B, T, Hq, D]``; k, v: ``[B, T, Hk, D]`` (grouped-query heads as everywhere).
        theta: ``[B, T, Hk, D/2]`` per-token step angles (float32 or float64).
        rotate_values: also transport the values along the route (output in the query's frame).
        scale: logit scale (default ``D ** -0.5``).
        check_values: also check that theta is finite (a device sync on a GPU; the layers, whose angles
            are finite by construction, pass False).
    Returns:
        ``[B, T, Hq, D]`` in q's dtype.
    """
    check_bool(check_values, "check_values")
    check_bool(rotate_values, "rotate_values")
    check_qkv(q, k, v, finite=check_values)
    check_tensor(theta, "theta", ndim=4, dtypes=PARAM_DTYPES, finite=check_values)
    check_same_device(theta, "theta", q)
    if k.shape[-1] % 2:
        raise ValueError(f"q and k must have an even head dim (coordinate pairs), got {k.shape[-1]}")
    if rotate_values and v.shape[-1] != k.shape[-1]:
        raise ValueError(f"v must have head dim {k.shape[-1]} like k when rotate_values=True, got {v.shape[-1]}")
    if theta.shape[:3] != k.shape[:3] or theta.shape[-1] * 2 != k.shape[-1]:
        raise ValueError(f"theta must have shape {tuple(k.shape[:3]) + (k.shape[-1] // 2,)}, got {tuple(theta.shape)}")
    n_rep = q.shape[2] // k.shape[2]
    phi = cumulative_angles(theta.double() if q.dtype == torch.float64 else theta.float())
    phi_q = phi.repeat_interleave(n_rep, dim=2) if n_rep > 1 else phi
    qr, kr = rotate_pairs(q, -phi_q), rotate_pairs(k, -phi)
    if not rotate_values:
        return softmax_attention(qr, kr, v, scale=scale, check_values=check_values)
    o = softmax_attention(qr, kr, rotate_pairs(v, -phi), scale=scale, check_values=check_values)
    return rotate_pairs(o, phi_q)


def angle_scales(n_blocks: int, sigma_max: float = math.pi, sigma_min: float = 0.01) -> torch.Tensor:
    """Per-block angle scales ``sigma_m``, geometric from ``sigma_max`` (block 0) to ``sigma_min``: ``[n_blocks]``."""
    check_int(n_blocks, "n_blocks", minimum=1)
    _check_scales(sigma_max, sigma_min)
    if n_blocks == 1:
        return torch.tensor([float(sigma_max)])
    r = torch.arange(n_blocks, dtype=torch.float64) / (n_blocks - 1)
    return (sigma_max * (sigma_min / sigma_max) ** r).float()


def mixing_windows(sigma) -> torch.Tensor:
    """Tokens after which a block with Gaussian angle scale ``sigma`` has forgotten its start:
    ``|E e^{i theta}|^n = exp(-n sigma^2 / 2)`` reaches ``1/e`` at ``n = 2 / sigma^2``."""
    if isinstance(sigma, torch.Tensor):
        check_tensor(sigma, "sigma")
        if sigma.numel() and bool((sigma <= 0).any()):
            raise ValueError("sigma must be positive")
    else:
        check_number(sigma, "sigma", positive=True)
    sigma = torch.as_tensor(sigma, dtype=torch.float64)
    return 2.0 / sigma ** 2


def _check_scales(sigma_max, sigma_min) -> None:
    """sigma_max and sigma_min: finite numbers with ``0 < sigma_min <= sigma_max``."""
    check_number(sigma_max, "sigma_max", positive=True)
    check_number(sigma_min, "sigma_min", positive=True)
    if sigma_min > sigma_max:
        raise ValueError(f"sigma_min must be <= sigma_max, got sigma_min={sigma_min}, sigma_max={sigma_max}")


class RandomRotationAttention(AttentionLayer):
    """Accumulated random SO(2) rotations with fixed angles computed from the HIDDEN STATE (module doc;
    registered as ``"hid_rot_qk"`` / ``"hid_rot_qkv"``, formerly ``"rand_rot_qk"`` / ``"rand_rot_qkv"``).

    Args:
        d_model, n_heads, n_kv_heads, head_dim: sizes (head_dim even).
        rotate_values: transport values too ("rand_rot_qkv").
        sigma_max, sigma_min: range of the per-block angle scales.
        seed: seed of the fixed random angle projection (a buffer, saved with the model).
    """

    learned = False
    #: buffers: the angle scales ``[Hk * D/2]``; the fixed angle projection ``[Hk * D/2, d_model]`` (not learned)
    sigma: torch.Tensor
    angle_weight: torch.Tensor

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, rotate_values: bool = False,
                 sigma_max: float = math.pi, sigma_min: float = 0.01, seed: int = 0):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        if self.head_dim % 2:
            raise ValueError(f"rotation attention needs an even head_dim, got {self.head_dim}")
        self.rotate_values = check_bool(rotate_values, "rotate_values")
        _check_scales(sigma_max, sigma_min)
        check_int(seed, "seed", minimum=0)
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
        self._check_input(x)
        q, k, v = self.qkv(x)
        return self.out(accumulated_rotation_attention(q, k, v, self.angles(x), rotate_values=self.rotate_values,
                                                         check_values=False))


class LearnedRotationAttention(RandomRotationAttention):
    """Accumulated SO(2) rotations with learned angles ``sigma * Linear(x)`` of the hidden state (q, k
    only; ``"hid_rot_learned"``, formerly ``"learned_rot"``)."""

    learned = True


class TokenRotationAttention(AttentionLayer):
    """Accumulated SO(2) rotations whose step angles come from the TOKEN IDS (paper B's form; module doc).

    Args:
        d_model, n_heads, n_kv_heads, head_dim: sizes (head_dim even).
        rotate_values: transport values too (``"tok_rot_qkv"``).
        learned: the angle table is a trained parameter (``"tok_rot_learned"``), else a fixed buffer.
        table_size: rows of the angle table (token ids must be smaller; 256 fits bytes and the tasks).
        sigma_max, sigma_min: per-block angle scales, geometric from block 0 (fast) to the last (slow).
        seed: seed of the table (the same in every layer by default).

    ``TinyLM`` sets ``token_ids`` before each call. Used on its own, without token ids, every token is
    token 0: constant angles, a RoPE-like relative encoding (documented fallback, for generic tests).
    """

    uses_token_ids = True
    _state_keys = ("phi", "k", "v")

    def _state_tag(self) -> str:
        return (f"{super()._state_tag()[:-1]}, rotate_values={self.rotate_values}, "
                f"table_size={self.table_size})")

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, rotate_values: bool = False,
                 learned: bool = False, table_size: int = 256, sigma_max: float = 1.0,
                 sigma_min: float = 0.125, seed: int = 0):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        if self.head_dim % 2:
            raise ValueError(f"rotation attention needs an even head_dim, got {self.head_dim}")
        check_bool(rotate_values, "rotate_values")
        check_bool(learned, "learned")
        check_int(table_size, "table_size", minimum=1)
        check_int(seed, "seed", minimum=0)
        _check_scales(sigma_max, sigma_min)
        self.rotate_values, self.learned, self.table_size = rotate_values, learned, table_size
        n_blocks = self.head_dim // 2
        gen = torch.Generator().manual_seed(seed)
        z = torch.randn(table_size, self.n_kv_heads, n_blocks, generator=gen)
        sig = angle_scales(n_blocks, sigma_max, sigma_min)
        self.register_buffer("sigma", sig)
        table = z * sig
        if learned:
            self.angle_table = nn.Parameter(table)
        else:
            self.register_buffer("angle_table", table)
        self.token_ids = None

    def _ids(self, B: int, T: int, device) -> torch.Tensor:
        ids = self.token_ids
        if ids is None:
            return torch.zeros(B, T, dtype=torch.long, device=device)
        if tuple(ids.shape) != (B, T):
            raise ValueError(f"token_ids must have shape {(B, T)}, got {tuple(ids.shape)}")
        # on a GPU an out-of-range id fails inside the indexing kernel; checking here would synchronise
        if ids.device.type == "cpu" and ids.numel() and int(ids.max()) >= self.table_size:
            raise ValueError(f"token ids must be < table_size={self.table_size} (the angle table's rows), "
                             f"got {int(ids.max())}")
        return ids

    def angles(self, token_ids: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
        """Step angles of the tokens: ``token_ids [B, T]`` -> ``theta [B, T, Hk, D/2]``."""
        return self.angle_table[token_ids].to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        q, k, v = self.qkv(x)
        dt = torch.float64 if x.dtype == torch.float64 else torch.float32
        theta = self.angles(self._ids(x.shape[0], x.shape[1], x.device), dt)
        return self.out(accumulated_rotation_attention(q, k, v, theta, rotate_values=self.rotate_values,
                                                         check_values=False))

    def step(self, x_t: torch.Tensor, state=None):
        """One token: keeps ``Phi`` (the accumulated angle) and keys (values) in the common frame."""
        self._check_input(x_t, "x_t", ndim=2)
        B = x_t.shape[0]
        self._check_layer_state(state, B)
        q, k, v = self.qkv(x_t[:, None])                             # [B, 1, H, Dh]
        dt = torch.float64 if x_t.dtype == torch.float64 else torch.float32
        theta = self.angles(self._ids(B, 1, x_t.device), dt)[:, 0]  # [B, Hk, D/2]
        phi = theta if state is None else state["phi"] + theta
        n_rep = self.n_heads // self.n_kv_heads
        phi_q = phi.repeat_interleave(n_rep, dim=1) if n_rep > 1 else phi
        kr = rotate_pairs(k[:, 0], -phi)[:, :, None]                 # [B, Hk, 1, Dh]
        vr = (rotate_pairs(v[:, 0], -phi) if self.rotate_values else v[:, 0])[:, :, None]
        if state is None:
            state = {"layer": self._state_tag(), "phi": phi, "k": kr, "v": vr}
        else:
            state = {"layer": state["layer"], "phi": phi, "k": torch.cat([state["k"], kr], 2),
                     "v": torch.cat([state["v"], vr], 2)}
        keys = state["k"].repeat_interleave(n_rep, 1)
        values = state["v"].repeat_interleave(n_rep, 1)
        qr = rotate_pairs(q[:, 0], -phi_q)
        logits = self.head_dim ** -0.5 * torch.einsum("bhd,bhtd->bht", qr, keys)
        o = torch.einsum("bht,bhtd->bhd", torch.softmax(logits, dim=-1), values)
        if self.rotate_values:
            o = rotate_pairs(o, phi_q)
        return self.out(o[:, None].to(x_t.dtype))[:, 0], state


HIDDEN_VARIANTS = {
    "hid_rot_qk": lambda *a, **kw: RandomRotationAttention(*a, rotate_values=False, **kw),
    "hid_rot_qkv": lambda *a, **kw: RandomRotationAttention(*a, rotate_values=True, **kw),
    "hid_rot_learned": lambda *a, **kw: LearnedRotationAttention(*a, **kw),
}
#: the hidden-state variants' former names (the records made before the token-angle variants use them)
LEGACY_ALIASES = {"rand_rot_qk": "hid_rot_qk", "rand_rot_qkv": "hid_rot_qkv", "learned_rot": "hid_rot_learned"}
TOKEN_VARIANTS = {
    "tok_rot_qk": lambda *a, **kw: TokenRotationAttention(*a, rotate_values=False, learned=False, **kw),
    "tok_rot_qkv": lambda *a, **kw: TokenRotationAttention(*a, rotate_values=True, learned=False, **kw),
    "tok_rot_learned": lambda *a, **kw: TokenRotationAttention(*a, rotate_values=False, learned=True, **kw),
}
VARIANTS = {**TOKEN_VARIANTS, **HIDDEN_VARIANTS,
            **{old: HIDDEN_VARIANTS[new] for old, new in LEGACY_ALIASES.items()}}
for _name, _factory in VARIANTS.items():
    register_attention(_name, _factory)
