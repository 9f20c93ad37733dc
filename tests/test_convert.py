"""Converting a RoPE TinyLM to PaTH (path_lib.experiments.convert) and the conversion experiment (path_lib.experiments.convert_lm,
scripts/experiments/run_conversion.py): the converted model against a float64 model written out by hand from the
teacher's weights, the initialisation's promise, one step of each distillation stage, bad input, and the
experiment's record, paused and resumed, whose claims are recomputed from its records."""
from __future__ import annotations

import copy
import importlib
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from path_lib.experiments.convert import (attention_mse, convert_rope_to_path, distill_attention, distill_logits, logit_kl,
                              new_parameter_names, remove_rope)
from path_lib.nn.model import TinyLM
from path_lib.training.loop import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
V = 13


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: a second thread only adds synchronisation (on a loaded machine, a lot of it)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def make_teacher(seed=0, *, n_kv_heads=None, tie=True, scale=8.0):
    """A RoPE TinyLM whose q/k weights are large enough for RoPE to matter (what training would do)."""
    torch.manual_seed(seed)
    t = TinyLM(V, 16, 2, 2, attention="rope", mlp_ratio=2.0, tie_embeddings=tie, n_kv_heads=n_kv_heads)
    with torch.no_grad():
        for b in t.blocks:
            b.attn.q_proj.weight.mul_(scale)
            b.attn.k_proj.weight.mul_(scale)
            b.attn.v_proj.weight.mul_(scale / 2)
        t.embed.weight.mul_(10)
    return t


