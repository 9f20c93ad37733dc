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
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)     # the device checks see the faked GPU
    return {"layer": PaTHAttention(128, 2, backend="auto")._plan(fake_cuda()).attention,
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


@pytest.mark.parametrize("bad, error, named", [
    (dict(device="no such device"), ValueError, "device"), (dict(device=2.5), TypeError, "device"),
    (dict(device=True), TypeError, "device"), (dict(dtype="float16"), TypeError, "dtype"),
    (dict(head_dim=-1), ValueError, "head_dim"), (dict(head_dim=64.0), TypeError, "head_dim"),
    (dict(unfit=3), TypeError, "unfit")])
def test_the_resolver_names_a_bad_description_of_the_inputs(bad, error, named):
    """A bad device, dtype, head dim or reason is named, never read as 'not the kernels' (which would pick
    the mirror silently) nor passed to torch's own parser."""
    kw = {**dict(device=CUDA, dtype=torch.float16, head_dim=64), **bad}
    with pytest.raises(error, match=named):
        impl.resolve_backend("auto", **kw)


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
            if isinstance(n, ast.Attribute) and n.attr in GATE and "kernels" in ast.unparse(n.value)
            or isinstance(n, ast.alias) and n.name in GATE]


#: what tells whether the kernels may run: only path_lib/impl.py reads it
GATE = ("GPU_VERIFIED", "is_available", "verification", "kernels_state")
#: the names of implementations a list of choices is made of ("explicit" and "parallel", the reference's
#: own two forms, are words of other lists too)
NAMES = set(impl.IMPLEMENTATIONS) - {"explicit", "parallel"}


def _decides(source: str, library: bool = True) -> list:
    """Lines where ``source`` decides an implementation itself: reads the gate, holds a list of two or more
    implementation names (a vocabulary of its own), or, in the ``library``, resolves ``"auto"`` by comparing
    a ``backend`` or ``impl`` with it (a script may branch on its command line's "auto" to ask impl
    with a check of its own)."""
    found = set(_reads_the_gate(source))
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            words = {e.value for e in n.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if len(words & NAMES) >= 2:
                found.add(n.lineno)
        if isinstance(n, ast.Compare):
            sides = [n.left, *n.comparators]
            auto = any(isinstance(x, ast.Constant) and x.value == "auto" for x in sides)
            named = any(isinstance(x, (ast.Name, ast.Attribute)) and any(
                w in ast.unparse(x).rsplit(".", 1)[-1] for w in ("backend", "impl")) for x in sides)
            if auto and named and library:
                found.add(n.lineno)
    return sorted(found)


def test_the_checker_finds_a_decision():
    assert _decides("import path_lib.kernels as kernels\nx = kernels.GPU_VERIFIED\n")
    assert _decides("from path_lib.impl import kernels_state\n")
    assert _decides('BACKENDS = ("auto", "reference", "triton")\n')
    assert _decides('check_choice(b, "backend", ["auto", "sdpa"])\n')
    assert _decides('use = self.backend == "sdpa" or (self.backend == "auto" and x.is_cuda)\n')
    assert not _decides('impl = "parallel" if exact else "blockwise"\nif plan.attention == "triton": pass\n')


def test_no_other_module_decides_which_implementation_runs():
    """Outside path_lib/impl.py (and the kernels themselves, which report their own state), no library, kernel
    or experiment module reads the kernels' verification, names a list of implementations or resolves
    ``"auto"`` itself: the layers, context parallelism, decoding, the Hugging Face model and the experiments
    ask path_lib.impl."""
    kernels_dir = ROOT / "kernels" / "path_lib" / "kernels"
    files = [p for base in ("path_lib", "scripts/experiments", "kernels") for p in (ROOT / base).rglob("*.py")
             if p.relative_to(ROOT) != Path("path_lib/impl.py") and p.parent != kernels_dir
             and "book" not in p.relative_to(ROOT).parts]
    assert any(p.name == "layers.py" for p in files) and any(p.name == "distributed.py" for p in files)
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in files
           for line in _decides(p.read_text(), library=p.relative_to(ROOT).parts[0] != "scripts")]
    assert not bad, bad


def test_every_choice_is_named_in_the_one_vocabulary():
    from path_lib.reference import attention as reference
    assert all(set(names) <= set(impl.IMPLEMENTATIONS) for names in impl.CHOICES.values())
    assert set(reference.IMPLEMENTATIONS) <= set(impl.CHOICES["path_attention"])
    for call, names in impl.CHOICES.items():
        for name in names:
            got = impl.resolve_backend(name, device="cpu", dtype=torch.float32, head_dim=64, call=call) \
                if name != "triton" else "triton"
            assert got in impl.IMPLEMENTATIONS


def test_one_plan_per_forward(monkeypatch):
    """A PaTH layer's forward (and a prefill) asks path_lib.impl once, whatever it runs on."""
    from path_lib.nn import layers
    calls = []
    real = layers.plan_path
    monkeypatch.setattr(layers, "plan_path", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    layer = PaTHAttention(16, 2, use_forget_gate=True)
    x = torch.randn(2, 5, 16)
    layer(x)
    assert len(calls) == 1
    layer(x, use_cache=True)
    assert len(calls) == 2 and calls[-1]["batch"] == 2
