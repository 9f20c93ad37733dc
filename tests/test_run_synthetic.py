"""The synthetic-experiment runner (scripts/experiments/run_synthetic.py) on the CPU: overrides reach the
runs, learning curves and provenance are recorded, the summary tables are built."""
import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def runner(monkeypatch):
    # importable by name, so that the spawned worker processes can unpickle run_job
    monkeypatch.syspath_prepend(str(ROOT / "scripts" / "experiments"))
    return importlib.import_module("run_synthetic")


def test_apply_overrides(runner):
    from path_lib.training.loop import task_preset
    p = runner.apply_overrides(task_preset("a5", "tiny"), "a5",
                               dict(lr=5e-3, steps=77, eval_every=7, batch_size=9, a5_length=11))
    assert (p.config.lr, p.config.steps, p.config.eval_every, p.batch_size, p.task["length"]) == (5e-3, 77, 7, 9, 11)
    base = task_preset("a5", "tiny")
    assert runner.apply_overrides(base, "mqrar", dict(a5_length=11)).task == base.task   # A5 only
    assert task_preset("a5", "tiny").config.lr == base.config.lr                         # presets untouched


def test_a5_run_records_curves_and_provenance(runner, tmp_path):
    runner.main(["--preset", "tiny", "--tasks", "a5", "--layers", "1", "--models", "rope", "--budget-s", "60",
                 "--workers", "1", "--lr", "3e-3", "--steps", "40", "--eval-every", "20", "--a5-length", "8",
                 "--out", str(tmp_path)])
    rec = json.loads((tmp_path / "a5_layers.json").read_text())
    (run,) = rec["runs"]
    assert run["task_kwargs"]["length"] == 8 and run["config"]["lr"] == 3e-3 and run["steps_done"] == 40
    assert [e["step"] for e in run["evals"]] == [20, 40] and 0 <= run["evals"][0]["id"] <= 1
    assert rec["table"]["rope"]["1"]["steps"] == 40 and "rope" in rec["fewest_layers_90"]
    assert rec["provenance"]["command"].startswith("python3 scripts/experiments/run_synthetic.py")


# ---------------------------------------------------------------------------------------------- run_equal.py

