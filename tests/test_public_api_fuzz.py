"""Property-based fuzz of the public API beyond the references (``test_validation_fuzz.py`` covers
``reference.attention``, ``reference.householder`` and the decoding functions): the layers, ``TinyLM``,
sampling, the caches, padding, the rotations, the Hugging Face model, the validation helpers, SBA and the
short convolution, and the blockwise algorithms. (The Triton kernels: ``test_kernels_fuzz.py``.)

The property, for every call: it either raises a ``ValueError`` / ``TypeError`` whose message names one
of the arguments that made it bad, or it returns a result that agrees with an independent float64
computation (NumPy, or the same model in float64 through another code path: the parallel forward
against token-by-token decoding). Any other exception (``RuntimeError``, ``IndexError``,
``KeyError``, ...) fails the test, and so does a result for input that must be refused.

The input classes are those of the issue "Bad input at the edges": B = 0 and T = 0, a float32 input to
a float64 layer, foreign and hand-made decoding states, NaN / inf / empty logits, tiny temperatures,
truthy non-bools (``1``, ``"yes"``) for bool flags, out-of-range indices, masks that contradict the
cache, and corrupted Hugging Face configs. Examples are drawn deterministically (``derandomize``).

``test_every_public_name_is_covered`` ties this file to the ``__all__`` of every module of ``path_lib``:
a name must be fuzzed here (or in ``test_validation_fuzz.py`` / ``test_kernels_fuzz.py``), or be a
constant, or its module must be listed as out of scope with the reason.
"""
from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import math
import pkgutil

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fuzz_helpers import DETERMINISTIC, REFUSED, close, judge
from helpers import decode_by_steps, numpy_path_attention, random_path_inputs
from path_lib import validation as V
from path_lib.blockwise.mirror import blockwise_path_attention
from path_lib.decoding import PaTHCache, is_cache
from path_lib.nn import cache as C, padding as P, rotations as R, sampling as S
from path_lib.nn.layers import ATTENTION_LAYERS, make_attention, register_attention, sdpa_attention
from path_lib.nn.model import TinyLM
from path_lib.reference import sba as SBA
from path_lib.impl import path_attention
from path_lib.reference.short_conv import check_short_conv, short_conv_normalize_torch

f64, f32 = torch.float64, torch.float32
FUZZ = settings(DETERMINISTIC, max_examples=60)
FEW = settings(FUZZ, max_examples=25)
TRUTHY = (1, 0, "yes", "", 1.0, torch.tensor(True), np.bool_(True))


def _seed(data) -> int:
    return data.draw(st.integers(0, 2 ** 16), label="seed")


# ----------------------------------------------------------------------------------------------
# layers
# ----------------------------------------------------------------------------------------------

KINDS = sorted(ATTENTION_LAYERS)
D_MODEL, HEADS = 8, 2


def _layer(kind, seed, dtype=f64, **kw):
    torch.manual_seed(seed)
    layer = make_attention(kind, D_MODEL, HEADS, **kw).to(dtype)
    layer.eval()
    return layer


@FUZZ
@given(data=st.data())
def test_layer_forward_is_refused_by_name_or_equals_decoding(data):
    """forward(x): B = 0 / T = 0 give empty outputs; a float32 x in a float64 layer, another width, a 2-D x,
    a list and NaN are refused naming ``x``; otherwise the parallel forward equals step-by-step decoding
    and the prefill (float64)."""
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    B, T = data.draw(st.sampled_from([0, 1, 2])), data.draw(st.sampled_from([0, 1, 3]))
    layer = _layer(kind, _seed(data))
    x = torch.randn(B, T, D_MODEL, dtype=f64)
    bad = ()
    mutation = data.draw(st.sampled_from(["none", "float32", "width", "2d", "list", "nan", "int"]))
    if mutation == "float32":
        x, bad = x.float(), ("x",)
    elif mutation == "width":
        x, bad = torch.randn(B, T, D_MODEL + 1, dtype=f64), ("x",)
    elif mutation == "2d":
        x, bad = x.reshape(B * T, D_MODEL), ("x",)
    elif mutation == "list":
        x, bad = x.tolist(), ("x",)
    elif mutation == "nan" and x.numel():
        x, bad = x.clone().fill_(float("nan")), ("x",)
    elif mutation == "int":
        x, bad = x.long(), ("x",)

    def check(y):
        assert y.shape == (B, T, D_MODEL) and y.dtype == f64
        close(y, decode_by_steps(layer, x)[0])
        close(y, layer.prefill(x)[0])
        close(copy.deepcopy(layer).float()(x.float()), y, 1e-4)      # float32 against the float64 result
    judge(lambda: layer(x), bad, check)


@FUZZ
@given(data=st.data())
def test_layer_step_refuses_foreign_states_by_name(data):
    """step(x_t, state): a state from another layer kind or size, a hand-made dict (``{}``), another batch
    size or a non-dict are refused naming ``state``; a state from this layer continues decoding exactly."""
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    seed = _seed(data)
    layer = _layer(kind, seed)
    x = torch.randn(2, 3, D_MODEL, dtype=f64)
    _, state = decode_by_steps(layer, x[:, :2])
    mutation = data.draw(st.sampled_from(["none", "empty", "foreign", "sizes", "batch", "list", "x_t"]))
    bad, x_t = ("state",), x[:, 2]
    if mutation == "none":
        bad = ()
    elif mutation == "empty":
        state = {}
    elif mutation == "foreign":
        other = data.draw(st.sampled_from([k for k in KINDS if k != kind]))
        other_layer = _layer(other, seed)
        if type(other_layer) is type(layer) and other_layer._state_tag() == layer._state_tag():
            bad = ()                                       # an alias of this kind: its state is this layer's
            state = decode_by_steps(layer, x[:, :2])[1]
        else:
            state = decode_by_steps(other_layer, x[:, :2])[1]
    elif mutation == "sizes":
        state = decode_by_steps(make_attention(kind, D_MODEL, 1).double(), x[:, :2])[1]
    elif mutation == "batch":
        state = decode_by_steps(layer, x[:1, :2])[1]
    elif mutation == "list":
        state = [state]
    elif mutation == "x_t":
        x_t, bad = x[:, 2].float(), ("x_t",)

    def check(out):
        y, new_state = out
        close(y, layer(x)[:, 2])
        assert new_state["layer"] == layer._state_tag()
        holder = C.StateCache()
        holder.set_layer_state(0, new_state)
        assert holder.get_seq_length(0) == 3                   # the tokens this state has seen
    judge(lambda: layer.step(x_t, state), bad, check)


@FEW
@given(data=st.data())
def test_check_values_is_a_bool_or_none(data):
    """``check_values``: None, True or False on every layer and TinyLM (attribute or argument); a truthy
    non-bool is a TypeError naming it; a valid setting reaches every layer of a TinyLM."""
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    value = data.draw(st.sampled_from((None, True, False) + TRUTHY))
    bad = () if value is None or isinstance(value, bool) else ("check_values",)
    layer = _layer(kind, 0)
    judge(lambda: setattr(layer, "check_values", value), bad,
          lambda _: layer.check_values is value or pytest.fail("not set"))

    def model_check(lm):
        assert lm.check_values is value and all(b.attn.check_values is value for b in lm.blocks)
    judge(lambda: TinyLM(7, D_MODEL, 1, HEADS, attention=kind, check_values=value), bad, model_check)
    lm = TinyLM(7, D_MODEL, 1, HEADS, attention=kind)
    judge(lambda: setattr(lm, "check_values", value), bad, lambda _: model_check(lm))


@FUZZ
@given(data=st.data())
def test_path_decode_mask_must_agree_with_the_cache(data):
    """A decoding ``attention_mask [B, t + 1]`` must repeat the padding the cache was built with (after a
    prefill with or without padding); one that turns a cached token into padding (or back) is refused
    naming ``attention_mask``; an agreeing one decodes as the row alone would."""
    torch.manual_seed(_seed(data))
    layer = make_attention(data.draw(st.sampled_from(["path", "path_fox"])), D_MODEL, HEADS).double()
    T = data.draw(st.integers(1, 4))
    x = torch.randn(2, T, D_MODEL, dtype=f64)
    prompt_mask = torch.ones(2, T, dtype=torch.long)
    pad = data.draw(st.integers(0, T - 1))
    prompt_mask[1, :pad] = 0                                   # row 1 left-padded
    use_mask = data.draw(st.booleans())
    _, _, cache = layer(x, attention_mask=prompt_mask if use_mask else None, use_cache=True)
    held = prompt_mask if use_mask else torch.ones(2, T, dtype=torch.long)
    mask = torch.cat([held, torch.ones(2, 1, dtype=torch.long)], 1)
    flip = data.draw(st.sampled_from([None] + [(b, t) for b in range(2) for t in range(T)]))
    bad = ()
    if flip is not None:
        mask[flip] = 1 - mask[flip]
        bad = ("attention_mask",)
    x_new = torch.randn(2, 1, D_MODEL, dtype=f64)

    def check(out):
        y = out[0]
        for b in range(2):                                     # each row alone, without its padding
            keep = held[b].bool()
            alone = torch.cat([x[b:b + 1, keep], x_new[b:b + 1]], 1)
            close(y[b, 0], layer(alone)[0, -1])
    judge(lambda: layer(x_new, attention_mask=mask, past_key_values=cache), bad, check)


