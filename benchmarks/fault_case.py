"""One PaTH kernel call (forward + backward, no reference) for a memory checker, e.g.

    compute-sanitizer --tool memcheck python3 benchmarks/fault_case.py --D 32 --dtype bfloat16

Defaults: the correctness sweep's first case (B=2, T=333, Hq=4, Hk=2, D=32, bf16, gate on).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import path_lib.kernels  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    for n, d in (("B", 2), ("T", 333), ("Hq", 4), ("Hk", 2), ("D", 32)):
        ap.add_argument(f"--{n}", type=int, default=d)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--no-gate", action="store_true")
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    dev = "cuda"
    q = torch.randn(a.B, a.T, a.Hq, a.D, generator=gen, device=dev).to(dt).requires_grad_()
    k = torch.randn(a.B, a.T, a.Hk, a.D, generator=gen, device=dev).to(dt).requires_grad_()
    v = torch.randn(a.B, a.T, a.Hk, a.D, generator=gen, device=dev).to(dt).requires_grad_()
    w = F.normalize(torch.randn(a.B, a.T, a.Hk, a.D, generator=gen, device=dev), dim=-1).requires_grad_()
    beta = (2 * torch.rand(a.B, a.T, a.Hk, generator=gen, device=dev)).requires_grad_()
    g = None if a.no_gate else F.logsigmoid(torch.randn(a.B, a.T, a.Hq, generator=gen, device=dev) + 3).requires_grad_()
    o = path_lib.kernels.path_attention(q, k, v, w, beta, g)
    o.backward(torch.randn_like(o))
    torch.cuda.synchronize()
    print("fault_case: completed without a CUDA error", flush=True)


if __name__ == "__main__":
    main()
