"""Fuzzing the input validation of path_lib's references: every public call of ``attention``,
``householder`` and ``decoding`` either raises a ``ValueError``/``TypeError`` whose message names the
offending argument, or returns a result equal to an independent float64 reference. Any other exception
(a raw torch error, an ``IndexError``, ...) fails, and so does a result for input that must be refused.

Each case is a valid base (small shapes, T = 0 and B = 0 included, grouped heads, every float dtype)
plus up to two mutations, on distinct arguments, drawn from a catalogue. A mutation reports what it did:

* ``valid``: still valid input (e.g. float64 w, a half q, k, v together, another block size, Dv != D);
* ``invalid``: must be refused, naming one of the given arguments (wrong type or dtype, meta tensors);
* ``value``: a bad value (NaN/inf, beta outside [0, 2], non-unit or zero w, g > 0), refused only where
  values are checked (``check_values=True``, the default, or calls without that flag);
* ``relation``: a changed shape (or a dtype within a group that must agree); a per-call oracle decides
  from the final arguments whether the shapes still fit (e.g. Dv is free, Hq + 1 heads fit Hk = 1).

"Another device" is the meta device here (the tests run on CPU). The second half of the file has one
plain test for each gap a 1400-call fuzz found (named after the case).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings, strategies as st

from fuzz_helpers import REFUSED, names_any
from helpers import numpy_path_attention
from path_lib.impl import path_attention
from path_lib.reference.attention import (alibi_attention, alibi_slopes, apply_rope, fox_attention,
                                          path_logits, rope_attention, softmax_attention)
from path_lib.decoding import PaTHCache, decode_path_attention, keys_to_end, prefill
from path_lib.reference.householder import (block_product, boundary_adjusted_keys, boundary_adjusted_queries,
                                            householder, householder_product, normalize, ut_transform, ut_transform_loop)

import path_lib.decoding as Dc
import path_lib.reference.attention as A
import path_lib.reference.householder as Hh

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
FUZZ_SMALL = settings(FUZZ, max_examples=150)
f64, f32 = torch.float64, torch.float32
HALF = (torch.float16, torch.bfloat16)
VALID, INVALID, VALUE, RELATION = "valid", "invalid", "value", "relation"


def test_public_entry_points_are_all_fuzzed():
    """The fuzz below covers every name in the three modules' ``__all__`` (update both together)."""
    covered = {
        A: {"path_attention", "path_logits", "softmax_attention", "rope_attention", "apply_rope",
            "alibi_attention", "alibi_slopes", "fox_attention", "IMPLEMENTATIONS"},
        Hh: {"normalize", "householder", "householder_product", "ut_transform", "ut_transform_loop",
             "block_product", "boundary_adjusted_queries", "boundary_adjusted_keys"},
        Dc: {"DecodingCache", "PaTHCache", "is_cache", "keys_to_end", "prefill", "decode_path_attention"},
    }
    for module, names in covered.items():
        assert set(module.__all__) == names, module.__name__


def test_is_cache_takes_anything_and_recognises_only_caches():
    """``is_cache`` is a predicate: no input is bad (it never raises), and only a cache is one."""
    for obj in (None, 3, "PaTHCache", torch.zeros(2), {"cache": None}, PaTHCache, object()):
        assert Dc.is_cache(obj) is False
    assert Dc.is_cache(PaTHCache(1, 2, 2, 4)) is True


# ----------------------------------------------------------------------------------------------
# the outcome rule
# ----------------------------------------------------------------------------------------------

def _resolve(effects, fits):
    """Relation effects become valid when the oracle says the final shapes fit, else invalid."""
    return [((VALID if fits is True else INVALID) if kind == RELATION else kind, names)
            for kind, names in effects]


def _outcome(call, effects, *, values_checked: bool):
    """Run ``call`` and judge it by the (resolved) ``effects``, a list of ``(kind, names)``.

    Returns REFUSED (a correctly named refusal), None (bad values nobody checked: any result is
    fine) or the result, which the caller compares with the reference.
    """
    must = {n for kind, names in effects if kind == INVALID for n in names}
    values = {n for kind, names in effects if kind == VALUE for n in names}
    if values_checked:
        must |= values
    try:
        out = call()
    except (ValueError, TypeError) as e:
        assert must, f"valid input refused: {type(e).__name__}: {e}"
        assert names_any(str(e), must | values), f"{type(e).__name__} names none of {sorted(must)}: {e}"
        event("refused, named")
        return REFUSED
    assert not must, f"invalid input ({sorted(must)}) was accepted"
    event("bad values, unchecked" if values else "result")
    return None if values else out


def _tol(dtype):
    return {f64: 1e-8, f32: 2e-4}.get(dtype, 3e-2)


def _worst(*dtypes):
    dtypes = [d for d in dtypes if d is not None]
    return next((d for d in dtypes if d in HALF), f32 if f32 in dtypes else f64)


def _close(out, ref, dtype, tol=None):
    ref = torch.as_tensor(ref, dtype=f64)
    assert tuple(out.shape) == tuple(ref.shape), (tuple(out.shape), tuple(ref.shape))
    fin = ref[torch.isfinite(ref)]
    mag = max(1.0, float(fin.abs().max())) if fin.numel() else 1.0
    tol = _tol(dtype) if tol is None else tol
    torch.testing.assert_close(out.detach().double(), ref, atol=tol * mag, rtol=tol, equal_nan=True)


# ----------------------------------------------------------------------------------------------
# mutations: m(args, draw) -> (kind, names); "_touched" keeps them on distinct arguments
# ----------------------------------------------------------------------------------------------

def _is_data(x):
    return isinstance(x, torch.Tensor) and not x.is_meta


def _pick(a, draw, names):
    free = [n for n in names if n not in a["_touched"]]
    if not free:
        return None
    x = draw(st.sampled_from(free))
    a["_touched"].add(x)
    return x


def _resize(x, dim, draw):
    """Change the size of ``dim``: narrow it to 1 (a size that would broadcast) or add a zero slice."""
    if x.shape[dim] >= 2 and draw(st.booleans()):
        return x.narrow(dim, 0, 1)
    extra = list(x.shape)
    extra[dim] = 1
    return torch.cat([x, torch.zeros(extra, dtype=x.dtype)], dim)


