"""Ahead-of-time compile of every Triton kernel for a GPU architecture, without a GPU.

Uses triton's bundled ptxas/cuobjdump: reports per kernel the dynamic shared memory (compare with the
device's opt-in limit: 232448 bytes on H100/H200, 166912 on A100, 101376 on sm86/89, 65536 on T4), the
registers per thread and the stack frame (spills) from the cubin. Catches compile errors and shared
memory overflows before any device time is spent.

    PYTHONPATH=. python3 benchmarks/compile_check.py --arch 90 [--out benchmarks/results/compile_sm90.json]
"""
from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import kernels._path as _path  # noqa: E402
import kernels._triton_kernels as K  # noqa: E402

# what the single-segment mode launches besides the forward and block kernels (kernels/_path.py)
SINGLE_SEGMENT_KERNELS = ("_delta_kernel", "_bwd_intra_kernel", "_bwd_diag_kernel", "_ut_kernel", "_prep_kernel")
SCALARS = dict(scale="fp32", T="i32", NB="i32", NS="i32", SB="i32", GRP="i32")


def _signature(fn, ptr_types, constexprs):
    sig = {}
    for n in inspect.signature(fn.fn).parameters:
        sig[n] = "constexpr" if n in constexprs else SCALARS.get(n, ptr_types.get(n, "*fp32"))
    return sig


# integer arguments that are multiples of 16 in the benchmark's shapes (T in 1024 ... 16384, NB = T / BT):
# the JIT marks such values divisible by 16, as it marks every 16-byte-aligned pointer (torch's
# allocations); without these hints the compiler cannot use vectorized asynchronous copies, so the
# attention loops would not be software-pipelined and shared memory would be under-reported
DIVISIBLE_INTS = ("T", "NB")


def _attrs(sig):
    """Divisibility hints as the JIT would give them: every pointer, and ``DIVISIBLE_INTS``."""
    return {(i,): [["tt.divisibility", 16]] for i, (name, ty) in enumerate(sig.items())
            if ty.startswith("*") or name in DIVISIBLE_INTS}


def compile_one(fn, ptr_types, constexprs, arch, warps, stages):
    sig = _signature(fn, ptr_types, constexprs)
    src = ASTSource(fn, sig, constexprs, _attrs(sig))
    t0 = time.time()
    ck = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=dict(num_warps=warps, num_stages=stages))
    res = {}
    cuobj = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if os.path.exists(cuobj):
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(ck.asm["cubin"])
        out = subprocess.run([cuobj, "-res-usage", f.name], capture_output=True, text=True).stdout
        os.unlink(f.name)
        m = re.search(r"REG:(\d+) STACK:(\d+)", out)
        if m:
            res = dict(regs=int(m.group(1)), stack_bytes=int(m.group(2)))
    return dict(compile_s=round(time.time() - t0, 1), shared_bytes=ck.metadata.shared, **res)


