"""A small decoder-only language model, ``TinyLM``, whose only position information is its attention.

Each block is pre-norm: ``x + attn(LayerNorm(x))`` then ``x + MLP(LayerNorm(x))`` (GELU MLP), the
attention layer built by name from :data:`path_lib.nn.layers.ATTENTION_LAYERS` (``"path"``,
``"path_fox"``, ``"rope"``, ``"fox"``, ``"alibi"``, ``"nope"``, ``"sba"`` and the rotation variants of
:mod:`path_lib.nn.rotations`). ``forward(tokens [B, T]) -> logits [B, T, vocab]``; ``step`` decodes one
token with each layer's recurrent state, equal to the forward's rows.
"""
from __future__ import annotations

from typing import Iterable, Optional, cast

import torch
import torch.nn as nn

from ..validation import check_bool, check_choice, check_int, check_number, check_optional_bool, check_tokens, values_checked
from .layers import ATTENTION_LAYERS, _check_state, _init_linear, make_attention
from .sampling import check_sampling, sample_next

__all__ = ["TinyLM"]


class _Block(nn.Module):
    def __init__(self, d_model, n_heads, attention, mlp_ratio, attention_kwargs):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = make_attention(attention, d_model, n_heads, **attention_kwargs)
        self.norm2 = nn.LayerNorm(d_model)
        hidden = int(mlp_ratio * d_model)
        self.mlp = nn.Sequential(_init_linear(nn.Linear(d_model, hidden)), nn.GELU(),
                                 _init_linear(nn.Linear(hidden, d_model)))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def step(self, x_t, state):
        _check_state(state, x_t.shape[0])
        a, state = self.attn.step(self.norm1(x_t), state)
        x_t = x_t + a
        return x_t + self.mlp(self.norm2(x_t)), state

    def prefill(self, x):
        a, state = self.attn.prefill(self.norm1(x))
        x = x + a
        return x + self.mlp(self.norm2(x)), state


