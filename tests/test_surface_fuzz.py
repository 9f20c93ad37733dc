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
        "path": Bad(("wrong-type int", 3), ("empty", ""), ("unknown missing", "/nonexistent/ck.pt"),
                    ("folder", Fresh(lambda: _tmp("d", folder=True))),
                    ("wrong-type file", Fresh(lambda: _tmp_text("junk"))), names=("checkpoint",))},
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
        check=lambda fs: [f.name for f in fs] == [f"{n}.py" for n in "abcdef"] or pytest.fail(str(fs)))
    case(m, "load_stdlib_corpus", Co.load_stdlib_corpus, dict(max_bytes=10_000, val_percent=50.0, min_bytes=10,
                                                              root=root), {
        "max_bytes": Int(1, huge="ok"), "val_percent": Float(0, 100, open_lo=True, open_hi=True),
        "min_bytes": Int(0, huge="ok", names=("root", "corpus")), "root": Bad(("wrong-type int", 3),
                                                                              ("unknown", "/nonexistent"))},
        check=lambda c: (c.train.numel(), c.val.numel()) == (4 * 401, 2 * 401) and bytes(c.val[:2].tolist())
        == b"ee" or pytest.fail(str(c.info)))
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
                                       "--layers", "1", "--corpus-bytes", "600000", "--eval-batches", "0",
                                       "--model", "nope"]),
         {"argv": Bad(("wrong-type str", "--steps 1"), ("negative", ["--steps", "-1"]),
                      ("zero", ["--batch", "0"]), ("unknown", ["--model", "nosuch"]), ("nan", ["--lr", "nan"]),
                      ("wrong-type int items", [3]), ("negative log", ["--log-every", "-2"]),
                      ("unknown flag", ["--no-such-flag"]))},
         check=lambda r: r["steps_done"] == 1 or pytest.fail())
    case(m, "main", cli.main, dict(argv=["--steps", "1", "--batch", "2", "--seq-len", "4", "--d-model", "8",
                                         "--layers", "1", "--corpus-bytes", "600000", "--eval-batches", "0",
                                         "--model", "nope"]),
         {"argv": Bad(("wrong-type str", "--steps 1"), ("wrong-type int items", [3]))})
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
    for name in "abcdef":                     # e.py and f.py go to validation at val_percent 50
        (d / f"{name}.py").write_text(name * 400)
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


# ----------------------------------------------------------------------------------------------
# path_lib.ledger
# ----------------------------------------------------------------------------------------------

def _ledger_cases():
    from path_lib.ledger import claims as C, comparison as Cm, evidence as E, stats as St

    m = "path_lib.ledger.stats"
    diffs = [0.3, -0.1, 0.5]
    values = Seq((("nan", NAN), ("inf", INF), ("wrong-type str", "x"), ("truthy", True)))

    def sign_flip_ref(d, sgn):                # every sign pattern counted by hand
        import itertools
        obs = sgn * sum(d)
        hits = sum(sgn * sum(s * x for s, x in zip(signs, d)) >= obs - 1e-12
                   for signs in itertools.product((1, -1), repeat=len(d)))
        return hits / 2 ** len(d)
    case(m, "sign_flip_p", St.sign_flip_p, dict(diffs=diffs, alternative="greater"), {
        "diffs": Kind_with(values, ("huge", [0.1] * 21)), "alternative": Choice(["greater"])},
        check=lambda p: close(p, sign_flip_ref(diffs, 1)))
    case(m, "permutation_p", St.permutation_p, dict(a=[1.0, 2.0, 3.0], b=[0.0, 0.5], alternative="less"), {
        "a": values, "b": values, "alternative": Choice(["less"])}, check=lambda p: close(p, 1.0))
    case(m, "tost_sign_flip_p", St.tost_sign_flip_p, dict(diffs=diffs, low=-1.0, high=1.0), {
        "diffs": values, "low": Float(names=("high",)), "high": Float(names=("low",))},
        check=lambda p: close(p, max(sign_flip_ref([x + 1 for x in diffs], 1), sign_flip_ref([x - 1 for x in diffs], -1))))
    case(m, "smallest_p_paired", St.smallest_p_paired, dict(n=3), {"n": Int(1)}, check=lambda p: close(p, 1 / 8))
    case(m, "smallest_p_unpaired", St.smallest_p_unpaired, dict(n_a=3, n_b=3), {"n_a": Int(1), "n_b": Int(1)},
         check=lambda p: close(p, 1 / 20))
    case(m, "bootstrap_interval", St.bootstrap_interval, dict(values=[1.0, 3.0], level=0.5, exact_max=100,
                                                               n_resamples=10, seed=0), {
        "values": values, "level": Float(0, 1, open_lo=True, open_hi=True), "exact_max": Int(0),
        "n_resamples": Int(1), "seed": Seed()},
        check=lambda iv: tuple(iv) == (1.0, 2.0) or pytest.fail(str(iv)))  # means 1, 2, 2, 3: quartiles 1, 2

    m = "path_lib.ledger.comparison"
    records = [Cm.run_record({"config": {"steps": 4}, "steps_done": 4, "steps_requested": 4, "complete": True},
                             model=mod, seed=s, metrics={"err": 0.1 * s + (mod == "b")}) for mod in "ab"
               for s in range(3)]
    nan_records = [dict(r, metrics={"err": NAN}) for r in records]
    case(m, "run_record", Cm.run_record, dict(result={"config": {"steps": 4, "lr": 1e-3}, "steps_done": 4,
                                                      "steps_requested": 4, "complete": True},
                                              model="path", seed=0, metrics={"err": 0.5}, data_key=None,
                                              batch_size=None),
         {"result": Bad(("wrong-type list", []), ("empty", {}), ("none", None), ("wrong-shape config", {
             "config": 3, "steps_done": 1})), "model": Bad(("wrong-type int", 3), ("empty", "")), "seed": Seed(),
          "metrics": Bad(("wrong-type list", [1]), ("wrong-type value", {"err": "x"})),
          "data_key": Bad(("wrong-type int", 3)), "batch_size": Int(1, optional=True)},
         check=lambda r: r["steps_done"] == 4 and r["metrics"] == {"err": 0.5} or pytest.fail(str(r)))
    case(m, "check_equal_training", Cm.check_equal_training, dict(records=records, min_seeds=3), {
        "records": Bad(("wrong-type str", "runs"), ("wrong-shape dicts", [{}]), ("none", None),
                       ("wrong-type items", [1, 2])), "min_seeds": Int(1)},
         check=lambda why: why is None or pytest.fail(why))
    case(m, "comparison_table", Cm.comparison_table, dict(records=records, metric="err", min_seeds=3,
                                                          models=None), {
        "records": Bad(("wrong-type str", "runs"), ("wrong-type items", [1, 2]), ("none", None),
                       ("nan metric", nan_records), names=("metric",)),
        "metric": Bad(("unknown", "no-such-metric"), ("wrong-type int", 3), ("none", None)),
        "min_seeds": Int(1), "models": Bad(("wrong-type str", "ab"), ("unknown", ["c"]))},
        check=lambda t: close(t["b"]["mean"], 1.1) and close(t["a"]["std"], 0.1))
    case(m, "paired_differences", Cm.paired_differences, dict(records=records, metric="err", a="b", b="a"), {
        "records": Bad(("wrong-type str", "runs"), ("none", None)), "metric": Bad(("unknown", "x")),
        "a": Bad(("unknown", "c"), ("wrong-type int", 1)), "b": Bad(("unknown", "c"), ("none", None),
                                                                    ("above same", "b"))},
        check=lambda d: all(abs(x - 1) < 1e-12 for x in d["diffs"]) or pytest.fail(str(d)))
    table = Cm.comparison_table(records, "err")
    case(m, "format_comparison", Cm.format_comparison, dict(table=table, label="err", fmt="{:.2f}"), {
        "table": Bad(("wrong-type list", []), ("wrong-shape", {"a": {}}), ("none", None)),
        "label": Bad(("wrong-type int", 3)), "fmt": Bad(("wrong-type int", 3), ("unknown", "{:q}"),
                                                        ("empty no field", "x"))},
        check=lambda t: "| a | 0.10 ± 0.10 |" in t or pytest.fail(t))
    case(m, "json_key", Cm.json_key, dict(d={"b": 1, "a": [1, 2]}), {},
         check=lambda k: k == '{"a": [1, 2], "b": 1}' or pytest.fail(k))

    m = "path_lib.ledger.evidence"
    rec = {"records": [{"model": "a", "seed": s, "metrics": {"x": 1.0 + s, "curve": [[0, 2.0], [5, 4.0]]}}
                       for s in range(3)] + [{"model": "b", "seed": s, "metrics": {"x": 0.5}} for s in range(3)]}
    case(m, "value_at", E.value_at, dict(data={"a": [{"k": 1, "v": 2}, {"k": 2, "v": 3}]}, select=["a", {"k": 2}, "v"]),
         {"data": Bad(("wrong-type list", [1]), ("none", None), ("empty", {})),
          "select": Bad(("unknown", ["b"]), ("above index", ["a", 5]), ("unknown match", ["a", {"k": 9}]),
                        ("wrong-type str", "a"), ("none", None))},
         check=lambda v: v == 3 or pytest.fail(str(v)))
    side = ("records", "a", "metrics.x")
    case(m, "per_seed", E.per_seed, dict(rec=rec, side=side), {
        "rec": Bad(("wrong-type list", []), ("empty", {}), ("none", None)),
        "side": Bad(("wrong-shape", ("records", "a")), ("unknown model", ("records", "c", "metrics.x")),
                    ("unknown path", ("records", "a", "metrics.y")), ("unknown rows", ("runs", "a", "metrics.x")),
                    ("wrong-type str", "records"), ("unknown window", ("records", "a", "metrics.curve@9:12")),
                    ("wrong-shape window", ("records", "a", "metrics.curve@x")))},
        check=lambda d: d == {0: 1.0, 1: 2.0, 2: 3.0} or pytest.fail(str(d)))
    test = {"label": "a above b", "a": side, "b": ("records", "b", "metrics.x"), "paper": ">", "relative": False,
            "shift": 0.0, "margin": None}
    case(m, "evaluate", E.evaluate, dict(test=test, rec=rec), {
        "test": Bad(("wrong-type list", []), ("empty", {}), ("unknown paper", dict(test, paper="?")),
                    ("nan shift", dict(test, shift=NAN)), ("wrong-type b", dict(test, b="x"))),
        "rec": Bad(("wrong-type str", "rec"), ("empty", {}))},
        check=lambda r: close(r["p"], 1 / 8) if r["diffs"] == [0.5, 1.5, 2.5] else pytest.fail(str(r)))
    case(m, "p_text", E.p_text, dict(p=0.125), {"p": Float(0, 1)}, check=lambda t: t == "1/8" or pytest.fail(t))

    m = "path_lib.ledger.claims"
    claim = next(c for c in C.CLAIMS if c["status"] == "quoted only")
    bad_claims = Bad(("wrong-type str", "A-x"), ("wrong-type items", [1]), ("wrong-type dict", claim),
                     ("unknown status", [dict(claim, status="maybe")]), ("wrong-shape", [{"id": "x"}]))
    root = Bad(("wrong-type int", 3), ("unknown missing", "/nonexistent/root"),
               ("wrong-type file", Fresh(lambda: _tmp_text("x"))))
    for name in ("check_snapshots", "check_statistics"):
        case(m, name, getattr(C, name), dict(claims=[claim], root=None), {"claims": bad_claims, "root": root},
             check=lambda out: out == [] or pytest.fail(str(out)))
    case(m, "validate", C.validate, dict(claims=[claim], root=None), {
        "claims": Bad(("wrong-type str", "A-x"), ("wrong-type items", [1]), ("wrong-type dict", claim)),
        "root": root}, check=lambda out: out == [] or pytest.fail(str(out)))
    for name in ("counts", "counts_markdown", "counting_sentence", "pending"):
        case(m, name, getattr(C, name), dict(claims=[claim]), {"claims": bad_claims})
    case(m, "test_counts", C.test_counts, dict(claims=[claim]), {"claims": bad_claims},
         check=lambda d: d[claim["test"]][claim["status"]] == 1 or pytest.fail(str(d)))
    case(m, "open_claims", C.open_claims, dict(claims=[claim], root=None), {"claims": bad_claims, "root": root},
         check=lambda out: out == [] or pytest.fail(str(out)))
    for name in ("reason_text", "decide_text", "test_results"):
        case(m, name, getattr(C, name), dict(c=claim, root=None), {
            "c": Bad(("wrong-type str", "A-x"), ("wrong-type list", [claim]), ("none", None)), "root": root})
    case(m, "format_value", C.format_value, dict(v={"value": 0.25, "format": "percent"}), {
        "v": Bad(("wrong-type float", 0.25), ("empty", {}), ("unknown format", {"value": 1.0, "format": "hex"}),
                 ("wrong-type value", {"value": "x", "format": "percent"}))},
        check=lambda t: t == "25%" or pytest.fail(t))
    case(m, "load_evidence", C.load_evidence, dict(path="results/lm/lm_full.json", root=None), {
        "path": Bad(("wrong-type int", 3), ("unknown missing", "results/none.json"), ("none", None),
                    ("empty", "")), "root": root},
        check=lambda d: "provenance" in d or pytest.fail())


