"""Far attention mass measured inside trained models, next to chapter 11's lower bound.

For a query ``i`` and a distance ``M``, the far mass of one attention head is the attention weight on
keys farther than ``M`` tokens:

    rho_M(i) = sum_{j : i - j > M} a_ij        (a_i: the head's attention row, sum_j a_ij = 1 for softmax).

Paper B's far-mass theorem (chapter 11, :func:`path_lib.theory.decoherence.far_mass_bound`) says: if every logit
of the row lies in ``[-lambda, lambda]``, then ``rho >= M_L / (M_L + K e^{2 lambda})`` with ``K`` near
and ``M_L`` far keys. Softmax does not change when a constant is added to a row, so the theorem applies
to the row shifted to be centred: ``lambda = (max_j logit_ij - min_j logit_ij) / 2``. That is the
``lambda`` used here, per row; near keys are the distances ``0..M`` (``K = M + 1``), far ones the rest
(``M_L = i - M``). The bound is a worst case; the measurement says where a trained model actually is.

The measurement uses the LAST query of each window (its row covers the whole context), for every layer
and head of a :class:`path_lib.nn.model.TinyLM`: the input of each attention layer is captured with a
forward pre-hook, and the row is recomputed from it with the layer's own parameters, kind by kind
(PaTH's keys are moved to the last position with :func:`path_lib.decoding.keys_to_end`, linear in T).
Stick-breaking attention (SBA) has no softmax: its far mass is measured, the bound does not apply.

    from path_lib.experiments.farmass import far_mass_by_length
    fm = far_mass_by_length(model, corpus.val, [64, 128, 256], distance=32, n_windows=8)
    fm["far_mass"]     # [n_layers, n_heads, n_lengths], mean over windows
    fm["bound"]        # the same shape: the chapter 11 lower bound with each row's own lambda
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, TypedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..theory import decoherence as theory
from ..reference.attention import apply_rope
from ..decoding import keys_to_end
from ..nn.layers import ALiBiAttention, FoXAttention, NoPEAttention, PaTHAttention, RoPEAttention, SBAAttention
from ..nn.model import TinyLM
from ..nn.rotations import RandomRotationAttention, TokenRotationAttention, rotate_pairs
from ..reference.sba import stick_breaking_weights
from ..validation import (as_device, check_finite, check_format, check_instance, check_int, check_ints,
                          check_mapping, check_seed, check_tensor, check_tokens)

__all__ = ["last_query_row", "attention_inputs", "far_mass", "far_mass_by_length", "far_mass_table",
           "far_mass_over_seeds"]


class QueryRow(TypedDict):
    """:func:`last_query_row`'s result: ``weights`` ``[B, Hq, T]``; ``logits`` ``[B, Hq, T]``, None for SBA;
    ``softmax``: whether the weights are the logits' softmax."""
    weights: torch.Tensor
    logits: Optional[torch.Tensor]
    softmax: bool


class FarMass(TypedDict):
    """:func:`far_mass`'s result: ``far_mass``, ``bound`` (NaN for SBA), ``lam``: ``[n_layers, Hq, B]``;
    ``softmax``: ``[n_layers]`` bool; ``n_near``, ``n_far``: the near and far keys' counts."""
    far_mass: np.ndarray
    bound: np.ndarray
    lam: np.ndarray
    softmax: np.ndarray
    n_near: int
    n_far: int


