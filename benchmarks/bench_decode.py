#!/usr/bin/env python3
"""Decode-step speed of the Triton PaTH cache (kernels/path_lib/kernels/decode.py) against SDPA's single-query attention
over a cache of the same length and against the PyTorch cache, and the key store's precision.

    PYTHONPATH=. python3 benchmarks/bench_decode.py --tune --out benchmarks/results/bench_decode.json   # one GPU

``--tune`` first times every :class:`path_lib.kernels.decode.DecodeConfig` of a small grid at two shapes (batch 1
at 32K, batch 32 at 16K), keeps the one with the lowest geometric mean of its ratios to SDPA and runs
the grid with it (the record's ``config``; ``path_lib.kernels.decode.DEFAULT_CONFIG`` should be set to it, and
a test checks that it is). The record is rewritten after every row (``complete`` false until the end).

Rows (bf16 q, k, v; w, beta float32; ``heads`` query and key heads of ``head_dim``):

* ``triton``: ``TritonPaTHCache.step`` (append, move the query back across the pending transforms,
  attend over the stored keys; fp32 key store, bf16 values), per step over ``flush_every`` steps plus
  the one flush they need (its cost spread over them). The cache is rewound after each timed period,
  so the length stays at ``length``.
* ``sdpa``: ``F.scaled_dot_product_attention`` of one query over bf16 keys and values ``[B, H, length,
  D]`` with PyTorch's default dispatch (the backend read off the kernels it launched); the cache append
  is not counted, in SDPA's favour.
* ``pytorch``: ``path_lib.decoding.PaTHCache.step`` (float32, keys rewritten at every step).

``floor_ratio`` is the ratio of the bytes a step must move (ours: fp32 keys read, bf16 values read, fp32
keys read and written once per ``flush_every`` steps; SDPA: bf16 keys and values read).
``precision``: 32,768 steps of reflections (beta = 2: they keep every norm, so rounding errors in the
store never decay, the worst case) with a float64 PyTorch cache as ground truth; relative errors of the
keys and of the output at checkpoints, for an fp32 and a bf16 key store.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_path import backend_of  # noqa: E402
from path_lib.kernels.decode import DEFAULT_CONFIG, DecodeConfig, TritonPaTHCache  # noqa: E402
from path_lib.decoding import PaTHCache  # noqa: E402
from path_lib.records import write_result  # noqa: E402


def _events_ms(fn, reps: int) -> float:
    """Median over ``reps`` of one call of ``fn`` (which may itself loop), in ms, CUDA events."""
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def _tokens(n, B, H, D, gen):
    r = lambda *s: torch.randn(*s, generator=gen, device="cuda")           # noqa: E731
    return [(r(B, H, D).bfloat16(), r(B, H, D).bfloat16(), r(B, H, D).bfloat16(), F.normalize(r(B, H, D), dim=-1),
             2 * torch.rand(B, H, generator=gen, device="cuda")) for _ in range(n)]


def time_triton(B, H, D, L, gen, flush_every=64, reps=5, config=DEFAULT_CONFIG):
    keys = torch.randn(B, L, H, D, generator=gen, device="cuda").bfloat16()
    cache = TritonPaTHCache.from_prefix(keys, keys.clone(), n_q_heads=H, flush_every=flush_every,
                                        capacity=L + 2 * flush_every, config=config)
    toks = _tokens(flush_every, B, H, D, gen)

    def period():
        cache._n_old, cache._n_pend = L, 0                  # rewind: the length stays L
        for t in toks:
            cache.step(*t, check_values=False)            # as the layers call it (no sync)
        cache.flush()
    period()                                                # compile
    ms = _events_ms(period, reps) / flush_every
    return ms, cache.last_splits, _host_ms(period) / flush_every


def _host_ms(fn) -> float:
    """CPU time to enqueue ``fn``'s work (the GPU is idle at the start): what a step costs the host."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    host = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    return host


