"""Presets and formats by the GPU a reader has: devices are simulated with DeviceInfo (no GPU here)."""
from __future__ import annotations

import pytest
import torch

from path_lib import hardware as hw
from path_lib.hardware import DeviceInfo

CPU = DeviceInfo("cpu")
T4 = DeviceInfo("cuda", (7, 5), name="Tesla T4", memory_gb=15.8, sms=40)
V100_32 = DeviceInfo("cuda", (7, 0), name="Tesla V100-SXM2-32GB", memory_gb=34.1, sms=80)
L4 = DeviceInfo("cuda", (8, 9), name="NVIDIA L4", memory_gb=24.2, sms=58)
A100 = DeviceInfo("cuda", (8, 0), name="NVIDIA A100-SXM4-40GB", memory_gb=42.4, sms=108)
H200 = DeviceInfo("cuda", (9, 0), name="NVIDIA H200", memory_gb=150.1, sms=132)
MIG = DeviceInfo("cuda", (9, 0), name="NVIDIA H100 MIG 1g.10gb", memory_gb=10.7, sms=16)


@pytest.fixture(autouse=True)
def no_forced_preset(monkeypatch):
    monkeypatch.delenv("PATH_BOOK_PRESET", raising=False)
    monkeypatch.delenv("PATH_BOOK_DTYPE", raising=False)


@pytest.mark.parametrize("info, cls", [(CPU, "cpu"), (T4, "t4"), (V100_32, "t4"), (L4, "t4"), (MIG, "t4"),
                                       (A100, "full"), (H200, "full")])
def test_hardware_class(info, cls):
    assert hw.hardware_class(info) == cls


@pytest.mark.parametrize("info, dtype", [(CPU, torch.float32), (T4, torch.float16), (V100_32, torch.float16),
                                         (L4, torch.bfloat16), (A100, torch.bfloat16), (H200, torch.bfloat16)])
def test_compute_dtype_by_capability(info, dtype):
    assert hw.compute_dtype(info) is dtype


def test_forced_dtype(monkeypatch):
    monkeypatch.setenv("PATH_BOOK_DTYPE", "fp16")
    assert hw.compute_dtype(H200) is torch.float16 and hw.compute_dtype(CPU) is torch.float32
    monkeypatch.setenv("PATH_BOOK_DTYPE", "bfloat16")
    assert hw.compute_dtype(T4) is torch.bfloat16
    monkeypatch.setenv("PATH_BOOK_DTYPE", "fp8")
    with pytest.raises(ValueError, match="PATH_BOOK_DTYPE"):
        hw.compute_dtype(T4)


def test_this_machine_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    assert hw.describe_device().kind == "cpu"
    assert hw.describe_device("cpu") == DeviceInfo("cpu", name="cpu", key="cpu")
    assert hw.compute_dtype() is torch.float32 and hw.compute_dtype(torch.device("cpu")) is torch.float32
    assert hw.preset_name() == "tiny"


def test_pick_preset_by_device():
    tiny, small, full = object(), object(), object()
    assert hw.pick_preset(tiny, full, small, dev=CPU) is tiny
    assert hw.pick_preset(tiny, full, small, dev=T4) is small
    assert hw.pick_preset(tiny, full, small, dev=L4) is small
    assert hw.pick_preset(tiny, full, small, dev=H200) is full
    assert hw.pick_preset(tiny, full, dev=T4) is tiny      # nothing to interpolate: tiny's


@pytest.mark.parametrize("value, name", [("tiny", "tiny"), ("small", "small"), ("T4", "small"), (" full ", "full"),
                                         ("cpu", "tiny")])
def test_forced_preset(monkeypatch, value, name):
    monkeypatch.setenv("PATH_BOOK_PRESET", value)
    presets = dict(tiny=[1], small=[2], full=[3])
    for dev in (CPU, T4, H200):
        assert hw.pick_preset(**presets, dev=dev) is presets[name]
        assert hw.preset_name(dev) == name


@pytest.mark.parametrize("value", ["huge", "medium", "1"])
def test_forced_preset_must_be_known(monkeypatch, value):
    monkeypatch.setenv("PATH_BOOK_PRESET", value)
    with pytest.raises(ValueError, match="PATH_BOOK_PRESET"):
        hw.pick_preset(1, 3, 2, dev=CPU)


def test_a_forced_preset_still_checks_the_device(monkeypatch):
    """PATH_BOOK_PRESET decides the preset, but a bad dev is refused all the same, never ignored."""
    monkeypatch.setenv("PATH_BOOK_PRESET", "full")
    assert hw.preset_name(CPU) == "full"
    with pytest.raises(ValueError, match="dev"):
        hw.preset_name("gpu7")
    with pytest.raises(TypeError, match="dev"):
        hw.pick_preset(1, 3, dev=2.5)


