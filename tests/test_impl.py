"""One rule picks PaTH's implementation (path_lib.impl): every caller asks it, and with unverified kernel
code (``GPU_VERIFIED`` False) nothing runs the kernels unless asked for by name."""
import ast
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import path_lib.kernels as kernels
from path_lib import impl
from path_lib.distributed import _resolve_impl
from path_lib.experiments.lm import path_backend
from path_lib.nn.layers import PaTHAttention
from helpers import random_path_inputs

ROOT = Path(__file__).resolve().parent.parent
CUDA = torch.device("cuda")


def fake_cuda(D=64, dtype=torch.bfloat16):
    """Stands for a CUDA tensor ``[1, 8, 2, D]`` where only device, dtype and shape are read."""
    return SimpleNamespace(is_cuda=True, device=CUDA, dtype=dtype, shape=(1, 8, 2, D))


def _callers(monkeypatch):
    """The implementation every caller picks for 'auto' on a (faked) CUDA input at D = 64."""
    import path_lib.kernels.context as context
    monkeypatch.setattr(context, "chunk_unfit", lambda q, v: None)
    sys.path.insert(0, str(ROOT / "scripts" / "experiments"))
    try:
        import run_synthetic
    finally:
        sys.path.remove(str(ROOT / "scripts" / "experiments"))
    monkeypatch.setattr(run_synthetic, "_kernel_ok", lambda D: True)
    return {"layer": PaTHAttention(128, 2, backend="auto")._resolve_backend(fake_cuda()),
            "distributed": _resolve_impl("auto", fake_cuda(), fake_cuda()),
            "experiments.lm": path_backend("cuda"),
            "run_synthetic": run_synthetic.pick_path_backend("cuda", head_dims=(64,)),
            "impl": impl.resolve_backend("auto", device=CUDA, dtype=torch.float16, head_dim=64)}


def test_unverified_kernels_run_nowhere_unasked(monkeypatch):
    monkeypatch.setattr(impl, "_FALLBACK_WARNED", True)           # the warning is tested in test_layer_validation
    monkeypatch.setattr(kernels, "GPU_VERIFIED", False)
    assert set(_callers(monkeypatch).values()) == {"blockwise"}
    monkeypatch.setattr(kernels, "GPU_VERIFIED", True)           # the same callers do take verified kernels
    assert set(_callers(monkeypatch).values()) == {"triton"}


@pytest.mark.parametrize("why", ["head_dim", "dtype", "cpu", "unfit"])
def test_auto_keeps_inputs_the_kernels_do_not_take_on_the_mirror(monkeypatch, why):
    monkeypatch.setattr(kernels, "GPU_VERIFIED", True)
    kw = dict(device=CUDA, dtype=torch.bfloat16, head_dim=64)
    kw.update({"head_dim": dict(head_dim=96), "dtype": dict(dtype=torch.float64), "cpu": dict(device="cpu"),
               "unfit": dict(unfit="the chunk is too long")}[why])
    assert impl.resolve_backend("auto", **kw) == "blockwise"


def test_named_errors(monkeypatch):
    with pytest.raises(ValueError, match="backend"):
        impl.resolve_backend("fast", device="cpu", dtype=torch.float32, head_dim=64)
    with pytest.raises(ValueError, match="impl='triton': the chunk"):
        impl.resolve_backend("triton", device="cpu", dtype=torch.float32, head_dim=64, unfit="the chunk", name="impl")
    monkeypatch.setattr(impl, "kernels_state", lambda: (False, False, "the kernels cannot be imported (no triton)"))
    with pytest.raises(ValueError, match="backend='triton': the kernels cannot be imported"):
        impl.resolve_backend("triton", device=CUDA, dtype=torch.float16, head_dim=64)


def test_the_reference_module_only_computes():
    q, k, v, w, beta, g = random_path_inputs(1, 6, 2, 2, 4, gate=True, dtype=torch.float64)
    from path_lib.reference.attention import path_attention as reference
    for name in ("blockwise", "blockwise_scan", "triton", "auto"):
        with pytest.raises(ValueError, match="not a reference implementation"):
            reference(q, k, v, w, beta, g, impl=name)
    truth = reference(q, k, v, w, beta, g, impl="explicit")
    for name in ("parallel", "blockwise", "blockwise_scan", "auto"):         # 'auto' on a CPU: the mirror
        torch.testing.assert_close(impl.path_attention(q, k, v, w, beta, g, impl=name, block_size=2), truth,
                                   atol=1e-10, rtol=0)


def _reads_the_gate(source: str) -> list:
    tree = ast.parse(source)
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr in ("GPU_VERIFIED", "is_available")
            and "kernels" in ast.unparse(n.value)
            or isinstance(n, ast.alias) and n.name in ("GPU_VERIFIED", "is_available")]


def test_no_other_library_module_reads_the_gate():
    """Outside path_lib/impl.py and the kernels themselves, no library or experiment module reads
    ``GPU_VERIFIED`` or ``is_available`` to choose an implementation."""
    assert _reads_the_gate("import path_lib.kernels as kernels\nx = kernels.GPU_VERIFIED\n")   # the checker works
    files = [p for base in ("path_lib", "scripts/experiments") for p in (ROOT / base).rglob("*.py")
             if p.name != "impl.py" and "book" not in p.relative_to(ROOT).parts]
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in files for line in _reads_the_gate(p.read_text())]
    assert not bad, bad