def time_sdpa(B, H, D, L, gen, reps=50):
    q = torch.randn(B, H, 1, D, generator=gen, device="cuda").bfloat16()
    k = torch.randn(B, H, L, D, generator=gen, device="cuda").bfloat16()
    v = torch.randn_like(k)
    call = lambda: F.scaled_dot_product_attention(q, k, v)    # noqa: E731
    call()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    names = sorted({ev.key[:120] for ev in prof.key_averages() if (getattr(ev, "self_device_time_total", 0) or 0) > 0})

    def many():
        for _ in range(20):
            call()
    return _events_ms(many, reps // 10 + 3) / 20, backend_of(names), names, _host_ms(many) / 20


def time_pytorch(B, H, D, L, gen, steps=8, reps=3):
    keys = torch.randn(B, L, H, D, generator=gen, device="cuda")
    cache = PaTHCache._from_prefix(keys, keys.clone(), None, H, dtype=torch.float32)
    cache._reserve(L + steps)
    toks = [tuple(x.float() for x in t) for t in _tokens(steps, B, H, D, gen)]

    def run():
        cache._len = L
        for t in toks:
            cache.step(*t, check_values=False)
    run()
    return _events_ms(run, reps) / steps


def precision(steps=32768, D=64, H=2, checkpoints=(1024, 4096, 16384, 32768), seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    ref = PaTHCache(1, H, H, D, dtype=torch.float64, device="cuda", capacity=steps)
    stores = {"fp32 store, flush every 64": TritonPaTHCache(1, H, H, D, value_dtype=torch.float32, capacity=steps,
                                                              flush_every=64),
              "bf16 store, flush every 64": TritonPaTHCache(1, H, H, D, value_dtype=torch.float32, capacity=steps,
                                                              key_dtype=torch.bfloat16, flush_every=64),
              "bf16 store, rewritten every step": TritonPaTHCache(1, H, H, D, value_dtype=torch.float32,
                                                                  capacity=steps, key_dtype=torch.bfloat16,
                                                                  flush_every=1)}
    beta = torch.full((1, H), 2.0, device="cuda")
    out = {name: [] for name in stores}
    for t in range(1, steps + 1):
        q, k, v = (torch.randn(1, H, D, generator=gen, device="cuda") for _ in range(3))
        w = F.normalize(torch.randn(1, H, D, generator=gen, device="cuda"), dim=-1)
        o_ref = ref.step(q.double(), k.double(), v.double(), w.double(), beta.double(), check_values=False)
        for name, c in stores.items():
            o = c.step(q, k, v, w, beta, check_values=False)
            if t in checkpoints:
                kr, kc = ref.keys, c.keys.double()
                rel = ((kc - kr).norm(dim=-1) / kr.norm(dim=-1)).flatten()
                out[name].append({"steps": t, "key_rel_err_median": float(rel.median()),
                                  "key_rel_err_max": float(rel.max()),
                                  "out_rel_err": float((o.double() - o_ref).norm() / o_ref.norm())})
    return {"steps": steps, "head_dim": D, "heads": H, "beta": 2.0, "rows": out}


TUNE_GRID = [DecodeConfig(tile=t, num_stages=s, programs_per_sm=p, num_warps=w)
             for t in (4096, 8192, 16384) for s in (1, 3) for p in (4, 16) for w in (4, 8)]
TUNE_SHAPES = ((1, 32768), (32, 16384))


def tune(H, D, gen):
    """Every config of TUNE_GRID at TUNE_SHAPES: rows and the config with the lowest geometric mean ratio."""
    sdpa = {shape: time_sdpa(shape[0], H, D, shape[1], gen)[0] for shape in TUNE_SHAPES}
    rows, best = [], None
    for cfg in TUNE_GRID:
        ratios = []
        for B, L in TUNE_SHAPES:
            ms, splits, _ = time_triton(B, H, D, L, gen, config=cfg, reps=3)
            ratios.append(ms / sdpa[(B, L)])
            rows.append({"config": dataclasses.asdict(cfg), "batch": B, "length": L, "triton_ms": ms,
                         "sdpa_ms": sdpa[(B, L)], "ratio_to_sdpa": ms / sdpa[(B, L)], "splits": splits})
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"tune {cfg}: ratios {[round(r, 2) for r in ratios]}, geometric mean {gm:.2f}", flush=True)
        if best is None or gm < best[0]:
            best = (gm, cfg)
        torch.cuda.empty_cache()
    return rows, best[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lengths", default="1024,4096,16384,32768,65536")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--no-precision", action="store_true")
    ap.add_argument("--tune", action="store_true", help="pick the DecodeConfig first (see above)")
    args = ap.parse_args(argv)
    gen = torch.Generator(device="cuda").manual_seed(0)
    H, D, M = args.heads, args.head_dim, 64
    cmd = "python benchmarks/bench_decode.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = []
    data = {"rows": rows, "complete": False, "config": dataclasses.asdict(DEFAULT_CONFIG), "tuned": args.tune}
    config = DEFAULT_CONFIG
    if args.tune:
        data["tune_rows"], config = tune(H, D, gen)
        data["config"] = dataclasses.asdict(config)
        print("chosen:", config, flush=True)
        write_result(args.out, data, command=cmd)
    for B in map(int, args.batches.split(",")):
        for L in map(int, args.lengths.split(",")):
            t0 = time.time()
            ours, splits, ours_host = time_triton(B, H, D, L, gen, M, config=config)
            sdpa, backend, names, sdpa_host = time_sdpa(B, H, D, L, gen)
            torch_ms = time_pytorch(B, H, D, L, gen)
            floor = (4 * D + 2 * D + 8 * D / M) / (4 * D)
            rows.append({"batch": B, "length": L, "heads": H, "head_dim": D, "flush_every": M,
                         "triton_ms": ours, "sdpa_ms": sdpa, "pytorch_ms": torch_ms, "sdpa_backend": backend,
                         "sdpa_kernels": names, "ratio_to_sdpa": ours / sdpa, "pytorch_ratio_to_sdpa": torch_ms / sdpa,
                         "floor_ratio": floor, "triton_splits": splits, "triton_host_ms": ours_host,
                         "sdpa_host_ms": sdpa_host})
            print(f"B={B:3d} L={L:6d}: triton {ours * 1e3:8.1f} us, sdpa ({backend}) {sdpa * 1e3:8.1f} us, "
                  f"ratio {ours / sdpa:5.2f} (floor {floor:.2f}), host {ours_host * 1e3:.0f} / {sdpa_host * 1e3:.0f} us, "
                  f"pytorch {torch_ms * 1e3:9.1f} us "
                  f"[{time.time() - t0:.1f} s]", flush=True)
            torch.cuda.empty_cache()
            write_result(args.out, data, command=cmd)
    if not args.no_precision:
        t0 = time.time()
        data["precision"] = precision()
        for name, pts in data["precision"]["rows"].items():
            print(name, [(p["steps"], f"{p['key_rel_err_median']:.2e}", f"{p['out_rel_err']:.2e}") for p in pts])
        print(f"precision: {time.time() - t0:.1f} s")
    data["complete"] = True
    write_result(args.out, data, command=cmd)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