def tensor_mutations(names, *, params=(), group=(), rel_ref=None, value_rules=None):
    """Mutations of the tensor arguments ``names``.

    params: restricted to float32/float64 (half is refused); group: must share one dtype;
    rel_ref: the argument shapes are checked against (also allowed in a relation error's message);
    value_rules: ``{name: [fn]}`` value corruptions beyond NaN/inf.
    """
    value_rules = value_rules or {}
    rel_ref = rel_ref or names[0]

    def rel(x):   # a changed reference may be reported by any argument measured against it
        return tuple(names) if x == rel_ref else (x, rel_ref)

    def m_not_tensor(a, draw):
        x = _pick(a, draw, names)
        if x is None:
            return VALID, ()
        a[x] = a[x].tolist() if _is_data(a[x]) else [1.0]
        return INVALID, (x,)

    def m_meta(a, draw):
        x = _pick(a, draw, names)
        if x is None or not isinstance(a[x], torch.Tensor):
            return VALID, ()
        a[x] = a[x].to("meta")
        return INVALID, (x,)

    def m_bad_dtype(a, draw):
        x = _pick(a, draw, names)
        if x is None or not _is_data(a[x]):
            return VALID, ()
        a[x] = (a[x] * 3).to(draw(st.sampled_from([torch.int64, torch.int32, torch.bool, torch.complex64])))
        return INVALID, (x,)

    def m_float_dtype(a, draw):
        x = _pick(a, draw, names)
        if x is None or not _is_data(a[x]):
            return VALID, ()
        new = draw(st.sampled_from([torch.float16, torch.bfloat16, f32, f64]))
        old, a[x] = a[x].dtype, a[x].to(new)
        if x in params and new in HALF:
            return INVALID, (x,)
        if x in group and new != old:
            return RELATION, tuple(group)
        return VALID, ()

    def m_ndim(a, draw):
        x = _pick(a, draw, names)
        if x is None or not _is_data(a[x]):
            return VALID, ()
        a[x] = a[x].unsqueeze(0) if (a[x].dim() < 2 or draw(st.booleans())) else a[x].flatten(0, 1)
        return RELATION, rel(x)

    def m_size(a, draw):
        x = _pick(a, draw, names)
        if x is None or not _is_data(a[x]) or a[x].dim() == 0:
            return VALID, ()
        a[x] = _resize(a[x], draw(st.integers(0, a[x].dim() - 1)), draw)
        return RELATION, rel(x)

    def m_nonfinite(a, draw):
        x = _pick(a, draw, names)
        if x is None or not _is_data(a[x]) or not a[x].is_floating_point() or a[x].numel() == 0:
            return VALID, ()
        y = a[x].clone().flatten()
        y[draw(st.integers(0, y.numel() - 1))] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        a[x] = y.view(a[x].shape)
        return VALUE, (x,)

    def bad_value(x):
        def m(a, draw):
            if x in a["_touched"] or not _is_data(a[x]) or not a[x].is_floating_point() or a[x].numel() == 0:
                return VALID, ()
            a["_touched"].add(x)
            a[x] = draw(st.sampled_from(value_rules[x]))(a[x])
            return VALUE, (x,)
        m.__name__ = f"m_bad_{x}"
        return m

    out = [m_not_tensor, m_meta, m_bad_dtype, m_float_dtype, m_ndim, m_size, m_nonfinite]
    return out + [bad_value(x) for x in sorted(value_rules)]


PATH_VALUE_RULES = {
    "w": [lambda w: w * 2, lambda w: w * 0, lambda w: w * 1.01],        # (all rows off the unit sphere)
    "beta": [lambda b: b + 2.5, lambda b: b - 2.7, lambda b: b * 0 + 5],   # (all outside [0, 2])
    "g": [lambda g: g.abs() + 0.2],
}


def scalar_mutation(name, valid, invalid):
    """``name`` set to a drawn valid value or a drawn invalid one (``invalid`` holds factories)."""
    def m(a, draw):
        if name in a["_touched"]:
            return VALID, ()
        a["_touched"].add(name)
        if draw(st.integers(0, 2)) == 0:
            a[name] = draw(st.sampled_from(valid))
            return VALID, ()
        a[name] = draw(st.sampled_from(invalid))()
        return INVALID, (name,)
    m.__name__ = f"m_{name}"
    return m


SCALE = scalar_mutation("scale", [0.3, 2, 1.0, torch.tensor(0.4), torch.tensor([0.7], dtype=f64)], [
    lambda: 0.0, lambda: -1.0, lambda: math.nan, lambda: math.inf, lambda: "0.5", lambda: True,
    lambda: [0.5], lambda: torch.tensor([1.0, 2.0]), lambda: torch.tensor(0.5, dtype=f64, requires_grad=True),
    lambda: torch.tensor(0.5, device="meta"), lambda: torch.tensor(1 + 1j)])
BLOCK = scalar_mutation("block_size", [1, 2, 3, 5, 64], [
    lambda: 0, lambda: -2, lambda: 2.0, lambda: True, lambda: "4", lambda: None])
IMPL = scalar_mutation("impl", ["explicit", "parallel", "blockwise"], [
    lambda: "fast", lambda: "", lambda: None, lambda: 3, lambda: ("explicit",), lambda: "Explicit"])
LOGIT_IMPL = scalar_mutation("impl", ["explicit", "parallel"], [
    lambda: "blockwise", lambda: "fast", lambda: None, lambda: ["parallel"]])
CHECK_VALUES = scalar_mutation("check_values", [True, False], [lambda: "yes", lambda: 1, lambda: None])
BASE = scalar_mutation("base", [100.0, 10, 10000.0], [
    lambda: 0.0, lambda: -5.0, lambda: math.nan, lambda: "1e4", lambda: True, lambda: torch.tensor(10.0)])
OFFSET = scalar_mutation("offset", [0, 3, -2, 17], [lambda: 1.5, lambda: True, lambda: "1", lambda: None])

SEQ_ARGS = ("q", "k", "v", "w", "beta", "g")


def g_T0(a, draw):
    """An empty sequence: every [B, T, ...] argument sliced to T = 0 (valid)."""
    for x in SEQ_ARGS:
        if isinstance(a.get(x), torch.Tensor):
            a[x] = a[x][:, :0]
    return VALID, ()


def g_no_gate(a, draw):
    a["g"] = None
    return VALID, ()


def g_edge_beta(a, draw):
    a["beta"] = torch.full_like(a["beta"], draw(st.sampled_from([0.0, 1.0, 2.0])))
    return VALID, ()


def g_value_dim(a, draw):
    """v's head dim is free (Dv != D is valid)."""
    a["v"] = torch.cat([a["v"], a["v"][..., :1] * 0.5], -1)
    return VALID, ()


def _mutate(draw, a, catalogue, oracle=None, whole=()):
    """Apply up to two mutations; ``whole`` ones (on the whole input) come first.

    Returns the effects, resolved by ``oracle`` (raw when it is None: resolve them per call)."""
    a["_touched"] = set()
    n = draw(st.sampled_from([0, 1, 1, 2, 2]))
    chosen = [draw(st.sampled_from(list(whole) + list(catalogue))) for _ in range(n)]
    chosen = sorted(set(chosen), key=lambda m: (m not in whole, chosen.index(m)))   # each at most once
    effects = [m(a, draw) for m in chosen]
    a.pop("_touched")
    return effects if oracle is None else _resolve_with(effects, oracle, a)


def _resolve_with(effects, oracle, a):
    return _resolve(effects, oracle(a) if any(kind == RELATION for kind, _ in effects) else True)


# ----------------------------------------------------------------------------------------------
# shape oracles: do the final arguments fit together? (None: cannot tell, e.g. a list was passed)
# ----------------------------------------------------------------------------------------------

def _shapes(a, names):
    out = {}
    for x in names:
        t = a.get(x)
        if t is None:
            out[x] = None
        elif isinstance(t, torch.Tensor):
            out[x] = tuple(t.shape)
        else:
            raise LookupError
    return out


def _oracle(fn):
    def wrapped(a):
        try:
            return bool(fn(a))
        except (LookupError, TypeError, ValueError):
            return None
    return wrapped


def _same_dtype(a, names):
    return len({a[x].dtype for x in names if isinstance(a.get(x), torch.Tensor)}) <= 1


