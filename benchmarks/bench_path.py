"""Speed and peak memory of PaTH attention kernels on the GPU.

B*T = 32768 tokens (and one sequence of T = 65536), H*D = 2048, D in {64, 128}; bf16 q, k, v; float32
w, beta, g. Forward and forward+backward; median of ``triton.testing.do_bench``; peak memory above the
inputs. The same run measures the GPU's two ceilings (a bf16 matrix product and a device-to-device copy),
from which ``path_lib.book.speed`` computes each cell's floor.

Methods:
* ``sdpa``: PyTorch's ``scaled_dot_product_attention`` with its default dispatch, causal, no position
  encoding: the fastest attention PyTorch has on this GPU (cuDNN on an H200). Which backend ran is read
  off the CUDA kernels it launched (torch.profiler) and stored with the row (``backend``, ``path_lib.kernels``);
* ``sdpa_flash``: the same call with the FlashAttention backend forced (a second, labelled baseline);
* ``ours_path`` / ``ours_pathfox``: ``path_lib.kernels.path_attention`` without / with the gate;
* ``fla_path`` / ``fla_pathfox``: fla-core 0.6.0 ``fla.ops.path_attn.parallel_path_attn`` (gate passed as
  g / scale, since fla scales the gate);
* ``fla_fox``: ``fla.ops.forgetting_attn.parallel_forgetting_attn`` (FoX, no Householder transforms).
fla is recorded as "not available" when it cannot be imported.

    PYTHONPATH=. python3 benchmarks/bench_path.py [--out benchmarks/results/bench_path.json] [--quick]
    PYTHONPATH=. python3 benchmarks/bench_path.py --warm-only --shapes 64:1024   # compile only (no record)

Record schema 2: ``{schema, fla, dtype, tokens, hidden, do_bench, ceilings, rows}``; a row is
``{D, H, T, B, method, mode, ms, peak_mib}`` (``ms: None`` and ``error`` when it failed), plus ``backend``
and ``path_lib.kernels`` for ``sdpa`` and ``config`` (block length, blocks per segment) for ours. ``--resume``
keeps the rows of an existing ``--out`` file and measures only the missing ones.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import path_lib.kernels  # noqa: E402
from path_lib.records import current_schema, write_result  # noqa: E402


def fla_ops():
    try:
        from fla.ops.forgetting_attn import parallel_forgetting_attn
        from fla.ops.path_attn import parallel_path_attn
        import fla
        return parallel_path_attn, parallel_forgetting_attn, getattr(fla, "__version__", "?")
    except Exception as e:  # pragma: no cover
        return None, None, f"not available: {e!r}"[:300]


def make(B, T, H, D, gen):
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(B, T, H, D, generator=gen, device=dev).to(dt)
    k = torch.randn(B, T, H, D, generator=gen, device=dev).to(dt)
    v = torch.randn(B, T, H, D, generator=gen, device=dev).to(dt)
    w = F.normalize(torch.randn(B, T, H, D, generator=gen, device=dev), dim=-1)
    beta = 2 * torch.sigmoid(torch.randn(B, T, H, generator=gen, device=dev))
    g = F.logsigmoid(torch.randn(B, T, H, generator=gen, device=dev) + 3.0)
    return q, k, v, w, beta, g


SCHEMA = current_schema("bench")          # the version path_lib.records.SCHEMAS lists last
DEFAULT_SHAPES = "64:1024,64:4096,64:16384,64:65536,128:1024,128:4096,128:16384,128:65536"


def methods(fla_path, fla_fox, D):
    scale = D ** -0.5
    m = {
        "sdpa": lambda q, k, v, w, b, g: _sdpa(q, k, v),
        "sdpa_flash": lambda q, k, v, w, b, g: _sdpa(q, k, v, forced="flash"),
        "ours_path": lambda q, k, v, w, b, g: path_lib.kernels.path_attention(q, k, v, w, b, None, check_values=False),
        "ours_pathfox": lambda q, k, v, w, b, g: path_lib.kernels.path_attention(q, k, v, w, b, g, check_values=False),
    }
    if fla_path is not None:
        m["fla_path"] = lambda q, k, v, w, b, g: fla_path(q, k, v, w, b, None, scale=scale)[0]
        m["fla_pathfox"] = lambda q, k, v, w, b, g: fla_path(q, k, v, w, b, g / scale, scale=scale)[0]
        m["fla_fox"] = lambda q, k, v, w, b, g: fla_fox(q, k, v, g, scale=scale)
    return m


def _sdpa(q, k, v, forced=None):
    """Causal SDPA on ``[B, T, H, D]`` tensors: PyTorch's default dispatch, or one backend forced."""
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if forced is None:
        o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION}[forced]):
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
    return o.transpose(1, 2)


