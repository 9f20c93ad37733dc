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

from typing import Optional, Protocol, runtime_checkable

import torch

from .validation import (PARAM_DTYPES, as_device, dtype_name, check_block_size, check_bool,
                         check_finite, check_int, check_path_params, check_qkv, check_scale,
                         check_step_values, check_tensor)
from .blockwise.mirror import blockwise_path_attention
from .reference.householder import _block_product, _boundary_adjusted_keys, _ut_transform

__all__ = ["DecodingCache", "PaTHCache", "is_cache", "keys_to_end", "prefill", "decode_path_attention"]

CACHE_DTYPES = (torch.float32, torch.float64)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


@runtime_checkable
class DecodingCache(Protocol):
    """What the layers need of a PaTH decoding cache: :class:`PaTHCache`, and the GPU's
    ``path_lib.kernels.decode.TritonPaTHCache``, which implements it without importing this module (a
    structural protocol, so this module never imports triton).

    ``len(cache)``: tokens held (padding included); ``batch_size``; ``device``; ``valid``: ``[B, t]`` bool
    (False: a padding slot) or None when every slot holds a token; ``select(index)``: keep batch rows
    ``index`` (1-D integer tensor, values in ``[0, batch_size)``); ``step(q_t, k_t, v_t, w_t, beta_t, g_t,
    *, scale, valid_t, check_values) -> [B, Hq, Dv]``. Both caches also expose ``keys``, the cached keys
    moved to the current position, ``[B, Hk, t, D]`` (computed on demand by the GPU cache, so it is not
    part of the runtime check).
    """

    def __len__(self) -> int: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def valid(self) -> Optional[torch.Tensor]: ...

    def select(self, index: torch.Tensor) -> None: ...

    def step(self, q_t, k_t, v_t, w_t, beta_t, g_t=None, *, scale=None, valid_t=None,
             check_values: bool = True) -> torch.Tensor: ...


_IS_CACHE_TYPE: dict = {}


def is_cache(obj) -> bool:
    """Whether ``obj`` is a PaTH decoding cache (an instance implementing :class:`DecodingCache`: a
    :class:`PaTHCache` or the GPU's ``TritonPaTHCache``). Any object may be asked; a class is not a cache.

    The answer is kept per type (the protocol's members are the class's), so the layers' per-step state
    checks cost a dict lookup rather than a structural check."""
    known = _IS_CACHE_TYPE.get(type(obj))
    if known is None:
        known = _IS_CACHE_TYPE[type(obj)] = not isinstance(obj, type) and isinstance(obj, DecodingCache)
    return known


def _check_index(index, batch_size: int, device, *, allow_empty: bool = True) -> None:
    """``index``: a 1-D int64/int32 tensor on ``device`` whose values lie in ``[0, batch_size)`` (read to
    the host: one sync, so that an out-of-range row is refused here rather than failing inside indexing)."""
    check_tensor(index, "index", ndim=1, dtypes=(torch.int64, torch.int32), finite=False)
    if index.device != device:
        raise ValueError(f"index must be on the cache's device ({device}), got {index.device}")
    if index.numel() == 0:
        if not allow_empty:
            raise ValueError("index must keep at least one row (this cache needs batch size >= 1)")
        return
    lo, hi = (int(x) for x in torch.aminmax(index))
    if lo < 0 or hi >= batch_size:
        raise ValueError(f"index must lie in [0, {batch_size}) (the cache's batch rows), got values in [{lo}, {hi}]")


