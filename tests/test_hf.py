"""The Hugging Face model (path_lib.nn.hf) with real transformers classes, and the converter from fla's PaTH
layer weights (checked against fla's layer written out from its definition, in float64)."""
import json

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

from path_lib.impl import path_attention  # noqa: E402
from path_lib.nn.hf import (PaTHConfig, PaTHDynamicCache, PaTHForCausalLM, from_fla_state_dict,  # noqa: E402
                         path_attention_from_fla)

f64 = torch.float64
V, PAD = 19, 0


def _model(fox=True, tie=True, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = PaTHConfig(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     use_forget_gate=fox, w_rank=4, block_size=4, tie_word_embeddings=tie, pad_token_id=PAD,
                     eos_token_id=None, bos_token_id=None, **kw)
    return PaTHForCausalLM(cfg).double().eval()


def _ids(B, T, seed=1):
    return torch.randint(1, V, (B, T), generator=torch.Generator().manual_seed(seed))


def _assert_same_model(loaded, m, ids):
    """Bit-equal weights, and float64 logits equal to round-off: the same weights at other addresses may
    take other vectorised paths through the CPU's matrix products (differences of about 1e-16)."""
    want = m.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, want[name]), name
    with torch.no_grad():
        assert (loaded(ids).logits - m(ids).logits).abs().max().item() < 1e-12


@pytest.mark.parametrize("tie", [True, False])
def test_save_load_round_trip(tmp_path, tie):
    m = _model(tie=tie)
    ids = _ids(2, 7)
    m.save_pretrained(tmp_path)
    loaded = PaTHForCausalLM.from_pretrained(tmp_path, dtype=f64).eval()
    fields = lambda c: {k: v for k, v in c.to_dict().items() if k != "_name_or_path"}   # noqa: E731
    assert fields(loaded.config) == fields(m.config)
    assert (loaded.model.head.weight is loaded.model.embed.weight) == tie
    _assert_same_model(loaded, m, ids)


def test_auto_classes_load_the_saved_model(tmp_path):
    """model_type "path" is registered: AutoConfig / AutoModelForCausalLM rebuild the saved model."""
    from transformers import AutoConfig, AutoModelForCausalLM
    m = _model()
    m.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "path"
    back = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=f64).eval()
    assert type(back) is PaTHForCausalLM
    ids = _ids(2, 7)
    _assert_same_model(back, m, ids)


def test_generate_stops_at_eos():
    """The first greedy token, declared EOS, ends every sequence after one new token (the rest padded)."""
    m = _model()
    ids = _ids(2, 5)
    free = m.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=PAD)
    first = free[:, 5]
    eos = int(first[0])
    out = m.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=PAD, eos_token_id=eos)
    stopped = first == eos
    assert bool(stopped[0]) and (out[stopped, 6:] == PAD).all()
    assert torch.equal(out[~stopped], free[~stopped][:, :out.shape[1]])


def test_greedy_generate_equals_a_manual_greedy_loop():
    m = _model()
    ids = _ids(2, 5)
    out = m.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=PAD)
    seq = ids
    with torch.no_grad():
        for _ in range(6):                           # the whole sequence again each step, no cache
            nxt = m(seq, use_cache=False).logits[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], 1)
    assert torch.equal(out, seq)


def test_generate_with_cache_equals_without(monkeypatch):
    m = _model()
    ids = _ids(3, 6)
    lengths = []
    forward = PaTHForCausalLM.forward

    def spy(self, input_ids=None, **kw):
        lengths.append(input_ids.shape[1])
        return forward(self, input_ids, **kw)
    monkeypatch.setattr(PaTHForCausalLM, "forward", spy)
    cached = m.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=PAD)
    assert lengths == [6, 1, 1, 1, 1]                # a prefill, then one token per step through the cache
    lengths.clear()
    plain = m.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=PAD, use_cache=False)
    assert lengths == [6, 7, 8, 9, 10]
    assert torch.equal(cached, plain)
    # beam search reorders the cache between steps
    beams = [m.generate(ids[:2], max_new_tokens=4, num_beams=3, do_sample=False, pad_token_id=PAD, use_cache=c)
             for c in (True, False)]
    assert torch.equal(beams[0], beams[1])