def backend_of(kernel_names):
    """Name the SDPA backend from the CUDA kernels one call launched (cuDNN, FlashAttention, the
    memory-efficient kernel, or the math fallback)."""
    names = " ".join(kernel_names).lower()
    if "cudnn" in names or "cudnn_generated" in names:
        return "cudnn"
    if "flash" in names:
        return "flash"
    if "fmha" in names or "efficient" in names or "mem_eff" in names or "cutlass" in names:
        return "efficient"
    if "softmax" in names and ("gemm" in names or "gemv" in names):
        return "math"
    return "unknown"


def sdpa_kernels(ins, mode):
    """The CUDA kernel names that one default-dispatch SDPA call (``mode``) launches."""
    from torch.profiler import ProfilerActivity, profile
    q, k, v = ins[:3]
    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        if mode == "fwd":
            with torch.no_grad():
                _sdpa(q, k, v)
        else:
            _sdpa(*leaves).backward(torch.ones_like(q))
        torch.cuda.synchronize()
    return sorted({ev.key[:120] for ev in prof.key_averages()
                   if (getattr(ev, "self_device_time_total", 0) or 0) > 0})


def ceilings(gen):
    """The GPU's two ceilings, measured here: bf16 matrix-product rate (8192^3, TFLOP/s) and the
    bandwidth of a device-to-device copy of 2 GiB (GB/s, bytes read plus bytes written)."""
    import triton
    n = 8192
    a = torch.randn(n, n, generator=gen, device="cuda").bfloat16()
    b = torch.randn(n, n, generator=gen, device="cuda").bfloat16()
    mm_ms = triton.testing.do_bench(lambda: a @ b, warmup=25, rep=200, return_mode="median")
    x = torch.randn(2**29, generator=gen, device="cuda")          # 2 GiB of float32
    y = torch.empty_like(x)
    cp_ms = triton.testing.do_bench(lambda: y.copy_(x), warmup=25, rep=200, return_mode="median")
    nbytes = 2 * x.numel() * x.element_size()
    return dict(matmul_tflops=round(2 * n**3 / (mm_ms * 1e-3) / 1e12, 1), matmul_shape=[n, n, n],
                copy_gbs=round(nbytes / (cp_ms * 1e-3) / 1e9, 1), copy_bytes=nbytes)


def config_of(D, T, mode):
    """The kernels' whole launch configuration at this shape and pass (bf16; ``fwd`` records no gradient):
    ``path_lib.kernels.kernel_config(...).as_dict()`` on this GPU (an H200 described by hand without one), with the
    block length ``block`` and the blocks per segment ``seg_blocks`` among its keys."""
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else path_lib.kernels.H200
    return path_lib.kernels.kernel_config(device, torch.bfloat16, D, T, forward_only=(mode == "fwd")).as_dict()


def bench_one(fn, ins, mode, warmup, rep, warm_only=False):
    import triton
    q, k, v, w, b, g = ins
    if mode == "fwd":
        def run():
            with torch.no_grad():
                fn(q, k, v, w, b, g)
    else:
        leaves = [x.detach().requires_grad_() for x in (q, k, v, w, b, g)]
        do = torch.randn_like(q)

        def run():
            o = fn(*leaves)
            o.backward(do)
    run()
    torch.cuda.synchronize()
    if warm_only:
        return None, None
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    ms = triton.testing.do_bench(run, warmup=warmup, rep=rep, return_mode="median")
    return ms, peak


def parse_shapes(text):
    """``"64:1024,128:65536"`` -> ``[(64, 1024), (128, 65536)]``; B = max(1, 32768 // T), H = 2048 // D."""
    out = []
    for item in text.split(","):
        D, T = (int(x) for x in item.split(":"))
        if D not in (64, 128) or T < 1:
            raise ValueError(f"--shapes: bad shape {item!r} (D in 64, 128; T >= 1)")
        out.append((D, T))
    return out


