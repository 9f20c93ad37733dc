"""Triton kernels for PaTH attention (forward and backward), with a clean PyTorch interface.

    from path_lib.kernels import path_attention, transform_keys_to_end, is_available

* ``path_attention(q, k, v, w, beta, g=None, *, scale=None, cu_seqlens=None) -> o``: q ``[B, T, Hq, D]``
  (float16 / bfloat16 / float32, D in {32, 64, 128}); k, v, w ``[B, T, Hk, D]`` (w float32); beta
  ``[B, T, Hk]`` float32; g ``[B, T, Hq]`` float32 or None; o ``[B, T, Hq, D]`` in q's dtype.
  Gradients for q, k, v, w, beta and g (a ``torch.autograd.Function`` with Triton kernels).
* ``transform_keys_to_end(k, w, beta, cu_seqlens=None)``: keys moved to the end of their sequence
  (``k_j -> H_{T-1} ... H_{j+1} k_j``) for prefill before decoding.
* ``is_available()``: Triton importable and (CUDA available or ``TRITON_INTERPRET=1``).
* ``kernel_config(device, dtype, D, T, forward_only=False, *, block_size=None, seg_blocks=None)``: the
  launch configuration a call uses (a printable, storable :class:`KernelConfig`: block length, blocks per
  segment, warps per kernel, stages per attention loop, splits, dtypes and precisions); ``device`` a
  ``torch.device`` or a :class:`DeviceInfo` (``H200``, ``A100``, ``SM86``, ``T4``, ``CPU``);
  ``blocking(T, D)`` its ``(block length, blocks per segment)`` on an H200; ``env_overrides()`` the
  parsed ``PATH_KERNELS_*`` variables; ``fallback_state()`` what the out-of-resources fallback learnt;
  ``backward_slices(device, cfg, batch, key_heads)`` the batch slices the backward runs in (its float32
  working buffers are per slice: a lower peak where the batch gives every launch enough programs).

Runs on CUDA GPUs (bfloat16 needs compute capability >= 8.0) and, for CI, on the CPU under
``TRITON_INTERPRET=1`` in float32.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any, Dict, NamedTuple

from path_lib.validation import as_device, check_int

from ._api import path_attention as _path_attention
from ._api import transform_keys_to_end as _transform_keys_to_end
from ._backward import backward_slices as _backward_slices
from ._config import (A100, CPU, H200, HEAD_DIMS, SM86, T4, DeviceInfo, FallbackState, KernelConfig, Overrides,
                      Stages, Warps, env_overrides, fallback_state)
from ._config import kernel_config as _kernel_config

__all__ = ["path_attention", "transform_keys_to_end", "is_available", "HEAD_DIMS", "GPU_VERIFIED",
           "VERIFIED", "VERIFIED_BY", "Verification", "verification", "sources_sha256", "code_sha256", "code_text", "blocking", "kernel_config",
           "KernelConfig", "Warps", "Stages", "DeviceInfo", "H200", "A100", "SM86", "T4", "CPU", "Overrides",
           "env_overrides", "FallbackState", "fallback_state", "backward_slices", "TIMING_EQUIVALENT"]

#: The GPU correctness sweep that passed (``benchmarks/correctness_sweep.py``, every coverage point: 25 of 25
#: cases on 2026-12-05, v22's kernels split into stage modules) and what it ran with: the
#: kernels' code hash (:func:`code_sha256`) and raw hash (:func:`sources_sha256`), the Triton version
#: (major.minor), the GPU and its compute capability, and the record. After a new sweep this is the one
#: constant to change, from the record's ``kernel_code_sha256``, ``kernel_sources_sha256`` and
#: ``provenance`` (tests/test_kernel_records.py checks that they agree).
VERIFIED: Dict[str, Any] = {
    "code_sha256": "b6feccf4cba6a71755d45b02c1642994ae2c14eb310cb952b996f7a4d238e116",
    "sources_sha256": "70c3b3b802564d2eef8d41549ced15655512cfeaefa16a426b0c060e287f406e",
    "triton": "3.6",
    "gpu": "NVIDIA H200",
    "capability": (9, 0),
    "record": "benchmarks/results/correctness_sweep.json",
}
#: The sweep's record (a stable name; ``VERIFIED["record"]``).
VERIFIED_BY = VERIFIED["record"]
#: Earlier kernel code whose timings stand for the verified code: code hash -> why (the speed chapter
#: prints it under the speed record, ``benchmarks/results/bench_path.json``, which timed v22 before the
#: split; ``tests/test_kernel_records.py`` checks the comparison it cites).
TIMING_EQUIVALENT: dict = {
    "3696a6b14276b0f141bdd3f4136089312237bea49b73abcab5b077dd4892c585":
        "the same kernels and launches before their source was split into stage modules; both codes, timed "
        "on one H200 in two interleaved rounds at D = 64 and 128, T = 4096, differ by at most 0.6 % "
        "(benchmarks/results/history/bench_split_ab_*.json)",
}
#: The files the gate hashes: the attention kernels by stage (configuration, launches, precomputation,
#: forward, backward, the autograd Function and its fallback, the entry points, keys moved to the end),
#: the Triton kernels, and the fused pass that gives PaTH's layer its directions (which
#: ``backend="auto"`` runs with them, so the sweep checks it too). Every private module of this package
#: but ``context``, ``decode`` and ``teaching`` (which call these) is here (a test checks it).
_SOURCES = ("_config.py", "_launch.py", "_precompute.py", "_forward.py", "_backward.py", "_autograd.py",
            "_api.py", "_keys_to_end.py", "_triton_kernels.py", "_triton_common.py", "_triton_forward.py",
            "_triton_backward.py", "_triton_factors.py", "short_conv.py")
#: Code outside this package that the kernels run: (module, class), hashed as ``module:class``.
_HASHED_ELSEWHERE: tuple = ()


def _kernel_files():
    """``(name, text)`` of everything the gate hashes: ``_SOURCES``, then ``_HASHED_ELSEWHERE``
    (a class's source, decorators included)."""
    import ast
    import importlib

    here = Path(__file__).resolve().parent
    out = [(name, (here / name).read_text()) for name in _SOURCES]
    for module, cls in _HASHED_ELSEWHERE:
        source = Path(importlib.import_module(module).__file__ or "").read_text()
        node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls)
        lines = source.splitlines(keepends=True)
        first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        out.append((f"{module}:{cls}", "".join(lines[first:node.end_lineno])))
    return out


