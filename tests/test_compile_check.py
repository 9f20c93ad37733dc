"""benchmarks/compile_check.py compiles each kernel at the configuration the launcher would pick on a
given architecture; it asks kernels/_path.py for the warps and splits instead of keeping a copy."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
pytest.importorskip("triton")


@pytest.mark.parametrize("arch,dtype,D,kernel,warps", [
    (90, "bf16", 128, "_fwd_kernel", 4), (90, "bf16", 128, "_bwd_inter_kv_kernel", 8),
    (90, "bf16", 128, "_bwd_inter_q_kernel", 8), (90, "bf16", 128, "_fwd_inter_kernel", 8),
    (90, "bf16", 64, "_fwd_inter_kernel", 4),
    (90, "fp32", 128, "_bwd_intra_kernel", 8), (90, "bf16", 64, "_bwd_block_kernel", 4),
    (75, "fp16", 128, "_bwd_intra_kernel", 4),
])
def test_configs_follow_the_launcher(arch, dtype, D, kernel, warps, monkeypatch):
    monkeypatch.delenv("PATH_KERNELS_WARPS", raising=False)
    monkeypatch.delenv("PATH_KERNELS_SPLIT", raising=False)
    from benchmarks.compile_check import configs
    from kernels import _path
    BT, jobs = configs(arch, dtype, D)
    found = {fn.fn.__name__: (ce, w) for fn, _, ce, w, _ in jobs}
    assert found[kernel][1] == warps
    assert found["_bwd_inter_q_kernel"][0]["DC"] == _path._seg_split(D)
    assert found["_bwd_block_kernel"][0]["DC"] == _path._block_cols(D)
    half = dtype != "fp32"
    rows = {name: fn(D, BT, 1 << 10, 1 << 10, half) for name, fn in (
        ("_bwd_inter_kv_kernel", _path._key_rows), ("_bwd_inter_q_kernel", _path._query_rows),
        ("_fwd_inter_kernel", _path._fwd_rows))}
    for name, n in rows.items():
        key = "KR" if name == "_bwd_inter_kv_kernel" else "QR"
        assert found[name][0][key] == n
    assert found["_fwd_kernel"][0]["SPLIT"] == (rows["_fwd_inter_kernel"] > BT)


def test_row_tables_apply_at_the_measured_block_length_only(monkeypatch):
    """128-row programs (key side, query side, forward's earlier segments) were measured at BT = 64 on an
    H200; smaller blocks (GPUs with less shared memory, e.g. a T4) and float32 keep one block per program,
    and so does a segment length that the rows do not tile."""
    monkeypatch.delenv("PATH_KERNELS_SPLIT", raising=False)
    from kernels import _path
    for fn in (_path._key_rows, _path._query_rows, _path._fwd_rows):
        assert fn(128, 64, 16, 256, True) == 128
        assert fn(128, 32, 16, 512, True) == 32
        assert fn(128, 64, 16, 256, False) == 64
        assert fn(128, 64, 3, 256, True) == 64
    assert _path._fwd_rows(64, 64, 12, 256, True) == 128
    assert _path._key_rows(64, 64, 12, 256, True) == 64 and _path._query_rows(64, 64, 12, 256, True) == 64


def test_aot_compiles_carry_the_jit_divisibility_hints():
    """Without the JIT's divisibility hints (16-byte-aligned pointers, sizes that are multiples of 16) the
    compiler cannot software-pipeline the attention loops, and the report would under-state their shared
    memory (v9: `_fwd_kernel` at D = 128 reported 98560 bytes, 221440 with the hints under triton 3.6)."""
    from benchmarks.compile_check import _attrs, _signature
    import kernels._triton_kernels as K
    sig = _signature(K._fwd_inter_kernel, {"Q0": "*bf16"}, dict(HQ=4, HK=2, D=64, BT=64, HAS_G=True, CDT=None,
                                                                PREC="tf32", QR=128))
    marked = {list(sig)[i] for (i,) in _attrs(sig)}
    assert {"Q0", "KS", "V", "OM", "G", "O", "LSE", "OP", "T", "NB"} == marked