def _qkv_fit(a, names=("q", "k", "v")):
    s = _shapes(a, names)
    q, k = s["q"], s["k"]
    if len(q) != 4 or len(k) != 4:
        return False
    B, T, Hq, D = q
    Hk = k[2]
    ok = k[:2] == (B, T) and k[3] == D and Hk >= 1 and Hq >= 1 and Hq % Hk == 0 and D >= 1
    if "v" in names:
        v = s["v"]
        ok = ok and len(v) == 4 and v[:3] == (B, T, Hk) and v[3] >= 1
    return ok and _same_dtype(a, names)


def _params_fit(a):
    s = _shapes(a, ("q", "k", "w", "beta", "g"))
    B, T, Hq, D = s["q"]
    Hk = s["k"][2]
    return (s["w"] == (B, T, Hk, D) and s["beta"] == (B, T, Hk) and s["g"] in (None, (B, T, Hq)))


@_oracle
def path_fits(a):
    return _qkv_fit(a, ("q", "k", "v") if "v" in a else ("q", "k")) and _params_fit(a)


@_oracle
def keys_fit(a):
    s = _shapes(a, ("k", "w", "beta"))
    return len(s["k"]) == 4 and s["k"][3] >= 1 and s["w"] == s["k"] and s["beta"] == s["k"][:3]


# ----------------------------------------------------------------------------------------------
# attention.py: path_attention (every impl), decode_path_attention, path_logits
# ----------------------------------------------------------------------------------------------