@FUZZ
@given(data=st.data())
def test_sdpa_attention_checks_q_k_v_and_bias(data):
    """sdpa_attention(q, k, v, bias): wrong k / v / bias shapes, dtypes or types are refused by name (a k
    with another T too); otherwise it equals a NumPy causal softmax with the bias (float64)."""
    B, T, Hk = data.draw(st.sampled_from([0, 1, 2])), data.draw(st.sampled_from([0, 1, 3])), 1
    Hq = data.draw(st.sampled_from([1, 2]))
    gen = torch.Generator().manual_seed(_seed(data))
    Dv = data.draw(st.sampled_from([4, 6]))
    q, k, v = (torch.randn(B, T, h, d, generator=gen, dtype=f64) for h, d in ((Hq, 4), (Hk, 4), (Hk, Dv)))
    bias = torch.randn(1, Hq, T, T, generator=gen, dtype=f64) if data.draw(st.booleans()) else None
    mutation = data.draw(st.sampled_from(["none", "k_T", "v_heads", "k_dtype", "k_list", "bias_shape",
                                          "bias_int", "bias_list", "q_3d"]))
    bad = ()
    if mutation == "k_T":
        k, bad = torch.randn(B, T + 1, Hk, 4, dtype=f64), ("k", "v")
    elif mutation == "v_heads":
        v, bad = torch.randn(B, T, Hk + 1, Dv, dtype=f64), ("v",)
    elif mutation == "k_dtype":
        k, bad = k.float(), ("q", "k", "v")
    elif mutation == "k_list":
        k, bad = k.tolist(), ("k",)
    elif mutation == "bias_shape":
        bias, bad = torch.zeros(1, Hq, T + 2, T, dtype=f64), ("bias",)
    elif mutation == "bias_int":
        bias, bad = torch.zeros(1, Hq, T, T, dtype=torch.int64), ("bias",)
    elif mutation == "bias_list":
        bias, bad = [[0.0]], ("bias",)
    elif mutation == "q_3d":
        q, bad = q.flatten(0, 1), ("q",)

    def reference():
        qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
        out = np.zeros((B, T, Hq, Dv))
        for b in range(B):
            for h in range(Hq):
                for i in range(T):
                    z = 0.5 * (kn[b, :i + 1, h * Hk // Hq] @ qn[b, i, h])
                    if bias is not None:
                        z = z + bias.numpy()[0, h, i, :i + 1]
                    p = np.exp(z - z.max())
                    out[b, i, h] = (p / p.sum()) @ vn[b, :i + 1, h * Hk // Hq]
        return out
    judge(lambda: sdpa_attention(q, k, v, bias), bad, lambda o: close(o, reference()))


@FUZZ
@given(data=st.data())
def test_path_forward_options(data):
    """PaTHAttention.forward's options: a padding mask gives each row's result alone, packed sequences
    (cu_seqlens) each sequence's alone (float64); both together, packing with a cache, a float mask, a
    mask of another shape, a non-bool use_cache and a past_key_values without get/set_layer_state are
    refused naming them."""
    torch.manual_seed(_seed(data))
    layer = make_attention(data.draw(st.sampled_from(["path", "path_fox"])), D_MODEL, HEADS).double()
    B, T = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 4))
    x = torch.randn(B, T, D_MODEL, dtype=f64)
    mask = torch.from_numpy(np.random.default_rng(_seed(data)).random((B, T)) < 0.7).long()
    option = data.draw(st.sampled_from(["mask", "cu_seqlens", "both", "cu_cache", "mask_float", "mask_shape",
                                        "use_cache", "past_key_values"]))
    if option == "mask":
        def check(y):
            for b in range(B):
                keep = mask[b].bool()
                if keep.any():
                    close(y[b, keep], layer(x[b:b + 1, keep])[0])
        judge(lambda: layer(x, attention_mask=mask), (), check)
    elif option == "cu_seqlens":
        lengths = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
        offsets = [0] + np.cumsum(lengths).tolist()
        packed = torch.randn(1, offsets[-1], D_MODEL, dtype=f64)
        cu = torch.tensor(offsets, dtype=data.draw(st.sampled_from([torch.int32, torch.int64])))

        def check(y):
            for a, b in zip(offsets, offsets[1:]):
                if b > a:
                    close(y[:, a:b], layer(packed[:, a:b]))
        judge(lambda: layer(packed, cu_seqlens=cu), (), check)
    elif option == "both":
        judge(lambda: layer(x[:1], attention_mask=mask[:1], cu_seqlens=torch.tensor([0, T])),
              ("cu_seqlens", "attention_mask"))
    elif option == "cu_cache":
        judge(lambda: layer(x[:1], cu_seqlens=torch.tensor([0, T]), use_cache=True), ("cu_seqlens",))
    elif option == "mask_float":
        judge(lambda: layer(x, attention_mask=mask.double()), ("attention_mask",))
    elif option == "mask_shape":
        judge(lambda: layer(x, attention_mask=mask[:, :-1] if T else mask[None]), ("attention_mask",))
    elif option == "use_cache":
        judge(lambda: layer(x, use_cache=data.draw(st.sampled_from(TRUTHY))), ("use_cache",))
    else:
        judge(lambda: layer(x, past_key_values=data.draw(st.sampled_from([{}, [], 3, "cache"]))), ("past_key_values",))


# ----------------------------------------------------------------------------------------------
# TinyLM and sampling
# ----------------------------------------------------------------------------------------------

def _np_filter(logits: np.ndarray, top_k, top_p) -> np.ndarray:
    """The set of tokens the filters keep (bool [B, V]), from the definitions in float64."""
    keep = np.ones(logits.shape, dtype=bool)
    for b, row in enumerate(logits):
        if top_k is not None and top_k < row.size:
            keep[b] &= row >= np.sort(row)[::-1][top_k - 1]
        if top_p is not None and top_p < 1:
            masked = np.where(keep[b], row, -np.inf)
            order = np.argsort(-masked, kind="stable")
            p = np.exp(masked[order] - masked[order][0])
            p /= p.sum()
            before = np.cumsum(p) - p
            drop = np.zeros(row.size, dtype=bool)
            drop[order] = before >= top_p
            drop[order[0]] = False
            keep[b] &= ~drop
    return keep


@FUZZ
@given(data=st.data())
def test_sampling_is_refused_by_name_or_draws_from_the_filtered_set(data):
    """sample_next / filter_logits: NaN or +inf logits, V = 0, rows of -inf, top_k <= 0, top_p outside
    (0, 1], negative / NaN temperatures and non-bool check_values are refused by name; otherwise greedy is
    the float64 argmax and a sampled token lies in the NumPy top-k / top-p set, for any temperature > 0
    (1e-300 included)."""
    B, V_ = data.draw(st.sampled_from([0, 1, 3])), data.draw(st.sampled_from([1, 2, 5]))
    gen = torch.Generator().manual_seed(_seed(data))
    logits = torch.randn(B, V_, generator=gen) * data.draw(st.sampled_from([1.0, 30.0]))
    if data.draw(st.booleans()) and V_ > 1:
        logits[:, 0] = float("-inf")                            # a ruled-out token is fine
    temperature = data.draw(st.sampled_from([0.0, 1e-300, 0.3, 1.0, 1e300]))
    top_k = data.draw(st.sampled_from([None, 1, 2, 10])) if temperature else None
    top_p = data.draw(st.sampled_from([None, 0.05, 0.5, 1.0])) if temperature else None
    check_values = True
    mutation = data.draw(st.sampled_from(["none", "nan", "posinf", "allneginf", "V0", "top_k", "top_p",
                                          "temperature", "check_values", "logits_1d"]))
    bad = ()
    if mutation == "nan" and B:
        logits[-1, -1], bad = float("nan"), ("logits",)
    elif mutation == "posinf" and B:
        logits[0, -1], bad = float("inf"), ("logits",)
    elif mutation == "allneginf" and B:
        logits[0], bad = float("-inf"), ("logits",)
    elif mutation == "V0":
        logits, bad = torch.zeros(B, 0), ("logits",)
    elif mutation == "top_k":
        top_k, bad = data.draw(st.sampled_from([0, -1, True, 1.5])), ("top_k",)
    elif mutation == "top_p":
        top_p, bad = data.draw(st.sampled_from([0.0, -0.1, 1.5, float("nan"), "0.5"])), ("top_p",)
    elif mutation == "temperature":
        temperature, bad = data.draw(st.sampled_from([-1.0, float("nan"), float("inf"), None])), ("temperature",)
    elif mutation == "check_values":
        check_values, bad = data.draw(st.sampled_from(TRUTHY)), ("check_values",)
    elif mutation == "logits_1d":
        logits, bad = logits.flatten(), ("logits",)
    if bad and mutation in ("top_k", "top_p") and temperature == 0:
        bad = ("top_k", "top_p")                                # either option may be reported first

    def check(tokens):
        assert tokens.shape == (B,) and tokens.dtype == torch.int64
        if temperature == 0:
            assert torch.equal(tokens, logits.double().argmax(-1))
        else:
            x = logits.double().numpy()
            scaled = (x - x.max(1, keepdims=True)) / temperature if B else x
            keep = _np_filter(scaled, top_k, top_p)
            assert all(keep[b, int(t)] and math.isfinite(float(logits[b, t])) for b, t in enumerate(tokens))
    generator = torch.Generator().manual_seed(1)
    judge(lambda: S.sample_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator,
                                check_values=check_values), bad, check)
    if mutation in ("none", "top_k", "top_p", "logits_1d") and temperature:
        def check_filter(out):
            kept = out != -math.inf
            keep = torch.from_numpy(_np_filter(logits.double().numpy(), top_k, top_p))
            assert torch.equal(kept, keep & (logits != -math.inf)) and torch.equal(out[kept], logits[kept])
        judge(lambda: S.filter_logits(logits, top_k, top_p), bad, check_filter)


