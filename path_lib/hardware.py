"""The machine: its description, its class, the preset it runs and its floating-point format.

    from path_lib.hardware import DeviceInfo, preset_sizes, pick_preset, compute_dtype
    lengths = preset_sizes("blockwise.lengths")          # this machine's row of the preset table
    with torch.autocast("cuda", dtype=compute_dtype("cuda")): ...

**The device** (:class:`DeviceInfo`, :meth:`DeviceInfo.of`): one description of a GPU (or the CPU)
for the whole library: what the presets and formats read (capability, memory, multiprocessors) and what
the Triton kernels' launch configuration reads (shared memory per block, multiprocessors, a key for
what the out-of-resources fallback learnt). :data:`H200`, :data:`A100`, :data:`SM86`, :data:`T4` and
:data:`CPU` describe devices by hand (for a configuration or an estimate without the device).

**Hardware classes** (:func:`hardware_class`):

* ``"cpu"``: no CUDA device (the book build, laptops);
* ``"t4"``: a small GPU, the free Colab tier's T4 and its like: compute capability below 8.0 (no
  bfloat16 arithmetic), or less than :data:`FULL_MIN_MEMORY_GB` of memory (a 24 GB card, a MIG slice),
  or fewer than :data:`FULL_MIN_SMS` multiprocessors;
* ``"full"``: an Ampere or Hopper class GPU (A100, H100, H200).

**Presets** are data: :data:`PRESET_TABLE` has one row per preset (its name, the hardware classes that
get it, the format it computes in on its reference device, that device, and the sizes of the book's
sized work by key). :func:`preset_name` is the preset this machine runs (``PATH_BOOK_PRESET`` forces one:
a preset's name or a hardware class's, e.g. ``t4`` for ``small``; anything else is a ValueError naming
it); :func:`preset_sizes` reads a row; :func:`pick_preset` picks among values a caller holds itself;
:func:`complete_presets` gives an experiment's table of configurations a row for every preset. The
chapters (through :mod:`path_lib.book.notebook`), the experiments' presets, the T4 estimate
(``benchmarks/estimate_t4.py``) and the tests read this table.

**Formats** (:func:`compute_dtype`): bfloat16 where the GPU computes it natively (capability 8.0 and
up), float16 on older GPUs (a T4: float16 tensor cores, no bfloat16 ones), float32 on a CPU;
``PATH_BOOK_DTYPE`` forces a GPU's format (the float16 check on a newer GPU).

**Time estimates** (:func:`estimate_seconds`): a workload's counted matrix-product operations and
bytes of memory traffic, each divided by the GPU's peak rate from its data sheet (:data:`GPUS`) times
:data:`ATTAINED` (the fraction of peak that small kernels reach), plus :data:`LAUNCH_S` per kernel
launch. An estimate, not a measurement; compile times are not in it.

This module imports nothing of the library (torch only inside functions).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
from typing import Any, Dict, Mapping, Optional, Tuple, TypeVar

from .validation import as_device, check_choice, check_int, check_ints, check_number, check_str

__all__ = ["DeviceInfo", "H200", "A100", "SM86", "T4", "CPU", "GPURates", "GPUS", "FULL_MIN_CAPABILITY",
           "FULL_MIN_MEMORY_GB", "FULL_MIN_SMS", "HARDWARE_CLASSES", "PresetRow", "PRESET_TABLE", "PRESET_NAMES", "PRESET_SPELLINGS",
           "ATTAINED", "LAUNCH_S", "device", "describe_device", "hardware_class", "canonical_preset", "forced_preset", "preset_name",
           "preset_row", "preset_sizes", "pick_preset", "complete_presets", "default_small", "compute_dtype",
           "estimate_seconds"]

P = TypeVar("P")


# --- the device -------------------------------------------------------------------------------------

#: what ``dev`` may be, for messages
_DEVICE_TYPES = "a DeviceInfo, a str, an int or a torch.device"
_DEVICE_NAMES = "'cpu', 'cuda', 'cuda:0', a torch.device or a DeviceInfo"


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """A device as the library reads it.

    ``kind``: ``"cuda"`` or ``"cpu"`` (any device that is not CUDA; the kernels run there only under the
    Triton interpreter); ``capability``: (major, minor) compute capability, ``(0, 0)`` on a CPU; ``smem``:
    opt-in shared memory per block in bytes; ``name``; ``key``: a real device's ``str`` (``"cuda:0"``),
    under which the kernels' out-of-resources fallback keeps what it learnt (a device described by hand
    has none, so no fallback state applies to it); ``sms``: multiprocessors; ``memory_gb``: total memory
    in 10^9 bytes. ``smem``, ``sms`` and ``memory_gb`` are 0 where not known (the backward then runs in
    one batch slice; the hardware class does not count them).
    """

    kind: str
    capability: Tuple[int, int] = (0, 0)
    smem: int = 0
    name: str = ""
    key: Optional[str] = None
    sms: int = 0
    memory_gb: float = 0.0

    def __post_init__(self):
        if self.kind not in ("cpu", "cuda"):
            raise ValueError(f"kind must be 'cpu' or 'cuda', got {self.kind!r}")
        cap = self.capability
        if not (isinstance(cap, tuple) and len(cap) == 2 and all(isinstance(c, int) for c in cap)):
            raise ValueError(f"capability must be (major, minor), two ints, got {cap!r}")
        if self.kind == "cuda" and cap == (0, 0):
            raise ValueError("capability must be (major, minor) for a CUDA device, got (0, 0)")
        check_ints(cap, "capability", min_len=2, max_len=2, minimum=0)
        check_str(self.name, "name", empty=True)
        check_str(self.key, "key", optional=True)
        check_int(self.smem, "smem", minimum=0)
        check_int(self.sms, "sms", minimum=0)
        check_number(self.memory_gb, "memory_gb", minimum=0)

    @staticmethod
    def of(dev: Any) -> "DeviceInfo":
        """The description of ``dev`` (a ``torch.device``, its name, or an int CUDA index; a DeviceInfo is
        returned as it is), read through ``torch.cuda`` for a CUDA device.

        Raises:
            TypeError: ``dev`` is of another type (a bool included).
            ValueError: ``dev`` names no device torch knows, a CUDA device where CUDA is not available, or
                a CUDA index beyond the visible devices.
        """
        if isinstance(dev, DeviceInfo):
            return dev
        import torch

        try:
            dev = as_device(dev, "dev")
        except TypeError:
            raise TypeError(f"dev must be {_DEVICE_TYPES}, got {type(dev).__name__}") from None
        except ValueError as e:
            raise ValueError(f"dev must be a device ({_DEVICE_NAMES}): {e}") from None
        if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"dev {str(dev)!r} names no visible CUDA device ({torch.cuda.device_count()} visible)")
        if dev.type != "cuda":
            return DeviceInfo("cpu", name=dev.type, key=str(dev))
        props = torch.cuda.get_device_properties(dev)
        cap = tuple(torch.cuda.get_device_capability(dev))
        return DeviceInfo("cuda", (int(cap[0]), int(cap[1])),
                          int(getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024),
                          str(getattr(props, "name", "")), str(dev), int(getattr(props, "multi_processor_count", 0) or 0),
                          float(getattr(props, "total_memory", 0)) / 1e9)


# Devices described by hand (opt-in shared memory per block, compute capability, multiprocessors), for
# configurations and estimates asked without the device: kernels.blocking, benchmarks/compile_check.py,
# the speed chapter, the preset table. Only the H200 has run the kernels.
H200 = DeviceInfo("cuda", (9, 0), 232448, "H100 / H200", sms=132)
A100 = DeviceInfo("cuda", (8, 0), 166912, "A100", sms=108)
SM86 = DeviceInfo("cuda", (8, 6), 101376, "sm_86 / sm_89")
T4 = DeviceInfo("cuda", (7, 5), 65536, "T4", sms=40)
CPU = DeviceInfo("cpu", name="cpu")


def device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def describe_device(dev: Any = None) -> DeviceInfo:
    """:meth:`DeviceInfo.of` ``dev`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``, or a
    DeviceInfo); ``None``: the first CUDA device if one is visible, else the CPU. A TypeError or ValueError
    naming ``dev`` for anything else, as :meth:`DeviceInfo.of` raises them."""
    return DeviceInfo.of(device() if dev is None else dev)


# --- hardware classes -------------------------------------------------------------------------------

#: A GPU below any of these is in the ``"t4"`` class.
FULL_MIN_CAPABILITY: Tuple[int, int] = (8, 0)
FULL_MIN_MEMORY_GB: float = 30.0          # 24 GB cards (A10, L4, RTX 4090) report 22 to 24 GB: small
FULL_MIN_SMS: int = 40                    # MIG slices and small cards
#: The hardware classes, smallest first.
HARDWARE_CLASSES = ("cpu", "t4", "full")


def hardware_class(dev: Any = None) -> str:
    """``"cpu"``, ``"t4"`` (a small GPU) or ``"full"`` (Ampere / Hopper class) for ``dev`` (as
    :func:`describe_device` takes it; a DeviceInfo simulates a device)."""
    info = describe_device(dev)
    if info.kind == "cpu":
        return "cpu"
    small = (info.capability < FULL_MIN_CAPABILITY
             or 0 < info.memory_gb < FULL_MIN_MEMORY_GB
             or 0 < info.sms < FULL_MIN_SMS)
    return "t4" if small else "full"


# --- presets ----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PresetRow:
    """One preset: ``name``; ``classes``, the hardware classes that get it; ``dtype``, the format it
    computes in on its reference ``device`` (:func:`compute_dtype` there), the device its sizes are chosen
    for and the estimates assume; ``sizes``, the book's sized work by key (``"<page>.<what>"``: a
    chapter's lengths, shapes, step counts)."""

    name: str
    classes: Tuple[str, ...]
    dtype: str
    device: DeviceInfo
    sizes: Mapping[str, Any]


#: The presets, smallest first: one row each. tiny: a CPU inside the book build (seconds per cell);
#: small: a T4-class GPU, the free Colab tier (a few minutes per chapter: benchmarks/estimate_t4.py);
#: full: one A100 / H100 / H200. A new preset is a new row (and a class for it in hardware_class).
PRESET_TABLE: Tuple[PresetRow, ...] = (
    PresetRow("tiny", ("cpu",), "float32", CPU, {
        "blockwise.lengths": [256, 512, 1024, 2048],
        "kernel.teaching_check": dict(B=1, T=100, H=2, D=32),
        "kernel.launch": dict(B=1, T=100, H=2, D=32, block_size=16, seg_blocks=2),
        "decoding.prompt_lengths": [256, 512, 1024],
        "decoding.cache_lengths": [512, 2048, 8192],
        "decoding.kernel_steps": 12,
        "precision.product_length": 1024,
        "precision.lengths": [256, 1024, 4096],
    }),
    PresetRow("small", ("t4",), "float16", T4, {
        "blockwise.lengths": [1024, 2048, 4096, 8192],
        "kernel.teaching_check": dict(B=2, T=1000, H=4, D=64),
        "kernel.launch": dict(B=2, T=1024, H=4, D=64, block_size=None, seg_blocks=None),
        "decoding.prompt_lengths": [256, 512, 1024],          # measured on the CPU: tiny's
        "decoding.cache_lengths": [512, 2048, 8192],          # measured on the CPU: tiny's
        "decoding.kernel_steps": 200,
        "precision.product_length": 1024,
        "precision.lengths": [1024, 4096, 8192],
    }),
    PresetRow("full", ("full",), "bfloat16", H200, {
        "blockwise.lengths": [1024, 2048, 4096, 8192],
        "kernel.teaching_check": dict(B=2, T=1000, H=4, D=64),
        "kernel.launch": dict(B=2, T=1024, H=4, D=64, block_size=None, seg_blocks=None),
        "decoding.prompt_lengths": [1024, 2048, 4096],
        "decoding.cache_lengths": [1024, 4096, 16384, 65536],
        "decoding.kernel_steps": 200,
        "precision.product_length": 4096,
        "precision.lengths": [1024, 4096, 8192],
    }),
)
#: The presets' names, smallest first.
PRESET_NAMES = tuple(row.name for row in PRESET_TABLE)


def preset_row(name: str) -> PresetRow:
    """The row of :data:`PRESET_TABLE` named ``name``."""
    for row in PRESET_TABLE:
        if row.name == name:
            return row
    raise ValueError(f"preset must be one of {PRESET_NAMES}, got {name!r}")


#: What names a preset: a preset's own name, or a hardware class's for the preset that class gets
#: (``t4`` for ``small``, ``cpu`` for ``tiny``); any case, spaces around ignored.
PRESET_SPELLINGS: Dict[str, str] = {**{c: row.name for row in PRESET_TABLE for c in row.classes},
                                    **{row.name: row.name for row in PRESET_TABLE}}


def canonical_preset(name: str, what: str = "preset") -> str:
    """The preset ``name`` names (:data:`PRESET_SPELLINGS`); anything else is a ValueError naming ``what``."""
    key = str(name).strip().lower()
    if key not in PRESET_SPELLINGS:
        raise ValueError(f"{what} must be one of {tuple(PRESET_SPELLINGS)}, got {name!r}")
    return PRESET_SPELLINGS[key]


def forced_preset() -> Optional[str]:
    """The preset ``PATH_BOOK_PRESET`` forces (:func:`canonical_preset` of it), or None when unset. Any
    other value is a ValueError naming ``PATH_BOOK_PRESET``."""
    forced = os.environ.get("PATH_BOOK_PRESET", "")
    return canonical_preset(forced, "PATH_BOOK_PRESET") if forced.strip() else None


def preset_name(dev: Any = None) -> str:
    """The preset this machine runs: ``PATH_BOOK_PRESET`` if set, else the row whose classes hold
    :func:`hardware_class`. ``dev`` is checked even where ``PATH_BOOK_PRESET`` decides."""
    cls = hardware_class(dev)
    forced = forced_preset()
    if forced:
        return forced
    return next(row.name for row in PRESET_TABLE if cls in row.classes)


def preset_sizes(key: str, dev: Any = None, *, preset: Optional[str] = None) -> Any:
    """The sizes ``key`` has in the preset this machine runs (:func:`preset_name` of ``dev``), or in
    ``preset``: a copy (the caller may change it). A ``dev`` given beside ``preset`` is still checked."""
    if preset is not None and dev is not None:
        DeviceInfo.of(dev)
    row = preset_row(preset or preset_name(dev))
    if key not in row.sizes:
        raise ValueError(f"key must be one of {sorted(row.sizes)}, got {key!r}")
    return copy.deepcopy(row.sizes[key])


def pick_preset(tiny: P, full: P, small: Optional[P] = None, *, dev: Any = None, **others: P) -> P:
    """The value of the preset this machine runs (:func:`preset_name`) among values a caller holds
    itself: ``tiny``, ``small``, ``full`` and any other preset by name. A preset without a value gets
    :func:`default_small` of ``tiny`` and ``full``. ``dev`` simulates a device (a DeviceInfo)."""
    given: Dict[str, Optional[P]] = dict(tiny=tiny, small=small, full=full, **others)
    value = given.get(preset_name(dev))
    return default_small(tiny, full) if value is None else value


def complete_presets(configs: Mapping[str, P]) -> Dict[str, P]:
    """``configs`` (preset name -> an experiment's configuration, ``"tiny"`` and ``"full"`` at least)
    with every preset of :data:`PRESET_TABLE` it lacks set to :func:`default_small` of tiny and full;
    other entries (named experiments such as ``"equal"``) kept."""
    out = dict(configs)
    for name in PRESET_NAMES:
        if name not in out:
            out[name] = default_small(configs["tiny"], configs["full"])
    return out


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
    if info.kind == "cpu":
        return torch.float32
    if forced:
        return getattr(torch, _DTYPE_NAMES[forced])
    return torch.bfloat16 if info.capability >= (8, 0) else torch.float16


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