def test_the_task_presets_follow_the_machines_preset(monkeypatch):
    """The library's experiment presets have a row for every preset of the table, and task_preset picks
    the machine's (one rule: no second preset rule for the experiments)."""
    from path_lib.experiments import convert_lm, lm
    from path_lib.training.loop import PRESETS, task_preset
    for table in [*PRESETS.values(), lm.PRESETS, convert_lm.PRESETS]:
        assert set(hw.PRESET_NAMES) <= set(table)
    for name in hw.PRESET_NAMES:
        monkeypatch.setenv("PATH_BOOK_PRESET", name)
        assert task_preset("a5") == PRESETS["a5"][name]


def test_the_preset_table():
    """Each preset's reference device belongs to a class that gets it and computes in its format; every
    class gets exactly one preset; every row sizes the same work."""
    classes = [c for row in hw.PRESET_TABLE for c in row.classes]
    assert sorted(classes) == sorted(hw.HARDWARE_CLASSES)
    for row in hw.PRESET_TABLE:
        assert hw.hardware_class(row.device) in row.classes
        assert hw.compute_dtype(row.device) is getattr(torch, row.dtype)
        assert hw.preset_name(row.device) == row.name
        assert row.sizes.keys() == hw.PRESET_TABLE[0].sizes.keys()
    assert hw.PRESET_NAMES == ("tiny", "small", "full")
    lengths = hw.preset_sizes("blockwise.lengths", T4)
    lengths.append(1)                                            # a copy: the table is unchanged
    assert hw.preset_sizes("blockwise.lengths", preset="small")[-1] != 1
    with pytest.raises(ValueError, match="key must be one of"):
        hw.preset_sizes("no.such.sizes")
    with pytest.raises(ValueError, match="preset must be one of"):
        hw.preset_sizes("blockwise.lengths", preset="huge")


def test_the_kernels_describe_the_devices_as_the_library_does():
    """The kernels' configuration keeps its own copy of the device description until their next GPU
    sweep (it is hashed code: moving it voids the verified sweep; benchmarks/DESIGN.md). Until then
    every field the two share must agree, for every device described by hand, and each kernels'
    device classifies as the library's does."""
    kernels = pytest.importorskip("path_lib.kernels")
    shared = ("kind", "capability", "smem", "sms", "key")
    for name in ("H200", "A100", "SM86", "T4"):
        ours, theirs = getattr(hw, name), getattr(kernels, name)
        assert [getattr(ours, f) for f in shared] == [getattr(theirs, f) for f in shared], name
    assert [hw.hardware_class(hw.DeviceInfo.of(d) if isinstance(d, str) else
                              hw.DeviceInfo(d.kind, d.capability, d.smem, d.name, d.key, d.sms))
            for d in (kernels.CPU, kernels.T4, kernels.A100, kernels.H200)] == ["cpu", "t4", "full", "full"]


def test_default_small_between_tiny_and_full():
    tiny = dict(T=64, steps=300, d=32, lr=1e-2, name="a", lens=(1, 2), flag=False, nest=dict(h=2))
    full = dict(T=1024, steps=1500, d=64, lr=1e-4, name="b", lens=(1, 2, 4), flag=True, nest=dict(h=8))
    small = hw.default_small(tiny, full)
    assert small["T"] == 256                    # sqrt(64 * 1024), powers of two stay powers of two
    assert small["d"] == 32                     # sqrt(2048) = 45.3 -> 32
    assert small["steps"] == 600                # sqrt(450000) = 670.8 -> a multiple of gcd 300
    assert small["lr"] == pytest.approx(1e-3)
    assert (small["name"], small["lens"], small["flag"]) == ("a", (1, 2), False)
    assert small["nest"] == dict(h=4)
    assert hw.default_small([1, 2], [3, 4]) == [1, 2]


def test_default_small_of_the_library_presets():
    from path_lib.experiments.lm import PRESETS as LM
    from path_lib.training.loop import PRESETS as TASKS

    lm = hw.default_small(LM["tiny"], LM["full"])
    assert (lm.d_model, lm.train_len, lm.batch) == (128, 128, 32)
    assert lm.d_model % lm.n_heads == 0 and LM["tiny"].steps <= lm.steps <= LM["full"].steps
    ff = hw.default_small(TASKS["flip_flop"]["tiny"], TASKS["flip_flop"]["full"])
    assert ff.task["length"] == 128 and ff.config.steps == 600


