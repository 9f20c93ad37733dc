#!/usr/bin/env python3
"""PaTH's direction map ``w = L2norm(SiLU(causal depthwise conv(u)))``: the fused Triton pass against PyTorch.

    PYTHONPATH=. python3 benchmarks/bench_short_conv.py --out benchmarks/results/bench_short_conv.json   # one GPU

Both rows run PaTH's layer's own code, ``PaTHAttention._w_from_conv_input`` under bf16 autocast on a bf16
``u [B, T, C]``: ``pytorch`` is the layer with a PyTorch attention backend (``F.pad``, cuDNN's depthwise
``conv1d`` on a transposed copy, SiLU, a cast, ``F.normalize``), ``fused`` the layer with the Triton
backend (``path_lib.kernels.short_conv``). Forward (no gradient) and forward+backward, median of
``triton.testing.do_bench``; the floor is the bytes each must move (forward: u read, w written; backward:
u and dw read, du written) at the copy bandwidth measured in the same run. Each row's error is against
the float64 map on the same inputs (forward: max abs; gradients: max abs over max magnitude).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_path import ceilings  # noqa: E402
from path_lib.records import write_result  # noqa: E402
from path_lib.reference.short_conv import short_conv_normalize_torch  # noqa: E402
from path_lib.nn.layers import PaTHAttention  # noqa: E402

SHAPES = ((2, 4096, 768, 12), (8, 4096, 2048, 32))      # (B, T, C, H): the LM benchmark's layer; bench_path's grid


def layers(C, H):
    """Two PaTH layers with the same weights: PyTorch's convolution (blockwise backend) and the fused pass."""
    torch.manual_seed(0)
    pytorch = PaTHAttention(C, H, backend="blockwise").cuda()
    fused = PaTHAttention(C, H, backend="triton").cuda()
    fused.load_state_dict(pytorch.state_dict())
    return {"pytorch": pytorch, "fused": fused}


def errors(layer, u, dw):
    """Max errors of w, du and dweight against the float64 map."""
    u = u.detach().requires_grad_()
    weight = layer.w_conv.weight
    weight.grad = None
    with torch.autocast("cuda", torch.bfloat16):
        w = layer._w_from_conv_input(u, layer._plan(u), left_context=False)
    w.backward(dw)
    u64, wt64 = (x.detach().double().requires_grad_() for x in (u, weight))
    ref = short_conv_normalize_torch(u64, wt64, layer.n_kv_heads)
    ref.backward(dw.double())
    rel = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()  # noqa: E731
    return dict(w_max_abs=(w.double() - ref).abs().max().item(), du_rel=rel(u.grad, u64.grad),
                dweight_rel=rel(weight.grad, wt64.grad))


def timed(layer, u, dw, mode, warmup, rep):
    import triton
    leaf = u.detach().requires_grad_(mode == "fwdbwd")

    def run():
        with torch.autocast("cuda", torch.bfloat16), torch.set_grad_enabled(mode == "fwdbwd"):
            w = layer._w_from_conv_input(leaf, layer._plan(leaf), left_context=False)
        if mode == "fwdbwd":
            w.backward(dw)
    return triton.testing.do_bench(run, warmup=warmup, rep=rep, return_mode="median")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results/bench_short_conv.json")
    ap.add_argument("--warmup", type=int, default=25)
    ap.add_argument("--rep", type=int, default=200)
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    ceil = ceilings(gen)
    rows = []
    for B, T, C, H in SHAPES:
        u = torch.randn(B, T, C, device="cuda", generator=gen).bfloat16()
        dw = torch.randn(B, T, H, C // H, device="cuda", generator=gen)
        elems = B * T * C
        floor_bytes = {"fwd": elems * (2 + 4), "fwdbwd": elems * (2 + 4) + elems * (2 + 4 + 2)}
        for name, layer in layers(C, H).items():
            err = errors(layer, u, dw)
            for mode in ("fwd", "fwdbwd"):
                ms = timed(layer, u, dw, mode, args.warmup, args.rep)
                floor_ms = floor_bytes[mode] / (ceil["copy_gbs"] * 1e9) * 1e3
                rows.append(dict(B=B, T=T, C=C, H=H, method=name, mode=mode, ms=ms, floor_ms=floor_ms,
                                 x_floor=ms / floor_ms, **err))
                print(f"B={B} T={T} C={C} H={H} {name:8s} {mode:7s} {ms:.4f} ms  ({ms / floor_ms:.1f}x floor)  "
                      f"w err {err['w_max_abs']:.1e}  du {err['du_rel']:.1e}  dweight {err['dweight_rel']:.1e}",
                      flush=True)
    write_result(args.out, dict(dtype="bfloat16 u, bf16 autocast", ceilings=ceil, shapes=[list(s) for s in SHAPES],
                                do_bench=dict(warmup_ms=args.warmup, rep_ms=args.rep, stat="median"), rows=rows),
                 command=" ".join(["python3"] + sys.argv))


if __name__ == "__main__":
    main()
