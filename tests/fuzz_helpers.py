"""The fuzz tests' shared rule (``test_public_api_fuzz.py``, ``test_kernels_fuzz.py``,
``test_validation_fuzz.py``): a call either raises a ``ValueError`` / ``TypeError`` whose message names
one of the arguments that made its input bad, or returns a result that agrees with an independent
float64 computation. Imported as ``fuzz_helpers`` (pytest puts ``tests/`` on the path, as for
``helpers``)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

#: what :func:`judge` returns for a call refused with a ValueError / TypeError that names a bad argument
REFUSED = object()

#: the fuzz's hypothesis settings without the example count: deterministic draws, no deadline, no database
DETERMINISTIC = settings(deadline=None, derandomize=True, database=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def names_any(message: str, names) -> bool:
    """Whether ``message`` names one of ``names`` as a whole word (``x`` is not named by ``x_t``)."""
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", message) for n in names)


def judge(call, bad=(), check=None):
    """Run ``call``. ``bad``: the arguments that make the input invalid (empty: valid input). A refusal
    must be a ValueError/TypeError naming one of them (then :data:`REFUSED` is returned); a valid call
    must pass ``check(result)`` and its result is returned. Any other exception propagates (and fails
    the test)."""
    try:
        out = call()
    except (ValueError, TypeError) as e:
        assert bad, f"valid input refused: {type(e).__name__}: {e}"
        assert names_any(str(e), bad), f"{type(e).__name__} names none of {sorted(bad)}: {e}"
        return REFUSED
    assert not bad, f"invalid input ({sorted(bad)}) was accepted"
    if check is not None:
        check(out)
    return out


def close(out: torch.Tensor, ref, tol: float = 1e-9) -> None:
    """``out`` (any float dtype) equals ``ref`` (a tensor or array-like, compared in float64) in shape, and
    in value within ``tol`` relative and ``tol`` times ``max(1, max |ref|)`` absolute."""
    ref = ref.detach() if isinstance(ref, torch.Tensor) else torch.as_tensor(np.asarray(ref))
    ref = ref.to(torch.float64)
    assert tuple(out.shape) == tuple(ref.shape), (tuple(out.shape), tuple(ref.shape))
    mag = max(1.0, float(ref.abs().max())) if ref.numel() else 1.0
    torch.testing.assert_close(out.detach().double(), ref, atol=tol * mag, rtol=tol)


# ----------------------------------------------------------------------------------------------
# the surface fuzz: every argument of a public call, one bad value at a time
# ----------------------------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")

#: the classes of bad input the surface fuzz draws from (a value's class is the first word of its label)
CLASSES = ("nan", "inf", "zero", "negative", "below", "above", "huge", "fraction", "wrong-type", "truthy",
           "none", "empty", "unknown", "wrong-device", "wrong-shape", "wrong-dtype", "folder", "signature")


class Kind:
    """What an argument takes, as the bad values it must refuse: ``bad()`` -> ``[(label, value)]``; the
    label's first word is the value's class (:data:`CLASSES`). ``names``: the words a refusal may name (the
    argument's own name always)."""

    def __init__(self, bad, names=()):
        self._bad, self.names = bad, tuple(names)

    def bad(self):
        return list(self._bad() if callable(self._bad) else self._bad)


def Int(lo=0, hi=None, *, optional=False, names=(), huge=True):
    """An int in ``[lo, hi]`` (``hi=None``: unbounded; ``huge`` adds 2**70 where a bound or memory forbids it)."""
    def bad():
        out = [("below", lo - 1), ("fraction", lo + 0.5), ("wrong-type str", str(lo)), ("truthy", True),
               ("nan", NAN)]
        if lo > 0:
            out.append(("zero" if lo == 1 else "below zero", 0))
        if lo >= 0:
            out.append(("negative", -1))
        if hi is not None:
            out.append(("above", hi + 1))
        if huge and hi is None and huge != "ok":
            out.append(("huge", 2 ** 70))
        if not optional:
            out.append(("none", None))
        return [(k, v) for i, (k, v) in enumerate(out) if all(not (v == w and type(v) is type(w)) for _, w in out[:i])]
    return Kind(bad, names)


def Float(lo=None, hi=None, *, open_lo=False, open_hi=False, optional=False, inf_ok=False, names=()):
    """A real number in the interval (NaN always bad; infinities bad unless ``inf_ok``)."""
    def bad():
        out = [("nan", NAN), ("wrong-type str", "1.0"), ("truthy", True), ("wrong-type tensor", torch.tensor(0.5)),
               ("wrong-type complex", 1j)]
        if not inf_ok:
            out += [("inf", INF), ("inf negative", -INF)]
        if lo is not None:
            out.append(("below", lo) if open_lo else ("below", lo - 0.5))
            if lo >= 0:
                out.append(("negative", -1.0))
        if hi is not None:
            out.append(("above", hi) if open_hi else ("above", hi + 0.5))
        if not optional:
            out.append(("none", None))
        return out
    return Kind(bad, names)


def Bool(*, optional=False, names=()):
    return Kind(lambda: [("truthy 1", 1), ("truthy 0", 0), ("truthy str", "yes"), ("truthy empty", ""),
                         ("truthy numpy", np.bool_(True)), ("truthy tensor", torch.tensor(True))]
                + ([] if optional else [("none", None)]), names)


def Choice(options, *, optional=False, names=()):
    return Kind(lambda: [("unknown", "no-such-" + str(options[0])), ("wrong-type int", 3),
                         ("wrong-type list", [options[0]])] + ([] if optional else [("none", None)]), names)


def Seed(*, optional=False, names=()):
    return Kind(lambda: [("negative", -1), ("huge", 2 ** 64), ("fraction", 1.5), ("wrong-type str", "0"),
                         ("truthy", True), ("nan", NAN)] + ([] if optional else [("none", None)]), names)


def Callable(*, optional=False, names=(), arity=None):
    out = [("wrong-type int", 3), ("wrong-type str", "f")] + ([] if optional else [("none", None)])
    if arity is not None:
        out.append(("signature", (lambda: None) if arity else (lambda a, b, c: None)))
    return Kind(out, names)


def Seq(item_bad=(("nan", NAN),), *, min_len=1, optional=False, names=()):
    """A sequence (list / tuple) of at least ``min_len`` items, with ``item_bad`` the bad items."""
    def bad():
        out = [("wrong-type str", "ab"), ("wrong-type int", 3), ("wrong-type dict", {"a": 1})]
        if min_len >= 1:
            out.append(("empty", []))
        out += [(k, [v]) for k, v in item_bad]
        if not optional:
            out.append(("none", None))
        return out
    return Kind(bad, names)


def Bad(*pairs, names=()):
    """Explicit bad values: ``Bad(("negative", -1), ...)``."""
    return Kind(list(pairs), names)


def Device(*, optional=True, names=()):
    cuda = torch.cuda.is_available()
    return Kind([("unknown", "gpu7"), ("wrong-type float", 3.5), ("truthy", True)]
                + ([] if cuda else [("wrong-device cuda", "cuda:0")]) + ([] if optional else [("none", None)]), names)


def PathArg(*, optional=True, folder=True, names=()):
    """A file path: junk types, an empty str and (``folder``) an existing folder."""
    import tempfile
    out = [("wrong-type int", 3), ("wrong-type bytes", b"x"), ("empty", "")] + ([] if optional else [("none", None)])
    if folder:
        out.append(("folder", Fresh(tempfile.mkdtemp)))
    return Kind(out, names)


def run_surface(case, counter=None):
    """Run one surface case: the valid call must succeed (and pass ``case.check``); every bad value of every
    argument must be refused with a ValueError / TypeError (a FileNotFoundError for a path that does not
    exist) naming that argument (or one of its ``names``).
    Returns the list of failures (empty: all good); ``counter`` (a dict) counts calls and classes."""
    failures = []

    def call_with(arg=None, value=None):
        kwargs = {k: (v() if isinstance(v, Fresh) else v) for k, v in case.kwargs.items()}
        if arg is not None:
            kwargs[arg] = value() if isinstance(value, Fresh) else value
        return case.fn(**kwargs)

    if case.valid:
        try:
            out = call_with()
            if case.check is not None:
                case.check(out)
        except (Exception, pytest.fail.Exception) as e:     # noqa: BLE001 - reported as a failure
            failures.append(f"valid call failed: {type(e).__name__}: {e}")
        if counter is not None:
            counter["calls"] = counter.get("calls", 0) + 1
    for arg, kind in case.kinds.items():
        for label, value in kind.bad():
            if counter is not None:
                counter["calls"] = counter.get("calls", 0) + 1
                cls = label.split()[0]
                counter.setdefault("classes", set()).add(cls)
            try:
                call_with(arg, value)
            except (ValueError, TypeError, FileNotFoundError) as e:    # (a missing file may say so)
                if not names_any(str(e), (arg,) + kind.names):
                    failures.append(f"{arg}={label} ({value!r:.40}): {type(e).__name__} names none of "
                                    f"{(arg,) + kind.names}: {str(e)[:200]}")
            except Exception as e:                          # noqa: BLE001 - a raw error is a failure
                failures.append(f"{arg}={label} ({value!r:.40}): raw {type(e).__name__}: {str(e)[:200]}")
            else:
                failures.append(f"{arg}={label} ({value!r:.40}): accepted")
    return failures


class Fresh:
    """A keyword argument built anew for every call (a model, a folder): ``Fresh(lambda: TinyLM(...))``."""

    def __init__(self, make):
        self.make = make

    def __call__(self):
        return self.make()


class Case:
    """One public call of the surface fuzz: ``fn(**kwargs)`` is valid; ``kinds`` maps an argument to its
    :class:`Kind` (the bad values to try); ``check(result)`` tests the valid call's result against an
    independent computation; ``valid=False`` where the valid call needs what a unit test lacks (a process
    group): then only the refusals are tried."""

    def __init__(self, name, fn, kwargs, kinds, check=None, valid=True):
        self.name, self.fn, self.kwargs, self.kinds, self.check = name, fn, dict(kwargs), dict(kinds), check
        self.valid = valid                   # False: the valid call needs what a test does not have

    def __repr__(self):
        return self.name