def test_describe_device_rejects_a_non_device():
    with pytest.raises(ValueError, match="dev must be a device"):
        hw.describe_device("tpu-ish")
    with pytest.raises(ValueError, match="kind must be"):
        DeviceInfo("tpu")
    with pytest.raises(ValueError, match="capability"):
        DeviceInfo("cuda")
    with pytest.raises(ValueError, match="capability"):
        DeviceInfo("cuda", [8, 0])


def test_estimate_seconds_formula():
    t4, h200 = hw.GPUS["t4"], hw.GPUS["h200"]
    flops, nbytes, launches = 3e12, 2e10, 1000
    want = (flops / (t4.fp32_tflops * 1e12 * hw.ATTAINED) + nbytes / (t4.bandwidth_gbs * 1e9 * hw.ATTAINED)
            + launches * hw.LAUNCH_S)
    assert hw.estimate_seconds(flops, nbytes, launches) == pytest.approx(want)
    # a bandwidth-bound workload: the T4 about 15 times slower than an H200
    ratio = hw.estimate_seconds(0, 1e12) / hw.estimate_seconds(0, 1e12, gpu="h200")
    assert ratio == pytest.approx(h200.bandwidth_gbs / t4.bandwidth_gbs)
    assert hw.estimate_seconds(1e12, 0, precision="half") < hw.estimate_seconds(1e12, 0) < hw.estimate_seconds(
        1e12, 0, precision="fp64")
    with pytest.raises(ValueError, match="precision must be"):
        hw.estimate_seconds(1, 1, precision="fp8")
    with pytest.raises(ValueError, match="gpu must be one of"):
        hw.estimate_seconds(1, 1, gpu="a100")
    with pytest.raises(ValueError, match="nbytes"):
        hw.estimate_seconds(1, -1)


def _literal(node):
    """A literal's value, ``dict(a=1, ...)`` of literals included; a ValueError for anything else."""
    import ast
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "dict" and not node.args:
        return {k.arg: _literal(k.value) for k in node.keywords}
    return ast.literal_eval(node)


def _literal_preset_calls():
    """``(chapter, line, {preset: value})`` of every ``pick_preset(...)`` call in the chapters whose values
    are literals (read from the source; nothing of a notebook runs)."""
    import ast
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for nb in sorted((root / "book").rglob("*.ipynb")):
        cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        for cell in cells:
            src = "\n".join("pass" if ln.lstrip().startswith(("%", "!")) else ln
                            for ln in "".join(cell["source"]).split("\n"))
            for n in ast.walk(ast.parse(src)):
                if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("pick_preset"):
                    try:
                        values = {k.arg: _literal(k.value) for k in n.keywords if k.arg in hw.PRESET_NAMES}
                    except ValueError:
                        continue                                   # names a table of the library's: not literal
                    yield nb.relative_to(root), n.lineno, values


def test_chapters_that_hold_their_own_sizes_agree_with_the_preset_table():
    """A chapter reads its sizes from the preset table (``preset_sizes``); where one still passes literal
    sizes to ``pick_preset``, they must be a row's of the table, so that the estimate and the tests, which
    read the table, count what the chapter runs."""
    calls = list(_literal_preset_calls())
    keys = hw.PRESET_TABLE[0].sizes.keys()
    bad = []
    for chapter, line, values in calls:
        picked = {name: values.get(name) for name in hw.PRESET_NAMES}
        if picked["small"] is None:
            picked["small"] = hw.default_small(picked["tiny"], picked["full"])
        if not any(all(hw.preset_sizes(key, preset=name) == v for name, v in picked.items()) for key in keys):
            bad.append(f"{chapter} (cell line {line}): {values}")
    assert not bad, "sizes the preset table does not hold:\n" + "\n".join(bad)


def test_preset_sizes_checks_a_device_given_beside_the_preset():
    assert hw.preset_sizes("blockwise.lengths", preset="tiny") == hw.preset_sizes("blockwise.lengths", "cpu", preset="tiny")
    with pytest.raises(ValueError, match="dev"):
        hw.preset_sizes("blockwise.lengths", "no such device", preset="tiny")
    with pytest.raises(TypeError, match="dev"):
        hw.preset_sizes("blockwise.lengths", 2.5, preset="tiny")


def test_a_number_past_floats_range_is_named_not_an_overflow():
    from path_lib.validation import check_number
    with pytest.raises(ValueError, match="x must be a finite number"):
        check_number(10 ** 400, "x")
    assert check_number(-10 ** 400, "x", finite=False) == float("-inf")
    with pytest.raises(ValueError, match=r"x must lie in \[0, inf\)"):
        check_number(-10 ** 400, "x", finite=False, minimum=0)