class PaTHCache:
    """Key-value cache for PaTH (and PaTH-FoX) decoding (a :class:`DecodingCache`).

    Attributes:
        keys: ``[B, Hk, t, D]`` cached keys, each transformed to the current position.
        values: ``[B, Hk, t, Dv]``.
        gate_prefix: ``[B, Hq, t]`` cumulative log gate G_j at each cached key (PaTH-FoX only).
        gate_total: ``[B, Hq]`` cumulative log gate G_t up to the current position (PaTH-FoX only).
        valid: ``[B, t]`` bool, False where a slot holds padding (never attended to), or None when every
            slot holds a real token.

    The cache computes in its ``dtype`` (float32 or float64). Inputs of a lower precision are promoted
    to it; float64 inputs to a float32 cache are refused (they would be rounded silently).

    Storage is preallocated along t and grows by doubling (``capacity`` is the initial size), so a step
    writes in place instead of copying the whole cache. ``keys``, ``values``, ``gate_prefix`` and
    ``valid`` are views of that storage; assigning one of them copies the assigned tensor in. When a step
    records gradients (grad mode on and an input that requires grad, now or earlier) the cache switches
    to out-of-place updates, so that backpropagation through decoding stays exact.
    """

    def __init__(self, batch_size: int, n_q_heads: int, n_kv_heads: int, head_dim: int,
                 value_dim: Optional[int] = None, *, dtype=torch.float32, device=None, capacity: int = 16):
        check_int(batch_size, "batch_size", minimum=0)
        check_int(n_q_heads, "n_q_heads", minimum=1)
        check_int(n_kv_heads, "n_kv_heads", minimum=1)
        check_int(head_dim, "head_dim", minimum=1)
        value_dim = head_dim if value_dim is None else check_int(value_dim, "value_dim", minimum=1)
        check_int(capacity, "capacity", minimum=0)
        if n_q_heads % n_kv_heads:
            raise ValueError(f"n_q_heads ({n_q_heads}) must be a positive multiple of n_kv_heads ({n_kv_heads})")
        if dtype not in CACHE_DTYPES:
            shown = dtype_name(dtype) if isinstance(dtype, torch.dtype) else type(dtype).__name__
            raise TypeError(f"dtype must be float32 or float64, got {shown}")
        if device is not None:
            device = as_device(device)
            if device.type == "meta":
                raise ValueError("device must be a real device, not meta (the cache holds data)")
        self.n_rep = n_q_heads // n_kv_heads
        try:
            self._k = torch.zeros(batch_size, n_kv_heads, capacity, head_dim, dtype=dtype, device=device)
        except (RuntimeError, AssertionError) as e:
            raise ValueError(f"device {str(device)!r} cannot be used here: {e}") from None
        self._v = torch.zeros(batch_size, n_kv_heads, capacity, value_dim, dtype=dtype, device=device)
        self._gp = torch.zeros(batch_size, n_q_heads, capacity, dtype=dtype, device=device)
        self._valid: Optional[torch.Tensor] = None
        self._len = 0
        self._recording = False          # a step has recorded gradients: update out of place from now on
        self.gate_total = torch.zeros(batch_size, n_q_heads, dtype=dtype, device=device)

    # -- storage ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    @property
    def dtype(self):
        return self._k.dtype

    @property
    def batch_size(self) -> int:
        return self._k.shape[0]

    @property
    def device(self):
        return self._k.device

    @property
    def capacity(self) -> int:
        """Slots allocated along t (grows by doubling)."""
        return min(self._k.shape[2], self._v.shape[2], self._gp.shape[2])

    @property
    def keys(self) -> torch.Tensor:
        return self._k[:, :, :self._len]

    @keys.setter
    def keys(self, value: torch.Tensor) -> None:
        self._k, self._len = value.clone(), value.shape[2]

    @property
    def values(self) -> torch.Tensor:
        return self._v[:, :, :self._len]

    @values.setter
    def values(self, value: torch.Tensor) -> None:
        self._v = value.clone()

    @property
    def gate_prefix(self) -> torch.Tensor:
        return self._gp[:, :, :self._len]

    @gate_prefix.setter
    def gate_prefix(self, value: torch.Tensor) -> None:
        self._gp = value.clone()

    @property
    def valid(self) -> Optional[torch.Tensor]:
        return None if self._valid is None else self._valid[:, :self._len]

    @valid.setter
    def valid(self, value: Optional[torch.Tensor]) -> None:
        self._valid = None if value is None else value.to(torch.bool).clone()

    def _records(self, *xs) -> bool:
        """Whether this update must be out of place (autograd records it, or recorded an earlier one)."""
        if torch.is_grad_enabled() and (self._recording or any(x is not None and x.requires_grad for x in xs)):
            self._recording = True
        return self._recording and torch.is_grad_enabled()

    def _reserve(self, n: int) -> None:
        """Make room for ``n`` slots, doubling the allocation (amortised O(1) per appended token)."""
        if n <= self.capacity:
            return
        new = max(n, 2 * self.capacity, 16)

        def grow(buf, dim):
            shape = list(buf.shape)
            shape[dim] = new
            out = buf.new_zeros(shape)
            out.narrow(dim, 0, self._len).copy_(buf.narrow(dim, 0, self._len))
            return out
        self._k, self._v, self._gp = grow(self._k, 2), grow(self._v, 2), grow(self._gp, 2)
        if self._valid is not None:
            self._valid = grow(self._valid, 1)

    def select(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (a 1-D int64 tensor, values in ``[0, batch_size)``; beam search reorders
        the batch this way)."""
        _check_index(index, self.batch_size, self.device)
        self._k, self._v, self._gp = self._k[index], self._v[index], self._gp[index]
        self.gate_total = self.gate_total[index]
        if self._valid is not None:
            self._valid = self._valid[index]

    @classmethod
    def _from_prefix(cls, keys_end: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor], n_q_heads: int, *,
                    dtype, valid: Optional[torch.Tensor] = None) -> "PaTHCache":
        """A cache holding a processed prefix: keys ``[B, T, Hk, D]`` already moved to the prefix's end,
        values ``[B, T, Hk, Dv]``, log gates ``[B, T, Hq]`` or None, ``valid [B, T]`` or None."""
        B, T, Hk, D = keys_end.shape
        cache = cls(B, n_q_heads, Hk, D, v.shape[-1], dtype=dtype, device=keys_end.device, capacity=0)
        cache.keys = keys_end.to(dtype).transpose(1, 2)
        cache.values = v.to(dtype).transpose(1, 2)
        if g is not None:
            G = torch.cumsum(g.to(dtype), dim=1).transpose(1, 2)
            cache.gate_prefix = G
            if T:
                cache.gate_total = G[:, :, -1]
        else:
            cache.gate_prefix = torch.zeros(B, n_q_heads, T, dtype=dtype, device=keys_end.device)
        cache.valid = valid
        return cache

    # -- the three parts of a step ------------------------------------------------------------------
    def transform(self, w_t: torch.Tensor, beta_t: torch.Tensor) -> None:
        """Move every cached key across ``H_t``: ``k_j <- k_j - beta_t (w_t . k_j) w_t``.

        (A building block of :meth:`step`, which also checks values; this checks shapes and dtypes only.)"""
        self._check_parts((("w_t", w_t), ("beta_t", beta_t)))
        self._transform(w_t, beta_t)

    def _transform(self, w_t: torch.Tensor, beta_t: torch.Tensor) -> None:
        w_t, beta_t = w_t.to(self.dtype), beta_t.to(self.dtype)
        keys = self.keys
        proj = torch.einsum("bhtd,bhd->bht", keys, w_t)
        update = beta_t[..., None, None] * proj[..., None] * w_t[:, :, None, :]
        if self._records(w_t, beta_t, keys):
            self._k = keys - update                            # out of place: autograd keeps its inputs
        else:
            keys.sub_(update)                                  # in place, in the preallocated storage

    def append(self, k_t: torch.Tensor, v_t: torch.Tensor, g_t: Optional[torch.Tensor] = None,
               valid_t: Optional[torch.Tensor] = None) -> None:
        """Append an untransformed key and its value (and the gate, which extends the running sum).
        ``valid_t [B]`` bool marks padding (False) that later queries must not attend to. (A building block
        of :meth:`step`; shapes and dtypes are checked, values are not.)"""
        self._check_parts((("k_t", k_t), ("v_t", v_t), ("g_t", g_t)), valid_t)
        self._append(k_t, v_t, g_t, valid_t)

    def _append(self, k_t, v_t, g_t, valid_t) -> None:
        if g_t is not None:
            self.gate_total = self.gate_total + g_t.to(self.dtype)
        t = self._len
        if valid_t is not None and self._valid is None:       # first padding: every earlier slot is real
            self._valid = torch.ones(self._k.shape[0], self._k.shape[2], dtype=torch.bool, device=self.device)
        if self._records(k_t, v_t, g_t, self._k, self._v, self.gate_total):
            self._k = torch.cat([self.keys, k_t.to(self.dtype)[:, :, None]], dim=2)
            self._v = torch.cat([self.values, v_t.to(self.dtype)[:, :, None]], dim=2)
            self._gp = torch.cat([self.gate_prefix, self.gate_total[:, :, None]], dim=2)
            if self._valid is not None:
                new = valid_t if valid_t is not None else torch.ones_like(self._valid[:, 0])
                self._valid = torch.cat([self._valid[:, :t], new[:, None]], dim=1)
        else:
            self._reserve(t + 1)
            self._k[:, :, t] = k_t
            self._v[:, :, t] = v_t
            self._gp[:, :, t] = self.gate_total
            if self._valid is not None:
                self._valid[:, t] = True if valid_t is None else valid_t
        self._len = t + 1

    def attend(self, q_t: torch.Tensor, scale: float) -> torch.Tensor:
        """Softmax attention of ``q_t`` ``[B, Hq, D]`` over the cache; returns ``[B, Hq, Dv]``. (A building
        block of :meth:`step`; shapes, dtypes and the scale are checked, values are not.)"""
        self._check_parts((("q_t", q_t),))
        return self._attend(q_t, check_scale(scale, self._k.shape[-1]))

    def _attend(self, q_t: torch.Tensor, scale: float) -> torch.Tensor:
        self._records(q_t)
        keys = self.keys.repeat_interleave(self.n_rep, dim=1) if self.n_rep > 1 else self.keys
        values = self.values.repeat_interleave(self.n_rep, dim=1) if self.n_rep > 1 else self.values
        logits = scale * torch.einsum("bhd,bhtd->bht", q_t.to(self.dtype), keys)
        logits = logits + self.gate_total[..., None] - self.gate_prefix
        valid = self.valid
        if valid is not None:           # padding gets no weight (the finite minimum keeps all-padding rows finite)
            logits = logits.masked_fill(~valid[:, None, :], torch.finfo(logits.dtype).min)
        return torch.einsum("bht,bhtd->bhd", torch.softmax(logits, dim=-1), values)

    def _check_step(self, q_t, k_t, v_t, w_t, beta_t, g_t, valid_t, check_values):
        self._check_parts((("q_t", q_t), ("k_t", k_t), ("v_t", v_t), ("w_t", w_t), ("beta_t", beta_t), ("g_t", g_t)),
                          valid_t)
        if check_values:
            check_step_values(q_t, k_t, v_t, w_t, beta_t, g_t)

    def _check_parts(self, args, valid_t=None) -> None:
        """Type, dtype, device and shape of the named per-token inputs ``args`` ((name, tensor) pairs;
        ``g_t`` may be None) and of ``valid_t`` (None allowed)."""
        B, Hk, _, D = self._k.shape
        Hq = Hk * self.n_rep
        expected = {"q_t": (B, Hq, D), "k_t": (B, Hk, D), "v_t": (B, Hk, self._v.shape[-1]),
                    "w_t": (B, Hk, D), "beta_t": (B, Hk), "g_t": (B, Hq)}
        layout = {"q_t": "[B, Hq, D]", "k_t": "[B, Hk, D]", "v_t": "[B, Hk, Dv]", "w_t": "[B, Hk, D]",
                  "beta_t": "[B, Hk]", "g_t": "[B, Hq]"}
        for name, x in args:
            if x is None and name == "g_t":
                continue
            check_tensor(x, name, dtypes=PARAM_DTYPES if name in ("w_t", "beta_t", "g_t") else
                         (torch.float16, torch.bfloat16, torch.float32, torch.float64), finite=False)
            if x.device != self.device:
                raise ValueError(f"{name} must be on the cache's device ({self.device}), got {x.device}")
            if x.dtype == torch.float64 and self.dtype != torch.float64:
                raise TypeError(f"{name} is float64 but the cache is {dtype_name(self.dtype)}: it would be "
                                "rounded; create the cache with dtype=torch.float64 (or pass float32)")
            if tuple(x.shape) != expected[name]:
                extra = ""
                if x.dim() >= 1 and x.shape[0] != B:
                    extra = f" (the cache holds batch size {B}: is it a state from another batch?)"
                raise ValueError(f"{name} must have shape {expected[name]} = {layout[name]}, "
                                 f"got {tuple(x.shape)}{extra}")
        if valid_t is not None:
            check_tensor(valid_t, "valid_t", ndim=1, dtypes=(torch.bool,), finite=False)
            if valid_t.device != self.device:
                raise ValueError(f"valid_t must be on the cache's device ({self.device}), got {valid_t.device}")
            if tuple(valid_t.shape) != (B,):
                raise ValueError(f"valid_t must have shape ({B},) = [B], got {tuple(valid_t.shape)}")

    def step(self, q_t, k_t, v_t, w_t, beta_t, g_t=None, *, scale=None, valid_t=None,
             check_values: bool = True) -> torch.Tensor:
        """One decoding step: transform the cache by ``H_t``, append ``k_t``, attend with ``q_t``.

        Args:
            q_t: ``[B, Hq, D]``.
            k_t, w_t: ``[B, Hk, D]``; w_t float32 or float64.
            v_t: ``[B, Hk, Dv]``.
            beta_t: ``[B, Hk]``, float32 or float64.
            g_t: ``[B, Hq]`` (float32 or float64) or None.
            valid_t: optional ``[B]`` bool; False marks a padding token in that row: it transforms nothing
                (beta 0), adds no gate, and is never attended to (its own output is unspecified).
            check_values: also check values (finite, beta_t in [0, 2], unit w_t, g_t <= 0); shapes,
                dtypes and devices always are. Everything is checked before the cache changes.

        Returns:
            ``[B, Hq, Dv]`` in the cache's dtype.
        """
        check_bool(check_values, "check_values")
        self._check_step(q_t, k_t, v_t, w_t, beta_t, g_t, valid_t, check_values)
        scale = check_scale(scale, self._k.shape[-1])
        if valid_t is not None:
            beta_t = torch.where(valid_t[:, None], beta_t, torch.zeros_like(beta_t))
            g_t = None if g_t is None else torch.where(valid_t[:, None], g_t, torch.zeros_like(g_t))
        self._transform(w_t, beta_t)                       # everything was checked above
        self._append(k_t, v_t, g_t, valid_t)
        return self._attend(q_t, scale)


def keys_to_end(k: torch.Tensor, w: torch.Tensor, beta: torch.Tensor, *, block_size: int = 64,
                check_values: bool = True) -> torch.Tensor:
    """Every key moved to the end of the sequence: ``k_j -> H_{T-1} ... H_{j+1} k_j``.

    Linear in T: each block's keys go to the block's end with the UT transform, then across the
    later blocks with the suffix product ``S_c = P_{last} ... P_{c+1}`` of ``D x D`` block matrices,
    built right to left (``S_{c-1} = S_c P_c``).

    Args:
        k, w: ``[B, T, H, D]`` (k any float dtype, w float32/float64).
        beta: ``[B, T, H]``.
        check_values: also check values (finite, beta in [0, 2], unit w); shapes and dtypes always are.

    Returns:
        ``[B, T, H, D]`` in the compute dtype (float64 for float64 k, else float32).
    """
    check_block_size(block_size)
    check_bool(check_values, "check_values")
    check_tensor(k, "k", ndim=4, finite=False)
    B, T, H, D = k.shape
    if D == 0:
        raise ValueError("k must have a positive head dimension")
    check_path_params(k, k, w, beta, None, check_values=check_values)
    if check_values:
        check_finite(k, "k")
    dt = _compute_dtype(k)
    kh, wh, bh = k.to(dt).transpose(1, 2), w.to(dt).transpose(1, 2), beta.to(dt).transpose(1, 2)
    if T == 0:
        return kh.transpose(1, 2).clone()
    S = torch.eye(D, dtype=dt, device=k.device).expand(B, H, D, D)
    out = []
    for s in reversed(range(0, T, block_size)):
        e = min(s + block_size, T)
        Wc, bc = wh[:, :, s:e], bh[:, :, s:e]
        Tc = _ut_transform(Wc, bc)
        K_end = _boundary_adjusted_keys(kh[:, :, s:e], Wc, Tc)   # rows (H_end ... H_{r+1} k_r)^T
        out.append(K_end @ S.transpose(-1, -2))                   # rows (S k)^T
        S = S @ _block_product(Wc, bc, Tc)
    return torch.cat(out[::-1], dim=2).transpose(1, 2)


def prefill(q, k, v, w, beta, g=None, *, scale=None, block_size: int = 64, check_values: bool = True):
    """Run a prompt in parallel and return ``(outputs [B, T, Hq, Dv], cache)`` ready for decoding.

    The cache computes in float64 for float64 q, else float32. T = 0 gives empty outputs and an empty cache.
    ``check_values``: also check values (finite, beta in [0, 2], unit w, g <= 0); shapes and dtypes always.
    """
    check_bool(check_values, "check_values")
    B, T, Hq, Hk, D = check_qkv(q, k, v, finite=check_values)
    check_path_params(q, k, w, beta, g, check_values=check_values)
    check_block_size(block_size)
    scale = check_scale(scale, D)
    # everything is checked: skip the second round of value checks (device syncs)
    o = blockwise_path_attention(q, k, v, w, beta, g, scale=scale, block_size=block_size, check_values=False)
    dt = _compute_dtype(q)
    k_end = keys_to_end(k, w, beta, block_size=block_size, check_values=False)
    return o, PaTHCache._from_prefix(k_end, v, g, Hq, dtype=dt)


def decode_path_attention(q, k, v, w, beta, g=None, *, scale=None) -> torch.Tensor:
    """PaTH attention computed token by token through a :class:`PaTHCache`.

    Same arguments and result as :func:`path_lib.path_attention`: ``[B, T, Hq, Dv]``
    (computed in float64 for float64 q, else float32, like it).
    """
    B, T, Hq, Hk, D = check_qkv(q, k, v)
    check_path_params(q, k, w, beta, g)
    scale = check_scale(scale, D)
    dt = _compute_dtype(q)
    cache = PaTHCache(B, Hq, Hk, D, v.shape[-1], dtype=dt, device=q.device)
    w, beta = w.to(dt), beta.to(dt)          # as path_attention: parameters in the compute dtype
    g = None if g is None else g.to(dt)
    outs = [cache.step(q[:, t], k[:, t], v[:, t], w[:, t], beta[:, t], None if g is None else g[:, t],
                       scale=scale, check_values=False) for t in range(T)]
    if not outs:
        return q.new_zeros(B, 0, Hq, v.shape[-1])
    return torch.stack(outs, dim=1).to(q.dtype)
