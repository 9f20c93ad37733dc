"""Attention layers (PaTH, PaTH-FoX, RoPE, FoX, ALiBi, NoPE, SBA) with one interface, and their registry.

Every attention layer maps ``x [B, T, d_model] -> [B, T, d_model]`` and has a recurrent
``step(x_t [B, d_model], state) -> (y_t [B, d_model], state)`` for generation whose outputs equal the
parallel forward. ``state`` starts as ``None``.

PaTH's per-token parameters follow the paper and fla's layer (PATH_NOTES section 6):

    w_t    = L2norm_per_head(SiLU(CausalDepthwiseConv_3(LowRank(x_t))))
    beta_t = 2 * sigmoid(Linear(x_t))          one per key head, optionally clipped to beta_max < 2
    g_t    = logsigmoid(Linear(x_t))           one per query head (PaTH-FoX only)

Layers whose class sets ``uses_token_ids = True`` (the token-angle rotations of
:mod:`path_lib.nn.rotations`) also read the token ids: ``TinyLM`` hands them over as ``layer.token_ids``
(``[B, T]``, or ``[B, 1]`` in ``step``) for the duration of each call.

``ATTENTION_LAYERS`` maps a name to a layer factory; :func:`register_attention` adds one (the rotation
variants register themselves) and :class:`path_lib.nn.model.TinyLM` builds its layers from it.
"""
from __future__ import annotations

import warnings
from typing import Callable, Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..validation import check_bool, check_choice, check_int, check_number, check_tensor
from ..reference.attention import (alibi_slopes, apply_rope, fox_attention, path_attention, rope_attention,
                                   softmax_attention, alibi_attention)
from ..decoding import PaTHCache
from ..reference.sba import sba_attention, stick_breaking_weights

__all__ = [
    "AttentionLayer", "PaTHAttention", "NoPEAttention", "RoPEAttention", "ALiBiAttention",
    "FoXAttention", "SBAAttention", "ATTENTION_LAYERS", "make_attention", "register_attention", "BACKENDS",
]

BACKENDS = ("auto", "reference", "blockwise", "triton")