@FEW
@given(data=st.data())
def test_tinylm_edges(data):
    """TinyLM: B = 0 gives empty logits; prefill then step equals the forward (float64); generate with a
    tiny temperature is greedy; out-of-range or float tokens and a foreign state are refused by name."""
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    torch.manual_seed(_seed(data))
    lm = TinyLM(7, D_MODEL, 1, HEADS, attention=kind).double().eval()
    B = data.draw(st.sampled_from([0, 1, 2]))
    tokens = torch.randint(0, 7, (B, 3))
    mutation = data.draw(st.sampled_from(["none", "range", "float", "state"]))
    if mutation == "range":
        bad_tokens = tokens.clone()
        if B:
            bad_tokens[0, 0] = 7
        judge(lambda: lm(bad_tokens), ("tokens",) if B else (), lambda y: y.shape == (B, 3, 7) or pytest.fail())
        return
    if mutation == "float":
        judge(lambda: lm(tokens.double()), ("tokens",))
        return
    if mutation == "state":
        judge(lambda: lm.step(tokens[:, 0], [{"k": 1}]), ("state",))
        return
    logits = judge(lambda: lm(tokens), (), lambda y: y.shape == (B, 3, 7) or pytest.fail())
    last, state = lm.prefill(tokens[:, :2])
    close(last, logits[:, 1])
    close(lm.step(tokens[:, 2], state)[0], logits[:, 2])
    if B:
        greedy = lm.generate(tokens, 2)
        assert torch.equal(lm.generate(tokens, 2, temperature=1e-300), greedy)


# ----------------------------------------------------------------------------------------------
# caches
# ----------------------------------------------------------------------------------------------

def _path_state(B, seed):
    torch.manual_seed(seed)
    layer = make_attention("path_fox", D_MODEL, HEADS).double()
    return layer, layer.prefill(torch.randn(B, 3, D_MODEL, dtype=f64))[1]


@FUZZ
@given(data=st.data())
def test_cache_select_is_refused_by_name_or_keeps_the_rows(data):
    """select(index) on PaTHCache, select_state and StateCache: out-of-range or negative rows, float, 2-D
    and non-tensor indices are refused naming ``index`` before anything changes; a valid index keeps
    exactly those rows (compared with indexing the tensors taken before)."""
    B = data.draw(st.integers(1, 3))
    layer, state = _path_state(B, _seed(data))
    rows = data.draw(st.lists(st.integers(0, B - 1), max_size=4))
    index, bad = torch.tensor(rows, dtype=torch.int64), ()
    mutation = data.draw(st.sampled_from(["none", "high", "negative", "float", "2d", "list", "int32"]))
    if mutation == "high":
        index, bad = torch.tensor(rows + [B + data.draw(st.integers(0, 3))]), ("index",)
    elif mutation == "negative":
        index, bad = torch.tensor(rows + [-1]), ("index",)
    elif mutation == "float":
        index, bad = index.double(), ("index",)
    elif mutation == "2d":
        index, bad = index[None], ("index",)
    elif mutation == "list":
        index, bad = rows, ("index",)
    elif mutation == "int32":
        index = index.int()
    target = data.draw(st.sampled_from(["PaTHCache", "select_state", "StateCache"]))
    cache = state["cache"]
    keys, conv = cache.keys.clone(), state["conv"].clone()
    if target == "PaTHCache":
        call = lambda: cache.select(index)                     # noqa: E731
    elif target == "select_state":
        call = lambda: C.select_state(state, index)            # noqa: E731
    else:
        holder = C.StateCache()
        holder.set_layer_state(0, state)
        call = lambda: holder.select(index)                    # noqa: E731

    def check(_):
        close(cache.keys, keys[torch.as_tensor(rows, dtype=torch.int64)])
        if target != "PaTHCache":
            close(state["conv"], conv[torch.as_tensor(rows, dtype=torch.int64)])
    judge(call, bad, check)
    if bad:                                                    # nothing changed
        close(cache.keys, keys)


@FEW
@given(data=st.data())
def test_layer_caches_get_and_set_by_name(data):
    """StateCache / PaTHDynamicCache: a negative or non-int layer_idx and a state that is not a layer's
    decoding state are refused by name; a stored state comes back as it was."""
    pytest.importorskip("transformers")
    from path_lib.nn.hf import PaTHDynamicCache
    holder = data.draw(st.sampled_from([C.StateCache, PaTHDynamicCache]))()
    _, state = _path_state(1, 0)
    idx = data.draw(st.sampled_from([0, 2, -1, "0", 1.0, True]))
    bad_idx = () if isinstance(idx, int) and not isinstance(idx, bool) and idx >= 0 else ("layer_idx",)
    judge(lambda: holder.get_layer_state(idx), bad_idx, lambda s: s is None or pytest.fail("not empty"))
    value = data.draw(st.sampled_from(["state", "list", "none", "empty"]))
    stored = {"state": state, "list": [], "none": None, "empty": {}}[value]
    bad = ("layer_idx",) if bad_idx else ()
    if value in ("list", "none") or (value == "empty" and isinstance(holder, PaTHDynamicCache)):
        bad = bad + ("state",)
    judge(lambda: holder.set_layer_state(idx, stored), bad,
          lambda _: holder.get_layer_state(idx) is stored or pytest.fail("not stored"))


@FUZZ
@given(data=st.data())
def test_path_cache_building_blocks(data):
    """PaTHCache.transform / append / attend (the parts of a step) check shapes, dtypes and the scale by
    name; used in order they give the NumPy definition of PaTH attention (float64)."""
    B, T = data.draw(st.integers(0, 2)), data.draw(st.integers(1, 4))
    q, k, v, w, beta, g = random_path_inputs(B=B, T=T, Hq=2, Hk=1, D=4, gate=data.draw(st.booleans()),
                                             seed=_seed(data))
    cache = PaTHCache(B, 2, 1, 4, dtype=f64)
    broken = data.draw(st.sampled_from([None, "transform", "append", "attend"]))
    part = data.draw(st.sampled_from(["shape", "type", "dtype", "scale"]))
    outs = []
    for t in range(T):
        w_t, beta_t, k_t, v_t, q_t, scale = w[:, t], beta[:, t], k[:, t], v[:, t], q[:, t], None
        g_t = None if g is None else g[:, t]
        bad = ()
        if broken is not None and t == T - 1:
            name = {"transform": "w_t", "append": "k_t", "attend": "q_t"}[broken]
            value = {"w_t": w_t, "k_t": k_t, "q_t": q_t}[name]
            if part == "scale" and broken == "attend":
                scale, name = data.draw(st.sampled_from([0.0, -1.0, "0.5", float("nan")])), "scale"
            elif part == "type":
                value = value.tolist()
            elif part == "dtype":
                value = value.long()
            else:
                value = value[..., :3]
            w_t, k_t, q_t = (value if n == name else x for n, x in (("w_t", w_t), ("k_t", k_t), ("q_t", q_t)))
            bad = (name,)
        if judge(lambda: cache.transform(w_t, beta_t), bad if broken == "transform" else ()) is REFUSED:
            return
        if judge(lambda: cache.append(k_t, v_t, g_t), bad if broken == "append" else ()) is REFUSED:
            return
        out = judge(lambda: cache.attend(q_t, 0.5 if scale is None else scale), bad if broken == "attend" else ())
        if out is REFUSED:
            return
        outs.append(out)
    close(torch.stack(outs, 1), numpy_path_attention(q, k, v, w, beta, g))


def test_decoding_cache_protocol():
    """is_cache recognises the caches by the DecodingCache protocol, never a class or a look-alike name."""
    _, state = _path_state(1, 0)

    class TritonPaTHCache:                                     # a class-name impostor
        pass
    assert is_cache(state["cache"]) and not is_cache(PaTHCache) and not is_cache(TritonPaTHCache())
    assert not any(is_cache(x) for x in (None, {}, state, "PaTHCache", torch.zeros(1)))


# ----------------------------------------------------------------------------------------------
# padding helpers
# ----------------------------------------------------------------------------------------------

