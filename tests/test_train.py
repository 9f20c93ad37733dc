"""The shared training loop: schedule, masking, determinism, evaluation, results with provenance."""
import json

import pytest
import torch
import torch.nn as nn

from path_lib.nn.model import TinyLM
from path_lib.records import read_result
from path_lib.training.tasks import flip_flop
from path_lib.training.loop import (PRESETS, Preset, TrainConfig, evaluate, lr_at, masked_loss, task_preset,
                                        save_result, task_eval_sets, train, train_task)

torch.set_num_threads(1)



def _assert_same_run(m1, a, m2, b):
    """Two training runs ended bit-identical: parameters, history, evaluations and counters."""
    for (n, x), y in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(x, y), n
    for key in ("history", "evals", "final", "final_train_loss", "tokens_seen", "final_lr", "steps_done"):
        assert a[key] == b[key], key

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
    (dict(lr=float("nan")), ValueError, "lr"), (dict(min_lr_ratio=2.0), ValueError, "min_lr_ratio"),
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


# ---------------------------------------------------------------------------------------------- equal training

from path_lib.training.loop import (GeneratedEval, UnequalTrainingError, check_equal_training, comparison_table,  # noqa: E402
                                        format_comparison, paired_differences, run_record)


def _fresh(attention="path", seed=0):
    torch.manual_seed(seed)
    return TinyLM(5, d_model=16, n_layers=1, n_heads=2, attention=attention)


@pytest.mark.parametrize("attention", ["path", "sba"])
def test_resume_is_bit_identical(tmp_path, attention):
    """Stopped after 5 of 12 steps and resumed (a fresh model, other global RNG state) = uninterrupted:
    parameters, optimiser, schedule position, data generator, history and evaluations."""
    cfg = TrainConfig(steps=12, lr=3e-3, warmup=3, eval_every=4, seed=5)
    ev = {"id": [flip_flop(16, 16, seed=1)[:2]]}
    m1 = _fresh(attention)
    a = train(m1, _sample, cfg, eval_sets=ev, progress=False, device="cpu", log_every=1)
    ck = tmp_path / "ck.pt"
    b1 = train(_fresh(attention), _sample, cfg, eval_sets=ev, progress=False, device="cpu", log_every=1,
               checkpoint_path=str(ck), stop_after_steps=5)
    assert not b1["complete"] and b1["steps_done"] == 5 and ck.exists() and b1["final"] == {}
    torch.manual_seed(999)
    m3 = _fresh(attention, seed=123)
    b = train(m3, _sample, cfg, eval_sets=ev, progress=False, device="cpu", log_every=1, checkpoint_path=str(ck))
    assert b["complete"] and b["calls"] == 2 and not ck.exists()
    _assert_same_run(m1, a, m3, b)


def test_deadline_pauses_without_changing_the_schedule(tmp_path):
    import time as _time
    cfg = TrainConfig(steps=6, lr=1e-3, warmup=2)
    ck = tmp_path / "c.pt"
    r = train(_fresh("rope"), _sample, cfg, progress=False, checkpoint_path=str(ck), deadline=_time.time() - 1)
    assert r["steps_done"] == 0 and not r["complete"] and r["steps_planned"] == 6 and ck.exists()
    with pytest.raises(ValueError, match="another configuration"):
        train(_fresh("rope"), _sample, TrainConfig(steps=7, lr=1e-3, warmup=2), progress=False, checkpoint_path=str(ck))
    with pytest.raises(ValueError, match="deadline"):
        train(_fresh("rope"), _sample, cfg, progress=False, checkpoint_path=str(ck), time_limit_s=1.0)
    done = train(_fresh("rope"), _sample, cfg, progress=False, checkpoint_path=str(ck))
    assert done["complete"] and done["steps_done"] == 6 and done["tokens_seen"] == 6 * 8 * 16


def _rec(model, seed, value, **kw):
    res = {"config": TrainConfig(steps=10, warmup=2).__dict__ | {"betas": (0.9, 0.95)}, "steps_done": 10,
           "steps_requested": 10, "tokens_seen": 100, "final_lr": 1e-4, "wall_seconds": 1.0, "complete": True,
           "data_seed": seed}
    res.update(kw)
    return run_record(res, model=model, seed=seed, metrics={"err": value}, data_key=f"d{seed}")


