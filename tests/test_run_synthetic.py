"""The synthetic-experiment runner (experiments/run_synthetic.py) on the CPU: overrides reach the
runs, learning curves and provenance are recorded, the summary tables are built."""
import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def runner(monkeypatch):
    # importable by name, so that the spawned worker processes can unpickle run_job
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    return importlib.import_module("run_synthetic")


def test_apply_overrides(runner):
    from path_lib.train import task_preset
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
    assert rec["provenance"]["command"].startswith("python3 experiments/run_synthetic.py")
