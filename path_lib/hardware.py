"""Which size of an experiment this machine runs, and in which floating-point format.

    from path_lib.hardware import pick_preset, compute_dtype
    cfg = pick_preset(tiny=dict(T=64, steps=200), full=dict(T=1024, steps=5000),
                      small=dict(T=256, steps=1000))
    with torch.autocast("cuda", dtype=compute_dtype("cuda")): ...

**Hardware classes** (:func:`hardware_class`, from :func:`describe_device`):

* ``"cpu"``: no CUDA device (the book build, laptops): the ``tiny`` preset.
* ``"t4"``: a small GPU, the free Colab tier's T4 and its like: compute capability below 8.0 (no
  bfloat16 arithmetic), or less than :data:`FULL_MIN_MEMORY_GB` of memory (a 24 GB card, a MIG slice),
  or fewer than :data:`FULL_MIN_SMS` multiprocessors: the ``small`` preset.
* ``"full"``: an Ampere or Hopper class GPU (A100, H100, H200): the ``full`` preset.

``PATH_BOOK_PRESET`` = ``tiny``, ``small`` (or ``t4``) or ``full`` forces a preset (a quick look on a
GPU, the T4 sizes on a big GPU); any other non-empty value is a ValueError naming it. The library's
experiment presets (:func:`path_lib.training.loop.task_preset`) and the book's chapters (through
:mod:`path_lib.book.notebook`) share this rule.

**Formats** (:func:`compute_dtype`): bfloat16 where the GPU computes it natively (capability 8.0 and
up), float16 on older GPUs (a T4: float16 tensor cores, no bfloat16 ones), float32 on a CPU;
``PATH_BOOK_DTYPE`` forces a GPU's format (the float16 check on a newer GPU).

**Time estimates** (:func:`estimate_seconds`): a workload's counted matrix-product operations and
bytes of memory traffic, each divided by the GPU's peak rate from its data sheet (:data:`GPUS`) times
:data:`ATTAINED` (the fraction of peak that small kernels reach), plus :data:`LAUNCH_S` per kernel
launch. An estimate, not a measurement; compile times are not in it.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Optional, Tuple, TypeVar

from .validation import as_device, check_choice, check_int, check_ints, check_number, check_str

__all__ = ["DeviceInfo", "GPURates", "GPUS", "FULL_MIN_CAPABILITY", "FULL_MIN_MEMORY_GB", "FULL_MIN_SMS",
           "PRESET_NAMES", "ATTAINED", "LAUNCH_S", "device", "describe_device", "hardware_class",
           "forced_preset", "preset_name", "pick_preset", "default_small", "compute_dtype", "hardware",
           "estimate_seconds"]

P = TypeVar("P")

#: A GPU below any of these is in the ``"t4"`` class (the ``small`` preset).
FULL_MIN_CAPABILITY: Tuple[int, int] = (8, 0)
FULL_MIN_MEMORY_GB: float = 30.0          # 24 GB cards (A10, L4, RTX 4090) report 22 to 24 GB: small
FULL_MIN_SMS: int = 40                    # MIG slices and small cards

#: Preset names, and the other names ``PATH_BOOK_PRESET`` accepts for them.
PRESET_NAMES = ("tiny", "small", "full")
_ALIASES = {"t4": "small"}
_BY_CLASS = {"cpu": "tiny", "t4": "small", "full": "full"}


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """What the preset and format choices read of a device.

    ``kind``: ``"cpu"`` or ``"cuda"``; ``capability``: (major, minor) compute capability (None on a CPU);
    ``memory_gb``: total memory in 10^9 bytes (None on a CPU); ``sms``: multiprocessor count.
    """

    kind: str
    name: str = ""
    capability: Optional[Tuple[int, int]] = None
    memory_gb: Optional[float] = None
    sms: Optional[int] = None

    def __post_init__(self):
        if self.kind not in ("cpu", "cuda"):
            raise ValueError(f"kind must be 'cpu' or 'cuda', got {self.kind!r}")
        if self.kind == "cuda" and (self.capability is None or len(tuple(self.capability)) != 2):
            raise ValueError(f"capability must be (major, minor) for a CUDA device, got {self.capability!r}")
        check_str(self.name, "name", empty=True)
        if self.capability is not None:
            check_ints(self.capability, "capability", min_len=2, max_len=2, minimum=0)
        check_number(self.memory_gb, "memory_gb", positive=True, optional=True)
        check_int(self.sms, "sms", minimum=1, optional=True)


def device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def describe_device(dev: Any = None) -> DeviceInfo:
    """The :class:`DeviceInfo` of ``dev`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``, or a
    DeviceInfo, returned as it is); ``None``: the first CUDA device if one is visible, else the CPU."""
    import torch

    if isinstance(dev, DeviceInfo):
        return dev
    if dev is None:
        dev = device()
    try:
        dev = as_device(dev, "dev")
    except ValueError as e:
        raise ValueError(f"dev must be a device here ('cpu', 'cuda', 'cuda:0', torch.device): {e}") from None
    if dev.type != "cuda":
        return DeviceInfo("cpu", name="cpu")
    props = torch.cuda.get_device_properties(dev.index if dev.index is not None else torch.cuda.current_device())
    return DeviceInfo("cuda", name=props.name, capability=(props.major, props.minor),
                      memory_gb=props.total_memory / 1e9, sms=props.multi_processor_count)


def hardware_class(dev: Any = None) -> str:
    """``"cpu"``, ``"t4"`` (a small GPU) or ``"full"`` (Ampere / Hopper class) for ``dev`` (as
    :func:`describe_device` takes it; a DeviceInfo simulates a device)."""
    info = describe_device(dev)
    if info.kind == "cpu" or info.capability is None:          # (a CUDA DeviceInfo always has one)
        return "cpu"
    small = (tuple(info.capability) < FULL_MIN_CAPABILITY
             or (info.memory_gb is not None and info.memory_gb < FULL_MIN_MEMORY_GB)
             or (info.sms is not None and info.sms < FULL_MIN_SMS))
    return "t4" if small else "full"


def forced_preset() -> Optional[str]:
    """The preset ``PATH_BOOK_PRESET`` forces (``"tiny"``, ``"small"``, ``"full"``), or None when unset.
    Any other value is a ValueError naming ``PATH_BOOK_PRESET``."""
    forced = os.environ.get("PATH_BOOK_PRESET", "").strip().lower()
    if not forced:
        return None
    forced = _ALIASES.get(forced, forced)
    if forced not in PRESET_NAMES:
        raise ValueError(f"PATH_BOOK_PRESET must be 'tiny', 'small' (or 't4') or 'full', "
                         f"got {os.environ['PATH_BOOK_PRESET']!r}")
    return forced


def preset_name(dev: Any = None) -> str:
    """The preset this machine runs: ``PATH_BOOK_PRESET`` if set, else by :func:`hardware_class`."""
    return forced_preset() or _BY_CLASS[hardware_class(dev)]


def pick_preset(tiny: P, full: P, small: Optional[P] = None, *, dev: Any = None) -> P:
    """``tiny`` on a CPU (the book build), ``small`` on a T4-class GPU, ``full`` on an Ampere / Hopper
    class one (:func:`hardware_class`); ``PATH_BOOK_PRESET`` forces one. Without ``small``, a small GPU
    gets :func:`default_small` of ``tiny`` and ``full``. ``dev`` simulates a device (a DeviceInfo)."""
    name = preset_name(dev)
    if name == "tiny":
        return tiny
    if name == "full":
        return full
    return default_small(tiny, full) if small is None else small


def _between_ints(a: int, b: int) -> int:
    g = math.sqrt(a * b)
    if a & (a - 1) == 0 and b & (b - 1) == 0:          # both powers of two: a power of two
        return 1 << int(math.floor(math.log2(g)))
    step = math.gcd(a, b)                               # keeps what both divide by (block sizes)
    return max(min(a, b), int(g // step) * step)


def default_small(tiny: P, full: P) -> P:
    """A preset between ``tiny`` and ``full`` for a chapter that gives none: field by field (dicts with
    the same keys, dataclasses of one type), a positive int or float that differs becomes the geometric
    mean of the two (ints: a power of two when both are, else a multiple of their gcd, never below the
    smaller), nested dicts and dataclasses likewise; everything else (strings, tuples, lists, flags)
    is ``tiny``'s."""
    if isinstance(tiny, dict) and isinstance(full, dict) and tiny.keys() == full.keys():
        return type(tiny)((k, _between(tiny[k], full[k])) for k in tiny)
    if (dataclasses.is_dataclass(tiny) and not isinstance(tiny, type) and type(tiny) is type(full)):
        fields = [f.name for f in dataclasses.fields(tiny) if f.init]
        return dataclasses.replace(tiny, **{k: _between(getattr(tiny, k), getattr(full, k)) for k in fields})
    return tiny


def _between(a, b):
    if type(a) is not type(b) or a == b or isinstance(a, bool):
        return a
    if isinstance(a, dict) or (dataclasses.is_dataclass(a) and not isinstance(a, type)):
        return default_small(a, b)
    if isinstance(a, int) and a > 0 and b > 0:
        return _between_ints(a, b)
    if isinstance(a, float) and a > 0 and b > 0:
        return math.sqrt(a * b)
    return a


_DTYPE_NAMES = {"float16": "float16", "fp16": "float16", "half": "float16", "bfloat16": "bfloat16",
                "bf16": "bfloat16", "float32": "float32", "fp32": "float32"}


def compute_dtype(dev: Any = None):
    """The floating-point format to compute in on ``dev``: ``torch.bfloat16`` on a GPU of compute
    capability 8.0 or more, ``torch.float16`` on older GPUs (a T4), ``torch.float32`` on a CPU.

    ``PATH_BOOK_DTYPE`` (``float16``, ``bfloat16``, ``float32``) forces the GPU's format, e.g. a T4's
    float16 on a newer GPU; a CPU computes in float32 whatever it says."""
    import torch

    forced = os.environ.get("PATH_BOOK_DTYPE", "").strip().lower()
    if forced and forced not in _DTYPE_NAMES:
        raise ValueError(f"PATH_BOOK_DTYPE must be 'float16', 'bfloat16' or 'float32', "
                         f"got {os.environ['PATH_BOOK_DTYPE']!r}")
    info = describe_device(dev)
    if info.kind == "cpu" or info.capability is None:          # (a CUDA DeviceInfo always has one)
        return torch.float32
    if forced:
        return getattr(torch, _DTYPE_NAMES[forced])
    return torch.bfloat16 if tuple(info.capability) >= (8, 0) else torch.float16


def hardware() -> str:
    """``"full"`` on an Ampere / Hopper class GPU, ``"tiny"`` otherwise (CPU, and a T4-class GPU, for
    the library's task presets, which have no small size); ``PATH_BOOK_PRESET=full`` forces ``"full"``."""
    return pick_preset(tiny="tiny", full="full", small="tiny")


# --- time estimates ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class GPURates:
    """A GPU's peak rates from its data sheet (dense, no sparsity): matrix products in TFLOP/s in
    float16 / bfloat16 on tensor cores (``half_tflops``), in float32 (``fp32_tflops``, no TF32) and in
    float64 (``fp64_tflops``), and memory bandwidth in GB/s."""

    name: str
    half_tflops: float
    fp32_tflops: float
    fp64_tflops: float
    bandwidth_gbs: float

    def __post_init__(self):
        check_str(self.name, "name")
        for field in ("half_tflops", "fp32_tflops", "fp64_tflops", "bandwidth_gbs"):
            check_number(getattr(self, field), field, positive=True)


#: Data-sheet peaks of the GPUs the presets are sized for.
GPUS = {
    "t4": GPURates("NVIDIA T4", half_tflops=65.0, fp32_tflops=8.1, fp64_tflops=0.25, bandwidth_gbs=320.0),
    "h200": GPURates("NVIDIA H200", half_tflops=989.0, fp32_tflops=67.0, fp64_tflops=34.0, bandwidth_gbs=4800.0),
}
#: Fraction of the peak rates that the book's small kernels attain (a deliberate, pessimistic pad).
ATTAINED = 0.3
#: Seconds per kernel launch, Python's dispatch included (eager PyTorch on a notebook's GPU).
LAUNCH_S = 20e-6


def estimate_seconds(flops: float, nbytes: float, launches: float = 0, *, gpu: str = "t4",
                     precision: str = "fp32") -> float:
    """Estimated seconds of a workload on ``gpu`` (a key of :data:`GPUS`)::

        flops / (peak_flops * ATTAINED) + nbytes / (bandwidth * ATTAINED) + launches * LAUNCH_S

    ``flops``: counted matrix-product operations; ``nbytes``: bytes read and written in global memory;
    ``precision``: ``"half"`` (float16 / bfloat16 on tensor cores), ``"fp32"`` or ``"fp64"``: which peak
    rate the products run at. An estimate (compiles not included)."""
    check_choice(gpu, "gpu", sorted(GPUS))
    check_choice(precision, "precision", ("half", "fp32", "fp64"))
    for name, x in (("flops", flops), ("nbytes", nbytes), ("launches", launches)):
        check_number(x, name, minimum=0.0)
    r = GPUS[gpu]
    peak = dict(half=r.half_tflops, fp32=r.fp32_tflops, fp64=r.fp64_tflops)[precision] * 1e12
    return flops / (peak * ATTAINED) + nbytes / (r.bandwidth_gbs * 1e9 * ATTAINED) + launches * LAUNCH_S