def test_comparison_table_and_refusals():
    recs = [_rec(m, s, v) for m, vals in (("A", (1.0, 2.0, 3.0)), ("B", (2.0, 4.0, 6.0))) for s, v in enumerate(vals)]
    assert check_equal_training(recs) is None
    t = comparison_table(recs, "err")
    assert list(t) == ["A", "B"] and t["A"]["mean"] == 2.0 and t["A"]["std"] == pytest.approx(1.0)
    assert t["B"]["min"] == 2.0 and t["B"]["max"] == 6.0 and t["B"]["seeds"] == [0, 1, 2]
    d = paired_differences(recs, "err", "A", "B")
    assert d["diffs"] == [-1.0, -2.0, -3.0] and d["all_negative"]
    md = format_comparison(t, label="error")
    assert "| A | 2.000 ± 1.000 | 1.000 – 3.000 | 3 |" in md
    cases = {
        "incomplete": recs[:-1] + [_rec("B", 2, 6.0, complete=False, steps_done=7)],
        "steps done": recs[:-1] + [_rec("B", 2, 6.0, steps_done=9)],
        "planned steps": recs[:-1] + [_rec("B", 2, 6.0, steps_requested=12, steps_done=12)],
        "training tokens": recs[:-1] + [_rec("B", 2, 6.0, tokens_seen=90)],
        "at least 3": [r for r in recs if r["seed"] < 2],
        "same seeds": recs[:-1] + [_rec("B", 7, 6.0)],
        "same data": recs[:-1] + [dict(_rec("B", 2, 6.0), data_key="other")],
        "schedules": recs[:-1] + [dict(_rec("B", 2, 6.0), schedule={"lr": 9.0})],
    }
    for word, rs in cases.items():
        why = check_equal_training(rs)
        assert why and word in why, (word, why)
        with pytest.raises(UnequalTrainingError, match=word):
            comparison_table(rs, "err")
    assert "no runs" in check_equal_training([])


def test_train_task_seeds_share_data_and_give_records():
    p = task_preset("flip_flop", "tiny").replace(batch_size=4, eval_batch_size=8, eval_batches=1)
    p.config = TrainConfig(steps=3, warmup=1)
    p.task["length"] = 16
    recs = [train_task("flip_flop", att, p, progress=False, seed=s)["record"]
            for s in (0, 1, 2) for att in ("rope", "sba")]
    assert check_equal_training(recs) is None
    assert {r["data_key"] for r in recs if r["seed"] == 1} == {recs[2]["data_key"]}
    assert recs[0]["data_key"] != recs[2]["data_key"]
    t = comparison_table(recs, "id_error")
    assert set(t) == {"rope", "sba"} and all(0 <= v["mean"] <= 1 for v in t.values())


def test_generated_eval_is_fixed_and_large_enough():
    ge = GeneratedEval("flip_flop", 8, min_scored=300, seed=3, length=32, p_ignore=0.98)
    a, b = list(ge), list(ge)
    assert len(a) == len(b) and all(torch.equal(x[0], y[0]) for x, y in zip(a, b))
    scored = sum(int((y != -100).sum()) for _, y in a)
    last = int((a[-1][1] != -100).sum())
    assert scored >= 300 and scored - last < 300
    out = evaluate(_fresh("rope"), ge)
    assert out["n_tokens"] == scored
    with pytest.raises(ValueError, match="task"):
        GeneratedEval("nope", 8, min_scored=1)


# ---------------------------------------------------------------------------------------------- bad batches, interrupts

