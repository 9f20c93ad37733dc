#!/usr/bin/env python3
"""What a user pays end to end: training tokens per second of one LM with PaTH, PaTH-FoX and RoPE layers.

    PYTHONPATH=. python3 benchmarks/bench_lm_throughput.py --out benchmarks/results/bench_lm_throughput.json   # one GPU
    PYTHONPATH=. python3 benchmarks/bench_lm_throughput.py --tiny --device cpu --out /tmp/t.json               # smoke test

Each model is ``TinyLM(vocab, d_model, n_layers, n_heads, attention=...)`` (default 8192 x 768 x 12 layers,
12 heads of 64), trained on random token ids of ``batch x length`` (default 2 x 4096) for a few steps:
forward, backward and a fused AdamW step under bf16 autocast on a GPU (float32 on a CPU). The time of a
step is the median of ``--steps`` after ``--warmup`` (wall time between synchronisations; the models'
steps interleaved, so a drift in the host's speed reaches them alike). RoPE runs on
PyTorch's default ``scaled_dot_product_attention`` (the baselines' ``backend="auto"`` on CUDA; the SDPA
backend it dispatched to is read off the kernels it launched and recorded), PaTH and PaTH-FoX on the
Triton kernels (``backend="triton"``; ``"blockwise"`` on a CPU). The record gives tokens per second and
each model's ratio to RoPE's, with the memory a step adds. With ``--profile`` one more step of each
model runs under ``torch.profiler``: the GPU time of that step by kind of kernel (the PaTH kernels,
attention, matrix products, convolution, optimizer, everything else), the largest kernels, and the
fraction of the step the GPU was busy (well below 1: the host, not the GPU, sets the pace). With
``--host-profile`` three more steps run under ``cProfile``: the Python functions with the most host time.
With ``--modes eager,graph`` the whole step (forward, backward, a capturable fused AdamW step) is also captured
once in a CUDA graph and replayed: the host's Python and launch costs drop out, what remains is the GPU's work.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from path_lib.records import write_result  # noqa: E402
from path_lib.nn.model import TinyLM  # noqa: E402

MODELS = ("rope", "path", "path_fox")
PATH_KERNEL_NAMES = ("_delta_kernel", "_fwd_kernel", "_fwd_inter_kernel", "_bwd_inter_q_kernel",
                     "_bwd_inter_kv_kernel", "_bwd_intra_kernel", "_bwd_diag_kernel", "_ut_a_kernel", "_ut_kernel",
                     "_prep_kernel", "_bwd_block_kernel", "_seg_fwd_kernel", "_seg_bwd_kernel", "_seg_grad_kernel", "_pair_kernel")
_KINDS = (("attention (SDPA)", ("flash", "fmha", "cudnn", "attention")),
          ("matrix products", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul")),
          ("convolution", ("conv",)),
          ("optimizer", ("adam", "multi_tensor")))


def kernel_kind(name: str) -> str:
    """The kind of a CUDA kernel, from its name (for a step's profile)."""
    if name.split("(")[0].strip() in PATH_KERNEL_NAMES:
        return "PaTH kernels"
    low = name.lower()
    for kind, keys in _KINDS:
        if any(k in low for k in keys):
            return kind
    return "other (elementwise, reductions, copies)"


def host_profile(step, device, steps: int = 3, top: int = 25) -> list:
    """The ``top`` Python functions by own host time over ``steps`` calls of ``step`` (cProfile; its
    own overhead inflates every entry, so read the ranking, not the absolute times)."""
    import cProfile
    import pstats
    _sync(device)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    _sync(device)
    prof.disable()
    stats = pstats.Stats(prof).stats
    rows = [{"function": f"{Path(f).name}:{line}:{fn}", "calls": nc // steps, "own_ms": tt / steps * 1e3,
             "cumulative_ms": ct / steps * 1e3} for (f, line, fn), (_, nc, tt, ct, _) in stats.items()]
    return sorted(rows, key=lambda r: -r["own_ms"])[:top]


def profile_step(step, device, top: int = 12) -> dict:
    """GPU milliseconds of one call of ``step`` by kind of kernel, its ``top`` largest kernels, and the
    fraction of the step's wall time the GPU spent in kernels."""
    from torch.profiler import ProfilerActivity, profile
    _sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        step()
        _sync(device)
        wall = time.perf_counter() - t0
    kernels = [(ev.key, ev.self_device_time_total / 1e3, ev.count) for ev in prof.key_averages()
               if ev.device_type == torch.autograd.DeviceType.CUDA and (ev.self_device_time_total or 0) > 0]
    by_kind = {}
    for name, ms, _ in kernels:
        by_kind[kernel_kind(name)] = by_kind.get(kernel_kind(name), 0.0) + ms
    busy = sum(ms for _, ms, _ in kernels)
    kernels.sort(key=lambda r: -r[1])
    return {"wall_ms_profiled": wall * 1e3, "gpu_ms": busy, "gpu_busy_fraction": busy / (wall * 1e3),
            "gpu_ms_by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
            "top_kernels": [{"name": n[:120], "ms": ms, "calls": c} for n, ms, c in kernels[:top]]}


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def capture(step, opt, warmup: int = 3):
    """``step`` (forward, backward, optimizer step) captured in a CUDA graph after ``warmup`` eager calls on a
    side stream (the optimizer's state and the gradients' memory exist by then); returns the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            opt.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()                                   # the gradients are written, not accumulated, at each replay

    def replay():
        g.replay()
    replay.captured = step
    return replay


def make_step(attention: str, args, device, graph: bool):
    """One fresh model's training step (forward, backward, fused AdamW) on fixed random tokens; with
    ``graph`` captured in a CUDA graph and returned as its replay. Returns ``(step, backend)``."""
    kw = {} if attention == "rope" else {"backend": "triton" if device.type == "cuda" else "blockwise"}
    torch.manual_seed(0)
    model = TinyLM(args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                   attention=attention, **kw).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda", capturable=graph)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randint(0, args.vocab, (args.batch, args.length), generator=gen, device=device)
    y = torch.randint(0, args.vocab, (args.batch, args.length), generator=gen, device=device)
    # a graph replays the casts it captured: autocast must not cache them across steps
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not graph) if device.type == "cuda" \
        else torch.autocast("cpu", enabled=False)

    def step():
        with autocast:
            loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        if not graph:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return (capture(step, opt) if graph else step), kw.get("backend", "sdpa (auto)")


def time_models(names, args, device, graph: bool) -> list:
    """Median seconds per step of each model, the models' steps interleaved (round ``i`` times one step of
    every model, so a drift in the host's speed during the run reaches every model alike), with tokens
    per second and the memory one step adds to what is allocated before it."""
    steps = {a: make_step(a, args, device, graph) for a in names}
    times = {a: [] for a in names}
    for i in range(args.warmup + args.steps):
        for a, (step, _) in steps.items():
            _sync(device)
            t0 = time.perf_counter()
            step()
            _sync(device)
            if i >= args.warmup:
                times[a].append(time.perf_counter() - t0)
    rows = []
    for a, (step, backend) in steps.items():
        sec = sorted(times[a])[len(times[a]) // 2]
        row = {"attention": a, "backend": backend, "cuda_graph": graph, "seconds_per_step": sec,
               "tokens_per_second": args.batch * args.length / sec, "steps_timed": len(times[a])}
        if device.type == "cuda" and not graph:      # a graph's memory is its pool, held from the capture on
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            step()
            _sync(device)
            row["step_peak_mib"] = (torch.cuda.max_memory_allocated(device) - before) / 2**20
        if args.profile and device.type == "cuda" and not graph:
            row["profile"] = profile_step(step, device)
        if args.host_profile and not graph:
            row["host_profile"] = host_profile(step, device)
        rows.append(row)
    rope = rows[0]["tokens_per_second"]
    for r in rows:
        r["ratio_to_rope"] = r["tokens_per_second"] / rope
    return rows


def sdpa_backend(args, device) -> str:
    """The SDPA backend RoPE's attention dispatched to (from the CUDA kernels of one forward)."""
    if device.type != "cuda":
        return "cpu"
    from bench_path import backend_of
    from torch.profiler import ProfilerActivity, profile
    q = torch.randn(args.batch, args.heads, args.length, args.d_model // args.heads, device=device).bfloat16()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
        torch.cuda.synchronize()
    return backend_of([ev.key for ev in prof.key_averages() if (getattr(ev, "self_device_time_total", 0) or 0) > 0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke test on a CPU)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="profile one more step of each model (GPU)")
    ap.add_argument("--modes", default="eager", help="comma list of eager, graph (each step captured in a CUDA graph)")
    ap.add_argument("--host-profile", action="store_true", help="cProfile three more steps of each model")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list, 'rope' first (default {','.join(MODELS)})")
    args = ap.parse_args(argv)
    if args.tiny:
        args.vocab, args.d_model, args.layers, args.heads, args.batch, args.length = 64, 32, 2, 2, 2, 16
        args.steps, args.warmup = 2, 1
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: pass --device cpu (with --tiny for a smoke test)")
        return 2
    models = args.models.split(",")
    if models[0] != "rope" or any(m not in MODELS for m in models):
        ap.error(f"--models must start with rope and name models of {MODELS}, got {args.models}")
    modes = args.modes.split(",")
    if any(m not in ("eager", "graph") for m in modes) or ("graph" in modes and device.type != "cuda"):
        ap.error(f"--modes must be a comma list of eager and graph (graph on a GPU only), got {args.modes}")
    rows = []
    for mode in modes:
        rows += time_models(models, args, device, graph=mode == "graph")
    for r in rows:
        print(f"{r['attention']:>9} ({r['backend']}, {'CUDA graph' if r['cuda_graph'] else 'eager'}): "
              f"{r['tokens_per_second']:,.0f} tokens/s, {r['ratio_to_rope']:.2f}x RoPE", flush=True)
        if "profile" in r:
            pr = r["profile"]
            print(f"   GPU {pr['gpu_ms']:.1f} ms of a {pr['wall_ms_profiled']:.1f} ms step:",
                  ", ".join(f"{k} {v:.1f}" for k, v in pr["gpu_ms_by_kind"].items()), flush=True)
    config = {k: getattr(args, k) for k in ("vocab", "d_model", "layers", "heads", "batch", "length", "steps", "warmup", "modes")}
    cmd = "python benchmarks/bench_lm_throughput.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_result(args.out, {"config": config, "rows": rows, "rope_sdpa_backend": sdpa_backend(args, device),
                            "dtype": "bfloat16 autocast" if device.type == "cuda" else "float32"}, command=cmd)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
