"""A Triton decoding path for PaTH attention: one query per step against a cache of transformed keys.

    from path_lib.kernels.decode import TritonPaTHCache
    cache = TritonPaTHCache.from_prefix(keys_end, v, g, n_q_heads=Hq)    # after a parallel prefill
    o_t = cache.step(q_t, k_t, v_t, w_t, beta_t, g_t)                     # [B, Hq, Dv], q_t's dtype

Per-token shapes are those of :class:`path_lib.decoding.PaTHCache`: q_t ``[B, Hq, D]``; k_t, w_t
``[B, Hk, D]``; v_t ``[B, Hk, Dv]``; beta_t ``[B, Hk]``; g_t ``[B, Hq]`` or None (w, beta, g float32).

Deferred key updates
--------------------
The logit of query t against key j is ``q_t^T H_t ... H_{j+1} k_j``. :class:`path_lib.decoding.PaTHCache`
keeps every cached key moved to the current position, so each step reads *and rewrites* the whole key
cache. Here the cache holds keys moved to an older position ``t0`` (the last *flush*) and the transforms
since then, ``H_{t0+1} ... H_t`` (at most ``flush_every``), wait in a small buffer. Because every
``H_s`` is symmetric, ``q_t^T H_t ... H_{t0+1} = (H_{t0+1} ... H_t q_t)^T``: one step moves the *query*
back across the pending transforms (``O(m D)`` work, ``m`` of them) and attends to the stored keys with
it, reading them only. The keys appended since the flush are met on the way: key ``s`` is scored with
the query moved back to ``s``. Every ``flush_every`` steps one pass applies the pending transforms to
every stored key and empties the buffer. Per step and head the cache traffic is then one read of the
keys and values, as for ordinary attention, plus a read and a write of the keys every
``flush_every`` steps.

Precision: the keys are rewritten at every flush, ``T / flush_every`` times over ``T`` steps, and
rounding errors of the store accumulate (they do not decay when the transforms are reflections), so the
key store is float32 by default; the values, never rewritten, stay in the input dtype.

Kernels: ``_decode_attend_kernel`` (grid: batch x key head, splits of the cache length: one program
moves the query across the pending transforms, attends to its split of the stored keys and, on split 0,
to the keys since the flush, writing unnormalised partial results), ``_decode_combine_kernel`` (per
query head: merges the splits by their maxima and sums) and ``_decode_flush_kernel`` (applies the
pending transforms to the stored keys). Runs on CUDA, or on the CPU under ``TRITON_INTERPRET=1``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from path_lib.validation import (check_bool, check_finite, check_int, check_log_gate, check_scale, check_step_values,
                                 check_tensor)

from ._config import _interpret

__all__ = ["TritonPaTHCache", "DecodeConfig", "DEFAULT_CONFIG", "KEY_DTYPES"]

#: dtypes the key store can have (float32 by default; bfloat16 only to measure what it costs)
KEY_DTYPES = (torch.float32, torch.bfloat16)
_INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_F32, _BOOL = (torch.float32,), (torch.bool,)


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """Launch configuration of a decode step.

    Attributes:
        tile: the most elements of one program's ``[query heads, keys, D]`` product per loop iteration
            (the block of keys is ``tile / (query heads per key head, padded to a power of two) / D``,
            16 at least).
        num_stages: software-pipelining depth of the loop over key blocks.
        programs_per_sm: the splits of the cache length are chosen so that about this many programs
            run per multiprocessor (never more than one split per two key blocks).
        num_warps: warps per program.
    """
    tile: int = 4096
    num_stages: int = 2
    programs_per_sm: int = 8
    num_warps: int = 4

    def __post_init__(self):
        for field in dataclasses.fields(self):
            check_int(getattr(self, field.name), field.name, minimum=1)


#: the configuration a cache uses unless given one: the one ``benchmarks/bench_decode.py --tune`` chose on
#: an H200 (``benchmarks/results/bench_decode.json``, its ``config``; a test keeps the two equal)
DEFAULT_CONFIG = DecodeConfig(tile=8192, num_stages=1, programs_per_sm=4, num_warps=4)


@triton.jit(do_not_specialize=["n_old", "n_pend", "chunk", "cap", "n_splits"])
def _decode_attend_kernel(K, V, GP, VAL, Q, KT, VT, WT, BT, GT, PW, PB, OP, MP, LP,
                          n_old, n_pend, chunk, cap, M, scale, Hk, Hq, n_splits,
                          R: tl.constexpr, R_PAD: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                          BLOCK_N: tl.constexpr, HAS_GATE: tl.constexpr, HAS_VALID: tl.constexpr):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    b = pid // Hk
    hk = pid % Hk
    r = tl.arange(0, R_PAD)
    rmask = r < R
    hq = hk * R + r
    d = tl.arange(0, D)
    dv = tl.arange(0, DV)
    q = tl.load(Q + (b * Hq + hq)[:, None] * D + d[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
    if HAS_GATE:
        gt = tl.load(GT + b * Hq + hq, mask=rmask, other=0.0)
    m_i = tl.full([R_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([R_PAD], tl.float32)
    acc = tl.zeros([R_PAD, DV], tl.float32)
    slot_t = n_old + n_pend - 1                         # the current token's slot (its key is not stored yet)
    beta_t = tl.load(BT + b * Hk + hk)
    if HAS_VALID:
        beta_t = tl.where(tl.load(VAL + b * cap + slot_t) != 0, beta_t, 0.0)
    w_t = tl.load(WT + (b * Hk + hk) * D + d)
    # the current key, scored by q itself (no transform lies between them), on split 0 only
    if split == 0:
        k_t = tl.load(KT + (b * Hk + hk) * D + d).to(tl.float32)
        v_t = tl.load(VT + (b * Hk + hk) * DV + dv).to(tl.float32)
        tl.store(K + ((b * Hk + hk) * cap + slot_t) * D + d, k_t.to(K.dtype.element_ty))
        tl.store(V + ((b * Hk + hk) * cap + slot_t) * DV + dv, v_t.to(V.dtype.element_ty))
        tl.store(PW + ((b * Hk + hk) * M + n_pend - 1) * D + d, w_t)
        tl.store(PB + (b * Hk + hk) * M + n_pend - 1, beta_t)
        s = tl.sum(q * k_t[None, :], 1) * scale
        if HAS_GATE:
            tl.store(GP + (b * Hq + hq) * cap + slot_t, gt, mask=rmask)     # G_t - G_t = 0 for this key
        if HAS_VALID:
            s = tl.where(tl.load(VAL + b * cap + slot_t) != 0, s, float("-inf"))
        s = tl.where(rmask, s, float("-inf"))
        m_new = tl.maximum(m_i, s)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe)
        l_i = l_i * tl.exp(m_i - m_safe) + p
        acc = acc * tl.exp(m_i - m_safe)[:, None] + p[:, None] * v_t[None, :]
        m_i = m_new
    # move q back across H_t, then across the pending transforms, scoring the keys met on the way
    q = q - (beta_t * tl.sum(q * w_t[None, :], 1))[:, None] * w_t[None, :]
    for i in range(1, n_pend):
        pend = n_pend - 1 - i                           # slot n_old + pend, its transform H_{n_old + pend}
        slot = n_old + pend
        if split == 0:
            k_s = tl.load(K + ((b * Hk + hk) * cap + slot) * D + d).to(tl.float32)
            s = tl.sum(q * k_s[None, :], 1) * scale
            if HAS_GATE:
                s += gt - tl.load(GP + (b * Hq + hq) * cap + slot, mask=rmask, other=0.0)
            if HAS_VALID:
                s = tl.where(tl.load(VAL + b * cap + slot) != 0, s, float("-inf"))
            s = tl.where(rmask, s, float("-inf"))
            v_s = tl.load(V + ((b * Hk + hk) * cap + slot) * DV + dv).to(tl.float32)
            m_new = tl.maximum(m_i, s)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe)
            l_i = l_i * tl.exp(m_i - m_safe) + p
            acc = acc * tl.exp(m_i - m_safe)[:, None] + p[:, None] * v_s[None, :]
            m_i = m_new
        w_s = tl.load(PW + ((b * Hk + hk) * M + pend) * D + d)
        beta_s = tl.load(PB + (b * Hk + hk) * M + pend)
        q = q - (beta_s * tl.sum(q * w_s[None, :], 1))[:, None] * w_s[None, :]
    # the stored keys of this split, read only. Every key lane keeps its own running maximum, sum and
    # weighted values (no reduction across keys inside the loop); the lanes are merged once at the end.
    start = split * chunk
    end = tl.minimum(start + chunk, n_old)
    if R_PAD == 1:                                      # one query head per key head: 2-D tiles only
        q1 = tl.sum(q, 0)
        m2 = tl.full([BLOCK_N], float("-inf"), tl.float32)
        l2 = tl.zeros([BLOCK_N], tl.float32)
        acc2 = tl.zeros([BLOCK_N, DV], tl.float32)
        for n0 in range(start, end, BLOCK_N):
            idx = n0 + tl.arange(0, BLOCK_N)
            kmask = idx < end
            k = tl.load(K + ((b * Hk + hk) * cap + idx)[:, None] * D + d[None, :], mask=kmask[:, None],
                        other=0.0).to(tl.float32)
            s = tl.sum(k * q1[None, :], 1) * scale
            if HAS_GATE:
                s += tl.sum(gt, 0) - tl.load(GP + (b * Hq + hk) * cap + idx, mask=kmask, other=0.0)
            ok = kmask
            if HAS_VALID:
                ok = ok & (tl.load(VAL + b * cap + idx, mask=kmask, other=0) != 0)
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m2, s)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe)
            alpha = tl.exp(m2 - m_safe)
            v = tl.load(V + ((b * Hk + hk) * cap + idx)[:, None] * DV + dv[None, :], mask=kmask[:, None],
                        other=0.0).to(tl.float32)
            l2 = l2 * alpha + p
            acc2 = acc2 * alpha[:, None] + p[:, None] * v
            m2 = m_new
        m_old = tl.max(m_i, 0)
        m_top = tl.maximum(m_old, tl.max(m2, 0))
        m_safe = tl.where(m_top == float("-inf"), 0.0, m_top)
        lane = tl.exp(m2 - m_safe)
        alpha = tl.exp(m_old - m_safe)
        l_i = l_i * alpha + tl.sum(l2 * lane, 0)
        acc = acc * alpha + tl.sum(acc2 * lane[:, None], 0)[None, :]
        m_i = tl.zeros([R_PAD], tl.float32) + m_top
    else:
        m3 = tl.full([R_PAD, BLOCK_N], float("-inf"), tl.float32)
        l3 = tl.zeros([R_PAD, BLOCK_N], tl.float32)
        acc3 = tl.zeros([R_PAD, BLOCK_N, DV], tl.float32)
        for n0 in range(start, end, BLOCK_N):
            idx = n0 + tl.arange(0, BLOCK_N)
            kmask = idx < end
            k = tl.load(K + ((b * Hk + hk) * cap + idx)[:, None] * D + d[None, :], mask=kmask[:, None],
                        other=0.0).to(tl.float32)
            s = tl.sum(q[:, None, :] * k[None, :, :], 2) * scale                 # [R_PAD, BLOCK_N]
            if HAS_GATE:
                gp = tl.load(GP + (b * Hq + hq)[:, None] * cap + idx[None, :], mask=rmask[:, None] & kmask[None, :],
                             other=0.0)
                s += gt[:, None] - gp
            ok = rmask[:, None] & kmask[None, :]
            if HAS_VALID:
                ok = ok & (tl.load(VAL + b * cap + idx, mask=kmask, other=0) != 0)[None, :]
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m3, s)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe)
            alpha = tl.exp(m3 - m_safe)
            v = tl.load(V + ((b * Hk + hk) * cap + idx)[:, None] * DV + dv[None, :], mask=kmask[:, None],
                        other=0.0).to(tl.float32)
            l3 = l3 * alpha + p
            acc3 = acc3 * alpha[:, :, None] + p[:, :, None] * v[None, :, :]
            m3 = m_new
        m_l = tl.max(m3, 1)                                 # merge the lanes, then with the recent keys
        m_new = tl.maximum(m_i, m_l)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        lane = tl.exp(m3 - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(l3 * lane, 1)
        acc = acc * alpha[:, None] + tl.sum(acc3 * lane[:, :, None], 1)
        m_i = m_new
    part = (b * Hq + hq) * n_splits + split
    tl.store(OP + part[:, None] * DV + dv[None, :], acc, mask=rmask[:, None])
    tl.store(MP + part, m_i, mask=rmask)
    tl.store(LP + part, l_i, mask=rmask)


@triton.jit(do_not_specialize=["n_splits"])
def _decode_combine_kernel(OP, MP, LP, O, n_splits, S_PAD: tl.constexpr, DV: tl.constexpr):
    row = tl.program_id(0)                              # b * Hq + hq
    sp = tl.arange(0, S_PAD)
    smask = sp < n_splits
    dv = tl.arange(0, DV)
    m = tl.load(MP + row * n_splits + sp, mask=smask, other=float("-inf"))
    l = tl.load(LP + row * n_splits + sp, mask=smask, other=0.0)
    acc = tl.load(OP + (row * n_splits + sp)[:, None] * DV + dv[None, :], mask=smask[:, None], other=0.0)
    top = tl.max(m, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    scale = tl.exp(m - top)
    den = tl.sum(l * scale, 0)
    num = tl.sum(acc * scale[:, None], 0)
    o = tl.where(den > 0, num / tl.where(den > 0, den, 1.0), 0.0)
    tl.store(O + row * DV + dv, o.to(O.dtype.element_ty))


@triton.jit(do_not_specialize=["n_old", "n_pend", "n_total", "cap"])
def _decode_flush_kernel(K, PW, PB, n_old, n_pend, n_total, cap, M, Hk,
                         D: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    blk = tl.program_id(1)
    b = pid // Hk
    hk = pid % Hk
    d = tl.arange(0, D)
    idx = blk * BLOCK_N + tl.arange(0, BLOCK_N)
    kmask = idx < n_total
    ptr = K + ((b * Hk + hk) * cap + idx)[:, None] * D + d[None, :]
    k = tl.load(ptr, mask=kmask[:, None], other=0.0).to(tl.float32)
    for pend in range(0, n_pend):
        w = tl.load(PW + ((b * Hk + hk) * M + pend) * D + d)
        beta = tl.load(PB + (b * Hk + hk) * M + pend)
        crossed = idx < n_old + pend                    # H_s moves only the keys before position s
        proj = tl.where(crossed, beta * tl.sum(k * w[None, :], 1), 0.0)
        k = k - proj[:, None] * w[None, :]
    tl.store(ptr, k.to(K.dtype.element_ty), mask=kmask[:, None])


def _check(x, name: str, shape, dtypes=_INPUT_DTYPES) -> None:
    check_tensor(x, name, ndim=len(shape), dtypes=dtypes, finite=False)
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(x.shape)}")


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class TritonPaTHCache:
    """A PaTH decoding cache on the GPU with deferred key updates (module docstring).

    Args:
        batch_size, n_q_heads, n_kv_heads, head_dim, value_dim: the cache's sizes (``value_dim``
            defaults to ``head_dim``; head and value dims are powers of two from 16 to 256).
        value_dtype: dtype of the stored values and of the step's output (bfloat16, float16, float32).
        key_dtype: dtype of the key store, float32 (default) or bfloat16 (to measure its error only).
        device: a CUDA device (or the CPU under ``TRITON_INTERPRET=1``, float32 only).
        capacity: initial slots along time (grows by doubling).
        flush_every: the most transforms that wait before the keys are rewritten (1 rewrites them at
            every step, as :class:`path_lib.decoding.PaTHCache` does).
        splits: how many programs share one head's cache (None: from ``config.programs_per_sm``).
        config: a :class:`DecodeConfig` (default :data:`DEFAULT_CONFIG`).

    A step runs no host synchronisation: lengths are Python integers kept on the host. The class
    implements the layers' cache protocol, :class:`path_lib.decoding.DecodingCache` (``len``,
    ``batch_size``, ``device``, ``valid``, ``select``, ``step``), structurally: nothing here imports it.
    """

    def __init__(self, batch_size: int, n_q_heads: int, n_kv_heads: int, head_dim: int,
                 value_dim: Optional[int] = None, *, value_dtype=torch.bfloat16, key_dtype=torch.float32,
                 device="cuda", capacity: int = 256, flush_every: int = 64, splits: Optional[int] = None,
                 config: Optional[DecodeConfig] = None):
        check_int(batch_size, "batch_size", minimum=1)
        check_int(n_q_heads, "n_q_heads", minimum=1)
        check_int(n_kv_heads, "n_kv_heads", minimum=1)
        value_dim = head_dim if value_dim is None else value_dim
        for name, x in (("head_dim", head_dim), ("value_dim", value_dim)):
            check_int(x, name, minimum=16)
            if x & (x - 1) or x > 256:
                raise ValueError(f"{name} must be a power of two from 16 to 256, got {x}")
        check_int(capacity, "capacity", minimum=1)
        check_int(flush_every, "flush_every", minimum=1)
        if splits is not None:
            check_int(splits, "splits", minimum=1)
        if n_q_heads % n_kv_heads:
            raise ValueError(f"n_q_heads ({n_q_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        if key_dtype not in KEY_DTYPES:
            raise TypeError(f"key_dtype must be float32 or bfloat16, got {key_dtype}")
        if value_dtype not in _INPUT_DTYPES:
            raise TypeError(f"value_dtype must be float16, bfloat16 or float32, got {value_dtype}")
        if config is not None and not isinstance(config, DecodeConfig):
            raise TypeError(f"config must be a path_lib.kernels.decode.DecodeConfig, got {type(config).__name__}")
        self.config = DEFAULT_CONFIG if config is None else config
        if not isinstance(device, (str, int, torch.device)) or isinstance(device, bool):
            raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
        try:
            device = torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"device {device!r} is not a device: {e}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r} is CUDA, and CUDA is not available here")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.type != "cuda" and not (device.type == "cpu" and _interpret()):
            raise ValueError(f"device must be a CUDA device (or the CPU under TRITON_INTERPRET=1), got {device}")
        if device.type == "cpu" and (value_dtype != torch.float32 or key_dtype != torch.float32):
            raise TypeError("on the CPU (TRITON_INTERPRET=1) the decode kernels run in float32 only")
        self.B, self.Hq, self.Hk, self.D, self.Dv = batch_size, n_q_heads, n_kv_heads, head_dim, value_dim
        self.n_rep = n_q_heads // n_kv_heads
        self.flush_every, self.splits = flush_every, splits
        self.key_dtype, self.value_dtype, self.device_ = key_dtype, value_dtype, device
        self._n_old = 0                     # slots holding keys moved to position n_old - 1
        self._n_pend = 0                    # transforms waiting (slots n_old ... n_old + n_pend - 1)
        self._cap = 0
        # the stores (keys, values, gate totals, valid flags), allocated by _alloc
        self._k: torch.Tensor
        self._v: torch.Tensor
        self._gp: torch.Tensor
        self._valid: torch.Tensor
        self._alloc(capacity)
        self._pw = torch.zeros(batch_size, n_kv_heads, flush_every, head_dim, dtype=torch.float32, device=device)
        self._pb = torch.zeros(batch_size, n_kv_heads, flush_every, dtype=torch.float32, device=device)
        self.gate_total = torch.zeros(batch_size, n_q_heads, dtype=torch.float32, device=device)
        self._has_gate: Optional[bool] = None
        self._padding = False               # some slot may hold padding: the kernel reads the valid store
        # the splits' partial results, reused from step to step
        self._parts: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None
        self._default_scale = check_scale(None, head_dim)
        self._sm = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4

    # -- storage ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n_old + self._n_pend

    @property
    def device(self) -> torch.device:
        return self.device_

    @property
    def capacity(self) -> int:
        return self._cap

    def _alloc(self, cap: int) -> None:
        n = len(self)
        k = torch.zeros(self.B, self.Hk, cap, self.D, dtype=self.key_dtype, device=self.device_)
        v = torch.zeros(self.B, self.Hk, cap, self.Dv, dtype=self.value_dtype, device=self.device_)
        gp = torch.zeros(self.B, self.Hq, cap, dtype=torch.float32, device=self.device_)
        valid = torch.ones(self.B, cap, dtype=torch.int8, device=self.device_)
        if n:                               # (at construction n is 0: no store yet)
            k[:, :, :n], v[:, :, :n], gp[:, :, :n], valid[:, :n] = (
                self._k[:, :, :n], self._v[:, :, :n], self._gp[:, :, :n], self._valid[:, :n])
        self._k, self._v, self._gp, self._valid, self._cap = k, v, gp, valid, cap

    @property
    def batch_size(self) -> int:
        return self.B

    @property
    def keys(self) -> torch.Tensor:
        """The cached keys moved to the current position, ``[B, Hk, t, D]`` float32 (computed: the
        store itself holds them at the last flush)."""
        k = self._k[:, :, :len(self)].float().clone()
        pos = torch.arange(len(self), device=self.device_)
        for p in range(self._n_pend):
            w, beta = self._pw[:, :, p], self._pb[:, :, p]
            proj = torch.einsum("bhtd,bhd->bht", k, w) * beta[..., None] * (pos < self._n_old + p)
            k = k - proj[..., None] * w[:, :, None, :]
        return k

    @property
    def valid(self) -> Optional[torch.Tensor]:
        """``[B, t]`` bool, False where a slot holds padding, or None when no padding was ever stored."""
        return self._valid[:, :len(self)].bool() if self._padding else None

    def select(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (a non-empty 1-D int64 tensor, values in ``[0, B)``), e.g. to reorder
        beams. Reads the index's range (one host sync) before anything changes."""
        check_tensor(index, "index", ndim=1, dtypes=(torch.int64, torch.int32), finite=False)
        if index.device != self.device_:
            raise ValueError(f"index must be on the cache's device ({self.device_}), got {index.device}")
        if index.numel() == 0:
            raise ValueError("index must keep at least one row (the cache needs batch size >= 1)")
        lo, hi = (int(x) for x in torch.aminmax(index))
        if lo < 0 or hi >= self.B:
            raise ValueError(f"index must lie in [0, {self.B}) (the cache's batch rows), got values in [{lo}, {hi}]")
        self._k, self._v, self._gp, self._valid = self._k[index], self._v[index], self._gp[index], self._valid[index]
        self._pw, self._pb, self.gate_total = self._pw[index], self._pb[index], self.gate_total[index]
        self._parts = None
        self.B = int(index.shape[0])

    @classmethod
    def from_prefix(cls, keys_end: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor] = None, *,
                    n_q_heads: int, valid: Optional[torch.Tensor] = None, check_values: bool = True,
                    **kwargs) -> "TritonPaTHCache":
        """A cache holding a prefilled prompt: ``keys_end [B, T, Hk, D]`` (keys moved to the prompt's end,
        e.g. by ``path_lib.kernels.transform_keys_to_end``), ``v [B, T, Hk, Dv]`` (float16, bfloat16 or
        float32), log gates ``g [B, T, Hq]`` float32 or None, ``valid [B, T]`` bool or None (False: padding,
        never attended to). ``kwargs`` as for the constructor (``value_dtype`` defaults to v's dtype;
        ``capacity``, at least T, to ``max(2 T, 256)``). ``check_values``: also check that keys, values and
        gates are finite and the gates <= 0 (a device sync; the layers pass False)."""
        check_bool(check_values, "check_values")
        check_tensor(keys_end, "keys_end", ndim=4, dtypes=_INPUT_DTYPES, finite=False)
        check_tensor(v, "v", ndim=4, dtypes=_INPUT_DTYPES, finite=False)
        B, T, Hk, D = keys_end.shape
        if v.shape[:3] != keys_end.shape[:3]:
            raise ValueError(f"v must have shape [B, T, Hk, Dv] with B, T, Hk = {tuple(keys_end.shape[:3])}, "
                             f"got {tuple(v.shape)}")
        check_int(n_q_heads, "n_q_heads", minimum=1)
        for name, x in (("v", v), ("g", g), ("valid", valid)):
            if x is not None and x.device != keys_end.device:
                raise ValueError(f"{name} must be on the device of keys_end ({keys_end.device}), got {x.device}")
        if g is not None:
            _check(g, "g", (B, T, n_q_heads), (torch.float32,))
        if valid is not None:
            _check(valid, "valid", (B, T), (torch.bool,))
        if "capacity" in kwargs:
            check_int(kwargs["capacity"], "capacity", minimum=1)
            if kwargs["capacity"] < T:
                raise ValueError(f"capacity must hold the prompt's T = {T} tokens, got {kwargs['capacity']}")
        if check_values:
            check_finite(keys_end, "keys_end")
            check_finite(v, "v")
            if g is not None:
                check_finite(g, "g")
                check_log_gate(g, "g")
        kwargs.setdefault("value_dtype", v.dtype)
        kwargs.setdefault("capacity", max(2 * T, 256))
        cache = cls(B, n_q_heads, Hk, D, v.shape[-1], device=keys_end.device, **kwargs)
        if T:
            cache._k[:, :, :T] = keys_end.transpose(1, 2)
            cache._v[:, :, :T] = v.transpose(1, 2)
            if g is not None:
                G = torch.cumsum(g.float(), dim=1).transpose(1, 2)
                cache._gp[:, :, :T] = G
                cache.gate_total = G[:, :, -1].contiguous()
            if valid is not None:
                cache._valid[:, :T] = valid.to(torch.int8)
                cache._padding = True
        cache._has_gate = None if T == 0 else g is not None
        cache._n_old = T
        return cache

    # -- a step -----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Apply the pending transforms to every stored key (the step does this every ``flush_every``)."""
        if self._n_pend == 0:
            return
        n, block = len(self), 64
        _decode_flush_kernel[(self.B * self.Hk, triton.cdiv(n, block))](
            self._k, self._pw, self._pb, self._n_old, self._n_pend, n, self._cap, self.flush_every, self.Hk,
            D=self.D, BLOCK_N=block, num_warps=4)
        self._n_old, self._n_pend = n, 0

    def _check_step(self, q_t, k_t, v_t, w_t, beta_t, g_t, valid_t):
        B, Hq, Hk, D, Dv = self.B, self.Hq, self.Hk, self.D, self.Dv
        dev = self.device_
        ok = lambda x, shape, dtypes: (isinstance(x, torch.Tensor) and x.device == dev and x.dtype in dtypes  # noqa: E731
                                       and x.shape == shape)
        if ((self._has_gate is None or (g_t is not None) == self._has_gate)
                and ok(q_t, (B, Hq, D), _INPUT_DTYPES) and ok(k_t, (B, Hk, D), _INPUT_DTYPES)
                and ok(v_t, (B, Hk, Dv), _INPUT_DTYPES) and ok(w_t, (B, Hk, D), _F32) and ok(beta_t, (B, Hk), _F32)
                and (g_t is None or ok(g_t, (B, Hq), _F32)) and (valid_t is None or ok(valid_t, (B,), _BOOL))):
            return                                          # the fast path: everything as expected
        for name, x, shape, dtypes in (("q_t", q_t, (B, Hq, D), _INPUT_DTYPES), ("k_t", k_t, (B, Hk, D), _INPUT_DTYPES),
                                       ("v_t", v_t, (B, Hk, Dv), _INPUT_DTYPES),
                                       ("w_t", w_t, (B, Hk, D), _F32), ("beta_t", beta_t, (B, Hk), _F32),
                                       ("g_t", g_t, (B, Hq), _F32), ("valid_t", valid_t, (B,), _BOOL)):
            if x is None and name in ("g_t", "valid_t"):
                continue
            _check(x, name, shape, dtypes)
            if x.device != self.device_:
                raise ValueError(f"{name} must be on the cache's device ({self.device_}), got {x.device}")
        has_gate = g_t is not None
        if self._has_gate is not None and has_gate != self._has_gate:
            raise ValueError("g_t must be given at every step or at none (the cache was "
                             + ("built with" if self._has_gate else "built without") + " a gate)")

    def step(self, q_t, k_t, v_t, w_t, beta_t, g_t=None, *, scale=None, valid_t=None,
             check_values: bool = True) -> torch.Tensor:
        """One decoding step: append ``k_t, v_t`` and ``H_t = I - beta_t w_t w_t^T``, attend with ``q_t``.

        Args: q_t ``[B, Hq, D]``; k_t, w_t ``[B, Hk, D]``; v_t ``[B, Hk, Dv]``; beta_t ``[B, Hk]``; g_t
        ``[B, Hq]`` or None; valid_t ``[B]`` bool or None (False: a padding token, which transforms
        nothing, adds no gate and is never attended to). Shapes, dtypes and devices are always
        checked; ``check_values`` also checks values (finite, beta_t in [0, 2], unit w_t, g_t <= 0), a
        device sync per step: the layers pass False. Everything is checked before the cache changes.
        Returns ``[B, Hq, Dv]`` in the cache's ``value_dtype``.
        """
        check_bool(check_values, "check_values")
        self._check_step(q_t, k_t, v_t, w_t, beta_t, g_t, valid_t)
        if check_values:
            check_step_values(q_t, k_t, v_t, w_t, beta_t, g_t)
        scale = self._default_scale if scale is None else check_scale(scale, self.D)
        if self._n_pend == self.flush_every:
            self.flush()
        slot = len(self)
        if slot + 1 > self._cap:
            self._alloc(max(2 * self._cap, slot + 1))
        if valid_t is not None:
            self._valid[:, slot] = valid_t
            self._padding = True
            if g_t is not None:
                g_t = torch.where(valid_t[:, None], g_t, torch.zeros_like(g_t))
        if g_t is not None:
            self.gate_total += g_t
        self._has_gate = g_t is not None
        self._n_pend += 1
        n_old = self._n_old
        cfg = self.config
        block = max(16, cfg.tile // (_pow2(self.n_rep) * self.D))
        splits = self.splits or max(1, min(triton.cdiv(n_old, 2 * block),
                                           triton.cdiv(cfg.programs_per_sm * self._sm, self.B * self.Hk)))
        chunk = triton.cdiv(triton.cdiv(max(n_old, 1), splits), block) * block
        dev = self.device_
        if self._parts is None or self._parts[0].shape[2] != splits:      # reused while the splits stay
            self._parts = (torch.empty(self.B, self.Hq, splits, self.Dv, dtype=torch.float32, device=dev),
                           torch.empty(self.B, self.Hq, splits, dtype=torch.float32, device=dev),
                           torch.empty(self.B, self.Hq, splits, dtype=torch.float32, device=dev))
        part_o, part_m, part_l = self._parts
        self.last_splits = splits
        _decode_attend_kernel[(self.B * self.Hk, splits)](
            self._k, self._v, self._gp, self._valid, q_t.contiguous(), k_t.contiguous(), v_t.contiguous(),
            w_t.contiguous(), beta_t.contiguous(), self.gate_total, self._pw, self._pb, part_o, part_m, part_l,
            n_old, self._n_pend, chunk, self._cap, self.flush_every, float(scale), self.Hk, self.Hq, splits,
            R=self.n_rep, R_PAD=_pow2(self.n_rep), D=self.D, DV=self.Dv, BLOCK_N=block,
            HAS_GATE=g_t is not None, HAS_VALID=self._padding, num_warps=cfg.num_warps,
            num_stages=cfg.num_stages)
        out = torch.empty(self.B, self.Hq, self.Dv, dtype=self.value_dtype, device=dev)
        _decode_combine_kernel[(self.B * self.Hq,)](part_o, part_m, part_l, out, splits,
                                                     S_PAD=_pow2(splits), DV=self.Dv, num_warps=1)
        return out