def test_left_padded_batch_equals_sequences_alone():
    m = _model(seed=2)
    prompts = [_ids(1, L, seed=L)[0] for L in (6, 3, 1)]
    T = max(len(p) for p in prompts)
    ids = torch.full((3, T), PAD)
    mask = torch.zeros(3, T, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, T - len(p):], mask[b, T - len(p):] = p, 1
    out = m.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=PAD)
    with torch.no_grad():
        logits = m(ids, attention_mask=mask).logits
    for b, p in enumerate(prompts):
        alone = m.generate(p[None], max_new_tokens=5, do_sample=False, pad_token_id=PAD)
        assert torch.equal(out[b, T:], alone[0, len(p):])
        with torch.no_grad():
            torch.testing.assert_close(logits[b, T - len(p):], m(p[None]).logits[0], atol=1e-12, rtol=0)


def test_labels_give_the_shifted_cross_entropy():
    m = _model(fox=False)
    ids = _ids(2, 8)
    labels = ids.clone()
    labels[0, :3] = -100                             # ignored positions
    out = m(ids, labels=labels)
    ref = F.cross_entropy(out.logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, ref, atol=1e-12, rtol=0)
    out.loss.backward()
    assert m.model.embed.weight.grad is not None
    assert isinstance(m(ids[:, :2], use_cache=True).cache, PaTHDynamicCache)


def test_model_bad_input():
    m = _model()
    ids = _ids(1, 4)
    with pytest.raises(ValueError, match="input_ids must lie"):
        m(torch.tensor([[1, V]]))
    with pytest.raises(ValueError, match="labels"):
        m(ids, labels=ids[:, :3])
    with pytest.raises(ValueError, match="labels"):
        m(ids, labels=torch.full_like(ids, V))
    with pytest.raises(TypeError, match="cache"):
        m(ids, cache=[])
    with pytest.raises(TypeError, match="unexpected"):
        m(ids, head_mask=None)
    with pytest.raises(ValueError, match="output_attentions"):
        m(ids, output_attentions=True)
    for kw, exc in [(dict(hidden_size=0), ValueError), (dict(num_attention_heads=2.0), TypeError),
                    (dict(backend="cuda"), ValueError), (dict(mlp_ratio=-1.0), ValueError)]:
        name = next(iter(kw))
        with pytest.raises(exc, match=name):
            PaTHConfig(**kw)


# ----------------------------------------------------------------------------------------------
# fla's layer
# ----------------------------------------------------------------------------------------------

def _fla_reference(sd, x, n_heads, n_kv):
    """fla's ``PaTHAttention.forward`` (no mask, no cache) written out from its definition, in float64:
    q, k, v, o linear; w = l2norm(SiLU(causal depthwise conv(w_proj(x)))) with l2norm(y) = y / sqrt(|y|^2 + 1e-6);
    beta = 2 sigmoid(bt_proj(x)); g = logsigmoid(g_proj(x)); PaTH attention with scale D^-1/2."""
    W = {k: t.double() for k, t in sd.items()}
    B, T, _ = x.shape
    u = x @ W["w_proj.weight"].T if "w_proj.weight" in W else x @ W["w_proj.0.weight"].T @ W["w_proj.1.weight"].T
    filt = W["w_conv1d.weight"][:, 0]                          # [kv_dim, K]; tap K-1 is the current token
    K = filt.shape[1]
    conv = torch.zeros_like(u)
    for t in range(T):
        for i in range(K):
            s = t - (K - 1) + i
            if s >= 0:
                conv[:, t] += filt[:, i] * u[:, s]
    D = W["k_proj.weight"].shape[0] // n_kv
    y = F.silu(conv).view(B, T, n_kv, D)
    w = y / torch.sqrt((y * y).sum(-1, keepdim=True) + 1e-6)
    q = (x @ W["q_proj.weight"].T).view(B, T, n_heads, D)
    k = (x @ W["k_proj.weight"].T).view(B, T, n_kv, D)
    v = (x @ W["v_proj.weight"].T).view(B, T, n_kv, D)
    beta = 2 * torch.sigmoid(x @ W["bt_proj.weight"].T + W["bt_proj.bias"])
    g = F.logsigmoid(x @ W["g_proj.weight"].T + W["g_proj.bias"]) if "g_proj.weight" in W else None
    o = path_attention(q, k, v, w, beta, g, impl="explicit", check_values=False)
    return o.reshape(B, T, -1) @ W["o_proj.weight"].T