@st.composite
def path_base(draw, *, even_d=False, gate=None, extra_t=0, dtypes=None):
    B = draw(st.integers(0, 2))
    T = draw(st.integers(0, 5)) + extra_t
    Hk = draw(st.integers(1, 2))
    Hq = Hk * draw(st.integers(1, 2))
    D = 2 * draw(st.integers(1, 2)) if even_d else draw(st.integers(1, 5))
    Dv = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(dtypes or [f64, f64, f32, torch.bfloat16, torch.float16]))
    pdtype = draw(st.sampled_from([f64, f32]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    r = lambda *s: torch.randn(*s, generator=gen, dtype=f64)   # noqa: E731
    with_gate = draw(st.booleans()) if gate is None else gate
    return {
        "q": r(B, T, Hq, D).to(dtype), "k": r(B, T, Hk, D).to(dtype), "v": r(B, T, Hk, Dv).to(dtype),
        "w": torch.nn.functional.normalize(r(B, T, Hk, D), dim=-1).to(pdtype),
        "beta": (2 * torch.rand(B, T, Hk, generator=gen, dtype=f64)).to(pdtype),
        "g": torch.nn.functional.logsigmoid(r(B, T, Hq)).to(pdtype) if with_gate else None,
    }


def _ref_path(a, scale=None):
    """The independent NumPy ground truth of tests/helpers.py, in float64."""
    q = a["q"]
    if q.shape[0] * q.shape[1] * q.shape[2] == 0:
        return torch.zeros(*q.shape[:3], a["v"].shape[-1], dtype=f64)
    sc = None if scale is None else float(scale)
    return numpy_path_attention(a["q"], a["k"], a["v"], a["w"], a["beta"], a["g"], scale=sc)


PATH_TENSORS = tensor_mutations(SEQ_ARGS, params=("w", "beta", "g"), group=("q", "k", "v"),
                                value_rules=PATH_VALUE_RULES)
PATH_WHOLE = (g_T0, g_no_gate, g_edge_beta, g_value_dim)


def _split(a, keys=("scale", "block_size", "impl", "check_values", "base", "offset", "slopes", "eps")):
    return {key: a.pop(key) for key in keys if key in a}


def _checked(kw):
    return kw.get("check_values", True) is True


@given(data=st.data())
@FUZZ
def test_fuzz_path_attention(data):
    a = data.draw(path_base())
    a["impl"] = data.draw(st.sampled_from(A.IMPLEMENTATIONS))
    effects = _mutate(data.draw, a, PATH_TENSORS + [SCALE, BLOCK, IMPL, CHECK_VALUES], path_fits, PATH_WHOLE)
    kw = _split(a)
    out = _outcome(lambda: path_attention(a["q"], a["k"], a["v"], a["w"], a["beta"], a["g"], **kw), effects,
                   values_checked=_checked(kw))
    if isinstance(out, torch.Tensor):
        assert out.dtype == a["q"].dtype
        _close(out, _ref_path(a, kw.get("scale")), a["q"].dtype)


@given(data=st.data())
@FUZZ_SMALL
def test_fuzz_decode_path_attention(data):
    a = data.draw(path_base())
    effects = _mutate(data.draw, a, PATH_TENSORS + [SCALE], path_fits, PATH_WHOLE)
    kw = _split(a)
    out = _outcome(lambda: decode_path_attention(a["q"], a["k"], a["v"], a["w"], a["beta"], a["g"], **kw),
                   effects, values_checked=True)
    if isinstance(out, torch.Tensor):
        assert out.dtype == a["q"].dtype
        _close(out, _ref_path(a, kw.get("scale")), a["q"].dtype)


def _ref_logits(a, scale):
    """float64 logits by the definition: scale q_i^T H_i ... H_{j+1} k_j + G_i - G_j, -inf above."""
    q, k, w, beta = (a[x].detach().double() for x in ("q", "k", "w", "beta"))
    g = None if a["g"] is None else a["g"].detach().double()
    B, T, Hq, D = q.shape
    rep = Hq // k.shape[2]
    scale = D ** -0.5 if scale is None else float(scale)
    S = torch.full((B, Hq, T, T), -math.inf, dtype=f64)
    for b in range(B):
        for h in range(Hq):
            for i in range(T):
                vec, gs = q[b, i, h].clone(), 0.0
                for j in range(i, -1, -1):
                    S[b, h, i, j] = scale * vec @ k[b, j, h // rep] + gs
                    wj = w[b, j, h // rep]
                    vec = vec - beta[b, j, h // rep] * (vec @ wj) * wj
                    gs += 0.0 if g is None else float(g[b, j, h])
    return S


LOGIT_TENSORS = tensor_mutations(("q", "k", "w", "beta", "g"), params=("w", "beta", "g"), group=("q", "k"),
                                 value_rules=PATH_VALUE_RULES)


@given(data=st.data())
@FUZZ_SMALL
def test_fuzz_path_logits(data):
    a = data.draw(path_base())
    a.pop("v")
    a["impl"] = data.draw(st.sampled_from(["explicit", "parallel"]))
    effects = _mutate(data.draw, a, LOGIT_TENSORS + [SCALE, LOGIT_IMPL, CHECK_VALUES], path_fits,
                      (g_T0, g_no_gate, g_edge_beta))
    kw = _split(a)
    out = _outcome(lambda: path_logits(a["q"], a["k"], a["w"], a["beta"], a["g"], **kw), effects,
                   values_checked=_checked(kw))
    if isinstance(out, torch.Tensor):
        _close(out, _ref_logits(a, kw.get("scale")), a["q"].dtype)


# ------------------------------------------------------------------------------- the baselines

def _rope_np(x, base=10000.0, offset=0):
    x = np.asarray(x.detach().double())
    out = x.copy()
    D = x.shape[-1]
    for t in range(x.shape[1]):
        for m in range(D // 2):
            ang = (t + offset) * float(base) ** (-2 * m / D)
            c, s = math.cos(ang), math.sin(ang)
            a, b = x[:, t, :, 2 * m], x[:, t, :, 2 * m + 1]
            out[:, t, :, 2 * m], out[:, t, :, 2 * m + 1] = c * a - s * b, s * a + c * b
    return torch.from_numpy(out)


def _ref_softmax(q, k, v, scale=None, bias=None):
    """float64 causal softmax attention, plus an optional bias broadcast to [B, Hq, T, T]."""
    q, k, v = (torch.as_tensor(x).detach().double() for x in (q, k, v))
    B, T, Hq, D = q.shape
    rep = Hq // k.shape[2]
    k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    if T == 0:
        return torch.zeros(B, 0, Hq, v.shape[-1], dtype=f64)
    scale = D ** -0.5 if scale is None else float(scale)
    S = scale * torch.einsum("bihd,bjhd->bhij", q, k)
    if bias is not None:
        S = S + bias
    S = S.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(S, -1), v)


def g_odd_head_dim(a, draw):
    a["q"], a["k"] = (torch.cat([a[x], a[x][..., :1]], -1) for x in ("q", "k"))
    return INVALID, ("q", "k")


@_oracle
def baseline_fits(a):
    ok = _qkv_fit(a)
    if "g" in a:                     # fox
        s = _shapes(a, ("q", "g"))
        ok = ok and s["g"] == s["q"][:3]
    if "slopes" in a and a["slopes"] is not None:
        s = _shapes(a, ("q", "slopes"))
        ok = ok and s["slopes"] == s["q"][2:3]
    return ok


@given(data=st.data(), kind=st.sampled_from(["softmax", "rope", "alibi", "fox"]))
@FUZZ
def test_fuzz_baselines(data, kind):
    a = data.draw(path_base(even_d=kind == "rope", gate=True))
    a.pop("w"), a.pop("beta")
    cat = tensor_mutations(("q", "k", "v"), group=("q", "k", "v")) + [SCALE]
    whole = [g_T0, g_value_dim]
    if kind == "fox":
        cat += tensor_mutations(("g",), params=("g",), rel_ref="q", value_rules={"g": PATH_VALUE_RULES["g"]})
    else:
        a.pop("g")
    if kind == "rope":
        cat += [BASE]
        whole += [g_odd_head_dim]
    if kind == "alibi":
        a["slopes"] = None if data.draw(st.booleans()) else torch.rand(a["q"].shape[2]) + 0.01
        cat += tensor_mutations(("slopes",), rel_ref="q")
    fits = baseline_fits if kind != "rope" else \
        (lambda a: baseline_fits(a) and isinstance(a["q"], torch.Tensor) and a["q"].shape[-1] % 2 == 0)
    effects = _mutate(data.draw, a, cat, fits, whole)
    kw = _split(a)
    q, k, v = a["q"], a["k"], a["v"]
    fn = {"softmax": lambda: softmax_attention(q, k, v, **kw), "rope": lambda: rope_attention(q, k, v, **kw),
          "alibi": lambda: alibi_attention(q, k, v, **kw), "fox": lambda: fox_attention(q, k, v, a["g"], **kw)}[kind]
    out = _outcome(fn, effects, values_checked=True)
    if not isinstance(out, torch.Tensor):
        return
    assert out.dtype == q.dtype
    T = q.shape[1]
    if kind == "rope":
        base = kw.get("base", 10000.0)
        ref = _ref_softmax(_rope_np(q, base), _rope_np(k, base), v, kw.get("scale"))
    elif kind == "alibi":
        slopes = alibi_slopes(q.shape[2]) if kw.get("slopes") is None else kw["slopes"].double()
        dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).double()
        ref = _ref_softmax(q, k, v, kw.get("scale"), -slopes[:, None, None] * dist)
    elif kind == "fox":
        G = torch.cumsum(a["g"].double(), 1).transpose(1, 2)      # [B, Hq, T]
        ref = _ref_softmax(q, k, v, kw.get("scale"), G[..., :, None] - G[..., None, :])
    else:
        ref = _ref_softmax(q, k, v, kw.get("scale"))
    _close(out, ref, q.dtype)


@_oracle
def rope_fits(a):
    s = _shapes(a, ("x",))["x"]
    return len(s) == 4 and s[3] % 2 == 0


@given(data=st.data())
@FUZZ_SMALL
def test_fuzz_apply_rope(data):
    a = {"x": data.draw(path_base(even_d=True))["q"]}
    effects = _mutate(data.draw, a, tensor_mutations(("x",)) + [BASE, OFFSET], rope_fits)
    kw = _split(a)
    # apply_rope reads no values (it runs inside the layers, with no device sync): NaN passes through
    out = _outcome(lambda: apply_rope(a["x"], **kw), effects, values_checked=False)
    if isinstance(out, torch.Tensor):
        assert out.dtype == a["x"].dtype
        _close(out, _rope_np(a["x"], kw.get("base", 10000.0), kw.get("offset", 0)), a["x"].dtype)


@given(n=st.one_of(st.integers(-3, 40), st.sampled_from([2.0, True, "4", None, torch.tensor(4)])))
@FUZZ_SMALL
def test_fuzz_alibi_slopes(n):
    valid = isinstance(n, int) and not isinstance(n, bool) and n >= 1
    out = _outcome(lambda: alibi_slopes(n), [] if valid else [(INVALID, ("n_heads",))], values_checked=True)
    if isinstance(out, torch.Tensor):
        assert out.shape == (n,) and bool((out > 0).all()) and bool((out < 1).all())
        if math.log2(n).is_integer():
            torch.testing.assert_close(out, torch.tensor([2 ** (-8 * (i + 1) / n) for i in range(n)], dtype=f64))


# ----------------------------------------------------------------------------------------------
# householder.py
# ----------------------------------------------------------------------------------------------

def _np_product(W, beta):
    """float64 ``H_{L-1} ... H_0`` per leading index, by explicit NumPy loops."""
    W, beta = np.asarray(W.detach().double()), np.asarray(beta.detach().double())
    lead, (L, D) = W.shape[:-2], W.shape[-2:]
    out = np.zeros(lead + (D, D))
    for idx in np.ndindex(*lead):
        P = np.eye(D)
        for t in range(L):
            w = W[idx + (t,)]
            P = (np.eye(D) - beta[idx + (t,)] * np.outer(w, w)) @ P
        out[idx] = P
    return torch.from_numpy(out)


def _np_ut(W, beta):
    W, beta = np.asarray(W.detach().double()), np.asarray(beta.detach().double())
    lead, L = W.shape[:-2], W.shape[-2]
    out = np.zeros(lead + (L, L))
    for idx in np.ndindex(*lead):
        A = np.tril(beta[idx][:, None] * (W[idx] @ W[idx].T), -1)
        out[idx] = np.linalg.solve(np.eye(L) + A, np.diag(beta[idx])) if L else np.zeros((0, 0))
    return torch.from_numpy(out)


@st.composite
def block_base(draw):
    """W [..., L, D], beta [..., L], X [..., L, D]: "Householder-like", so w need not be a unit vector
    and beta may be any finite number here (the attention entry points add those conditions)."""
    lead = tuple(draw(st.lists(st.integers(0, 2), max_size=2)))
    L, D = draw(st.integers(0, 4)), draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([f64, f64, f32, torch.float16, torch.bfloat16]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    W = torch.randn(*lead, L, D, generator=gen, dtype=f64)
    W = normalize(W) if draw(st.booleans()) else 0.5 * W
    beta = torch.rand(*lead, L, generator=gen, dtype=f64) * 2.5 - draw(st.sampled_from([0.0, 0.5]))
    X = torch.randn(*lead, L, D, generator=gen, dtype=f64)
    return {"W": W.to(dtype), "beta": beta.to(draw(st.sampled_from([dtype, f64, f32]))), "X": X.to(dtype)}


def _block_tol(W):
    return 0.1 if W.dtype in HALF else None     # half blocks multiply in half precision


@_oracle
def block_fits(a):
    s = _shapes(a, ("W", "beta"))
    return len(s["W"]) >= 2 and s["beta"] == s["W"][:-1]


@given(data=st.data(), fn=st.sampled_from(["householder_product", "ut_transform", "ut_transform_loop",
                                           "block_product"]))
@FUZZ
def test_fuzz_block_functions(data, fn):
    a = data.draw(block_base())
    a.pop("X")
    effects = _mutate(data.draw, a, tensor_mutations(("W", "beta")), block_fits)
    W, beta = a["W"], a["beta"]
    call = {"householder_product": householder_product, "ut_transform": ut_transform,
            "ut_transform_loop": ut_transform_loop, "block_product": block_product}[fn]
    out = _outcome(lambda: call(W, beta), effects, values_checked=True)
    if isinstance(out, torch.Tensor):
        assert out.dtype == W.dtype
        ref = _np_ut(W, beta) if fn.startswith("ut_") else _np_product(W, beta)
        _close(out, ref, W.dtype, _block_tol(W))


@_oracle
def boundary_fits(a):
    X = "Q" if "Q" in a else "K" if "K" in a else None
    s = _shapes(a, ("W", "T", "beta") + ((X,) if X else ()))
    W = s["W"]
    ok = len(W) >= 2 and s["T"] == W[:-1] + (W[-2],)
    ok = ok and (X is None or s[X] == W) and (s["beta"] is None or s["beta"] == W[:-1])
    return ok and _same_dtype(a, [n for n in ("W", "T", X) if n])


@given(data=st.data(), which=st.sampled_from(["Q", "K", "block_product"]))
@FUZZ_SMALL
def test_fuzz_boundary_functions(data, which):
    a = data.draw(block_base())
    beta0 = a["beta"] = a["beta"].to(a["W"].dtype)
    a["T"] = ut_transform(a["W"], a["beta"])
    X = a.pop("X")
    if which == "block_product":
        names = ("W", "beta", "T")
    else:
        a.pop("beta")
        a[which] = X
        names = (which, "W", "T")
    group = tuple(n for n in names if n != "beta")
    effects = _mutate(data.draw, a, tensor_mutations(names, group=group, rel_ref="W"), boundary_fits)
    W, T = a["W"], a["T"]
    call = {"Q": lambda: boundary_adjusted_queries(a["Q"], W, T), "K": lambda: boundary_adjusted_keys(a["K"], W, T),
            "block_product": lambda: block_product(W, a["beta"], T)}[which]
    out = _outcome(call, effects, values_checked=True)
    if not isinstance(out, torch.Tensor):
        return
    assert out.dtype == W.dtype
    tol = _block_tol(W)
    W64, T64 = W.double(), T.double()
    if which == "block_product":    # the formula, for any T
        ref = torch.eye(W.shape[-1], dtype=f64) - W64.transpose(-1, -2) @ T64 @ W64
    elif which == "Q":
        Y = a["Q"].double()
        ref = Y - torch.tril(Y @ W64.transpose(-1, -2)) @ T64 @ W64
    else:
        Y = a["K"].double()
        ref = Y - (T64 @ torch.tril(W64 @ Y.transpose(-1, -2), -1)).transpose(-1, -2) @ W64
    _close(out, ref, W.dtype, tol)
    if effects:
        return
    # unmutated, T is the UT matrix of (W, beta): the results are the products they stand for
    L = W.shape[-2]
    P = lambda s, e: _np_product(W[..., s:e, :], beta0[..., s:e])   # noqa: E731
    if which == "block_product":
        ref = P(0, L)
    elif which == "Q":      # row r: q_r^T H_r ... H_0
        ref = torch.stack([(Y[..., r, None, :] @ P(0, r + 1))[..., 0, :] for r in range(L)], -2) if L else Y
    else:                   # row r: H_{L-1} ... H_{r+1} k_r
        ref = torch.stack([(P(r + 1, L) @ Y[..., r, :, None])[..., 0] for r in range(L)], -2) if L else Y
    _close(out, ref, W.dtype, tol or 1e-6)


@_oracle
def householder_fits(a):
    w = _shapes(a, ("w",))["w"]
    if len(w) < 1:
        return False
    if isinstance(a.get("beta"), torch.Tensor):
        try:
            return torch.broadcast_shapes(tuple(a["beta"].shape), w[:-1]) == w[:-1]
        except RuntimeError:
            return False
    return True


@given(data=st.data())
@FUZZ_SMALL
def test_fuzz_householder_and_normalize(data):
    lead = tuple(data.draw(st.lists(st.integers(0, 2), max_size=2)))
    D = data.draw(st.integers(1, 4))
    dtype = data.draw(st.sampled_from([f64, f32, torch.float16, torch.bfloat16]))
    w = (0.7 * torch.randn(*lead, D, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99))),
                           dtype=f64)).to(dtype)
    beta = data.draw(st.sampled_from([0.0, 1, 2.0, 3.0, -0.5, "tensor", "broadcast"]))
    if beta == "tensor":
        beta = torch.full(lead, 1.5)
    elif beta == "broadcast":
        beta = torch.full((1,) * len(lead), 0.5, dtype=f64)
    a = {"w": w, "beta": beta, "eps": 1e-12}
    cat = tensor_mutations(("w",)) + [
        scalar_mutation("beta", [1.0, 0.5, torch.tensor(2.0)], [lambda: math.nan, lambda: "1", lambda: None,
                                                                 lambda: torch.ones(7, 7), lambda: [1.0]]),
        scalar_mutation("eps", [1e-6, 1], [lambda: 0.0, lambda: -1e-3, lambda: math.nan, lambda: "x"])]
    raw = _mutate(data.draw, a, cat)
    w, beta, eps = a["w"], a["beta"], a["eps"]
    effects = _resolve_with([e for e in raw if "eps" not in e[1]], householder_fits, a)
    out = _outcome(lambda: householder(w, beta), effects, values_checked=True)
    if isinstance(out, torch.Tensor):
        b, wd = torch.as_tensor(beta, dtype=f64), w.double()
        ref = torch.eye(w.shape[-1], dtype=f64) - b[..., None, None] * wd[..., :, None] * wd[..., None, :]
        _close(out, ref, w.dtype)
    # normalize reads no values (NaN passes through, as in F.normalize); its shapes only need a D
    effects = _resolve_with([e for e in raw if "beta" not in e[1]], normalize_fits, a)
    out = _outcome(lambda: normalize(w, eps), effects, values_checked=False)
    if isinstance(out, torch.Tensor):
        wd = w.double()
        _close(out, wd / wd.norm(dim=-1, keepdim=True).clamp_min(float(eps)), w.dtype)


@_oracle
def normalize_fits(a):
    return len(_shapes(a, ("w",))["w"]) >= 1



# ----------------------------------------------------------------------------------------------
# decoding.py
# ----------------------------------------------------------------------------------------------

def _ref_keys_to_end(k, w, beta):
    k, w, beta = (x.detach().double() for x in (k, w, beta))
    out = torch.zeros_like(k)
    B, T, H, _ = k.shape
    for b in range(B):
        for h in range(H):
            for j in range(T):
                out[b, j, h] = _np_product(w[b, j + 1:, h], beta[b, j + 1:, h]) @ k[b, j, h]
    return out


KEY_TENSORS = tensor_mutations(("k", "w", "beta"), params=("w", "beta"),
                               value_rules={x: PATH_VALUE_RULES[x] for x in ("w", "beta")})


@given(data=st.data())
@FUZZ
def test_fuzz_keys_to_end(data):
    a = data.draw(path_base())
    a = {x: a[x] for x in ("k", "w", "beta")}
    effects = _mutate(data.draw, a, KEY_TENSORS + [BLOCK, CHECK_VALUES], keys_fit, (g_T0, g_edge_beta))
    kw = _split(a)
    out = _outcome(lambda: keys_to_end(a["k"], a["w"], a["beta"], **kw), effects, values_checked=_checked(kw))
    if isinstance(out, torch.Tensor):
        assert out.dtype == (f64 if a["k"].dtype == f64 else f32)
        _close(out, _ref_keys_to_end(a["k"], a["w"], a["beta"]), a["k"].dtype)


def _token(a, gen, cache):
    """A valid next token for a prompt ``a`` (in the layout of ``a``) and its cache."""
    B, _, Hq, D = a["q"].shape
    Hk, Dv = a["k"].shape[2], a["v"].shape[3]
    r = lambda *s: torch.randn(*s, generator=gen, dtype=f64)   # noqa: E731
    tok = {"q": r(B, Hq, D), "k": r(B, Hk, D), "v": r(B, Hk, Dv),
           "w": torch.nn.functional.normalize(r(B, Hk, D), dim=-1), "beta": 2 * torch.rand(B, Hk, generator=gen,
                                                                                        dtype=f64),
           "g": None if a["g"] is None else torch.nn.functional.logsigmoid(r(B, Hq))}
    for x in ("q", "k", "v"):
        tok[x] = tok[x].to(a[x].dtype)
    return {x: None if t is None else (t if t.dtype != f64 else t.to(cache.dtype)) for x, t in tok.items()}


@given(data=st.data())
@FUZZ
def test_fuzz_prefill_then_step(data):
    """prefill a (mutated) prompt; when accepted, step one more (valid) token: both against the reference."""
    a = data.draw(path_base())
    effects = _mutate(data.draw, a, PATH_TENSORS + [SCALE, BLOCK], path_fits, PATH_WHOLE)
    kw = _split(a)
    res = _outcome(lambda: prefill(a["q"], a["k"], a["v"], a["w"], a["beta"], a["g"], **kw), effects,
                   values_checked=True)
    if not isinstance(res, tuple):
        return
    o, cache = res
    q = a["q"]
    assert o.dtype == q.dtype and len(cache) == q.shape[1] and cache.dtype == (f64 if q.dtype == f64 else f32)
    _close(o, _ref_path(a, kw.get("scale")), q.dtype)
    tok = _token(a, torch.Generator().manual_seed(data.draw(st.integers(0, 99))), cache)
    o_t = cache.step(tok["q"], tok["k"], tok["v"], tok["w"], tok["beta"], tok["g"], scale=kw.get("scale"))
    assert o_t.dtype == cache.dtype and len(cache) == q.shape[1] + 1
    both = {x: None if a[x] is None else torch.cat([a[x].double(), tok[x][:, None].double()], 1) for x in SEQ_ARGS}
    _close(o_t, _ref_path(both, kw.get("scale"))[:, -1], _worst(q.dtype, cache.dtype))


TOKEN_NAMES = ("q_t", "k_t", "v_t", "w_t", "beta_t", "g_t")
TOKEN_CATALOGUE = tensor_mutations(
    TOKEN_NAMES, params=("w_t", "beta_t", "g_t"), rel_ref="q_t",
    value_rules={"w_t": PATH_VALUE_RULES["w"], "beta_t": PATH_VALUE_RULES["beta"], "g_t": PATH_VALUE_RULES["g"]},
) + [SCALE, CHECK_VALUES]


def _token_fits(cache):
    B, Hk, _, D = cache.keys.shape
    Hq, Dv = Hk * cache.n_rep, cache.values.shape[-1]
    want = {"q_t": (B, Hq, D), "k_t": (B, Hk, D), "v_t": (B, Hk, Dv), "w_t": (B, Hk, D), "beta_t": (B, Hk),
            "g_t": (B, Hq)}

    @_oracle
    def fits(a):
        s = _shapes(a, TOKEN_NAMES)
        return all(s[x] == want[x] or (x == "g_t" and s[x] is None) for x in TOKEN_NAMES)
    return fits


@given(data=st.data())
@FUZZ
def test_fuzz_cache_step(data):
    """A valid prefilled cache, one mutated step. A refused step leaves the cache as it was."""
    full = data.draw(path_base(extra_t=1, gate=True, dtypes=[f64, f32]))
    T = full["q"].shape[1] - 1
    _, cache = prefill(*(full[x][:, :T] for x in SEQ_ARGS))
    before = [t.clone() for t in (cache.keys, cache.values, cache.gate_prefix, cache.gate_total)]
    a = {f"{x}_t": full[x][:, T] for x in SEQ_ARGS}
    if data.draw(st.booleans()):
        a["g_t"] = None
    effects = _mutate(data.draw, a, TOKEN_CATALOGUE, _token_fits(cache))
    # lower precisions are promoted to the cache's; float64 into a float32 cache is refused
    effects += [(INVALID, (x,)) for x in TOKEN_NAMES
                if cache.dtype == f32 and isinstance(a[x], torch.Tensor) and a[x].dtype == f64]
    kw = _split(a)
    out = _outcome(lambda: cache.step(*(a[x] for x in TOKEN_NAMES), **kw), effects, values_checked=_checked(kw))
    if out is REFUSED:
        after = (cache.keys, cache.values, cache.gate_prefix, cache.gate_total)
        assert len(cache) == T and all(torch.equal(x, y) for x, y in zip(before, after))
        return
    assert len(cache) == T + 1
    if out is None:
        return
    assert out.dtype == cache.dtype
    g_t = a["g_t"] if a["g_t"] is not None else torch.zeros_like(full["g"][:, T])
    seq = {x: torch.cat([full[x][:, :T].double(), (g_t if x == "g" else a[f"{x}_t"])[:, None].double()], 1)
           for x in SEQ_ARGS}
    _close(out, _ref_path(seq, kw.get("scale"))[:, -1],
           _worst(cache.dtype, *(a[x].dtype for x in TOKEN_NAMES if a[x] is not None)))


CACHE_ARGS = {   # name: (valid values, invalid values)
    "batch_size": ([0, 1, 2, 3], [-1, -3, 2.0, True, None, "2"]),
    "n_q_heads": ([1, 2, 4], [0, -1, 2.0, False, "2"]),
    "n_kv_heads": ([1, 2], [0, -2, 1.0, True, None]),
    "head_dim": ([1, 3, 4], [0, -4, 4.0, "4"]),
    "value_dim": ([None, 1, 5], [0, -1, 2.5, "5"]),
    "dtype": ([f32, f64], [torch.float16, torch.bfloat16, torch.int64, "float32", None]),
    "device": ([None, "cpu", torch.device("cpu")], ["meta", torch.device("meta"), "cuda:7", "nope", 3.5]),
}


@given(data=st.data())
@FUZZ
def test_fuzz_cache_constructor(data):
    bad = set(data.draw(st.lists(st.sampled_from(sorted(CACHE_ARGS)), max_size=2)))
    a = {x: data.draw(st.sampled_from(CACHE_ARGS[x][x in bad])) for x in CACHE_ARGS}
    effects = [(INVALID, (x,)) for x in bad]
    if not bad & {"n_q_heads", "n_kv_heads"} and a["n_q_heads"] % a["n_kv_heads"]:
        effects.append((INVALID, ("n_q_heads", "n_kv_heads")))
    cache = _outcome(lambda: PaTHCache(a["batch_size"], a["n_q_heads"], a["n_kv_heads"], a["head_dim"],
                                       a["value_dim"], dtype=a["dtype"], device=a["device"]),
                     effects, values_checked=True)
    if isinstance(cache, PaTHCache):
        Dv = a["head_dim"] if a["value_dim"] is None else a["value_dim"]
        assert len(cache) == 0 and cache.dtype == a["dtype"] and cache.n_rep == a["n_q_heads"] // a["n_kv_heads"]
        assert cache.keys.shape == (a["batch_size"], a["n_kv_heads"], 0, a["head_dim"])
        assert cache.values.shape == (a["batch_size"], a["n_kv_heads"], 0, Dv)
        assert cache.gate_total.shape == (a["batch_size"], a["n_q_heads"])


# ----------------------------------------------------------------------------------------------
# one plain test per gap the 1400-call fuzz found
# ----------------------------------------------------------------------------------------------

def _inputs(B=2, T=5, Hq=2, Hk=2, D=4, dtype=f64, gate=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=f64)   # noqa: E731
    return (r(B, T, Hq, D).to(dtype), r(B, T, Hk, D).to(dtype), r(B, T, Hk, D).to(dtype),
            torch.nn.functional.normalize(r(B, T, Hk, D), dim=-1).to(dtype if dtype == f64 else torch.float32),
            torch.rand(B, T, Hk, generator=gen, dtype=f64).mul(2).to(dtype if dtype == f64 else torch.float32),
            torch.nn.functional.logsigmoid(r(B, T, Hq)) if gate else None)


@pytest.mark.parametrize("bad,exc,match", [
    (dict(w="x2"), ValueError, "w must be L2-normalised"),
    (dict(beta="five"), ValueError, r"beta must lie in \[0, 2\]"),
    (dict(k="nan"), ValueError, "k contains NaN"),
    (dict(w="nan"), ValueError, "w contains NaN"),
    (dict(k="int"), TypeError, "k must have dtype"),
    (dict(w="half"), TypeError, "w must have dtype"),
    (dict(beta="half"), TypeError, "beta must have dtype"),
    (dict(k="batch1"), ValueError, "w must have shape"),
])
def test_keys_to_end_validates(bad, exc, match):
    """Was: keys_to_end validated nothing (non-unit w, beta = 5, NaN, int/half dtypes, a k that broadcast)."""
    _, k, _, w, beta, _ = _inputs()
    args = {"k": k, "w": w, "beta": beta}
    (name, how), = bad.items()
    x = args[name]
    args[name] = {"x2": lambda: x * 2, "five": lambda: x * 0 + 5, "nan": lambda: x * math.nan,
                  "int": lambda: x.long(), "half": lambda: x.half(), "batch1": lambda: x[:1]}[how]()
    with pytest.raises(exc, match=match):
        keys_to_end(args["k"], args["w"], args["beta"])
    # the checks of values are skipped on request (no device sync), those of shapes and dtypes are not
    if how in ("x2", "five", "nan"):
        keys_to_end(args["k"], args["w"], args["beta"], check_values=False)


def _cache_and_token(dtype=torch.float32):
    q, k, v, w, beta, g = _inputs(T=3, dtype=dtype)
    _, cache = prefill(q[:, :2], k[:, :2], v[:, :2], w[:, :2], beta[:, :2], g[:, :2].to(w.dtype))
    return cache, [q[:, 2], k[:, 2], v[:, 2], w[:, 2], beta[:, 2], g[:, 2].to(w.dtype)]


@pytest.mark.parametrize("index,how,exc,match", [
    (3, "x2", ValueError, "w_t must be L2-normalised"),
    (3, "zero", ValueError, "w_t must be L2-normalised"),
    (5, "positive", ValueError, "g_t is a log forget gate"),
    (3, "half", TypeError, "w_t must have dtype"),
    (4, "half", TypeError, "beta_t must have dtype"),
    (0, "f64", TypeError, "q_t is float64 but the cache is float32"),
    (3, "f64", TypeError, "w_t is float64 but the cache is float32"),
])
def test_cache_step_validates(index, how, exc, match):
    """Was: step accepted non-unit or zero w, g > 0, half w/beta, and rounded float64 queries to float32."""
    cache, tok = _cache_and_token()
    x = tok[index]
    tok[index] = {"x2": lambda: x * 2, "zero": lambda: x * 0, "positive": lambda: x.abs() + 0.1,
                  "half": lambda: x.half(), "f64": lambda: x.double()}[how]()
    with pytest.raises(exc, match=match):
        cache.step(*tok)
    assert len(cache) == 2                                         # a refused step changes nothing
    cache64, tok64 = _cache_and_token(f64)
    tok64[0] = tok64[0].float()                                    # lower precisions are promoted
    assert cache64.step(*tok64).dtype == f64


def test_tensor_scale_with_grad_is_refused():
    """Was: a tensor scale that requires grad silently lost its gradient. Decision: refuse it with a
    TypeError (the kernels take the scale as a constant); a plain one-element tensor is still read as a
    number, and a learnable scale belongs in q (the equivalent call keeps the gradient)."""
    q, k, v, w, beta, g = _inputs()
    s = torch.tensor(0.3, dtype=f64, requires_grad=True)
    for impl in A.IMPLEMENTATIONS:
        with pytest.raises(TypeError, match="scale"):
            path_attention(q, k, v, w, beta, g, scale=s, impl=impl)
    for call in (lambda: softmax_attention(q, k, v, scale=s), lambda: prefill(q, k, v, w, beta, g, scale=s),
                 lambda: decode_path_attention(q, k, v, w, beta, g, scale=s)):
        with pytest.raises(TypeError, match="scale"):
            call()
    torch.testing.assert_close(path_attention(q, k, v, w, beta, scale=torch.tensor(0.3)),
                               path_attention(q, k, v, w, beta, scale=0.3))
    o = path_attention(q * s / 0.5, k, v, w, beta, scale=None)     # D = 4: default scale 0.5
    o.sum().backward()
    assert s.grad is not None


@pytest.mark.parametrize("impl", A.IMPLEMENTATIONS)
@pytest.mark.parametrize("gate", [False, True])
def test_empty_sequence_every_impl(impl, gate):
    """Was: T = 0 crashed in impl="explicit" and "blockwise" (the default)."""
    q, k, v, w, beta, g = (None if x is None else x[:, :0] for x in _inputs(gate=gate))
    v = torch.zeros(2, 0, 2, 3, dtype=f64)
    o = path_attention(q, k, v, w, beta, g, impl=impl)
    assert o.shape == (2, 0, 2, 3) and o.dtype == f64
    if impl in ("explicit", "parallel"):
        assert path_logits(q, k, w, beta, g, impl=impl).shape == (2, 2, 0, 0)
    assert decode_path_attention(q, k, v, w, beta, g).shape == (2, 0, 2, 3)


def test_empty_sequence_prefill_and_keys_to_end():
    """Was: T = 0 crashed in prefill and keys_to_end. Now: empty outputs, and an empty cache that decodes."""
    q, k, v, w, beta, g = _inputs(T=1)
    e = [x[:, :0] for x in (q, k, v, w, beta, g)]
    assert keys_to_end(e[1], e[3], e[4]).shape == (2, 0, 2, 4)
    o, cache = prefill(*e)
    assert o.shape == (2, 0, 2, 4) and len(cache) == 0
    o_t = cache.step(q[:, 0], k[:, 0], v[:, 0], w[:, 0], beta[:, 0], g[:, 0])
    torch.testing.assert_close(o_t, path_attention(q, k, v, w, beta, g)[:, 0])


def _meta(x):
    return None if x is None else x.to("meta")


@pytest.mark.parametrize("entry", ["explicit", "parallel", "blockwise", "path_logits", "softmax", "rope", "alibi",
                                   "fox", "apply_rope", "decode", "prefill", "keys_to_end", "step", "householder",
                                   "householder_product", "ut_transform", "ut_transform_loop", "block_product",
                                   "boundary_q", "boundary_k", "normalize", "cache"])
def test_meta_tensors_are_refused_by_name(entry):
    """Was: every entry point called Tensor.item() on meta tensors (a raw NotImplementedError) before
    any device check. Now: the device is checked first, and a meta tensor is refused by name."""
    q, k, v, w, beta, g = _inputs()
    m = [_meta(x) for x in (q, k, v, w, beta, g)]
    W, b = w[0, :, 0], beta[0, :, 0]
    T = ut_transform(W, b)
    calls = {
        "explicit": lambda: path_attention(*m, impl="explicit"),
        "parallel": lambda: path_attention(q, k, v, m[3], beta, g, impl="parallel"),
        "blockwise": lambda: path_attention(q, k, v, w, beta, m[5]),
        "path_logits": lambda: path_logits(q, k, w, m[4]),
        "softmax": lambda: softmax_attention(*m[:3]),
        "rope": lambda: rope_attention(q, m[1], v),
        "alibi": lambda: alibi_attention(q, k, v, slopes=torch.ones(2, device="meta")),
        "fox": lambda: fox_attention(q, k, v, m[5]),
        "apply_rope": lambda: apply_rope(m[0]),
        "decode": lambda: decode_path_attention(*m),
        "prefill": lambda: prefill(*m),
        "keys_to_end": lambda: keys_to_end(m[1], m[3], m[4]),
        "step": lambda: PaTHCache(2, 2, 2, 4, dtype=f64).step(m[0][:, 0], k[:, 0], v[:, 0], w[:, 0], beta[:, 0]),
        "householder": lambda: householder(_meta(W[0]), 1.0),
        "householder_product": lambda: householder_product(_meta(W), b),
        "ut_transform": lambda: ut_transform(_meta(W), _meta(b)),
        "ut_transform_loop": lambda: ut_transform_loop(W, _meta(b)),
        "block_product": lambda: block_product(W, b, _meta(T)),
        "boundary_q": lambda: boundary_adjusted_queries(_meta(W), W, T),
        "boundary_k": lambda: boundary_adjusted_keys(W, W, _meta(T)),
        "normalize": lambda: normalize(_meta(W)),
        "cache": lambda: PaTHCache(1, 1, 1, 4, device="meta"),
    }
    with pytest.raises(ValueError, match="meta"):
        calls[entry]()


def test_step_with_a_state_from_another_batch_size():
    """Was: a crash. Now: a ValueError naming the token argument and the cache's batch size."""
    cache, tok = _cache_and_token()
    for B in (1, 3):
        other = [torch.cat([x] * 2)[:B] for x in tok]
        with pytest.raises(ValueError, match=r"q_t must have shape .*the cache holds batch size 2"):
            cache.step(*other)
    assert len(cache) == 2


@pytest.mark.parametrize("W,beta,match", [
    (torch.ones(4, dtype=f64) / 2, torch.tensor(1.0, dtype=f64), r"W must have shape \[\.\.\., L, D\]"),
    (torch.ones(3, 4, dtype=f64) / 2, torch.ones(3, 1, dtype=f64), "beta must have shape"),
    (torch.ones(3, 4, dtype=f64) / 2, torch.ones(4, dtype=f64), "beta must have shape"),
])
def test_ut_transform_on_too_few_dims(W, beta, match):
    """Was: ut_transform of a one-direction input crashed (IndexError); half blocks crashed in the solve."""
    for fn in (ut_transform, ut_transform_loop, householder_product, block_product):
        with pytest.raises(ValueError, match=match):
            fn(W, beta)
    W2 = normalize(torch.randn(3, 4, dtype=f64))
    b2 = torch.rand(3, dtype=f64)
    torch.testing.assert_close(ut_transform(W2.half(), b2.half()).double(), ut_transform(W2.half().double(),
                               b2.half().double()), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(ut_transform(W2, b2.float()), ut_transform(W2, b2))   # beta takes W's dtype


@pytest.mark.parametrize("args,kw,exc,match", [
    ((-1, 1, 1, 4), {}, ValueError, "batch_size must be >= 0"),
    ((1.5, 1, 1, 4), {}, TypeError, "batch_size must be an int"),
    ((1, 0, 1, 4), {}, ValueError, "n_q_heads"),
    ((1, 2, 0, 4), {}, ValueError, "n_kv_heads"),
    ((1, 3, 2, 4), {}, ValueError, "multiple"),
    ((1, 1, 1, 0), {}, ValueError, "head_dim"),
    ((1, 1, 1, 4, -3), {}, ValueError, "value_dim"),
    ((1, 1, 1, 4), dict(dtype=torch.float16), TypeError, "dtype"),
    ((1, 1, 1, 4), dict(device="nope"), ValueError, "device"),
])
def test_cache_constructor_validates(args, kw, exc, match):
    """Was: PaTHCache(-1, ...) crashed inside torch.zeros."""
    with pytest.raises(exc, match=match):
        PaTHCache(*args, **kw)
    assert len(PaTHCache(0, 1, 1, 4)) == 0
