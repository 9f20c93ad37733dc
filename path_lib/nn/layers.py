"""Attention layers (PaTH, PaTH-FoX, RoPE, FoX, ALiBi, NoPE, SBA) with one interface, and their registry.

Every attention layer maps ``x [B, T, d_model] -> [B, T, d_model]`` and has a recurrent
``step(x_t [B, d_model], state) -> (y_t [B, d_model], state)`` for generation whose outputs equal the
parallel forward. ``state`` starts as ``None``.

PaTH's per-token parameters follow the paper and fla's layer:

    w_t    = L2norm_per_head(SiLU(CausalDepthwiseConv_3(LowRank(x_t))))
    beta_t = 2 * sigmoid(Linear(x_t))          one per key head, optionally clipped to beta_max < 2
    g_t    = logsigmoid(Linear(x_t))           one per query head (PaTH-FoX only)

Value checks (finite inputs, token ids in range, mask entries) follow the layer's ``check_values``
(``None`` by default: only where they cost no device sync and no graph break, i.e. on CPU tensors outside
``torch.compile``; ``True`` always, ``False`` never; anything else is a TypeError). Shapes and dtypes are
always checked: ``x`` must have the weights' dtype (outside autocast). B = 0 or T = 0 give empty outputs.
A decoding state carries the tag of the layer that made it (``state["layer"]``: kind and sizes), so a
state from another layer, or a hand-made dict, is refused by name.

Layers whose class sets ``uses_token_ids = True`` (the token-angle rotations of
:mod:`path_lib.nn.rotations`) also read the token ids: ``TinyLM`` hands them over as ``layer.token_ids``
(``[B, T]``, or ``[B, 1]`` in ``step``) for the duration of each call.

``ATTENTION_LAYERS`` maps a name to a layer factory; :func:`register_attention` adds one (the rotation
variants register themselves) and :class:`path_lib.nn.model.TinyLM` builds its layers from it.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..validation import (FLOAT_DTYPES, check_bool, check_choice, check_finite, check_int, check_number,
                          check_optional_bool, check_qkv, check_same_device, check_tensor, dtype_name, values_checked)
from ..impl import CHOICES, PathPlan, plan_path, resolve_backend, run_path
from ..reference.attention import (alibi_slopes, apply_rope, fox_attention, rope_attention,
                                   softmax_attention, alibi_attention)
from .cache import StateCache
from ..decoding import DecodingCache, PaTHCache, is_cache, keys_to_end
from .padding import check_attention_mask, check_cu_seqlens, compaction, gather_time, varlen_layout
from ..reference.sba import sba_attention, stick_breaking_weights
from ..reference.short_conv import short_conv_normalize_torch

__all__ = [
    "AttentionLayer", "PaTHAttention", "NoPEAttention", "RoPEAttention", "ALiBiAttention",
    "FoXAttention", "SBAAttention", "ATTENTION_LAYERS", "make_attention", "register_attention", "sdpa_attention",
]


def _init_linear(layer: nn.Linear, std: float = 0.02) -> nn.Linear:
    nn.init.normal_(layer.weight, std=std)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def _param_dtype(x: torch.Tensor) -> torch.dtype:
    """w, beta and g are float32, or float64 when the model runs in float64 (for exact checks)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _check_state(state, batch_size: int, name: str = "state") -> None:
    """A recurrent state must be None or a dict whose tensors (and key caches) hold ``batch_size`` rows.

    Shape checks only (no host sync). A state from another batch size is refused by name rather than
    failing later inside a concatenation."""
    if state is None:
        return
    if not isinstance(state, dict):
        raise TypeError(f"{name} must be None or the dict returned by a previous step, got {type(state).__name__}")
    for key, value in state.items():
        rows = value.batch_size if is_cache(value) else (
            value.shape[0] if isinstance(value, torch.Tensor) and value.dim() > 0 else batch_size)
        if rows != batch_size:
            raise ValueError(f"{name} was built for batch size {rows} ({name}[{key!r}] holds {rows} rows), "
                             f"but x_t has batch size {batch_size}; start a new state (state=None) for a new batch")