@FUZZ
@given(data=st.data())
def test_padding_helpers(data):
    """compaction / gather_time / varlen_layout / check_attention_mask / check_cu_seqlens against NumPy:
    wrong types, dtypes and shapes are refused by name."""
    B, T = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 4))
    valid = torch.from_numpy(np.random.default_rng(_seed(data)).random((B, T)) < 0.6)
    which = data.draw(st.sampled_from(["compaction", "gather_time", "varlen_layout", "mask", "cu_seqlens"]))
    mutation = data.draw(st.sampled_from(["none", "dtype", "type", "shape"]))
    if which == "compaction":
        arg = {"none": valid, "dtype": valid.long(), "type": valid.tolist(), "shape": valid[None]}[mutation]

        def check(out):
            perm, inv = out
            for b in range(B):
                row = valid[b].numpy()
                expect = list(np.flatnonzero(row)) + list(np.flatnonzero(~row))
                assert perm[b].tolist() == expect and perm[b][inv[b]].tolist() == list(range(T))
        judge(lambda: P.compaction(arg), () if mutation == "none" else ("valid",), check)
    elif which == "gather_time":
        x = torch.randn(B, T, 2, dtype=f64)
        index = torch.randint(0, max(T, 1), (B, T)) if T else torch.zeros(B, 0, dtype=torch.long)
        index, bad = {"none": (index, ()), "dtype": (index.double(), ("index",)), "type": (index.tolist(), ("index",)),
                      "shape": (index[None], ("index",))}[mutation]
        judge(lambda: P.gather_time(x, index), bad,
              lambda o: close(o, np.take_along_axis(x.numpy(), index.numpy()[..., None], 1)))
    elif which == "varlen_layout":
        lengths = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
        offsets = [0] + list(np.cumsum(lengths).tolist())
        arg, bad = {"none": (offsets, ()), "dtype": ([float(o) for o in offsets], ("offsets",)),
                    "type": (torch.tensor(offsets), ("offsets",)),
                    "shape": (offsets[::-1] if offsets[-1] else [0, -1], ("offsets",))}[mutation]

        def check(out):
            index, ok = out
            for i, n in enumerate(lengths):
                assert ok[i].tolist() == [t < n for t in range(max(lengths))]
                assert index[i, :n].tolist() == list(range(offsets[i], offsets[i] + n))
        judge(lambda: P.varlen_layout(arg, "cpu"), bad, check)
    elif which == "mask":
        mask = valid.long()
        mask, bad = {"none": (mask, ()), "dtype": (mask.float(), ("attention_mask",)),
                     "type": (mask.tolist(), ("attention_mask",)), "shape": (mask[:, :-1] if T else mask[None],
                                                                             ("attention_mask",))}[mutation]
        judge(lambda: P.check_attention_mask(mask, B, T, 0, torch.zeros(1), check_values=True), bad,
              lambda o: torch.equal(o, valid) or pytest.fail("wrong mask"))
    else:
        cu = torch.tensor([0, T], dtype=torch.int32)
        cu, bad = {"none": (cu, ()), "dtype": (cu.float(), ("cu_seqlens",)), "type": ([0, T], ("cu_seqlens",)),
                   "shape": (cu[None], ("cu_seqlens",))}[mutation]
        judge(lambda: P.check_cu_seqlens(cu, 1, T), bad, lambda o: o == [0, T] or pytest.fail("wrong offsets"))


# ----------------------------------------------------------------------------------------------
# rotations
# ----------------------------------------------------------------------------------------------

def _np_rotate(x, angle):
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty(np.broadcast_shapes(x.shape, angle.shape[:-1] + (x.shape[-1],)))
    out[..., 0::2] = a * np.cos(angle) - b * np.sin(angle)
    out[..., 1::2] = a * np.sin(angle) + b * np.cos(angle)
    return out


def _np_rotation_attention(q, k, v, theta, rotate_values):
    q, k, v, theta = (np.asarray(t.double()) for t in (q, k, v, theta))
    B, T, Hq, D = q.shape
    Hk = k.shape[2]
    phi = np.cumsum(theta, axis=1)
    out = np.zeros((B, T, Hq, v.shape[-1]))
    for b in range(B):
        for h in range(Hq):
            hk = h * Hk // Hq
            for i in range(T):
                z = np.array([D ** -0.5 * q[b, i, h] @ _np_rotate(k[b, j, hk], phi[b, i, hk] - phi[b, j, hk])
                              for j in range(i + 1)])
                p = np.exp(z - z.max())
                p /= p.sum()
                vals = [(_np_rotate(v[b, j, hk], phi[b, i, hk] - phi[b, j, hk]) if rotate_values else v[b, j, hk])
                        for j in range(i + 1)]
                out[b, i, h] = p @ np.array(vals)
    return out


@FUZZ
@given(data=st.data())
def test_rotation_helpers(data):
    """rotate_pairs, cumulative_angles, block_rotation_matrix, accumulated_rotation_attention, angle_scales
    and mixing_windows against NumPy (float64); bad types, odd dims, wrong shapes, NaN sigma and truthy
    flags are refused by name."""
    gen = torch.Generator().manual_seed(_seed(data))
    which = data.draw(st.sampled_from(["rotate", "cumulative", "matrix", "attention", "scales", "windows"]))
    bad_input = data.draw(st.booleans())
    if which == "rotate":
        x, angle = torch.randn(2, 3, 4, generator=gen, dtype=f64), torch.randn(3, 2, generator=gen, dtype=f64)
        if bad_input:
            x, angle, bad = data.draw(st.sampled_from([(x[..., :3], angle, ("x",)), (x, angle[..., :1], ("angle",)),
                                                       (x, angle[:2], ("angle",)), (x.tolist(), angle, ("x",)),
                                                       (x, angle.long(), ("angle",))]))
        else:
            bad = ()
        judge(lambda: R.rotate_pairs(x, angle), bad, lambda o: close(o, _np_rotate(x.numpy(), angle.numpy())))
    elif which == "cumulative":
        theta = torch.randn(1, 3, 1, 2, generator=gen, dtype=f64)
        arg, bad = ((theta[0], ("theta",)) if bad_input else (theta, ()))
        judge(lambda: R.cumulative_angles(arg), bad, lambda o: close(o, np.cumsum(theta.numpy(), 1)))
    elif which == "matrix":
        angle = torch.randn(2, 3, generator=gen, dtype=f64)
        arg, bad = ((angle.tolist(), ("angle",)) if bad_input else (angle, ()))

        def check(R_):
            x = torch.randn(2, 6, generator=gen, dtype=f64)
            close(torch.einsum("bij,bj->bi", R_, x), _np_rotate(x.numpy(), angle.numpy()))
        judge(lambda: R.block_rotation_matrix(arg), bad, check)
    elif which == "attention":
        B, T = data.draw(st.sampled_from([0, 1, 2])), data.draw(st.sampled_from([0, 1, 3]))
        q, k, v = (torch.randn(B, T, h, 4, generator=gen, dtype=f64) for h in (2, 1, 1))
        theta = torch.randn(B, T, 1, 2, generator=gen, dtype=f64)
        rotate_values, bad = data.draw(st.booleans()), ()
        if bad_input:
            q, k, v, theta, rotate_values, bad = data.draw(st.sampled_from([
                (q, k, v, theta[..., :1], rotate_values, ("theta",)), (q, k[:, :, :, :3], v, theta, rotate_values,
                                                                        ("k", "q")),
                (q, k, v, theta.long(), rotate_values, ("theta",)), (q, k, v, theta, 1, ("rotate_values",)),
                (q, k.float(), v, theta, rotate_values, ("q", "k", "v"))]))
        judge(lambda: R.accumulated_rotation_attention(q, k, v, theta, rotate_values=rotate_values), bad,
              lambda o: close(o, _np_rotation_attention(q, k, v, theta, rotate_values)))
    elif which == "scales":
        n, hi, lo = data.draw(st.integers(1, 5)), 2.0, 0.1
        bad = ()
        if bad_input:
            n, hi, lo, bad = data.draw(st.sampled_from([(0, hi, lo, ("n_blocks",)), (n, float("nan"), lo, ("sigma_max",)),
                                                        (n, hi, -1.0, ("sigma_min",)), (n, lo, hi, ("sigma_min", "sigma_max")),
                                                        (2.0, hi, lo, ("n_blocks",))]))
        judge(lambda: R.angle_scales(n, hi, lo), bad,
              lambda o: close(o, [hi] if n == 1 else [hi * (lo / hi) ** (i / (n - 1)) for i in range(n)], 1e-6))
    else:
        sigma = data.draw(st.sampled_from([0.5, 2, torch.tensor([0.1, 1.0]), float("nan"), -1.0, "1",
                                           torch.tensor([1.0, -1.0])]))
        ok = (isinstance(sigma, torch.Tensor) and bool((sigma > 0).all())) or (
            isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0)
        judge(lambda: R.mixing_windows(sigma), () if ok else ("sigma",),
              lambda o: close(o, 2.0 / np.asarray(torch.as_tensor(sigma, dtype=f64)) ** 2))


# ----------------------------------------------------------------------------------------------
# registry
# ----------------------------------------------------------------------------------------------

@FEW
@given(data=st.data())
def test_make_and_register_attention(data):
    """make_attention refuses an unknown kind by name; register_attention refuses a non-str name or a
    non-callable factory, and a registered factory builds the layer."""
    kind = data.draw(st.sampled_from(KINDS + ["nope2", 3]))
    bad = () if kind in ATTENTION_LAYERS else ("attention",)
    judge(lambda: make_attention(kind, D_MODEL, HEADS), bad, lambda layer: layer.d_model == D_MODEL or pytest.fail())
    name, factory = data.draw(st.sampled_from([("fuzz_nope", ATTENTION_LAYERS["nope"]), (3, ATTENTION_LAYERS["nope"]),
                                               ("", ATTENTION_LAYERS["nope"]), ("fuzz_nope", "nope")]))
    bad = () if isinstance(name, str) and name and callable(factory) else (
        ("name",) if not (isinstance(name, str) and name) else ("factory",))
    try:
        judge(lambda: register_attention(name, factory), bad,
              lambda _: type(make_attention(name, D_MODEL, HEADS)).__name__ == "NoPEAttention" or pytest.fail())
    finally:
        ATTENTION_LAYERS.pop("fuzz_nope", None)