def sources_sha256() -> str:
    """SHA-256 of the hashed code's raw bytes (``_SOURCES``, then ``_HASHED_ELSEWHERE``, in order)."""
    h = hashlib.sha256()
    for _, text in _kernel_files():
        h.update(text.encode())
    return h.hexdigest()


def code_text(source: str) -> str:
    """The code of a Python source with comments, docstrings and blank lines removed and trailing
    spaces stripped: what the verification gate hashes, so that fixing a comment or a docstring does
    not void a GPU sweep, while any change to code does. Independent of the Python version (3.10 to 3.13
    tokenise comments alike; the docstrings are found by position through ``ast``)."""
    if not isinstance(source, str):
        raise TypeError(f"code_text: source must be a str, got {type(source).__name__}")
    import ast
    import io
    import tokenize

    lines = source.splitlines()
    cut = {}                                     # line index -> column where a comment starts
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            cut[tok.start[0] - 1] = tok.start[1]
    drop: set = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                drop.update(range(first.lineno - 1, first.end_lineno or first.lineno))
    kept = []
    for i, line in enumerate(lines):
        if i in drop:
            continue
        line = line[:cut[i]] if i in cut else line
        if line.strip():
            kept.append(line.rstrip())
    return "\n".join(kept) + "\n"


def code_sha256() -> str:
    """SHA-256 of the kernels' code: :func:`code_text` of each hashed text (:func:`sources_sha256`'s) in
    order, each preceded by its name."""
    h = hashlib.sha256()
    for name, text in _kernel_files():
        h.update(f"{name}\n".encode() + code_text(text).encode())
    return h.hexdigest()


class Verification(NamedTuple):
    """What :func:`verification` found. ``code``: this code is the swept code; ``triton``: the installed
    Triton version (``""`` without Triton); ``verified``: both the code and the Triton version (major.minor)
    are the sweep's (``GPU_VERIFIED``); ``reason``: why not, in a sentence (``""`` when verified)."""
    verified: bool
    code: bool
    triton: str
    reason: str

    def describe(self, device=None) -> str:
        """A plain sentence: verified or not and why, with the GPU the sweep ran on; for a CUDA
        ``device`` of another compute capability, that it was not in the sweep."""
        swept = (f"the GPU sweep passed with Triton {VERIFIED['triton']} on an {VERIFIED['gpu']} "
                 f"(sm_{VERIFIED['capability'][0]}{VERIFIED['capability'][1]})")
        text = f"verified: {swept}" if self.verified else f"unverified: {self.reason}; {swept}"
        if device is not None:
            from path_lib.hardware import describe_device
            # a device description (the library's, or the configuration's own copy) is read as it is
            info = device if hasattr(device, "capability") and hasattr(device, "kind") else describe_device(device)
            if info.kind == "cuda" and info.capability != tuple(VERIFIED["capability"]):
                text += (f"; this GPU (sm_{info.capability[0]}{info.capability[1]}) was not in the sweep "
                         "(its launch configuration is the kernels' tables for its class)")
        return text


