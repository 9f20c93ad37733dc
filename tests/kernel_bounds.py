"""Bounds checking for Triton kernels under the interpreter (``TRITON_INTERPRET=1``).

The interpreter dereferences raw addresses without any check, so an out-of-bounds load or store that
is an ``illegal memory access`` on a GPU silently reads/writes neighbouring CPU memory there. Inside
``with bounds_checking():`` every launch records the address range of each tensor argument
(``[data_ptr, data_ptr + span)``, ``span`` from sizes and strides), and every load, store and atomic
checks that all its *unmasked* lanes fall inside ONE argument's range, with the element type of that
argument (a tile that starts in one tensor and runs into another, or into no tensor at all, is an
error). Optionally the tensor arguments must be contiguous (the kernels index them as contiguous).

    from tests.kernel_bounds import bounds_checking, BoundsError
    with bounds_checking():
        o = path_lib.kernels.path_attention(...); o.backward(do)

A violation raises ``BoundsError`` (the interpreter wraps it in its ``InterpreterError``; the message
names the kernel, program id, operation, tensor argument, and the first offending element offsets).
Works with triton 3.6's interpreter (``InterpreterBuilder.create_masked_load`` / ``create_masked_store``
/ ``create_atomic_rmw`` / ``create_atomic_cas``, ``GridExecutor.__call__``); block-pointer loads and
stores go through the masked versions too.
"""
from __future__ import annotations

import contextlib
import inspect

import numpy as np


class BoundsError(AssertionError):
    pass


_LAUNCHES = []      # stack of dicts: kernel name, ranges [(lo, hi, name, itemsize, shape, dtype)]
_STATS = {"launches": 0, "checked_ops": 0}


def _span(t):
    """Bytes from data_ptr to one past the last element reachable through sizes/strides."""
    if t.numel() == 0:
        return 0
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    if any(st < 0 for st in t.stride()):
        raise BoundsError("negative strides are not supported by the bounds checker")
    return (last + 1) * t.element_size()


def _record(fn, args, kwargs, require_contiguous):
    names = inspect.getfullargspec(fn).args
    bound = dict(zip(names, args))
    bound.update(kwargs)
    ranges = []
    for name, a in bound.items():
        if hasattr(a, "data_ptr") and hasattr(a, "element_size"):
            if require_contiguous and not a.is_contiguous():
                raise BoundsError(f"kernel {fn.__name__}: tensor argument {name} {tuple(a.shape)} with strides "
                                  f"{tuple(a.stride())} is not contiguous (the kernels index it as contiguous)")
            lo = a.data_ptr()
            ranges.append((lo, lo + _span(a), name, a.element_size(), tuple(a.shape), str(a.dtype)))
    return dict(kernel=fn.__name__, ranges=ranges)


def _check(builder, ptrs, mask, op):
    if not _LAUNCHES:
        return
    launch = _LAUNCHES[-1]
    _STATS["checked_ops"] += 1
    addr = np.asarray(ptrs.data).astype(np.uint64).ravel()
    if mask is None:
        act = addr
    else:
        m = np.broadcast_to(np.asarray(mask.data).astype(bool), np.asarray(ptrs.data).shape).ravel()
        act = addr[m]
    if act.size == 0:
        return
    elem = ptrs.get_element_ty()
    nbytes = max(1, elem.primitive_bitwidth // 8)
    best, best_n = None, 0
    for r in launch["ranges"]:
        lo, hi = r[0], r[1]
        n = int(((act >= lo) & (act + np.uint64(nbytes) <= hi)).sum())
        if n > best_n:
            best, best_n = r, n
    pid = getattr(builder, "grid_idx", None)
    where = f"kernel {launch['kernel']} program {pid}: {op}"
    if best is None:
        lows = ", ".join(f"{r[2]}@[{r[0]:#x},{r[1]:#x})" for r in launch["ranges"])
        raise BoundsError(f"{where} of {act.size} lanes, none inside any tensor argument "
                          f"(first address {int(act[0]):#x}; arguments {lows})")
    lo, hi, name, isz, shape, dt = best
    if best_n < act.size:
        bad = act[~((act >= lo) & (act + np.uint64(nbytes) <= hi))]
        off = (bad.astype(np.int64) - np.int64(lo)) // isz  # element offsets (wraps if before the start)
        raise BoundsError(f"{where}: {act.size - best_n} of {act.size} unmasked lanes outside tensor argument "
                          f"{name} {shape} {dt} (numel {(hi - lo) // isz}); first offending element offsets "
                          f"{off[:8].tolist()} (min {int(off.min())}, max {int(off.max())})")
    if nbytes != isz:
        raise BoundsError(f"{where}: element type {elem} ({nbytes} bytes) but tensor argument {name} is {dt}")


@contextlib.contextmanager
def bounds_checking(require_contiguous: bool = True):
    """Install the checks for the duration of the block (interpreter mode only)."""
    from triton.runtime import interpreter as it
    B, G = it.InterpreterBuilder, it.GridExecutor
    orig = dict(load=B.create_masked_load, store=B.create_masked_store, rmw=B.create_atomic_rmw,
                cas=B.create_atomic_cas, call=G.__call__)

    def masked_load(self, ptrs, mask, other, *a, **k):
        _check(self, ptrs, mask, "load")
        return orig["load"](self, ptrs, mask, other, *a, **k)

    def masked_store(self, ptrs, value, mask, *a, **k):
        _check(self, ptrs, mask, "store")
        return orig["store"](self, ptrs, value, mask, *a, **k)

    def atomic_rmw(self, op, ptr, val, mask, *a, **k):
        _check(self, ptr, mask, "atomic_rmw")
        return orig["rmw"](self, op, ptr, val, mask, *a, **k)

    def atomic_cas(self, ptr, cmp, val, *a, **k):
        _check(self, ptr, None, "atomic_cas")
        return orig["cas"](self, ptr, cmp, val, *a, **k)

    def call(self, *args, **kwargs):
        argspec = inspect.getfullargspec(self.fn)
        kw = {k: v for k, v in kwargs.items() if k in argspec.args}
        _LAUNCHES.append(_record(self.fn, args, kw, require_contiguous))
        _STATS["launches"] += 1
        try:
            return orig["call"](self, *args, **kwargs)
        finally:
            _LAUNCHES.pop()

    B.create_masked_load, B.create_masked_store = masked_load, masked_store
    B.create_atomic_rmw, B.create_atomic_cas = atomic_rmw, atomic_cas
    G.__call__ = call
    try:
        yield _STATS
    finally:
        B.create_masked_load, B.create_masked_store = orig["load"], orig["store"]
        B.create_atomic_rmw, B.create_atomic_cas = orig["rmw"], orig["cas"]
        G.__call__ = orig["call"]
