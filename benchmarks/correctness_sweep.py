"""GPU correctness sweep of the Triton PaTH kernels against float64 references.

Every coverage point: dtypes fp32 / fp16 / bf16, head dims 32 / 64 / 128, ragged T, grouped-query
heads, cu_seqlens, gate on/off, several segments (forced small segments too), beta spread over [0, 2]
with values near 2 (1.99) and exact 0 / 1 / 2, and the long shape B=4, T=16384, H=24, D=64 (forward;
checked on 64-query slices of every batch element at the first and last head against a float64
sequential sweep, which exercises the int64 offsets).

Reference: ``path_lib.reference.attention.path_attention(..., impl="parallel")`` in float64 on the GPU, fed the
same (dtype-rounded) inputs. Error: ||out - ref|| / ||ref|| per tensor. Fresh random inputs every run;
the caching allocator is poisoned with NaN before each kernel call so unwritten outputs show up.

    PYTHONPATH=. python3 benchmarks/correctness_sweep.py [--out benchmarks/results/correctness_sweep.json]

A CUDA fault (illegal memory access) poisons the process's CUDA context, so every later case would fail
too: after one, the case is recorded with its error and the script exits with status 3;
``--resume`` (run_device.sh loops on status 3) starts a fresh process that skips the cases already in
``--out``. ``PATH_KERNELS_SYNC=1`` (set by run_device.sh) synchronizes around every kernel launch so
the error names the faulting kernel.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import path_lib.kernels  # noqa: E402
from path_lib.reference.attention import path_attention as ref_attention  # noqa: E402
from path_lib.records import write_result  # noqa: E402

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}
NAMES = ["o", "dq", "dk", "dv", "dw", "dbeta", "dg"]


def poison(nbytes=1 << 30):
    x = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").fill_(float("nan"))
    del x


def make_inputs(B, T, Hq, Hk, D, dtype, gate, gen, beta_mode="spread"):
    dev = "cuda"
    q = torch.randn(B, T, Hq, D, generator=gen, device=dev).to(dtype)
    k = torch.randn(B, T, Hk, D, generator=gen, device=dev).to(dtype)
    v = torch.randn(B, T, Hk, D, generator=gen, device=dev).to(dtype)
    w = F.normalize(torch.randn(B, T, Hk, D, generator=gen, device=dev), dim=-1)
    u = torch.rand(B, T, Hk, generator=gen, device=dev)
    if beta_mode == "spread":
        beta = 2 * u
        beta.view(-1)[::7] = 1.99
    else:
        choices = torch.tensor([0.0, 1.0, 2.0, 1.99, 1.999, 0.5], device=dev)
        beta = choices[torch.randint(0, 6, u.shape, generator=gen, device=dev)]
    g = F.logsigmoid(torch.randn(B, T, Hq, generator=gen, device=dev) + 3.0) if gate else None
    return q, k, v, w, beta, g


def rel(a, b):
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return float("nan")
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def _reference(ins64, cu):
    """The float64 UT all-pairs reference output, sequence by sequence for ``cu_seqlens``."""
    if cu is None:
        return ref_attention(*ins64, impl="parallel")
    b = cu.tolist()
    return torch.cat([ref_attention(*[x[:, s:e] if x is not None else None for x in ins64], impl="parallel")
                      for s, e in zip(b[:-1], b[1:])], dim=1)


def launch_config(device, T, D, dtype, lens, seg_blocks, forward_only):
    """The launch configuration of ``path_lib.kernels.path_attention`` for this case, as the call builds it
    (``path_lib.kernels.kernel_config``; the longest sequence with ``cu_seqlens``; head dim 32 as 64 where it is
    padded), as a dict for the record."""
    Tmax = max(max(lens), 1) if lens is not None else T
    cfg = path_lib.kernels.kernel_config(device, dtype, D, Tmax, forward_only, seg_blocks=seg_blocks)
    if cfg.pad_head_dim:
        cfg = path_lib.kernels.kernel_config(device, dtype, 64, Tmax, forward_only, seg_blocks=seg_blocks)
    return cfg.as_dict()


def check_case(name, B, T, Hq, Hk, D, dtype, gate, gen, lens=None, seg_blocks=None, beta_mode="spread",
               do_scale=1.0, forward_only=False):
    """One coverage point: the kernels' output and every gradient against the float64 reference; with
    ``forward_only`` the output alone, computed under ``torch.no_grad()`` (where the launcher may pick
    longer segments, ``_FWD_ONLY_SEG_BLOCKS``)."""
    q, k, v, w, beta, g = make_inputs(B, T, Hq, Hk, D, dtype, gate, gen, beta_mode)
    cu = None
    if lens is not None:
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device="cuda")
    ins = [x.requires_grad_() if x is not None and not forward_only else x for x in (q, k, v, w, beta, g)]
    used = [x for x in ins if x is not None]
    poison()
    t0 = time.time()
    with torch.set_grad_enabled(not forward_only):
        o = path_lib.kernels.path_attention(*ins, cu_seqlens=cu, seg_blocks=seg_blocks)
    if not forward_only:
        do = (do_scale * torch.randn(o.shape, generator=gen, device="cuda")).to(dtype)
        poison()
        grads = torch.autograd.grad(o, used, do)
    torch.cuda.synchronize()
    t_kernel = time.time() - t0
    ins64 = [x.detach().double().requires_grad_(not forward_only) if x is not None else None for x in ins]
    o64 = _reference(ins64, cu)
    errs = {"o": rel(o, o64)}
    if not forward_only:
        g64 = torch.autograd.grad(o64, [x for x in ins64 if x is not None], do.double())
        for n, a, r in zip(NAMES[1:], grads, g64):
            errs[n] = rel(a, r)
    tol = TOL[dtype]
    ok = all(math.isfinite(e) and e <= tol for e in errs.values())
    rec = dict(name=name, B=B, T=T, Hq=Hq, Hk=Hk, D=D, dtype=str(dtype).replace("torch.", ""), gate=gate,
               cu_seqlens=lens, seg_blocks=seg_blocks, beta_mode=beta_mode, tol=tol, errors=errs, ok=ok,
               kernel_s=round(t_kernel, 3),
               config=launch_config(q.device, T, D, dtype, lens, seg_blocks, forward_only))
    if forward_only:
        chosen = {mode: list(path_lib.kernels.blocking(T, D, dtype, forward_only=mode == "forward_only"))
                  for mode in ("with_grad", "forward_only")}
        rec.update(forward_only=True, block_and_seg_blocks=chosen)
    else:
        rec.update(do_scale=do_scale)
    return rec


def long_forward(gen, B=4, T=16384, H=24, D=64, dtype=torch.bfloat16, nq=64):
    """Forward at the long shape; rows [T - nq, T) and [T/2 - nq, T/2) of every batch element at heads
    0 and H-1, against a float64 right-to-left sweep over all keys."""
    q, k, v, w, beta, g = make_inputs(B, T, H, H, D, dtype, True, gen)
    poison(4 << 30)
    t0 = time.time()
    o = path_lib.kernels.path_attention(q, k, v, w, beta, g)
    torch.cuda.synchronize()
    t_kernel = time.time() - t0
    scale = D ** -0.5
    heads = [0, H - 1]
    errs = {}
    G = torch.cumsum(g.double(), dim=1)
    for start in (T - nq, T // 2 - nq):
        pos = torch.arange(start, start + nq, device="cuda")
        # state U[b, h, r] = q_{pos_r} transported down to the current key
        U = q[:, pos][:, :, heads].double().permute(0, 2, 1, 3).clone()  # [B, 2, nq, D]
        end = start + nq
        logits = torch.full((B, len(heads), nq, end), float("-inf"), dtype=torch.float64, device="cuda")
        kk = k[:, :end][:, :, heads].double().permute(0, 2, 1, 3)  # [B, 2, end, D]
        ww = w[:, :end][:, :, heads].double().permute(0, 2, 1, 3)
        bb = beta[:, :end][:, :, heads].double().permute(0, 2, 1)
        for t in range(end - 1, -1, -1):
            active = (pos >= t)[None, None, :, None]
            logits[:, :, :, t] = torch.where(active[..., 0], (U * kk[:, :, t, None, :]).sum(-1) * scale,
                                             logits[:, :, :, t])
            proj = (U * ww[:, :, t, None, :]).sum(-1, keepdim=True)
            U = torch.where(active, U - bb[:, :, t, None, None] * proj * ww[:, :, t, None, :], U)
        Gq = G[:, pos][:, :, heads].permute(0, 2, 1)  # [B, 2, nq]
        Gk = G[:, :end][:, :, heads].permute(0, 2, 1)
        logits = logits + Gq[..., None] - Gk[..., None, :]
        p = torch.softmax(logits, dim=-1)
        vv = v[:, :end][:, :, heads].double().permute(0, 2, 1, 3)
        ref = p @ vv  # [B, 2, nq, D]
        got = o[:, pos][:, :, heads].permute(0, 2, 1, 3)
        errs[f"rows_{start}"] = rel(got, ref)
    errs["all_finite"] = bool(torch.isfinite(o).all())
    ok = errs["all_finite"] and all(e <= TOL[dtype] for kk_, e in errs.items() if kk_.startswith("rows"))
    return dict(name="long_T_forward", B=B, T=T, Hq=H, Hk=H, D=D, dtype=str(dtype).replace("torch.", ""),
                gate=True, tol=TOL[dtype], errors=errs, ok=ok, kernel_s=round(t_kernel, 3))


def keys_to_end_case(gen, T=700, H=2, D=64, lens=(300, 1, 399)):
    """path_lib.kernels.transform_keys_to_end against a float64 token-by-token sweep, with cu_seqlens."""
    _, k, _, w, beta, _ = make_inputs(1, T, H, H, D, torch.float32, False, gen)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    out = path_lib.kernels.transform_keys_to_end(k, w, beta, cu_seqlens=cu)
    kd, wd, bd = k.double(), w.double(), beta.double()
    ref = torch.empty_like(kd)
    b = cu.tolist()
    for s0, s1 in zip(b[:-1], b[1:]):
        acc = kd[:, s0:s1].clone()
        # move every key of the sequence to its end: apply H_t to the keys before t, t = s0+1 .. s1-1
        for t in range(1, s1 - s0):
            x = acc[:, :t]
            wt, bt = wd[:, s0 + t], bd[:, s0 + t]
            acc[:, :t] = x - bt[:, None, :, None] * (x * wt[:, None]).sum(-1, keepdim=True) * wt[:, None]
        ref[:, s0:s1] = acc
    e = rel(out, ref)
    return dict(name="transform_keys_to_end", T=T, D=D, cu_seqlens=list(lens), dtype="float32",
                tol=TOL[torch.float32], errors={"keys": e}, ok=e <= TOL[torch.float32])


def short_conv_case(gen, B=2, T=1500, H=12, Dh=64, K=3):
    """PaTH layer's fused direction map (``path_lib.kernels.short_conv``) on bf16 u: w and the gradients of
    u and the filter against the float64 PyTorch map, both normalisations (the second with left context)."""
    from path_lib.kernels.short_conv import short_conv_normalize
    from path_lib.reference.short_conv import short_conv_normalize_torch
    errors = {}
    for normalization, left in (("unit", False), ("fla", True)):
        u = torch.randn(B, T, H * Dh, device="cuda", generator=gen).bfloat16().requires_grad_()
        weight = (torch.randn(H * Dh, 1, K, device="cuda", generator=gen) / K).requires_grad_()
        w = short_conv_normalize(u, weight, H, normalization=normalization, left_context=left)
        u64, w64 = (x.detach().double().requires_grad_() for x in (u, weight))
        ref = short_conv_normalize_torch(u64, w64, H, normalization=normalization, left_context=left)
        dw = torch.randn(ref.shape, device="cuda", generator=gen, dtype=torch.float64)
        w.backward(dw.float())
        ref.backward(dw)
        for name, a, b in (("w", w, ref), ("du", u.grad, u64.grad), ("dweight", weight.grad, w64.grad)):
            errors[f"{name}_{normalization}"] = rel(a, b)
    ok = all(e <= TOL[torch.bfloat16] for e in errors.values())
    return dict(name="short_conv_bf16", B=B, T=T, H=H, D=Dh, K=K, dtype="bfloat16", tol=TOL[torch.bfloat16],
                errors=errors, ok=ok)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/correctness_sweep.json")
    ap.add_argument("--skip-long", action="store_true")
    ap.add_argument("--resume", action="store_true", help="keep the cases already in --out, run the rest")
    ap.add_argument("--shard", default="0/1", help="K/N: run only the cases whose index is K mod N "
                    "(N processes in parallel compile N times faster; --merge joins their files)")
    ap.add_argument("--match", default=None, metavar="REGEX",
                    help="run only the cases whose name matches (e.g. 'float16|fp16': the T4 check)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="join shard files into --out (no GPU work) and exit 0 when every case passed")
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, args.out)
    shard_k, shard_n = (int(x) for x in args.shard.split("/"))
    if not 0 <= shard_k < shard_n:
        raise SystemExit(f"--shard must be K/N with 0 <= K < N, got {args.shard}")
    seed = int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for D in (32, 64, 128):
            cases.append((f"grid_{str(dtype)[6:]}_D{D}", dict(B=2, T=333, Hq=4, Hk=2, D=D, dtype=dtype, gate=True)))
    cases += [
        ("no_gate_bf16", dict(B=2, T=333, Hq=2, Hk=2, D=64, dtype=torch.bfloat16, gate=False)),
        ("no_gate_fp32", dict(B=1, T=200, Hq=2, Hk=1, D=64, dtype=torch.float32, gate=False)),
        ("beta_exact_0_1_2_fp32", dict(B=1, T=300, Hq=2, Hk=2, D=64, dtype=torch.float32, gate=True,
                                       beta_mode="mixed")),
        ("segments_fp32_T1500", dict(B=1, T=1500, Hq=2, Hk=1, D=64, dtype=torch.float32, gate=True)),
        ("segments_bf16_T1500", dict(B=1, T=1500, Hq=2, Hk=1, D=64, dtype=torch.bfloat16, gate=True)),
        ("small_segments_fp32", dict(B=1, T=1000, Hq=2, Hk=2, D=64, dtype=torch.float32, gate=True, seg_blocks=2)),
        ("D128_fp32_T1100", dict(B=1, T=1100, Hq=2, Hk=2, D=128, dtype=torch.float32, gate=True)),
        ("D128_bf16_T1100", dict(B=1, T=1100, Hq=2, Hk=2, D=128, dtype=torch.bfloat16, gate=False)),
        # output gradients of the size a mean-reduced loss gives (fp16 would hold 1e-6 only as subnormals)
        ("tiny_grad_bf16", dict(B=1, T=900, Hq=4, Hk=2, D=64, dtype=torch.bfloat16, gate=True, do_scale=1e-6)),
        ("varlen_fp32", dict(B=1, T=1144, Hq=4, Hk=2, D=64, dtype=torch.float32, gate=True,
                             lens=[300, 1, 650, 64, 129])),
        ("varlen_bf16", dict(B=1, T=1144, Hq=4, Hk=2, D=64, dtype=torch.bfloat16, gate=True,
                             lens=[300, 1, 650, 64, 129])),
        # without gradients at D = 128 the segments are longer (v10): one segment, and two of 16 blocks
        ("forward_only_D128_fp16_T1024", dict(B=2, T=1024, Hq=2, Hk=2, D=128, dtype=torch.float16, gate=False,
                                              forward_only=True)),
        ("forward_only_D128_bf16_T1700", dict(B=1, T=1700, Hq=4, Hk=2, D=128, dtype=torch.bfloat16, gate=True,
                                              forward_only=True)),
    ]
    for D in (32, 64, 128):
        cases.append((f"grid_float32_D{D}", dict(B=2, T=333, Hq=4, Hk=2, D=D, dtype=torch.float32, gate=True)))
    cases.append(("LONG", None))  # last: the slowest (a float64 token-by-token reference)
    cases.append(("KEYS_TO_END", None))
    cases.append(("SHORT_CONV", None))
    if args.match:
        import re
        cases = [c for c in cases if re.search(args.match, c[0])]
    cases = [c for i, c in enumerate(cases) if i % shard_n == shard_k]
    results = []
    seeds = [seed]
    if args.resume and os.path.exists(args.out):
        import json
        prev = json.load(open(args.out))
        results = prev.get("cases", [])
        seeds = prev.get("seeds", [prev.get("seed")]) + [seed]
    done = {r["name"] for r in results}
    cmd = "PYTHONPATH=. python3 " + " ".join(sys.argv)
    note = os.environ.get("PATH_BOOK_TREE_NOTE")

    def save():
        n_ok = sum(r["ok"] for r in results)
        extra = dict(tree_note=note) if note else {}
        write_result(args.out, dict(seed=seed, seeds=seeds, kernel_sources_sha256=path_lib.kernels.sources_sha256(),
                                    kernel_code_sha256=path_lib.kernels.code_sha256(),
                                    tolerances={str(k)[6:]: v for k, v in TOL.items()},
                                    cases=results, passed=n_ok, total=len(results),
                                    kernels_sync=os.environ.get("PATH_KERNELS_SYNC", "0"),
                                    pad_d32=os.environ.get("PATH_KERNELS_PAD_D32", "default (on for sm_90)"),
                                    **extra), command=cmd)
        return n_ok

    def fatal(r):  # the CUDA context is unusable after a device fault: record and restart
        err = r.get("error", "")
        if "CUDA error" in err or "AcceleratorError" in err or "illegal memory" in err:
            save()
            print("CUDA fault: exiting with status 3 (rerun with --resume in a fresh process)", flush=True)
            sys.stdout.flush()
            os._exit(3)
    def record(r):
        """Append a special case's result (long T, keys to the end), print it, save; returns passes."""
        results.append(r)
        print(f"{'OK  ' if r['ok'] else 'FAIL'} {r['name']}", r.get("errors", r.get("error")), flush=True)
        return save()

    special = {"LONG": ("long_T_forward", long_forward), "KEYS_TO_END": ("transform_keys_to_end", keys_to_end_case),
               "SHORT_CONV": ("short_conv_bf16", short_conv_case)}
    for name, kw in cases:
        if name in special:            # a case with its own reference; recorded under its own name
            rec_name, run = special[name]
            if rec_name in done or (name == "LONG" and args.skip_long):
                continue
            try:
                r = run(gen)
            except Exception as e:
                r = dict(name=rec_name, ok=False, error=repr(e)[:1500])
            record(r)
            fatal(r)
            continue
        if name in done:
            continue
        try:
            r = check_case(name, gen=gen, **kw)
        except Exception as e:  # record and go on
            r = dict(name=name, ok=False, error=repr(e)[:1500])
        results.append(r)
        print(f"{'OK  ' if r['ok'] else 'FAIL'} {name:28s}", {k: (f'{v:.2e}' if isinstance(v, float) else v)
                                                         for k, v in r.get('errors', {}).items()},
              r.get("error", ""), flush=True)
        save()
        fatal(r)
    n_ok = save()
    print(f"{n_ok}/{len(results)} cases within tolerance", flush=True)
    return 0 if n_ok == len(results) else 1