def _params(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _bad_at(bad_step, kind="ignored"):
    """_sample, except that at ``bad_step`` every target is -100 (nothing scored)."""
    def sample(step, gen):
        x, y = _sample(step, gen)
        return (x, torch.full_like(y, -100)) if step == bad_step else (x, y)
    return sample


class _NanAt(nn.Module):
    """A TinyLM whose logits turn NaN at the forward call number ``at`` (0-based)."""

    def __init__(self, at):
        super().__init__()
        self.lm, self.at, self.calls = _fresh("rope"), at, 0

    def forward(self, x):
        out = self.lm(x)
        self.calls += 1
        return out * float("nan") if self.calls - 1 == self.at else out


@pytest.mark.parametrize("kind", ["nan", "ignored"])
def test_bad_batch_raises_before_the_update(kind):
    cfg = TrainConfig(steps=6, lr=1e-2, warmup=1)
    model = _NanAt(3) if kind == "nan" else _fresh("rope")
    sample = _sample if kind == "nan" else _bad_at(3, "ignored")
    seen = {}

    def cb(step, loss):                        # log_every=1: called after each completed step
        seen["params"], seen["opt_steps"] = _params(model), step + 1

    exc = FloatingPointError if kind == "nan" else ValueError
    with pytest.raises(exc, match="step 3"):
        train(model, sample, cfg, progress=False, device="cpu", log_every=1, callback=cb)
    assert seen["opt_steps"] == 3
    for k, v in model.state_dict().items():    # exactly the state after step 2
        assert torch.equal(v, seen["params"][k]), k


def test_skip_bad_batches_keeps_schedule_and_data():
    cfg = TrainConfig(steps=6, lr=1e-2, warmup=1, seed=2)
    res = train(_NanAt(2), _bad_at(4, "ignored"), cfg, progress=False, device="cpu", log_every=1,
                on_nonfinite="skip")
    assert [s["step"] for s in res["skipped_steps"]] == [2, 4]
    assert "nan" in res["skipped_steps"][0]["reason"] and "scored" in res["skipped_steps"][1]["reason"]
    assert [h["step"] for h in res["history"]] == [0, 1, 3, 5]          # the step index still advances
    assert res["steps_done"] == 6 and res["tokens_seen"] == 4 * 8 * 16   # skipped tokens not counted
    assert res["final_lr"] == lr_at(5, cfg)
    assert train(_fresh("rope"), _sample, cfg, progress=False)["skipped_steps"] == []


def test_bad_targets_are_named():
    def sample(step, gen):
        x, y = _sample(step, gen)
        y[0, 0] = 7 if step == 1 else y[0, 0]
        return x, y
    model = _fresh("rope")
    with pytest.raises(ValueError, match=r"step 1: targets must lie in \[0, 5\).*\[7\]"):
        train(model, sample, TrainConfig(steps=3, warmup=1), progress=False, device="cpu")
    with pytest.raises(ValueError, match=r"\[-1\]"):
        train(model, lambda s, g: (_sample(s, g)[0], torch.full((8, 16), -1)), TrainConfig(steps=2, warmup=1),
              progress=False, device="cpu")
    with pytest.raises(TypeError, match="integer"):
        train(model, lambda s, g: (_sample(s, g)[0], torch.zeros(8, 16)), TrainConfig(steps=2, warmup=1),
              progress=False, device="cpu")


@pytest.mark.parametrize("kw,exc,word", [
    (dict(time_limit_s=-1), ValueError, "time_limit_s"), (dict(time_limit_s=0), ValueError, "time_limit_s"),
    (dict(log_every=0), ValueError, "log_every"), (dict(log_every=1.5), TypeError, "log_every"),
    (dict(calibrate_steps=0), ValueError, "calibrate_steps"), (dict(stop_after_steps=-1), ValueError, "stop_after"),
    (dict(on_nonfinite="ignore"), ValueError, "on_nonfinite"), (dict(steps=-1), ValueError, "steps"),
    (dict(steps=2.5), TypeError, "steps"),
])
def test_bad_train_arguments(kw, exc, word):
    cfg = TrainConfig(steps=3, warmup=1)
    if "steps" in kw:
        cfg.steps = kw.pop("steps")            # mutated after construction
    with pytest.raises(exc, match=word):
        train(_fresh("rope"), _sample, cfg, progress=False, **kw)


@pytest.mark.parametrize("where", ["sample", "callback"])
def test_keyboard_interrupt_checkpoints_and_resumes(tmp_path, monkeypatch, where):
    """Ctrl-C in sample() at step 5 (nothing of it committed) or in the callback after step 7 (before that
    step's evaluation): a checkpoint is written, the bar closed, the interrupt re-raised; resuming equals an
    uninterrupted run bit for bit."""
    import tqdm as tqdm_mod
    closed = []

    class Bar(tqdm_mod.tqdm):
        def close(self):
            closed.append(True)
            super().close()
    monkeypatch.setattr(tqdm_mod, "tqdm", Bar)
    cfg = TrainConfig(steps=10, lr=3e-3, warmup=2, eval_every=4, seed=4)
    ev = {"id": [flip_flop(16, 16, seed=1)[:2]]}
    m1 = _fresh("path")
    a = train(m1, _sample, cfg, eval_sets=ev, progress=False, device="cpu", log_every=1)
    ck = tmp_path / "ck.pt"

    def sample(step, gen):
        batch = _sample(step, gen)             # the generator has moved on: the checkpoint must roll it back
        if where == "sample" and step == 5:
            raise KeyboardInterrupt
        return batch

    def cb(step, loss):
        if where == "callback" and step == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(_fresh("path"), sample, cfg, eval_sets=ev, progress=True, device="cpu", log_every=1,
              checkpoint_path=str(ck), callback=cb)
    assert ck.exists() and closed
    assert torch.load(ck, weights_only=False)["steps_done"] == (5 if where == "sample" else 8)
    m3 = _fresh("path", seed=77)
    b = train(m3, _sample, cfg, eval_sets=ev, progress=False, device="cpu", log_every=1, checkpoint_path=str(ck))
    assert b["complete"] and b["calls"] == 2 and not ck.exists()
    _assert_same_run(m1, a, m3, b)


# ---------------------------------------------------------------------------------------------- non-finite gradients, bad checkpoints

def _nan_grad_at(model, bad_step):
    """A hook on the first parameter that makes its gradient NaN in the backward pass of step ``bad_step``
    (the loss stays finite)."""
    calls = [0]

    def hook(grad):
        calls[0] += 1
        return grad * float("nan") if calls[0] - 1 == bad_step else grad
    next(model.parameters()).register_hook(hook)
    return calls


@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
def test_nonfinite_gradient_raises_naming_the_step(grad_clip):
    cfg = TrainConfig(steps=6, lr=1e-2, warmup=1, grad_clip=grad_clip)
    model = _fresh("rope")
    _nan_grad_at(model, 3)
    seen = {}

    def cb(step, loss):
        assert loss == loss                      # the loss itself stays finite
        seen["params"], seen["steps"] = _params(model), step + 1

    with pytest.raises(FloatingPointError, match=r"gradient became non-finite .* at step 3"):
        train(model, _sample, cfg, progress=False, device="cpu", log_every=1, callback=cb)
    assert seen["steps"] == 3
    for k, v in model.state_dict().items():      # exactly the state after step 2
        assert torch.equal(v, seen["params"][k]), k


@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
def test_nonfinite_gradient_skip_leaves_the_parameters(grad_clip):
    cfg = TrainConfig(steps=4, lr=1e-2, warmup=1, grad_clip=grad_clip)
    model = _fresh("rope")
    _nan_grad_at(model, 3)                       # the last step
    seen = {}
    res = train(model, _sample, cfg, progress=False, device="cpu", log_every=1, on_nonfinite="skip",
                callback=lambda step, loss: seen.update(params=_params(model), step=step))
    assert seen["step"] == 2 and [s["step"] for s in res["skipped_steps"]] == [3]
    assert "gradient norm nan" in res["skipped_steps"][0]["reason"]
    assert res["steps_done"] == 4 and res["tokens_seen"] == 3 * 8 * 16
    for k, v in model.state_dict().items():      # step 3 changed nothing
        assert torch.equal(v, seen["params"][k]), k
        assert torch.isfinite(v).all(), k


def _paused_checkpoint(tmp_path, cfg):
    ck = tmp_path / "ck.pt"
    train(_fresh("rope"), _sample, cfg, progress=False, device="cpu", checkpoint_path=str(ck), stop_after_steps=2)
    assert ck.exists()
    return ck


def test_checkpoint_of_another_model_is_named(tmp_path):
    cfg = TrainConfig(steps=5, lr=1e-3, warmup=1)
    ck = _paused_checkpoint(tmp_path, cfg)
    torch.manual_seed(0)
    wider = TinyLM(5, d_model=24, n_layers=1, n_heads=2, attention="rope")
    with pytest.raises(ValueError, match=r"ck\.pt was written for another model: .*in the file but"):
        train(wider, _sample, cfg, progress=False, device="cpu", checkpoint_path=str(ck))
    deeper = TinyLM(5, d_model=16, n_layers=2, n_heads=2, attention="rope")
    with pytest.raises(ValueError, match=r"ck\.pt was written for another model: missing \["):
        train(deeper, _sample, cfg, progress=False, device="cpu", checkpoint_path=str(ck))
    done = train(_fresh("rope"), _sample, cfg, progress=False, device="cpu", checkpoint_path=str(ck))
    assert done["complete"] and done["calls"] == 2          # the right model still resumes


@pytest.mark.parametrize("damage", ["truncated", "garbage", "not_ours"])
def test_damaged_checkpoint_is_named(tmp_path, damage):
    cfg = TrainConfig(steps=5, lr=1e-3, warmup=1)
    ck = _paused_checkpoint(tmp_path, cfg)
    data = ck.read_bytes()
    if damage == "truncated":
        ck.write_bytes(data[:len(data) // 2])
    elif damage == "garbage":
        ck.write_bytes(bytes(range(256)) * 4)
    else:
        torch.save({"model": {}, "steps_done": 2}, ck)
    word = "is not a resumable checkpoint" if damage == "not_ours" else "corrupted or truncated"
    with pytest.raises(ValueError, match=f"checkpoint .*ck\\.pt .*{word}"):
        train(_fresh("rope"), _sample, cfg, progress=False, device="cpu", checkpoint_path=str(ck))


def test_empty_batch_is_named():
    def empty_at_1(step, gen):
        x, y = _sample(step, gen)
        return (x[:0], y[:0]) if step == 1 else (x, y)
    with pytest.raises(ValueError, match=r"step 1: sample returned an empty batch \(inputs \(0, 16\)"):
        train(_fresh("rope"), empty_at_1, TrainConfig(steps=3, warmup=1), progress=False, device="cpu")
    with pytest.raises(TypeError, match="step 0: sample must return"):
        train(_fresh("rope"), lambda s, g: _sample(s, g)[0], TrainConfig(steps=3, warmup=1), progress=False)
