"""Triton kernels for PaTH attention (forward and backward), with a clean PyTorch interface.

    from kernels import path_attention, transform_keys_to_end, is_available

* ``path_attention(q, k, v, w, beta, g=None, *, scale=None, cu_seqlens=None) -> o``: q ``[B, T, Hq, D]``
  (float16 / bfloat16 / float32, D in {32, 64, 128}); k, v, w ``[B, T, Hk, D]`` (w float32); beta
  ``[B, T, Hk]`` float32; g ``[B, T, Hq]`` float32 or None; o ``[B, T, Hq, D]`` in q's dtype.
  Gradients for q, k, v, w, beta and g (a ``torch.autograd.Function`` with Triton kernels).
* ``transform_keys_to_end(k, w, beta, cu_seqlens=None)``: keys moved to the end of their sequence
  (``k_j -> H_{T-1} ... H_{j+1} k_j``) for prefill before decoding.
* ``is_available()``: Triton importable and (CUDA available or ``TRITON_INTERPRET=1``).

Runs on CUDA GPUs (bfloat16 needs compute capability >= 8.0) and, for CI, on the CPU under
``TRITON_INTERPRET=1`` in float32.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ._path import HEAD_DIMS, path_attention, transform_keys_to_end

__all__ = ["path_attention", "transform_keys_to_end", "is_available", "HEAD_DIMS", "GPU_VERIFIED",
           "VERIFIED_BY", "sources_sha256", "blocking"]

#: The recorded GPU correctness sweep (``benchmarks/correctness_sweep.py``) that passed at every coverage
#: point (24 of 24 cases: 2026-12-01, H200, torch 2.11, triton 3.6) for the kernel sources whose SHA-256
#: is ``_VERIFIED_SOURCES_SHA256``.
VERIFIED_BY = "benchmarks/results/correctness_sweep.json"
_VERIFIED_SOURCES_SHA256 = "e1f6b59e8a78b305b726e22ea8b265f4fb52d7a3f95a41d3948c34511f27f4f3"
_SOURCES = ("_path.py", "_triton_kernels.py")


def sources_sha256() -> str:
    """SHA-256 of the kernel sources (``_path.py`` then ``_triton_kernels.py``), recorded by the sweep."""
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update((Path(__file__).resolve().parent / name).read_bytes())
    return h.hexdigest()


#: Whether these exact kernel sources passed the full GPU sweep (``VERIFIED_BY``). Any edit of the
#: kernels turns it False until a new sweep passes and the hash above is updated; then
#: ``PaTHAttention(backend="auto")`` falls back to the blockwise PyTorch path (``backend="triton"``
#: still asks for the kernels explicitly).
GPU_VERIFIED = sources_sha256() == _VERIFIED_SOURCES_SHA256


def blocking(T: int, D: int, dtype=None, *, forward_only: bool = False) -> tuple:
    """``(block length, blocks per segment)`` the launcher picks for sequence length ``T`` and head dim
    ``D`` on a GPU with plenty of shared memory (an H200; smaller GPUs may get shorter blocks), for a
    call that records gradients or, with ``forward_only``, one that does not (longer segments at
    D = 128). ``dtype`` defaults to bfloat16."""
    import torch
    from ._path import _config
    BT, SB, _ = _config(D, T, dtype or torch.bfloat16, torch.device("cpu"), None, None, forward_only)
    return BT, SB


def is_available() -> bool:
    """True when Triton imports and there is a CUDA device or ``TRITON_INTERPRET=1`` is set."""
    try:
        import triton  # noqa: F401
    except Exception:  # pragma: no cover - depends on the environment
        return False
    import torch
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
