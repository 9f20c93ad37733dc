"""Argument checks shared by every public entry point of path_lib and of the kernels (``kernels/``).

A public module: new code that validates input uses these checks rather than writing its own, so
that every entry point refuses bad input with the same kind of message. ``__all__`` lists them:

    check_tensor, check_device, check_same_device, check_finite      any tensor argument
    as_device                                                        a device argument (not a tensor)
    check_qkv, check_path_params, check_scale, check_block_size      the attention layout (q, k, v, w, beta, g)
    check_beta_range, check_unit_rows, check_log_gate                 PaTH's value conditions
    check_bool, check_int, check_number, check_choice, check_tokens  plain arguments
    check_probability, check_seed, check_numbers, check_ints, check_str  plain arguments
    check_callable, check_path, check_dtype, check_format, check_instance, check_mapping, check_generator
    dtype_name, FLOAT_DTYPES, PARAM_DTYPES, UNIT_NORM_TOL, INT_MAX, SEED_MAX   helpers and constants

Range checks are written so that NaN fails them: ``not (lo <= x <= hi)`` (a tensor: ``~((x >= lo) & (x <= hi))``),
never ``x < lo or x > hi``, which is False for NaN and would let it through.

Every check raises a ``TypeError`` (wrong Python type or dtype) or a ``ValueError`` (shape, range,
device, non-finite values, unsupported sizes) whose message names the offending argument, so that bad
input never turns into a silent wrong answer or a CUDA crash further down.

Order inside a check: type, then device (a meta tensor has no data, so it is refused before anything
reads a value), then dtype and shape, and value checks (finite, ranges) last: only those synchronise
with the device, and only they are switched off by the entry points' ``check_values=False``.

Functions check values by default (``check_values=True``). Modules (the layers, ``TinyLM``) take
``check_values=None`` by default, resolved per call by ``values_checked``: value checks run only where
they cost no device synchronisation and no graph break, i.e. on CPU tensors outside ``torch.compile``.
"""
from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import List, Optional, Sequence

import torch
from numpy import bool_ as np_bool

__all__ = [
    "FLOAT_DTYPES", "PARAM_DTYPES", "UNIT_NORM_TOL", "dtype_name",
    "check_device", "check_same_device", "as_device", "check_finite", "check_tensor",
    "check_beta_range", "check_unit_rows", "check_log_gate", "check_step_values", "check_scale",
    "check_bool", "check_optional_bool", "check_int", "check_number", "check_choice", "check_tokens",
    "check_probability", "check_seed", "check_numbers", "check_ints", "check_str", "check_callable", "check_path",
    "check_dtype", "check_format", "check_instance", "check_mapping", "check_generator", "values_checked", "SEED_MAX", "INT_MAX",
    "check_qkv", "check_path_params", "check_block_size", "check_cu_seqlens",
]

#: dtypes accepted for q, k, v
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: dtypes accepted for w, beta, g (the per-token parameters)
PARAM_DTYPES = (torch.float32, torch.float64)
#: how far ``||w_t||`` may be from 1 before :func:`check_unit_rows` refuses w
UNIT_NORM_TOL = 1e-3
#: the largest int :func:`check_int` accepts unless told otherwise: torch's sizes and indices are int64
INT_MAX = 2 ** 63 - 1
#: the largest seed :func:`check_seed` accepts (``torch.manual_seed`` and NumPy take it; larger ones they refuse)
SEED_MAX = INT_MAX


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (for messages)."""
    return str(dtype).replace("torch.", "")


def check_device(x: torch.Tensor, name: str) -> None:
    """Refuse a meta tensor: it has shapes but no values, so nothing here can compute with it."""
    if x.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor (shape only, no data); pass a tensor on a real device")


def check_same_device(x: Optional[torch.Tensor], name: str, ref: torch.Tensor, ref_name: str = "q") -> None:
    """``x`` (None is allowed) must be on ``ref``'s device."""
    if x is not None and x.device != ref.device:
        raise ValueError(f"{name} must be on the same device as {ref_name} ({ref.device}), got {x.device}")


