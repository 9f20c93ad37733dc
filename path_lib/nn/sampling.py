"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus) sampling.

``logits [B, V]`` -> token ids ``[B]`` (int64). Temperature 0 is greedy (argmax). Otherwise the logits
are divided by the temperature, the top-k filter keeps the k largest, the top-p filter keeps the
smallest set of most likely tokens whose probability reaches p (the most likely token always stays),
and a token is drawn from the renormalised distribution.

Logits may hold ``-inf`` (a token ruled out), never NaN or ``+inf``, and every row needs one finite
logit. Sampling computes ``(logits - max) / temperature`` in float64, so that any positive temperature,
however small, gives a distribution (the limit of a tiny temperature is greedy with ties shared).
"""
from __future__ import annotations

from typing import Optional

import torch

from ..validation import check_bool, check_int, check_number, check_tensor

__all__ = ["check_sampling", "filter_logits", "sample_next"]


def _check_filters(top_k, top_p):
    """``top_k`` an int >= 1 or None, ``top_p`` a number in (0, 1] or None; returns them (top_p a float)."""
    if top_k is not None:
        check_int(top_k, "top_k", minimum=1)
    if top_p is not None:
        top_p = check_number(top_p, "top_p")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    return top_k, top_p


def check_sampling(temperature, top_k, top_p, generator):
    """Validate the sampling options; returns ``(temperature, top_k, top_p)`` as float / int or None."""
    temperature = check_number(temperature, "temperature")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature}")
    top_k, top_p = _check_filters(top_k, top_p)
    if temperature == 0 and (top_k is not None or top_p is not None):
        raise ValueError("top_k and top_p filter a sampled distribution: they need temperature > 0 "
                         "(temperature 0 is greedy)")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return temperature, top_k, top_p


def _check_logits(logits, check_values: bool) -> None:
    """``logits [B, V]`` with V >= 1; with ``check_values`` no NaN or +inf and a finite maximum per row."""
    check_tensor(logits, "logits", ndim=2, finite=False)
    if logits.shape[1] == 0:
        raise ValueError(f"logits must have at least one token (V >= 1), got shape {tuple(logits.shape)}")
    if check_values and logits.numel():
        if bool(torch.isnan(logits).any()) or bool((logits == float("inf")).any()):
            raise ValueError("logits contains NaN or +inf")
        if not bool(torch.isfinite(logits).any(dim=-1).all()):
            raise ValueError("logits has a row with no finite entry (every token ruled out by -inf)")


def filter_logits(logits: torch.Tensor, top_k: Optional[int] = None, top_p: Optional[float] = None) -> torch.Tensor:
    """``logits [B, V]`` with ``-inf`` outside the top-k and the top-p sets (both when both are given).

    Ties with the k-th largest logit are kept. top-p keeps a token when the probability of the strictly
    more likely tokens (in sorted order) is below p. ``top_k`` an int >= 1, ``top_p`` in (0, 1], or None.
    Shapes and options are checked, not values (NaN logits stay NaN)."""
    check_tensor(logits, "logits", ndim=2, finite=False)
    top_k, top_p = _check_filters(top_k, top_p)
    out = logits
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p is not None and top_p < 1 and logits.numel():
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits.float(), dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs            # mass of the more likely tokens
        drop_sorted = before >= top_p                            # never the first: its "before" is 0
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def sample_next(logits: torch.Tensor, *, temperature: float = 0.0, top_k: Optional[int] = None,
                top_p: Optional[float] = None, generator: Optional[torch.Generator] = None,
                check_values: bool = True) -> torch.Tensor:
    """Next token ids ``[B]`` from ``logits [B, V]`` (see the module docstring).

    ``check_values``: refuse NaN or +inf logits and rows without a finite logit (a device sync on a GPU);
    False skips that (then such rows give unspecified tokens)."""
    check_bool(check_values, "check_values")
    _check_logits(logits, check_values)
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p, generator)
    if temperature == 0 or logits.shape[0] == 0:
        return logits.argmax(-1)
    x = logits.double()
    scaled = (x - x.max(dim=-1, keepdim=True).values) / temperature       # max 0: no overflow, no inf - inf
    scaled = filter_logits(scaled, top_k, top_p)
    return torch.multinomial(torch.softmax(scaled, -1), 1, generator=generator)[:, 0]
