"""The surface fuzz: every public call of the modules beyond the attention core (training, its tasks,
corpus and checkpoints, the ledger's statistics and comparisons, the theory, the far mass, the
experiments' configurations and helpers, the hardware presets, the records, the context-parallel
helpers), one bad value at a time, every argument.

A :class:`fuzz_helpers.Case` is a valid call plus, for each argument, the kind of value it takes
(:func:`fuzz_helpers.Int`, ``Float``, ``Bool``, ``Choice``, ``Seed``, ``Seq``, ``PathArg``, ...); each kind
lists the bad values of the input classes it must refuse (``fuzz_helpers.CLASSES``: NaN, infinities, 0,
negative, below / above the range, huge, fractions, wrong types, truthy non-bools, None, empty, unknown
names, wrong devices and shapes and dtypes, folders for files, callables of the wrong signature). The
rule is :func:`fuzz_helpers.judge`'s: a bad value raises a ``ValueError`` / ``TypeError`` naming its
argument; the valid call returns a result that ``check`` compares with an independent computation
(the formula by hand, NumPy, or a count). Anything else (a raw ``RuntimeError``, ``IndexError``,
``KeyError``, ``ZeroDivisionError``, an accepted bad value) fails the case, with every failure listed.

``test_public_api_fuzz.py::test_every_public_name_is_covered`` counts the names of :data:`CASES` as
fuzzed, so a new public function needs a case here (or there) before the suite passes.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fuzz_helpers import (Bad, Bool, Callable, Case, Choice, Device, Float, Fresh, Int, PathArg, Seed, Seq,
                          run_surface)

torch.set_num_threads(1)

CASES = []


def case(module, name, fn, kwargs, kinds, check=None, label=None, valid=True):
    """Register a case for ``module.name`` (``label`` tells apart several cases of one name)."""
    CASES.append(Case(f"{module}.{name}" + (f"[{label}]" if label else ""), fn, kwargs, kinds, check, valid))


def close(a, b, tol=1e-9):
    assert abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b))), (a, b)


TENSOR_JUNK = (("wrong-type list", [[1, 2]]), ("wrong-type str", "x"), ("none", None))


# ----------------------------------------------------------------------------------------------
# path_lib.training
# ----------------------------------------------------------------------------------------------

def _training_cases():
    from path_lib.nn.model import TinyLM
    from path_lib.training import corpus as Co, loop as L, state as S, tasks as Ta

    m = "path_lib.training.loop"
    cfg_kwargs = dict(steps=4, lr=1e-3, warmup=1, min_lr_ratio=0.1, weight_decay=0.01, betas=(0.9, 0.95),
                      grad_clip=1.0, eval_every=0, seed=0, autocast_bf16=False, checkpoint=None)
    case(m, "TrainConfig", L.TrainConfig, cfg_kwargs, {
        "steps": Int(1), "lr": Float(0, open_lo=True), "warmup": Int(0, names=("steps",)),
        "min_lr_ratio": Float(0, 1), "weight_decay": Float(0), "grad_clip": Float(0), "eval_every": Int(0),
        "seed": Seed(), "autocast_bf16": Bool(), "checkpoint": PathArg(),
        "betas": Bad(("above", (2.0, 0.9)), ("above one", (0.9, 1.0)), ("negative", (-0.1, 0.9)),
                     ("wrong-type str", "ab"), ("nan", (NAN, 0.9)), ("wrong-shape", (0.9,)),
                     ("wrong-shape long", (0.9, 0.9, 0.9)), ("wrong-type int", 3), ("none", None),
                     ("wrong-type str items", ("a", "b")), ("inf", (0.9, INF)))},
         check=lambda c: c.betas == (0.9, 0.95) and isinstance(c.betas, tuple) or pytest.fail(str(c)))
    cfg = L.TrainConfig(steps=4, warmup=1, lr=1e-3)
    case(m, "Preset", L.Preset, dict(config=cfg, batch_size=2, model={}, task={}, eval_batch_size=2,
                                     eval_batches=1),
         {"config": Bad(("wrong-type dict", {}), ("none", None)), "batch_size": Int(1), "model": Bad(
             ("wrong-type list", []), ("none", None)), "task": Bad(("wrong-type str", "x")),
          "eval_batch_size": Int(1), "eval_batches": Int(1)})
    case(m, "task_preset", L.task_preset, dict(task="flip_flop", which="tiny"),
         {"task": Choice(["flip_flop"]), "which": Choice(["tiny"], optional=True)},
         check=lambda p: p == L.PRESETS["flip_flop"]["tiny"] or pytest.fail("another preset"))
    case(m, "set_seed", L.set_seed, dict(seed=3), {"seed": Seed()},
         check=lambda _: torch.equal(torch.rand(2), (torch.manual_seed(3), torch.rand(2))[1]) or pytest.fail())

    def lr_ref(step, c):                      # the schedule by hand: linear warm-up, cosine to the floor
        if step < c.warmup:
            return c.lr * (step + 1) / c.warmup
        frac = min(1.0, (step - c.warmup) / max(c.steps - c.warmup, 1))
        return c.lr * c.min_lr_ratio + c.lr * (1 - c.min_lr_ratio) * (1 + math.cos(math.pi * frac)) / 2
    case(m, "lr_at", L.lr_at, dict(step=2, cfg=cfg), {"step": Int(0, huge="ok"), "cfg": Bad(
        ("wrong-type dict", {"lr": 1.0}), ("none", None))}, check=lambda v: close(v, lr_ref(2, cfg)))

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64)
    targets = torch.tensor([[1, -100, 2], [-100, 0, 4]])

    def ce_ref(lg, y):
        lg, y = lg.double().numpy(), y.numpy()
        keep = y != -100
        rows = lg[keep]
        logp = rows - rows.max(1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
        return -logp[np.arange(len(rows)), y[keep]].mean()
    nan_logits = logits.clone()
    nan_logits[0, 1, 0] = NAN                          # at a position that is not scored: still refused
    case(m, "masked_loss", L.masked_loss, dict(logits=logits, targets=targets), {
        "logits": Bad(*TENSOR_JUNK, ("nan unscored", nan_logits), ("inf", logits.clone().fill_(INF)),
                      ("wrong-shape 2d", logits[0]), ("wrong-dtype int", logits.long()),
                      ("wrong-device meta", logits.to("meta")), ("empty vocabulary", logits[..., :0])),
        "targets": Bad(*TENSOR_JUNK, ("above", targets.clamp(min=0) + 5), ("negative", targets - 1),
                       ("wrong-dtype float", targets.double()), ("wrong-shape", targets[:, :2]),
                       ("empty nothing scored", torch.full_like(targets, -100)),
                       ("wrong-device meta", targets.to("meta")))},
        check=lambda v: close(v, ce_ref(logits, targets), 1e-6))

    def tiny(seed=0):
        torch.manual_seed(seed)
        return TinyLM(5, d_model=8, n_layers=1, n_heads=2, attention="nope")
    batch = Ta.flip_flop(2, 8, seed=1)[:2]

    def eval_check(out):
        model = tiny()
        with torch.no_grad():
            lg = model(batch[0])
        close(out["loss"], ce_ref(lg, batch[1]), 1e-5)
        keep = batch[1] != -100
        close(out["accuracy"], float((lg.argmax(-1)[keep] == batch[1][keep]).double().mean()))
    case(m, "evaluate", L.evaluate, dict(model=Fresh(tiny), batches=[batch], device="cpu", autocast_bf16=False,
                                         per_position=False), {
        "model": Bad(("wrong-type str", "model"), ("none", None)),
        "batches": Bad(("wrong-type tensor", batch[0]), ("wrong-shape single", [batch[0]]),
                       ("wrong-shape triple", [batch + (batch[0],)]), ("wrong-type dict", {"id": [batch]}),
                       ("above targets", [(batch[0], batch[1].clamp(min=0) + 7)]),
                       ("wrong-dtype targets", [(batch[0], batch[1].double())]),
                       ("wrong-shape targets", [(batch[0], batch[1][:, :3])]), ("wrong-type int", 3)),
        "device": Device(), "autocast_bf16": Bool(), "per_position": Bool()}, check=eval_check)

    def sample(step, g):
        return Ta.flip_flop(2, 8, generator=g)[:2]

    def train_check(r):
        assert r["steps_done"] == 4 and r["complete"] and len(r["history"]) == 4, r
        assert set(r["final"]) == {"id"}
    train_kwargs = dict(model=Fresh(tiny), sample=sample, config=cfg, eval_sets={"id": [batch]}, device="cpu",
                        progress=False, desc="fuzz", log_every=1, time_limit_s=None, calibrate_steps=20,
                        per_position=False, checkpoint_path=None, resume=True, deadline=None,
                        stop_after_steps=None, callback=lambda step, loss: None, data_seed=None,
                        on_nonfinite="raise", distributed=None, loss_fn=None)
    case(m, "train", L.train, train_kwargs, {
        "model": Bad(("wrong-type str", "m"), ("none", None), ("empty no parameters", nn.Identity())),
        "sample": Callable(arity=2), "config": Bad(("wrong-type dict", {"steps": 2}), ("none", None)),
        "eval_sets": Bad(("wrong-type list", [batch]), ("wrong-shape pair", {"id": batch}),
                         ("wrong-shape single", {"id": [batch[0]]}), ("wrong-type tensor", {"id": batch[0]}),
                         ("wrong-type key", {3: [batch]}), ("wrong-type str", "id")),
        "device": Device(), "progress": Bool(), "desc": Bad(("wrong-type int", 5), ("none", None)),
        "log_every": Int(1), "time_limit_s": Float(0, open_lo=True, optional=True, inf_ok=True),
        "calibrate_steps": Int(1), "per_position": Bool(), "checkpoint_path": PathArg(), "resume": Bool(),
        "deadline": Bad(("nan", NAN), ("wrong-type str", "soon"), ("truthy", True)),
        "stop_after_steps": Int(0, optional=True), "callback": Callable(optional=True, arity=2),
        "data_seed": Seed(optional=True), "on_nonfinite": Choice(["raise"]),
        "distributed": Bad(("wrong-type int", 3), ("wrong-type dict", {"world_size": 2})),
        "loss_fn": Callable(optional=True, arity=2)}, check=train_check)
    case(m, "train_task", L.train_task, dict(task="flip_flop", attention="nope", preset=L.task_preset(
        "flip_flop", "tiny").replace(config=cfg, batch_size=2, eval_batch_size=2, eval_batches=1, model=dict(
            d_model=8, n_layers=1, n_heads=2), task=dict(length=8)), progress=False, seed=1, return_model=False),
        {"task": Choice(["flip_flop"]), "attention": Choice(["nope"]), "preset": Bad(("wrong-type dict", {})),
         "seed": Seed(optional=True), "return_model": Bool(), "progress": Bool()},
        check=lambda r: r["steps_done"] == 4 and r["record"]["seed"] == 1 or pytest.fail(str(r)))
    preset = L.task_preset("mqrar", "tiny").replace(eval_batch_size=2, eval_batches=2)
    case(m, "task_eval_sets", L.task_eval_sets, dict(task="mqrar", preset=preset, seed=5), {
        "task": Choice(["mqrar"]), "preset": Bad(("wrong-type dict", {})), "seed": Seed()},
        check=lambda s: (len(s["id"]) == 2 and torch.equal(s["id"][1][0], Ta.make_task(
            "mqrar", 2, seed=6, **preset.task)[0])) or pytest.fail())
    case(m, "GeneratedEval", lambda **kw: list(L.GeneratedEval(**kw)), dict(task="flip_flop", batch_size=2,
                                                                              min_scored=3, seed=0, length=8),
         {"task": Choice(["flip_flop"]), "batch_size": Int(1), "min_scored": Int(1), "seed": Seed(),
          "length": Bad(("fraction", 8.5), ("zero", 0), ("above odd", 9))},
         check=lambda bs: sum(int((y != -100).sum()) for _, y in bs) >= 3 or pytest.fail())
    case(m, "save_result", L.save_result, dict(path=Fresh(lambda: _tmp("r.json")), result={"a": 1}, command="x"), {
        "path": PathArg(optional=False), "result": Bad(("wrong-type list", [1]), ("none", None)),
        "command": Bad(("wrong-type int", 3))}, check=lambda p: p.exists() or pytest.fail())
    case(m, "run_record", L.run_record, dict(result={"config": {"steps": 4, "lr": 1e-3}, "steps_done": 4,
                                                     "steps_requested": 4, "complete": True},
                                             model="path", seed=0, metrics={"err": 0.5}),
         {"result": Bad(("wrong-type list", []), ("empty", {}), ("none", None)), "model": Bad(
             ("wrong-type int", 3), ("empty", "")), "seed": Seed(), "metrics": Bad(("wrong-type list", [1]),
                                                                                   ("nan", {"err": NAN}))},
         check=lambda r: r["steps_done"] == 4 and r["metrics"] == {"err": 0.5} or pytest.fail(str(r)))
    records = [L.run_record({"config": {"steps": 4}, "steps_done": 4, "steps_requested": 4, "complete": True},
                            model=mod, seed=s, metrics={"err": 0.1 * s + (mod == "b")}) for mod in "ab"
               for s in range(3)]
    case(m, "check_equal_training", L.check_equal_training, dict(records=records, min_seeds=3), {
        "records": Bad(("wrong-type str", "runs"), ("wrong-shape dicts", [{}]), ("none", None),
                       ("wrong-type items", [1, 2])), "min_seeds": Int(1)},
         check=lambda why: why is None or pytest.fail(why))
    case(m, "comparison_table", L.comparison_table, dict(records=records, metric="err", min_seeds=3,
                                                         models=None), {
        "records": Bad(("wrong-type str", "runs"), ("wrong-type items", [1, 2]), ("none", None)),
        "metric": Bad(("unknown", "no-such-metric"), ("wrong-type int", 3), ("none", None)),
        "min_seeds": Int(1), "models": Bad(("wrong-type str", "ab"), ("unknown", ["c"]))},
        check=lambda t: close(t["b"]["mean"], 1.1) and close(t["a"]["std"], 0.1))
    case(m, "paired_differences", L.paired_differences, dict(records=records, metric="err", a="b", b="a"), {
        "records": Bad(("wrong-type str", "runs"), ("none", None)), "metric": Bad(("unknown", "x")),
        "a": Bad(("unknown", "c"), ("wrong-type int", 1)), "b": Bad(("unknown", "c"), ("none", None))},
        check=lambda d: all(abs(x - 1) < 1e-12 for x in d["diffs"]) or pytest.fail(str(d)))
    table = L.comparison_table(records, "err")
    case(m, "format_comparison", L.format_comparison, dict(table=table, label="err", fmt="{:.2f}"), {
        "table": Bad(("wrong-type list", []), ("wrong-shape", {"a": {}}), ("none", None)),
        "label": Bad(("wrong-type int", 3)), "fmt": Bad(("wrong-type int", 3), ("unknown", "{:q}"),
                                                        ("empty no field", "x"))},
        check=lambda t: "| a | 0.10 ± 0.10 |" in t or pytest.fail(t))
    case(m, "hardware", L.hardware, {}, {}, check=lambda h: h in ("tiny", "full") or pytest.fail(h))

    m = "path_lib.training.state"
    case(m, "schedule_key", S.schedule_key, dict(cfg=cfg), {"cfg": Bad(("wrong-type dict", {}), ("none", None))},
         check=lambda d: d["betas"] == [0.9, 0.95] and "checkpoint" not in d or pytest.fail(str(d)))
    case(m, "rng_state", S.rng_state, dict(device=torch.device("cpu")), {"device": Device(optional=False)},
         check=lambda st: set(st) == {"torch", "python"} or pytest.fail())
    case(m, "set_rng_state", S.set_rng_state, dict(st=S.rng_state(torch.device("cpu")), device="cpu"), {
        "st": Bad(("wrong-type list", []), ("empty", {}), ("wrong-shape", {"torch": 1, "python": 2})),
        "device": Device(optional=False)})
    case(m, "save_atomically", S.save_atomically, dict(path=Fresh(lambda: _tmp("s.pt")), model={"w": 1}), {
        "path": PathArg(optional=False)})
    case(m, "read_checkpoint", S.read_checkpoint, dict(path=Fresh(_saved_checkpoint)), {
        "path": PathArg(optional=False) if False else Bad(("wrong-type int", 3), ("empty", ""),
                                                          ("unknown missing", "/nonexistent/ck.pt"),
                                                          ("folder", Fresh(lambda: _tmp("d", folder=True))),
                                                          ("wrong-type file", Fresh(lambda: _tmp_text("junk"))))},
        check=lambda ck: ck["steps_done"] == 2 or pytest.fail())
    model = tiny()
    case(m, "check_same_model", S.check_same_model, dict(path="ck.pt", saved=model.state_dict(), model=model), {
        "saved": Bad(("wrong-type list", []), ("wrong-shape", tiny().double().state_dict() | {
            "embed.weight": torch.zeros(3, 8)}), ("empty", {})), "model": Bad(("wrong-type str", "m"))})
    case(m, "Progress", S.Progress, dict(steps_done=0, tokens_seen=0), {
        "steps_done": Int(0, huge="ok"), "tokens_seen": Int(0, huge="ok"), "history": Bad(("wrong-type str", "x")),
        "calls": Int(1, huge="ok")})
    case(m, "Checkpoints", S.Checkpoints, dict(path=None, config=cfg, data_seed=None, distributed=None), {
        "path": PathArg(), "config": Bad(("wrong-type dict", {}), ("none", None)),
        "data_seed": Seed(optional=True), "distributed": Bad(("wrong-type int", 3))})
    case(m, "discard_checkpoint", S.discard_checkpoint, dict(path=Fresh(_saved_checkpoint)), {
        "path": PathArg(optional=False)})

    m = "path_lib.training.tasks"
    case(m, "flip_flop", Ta.flip_flop, dict(batch_size=2, length=8, p_ignore=0.5, seed=0), {
        "batch_size": Int(1), "length": Int(4, names=("length",)), "p_ignore": Float(0, 1, open_hi=True),
        "seed": Seed(optional=True, names=("generator",)), "generator": Bad(("wrong-type int", 3))},
        check=lambda b: _check_flip_flop(*b))
    case(m, "a5_word_problem", Ta.a5_word_problem, dict(batch_size=2, length=5, seed=0), {
        "batch_size": Int(1), "length": Int(1), "seed": Seed(optional=True, names=("generator",)),
        "generator": Bad(("wrong-type str", "g"))}, check=lambda b: _check_a5(*b))
    case(m, "mqrar", Ta.mqrar, dict(batch_size=2, n_back=2, length=20, n_keys=2, n_pairs=4, seed=0), {
        "batch_size": Int(1), "n_back": Int(1, names=("n_pairs",)), "length": Int(4, names=("n_pairs",)),
        "n_keys": Int(1, names=("n_pairs",)), "n_pairs": Int(1, names=("n_keys", "n_back", "length")),
        "n_values": Int(1, optional=True), "seed": Seed(optional=True, names=("generator",))},
        check=lambda b: _check_mqrar(*b, n_back=2))
    case(m, "mqrar_vocab", Ta.mqrar_vocab, dict(n_keys=2, n_values=3), {"n_keys": Int(1), "n_values": Int(1)},
         check=lambda v: v == ["k0", "k1", "v0", "v1", "v2", "?"] or pytest.fail(str(v)))
    case(m, "a5_vocab", Ta.a5_vocab, {}, {}, check=lambda v: len(v) == 66 or pytest.fail())
    case(m, "compose", Ta.compose, dict(p=(1, 2, 0), q=(2, 0, 1)), {
        "p": Bad(("wrong-shape", (1, 0)), ("wrong-type int", 3), ("above", (1, 2, 5)), ("negative", (0, 1, -1))),
        "q": Bad(("wrong-shape", (0, 1, 2, 3)), ("wrong-type str", "abc"), ("above", (0, 1, 3)))},
        check=lambda r: r == (0, 1, 2) or pytest.fail(str(r)))
    case(m, "make_task", Ta.make_task, dict(name="a5", batch_size=1, seed=0, length=3), {
        "name": Choice(["a5"], names=("task",)), "batch_size": Int(1), "seed": Seed(optional=True,
                                                                                      names=("generator",)),
        "length": Int(1)}, check=lambda b: torch.equal(b[0], Ta.a5_word_problem(1, 3, seed=0)[0]) or pytest.fail())

    m = "path_lib.training.corpus"
    data = torch.arange(50, dtype=torch.uint8)
    case(m, "sample_windows", Co.sample_windows, dict(data=data, batch=3, length=4,
                                                      generator=torch.Generator().manual_seed(0), device=None), {
        "data": Bad(*TENSOR_JUNK, ("wrong-shape 2d", data[None]), ("wrong-shape short", data[:4]),
                    ("wrong-dtype float", data.double()), ("wrong-device meta", data.to("meta"))),
        "batch": Int(1), "length": Int(1, names=("data",)), "generator": Bad(("wrong-type int", 3)),
        "device": Device()},
        check=lambda xy: (torch.equal(xy[1][:, :-1], xy[0][:, 1:]) and bool(((xy[1] - xy[0]) == 1).all()))
        or pytest.fail())
    case(m, "encode", Co.encode, dict(text="hé"), {"text": Bad(("wrong-type bytes", b"x"), ("wrong-type int", 3),
                                                               ("none", None))},
         check=lambda t: t.tolist() == [104, 195, 169] or pytest.fail())
    case(m, "decode", Co.decode, dict(tokens=[104, 105]), {"tokens": Bad(
        ("above", [300]), ("negative", [-1]), ("wrong-type str", "hi"), ("fraction", [1.5]), ("none", None),
        ("wrong-dtype float tensor", torch.tensor([104.0])), ("wrong-shape 2d", torch.tensor([[104]])))},
        check=lambda s: s == "hi" or pytest.fail(s))
    case(m, "is_validation_file", Co.is_validation_file, dict(relpath="a/b.py", val_percent=5.0), {
        "relpath": Bad(("wrong-type int", 3), ("wrong-type path bytes", b"a")), "val_percent": Float(
            0, 100, open_lo=True, open_hi=True)},
        check=lambda v: v == (int(__import__("hashlib").sha1(b"a/b.py").hexdigest()[:8], 16) % 10000 < 500)
        or pytest.fail())
    root = Fresh(_py_folder)
    case(m, "list_stdlib_files", Co.list_stdlib_files, dict(root=root), {
        "root": Bad(("wrong-type int", 3), ("unknown missing", "/nonexistent/dir"),
                    ("wrong-type file", Fresh(lambda: _tmp_text("x"))))},
        check=lambda fs: [f.name for f in fs] == ["a.py", "b.py"] or pytest.fail(str(fs)))
    case(m, "load_stdlib_corpus", Co.load_stdlib_corpus, dict(max_bytes=2000, val_percent=50.0, min_bytes=10,
                                                              root=root), {
        "max_bytes": Int(1, huge="ok"), "val_percent": Float(0, 100, open_lo=True, open_hi=True),
        "min_bytes": Int(0, huge="ok", names=("root", "corpus")), "root": Bad(("wrong-type int", 3),
                                                                              ("unknown", "/nonexistent"))},
        check=lambda c: c.train.numel() + c.val.numel() == 2 * 401 or pytest.fail(str(c.info)))
    case(m, "Corpus", Co.Corpus, dict(train=data, val=data[:10], info={}), {
        "train": Bad(*TENSOR_JUNK, ("wrong-dtype", data.long()), ("wrong-shape", data[None])),
        "val": Bad(("wrong-dtype float", data.float()), ("none", None)), "info": Bad(("wrong-type list", []))})
    case(m, "stdlib_root", Co.stdlib_root, {}, {}, check=lambda p: (p / "os.py").exists() or pytest.fail())

    from path_lib.training import cli
    m = "path_lib.training.cli"
    case(m, "shard_rows", cli.shard_rows, dict(x=torch.arange(6), rank=1, world_size=3), {
        "x": Bad(*TENSOR_JUNK, ("wrong-shape 0d", torch.tensor(3))), "rank": Int(0, names=("world_size",)),
        "world_size": Int(1, names=("x",))}, check=lambda r: r.tolist() == [2, 3] or pytest.fail())
    case(m, "wrap_model", cli.wrap_model, dict(model=Fresh(tiny), mode="none", device=None), {
        "model": Bad(("wrong-type str", "m")), "mode": Choice(["none"]), "device": Device()})
    case(m, "build_parser", cli.build_parser, {}, {},
         check=lambda p: p.parse_args(["--steps", "3"]).steps == 3 or pytest.fail())
    case(m, "run", cli.run, dict(argv=["--steps", "1", "--batch", "2", "--seq-len", "4", "--d-model", "8",
                                       "--layers", "1", "--corpus-bytes", "200000", "--eval-batches", "0",
                                       "--model", "nope"]),
         {"argv": Bad(("wrong-type str", "--steps 1"), ("negative", ["--steps", "-1"]),
                      ("zero", ["--batch", "0"]), ("unknown", ["--model", "nosuch"]),
                      ("wrong-type int items", [3]))},
         check=lambda r: r["steps_done"] == 1 or pytest.fail())
    case(m, "main", cli.main, dict(argv=["--steps", "1", "--batch", "2", "--seq-len", "4", "--d-model", "8",
                                         "--layers", "1", "--corpus-bytes", "200000", "--eval-batches", "0",
                                         "--model", "nope"]),
         {"argv": Bad(("wrong-type str", "--steps 1"), ("negative", ["--log-every", "0"]))})
    case(m, "DistributedHooks", cli.DistributedHooks, dict(mode="ddp", group=None), {
        "mode": Choice(["ddp"]), "group": Bad(("wrong-type str", "world"))}, valid=False)


NAN, INF = float("nan"), float("inf")
_TMP = []


def _tmp(name, folder=False):
    import tempfile
    from pathlib import Path
    d = Path(tempfile.mkdtemp(prefix="surface_fuzz_"))
    _TMP.append(d)
    p = d / name
    if folder:
        p.mkdir()
    return p


def _tmp_text(text):
    p = _tmp("f.txt")
    p.write_text(text)
    return p


def _py_folder():
    d = _tmp("lib", folder=True)
    (d / "a.py").write_text("x" * 400)
    (d / "b.py").write_text("y" * 400)
    return d


def _saved_checkpoint():
    from path_lib.training import state as S
    p = _tmp("ck.pt")
    S.save_atomically(p, **{k: [] if k in ("history", "evals", "recent_losses") else {} for k in S.CHECKPOINT_KEYS}
                      | {"steps_done": 2, "model": {"w": torch.zeros(1)}})
    return p


def _check_flip_flop(x, y, vocab):
    """Every read bit (target) equals the bit after the last write before it."""
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        last = None
        for t in range(0, len(row_x), 2):
            if row_x[t] == 0:
                last = row_x[t + 1]
            if row_y[t] != -100:
                assert row_x[t] == 1 and row_y[t] == last == row_x[t + 1], (row_x, row_y)
    assert vocab == ["w", "r", "i", "0", "1"]


def _check_a5(x, y, vocab):
    from path_lib.training.tasks import A5_ELEMENTS, A5_GENERATORS, compose
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        state = tuple(range(5))
        for g, t in zip(row_x, row_y):
            state = compose(A5_GENERATORS[g][1], state)
            assert A5_ELEMENTS[t - 6] == state


def _check_mqrar(x, y, vocab, n_back):
    K = sum(v.startswith("k") for v in vocab)
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        sep = row_x.index(len(vocab) - 1)
        seen = {}
        for t in range(0, sep, 2):
            seen.setdefault(row_x[t], []).append(row_x[t + 1])
        for t in range(sep + 1, len(row_x)):
            assert row_y[t] == seen[row_x[t]][-n_back], (row_x, row_y)
    assert K == 2


_training_cases()


@pytest.mark.parametrize("fuzz_case", CASES, ids=repr)
def test_surface(fuzz_case):
    failures = run_surface(fuzz_case)
    assert not failures, f"{fuzz_case.name}:\n  " + "\n  ".join(failures)