def as_device(device, name: str = "device", *, available: bool = True) -> torch.device:
    """``device`` (a str such as ``"cuda:1"``, an int CUDA index, or a ``torch.device``) as a
    ``torch.device``. A TypeError naming ``name`` for another type (a bool too); a ValueError naming it
    for a name torch does not read, or (``available``, the default) a CUDA device where CUDA is not
    available. ``available=False`` only parses: for a question about a device (which implementation
    would run there), not for work on it."""
    if not isinstance(device, (str, int, torch.device)) or isinstance(device, bool):
        raise TypeError(f"{name} must be a str, an int or a torch.device, got {type(device).__name__}")
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"{name} {device!r} is not a device: {e}") from None
    if available and parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name} {str(parsed)!r} is CUDA, and CUDA is not available here")
    return parsed


def check_finite(x: torch.Tensor, name: str) -> None:
    """No NaN or infinite entry (reads the values: a host sync on a GPU)."""
    if x.numel() > 0 and not bool(torch.isfinite(x.detach()).all()):
        raise ValueError(f"{name} contains NaN or infinite values")


def check_tensor(x, name: str, *, ndim: Optional[int] = None,
                 dtypes: Sequence[torch.dtype] = FLOAT_DTYPES, finite: bool = True) -> torch.Tensor:
    """Check that ``x`` is a tensor (not on the meta device) with ``ndim`` dims, one of ``dtypes``, and
    (optionally) finite."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    check_device(x, name)
    if x.dtype not in dtypes:
        allowed = ", ".join(dtype_name(d) for d in dtypes)
        raise TypeError(f"{name} must have dtype in ({allowed}), got {dtype_name(x.dtype)}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if finite:
        check_finite(x, name)
    return x


def check_beta_range(beta: torch.Tensor, name: str = "beta") -> None:
    """beta must lie in [0, 2]: outside it ``I - beta w w^T`` has an eigenvalue beyond [-1, 1]."""
    beta = beta.detach()
    if beta.numel() and bool((~((beta >= 0) & (beta <= 2))).any()):     # NaN fails (beta >= 0) too
        if bool(torch.isnan(beta).any()):
            raise ValueError(f"{name} must lie in [0, 2], got NaN values")
        lo, hi = float(beta.min()), float(beta.max())
        raise ValueError(f"{name} must lie in [0, 2], got values in [{lo:.4g}, {hi:.4g}]")


def check_unit_rows(w: torch.Tensor, name: str = "w", tol: float = UNIT_NORM_TOL) -> None:
    """w must be L2-normalised along its last dimension (the Householder direction)."""
    if w.numel() == 0:
        return
    err = (w.detach().double().norm(dim=-1) - 1).abs().max()
    if not float(err) <= tol:                                       # NaN fails it
        if math.isnan(float(err)):
            raise ValueError(f"{name} must be L2-normalised along the last dimension, got NaN values")
        raise ValueError(f"{name} must be L2-normalised along the last dimension "
                         f"(max | ||{name}|| - 1 | = {float(err):.3g}); use path_lib.reference.householder.normalize")


def check_log_gate(g: torch.Tensor, name: str = "g") -> None:
    """A log forget gate is <= 0 (the gate itself lies in (0, 1])."""
    if g.numel() and bool((~(g.detach() <= 0)).any()):                 # NaN fails (g <= 0)
        raise ValueError(f"{name} is a log forget gate and must be <= 0 (use torch.nn.functional.logsigmoid)")


def check_step_values(q_t, k_t, v_t, w_t, beta_t, g_t=None) -> None:
    """The values of one decoding step's inputs (shapes checked by the caller): all finite, ``beta_t`` in
    [0, 2], ``w_t`` unit rows, ``g_t`` (None allowed) <= 0. A device sync on a GPU."""
    for name, x in (("q_t", q_t), ("k_t", k_t), ("v_t", v_t), ("w_t", w_t), ("beta_t", beta_t), ("g_t", g_t)):
        if x is not None:
            check_finite(x, name)
    check_beta_range(beta_t, "beta_t")
    check_unit_rows(w_t, "w_t")
    if g_t is not None:
        check_log_gate(g_t, "g_t")


def check_scale(scale, head_dim: int) -> float:
    """Return the softmax scale: ``head_dim ** -0.5`` by default, else a positive finite float.

    A one-element tensor is read as a number, so it must not require a gradient: the kernels and the
    references take the scale as a constant, and a learnable scale would silently get no gradient.
    Fold such a scale into q instead (``path_attention(q * s, ..., scale=1.0)``).
    """
    if scale is None:
        return head_dim ** -0.5
    if isinstance(scale, torch.Tensor):
        check_device(scale, "scale")
        if scale.requires_grad:
            raise TypeError("scale must be a float; a tensor that requires grad would lose its gradient "
                            "(fold it into q: path_attention(q * scale, ..., scale=1.0))")
        if scale.numel() != 1:
            raise ValueError(f"scale must be a scalar, got a tensor of shape {tuple(scale.shape)}")
        if not (scale.dtype.is_floating_point or scale.dtype in (torch.int32, torch.int64)):
            raise TypeError(f"scale must be a float, got a {dtype_name(scale.dtype)} tensor")
        scale = float(scale)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise TypeError(f"scale must be a float, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale}")
    return float(scale)


def check_bool(value, name: str) -> bool:
    """A real bool (not 0/1, not a tensor); returned unchanged."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_optional_bool(value, name: str) -> Optional[bool]:
    """A bool or None (a three-way switch: on, off, or decided by the callee); returned unchanged."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name} must be None or a bool, got {type(value).__name__}")
    return value


def values_checked(check_values: Optional[bool], x: torch.Tensor) -> bool:
    """Resolve a module's ``check_values`` for one call on input ``x``.

    ``True``: check values (finite inputs, token ids in range, mask entries), a device sync per call on a GPU.
    ``False``: shapes and dtypes only. ``None``: check only where that is free, i.e. when ``x`` is a CPU
    tensor and the call is not being traced by ``torch.compile`` (no sync, no graph break).
    """
    if check_values is not None:
        return check_values
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def _is_int(value) -> bool:
    """A Python or NumPy integer, not a bool (``True`` is an int to Python, never a size here)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np_bool))


