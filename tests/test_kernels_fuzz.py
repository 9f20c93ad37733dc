"""Property-based fuzz of ``path_lib.kernels`` (the companion of ``test_public_api_fuzz.py``): every call
either raises a ``ValueError`` / ``TypeError`` naming a bad argument, or agrees with an independent
float64 computation (the NumPy loop definition of PaTH attention, or :class:`path_lib.decoding.PaTHCache`
in float64 for the GPU decoding cache).

The kernels run under ``TRITON_INTERPRET=1`` at tiny float32 shapes (head dim 32 for the attention
kernels, 16 for the decoding cache); as in ``test_decode_kernel.py`` the variable must be set before
triton is imported, so without it this module runs itself in a subprocess that has it. The module is
skipped where triton is missing. Examples are drawn deterministically (``derandomize``) and few: the
interpreter runs every program of a launch in Python.

The public entry points of ``path_lib.kernels`` check ``check_values``, ``T``, ``D``, the device and
``code_text``'s source themselves (``kernels/path_lib/kernels/__init__.py``), so the hashed launcher
(``_api.py``) is unchanged: ``test_public_entry_points_name_their_bad_arguments``.
"""
from __future__ import annotations

import math
import os
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

pytest.importorskip("triton")

from fuzz_helpers import DETERMINISTIC, REFUSED, close, judge  # noqa: E402
from helpers import interpreter_markers, numpy_path_attention, random_path_inputs  # noqa: E402

needs_interpreter, outside_interpreter = interpreter_markers()
f64, f32 = torch.float64, torch.float32
FEW = settings(DETERMINISTIC, max_examples=20)
TRUTHY = (1, 0, "yes", 1.0)
@outside_interpreter
def test_under_triton_interpreter():
    from helpers import run_module_under_interpreter
    run_module_under_interpreter(__file__, "kernel fuzz")


# ----------------------------------------------------------------------------------------------
# outside the interpreter too: the configuration helpers launch nothing
# ----------------------------------------------------------------------------------------------

@settings(FEW, max_examples=25)
@given(data=st.data())
def test_configuration_helpers(data):
    """kernel_config / blocking / backward_slices / env_overrides / fallback_state / is_available and the
    code hashes: junk arguments are refused by name; valid ones give a configuration whose block length
    tiles the sequence into its blocks (n_blocks = ceil(T / block)) and segments."""
    import path_lib.kernels as K
    junk = data.draw(st.sampled_from([None, True, -1, 0, 2.5, "x", [1], torch.tensor(1)]))
    T, D = data.draw(st.sampled_from([1, 7, 64, 1000])), data.draw(st.sampled_from(K.HEAD_DIMS))
    which = data.draw(st.sampled_from(["kernel_config", "blocking", "backward_slices", "env_overrides", "misc"]))

    def tiles(cfg):
        assert cfg.n_blocks == math.ceil(T / cfg.block) and cfg.n_segments == math.ceil(cfg.n_blocks / cfg.seg_blocks)
    if which == "kernel_config":                    # valid arguments (bad ones: the test below)
        device = data.draw(st.sampled_from([K.H200, K.A100, K.T4, K.CPU]))
        judge(lambda: K.kernel_config(device, torch.float32 if device is K.CPU else torch.bfloat16, D, T), (), tiles)
    elif which == "blocking":
        def check_blocking(bs):
            block, seg_blocks = bs
            assert block >= 16 and block & (block - 1) == 0 and seg_blocks >= 1, bs
        judge(lambda: K.blocking(T, D), (), check_blocking)
    elif which == "backward_slices":
        cfg = K.kernel_config(K.H200, torch.bfloat16, D, T)
        arg = data.draw(st.sampled_from(["device", "cfg", "batch", "key_heads", None]))
        args = {"device": K.H200, "cfg": cfg, "batch": 2, "key_heads": 2}
        if arg is not None:
            args[arg] = junk if not (arg == "device" and junk is None) else 3
        judge(lambda: K.backward_slices(**args), () if arg is None else (arg,),
              lambda n: 1 <= n <= min(4, args["batch"]) or pytest.fail(f"{n} slices"))
    elif which == "env_overrides":
        environ = data.draw(st.sampled_from([{}, {"PATH_KERNELS_BWD_SLICES": "2"}, {"PATH_KERNELS_BWD_SLICES": "x"},
                                             {"PATH_KERNELS_BWD_SLICES": "-1"}]))
        ok = environ in ({}, {"PATH_KERNELS_BWD_SLICES": "2"})
        judge(lambda: K.env_overrides(environ), () if ok else ("PATH_KERNELS_BWD_SLICES",),
              lambda o: o.bwd_slices == (2 if environ else None) or pytest.fail(str(o)))
    else:
        assert isinstance(K.is_available(), bool) and isinstance(K.fallback_state(), K.FallbackState)
        assert re.fullmatch("[0-9a-f]{64}", K.sources_sha256()) and re.fullmatch("[0-9a-f]{64}", K.code_sha256())


