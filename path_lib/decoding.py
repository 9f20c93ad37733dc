"""Decoding with PaTH attention: a key cache kept transformed to the current position.

At step t, before appending k_t, every cached key moves across the new token's transform,

    k_j <- H_t k_j = k_j - beta_t (w_t^T k_j) w_t          for all cached j < t,

after which attention of q_t over the cache is ordinary softmax attention: O(t D) per step and head.
A prompt is prefilled in time linear in its length by moving each block's keys to the block's end
(the UT transform) and then across the later blocks with suffix products of ``D x D`` block matrices.

Per-token shapes: q_t ``[B, Hq, D]``; k_t, w_t ``[B, Hk, D]``; v_t ``[B, Hk, Dv]``; beta_t ``[B, Hk]``;
g_t ``[B, Hq]``. Sequence shapes are the library's ``[B, T, H, D]``.
"""
from __future__ import annotations

from typing import Optional

import torch

from ._checks import check_path_params, check_qkv, check_scale, check_tensor, check_block_size
from .attention import path_attention
from .householder import block_product, boundary_adjusted_keys, ut_transform

__all__ = ["PaTHCache", "keys_to_end", "prefill", "decode_path_attention"]


class PaTHCache:
    """Key-value cache for PaTH (and PaTH-FoX) decoding.

    Attributes:
        keys: ``[B, Hk, t, D]`` cached keys, each transformed to the current position.
        values: ``[B, Hk, t, Dv]``.
        gate_prefix: ``[B, Hq, t]`` cumulative log gate G_j at each cached key (PaTH-FoX only).
        gate_total: ``[B, Hq]`` cumulative log gate G_t up to the current position (PaTH-FoX only).
    """

    def __init__(self, batch_size: int, n_q_heads: int, n_kv_heads: int, head_dim: int,
                 value_dim: Optional[int] = None, *, dtype=torch.float32, device=None):
        if n_kv_heads < 1 or n_q_heads % n_kv_heads:
            raise ValueError(f"n_q_heads ({n_q_heads}) must be a positive multiple of n_kv_heads ({n_kv_heads})")
        value_dim = head_dim if value_dim is None else value_dim
        self.n_rep = n_q_heads // n_kv_heads
        self.keys = torch.zeros(batch_size, n_kv_heads, 0, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros(batch_size, n_kv_heads, 0, value_dim, dtype=dtype, device=device)
        self.gate_prefix = torch.zeros(batch_size, n_q_heads, 0, dtype=dtype, device=device)
        self.gate_total = torch.zeros(batch_size, n_q_heads, dtype=dtype, device=device)

    def __len__(self) -> int:
        return self.keys.shape[2]

    @property
    def dtype(self):
        return self.keys.dtype

    def transform(self, w_t: torch.Tensor, beta_t: torch.Tensor) -> None:
        """Move every cached key across ``H_t``: ``k_j <- k_j - beta_t (w_t . k_j) w_t``."""
        w_t, beta_t = w_t.to(self.dtype), beta_t.to(self.dtype)
        proj = torch.einsum("bhtd,bhd->bht", self.keys, w_t)
        self.keys = self.keys - beta_t[..., None, None] * proj[..., None] * w_t[:, :, None, :]

    def append(self, k_t: torch.Tensor, v_t: torch.Tensor, g_t: Optional[torch.Tensor] = None) -> None:
        """Append an untransformed key and its value (and the gate, which extends the running sum)."""
        self.keys = torch.cat([self.keys, k_t.to(self.dtype)[:, :, None]], dim=2)
        self.values = torch.cat([self.values, v_t.to(self.dtype)[:, :, None]], dim=2)
        if g_t is not None:
            self.gate_total = self.gate_total + g_t.to(self.dtype)
        self.gate_prefix = torch.cat([self.gate_prefix, self.gate_total[:, :, None]], dim=2)

    def attend(self, q_t: torch.Tensor, scale: float) -> torch.Tensor:
        """Softmax attention of ``q_t`` ``[B, Hq, D]`` over the cache; returns ``[B, Hq, Dv]``."""
        keys = self.keys.repeat_interleave(self.n_rep, dim=1) if self.n_rep > 1 else self.keys
        values = self.values.repeat_interleave(self.n_rep, dim=1) if self.n_rep > 1 else self.values
        logits = scale * torch.einsum("bhd,bhtd->bht", q_t.to(self.dtype), keys)
        logits = logits + self.gate_total[..., None] - self.gate_prefix
        return torch.einsum("bht,bhtd->bhd", torch.softmax(logits, dim=-1), values)

    def step(self, q_t, k_t, v_t, w_t, beta_t, g_t=None, *, scale=None) -> torch.Tensor:
        """One decoding step: transform the cache by ``H_t``, append ``k_t``, attend with ``q_t``.

        Returns ``[B, Hq, Dv]`` in the cache's dtype.
        """
        B, Hk, _, D = self.keys.shape
        expected = {"q_t": (B, Hk * self.n_rep, D), "k_t": (B, Hk, D), "v_t": (B, Hk, self.values.shape[-1]),
                    "w_t": (B, Hk, D), "beta_t": (B, Hk)}
        for name, x in (("q_t", q_t), ("k_t", k_t), ("v_t", v_t), ("w_t", w_t), ("beta_t", beta_t)):
            check_tensor(x, name)
            if tuple(x.shape) != expected[name]:
                raise ValueError(f"{name} must have shape {expected[name]}, got {tuple(x.shape)}")
        if beta_t.numel() and (bool((beta_t < 0).any()) or bool((beta_t > 2).any())):
            raise ValueError("beta_t must lie in [0, 2]")
        if g_t is not None:
            check_tensor(g_t, "g_t")
            if tuple(g_t.shape) != (B, Hk * self.n_rep):
                raise ValueError(f"g_t must have shape {(B, Hk * self.n_rep)}, got {tuple(g_t.shape)}")
        self.transform(w_t, beta_t)
        self.append(k_t, v_t, g_t)
        return self.attend(q_t, check_scale(scale, D))


def keys_to_end(k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor, *, block_size: int = 64) -> torch.Tensor:
    """Every key moved to the end of the sequence: ``k_j -> H_{T-1} ... H_{j+1} k_j``.

    Linear in T: each block's keys go to the block's end with the UT transform, then across the
    later blocks with the suffix product ``S_c = P_{last} ... P_{c+1}`` of ``D x D`` block matrices,
    built right to left (``S_{c-1} = S_c P_c``).

    Args: k, w ``[B, T, H, D]``; beta ``[B, T, H]``. Returns ``[B, T, H, D]`` in the compute dtype.
    """
    check_block_size(block_size)
    dt = torch.float64 if k.dtype == torch.float64 else torch.float32
    kh, wh, bh = k.to(dt).transpose(1, 2), w.to(dt).transpose(1, 2), beta.to(dt).transpose(1, 2)
    B, H, T, D = kh.shape
    S = torch.eye(D, dtype=dt, device=k.device).expand(B, H, D, D)
    out = []
    for s in reversed(range(0, T, block_size)):
        e = min(s + block_size, T)
        Wc, bc = wh[:, :, s:e], bh[:, :, s:e]
        Tc = ut_transform(Wc, bc)
        K_end = boundary_adjusted_keys(kh[:, :, s:e], Wc, Tc)   # rows (H_end ... H_{r+1} k_r)^T
        out.append(K_end @ S.transpose(-1, -2))                  # rows (S k)^T
        S = S @ block_product(Wc, bc, Tc)
    return torch.cat(out[::-1], dim=2).transpose(1, 2)


def prefill(q, k, v, w, beta, g=None, *, scale=None, block_size: int = 64):
    """Run a prompt in parallel and return ``(outputs [B, T, Hq, Dv], cache)`` ready for decoding."""
    B, T, Hq, Hk, D = check_qkv(q, k, v)
    check_path_params(q, k, w, beta, g)
    o = path_attention(q, k, v, w, beta, g, scale=scale, impl="blockwise", block_size=block_size)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    cache = PaTHCache(B, Hq, Hk, D, v.shape[-1], dtype=dt, device=q.device)
    cache.keys = keys_to_end(k, w, beta, block_size=block_size).transpose(1, 2)
    cache.values = v.to(dt).transpose(1, 2)
    if g is not None:
        G = torch.cumsum(g.to(dt), dim=1).transpose(1, 2)
        cache.gate_prefix, cache.gate_total = G, G[:, :, -1] if T else cache.gate_total
    else:
        cache.gate_prefix = torch.zeros(B, Hq, T, dtype=dt, device=q.device)
    return o, cache


def decode_path_attention(q, k, v, w, beta, g=None, *, scale=None) -> torch.Tensor:
    """PaTH attention computed token by token through a :class:`PaTHCache`.

    Same arguments and result as :func:`path_lib.attention.path_attention`: ``[B, T, Hq, Dv]``.
    """
    B, T, Hq, Hk, D = check_qkv(q, k, v)
    check_path_params(q, k, w, beta, g)
    scale = check_scale(scale, D)
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    cache = PaTHCache(B, Hq, Hk, D, v.shape[-1], dtype=dt, device=q.device)
    outs = [cache.step(q[:, t], k[:, t], v[:, t], w[:, t], beta[:, t], None if g is None else g[:, t],
                       scale=scale) for t in range(T)]
    if not outs:
        return q.new_zeros(B, 0, Hq, v.shape[-1])
    return torch.stack(outs, dim=1).to(q.dtype)