def _check_x(x, d_model: int, name: str = "x", ndim: int = 3, check_values: Optional[bool] = False,
             weight_dtype: Optional[torch.dtype] = None) -> bool:
    """Shape and dtype of ``x``; its values too where ``check_values`` resolves to True. Returns that.

    ``weight_dtype``: the layer's parameter dtype, which ``x`` must have (outside autocast, which casts
    the inputs of each projection itself): a float32 ``x`` fed to a float64 layer is refused by name."""
    check_tensor(x, name, ndim=ndim, finite=False)
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} must have last dimension d_model={d_model}, got {x.shape[-1]}")
    if (weight_dtype is not None and x.dtype != weight_dtype
            and not torch.is_autocast_enabled(x.device.type)):
        raise TypeError(f"{name} has dtype {dtype_name(x.dtype)} but the layer's weights are "
                        f"{dtype_name(weight_dtype)}: convert one of them ({name}.to(torch.{dtype_name(weight_dtype)}) "
                        f"or layer.to(torch.{dtype_name(x.dtype)}))")
    checked = values_checked(check_values, x)
    if checked:
        check_finite(x, name)
    return checked


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
        #: value checks in forward and step (None: only where free, see the module docstring)
        self.check_values = None
        #: this layer's index in a ``past_key_values`` cache (TinyLM numbers its layers)
        self.layer_idx = 0
        self.q_proj = _init_linear(nn.Linear(d_model, n_heads * head_dim, bias=False))
        self.k_proj = _init_linear(nn.Linear(d_model, n_kv_heads * head_dim, bias=False))
        self.v_proj = _init_linear(nn.Linear(d_model, n_kv_heads * head_dim, bias=False))
        self.o_proj = _init_linear(nn.Linear(n_heads * head_dim, d_model, bias=False))

    @property
    def check_values(self) -> Optional[bool]:
        """Value checks in forward and step: None (only where free, see the module docstring), True or
        False; anything else (1, "yes") is refused with a TypeError."""
        return self._check_values

    @check_values.setter
    def check_values(self, value: Optional[bool]) -> None:
        self._check_values = check_optional_bool(value, "check_values")

    #: the entries of this layer's decoding state besides ``"layer"`` (the tag of the layer that made it)
    _state_keys: Tuple[str, ...] = ("x",)

    def _state_tag(self) -> str:
        """Names the layer kind and sizes a decoding state belongs to (stored as ``state["layer"]``)."""
        return (f"{type(self).__name__}(d_model={self.d_model}, n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads}, head_dim={self.head_dim})")

    def _check_layer_state(self, state, batch_size: int, name: str = "state") -> None:
        """A state must be None or one this layer kind (with these sizes) returned: a dict from another
        kind, or a hand-made one, is refused by name instead of failing on a missing entry later."""
        _check_state(state, batch_size, name)
        if state is None:
            return
        tag, mine = state.get("layer"), self._state_tag()
        if tag != mine:
            found = f"a state of {tag}" if isinstance(tag, str) else "not a state returned by a layer (no 'layer' tag)"
            raise ValueError(f"{name} is {found}, but this layer is {mine}; pass {name}=None to start a new one")
        missing = [key for key in self._state_keys if key not in state]
        if missing:
            raise ValueError(f"{name} lacks the entries {missing} of a {type(self).__name__} state; "
                             f"pass {name}=None to start a new one")

    def _check_input(self, x, name: str = "x", ndim: int = 3) -> bool:
        """:func:`_check_x` with this layer's d_model, check_values and weight dtype."""
        return _check_x(x, self.d_model, name, ndim=ndim, check_values=self.check_values,
                        weight_dtype=self.q_proj.weight.dtype)

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
        self._check_input(x_t, "x_t", ndim=2)
        self._check_layer_state(state, x_t.shape[0])
        x = x_t[:, None]
        if state is None:
            state = {"layer": self._state_tag(), "x": x}
        else:
            state = {"layer": state["layer"], "x": torch.cat([state["x"], x], dim=1)}
        # Generic fallback for variants without a cache of their own: recompute the last position
        # from the cached inputs. Exact, but O(t^2) per token; the built-in layers override it.
        y = self.forward(state["x"])[:, -1]
        return y, state

    def prefill(self, x: torch.Tensor):
        """A prompt ``x [B, T, d_model]`` -> ``(y [B, T, d_model], state)``, the state ready for ``step``.

        This default runs ``step`` token by token (layers with a parallel prefill override it)."""
        self._check_input(x)
        ids = getattr(self, "token_ids", None)
        state, ys = None, []
        try:
            for t in range(x.shape[1]):
                if ids is not None:
                    self.token_ids = ids[:, t:t + 1]
                y, state = self.step(x[:, t], state)
                ys.append(y)
        finally:
            if ids is not None:
                self.token_ids = ids
        return (torch.stack(ys, 1) if ys else x.new_zeros(x.shape)), state