@pytest.fixture()
def equal(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts" / "experiments"))
    return importlib.import_module("run_equal")


def test_run_equal_pauses_packs_and_resumes_bit_identically(equal, tmp_path):
    """Every run paused after 3 of 6 steps (as at a deadline), packed into state.tar, unpacked by the next
    call and finished: the record equals that of an uninterrupted call; the comparison is equal training."""
    common = ["--phases", "flip_flop", "--ff-models", "rope,sba", "--ff-length", "16", "--ff-sparse-reads", "200",
              "--ff-other-reads", "200", "--steps", "6", "--workers", "1", "--budget-s", "300", "--eval-margin-s", "1",
              "--seeds", "0,1,2"]
    equal.main(common + ["--state", str(tmp_path / "s1"), "--out", str(tmp_path / "o1"), "--pause-after-steps", "3"])
    first = json.loads((tmp_path / "o1" / "flip_flop.json").read_text())
    assert first["runs_done"] == 0 and not first["equal_training"]["ok"]
    assert (tmp_path / "o1" / "state.tar").exists()
    equal.main(common + ["--state", str(tmp_path / "s2"), "--out", str(tmp_path / "o2"),
                         "--resume-from", str(tmp_path / "o1" / "state.tar")])
    equal.main(common + ["--state", str(tmp_path / "s3"), "--out", str(tmp_path / "o3")])
    resumed = json.loads((tmp_path / "o2" / "flip_flop.json").read_text())
    straight = json.loads((tmp_path / "o3" / "flip_flop.json").read_text())
    assert resumed["complete"] and resumed["equal_training"] == {"ok": True, "reason": None, "by_setting": {"()": None}}
    assert resumed["table"] == straight["table"] and set(resumed["table"]) == {"rope", "sba"}
    assert all(r["calls"] == 2 for r in resumed["runs"]) and all(r["calls"] == 1 for r in straight["runs"])
    row = resumed["table"]["sba"]
    assert {"id_error", "ood_sparse_error", "ood_dense_error", "steps"} <= set(row) and row["steps"] == 6
    assert row["ood_sparse_reads"] >= 200 and resumed["provenance"]["command"].startswith("python scripts/experiments/run_equal.py")


def test_run_equal_starts_runs_that_will_pause_only_where_their_state_comes_back(equal):
    """A fresh flip-flop run predicted at 300 s starts with 110 s left (it pauses and resumes next call);
    a fresh LM run does not (its checkpoint is over the return limit), nor one with too short a slice."""
    assert equal.skip_reason("flip_flop", 300.0, False, 110.0, 45.0) is None
    assert "predicted" in equal.skip_reason("lm", 300.0, False, 250.0, 120.0)
    assert equal.skip_reason("lm", 300.0, True, 250.0, 120.0) is None           # a resumed LM run goes on
    assert "predicted" in equal.skip_reason("flip_flop", 300.0, False, 80.0, 45.0)
    assert equal.skip_reason("flip_flop", None, False, 80.0, 45.0) is None       # no rate known yet
    assert equal.skip_reason("flip_flop", 10.0, True, 50.0, 45.0) == "50s left"


def test_run_equal_a5_summary_keeps_chapter_layout(equal):
    def run(att, L, T, seed, acc):
        rec = {"model": att, "seed": seed, "steps_done": 10, "steps_planned": 10, "tokens_seen": 5, "complete": True,
               "schedule": {"lr": 1}, "data_key": f"a5|T{T}|{seed}", "metrics": {"id_accuracy": acc}}
        return {"job": {"id": f"a5-{att}-L{L}-T{T}-s{seed}", "attention": att, "n_layers": L, "length": T},
                "record": rec, "steps_done": 10, "attention": att, "model": {"n_layers": L},
                "final": {"id": {"accuracy": acc}, "long": {"accuracy": acc / 2}}}
    runs = [run(a, L, T, s, 0.95 if (a == "path" and L >= 2) else 0.5)
            for a in ("rope", "path") for L in (1, 2) for T in (16, 32) for s in (0, 1, 2)]
    rec = equal.summarise("a5", runs, len(runs), {})
    assert rec["complete"] and rec["equal_training"]["ok"] and rec["lengths"] == [16, 32]
    assert rec["fewest_layers_90"] == {"rope": None, "path": 2}
    assert rec["fewest_layers_90_by_length"]["32"] == {"rope": None, "path": 2}
    assert rec["table"]["path"]["2"]["accuracy"] == pytest.approx(0.95) and len(rec["runs"]) == 12
    assert rec["summary"]["path/2/16"]["id_accuracy"]["n"] == 3
    bad = equal.summarise("a5", runs[:-1], len(runs), {})
    assert not bad["equal_training"]["ok"] and "23 of 24" in bad["equal_training"]["reason"]


def test_lm_summary_gives_seed_statistics_per_model(monkeypatch):
    """The language-model record's ``summary``: per model and metric, the mean, sample sd, min and max
    over seeds, recomputed here with the statistics module from the same fake runs."""
    import random
    import statistics
    monkeypatch.syspath_prepend(str(ROOT / "scripts" / "experiments"))
    run_equal = importlib.import_module("run_equal")
    rng = random.Random(7)
    runs = []
    for model in ("RoPE", "PaTH"):
        for seed in (0, 1, 2):
            metrics = {"ppl_1x": rng.uniform(2, 4), "ratio_4x": rng.uniform(0.9, 3)}
            rec = {"model": model, "seed": seed, "steps_done": 5, "steps_planned": 5, "tokens_seen": 10,
                   "final_lr": 1e-4, "complete": True, "schedule": "cosine", "data_key": seed, "metrics": metrics}
            runs.append({"job": {"id": f"lm-{model}-s{seed}"}, "record": rec, "model": model, "seed": seed,
                         "corpus": {"bytes": 1}})
    out = run_equal.summarise("lm", runs, 6, {})
    for model in ("RoPE", "PaTH"):
        vals = [r["record"]["metrics"]["ratio_4x"] for r in runs if r["model"] == model]
        got = out["summary"][model]["ratio_4x"]
        assert got["n"] == 3 and got["min"] == min(vals) and got["max"] == max(vals)
        assert abs(got["mean"] - statistics.mean(vals)) < 1e-12 and abs(got["std"] - statistics.stdev(vals)) < 1e-12


def test_run_equal_lm_bf16_reaches_the_training_config(equal):
    """--lm-bf16 sets the LM config's autocast, which train_model hands to the training loop (so the
    record's config says which precision trained it); a non-bool autocast is refused by name."""
    import argparse
    from path_lib.experiments.lm import LMConfig
    args = argparse.Namespace(lm_preset="decide", lm_corpus="stdlib", steps=None, lm_eval_mults=None,
                              lm_far_mass_windows=8, lm_bf16=True)
    assert equal.lm_config(args).autocast_bf16 is True
    assert equal.lm_config(argparse.Namespace(**dict(vars(args), lm_bf16=False))).autocast_bf16 is False
    with pytest.raises(TypeError, match="autocast_bf16"):
        LMConfig(autocast_bf16="yes")