@settings(FEW, max_examples=20)
@given(data=st.data())
def test_decode_config_and_cache_arguments(data):
    """DecodeConfig refuses non-positive or non-int fields by name; the cache's constructor refuses bad
    sizes, dtypes and devices by name (no launch)."""
    from path_lib.kernels.decode import DecodeConfig, TritonPaTHCache
    field = data.draw(st.sampled_from(["tile", "num_stages", "programs_per_sm", "num_warps", None]))
    value = data.draw(st.sampled_from([0, -1, 2.0, "4", True, None]))
    kwargs = {} if field is None else {field: value}
    judge(lambda: DecodeConfig(**kwargs), () if field is None else (field,),
          lambda c: c == DecodeConfig() or pytest.fail(str(c)))
    arg = data.draw(st.sampled_from(["batch_size", "head_dim", "flush_every", "capacity", "key_dtype", "config"]))
    bad_value = data.draw(st.sampled_from({"batch_size": [0, -1, 1.0], "head_dim": [8, 24, 512, "16"],
                                           "flush_every": [0, True], "capacity": [0, None],
                                           "key_dtype": [f64, torch.int8], "config": [{"tile": 1}, 3]}[arg]))
    args = {"batch_size": 1, "n_q_heads": 2, "n_kv_heads": 1, "head_dim": 16, **{arg: bad_value}}
    device = "cuda" if torch.cuda.is_available() else "meta"
    judge(lambda: TritonPaTHCache(**args, device=device), (arg, "device"))
    bad_device = data.draw(st.sampled_from(["x", -1, None, True, "cuda:7" if not torch.cuda.is_available() else "x"]))
    judge(lambda: TritonPaTHCache(1, 2, 1, 16, device=bad_device), ("device",))


TUNING_BAD = {"block_size": [0, -16, 24, 8, 128, 16.0, "16", True, float("nan"), 2 ** 70],
              "seg_blocks": [0, -1, 1.5, "2", True, float("nan"), 2 ** 70]}


@settings(FEW, max_examples=30)
@given(data=st.data())
def test_tuning_arguments_are_refused_by_name(data):
    """The kernels' tuning overrides (``block_size``, ``seg_blocks``) at 0, negative, not a power of two,
    float, str, bool, NaN or huge are a TypeError / ValueError naming them (listing the allowed block
    lengths), from kernel_config and from path_attention before anything is launched; valid ones give a
    configuration with exactly that blocking."""
    import path_lib.kernels as K
    name = data.draw(st.sampled_from(sorted(TUNING_BAD)))
    value = data.draw(st.sampled_from(TUNING_BAD[name]))
    T = data.draw(st.sampled_from([1, 40, 300]))
    judge(lambda: K.kernel_config(K.H200, torch.bfloat16, 64, T, **{name: value}), (name,))
    q, k, v, w, beta, _ = random_path_inputs(1, 4, 2, 2, 32, dtype=f32)
    judge(lambda: K.path_attention(q, k, v, w, beta, **{name: value}), (name,))
    block, seg = data.draw(st.sampled_from(K.BLOCK_SIZES)), data.draw(st.integers(1, 5))

    def check(cfg):
        assert (cfg.block, cfg.seg_blocks, cfg.n_blocks) == (block, seg, math.ceil(T / block)), cfg
    judge(lambda: K.kernel_config(K.H200, torch.bfloat16, 64, T, block_size=block, seg_blocks=seg), (), check)
    info = data.draw(st.sampled_from([K.DeviceInfo("gpu"), K.DeviceInfo("cuda", (9,)), K.DeviceInfo("cuda", (9, 0), -1),
                                      K.DeviceInfo("cuda", (9, 0), 1024, sms=2.5), K.DeviceInfo("cuda", (9, 0), "x"),
                                      K.DeviceInfo("cuda", (9.0, 0), 1024)]))
    judge(lambda: K.kernel_config(info, torch.bfloat16, 64, T), ("device",))
    judge(lambda: K.backward_slices(info, K.kernel_config(K.H200, torch.bfloat16, 64, T), 2, 2), ("device",))
    with pytest.raises(ValueError, match=r"block_size must be one of \(16, 32, 64\)"):
        K.kernel_config(K.H200, torch.bfloat16, 64, T, block_size=24)