def _init_linear(layer: nn.Linear, std: float = 0.02) -> nn.Linear:
    nn.init.normal_(layer.weight, std=std)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def _param_dtype(x: torch.Tensor) -> torch.dtype:
    """w, beta and g are float32, or float64 when the model runs in float64 (for exact checks)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


_FALLBACK_WARNED = False


def _warn_fallback(reason: str) -> None:
    """Warn once per process that ``backend="auto"`` runs the blockwise PyTorch path on CUDA."""
    global _FALLBACK_WARNED
    if not _FALLBACK_WARNED:
        _FALLBACK_WARNED = True
        warnings.warn(f'PaTHAttention(backend="auto") on CUDA falls back to the blockwise PyTorch path: {reason}. '
                      'Pass backend="triton" to use the kernels anyway.', RuntimeWarning, stacklevel=3)


def _check_state(state, batch_size: int, name: str = "state") -> None:
    """A recurrent state must be None or a dict whose tensors (and key caches) hold ``batch_size`` rows.

    Shape checks only (no host sync). A state from another batch size is refused by name rather than
    failing later inside a concatenation."""
    if state is None:
        return
    if not isinstance(state, dict):
        raise TypeError(f"{name} must be None or the dict returned by a previous step, got {type(state).__name__}")
    for key, value in state.items():
        if isinstance(value, PaTHCache):
            value = value.keys
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] != batch_size:
            raise ValueError(f"{name} was built for batch size {value.shape[0]} ({name}[{key!r}] has shape "
                             f"{tuple(value.shape)}), but x_t has batch size {batch_size}; start a new state "
                             "(state=None) for a new batch")


def _check_x(x, d_model: int, name: str = "x", ndim: int = 3) -> None:
    check_tensor(x, name, ndim=ndim, finite=False)
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} must have last dimension d_model={d_model}, got {x.shape[-1]}")


class AttentionLayer(nn.Module):
    """Shared projections: q ``[.., Hq, Dh]``, k and v ``[.., Hk, Dh]`` (grouped-query heads), output."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: Optional[int] = None,
                 head_dim: Optional[int] = None):
        super().__init__()
        check_int(d_model, "d_model", minimum=1)
        check_int(n_heads, "n_heads", minimum=1)
        n_kv_heads = n_heads if n_kv_heads is None else check_int(n_kv_heads, "n_kv_heads", minimum=1)
        if head_dim is not None:
            check_int(head_dim, "head_dim", minimum=1)
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a positive multiple of n_kv_heads ({n_kv_heads})")
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads}) "
                                 "unless head_dim is given")
            head_dim = d_model // n_heads
        self.d_model, self.n_heads, self.n_kv_heads, self.head_dim = d_model, n_heads, n_kv_heads, head_dim
        self.q_proj = _init_linear(nn.Linear(d_model, n_heads * head_dim, bias=False))
        self.k_proj = _init_linear(nn.Linear(d_model, n_kv_heads * head_dim, bias=False))
        self.v_proj = _init_linear(nn.Linear(d_model, n_kv_heads * head_dim, bias=False))
        self.o_proj = _init_linear(nn.Linear(n_heads * head_dim, d_model, bias=False))

    def qkv(self, x: torch.Tensor):
        """``x [B, T, d_model]`` -> q ``[B, T, Hq, Dh]``, k, v ``[B, T, Hk, Dh]``."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        return q, k, v

    def out(self, o: torch.Tensor) -> torch.Tensor:
        """``o [B, T, Hq, Dh]`` -> ``[B, T, d_model]``."""
        return self.o_proj(o.reshape(*o.shape[:2], self.n_heads * self.head_dim))

    # Baselines decode with a plain growing KV cache and this layer's logit bias.
    def step(self, x_t: torch.Tensor, state: Optional[dict] = None):
        """One token: ``x_t [B, d_model]`` -> ``(y_t [B, d_model], state)``."""
        _check_x(x_t, self.d_model, "x_t", ndim=2)
        _check_state(state, x_t.shape[0])
        x = x_t[:, None]
        if state is None:
            state = {"x": x}
        else:
            state = {"x": torch.cat([state["x"], x], dim=1)}
        # Generic fallback for variants without a cache of their own: recompute the last position
        # from the cached inputs. Exact, but O(t^2) per token; the built-in layers override it.
        y = self.forward(state["x"])[:, -1]
        return y, state


class _CachedSoftmaxAttention(AttentionLayer):
    """Softmax attention whose ``step`` keeps a plain key-value cache (O(t D) per token and head).

    Subclasses say how a position changes the new query and key (``_position_qk``) and which bias
    the current query adds to the cached logits (``_cache_bias``).
    """

    def _position_qk(self, q, k, pos: int):
        return q, k

    def _cache_bias(self, x_t, state):
        return None

    def step(self, x_t: torch.Tensor, state: Optional[dict] = None):
        _check_x(x_t, self.d_model, "x_t", ndim=2)
        _check_state(state, x_t.shape[0])
        q, k, v = self.qkv(x_t[:, None])                     # [B, 1, H, Dh]
        pos = 0 if state is None else state["pos"]
        q, k = self._position_qk(q, k, pos)
        k, v = k[:, 0, :, None], v[:, 0, :, None]            # [B, Hk, 1, Dh]
        if state is None:
            state = {"pos": 0, "k": k, "v": v}
        else:
            state["k"], state["v"] = torch.cat([state["k"], k], 2), torch.cat([state["v"], v], 2)
        state["pos"] = pos + 1
        n_rep = self.n_heads // self.n_kv_heads
        keys, values = state["k"].repeat_interleave(n_rep, 1), state["v"].repeat_interleave(n_rep, 1)
        logits = self.head_dim ** -0.5 * torch.einsum("bhd,bhtd->bht", q[:, 0], keys)
        bias = self._cache_bias(x_t, state)
        if bias is not None:
            logits = logits + bias
        o = torch.einsum("bht,bhtd->bhd", torch.softmax(logits, dim=-1), values)
        return self.out(o[:, None])[:, 0], state


class NoPEAttention(_CachedSoftmaxAttention):
    """Causal softmax attention without position encoding."""

    def forward(self, x):
        _check_x(x, self.d_model)
        q, k, v = self.qkv(x)
        return self.out(softmax_attention(q, k, v))


class RoPEAttention(_CachedSoftmaxAttention):
    """Causal attention with rotary position embeddings on q and k."""

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, rope_base: float = 10000.0):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        self.rope_base = check_number(rope_base, "rope_base", positive=True)

    def forward(self, x):
        _check_x(x, self.d_model)
        q, k, v = self.qkv(x)
        return self.out(rope_attention(q, k, v, base=self.rope_base))

    def _position_qk(self, q, k, pos):
        return apply_rope(q, base=self.rope_base, offset=pos), apply_rope(k, base=self.rope_base, offset=pos)


class ALiBiAttention(_CachedSoftmaxAttention):
    """Causal attention with ALiBi's linear distance bias (fixed per-head slopes)."""

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        self.register_buffer("slopes", alibi_slopes(n_heads).float(), persistent=False)

    def forward(self, x):
        _check_x(x, self.d_model)
        q, k, v = self.qkv(x)
        return self.out(alibi_attention(q, k, v, slopes=self.slopes))

    def _cache_bias(self, x_t, state):
        t = state["pos"]
        dist = torch.arange(t - 1, -1, -1, device=x_t.device, dtype=x_t.dtype)   # i - j for j = 0..t-1
        return -self.slopes.to(x_t.dtype)[None, :, None] * dist