def _triton_version() -> str:
    try:
        import triton
    except ImportError:
        return ""
    return str(triton.__version__)


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


@functools.lru_cache(maxsize=None)
def verification() -> Verification:
    """Whether this kernel code, under the installed Triton, is what the GPU sweep (:data:`VERIFIED`) passed.

    Computed once per process, on first use (not at import): the raw hash of the hashed files first
    (a millisecond); only where those bytes differ from the sweep's is the code hash computed (comments
    and docstrings left out, about 0.15 s)."""
    code = sources_sha256() == VERIFIED["sources_sha256"] or code_sha256() == VERIFIED["code_sha256"]
    triton = _triton_version()
    same_triton = bool(triton) and _major_minor(triton) == VERIFIED["triton"]
    if not code:
        reason = ("this kernel code has not passed the GPU correctness sweep (benchmarks/DESIGN.md, How to change "
                  "a kernel)")
    elif not same_triton:
        reason = (f"the kernels are unverified with Triton {triton or '(none)'}: the sweep ran with Triton "
                  f"{VERIFIED['triton']}, and another version compiles the same code into other GPU code")
    else:
        reason = ""
    return Verification(code and same_triton, code, triton, reason)


def __getattr__(name: str):
    # GPU_VERIFIED: whether this kernel code passed the full GPU sweep (VERIFIED) under this Triton version;
    # read lazily (PEP 562) so that importing the kernels hashes nothing. Any change to the code (not to
    # comments or docstrings), or another Triton version, makes it False: then PaTHAttention(backend="auto")
    # falls back to the blockwise PyTorch path with a warning on CUDA (backend="triton" still asks for the
    # kernels explicitly).
    if name == "GPU_VERIFIED":
        return verification().verified
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_flag(x, name: str) -> None:
    if not isinstance(x, bool):
        raise TypeError(f"{name} must be a bool, got {type(x).__name__}")


#: the block lengths ``block_size`` may name (the launcher's own choices; the kernels need a power of two
#: of at least 16 rows for their matrix products)
BLOCK_SIZES = (16, 32, 64)


def _check_tuning(block_size, seg_blocks) -> None:
    """The tuning overrides of :func:`path_attention` and :func:`kernel_config`: None, or ``block_size`` one
    of ``BLOCK_SIZES`` and ``seg_blocks`` an int >= 1 (a named TypeError / ValueError, before any launch)."""
    check_int(block_size, "block_size", choices=BLOCK_SIZES, optional=True)
    check_int(seg_blocks, "seg_blocks", minimum=1, optional=True)


def path_attention(q, k, v, w, beta, g=None, *, scale=None, cu_seqlens=None, check_values: bool = True,
                   block_size=None, seg_blocks=None):
    """Causal PaTH attention (PaTH-FoX with a gate) with Triton kernels: q ``[B, T, Hq, D]``; k, v, w
    ``[B, T, Hk, D]`` (w float32); beta ``[B, T, Hk]`` float32; g ``[B, T, Hq]`` float32 or None ->
    ``[B, T, Hq, D]`` in q's dtype, differentiable in every input (see ``_api.path_attention``).
    ``check_values`` must be a bool (a ``TypeError`` otherwise); ``block_size`` (one of ``BLOCK_SIZES``) and
    ``seg_blocks`` (an int >= 1) override the launcher's blocking."""
    _check_flag(check_values, "check_values")
    _check_tuning(block_size, seg_blocks)
    return _path_attention(q, k, v, w, beta, g, scale=scale, cu_seqlens=cu_seqlens, check_values=check_values,
                           block_size=block_size, seg_blocks=seg_blocks)


def transform_keys_to_end(k, w, beta, cu_seqlens=None, *, check_values: bool = True):
    """Keys moved to the end of their sequence, ``k_j -> H_{T-1} ... H_{j+1} k_j``: k, w ``[B, T, Hk, D]``,
    beta ``[B, T, Hk]`` -> ``[B, T, Hk, D]``. ``check_values`` must be a bool."""
    _check_flag(check_values, "check_values")
    return _transform_keys_to_end(k, w, beta, cu_seqlens, check_values=check_values)


