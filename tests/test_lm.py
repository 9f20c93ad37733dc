"""LM experiment helpers: passkey probe, training loop, same-bytes length evaluation, the runner script."""
import dataclasses
import json
import math

import pytest
import torch

from path_lib.corpus import decode, load_stdlib_corpus
from path_lib.lm import (MODELS, PASSKEY_CUE, PRESETS, build_model, evaluate_lengths, make_passkey,
                         passkey_batch, probe_retrieval, ratio_table, run_experiment, train_model)

torch.set_num_threads(1)   # tiny models: extra threads only add overhead (and 2 cores are shared)

SMALL = dataclasses.replace(PRESETS["tiny"], d_model=32, n_layers=1, n_heads=2, train_len=64, batch=4,
                            steps=4, warmup=2, eval_mults=(1, 2), eval_tokens=128, probe_mults=(1, 2),
                            probe_examples=3, corpus_bytes=600_000)


@pytest.fixture(scope="module")
def corpus():
    return load_stdlib_corpus(max_bytes=SMALL.corpus_bytes)


def test_passkey_layout_and_answer(corpus):
    g = torch.Generator().manual_seed(0)
    tok, depth = make_passkey(300, corpus.val, g)
    text = decode(tok)
    assert len(tok) == 300 and 0 <= depth <= 1
    key = text[-5:]
    assert key.isdigit() and text.count(PASSKEY_CUE + key) == 2 and text.endswith(PASSKEY_CUE + key)
    assert text.index(PASSKEY_CUE + key + "\n") == round(depth * 300)
    with pytest.raises(ValueError, match="length"):
        make_passkey(40, corpus.val, g)
    with pytest.raises(ValueError, match="filler"):
        make_passkey(300, corpus.val[:50], g)
    same = passkey_batch(3, 128, corpus.val, torch.Generator().manual_seed(1))
    assert torch.equal(same, passkey_batch(3, 128, corpus.val, torch.Generator().manual_seed(1)))


class _Oracle(torch.nn.Module):
    """Reads the passkey from the needle and predicts it perfectly: exact match must be 1."""

    def forward(self, x):
        B, T = x.shape
        logits = torch.zeros(B, T, 256)
        for b in range(B):
            key = decode(x[b]).split(PASSKEY_CUE)[1][:5]
            for i, ch in enumerate(key):     # output position T-5+i predicts answer digit i
                logits[b, T - 5 + i, ord(ch)] = 1.0
        return logits

    def eval(self):
        return self


def test_probe_scores_oracle_and_random(corpus):
    res = probe_retrieval(_Oracle(), [128, 256], 4, corpus.val, seed=0)
    assert res["exact"] == [1.0, 1.0] and res["digit_acc"] == [1.0, 1.0]
    torch.manual_seed(0)
    m = build_model("NoPE", SMALL)
    res = probe_retrieval(m, [128], 8, corpus.val)
    assert res["exact"][0] <= 0.25 and 0 <= res["digit_acc"][0] <= 1


def test_evaluation_scores_the_same_bytes_at_every_length(corpus):
    """A model that predicts byte t from byte t-1 only (a fixed bigram table) has a loss independent
    of the context length: on the same target bytes the ratio must be exactly 1 at every length."""
    table = torch.randn(256, 256)

    class Bigram(torch.nn.Module):
        def forward(self, x):
            return table[x]

        def eval(self):
            return self
    ev = evaluate_lengths(Bigram(), corpus.val, [64, 128, 512], train_len=64, tokens_per_length=640)
    assert ev["windows"] == [10, 10, 10] and ev["scored_bytes"] == [640, 640, 640]
    assert ev["loss"][0] == pytest.approx(ev["loss"][1], rel=1e-6) == pytest.approx(ev["loss"][2], rel=1e-6)
    with pytest.raises(ValueError, match="max"):
        evaluate_lengths(Bigram(), corpus.val[:100], [64, 128], train_len=64)


def test_training_reduces_loss_and_eval_shapes(corpus):
    cfg = dataclasses.replace(SMALL, steps=30, lr=3e-3)
    m = build_model("rand_rot_qkv", cfg)
    before = evaluate_lengths(m, corpus.val, [64], train_len=64, tokens_per_length=256)
    tr = train_model(m, corpus, cfg)
    after = evaluate_lengths(m, corpus.val, [64, 128], train_len=64, tokens_per_length=256, chunk_tokens=128)
    assert tr["steps"] == 30 and not tr["stopped_early"] and len(tr["loss_curve"]) >= 3
    assert after["loss"][0] < before["loss"][0] - 0.5          # from ~ln 256 = 5.5 nats down
    assert before["loss"][0] == pytest.approx(math.log(256), abs=0.3)
    assert after["windows"] == [4, 4] and after["ppl"][1] == pytest.approx(math.exp(after["loss"][1]))


def test_run_experiment_all_models_and_table(corpus):
    res = run_experiment(SMALL, models=list(MODELS), device="cpu", corpus=corpus, verbose=False)
    assert set(res["models"]) == set(MODELS)
    for name, m in res["models"].items():
        assert m["eval"]["lengths"] == [64, 128]
        assert m["eval"]["ratio"][0] == pytest.approx(1.0)
        assert all(math.isfinite(x) for x in m["eval"]["loss"])
    json.dumps(res)
    table = ratio_table(res)
    assert table.count("\n") == len(MODELS) + 1 and "2x (128)" in table


def test_run_lm_script_writes_provenance(tmp_path, monkeypatch):
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("run_lm", root / "experiments" / "run_lm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(mod.PRESETS, "tiny", SMALL)
    mod.main(["--preset", "tiny", "--out", str(tmp_path), "--models", "NoPE", "PaTH", "--device", "cpu"])
    data = json.loads((tmp_path / "lm_tiny.json").read_text())
    assert data["complete"] and set(data["models"]) == {"NoPE", "PaTH"}
    assert data["provenance"]["python"] and data["corpus"]["bytes_train"] > 0
    assert data["paper_b_ratios"][0]["ratio"] == 16.2


def test_run_lm_script_parallel_workers_equal_steps(tmp_path, monkeypatch):
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("run_lm", root / "experiments" / "run_lm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--preset", "tiny", "--out", str(tmp_path), "--models", "RoPE", "ALiBi", "--device", "cpu",
              "--workers", "2", "--steps", "6"])
    data = json.loads((tmp_path / "lm_tiny.json").read_text())
    assert data["complete"] and list(data["models"]) == ["RoPE", "ALiBi"] and data["workers"] == 2
    assert all(m["train"]["steps"] == 6 and not m["train"]["stopped_early"] for m in data["models"].values())