def sdpa_attention(q, k, v, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Causal attention through ``F.scaled_dot_product_attention`` (its default dispatch) in the public
    layout: q ``[B, T, Hq, D]``, k, v ``[B, T, Hk, D]`` -> ``[B, T, Hq, D]``. ``bias``: an additive logit
    bias broadcastable to ``[B, Hq, T, T]`` (ALiBi's distances, FoX's gates), or None (then the
    causal kernels run without a mask). Shapes, dtypes and devices only are checked (no device sync)."""
    check_qkv(q, k, v, finite=False)
    if bias is not None:
        check_tensor(bias, "bias", dtypes=FLOAT_DTYPES, finite=False)
        check_same_device(bias, "bias", q)
        B, T, Hq = q.shape[:3]
        try:
            fits = torch.broadcast_shapes(bias.shape, (B, Hq, T, T)) == (B, Hq, T, T)
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"bias must broadcast to {(B, Hq, T, T)} = [B, Hq, T, T], got {tuple(bias.shape)}")
    n_rep = q.shape[2] // k.shape[2]
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if n_rep > 1:
        kh, vh = kh.repeat_interleave(n_rep, 1), vh.repeat_interleave(n_rep, 1)
    if bias is None:
        o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
    else:
        T = q.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        mask = bias.masked_fill(~causal, float("-inf")).to(qh.dtype)
        o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    return o.transpose(1, 2)


class _CachedSoftmaxAttention(AttentionLayer):
    """Softmax attention whose ``step`` keeps a plain key-value cache (O(t D) per token and head).

    Subclasses say how a position changes the new query and key (``_position_qk``) and which bias
    the current query adds to the cached logits (``_cache_bias``). ``backend`` (one of
    ``path_lib.impl.CHOICES["softmax_layer"]``: ``"reference"``, the library's explicit softmax,
    float64-capable, which materialises the T x T logits; ``"sdpa"``, PyTorch's fused kernels, what a
    practitioner's baseline runs; ``"auto"``, whichever :func:`path_lib.impl.resolve_backend` picks:
    sdpa on CUDA, reference elsewhere) picks how the forward runs.
    """

    _state_keys: Tuple[str, ...] = ("pos", "k", "v")

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, backend: str = "auto"):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        self.backend = check_choice(backend, "backend", CHOICES["softmax_layer"])

    def _sdpa(self, x: torch.Tensor) -> bool:
        """Whether this forward runs through SDPA (:func:`path_lib.impl.resolve_backend`'s choice)."""
        return resolve_backend(self.backend, device=x.device, call="softmax_layer") == "sdpa"

    def _position_qk(self, q, k, pos: int):
        return q, k

    def _cache_bias(self, x_t, state):
        return None

    def step(self, x_t: torch.Tensor, state: Optional[dict] = None):
        self._check_input(x_t, "x_t", ndim=2)
        self._check_layer_state(state, x_t.shape[0])
        q, k, v = self.qkv(x_t[:, None])                     # [B, 1, H, Dh]
        pos = 0 if state is None else state["pos"]
        q, k = self._position_qk(q, k, pos)
        k, v = k[:, 0, :, None], v[:, 0, :, None]            # [B, Hk, 1, Dh]
        if state is None:
            state = {"layer": self._state_tag(), "pos": 0, "k": k, "v": v}
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
        checked = self._check_input(x)
        q, k, v = self.qkv(x)
        if self._sdpa(x):
            return self.out(sdpa_attention(q, k, v))
        return self.out(softmax_attention(q, k, v, check_values=checked))


class RoPEAttention(_CachedSoftmaxAttention):
    """Causal attention with rotary position embeddings on q and k."""

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, rope_base: float = 10000.0,
                 backend: str = "auto"):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim, backend=backend)
        self.rope_base = check_number(rope_base, "rope_base", positive=True)

    def forward(self, x):
        checked = self._check_input(x)
        q, k, v = self.qkv(x)
        if self._sdpa(x):
            if self.head_dim % 2:
                raise ValueError(f"q and k must have an even head dim for RoPE, got {self.head_dim}")
            return self.out(sdpa_attention(apply_rope(q, base=self.rope_base), apply_rope(k, base=self.rope_base), v))
        return self.out(rope_attention(q, k, v, base=self.rope_base, check_values=checked))

    def _position_qk(self, q, k, pos):
        return apply_rope(q, base=self.rope_base, offset=pos), apply_rope(k, base=self.rope_base, offset=pos)


