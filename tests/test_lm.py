"""LM experiment helpers: phonebook probe, training loop, length evaluation, the runner script."""
import dataclasses
import json
import math

import pytest
import torch

from path_lib.corpus import decode, load_stdlib_corpus
from path_lib.lm import (MODELS, PRESETS, build_model, evaluate_lengths, make_phonebook, probe_retrieval,
                         ratio_table, run_experiment, train_model)

torch.set_num_threads(1)   # tiny models: extra threads only add overhead (and 2 cores are shared)

SMALL = dataclasses.replace(PRESETS["tiny"], d_model=32, n_layers=1, n_heads=2, train_len=64, batch=4,
                            steps=4, warmup=2, eval_mults=(1, 2), eval_tokens=128, probe_mults=(1, 2),
                            probe_examples=3, corpus_bytes=600_000)


@pytest.fixture(scope="module")
def corpus():
    return load_stdlib_corpus(max_bytes=SMALL.corpus_bytes)


def test_phonebook_layout_and_answer():
    g = torch.Generator().manual_seed(0)
    tok, start = make_phonebook(200, g)
    text = decode(tok)
    assert len(tok) == 200 and start == 195
    name = text.split('assert book["')[1][:4]
    number = text[-5:]
    assert f'"{name}": {number},' in text and number.isdigit()
    with pytest.raises(ValueError, match="length"):
        make_phonebook(30, g)


class _Oracle(torch.nn.Module):
    """Predicts the phonebook answer perfectly (reads it from the input): exact match must be 1."""

    def forward(self, x):
        B, T = x.shape
        logits = torch.zeros(B, T, 256)
        for b in range(B):
            text = decode(x[b])
            name = text.split('assert book["')[1][:4]
            number = text.split(f'"{name}": ')[1][:5]
            for i, ch in enumerate(number):
                logits[b, T - 5 + i, ord(ch)] = 1.0       # position T-5+i predicts answer digit i+1
            logits[b, T - 6, ord(number[0])] = 1.0
        return logits

    def eval(self):
        return self


def test_probe_scores_oracle_and_random():
    res = probe_retrieval(_Oracle(), [128, 256], 4, seed=0)
    assert res["exact"] == [1.0, 1.0]
    torch.manual_seed(0)
    m = build_model("NoPE", SMALL)
    res = probe_retrieval(m, [128], 8)
    assert res["exact"][0] <= 0.25 and 0 <= res["digit_acc"][0] <= 1


def test_training_reduces_loss_and_eval_shapes(corpus):
    cfg = dataclasses.replace(SMALL, steps=30, lr=3e-3)
    m = build_model("rand_rot_qkv", cfg)
    before = evaluate_lengths(m, corpus.val, [64], train_len=64, tokens_per_length=256)
    tr = train_model(m, corpus, cfg)
    after = evaluate_lengths(m, corpus.val, [64, 128], train_len=64, tokens_per_length=256, chunk_tokens=128)
    assert tr["steps"] == 30 and len(tr["loss_curve"]) >= 3
    assert after["loss"][0] < before["loss"][0] - 0.5          # from ~ln 256 = 5.5 nats down
    assert before["loss"][0] == pytest.approx(math.log(256), abs=0.3)
    assert after["windows"] == [4, 2] and after["ppl"][1] == pytest.approx(math.exp(after["loss"][1]))


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