class FoXAttention(_CachedSoftmaxAttention):
    """Forgetting attention: softmax attention plus a data-dependent forget gate (no rotation)."""

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        self.g_proj = _init_linear(nn.Linear(d_model, n_heads, bias=True))

    def forward(self, x):
        _check_x(x, self.d_model)
        q, k, v = self.qkv(x)
        g = F.logsigmoid(self.g_proj(x).to(_param_dtype(x)))
        return self.out(fox_attention(q, k, v, g))

    def _cache_bias(self, x_t, state):
        g = F.logsigmoid(self.g_proj(x_t).to(_param_dtype(x_t)))             # [B, Hq]
        total = g if "G" not in state else state["G"][:, :, -1] + g
        state["G"] = total[:, :, None] if "G" not in state else torch.cat([state["G"], total[:, :, None]], 2)
        return (total[:, :, None] - state["G"]).to(x_t.dtype)


class SBAAttention(AttentionLayer):
    """Stick-breaking attention (:mod:`path_lib.reference.sba`): no position encoding, recency from the stick.

    ``attend_current``: whether query ``i`` may attend to key ``i`` (default False, as in the SBA paper's
    definition ``A_ij = beta_ij prod_{j<k<i} (1 - beta_ik)``). ``step`` keeps a plain key-value cache
    and recomputes the query's stick over it (O(t D) per token and head).
    """

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, attend_current: bool = False):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        self.attend_current = check_bool(attend_current, "attend_current")

    def forward(self, x):
        _check_x(x, self.d_model)
        q, k, v = self.qkv(x)
        return self.out(sba_attention(q, k, v, attend_current=self.attend_current))

    def step(self, x_t: torch.Tensor, state: Optional[dict] = None):
        _check_x(x_t, self.d_model, "x_t", ndim=2)
        _check_state(state, x_t.shape[0])
        q, k, v = self.qkv(x_t[:, None])
        k, v = k[:, 0, :, None], v[:, 0, :, None]            # [B, Hk, 1, Dh]
        new = state is None
        if self.attend_current:
            state = {"k": k, "v": v} if new else {"k": torch.cat([state["k"], k], 2),
                                                   "v": torch.cat([state["v"], v], 2)}
            keys, values = state["k"], state["v"]
        else:
            keys, values = (None, None) if new else (state["k"], state["v"])
        n_rep = self.n_heads // self.n_kv_heads
        if keys is None:                                     # the first token has no earlier key
            o = q.new_zeros(q.shape[0], self.n_heads, self.head_dim)
        else:
            keys, values = keys.repeat_interleave(n_rep, 1), values.repeat_interleave(n_rep, 1)
            z = self.head_dim ** -0.5 * torch.einsum("bhd,bhtd->bht", q[:, 0], keys)
            o = torch.einsum("bht,bhtd->bhd", stick_breaking_weights(z), values)
        if not self.attend_current:
            state = {"k": k, "v": v} if new else {"k": torch.cat([state["k"], k], 2),
                                                   "v": torch.cat([state["v"], v], 2)}
        return self.out(o[:, None])[:, 0], state


