"""The launch configuration of the PaTH kernels: one :class:`KernelConfig` per call, built by
:func:`kernel_config` (block length, segments, warps, stages, splits, dtypes and precisions) from the
measured tables below, the device (:class:`DeviceInfo`), the ``PATH_KERNELS_*`` overrides
(:func:`env_overrides`) and what the out-of-resources fallback learnt (:class:`FallbackState`).
The launches read nothing but the :class:`KernelConfig` (``benchmarks/DESIGN.md``, "Launch configuration").

The measured tables come first (each comment says what the setting does and why; ``benchmarks/HISTORY.md``
has the measurements); :func:`kernel_config` is their only reader.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch

from path_lib.hardware import A100, CPU, H200, SM86, T4, DeviceInfo  # noqa: F401  (the kernels' names for them)

HEAD_DIMS = (32, 64, 128)


_QDTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


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
    out: Dict[str, Any] = {}
    text: List[Tuple[str, str]] = []
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


# ---- the device: path_lib.hardware's description (DeviceInfo, and the devices described by hand:
# H200, A100, SM86, T4, CPU), which the presets and estimates read too; the gate hashes its code ------


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
    rows: Dict[str, Any] = dict(key_rows=_rows(_KEY_ROWS, split.get("key_rows"), D, BT, SB, n, half),
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

