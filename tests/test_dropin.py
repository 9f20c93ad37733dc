"""The layer as a drop-in (issue 21): no host syncs in module forward paths, torch.compile(fullgraph=True),
padding masks, packed sequences, a past_key_values cache, the preallocated PaTHCache, and generate()'s
prefill and sampling options. References: per-sequence runs of the reference (UT all-pairs) backend in
float64, and the concatenating cache the preallocated one replaced."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import random_path_inputs
from path_lib.validation import values_checked
from path_lib.impl import path_attention
from path_lib.nn.cache import StateCache
from path_lib.decoding import PaTHCache, prefill
from path_lib.nn.layers import PaTHAttention
from path_lib.nn.model import TinyLM
from path_lib.nn.sampling import filter_logits, sample_next

f64 = torch.float64


def _layer(fox=False, seed=0, **kw):
    torch.manual_seed(seed)
    return PaTHAttention(12, 4, n_kv_heads=2, use_forget_gate=fox, block_size=3, w_rank=4, **kw).double()


def _alone(layer, x):
    """One unpadded sequence ``x [1, L, C]`` through the reference (UT all-pairs) backend."""
    backend, layer.backend = layer.backend, "reference"
    try:
        return layer(x)
    finally:
        layer.backend = backend


# ----------------------------------------------------------------------------------------------
# 1. no host syncs; torch.compile
# ----------------------------------------------------------------------------------------------

class _CountSyncs(TorchDispatchMode):
    """Counts reads of a tensor's value on the host (``.item()``, ``bool()``, ``int()``, ``float()``)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.n += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("attention", ["path", "path_fox"])
def test_forward_backward_reads_no_value_on_the_host(attention):
    torch.manual_seed(1)
    tokens = torch.randint(0, 11, (2, 7))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7])
    counts = {}
    for flag in (False, True):
        lm = TinyLM(11, d_model=8, n_layers=1, n_heads=2, attention=attention, backend="blockwise", block_size=3,
                    check_values=flag)
        layer = lm.blocks[0].attn
        with _CountSyncs() as c:
            lm(tokens).sum().backward()
            layer(torch.randn(2, 7, 8), attention_mask=mask).sum().backward()
            with torch.no_grad():
                _, state = lm.prefill(tokens)
                lm.step(tokens[:, 0], state)
                _, _, cache = layer(torch.randn(2, 7, 8), attention_mask=mask, use_cache=True)
                step_mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)   # the prompt's padding kept
                layer(torch.randn(2, 1, 8), attention_mask=step_mask, past_key_values=cache)
        counts[flag] = c.n
    assert counts[False] == 0
    assert counts[True] > 0                      # the counter does see the value checks


def test_check_values_resolution():
    assert values_checked(None, torch.zeros(1)) is True               # CPU, eager: free
    assert values_checked(None, torch.zeros(1, device="meta")) is False   # any other device: never by default
    assert values_checked(False, torch.zeros(1)) is False and values_checked(True, torch.zeros(1, device="meta"))
    with pytest.raises(TypeError, match="check_values"):
        TinyLM(5, d_model=8, n_layers=1, check_values="yes")
    with pytest.raises(TypeError, match="check_values"):
        PaTHAttention(8, 2, check_values=1)
    lm = TinyLM(5, d_model=8, n_layers=1, n_heads=2, check_values=False)
    with pytest.raises(ValueError, match="tokens must lie"):          # default (None) on CPU still checks
        TinyLM(5, d_model=8, n_layers=1, n_heads=2)(torch.tensor([[0, 5]]))
    with pytest.raises(TypeError, match="integer"):                   # dtype is checked always
        lm(torch.zeros(1, 2))


