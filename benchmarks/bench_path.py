"""Speed and peak memory of PaTH attention kernels on the GPU.

B*T = 32768 tokens, H*D = 2048, D in {64, 128}, T in {1024, 2048, 4096, 8192, 16384}; bf16 q, k, v;
float32 w, beta, g. Forward and forward+backward; median of ``triton.testing.do_bench``.

Methods:
* ``sdpa``: PyTorch scaled_dot_product_attention, flash backend, causal (no position encoding);
* ``ours_path`` / ``ours_pathfox``: ``kernels.path_attention`` without / with the gate;
* ``fla_path`` / ``fla_pathfox``: fla-core 0.6.0 ``fla.ops.path_attn.parallel_path_attn`` (gate passed as
  g / scale, since fla scales the gate);
* ``fla_fox``: ``fla.ops.forgetting_attn.parallel_forgetting_attn`` (FoX, no Householder transforms).
fla is recorded as "not available" when it cannot be imported.

    PYTHONPATH=. python3 benchmarks/bench_path.py [--out benchmarks/results/bench_path.json] [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kernels  # noqa: E402
from path_lib.provenance import write_result  # noqa: E402


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


def methods(fla_path, fla_fox, D):
    scale = D ** -0.5
    m = {
        "sdpa": lambda q, k, v, w, b, g: _sdpa(q, k, v),
        "ours_path": lambda q, k, v, w, b, g: kernels.path_attention(q, k, v, w, b, None, check_values=False),
        "ours_pathfox": lambda q, k, v, w, b, g: kernels.path_attention(q, k, v, w, b, g, check_values=False),
    }
    if fla_path is not None:
        m["fla_path"] = lambda q, k, v, w, b, g: fla_path(q, k, v, w, b, None, scale=scale)[0]
        m["fla_pathfox"] = lambda q, k, v, w, b, g: fla_path(q, k, v, w, b, g / scale, scale=scale)[0]
        m["fla_fox"] = lambda q, k, v, w, b, g: fla_fox(q, k, v, g, scale=scale)
    return m


def _sdpa(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return o.transpose(1, 2)


def bench_one(fn, ins, mode, warmup, rep):
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
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    ms = triton.testing.do_bench(run, warmup=warmup, rep=rep, return_mode="median")
    return ms, peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/bench_path.json")
    ap.add_argument("--quick", action="store_true", help="T in {1024, 4096} only")
    ap.add_argument("--Ts", default=None)
    ap.add_argument("--Ds", default="64,128")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rep", type=int, default=40)
    args = ap.parse_args()
    fla_path, fla_fox, fla_ver = fla_ops()
    Ts = [1024, 4096] if args.quick else [1024, 2048, 4096, 8192, 16384]
    if args.Ts:
        Ts = [int(x) for x in args.Ts.split(",")]
    gen = torch.Generator(device="cuda").manual_seed(int.from_bytes(os.urandom(4), "little"))
    rows = []
    cmd = "PYTHONPATH=. python3 " + " ".join(sys.argv)

    def save():
        write_result(args.out, dict(fla=fla_ver, dtype="bfloat16", tokens=32768, hidden=2048,
                                    do_bench=dict(warmup_ms=args.warmup, rep_ms=args.rep, stat="median"),
                                    rows=rows), command=cmd)
    for D in [int(x) for x in args.Ds.split(",")]:
        H = 2048 // D
        for T in Ts:
            B = 32768 // T
            ins = make(B, T, H, D, gen)
            for name, fn in methods(fla_path, fla_fox, D).items():
                for mode in ("fwd", "fwdbwd"):
                    try:
                        ms, peak = bench_one(fn, ins, mode, args.warmup, args.rep)
                        r = dict(D=D, H=H, T=T, B=B, method=name, mode=mode, ms=round(ms, 4), peak_mib=round(peak, 1))
                    except Exception as e:
                        traceback.print_exc()
                        r = dict(D=D, H=H, T=T, B=B, method=name, mode=mode, ms=None, error=repr(e)[:300])
                    rows.append(r)
                    print(r, flush=True)
                    torch.cuda.empty_cache()
            save()
    # summary table: ratios to SDPA and to fla
    def get(D, T, m, mode):
        for r in rows:
            if (r["D"], r["T"], r["method"], r["mode"]) == (D, T, m, mode):
                return r.get("ms")
    print("\n| D | T | mode | SDPA | ours PaTH (x SDPA, x fla) | ours PaTH-FoX (x SDPA, x fla) | fla PaTH | fla PaTH-FoX | fla FoX |")
    print("|---|---|---|---|---|---|---|---|---|")
    for D in [int(x) for x in args.Ds.split(",")]:
        for T in Ts:
            for mode in ("fwd", "fwdbwd"):
                s = get(D, T, "sdpa", mode)
                o1, o2 = get(D, T, "ours_path", mode), get(D, T, "ours_pathfox", mode)
                f1, f2, f3 = get(D, T, "fla_path", mode), get(D, T, "fla_pathfox", mode), get(D, T, "fla_fox", mode)

                def cell(o, f):
                    if o is None:
                        return "-"
                    out = f"{o:.2f}"
                    if s:
                        out += f" ({o / s:.2f}x"
                        out += f", {o / f:.2f}x)" if f else ")"
                    return out
                fmt = lambda x: f"{x:.2f}" if x else "-"  # noqa: E731
                print(f"| {D} | {T} | {mode} | {fmt(s)} | {cell(o1, f1)} | {cell(o2, f2)} | {fmt(f1)} | {fmt(f2)} | {fmt(f3)} |")
    save()


if __name__ == "__main__":
    main()
