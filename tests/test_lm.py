"""LM experiment helpers: passkey probe, training loop, same-bytes length evaluation, the runner script."""
import dataclasses
import json
import math

import pytest
import torch

from path_lib.training.corpus import decode, load_stdlib_corpus
from path_lib.experiments.lm import (COMPARISON_MODELS, MODELS, PASSKEY_CUE, PRESETS, build_model, evaluate_lengths,
                                     make_passkey, passkey_batch, probe_retrieval, ratio_table, run_experiment, run_model,
                                     token_sigma_min, train_model)
from path_lib.training.loop import UnequalTrainingError, comparison_table

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
    m = build_model("TokRot-QKV", cfg)
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
    spec = importlib.util.spec_from_file_location("run_lm", root / "scripts" / "experiments" / "run_lm.py")
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
    spec = importlib.util.spec_from_file_location("run_lm", root / "scripts" / "experiments" / "run_lm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--preset", "tiny", "--out", str(tmp_path), "--models", "RoPE", "ALiBi", "--device", "cpu",
              "--workers", "2", "--steps", "6"])
    data = json.loads((tmp_path / "lm_tiny.json").read_text())
    assert data["complete"] and list(data["models"]) == ["RoPE", "ALiBi"] and data["workers"] == 2
    assert all(m["train"]["steps"] == 6 and not m["train"]["stopped_early"] for m in data["models"].values())


def test_model_names_legacy_aliases_and_token_scales():
    assert COMPARISON_MODELS == ["NoPE", "RoPE", "ALiBi", "FoX", "PaTH", "PaTH-FoX", "TokRot-QK", "TokRot-QKV",
                                 "TokRot-learned"]
    old = build_model("rand_rot_qkv", SMALL)          # a name of the earlier records: the hidden-state variant
    assert old.attention == "hid_rot_qkv"
    m = build_model("TokRot-QK", SMALL)
    att = m.blocks[0].attn
    assert att.uses_token_ids and float(att.sigma.min()) == pytest.approx(token_sigma_min(64), rel=1e-6)
    assert 2 / token_sigma_min(256) ** 2 == pytest.approx(128)          # slowest block mixes in train_len / 2
    with pytest.raises(ValueError, match="model"):
        build_model("XPos", SMALL)


def test_train_model_resumes_bit_identically(corpus, tmp_path):
    cfg = dataclasses.replace(SMALL, steps=8, warmup=2)
    a_model = build_model("PaTH", cfg)
    a = train_model(a_model, corpus, cfg)
    ck = tmp_path / "lm.pt"
    first = train_model(build_model("PaTH", cfg), corpus, cfg, checkpoint_path=str(ck), stop_after_steps=3)
    assert not first["complete"] and first["steps"] == 3 and ck.exists()
    b_model = build_model("PaTH", cfg, seed=77)       # a different start: the checkpoint must override it
    b = train_model(b_model, corpus, cfg, checkpoint_path=str(ck))
    assert b["complete"] and b["calls"] == 2 and a["loss_curve"] == b["loss_curve"] and a["final_loss"] == b["final_loss"]
    assert all(torch.equal(x, y) for x, y in zip(a_model.state_dict().values(), b_model.state_dict().values()))


def test_seeds_records_comparison_and_far_mass(corpus):
    cfg = dataclasses.replace(SMALL, steps=3, far_mass_windows=2, far_mass_distance=16)
    res = run_experiment(cfg, models=["RoPE", "TokRot-QKV"], seeds=[0, 1, 2], device="cpu", corpus=corpus,
                         verbose=False)
    assert len(res["runs"]) == 6 and [r["seed"] for r in res["runs"]] == [0, 0, 1, 1, 2, 2]
    assert set(res["models"]) == {"RoPE", "TokRot-QKV"} and all(r["seed"] == 0 for r in res["models"].values())
    t = comparison_table(res["records"], "ratio_2x")
    assert set(t) == {"RoPE", "TokRot-QKV"} and t["RoPE"]["n"] == 3
    fm = res["runs"][0]["far_mass"]
    assert fm["lengths"] == [64, 128] and len(fm["far_mass"]) == cfg.n_layers and fm["bound_violations"] == 0
    assert "far_mass_2x" in res["records"][0]["metrics"]
    json.dumps(res)
    # a run stopped before its last step is incomplete and the comparison refuses the set
    short = run_model("RoPE", cfg, corpus, steps=3, seed=3, stop_after_steps=2)
    assert not short["complete"] and "eval" not in short
    with pytest.raises(UnequalTrainingError, match="incomplete"):
        comparison_table(res["records"] + [short["record"]], "ratio_2x")


def _fake_records(vals):
    """LM-style run records: vals[model] = (ratio_2x per seed, ratio_8x per seed, ppl_1x per seed)."""
    out = []
    for m, (r2, r8, p1) in vals.items():
        for s in range(3):
            out.append({"model": m, "seed": s, "steps_done": 5, "steps_planned": 5, "tokens_seen": 10,
                        "complete": True, "schedule": {"steps": 5}, "data_key": f"d{s}", "final_lr": 1e-3,
                        "wall_seconds": 1.0, "metrics": {"ratio_1x": 1.0, "ratio_2x": r2[s], "ratio_8x": r8[s],
                                                         "ppl_1x": p1[s]}})
    return out


def test_record_helpers_and_paper_checks():
    from path_lib.experiments.lm import flat_and_degrading, paper_checks, record_inequality, seed_curves, steps_table
    recs = _fake_records({"RoPE": ((1.3, 1.4, 1.2), (9, 8, 10), (3.0, 3.1, 3.2)),
                          "PaTH": ((1.0, 1.0, 1.0), (1.5, 1.4, 1.6), (2.9, 3.0, 3.1)),
                          "ALiBi": ((0.99, 1.0, 1.01), (1.0, 0.99, 1.02), (3.0, 3.0, 3.0))})
    checks = paper_checks(recs)
    assert all(checks.values()) and len(checks) == 4
    assert flat_and_degrading(recs, "ratio_8x") == (["ALiBi"], ["RoPE", "PaTH"])
    c = seed_curves(recs, "ratio")
    assert c["RoPE"]["mults"] == [1, 2, 8] and c["RoPE"]["max"][-1] == 10
    rec = {"complete": True, "records": recs}
    assert record_inequality(rec) is None
    rec_bad = {"complete": True, "records": recs[:-1] + [dict(recs[-1], complete=False, steps_done=3)]}
    why = record_inequality(rec_bad)
    assert why.startswith("The recorded runs did not get equal training: 1 of 9 runs stopped") and "3 to 3" in why
    assert "| ALiBi | 2 | 3 | 5 |" in steps_table(rec_bad) and "final lr" in steps_table(rec_bad)
    # a record from before run records existed: per-model summaries, one seed
    legacy = {"complete": True, "config": {"seed": 0}, "models": {
        "RoPE": {"train": {"steps": 7, "steps_planned": 10, "stopped_early": True, "tokens": 70}},
        "PaTH": {"train": {"steps": 10, "steps_planned": 10, "stopped_early": False, "tokens": 100}}}}
    why = record_inequality(legacy)
    assert "1 of 2 runs stopped" in why and "each model has 1 seed" in why