def test_compile_fullgraph_forward_backward():
    """fullgraph=True fails on any graph break (a host sync, an unsupported call); the compiled model's
    loss and gradients equal eager mode's. The eager backend keeps the compile time small on CPU."""
    torch.manual_seed(0)
    lm = TinyLM(11, d_model=8, n_layers=1, n_heads=2, attention="path", backend="blockwise", block_size=4,
                w_rank=4, mlp_ratio=1.0)
    tokens = torch.randint(0, 11, (2, 8))
    torch._dynamo.reset()
    compiled = torch.compile(lm, backend="eager", fullgraph=True)
    out = compiled(tokens)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in lm.parameters()]
    lm.zero_grad()
    ref = lm(tokens)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref)
    for g, p in zip(grads, lm.parameters()):
        torch.testing.assert_close(g, p.grad)


# ----------------------------------------------------------------------------------------------
# 2. attention_mask, cu_seqlens, past_key_values
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fox", [False, True])
def test_padding_mask_equals_rows_alone(fox):
    layer = _layer(fox)
    B, T = 4, 9
    x = torch.randn(B, T, 12, dtype=f64)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :4] = 0                         # left padding
    mask[2, 6:] = 0                         # right padding
    mask[3, [0, 3, 4, 8]] = 0               # holes
    y = layer(x, attention_mask=mask)
    assert y.shape == x.shape and torch.isfinite(y).all()
    for b in range(B):
        keep = mask[b].bool()
        torch.testing.assert_close(y[b, keep], _alone(layer, x[b:b + 1, keep])[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(layer(x, attention_mask=mask.bool()), y, atol=0, rtol=0)


@pytest.mark.parametrize("fox", [False, True])
def test_packed_sequences_equal_sequences_alone(fox):
    layer = _layer(fox, seed=1)
    lengths = [4, 0, 1, 7]
    xs = [torch.randn(1, L, 12, dtype=f64) for L in lengths]
    cu = torch.tensor([0, 4, 4, 5, 12], dtype=torch.int32)
    y = layer(torch.cat(xs, 1), cu_seqlens=cu)
    ref = torch.cat([_alone(layer, xx) for xx in xs if xx.shape[1]], 1)
    torch.testing.assert_close(y, ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("fox", [False, True])
def test_cache_prefill_then_decode_equals_forward(fox):
    layer = _layer(fox, seed=2)
    x = torch.randn(2, 10, 12, dtype=f64)
    y, none, cache = layer(x[:, :6], use_cache=True)
    assert none is None and isinstance(cache, StateCache) and cache.get_seq_length() == 6
    ys = [y]
    for t in range(6, 10):
        y_t, _, cache2 = layer(x[:, t:t + 1], past_key_values=cache, use_cache=True)
        assert cache2 is cache
        ys.append(y_t)
    ys.append(layer(x[:, 10:10], past_key_values=cache)[0])        # an empty call changes nothing
    assert cache.get_seq_length() == 10
    torch.testing.assert_close(torch.cat(ys, 1), _alone(layer, x), atol=1e-12, rtol=0)
    # a chunk of several tokens on a non-empty cache decodes them in turn
    _, _, c = layer(x[:, :3], use_cache=True)
    torch.testing.assert_close(layer(x[:, 3:], past_key_values=c)[0], _alone(layer, x)[:, 3:], atol=1e-12, rtol=0)


@pytest.mark.parametrize("fox", [False, True])
def test_left_padded_prefill_and_decode_equal_rows_alone(fox):
    """Generation with left padding: the Hugging Face mask covers the cached tokens ([B, t + 1])."""
    layer = _layer(fox, seed=3)
    B, T, P = 3, 9, 6
    x = torch.randn(B, T, 12, dtype=f64)
    lengths = [9, 5, 2]                       # row 2 is all padding during the prefill
    mask = torch.zeros(B, T, dtype=torch.long)
    for b, L in enumerate(lengths):
        mask[b, T - L:] = 1
    mask[0, 7] = 0                            # and a padding token in the middle of decoding
    ys = [layer(x[:, :P], attention_mask=mask[:, :P], use_cache=True)]
    cache = ys[0][2]
    for t in range(P, T):
        ys.append(layer(x[:, t:t + 1], attention_mask=mask[:, :t + 1], past_key_values=cache))
    y = torch.cat([o for o, _, _ in ys], 1)
    for b in range(B):
        keep = mask[b].bool()
        torch.testing.assert_close(y[b, keep], _alone(layer, x[b:b + 1, keep])[0], atol=1e-12, rtol=0)


def test_return_convention():
    layer = _layer()
    x = torch.randn(1, 4, 12, dtype=f64)
    assert isinstance(layer(x), torch.Tensor)                      # existing callers: a tensor
    fla = _layer(return_tuple=True)
    o, attn, past = fla(x)
    assert attn is None and past is None and torch.equal(o, layer(x))
    o, _, past = fla(x, use_cache=True)
    assert isinstance(past, StateCache)


def test_layer_drop_in_bad_input():
    layer = _layer()
    x = torch.randn(2, 4, 12, dtype=f64)
    with pytest.raises(TypeError, match="attention_mask"):
        layer(x, attention_mask=torch.ones(2, 4))                  # a float (additive?) mask
    with pytest.raises(ValueError, match="attention_mask"):
        layer(x, attention_mask=torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask"):
        layer(x, attention_mask=torch.full((2, 4), 2))             # values: checked on CPU by default
    with pytest.raises(TypeError, match="attention_mask"):
        layer(x, attention_mask=[[1, 1, 1, 1]] * 2)
    cu = torch.tensor([0, 2, 4])
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(x, cu_seqlens=cu)                                    # batch size must be 1
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(x[:1], cu_seqlens=torch.tensor([0, 3, 2, 4]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(x[:1], cu_seqlens=torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="cu_seqlens"):
        layer(x[:1], cu_seqlens=torch.tensor([0.0, 4.0]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(x[:1], cu_seqlens=torch.tensor([0, 4]), attention_mask=torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="cu_seqlens"):
        layer(x[:1], cu_seqlens=torch.tensor([0, 4]), use_cache=True)
    with pytest.raises(TypeError, match="past_key_values"):
        layer(x, past_key_values={})
    with pytest.raises(TypeError, match="use_cache"):
        layer(x, use_cache=1)
    bad = StateCache()
    bad.set_layer_state(0, {"k": torch.zeros(2, 2, 1, 3)})
    with pytest.raises(TypeError, match="layer_idx"):
        layer(x, past_key_values=bad)
    _, _, cache = layer(x, use_cache=True)
    with pytest.raises(ValueError, match="batch size"):
        layer(x[:1, :1], past_key_values=cache)
    with pytest.raises(ValueError, match="attention_mask"):
        layer(x[:, :1], past_key_values=cache, attention_mask=torch.ones(2, 3, dtype=torch.long))


# ----------------------------------------------------------------------------------------------
# 3. the preallocated PaTHCache; generate
# ----------------------------------------------------------------------------------------------

class _ConcatCache:
    """The cache before preallocation (torch.cat every step), kept here as the bit-exact reference."""

    def __init__(self, B, Hq, Hk, D, Dv, dtype):
        self.n_rep = Hq // Hk
        self.keys = torch.zeros(B, Hk, 0, D, dtype=dtype)
        self.values = torch.zeros(B, Hk, 0, Dv, dtype=dtype)
        self.gate_prefix = torch.zeros(B, Hq, 0, dtype=dtype)
        self.gate_total = torch.zeros(B, Hq, dtype=dtype)

    def step(self, q_t, k_t, v_t, w_t, beta_t, g_t, scale):
        proj = torch.einsum("bhtd,bhd->bht", self.keys, w_t)
        self.keys = self.keys - beta_t[..., None, None] * proj[..., None] * w_t[:, :, None, :]
        self.keys = torch.cat([self.keys, k_t[:, :, None]], dim=2)
        self.values = torch.cat([self.values, v_t[:, :, None]], dim=2)
        if g_t is not None:
            self.gate_total = self.gate_total + g_t
        self.gate_prefix = torch.cat([self.gate_prefix, self.gate_total[:, :, None]], dim=2)
        keys = self.keys.repeat_interleave(self.n_rep, dim=1)
        values = self.values.repeat_interleave(self.n_rep, dim=1)
        logits = scale * torch.einsum("bhd,bhtd->bht", q_t, keys) + self.gate_total[..., None] - self.gate_prefix
        return torch.einsum("bht,bhtd->bhd", torch.softmax(logits, dim=-1), values)


@pytest.mark.parametrize("gate, capacity, T0", [(False, 0, 0), (True, 1, 0), (True, 16, 0), (True, 0, 7)])
def test_preallocated_cache_is_bit_equal_to_concatenation(gate, capacity, T0):
    q, k, v, w, beta, g = random_path_inputs(B=2, T=40, Hq=4, Hk=2, D=5, gate=gate, seed=capacity + T0)
    ref = _ConcatCache(2, 4, 2, 5, 5, f64)
    new = PaTHCache(2, 4, 2, 5, dtype=f64, capacity=capacity)
    for t in range(T0):
        ref.step(q[:, t], k[:, t], v[:, t], w[:, t], beta[:, t], None if g is None else g[:, t], 5 ** -0.5)
    if T0:                                   # continue from a copy of the reference's state, as prefill sets it
        new.keys, new.values, new.gate_prefix, new.gate_total = ref.keys, ref.values, ref.gate_prefix, ref.gate_total
    for t in range(T0, 40):
        args = (q[:, t], k[:, t], v[:, t], w[:, t], beta[:, t], None if g is None else g[:, t])
        o_ref = ref.step(*args, 5 ** -0.5)
        assert torch.equal(new.step(*args), o_ref)
    assert torch.equal(new.keys, ref.keys) and torch.equal(new.values, ref.values)
    assert torch.equal(new.gate_prefix, ref.gate_prefix) and new.capacity >= 40
    if T0:
        assert ref.keys.shape[2] == 40       # the assigned tensors were copied, not written into


def test_cache_gradients_through_decoding():
    """With inputs that require grad the cache updates out of place: the gradients of a prefill and two
    steps equal those of the explicit float64 reference."""
    args = random_path_inputs(B=1, T=5, Hq=2, Hk=1, D=3, gate=True, seed=5, requires_grad=True)
    q, k, v, w, beta, g = args
    o, cache = prefill(*(x[:, :3] for x in args))
    outs = [o] + [cache.step(*(x[:, t] for x in args))[:, None] for t in (3, 4)]
    torch.cat(outs, 1).sum().backward()
    ref_args = [x.detach().clone().requires_grad_() for x in args]
    path_attention(*ref_args, impl="explicit").sum().backward()
    for x, r in zip(args, ref_args):
        torch.testing.assert_close(x.grad, r.grad, atol=1e-12, rtol=0)


def test_cache_step_valid_t_and_select():
    q, k, v, w, beta, g = random_path_inputs(B=2, T=5, Hq=2, Hk=2, D=4, gate=True, seed=9)
    cache = PaTHCache(2, 2, 2, 4, dtype=f64)
    valid = torch.tensor([[True, True], [False, True], [True, True], [True, False], [True, True]])
    outs = [cache.step(q[:, t], k[:, t], v[:, t], w[:, t], beta[:, t], g[:, t], valid_t=valid[t]) for t in range(5)]
    for b in range(2):                       # each row equals its tokens alone
        keep = valid[:, b]
        ref = path_attention(*(x[b:b + 1, keep] for x in (q, k, v, w, beta, g)), impl="explicit")
        torch.testing.assert_close(torch.stack(outs, 1)[b, keep], ref[0], atol=1e-12, rtol=0)
    step0 = (q[:, 0], k[:, 0], v[:, 0], w[:, 0], beta[:, 0])
    with pytest.raises(TypeError, match="valid_t"):
        cache.step(*step0, valid_t=torch.ones(2))
    with pytest.raises(ValueError, match="valid_t"):
        cache.step(*step0, valid_t=torch.ones(3, dtype=torch.bool))
    assert len(cache) == 5
    keys = cache.keys.clone()
    cache.select(torch.tensor([1, 1, 0]))
    assert torch.equal(cache.keys, keys[[1, 1, 0]]) and cache.valid.shape == (3, 5)
    with pytest.raises(TypeError, match="index"):
        cache.select([0, 1])


@pytest.mark.parametrize("attention", ["path", "path_fox", "rope", "sba"])
def test_tinylm_prefill_then_step_equals_forward(attention):
    torch.manual_seed(4)
    lm = TinyLM(13, d_model=16, n_layers=2, n_heads=2, attention=attention).double()
    tokens = torch.randint(0, 13, (2, 9))
    logits = lm(tokens)
    last, state = lm.prefill(tokens[:, :6])
    torch.testing.assert_close(last, logits[:, 5], atol=1e-10, rtol=0)
    for t in range(6, 9):
        last, state = lm.step(tokens[:, t], state)
        torch.testing.assert_close(last, logits[:, t], atol=1e-10, rtol=0)


def test_generate_options():
    torch.manual_seed(5)
    lm = TinyLM(13, d_model=16, n_layers=1, n_heads=2).double()
    prompt = torch.randint(0, 13, (2, 4))
    out = lm.generate(prompt, 5)
    for t in range(4, 9):
        assert torch.equal(out[:, t], lm(out[:, :t])[:, -1].argmax(-1))
    # top_k=1 is greedy whatever the temperature
    assert torch.equal(lm.generate(prompt, 5, temperature=2.0, top_k=1, generator=torch.Generator().manual_seed(0)),
                       out)
    a = lm.generate(prompt, 5, temperature=0.8, top_k=4, top_p=0.9, generator=torch.Generator().manual_seed(1))
    b = lm.generate(prompt, 5, temperature=0.8, top_k=4, top_p=0.9, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and torch.equal(a[:, :4], prompt)
    for kw, exc, name in [(dict(top_k=0), ValueError, "top_k"), (dict(top_k=2.0), TypeError, "top_k"),
                          (dict(top_k=True), TypeError, "top_k"), (dict(top_p=0.0), ValueError, "top_p"),
                          (dict(top_p=1.5), ValueError, "top_p"), (dict(top_p=float("nan")), ValueError, "top_p"),
                          (dict(top_p="0.5"), TypeError, "top_p")]:
        with pytest.raises(exc, match=name):
            lm.generate(prompt, 2, temperature=1.0, **kw)
    with pytest.raises(ValueError, match="temperature > 0"):
        lm.generate(prompt, 2, top_k=3)
    with pytest.raises(ValueError, match="temperature"):
        lm.generate(prompt, 2, temperature=float("inf"))


def _kept(logits_row, top_k, top_p):
    """The allowed set by its definition, one row, in plain Python."""
    vals = logits_row.tolist()
    order = sorted(range(len(vals)), key=lambda i: -vals[i])
    keep = set(order[:top_k]) if top_k else set(order)
    if top_p is not None:
        probs = torch.softmax(torch.tensor([vals[i] if i in keep else float("-inf") for i in range(len(vals))]), 0)
        mass, nucleus = 0.0, set()
        for i in order:
            if i in keep and mass < top_p:
                nucleus.add(i)
                mass += float(probs[i])
        keep = nucleus
    return keep


@pytest.mark.parametrize("top_k, top_p", [(3, None), (None, 0.5), (5, 0.7), (None, 1.0), (1, 0.2)])
def test_sampling_filters(top_k, top_p):
    gen = torch.Generator().manual_seed(top_k or 0)
    logits = torch.randn(6, 12, generator=gen, dtype=f64) * 2
    filtered = filter_logits(logits, top_k, top_p)
    for b in range(6):
        assert {i for i in range(12) if filtered[b, i] > float("-inf")} == _kept(logits[b], top_k, top_p)
    draws = torch.stack([sample_next(logits, temperature=1.0, top_k=top_k, top_p=top_p, generator=gen)
                         for _ in range(200)], 1)
    for b in range(6):
        assert set(draws[b].tolist()) <= _kept(logits[b], top_k, top_p)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["blockwise", "triton"])
def test_no_device_sync_on_cuda(backend):
    """On a GPU (module defaults: no value checks there): a TinyLM forward and backward, a padded forward
    and a decoding step run with CUDA's sync debug mode set to raise on any synchronising call."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    if backend == "triton":
        pytest.importorskip("triton")
    torch.manual_seed(0)
    lm = TinyLM(50, d_model=128, n_layers=2, n_heads=2, attention="path_fox", backend=backend).cuda()
    tokens = torch.randint(0, 50, (2, 200), device="cuda")
    mask = torch.ones(2, 200, dtype=torch.long, device="cuda")
    mask[1, :37] = 0
    layer = lm.blocks[0].attn
    with torch.no_grad():
        _, state = lm.prefill(tokens[:, :10])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        lm(tokens).sum().backward()
        layer(torch.randn(2, 200, 128, device="cuda"), attention_mask=mask).sum().backward()
        with torch.no_grad():
            lm.step(tokens[:, 10], state)
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("fox", [False, True])
def test_packed_sequences_reach_the_kernels_packed(monkeypatch, fox):
    """With the Triton backend the packed layout goes to the kernels as it is (no padding); here a
    per-sequence float64 reference stands in for the kernel, so the test checks the layer's side: w's
    convolution stops at each boundary, and the kernel gets cu_seqlens and no value checks."""
    kernels = pytest.importorskip("path_lib.kernels")
    seen = []

    def kernel(q, k, v, w, beta, g=None, *, cu_seqlens=None, check_values=True):
        seen.append((q.shape, check_values))
        cs = cu_seqlens.tolist()
        return torch.cat([path_attention(*(t[:, a:b] for t in (q, k, v, w, beta)), None if g is None else g[:, a:b],
                                         impl="explicit") for a, b in zip(cs, cs[1:]) if b > a], 1)
    monkeypatch.setattr(kernels, "path_attention", kernel)
    layer = _layer(fox, seed=6, backend="triton")
    xs = [torch.randn(1, L, 12, dtype=f64) for L in (3, 1, 0, 6)]
    y = layer(torch.cat(xs, 1), cu_seqlens=torch.tensor([0, 3, 4, 4, 10]))
    assert seen == [((1, 10, 4, 3), False)]
    torch.testing.assert_close(y, torch.cat([_alone(layer, xx) for xx in xs if xx.shape[1]], 1), atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["nope", "rope", "alibi", "fox"])
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_softmax_baselines_through_sdpa_equal_the_reference(kind, n_kv_heads):
    """backend="sdpa" (PyTorch's fused attention, what a practitioner's baseline runs) against the
    library's explicit softmax, float64 on the CPU, grouped-query heads included; "auto" is the
    reference on the CPU."""
    from path_lib.nn.layers import make_attention
    torch.manual_seed(0)
    ref = make_attention(kind, 32, 4, n_kv_heads=n_kv_heads, backend="reference").double()
    fast = make_attention(kind, 32, 4, n_kv_heads=n_kv_heads, backend="sdpa").double()
    auto = make_attention(kind, 32, 4, n_kv_heads=n_kv_heads).double()
    fast.load_state_dict(ref.state_dict())
    auto.load_state_dict(ref.state_dict())
    x = torch.randn(2, 23, 32, dtype=torch.float64, requires_grad=True)
    y_ref, y_fast = ref(x), fast(x)
    torch.testing.assert_close(y_fast, y_ref, atol=1e-12, rtol=1e-12)
    assert torch.equal(auto(x), y_ref) and auto.backend == "auto"
    g_ref, = torch.autograd.grad(y_ref.square().sum(), x)
    g_fast, = torch.autograd.grad(y_fast.square().sum(), x)
    torch.testing.assert_close(g_fast, g_ref, atol=1e-11, rtol=1e-11)
    with pytest.raises(ValueError, match="backend must be one of"):
        make_attention(kind, 32, 4, backend="triton")
