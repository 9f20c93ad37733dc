"""Presets and formats by the GPU a reader has: devices are simulated with DeviceInfo (no GPU here)."""
from __future__ import annotations

import pytest
import torch

from path_lib import hardware as hw
from path_lib.hardware import DeviceInfo

CPU = DeviceInfo("cpu")
T4 = DeviceInfo("cuda", "Tesla T4", (7, 5), 15.8, 40)
V100_32 = DeviceInfo("cuda", "Tesla V100-SXM2-32GB", (7, 0), 34.1, 80)
L4 = DeviceInfo("cuda", "NVIDIA L4", (8, 9), 24.2, 58)
A100 = DeviceInfo("cuda", "NVIDIA A100-SXM4-40GB", (8, 0), 42.4, 108)
H200 = DeviceInfo("cuda", "NVIDIA H200", (9, 0), 150.1, 132)
MIG = DeviceInfo("cuda", "NVIDIA H100 MIG 1g.10gb", (9, 0), 10.7, 16)


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
    assert hw.describe_device("cpu") == DeviceInfo("cpu", name="cpu")
    assert hw.compute_dtype() is torch.float32 and hw.compute_dtype(torch.device("cpu")) is torch.float32
    assert hw.preset_name() == "tiny"


def test_pick_preset_by_device():
    tiny, small, full = object(), object(), object()
    assert hw.pick_preset(tiny, full, small, dev=CPU) is tiny
    assert hw.pick_preset(tiny, full, small, dev=T4) is small
    assert hw.pick_preset(tiny, full, small, dev=L4) is small
    assert hw.pick_preset(tiny, full, small, dev=H200) is full
    assert hw.pick_preset(tiny, full, dev=T4) is tiny      # nothing to interpolate: tiny's


@pytest.mark.parametrize("value, name", [("tiny", "tiny"), ("small", "small"), ("T4", "small"), (" full ", "full")])
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


def test_hardware_names_the_task_presets(monkeypatch):
    # the library's task presets have tiny and full only: a small GPU runs tiny
    assert hw.hardware() == ("full" if hw.hardware_class() == "full" else "tiny")
    monkeypatch.setenv("PATH_BOOK_PRESET", "small")
    assert hw.hardware() == "tiny"
    monkeypatch.setenv("PATH_BOOK_PRESET", "full")
    assert hw.hardware() == "full"


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
        DeviceInfo("cuda", "x")


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
