"""The shared training loop: schedule, masking, determinism, evaluation, results with provenance."""
import json

import pytest
import torch
import torch.nn as nn

from path_lib.layers import TinyLM
from path_lib.provenance import read_result
from path_lib.tasks import flip_flop
from path_lib.train import (PRESETS, Preset, TrainConfig, evaluate, lr_at, masked_loss, task_preset,
                            save_result, task_eval_sets, train, train_task)

torch.set_num_threads(1)


def test_schedule():
    cfg = TrainConfig(steps=100, lr=1e-3, warmup=10, min_lr_ratio=0.1)
    lrs = [lr_at(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10]))           # warm-up increases
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))           # cosine decreases
    assert lrs[-1] == pytest.approx(1e-4, rel=0.01)
    assert lr_at(10_000, cfg) == pytest.approx(1e-4)


def test_masked_loss_ignores():
    logits = torch.randn(2, 3, 5)
    y = torch.tensor([[1, -100, 2], [-100, -100, 4]])
    ref = nn.functional.cross_entropy(logits[y != -100], y[y != -100])
    assert masked_loss(logits, y).item() == pytest.approx(ref.item())
    with pytest.raises(ValueError, match="targets"):
        masked_loss(logits, y[:, :2])


def _sample(step, gen):
    return flip_flop(8, 16, generator=gen)[:2]


def test_train_deterministic_and_learns():
    cfg = TrainConfig(steps=40, lr=3e-3, warmup=5, eval_every=20, seed=3)
    evals = {"id": [flip_flop(32, 16, seed=99)[:2]]}
    results = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TinyLM(5, d_model=16, n_layers=1, n_heads=2, attention="rope")
        results.append(train(model, _sample, cfg, eval_sets=evals, progress=False, device="cpu"))
    a, b = results
    assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]
    assert a["history"][-1]["loss"] < a["history"][0]["loss"]
    assert [e["step"] for e in a["evals"]] == [20, 40]
    assert set(a["final"]["id"]) >= {"loss", "accuracy", "error", "sequence_accuracy", "n_tokens"}
    assert a["steps_done"] == 40 and not a["stopped_early"]


def test_evaluate_counts_only_scored_positions():
    class Oracle(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return nn.functional.one_hot(x.roll(-1, dims=1), 5).float() * 10 + self.p

    x, y, _ = flip_flop(16, 32, seed=0)
    out = evaluate(Oracle(), [(x, y)], per_position=True)
    assert out["accuracy"] == 1.0 and out["sequence_accuracy"] == 1.0
    assert out["n_tokens"] == int((y != -100).sum())
    assert len(out["accuracy_by_position"]) == 32


def test_time_budget_fits_schedule():
    model = TinyLM(5, d_model=16, n_layers=1, n_heads=2, attention="nope")
    cfg = TrainConfig(steps=100_000, lr=1e-3, warmup=5)
    res = train(model, _sample, cfg, progress=False, time_limit_s=1.0, calibrate_steps=5)
    assert res["steps_planned"] < 100_000 and res["steps_done"] <= res["steps_planned"] + 1


def test_checkpoint_and_result(tmp_path):
    model = TinyLM(5, d_model=16, n_layers=1, n_heads=2, attention="path")
    cfg = TrainConfig(steps=3, warmup=1, checkpoint=str(tmp_path / "ck.pt"))
    res = train(model, _sample, cfg, progress=False)
    assert (tmp_path / "ck.pt").exists()
    path = save_result(tmp_path / "r.json", res, command="pytest")
    data = read_result(path)
    assert data["provenance"]["command"] == "pytest" and data["steps_done"] == 3
    json.loads(path.read_text())


def test_presets_and_train_task(monkeypatch):
    for task in PRESETS:
        for which in ("tiny", "full"):
            assert isinstance(PRESETS[task][which], Preset)
    monkeypatch.setenv("PATH_BOOK_PRESET", "tiny")
    assert task_preset("a5") == PRESETS["a5"]["tiny"]
    monkeypatch.setenv("PATH_BOOK_PRESET", "full")
    assert task_preset("a5").task["length"] == PRESETS["a5"]["full"].task["length"]
    monkeypatch.delenv("PATH_BOOK_PRESET")
    assert task_preset("a5") == PRESETS["a5"]["full" if torch.cuda.is_available() else "tiny"]
    p = task_preset("flip_flop", "tiny").replace(batch_size=4, eval_batch_size=8, eval_batches=1)
    p.config = TrainConfig(steps=2, warmup=1)
    p.task["length"] = 16
    res = train_task("flip_flop", "path_fox", p, progress=False)
    assert set(res["final"]) == {"id", "ood_sparse", "ood_dense"}
    sets = task_eval_sets("mqrar", task_preset("mqrar", "tiny"))
    assert len(sets["id"]) == task_preset("mqrar", "tiny").eval_batches


@pytest.mark.parametrize("kw,exc,word", [
    (dict(steps=0), ValueError, "steps"), (dict(steps=1.5), TypeError, "steps"),
    (dict(steps=5, warmup=6), ValueError, "warmup"), (dict(lr=0), ValueError, "lr"),
    (dict(lr=float("nan")), TypeError, "lr"), (dict(min_lr_ratio=2.0), ValueError, "min_lr_ratio"),
])
def test_bad_config(kw, exc, word):
    with pytest.raises(exc, match=word):
        TrainConfig(**kw)


def test_bad_arguments():
    model = TinyLM(5, d_model=16, n_layers=1, n_heads=2, attention="rope")
    with pytest.raises(TypeError, match="config"):
        train(model, _sample, {"steps": 3})
    with pytest.raises(TypeError, match="sample"):
        train(model, None, TrainConfig(steps=2, warmup=1))
    with pytest.raises(ValueError, match="task"):
        task_preset("nope")
    with pytest.raises(ValueError, match="which"):
        task_preset("a5", "huge")