@settings(FEW, max_examples=15)
@given(data=st.data())
def test_context_chunk_arguments_are_refused_by_name(data):
    """path_lib.kernels.context (the kernels as one chunk of a context-parallel sequence): bad tensors,
    gates, scales and states are refused by name before anything is launched; chunk_unfit says why the
    kernels cannot take a chunk (None when they can)."""
    from path_lib.kernels import context as Cx
    q, k, v, w, beta, g = random_path_inputs(1, 4, 2, 2, 32, dtype=f32, gate=True)
    G = torch.cumsum(g, 1)
    bad = data.draw(st.sampled_from([
        ("q", [1]), ("q", q.double()), ("q", q[0]), ("q", q.to("meta")), ("w", w.double()), ("w", w[..., :16]),
        ("beta", beta[..., :1]), ("G", G[..., :1]), ("G", "G"), ("G", G.double()), ("scale", 0.0),
        ("scale", float("nan")), ("scale", "1")]))
    args = dict(q=q, k=k, v=v, w=w, beta=beta, G=G, scale=0.5)
    args[bad[0]] = bad[1]
    judge(lambda: Cx.chunk_forward(**args), (bad[0],) + (("head dim", "D") if bad[0] == "w" else ()))
    judge(lambda: Cx.chunk_backward("state", q, q, q), ("state",))
    unfit_q = data.draw(st.sampled_from([q, q[..., :16], "q", q[0]]))
    expect_bad = () if isinstance(unfit_q, torch.Tensor) and unfit_q.dim() == 4 else ("q",)

    def check(why):
        if unfit_q.shape[-1] == 16:
            assert "head dims" in why, why
        else:                                        # D = 32: the kernels run where CUDA or the interpreter is
            runs = torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
            assert (why is None) == runs, why
    judge(lambda: Cx.chunk_unfit(unfit_q, v), expect_bad, check)


# ----------------------------------------------------------------------------------------------
# under the interpreter
# ----------------------------------------------------------------------------------------------

@needs_interpreter
@FEW
@given(data=st.data())
def test_path_attention_kernel(data):
    """path_attention (and transform_keys_to_end) under the interpreter: B = 0 and T = 0 give empty
    results; a float64 q, a head dim outside HEAD_DIMS, float64 w / beta, NaN in k, beta outside [0, 2]
    are refused by name; otherwise the NumPy definition (float64) within float32 accuracy."""
    from path_lib.kernels import path_attention, transform_keys_to_end
    B, T = data.draw(st.sampled_from([0, 1])), data.draw(st.sampled_from([0, 1, 5]))
    q, k, v, w, beta, g = random_path_inputs(B=B, T=T, Hq=2, Hk=1, D=32, dtype=f32, gate=data.draw(st.booleans()),
                                             seed=data.draw(st.integers(0, 999)))
    mutation = data.draw(st.sampled_from(["none", "q64", "D", "w64", "nan_k", "beta", "g_shape"]))
    bad = ()
    if mutation == "q64":
        q, bad = q.double(), ("q",)
    elif mutation == "D":
        q, k, v, w = (x[..., :16] for x in (q, k, v, w))
        w, bad = F.normalize(w, dim=-1), ("head dim", "q", "D")
    elif mutation == "w64":
        w, bad = w.double(), ("w",)
    elif mutation == "nan_k" and k.numel():
        k, bad = k.clone().fill_(float("nan")), ("k",)
    elif mutation == "beta" and beta.numel():
        beta, bad = beta + 2.5, ("beta",)
    elif mutation == "g_shape":
        g, bad = torch.zeros(B, T, 1), ("g",)
    tuning = data.draw(st.sampled_from([{}, {"block_size": 16, "seg_blocks": 1}, {"block_size": 16, "seg_blocks": 2}]))
    judge(lambda: path_attention(q, k, v, w, beta, g, **tuning), bad,
          lambda o: close(o, numpy_path_attention(q, k, v, w, beta, g), 2e-4))
    if mutation in ("none", "w64", "nan_k", "beta"):
        from path_lib.decoding import keys_to_end
        judge(lambda: transform_keys_to_end(k, w, beta), bad,
              lambda o: close(o, keys_to_end(k.double(), w.double(), beta.double()), 2e-4))


