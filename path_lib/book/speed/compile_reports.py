"""The ahead-of-time compile reports (shared memory, spills per kernel) and what they mean on a GPU
with less shared memory, an NVIDIA T4 (:data:`T4`): the launcher's blocking there and its floors."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

from ...theory import costs
from .floors import time_floor

#: NVIDIA T4 datasheet figures (not measured here): dense fp16 tensor-core rate, memory bandwidth, and
#: the most shared memory one program (thread block) may use on compute capability 7.5
_T4_SMEM_BYTES = 64 * 1024
T4 = {"name": "NVIDIA T4", "matmul_tflops": 65.0, "copy_gbs": 320.0, "smem_bytes": _T4_SMEM_BYTES, "sms": 40,
      "source": "NVIDIA T4 datasheet: 65 TFLOP/s fp16 (tensor cores), 320 GB/s GDDR6, 40 multiprocessors"}


def compile_summary(records: Dict[str, Optional[dict]], smem_bytes: int = _T4_SMEM_BYTES) -> List[dict]:
    """Per recorded configuration (record, dtype, D, block length, with segments or one): the number of
    kernels, the largest shared memory (and its kernel), the kernels over ``smem_bytes``, the largest
    spill (stack bytes per thread) and whether every kernel fits."""
    groups: Dict[tuple, list] = {}
    for name, rec in records.items():
        for r in (rec or {}).get("rows", []):
            if r.get("error") or "shared_bytes" not in r:
                continue
            single = "SEGS" in r
            groups.setdefault((name, r["dtype"], r["D"], r["BT"], single), []).append(r)
    out = []
    for (name, dtype, D, BT, single), rows in sorted(groups.items(), key=lambda kv: kv[0][1:] + (kv[0][0],)):
        big = max(rows, key=lambda r: r["shared_bytes"])
        over = [r["kernel"] for r in rows if r["shared_bytes"] > smem_bytes]
        out.append(dict(record=name, dtype=dtype, D=D, BT=BT, one_segment=single, kernels=len(rows),
                        max_shared=big["shared_bytes"], max_kernel=big["kernel"], over=over,
                        max_stack=max(r.get("stack_bytes", 0) for r in rows), fits=not over))
    return out


def compile_table(summary: List[dict], smem_bytes: int = _T4_SMEM_BYTES) -> str:
    """Markdown of :func:`compile_summary`."""
    lines = [f"| dtype | D | block | segments | kernels | largest shared memory | fits {smem_bytes // 1024} KiB | "
             "over the limit | largest spill, bytes/thread |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        over = ", ".join(f"`{k}`" for k in s["over"]) or "-"
        lines.append(f"| {s['dtype']} | {s['D']} | {s['BT']} | {'one' if s['one_segment'] else 'several'} | "
                     f"{s['kernels']} | {s['max_shared'] / 1024:.0f} KiB (`{s['max_kernel']}`) | "
                     f"{'yes' if s['fits'] else '**no**'} | {over} | {s['max_stack']} |")
    return "\n".join(lines)


def launcher_config(summary: List[dict], D: int, dtype: str, smem_bytes: int = _T4_SMEM_BYTES) -> dict:
    """What the kernels' launcher runs on a GPU with ``smem_bytes`` of shared memory per program, replayed
    against the compile reports (:func:`compile_summary`): the first block length from the launcher's
    table (``path_lib.kernels.kernel_config`` for a device with that much shared memory), halved down to 16
    while a kernel does not fit, then one segment.

    Returns ``{"BT", "one_segment", "fits", "why"}``; ``fits`` is None when a needed configuration was not
    compiled (nothing is claimed then).
    """
    import torch
    import path_lib.kernels

    # the block length depends on the shared memory only (a described device: no fallback state applies)
    device = path_lib.kernels.DeviceInfo("cuda", (8, 0), smem_bytes, f"{smem_bytes} B of shared memory")
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    BT = path_lib.kernels.kernel_config(device, torch_dtype, D, 1024).block
    steps: List[str] = []
    while True:
        seg = [s for s in summary if (s["dtype"], s["D"], s["BT"], s["one_segment"]) == (dtype, D, BT, False)]
        if not seg:
            return dict(BT=BT, one_segment=False, fits=None, why="; ".join(steps + [f"block {BT} not compiled"]))
        if all(s["fits"] for s in seg):
            return dict(BT=BT, one_segment=False, fits=True, why="; ".join(steps + [f"block {BT}: every kernel fits"]))
        steps.append(f"block {BT}: {', '.join(seg[0]['over'])} too large")
        if BT > 16:
            BT //= 2
            continue
        one = [s for s in summary if (s["dtype"], s["D"], s["BT"], s["one_segment"]) == (dtype, D, BT, True)]
        if not one:
            return dict(BT=BT, one_segment=True, fits=None, why="; ".join(steps + ["one segment not compiled"]))
        ok = all(s["fits"] for s in one)
        return dict(BT=BT, one_segment=True, fits=ok,
                    why="; ".join(steps + [f"one segment: {'every kernel fits' if ok else 'still too large'}"]))


def t4_floors(summary: List[dict], shape_list: Iterable[Tuple[int, int, int, int]], dtype: str = "fp16",
              gpu: dict = T4) -> Tuple[str, List[dict]]:
    """Markdown: floors *computed* from ``gpu``'s datasheet figures (not measured), for attention and for
    PaTH at the blocking the launcher runs on that GPU (:func:`launcher_config`: block length, one
    segment or several), per shape; and the rows. PaTH's cells are '-' where the compile reports do not
    show a configuration that fits."""
    lines = ["| D | T | B | PaTH blocking there | attention floor fwd / fwd+bwd, ms | PaTH floor fwd / fwd+bwd, ms | "
             "PaTH fwd ops / attention's |", "|---|---|---|---|---|---|---|"]
    data = []
    for D, T, B, H in shape_list:
        cfg = launcher_config(summary, D, dtype, gpu["smem_bytes"])
        a = {m: time_floor("attention", m, T, D, B, H, gpu) for m in ("fwd", "fwdbwd")}
        p = None
        if cfg["fits"]:
            bt = cfg["BT"]
            sb = -(-T // bt) if cfg["one_segment"] else costs.default_seg_blocks(T, D, bt)
            p = {m: time_floor("path", m, T, D, B, H, gpu, block_size=bt, seg_blocks=sb) for m in ("fwd", "fwdbwd")}
        data.append(dict(D=D, T=T, B=B, H=H, config=cfg, attention=a, path=p))
        blocking = f"block {cfg['BT']}, {'one segment' if cfg['one_segment'] else 'segments'}" if cfg["fits"] else "-"
        pcell = f"{p['fwd'].ms:.1f} / {p['fwdbwd'].ms:.1f}" if p else "-"
        ratio = f"{p['fwd'].flops / a['fwd'].flops:.2f}x" if p else "-"
        lines.append(f"| {D} | {T} | {B} | {blocking} | {a['fwd'].ms:.1f} / {a['fwdbwd'].ms:.1f} | {pcell} | {ratio} |")
    return "\n".join(lines), data