def _is_real(value) -> bool:
    """A Python or NumPy real number, not a bool and not a tensor."""
    return (isinstance(value, numbers.Real) and not isinstance(value, (bool, np_bool))
            and not isinstance(value, torch.Tensor))


def check_int(value, name: str, *, minimum: Optional[int] = None, maximum: Optional[int] = None,
              choices: Optional[Sequence[int]] = None, optional: bool = False):
    """An int (Python or NumPy, not a bool), at least ``minimum``, at most ``maximum`` (default
    :data:`INT_MAX`: larger ints fit no tensor size or index) and among ``choices`` when given (None allowed
    when ``optional``); returned as a Python int."""
    if value is None and optional:
        return None
    if not _is_int(value):
        what = "an int or None" if optional else "an int"
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > (INT_MAX if maximum is None else maximum):
        raise ValueError(f"{name} must be <= {INT_MAX if maximum is None else maximum}, got {value}")
    if choices is not None and value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value}")
    return value


def _interval(minimum, maximum, open_min: bool, open_max: bool) -> str:
    lo = "(-inf" if minimum is None else ("(" if open_min else "[") + f"{minimum:g}"
    hi = "inf)" if maximum is None else f"{maximum:g}" + (")" if open_max else "]")
    return f"{lo}, {hi}"


def check_number(value, name: str, *, positive: bool = False, minimum: Optional[float] = None,
                 maximum: Optional[float] = None, open_min: bool = False, open_max: bool = False,
                 finite: bool = True, optional: bool = False):
    """A real number (Python or NumPy int or float, not a bool or tensor), finite unless ``finite=False``
    (NaN is refused always), > 0 when ``positive``, in the interval ``[minimum, maximum]`` (an end open with
    ``open_min`` / ``open_max``) when given; None allowed when ``optional``. Returned as a Python float."""
    if value is None and optional:
        return None
    if not _is_real(value):
        what = "a float or None" if optional else "a float"
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:                      # an int past float's range (10**400)
        if finite:
            raise ValueError(f"{name} must be a finite number, got an int of {value.bit_length()} bits") from None
        value = math.inf if value > 0 else -math.inf
    if math.isnan(value) or (finite and not math.isfinite(value)) or (positive and not value > 0):
        kind = "a positive finite" if positive else ("a finite" if finite else "a (non-NaN)")
        raise ValueError(f"{name} must be {kind} number, got {value}")
    low_ok = minimum is None or (value > minimum if open_min else value >= minimum)
    high_ok = maximum is None or (value < maximum if open_max else value <= maximum)
    if not (low_ok and high_ok):
        raise ValueError(f"{name} must lie in {_interval(minimum, maximum, open_min, open_max)}, got {value}")
    return value