def _token(gen, B, Hq, Hk, D, gate):
    r = lambda *s: torch.randn(*s, generator=gen)                             # noqa: E731
    return (r(B, Hq, D), r(B, Hk, D), r(B, Hk, D), F.normalize(r(B, Hk, D), dim=-1),
            2 * torch.rand(B, Hk, generator=gen), -torch.rand(B, Hq, generator=gen) if gate else None)


@needs_interpreter
@FEW
@given(data=st.data())
def test_triton_decoding_cache(data):
    """TritonPaTHCache under the interpreter, against PaTHCache in float64: from_prefix refuses a capacity
    below T, float64 or NaN keys and g > 0 by name; select refuses out-of-range and empty indices; a
    step's inputs of another shape are refused naming them; valid use gives PaTHCache's outputs."""
    from path_lib.decoding import PaTHCache, is_cache
    from path_lib.kernels.decode import TritonPaTHCache
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 999)))
    B, Hq, Hk, D, T = 2, 2, 1, 16, data.draw(st.integers(0, 3))
    gate = data.draw(st.booleans())
    keys, v = torch.randn(B, T, Hk, D, generator=gen), torch.randn(B, T, Hk, D, generator=gen)
    g = -torch.rand(B, T, Hq, generator=gen) if gate else None
    mutation = data.draw(st.sampled_from(["none", "capacity", "keys64", "nan", "g", "check_values"]))
    kwargs, bad, k_in, g_in = {}, (), keys, g
    if mutation == "capacity" and T > 1:
        kwargs, bad = {"capacity": T - 1}, ("capacity",)
    elif mutation == "keys64":
        k_in, bad = keys.double(), ("keys_end",)
    elif mutation == "nan" and T:
        k_in, bad = keys.clone().fill_(float("nan")), ("keys_end",)
    elif mutation == "g" and gate and T:
        g_in, bad = -g + 0.5, ("g",)
    elif mutation == "check_values":
        kwargs, bad = {"check_values": data.draw(st.sampled_from(TRUTHY))}, ("check_values",)
    cache = judge(lambda: TritonPaTHCache.from_prefix(k_in, v, g_in, n_q_heads=Hq, value_dtype=f32, flush_every=2,
                                                      **kwargs), bad)
    if cache is REFUSED:
        return
    assert is_cache(cache) and len(cache) == T and cache.valid is None
    ref = PaTHCache._from_prefix(keys.double(), v.double(), None if g is None else g.double(), Hq, dtype=f64)
    index = data.draw(st.sampled_from([[1, 0], [0, 0], [2], [-1], []]))
    bad = () if index and all(0 <= i < B for i in index) else ("index",)
    idx = torch.tensor(index, dtype=torch.int64)
    judge(lambda: cache.select(idx), bad)
    if bad:                                                    # refused: the cache keeps its rows
        idx = torch.arange(B)
    else:
        ref.select(idx)
    n = int(idx.numel())
    for _ in range(3):
        q_t, k_t, v_t, w_t, beta_t, g_t = _token(gen, n, Hq, Hk, D, gate)
        out = cache.step(q_t, k_t, v_t, w_t, beta_t, g_t)
        close(out, ref.step(*(None if x is None else x.double() for x in (q_t, k_t, v_t, w_t, beta_t, g_t))), 2e-4)
    close(cache.keys, ref.keys, 2e-4)
    q_t, k_t, v_t, w_t, beta_t, g_t = _token(gen, n, Hq, Hk, D, gate)
    judge(lambda: cache.step(q_t[:, :1], k_t, v_t, w_t, beta_t, g_t), ("q_t",))


