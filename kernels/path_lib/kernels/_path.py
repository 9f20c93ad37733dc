"""PaTH attention with Triton kernels: validation, padding, the launch configuration (one
:class:`KernelConfig` per call, built by :func:`kernel_config`: block length, segments, warps, stages,
splits, dtypes and precisions), the launches of the forward and backward kernels (``_triton_kernels.py``:
all per-block, per-segment and attention work is Triton; every launch passes its arguments by parameter
name) and the autograd Function; plus the float32 torch code of ``transform_keys_to_end``.

Memory beyond inputs/outputs: O(T D) per head (per-block factors ``T``, ``T W``, ``K->``, ``Kseg``,
``Q0``, per-block ``D x D`` products during pre/post-processing, per-head float32 gradient buffers)
plus the segment-pair products ``Om`` (``NS (NS - 1) / 2`` matrices of ``D x D``; ``NS`` is chosen so
that this stays below ``T D``).
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from path_lib.validation import check_path_params, check_qkv, check_scale, check_tensor

HEAD_DIMS = (32, 64, 128)
_QDTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _triton():
    import triton  # noqa: F401
    from . import _triton_kernels
    return _triton_kernels


def _tl(name: str):
    """The Triton dtype of a KernelConfig dtype name."""
    import triton.language as tl
    return getattr(tl, name)


# ----------------------------------------------------------------------------------------------
# launch configuration: one KernelConfig per call, built by kernel_config()
# (benchmarks/DESIGN.md, "Launch configuration")
# ----------------------------------------------------------------------------------------------
#
# The measured tables first (each comment says what the setting does and why; benchmarks/HISTORY.md has
# the measurements); kernel_config() is their only reader, and the launches read nothing but its KernelConfig.

# Shared memory (bytes) the largest of the kernels needs at one pipelining stage (``_launch`` lowers the
# stages of the attention loops when they do not fit; the other kernels run at one), read off the
# device-faithful AOT compiles for sm_90 (``benchmarks/results/compile_sm90.json``, triton 3.6 with
# the JIT's divisibility hints): half-precision inputs at BT = 64 (``_bwd_block_kernel`` at
# D = 32 / 64, ``_seg_grad_kernel`` at D = 128), float32 inputs (tf32x3) at BT = 32 (the query side
# at D = 32 / 64, ``_seg_grad_kernel`` at D = 128). Other architectures may need a little more or
# less: the runtime fallback covers that.
_SMEM_HALF_BT64 = {32: 90112, 64: 102400, 128: 188416}
_SMEM_FP32_BT32 = {32: 32768, 64: 81920, 128: 229376}

# blocks per segment at least, for a forward that records no gradient, with half-precision inputs at
# D = 128 and BT = 64: there the D x D segment products cost the forward more than the longer
# own-segment loops save, so longer segments give the faster forward (H200 timings in
# benchmarks/HISTORY.md)
_FWD_ONLY_SEG_BLOCKS = {128: 16}

# warps per kernel on sm_80 and newer, by (head dim, half-precision inputs); kernels missing from an entry
# take the default rule in _warps (H200 measurements in benchmarks/HISTORY.md). The per-block kernels run
# at 4 warps: at 8 they reach 255 registers and spill at D = 64
_WARPS_SM80 = {
    # one warpgroup (4 warps) per 64-row tile for the forward, the query side and the intra kernel; two
    # warpgroups (8 warps) for the 128-row tiles of the query side and of the forward's earlier segments
    # (_fwd_inter_kernel); the backward's segment chain (_seg_bwd_kernel) at 4 warps; the UT solve
    # (_ut_kernel) at one warp, with A formed by its own four-warp kernel (_ut_a_kernel); w and beta are
    # float32 at every input dtype, so one setting for all
    (128, True): dict(ut_a=4, ut=1, prep=4, block=4, intra=4, seg=8, seg_bwd=4, fwd=4, fwd_inter=8, inter_q=8, inter_kv=8),
    (128, False): dict(ut_a=4, ut=1, prep=4, block=4, intra=8, seg=8),
    (64, True): dict(ut_a=4, ut=1, prep=4, block=4, intra=4, seg=4),
    # float32 (tf32x3): at 4 warps ptxas gives the intra / block kernels a 10 KB stack
    (64, False): dict(ut_a=4, ut=1, prep=4, block=8, intra=8, seg=4),
}

# pipelining depth per attention loop for half-precision inputs where shared memory is plentiful (at least
# _STAGES_MIN_SMEM bytes per block; elsewhere 1) (H200 timings in benchmarks/HISTORY.md): the forward
# kernel's own-segment loop runs shorter unpipelined (at D = 128 it then needs 49152 bytes of shared
# memory instead of 221440: two programs per SM, as registers allow, instead of one); the long loops
# over earlier segments gain from a third stage
_STAGES_HALF = dict(fwd=1, fwd_inter=3, inter_q=3, inter_kv=3)
_STAGES_MIN_SMEM = 160 * 1024

# how the backward splits its D x D segment matrices (rows of the carried gradient per program of
# _seg_bwd_kernel, columns per chunk in _seg_grad_kernel, the query side's dSeg and the key side's dKseg)
# and the head dim of _bwd_block_kernel (columns per chunk), by head dim; from the AOT compiles and H200
# timings in benchmarks/HISTORY.md. Module-level so that the CPU tests can split small head dims too
_SEG_SPLIT = {128: 32}
_BLOCK_COLS = {64: 32, 128: 32}
# head-dim columns per chunk of _bwd_diag_kernel for half-precision inputs at BT = 64, by head dim; other
# configurations (float32, smaller blocks) take at most 64. With W and T W read in the transport dtype,
# whole 128-column tiles are the faster at D = 128 (H200 timings in benchmarks/HISTORY.md)
_DIAG_COLS = {64: 64, 128: 128}
# rows per program of _bwd_inter_kv_kernel (keys), _bwd_inter_q_kernel (queries) and _fwd_inter_kernel
# (the forward's earlier segments) for half-precision inputs at BT = 64 (a multiple of BT whose blocks
# tile the segments and the sequence, else one block), by head dim (H200, benchmarks/HISTORY.md: at
# D = 64, 128 key rows double the key side's time and 128 query rows do not speed up the query side)
_KEY_ROWS = {128: 128}
_QUERY_ROWS = {128: 128}
_FWD_ROWS = {64: 128, 128: 128}

# the keys of the PATH_KERNELS_* overrides (and of KernelConfig.warps / .stages)
WARP_KEYS = ("ut_a", "ut", "prep", "block", "intra", "diag", "seg", "seg_bwd", "fwd", "fwd_inter", "inter_q", "inter_kv")
STAGE_KEYS = ("fwd", "fwd_inter", "inter_q", "inter_kv")
ROW_KEYS = ("key_rows", "query_rows", "fwd_rows")
SPLIT_KEYS = ("seg_split", "block_cols", "diag_cols") + ROW_KEYS


# ---- the PATH_KERNELS_* environment variables: one parser ------------------------------------

@dataclass(frozen=True)
class Overrides:
    """The ``PATH_KERNELS_*`` environment variables, parsed (:func:`env_overrides`). For tuning and
    diagnosis: they change how the work is laid out, never what is computed.

    * ``warps``: ``PATH_KERNELS_WARPS="intra=8,block=4"`` (keys ``WARP_KEYS``; 1, 2, 4, 8, 16);
    * ``stages``: ``PATH_KERNELS_STAGES="fwd=1,inter_kv=3"`` (keys ``STAGE_KEYS``; 1 to 4);
    * ``split``: ``PATH_KERNELS_SPLIT="seg_split=32,key_rows=128"`` (keys ``SPLIT_KEYS``; 16, 32, 64, 128;
      column keys are capped at the head dim, row keys still have to tile the segments);
    * ``pad_d32``: ``PATH_KERNELS_PAD_D32=0/1`` (None: the default, on for compute capability 9.x);
    * ``bwd_slices``: ``PATH_KERNELS_BWD_SLICES=n`` (a positive integer; None: :func:`backward_slices`'
      rule), the batch slices the backward runs in (at most the batch);
    * ``sync``: ``PATH_KERNELS_SYNC=0/1`` (synchronize around every launch; read once, at import).
    """
    warps: Tuple[Tuple[str, int], ...] = ()
    stages: Tuple[Tuple[str, int], ...] = ()
    split: Tuple[Tuple[str, int], ...] = ()
    pad_d32: Optional[bool] = None
    bwd_slices: Optional[int] = None
    sync: bool = False
    text: Tuple[Tuple[str, str], ...] = ()   # (variable, value) of every variable that is set


_ITEM_VARS = {  # variable: (Overrides field, keys, values, example)
    "PATH_KERNELS_WARPS": ("warps", WARP_KEYS, (1, 2, 4, 8, 16), "intra=8,block=4"),
    "PATH_KERNELS_STAGES": ("stages", STAGE_KEYS, (1, 2, 3, 4), "fwd=1,inter_kv=3"),
    "PATH_KERNELS_SPLIT": ("split", SPLIT_KEYS, (16, 32, 64, 128), "seg_split=32,diag_cols=64"),
}
_FLAG_VARS = {"PATH_KERNELS_PAD_D32": "pad_d32", "PATH_KERNELS_SYNC": "sync"}


def env_overrides(environ=None) -> Overrides:
    """Parse every ``PATH_KERNELS_*`` variable of ``environ`` (default ``os.environ``); a malformed value
    is a ``ValueError`` that names the variable. Item lists are ``key=value`` pairs separated by commas
    (spaces allowed), each key at most once; flags are ``0`` or ``1`` (empty: unset)."""
    env = os.environ if environ is None else environ
    out, text = {}, []
    for var, (field, keys, values, example) in _ITEM_VARS.items():
        spec = env.get(var, "")
        items = {}
        for item in filter(None, (s.strip() for s in spec.split(","))):
            name, eq, val = (s.strip() for s in item.partition("="))
            if not eq or name not in keys or not val.isdigit() or int(val) not in values or name in items:
                why = "a repeated key" if name in items else "a malformed item"
                raise ValueError(f"{var}: expected comma-separated items like '{example}' with keys "
                                 f"{', '.join(keys)} (each once) and values {', '.join(map(str, values))}; "
                                 f"got {why} {item!r} in {spec!r}")
            items[name] = int(val)
        out[field] = tuple(items.items())
        if spec.strip():
            text.append((var, spec))
    spec = env.get("PATH_KERNELS_BWD_SLICES", "").strip()
    if spec and not (spec.isdigit() and int(spec) >= 1):
        raise ValueError(f"PATH_KERNELS_BWD_SLICES: expected a positive integer (or unset), got {spec!r}")
    out["bwd_slices"] = int(spec) if spec else None
    if spec:
        text.append(("PATH_KERNELS_BWD_SLICES", spec))
    for var, field in _FLAG_VARS.items():
        spec = env.get(var, "").strip()
        if spec not in ("", "0", "1"):
            raise ValueError(f"{var}: expected 0 or 1 (or unset), got {spec!r}")
        out[field] = None if spec == "" and field == "pad_d32" else spec == "1"
        if spec:
            text.append((var, spec))
    return Overrides(text=tuple(text), **out)


# ---- the device, as far as the configuration depends on it ------------------------------------

@dataclass(frozen=True)
class DeviceInfo:
    """What the configuration reads off a device: its kind (``"cuda"`` or ``"cpu"``, the interpreter),
    compute capability, opt-in shared memory per block (bytes) and multiprocessors (``sms``, read by
    :func:`backward_slices`). ``key`` names a real device (its
    ``str``, e.g. ``"cuda:0"``) and is what the out-of-resources fallback state is kept under; a device
    described by hand (``H200``, ``A100``, ``T4``...) has none, so no fallback state applies to it."""
    kind: str
    capability: Tuple[int, int] = (0, 0)
    smem: int = 0
    name: str = ""
    key: Optional[str] = None
    sms: int = 0  # multiprocessors (0: not known; the backward then runs in one batch slice)

    @staticmethod
    def of(device) -> "DeviceInfo":
        """The description of a ``torch.device`` (or its name), read through ``torch.cuda``."""
        if isinstance(device, DeviceInfo):
            return device
        device = torch.device(device)
        if device.type != "cuda":
            return DeviceInfo(device.type, name="Triton interpreter", key=str(device))
        props = torch.cuda.get_device_properties(device)
        smem = getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024
        cap = tuple(torch.cuda.get_device_capability(device))
        return DeviceInfo("cuda", (int(cap[0]), int(cap[1])), int(smem), str(getattr(props, "name", "")),
                          str(device), int(getattr(props, "multi_processor_count", 0) or 0))


# devices described by hand (opt-in shared memory per block, compute capability), for configurations
# asked without the device: kernels.blocking, benchmarks/compile_check.py, path_lib/speed.py. Only the
# H200 has run the kernels
H200 = DeviceInfo("cuda", (9, 0), 232448, "H100 / H200", sms=132)
A100 = DeviceInfo("cuda", (8, 0), 166912, "A100", sms=108)
SM86 = DeviceInfo("cuda", (8, 6), 101376, "sm_86 / sm_89")
T4 = DeviceInfo("cuda", (7, 5), 65536, "T4", sms=40)
CPU = DeviceInfo("cpu", name="Triton interpreter")


# ---- the out-of-resources fallback state ------------------------------------------------------

class FallbackState:
    """What the out-of-resources fallback has learnt in this process; :func:`kernel_config` consults it,
    and only the fallback writes it (``_next_config`` and ``_launch``). Keys start with the device's
    ``DeviceInfo.key``; ``kernels.fallback_state()`` returns the one in use.

    * ``max_block[(device, dtype, D)]``: the largest block length known to fit (set when a launch at a
      longer block ran out of shared memory); applies to CUDA calls that do not give ``block_size``;
    * ``one_segment``: the ``(device, dtype, D)`` that need the single-segment mode (no ``D x D`` segment
      products: set when even 16-token blocks did not fit); applies to calls that do not give
      ``seg_blocks``;
    * ``stages[(device, dtype, D, BT, loop, warps, rows)]``: the deepest pipelining of attention loop
      ``loop`` (``STAGE_KEYS``) that fitted, after a launch at a deeper one ran out of shared memory
      (``rows``: the loop's rows per program, or for ``fwd`` whether the forward is split).
    """

    def __init__(self):
        self.max_block = {}
        self.one_segment = set()
        self.stages = {}

    def clear(self):
        self.max_block.clear()
        self.one_segment.clear()
        self.stages.clear()

    def as_dict(self) -> dict:
        """Printable (dtypes as names)."""
        def name(key):
            return ", ".join(str(x).replace("torch.", "") for x in key)
        return dict(max_block={name(k): v for k, v in self.max_block.items()},
                    one_segment=sorted(name(k) for k in self.one_segment),
                    stages={name(k): v for k, v in self.stages.items()})

    def __repr__(self):
        return f"FallbackState({self.as_dict()})"


_FALLBACK = FallbackState()


def fallback_state() -> FallbackState:
    """The out-of-resources fallback state of this process (:class:`FallbackState`)."""
    return _FALLBACK


# ---- the configuration ----------------------------------------------------------------------

@dataclass(frozen=True)
class Warps:
    """``num_warps`` per kernel (``ut_a`` is ``_ut_a_kernel``, ``ut`` the UT solve ``_ut_kernel``; ``seg`` is
    ``_seg_fwd_kernel``, ``_pair_kernel`` and ``_seg_grad_kernel``; ``seg_bwd`` is ``_seg_bwd_kernel``;
    ``delta``, ``_delta_kernel``, is always 4 and not overridable)."""
    ut_a: int
    ut: int
    prep: int
    block: int
    intra: int
    diag: int
    seg: int
    seg_bwd: int
    fwd: int
    fwd_inter: int
    inter_q: int
    inter_kv: int
    delta: int = 4

    def __getitem__(self, key: str) -> int:
        return getattr(self, key)


@dataclass(frozen=True)
class Stages:
    """``num_stages`` (software-pipelining depth) of the four attention loops; every other kernel runs
    at one stage."""
    fwd: int
    fwd_inter: int
    inter_q: int
    inter_kv: int

    def __getitem__(self, key: str) -> int:
        return getattr(self, key)


@dataclass(frozen=True)
class KernelConfig:
    """Everything a ``path_attention`` launch uses besides the tensors' shapes, built by
    :func:`kernel_config` (the only place where it is chosen). Printable (``str``) and storable
    (:meth:`as_dict`).

    * ``device`` (``cuda:0``, ``cpu``, or the name of a device described by hand), ``device_name``,
      ``capability``, ``smem``: the device it was built for; ``dtype`` (q's, as a name),
      ``head_dim`` ``D``, ``seq_len`` ``T`` (the longest sequence with ``cu_seqlens``), ``forward_only``
      (no gradient will be asked for);
    * ``block`` ``BT`` (tokens per block), ``seg_blocks`` ``SB`` (blocks per segment), ``n_blocks``
      ``NB = ceil(T / BT)``, ``n_segments`` ``NS = ceil(NB / SB)`` (one: the segment kernels are skipped);
    * ``warps`` (:class:`Warps`), ``stages`` (:class:`Stages`);
    * splits: ``seg_split`` (rows ``DR`` per program of ``_seg_bwd_kernel``; columns ``DC`` per chunk of
      ``_seg_grad_kernel``, the query side's dSeg and the key side's dKseg), ``block_cols`` (``DC`` of
      ``_bwd_block_kernel``), ``diag_cols`` (``DC`` of ``_bwd_diag_kernel``), ``key_rows`` (``KR``,
      ``_bwd_inter_kv_kernel``), ``query_rows`` (``QR``, ``_bwd_inter_q_kernel``), ``fwd_rows`` (``QR`` of
      ``_fwd_inter_kernel``; ``== block``: no split, ``_fwd_kernel`` does the earlier segments);
    * dtypes (Triton names): ``compute_dtype`` (``CDT``: logits and ``P V``), ``transport_dtype`` (the
      forward's ``TDT``), ``backward_transport_dtype`` (the backward's ``TDT``);
    * dot precisions: ``precision`` (``PREC`` of the attention kernels), ``block_precision`` (``PREC`` of
      the per-block and per-segment kernels), ``solve_precision`` (the UT solve and the pair products);
    * ``pad_head_dim``: head dim 32 that ``path_attention`` runs as 64 (zero-padded) on this device, i.e.
      under ``kernel_config(..., D=64)``; ``notes``: what changed the defaults (arguments, ``PATH_KERNELS_*``
      variables, the out-of-resources fallback).
    """
    device: str
    device_name: str
    capability: Tuple[int, int]
    smem: int
    dtype: str
    head_dim: int
    seq_len: int
    forward_only: bool
    block: int
    seg_blocks: int
    n_blocks: int
    n_segments: int
    warps: Warps
    stages: Stages
    seg_split: int
    block_cols: int
    diag_cols: int
    key_rows: int
    query_rows: int
    fwd_rows: int
    compute_dtype: str
    transport_dtype: str
    backward_transport_dtype: str
    precision: str
    block_precision: str
    solve_precision: str
    pad_head_dim: bool = False
    notes: Tuple[str, ...] = ()
    # the device's DeviceInfo.key (None for a device described by hand): where _launch records a lowered
    # pipelining depth in the fallback state
    _key: Optional[str] = dataclasses.field(default=None, repr=False)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def fwd_split(self) -> bool:
        """Whether ``_fwd_inter_kernel`` does the forward's earlier segments."""
        return self.fwd_rows > self.block

    def as_dict(self) -> dict:
        """A JSON-ready dict (nested dicts for ``warps`` and ``stages``, lists for tuples)."""
        d = dataclasses.asdict(self)
        del d["_key"]
        d["capability"] = list(self.capability)
        d["notes"] = list(self.notes)
        return d

    def __str__(self) -> str:
        mode = "forward only" if self.forward_only else "with gradients"
        where = self.device if self.device == self.device_name else f"{self.device} ({self.device_name})"
        if self.capability != (0, 0):
            where += f", sm_{self.capability[0]}{self.capability[1]}, {self.smem} B of shared memory per block"
        w = ", ".join(f"{f.name} {getattr(self.warps, f.name)}" for f in dataclasses.fields(Warps))
        s = ", ".join(f"{f.name} {getattr(self.stages, f.name)}" for f in dataclasses.fields(Stages))
        split = "split: _fwd_inter_kernel" if self.fwd_split else "not split"
        lines = [
            f"KernelConfig: {self.dtype}, D = {self.head_dim}, T = {self.seq_len}, {mode}; {where}",
            f"  blocks:     BT = {self.block}, SB = {self.seg_blocks} blocks per segment "
            f"(NB = {self.n_blocks} blocks, NS = {self.n_segments} segments)",
            f"  warps:      {w}",
            f"  stages:     {s}",
            f"  splits:     seg_split {self.seg_split}, block_cols {self.block_cols}, diag_cols {self.diag_cols}, "
            f"key_rows {self.key_rows}, query_rows {self.query_rows}, fwd_rows {self.fwd_rows} (forward {split})",
            f"  dtypes:     compute {self.compute_dtype}, forward transports {self.transport_dtype}, "
            f"backward transports {self.backward_transport_dtype}",
            f"  precisions: attention {self.precision}, per-block {self.block_precision}, "
            f"UT solve and pair products {self.solve_precision}",
        ]
        if self.pad_head_dim:
            lines.append("  head dim 32 runs as 64 here (zero-padded): path_attention uses kernel_config(..., D=64)")
        if self.notes:
            lines.append(f"  notes:      {'; '.join(self.notes)}")
        return "\n".join(lines)


def _segments(n: int, BT: int, D: int) -> int:
    """Blocks per segment: about sqrt(2 T / D) segments, so the ``D x D`` pair products cost <~ T D."""
    ns_max = max(1, int(math.sqrt(2.0 * n * BT / D)))
    return max(2, -(-n // ns_max))


def _block_length(dev: DeviceInfo, dtype, D: int, notes: list) -> int:
    """Block length from the device's shared memory (``_SMEM_*`` tables), then at most what the fallback
    learnt. Off CUDA (the interpreter): 64, or 32 for float32."""
    if dev.kind != "cuda":
        return 64 if dtype != torch.float32 else 32
    if dtype == torch.float32:
        BT = 32 if dev.smem >= _SMEM_FP32_BT32[D] else 16
    else:
        need = _SMEM_HALF_BT64[D]
        BT = 64 if dev.smem >= need else (32 if dev.smem >= need // 2 else 16)
    known = _FALLBACK.max_block.get((dev.key, dtype, D)) if dev.key else None
    if known is not None and known < BT:
        BT = known
        notes.append(f"block {BT}: a longer block ran out of shared memory")
    return BT


def _warps(dev: DeviceInfo, half: bool, D: int, over: dict) -> Warps:
    """Warps per kernel: ``_WARPS_SM80`` on sm_80 and newer; then the defaults (attention kernels
    ``4 if D <= 64 else 8``, 4 before sm_80; ``fwd_inter`` as ``fwd``, ``diag`` as ``intra``, ``seg_bwd``
    as ``seg``; D = 32, older GPUs and the interpreter take the default for every kernel); then
    ``PATH_KERNELS_WARPS``."""
    default = 4 if D <= 64 else 8
    if dev.kind == "cuda" and dev.capability[0] < 8:
        default = 4
    if dev.kind == "cuda" and dev.capability[0] >= 8 and D >= 64:
        out = dict(_WARPS_SM80[(128 if D >= 128 else 64, half)])
    else:
        out = {key: default for key in WARP_KEYS}
    for key in ("fwd", "inter_q", "inter_kv"):
        out.setdefault(key, default)
    out.setdefault("fwd_inter", out["fwd"])
    out.setdefault("diag", out["intra"])
    out.setdefault("seg_bwd", out["seg"])
    out.update(over)
    return Warps(**out)


def _rows(table: dict, override: Optional[int], D: int, BT: int, SB: int, NB: int, half: bool) -> int:
    """Rows per program from ``table`` at ``BT = 64`` with half-precision inputs (where they were
    measured; smaller blocks, i.e. GPUs with less shared memory, and float32 keep one block per program),
    or the override; one block unless the rows are a multiple of ``BT`` whose blocks tile both the
    segment and the sequence."""
    rows = override or (table.get(D, BT) if half and BT == 64 else BT)
    nblk = rows // BT
    if rows % BT or nblk < 1 or SB % nblk or NB % nblk:
        return BT
    return rows


def _dtypes(dev: DeviceInfo, dtype) -> dict:
    """Dtypes and dot precisions by role (the precision-by-role table of the kernels' design), as names.

    * half-precision inputs: logits and ``P V`` in the input dtype (``compute_dtype``); the forward's
      transports in fp16 (``transport_dtype``: three more mantissa bits than bf16, and the factors are
      bounded); the backward's in the input dtype (``backward_transport_dtype``: gradients of ~1e-6 are
      subnormal in fp16); tf32 for the attention and per-block products, float32 accuracy for the UT solve
      and the pair products;
    * float32 inputs: float32 everywhere, float32 accuracy: ``tf32x3`` (three tf32 products on the tensor
      cores) on sm_80 and newer, ``ieee`` on the CPU interpreter and before Ampere (no tf32 there).
    """
    fp32_prec = "tf32x3" if dev.kind == "cuda" and dev.capability[0] >= 8 else "ieee"
    if dtype == torch.float32:
        return dict(compute_dtype="float32", transport_dtype="float32", backward_transport_dtype="float32",
                    precision=fp32_prec, block_precision=fp32_prec, solve_precision=fp32_prec)
    cdt = "float16" if dtype == torch.float16 else "bfloat16"
    # the backward's segment and block kernels work on row blocks / column chunks (seg_split,
    # block_cols), so their tf32 operands fit in shared memory at D = 128 too
    return dict(compute_dtype=cdt, transport_dtype="float16", backward_transport_dtype=cdt,
                precision="tf32", block_precision="tf32", solve_precision=fp32_prec)


def _stage_key(dev_key, dtype, D: int, BT: int, loop: str, warps: int, rows: dict, NS: int) -> tuple:
    """The fallback state's key of an attention loop's pipelining depth: what sets its shared memory
    besides the stages (the rows per program; for the forward, whether it is split and has segments)."""
    marker = {"fwd": (rows["fwd_rows"], NS > 1), "fwd_inter": rows["fwd_rows"], "inter_q": rows["query_rows"],
              "inter_kv": rows["key_rows"]}[loop]
    return (dev_key, dtype, D, BT, loop, warps, marker)


def kernel_config(device, dtype, D: int, T: int, forward_only: bool = False, *,
                  block_size: Optional[int] = None, seg_blocks: Optional[int] = None) -> KernelConfig:
    """The launch configuration of ``path_attention`` for q of ``dtype`` and head dim ``D``, sequence
    length ``T`` (with ``cu_seqlens``: the longest sequence) on ``device`` (a ``torch.device``, or a
    :class:`DeviceInfo` such as ``H200`` for a device that is not here), in a call that records gradients
    or (``forward_only``) one that does not. ``block_size`` and ``seg_blocks`` override the block length
    and the blocks per segment (tests; the out-of-resources retry).

    In order: the block length from the device's opt-in shared memory (``_block_length``), the blocks per
    segment (about ``sqrt(2 T / D)`` segments, ``_segments``; at least ``_FWD_ONLY_SEG_BLOCKS`` for a
    half-precision forward-only call at BT = 64), the warps (``_warps``), the stages (``_STAGES_HALF``
    where shared memory is plentiful), the splits (``_SEG_SPLIT`` ... ``_FWD_ROWS``), the dtypes and
    precisions (``_dtypes``); the ``PATH_KERNELS_*`` overrides (:func:`env_overrides`) and the
    out-of-resources fallback state (:class:`FallbackState`) on top. Raises ``ValueError`` for a head dim
    outside ``HEAD_DIMS``, a dtype outside float16 / bfloat16 / float32 or a malformed override."""
    dev = DeviceInfo.of(device)
    if dtype not in _QDTYPES:
        raise ValueError(f"kernel_config: dtype must be one of float16, bfloat16, float32, got {dtype}")
    if D not in HEAD_DIMS:
        raise ValueError(f"kernel_config: head dim must be one of {HEAD_DIMS}, got {D}")
    env = env_overrides()
    half = dtype != torch.float32
    notes = [f"{var}={val}" for var, val in env.text if var != "PATH_KERNELS_SYNC"]
    # block length and segments
    if block_size is not None:
        BT = block_size
        notes.append(f"block_size {BT} given")
    else:
        BT = _block_length(dev, dtype, D, notes)
    n = max(1, -(-T // BT))
    if seg_blocks is not None:
        SB = seg_blocks
        notes.append(f"seg_blocks {SB} given")
    else:
        SB = _segments(n, BT, D)
        if forward_only and half and BT == 64:
            SB = max(SB, min(n, _FWD_ONLY_SEG_BLOCKS.get(D, 0)))
        if dev.key and (dev.key, dtype, D) in _FALLBACK.one_segment:
            SB = n
            notes.append("one segment: 16-token blocks with segments ran out of shared memory")
    NS = -(-n // SB)
    # warps
    warps = _warps(dev, half, D, dict(env.warps))
    # splits
    split = dict(env.split)
    col = {key: min(split[key], D) for key in ("seg_split", "block_cols", "diag_cols") if key in split}
    diag = _DIAG_COLS.get(D, D)
    rows = dict(key_rows=_rows(_KEY_ROWS, split.get("key_rows"), D, BT, SB, n, half),
                query_rows=_rows(_QUERY_ROWS, split.get("query_rows"), D, BT, SB, n, half),
                fwd_rows=_rows(_FWD_ROWS, split.get("fwd_rows"), D, BT, SB, n, half) if NS > 1 else BT)
    # stages: the override, else the table where shared memory is plentiful; then at most what fitted
    stage_over = dict(env.stages)
    big = dev.kind == "cuda" and dev.smem >= _STAGES_MIN_SMEM and half
    stages = {}
    for loop in STAGE_KEYS:
        s = stage_over.get(loop, _STAGES_HALF[loop] if big else 1)
        known = _FALLBACK.stages.get(_stage_key(dev.key, dtype, D, BT, loop, warps[loop], rows, NS)) \
            if dev.key else None
        if known is not None and known < s:
            s = known
            notes.append(f"stages {loop} {s}: a deeper pipeline ran out of shared memory")
        stages[loop] = s
    pad = D == 32 and (env.pad_d32 if env.pad_d32 is not None else
                       dev.kind == "cuda" and dev.capability[0] == 9)
    return KernelConfig(
        device=dev.key or dev.name or dev.kind, device_name=dev.name or dev.key or dev.kind,
        capability=dev.capability, smem=dev.smem,
        dtype=str(dtype).replace("torch.", ""), head_dim=D, seq_len=T, forward_only=bool(forward_only),
        block=BT, seg_blocks=SB, n_blocks=n, n_segments=NS, warps=warps, stages=Stages(**stages),
        seg_split=col.get("seg_split") or _SEG_SPLIT.get(D, D),
        block_cols=col.get("block_cols") or _BLOCK_COLS.get(D, D),
        diag_cols=col.get("diag_cols") or (diag if half and BT == 64 else min(diag, 64)),
        **rows, **_dtypes(dev, dtype), pad_head_dim=bool(pad), notes=tuple(notes), _key=dev.key)


# ----------------------------------------------------------------------------------------------
# float32 block-level precomputation (torch)
# ----------------------------------------------------------------------------------------------

def _blocks(x: torch.Tensor, BT: int) -> torch.Tensor:
    """``[B, T, H, D]`` -> ``[B, H, NB, BT, D]`` (float32)."""
    B, T, H, D = x.shape
    return x.float().view(B, T // BT, BT, H, D).permute(0, 3, 1, 2, 4)


def _unblocks(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, NB, BT, D]`` -> ``[B, NB*BT, H, D]``."""
    B, H, NB, BT, D = x.shape
    return x.permute(0, 2, 3, 1, 4).reshape(B, NB * BT, H, D)


def _ut(Wb, bb):
    """UT transform per block: returns N = (I + A)^-1, T = N diag(beta), and W W^T."""
    BT = Wb.shape[-2]
    eye = torch.eye(BT, dtype=Wb.dtype, device=Wb.device)
    WWt = Wb @ Wb.transpose(-1, -2)
    A = torch.tril(bb[..., :, None] * WWt, diagonal=-1)
    N = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
    return N, N * bb[..., None, :], WWt


def _seg_view(x, BT, SB):
    """``[B, T, H, D]`` (T = NB * BT) -> ``[B, H, NS, SB, BT, D]`` float32, zero-padded to NS * SB blocks."""
    B, T, H, D = x.shape
    NB = T // BT
    NS = -(-NB // SB)
    xb = x.float().view(B, NB, BT, H, D).permute(0, 3, 1, 2, 4)
    if NS * SB > NB:
        xb = torch.cat([xb, xb.new_zeros(B, H, NS * SB - NB, BT, D)], dim=2)
    return xb.reshape(B, H, NS, SB, BT, D)


def _seg_unview(x, NB):
    """``[B, H, NS, SB, BT, D]`` -> ``[B, NB * BT, H, D]``."""
    B, H, NS, SB, BT, D = x.shape
    return x.reshape(B, H, NS * SB, BT, D)[:, :, :NB].permute(0, 2, 3, 1, 4).reshape(B, NB * BT, H, D)


def _suffix_products(Ws, TWs):
    """R_j = P_e ... P_{j+1} inside each segment (R_e = I), by thin updates R <- R - (R W^T)(T W).
    Ws, TWs: ``[B, H, NS, SB, BT, D]``. Returns the list R (``[B, H, NS, D, D]`` each) and Seg = R_0 P_0."""
    B, H, NS, SB, BT, D = Ws.shape
    eye = torch.eye(D, dtype=Ws.dtype, device=Ws.device)
    R = [None] * SB
    R[SB - 1] = eye.expand(B, H, NS, D, D).contiguous()
    for j in range(SB - 2, -1, -1):
        Rn = R[j + 1]
        R[j] = Rn - (Rn @ Ws[:, :, :, j + 1].transpose(-1, -2)) @ TWs[:, :, :, j + 1]
    Seg = R[0] - (R[0] @ Ws[:, :, :, 0].transpose(-1, -2)) @ TWs[:, :, :, 0]
    return R, Seg


def _pair_products(Seg):
    """Om(kc, k) = Seg_{kc-1} ... Seg_{k+1} for 0 <= k < kc < NS, stacked triangularly
    (index kc (kc - 1) / 2 + k): ``[B, H, max(1, NS (NS-1)/2), D, D]``."""
    B, H, NS, D, _ = Seg.shape
    eye = torch.eye(D, dtype=Seg.dtype, device=Seg.device)
    if NS <= 1:
        return eye.expand(B, H, 1, D, D).contiguous()
    full = [[None] * NS for _ in range(NS)]
    for kc in range(1, NS):
        full[kc][kc - 1] = eye.expand(B, H, D, D)
    for dist in range(1, NS - 1):  # Om(kc, kc-1-dist) = Om(kc, kc-dist) Seg_{kc-dist}
        kcs = list(range(dist + 1, NS))
        prev = torch.stack([full[kc][kc - dist] for kc in kcs], dim=2)
        new = prev @ Seg[:, :, [kc - dist for kc in kcs]]
        for i, kc in enumerate(kcs):
            full[kc][kc - 1 - dist] = new[:, :, i]
    out = [full[kc][k] for kc in range(1, NS) for k in range(kc)]
    return torch.stack(out, dim=2).contiguous()


def _precompute(k, w, beta, cfg: KernelConfig):
    """Per-block factors, per-segment products and the segment-pair products ``Om`` (``NS (NS-1)/2``
    matrices of ``D x D``), all in Triton, at ``cfg``'s block length, segments, warps and precisions.
    Inputs padded ``[B, T, Hk, D]``; w, beta float32 contiguous. For a call that records no gradient
    (``cfg.forward_only``) the factors only the backward reads, ``N`` and the suffix products ``R_j``,
    are neither allocated nor written: ``NM`` and ``RS`` are then None. ``OM`` is in k's dtype, the
    rest float32 but the token tensors ``KA`` and ``KS`` (k's dtype)."""
    kern = _triton()
    B, T, HK, D = k.shape
    BT, SB, NB, NS = _blocks_of(cfg, T)
    dev = k.device
    f32 = dict(dtype=torch.float32, device=dev)
    TW = torch.empty(B, T, HK, D, **f32)
    KA = torch.empty(B, T, HK, D, dtype=k.dtype, device=dev)
    TM = torch.empty(B, HK, NB, BT, BT, **f32)
    MM = torch.empty(B, HK, NB, BT, BT, **f32)
    keep = not cfg.forward_only
    NM = torch.empty(B, HK, NB, BT, BT, **f32) if keep else None
    _run(kern._ut_a_kernel, (NB, B * HK), cfg.warps.ut_a,
         W=w, BETA=beta, UT_T=TM, T=T, NB=NB, HK=HK, D=D, BT=BT, SOLVE_PREC=cfg.solve_precision)
    _run(kern._ut_kernel, (NB, B * HK), cfg.warps.ut,
         BETA=beta, UT_T=TM, UT_N=NM if keep else TM, T=T, NB=NB,
         HK=HK, BT=BT, SOLVE_PREC=cfg.solve_precision, STORE_N=keep)
    _run(kern._prep_kernel, (NB, B * HK), cfg.warps.prep,
         K=k, W=w, UT_TW=TW, K_BLOCK_END=KA, UT_T=TM, UT_M=MM, T=T, NB=NB,
         HK=HK, D=D, BT=BT, PREC=cfg.block_precision)
    if NS == 1:  # one segment: no segment products (the kernels compile their segment loops out and
        # read none of them; an expanded identity holds their place without memory)
        OM = torch.eye(D, **f32).expand(B, HK, 1, D, D)
        return dict(TW=TW, KA=KA, KS=KA, TM=TM, MM=MM, NM=NM, RS=OM, SEG=OM, OM=OM)
    KS = torch.empty(B, T, HK, D, dtype=k.dtype, device=dev)
    RS = torch.empty(B, HK, NB, D, D, **f32) if keep else None
    Seg = torch.empty(B, HK, NS, D, D, **f32)
    _run(kern._seg_fwd_kernel, (NS, B * HK), cfg.warps.seg,
         W=w, UT_TW=TW, K_BLOCK_END=KA, K_SEG_END=KS, SUFFIX_R=RS if keep else Seg, SEG_PROD=Seg, T=T, NB=NB,
         NS=NS, SB=SB, HK=HK, D=D, BT=BT, PREC=cfg.block_precision, STORE_R=keep)
    # Om in the input dtype: the forward's and the backward's products read it only rounded to it
    OM = torch.empty(B, HK, NS * (NS - 1) // 2, D, D, dtype=k.dtype, device=dev)
    _run(kern._pair_kernel, (NS - 1, B * HK), cfg.warps.seg,
         SEG_PROD=Seg, PAIR_PROD=OM, NS=NS, HK=HK, D=D, PREC=cfg.solve_precision)
    return dict(TW=TW, KA=KA, KS=KS, TM=TM, MM=MM, NM=NM, RS=RS, SEG=Seg, OM=OM)


# ----------------------------------------------------------------------------------------------
# launches
# ----------------------------------------------------------------------------------------------

# PATH_KERNELS_SYNC=1: synchronize before and after every kernel launch and name the kernel in the
# error (a CUDA fault is otherwise reported asynchronously, at some later call); read at import
_SYNC = env_overrides().sync


def _blocks_of(cfg: KernelConfig, T: int):
    """``(BT, SB, NB, NS)`` of ``cfg`` for padded tensors of length ``T`` (a multiple of the block)."""
    BT, SB = cfg.block, cfg.seg_blocks
    if T % BT or T // BT != cfg.n_blocks:
        raise RuntimeError(f"PaTH kernels: tensors of length {T} do not match the configuration "
                           f"({cfg.n_blocks} blocks of {BT} tokens)")
    return BT, SB, cfg.n_blocks, cfg.n_segments


def _sync_check(name, where, meta=None):
    if not _SYNC or not torch.cuda.is_available():
        return
    try:
        torch.cuda.synchronize()
    except Exception as e:  # pragma: no cover - GPU only
        what = f"before kernel {name} (an earlier torch op)" if where == "before" else f"in kernel {name}"
        cfg = {k: str(v) for k, v in (meta or {}).items() if not isinstance(v, torch.Tensor)}
        raise RuntimeError(f"PaTH: CUDA error {what} {cfg}: {e}") from e


def _name(kernel) -> str:
    return kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)


def _run(kernel, grid, num_warps: int, **args):
    """Launch at one pipelining stage, every argument by parameter name (the per-block, per-segment,
    intra, diagonal and delta kernels), with the optional sync checks."""
    name = _name(kernel)
    _sync_check(name, "before", args)
    kernel[grid](**args, num_warps=num_warps, num_stages=1)
    _sync_check(name, "after", args)


def _launch(kernel, grid, cfg: KernelConfig, loop: str, **args):
    """Launch attention loop ``loop`` (``STAGE_KEYS``) at ``cfg``'s warps and stages, every argument by
    parameter name; on an out-of-resources error (less shared memory, e.g. a T4) retry with fewer stages
    and record the depth that fitted in the fallback state (:class:`FallbackState`), which later
    configurations of this device, dtype, head dim, block length, warps and rows then start from."""
    import triton
    name = _name(kernel)
    warps = cfg.warps[loop]
    key = _stage_key(cfg._key, cfg.torch_dtype, cfg.head_dim, cfg.block, loop, warps,
                     dict(fwd_rows=cfg.fwd_rows, query_rows=cfg.query_rows, key_rows=cfg.key_rows), cfg.n_segments)
    stages = min(cfg.stages[loop], _FALLBACK.stages.get(key, cfg.stages[loop]))
    first = stages
    _sync_check(name, "before", args)
    while True:
        try:
            kernel[grid](**args, num_warps=warps, num_stages=stages)
            break
        except triton.runtime.errors.OutOfResources:
            if stages <= 1:
                raise
            stages -= 1
    if stages < first and cfg._key is not None:
        _FALLBACK.stages[key] = stages
    _sync_check(name, "after", dict(args, num_stages=stages))


def _forward_impl(q, k, v, w, beta, G, scale, cfg: KernelConfig):
    """Forward kernels at configuration ``cfg``; returns o and the tensors the backward needs."""
    kern = _triton()
    B, T, HQ, D = q.shape
    HK = k.shape[2]
    BT, SB, NB, NS = _blocks_of(cfg, T)
    wf, bf = w.float().contiguous(), beta.float().contiguous()
    pre = _precompute(k, wf, bf, cfg)
    if cfg.forward_only:
        # no backward: T (read only by _prep_kernel) and the segment products (read only by _pair_kernel)
        # are freed before the attention kernels' buffers are taken, which lowers the forward's peak
        pre["TM"] = pre["SEG"] = None
    o = torch.empty_like(q)
    lse = torch.empty(B, HQ, T, dtype=torch.float32, device=q.device)
    # the query states at their segment's start: the backward reads them only in the input dtype
    q0 = torch.empty(B, T, HQ, D, dtype=q.dtype, device=q.device)
    Gh = G.transpose(1, 2).contiguous() if G is not None else lse  # without a gate: any [B, HQ, T] (not read)
    # earlier segments on FR query rows per program in a second kernel, from the partial results
    # of the rows outside the first segment (float32, freed on return)
    split = cfg.fwd_split
    op = torch.empty(B, T, HQ, D, dtype=torch.float32, device=q.device) if split else o
    meta = dict(HQ=HQ, HK=HK, D=D, BT=BT, HAS_G=G is not None, CDT=_tl(cfg.compute_dtype), PREC=cfg.precision)
    _launch(kern._fwd_kernel, (NB, B * HQ), cfg, "fwd",
            Q=q, K=k, V=v, W=wf, UT_TW=pre["TW"], K_BLOCK_END=pre["KA"], K_SEG_END=pre["KS"], UT_M=pre["MM"],
            PAIR_PROD=pre["OM"], GATE_CUMSUM=Gh, O=o, LSE=lse, Q_SEG_START=q0, O_PARTIAL=op,
            scale=scale, T=T, NB=NB, NS=NS, SB=SB,
            **meta, TDT=_tl(cfg.transport_dtype), SEGS=NS > 1, SPLIT=split)
    if split:
        _launch(kern._fwd_inter_kernel, (NB // (cfg.fwd_rows // BT), B * HQ), cfg, "fwd_inter",
                Q_SEG_START=q0, K_SEG_END=pre["KS"], V=v, PAIR_PROD=pre["OM"], GATE_CUMSUM=Gh, O=o, LSE=lse,
                O_PARTIAL=op, scale=scale, T=T, NB=NB, NS=NS, SB=SB,
                **meta, QR=cfg.fwd_rows)
    del op
    saved = (q, k, v, wf, bf, Gh if G is not None else None, o, lse, q0,
             pre["TW"], pre["KA"], pre["KS"], pre["TM"], pre["MM"], pre["NM"], pre["RS"], pre["SEG"], pre["OM"])
    return o, saved


# the backward's batch slices: at least this many programs per multiprocessor in the narrowest
# launches of a slice, and at most this many slices (past four the peak hardly falls: the saved factors
# and the gradients of the inputs are full size)
_BWD_PROGRAMS_PER_SM = 4
_BWD_MAX_SLICES = 4


def backward_slices(device, cfg: KernelConfig, batch: int, key_heads: int) -> int:
    """The number of batch slices ``_backward_impl`` runs the backward in, for ``batch`` sequences of
    ``key_heads`` key heads at configuration ``cfg`` on ``device`` (a ``torch.device`` or a
    :class:`DeviceInfo`). Each slice takes its own float32 working buffers (about nine ``[b, T, Hq, D]``
    tensors at the diagonal kernel), so slices lower the peak; each launch then has fewer programs.
    The rule keeps the narrowest launches (the ``NS x b x Hk`` programs of the segment-sequential
    kernels) at ``_BWD_PROGRAMS_PER_SM`` programs per multiprocessor or more:
    ``min(_BWD_MAX_SLICES, batch, NS batch Hk // (4 SMs))``, at least 1 (1 where the multiprocessors are
    not known, e.g. on the CPU interpreter). ``PATH_KERNELS_BWD_SLICES=n`` sets it (capped at ``batch``)."""
    forced = env_overrides().bwd_slices
    if forced is not None:
        return max(1, min(forced, batch))
    sms = DeviceInfo.of(device).sms
    if sms <= 0:
        return 1
    wide = cfg.n_segments * batch * key_heads // (_BWD_PROGRAMS_PER_SM * sms)
    return max(1, min(_BWD_MAX_SLICES, batch, wide))


def _backward_impl(saved, do, scale, cfg: KernelConfig, has_g):
    """Backward kernels and the float32 segment chain at configuration ``cfg``; returns
    (dq, dk, dv, dw, dbeta, dG). With more than one batch slice (:func:`backward_slices`) the
    gradients of the inputs are allocated first and each slice writes its rows of them; the same
    kernels, the same results."""
    q, k, v = saved[:3]
    B, T, HQ, D = q.shape
    HK = k.shape[2]
    n = backward_slices(q.device, cfg, B, HK)
    do = do.contiguous()
    if n == 1:
        return _backward_slice(saved, do, scale, cfg, has_g)
    f32 = dict(dtype=torch.float32, device=q.device)
    out = dict(dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty_like(v),
               dw=torch.empty(B, T, HK, D, **f32), db=torch.empty(B, T, HK, **f32),
               dg=torch.zeros(B, HQ, T, **f32))
    step = -(-B // n)
    for b0 in range(0, B, step):
        rows = slice(b0, min(B, b0 + step))
        _backward_slice(tuple(None if x is None else x[rows] for x in saved), do[rows], scale, cfg, has_g,
                        out={name: x[rows] for name, x in out.items()})
    return (out["dq"], out["dk"], out["dv"], out["dw"], out["db"],
            out["dg"].transpose(1, 2) if has_g else None)


def _backward_slice(saved, do, scale, cfg: KernelConfig, has_g, out=None):
    """The backward of the batch rows in ``saved`` and ``do`` (contiguous in the batch: slices of it are
    views). Without ``out`` it allocates the gradients of the inputs when they are first written (the
    peak of one slice); with ``out`` (views of the full gradients: dq, dk, dv, dw, db, dg zeroed) it
    writes into them. Returns (dq, dk, dv, dw, dbeta, dG)."""
    kern = _triton()
    (q, k, v, wf, bf, Gh, o, lse, q0, TW, KA, KS, TM, MM, NM, RS, SEG, OM) = saved
    B, T, HQ, D = q.shape
    HK = k.shape[2]
    grp = HQ // HK
    BT, SB, NB, NS = _blocks_of(cfg, T)
    dev = q.device
    f32 = dict(dtype=torch.float32, device=dev)
    delta = torch.empty(B, HQ, T, **f32)  # do . o per query row
    _run(kern._delta_kernel, (NB, B * HQ), cfg.warps.delta, DO=do, O=o, DELTA=delta, T=T, HQ=HQ, D=D, BT=BT)
    # the kernels run in the order of the memory they hold: the inter kernels, then the segment chain
    # (which reads only their gradients), so that dKseg, dSeg and the chain's state are freed before the
    # intra and diagonal kernels take their buffers; the peak is the live buffers' sum at one launch
    dq0 = torch.empty(B, T, HQ, D, **f32)
    dg = torch.zeros(B, HQ, T, **f32) if out is None else out["dg"]
    dv = torch.empty(B, T, HQ, D, **f32)
    Garg = Gh if has_g else lse  # without a gate: any [B, HQ, T] (not read)
    # gradients flow through the transport matmuls of the backward: they are in the input dtype (bf16's
    # range), not the forward's fp16, where the ~1e-6 gradients of a mean-reduced loss would be subnormal
    meta = dict(HQ=HQ, HK=HK, D=D, BT=BT, HAS_G=has_g, CDT=_tl(cfg.compute_dtype),
                TDT=_tl(cfg.backward_transport_dtype), PREC=cfg.precision)
    common = dict(GATE_CUMSUM=Garg, DO=do, LSE=lse, DELTA=delta, scale=scale, T=T, NB=NB)
    # dK->, dW and d(T W), accumulated in place by the segment chain and the intra kernel (zeroed
    # here: zeroing them inside the kernels is no faster)
    dka = torch.zeros(B, T, HQ, D, **f32)
    dw = torch.zeros(B, T, HQ, D, **f32)
    dtwq = torch.zeros(B, T, HQ, D, **f32)
    bprec = cfg.block_precision
    if NS > 1:
        dseg = torch.zeros(B, HQ, NS, D, D, **f32)
        dks = torch.empty(B, T, HQ, D, **f32)  # gradient of Kseg, written by the key side
        # the segment products in the transport dtype (Om is stored in it): the inter kernels use
        # them only rounded to it
        segt = SEG if q.dtype == torch.float32 else SEG.to(q.dtype)
        QR, KR = cfg.query_rows, cfg.key_rows
        _launch(kern._bwd_inter_q_kernel, (NB // (QR // BT), B * HQ), cfg, "inter_q",
                Q_SEG_START=q0, K_SEG_END=KS, V=v, SEG_PROD=segt, PAIR_PROD=OM,
                DQ_SEG_START=dq0, DSEG_PROD=dseg, DGATE=dg, **common, NS=NS, SB=SB,
                **meta, DC=cfg.seg_split, QR=QR)
        _launch(kern._bwd_inter_kv_kernel, (NB // (KR // BT), B * HQ), cfg, "inter_kv",
                Q_SEG_START=q0, K_SEG_END=KS, V=v, PAIR_PROD=OM, DK_SEG_END=dks, DV=dv, DGATE=dg,
                **common, NS=NS, SB=SB, **meta, KR=KR, DC=cfg.seg_split)
        del segt
        if grp > 1:
            dks = dks.view(B, T, HK, grp, D).sum(3)
            dseg = dseg.view(B, HK, grp, NS, D, D).sum(2)
        dks, dseg = dks.contiguous(), dseg.contiguous()
        # chain through Kseg = K-> R^T and Seg = R_0 P_0 (segment suffix products)
        XS = torch.empty(B, HK, NB, D, D, **f32)
        DR = cfg.seg_split
        _run(kern._seg_bwd_kernel, (NS, B * HK, D // DR), cfg.warps.seg_bwd,
             W=wf, UT_TW=TW, K_BLOCK_END=KA, DK_SEG_END=dks, DSEG_PROD=dseg,
             SEG_GRAD_STATE=XS, T=T, NB=NB, NS=NS, SB=SB, HK=HK, D=D, BT=BT, DR=DR, PREC=bprec)
        del dseg  # read only by _seg_bwd_kernel
        # the chain's dK->, d(T W), dW added in place to the per-query-head gradients
        _run(kern._seg_grad_kernel, (NB, B * HK), cfg.warps.seg,
             W=wf, UT_TW=TW, DK_SEG_END=dks, SUFFIX_R=RS, SEG_GRAD_STATE=XS,
             DK_BLOCK_END=dka, DUT_TW=dtwq, DW=dw, T=T, NB=NB,
             HQ=HQ, HK=HK, D=D, BT=BT, DC=DR, PREC=bprec)
        del XS, dks
    else:  # single segment: every pair is inside the segment (intra kernel)
        dq0.zero_()
        dv.zero_()
    # the intra kernel's query states, in the dtype of the products that read them
    scr = torch.empty(B, HQ, NS, SB * BT, D, dtype=q.dtype, device=dev)
    # W and T W for the intra and diagonal kernels in the backward's transport dtype: each of
    # their products rounds them to it anyway, so the copies change no result and halve those loads
    wt, twt = (wf, TW) if q.dtype == torch.float32 else (wf.to(q.dtype), TW.to(q.dtype))
    _run(kern._bwd_intra_kernel, (NS, B * HQ), cfg.warps.intra,
         Q=q, V=v, W=wt, UT_TW=twt, K_BLOCK_END=KA, DQ_SEG_START=dq0, Q_STATE_SCRATCH=scr,
         DK_BLOCK_END=dka, DV=dv, DW=dw, DUT_TW=dtwq, DGATE=dg, **common, NS=NS, SB=SB, **meta)
    del scr
    # written once, by the diagonal kernel: allocated only now, when the intra kernel's scratch is
    # freed
    dq = torch.empty(B, T, HQ, D, dtype=q.dtype, device=dev) if out is None else out["dq"]
    dk = torch.empty(B, T, HQ, D, **f32)
    dt = torch.empty(B, HQ, NB, BT, BT, **f32)
    # the diagonal blocks, one program each, all in parallel
    _run(kern._bwd_diag_kernel, (NB, B * HQ), cfg.warps.diag,
         Q=q, K=k, V=v, W=wt, UT_TW=twt, UT_T=TM, UT_M=MM, DQ_BLOCK_START=dq0,
         DQ=dq, DK=dk, DV=dv, DW=dw, DUT_T=dt, DGATE=dg, **common, **meta, DC=cfg.diag_cols)
    del dq0, wt, twt
    if grp > 1:
        dv = dv.view(B, T, HK, grp, D).sum(3)
    if out is None:
        dv = dv.to(v.dtype)                                              # before the block kernel's outputs
        dk_out = torch.empty_like(k)
        dw_out = torch.empty(B, T, HK, D, **f32)
        db_out = torch.empty(B, T, HK, **f32)
    else:
        dv = out["dv"].copy_(dv)
        dk_out, dw_out, db_out = out["dk"], out["dw"], out["db"]
    _run(kern._bwd_block_kernel, (NB, B * HK), cfg.warps.block,
         K=k, W=wf, BETA=bf, UT_TW=TW, UT_T=TM, UT_M=MM, UT_N=NM,
         DK_BLOCK_END=dka, DK=dk, DW=dw, DUT_T=dt,
         DUT_TW=dtwq, OUT_DK=dk_out, OUT_DW=dw_out, OUT_DBETA=db_out, T=T, NB=NB, GROUP=grp,
         HQ=HQ, HK=HK, D=D, BT=BT, DC=cfg.block_cols, PREC=bprec)
    dG = dg.transpose(1, 2) if has_g else None
    return dq, dk_out, dv, dw_out, db_out, dG


# ----------------------------------------------------------------------------------------------
# the out-of-resources fallback and the autograd Function (padded inputs)
# ----------------------------------------------------------------------------------------------

def _is_oor(e: Exception) -> bool:
    import triton
    return isinstance(e, triton.runtime.errors.OutOfResources)


def _next_config(q, cfg: KernelConfig) -> Optional[KernelConfig]:
    """After an out-of-resources error at ``cfg``: half the block length down to 16, then a single
    segment (no ``D x D`` segment products in the kernels: less shared memory, less parallelism),
    recorded in the fallback state (:class:`FallbackState`) for later calls on this device, dtype and
    head dim; the rest of the configuration is rebuilt by :func:`kernel_config` for the new blocks.
    Returns None when nothing smaller is left."""
    T, D = q.shape[1], q.shape[-1]
    key = (str(q.device), q.dtype, D)
    BT, SB = cfg.block, cfg.seg_blocks
    if BT > 16:
        _FALLBACK.max_block[key] = BT // 2
        BT, SB = BT // 2, _segments(T // (BT // 2), BT // 2, D)
    elif cfg.n_segments > 1:
        _FALLBACK.one_segment.add(key)
        SB = max(1, T // BT)
    else:
        return None
    nxt = kernel_config(q.device, q.dtype, D, T, cfg.forward_only, block_size=BT, seg_blocks=SB)
    return dataclasses.replace(nxt, notes=nxt.notes + (f"out-of-resources retry after BT = {cfg.block}, "
                                                       f"SB = {cfg.seg_blocks}",))


def _no_fit(q, e):
    D = q.shape[-1]
    dt = str(q.dtype).replace("torch.", "")
    return RuntimeError(f"PaTH kernels: head dim {D} in {dt} does not fit this GPU's shared memory even with "
                        f"16-token blocks and one segment ({e}); use float16 or a smaller head dim here")


def _retry_smaller(q, cfg: KernelConfig, attempt):
    """Run ``attempt(cfg)``; if a kernel does not fit the device's shared memory (an ``OutOfResources``
    at launch), retry with the next smaller configuration. Returns ``(result, configuration that ran)``."""
    while True:
        try:
            return attempt(cfg), cfg
        except Exception as e:
            if not _is_oor(e):
                raise
            nxt = _next_config(q, cfg)
            if nxt is None:
                raise _no_fit(q, e) from e
            cfg = nxt


class _PathAttnFn(torch.autograd.Function):
    """Autograd wrapper over padded inputs (T a multiple of the block length). If a kernel does not fit
    the device's shared memory (an ``OutOfResources`` at launch, before any work), the block length is
    halved and the pass redone (the backward then recomputes the forward factors at the smaller block
    length)."""

    @staticmethod
    def forward(ctx, q, k, v, w, beta, G, scale, cfg):
        (o, saved), cfg = _retry_smaller(q, cfg, lambda c: _forward_impl(q, k, v, w, beta, G, scale, c))
        ctx.save_for_backward(*saved)
        ctx.cfg = (scale, cfg, G is not None)
        return o

    @staticmethod
    def backward(ctx, do):
        saved = ctx.saved_tensors
        scale, cfg, has_g = ctx.cfg
        q, k, v, wf, bf, Gh = saved[:6]

        def attempt(c):
            cur = saved
            if (c.block, c.seg_blocks) != (cfg.block, cfg.seg_blocks):  # smaller: recompute the factors
                G = Gh.transpose(1, 2) if has_g else None
                cur = _forward_impl(q, k, v, wf, bf, G, scale, c)[1]
            return _backward_impl(cur, do, scale, c, has_g)

        grads, _ = _retry_smaller(q, cfg, attempt)
        return (*grads, None, None)


# ----------------------------------------------------------------------------------------------
# public entry points
# ----------------------------------------------------------------------------------------------

def _check_device(q: torch.Tensor):
    if q.device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(q.device)
        if q.dtype == torch.bfloat16 and major < 8:
            raise TypeError("q, k, v in bfloat16 need a GPU of compute capability >= 8.0 "
                            f"(this one is {torch.cuda.get_device_name(q.device)}); use float16")
        return
    if q.device.type == "cpu" and _interpret():
        if q.dtype != torch.float32:
            raise TypeError("on the CPU (TRITON_INTERPRET=1) the kernels run in float32 only, "
                            f"got q in {str(q.dtype).replace('torch.', '')}")
        return
    raise ValueError(f"the Triton kernels need a CUDA tensor (or TRITON_INTERPRET=1 on the CPU), "
                     f"got q on {q.device}")


def _check_cu_seqlens(cu_seqlens, B, T, device):
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens must be int32 (or int64), got {str(cu_seqlens.dtype).replace('torch.', '')}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D with N + 1 >= 2 entries, got shape {tuple(cu_seqlens.shape)}")
    if B != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1 (sequences packed along T), got B={B}")
    cs = cu_seqlens.detach().to("cpu", torch.int64)
    if int(cs[0]) != 0 or int(cs[-1]) != T:
        raise ValueError(f"cu_seqlens must start at 0 and end at T={T}, got {int(cs[0])} ... {int(cs[-1])}")
    if bool((cs[1:] < cs[:-1]).any()):
        raise ValueError("cu_seqlens must be non-decreasing")
    return cs


def _validate(q, k, v, w, beta, g, scale, check_values):
    check_tensor(q, "q", ndim=4, dtypes=_QDTYPES, finite=False)
    if check_values:
        B, T, Hq, Hk, D = check_qkv(q, k, v, head_dims=HEAD_DIMS)
    else:  # shapes and dtypes only (no device sync): check empty time slices, then the lengths
        for name, x in (("k", k), ("v", v)):
            if isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[1] != q.shape[1]:
                raise ValueError(f"{name} must have time length {q.shape[1]} like q, got {tuple(x.shape)}")
        B, T, Hq, Hk, D = check_qkv(q[:, :0], k[:, :0], v[:, :0], head_dims=HEAD_DIMS)
        T = q.shape[1]
    if v.shape[3] != D:
        raise ValueError(f"v must have head dim {D} like q (the kernels need Dv == D), got {v.shape[3]}")
    check_path_params(q, k, w, beta, g, param_dtypes=(torch.float32,), check_values=check_values)
    scale = check_scale(scale, D)
    _check_device(q)
    return B, T, Hq, Hk, D, scale


def _gate_cumsum(g):
    """``G = cumsum(g)`` over time, ``[B, T, H]`` float32 (a view), summed along the contiguous last dim
    of a ``[B, H, T]`` copy: torch's scan along the strided time dim of ``[B, T, H]`` runs only B * H
    scans in parallel (a large share of PaTH-FoX's time at long T, benchmarks/HISTORY.md), and the
    kernels read the gates as ``[B, H, T]`` anyway."""
    return torch.cumsum(g.float().transpose(1, 2).contiguous(), dim=-1).transpose(1, 2)


def _pad_time(x, Tp):
    T = x.shape[1]
    if Tp == T:
        return x.contiguous()
    pad = [0, 0] * (x.dim() - 2) + [0, Tp - T]
    return torch.nn.functional.pad(x, pad).contiguous()


def _pad_head_dim(q) -> bool:
    """Run head dim 32 as 64 (zero-padded q, k, v, w) on Hopper (compute capability 9.x).

    Triton 3.6's Hopper (wgmma) code for ``_bwd_intra_kernel`` at D = 32 (4 warps) faults with an
    illegal memory access on an H200 (found by the GPU sweep, located with ``PATH_KERNELS_SYNC=1``), while the
    kernels at D = 64 / 128 run clean and every access of the D = 32 kernels is in bounds under the
    interpreter's bounds checker (``tests/kernel_bounds.py``): a compiler-side fault (cf.
    triton-lang/triton#11366, an IMA on sm_90 for BLOCK_D = 32 with num_warps = 4 and several dots).
    Zero dims change nothing: ``q.k``, ``w``'s unit norm and the transforms act on the first 32 dims
    only, ``v``'s extra dims give zero outputs.
    ``PATH_KERNELS_PAD_D32=0`` / ``1`` forces it off / on (diagnosis, CPU tests)."""
    if q.shape[-1] != 32:
        return False
    env = env_overrides().pad_d32
    if env is not None:
        return env
    return q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] == 9


def path_attention(q, k, v, w, beta, g=None, *, scale=None, cu_seqlens=None, check_values: bool = True,
                   block_size: Optional[int] = None, seg_blocks: Optional[int] = None) -> torch.Tensor:
    """Causal PaTH attention (PaTH-FoX with a gate) with Triton kernels; differentiable in every input.

    Args:
        q: ``[B, T, Hq, D]`` float16 / bfloat16 / float32, ``D`` in {32, 64, 128}.
        k, v: ``[B, T, Hk, D]``, q's dtype; ``Hq % Hk == 0`` (query head h uses key head h // (Hq // Hk)).
        w: ``[B, T, Hk, D]`` float32, unit rows.  beta: ``[B, T, Hk]`` float32 in [0, 2].
        g: optional ``[B, T, Hq]`` float32 log forget gates (<= 0), added unscaled (``+ G_i - G_j``).
        scale: logit scale, default ``D ** -0.5``.
        cu_seqlens: optional int32 ``[N + 1]`` sequence offsets (FlashAttention convention, B == 1,
            sequences packed along T); neither attention nor transforms cross a boundary.
        check_values: check finiteness, beta range and unit w (a device sync); shapes/dtypes always.
        block_size, seg_blocks: override the block length and the blocks per segment (tests). Without
            them, a call that records no gradient (``torch.no_grad()``, inference) may use longer
            segments than one that does (``_FWD_ONLY_SEG_BLOCKS``): the same result, a faster forward.
            The whole launch configuration is ``kernel_config(q.device, q.dtype, D, T, forward_only,
            block_size=..., seg_blocks=...)`` (head dim 32 on Hopper: ``D = 64``, see ``_pad_head_dim``).
    Returns:
        ``[B, T, Hq, D]`` in q's dtype.
    """
    B, T, Hq, Hk, D, scale = _validate(q, k, v, w, beta, g, scale, check_values)
    if T == 0:
        return q.new_zeros(B, 0, Hq, D)
    # no gradient will be asked for: the segment length may suit the forward alone (kernel_config)
    fwd_only = not (torch.is_grad_enabled() and any(x is not None and x.requires_grad
                                                    for x in (q, k, v, w, beta, g)))
    if _pad_head_dim(q):  # D = 32 as D = 64 (see _pad_head_dim); scale stays 32 ** -0.5
        pad = lambda x: torch.nn.functional.pad(x, (0, 64 - D))  # noqa: E731
        o = path_attention(pad(q), pad(k), pad(v), pad(w), beta, g, scale=scale, cu_seqlens=cu_seqlens,
                           check_values=False, block_size=block_size, seg_blocks=seg_blocks)
        return o[..., :D].contiguous()
    if cu_seqlens is not None:
        cs = _check_cu_seqlens(cu_seqlens, B, T, q.device)
        lens = (cs[1:] - cs[:-1]).tolist()
        Tmax = max(max(lens), 1)
        cfg = kernel_config(q.device, q.dtype, D, Tmax, fwd_only, block_size=block_size, seg_blocks=seg_blocks)
        Tp = cfg.n_blocks * cfg.block
        Nseq = len(lens)
        # gather index into [N, Tp]: packed row, or T (a zero row appended) for padding
        idx = torch.full((Nseq, Tp), T, dtype=torch.long)
        for i, (s0, L) in enumerate(zip(cs[:-1].tolist(), lens)):
            idx[i, :L] = torch.arange(s0, s0 + L)
        idx = idx.to(q.device)

        def pack(x):
            ext = torch.cat([x[0], x.new_zeros(1, *x.shape[2:])], 0)
            return ext[idx].contiguous()
        qp, kp, vp, wp, bp = pack(q), pack(k), pack(v), pack(w), pack(beta)
        Gp = _gate_cumsum(pack(g)) if g is not None else None
        op = _PathAttnFn.apply(qp, kp, vp, wp, bp, Gp, scale, cfg)
        valid = (idx < T).reshape(-1)
        return op.reshape(Nseq * Tp, Hq, D)[valid].unsqueeze(0)
    cfg = kernel_config(q.device, q.dtype, D, T, fwd_only, block_size=block_size, seg_blocks=seg_blocks)
    Tp = cfg.n_blocks * cfg.block
    G = _gate_cumsum(g) if g is not None else None
    args = [_pad_time(x, Tp) for x in (q, k, v, w, beta)]
    Gp = _pad_time(G, Tp) if G is not None else None
    if G is not None and Tp > T:  # keep the padded tail's G finite (it only meets padded rows)
        Gp = Gp.clone()
        Gp[:, T:] = G[:, T - 1:T]
    o = _PathAttnFn.apply(*args, Gp, scale, cfg)
    return o[:, :T] if Tp > T else o


def transform_keys_to_end(k, w, beta, cu_seqlens=None, *, check_values: bool = True) -> torch.Tensor:
    """Keys moved to the end of their sequence, ``k_j -> H_{T-1} ... H_{j+1} k_j`` (prefill before
    decoding: the cache then holds keys transformed to the current position).

    Args:
        k: ``[B, T, Hk, D]``; w: ``[B, T, Hk, D]`` float32 unit rows; beta: ``[B, T, Hk]`` float32 in [0, 2].
        cu_seqlens: optional int32 ``[N + 1]`` (B == 1): each key moves to the end of its own sequence.
    Returns:
        ``[B, T, Hk, D]`` in k's dtype; no gradient. On CUDA (and under ``TRITON_INTERPRET=1``) the
        forward's Triton kernels do the per-block and per-segment work (UT transforms, keys moved to
        their segment's end, segment products: O(T D^2 / BT) in float32 accuracy, the moved keys stored
        in k's dtype) and the ``NS`` segment products are chained in torch; elsewhere, or where a kernel
        does not fit the device, the same computation block by block in float32 torch.
    """
    check_tensor(k, "k", ndim=4, dtypes=_QDTYPES)
    check_path_params(k, k, w, beta, None, param_dtypes=(torch.float32,), check_values=check_values)
    B, T, H, D = k.shape
    if T == 0:
        return k.clone()
    with torch.no_grad():
        if cu_seqlens is not None:
            cs = _check_cu_seqlens(cu_seqlens, B, T, k.device)
            out = torch.empty_like(k)
            for s0, s1 in zip(cs[:-1].tolist(), cs[1:].tolist()):
                if s1 > s0:
                    out[:, s0:s1] = transform_keys_to_end(k[:, s0:s1], w[:, s0:s1], beta[:, s0:s1],
                                                          check_values=False)
            return out
        if k.device.type == "cuda" or (k.device.type == "cpu" and _interpret() and k.dtype == torch.float32):
            _check_device(k)
            try:
                return _keys_to_end_triton(k, w, beta)
            except Exception as e:  # a kernel that does not fit the device: the torch path below
                if not _is_oor(e):
                    raise
        return _keys_to_end_torch(k, w, beta)


def _suffix_chain(Seg):
    """``suf_s = Seg_{NS-1} ... Seg_{s+1}`` (identity for the last segment) from ``[B, H, NS, D, D]``."""
    B, H, NS, D, _ = Seg.shape
    suf = [None] * NS
    suf[NS - 1] = torch.eye(D, dtype=Seg.dtype, device=Seg.device).expand(B, H, D, D)
    for s in range(NS - 2, -1, -1):
        suf[s] = suf[s + 1] @ Seg[:, :, s + 1]
    return suf


def _keys_to_end_triton(k, w, beta):
    """``transform_keys_to_end`` on the forward's kernels: ``_precompute`` (at least two segments, so
    that it moves the keys to their segment's end), then each segment's keys times its suffix chain."""
    B, T, H, D = k.shape
    BT = kernel_config(k.device, k.dtype, D, T).block
    NB = -(-T // BT)
    Tp = NB * BT
    kp = _pad_time(k, Tp)
    wf, bf = _pad_time(w.float(), Tp), _pad_time(beta.float(), Tp)
    if NB == 1:  # one block: its keys at the block's end are at the sequence's end
        SB = 1
    else:
        SB = min(_segments(NB, BT, D), -(-NB // 2))
    pre = _precompute(kp, wf, bf, kernel_config(k.device, k.dtype, D, T, block_size=BT, seg_blocks=SB))
    if NB == 1:
        return pre["KA"][:, :T].to(k.dtype)
    suf = _suffix_chain(pre["SEG"])
    out = torch.empty(B, Tp, H, D, dtype=k.dtype, device=k.device)
    L = SB * BT
    for s, m in enumerate(suf):  # keys of segment s: Kseg (R^T applied) times suf_s^T
        rows = slice(s * L, min((s + 1) * L, Tp))
        out[:, rows] = torch.einsum("bthd,bhed->bthe", pre["KS"][:, rows].float(), m).to(k.dtype)
    return out[:, :T]


def _keys_to_end_torch(k, w, beta):
    """``transform_keys_to_end`` block by block in float32 torch (any device)."""
    B, T, H, D = k.shape
    BT = 64 if T >= 64 else 16
    Tp = -(-T // BT) * BT
    kp, wp, bp = _pad_time(k, Tp), _pad_time(w, Tp), _pad_time(beta, Tp)
    NB = Tp // BT
    SB = max(1, int(math.ceil(math.sqrt(NB))))
    Wb, Kb = _blocks(wp, BT), _blocks(kp, BT)
    bb = bp.float().view(B, NB, BT, H).permute(0, 3, 1, 2)
    _, Tm, _ = _ut(Wb, bb)
    TW = Tm @ Wb
    KA = Kb - (Tm @ torch.tril(Wb @ Kb.transpose(-1, -2), -1)).transpose(-1, -2) @ Wb
    Ws, TWs, KAs = _seg_view(wp, BT, SB), _seg_view(_unblocks(TW), BT, SB), _seg_view(_unblocks(KA), BT, SB)
    R, Seg = _suffix_products(Ws, TWs)
    Kseg = torch.stack([KAs[:, :, :, j] @ R[j].transpose(-1, -2) for j in range(SB)], dim=3)
    # then across the later segments: suf_s = Seg_{NS-1} ... Seg_{s+1}
    Kend = Kseg @ torch.stack(_suffix_chain(Seg), 2)[:, :, :, None].transpose(-1, -2)
    return _seg_unview(Kend, NB)[:, :T].to(k.dtype)
