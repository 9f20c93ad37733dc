"""What the Triton kernels share: ``LOG2E``, the pointer helpers of token tiles, column chunks and
stacked square matrices, a program's heads and offsets, and a compatibility patch for Triton's CPU
interpreter. The notation and the parameter names are in ``_triton_kernels``' docstring.

``LOG2E`` (log2 e, a ``tl.constexpr`` global as Triton requires of globals read in a kernel) turns
natural-log quantities (logits times ``scale``, the gates) into the base-2 exponent of ``tl.exp2``.
"""

import os

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


def _interpreter_compat():
    """Triton 3.6's interpreter converts loop bounds with ``int(array)``, which NumPy >= 2.4 refuses
    for 1-element, 1-d arrays; convert through ``.reshape(-1)[0]`` instead (interpreter only)."""
    try:
        from triton.runtime import interpreter as _it
    except Exception:  # pragma: no cover
        return
    orig = getattr(_it, "_patch_lang_tensor", None)
    if orig is None or getattr(orig, "_path_compat", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._path_compat = True  # type: ignore[attr-defined]  # a marker on the function
    _it._patch_lang_tensor = patched


if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    _interpreter_compat()


@triton.jit
def _tile(ptr, base, t0, H: tl.constexpr, D: tl.constexpr, BT: tl.constexpr):
    """Pointers of a ``[BT, D]`` tile of a ``[B, T, H, D]`` tensor (base: int64 offset of (b, 0, h, 0))."""
    rt = tl.arange(0, BT)
    rd = tl.arange(0, D)
    return ptr + base + (t0 + rt).to(tl.int64)[:, None] * (H * D) + rd[None, :]


@triton.jit
def _chunk(ptr, base, t0, d0, H: tl.constexpr, D: tl.constexpr, DC: tl.constexpr, BT: tl.constexpr):
    """Pointers of the ``[BT, DC]`` chunk at columns ``d0 : d0 + DC`` of a ``[BT, D]`` tile of a
    ``[B, T, H, D]`` tensor (base as in ``_tile``)."""
    rt = tl.arange(0, BT)
    rc = tl.arange(0, DC)
    return ptr + base + (t0 + rt).to(tl.int64)[:, None] * (H * D) + d0 + rc[None, :]


@triton.jit
def _sq(ptr, base, idx, N: tl.constexpr):
    """Pointers of the ``idx``-th ``[N, N]`` matrix of a contiguous stack starting at ``base``."""
    rn = tl.arange(0, N)
    return ptr + base + idx * (N * N) + rn[:, None] * N + rn[None, :]


@triton.jit
def _query_head(i_bh, T, HQ: tl.constexpr, HK: tl.constexpr, D: tl.constexpr):
    """A program's batch ``i_b``, query head ``i_hq`` and key head ``i_hk`` (grouped-query heads) from its
    index ``i_bh`` over ``B * HQ``, and the int64 offsets of ``(b, 0, h, 0)`` in the query-head and
    key-head ``[B, T, H, D]`` tensors (``qbase``, ``kbase``) and of ``(b, h, 0)`` in the ``[B, HQ, T]``
    row statistics and gates (``gbase``)."""
    i_b = i_bh // HQ
    i_hq = i_bh % HQ
    i_hk = i_hq // (HQ // HK)
    qbase = (i_b.to(tl.int64) * T * HQ + i_hq) * D
    kbase = (i_b.to(tl.int64) * T * HK + i_hk) * D
    gbase = (i_b.to(tl.int64) * HQ + i_hq) * T
    return i_b, i_hq, i_hk, qbase, kbase, gbase

