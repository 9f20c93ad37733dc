"""A model's decoding states, layer by layer: what ``past_key_values`` holds.

A layer with a cache (``PaTHAttention(..., layer_idx=i)``) reads its state with
``past_key_values.get_layer_state(i)`` (None before the first call) and stores the new one with
``past_key_values.set_layer_state(i, state)``. Any object with those two methods works as
``past_key_values``: :class:`StateCache` here, or :class:`path_lib.nn.hf.PaTHDynamicCache` (a
``transformers`` ``Cache``) for ``generate()``. A state is the dict a layer's ``step`` returns (for PaTH:
``{"cache": PaTHCache, "conv": [B, conv_size - 1, w_dim]}``).
"""
from __future__ import annotations

from typing import Dict, Optional

import torch

from ..validation import check_int, check_tensor
from ..decoding import is_cache

__all__ = ["StateCache", "select_state"]


def _state_rows(state: dict) -> Optional[int]:
    """The batch size of a layer state: the rows of its first cache or tensor (None if it holds neither)."""
    for value in state.values():
        if is_cache(value):
            return value.batch_size
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return value.shape[0]
    return None


def _check_select_index(index, rows: Optional[int]) -> None:
    """``index``: a 1-D int64/int32 tensor whose values lie in ``[0, rows)`` (read once: a host sync)."""
    check_tensor(index, "index", ndim=1, dtypes=(torch.int64, torch.int32), finite=False)
    if rows is not None and index.numel():
        lo, hi = (int(x) for x in torch.aminmax(index))
        if lo < 0 or hi >= rows:
            raise ValueError(f"index must lie in [0, {rows}) (the state's batch rows), got values in [{lo}, {hi}]")


def select_state(state: Optional[dict], index: torch.Tensor) -> Optional[dict]:
    """Keep the batch rows ``index`` (1-D int64/int32, values in ``[0, B)``) of a layer state (a dict of
    tensors, a decoding cache, ints) in place. Everything is checked before the state changes."""
    if state is None:
        return None
    if not isinstance(state, dict):
        raise TypeError(f"state must be None or a layer's decoding state (a dict), got {type(state).__name__}")
    _check_select_index(index, _state_rows(state))
    for key, value in state.items():
        if is_cache(value):
            value.select(index.to(value.device))
        elif isinstance(value, torch.Tensor) and value.dim() > 0:
            state[key] = value[index.to(value.device)]
    return state


class StateCache:
    """Per-layer decoding states, indexed by ``layer_idx`` (the fla and Hugging Face convention).

    ``get_seq_length()`` is the number of tokens seen (padding included), read from layer 0's cache.
    """

    def __init__(self):
        self._states: Dict[int, dict] = {}

    def get_layer_state(self, layer_idx: int) -> Optional[dict]:
        check_int(layer_idx, "layer_idx", minimum=0)
        return self._states.get(layer_idx)

    def set_layer_state(self, layer_idx: int, state: dict) -> None:
        check_int(layer_idx, "layer_idx", minimum=0)
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict (a layer's decoding state), got {type(state).__name__}")
        self._states[layer_idx] = state

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens seen by layer ``layer_idx`` (padding included): its cache's length, its position counter,
        or the time length of its cached keys (``[B, H, t, D]``) or inputs (``[B, t, d_model]``)."""
        state = self.get_layer_state(layer_idx)
        if state is None:
            return 0
        if is_cache(state.get("cache")):
            return len(state["cache"])
        if "pos" in state:
            return int(state["pos"])
        if isinstance(state.get("k"), torch.Tensor):
            return state["k"].shape[2]
        if isinstance(state.get("x"), torch.Tensor):
            return state["x"].shape[1]
        raise ValueError(f"state of layer_idx={layer_idx} is not a layer's decoding state "
                         f"(keys {sorted(map(str, state))})")

    def select(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (1-D int64, values in ``[0, B)``) in every layer (beam search reorders
        this way). Every layer's state is checked against ``index`` before any changes."""
        check_tensor(index, "index", ndim=1, dtypes=(torch.int64, torch.int32), finite=False)
        for state in self._states.values():
            _check_select_index(index, _state_rows(state))
        for state in self._states.values():
            select_state(state, index)

    def __len__(self) -> int:
        return len(self._states)