def check_probability(value, name: str, *, open_min: bool = False, open_max: bool = False,
                      optional: bool = False):
    """A probability in ``[0, 1]`` (an end open with ``open_min`` / ``open_max``); returned as a float."""
    return check_number(value, name, minimum=0.0, maximum=1.0, open_min=open_min, open_max=open_max,
                        optional=optional)


def check_seed(value, name: str = "seed", *, optional: bool = False):
    """A seed: an int in ``[0, SEED_MAX]`` (what ``torch.manual_seed`` and NumPy both take)."""
    return check_int(value, name, minimum=0, maximum=SEED_MAX, optional=optional)


def _sequence(value, name: str, what: str) -> list:
    if isinstance(value, (str, bytes, dict)) or isinstance(value, torch.Tensor) and value.dim() != 1:
        raise TypeError(f"{name} must be a sequence of {what}, got {type(value).__name__}")
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of {what}, got {type(value).__name__}") from None


def _length(items: list, name: str, min_len: int, max_len: Optional[int]) -> None:
    if len(items) < min_len or (max_len is not None and len(items) > max_len):
        want = (f"exactly {min_len}" if max_len == min_len else
                f"at least {min_len}" if max_len is None else f"{min_len} to {max_len}")
        raise ValueError(f"{name} must hold {want} value(s), got {len(items)}")


def check_numbers(value, name: str, *, min_len: int = 1, max_len: Optional[int] = None, **limits) -> List[float]:
    """A sequence (list, tuple, 1-D array or tensor) of ``min_len`` to ``max_len`` real numbers, each checked
    as :func:`check_number` with ``limits`` (``positive``, ``minimum``, ``maximum``, ``open_min``,
    ``open_max``, ``finite``); returned as a list of floats."""
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        value = value.tolist() if getattr(value, "ndim", 1) == 1 else value
    items = _sequence(value, name, "numbers")
    _length(items, name, min_len, max_len)
    return [check_number(x, f"{name}[{i}]", **limits) for i, x in enumerate(items)]


def check_ints(value, name: str, *, min_len: int = 1, max_len: Optional[int] = None, **limits) -> List[int]:
    """A sequence of ``min_len`` to ``max_len`` ints, each checked as :func:`check_int` with ``limits``
    (``minimum``, ``maximum``, ``choices``); returned as a list of Python ints."""
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        if getattr(value, "dtype", None) is not None and str(value.dtype).startswith(("float", "torch.float")):
            raise TypeError(f"{name} must hold ints, got floats ({value.dtype})")
        value = value.tolist() if getattr(value, "ndim", 1) == 1 else value
    items = _sequence(value, name, "ints")
    _length(items, name, min_len, max_len)
    return [check_int(x, f"{name}[{i}]", **limits) for i, x in enumerate(items)]


def check_str(value, name: str, *, empty: bool = False, optional: bool = False):
    """A str (non-empty unless ``empty``); None allowed when ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str{' or None' if optional else ''}, got {type(value).__name__}")
    if not value and not empty:
        raise ValueError(f"{name} must be a non-empty str")
    return value


def check_callable(value, name: str, *, optional: bool = False):
    """A callable (None allowed when ``optional``); returned unchanged."""
    if (value is None and optional) or callable(value):
        return value
    raise TypeError(f"{name} must be callable{' or None' if optional else ''}, got {type(value).__name__}")


def check_path(value, name: str, *, optional: bool = False, exists: bool = False, kind: Optional[str] = None):
    """A file-system path (a non-empty str or ``os.PathLike``); returned as a ``Path`` (None when
    ``optional``). ``exists``: it must exist; ``kind`` ``"file"`` / ``"dir"``: what it must be where it
    exists (a file path may not name a folder, a folder not a file, and a file's parent may not be a file)."""
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)) or isinstance(value, bytes):
        raise TypeError(f"{name} must be a path (a str or os.PathLike){' or None' if optional else ''}, "
                        f"got {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text or "\x00" in text:
        raise ValueError(f"{name} must be a non-empty path without NUL characters, got {value!r}")
    path = Path(text)
    if exists and not path.exists():
        raise ValueError(f"{name} {str(path)!r} does not exist")
    if kind == "file":
        if path.is_dir():
            raise ValueError(f"{name} {str(path)!r} is a folder, not a file")
        parent = next((p for p in path.parents if p.exists()), None)
        if parent is not None and not parent.is_dir():
            raise ValueError(f"{name} {str(path)!r} lies under {str(parent)!r}, which is a file, not a folder")
    elif kind == "dir" and path.exists() and not path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a file, not a folder")
    return path


def check_format(value, name: str = "fmt") -> str:
    """A ``str.format`` template of one number (``"{:.3f}"``): a str that formats 1.0 into something else."""
    check_str(value, name)
    try:
        if value.format(1.0) == value:
            raise ValueError("it holds no replacement field")
    except (ValueError, IndexError, KeyError) as e:
        raise ValueError(f"{name} must format one number (e.g. '{{:.3f}}'), got {value!r}: {e}") from None
    return value


def check_dtype(value, name: str, dtypes: Sequence[torch.dtype] = FLOAT_DTYPES) -> torch.dtype:
    """A ``torch.dtype`` among ``dtypes`` (a TypeError otherwise, as for a tensor of another dtype)."""
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(value).__name__}")
    if value not in dtypes:
        raise TypeError(f"{name} must be one of ({', '.join(dtype_name(d) for d in dtypes)}), "
                        f"got {dtype_name(value)}")
    return value


