"""The fuzz tests' shared rule (``test_public_api_fuzz.py``, ``test_kernels_fuzz.py``,
``test_validation_fuzz.py``): a call either raises a ``ValueError`` / ``TypeError`` whose message names
one of the arguments that made its input bad, or returns a result that agrees with an independent
float64 computation. Imported as ``fuzz_helpers`` (pytest puts ``tests/`` on the path, as for
``helpers``)."""
from __future__ import annotations

import re

import numpy as np
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