# ----------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------

JUNK = (None, True, 1, -1, 0, 2.5, float("nan"), float("inf"), "x", [1], torch.tensor(1.0), torch.zeros(2))
DEVICES = ("cpu", "cpu:0", "meta", "cuda", "cuda:0", "cuda:x", torch.device("cpu"), torch.device("meta"))


def _device_named(value):
    """The device name ``value`` stands for, or None where it must be refused (CUDA only where present)."""
    cuda = torch.cuda.is_available()
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, str):
        return value if value in ("cpu", "cpu:0", "meta") or (cuda and value in ("cuda", "cuda:0")) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0 and cuda:
        return f"cuda:{value}"
    return None


@FUZZ
@given(data=st.data())
def test_validation_helpers(data):
    """The checks of path_lib.validation on junk: a named TypeError/ValueError, or the value back."""
    value = data.draw(st.sampled_from(JUNK))
    which = data.draw(st.sampled_from(["bool", "optional_bool", "int", "number", "choice", "block_size", "scale",
                                       "tensor", "tokens", "device", "dtype_name"]))
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_num = isinstance(value, (int, float)) and not isinstance(value, bool)
    if which == "bool":
        judge(lambda: V.check_bool(value, "flag"), () if isinstance(value, bool) else ("flag",),
              lambda o: o is value or pytest.fail())
    elif which == "optional_bool":
        judge(lambda: V.check_optional_bool(value, "flag"), () if value is None or isinstance(value, bool) else ("flag",))
    elif which == "int":
        judge(lambda: V.check_int(value, "n", minimum=0), () if is_int and value >= 0 else ("n",),
              lambda o: o == value or pytest.fail())
    elif which == "number":
        ok = is_num and math.isfinite(value) and value > 0
        judge(lambda: V.check_number(value, "s", positive=True), () if ok else ("s",),
              lambda o: o == float(value) or pytest.fail())
    elif which == "choice":
        judge(lambda: V.check_choice(value, "mode", ("x", "y")), () if value == "x" else ("mode",))
    elif which == "block_size":
        judge(lambda: V.check_block_size(value), () if is_int and value >= 1 else ("block_size",))
    elif which == "scale":
        ok = (is_num and math.isfinite(value) and value > 0) or (
            isinstance(value, torch.Tensor) and value.numel() == 1 and float(value) > 0)
        judge(lambda: V.check_scale(value, 4), () if ok or value is None else ("scale",),
              lambda o: o == (0.5 if value is None else float(value)) or pytest.fail())
    elif which == "tensor":
        judge(lambda: V.check_tensor(value, "t", ndim=1), () if isinstance(value, torch.Tensor)
              and value.dim() == 1 else ("t",))
    elif which == "tokens":
        judge(lambda: V.check_tokens(value, 3, ndim=1), ("tokens",))
    elif which == "device":
        value = data.draw(st.sampled_from(JUNK + DEVICES))
        named = _device_named(value)
        judge(lambda: V.as_device(value, "where"), () if named else ("where",),
              lambda o: (isinstance(o, torch.device) and str(o) == named) or pytest.fail(str(o)))
    else:
        dtype = data.draw(st.sampled_from(V.FLOAT_DTYPES))
        assert getattr(torch, V.dtype_name(dtype)) is dtype


@FUZZ
@given(data=st.data())
def test_validation_plain_helpers(data):
    """The plain-argument checks (probability, seed, sequences of numbers and ints, str, callable, path,
    dtype, format, instance, mapping, generator) on junk: a named TypeError / ValueError, or the value back
    as the checks promise (NaN fails every range: ``not lo <= x <= hi``)."""
    import tempfile
    value = data.draw(st.sampled_from(JUNK + (0.5, 1.0, [0.1, 0.2], (1, 2), "", "{:.2f}", "p.json", {}, {"a": 1},
                                              torch.float32, torch.Generator(), len, np.float64(0.25),
                                              np.int64(3), [0.1, float("nan")], [1, 2.5])))
    which = data.draw(st.sampled_from(["probability", "seed", "numbers", "ints", "str", "callable", "path", "dtype",
                                       "format", "instance", "mapping", "generator", "values_checked"]))
    is_num = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    seq = isinstance(value, (list, tuple))
    if which == "probability":
        ok = is_num and 0 <= float(value) <= 1
        judge(lambda: V.check_probability(value, "p"), () if ok else ("p",), lambda o: o == float(value) or pytest.fail())
    elif which == "seed":
        ok = is_int and 0 <= value <= V.SEED_MAX
        judge(lambda: V.check_seed(value), () if ok else ("seed",), lambda o: o == value or pytest.fail())
    elif which == "numbers":
        ok = seq and len(value) >= 1 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                             and math.isfinite(x) for x in value)
        judge(lambda: V.check_numbers(value, "xs"), () if ok else ("xs",),
              lambda o: o == [float(x) for x in value] or pytest.fail())
    elif which == "ints":
        ok = seq and len(value) >= 1 and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)
        judge(lambda: V.check_ints(value, "ns", minimum=0), () if ok else ("ns",),
              lambda o: o == list(value) or pytest.fail())
    elif which == "str":
        judge(lambda: V.check_str(value, "s"), () if isinstance(value, str) and value else ("s",))
    elif which == "callable":
        judge(lambda: V.check_callable(value, "f"), () if callable(value) else ("f",))
    elif which == "path":
        folder = tempfile.mkdtemp()
        judge(lambda: V.check_path(value, "path", kind="file"), () if isinstance(value, str) and value else ("path",),
              lambda o: str(o) == value or pytest.fail())
        judge(lambda: V.check_path(folder, "path", kind="file"), ("path",))            # a folder for a file
        judge(lambda: V.check_path(folder, "path", kind="dir", exists=True), (), lambda o: o.is_dir() or pytest.fail())
    elif which == "dtype":
        judge(lambda: V.check_dtype(value, "dtype"), () if value is torch.float32 else ("dtype",))
    elif which == "format":
        judge(lambda: V.check_format(value), () if value == "{:.2f}" else ("fmt",),
              lambda o: o.format(1.0) == "1.00" or pytest.fail())
    elif which == "instance":
        judge(lambda: V.check_instance(value, "x", (list, tuple)), () if seq else ("x",))
    elif which == "mapping":
        judge(lambda: V.check_mapping(value, "d", keys=("a",)), () if value == {"a": 1} else ("d",))
    elif which == "generator":
        judge(lambda: V.check_generator(value), () if isinstance(value, torch.Generator) else ("generator",))
    else:
        flag = value if value is None or isinstance(value, bool) else True
        x = torch.zeros(2)
        assert V.values_checked(flag, x) is (True if flag is None else flag)
        assert V.values_checked(None, x.to("meta")) is False


@FEW
@given(data=st.data())
def test_validation_value_checks_refuse_nan(data):
    """check_beta_range, check_unit_rows and check_log_gate refuse NaN anywhere (a range written as
    ``(x < lo) | (x > hi)`` is False for NaN: these are written ``~((x >= lo) & (x <= hi))``), and
    infinities, and accept the edges (beta 0 and 2, g 0)."""
    torch.manual_seed(_seed(data))
    which = data.draw(st.sampled_from(["beta", "w", "g"]))
    where = data.draw(st.integers(0, 5))
    fill = data.draw(st.sampled_from([float("nan"), float("inf"), float("-inf"), None]))
    beta = torch.rand(2, 3) * 2
    beta[0, 0], beta[1, 2] = 0.0, 2.0                  # the edges are valid
    w = torch.nn.functional.normalize(torch.randn(2, 3, 4), dim=-1)
    g = -torch.rand(2, 3)
    g[0, 0] = 0.0
    x = {"beta": beta, "w": w, "g": g}[which]
    bad = ()
    if fill is not None:
        x.view(-1)[where] = fill
        bad = (which,) if not (which == "g" and fill == float("-inf")) else ()   # log gate -inf: gate 0, fine
    check = {"beta": V.check_beta_range, "w": V.check_unit_rows, "g": V.check_log_gate}[which]
    judge(lambda: check(x, which), bad)