def summary_lines(rows):
    """The closing table: ms, with ratios to the default SDPA and to fla, per shape and pass."""
    ms = {(r["D"], r["T"], r["method"], r["mode"]): r.get("ms") for r in rows}
    shapes = sorted({(r["D"], r["T"]) for r in rows})
    out = ["| D | T | pass | SDPA default | SDPA flash | ours PaTH (x SDPA, x fla) | ours PaTH-FoX (x SDPA, x fla) | fla PaTH | fla PaTH-FoX |",
           "|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: f"{x:.2f}" if x else "-"  # noqa: E731
    for D, T in shapes:
        for mode in ("fwd", "fwdbwd"):
            s = ms.get((D, T, "sdpa", mode))

            def cell(ours, theirs):
                o, f = ms.get((D, T, ours, mode)), ms.get((D, T, theirs, mode))
                if not o:
                    return "-"
                return f"{o:.2f} ({o / s:.2f}x, {o / f:.2f}x)" if (s and f) else f"{o:.2f}"
            out.append(f"| {D} | {T} | {mode} | {fmt(s)} | {fmt(ms.get((D, T, 'sdpa_flash', mode)))} | "
                       f"{cell('ours_path', 'fla_path')} | {cell('ours_pathfox', 'fla_pathfox')} | "
                       f"{fmt(ms.get((D, T, 'fla_path', mode)))} | {fmt(ms.get((D, T, 'fla_pathfox', mode)))} |")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/bench_path.json")
    ap.add_argument("--quick", action="store_true", help="T in {1024, 4096} only")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="D:T pairs")
    ap.add_argument("--methods", default=None, help="comma list (default: all available)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rep", type=int, default=40)
    ap.add_argument("--warm-only", action="store_true", help="run every method once per shape and pass (compile), record nothing")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out, measure the rest")
    ap.add_argument("--budget-s", type=float, default=None, help="stop starting new shapes after this many seconds")
    args = ap.parse_args()
    t0 = time.time()
    fla_path, fla_fox, fla_ver = fla_ops()
    shapes = parse_shapes(args.shapes)
    if args.quick:
        shapes = [(D, T) for D, T in shapes if T in (1024, 4096)]
    gen = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    cmd = "PYTHONPATH=. python3 " + " ".join(sys.argv)
    rows, ceil = [], None
    if args.resume and os.path.exists(args.out):
        old = json.loads(open(args.out).read())
        rows, ceil = [r for r in old.get("rows", []) if r.get("ms") is not None], old.get("ceilings")
    done = {(r["D"], r["T"], r["method"], r["mode"]) for r in rows}
    if not args.warm_only and ceil is None:
        ceil = ceilings(gen)
        print("ceilings:", ceil, flush=True)

    def save():
        if args.warm_only:
            return
        write_result(args.out, dict(schema=SCHEMA, kernel_sources_sha256=path_lib.kernels.sources_sha256(),
                                    kernel_code_sha256=path_lib.kernels.code_sha256(), fla=fla_ver, dtype="bfloat16",
                                    tokens=32768, hidden=2048,
                                    do_bench=dict(warmup_ms=args.warmup, rep_ms=args.rep, stat="median"),
                                    ceilings=ceil, rows=rows), command=cmd)
    for D, T in shapes:
        if args.budget_s is not None and time.time() - t0 > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s reached: D={D}, T={T} and later shapes not measured", flush=True)
            break
        H, B = 2048 // D, max(1, 32768 // T)
        ins = make(B, T, H, D, gen)
        for name, fn in methods(fla_path, fla_fox, D).items():
            if args.methods and name not in args.methods.split(","):
                continue
            for mode in ("fwd", "fwdbwd"):
                if (D, T, name, mode) in done:
                    continue
                r = dict(D=D, H=H, T=T, B=B, method=name, mode=mode)
                try:
                    if args.warm_only:
                        bench_one(fn, ins, mode, 1, 1, warm_only=True)
                        continue
                    ms, peak = bench_one(fn, ins, mode, args.warmup, args.rep)
                    r.update(ms=round(ms, 4), peak_mib=round(peak, 1))
                    if name == "sdpa":
                        r["kernels"] = sdpa_kernels(ins, mode)
                        r["backend"] = backend_of(r["kernels"])
                    if name.startswith("ours"):
                        r["config"] = config_of(D, T, mode)
                except Exception as e:
                    traceback.print_exc()
                    r.update(ms=None, error=repr(e)[:300])
                if not args.warm_only:
                    rows.append(r)
                    print(r, flush=True)
                torch.cuda.empty_cache()
        del ins
        torch.cuda.empty_cache()
        save()
    save()
    if not args.warm_only:
        print("\n" + "\n".join(summary_lines(rows)))


if __name__ == "__main__":
    main()