def check_instance(value, name: str, types, what: Optional[str] = None, *, optional: bool = False):
    """An instance of ``types`` (``what`` names them in the message); None allowed when ``optional``."""
    if (value is None and optional) or isinstance(value, types):
        return value
    if what is None:
        kinds = types if isinstance(types, tuple) else (types,)
        what = " or ".join(f"a {t.__name__}" for t in kinds)
    raise TypeError(f"{name} must be {what}{' or None' if optional else ''}, got {type(value).__name__}")


def check_mapping(value, name: str, *, keys: Optional[Sequence[str]] = None, optional: bool = False):
    """A dict (None allowed when ``optional``) holding at least ``keys``; returned unchanged."""
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict{' or None' if optional else ''}, got {type(value).__name__}")
    missing = [k for k in (keys or ()) if k not in value]
    if missing:
        raise ValueError(f"{name} lacks the key(s) {missing} (it has {sorted(map(str, value))[:8]})")
    return value


def check_generator(value, name: str = "generator", *, optional: bool = False):
    """A CPU ``torch.Generator`` (None allowed when ``optional``); returned unchanged."""
    check_instance(value, name, torch.Generator, "a torch.Generator", optional=optional)
    if value is not None and value.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU torch.Generator, got one on {value.device}")
    return value


