"""Tables and sentences of the other benchmark records: decoding (``bench_decode``), a training step end to
end (``bench_lm_throughput``), the short convolution (``bench_short_conv``) and context parallel on one GPU
(``cp_single_gpu``)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

# ----------------------------------------------------------------------------------------------
# decoding: benchmarks/bench_decode.py's record
# ----------------------------------------------------------------------------------------------

def decode_tables(rec: dict, *, target: float = 2.0) -> Tuple[str, str, str]:
    """The decode record (``RECORDS["decode"]``) as ``(speed table, precision table, summary sentence)``.

    Speed: one row per batch and cache length, microseconds per step of the Triton cache and of SDPA
    (its backend named), their ratio, the byte floor of that ratio, the host time per step of both and
    the PyTorch cache's ratio to SDPA. Precision: the relative error of the stored keys (median over
    keys) after each checkpoint, per key store. The sentence counts the cells within ``target`` of SDPA
    and names the others with their host times."""
    rows = sorted(rec["rows"], key=lambda r: (r["batch"], r["length"]))
    speed_md = ["| batch | cache length | ours (us) | SDPA (us) | ours / SDPA | byte floor | host per step, ours / SDPA "
                "(us) | PyTorch cache / SDPA |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speed_md.append(f"| {r['batch']} | {r['length']:,} | {1e3 * r['triton_ms']:.0f} | {1e3 * r['sdpa_ms']:.0f} "
                        f"({r['sdpa_backend']}) | {r['ratio_to_sdpa']:.2f} | {r['floor_ratio']:.2f} | "
                        f"{1e3 * r['triton_host_ms']:.0f} / {1e3 * r['sdpa_host_ms']:.0f} | "
                        f"{r['pytorch_ratio_to_sdpa']:.1f} |")
    prec = rec["precision"]["rows"]
    steps = [p["steps"] for p in next(iter(prec.values()))]
    prec_md = ["| key store | " + " | ".join(f"after {s:,} steps" for s in steps) + " |",
               "|---|" + "---|" * len(steps)]
    for name, pts in prec.items():
        prec_md.append(f"| {name} | " + " | ".join(f"{p['key_rel_err_median']:.1e}" for p in pts) + " |")
    slow = [r for r in rows if r["ratio_to_sdpa"] > target]
    summary = f"{len(rows) - len(slow)} of {len(rows)} cells are within {target:g}x of SDPA"
    if slow:
        summary += "; not " + ", ".join(
            f"batch {r['batch']} at {r['length']:,} ({r['ratio_to_sdpa']:.2f}x, host {1e3 * r['triton_host_ms']:.0f} "
            f"against {1e3 * r['sdpa_host_ms']:.0f} us per step)" for r in slow)
    return "\n".join(speed_md), "\n".join(prec_md), summary + "."


# ----------------------------------------------------------------------------------------------
# a training step end to end: benchmarks/bench_lm_throughput.py's record
# ----------------------------------------------------------------------------------------------

LM_NAMES = {"rope": "RoPE", "path": "PaTH", "path_fox": "PaTH-FoX"}


def lm_throughput_tables(rec: dict, *, target: float = 0.8) -> Tuple[str, Optional[str], str]:
    """The end-to-end record (``RECORDS["lm_throughput"]``) as ``(throughput table, GPU-time table or None,
    summary sentence)``.

    Throughput: one row per model and mode (eager; the step captured in a CUDA graph), tokens per second,
    ms per step, the ratio to RoPE's tokens per second in the same mode and, eager, the memory a step adds.
    GPU time (eager rows with a profile): ms per step by kind of kernel and the fraction of the unprofiled
    step the GPU was busy. The sentence gives PaTH's and PaTH-FoX's ratios in both modes against ``target``
    and the attention kernels' GPU time against SDPA's."""
    rows = rec["rows"]
    md = ["| model | attention runs on | mode | tokens / s | ms per step | x RoPE | memory a step adds (MiB) |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        mem = f"{r['step_peak_mib']:,.0f}" if r.get("step_peak_mib") and not r["cuda_graph"] else "-"
        backend = f"SDPA ({rec['rope_sdpa_backend']})" if r["attention"] == "rope" else "Triton kernels"
        md.append(f"| {LM_NAMES[r['attention']]} | {backend} | {'CUDA graph' if r['cuda_graph'] else 'eager'} | "
                  f"{r['tokens_per_second']:,.0f} | {1e3 * r['seconds_per_step']:.1f} | {r['ratio_to_rope']:.2f} | {mem} |")
    prof = [r for r in rows if not r["cuda_graph"] and r.get("profile")]
    att = ("attention (SDPA)", "PaTH kernels")
    gpu_md = None
    if prof:
        kinds = [k for k in dict.fromkeys(k for r in prof for k in r["profile"]["gpu_ms_by_kind"]) if k not in att]
        lines = ["| model | attention kernels | " + " | ".join(kinds) + " | GPU in all | GPU busy |",
                 "|---|" + "---|" * (len(kinds) + 3)]
        for r in prof:
            by = r["profile"]["gpu_ms_by_kind"]
            lines.append(f"| {LM_NAMES[r['attention']]} | {sum(by.get(k, 0.0) for k in att):.1f} | "
                         + " | ".join(f"{by.get(k, 0.0):.1f}" for k in kinds)
                         + f" | {r['profile']['gpu_ms']:.1f} | {r['profile']['gpu_ms'] / (1e3 * r['seconds_per_step']):.0%} |")
        gpu_md = "\n".join(lines)
    parts = []
    for graph in (True, False):
        got = {r["attention"]: r["ratio_to_rope"] for r in rows if r["cuda_graph"] == graph}
        if "path" in got:
            parts.append(f"{got['path']:.2f}x" + (f" (PaTH-FoX {got['path_fox']:.2f}x)" if "path_fox" in got else "")
                         + (" with the step in a CUDA graph" if graph else " eager"))
    ratios = [r["ratio_to_rope"] for r in rows if r["attention"] != "rope"]
    summary = (f"Against RoPE's tokens per second, PaTH trains at {' and at '.join(parts)}: the target of {target:g}x is "
               f"{'met' if all(x >= target for x in ratios) else 'not met'}")
    by = {r["attention"]: r["profile"]["gpu_ms_by_kind"] for r in prof}
    if "path" in by and "rope" in by:
        summary += (f". Of the GPU time per step, the PaTH kernels take {by['path'].get('PaTH kernels', 0.0):.1f} ms "
                    f"where SDPA takes {by['rope'].get('attention (SDPA)', 0.0):.1f} ms in the RoPE model")
    return "\n".join(md), gpu_md, summary + "."


# ----------------------------------------------------------------------------------------------
# PaTH's direction map w in one pass: benchmarks/bench_short_conv.py's record
# ----------------------------------------------------------------------------------------------

def short_conv_table(rec: dict) -> Tuple[str, str]:
    """The short-convolution record (``RECORDS["short_conv"]``) as ``(table, sentence)``.

    One row per shape and method (``pytorch``: the layer's ``F.conv1d``, SiLU, cast and ``F.normalize``;
    ``fused``: ``path_lib.kernels.short_conv``): forward and forward+backward ms with the ratio to the
    byte floor, and the errors against float64 (w: max abs; du, dweight: relative to the largest). The
    sentence gives the fused pass's speed-up over PyTorch's at each shape."""
    rows = {(r["B"], r["T"], r["C"], r["H"], r["method"], r["mode"]): r for r in rec["rows"]}
    conv_shapes = list(dict.fromkeys(k[:4] for k in rows))
    names = {"pytorch": "PyTorch (conv1d, SiLU, cast, normalize)", "fused": "fused Triton pass"}
    md = ["| B x T x C, heads | method | forward ms (x floor) | forward+backward ms (x floor) | error w | du | dweight |",
          "|---|---|---|---|---|---|---|"]
    gains = []
    for B, T, C, H in conv_shapes:
        for method in ("pytorch", "fused"):
            f, fb = rows[B, T, C, H, method, "fwd"], rows[B, T, C, H, method, "fwdbwd"]
            md.append(f"| {B} x {T:,} x {C}, {H} | {names[method]} | {f['ms']:.3f} ({f['x_floor']:.1f}x) | "
                      f"{fb['ms']:.3f} ({fb['x_floor']:.1f}x) | {f['w_max_abs']:.1e} | {f['du_rel']:.1e} | "
                      f"{f['dweight_rel']:.1e} |")
        ratio = lambda mode: rows[B, T, C, H, "pytorch", mode]["ms"] / rows[B, T, C, H, "fused", mode]["ms"]  # noqa: E731
        gains.append(f"{ratio('fwd'):.1f}x forward and {ratio('fwdbwd'):.1f}x forward+backward at "
                     f"B x T x C = {B} x {T:,} x {C}")
    sentence = "The fused pass is faster than PyTorch's by " + "; by ".join(gains) + "."
    err = {m: max(r["w_max_abs"] for k, r in rows.items() if k[4] == m) for m in ("pytorch", "fused")}
    closer = "closer to" if err["fused"] < err["pytorch"] else "no closer to"
    sentence += (f" Its w is {closer} the float64 map than PyTorch's (largest error {err['fused']:.1e} against "
                 f"{err['pytorch']:.1e}).")
    return "\n".join(md), sentence


# ----------------------------------------------------------------------------------------------
# context parallel on one GPU: benchmarks/cp_single_gpu.py's record
# ----------------------------------------------------------------------------------------------

#: the record's method keys, in the table's order: (key, column label)
CP_METHODS = (("context_parallel", "blockwise (1 rank)"), ("context_parallel_kernels", "kernels (1 rank)"),
              ("chunked_4_kernels", "kernels (4 chunks)"), ("kernels", "kernels alone"))


def _ratio_span(xs: List[float]) -> str:
    f = lambda x: f"{x:.0f}x" if x >= 10 else f"{x:.1f}x"     # noqa: E731
    return f(min(xs)) if max(xs) < 1.05 * min(xs) else f"{f(min(xs))} to {f(max(xs))}"


def cp_tables(rec: dict) -> Tuple[str, str]:
    """The single-GPU context-parallel record (``RECORDS["cp_single_gpu"]``) as ``(table, sentence)``.

    One row per case, one column per method (the context-parallel call with the blockwise scan and with the
    kernels at world size 1, the 4-chunk kernel path, the kernels alone): the worst error over the output
    and the six gradients (``||x - ref|| / ||ref||`` against float64) and, in parentheses, the forward+backward
    ms where the record timed it ("-" where the method did not run). The sentence gives the cases passed and the time ratios to the kernels alone."""
    cases = [c for c in rec["cases"] if "errors" in c]
    md = ["| case | " + " | ".join(label for _, label in CP_METHODS) + " |", "|---|" + "---|" * len(CP_METHODS)]
    ratios: Dict[str, List[float]] = {m: [] for m, _ in CP_METHODS}
    for c in cases:
        err = {m: max(e.values()) for m, e in c["errors"].items()}
        ms = c.get("ms_fwd_bwd", {})
        cell = lambda m: " ".join(([f"{err[m]:.1e}"] if m in err else ["-"]) +   # noqa: E731
                                  ([f"({ms[m]:.0f} ms)" if ms[m] >= 10 else f"({ms[m]:.1f} ms)"] if m in ms else []))
        md.append(f"| {c['name']} | " + " | ".join(cell(m) for m, _ in CP_METHODS) + " |")
        for m, _ in CP_METHODS:
            if m in ms and "kernels" in ms and m != "kernels":
                ratios[m].append(ms[m] / ms["kernels"])
    parts = [f"{label} {_ratio_span(ratios[m])}" for m, label in CP_METHODS if ratios.get(m)]
    sentence = (f"{rec['passed']} of {rec['total']} checks within the tolerances ("
                + ", ".join(f"{k} {v:g}" for k, v in rec["tolerances"].items())
                + f"), world size {rec['world_size']}, {rec['backend']}. Forward+backward time against the kernels "
                "alone: " + "; ".join(parts) + ".")
    return "\n".join(md), sentence