def Kind_with(kind, *extra):
    """``kind`` with more bad values."""
    from fuzz_helpers import Kind
    return Kind(lambda: kind.bad() + list(extra), kind.names)


# ----------------------------------------------------------------------------------------------
# path_lib.theory, far mass, hardware, records, context-parallel helpers
# ----------------------------------------------------------------------------------------------

def _theory_cases():
    from path_lib.theory import costs as Cs, decoherence as Dh

    m = "path_lib.theory.costs"
    T, D = 10, 4
    case(m, "block_lengths", Cs.block_lengths, dict(T=T, block_size=4), {"T": Int(0), "block_size": Int(1)},
         check=lambda ls: ls == [4, 4, 2] or pytest.fail(str(ls)))
    case(m, "ut_solve_flops", Cs.ut_solve_flops, dict(L=4), {"L": Int(0)}, check=lambda n: n == 48 or pytest.fail())
    sizes = {"T": Int(0), "D": Int(1), "Dv": Int(1, optional=True), "block_size": Int(1)}
    case(m, "flash_attention_cost", Cs.flash_attention_cost, dict(T=T, D=D, Dv=None, block_size=4), sizes,
         check=lambda c: c.flops_by_part["logits"] == 2 * (16 * 3 + 8 * 2 + 4) * D   # tiles j <= i
         or pytest.fail(str(c)))
    case(m, "path_blockwise_cost", Cs.path_blockwise_cost, dict(T=T, D=D, Dv=None, block_size=4), sizes,
         check=lambda c: c.flops_by_part["ut_solve"] == 2 * 48 + 4 or pytest.fail(str(c)))
    case(m, "path_allpairs_cost", Cs.path_allpairs_cost, dict(T=T, D=D, Dv=2), {
        "T": Int(0), "D": Int(1), "Dv": Int(1, optional=True)},
        check=lambda c: c.flops_by_part["values"] == 2 * T * T * 2 or pytest.fail())
    case(m, "default_seg_blocks", Cs.default_seg_blocks, dict(T=1000, D=64, block_size=64), {
        "T": Int(0), "D": Int(1), "block_size": Int(1)},
        check=lambda n: n == max(2, -(-16 // max(1, int(math.sqrt(2 * 16 * 64 / 64))))) or pytest.fail(str(n)))
    case(m, "path_segmented_cost", Cs.path_segmented_cost, dict(T=T, D=D, block_size=4, seg_blocks=2), {
        "T": Int(0), "D": Int(1), "block_size": Int(1), "seg_blocks": Int(1, optional=True)},
        check=lambda c: c.flops_by_part["ut_solve"] == 3 * 48 or pytest.fail(str(c)))
    case(m, "decode_step_cost", Cs.decode_step_cost, dict(t=5, D=D, Dv=None, path=True), {
        "t": Int(0), "D": Int(1), "Dv": Int(1, optional=True), "path": Bool()},
        check=lambda c: c.flops == 2 * 5 * 4 * 2 + 4 * 4 * 4 or pytest.fail(str(c.flops)))
    case(m, "backward_memory", Cs.backward_memory, dict(T=T, D=D, Dv=None, method="checkpoint", boundary=4,
                                                       block_size=4), {
        **sizes, "method": Choice(["checkpoint"]), "boundary": Int(1)},
        check=lambda n: n == 2 * T * D + 36 + (4 * 2 * 1 // 2 + 2 * 2) * D + 2 * T or pytest.fail(str(n)))
    case(m, "Cost", Cs.Cost, dict(name="x", flops_by_part={"a": 1}, hbm={"q": 2}, extra=[], sram=0), {
        "name": Bad(("wrong-type int", 3)), "flops_by_part": Bad(("wrong-type list", [1]), ("negative", {"a": -1}),
                                                                 ("fraction", {"a": 1.5})),
        "hbm": Bad(("wrong-type int", 3), ("negative", {"q": -2})), "extra": Bad(("unknown", ["k"])),
        "sram": Int(0, huge="ok")}, check=lambda c: c.flops == 1 and c.hbm_elements == 2 or pytest.fail())

    m = "path_lib.theory.decoherence"
    rng = Fresh(lambda: np.random.default_rng(0))
    bad_rng = Bad(("wrong-type int", 0), ("none", None))
    case(m, "haar_so", Dh.haar_so, dict(d=3, n=4, rng=rng), {"d": Int(1), "n": Int(0), "rng": bad_rng},
         check=lambda Q: np.allclose(Q @ np.swapaxes(Q, 1, 2), np.eye(3)) and np.allclose(np.linalg.det(Q), 1)
         or pytest.fail())
    case(m, "random_unit", Dh.random_unit, dict(d=3, n=4, rng=rng), {"d": Int(1), "n": Int(0), "rng": bad_rng},
         check=lambda u: np.allclose(np.linalg.norm(u, axis=1), 1) or pytest.fail())
    case(m, "so2_angle_table", Dh.so2_angle_table, dict(vocab=5, d=4, sigma=0.5, rng=rng), {
        "vocab": Int(1), "d": Bad(("above odd", 3), ("zero", 0), ("negative", -2), ("fraction", 2.5)),
        "sigma": Float(0), "rng": bad_rng}, check=lambda t: t.shape == (5, 2) or pytest.fail())
    case(m, "rope_angles", Dh.rope_angles, dict(d=4, base=100.0), {
        "d": Bad(("above odd", 3), ("zero", 0), ("negative", -2), ("fraction", 2.5), ("none", None)),
        "base": Float(0, open_lo=True)}, check=lambda a: np.allclose(a, [1.0, 0.1]) or pytest.fail(str(a)))
    case(m, "block_rotation", Dh.block_rotation, dict(angles=np.array([0.0, math.pi / 2])), {
        "angles": Bad(("wrong-type str", "x"), ("nan", np.array([NAN])), ("wrong-shape 0d", np.array(1.0)),
                      ("empty", np.zeros(0)), ("none", None))},
        check=lambda R: np.allclose(R, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, -1], [0, 0, 1, 0]]) or pytest.fail())
    kind = Choice(["haar"])
    hh = dict(beta_lo=0.5, beta_hi=1.5)
    case(m, "sample_steps", Dh.sample_steps, dict(kind="householder", d=3, n=2, rng=rng, **hh), {
        "kind": kind, "d": Int(1), "n": Int(0), "rng": bad_rng, "beta_lo": Float(0, 2, names=("beta_hi",)),
        "beta_hi": Float(0, 2, names=("beta_lo",))},
        check=lambda M: np.allclose(M, np.swapaxes(M, 1, 2)) or pytest.fail())
    case(m, "closed_form_mean_step", Dh.closed_form_mean_step, dict(kind="householder", d=4, **hh), {
        "kind": kind, "d": Int(1), "beta_lo": Float(0, 2, names=("beta_hi",))},
        check=lambda E_: np.allclose(E_, 0.75 * np.eye(4)) or pytest.fail())
    case(m, "mean_step_opnorm", Dh.mean_step_opnorm, dict(kind="rope", d=4, n=10, seed=0), {
        "kind": kind, "d": Bad(("above odd", 3), ("zero", 0)), "n": Int(2), "seed": Seed(),
        "base": Float(0, open_lo=True)}, check=lambda r: close(r["exact"], 1.0))
    case(m, "route_products", Dh.route_products, dict(kind="haar", d=2, max_len=2, n_routes=3, seed=0), {
        "kind": kind, "d": Int(1), "max_len": Int(0), "n_routes": Int(1), "seed": Seed()},
        check=lambda P: P.shape == (3, 3, 2, 2) and np.allclose(P[0], np.eye(2)) or pytest.fail())
    case(m, "mean_transport_decay", Dh.mean_transport_decay, dict(kind="householder", d=2, lengths=[0, 2],
                                                                  n_routes=20, seed=0, **hh), {
        "kind": kind, "d": Int(1), "lengths": Seq((("negative", -1), ("fraction", 1.5), ("nan", NAN))),
        "n_routes": Int(2), "seed": Seed()},
        check=lambda r: np.allclose(r["predicted"], [1.0, 0.5 ** 2]) or pytest.fail(str(r)))
    case(m, "haar_coordinate_cdf", Dh.haar_coordinate_cdf, dict(x=np.array([-1.0, 0.0, 1.0]), d=3), {
        "x": Bad(("nan", np.array([NAN])), ("wrong-type str", "x"), ("none", None)), "d": Int(2)},
        check=lambda F_: np.allclose(F_, [0, 0.5, 1]) or pytest.fail(str(F_)))
    case(m, "ks_distance", Dh.ks_distance, dict(samples=np.array([0.5]), cdf=lambda x: x), {
        "samples": Bad(("empty", np.zeros(0)), ("nan", np.array([NAN])), ("wrong-type str", "x")),
        "cdf": Callable()}, check=lambda v: close(v, 0.5))
    case(m, "route_score_samples", Dh.route_score_samples, dict(kind="rope", d=2, lengths=[0, 1], n_routes=2,
                                                                seed=0, q=None, k=None), {
        "kind": kind, "d": Int(1), "lengths": Seq((("negative", -1),)), "n_routes": Int(1), "seed": Seed(),
        "q": Bad(("wrong-shape", np.ones(3)), ("nan", np.array([NAN, 1.0]))),
        "k": Bad(("wrong-shape", np.ones(1)), ("wrong-type str", "k"))},
        check=lambda s: np.allclose(s[0], 1.0) and np.allclose(s[1], math.cos(1.0)) or pytest.fail(str(s)))
    case(m, "levy_tail_bound", Dh.levy_tail_bound, dict(t=0.5, d=8), {
        "t": Bad(("nan", NAN), ("negative", -0.5), ("wrong-type str", "x")), "d": Int(1)},
        check=lambda b: close(b, 2 * math.exp(-8 * 0.25 / 2)))
    case(m, "hoeffding_tail_bound", Dh.hoeffding_tail_bound, dict(t=1.0, q=np.ones(2), k=np.ones(2)), {
        "t": Bad(("nan", NAN), ("negative", -1.0)), "q": Bad(("above odd", np.ones(3)), ("wrong-type str", "q")),
        "k": Bad(("wrong-shape", np.ones(4)), ("nan", np.array([NAN, 1.0])))},
        check=lambda b: close(b, min(1.0, 2 * math.exp(-1 / (2 * 4)))))
    case(m, "score_profile", Dh.score_profile, dict(kind="rope", d=2, max_len=2, n_routes=2, lam=2.0, seed=0), {
        "kind": kind, "d": Int(1), "max_len": Int(0), "n_routes": Int(1), "lam": Float(0, open_lo=True),
        "seed": Seed()}, check=lambda r: np.allclose(r["mean"], 2 * np.cos(np.arange(3))) or pytest.fail())
    case(m, "far_mass_bound", Dh.far_mass_bound, dict(n_far=4, n_near=2, lam=1.0), {
        "n_far": Bad(("negative", -1), ("nan", NAN), ("wrong-type str", "4")), "n_near": Int(1),
        "lam": Float(0)}, check=lambda b: close(b, 4 / (4 + 2 * math.exp(2))))
    ctx = {"contexts": Seq((("negative", -1), ("below", 3), ("fraction", 20.5))), "n_near": Int(1, names=("contexts",)),
           "lam": Float(0), "d": Int(2), "n_trials": Int(1), "seed": Seed()}
    case(m, "far_mass_rotation", Dh.far_mass_rotation, dict(contexts=[8, 16], n_near=4, lam=1.0, d=8, n_trials=3,
                                                            seed=0), ctx,
         check=lambda r: np.all(r["min"] >= r["bound"] - 1e-12) or pytest.fail(str(r)))
    case(m, "far_mass_bias", Dh.far_mass_bias, dict(contexts=[8, 16], n_near=4, lam=1.0, d=8, slope=0.5,
                                                    n_trials=3, seed=0, gate=False), {
        **ctx, "slope": Float(0, open_lo=True), "gate": Bool()},
        check=lambda r: np.all(r["max"] <= r["upper"] + 1e-12) or pytest.fail(str(r)))
    case(m, "bias_far_mass_upper_bound", Dh.bias_far_mass_upper_bound, dict(n_near=2, lam=1.0, slope=1.0,
                                                                            near_logit=None), {
        "n_near": Int(1), "lam": Float(0), "slope": Float(0, open_lo=True), "near_logit": Float(optional=True)},
        check=lambda u: close(u, (math.exp(1 - 2) / (1 - math.exp(-1))) / (
            math.exp(-1) * (1 - math.exp(-2)) / (1 - math.exp(-1)) + math.exp(1 - 2) / (1 - math.exp(-1)))))
    case(m, "value_far_energy", Dh.value_far_energy, dict(n_far=3, n_near=2, d=4, sigma=0.5, vocab=4, noise_std=0.1,
                                                          n_trials=50, seed=0, table_seed=0, transport=False), {
        "n_far": Int(1), "n_near": Int(0), "d": Bad(("above odd", 3), ("zero", 0), ("negative", -2)),
        "sigma": Float(0), "vocab": Int(1), "noise_std": Float(0), "n_trials": Int(2), "seed": Seed(),
        "table_seed": Seed(), "transport": Bool()},
        check=lambda r: close(r["closed_form"], 1 + 4 * 0.01 / 3))
    case(m, "value_far_energy_closed_form", Dh.value_far_energy_closed_form, dict(
        weights=np.array([0.5, 0.5]), offsets=np.array([1, 2]), b=np.array([1.0, 0.0]), noise_std=0.0,
        phi=np.array([0.5])), {
        "weights": Bad(("nan", np.array([NAN, 0.5])), ("wrong-shape", np.ones(3)), ("empty", np.zeros(0))),
        "offsets": Bad(("negative", np.array([-1, 2])), ("wrong-shape", np.array([1]))),
        "b": Bad(("above odd", np.ones(3)), ("nan", np.array([NAN, 0.0]))), "noise_std": Float(0),
        "phi": Bad(("wrong-shape", np.ones(2)), ("nan", np.array([NAN])))},
        check=lambda e: close(e, 0.25 * (1 + 2 * 0.5 + 1)))

    from path_lib.experiments import farmass as Fm
    from path_lib.nn.model import TinyLM
    m = "path_lib.experiments.farmass"

    def lm(attention="nope"):
        torch.manual_seed(0)
        return TinyLM(16, d_model=8, n_layers=1, n_heads=2, attention=attention)
    tokens = torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(0))

    def far_ref(out):                          # NoPE's last-query row by hand: softmax of q k^T / sqrt(D)
        model = lm()
        caught = Fm.attention_inputs(model, tokens)
        q, k, _ = caught[0]["layer"].qkv(caught[0]["x"])
        w = torch.softmax(torch.einsum("bhd,bthd->bht", q[:, -1], k) / 2.0, -1)
        torch.testing.assert_close(torch.as_tensor(out["far_mass"][0]), w[..., :3].sum(-1).T.double())
        assert out["n_near"] == 3 and out["n_far"] == 3
    case(m, "far_mass", Fm.far_mass, dict(model=Fresh(lm), tokens=tokens, distance=2), {
        "model": Bad(("wrong-type str", "m"), ("wrong-type module", nn.Linear(2, 2))),
        "tokens": Bad(*TENSOR_JUNK, ("wrong-shape 1d", tokens[0]), ("wrong-dtype", tokens.double()),
                      ("above vocabulary", tokens + 16), ("empty", tokens[:, :0])),
        "distance": Int(0, names=("tokens",))}, check=far_ref)
    case(m, "attention_inputs", Fm.attention_inputs, dict(model=Fresh(lm), tokens=tokens), {
        "model": Bad(("wrong-type str", "m")), "tokens": Bad(*TENSOR_JUNK, ("wrong-dtype", tokens.float()))},
        check=lambda c: len(c) == 1 and c[0]["x"].shape == (2, 6, 8) or pytest.fail())
    layer_input = torch.randn(2, 6, 8)
    case(m, "last_query_row", Fm.last_query_row, dict(layer=Fresh(lambda: lm("path").blocks[0].attn),
                                                      x=layer_input, token_ids=None), {
        "layer": Bad(("wrong-type str", "attn"), ("wrong-type module", nn.Linear(8, 8))),
        "x": Bad(*TENSOR_JUNK, ("wrong-shape", layer_input[0]), ("nan", layer_input.clone().fill_(NAN)),
                 ("wrong-shape width", torch.randn(2, 6, 5))),
        "token_ids": Bad(("wrong-type str", "ids"))},
        check=lambda r: torch.allclose(r["weights"].sum(-1), torch.ones(2, 2)) or pytest.fail())
    data = torch.randint(0, 16, (200,), generator=torch.Generator().manual_seed(1)).to(torch.uint8)
    case(m, "far_mass_by_length", Fm.far_mass_by_length, dict(model=Fresh(lm), data=data, lengths=[8, 12],
                                                              distance=3, n_windows=2, seed=0, chunk_tokens=64,
                                                              device=None), {
        "model": Bad(("wrong-type str", "m")), "data": Bad(*TENSOR_JUNK, ("wrong-shape", data[None]),
                                                            ("wrong-shape short", data[:10])),
        "lengths": Seq((("below", 4), ("negative", -8), ("fraction", 8.5))), "distance": Int(0, names=("lengths",)),
        "n_windows": Int(1), "seed": Seed(), "chunk_tokens": Int(1), "device": Device()},
        check=lambda r: r["far_mass"].shape == (1, 2, 2) and r["bound_violations"] == 0 or pytest.fail())
    fm = Fm.far_mass_by_length(lm(), data, [8, 12], distance=3, n_windows=2)
    case(m, "far_mass_table", Fm.far_mass_table, dict(results={"NoPE": fm}, fmt="{:.2f}"), {
        "results": Bad(("wrong-type list", [fm]), ("empty", {}), ("wrong-shape", {"NoPE": {}})),
        "fmt": Bad(("wrong-type int", 3), ("unknown", "{:q}"))},
        check=lambda t: t.startswith("| model | L=8 | L=12 |") or pytest.fail(t))
    run = {"model": "NoPE", "far_mass": {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in fm.items()}}
    case(m, "far_mass_over_seeds", Fm.far_mass_over_seeds, dict(runs=[run, dict(run)]), {
        "runs": Bad(("wrong-type str", "runs"), ("wrong-type items", [1]), ("wrong-shape", [{"model": "x", "far_mass": {"lengths": [8]}}]),
                    ("none", None))},
        check=lambda o: np.allclose(o["NoPE"]["mean"], fm["mean_far_mass"]) and o["NoPE"]["n"] == 2
        or pytest.fail())


def _hardware_records_cases():
    from path_lib import hardware as Hw, records as R

    m = "path_lib.hardware"
    case(m, "describe_device", Hw.describe_device, dict(dev="cpu"), {"dev": Device(optional=True)},
         check=lambda i: i.kind == "cpu" or pytest.fail())
    for name in ("hardware_class", "preset_name", "compute_dtype"):
        case(m, name, getattr(Hw, name), dict(dev="cpu"), {"dev": Device(optional=True)})
    a100 = Hw.DeviceInfo("cuda", (8, 0), 166912, "A100", sms=108, memory_gb=80.0)
    case(m, "pick_preset", Hw.pick_preset, dict(tiny=1, full=3, small=None, dev=a100), {
        "dev": Device(optional=True)}, check=lambda p: p == 3 or pytest.fail())
    case(m, "default_small", Hw.default_small, dict(tiny={"T": 64, "lr": 1e-2}, full={"T": 1024, "lr": 1e-4}), {},
         check=lambda d: d == {"T": 256, "lr": 1e-3} or pytest.fail(str(d)))
    case(m, "estimate_seconds", Hw.estimate_seconds, dict(flops=1e12, nbytes=0.0, launches=0, gpu="t4",
                                                          precision="half"), {
        "flops": Float(0), "nbytes": Float(0), "launches": Float(0), "gpu": Choice(["t4"]),
        "precision": Choice(["half"])}, check=lambda s: close(s, 1e12 / (65e12 * 0.3)))
    case(m, "DeviceInfo", Hw.DeviceInfo, dict(kind="cuda", name="x", capability=(8, 0), memory_gb=40.0, sms=100,
                                              smem=1024), {
        "kind": Choice(["cuda"]), "name": Bad(("wrong-type int", 3)),
        "capability": Bad(("wrong-shape", (8,)), ("negative", (-1, 0)), ("fraction", (8.5, 0)),
                          ("wrong-type str", "80")),
        "memory_gb": Float(0), "sms": Int(0), "smem": Int(0)})
    case(m, "GPURates", Hw.GPURates, dict(name="g", half_tflops=1.0, fp32_tflops=1.0, fp64_tflops=1.0,
                                          bandwidth_gbs=1.0), {
        "name": Bad(("wrong-type int", 3)), "half_tflops": Float(0, open_lo=True),
        "bandwidth_gbs": Float(0, open_lo=True)})
    for name in ("device", "forced_preset"):
        case(m, name, getattr(Hw, name), {}, {})

    m = "path_lib.records"
    name = Bad(("unknown", "no-such-record"), ("wrong-type int", 3), ("none", None))
    case(m, "record_path", R.record_path, dict(name="lm"), {"name": name},
         check=lambda p: p == "results/lm/lm_full.json" or pytest.fail())
    case(m, "current_schema", R.current_schema, dict(name="bench"), {"name": name},
         check=lambda v: v == 2 or pytest.fail())
    case(m, "schema_version", R.schema_version, dict(data={"schema": 2}, name="bench"), {
        "data": Bad(("wrong-type list", []), ("unknown schema", {"schema": 7}), ("wrong-type schema", {"schema": "2"}),
                    names=("bench",)), "name": name}, check=lambda v: v == 2 or pytest.fail())
    case(m, "provenance", R.provenance, dict(command="x"), {"command": Bad(("wrong-type int", 3))},
         check=lambda p: p["command"] == "x" or pytest.fail())
    case(m, "write_result", R.write_result, dict(path=Fresh(lambda: _tmp("w.json")), data={"a": 1}, command="x"), {
        "path": PathArg(optional=False), "data": Bad(("wrong-type list", [1]), ("none", None)),
        "command": Bad(("wrong-type int", 3))},
        check=lambda p: R.read_result(p)["a"] == 1 or pytest.fail())
    case(m, "read_result", R.read_result, dict(path=Fresh(lambda: R.write_result(_tmp("r.json"), {"a": 1}))), {
        "path": Bad(("wrong-type int", 3), ("folder", Fresh(lambda: _tmp("d", folder=True))), ("empty", ""),
                    ("wrong-type file", Fresh(lambda: _tmp_text("{not json"))),
                    ("wrong-shape json", Fresh(lambda: _tmp_text("[1, 2]"))))},
        check=lambda d: d["a"] == 1 or pytest.fail())
    relpath = Bad(("wrong-type int", 3), ("none", None), ("empty", ""), ("unknown outside", "../x.json"))
    case(m, "load_result", R.load_result, dict(relpath="results/lm/lm_full.json"), {"relpath": relpath},
         check=lambda d: "provenance" in d or pytest.fail())
    case(m, "load_record", R.load_record, dict(name="lm"), {"name": name})
    case(m, "optional_result", R.optional_result, dict(relpath="results/lm/lm_full.json", what="lm"), {
        "relpath": Bad(("wrong-type int", 3), ("none", None)), "what": Bad(("wrong-type int", 3))})
    case(m, "optional_record", R.optional_record, dict(name="lm", what=None), {"name": name,
                                                                              "what": Bad(("wrong-type int", 3))})
    case(m, "provenance_label", R.provenance_label, dict(data=R.write_result(_tmp("p.json"), {}) and R.read_result(
        _TMP[-1] / "p.json")), {"data": Bad(("wrong-type list", []), ("empty", {}), ("wrong-shape", {"provenance": 3}))},
        check=lambda t: t.startswith("Recorded run: ") or pytest.fail(t))
    for name in ("repo_root", "records_base"):
        case(m, name, getattr(R, name), {}, {})

    from path_lib import distributed as Dd
    m = "path_lib.distributed"
    case(m, "summary_numel", Dd.summary_numel, dict(batch=1, chunk_len=4, n_heads=2, n_kv_heads=1, head_dim=3,
                                                    value_dim=2, gate=True), {
        "batch": Int(0), "chunk_len": Int(0), "n_heads": Int(0), "n_kv_heads": Int(0), "head_dim": Int(0),
        "value_dim": Int(0, optional=True), "gate": Bool()},
        check=lambda n: n == 1 * 1 * (4 * 5 + 9) + 1 * 2 * 4 or pytest.fail(str(n)))
    case(m, "context_parallel_costs", Dd.context_parallel_costs, dict(seq_len=8, world_size=2, n_heads=2,
                                                                      head_dim=4, n_kv_heads=None, value_dim=None,
                                                                      batch=1, gate=False, bytes_per_element=4,
                                                                      block_size=4, rank=None), {
        "seq_len": Int(1, names=("world_size",)), "world_size": Int(1, names=("seq_len",)), "n_heads": Int(1),
        "head_dim": Int(1), "n_kv_heads": Int(1, optional=True, names=("n_heads",)), "value_dim": Int(1, optional=True),
        "batch": Int(1), "gate": Bool(), "bytes_per_element": Int(1), "block_size": Int(1),
        "rank": Int(0, optional=True, names=("world_size",))},
        check=lambda c: c["chunk_len"] == 4 and c["extra_received"] == 2 * 16 or pytest.fail(str(c)))
    from helpers import numpy_path_attention, random_path_inputs
    ins = random_path_inputs(B=1, T=6, Hq=2, Hk=1, D=4, gate=True, seed=3)
    case(m, "chunked_path_attention", Dd.chunked_path_attention, dict(
        q=ins[0], k=ins[1], v=ins[2], w=ins[3], beta=ins[4], g=ins[5], n_chunks=3, scale=None, block_size=2,
        check_values=True, impl="blockwise"), {
        "n_chunks": Bad(("zero", 0), ("negative", -1), ("fraction", 1.5), ("above non-divisor", 4), ("truthy", True)),
        "block_size": Int(1), "check_values": Bool(), "impl": Choice(["blockwise"]), "scale": Bad(
            ("zero", 0.0), ("negative", -1.0), ("nan", NAN), ("inf", INF), ("wrong-type str", "1")),
        "beta": Bad(("nan", ins[4].clone().fill_(NAN)), ("above", ins[4] + 3)),
        "w": Bad(("nan", ins[3].clone().fill_(NAN))), "g": Bad(("nan", ins[5].clone().fill_(NAN)),
                                                              ("above", -ins[5]))},
        check=lambda o: torch.testing.assert_close(o, torch.as_tensor(numpy_path_attention(*ins))))
    case(m, "context_parallel_path_attention", Dd.context_parallel_path_attention, dict(
        q=ins[0], k=ins[1], v=ins[2], w=ins[3], beta=ins[4], g=ins[5], group=None), {
        "group": Bad(("wrong-type str", "world"), ("wrong-type int", 0))}, valid=False)



# ----------------------------------------------------------------------------------------------
# path_lib.experiments: configurations, helpers and runners (a runner's valid call is in test_lm.py /
# test_convert.py / test_constructions.py: here its bad arguments, refused before any training)
# ----------------------------------------------------------------------------------------------

def _experiment_cases():
    from path_lib.experiments import constructions as Ks, convert as Cv, convert_lm as Cl, lm as Lm
    from path_lib.nn.model import TinyLM
    from path_lib.training.corpus import Corpus
    from path_lib.training.loop import TrainConfig

    gen = torch.Generator().manual_seed(5)
    data = torch.randint(32, 127, (3000,), generator=gen).to(torch.uint8)
    corpus = Corpus(data[:2000], data[2000:], {"sha1": "x"})
    cfg = Lm.LMConfig(d_model=8, n_layers=1, n_heads=2, train_len=8, batch=2, steps=2, warmup=1,
                      eval_mults=(1, 2), eval_tokens=16, eval_chunk_tokens=64, probe_mults=(8,), probe_examples=2,
                      corpus_bytes=3000)
    m = "path_lib.experiments.lm"
    pos = lambda: Int(1)                                              # noqa: E731
    case(m, "LMConfig", Lm.LMConfig, dict(d_model=8, n_heads=2), {
        "d_model": Int(1, names=("n_heads",)), "n_layers": pos(), "n_heads": Int(1, names=("d_model",)),
        "train_len": pos(), "batch": pos(), "steps": pos(), "lr": Float(0, open_lo=True), "weight_decay": Float(0),
        "warmup": Int(0), "clip": Float(0), "probe_mix": Float(0, 1), "eval_mults": Seq((("zero", 0), ("fraction", 1.5))),
        "eval_tokens": pos(), "eval_chunk_tokens": pos(), "eval_max_len": Bad(("wrong-type list", []),
                                                                              ("zero", {"PaTH": 0})),
        "probe_mults": Seq((("negative", -1),)), "probe_examples": pos(), "corpus_bytes": pos(), "seed": Seed(),
        "train_seconds": Float(0, open_lo=True, optional=True), "path_block_size_train": pos(),
        "path_block_size_eval": pos(), "far_mass_windows": Int(0), "far_mass_distance": Int(0, optional=True)},
        check=lambda c: c.eval_mults == (1, 2, 4, 8) or pytest.fail(str(c)))
    case(m, "build_model", Lm.build_model, dict(name="PaTH", cfg=cfg, device="cpu", path_backend_name="blockwise",
                                                seed=1), {
        "name": Choice(["PaTH"], names=("model",)), "cfg": Bad(("wrong-type dict", {})), "device": Device(optional=False),
        "path_backend_name": Choice(["blockwise"]), "seed": Seed(optional=True)},
        check=lambda mdl: type(mdl.blocks[0].attn).__name__ == "PaTHAttention" or pytest.fail())
    case(m, "token_sigma_min", Lm.token_sigma_min, dict(train_len=64), {"train_len": Int(1)},
         check=lambda v: close(v, math.sqrt(2 / 32)))
    case(m, "path_backend", Lm.path_backend, dict(device="cpu", head_dim=64, dtype=torch.bfloat16), {
        "device": Device(optional=False), "head_dim": Int(1), "dtype": Bad(("wrong-type str", "bf16"))},
        check=lambda b: b == "blockwise" or pytest.fail(b))
    case(m, "pick_backend", Lm.pick_backend, dict(cfg=cfg, device="cpu", verbose=False), {
        "cfg": Bad(("wrong-type dict", {})), "device": Device(optional=False), "verbose": Bool()},
        check=lambda b: b == "blockwise" or pytest.fail(b))
    filler = data[:500]
    g = lambda: torch.Generator().manual_seed(0)                       # noqa: E731
    case(m, "make_passkey", Lm.make_passkey, dict(length=64, filler=filler, generator=Fresh(g)), {
        "length": Bad(("below", 63), ("zero", 0), ("fraction", 64.5), ("truthy", True), ("huge", 2 ** 70)),
        "filler": Bad(*TENSOR_JUNK, ("wrong-shape", filler[None]), ("wrong-shape short", filler[:10]),
                      ("wrong-dtype float", filler.float())), "generator": Bad(("wrong-type int", 0), ("none", None))},
        check=lambda r: r[0].shape == (64,) and bytes(r[0][-23:-5].tolist()) == b"\n# the passkey is "
        or pytest.fail(str(bytes(r[0].tolist()))))
    case(m, "passkey_batch", Lm.passkey_batch, dict(n=2, length=64, filler=filler, generator=Fresh(g)), {
        "n": Int(1), "length": Bad(("below", 10)), "filler": Bad(("wrong-type list", [1])),
        "generator": Bad(("wrong-type str", "g"))}, check=lambda b: b.shape == (2, 64) or pytest.fail())

    def lm():
        torch.manual_seed(0)
        return TinyLM(256, 8, 1, 2, attention="nope")
    case(m, "probe_retrieval", Lm.probe_retrieval, dict(model=Fresh(lm), lengths=[64], n_examples=2, filler=filler,
                                                        seed=0, device="cpu", chunk_tokens=128), {
        "model": Bad(("wrong-type str", "m")), "lengths": Seq((("below", 10), ("fraction", 64.5))),
        "n_examples": Int(1), "filler": Bad(("wrong-type list", [1]), ("wrong-shape short", filler[:5])),
        "seed": Seed(), "device": Device(optional=False), "chunk_tokens": Int(1)},
        check=lambda r: r["lengths"] == [64] and r["n"] == 2 or pytest.fail(str(r)))
    case(m, "evaluate_lengths", Lm.evaluate_lengths, dict(model=Fresh(lm), data=data[2000:], lengths=[8, 16],
                                                          train_len=8, tokens_per_length=16, chunk_tokens=64, seed=0,
                                                          device="cpu"), {
        "model": Bad(("wrong-type str", "m")), "data": Bad(*TENSOR_JUNK, ("wrong-shape", data[None]),
                                                            ("wrong-shape short", data[:10])),
        "lengths": Seq((("zero", 0), ("negative", -8), ("fraction", 8.5))), "train_len": Int(1),
        "tokens_per_length": Int(1), "chunk_tokens": Int(1), "seed": Seed(), "device": Device(optional=False)},
        check=lambda r: r["scored_bytes"] == [16, 16] and all(math.isfinite(v) for v in r["loss"]) or pytest.fail())
    case(m, "train_model", Lm.train_model, dict(model=Fresh(lm), corpus=corpus, cfg=cfg, steps=1, device="cpu"), {
        "model": Bad(("wrong-type str", "m")), "corpus": Bad(("wrong-type tensor", data), ("none", None)),
        "cfg": Bad(("wrong-type dict", {})), "steps": Int(1, optional=True), "device": Device(optional=False),
        "log_every": Int(1), "callback": Callable(optional=True), "deadline": Bad(("nan", NAN)),
        "checkpoint_path": PathArg(), "stop_after_steps": Int(0, optional=True)},
        check=lambda r: r["steps"] == 1 or pytest.fail())
    case(m, "time_step", Lm.time_step, dict(name="NoPE", cfg=cfg, corpus=corpus, device="cpu", n=1), {
        "name": Choice(["NoPE"], names=("model",)), "cfg": Bad(("wrong-type dict", {})),
        "corpus": Bad(("wrong-type list", [])), "device": Device(optional=False),
        "path_backend_name": Choice(["blockwise"]), "n": Int(1)}, check=lambda t: t > 0 or pytest.fail())
    ev = {"lengths": [8, 16], "ppl": [2.0, 3.0], "ratio": [1.0, 1.5]}
    probe = {"lengths": [8], "exact": [0.5]}
    case(m, "lm_metrics", Lm.lm_metrics, dict(ev=ev, probe=probe, train_len=8, final_loss=0.7), {
        "ev": Bad(("wrong-type list", []), ("empty", {}), ("wrong-shape", {"lengths": [8], "ppl": [], "ratio": []})),
        "probe": Bad(("wrong-type str", "p"), ("empty", {})), "train_len": Int(1),
        "final_loss": Float(inf_ok=True)},
        check=lambda d: d == {"ppl_train": 2.0, "final_loss": 0.7, "ratio_1x": 1.0, "ppl_1x": 2.0, "ratio_2x": 1.5,
                              "ppl_2x": 3.0, "passkey_1x": 0.5} or pytest.fail(str(d)))
    runner_bad = {"cfg": Bad(("wrong-type dict", {}), ("none", None)), "device": Device(), "corpus": Bad(
        ("wrong-type str", "stdlib"))}
    case(m, "run_model", Lm.run_model, dict(name="NoPE", cfg=cfg, corpus=corpus, steps=1, device="cpu"), {
        "name": Choice(["NoPE"], names=("model",)), **runner_bad, "steps": Int(1), "seed": Seed(optional=True),
        "deadline": Bad(("nan", NAN)), "checkpoint_path": PathArg(), "stop_after_steps": Int(0, optional=True),
        "eval_guard": Callable(optional=True), "path_backend_name": Choice(["blockwise"])}, valid=False)
    case(m, "run_experiment", Lm.run_experiment, dict(cfg=cfg, models=["NoPE"], device="cpu"), {
        "cfg": Bad(("wrong-type dict", {}), ("none", None)), "models": Bad(("wrong-type str", "NoPE"),
                                                                           ("unknown", ["nosuch"]), ("empty", [])),
        "device": Device()}, valid=False)
    rec = {"config": {"train_len": 8, "eval_mults": [1, 2]}, "complete": True, "records": [
        {"model": mod, "seed": sd, "steps_done": 2, "steps_planned": 2, "tokens_seen": 32, "complete": True,
         "schedule": {}, "data_key": f"d{sd}", "final_lr": 1e-3, "wall_seconds": 1.0,
         "metrics": {"ratio_1x": 1.0, "ratio_2x": 1.0 + 0.5 * (mod == "RoPE") + 0.01 * sd,
                     "ppl_1x": 2.0 - 0.1 * (mod == "PaTH") + 0.01 * sd}}
        for mod in ("RoPE", "PaTH") for sd in range(3)]}
    recs = rec["records"]
    case(m, "seed_curves", Lm.seed_curves, dict(records=recs, prefix="ratio", min_seeds=3, models=None), {
        "records": Bad(("wrong-type str", "r"), ("wrong-type items", [1]), ("none", None)),
        "prefix": Bad(("wrong-type int", 3), ("unknown", "nosuch"), ("empty", "")), "min_seeds": Int(1),
        "models": Bad(("wrong-type str", "PaTH"), ("unknown", ["x"]))},
        check=lambda c: close(c["RoPE"]["mean"][1], 1.51) if c["PaTH"]["mults"] == [1, 2] else pytest.fail(str(c)))
    case(m, "record_inequality", Lm.record_inequality, dict(rec=rec, min_seeds=3), {
        "rec": Bad(("wrong-type list", []), ("empty", {}), ("none", None)), "min_seeds": Int(1)},
        check=lambda why: why is None or pytest.fail(why))
    case(m, "steps_table", Lm.steps_table, dict(rec=rec), {"rec": Bad(("wrong-type list", []), ("empty", {}))},
         check=lambda t: t.count("| PaTH |") == 3 or pytest.fail(t))
    case(m, "flat_and_degrading", Lm.flat_and_degrading, dict(records=recs, key="ratio_2x", tol=0.05), {
        "records": Bad(("wrong-type str", "r"), ("none", None)), "key": Bad(("unknown", "ratio_9x"),
                                                                            ("wrong-type int", 2)),
        "tol": Float(0)}, check=lambda fd: fd == (["PaTH"], ["RoPE"]) or pytest.fail(str(fd)))
    case(m, "paper_checks", Lm.paper_checks, dict(records=recs), {
        "records": Bad(("wrong-type str", "r"), ("wrong-type items", [3]), ("none", None))},
        check=lambda d: (len(d) == 3 and all(d.values())) or pytest.fail(str(d)))
    res = {"config": {"train_len": 8}, "models": {"PaTH": {"eval": {"lengths": [8, 16], "ratio": [1.0, 1.2],
                                                                    "ppl": [2.0, 2.4]}}}}
    case(m, "ratio_table", Lm.ratio_table, dict(res=res, which="ratio"), {
        "res": Bad(("wrong-type list", []), ("empty", {})), "which": Choice(["ratio"])},
        check=lambda t: t.splitlines()[2] == "| PaTH | 2.000 | 1.00 | 1.20 |" or pytest.fail(t))
    run = {"train": {"final_loss": 0.5, "seconds": 1.0, "steps": 2}, "eval": {"lengths": [8, 16], "ppl": [2.0, 3.0],
                                                                               "ratio": [1.0, 1.5]},
           "probe": {"lengths": [8], "exact": [0.5]}, "complete": True, "eval_seconds": 0.5}
    case(m, "summary_line", Lm.summary_line, dict(name="PaTH", r=run, train_len=8), {
        "name": Bad(("wrong-type int", 3)), "r": Bad(("wrong-type list", []), ("empty", {})), "train_len": Int(1)},
        check=lambda t: t.startswith("PaTH") or pytest.fail(t))

    m = "path_lib.experiments.convert_lm"
    ccfg = Cl.ConvConfig(d_model=8, n_layers=1, n_heads=2, train_len=8, batch=2, teacher_steps=1, stage1_steps=1,
                         stage2_steps=1, eval_mults=(1,), eval_tokens=16, id_batches=1, probe_steps=1, probe_batch=2,
                         probe_mults=(1,), probe_eval_seqs=2, corpus_bytes=3000)
    case(m, "ConvConfig", Cl.ConvConfig, {}, {
        "d_model": Int(1, names=("n_heads",)), "n_heads": Int(1, names=("d_model",)), "train_len": pos(),
        "batch": pos(), "ff_mix": Float(0, 1), "teacher_steps": pos(), "teacher_lr": Float(0, open_lo=True),
        "teacher_warmup": Int(0), "stage2_lr": Float(0, open_lo=True), "min_lr_ratio": Float(0, 1),
        "weight_decay": Float(0), "clip": Float(0), "init": Choice(["nope"]), "beta_init": Float(
            0, 2, open_lo=True, open_hi=True), "forget_init": Float(0, 1, open_lo=True, open_hi=True),
        "eval_mults": Seq((("zero", 0),)), "id_batches": pos(), "probe_p_ignore": Float(0, 1, open_hi=True),
        "probe_mults": Seq((("negative", -4),)), "scratch_fox": Bool(), "init_ablation": Bool()},
        check=lambda c: c.arms() == Cl.ARMS or pytest.fail())
    case(m, "flip_flop_bytes", Cl.flip_flop_bytes, dict(n=2, length=8, p_ignore=0.5, generator=Fresh(g)), {
        "n": Int(1, names=("batch_size",)), "length": Bad(("above odd", 9), ("below", 2), ("fraction", 8.5)),
        "p_ignore": Float(0, 1, open_hi=True), "generator": Bad(("wrong-type int", 0))},
        check=lambda xy: bytes(xy[0][0, ::2].tolist()).strip(b"wri") == b"" or pytest.fail())
    case(m, "conversion_batch", Cl.conversion_batch, dict(data=data, cfg=ccfg, generator=Fresh(g)), {
        "data": Bad(*TENSOR_JUNK, ("wrong-shape", data[None])), "cfg": Bad(("wrong-type dict", {})),
        "generator": Bad(("wrong-type int", 0))}, check=lambda xy: xy[0].shape == (2, 8) or pytest.fail())
    case(m, "phase_config", Cl.phase_config, dict(cfg=ccfg, phase="stage1", seed=3), {
        "cfg": Bad(("wrong-type dict", {})), "phase": Choice(["stage1"]), "seed": Seed()},
        check=lambda tc: (tc.steps, tc.seed, tc.lr) == (1, 3, ccfg.stage1_lr) or pytest.fail(str(tc)))
    case(m, "phase_data_seed", Cl.phase_data_seed, dict(phase="stage2", seed=3), {
        "phase": Choice(["stage2"]), "seed": Seed()}, check=lambda v: v == 1000 * Cl.PHASES.index("stage2") + 4
        or pytest.fail())
    case(m, "schedule_key", Cl.schedule_key, dict(cfg=ccfg, phases=("teacher",)), {
        "cfg": Bad(("wrong-type dict", {})), "phases": Bad(("unknown", ("x",)), ("wrong-type str", "teacher"),
                                                           ("empty", ()))},
        check=lambda d: d["steps"] == 1 and len(d["phases"]) == 1 or pytest.fail(str(d)))

    def path_lm():
        torch.manual_seed(0)
        return TinyLM(256, 8, 1, 2, attention="path")
    batches = [(data[:16].long().view(2, 8), data[1:17].long().view(2, 8))]
    case(m, "path_statistics", Cl.path_statistics, dict(model=Fresh(path_lm), batches=batches), {
        "model": Bad(("wrong-type str", "m")), "batches": Bad(("wrong-type tensor", data), ("empty", []),
                                                              ("wrong-shape", [data[:16]]))},
        check=lambda d: 0 <= d["beta_mean"] <= 2 or pytest.fail(str(d)))
    arm_bad = {"model": Bad(("wrong-type str", "m")), "corpus": Bad(("wrong-type list", [])),
               "cfg": Bad(("wrong-type dict", {})), "device": Device(optional=False)}
    case(m, "light_metrics", Cl.light_metrics, dict(model=Fresh(path_lm), corpus=corpus, cfg=ccfg, device="cpu"), {
        **arm_bad, "teacher": Bad(("wrong-type str", "t"))}, check=lambda d: "loss_id" in d or pytest.fail())
    case(m, "flip_flop_probe", Cl.flip_flop_probe, dict(model=Fresh(path_lm), cfg=ccfg, seed=0, device="cpu"), {
        "model": Bad(("wrong-type str", "m")), "cfg": Bad(("wrong-type dict", {})), "seed": Seed(),
        "device": Device(optional=False)}, valid=False)
    case(m, "evaluate_arm", Cl.evaluate_arm, dict(model=Fresh(path_lm), corpus=corpus, cfg=ccfg, seed=0), {
        **arm_bad, "seed": Seed()}, valid=False)
    case(m, "run_arm", Cl.run_arm, dict(arm="PaTH scratch", cfg=ccfg, corpus=corpus, seed=0), {
        "arm": Choice(["PaTH scratch"]), "cfg": Bad(("wrong-type dict", {})), "corpus": Bad(("wrong-type str", "c")),
        "seed": Seed(), "device": Device(optional=False), "backend": Choice(["blockwise"])}, valid=False)
    case(m, "run_conversion", Cl.run_conversion, dict(cfg=ccfg, seeds=(0,), device="cpu"), {
        "cfg": Bad(("wrong-type dict", {})), "seeds": Seq((("negative", -1), ("fraction", 0.5))), "device": Device()},
        valid=False)
    conv = {"runs": [{"complete": True, "record": dict(r, model=a)} for r in recs[:3]
                     for a in ("RoPE teacher", "PaTH converted")] + [{"complete": False}]}
    case(m, "conversion_records", Cl.conversion_records, dict(res=conv), {
        "res": Bad(("wrong-type list", []), ("empty", {}))}, check=lambda r: len(r) == 6 or pytest.fail())
    case(m, "conversion_claims", Cl.conversion_claims, dict(records=recs), {
        "records": Bad(("wrong-type str", "r"), ("wrong-type items", [3]), ("none", None), ("empty", []))},
        check=lambda d: list(d.values()) == [True] or pytest.fail(str(d)))
    case(m, "stage_table", Cl.stage_table, dict(res=conv, keys=("loss_id",)), {
        "res": Bad(("wrong-type list", []), ("empty", {})), "keys": Bad(("wrong-type str", "loss_id"), ("empty", ()))})

    m = "path_lib.experiments.convert"

    def teacher():
        torch.manual_seed(0)
        return TinyLM(16, 8, 1, 2, attention="rope")
    toks = torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(2))
    tok_bad = Bad(*TENSOR_JUNK, ("wrong-dtype", toks.float()), ("above", toks + 16), ("wrong-shape", toks[0]))
    case(m, "convert_rope_to_path", Cv.convert_rope_to_path, dict(teacher=Fresh(teacher), attention="path",
                                                                  init="nope", beta_init=0.1, forget_init=0.99,
                                                                  seed=0), {
        "teacher": Bad(("wrong-type str", "t"), ("wrong-type module", nn.Linear(2, 2))),
        "attention": Choice(["path"]), "init": Choice(["nope"]), "beta_init": Float(0, 2, open_lo=True, open_hi=True),
        "forget_init": Float(0, 1, open_lo=True, open_hi=True), "seed": Seed()},
        check=lambda st: set(Cv.new_parameter_names(st)) <= set(st.state_dict()) or pytest.fail())
    case(m, "remove_rope", Cv.remove_rope, dict(teacher=Fresh(teacher)), {"teacher": Bad(("wrong-type str", "t"))},
         check=lambda st: type(st.blocks[0].attn).__name__ == "NoPEAttention" or pytest.fail())
    case(m, "new_parameter_names", Cv.new_parameter_names, dict(model=Fresh(path_lm)), {
        "model": Bad(("wrong-type str", "m"), ("none", None))}, check=lambda n: len(n) > 0 or pytest.fail())
    pair = dict(student=Fresh(lambda: Cv.convert_rope_to_path(teacher())), teacher=Fresh(teacher))
    case(m, "attention_mse", Cv.attention_mse, dict(**pair, inputs=toks), {
        "student": Bad(("wrong-type str", "s")), "teacher": Bad(("none", None)), "inputs": tok_bad},
        check=lambda v: v >= 0 or pytest.fail())
    case(m, "logit_kl", Cv.logit_kl, dict(**pair, inputs=toks, targets=None), {
        "student": Bad(("wrong-type str", "s")), "inputs": tok_bad,
        "targets": Bad(("wrong-shape", toks[:, :2]), ("wrong-dtype", toks.float()))},
        check=lambda v: v >= -1e-9 or pytest.fail())
    tc = TrainConfig(steps=1, warmup=0)
    for name in ("distill_attention", "distill_logits"):
        case(m, name, getattr(Cv, name), dict(**pair, batches=[(toks, toks)], config=tc), {
            "student": Bad(("wrong-type str", "s")), "batches": Bad(("wrong-type tensor", toks), ("empty", [])),
            "config": Bad(("wrong-type dict", {}))}, valid=False)
    case(m, "convert_and_distill", Cv.convert_and_distill, dict(teacher=Fresh(teacher), batches=[(toks, toks)],
                                                                stage1=tc, stage2=tc), {
        "teacher": Bad(("wrong-type str", "t")), "batches": Bad(("wrong-type int", 3)),
        "stage1": Bad(("wrong-type dict", {})), "stage2": Bad(("none", None))}, valid=False)

    m = "path_lib.experiments.constructions"
    swaps = Bad(("wrong-type str", "01"), ("above", [(0, 5)]), ("negative", [(-1, 2)]), ("wrong-shape", [(0, 1, 2)]),
                ("unknown same", [(1, 1)]), ("wrong-type float", [(0.0, 1.0)]), ("none", None))
    case(m, "validate_swaps", Ks.validate_swaps, dict(swaps=[(0, 1), (1, 2)], name="swaps"), {
        "swaps": swaps, "name": Bad(("wrong-type int", 3))},
        check=lambda s: s == [(0, 1), (1, 2)] or pytest.fail())
    case(m, "swap_token", Ks.swap_token, dict(x=1, y=0), {"x": Int(0, 4, names=("y",)), "y": Int(0, 4, names=("x",))},
         check=lambda t: t == 1 + Ks.SWAP_PAIRS.index((0, 1)) or pytest.fail())
    case(m, "encode_swaps", Ks.encode_swaps, dict(swaps=[(0, 1)]), {"swaps": swaps},
         check=lambda t: t.tolist() == [0, 1] or pytest.fail(str(t)))
    case(m, "compose_swaps", Ks.compose_swaps, dict(swaps=[(0, 1), (1, 2)]), {"swaps": swaps},
         check=lambda p: p == (1, 2, 0, 3, 4) or pytest.fail(str(p)))
    case(m, "is_identity", Ks.is_identity, dict(swaps=[(0, 1), (1, 0)]), {"swaps": swaps},
         check=lambda v: v is True or pytest.fail())
    case(m, "logit_scale", Ks.logit_scale, dict(n=3), {"n": Int(0)}, check=lambda v: close(v, 20 * (1 + math.log(4))))
    case(m, "nonidentity_margin", Ks.nonidentity_margin, dict(n=2), {"n": Int(0)},
         check=lambda v: close(v, 2 * (1 - math.exp(-(1 + math.log(3)))) / (3 * (2 + math.exp(-(1 + math.log(3)))))))
    case(m, "swap_word_problem_model", Ks.swap_word_problem_model, dict(dtype=torch.float64, impl="blockwise",
                                                                        block_size=4, beta=2.0), {
        "dtype": Bad(("wrong-type str", "float64"), ("wrong-dtype int", torch.int64)), "impl": Choice(["blockwise"]),
        "block_size": Int(1), "beta": Float(0, 2)}, check=lambda mdl: Ks.solve_swaps(mdl, [(0, 1), (0, 1)])
        or pytest.fail())
    case(m, "SwapWordProblemModel", Ks.SwapWordProblemModel, dict(dtype=torch.float64), {
        "dtype": Bad(("wrong-type str", "float64")), "impl": Choice(["blockwise"]), "block_size": Int(1),
        "beta": Float(0, 2)})
    case(m, "solve_swaps", Ks.solve_swaps, dict(model=Fresh(Ks.swap_word_problem_model), swaps=[(0, 1), (1, 2)]), {
        "model": Bad(("wrong-type str", "m")), "swaps": swaps}, check=lambda v: v is False or pytest.fail())
    case(m, "rope_recipe_weight", Ks.rope_recipe_weight, dict(swaps_batch=[[(0, 1)], [(1, 2)]], scale=1.0,
                                                              base=10000.0, dtype=torch.float64), {
        "swaps_batch": Bad(("empty", []), ("wrong-type str", "x"), ("wrong-shape", [[(0, 1)], []])),
        "scale": Float(0, open_lo=True), "base": Float(0, open_lo=True), "dtype": Bad(("wrong-type str", "f"))},
        check=lambda w: close(w[0], w[1]))
    case(m, "flip_flop_model", Ks.flip_flop_model, dict(dtype=torch.float64, impl="blockwise"), {
        "dtype": Bad(("wrong-type str", "float64"), ("wrong-dtype int", torch.int32)), "impl": Choice(["blockwise"])})
    case(m, "FlipFlopPaTHModel", Ks.FlipFlopPaTHModel, dict(dtype=torch.float64), {
        "dtype": Bad(("wrong-type str", "float64")), "impl": Choice(["blockwise"])})


_experiment_cases()

_ledger_cases()
_theory_cases()
_hardware_records_cases()


def test_cli_main_prints_usage_for_a_bad_command_line(capsys):
    """main is the command line: a bad one exits with status 2 and argparse's usage and message."""
    from path_lib.training import cli
    for argv in (["--steps", "0"], ["--log-every", "0"], ["--model", "nosuch"], ["--lr", "nan"]):
        with pytest.raises(SystemExit) as info:
            cli.main(argv)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: python -m path_lib.training.cli") and "error: " in err, err


@pytest.mark.parametrize("fuzz_case", CASES, ids=repr)
def test_surface(fuzz_case):
    failures = run_surface(fuzz_case)
    assert not failures, f"{fuzz_case.name}:\n  " + "\n  ".join(failures)