def check_qkv(q, k, v, *, head_dims: Optional[Sequence[int]] = None, finite: bool = True):
    """Check q ``[B, T, Hq, D]``, k ``[B, T, Hk, D]``, v ``[B, T, Hk, Dv]`` with ``Hq % Hk == 0``.

    ``finite=False`` skips the NaN/inf check (the only part that reads values). Returns ``(B, T, Hq, Hk, D)``.
    """
    check_tensor(q, "q", ndim=4, finite=False)
    check_tensor(k, "k", ndim=4, finite=False)
    check_tensor(v, "v", ndim=4, finite=False)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {dtype_name(q.dtype)}, "
                        f"{dtype_name(k.dtype)}, {dtype_name(v.dtype)}")
    check_same_device(k, "k", q)
    check_same_device(v, "v", q)
    B, T, Hq, D = q.shape
    if k.shape[:2] != (B, T) or v.shape[:2] != (B, T):
        raise ValueError(f"k and v must have batch and time {B, T} like q, got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if k.shape[3] != D:
        raise ValueError(f"k must have head dim {D} like q, got {k.shape[3]}")
    Hk = k.shape[2]
    if v.shape[2] != Hk:
        raise ValueError(f"v must have {Hk} heads like k, got {v.shape[2]}")
    if Hk == 0 or Hq == 0 or Hq % Hk != 0:
        raise ValueError(f"q heads ({Hq}) must be a positive multiple of k heads ({Hk})")
    if D == 0:
        raise ValueError("q must have a positive head dimension")
    if v.shape[3] == 0:
        raise ValueError("v must have a positive head dimension")
    if head_dims is not None and D not in head_dims:
        raise ValueError(f"head dim {D} is not supported; supported head dims: {tuple(head_dims)}")
    if finite:
        for name, x in (("q", q), ("k", k), ("v", v)):
            check_finite(x, name)
    return B, T, Hq, Hk, D


def check_path_params(q, k, w, beta, g=None, *, param_dtypes=PARAM_DTYPES, check_values: bool = True):
    """Check w ``[B, T, Hk, D]``, beta ``[B, T, Hk]``, g ``[B, T, Hq]`` against q and k.

    Shapes, dtypes and devices always; values (finite, beta in [0, 2], unit w, g <= 0) when
    ``check_values``.
    """
    B, T, Hq, D = q.shape
    Hk = k.shape[2]
    check_tensor(w, "w", ndim=4, dtypes=param_dtypes, finite=False)
    check_same_device(w, "w", q)
    if tuple(w.shape) != (B, T, Hk, D):
        raise ValueError(f"w must have shape {(B, T, Hk, D)} (like k), got {tuple(w.shape)}")
    check_tensor(beta, "beta", ndim=3, dtypes=param_dtypes, finite=False)
    check_same_device(beta, "beta", q)
    if tuple(beta.shape) != (B, T, Hk):
        raise ValueError(f"beta must have shape {(B, T, Hk)} (like k's [B, T, Hk]), got {tuple(beta.shape)}")
    if g is not None:
        check_tensor(g, "g", ndim=3, dtypes=param_dtypes, finite=False)
        check_same_device(g, "g", q)
        if tuple(g.shape) != (B, T, Hq):
            raise ValueError(f"g must have shape {(B, T, Hq)} (like q's [B, T, Hq]: one log forget gate per "
                             "query head), "
                             f"got {tuple(g.shape)}")
    if check_values:
        check_finite(w, "w")
        check_finite(beta, "beta")
        check_beta_range(beta)
        check_unit_rows(w)
        if g is not None:
            check_finite(g, "g")
            check_log_gate(g)


def check_block_size(block_size, choices: Optional[Sequence[int]] = None) -> int:
    """A block length: an int >= 1 (among ``choices`` when given, e.g. the kernels' block lengths)."""
    return check_int(block_size, "block_size", minimum=1, choices=choices)


def check_choice(value, name: str, choices: Sequence[str], *, optional: bool = False):
    """A str among ``choices`` (None allowed when ``optional``); returned unchanged."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {tuple(choices)}, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_tokens(tokens, vocab_size: int, *, ndim: int = 2, min_len: int = 0, name: str = "tokens",
                 vocab_names: Optional[str] = None, values: bool = True) -> None:
    """Token ids: an integer tensor with ``ndim`` dims (last one at least ``min_len`` long), values in
    ``[0, vocab_size)`` (checked when ``values``: a device sync)."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tokens).__name__}")
    check_device(tokens, name)
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an integer tensor, got {tokens.dtype}")
    if tokens.dim() != ndim or (ndim > 1 and tokens.shape[-1] < min_len):
        shape = "[B, T]" if ndim == 2 else "[B]"
        extra = f" with T >= {min_len}" if min_len and ndim == 2 else ""
        raise ValueError(f"{name} must have shape {shape}{extra}, got {tuple(tokens.shape)}")
    if values and tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        suffix = f" ({vocab_names})" if vocab_names else ""
        raise ValueError(f"{name} must lie in [0, {vocab_size}){suffix}")


def check_cu_seqlens(cu_seqlens, batch_size: int, total: int) -> List[int]:
    """Packed-sequence offsets ``cu_seqlens [N + 1]`` (int32 or int64, from 0 to ``total``, non-decreasing)
    for a batch of size 1 (sequences packed along T); read to the host once. Returns them as a list of
    ``N + 1`` ints. The one check of the library's callers (``path_lib.nn.padding`` re-exports it);
    ``path_lib.kernels`` keeps its own copy inside the code the GPU sweep verified (hashed, unchanged)."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    check_device(cu_seqlens, "cu_seqlens")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens must be int32 or int64, got {dtype_name(cu_seqlens.dtype)}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D with N + 1 >= 2 offsets, got shape {tuple(cu_seqlens.shape)}")
    if batch_size != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1 (sequences packed along T), got {batch_size}")
    cs = cu_seqlens.detach().to("cpu", torch.int64)
    if int(cs[0]) != 0 or int(cs[-1]) != total:
        raise ValueError(f"cu_seqlens must start at 0 and end at the packed length {total}, got "
                         f"{int(cs[0])} ... {int(cs[-1])}")
    if bool((cs[1:] < cs[:-1]).any()):
        raise ValueError("cu_seqlens must be non-decreasing")
    return cs.tolist()