def _shipped_warps(arch, dtype, D, warps):
    """The launcher's own warp choice (``kernels/_path.py:_aux_warps``) for a device of this architecture,
    asked through a stand-in query tensor (no GPU needed)."""
    fake_q = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"), shape=(1, 1, 1, D),
                                   dtype=torch.float32 if dtype == "fp32" else torch.float16)
    with mock.patch.object(torch.cuda, "get_device_capability", lambda *_: (arch // 10, arch % 10)):
        return _path._aux_warps(fake_q, warps)


def configs(arch, dtype, D, BT=None):
    """The configuration kernels/_path.py picks on a device of this architecture (big shared memory;
    ``BT`` overrides the block length, e.g. 32 / 16 for a T4's 64 KB)."""
    half = dtype != "fp32"
    BT = BT or (64 if half else 32)
    warps = 4 if (D <= 64 or arch < 80) else 8  # kernels/_path.py: _config
    aux = _shipped_warps(arch, dtype, D, warps)
    big = half and arch >= 90  # kernels/_path.py: _stages (big shared memory, half precision)
    st = {key: (_path._STAGES_HALF[key] if big else 1) for key in _path._STAGE_KEYS}
    CDT = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}[dtype]
    TDT = tl.float16 if half else tl.float32
    prec = "tf32" if half else ("tf32x3" if arch >= 80 else "ieee")
    p32 = "tf32x3" if arch >= 80 else "ieee"
    qt = "*" + dtype
    ce = dict(HQ=4, HK=2, D=D, BT=BT, HAS_G=True, CDT=CDT, TDT=TDT, PREC=prec)
    blk = dict(HK=2, D=D, BT=BT, PREC=prec if half else p32)  # per-block / per-segment kernels
    seg_split, block_cols = _path._seg_split(D), _path._block_cols(D)
    def rows(fn):  # the launcher's rows per program, for a segment length and sequence they tile
        return fn(D, BT, 1 << 10, 1 << 10, half)
    fwd_rows = rows(_path._fwd_rows)
    ce_inter = {key: val for key, val in ce.items() if key != "TDT"}
    return BT, [
        (K._delta_kernel, dict(DO=qt, O=qt), dict(HQ=4, D=D, BT=BT), 4, 1),
        (K._fwd_kernel, dict(Q=qt, K=qt, V=qt, O=qt, KA=qt, KS=qt, Q0=qt), dict(ce, SPLIT=fwd_rows > BT),
         aux.get("fwd", warps), st["fwd"]),
        (K._fwd_inter_kernel, dict(Q0=qt, KS=qt, V=qt, O=qt), dict(ce_inter, QR=fwd_rows), aux["fwd_inter"],
         st["fwd_inter"]),
        (K._bwd_inter_q_kernel, dict(Q0=qt, KS=qt, V=qt, DO=qt, SEG=qt, OM=qt), dict(ce, DC=seg_split, QR=rows(_path._query_rows)),
         aux.get("inter_q", warps), st["inter_q"]),
        (K._bwd_inter_kv_kernel, dict(Q0=qt, KS=qt, V=qt, DO=qt, OM=qt),
         dict(ce, KR=rows(_path._key_rows), DC=seg_split), aux.get("inter_kv", warps), st["inter_kv"]),
        (K._bwd_intra_kernel, dict(Q=qt, V=qt, W=qt, TW=qt, KA=qt, DO=qt, SCR=qt), ce, aux["intra"], 1),
        (K._bwd_diag_kernel, dict(Q=qt, K=qt, V=qt, W=qt, TW=qt, DO=qt, DQ=qt), dict(ce, DC=_path._diag_cols(D, BT, half)), aux["diag"], 1),
        (K._ut_kernel, {}, dict(HK=2, D=D, BT=BT, SOLVE_PREC=p32), aux["ut"], 1),
        (K._prep_kernel, dict(K=qt, KA=qt), blk, aux["prep"], 1),
        (K._seg_fwd_kernel, dict(KA=qt, KS=qt), blk, aux["seg"], 1),
        (K._pair_kernel, {}, dict(HK=2, D=D, PREC=p32), aux["seg"], 1),
        (K._seg_bwd_kernel, dict(KA=qt), dict(blk, DR=seg_split), aux["seg_bwd"], 1),
        (K._seg_grad_kernel, {}, dict(blk, DC=seg_split), aux["seg"], 1),
        (K._bwd_block_kernel, dict(K=qt, OUT_DK=qt), dict(blk, HQ=4, DC=block_cols, SEGS=True), aux["block"], 1),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--Ds", default="32,64,128")
    ap.add_argument("--bt", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--single-segment", action="store_true",
                    help="only the kernels the single-segment mode launches (forward and block kernel with "
                         "SEGS=False; the segment kernels are skipped), as a T4 at D = 128 runs them")
    ap.add_argument("--kernels", default=None, help="comma list of kernel names to compile (default: all)")
    args = ap.parse_args()
    only = set(args.kernels.split(",")) if args.kernels else None
    rows = []
    for dtype in args.dtypes.split(","):
        for D in [int(x) for x in args.Ds.split(",")]:
            BT, jobs = configs(args.arch, dtype, D, args.bt)
            for fn, ptrs, ce, warps, stages in jobs:
                if only and fn.fn.__name__ not in only:
                    continue
                if args.single_segment:
                    if fn.fn.__name__ in ("_fwd_kernel", "_bwd_block_kernel"):
                        ce = dict(ce, SEGS=False)
                    elif fn.fn.__name__ not in SINGLE_SEGMENT_KERNELS:
                        continue
                try:
                    r = compile_one(fn, ptrs, ce, args.arch, warps, stages)
                except Exception as e:
                    r = dict(error=f"{type(e).__name__}: {str(e)[:300]}")
                row = dict(arch=args.arch, dtype=dtype, D=D, BT=BT, kernel=fn.fn.__name__, num_warps=warps,
                           num_stages=stages, **r)
                if args.single_segment:
                    row["SEGS"] = ce.get("SEGS", "n/a")
                rows.append(row)
                print(row, flush=True)
    if args.out:
        from path_lib.experiments.provenance import write_result
        write_result(args.out, dict(note="AOT compile with triton's bundled ptxas; no GPU involved; pointers and "
                                         f"{', '.join(DIVISIBLE_INTS)} marked divisible by 16 as the JIT does",
                                    rows=rows), command="PYTHONPATH=. python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