def tokens(B=3, T=7, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------- a hand-built model

def hand_path_layer(x, attn_t, attn_s, fox):
    """One PaTH attention layer in float64, written out: the q/k/v/o weights from the TEACHER's layer, the
    new w/beta/g parameters from the student's; logits by applying H_{j+1}, ..., H_i to k_j one by one."""
    B, T, _ = x.shape
    Hq, Hk, D = attn_t.n_heads, attn_t.n_kv_heads, attn_t.head_dim
    q = (x @ attn_t.q_proj.weight.double().T).view(B, T, Hq, D)
    k = (x @ attn_t.k_proj.weight.double().T).view(B, T, Hk, D)
    v = (x @ attn_t.v_proj.weight.double().T).view(B, T, Hk, D)
    u = x @ attn_s.w_down.weight.double().T @ attn_s.w_up.weight.double().T          # [B, T, Hk*D]
    cw = attn_s.w_conv.weight.double()[:, 0, :]                                      # [Hk*D, K]
    K = cw.shape[1]
    conv = torch.zeros_like(u)
    for t in range(T):
        for tap in range(K):                                    # tap K-1 multiplies the current token
            s = t - (K - 1 - tap)
            if s >= 0:
                conv[:, t] += cw[:, tap] * u[:, s]
    w = F.silu(conv).view(B, T, Hk, D)
    w = w / w.norm(dim=-1, keepdim=True).clamp(min=1e-6)
    beta = 2 * torch.sigmoid(x @ attn_s.beta_proj.weight.double().T + attn_s.beta_proj.bias.double())
    g = (F.logsigmoid(x @ attn_s.g_proj.weight.double().T + attn_s.g_proj.bias.double()) if fox
         else torch.zeros(B, T, Hq, dtype=x.dtype))
    G = g.cumsum(1)
    o = torch.zeros(B, T, Hq, D, dtype=x.dtype)
    for b in range(B):
        for h in range(Hq):
            hk = h // (Hq // Hk)
            for i in range(T):
                logits = []
                for j in range(i + 1):
                    kv = k[b, j, hk].clone()
                    for t in range(j + 1, i + 1):
                        kv = kv - beta[b, t, hk] * (w[b, t, hk] @ kv) * w[b, t, hk]
                    logits.append(q[b, i, h] @ kv / math.sqrt(D) + G[b, i, h] - G[b, j, h])
                p = torch.softmax(torch.stack(logits), 0)
                o[b, i, h] = (p[:, None] * v[b, :i + 1, hk]).sum(0)
    return o.reshape(B, T, Hq * D) @ attn_t.o_proj.weight.double().T


def hand_forward(tok, teacher, student, fox):
    ln = lambda x, m: F.layer_norm(x, x.shape[-1:], m.weight.double(), m.bias.double(), m.eps)   # noqa: E731
    x = teacher.embed.weight.double()[tok]
    for bt, bs in zip(teacher.blocks, student.blocks):
        x = x + hand_path_layer(ln(x, bt.norm1), bt.attn, bs.attn, fox)
        h = ln(x, bt.norm2) @ bt.mlp[0].weight.double().T + bt.mlp[0].bias.double()
        x = x + F.gelu(h) @ bt.mlp[2].weight.double().T + bt.mlp[2].bias.double()
    return ln(x, teacher.norm) @ teacher.head.weight.double().T


@pytest.mark.parametrize("attention,init,kv,tie", [("path", "nope", None, True), ("path_fox", "fresh", 1, False),
                                                   ("path_fox", "nope", None, True)])
def test_converted_model_equals_a_model_written_out_from_the_teachers_weights(attention, init, kv, tie):
    teacher = make_teacher(n_kv_heads=kv, tie=tie)
    student = convert_rope_to_path(teacher, attention=attention, init=init, beta_init=0.6, forget_init=0.8,
                                   backend="reference", seed=3)
    tok = tokens()
    want = hand_forward(tok, teacher, student, attention == "path_fox")
    got = student.double()(tok)
    assert (got - want).abs().max() < 1e-10 * want.abs().max()
    # the shared weights are copies (training the student leaves the teacher alone), the new ones are new
    shared = [n for n in teacher.state_dict()]
    assert all(student.state_dict()[n].data_ptr() != teacher.state_dict()[n].data_ptr() for n in shared)
    assert set(student.state_dict()) - set(shared) == set(new_parameter_names(student))


def test_conversion_is_seeded_and_leaves_the_global_rng_alone():
    teacher = make_teacher()
    before = torch.get_rng_state()
    a = convert_rope_to_path(teacher, seed=5)
    assert torch.equal(torch.get_rng_state(), before)
    b, c = convert_rope_to_path(teacher, seed=5), convert_rope_to_path(teacher, seed=6)
    n = "blocks.0.attn.w_down.weight"
    assert torch.equal(a.state_dict()[n], b.state_dict()[n]) and not torch.equal(a.state_dict()[n], c.state_dict()[n])


# ---------------------------------------------------------------------------------------------- the init's promise

def test_nope_init_sets_every_beta_and_gate_and_bounds_each_logit():
    teacher = make_teacher()
    beta0, f0 = 0.3, 0.95
    s = convert_rope_to_path(teacher, attention="path_fox", beta_init=beta0, forget_init=f0, backend="reference").double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    for b in s.blocks:
        w, beta, g = b.attn.path_params(x)
        assert torch.allclose(beta, torch.full_like(beta, beta0), atol=1e-12)
        assert torch.allclose(g, torch.full_like(g, math.log(f0)), atol=1e-12)
    # first layer: PaTH's logits (gate left out) stay within scale |q| |k| (i - j) beta0 of NoPE's
    a = s.blocks[0].attn
    q, k, _ = a.qkv(x)
    w, beta, _ = a.path_params(x)
    D, worst = a.head_dim, 0.0
    for i in range(9):
        for j in range(i + 1):
            kv = k[:, j].clone()
            for t in range(j + 1, i + 1):
                kv = kv - beta[:, t, :, None] * (w[:, t] * kv).sum(-1, keepdim=True) * w[:, t]
            diff = ((q[:, i] * (kv - k[:, j])).sum(-1) / math.sqrt(D)).abs()
            bound = q[:, i].norm(dim=-1) * k[:, j].norm(dim=-1) / math.sqrt(D) * (i - j) * beta0
            assert (diff <= bound + 1e-12).all()
            worst = max(worst, float((diff / bound.clamp(min=1e-30)).max().detach()) if i > j else 0.0)
    assert worst > 0.01          # the transforms act: the bound is not met by logits that never move


@pytest.mark.parametrize("attention", ["path", "path_fox"])
def test_nope_init_approaches_the_teacher_without_rope_linearly(attention):
    teacher = make_teacher()
    tok = tokens(4, 12)
    with torch.no_grad():
        check_first_order(teacher, tok, attention)


def check_first_order(teacher, tok, attention):
    nope = remove_rope(teacher)(tok)
    assert (teacher(tok) - nope).abs().max() > 0.05          # removing RoPE changes this teacher
    diffs = []
    for eps in (1e-3, 1e-4):
        s = convert_rope_to_path(teacher, attention=attention, beta_init=eps, forget_init=1 - eps, backend="reference")
        diffs.append(float((s(tok) - nope).abs().max()))
    assert diffs[0] < 0.02 * float((teacher(tok) - nope).abs().max())
    assert 6 < diffs[0] / diffs[1] < 14                          # first order in beta_init (and 1 - forget_init)
    fresh = convert_rope_to_path(teacher, attention=attention, init="fresh", backend="reference")
    assert float((fresh(tok) - nope).abs().max()) > 10 * diffs[0]


# ---------------------------------------------------------------------------------------------- the two stages

def manual_stage_losses(student, teacher, tok):
    """Stage 1 and stage 2 losses written out: the teacher's residual stream by hand, each student layer
    on the teacher's layer input; KL with F.kl_div."""
    with torch.no_grad():
        x, ins, outs = teacher.embed(tok), [], []
        for b in teacher.blocks:
            h = b.norm1(x)
            a = b.attn(h)
            ins.append(h)
            outs.append(a)
            x = x + a
            x = x + b.mlp(b.norm2(x))
        t_logits = teacher.head(teacher.norm(x))
        mse = sum(F.mse_loss(bs.attn(h), o) for bs, h, o in zip(student.blocks, ins, outs)) / len(ins)
        s_logp = F.log_softmax(student(tok), -1).flatten(0, 1)
        kl = F.kl_div(s_logp, F.log_softmax(t_logits, -1).flatten(0, 1), log_target=True, reduction="batchmean")
    return float(mse), float(kl)


def test_one_step_of_each_stage_lowers_its_loss_on_a_fixed_batch():
    teacher = make_teacher()
    ref = copy.deepcopy(teacher.state_dict())
    student = convert_rope_to_path(teacher, backend="blockwise")
    tok = tokens(4, 16)
    mse0, kl0 = manual_stage_losses(student, teacher, tok)
    assert mse0 == pytest.approx(attention_mse(student, teacher, tok), rel=1e-5)
    assert kl0 == pytest.approx(logit_kl(student, teacher, tok), rel=1e-5)
    cfg = TrainConfig(steps=1, lr=3e-4, warmup=0)
    mlp_before = student.blocks[0].mlp[0].weight.clone()
    r1 = distill_attention(student, teacher, [tok], config=cfg, device="cpu", log_every=1)
    assert r1["history"][0]["loss"] == pytest.approx(mse0, rel=1e-5)       # the loop trained on this loss
    mse1 = attention_mse(student, teacher, tok)
    assert mse1 < mse0
    assert torch.equal(student.blocks[0].mlp[0].weight, mlp_before)           # stage 1 trains attention only
    assert all(p.requires_grad for p in student.parameters())                  # and unfreezes afterwards
    kl1 = logit_kl(student, teacher, tok)
    r2 = distill_logits(student, teacher, [tok], config=cfg, device="cpu", log_every=1)
    assert r2["history"][0]["loss"] == pytest.approx(kl1, rel=1e-4)
    assert logit_kl(student, teacher, tok) < kl1
    assert not torch.equal(student.blocks[0].mlp[0].weight, mlp_before)       # stage 2 trains everything
    assert all(torch.equal(v, teacher.state_dict()[k]) for k, v in ref.items())   # the teacher never changes


def test_stage_mask_and_trainable_new():
    teacher = make_teacher()
    s = convert_rope_to_path(teacher, backend="blockwise")
    tok = tokens(2, 10)
    tg = torch.full_like(tok, -100)
    tg[:, -3:] = 0
    with torch.no_grad():
        lp_s, lp_t = F.log_softmax(s(tok), -1)[:, -3:], F.log_softmax(teacher(tok), -1)[:, -3:]
        want = float((lp_t.exp() * (lp_t - lp_s)).sum(-1).mean())
    assert logit_kl(s, teacher, tok, tg) == pytest.approx(want, rel=1e-5)
    q_before = s.blocks[1].attn.q_proj.weight.clone()
    distill_attention(s, teacher, [(tok, tg)], config=TrainConfig(steps=2, lr=1e-3, warmup=0), trainable="new",
                      device="cpu")
    assert torch.equal(s.blocks[1].attn.q_proj.weight, q_before)


def test_convert_and_distill_is_the_recipe_in_one_call():
    from path_lib.experiments.convert import convert_and_distill
    teacher = make_teacher()
    tok = tokens(4, 16)
    cfg1, cfg2 = TrainConfig(steps=3, lr=1e-3, warmup=0), TrainConfig(steps=2, lr=5e-4, warmup=0)
    start = convert_rope_to_path(teacher, attention="path_fox", backend="blockwise", seed=3)
    mse0, kl0 = attention_mse(start, teacher, tok), logit_kl(start, teacher, tok)
    student, stages = convert_and_distill(teacher, [tok], stage1=cfg1, stage2=cfg2, attention="path_fox",
                                          backend="blockwise", seed=3, device="cpu")
    assert stages["stage1"]["steps_done"] == 3 and stages["stage2"]["steps_done"] == 2
    assert stages["stage1"]["stage"] == "attention" and stages["stage2"]["stage"] == "logits"
    assert student.blocks[0].attn.g_proj is not None                            # PaTH-FoX
    assert logit_kl(student, teacher, tok) < kl0 and attention_mse(student, teacher, tok) < mse0
    with pytest.raises(TypeError, match="stage2 must be"):
        convert_and_distill(teacher, [tok], stage1=cfg1, stage2={"steps": 2})
    with pytest.raises(ValueError, match="teacher"):
        convert_and_distill(start, [tok], stage1=cfg1, stage2=cfg2)


# ---------------------------------------------------------------------------------------------- bad input

def test_bad_input_gets_named_errors():
    teacher = make_teacher()
    with pytest.raises(TypeError, match="teacher"):
        convert_rope_to_path(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="RoPE"):
        convert_rope_to_path(TinyLM(V, 16, 2, 2, attention="path"))
    for kw, err, name in [(dict(attention="rope"), ValueError, "attention"), (dict(init="zero"), ValueError, "init"),
                          (dict(beta_init=2.0), ValueError, "beta_init"), (dict(beta_init=0), ValueError, "beta_init"),
                          (dict(beta_init="0.1"), TypeError, "beta_init"), (dict(forget_init=1.0), ValueError, "forget_init"),
                          (dict(seed=1.5), TypeError, "seed"), (dict(n_kv_heads=1), ValueError, "n_kv_heads"),
                          (dict(beta_max=0.05), ValueError, "beta_max"), (dict(backend="gpu"), ValueError, "backend")]:
        with pytest.raises(err, match=name):
            convert_rope_to_path(teacher, **kw)
    student = convert_rope_to_path(teacher)
    cfg = TrainConfig(steps=1, warmup=0)
    tok = tokens()
    wide = TinyLM(V, 32, 2, 2, attention="path")
    other_vocab = TinyLM(V + 1, 16, 2, 2, attention="path")
    with pytest.raises(ValueError, match="d_model 32 vs 16"):
        distill_attention(wide, teacher, [tok], config=cfg)
    with pytest.raises(ValueError, match="vocab_size"):
        distill_logits(other_vocab, teacher, [tok], config=cfg)
    with pytest.raises(ValueError, match="different models"):
        distill_logits(teacher, teacher, [tok], config=cfg)
    with pytest.raises(TypeError, match="student"):
        distill_attention("model", teacher, [tok], config=cfg)
    with pytest.raises(TypeError, match="config"):
        distill_logits(student, teacher, [tok], config={"steps": 1})
    with pytest.raises(TypeError, match="batches"):
        distill_logits(student, teacher, 5, config=cfg)
    with pytest.raises(TypeError, match="batches"):
        distill_logits(student, teacher, tok, config=cfg)
    with pytest.raises(ValueError, match="batches must not be empty"):
        distill_logits(student, teacher, [], config=cfg)
    with pytest.raises(ValueError, match=r"batches\[0\]"):
        distill_logits(student, teacher, [(tok, tok[:, :-1])], config=cfg)
    with pytest.raises(ValueError, match="trainable"):
        distill_attention(student, teacher, [tok], config=cfg, trainable="mlp")
    with pytest.raises(ValueError, match="trainable='new'"):
        distill_attention(TinyLM(V, 16, 2, 2, attention="nope"), teacher, [tok], config=cfg, trainable="new")
    with pytest.raises(ValueError, match="inputs"):
        logit_kl(student, teacher, tok.float())
    with pytest.raises(TypeError, match="inputs"):
        attention_mse(student, teacher, [[1, 2]])
    with pytest.raises(ValueError, match="targets"):
        logit_kl(student, teacher, tok, tok[:, :2])
    with pytest.raises(ValueError, match="RoPE"):
        remove_rope(student)
    from path_lib.training.loop import train
    with pytest.raises(TypeError, match="loss_fn"):
        train(student, lambda s, g: (tok, tok), cfg, loss_fn="kl", progress=False)


# ---------------------------------------------------------------------------------------------- the experiment

SMALL = ["--teacher-steps", "6", "--stage1-steps", "3", "--stage2-steps", "3", "--probe-steps", "2",
         "--probe-eval-seqs", "16", "--eval-mults", "1,2", "--eval-tokens", "64", "--corpus-bytes", "1000000",
         "--batch", "4", "--train-len", "16", "--d-model", "16", "--seeds", "0,1,2", "--backend", "blockwise"]


@pytest.fixture()
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts" / "experiments"))
    return importlib.import_module("run_conversion")


def test_tiny_record_pauses_resumes_and_its_claims_are_recomputed(script, tmp_path):
    from path_lib.experiments.convert_lm import conversion_claims
    from path_lib.records import RECORDS, optional_record
    from path_lib.training.loop import check_equal_training

    assert RECORDS["conversion"] == "results/lm/conversion.json"
    if not (ROOT / RECORDS["conversion"]).exists():            # before the GPU run: one sentence, no error
        assert optional_record("conversion") is None

    whole, split = tmp_path / "whole.json", tmp_path / "split.json"
    script.main(["--preset", "tiny", "--out", str(whole)] + SMALL)
    one_seed = SMALL + ["--seeds", "1"]                       # the later --seeds wins
    script.main(["--preset", "tiny", "--out", str(split), "--state", str(tmp_path / "st"),
                 "--stop-after-steps", "2"] + one_seed)
    partial = json.loads(split.read_text())
    assert not partial["complete"] and partial["claims"] == {} and not partial["runs"][0]["complete"]
    script.main(["--preset", "tiny", "--out", str(split), "--state", str(tmp_path / "st")] + one_seed)
    a, b = json.loads(whole.read_text()), json.loads(split.read_text())
    assert a["complete"] and b["complete"] and a["equal_training"]["ok"]
    assert a["provenance"]["command"].startswith("python scripts/experiments/run_conversion.py --preset tiny")
    assert a["provenance"]["commit"] and a["provenance"]["torch"]
    # resumed phase by phase = uninterrupted, bit for bit on the CPU
    assert [r["metrics"] for r in a["runs"] if r["seed"] == 1] == [r["metrics"] for r in b["runs"]]
    # what the chapter does with the record: recompute the claims from the per-run records alone
    assert conversion_claims(a["records"]) == a["claims"] and len(a["claims"]) >= 10
    assert check_equal_training([r for r in a["records"] if r["model"] != "RoPE teacher"]) is None
    teacher = [r for r in a["records"] if r["model"] == "RoPE teacher"]
    conv = [r for r in a["records"] if r["model"] == "PaTH converted"]
    assert {r["steps_done"] for r in teacher} == {6} and {r["steps_done"] for r in conv} == {12}
    assert all(0 <= r["metrics"]["ff_error_sparse"] <= 1 and r["metrics"]["ratio_1x"] == 1 for r in conv)
    # a record with one run stopped short gives no claims: the comparison refuses it
    short = [dict(r, complete=False) if i == 3 else r for i, r in enumerate(a["records"])]
    with pytest.raises(ValueError, match="incomplete"):
        conversion_claims(short)