def merge(paths, out):
    """One sweep record from shard files (each keeps its own provenance under ``shards``)."""
    import json
    found = [(p, json.load(open(p))) for p in paths if os.path.exists(p)]
    shards = [s for _, s in found]
    cases = [c for s in shards for c in s.get("cases", [])]
    n_ok = sum(bool(c.get("ok")) for c in cases)
    first = shards[0] if shards else {}
    hashes = sorted({s.get("kernel_sources_sha256") for s in shards})
    codes = sorted({str(s.get("kernel_code_sha256")) for s in shards})
    data = dict(seeds=[x for s in shards for x in s.get("seeds", [])], kernel_sources_sha256=hashes[0] if len(hashes) == 1 else hashes,
                kernel_code_sha256=codes[0] if len(codes) == 1 else codes,
                tolerances=first.get("tolerances"),
                cases=cases, passed=n_ok, total=len(cases), kernels_sync=first.get("kernels_sync"),
                pad_d32=first.get("pad_d32"), shards=[dict(file=os.path.basename(p), provenance=s["provenance"])
                                                       for p, s in found])
    cmd = "PYTHONPATH=. python3 benchmarks/correctness_sweep.py --merge " + " ".join(map(os.path.basename, paths))
    write_result(out, data, command=cmd)
    print(f"merged {len(shards)} shard(s): {n_ok}/{len(cases)} cases within tolerance", flush=True)
    return 0 if cases and n_ok == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