@FEW
@given(data=st.data())
def test_validation_tensor_checks(data):
    """check_qkv / check_path_params / check_finite / check_beta_range / check_unit_rows / check_log_gate /
    check_step_values / check_device / check_same_device / check_cu_seqlens on random and corrupted input."""
    q, k, v, w, beta, g = random_path_inputs(B=1, T=3, Hq=2, Hk=1, D=4, gate=True, seed=_seed(data))
    corrupt = data.draw(st.sampled_from(["none", "nan_q", "beta", "w", "g", "meta_v", "k_shape"]))
    bad = {"none": (), "nan_q": ("q",), "beta": ("beta",), "w": ("w",), "g": ("g",), "meta_v": ("v",),
           "k_shape": ("k", "v")}[corrupt]
    if corrupt == "nan_q":
        q = q.clone().fill_(float("nan"))
    elif corrupt == "beta":
        beta = beta + 3
    elif corrupt == "w":
        w = 2 * w
    elif corrupt == "g":
        g = -g + 1
    elif corrupt == "meta_v":
        v = v.to("meta")
    elif corrupt == "k_shape":
        k = k[:, :2]

    def run():
        V.check_qkv(q, k, v)
        V.check_path_params(q, k, w, beta, g)
        V.check_step_values(q[:, 0], k[:, 0], v[:, 0], w[:, 0], beta[:, 0], g[:, 0])
        V.check_same_device(w, "w", q)
        return V.check_cu_seqlens(torch.tensor([0, 3]), 1, 3)
    step_names = {"nan_q": ("q", "q_t"), "beta": ("beta", "beta_t"), "w": ("w", "w_t"), "g": ("g", "g_t")}
    judge(run, step_names.get(corrupt, bad), lambda o: o == [0, 3] or pytest.fail())


# ----------------------------------------------------------------------------------------------
# SBA, the short convolution, the blockwise algorithms
# ----------------------------------------------------------------------------------------------

def _np_sba(q, k, v, attend_current):
    q, k, v = (np.asarray(t.double()) for t in (q, k, v))
    B, T, Hq, D = q.shape
    Hk = k.shape[2]
    out = np.zeros((B, T, Hq, v.shape[-1]))
    for b in range(B):
        for h in range(Hq):
            hk = h * Hk // Hq
            for i in range(T):
                last = i if attend_current else i - 1
                weights, rest = np.zeros(T), 1.0
                for j in range(last, -1, -1):                  # the stick is broken from the newest key back
                    beta = 1 / (1 + np.exp(-(D ** -0.5) * q[b, i, h] @ k[b, j, hk]))
                    weights[j] = beta * rest
                    rest *= 1 - beta
                out[b, i, h] = weights @ v[b, :, hk]
    return out


@FUZZ
@given(data=st.data())
def test_sba_and_short_conv(data):
    """sba_attention (and sba_weights, stick_breaking_weights through it) and short_conv_normalize_torch
    against NumPy; bad types, shapes, dtypes and truthy flags refused by name."""
    gen = torch.Generator().manual_seed(_seed(data))
    B, T = data.draw(st.sampled_from([0, 1, 2])), data.draw(st.sampled_from([0, 1, 3]))
    if data.draw(st.booleans()):
        q, k, v = (torch.randn(B, T, h, 4, generator=gen, dtype=f64) for h in (2, 1, 1))
        attend_current, bad = data.draw(st.booleans()), ()
        mutation = data.draw(st.sampled_from(["none", "flag", "k", "v"]))
        if mutation == "flag":
            attend_current, bad = data.draw(st.sampled_from(TRUTHY)), ("attend_current",)
        elif mutation == "k":
            k, bad = k[..., :3], ("k", "q")
        elif mutation == "v":
            v, bad = v.tolist(), ("v",)
        judge(lambda: SBA.sba_attention(q, k, v, attend_current=attend_current), bad,
              lambda o: close(o, _np_sba(q, k, v, attend_current)))
        return
    H, Dh, K = 2, 2, 3
    u = torch.randn(B, T, H * Dh, generator=gen, dtype=f64)
    weight = torch.randn(H * Dh, 1, K, generator=gen, dtype=f64)
    mutation = data.draw(st.sampled_from(["none", "weight", "heads", "norm", "u"]))
    n_heads, normalization, bad = H, "unit", ()
    if mutation == "weight":
        weight, bad = weight[:, :, :, None], ("weight",)
    elif mutation == "heads":
        n_heads, bad = 3, ("n_heads", "u", "weight")
    elif mutation == "norm":
        normalization, bad = "l3", ("normalization",)
    elif mutation == "u":
        u, bad = u.tolist(), ("u",)

    def reference():
        un, wn = u.numpy(), weight.numpy()[:, 0]
        out = np.zeros((B, T, H, Dh))
        for b in range(B):
            for t in range(T):
                z = sum(wn[:, K - 1 - s] * un[b, t - s] for s in range(K) if t - s >= 0)
                z = z / (1 + np.exp(-z)) if np.ndim(z) else np.zeros(H * Dh)
                z = z.reshape(H, Dh)
                out[b, t] = z / np.maximum(np.linalg.norm(z, axis=-1, keepdims=True), 1e-6)
        return out

    def run():
        check_short_conv(u, weight, n_heads, normalization, 1e-6, False)
        return short_conv_normalize_torch(u, weight, n_heads, normalization=normalization)
    judge(run, bad, lambda o: close(o, reference()))


@FEW
@given(data=st.data())
def test_blockwise_algorithms(data):
    """blockwise_path_attention and path_attention(impl="blockwise_scan") against the NumPy loop definition (float64), and
    refusing bad block sizes and truthy check_values by name."""
    B, T = data.draw(st.sampled_from([0, 1, 2])), data.draw(st.sampled_from([0, 1, 5]))
    q, k, v, w, beta, g = random_path_inputs(B=B, T=T, Hq=2, Hk=1, D=4, gate=data.draw(st.booleans()),
                                             seed=_seed(data))
    block_size, check_values, bad = data.draw(st.sampled_from([1, 2, 4])), True, ()
    mutation = data.draw(st.sampled_from(["none", "block", "flag"]))
    if mutation == "block":
        block_size, bad = data.draw(st.sampled_from([0, -2, 2.0, "2", True])), ("block_size",)
    elif mutation == "flag":
        check_values, bad = data.draw(st.sampled_from(TRUTHY)), ("check_values",)
    ref = numpy_path_attention(q, k, v, w, beta, g)
    impl = data.draw(st.sampled_from(["mirror", "blockwise_scan"]))
    if impl == "mirror":
        call = lambda: blockwise_path_attention(q, k, v, w, beta, g, block_size=block_size,  # noqa: E731
                                                check_values=check_values)
    else:                                  # blockwise_scan itself takes heads-first inputs already checked
        call = lambda: path_attention(q, k, v, w, beta, g, impl="blockwise_scan", block_size=block_size,  # noqa: E731
                                      check_values=check_values)
    judge(call, bad, lambda o: close(o, ref, 1e-8))


# ----------------------------------------------------------------------------------------------
# the Hugging Face model
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    pytest.importorskip("transformers")
    from path_lib.nn.hf import PaTHConfig, PaTHForCausalLM
    torch.manual_seed(0)
    model = PaTHForCausalLM(PaTHConfig(vocab_size=11, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                                       w_rank=4, backend="blockwise"))
    folder = tmp_path_factory.mktemp("path_model")
    model.save_pretrained(folder)
    return model.eval(), folder


@FEW
@given(data=st.data())
def test_hf_forward_inputs(saved_model, data):
    """PaTHForCausalLM.forward: inputs_embeds of another width, dtype, rank, a list or NaN are refused naming
    ``inputs_embeds``; labels with no target (all -100, or T = 1) are refused naming ``labels``; otherwise
    inputs_embeds = embed(input_ids) gives the same logits and the loss is NumPy's cross-entropy."""
    model, _ = saved_model
    gen = torch.Generator().manual_seed(_seed(data))
    B, T = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 4))
    ids = torch.randint(0, 11, (B, T), generator=gen)
    embeds = model.model.embed(ids).detach()
    labels = ids.clone()
    mutation = data.draw(st.sampled_from(["none", "width", "dtype", "2d", "list", "nan", "labels_ignored",
                                          "labels_T1", "labels_dtype"]))
    bad = ()
    if mutation == "width":
        embeds, bad = torch.zeros(B, T, 9), ("inputs_embeds",)
    elif mutation == "dtype":
        embeds, bad = embeds.double(), ("inputs_embeds",)
    elif mutation == "2d":
        embeds, bad = embeds[0], ("inputs_embeds",)
    elif mutation == "list":
        embeds, bad = embeds.tolist(), ("inputs_embeds",)
    elif mutation == "nan":
        embeds, bad = embeds.clone().fill_(float("nan")), ("inputs_embeds",)
    elif mutation == "labels_ignored":
        labels[:, 1:], bad = -100, ("labels",)
    elif mutation == "labels_T1":
        ids, embeds, labels, bad = ids[:, :1], embeds[:, :1], labels[:, :1], ("labels",)
    elif mutation == "labels_dtype":
        labels, bad = labels.int(), ("labels",)
    if T == 1 and mutation in ("none", "labels_ignored"):
        bad = ("labels",)                                       # one token: no target either way
    with torch.no_grad():
        reference = model(input_ids=ids, use_cache=False).logits.double()

    def check(out):
        close(out.logits, reference, 1e-5)
        lg = reference[:, :-1].reshape(-1, 11).numpy()
        tgt = labels[:, 1:].reshape(-1).numpy()
        logp = lg - lg.max(1, keepdims=True) - np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1, keepdims=True))
        assert abs(float(out.loss) + logp[np.arange(len(tgt)), tgt].mean()) < 1e-5
    with torch.no_grad():
        judge(lambda: model(inputs_embeds=embeds, labels=labels, use_cache=False), bad, check)