@needs_interpreter
@FEW
@given(data=st.data())
def test_short_conv_and_teaching_kernels(data):
    """short_conv_normalize (the fused Triton pass) against the PyTorch map in float64, and
    teaching_path_attention against the NumPy definition; bad arguments refused by name."""
    from path_lib.kernels.short_conv import short_conv_normalize
    from path_lib.kernels.teaching import teaching_path_attention
    from path_lib.reference.short_conv import short_conv_normalize_torch
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 999)))
    if data.draw(st.booleans()):
        B, T, H, Dh = 1, data.draw(st.integers(1, 5)), 2, 16
        u, weight = torch.randn(B, T, H * Dh, generator=gen), torch.randn(H * Dh, 1, 3, generator=gen)
        mutation = data.draw(st.sampled_from(["none", "flag", "heads", "u64", "normalization"]))
        kwargs, n_heads, bad = {}, H, ()
        if mutation == "flag":
            kwargs, bad = {"check_values": data.draw(st.sampled_from(TRUTHY))}, ("check_values",)
        elif mutation == "heads":
            n_heads, bad = 3, ("n_heads", "u")
        elif mutation == "u64":
            u, bad = u.double(), ("u",)
        elif mutation == "normalization":
            kwargs, bad = {"normalization": "l1"}, ("normalization",)
        judge(lambda: short_conv_normalize(u, weight, n_heads, **kwargs), bad,
              lambda o: close(o, short_conv_normalize_torch(u.double(), weight.double(), H), 2e-4))
        return
    B, T = 1, data.draw(st.integers(1, 20))
    q, k, v, w, beta, _ = random_path_inputs(B=B, T=T, Hq=1, D=16, dtype=f32, seed=data.draw(st.integers(0, 999)))
    mutation = data.draw(st.sampled_from(["none", "block", "beta64", "q_shape"]))
    block, bad = 16, ()
    if mutation == "block":
        block, bad = data.draw(st.sampled_from([8, 24, 0, "16"])), ("block_size",)
    elif mutation == "beta64":
        beta, bad = beta.double(), ("beta",)
    elif mutation == "q_shape":
        q, bad = q[:, :, :, :8], ("q", "k", "D")
    judge(lambda: teaching_path_attention(q, k, v, w, beta, block_size=block), bad,
          lambda o: close(o, numpy_path_attention(q, k, v, w, beta), 2e-4))



def test_public_entry_points_name_their_bad_arguments():
    """Truthy non-bools, non-positive or non-int sizes, a CUDA device where there is none and a non-str
    source are named errors, raised before anything is launched."""
    import path_lib.kernels as K
    q, k, v, w, beta, _ = random_path_inputs(1, 4, 2, 2, 32, dtype=f32)
    for flag in TRUTHY:
        with pytest.raises(TypeError, match="check_values"):
            K.path_attention(q, k, v, w, beta, check_values=flag)
        with pytest.raises(TypeError, match="check_values"):
            K.transform_keys_to_end(k, w, beta, check_values=flag)
    for T in (0, -3, True, 4.0, torch.tensor(8)):
        with pytest.raises(ValueError, match="T must be a positive int"):
            K.kernel_config(K.H200, torch.bfloat16, 64, T)
        with pytest.raises(ValueError, match="T must be a positive int"):
            K.blocking(T, 64)
    with pytest.raises(ValueError, match="D must be"):
        K.kernel_config(K.H200, torch.bfloat16, 0, 64)
    with pytest.raises(ValueError, match="device .gpu7. is not a device"):
        K.kernel_config("gpu7", torch.bfloat16, 64, 64)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            K.kernel_config("cuda", torch.bfloat16, 64, 64)
    with pytest.raises(TypeError, match="dtype"):
        K.kernel_config(K.H200, "bf16", 64, 64)
    with pytest.raises(TypeError, match="source must be a str"):
        K.code_text(b"x = 1")
    assert K.kernel_config(K.H200, torch.bfloat16, 64, 4096).block == K.blocking(4096, 64)[0]
