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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import path_lib.kernels._config as _config  # noqa: E402
import path_lib.kernels._triton_kernels as K  # noqa: E402

# what the single-segment mode launches besides the forward and block kernels (_precompute.py, _backward.py)
SINGLE_SEGMENT_KERNELS = ("_delta_kernel", "_bwd_intra_kernel", "_bwd_diag_kernel", "_ut_a_kernel", "_ut_kernel",
                          "_prep_kernel", "_bwd_block_kernel")
SCALARS = dict(scale="fp32", T="i32", NB="i32", NS="i32", SB="i32", GROUP="i32")
# opt-in shared memory per block by architecture (--smem overrides): what kernel_config reads off a device
ARCH_SMEM = {75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}


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


def device_for(arch, smem=None):
    """The device the launcher would configure for (``path_lib.kernels.DeviceInfo``): compute capability from
    ``arch``, opt-in shared memory from ``smem`` or ``ARCH_SMEM``."""
    smem = smem or ARCH_SMEM.get(arch) or (232448 if arch >= 90 else 101376)
    return _config.DeviceInfo("cuda", (arch // 10, arch % 10), smem, f"sm_{arch}")


def launch_config(arch, dtype, D, BT=None, smem=None):
    """The launcher's ``KernelConfig`` (``kernels/path_lib/kernels/_config.py:kernel_config``) on a device of this architecture,
    at block length ``BT`` (default: what the device's shared memory gives at 64 / 32, i.e. 64 for half,
    32 for float32 on a big GPU; e.g. 32 / 16 for a T4's 64 KB), for a sequence of 16 segments of 16
    blocks (the rows per program of the shipped tables tile it)."""
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    BT = BT or (64 if dtype != "fp32" else 32)
    return _config.kernel_config(device_for(arch, smem), torch_dtype, D, 256 * BT, block_size=BT, seg_blocks=16)


def configs(arch, dtype, D, BT=None, smem=None):
    """The configuration kernels/path_lib/kernels/_config.py picks on a device of this architecture (``launch_config``):
    ``(BT, [(kernel, pointer dtypes by parameter, constexprs, num_warps, num_stages), ...])``."""
    cfg = launch_config(arch, dtype, D, BT, smem)
    BT, w, st = cfg.block, cfg.warps, cfg.stages
    tl_of = lambda name: getattr(tl, name)  # noqa: E731
    CDT = tl_of(cfg.compute_dtype)
    qt = "*" + dtype
    fwd = dict(HQ=4, HK=2, D=D, BT=BT, HAS_G=True, CDT=CDT, PREC=cfg.precision)
    ce = dict(fwd, TDT=tl_of(cfg.backward_transport_dtype))  # the backward's attention kernels
    blk = dict(HK=2, D=D, BT=BT, PREC=cfg.block_precision)  # per-block / per-segment kernels
    return BT, [
        (K._delta_kernel, dict(DO=qt, O=qt), dict(HQ=4, D=D, BT=BT), w.delta, 1),
        (K._fwd_kernel, dict(Q=qt, K=qt, V=qt, O=qt, K_BLOCK_END=qt, K_SEG_END=qt, Q_SEG_START=qt),
         dict(fwd, TDT=tl_of(cfg.transport_dtype), SEGS=True, SPLIT=cfg.fwd_split), w.fwd, st.fwd),
        (K._fwd_inter_kernel, dict(Q_SEG_START=qt, K_SEG_END=qt, V=qt, O=qt), dict(fwd, QR=cfg.fwd_rows),
         w.fwd_inter, st.fwd_inter),
        (K._bwd_inter_q_kernel, dict(Q_SEG_START=qt, K_SEG_END=qt, V=qt, DO=qt, SEG_PROD=qt, PAIR_PROD=qt),
         dict(ce, DC=cfg.seg_split, QR=cfg.query_rows), w.inter_q, st.inter_q),
        (K._bwd_inter_kv_kernel, dict(Q_SEG_START=qt, K_SEG_END=qt, V=qt, DO=qt, PAIR_PROD=qt),
         dict(ce, KR=cfg.key_rows, DC=cfg.seg_split), w.inter_kv, st.inter_kv),
        (K._bwd_intra_kernel, dict(Q=qt, V=qt, W=qt, UT_TW=qt, K_BLOCK_END=qt, DO=qt, Q_STATE_SCRATCH=qt), ce,
         w.intra, 1),
        (K._bwd_diag_kernel, dict(Q=qt, K=qt, V=qt, W=qt, UT_TW=qt, DO=qt, DQ=qt), dict(ce, DC=cfg.diag_cols),
         w.diag, 1),
        (K._ut_a_kernel, {}, dict(HK=2, D=D, BT=BT, SOLVE_PREC=cfg.solve_precision), w.ut_a, 1),
        (K._ut_kernel, {}, dict(HK=2, BT=BT, SOLVE_PREC=cfg.solve_precision), w.ut, 1),
        (K._prep_kernel, dict(K=qt, K_BLOCK_END=qt), blk, w.prep, 1),
        (K._seg_fwd_kernel, dict(K_BLOCK_END=qt, K_SEG_END=qt), blk, w.seg, 1),
        (K._pair_kernel, {}, dict(HK=2, D=D, PREC=cfg.solve_precision), w.seg, 1),
        (K._seg_bwd_kernel, dict(K_BLOCK_END=qt), dict(blk, DR=cfg.seg_split), w.seg_bwd, 1),
        (K._seg_grad_kernel, {}, dict(blk, HQ=4, DC=cfg.seg_split), w.seg, 1),
        (K._bwd_block_kernel, dict(K=qt, OUT_DK=qt), dict(blk, HQ=4, DC=cfg.block_cols), w.block, 1),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--Ds", default="32,64,128")
    ap.add_argument("--bt", type=int, default=None)
    ap.add_argument("--smem", type=int, default=None,
                    help="opt-in shared memory per block in bytes (default: ARCH_SMEM of --arch)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--single-segment", action="store_true",
                    help="only the kernels the single-segment mode launches (the forward kernel with "
                         "SEGS=False; the segment kernels are skipped), as a T4 at D = 128 runs them")
    ap.add_argument("--kernels", default=None, help="comma list of kernel names to compile (default: all)")
    args = ap.parse_args()
    only = set(args.kernels.split(",")) if args.kernels else None
    rows = []
    for dtype in args.dtypes.split(","):
        for D in [int(x) for x in args.Ds.split(",")]:
            BT, jobs = configs(args.arch, dtype, D, args.bt, args.smem)
            for fn, ptrs, ce, warps, stages in jobs:
                if only and fn.fn.__name__ not in only:
                    continue
                if args.single_segment:
                    if fn.fn.__name__ == "_fwd_kernel":
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
        from path_lib.records import write_result
        write_result(args.out, dict(note="AOT compile with triton's bundled ptxas; no GPU involved; pointers and "
                                         f"{', '.join(DIVISIBLE_INTS)} marked divisible by 16 as the JIT does",
                                    rows=rows), command="PYTHONPATH=. python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