@FEW
@given(data=st.data())
def test_hf_from_pretrained_refuses_a_config_that_does_not_describe_the_weights(saved_model, data):
    """from_pretrained: a structural field changed by keyword, in a config= or in config.json itself, a
    truncated or non-object config.json and a dtype naming no torch dtype are refused naming the field;
    the unchanged checkpoint loads the saved weights exactly."""
    from path_lib.nn.hf import PaTHConfig, PaTHForCausalLM
    model, folder = saved_model
    saved = json.loads((folder / "config.json").read_text())
    field, value = data.draw(st.sampled_from([
        (None, None), ("num_hidden_layers", 3), ("num_hidden_layers", 1), ("use_forget_gate", True),
        ("tie_word_embeddings", False), ("hidden_size", 16), ("vocab_size", 12), ("conv_size", 4), ("w_rank", 8),
        ("num_key_value_heads", 1), ("mlp_ratio", 2.0), ("dtype", "float99"), ("dtype", 3)]))
    how = data.draw(st.sampled_from(["kwarg", "config", "file", "broken_file"]))
    work = folder.parent / f"{folder.name}_fuzz"
    work.mkdir(exist_ok=True)
    for f in folder.iterdir():
        (work / f.name).write_bytes(f.read_bytes())
    kwargs, bad = {}, () if field is None else (field,)
    if how == "broken_file":
        text = data.draw(st.sampled_from([json.dumps(saved)[:20], "[]", "3"]))
        (work / "config.json").write_text(text)
        bad = ("pretrained_model_name_or_path",)
    elif (field == "dtype" and how != "file") or how == "kwarg":
        kwargs = {} if field is None else {field: value}
    elif how == "config":
        kwargs = {"config": PaTHConfig(**{**{k: saved[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                                  "num_attention_heads", "w_rank", "backend")},
                                         **({} if field is None else {field: value})})}
    else:
        (work / "config.json").write_text(json.dumps({**saved, **({} if field is None else {field: value})}))

    def check(loaded):
        for (name, p), (_, p0) in zip(loaded.state_dict().items(), model.state_dict().items()):
            assert torch.equal(p, p0), name
    judge(lambda: PaTHForCausalLM.from_pretrained(work, **kwargs), bad, check)


GENERATION_BAD = {"top_p": [2.0, 0.0, -0.5, float("nan"), "0.9"], "top_k": [-1, 1.5, True], "temperature": [
    0.0, -1.0, float("inf"), "1"], "max_new_tokens": [0, -1, 2.5], "do_sample": [1, "yes"], "num_beams": [0, 1.5],
    "repetition_penalty": [0.0, float("nan")], "min_p": [1.5], "generation_config": [{"top_p": 0.5}, 3]}


@FEW
@given(data=st.data())
def test_hf_generate_checks_its_settings(saved_model, data):
    """PaTHForCausalLM.generate: a sampling or length setting out of range (top_p outside (0, 1], top_k < 0,
    temperature <= 0, max_new_tokens < 1, a truthy non-bool do_sample, ...) is refused naming it, whether
    given by keyword or in a GenerationConfig; greedy generation equals TinyLM's own greedy decoding and a
    sample stays in the vocabulary."""
    from transformers import GenerationConfig
    model, _ = saved_model
    prompt = torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(_seed(data)))
    name = data.draw(st.sampled_from([None] + sorted(GENERATION_BAD)))
    how = data.draw(st.sampled_from(["kwarg", "config"]))
    kwargs, bad = dict(max_new_tokens=3, do_sample=data.draw(st.booleans()), pad_token_id=0), ()
    if name is not None:
        value, bad = data.draw(st.sampled_from(GENERATION_BAD[name])), (name,)
        if name == "generation_config" or how == "kwarg":
            kwargs[name] = value
        else:
            config = GenerationConfig(**{k: v for k, v in kwargs.items() if k != "pad_token_id"})
            config.__dict__[name] = value               # as a config edited after it was made
            kwargs = dict(generation_config=config, pad_token_id=0)

    def check(out):
        assert out.shape == (2, 6) and bool(((out >= 0) & (out < 11)).all())
        assert torch.equal(out[:, :3], prompt)
        if not kwargs.get("do_sample"):
            assert torch.equal(out, model.model.generate(prompt, 3))
    with torch.no_grad():
        judge(lambda: model.generate(prompt, **kwargs), bad, check)


@FUZZ
@given(data=st.data())
def test_hf_config_fields(data):
    """PaTHConfig: a bad value in any field (junk types, sizes that do not divide, beta_max outside (0, 2],
    a truthy non-bool flag, an unknown backend) is refused naming the field; a valid config builds a model
    with its sizes."""
    pytest.importorskip("transformers")
    from path_lib.nn.hf import PaTHConfig, PaTHForCausalLM
    field = data.draw(st.sampled_from([None, "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                       "num_key_value_heads", "head_dim", "mlp_ratio", "use_forget_gate", "w_rank",
                                       "conv_size", "beta_max", "backend", "block_size", "tie_word_embeddings",
                                       "use_cache"]))
    bad_values = {"vocab_size": [0, 2.0], "hidden_size": [7, -8, "8"], "num_hidden_layers": [0, None],
                  "num_attention_heads": [3, 0], "num_key_value_heads": [3, 0, 1.0], "head_dim": [0, "4"],
                  "mlp_ratio": [0.0, float("nan"), "4"], "use_forget_gate": [1, "yes"], "w_rank": [0, True],
                  "conv_size": [0, 2.5], "beta_max": [0.0, 3.0, float("inf"), "1"], "backend": ["cuda", 1],
                  "block_size": [0, None], "tie_word_embeddings": [1, "no"], "use_cache": [0, "yes"]}
    kwargs = dict(vocab_size=11, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, w_rank=4)
    bad = ()
    if field is not None:
        kwargs[field], bad = data.draw(st.sampled_from(bad_values[field])), (field,)
        if field in ("hidden_size", "num_attention_heads", "num_key_value_heads"):
            bad = ("hidden_size", "num_attention_heads", "num_key_value_heads")   # a relation of the three

    def check(config):
        model = PaTHForCausalLM(config)
        layer = model.model.blocks[0].attn
        assert (layer.d_model, layer.n_heads, len(model.model.blocks)) == (8, 2, 1)
    judge(lambda: PaTHConfig(**kwargs), bad, check)


@FEW
@given(data=st.data())
def test_path_attention_from_fla_refuses_mixed_weights(data):
    """path_attention_from_fla: weights of two dtypes or a non-float weight are refused naming ``sd``."""
    pytest.importorskip("transformers")
    from path_lib.nn.hf import path_attention_from_fla
    torch.manual_seed(_seed(data))
    d, H, Dh, r = 8, 2, 4, 3
    sd = {"q_proj.weight": torch.randn(H * Dh, d), "k_proj.weight": torch.randn(H * Dh, d),
          "v_proj.weight": torch.randn(H * Dh, d), "o_proj.weight": torch.randn(d, H * Dh),
          "w_proj.0.weight": torch.randn(r, d), "w_proj.1.weight": torch.randn(H * Dh, r),
          "w_conv1d.weight": torch.randn(H * Dh, 1, 3), "bt_proj.weight": torch.randn(H, d), "bt_proj.bias": torch.randn(H)}
    key = data.draw(st.sampled_from([None] + sorted(sd)))
    bad = ()
    if key is not None:
        sd[key], bad = sd[key].to(data.draw(st.sampled_from([f64, torch.float16, torch.int64]))), ("sd",)

    def check(layer):
        x = torch.randn(1, 3, d)
        close(layer(x), layer.double()(x.double()), 1e-4)
    judge(lambda: path_attention_from_fla(sd, backend="blockwise"), bad, check)


# ----------------------------------------------------------------------------------------------
# coverage of the public names
# ----------------------------------------------------------------------------------------------