def _check_positive_int(x, name: str) -> None:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ValueError(f"{name} must be a positive int, got {x!r}")


def _check_device_info(info: DeviceInfo, where: str) -> None:
    """A device described by hand (``DeviceInfo(...)``, a dataclass of the hashed ``_config.py`` that keeps
    no checks of its own): its fields as the configuration reads them, or a ValueError naming ``device``."""
    from path_lib.validation import check_choice, check_ints, check_str
    try:
        check_choice(info.kind, "kind", ("cuda", "cpu", "meta"))
        check_ints(info.capability, "capability", min_len=2, max_len=2, minimum=0)
        check_int(info.smem, "smem", minimum=0)
        check_int(info.sms, "sms", minimum=0)
        check_str(info.name, "name", empty=True)
        check_str(info.key, "key", optional=True)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: device, a DeviceInfo, has a bad field: {e}") from None


def _device_arg(device, where: str):
    """``device`` for the configuration: a :class:`DeviceInfo` as it is, else a ``torch.device``
    (``path_lib.validation.as_device`` of a name or a ``torch.device``; a bare int index is refused);
    errors name ``where``'s ``device``."""
    import torch
    if isinstance(device, DeviceInfo):
        _check_device_info(device, where)
        return device
    try:
        if not isinstance(device, (str, torch.device)):
            raise TypeError
        return as_device(device, f"{where}: device")
    except TypeError:
        raise TypeError(f"{where}: device must be a torch.device, a device name or a DeviceInfo, "
                        f"got {type(device).__name__}") from None
    except ValueError as e:
        raise ValueError(f"{e} (describe one by hand instead: H200, A100, T4)") from None


def kernel_config(device, dtype, D: int, T: int, forward_only: bool = False, *, block_size=None,
                  seg_blocks=None) -> KernelConfig:
    """The launch configuration of :func:`path_attention` for q of ``dtype``, head dim ``D`` and sequence
    length ``T`` on ``device`` (a ``torch.device``, its name, or a :class:`DeviceInfo` such as ``H200``);
    see ``_config.kernel_config``. Bad arguments raise ``TypeError`` / ``ValueError`` naming them."""
    import torch
    _check_positive_int(D, "D")
    _check_positive_int(T, "T")
    _check_flag(forward_only, "forward_only")
    _check_tuning(block_size, seg_blocks)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"kernel_config: dtype must be a torch.dtype, got {type(dtype).__name__}")
    device = _device_arg(device, "kernel_config")
    return _kernel_config(device, dtype, D, T, forward_only, block_size=block_size, seg_blocks=seg_blocks)


def backward_slices(device, cfg: KernelConfig, batch: int, key_heads: int) -> int:
    """The batch slices the backward of ``path_attention`` runs in for ``batch`` sequences of ``key_heads``
    key heads at launch configuration ``cfg`` (:func:`kernel_config`) on ``device`` (a ``torch.device``,
    its name, or a :class:`DeviceInfo` such as ``H200``): ``min(4, batch, NS * batch * key_heads //
    (4 * multiprocessors))``, at least 1, or ``PATH_KERNELS_BWD_SLICES``. Each slice takes its own float32
    working buffers (a lower peak memory) and each launch fewer programs. Raises ``TypeError`` /
    ``ValueError`` naming the argument for a bad one."""
    if not isinstance(cfg, KernelConfig):
        raise TypeError(f"backward_slices: cfg must be a KernelConfig (kernel_config(...)), got {type(cfg).__name__}")
    for name, x in (("batch", batch), ("key_heads", key_heads)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"backward_slices: {name} must be a positive int, got {x!r}")
    return _backward_slices(_device_arg(device, "backward_slices"), cfg, batch, key_heads)


def blocking(T: int, D: int, dtype=None, *, forward_only: bool = False) -> tuple:
    """``(block length, blocks per segment)`` the launcher picks for sequence length ``T`` and head dim
    ``D`` on an H200 (``kernel_config(H200, ...)``; smaller GPUs may get shorter blocks), for a call that
    records gradients or, with ``forward_only``, one that does not (longer segments at D = 128).
    ``dtype`` defaults to bfloat16."""
    import torch
    cfg = kernel_config(H200, dtype or torch.bfloat16, D, T, forward_only)
    return cfg.block, cfg.seg_blocks


def is_available() -> bool:
    """True when Triton imports and there is a CUDA device or ``TRITON_INTERPRET=1`` is set."""
    try:
        import triton  # noqa: F401
    except Exception:  # pragma: no cover - depends on the environment
        return False
    import torch
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
