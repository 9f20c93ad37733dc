"""benchmarks/compile_check.py compiles each kernel at the configuration the launcher would pick on a
given architecture; it asks kernels/path_lib/kernels/_config.py (``kernel_config``) for the warps, stages and splits
instead of keeping a copy."""
import inspect
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
pytest.importorskip("triton")


@pytest.fixture
def no_overrides(monkeypatch):
    for var in ("PATH_KERNELS_WARPS", "PATH_KERNELS_SPLIT", "PATH_KERNELS_STAGES"):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("arch,dtype,D,kernel,warps", [
    (90, "bf16", 128, "_fwd_kernel", 4), (90, "bf16", 128, "_bwd_inter_kv_kernel", 8),
    (90, "bf16", 128, "_bwd_inter_q_kernel", 8), (90, "bf16", 128, "_fwd_inter_kernel", 8),
    (90, "bf16", 64, "_fwd_inter_kernel", 4),
    (90, "fp32", 128, "_bwd_intra_kernel", 8), (90, "bf16", 64, "_bwd_block_kernel", 4),
    (75, "fp16", 128, "_bwd_intra_kernel", 4),
])
def test_configs_follow_the_launcher(arch, dtype, D, kernel, warps, no_overrides):
    from benchmarks.compile_check import configs, device_for
    from path_lib.kernels import _config
    BT, jobs = configs(arch, dtype, D)
    found = {fn.fn.__name__: (ce, w, st) for fn, _, ce, w, st in jobs}
    assert found[kernel][1] == warps
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    cfg = _config.kernel_config(device_for(arch), torch_dtype, D, 256 * BT, block_size=BT, seg_blocks=16)
    assert BT == cfg.block == (64 if dtype != "fp32" else 32)
    assert found["_bwd_inter_q_kernel"][0]["DC"] == cfg.seg_split
    assert found["_bwd_block_kernel"][0]["DC"] == cfg.block_cols
    assert found["_bwd_diag_kernel"][0]["DC"] == cfg.diag_cols
    assert found["_bwd_inter_kv_kernel"][0]["KR"] == cfg.key_rows
    assert found["_bwd_inter_q_kernel"][0]["QR"] == cfg.query_rows
    assert found["_fwd_inter_kernel"][0]["QR"] == cfg.fwd_rows
    assert found["_fwd_kernel"][0]["SPLIT"] == (cfg.fwd_rows > BT) == cfg.fwd_split
    for name, loop in (("_fwd_kernel", "fwd"), ("_fwd_inter_kernel", "fwd_inter"), ("_bwd_inter_q_kernel", "inter_q"),
                       ("_bwd_inter_kv_kernel", "inter_kv")):
        assert found[name][1:] == (cfg.warps[loop], cfg.stages[loop])
    # the backward's attention kernels take the backward's transport dtype (the input dtype), the forward fp16
    half = dtype != "fp32"
    assert str(found["_fwd_kernel"][0]["TDT"]) == ("fp16" if half else "fp32")
    assert str(found["_bwd_intra_kernel"][0]["TDT"]) == {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}[dtype]
    # every constexpr and pointer named in a job is a parameter of its kernel
    for fn, ptrs, ce, _, _ in jobs:
        params = set(inspect.signature(fn.fn).parameters)
        assert set(ptrs) <= params and set(ce) <= params, fn.fn.__name__


def test_row_tables_apply_at_the_measured_block_length_only(no_overrides):
    """128-row programs (key side, query side, forward's earlier segments) were measured at BT = 64 on an
    H200; smaller blocks (GPUs with less shared memory, e.g. a T4) and float32 keep one block per program,
    and so does a segment length that the rows do not tile."""
    from path_lib.kernels import _config

    def rows(D, BT, SB, NB, dtype=torch.bfloat16):
        cfg = _config.kernel_config(_config.H200, dtype, D, NB * BT, block_size=BT, seg_blocks=SB)
        return cfg.key_rows, cfg.query_rows, cfg.fwd_rows

    assert rows(128, 64, 16, 256) == (128, 128, 128)
    assert rows(128, 32, 16, 512) == (32, 32, 32)
    assert rows(128, 64, 16, 256, torch.float32) == (64, 64, 64)
    assert rows(128, 64, 3, 256) == (64, 64, 64)
    assert rows(64, 64, 12, 256) == (64, 64, 128)


def test_aot_compiles_carry_the_jit_divisibility_hints():
    """Without the JIT's divisibility hints (16-byte-aligned pointers, sizes that are multiples of 16) the
    compiler cannot software-pipeline the attention loops, and the report would under-state their shared
    memory (v9: `_fwd_kernel` at D = 128 reported 98560 bytes, 221440 with the hints under triton 3.6)."""
    from benchmarks.compile_check import _attrs, _signature
    import path_lib.kernels._triton_kernels as K
    sig = _signature(K._fwd_inter_kernel, {"Q_SEG_START": "*bf16"},
                     dict(HQ=4, HK=2, D=64, BT=64, HAS_G=True, CDT=None, PREC="tf32", QR=128))
    marked = {list(sig)[i] for (i,) in _attrs(sig)}
    assert {"Q_SEG_START", "K_SEG_END", "V", "PAIR_PROD", "GATE_CUMSUM", "O", "LSE", "O_PARTIAL", "T", "NB"} == marked