class TinyLM(nn.Module):
    """A small decoder-only language model whose position information comes only from its attention.

    Args:
        vocab_size: number of token ids.
        d_model, n_layers, n_heads: sizes.
        attention: a name in ``ATTENTION_LAYERS`` ("nope", "rope", "alibi", "fox", "path", "path_fox", "sba",
            and the rotation variants of :mod:`path_lib.nn.rotations`).
        mlp_ratio: hidden width of the MLP relative to d_model.
        tie_embeddings: share the input embedding and the output head.
        check_values: value checks (token ids in range, finite activations) in forward, step and prefill;
            None (default): only where free (CPU tensors outside ``torch.compile``), True always (a device
            sync per call on a GPU), False never. Set on every attention layer too.
        **attention_kwargs: passed to the attention layer (n_kv_heads, backend, beta_max, ...).

    ``forward(tokens [B, T] long) -> logits [B, T, vocab_size]``;
    ``step(token [B] long, state) -> (logits [B, vocab_size], state)``, equal to the forward's rows;
    ``prefill(tokens [B, T]) -> (logits of the last position [B, vocab_size], state)`` for ``step``.
    The attention layers are numbered (``layer_idx``) for a ``past_key_values`` cache.
    """

    def __init__(self, vocab_size: int, d_model: int = 128, n_layers: int = 2, n_heads: int = 2, *,
                 attention: str = "path", mlp_ratio: float = 4.0, tie_embeddings: bool = True,
                 check_values: Optional[bool] = None, **attention_kwargs):
        super().__init__()
        check_optional_bool(check_values, "check_values")
        check_int(vocab_size, "vocab_size", minimum=1)
        check_int(d_model, "d_model", minimum=1)
        check_int(n_layers, "n_layers", minimum=1)
        check_int(n_heads, "n_heads", minimum=1)
        mlp_ratio = check_number(mlp_ratio, "mlp_ratio", positive=True)
        if int(mlp_ratio * d_model) < 1:
            raise ValueError(f"mlp_ratio * d_model must give an MLP width >= 1, got mlp_ratio={mlp_ratio}, "
                             f"d_model={d_model}")
        check_bool(tie_embeddings, "tie_embeddings")
        check_choice(attention, "attention", tuple(ATTENTION_LAYERS))
        self.vocab_size, self.attention = vocab_size, attention
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, attention, mlp_ratio, attention_kwargs)
                                    for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.head.weight = self.embed.weight
        else:
            _init_linear(self.head)
        for i, block in enumerate(self._each_block()):
            block.attn.layer_idx = i
        self.check_values = check_values

    @property
    def check_values(self) -> Optional[bool]:
        """None (value checks only where free), True or False; setting it sets every attention layer's too.
        Anything but None or a bool (1, "yes") is refused with a TypeError."""
        return self._check_values

    @check_values.setter
    def check_values(self, value: Optional[bool]) -> None:
        self._check_values = check_optional_bool(value, "check_values")
        for block in getattr(self, "blocks", ()):
            block.attn.check_values = value

    def _each_block(self) -> Iterable[_Block]:
        """``self.blocks`` with their type (an ``nn.ModuleList`` iterates as plain Modules)."""
        return cast(Iterable[_Block], self.blocks)

    def _check_tokens(self, tokens, ndim, name="tokens", min_len=0):
        check_tokens(tokens, self.vocab_size, ndim=ndim, name=name, min_len=min_len,
                     values=values_checked(self.check_values, tokens) if isinstance(tokens, torch.Tensor) else True)

    def _hand_token_ids(self, tokens: Optional[torch.Tensor]) -> None:
        """Give the token ids to the layers that read them (``uses_token_ids``); None clears them."""
        for block in self._each_block():
            if getattr(block.attn, "uses_token_ids", False):
                block.attn.token_ids = tokens

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self._check_tokens(tokens, 2)
        self._hand_token_ids(tokens)
        try:
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
        finally:
            self._hand_token_ids(None)
        return self.head(self.norm(x))

    def step(self, token: torch.Tensor, state: Optional[list] = None):
        """One token per sequence: ``token [B]`` -> ``(logits [B, vocab_size], state)``."""
        self._check_tokens(token, 1)
        if state is None:
            state = [None] * len(self.blocks)
        elif not isinstance(state, list) or len(state) != len(self.blocks):
            raise ValueError(f"state must be None or the list of {len(self.blocks)} per-layer states returned by "
                             f"a previous step, got {type(state).__name__}"
                             + (f" of length {len(state)}" if isinstance(state, (list, tuple)) else ""))
        self._hand_token_ids(token[:, None])
        try:
            x = self.embed(token)
            for i, block in enumerate(self._each_block()):
                x, state[i] = block.step(x, state[i])
        finally:
            self._hand_token_ids(None)
        return self.head(self.norm(x)), state

    def prefill(self, tokens: torch.Tensor):
        """A prompt ``tokens [B, T]`` (T >= 1) in parallel where the layers can (PaTH: blockwise attention and
        keys moved to the end in O(T D^2)) -> ``(logits of the last position [B, vocab_size], state)``."""
        self._check_tokens(tokens, 2, min_len=1)
        self._hand_token_ids(tokens)
        try:
            x, state = self.embed(tokens), []
            for block in self._each_block():
                x, s = block.prefill(x)
                state.append(s)
        finally:
            self._hand_token_ids(None)
        return self.head(self.norm(x[:, -1])), state

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, n_new: int, *, temperature: float = 0.0, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Continue ``prompt [B, T0]`` by ``n_new`` tokens; returns ``[B, T0 + n_new]``.

        The prompt runs through :meth:`prefill`, then one :meth:`step` per new token. ``temperature`` 0
        (default) is greedy; above 0 a token is sampled from ``softmax(logits / temperature)``, optionally
        restricted to the ``top_k`` most likely tokens and to the top-``top_p`` probability mass
        (:mod:`path_lib.nn.sampling`). Arguments are validated (``n_new`` an int >= 0, ``temperature`` finite
        >= 0, ``top_k`` an int >= 1, ``top_p`` in (0, 1]).
        """
        check_tokens(prompt, self.vocab_size, ndim=2, min_len=1, name="prompt")
        if prompt.shape[0] == 0:
            raise ValueError(f"prompt must have at least one sequence, got shape {tuple(prompt.shape)}")
        check_int(n_new, "n_new", minimum=0)
        temperature, top_k, top_p = check_sampling(temperature, top_k, top_p, generator)
        out = [prompt]
        if n_new == 0:
            return prompt.clone()
        logits, state = self.prefill(prompt)
        for i in range(n_new):
            nxt = sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator,
                              check_values=values_checked(self.check_values, logits))
            out.append(nxt[:, None])
            if i + 1 < n_new:
                logits, state = self.step(nxt, state)
        return torch.cat(out, dim=1)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