#: module -> the names of its __all__ fuzzed in this file (or, for the references and decoding, in
#: test_validation_fuzz.py; for the kernels, in test_kernels_fuzz.py)
FUZZED = {
    "path_lib": {"path_attention", "householder", "householder_product", "ut_transform", "PaTHAttention",
                 "NoPEAttention", "RoPEAttention", "ALiBiAttention", "FoXAttention", "SBAAttention",
                 "make_attention", "TinyLM"},
    "path_lib.nn.layers": {"AttentionLayer", "PaTHAttention", "NoPEAttention", "RoPEAttention", "ALiBiAttention",
                           "FoXAttention", "SBAAttention", "make_attention", "register_attention", "sdpa_attention"},
    "path_lib.nn.model": {"TinyLM"},
    "path_lib.nn.sampling": {"check_sampling", "filter_logits", "sample_next"},
    "path_lib.nn.cache": {"StateCache", "select_state"},
    "path_lib.nn.padding": {"check_attention_mask", "compaction", "gather_time", "check_cu_seqlens", "varlen_layout"},
    "path_lib.nn.rotations": {"rotate_pairs", "cumulative_angles", "block_rotation_matrix",
                              "accumulated_rotation_attention", "angle_scales", "mixing_windows",
                              "RandomRotationAttention", "LearnedRotationAttention", "TokenRotationAttention"},
    "path_lib.nn.hf": {"PaTHConfig", "PaTHForCausalLM", "PaTHDynamicCache", "from_fla_state_dict",
                       "path_attention_from_fla"},
    "path_lib.decoding": {"DecodingCache", "PaTHCache", "is_cache", "keys_to_end", "prefill", "decode_path_attention"},
    "path_lib.reference.attention": {"path_attention", "path_logits", "softmax_attention", "rope_attention",
                                     "apply_rope", "alibi_attention", "alibi_slopes", "fox_attention"},
    "path_lib.reference.householder": {"normalize", "householder", "householder_product", "ut_transform",
                                       "ut_transform_loop", "block_product", "boundary_adjusted_queries",
                                       "boundary_adjusted_keys"},
    "path_lib.reference.sba": {"stick_breaking_weights", "sba_weights", "sba_attention"},
    "path_lib.reference.short_conv": {"short_conv_normalize_torch", "check_short_conv"},
    "path_lib.validation": {"dtype_name", "check_device", "check_same_device", "as_device", "check_finite",
                            "check_tensor", "check_beta_range", "check_unit_rows", "check_log_gate", "check_step_values",
                            "check_scale", "check_bool", "check_int", "check_number", "check_choice", "check_tokens",
                            "check_qkv", "check_path_params", "check_block_size", "check_cu_seqlens",
                            "check_optional_bool", "check_probability", "check_seed", "check_numbers", "check_ints",
                            "check_str", "check_callable", "check_path", "check_dtype", "check_format",
                            "check_instance", "check_mapping", "check_generator", "values_checked"},
    "path_lib.kernels": {"path_attention", "transform_keys_to_end", "is_available", "sources_sha256", "code_sha256",
                         "blocking", "kernel_config", "env_overrides", "fallback_state", "backward_slices"},
    "path_lib.kernels.decode": {"TritonPaTHCache", "DecodeConfig"},
    "path_lib.kernels.short_conv": {"short_conv_normalize"},
    "path_lib.kernels.teaching": {"teaching_path_attention"},
    "path_lib.kernels.context": {"chunk_forward", "chunk_backward", "chunk_unfit"},
}

#: single names not fuzzed, and why (the kernels' records and internals)
EXEMPT = {
    ("path_lib.kernels", "code_text"): "checked in tests/test_kernels_fuzz.py (a non-str source is a TypeError)",
    **{("path_lib.kernels", name): "a record that kernel_config / env_overrides / fallback_state build (a dataclass "
                                   "in the hashed _config.py, without checks of its own); fuzzed through them"
       for name in ("KernelConfig", "Warps", "Stages", "Overrides", "FallbackState")},
    ("path_lib.ledger.claims", "measured_rates"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.claims", "decided"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.claims", "section_markdown"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.claims", "sections"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.claims", "test_line"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.claims", "claim_by_id"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.evidence", "evaluate_speed"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.evidence", "decide"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.evidence", "claim_kind"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.evidence", "measured_rates"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.evidence", "public_command"): "new; tested in tests/test_claims.py",
    ("path_lib.ledger.stats", "sign_flip_interval"): "new; tested in tests/test_stats.py (exact values and simulated coverage)",
    ("path_lib.ledger.stats", "sign_flip_coverage"): "new; tested in tests/test_stats.py (exact values and simulated coverage)",
    ("path_lib.ledger.stats", "interval_rank"): "new; tested in tests/test_stats.py (exact values and simulated coverage)",
    ("path_lib.ledger.stats", "subset_means"): "new; tested in tests/test_stats.py (exact values and simulated coverage)",
    ("path_lib.ledger.stats", "simulated_coverage"): "new; tested in tests/test_stats.py (exact values and simulated coverage)",
    ("path_lib.ledger.stats", "simulated_rejection_rate"): "new; tested in tests/test_stats.py (exact values and simulated coverage)",
    ("path_lib.training.corpus", "load_brown_corpus"): "new; tested in tests/test_corpus.py (bad archive, unknown name)",
    ("path_lib.training.corpus", "detokenize_brown"): "new; tested in tests/test_corpus.py (bad archive, unknown name)",
    ("path_lib.training.corpus", "load_corpus"): "new; tested in tests/test_corpus.py (bad archive, unknown name)",
    ("path_lib.training.tasks", "phonebook"): "new; tested in tests/test_corpus.py (bad sizes)",
    ("path_lib.training.tasks", "phonebook_vocab"): "new; tested in tests/test_corpus.py (bad sizes)",
    ("path_lib.kernels", "DeviceInfo"): "path_lib.hardware's device description, re-exported; tests/test_hardware.py",
    ("path_lib.kernels", "Verification"): "what verification() returns (a named tuple)",
    ("path_lib.kernels", "verification"): "takes no argument; tests/test_kernel_records.py",
    ("path_lib.kernels.teaching", "block_factors"): "the teaching kernel's host-side step on the inputs "
                                                    "teaching_path_attention has checked",
}

#: modules not fuzzed, and why (everything else a user can import is: here, in test_validation_fuzz.py,
#: test_kernels_fuzz.py, or name by name in test_surface_fuzz.py)
OUT_OF_SCOPE = {
    "path_lib.blockwise.mirror": "its __all__ also lists the mirror's phase functions (forward, ut, prep, ...), "
                                 "which the kernel chapter teaches with on inputs the entry point has checked; its "
                                 "entry point blockwise_path_attention is fuzzed here",
    "path_lib.blockwise.scan": "blockwise_scan takes heads-first inputs its caller has checked; its public "
                               "route, path_attention(impl='blockwise_scan'), is fuzzed here",
    "path_lib.distributed": "needs a process group; tests/test_distributed.py",
    "path_lib.kernels.context": "the context-parallel chunk kernels; tests/test_cp_kernels.py",
    "path_lib.theory.costs": "operation and memory counts (ints in, ints out); tests/test_costs.py",
    "path_lib.theory.decoherence": "Monte Carlo simulations; tests/test_theory.py",
    "path_lib.impl": "path_attention (every impl) is fuzzed here; the resolver's rule and errors: tests/test_impl.py",
    "path_lib.records": "the records' registry, provenance and loading: tests/test_records.py",
    "path_lib.hardware": "the device description, hardware classes, the preset table and time estimates: "
                         "tests/test_hardware.py (a bad device, preset, key or dtype is a ValueError naming it, a "
                         "device of another type a TypeError)",
}
OUT_OF_SCOPE_PACKAGES = {
    "path_lib.book": "the chapters' helpers (plots, tables of records, widgets), tested with the book "
                     "(test_speed, test_widgets, ...)",
}
#: single names without a case of their own, and why
EXEMPT.update({
    ("path_lib.kernels.context", "ChunkState"): "what chunk_forward returns for chunk_backward; chunk_backward refuses "
                                                "anything else by name (test_kernels_fuzz.py)",
    ("path_lib.ledger.comparison", "UnequalTrainingError"): "an exception class (raised by comparison_table)",
    ("path_lib.training.loop", "UnequalTrainingError"): "an exception class (raised by comparison_table)",
    ("path_lib.records", "SchemaError"): "an exception class (raised by schema_version)",
    ("path_lib.ledger.claims", "value_at"): "path_lib.ledger.evidence.value_at, re-exported (fuzzed there)",
})


def _surface_names():
    """``{module: names}`` of the cases of test_surface_fuzz.py (``module.name[label]``)."""
    import test_surface_fuzz
    out = {}
    for c in test_surface_fuzz.CASES:
        module, name = c.name.split("[")[0].rsplit(".", 1)
        out.setdefault(module, set()).add(name)
    return out


def _public_modules():
    """path_lib's public modules and path_lib.kernels' (installed from kernels/, so walked on its own)."""
    names = []
    packages = ["path_lib"] + (["path_lib.kernels"] if importlib.util.find_spec("triton") else [])
    for package in packages:
        names.append(package)
        for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
            if not any(p.startswith("_") for p in info.name.split(".")):
                names.append(info.name)
    return sorted(set(names))


def test_every_public_name_is_covered():
    """Every name in the ``__all__`` of every public module is fuzzed (FUZZED here, or a case of
    test_surface_fuzz.py), is a constant (not callable: a tuple, dict, dtype or number), is exempt with a
    reason, or its module is out of scope with the reason."""
    fuzzed = {m: set(names) for m, names in FUZZED.items()}
    for module, names in _surface_names().items():
        fuzzed.setdefault(module, set()).update(names)
    missing = {}
    for name in _public_modules():
        if name in OUT_OF_SCOPE or name.startswith(tuple(OUT_OF_SCOPE_PACKAGES)):
            continue
        try:
            mod = importlib.import_module(name)
        except ImportError:                                   # an optional extra (transformers, triton)
            continue
        for attr in getattr(mod, "__all__", ()):
            value = getattr(mod, attr)
            constant = not callable(value) or isinstance(value, (dict, tuple, list, frozenset, torch.dtype))
            if attr not in fuzzed.get(name, ()) and not constant and (name, attr) not in EXEMPT:
                missing.setdefault(name, []).append(attr)
    assert not missing, f"public names with no fuzz case (add one, or say why the module is out of scope): {missing}"
    stale = {m: sorted(names - set(getattr(importlib.import_module(m), "__all__", ())))
             for m, names in fuzzed.items() if names - set(getattr(importlib.import_module(m), "__all__", ()))}
    assert not stale, f"FUZZED or the surface cases name what no module exports: {stale}"