class PaTHAttention(AttentionLayer):
    """PaTH attention (PaTH-FoX with ``use_forget_gate=True``).

    Args:
        d_model, n_heads, n_kv_heads, head_dim: sizes; ``n_heads % n_kv_heads == 0``.
        w_rank: rank of the low-rank projection that produces w (32 in the paper's layer).
        conv_size: width of the causal depthwise convolution on w (3).
        use_forget_gate: add FoX's forget gate (PaTH-FoX).
        beta_max: clip beta to ``[0, beta_max]`` (a value below 2 keeps bf16 products stable).
        backend: ``"reference"`` (UT all-pairs, float64-capable), ``"blockwise"`` (PyTorch mirror of
            the kernel), ``"triton"`` (the Triton kernels; CUDA, or ``TRITON_INTERPRET=1``) or
            ``"auto"`` (triton on CUDA when the kernels are importable and verified on a GPU, else
            blockwise).
        block_size: block length of the blockwise backend.
    """

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, w_rank: int = 32,
                 conv_size: int = 3, use_forget_gate: bool = False, beta_max: Optional[float] = None,
                 backend: str = "auto", block_size: int = 64):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        check_choice(backend, "backend", BACKENDS)
        check_int(w_rank, "w_rank", minimum=1)
        check_int(conv_size, "conv_size", minimum=1)
        check_bool(use_forget_gate, "use_forget_gate")
        check_int(block_size, "block_size", minimum=1)
        if beta_max is not None:
            beta_max = check_number(beta_max, "beta_max")
            if not (0 < beta_max <= 2):
                raise ValueError(f"beta_max must lie in (0, 2], got {beta_max}")
        self.backend, self.block_size, self.beta_max, self.conv_size = backend, block_size, beta_max, conv_size
        w_dim = self.n_kv_heads * self.head_dim
        self.w_down = _init_linear(nn.Linear(d_model, w_rank, bias=False))
        self.w_up = _init_linear(nn.Linear(w_rank, w_dim, bias=False))
        self.w_conv = nn.Conv1d(w_dim, w_dim, conv_size, groups=w_dim, bias=False)
        nn.init.normal_(self.w_conv.weight, std=0.02)
        with torch.no_grad():  # start near the identity filter so w follows the current token
            self.w_conv.weight[:, 0, -1] += 1.0
        self.beta_proj = _init_linear(nn.Linear(d_model, self.n_kv_heads, bias=True))
        self.g_proj = _init_linear(nn.Linear(d_model, n_heads, bias=True)) if use_forget_gate else None

    # -- per-token parameters ---------------------------------------------------------------
    def _w_from_conv_input(self, u: torch.Tensor) -> torch.Tensor:
        """``u [B, T + conv_size - 1, w_dim]`` (left context included) -> w ``[B, T, Hk, Dh]`` float32."""
        B = u.shape[0]
        if u.shape[1] < self.conv_size:                      # T = 0: nothing to convolve
            return u.new_zeros(B, 0, self.n_kv_heads, self.head_dim, dtype=_param_dtype(u))
        y = F.conv1d(u.transpose(1, 2), self.w_conv.weight, groups=u.shape[-1]).transpose(1, 2)
        y = F.silu(y).to(_param_dtype(u)).view(B, -1, self.n_kv_heads, self.head_dim)
        return F.normalize(y, dim=-1, eps=1e-6)

    def path_params(self, x: torch.Tensor):
        """``x [B, T, d_model]`` -> w ``[B, T, Hk, Dh]``, beta ``[B, T, Hk]``, g ``[B, T, Hq]`` or None (float32)."""
        u = self.w_up(self.w_down(x))
        u = F.pad(u, (0, 0, self.conv_size - 1, 0))
        w = self._w_from_conv_input(u)
        beta = 2 * torch.sigmoid(self.beta_proj(x).to(_param_dtype(x)))
        if self.beta_max is not None:
            beta = beta.clamp(max=self.beta_max)
        g = F.logsigmoid(self.g_proj(x).to(_param_dtype(x))) if self.g_proj is not None else None
        return w, beta, g

    def _resolve_backend(self, q: torch.Tensor) -> str:
        """``"auto"``: the Triton kernels on CUDA once they have passed the GPU correctness sweep
        (``kernels.GPU_VERIFIED``, set from a recorded sweep); otherwise the exact blockwise mirror,
        with one warning per process when that happens on CUDA (the fallback is much slower)."""
        if self.backend != "auto":
            return self.backend
        if q.is_cuda and self.head_dim in (32, 64, 128):
            try:
                import kernels
            except ImportError as e:
                _warn_fallback(f"the kernels package cannot be imported ({e})")
                return "blockwise"
            if getattr(kernels, "GPU_VERIFIED", False):
                return "triton"
            _warn_fallback("kernels.GPU_VERIFIED is False: this kernel code has not passed the GPU "
                           "correctness sweep (benchmarks/DESIGN.md, How to change a kernel)")
        return "blockwise"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_x(x, self.d_model)
        q, k, v = self.qkv(x)
        w, beta, g = self.path_params(x)
        if x.shape[1] == 0:                                  # an empty sequence: empty output
            return self.out(q.new_zeros(x.shape[0], 0, self.n_heads, self.head_dim))
        backend = self._resolve_backend(q)
        if backend == "triton":
            from kernels import path_attention as triton_path_attention
            o = triton_path_attention(q, k, v, w, beta, g)
        else:
            impl = "parallel" if backend == "reference" else "blockwise"
            # w, beta and g are valid by construction (normalised, squashed): skip the value checks,
            # which would synchronise the GPU on every call.
            o = path_attention(q, k, v, w, beta, g, impl=impl, block_size=self.block_size, check_values=False)
        return self.out(o)

    def step(self, x_t: torch.Tensor, state: Optional[dict] = None):
        """One token through the transformed-key cache: ``x_t [B, d_model]`` -> ``(y_t, state)``."""
        _check_x(x_t, self.d_model, "x_t", ndim=2)
        _check_state(state, x_t.shape[0])
        B = x_t.shape[0]
        x = x_t[:, None]
        q, k, v = self.qkv(x)
        u_t = self.w_up(self.w_down(x))                      # [B, 1, w_dim]
        if state is None:
            dtype = torch.float64 if x_t.dtype == torch.float64 else torch.float32
            state = {"cache": PaTHCache(B, self.n_heads, self.n_kv_heads, self.head_dim, dtype=dtype,
                                        device=x_t.device),
                     "conv": u_t.new_zeros(B, self.conv_size - 1, u_t.shape[-1])}
        u = torch.cat([state["conv"], u_t], dim=1)           # the last conv_size inputs
        state["conv"] = u[:, 1:]
        w = self._w_from_conv_input(u)[:, 0]
        beta = 2 * torch.sigmoid(self.beta_proj(x_t).to(_param_dtype(x_t)))
        if self.beta_max is not None:
            beta = beta.clamp(max=self.beta_max)
        g = F.logsigmoid(self.g_proj(x_t).to(_param_dtype(x_t))) if self.g_proj is not None else None
        o = state["cache"].step(q[:, 0], k[:, 0], v[:, 0], w, beta, g)
        return self.out(o[:, None].to(x_t.dtype))[:, 0], state


ATTENTION_LAYERS: Dict[str, Callable[..., AttentionLayer]] = {
    "nope": NoPEAttention,
    "rope": RoPEAttention,
    "alibi": ALiBiAttention,
    "fox": FoXAttention,
    "path": PaTHAttention,
    "path_fox": lambda *a, **kw: PaTHAttention(*a, use_forget_gate=True, **kw),
    "sba": SBAAttention,
}


def register_attention(name: str, factory: Callable[..., AttentionLayer]) -> None:
    """Add an attention variant usable as ``TinyLM(attention=name)`` (factory(d_model, n_heads, **kw))."""
    ATTENTION_LAYERS[name] = factory


def make_attention(kind: str, d_model: int, n_heads: int, **kwargs) -> AttentionLayer:
    """Build an attention layer by name: one of ``ATTENTION_LAYERS``."""
    check_choice(kind, "attention", tuple(ATTENTION_LAYERS))
    return ATTENTION_LAYERS[kind](d_model, n_heads, **kwargs)