def _fla_shaped(d_model=12, n_heads=4, n_kv=2, rank=5, K=3, gate=True, low_rank=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: 0.4 * torch.randn(*s, generator=gen)       # noqa: E731
    D = d_model // n_heads
    kv = n_kv * D
    sd = {"q_proj.weight": r(d_model, d_model), "k_proj.weight": r(kv, d_model), "v_proj.weight": r(kv, d_model),
          "w_conv1d.weight": r(kv, 1, K), "bt_proj.weight": r(n_kv, d_model), "bt_proj.bias": r(n_kv),
          "o_proj.weight": r(d_model, d_model)}
    if low_rank:
        sd["w_proj.0.weight"], sd["w_proj.1.weight"] = r(rank, d_model), r(kv, rank)
    else:
        sd["w_proj.weight"] = r(kv, d_model)
    if gate:
        sd["g_proj.weight"], sd["g_proj.bias"] = r(n_heads, d_model), r(n_heads)
    return sd


@pytest.mark.parametrize("gate, low_rank", [(True, True), (False, True), (True, False)])
def test_fla_weights_give_fla_outputs(gate, low_rank):
    sd = _fla_shaped(gate=gate, low_rank=low_rank, seed=int(gate) + 2 * int(low_rank))
    prefixed = {f"model.layers.3.attn.{k}": t for k, t in sd.items()} | {"model.norm.weight": torch.ones(12)}
    converted = from_fla_state_dict(prefixed, prefix="model.layers.3.attn.")
    assert set(converted) >= {"w_down.weight", "w_up.weight", "w_conv.weight", "beta_proj.weight", "beta_proj.bias"}
    assert torch.equal(converted["w_conv.weight"], sd["w_conv1d.weight"])
    layer = path_attention_from_fla({k: t.double() for k, t in sd.items()}, backend="blockwise", block_size=2)
    assert (layer.n_heads, layer.n_kv_heads, layer.head_dim, layer.conv_size) == (4, 2, 3, 3)
    x = torch.randn(2, 7, 12, dtype=f64)
    torch.testing.assert_close(layer(x), _fla_reference(sd, x, 4, 2), atol=1e-12, rtol=0)


def test_fla_converter_refuses_what_it_cannot_map():
    sd = _fla_shaped()
    for change, match in [(dict(drop="w_conv1d.weight"), "use_w_shortconv"),
                          (dict(add=("w_conv1d.bias", torch.zeros(6))), "conv_bias"),
                          (dict(add=("maybe_q_norm.weight", torch.ones(3))), "use_qk_norm"),
                          (dict(drop="bt_proj.bias"), "bt_proj.bias"),
                          (dict(drop="w_proj.1.weight"), "w_proj"),
                          (dict(drop="g_proj.bias"), "g_proj"),
                          (dict(add=("extra.weight", torch.ones(1))), "extra.weight")]:
        bad = dict(sd)
        if "drop" in change:
            del bad[change["drop"]]
        else:
            bad[change["add"][0]] = change["add"][1]
        with pytest.raises(ValueError, match=match):
            from_fla_state_dict(bad)
    with pytest.raises(TypeError, match="sd"):
        from_fla_state_dict([("q_proj.weight", torch.ones(1))])
    with pytest.raises(ValueError, match="prefix"):
        from_fla_state_dict(sd, prefix="model.")
    with pytest.raises(TypeError, match="use_forget_gate"):
        path_attention_from_fla(sd, use_forget_gate=False)


def test_fla_real_layer_layout():
    """fla's own module (imports on CPU; its kernels need a GPU): its state dict converts, loads strictly,
    and the converted layer computes fla's layer as written out above."""
    fla_layers = pytest.importorskip("fla.layers.path_attn")
    for kw in (dict(use_forget_gate=True, num_kv_heads=2), dict(use_low_rank_w=False)):
        torch.manual_seed(0)
        fla = fla_layers.PaTHAttention(hidden_size=32, num_heads=4, **kw)
        sd = {k: t.detach() for k, t in fla.state_dict().items()}
        layer = path_attention_from_fla({k: t.double() for k, t in sd.items()}, backend="blockwise", block_size=4)
        x = torch.randn(1, 6, 32, dtype=f64)
        torch.testing.assert_close(layer(x), _fla_reference(sd, x, 4, kw.get("num_kv_heads", 4)), atol=1e-12, rtol=0)


@pytest.mark.gpu
def test_fla_forward_on_gpu_equals_converted_layer():
    """On a GPU: fla's real forward (its Triton kernels) against the converted layer (float32)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    fla_layers = pytest.importorskip("fla.layers.path_attn")
    torch.manual_seed(0)
    fla = fla_layers.PaTHAttention(hidden_size=256, num_heads=4, num_kv_heads=2, use_forget_gate=True).cuda()
    layer = path_attention_from_fla(fla.state_dict(), backend="blockwise").cuda()
    x = torch.randn(2, 200, 256, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(layer(x), fla(x)[0], atol=2e-3, rtol=2e-3)


# -- the edges of issue "Bad input at the edges" ------------------------------------------------------

def test_inputs_embeds_and_labels_are_checked():
    m = _model()
    ids = _ids(2, 5)
    embeds = m.model.embed(ids).detach()
    torch.testing.assert_close(m(inputs_embeds=embeds).logits, m(ids).logits, rtol=0, atol=1e-12)
    for bad, exc in ((embeds[0], ValueError), (embeds[..., :8], ValueError), (embeds.float(), TypeError),
                     (embeds.tolist(), TypeError), (embeds * float("nan"), ValueError)):
        with pytest.raises(exc, match="inputs_embeds"):
            m(inputs_embeds=bad)
    with pytest.raises(ValueError, match="labels hold no target"):
        m(ids, labels=torch.full_like(ids, -100))
    with pytest.raises(ValueError, match="labels of shape"):
        m(ids[:, :1], labels=ids[:, :1])


@pytest.mark.parametrize("field,value", [("num_hidden_layers", 3), ("use_forget_gate", False),
                                         ("tie_word_embeddings", False), ("hidden_size", 32), ("conv_size", 4)])
def test_from_pretrained_names_a_config_field_that_does_not_fit_the_weights(tmp_path, field, value):
    _model().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=field):
        PaTHForCausalLM.from_pretrained(tmp_path, **{field: value})
    config = (tmp_path / "config.json").read_text()                   # the same change made in the file
    (tmp_path / "config.json").write_text(json.dumps({**json.loads(config), field: value}))
    with pytest.raises(ValueError, match=field):
        PaTHForCausalLM.from_pretrained(tmp_path)


def test_the_misfit_field_does_not_depend_on_the_order_of_the_weights():
    """A third block's weights (its forget gate's among them) name num_hidden_layers, whichever comes first
    (transformers reports them as a set, whose order changes from run to run); a gate alone in every block
    names use_forget_gate."""
    from path_lib.nn.hf import _misfit
    config = PaTHConfig(num_hidden_layers=3)                         # loaded over a 2-block checkpoint
    weights = [f"model.blocks.{b}.attn.{name}.weight" for b in range(3) for name in ("q_proj", "g_proj")]
    third = [w for w in weights if ".blocks.2." in w]
    for order in (third, third[::-1]):
        assert _misfit(config, dict.fromkeys(order), set(), weights)[0] == "num_hidden_layers"
    gates = [w for w in weights if ".g_proj." in w]
    for order in (gates, gates[::-1]):
        assert _misfit(config, dict.fromkeys(order), set(), weights)[:2] == ("use_forget_gate", "missing")


def test_from_pretrained_names_a_broken_config_file_and_dtype(tmp_path):
    _model().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="dtype"):
        PaTHForCausalLM.from_pretrained(tmp_path, dtype="float99")
    text = (tmp_path / "config.json").read_text()
    for broken, exc in ((text[:30], ValueError), ("[]", TypeError)):
        (tmp_path / "config.json").write_text(broken)
        with pytest.raises(exc, match="pretrained_model_name_or_path=.*config.json"):
            PaTHForCausalLM.from_pretrained(tmp_path)


def test_dynamic_cache_checks_layer_idx_and_state():
    cache = PaTHDynamicCache()
    with pytest.raises(ValueError, match="layer_idx"):
        cache.get_layer_state(-1)
    with pytest.raises(TypeError, match="state"):
        cache.set_layer_state(0, [])


def test_fla_weights_of_two_dtypes_are_refused():
    layer = path_attention_from_fla(_fla_state_dict_example())
    assert layer.q_proj.weight.dtype == torch.float32
    sd = _fla_state_dict_example()
    sd["bt_proj.weight"] = sd["bt_proj.weight"].double()
    with pytest.raises(TypeError, match="sd holds weights of several dtypes"):
        path_attention_from_fla(sd)


def _fla_state_dict_example(d=8, H=2, Dh=4, r=3):
    g = torch.Generator().manual_seed(0)
    shapes = {"q_proj.weight": (H * Dh, d), "k_proj.weight": (H * Dh, d), "v_proj.weight": (H * Dh, d),
              "o_proj.weight": (d, H * Dh), "w_proj.0.weight": (r, d), "w_proj.1.weight": (H * Dh, r),
              "w_conv1d.weight": (H * Dh, 1, 3), "bt_proj.weight": (H, d), "bt_proj.bias": (H,)}
    return {k: torch.randn(*s, generator=g) for k, s in shapes.items()}
