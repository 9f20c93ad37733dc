"""GPU check of context-parallel PaTH attention (path_lib.distributed) in one process, against the kernels.

    PYTHONPATH=. python3 benchmarks/cp_single_gpu.py [--backend nccl|gloo] [--out benchmarks/results/cp_single_gpu.json]

A process group of world size 1 (NCCL by default) is set up on this machine; then for bf16 and float32,
with and without the gate, grouped-query heads, and a length that is not a multiple of the block:

* ``context_parallel_path_attention`` (world size 1, the cross-rank checks included) with each local
  implementation (``impl="blockwise"``: the PyTorch scan; ``impl="triton"``: the kernels for the chunk's
  own keys), ``chunked_path_attention`` with 2 and 4 chunks and each implementation (every rank's
  computation of a 2- and a 4-rank run, side by side on this GPU: with ``triton`` the earlier chunks'
  part in PyTorch merged with the kernels' by log-sum-exp, forward and backward) and the Triton kernels
  (``path_lib.kernels.path_attention``) alone, outputs and the six gradients, each against
  ``path_attention(impl="blockwise")`` in float64 fed the same rounded inputs (error ``||x - ref|| / ||ref||``);
  the blockwise forms are left out of the long case (``LONG``), whose time they would dominate;
* the autograd all-gather on this group (forward a copy, backward the reduce-scatter / all-reduce);
* forward + backward times (CUDA events, median of 5) of the context-parallel call with the kernels,
  of the 4-chunk kernel path and of the kernels alone (and of the blockwise call on the short cases).

Writes a JSON record with provenance and exits 1 if any error is above its dtype's tolerance. Without a
CUDA device it exits with status 2 and one line saying so, before touching anything.
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
NAMES = ["o", "dq", "dk", "dv", "dw", "dbeta", "dg"]
CASES = [
    ("gqa_gate_T1000_D64", dict(B=2, T=1000, Hq=8, Hk=2, D=64, gate=True)),
    ("no_gate_T2048_D64", dict(B=1, T=2048, Hq=4, Hk=4, D=64, gate=False)),
    ("gate_T1024_D128", dict(B=1, T=1024, Hq=4, Hk=2, D=128, gate=True)),
    ("gate_T16384_D64", dict(B=1, T=16384, Hq=8, Hk=8, D=64, gate=True)),
]
#: cases where only the kernel forms run (the blockwise scan's Python loop over block pairs is too slow)
LONG = {"gate_T16384_D64"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/results/cp_single_gpu.json")
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    ap.add_argument("--seed", type=int, default=None, help="default: fresh random")
    return ap.parse_args(argv)


def inputs(B, T, Hq, Hk, D, gate, dtype, gen, dev="cuda"):
    q = torch.randn(B, T, Hq, D, generator=gen, device=dev).to(dtype)
    k = torch.randn(B, T, Hk, D, generator=gen, device=dev).to(dtype)
    v = torch.randn(B, T, Hk, D, generator=gen, device=dev).to(dtype)
    w = F.normalize(torch.randn(B, T, Hk, D, generator=gen, device=dev), dim=-1)
    beta = 2 * torch.rand(B, T, Hk, generator=gen, device=dev)
    beta.view(-1)[::7] = 1.99
    g = F.logsigmoid(torch.randn(B, T, Hq, generator=gen, device=dev) + 3.0) if gate else None
    return [q, k, v, w, beta, g]


def grads_of(fn, xs, do):
    leaves = [None if x is None else x.detach().clone().requires_grad_(True) for x in xs]
    o = fn(*leaves)
    o.backward(do)
    return [o.detach()] + [None if x is None else x.grad for x in leaves]


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def time_ms(fn, xs, do, reps=5):
    out = []
    for _ in range(reps + 1):
        leaves = [None if x is None else x.detach().clone().requires_grad_(True) for x in xs]
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*leaves).backward(do)
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out[1:])


def check_case(name, spec, dtype, gen, device="cuda", timing=True):
    import path_lib.kernels as kernels
    from path_lib.impl import path_attention
    from path_lib.distributed import chunked_path_attention, context_parallel_path_attention
    xs = inputs(**spec, dtype=dtype, gen=gen, dev=device)
    do = torch.randn(*xs[0].shape, generator=gen, device=device).to(dtype)
    ref = grads_of(lambda *a: path_attention(*a, impl="blockwise"),            # float64 leaves: float64 grads
                   [None if x is None else x.double() for x in xs], do.double())
    methods = {
        "context_parallel": lambda *a: context_parallel_path_attention(*a, impl="blockwise"),
        "context_parallel_kernels": lambda *a: context_parallel_path_attention(*a, impl="triton"),
        "chunked_2": lambda *a: chunked_path_attention(*a, n_chunks=2),
        "chunked_4": lambda *a: chunked_path_attention(*a, n_chunks=4),
        "chunked_2_kernels": lambda *a: chunked_path_attention(*a, n_chunks=2, impl="triton"),
        "chunked_4_kernels": lambda *a: chunked_path_attention(*a, n_chunks=4, impl="triton"),
        "kernels": lambda *a: kernels.path_attention(*a),
    }
    if name in LONG:
        methods = {m: fn for m, fn in methods.items() if m.endswith("kernels")}
    rec = {"name": f"{name}_{str(dtype)[6:]}", "dtype": str(dtype)[6:], **spec, "errors": {}, "ms_fwd_bwd": {}}
    for mname, fn in methods.items():
        if mname.startswith("chunked") and spec["T"] % int(mname.split("_")[1]):
            continue
        got = grads_of(fn, xs, do)
        rec["errors"][mname] = {n: rel(a, b) for n, a, b in zip(NAMES, got, ref) if b is not None}
        del got
    for mname in ("context_parallel", "context_parallel_kernels", "chunked_4_kernels", "kernels") if timing else ():
        if mname in rec["errors"]:
            rec["ms_fwd_bwd"][mname] = time_ms(methods[mname], xs, do)
    rec["ok"] = all(e <= TOL[dtype] for errs in rec["errors"].values() for e in errs.values())
    return rec


def collective_case():
    """The autograd all-gather on this group: forward a copy, backward the gradient itself (world size 1)."""
    import torch.distributed as dist
    from path_lib.distributed import _AllGather
    x = torch.randn(1000, device="cuda", requires_grad=True)
    rows = _AllGather.apply(x, None, dist.get_world_size(), dist.get_rank())
    gy = torch.randn_like(rows)
    rows.backward(gy)
    err = max(float((rows[0] - x).abs().max()), float((x.grad - gy[0]).abs().max()))
    return {"name": "all_gather_autograd", "backend": str(dist.get_backend()), "error": err, "ok": err == 0.0}


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("cp_single_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False); nothing was run or written",
              file=sys.stderr)
        return 2
    import torch.distributed as dist
    import path_lib.kernels as kernels
    from path_lib.records import write_result
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            timeout=datetime.timedelta(minutes=5))
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    results = []
    try:
        results.append(collective_case())
        for dtype in (torch.bfloat16, torch.float32):
            for name, spec in CASES:
                try:
                    r = check_case(name, spec, dtype, gen)
                except Exception as e:                      # noqa: BLE001  recorded, the rest still runs
                    r = {"name": f"{name}_{str(dtype)[6:]}", "ok": False, "error": f"{type(e).__name__}: {e}"}
                results.append(r)
                worst = max((e for errs in r.get("errors", {}).values() for e in errs.values()), default=float("nan"))
                print(f"{r['name']}: {'ok' if r['ok'] else 'FAIL'} (worst error {worst:.2e}; "
                      f"ms fwd+bwd {r.get('ms_fwd_bwd')})", flush=True)
    finally:
        dist.destroy_process_group()
    n_ok = sum(r["ok"] for r in results)
    write_result(args.out, dict(seed=seed, backend=args.backend, world_size=1,
                                tolerances={str(k)[6:]: v for k, v in TOL.items()},
                                gpu_verified_kernels=bool(getattr(kernels, "GPU_VERIFIED", False)),
                                cases=results, passed=n_ok, total=len(results)),
                 command="PYTHONPATH=. python3 benchmarks/cp_single_gpu.py " + " ".join(sys.argv[1:]))
    print(f"{n_ok} of {len(results)} cases passed; wrote {args.out}")
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