def _dt(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _rep(x: torch.Tensor, n: int) -> torch.Tensor:
    """[B, T, Hk, ...] -> [B, T, Hk * n, ...] (query head h uses key head h // n)."""
    return x if n == 1 else x.repeat_interleave(n, dim=2)


def _check_layer(layer) -> None:
    if not isinstance(layer, nn.Module) or not hasattr(layer, "qkv") or not hasattr(layer, "d_model"):
        raise TypeError(f"layer must be an attention layer of path_lib.nn, got {type(layer).__name__}")


@torch.no_grad()
def last_query_row(layer, x: torch.Tensor, token_ids: Optional[torch.Tensor] = None) -> QueryRow:
    """The attention row of the last query of each sequence, recomputed from the layer's input.

    Args:
        layer: an attention layer of :mod:`path_lib.nn.layers` / :mod:`path_lib.nn.rotations`.
        x: its input ``[B, T, d_model]`` (after the block's norm).
        token_ids: ``[B, T]`` for the token-angle rotations.
    Returns:
        ``{"weights": [B, Hq, T], "logits": [B, Hq, T] or None (SBA), "softmax": bool}``; for softmax kinds
        ``weights = softmax(logits)``.
    """
    _check_layer(layer)
    check_tensor(x, "x", ndim=3, finite=False)
    if x.shape[1] == 0 or x.shape[2] != layer.d_model:
        raise ValueError(f"x must be [B, T, d_model] with T >= 1 and d_model = {layer.d_model}, got {tuple(x.shape)}")
    check_finite(x, "x")
    if token_ids is not None:
        check_tokens(token_ids, 2 ** 63 - 1, name="token_ids")
        if token_ids.shape != x.shape[:2]:
            raise ValueError(f"token_ids must be [B, T] = {tuple(x.shape[:2])} like x, got {tuple(token_ids.shape)}")
    q, k, v = layer.qkv(x)
    dt = _dt(x)
    q, k = q.to(dt), k.to(dt)
    B, T, Hq, D = q.shape
    n_rep = Hq // k.shape[2]
    scale = D ** -0.5
    bias = None
    if isinstance(layer, SBAAttention):
        z = scale * torch.einsum("bhd,bthd->bht", q[:, -1], _rep(k, n_rep))
        valid = torch.ones(T, dtype=torch.bool, device=x.device)
        if not layer.attend_current:
            valid[-1] = False
        return {"weights": stick_breaking_weights(z, valid), "logits": None, "softmax": False}
    if isinstance(layer, PaTHAttention):
        w, beta, g = layer.path_params(x)
        k = keys_to_end(k, w.to(dt), beta.to(dt), block_size=getattr(layer, "block_size", 64)).to(dt)
        if g is not None:
            G = torch.cumsum(g.to(dt), dim=1)                       # [B, T, Hq]
            bias = (G[:, -1:] - G).transpose(1, 2)                  # [B, Hq, T]: G_i - G_j
    elif isinstance(layer, RoPEAttention):
        q, k = apply_rope(q, base=layer.rope_base), apply_rope(k, base=layer.rope_base)
    elif isinstance(layer, ALiBiAttention):
        dist = torch.arange(T - 1, -1, -1, device=x.device, dtype=dt)
        bias = -layer.slopes.to(device=x.device, dtype=dt)[None, :, None] * dist
    elif isinstance(layer, FoXAttention):
        G = torch.cumsum(F.logsigmoid(layer.g_proj(x).to(dt)), dim=1)
        bias = (G[:, -1:] - G).transpose(1, 2)
    elif isinstance(layer, (RandomRotationAttention, TokenRotationAttention)):
        if isinstance(layer, TokenRotationAttention):
            ids = token_ids if token_ids is not None else torch.zeros(B, T, dtype=torch.long, device=x.device)
            theta = layer.angles(ids, dt)
        else:
            theta = layer.angles(x).to(dt)
        phi = torch.cumsum(theta, dim=1)
        q, k = rotate_pairs(q, -_rep(phi, n_rep)), rotate_pairs(k, -phi)
    elif not isinstance(layer, NoPEAttention):
        raise TypeError(f"no far-mass rule for attention layer {type(layer).__name__}")
    logits = scale * torch.einsum("bhd,bthd->bht", q[:, -1], _rep(k, n_rep))
    if bias is not None:
        logits = logits + bias
    return {"weights": torch.softmax(logits, dim=-1), "logits": logits, "softmax": True}


@torch.no_grad()
def attention_inputs(model: TinyLM, tokens: torch.Tensor) -> List[Dict]:
    """Run ``model`` on ``tokens [B, T]`` and capture each attention layer's input (and token ids)."""
    if not isinstance(model, TinyLM):
        raise TypeError(f"model must be a TinyLM, got {type(model).__name__}")
    check_tokens(tokens, model.vocab_size, name="tokens", min_len=1)
    caught: List[Dict] = []
    hooks = []
    for block in model._each_block():
        def hook(module, args, _store=caught):
            _store.append({"layer": module, "x": args[0], "token_ids": getattr(module, "token_ids", None)})
        hooks.append(block.attn.register_forward_pre_hook(hook))
    was = model.training
    model.eval()
    try:
        model(tokens)
    finally:
        for h in hooks:
            h.remove()
        model.train(was)
    return caught


@torch.no_grad()
def far_mass(model: TinyLM, tokens: torch.Tensor, distance: int) -> FarMass:
    """Far mass of the last query of each window, per layer and head, and the chapter 11 bound.

    Args:
        model: a trained :class:`TinyLM`.
        tokens: ``[B, T]`` windows; the last position is the query (``T - 1`` earlier keys).
        distance: ``M``; far keys are those more than ``M`` tokens before the query.
    Returns:
        dict: ``far_mass``, ``bound`` (NaN for SBA) and ``lam``, each ``[n_layers, Hq, B]``; ``n_near``,
        ``n_far``; ``softmax``, ``[n_layers]`` bool.
    """
    check_instance(model, "model", TinyLM)
    check_tokens(tokens, model.vocab_size, name="tokens", min_len=1)
    check_int(distance, "distance", minimum=0)
    T = tokens.shape[1]
    dist = torch.arange(T - 1, -1, -1, device=tokens.device)       # distance of key j from the last query
    far = dist > distance
    n_far = int(far.sum())
    n_near = T - n_far
    out: Dict[str, List[np.ndarray]] = {"far_mass": [], "bound": [], "lam": []}
    softmax: List[bool] = []
    for rec in attention_inputs(model, tokens):
        row = last_query_row(rec["layer"], rec["x"], rec["token_ids"])
        rho = row["weights"][..., far].sum(-1).double().cpu().numpy()          # [B, Hq]
        out["far_mass"].append(rho.T)
        logits = row["logits"]
        if logits is not None:                                                 # the softmax rows
            lg = logits.double()
            lam = ((lg.max(-1).values - lg.min(-1).values) / 2).cpu().numpy()
            out["bound"].append(_bound(n_far, n_near, lam).T)
            out["lam"].append(lam.T)
        else:
            out["bound"].append(np.full(rho.T.shape, np.nan))
            out["lam"].append(np.full(rho.T.shape, np.nan))
        softmax.append(row["softmax"])
    return FarMass(far_mass=np.array(out["far_mass"]), bound=np.array(out["bound"]), lam=np.array(out["lam"]),
                   softmax=np.array(softmax), n_near=n_near, n_far=n_far)


def _bound(n_far: int, n_near: int, lam: np.ndarray) -> np.ndarray:
    """theory.far_mass_bound for an array of per-row lambdas (the function takes one lambda). Rows whose
    logit range is so wide that ``e^{2 lambda}`` overflows (a distance bias or a gate over a long
    context) get the bound's limit, 0."""
    def one(l):
        try:
            return float(theory.far_mass_bound(n_far, n_near, float(l)))
        except OverflowError:
            return 0.0
    flat = np.array([one(l) for l in np.ravel(lam)])
    return flat.reshape(np.shape(lam))


@torch.no_grad()
def far_mass_by_length(model: TinyLM, data: torch.Tensor, lengths: Sequence[int], *, distance: int,
                       n_windows: int = 8, seed: int = 4321, chunk_tokens: int = 16384, device=None) -> Dict:
    """Far mass as a function of the context length, on held-out bytes.

    Windows of each length end at the same positions of ``data`` (seeded, the same for every model and
    every length, as in :func:`path_lib.experiments.lm.evaluate_lengths`); the query is the last byte of a window.

    Args:
        model: a trained byte-level :class:`TinyLM`.
        data: 1-D ``uint8`` bytes (a validation split), longer than ``max(lengths)``.
        lengths: context lengths ``L`` (each > ``distance + 1`` to have far keys).
        distance: ``M``.
        n_windows: windows per length.
        chunk_tokens: windows per forward pass, ``max(1, chunk_tokens // L)``.
    Returns:
        ``{"lengths", "distance", "n_windows", "far_mass", "far_mass_se", "bound", "lam"}``: arrays
        ``[n_layers, n_heads, n_lengths]`` (mean over windows; ``se`` its standard error; ``bound`` and
        ``lam`` the mean per-row bound and lambda, NaN for SBA), ``"bound_violations"`` (rows whose
        measured far mass is below their own bound; 0 unless something is wrong), and ``"mean_far_mass"``
        ``[n_lengths]`` (mean over layers and heads).
    """
    check_instance(model, "model", TinyLM)
    lengths = check_ints(lengths, "lengths", minimum=2)
    check_int(distance, "distance", minimum=0)
    check_int(n_windows, "n_windows", minimum=1)
    check_seed(seed)
    check_int(chunk_tokens, "chunk_tokens", minimum=1)
    check_tensor(data, "data", ndim=1, dtypes=(torch.uint8, torch.int64, torch.int32), finite=False)
    if data.numel() <= max(lengths):
        raise ValueError(f"data must be 1-D with more than max(lengths) = {max(lengths)} bytes")
    if min(lengths) <= distance + 1:
        raise ValueError(f"every length must exceed distance + 1 = {distance + 1}, got lengths {lengths}")
    device = as_device(device) if device is not None else next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    ends = torch.randint(max(lengths), data.numel() + 1, (n_windows,), generator=g)
    fm, se, bd, lm, viol = [], [], [], [], 0
    for L in lengths:
        w = data[ends[:, None] - L + torch.arange(L)].long()
        per = max(1, chunk_tokens // L)
        parts = [far_mass(model, w[s:s + per].to(device), distance) for s in range(0, n_windows, per)]
        rho = np.concatenate([p["far_mass"] for p in parts], axis=-1)        # [n_layers, H, n_windows]
        bound = np.concatenate([p["bound"] for p in parts], axis=-1)
        viol += int(np.sum(rho < bound - 1e-9))
        fm.append(rho.mean(-1))
        se.append(rho.std(-1, ddof=1) / math.sqrt(n_windows) if n_windows > 1 else np.zeros(rho.shape[:2]))
        bd.append(bound.mean(-1))
        lm.append(np.concatenate([p["lam"] for p in parts], axis=-1).mean(-1))
    st = lambda a: np.stack(a, axis=-1)
    far = st(fm)
    return {"lengths": lengths, "distance": distance, "n_windows": n_windows, "far_mass": far,
            "far_mass_se": st(se), "bound": st(bd), "lam": st(lm), "bound_violations": viol,
            "mean_far_mass": far.mean(axis=(0, 1))}


def far_mass_table(results: Dict[str, Dict], *, fmt: str = "{:.3f}") -> str:
    """A Markdown table: one row per model (``{name: far_mass_by_length result}``), the far mass
    (mean over layers and heads) at each length, and the largest bound over layers and heads."""
    check_mapping(results, "results")
    if not results:
        raise ValueError("results must hold at least one model's far_mass_by_length result")
    for name, r in results.items():
        check_mapping(r, f"results[{name!r}]", keys=("lengths", "bound", "mean_far_mass"))
    check_format(fmt)
    first = next(iter(results.values()))
    Ls = first["lengths"]
    head = "| model | " + " | ".join(f"L={L}" for L in Ls) + " | bound (max over heads) at the longest L |"
    rows = [head, "|---" * (len(Ls) + 2) + "|"]
    for name, r in results.items():
        b = r["bound"][..., -1]
        bt = fmt.format(float(np.nanmax(b))) if np.isfinite(b).any() else "n/a (no softmax)"
        rows.append(f"| {name} | " + " | ".join(fmt.format(float(v)) for v in r["mean_far_mass"]) + f" | {bt} |")
    return "\n".join(rows)


def far_mass_over_seeds(runs: Sequence[Dict]) -> Dict[str, Dict]:
    """Far mass of the runs of :func:`path_lib.experiments.lm.run_experiment` (``run["far_mass"]``), per model across
    seeds: ``{model: {"lengths", "mean", "min", "max" (over seeds of the layer-and-head mean), "bound"
    (mean over seeds, layers and heads of the row bound; NaN for SBA), "bound_max" (largest over
    layers, heads and seeds), "violations"}}``."""
    if not isinstance(runs, (list, tuple)):
        raise TypeError(f"runs must be a list of run dicts, got {type(runs).__name__}")
    for i, r in enumerate(runs):
        check_mapping(r, f"runs[{i}]")
        if r.get("far_mass"):
            check_mapping(r["far_mass"], f"runs[{i}]['far_mass']", keys=(
                "lengths", "mean_far_mass", "bound", "bound_violations"))
            check_instance(r.get("model"), f"runs[{i}]['model']", str, "a model name (str)")
    out: Dict[str, Dict] = {}
    for r in runs:
        fm = r.get("far_mass")
        if not fm:
            continue
        o = out.setdefault(r["model"], {"lengths": list(fm["lengths"]), "_v": [], "_b": [], "_bmax": [],
                                        "violations": 0})
        o["_v"].append(np.asarray(fm["mean_far_mass"], dtype=float))
        b = np.asarray(fm["bound"], dtype=float)
        o["_b"].append(b.mean(axis=(0, 1)))
        o["_bmax"].append(b.max(axis=(0, 1)))
        o["violations"] += int(fm["bound_violations"])
    for o in out.values():
        v = np.stack(o.pop("_v"))
        o.update(mean=v.mean(0), min=v.min(0), max=v.max(0), bound=np.stack(o.pop("_b")).mean(0),
                 bound_max=np.stack(o.pop("_bmax")).max(0), n=len(v))
    return out