class ALiBiAttention(_CachedSoftmaxAttention):
    """Causal attention with ALiBi's linear distance bias (fixed per-head slopes)."""

    slopes: torch.Tensor                                     #: buffer: the per-head slopes ``[Hq]``, float32

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, backend: str = "auto"):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim, backend=backend)
        self.register_buffer("slopes", alibi_slopes(n_heads).float(), persistent=False)

    def forward(self, x):
        checked = self._check_input(x)
        q, k, v = self.qkv(x)
        if self._sdpa(x):
            pos = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)
            dist = pos[:, None] - pos[None, :]                                  # i - j
            return self.out(sdpa_attention(q, k, v, -self.slopes[:, None, None] * dist))
        return self.out(alibi_attention(q, k, v, slopes=self.slopes, check_values=checked))

    def _cache_bias(self, x_t, state):
        t = state["pos"]
        dist = torch.arange(t - 1, -1, -1, device=x_t.device, dtype=x_t.dtype)   # i - j for j = 0..t-1
        return -self.slopes.to(x_t.dtype)[None, :, None] * dist


class FoXAttention(_CachedSoftmaxAttention):
    """Forgetting attention: softmax attention plus a data-dependent forget gate (no rotation)."""

    _state_keys = ("pos", "k", "v", "G")

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, backend: str = "auto"):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim, backend=backend)
        self.g_proj = _init_linear(nn.Linear(d_model, n_heads, bias=True))

    def forward(self, x):
        checked = self._check_input(x)
        q, k, v = self.qkv(x)
        g = F.logsigmoid(self.g_proj(x).to(_param_dtype(x)))
        if self._sdpa(x):
            G = torch.cumsum(g, dim=1).transpose(1, 2)                          # [B, Hq, T]
            return self.out(sdpa_attention(q, k, v, G[..., :, None] - G[..., None, :]))
        return self.out(fox_attention(q, k, v, g, check_values=checked))

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

    _state_keys = ("k", "v")

    def _state_tag(self) -> str:
        return f"{super()._state_tag()[:-1]}, attend_current={self.attend_current})"

    def forward(self, x):
        checked = self._check_input(x)
        q, k, v = self.qkv(x)
        return self.out(sba_attention(q, k, v, attend_current=self.attend_current, check_values=checked))

    def step(self, x_t: torch.Tensor, state: Optional[dict] = None):
        self._check_input(x_t, "x_t", ndim=2)
        self._check_layer_state(state, x_t.shape[0])
        q, k, v = self.qkv(x_t[:, None])
        k, v = k[:, 0, :, None], v[:, 0, :, None]            # [B, Hk, 1, Dh]
        if self.attend_current:
            state = self._with_key(state, k, v)
            keys, values = state["k"], state["v"]
        else:
            keys, values = (None, None) if state is None else (state["k"], state["v"])
        n_rep = self.n_heads // self.n_kv_heads
        if keys is None:                                     # the first token has no earlier key
            o = q.new_zeros(q.shape[0], self.n_heads, self.head_dim)
        else:
            keys, values = keys.repeat_interleave(n_rep, 1), values.repeat_interleave(n_rep, 1)
            z = self.head_dim ** -0.5 * torch.einsum("bhd,bhtd->bht", q[:, 0], keys)
            o = torch.einsum("bht,bhtd->bhd", stick_breaking_weights(z), values)
        if not self.attend_current:
            state = self._with_key(state, k, v)
        return self.out(o[:, None])[:, 0], state

    def _with_key(self, state: Optional[dict], k: torch.Tensor, v: torch.Tensor) -> dict:
        """``state`` with the token's ``k``, ``v`` ``[B, Hk, 1, Dh]`` appended (a new state for None)."""
        if state is None:
            return {"layer": self._state_tag(), "k": k, "v": v}
        return {"layer": state["layer"], "k": torch.cat([state["k"], k], 2), "v": torch.cat([state["v"], v], 2)}


