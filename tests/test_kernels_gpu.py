"""The Triton kernels on a CUDA GPU (marked ``gpu``; skipped without one): forward and every gradient
against the float64 UT all-pairs reference, for each dtype, head dim, ragged T, GQA, the gate and
cu_seqlens. The full coverage sweep (long T too) is ``benchmarks/correctness_sweep.py``."""
from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    pytest.skip("needs a CUDA device (and TRITON_INTERPRET unset)", allow_module_level=True)
pytest.importorskip("triton")

import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from correctness_sweep import check_case  # noqa: E402

BF16 = torch.cuda.get_device_capability()[0] >= 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("D", [32, 64, 128])
def test_dtypes_and_head_dims(dtype, D):
    if dtype == torch.bfloat16 and not BF16:
        pytest.skip("bfloat16 needs compute capability >= 8.0")
    gen = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    r = check_case("t", B=2, T=201, Hq=4, Hk=2, D=D, dtype=dtype, gate=True, gen=gen)
    assert r["ok"], r


@pytest.mark.parametrize("gate", [False, True])
def test_segments_and_varlen(gate):
    gen = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    r = check_case("seg", B=1, T=900, Hq=2, Hk=1, D=64, dtype=torch.float32, gate=gate, gen=gen, seg_blocks=2)
    assert r["ok"], r
    r = check_case("varlen", B=1, T=500, Hq=2, Hk=2, D=64, dtype=torch.float32, gate=gate, gen=gen,
                   lens=[200, 1, 299])
    assert r["ok"], r


def test_bf16_rejected_before_sm80():
    if BF16:
        pytest.skip("this GPU supports bfloat16")
    import path_lib.kernels
    q = torch.randn(1, 8, 1, 32, device="cuda", dtype=torch.bfloat16)
    w = torch.nn.functional.normalize(torch.randn(1, 8, 1, 32, device="cuda"), dim=-1)
    with pytest.raises(TypeError, match="bfloat16"):
        path_lib.kernels.path_attention(q, q, q, w, torch.ones(1, 8, 1, device="cuda"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_teaching_kernel(dtype):
    """kernels/path_lib/kernels/teaching.py (forward only, same heads, no gate) against the float64 UT all-pairs form,
    at a ragged length (1000 tokens: the last 16-token block has 8)."""
    if dtype == torch.bfloat16 and not BF16:
        pytest.skip("bfloat16 needs compute capability >= 8.0")
    from path_lib.kernels.teaching import teaching_path_attention
    from path_lib.impl import path_attention
    gen = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    B, T, H, D = 2, 1000, 4, 64
    q, k, v = (torch.randn(B, T, H, D, device="cuda", generator=gen).to(dtype) for _ in range(3))
    w = torch.nn.functional.normalize(torch.randn(B, T, H, D, device="cuda", generator=gen), dim=-1)
    beta = 2 * torch.rand(B, T, H, device="cuda", generator=gen)
    o = teaching_path_attention(q, k, v, w, beta)
    assert o.shape == q.shape and o.dtype == dtype
    ref = path_attention(*(x.double() for x in (q, k, v, w, beta)), impl="parallel")
    rel = ((o.double() - ref).norm() / ref.norm()).item()      # as benchmarks/correctness_sweep.py measures
    assert rel < (1e-5 if dtype == torch.float32 else 2e-2), rel