def _check_mask_agrees(past: torch.Tensor, state: dict) -> None:
    """The part of a decoding ``attention_mask`` that covers the cached tokens, ``past [B, t]`` bool, must
    repeat the padding the state was built with (``state["mask"]``, in the tokens' order; absent while
    every token is real): a mask cannot turn a cached token into padding, or padding into a token, after
    the fact. Reads values (a device sync): only where values are checked."""
    held = state.get("mask")
    held = torch.ones_like(past) if held is None else held
    if not bool(torch.equal(past, held)):
        rows = (past != held).any(1).nonzero().flatten().tolist()
        raise ValueError(f"attention_mask contradicts the cache in rows {rows}: its first {past.shape[1]} columns "
                         "(the cached tokens) must repeat the padding the cache was built with; a cached token "
                         "cannot become padding later (start a new cache with the new mask instead)")


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
        layer_idx: this layer's index in a ``past_key_values`` cache.
        w_normalization: ``"unit"`` (``w / max(||w||, 1e-6)``: unit rows) or ``"fla"`` (fla's
            ``w / sqrt(||w||^2 + 1e-6)``, slightly short of unit for small w: converted fla weights then
            give fla's outputs; see :func:`path_lib.nn.hf.path_attention_from_fla`).
        check_values: value checks in forward and step (None: only where free; see the module docstring).
        return_tuple: fla's convention: ``forward`` always returns ``(o, None, past_key_values)``.

    ``forward(x [B, T, d_model], *, attention_mask=None, cu_seqlens=None, past_key_values=None,
    use_cache=False)``:

    * ``attention_mask [B, T]`` (bool or 0/1 integers, 1 = token): padding anywhere in a row (left
      padding for generation) is removed as if the row had been unpadded; outputs at padding positions
      are unspecified (finite). In decoding it may cover the cached tokens too (``[B, t + T]``); that
      part must then repeat the padding the cache was built with (checked where values are checked).
    * ``cu_seqlens [N + 1]`` (int32/int64): ``x [1, total, d_model]`` holds N packed sequences, each
      computed independently (convolution and attention stop at the boundaries). Reads the offsets to
      the host once. Not with a cache or a mask.
    * ``past_key_values``: a cache with ``get_layer_state`` / ``set_layer_state`` (:class:`path_lib.nn.cache.StateCache`,
      or :class:`path_lib.nn.hf.PaTHDynamicCache`); ``use_cache=True`` without one starts a ``StateCache``.
      The first call on an empty cache is a parallel prefill; later calls decode token by token.

    Returns ``o [B, T, d_model]``, or ``(o, None, past_key_values)`` when a cache is used or
    ``return_tuple`` is set.
    """

    def __init__(self, d_model, n_heads, n_kv_heads=None, head_dim=None, *, w_rank: int = 32,
                 conv_size: int = 3, use_forget_gate: bool = False, beta_max: Optional[float] = None,
                 backend: str = "auto", block_size: int = 64, layer_idx: int = 0, w_normalization: str = "unit",
                 check_values: Optional[bool] = None, return_tuple: bool = False):
        super().__init__(d_model, n_heads, n_kv_heads, head_dim)
        check_choice(backend, "backend", CHOICES["path_layer"])
        check_int(w_rank, "w_rank", minimum=1)
        check_int(conv_size, "conv_size", minimum=1)
        check_bool(use_forget_gate, "use_forget_gate")
        check_int(block_size, "block_size", minimum=1)
        self.layer_idx = check_int(layer_idx, "layer_idx", minimum=0)
        self.check_values = check_optional_bool(check_values, "check_values")
        self.return_tuple = check_bool(return_tuple, "return_tuple")
        self.w_normalization = check_choice(w_normalization, "w_normalization", ("unit", "fla"))
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

    _state_keys = ("cache", "conv")

    def _state_tag(self) -> str:
        return (f"{super()._state_tag()[:-1]}, conv_size={self.conv_size}, "
                f"use_forget_gate={self.g_proj is not None})")

    # -- the plan, and per-token parameters ---------------------------------------------------
    def _plan(self, x: torch.Tensor, decoding: bool = False) -> PathPlan:
        """How this call runs (:func:`path_lib.impl.plan_path`), decided once per forward, step or prefill:
        the attention, w's convolution and, when ``decoding``, the cache (the GPU cache only where no
        gradient is recorded)."""
        records = decoding and torch.is_grad_enabled() and (
            x.requires_grad or any(p.requires_grad for p in self.parameters()))
        return plan_path(self.backend, device=x.device, dtype=x.dtype, head_dim=self.head_dim,
                         batch=x.shape[0] if decoding else 1, records_grad=records)

    def _resolve_backend(self, x: torch.Tensor) -> str:
        """The attention that runs for inputs like ``x`` (``"triton"``, ``"blockwise"`` or ``"reference"``):
        :func:`path_lib.impl.resolve_backend` (``"auto"``: the Triton kernels on CUDA once they have passed
        the GPU correctness sweep, else the exact blockwise mirror)."""
        return self._plan(x).attention

    def _w_from_conv_input(self, u: torch.Tensor, plan: PathPlan, left_context: bool = True) -> torch.Tensor:
        """``u [B, T + conv_size - 1, w_dim]`` (left context included; ``[B, T, w_dim]``, zeros before the
        first step, without it) -> w ``[B, T, Hk, Dh]`` float32 (float64 for float64 u), on the fused Triton
        pass where ``plan`` says so."""
        if u.shape[0] == 0:                                  # an empty batch: an empty w
            T = u.shape[1] - (self.conv_size - 1 if left_context else 0)
            return u.new_zeros(0, max(T, 0), self.n_kv_heads, self.head_dim, dtype=_param_dtype(u))
        if plan.short_conv == "triton":
            from path_lib.kernels.short_conv import short_conv_normalize
            return short_conv_normalize(u, self.w_conv.weight, self.n_kv_heads, normalization=self.w_normalization,
                                        left_context=left_context, check_values=False)
        return short_conv_normalize_torch(u, self.w_conv.weight, self.n_kv_heads,
                                          normalization=self.w_normalization, left_context=left_context)

    def _beta_g(self, x: torch.Tensor):
        """``x [..., d_model]`` -> beta ``[..., Hk]``, g ``[..., Hq]`` or None (float32, float64 for float64 x)."""
        beta = 2 * torch.sigmoid(self.beta_proj(x).to(_param_dtype(x)))
        if self.beta_max is not None:
            beta = beta.clamp(max=self.beta_max)
        g = F.logsigmoid(self.g_proj(x).to(_param_dtype(x))) if self.g_proj is not None else None
        return beta, g

    def path_params(self, x: torch.Tensor):
        """``x [B, T, d_model]`` -> w ``[B, T, Hk, Dh]``, beta ``[B, T, Hk]``, g ``[B, T, Hq]`` or None (float32)."""
        return self._path_params(x, self._plan(x))

    def _path_params(self, x: torch.Tensor, plan: PathPlan):
        w = self._w_from_conv_input(self.w_up(self.w_down(x)), plan, left_context=False)
        beta, g = self._beta_g(x)
        return w, beta, g

    def _attention(self, q, k, v, w, beta, g, plan: PathPlan) -> torch.Tensor:
        """The attention core on checked inputs, by ``plan``; w, beta, g are valid by construction
        (normalised, squashed), so no value checks here (they would synchronise the GPU on every call)."""
        return run_path(plan.attention, q, k, v, w, beta, g, block_size=self.block_size, check_values=False)

    def _sequence(self, x: torch.Tensor, plan: PathPlan) -> torch.Tensor:
        """``x [B, T, d_model]`` -> ``[B, T, d_model]``, every row one causal sequence."""
        q, k, v = self.qkv(x)
        w, beta, g = self._path_params(x, plan)
        if x.shape[0] == 0 or x.shape[1] == 0:               # an empty batch or sequence: empty output
            return self.out(q.new_zeros(x.shape[0], x.shape[1], self.n_heads, self.head_dim))
        return self.out(self._attention(q, k, v, w, beta, g, plan))

    # -- forward ----------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, *, attention_mask: Optional[torch.Tensor] = None,
                cu_seqlens: Optional[torch.Tensor] = None, past_key_values=None, use_cache: bool = False):
        checked = self._check_input(x)
        check_bool(use_cache, "use_cache")
        B, T, _ = x.shape
        plan = self._plan(x, decoding=use_cache or past_key_values is not None)
        if use_cache or past_key_values is not None:
            if cu_seqlens is not None:
                raise ValueError("cu_seqlens (packed sequences) cannot be combined with past_key_values/use_cache; "
                                 "decode a padded batch with attention_mask instead")
            if past_key_values is None:
                past_key_values = StateCache()
            elif not (hasattr(past_key_values, "get_layer_state") and hasattr(past_key_values, "set_layer_state")):
                raise TypeError("past_key_values must be a cache with get_layer_state/set_layer_state "
                                "(path_lib.nn.cache.StateCache or path_lib.nn.hf.PaTHDynamicCache), got "
                                f"{type(past_key_values).__name__}")
            state = past_key_values.get_layer_state(self.layer_idx)
            if state is not None and not (isinstance(state, dict) and is_cache(state.get("cache"))):
                raise TypeError(f"past_key_values holds a state for layer_idx={self.layer_idx} that is not a PaTH "
                                f"layer's ({type(state).__name__}); give each layer its own layer_idx")
            self._check_layer_state(state, B, "past_key_values state")
            n_past = 0 if state is None else len(state["cache"])
            valid = None if attention_mask is None else check_attention_mask(
                attention_mask, B, T, n_past, x, check_values=checked)
            if checked and state is not None and attention_mask is not None and attention_mask.shape[1] == n_past + T:
                _check_mask_agrees(attention_mask[:, :n_past] != 0, state)
            if state is None:
                y, state = self._prefill(x, valid, plan)
            else:
                ys = []
                for t in range(T):
                    y_t, state = self._step(x[:, t], state, None if valid is None else valid[:, t], plan)
                    ys.append(y_t)
                y = torch.stack(ys, 1) if ys else x.new_zeros(x.shape)
            past_key_values.set_layer_state(self.layer_idx, state)
            return y, None, past_key_values
        if cu_seqlens is not None:
            if attention_mask is not None:
                raise ValueError("pass either cu_seqlens (packed sequences) or attention_mask (a padded batch), not both")
            y = self._packed(x, cu_seqlens, plan)
        elif attention_mask is not None:
            valid = check_attention_mask(attention_mask, B, T, 0, x, check_values=checked)
            perm, inv = compaction(valid)                     # real tokens first: padding cannot reach them
            y = gather_time(self._sequence(gather_time(x, perm), plan), inv)
        else:
            y = self._sequence(x, plan)
        return (y, None, past_key_values) if self.return_tuple else y

    def _packed(self, x: torch.Tensor, cu_seqlens: torch.Tensor, plan: PathPlan) -> torch.Tensor:
        """``x [1, total, d_model]`` holding the sequences ``cu_seqlens`` delimits, each run on its own.

        The Triton kernels take the packed layout themselves (only w's convolution runs on a right-padded
        ``[N, L]`` copy, so that it stops at the boundaries); the PyTorch backends run the sequences as the
        rows of a right-padded batch."""
        offsets = check_cu_seqlens(cu_seqlens, x.shape[0], x.shape[1])
        if x.shape[1] == 0:
            return self._sequence(x, plan)
        index, valid = varlen_layout(offsets, x.device)
        pad_rows = lambda t: torch.cat([t[0], t.new_zeros(1, *t.shape[2:])])[index]   # noqa: E731  [N, L, ...]
        if plan.attention != "triton":
            return self._sequence(pad_rows(x), plan)[valid][None]
        from path_lib.kernels import path_attention as triton_path_attention
        q, k, v = self.qkv(x)
        beta, g = self._beta_g(x)
        u = pad_rows(self.w_up(self.w_down(x)))
        w = self._w_from_conv_input(F.pad(u, (0, 0, self.conv_size - 1, 0)), plan)[valid][None]
        o = triton_path_attention(q, k, v, w, beta, g, cu_seqlens=cu_seqlens, check_values=False)
        return self.out(o)

    # -- decoding ---------------------------------------------------------------------------
    def _prefill(self, x: torch.Tensor, valid: Optional[torch.Tensor], plan: PathPlan):
        """A prompt in parallel: ``x [B, T, d_model]``, ``valid [B, T]`` or None -> ``(y, state)``.

        Padding is moved behind each row's tokens, where beta = 0 and g = 0 make it transform nothing
        and add no gate; the cache marks its slots invalid (never attended to)."""
        B, T, _ = x.shape
        mask = valid                                         # the padding in the tokens' order (for later checks)
        if valid is not None:
            perm, inv = compaction(valid)
            x, valid = gather_time(x, perm), gather_time(valid, perm)
        q, k, v = self.qkv(x)
        u = F.pad(self.w_up(self.w_down(x)), (0, 0, self.conv_size - 1, 0))
        w = self._w_from_conv_input(u, plan)
        beta, g = self._beta_g(x)
        if valid is not None:
            beta = torch.where(valid[..., None], beta, torch.zeros_like(beta))
            g = None if g is None else torch.where(valid[..., None], g, torch.zeros_like(g))
        if T and B:
            o = self._attention(q, k, v, w, beta, g, plan)
        else:
            o = q.new_zeros(B, T, self.n_heads, self.head_dim)
        cache: DecodingCache
        if plan.cache == "triton":
            from path_lib.kernels import transform_keys_to_end
            from path_lib.kernels.decode import TritonPaTHCache
            k_end = transform_keys_to_end(k, w, beta, check_values=False) if T else k
            cache = TritonPaTHCache.from_prefix(k_end, v, g, n_q_heads=self.n_heads, valid=valid, check_values=False)
        else:
            k_end = keys_to_end(k, w, beta, block_size=self.block_size, check_values=False)
            cache = PaTHCache._from_prefix(k_end, v, g, self.n_heads, dtype=_param_dtype(x), valid=valid)
        K1 = self.conv_size - 1                              # the last K1 conv inputs of each row's tokens
        if valid is None:
            conv = u[:, u.shape[1] - K1:]
        else:                                                # row b's token j sits at u[b, j + K1]
            ends = valid.sum(1)
            conv = gather_time(u, ends[:, None] + torch.arange(K1, device=x.device))
        y = self.out(o.to(x.dtype))
        if valid is not None:
            y = gather_time(y, inv)
        return y, {"layer": self._state_tag(), "cache": cache, "conv": conv, "mask": mask}

    def _step(self, x_t: torch.Tensor, state: Optional[dict], valid_t: Optional[torch.Tensor], plan: PathPlan):
        B = x_t.shape[0]
        x = x_t[:, None]
        q, k, v = self.qkv(x)
        u_t = self.w_up(self.w_down(x))                      # [B, 1, w_dim]
        if state is None and plan.cache == "triton":
            from path_lib.kernels.decode import TritonPaTHCache
            state = {"layer": self._state_tag(),
                     "cache": TritonPaTHCache(B, self.n_heads, self.n_kv_heads, self.head_dim, value_dtype=v.dtype,
                                              device=x_t.device),
                     "conv": u_t.new_zeros(B, self.conv_size - 1, u_t.shape[-1])}
        elif state is None:
            state = {"layer": self._state_tag(),
                     "cache": PaTHCache(B, self.n_heads, self.n_kv_heads, self.head_dim, dtype=_param_dtype(x_t),
                                        device=x_t.device),
                     "conv": u_t.new_zeros(B, self.conv_size - 1, u_t.shape[-1])}
        u = torch.cat([state["conv"], u_t], dim=1)           # the last conv_size inputs
        conv = u[:, 1:]
        if valid_t is not None:                              # padding does not enter the convolution window
            conv = torch.where(valid_t[:, None, None], conv, state["conv"])
        state["conv"] = conv
        if valid_t is not None or state.get("mask") is not None:   # the padding so far, in the tokens' order
            n_held = len(state["cache"])
            held = state.get("mask")
            held = torch.ones(B, n_held, dtype=torch.bool, device=x_t.device) if held is None else held
            new = torch.ones(B, 1, dtype=torch.bool, device=x_t.device) if valid_t is None else valid_t[:, None]
            state["mask"] = torch.cat([held, new], dim=1)
        w = self._w_from_conv_input(u, plan)[:, 0]
        beta, g = self._beta_g(x_t)
        # either cache (PaTHCache, or the GPU's TritonPaTHCache): inputs valid by construction, no value checks
        o = state["cache"].step(q[:, 0], k[:, 0], v[:, 0], w, beta, g, valid_t=valid_t, check_values=False)
        return self.out(o[:, None].to(x_t.dtype))[:, 0], state

    def step(self, x_t: torch.Tensor, state: Optional[dict] = None):
        """One token through the transformed-key cache: ``x_t [B, d_model]`` -> ``(y_t, state)``."""
        self._check_input(x_t, "x_t", ndim=2)
        self._check_layer_state(state, x_t.shape[0])
        return self._step(x_t, state, None, self._plan(x_t, decoding=True))

    def prefill(self, x: torch.Tensor):
        """A prompt ``x [B, T, d_model]`` in parallel -> ``(y [B, T, d_model], state)`` for :meth:`step`."""
        self._check_input(x)
        return self._prefill(x, None, self._plan(x, decoding=True))


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
    """Add an attention variant usable as ``TinyLM(attention=name)`` (``factory(d_model, n_heads, **kw)``).
    ``name``: a non-empty str (an existing name is replaced); ``factory``: a callable."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable (factory(d_model, n_heads, **kw) -> a layer), "
                        f"got {type(factory).__name__}")
    ATTENTION_LAYERS[name] = factory


def make_attention(kind: str, d_model: int, n_heads: int, **kwargs) -> AttentionLayer:
    """Build an attention layer by name: one of ``ATTENTION_LAYERS``."""
    check_choice(kind, "attention", tuple(ATTENTION_LAYERS))
    return ATTENTION_LAYERS[kind](d_model, n_heads, **kwargs)
