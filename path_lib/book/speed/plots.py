"""The speed chapter's figures (matplotlib): times, time over floor, memory, profiles by phase, and the
floor widget's figure. Resolution and font sizes are the book's style (:mod:`path_lib.book.style`);
figures are at most 9 inches wide, so that their text stays legible in the page's column."""
from __future__ import annotations

from typing import Optional, Sequence

from .bench_record import (KIND_OF, KINDS, METHODS, TOKENS, _per_tokens, lookup, measured_ms, method_label,
                           methods_present, shapes)
from .floors import floor_for, path_config, time_floor
from .tables import floor_ratios
from .phases import PHASES, _profile_row, group_difference, phase_ms

SHORT_KIND = {"attention": "attention", "fox": "FoX", "path": "PaTH", "pathfox": "PaTH-FoX"}


def _grid(rec, title):
    import matplotlib.pyplot as plt

    Ds = sorted({s[0] for s in shapes(rec)})
    fig, axes = plt.subplots(len(Ds), 2, figsize=(9, 1.2 + 3.2 * len(Ds)), squeeze=False)
    for i, D in enumerate(Ds):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            axes[i, j].set_title(f"D = {D}, {'forward' if mode == 'fwd' else 'forward + backward'}")
            axes[i, j].set_xlabel("T (log scale)")
    if rec is not None and "provenance" in rec:
        p = rec["provenance"]     # the full provenance is in the dropdown under the figure
        fig.suptitle(f"{title}\nrecorded on an {p['device']}, {str(p['date'])[:10]}", fontsize="medium")
    return fig, axes, Ds


def _finish(fig, axes, rec, ylabel):
    """Log-log axes with the record's T as ticks and plain numbers; one legend for the figure, below."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    Ts = sorted({s[1] for s in shapes(rec)})
    handles: dict = {}
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(Ts, [str(T) for T in Ts])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(ylabel)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    rows = -(-len(handles) // 2)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=2, frameon=False)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.45, (0.2 + 0.22 * rows) / height), 1, 1))
    return fig


def _plot_methods(ax, rec: dict, points) -> None:
    """One line per method of the record on ``ax``: ``points(method)`` gives its ``[(T, y)]`` (none: no line)."""
    for m in methods_present(rec):
        pts = points(m)
        if pts:
            _, color, ls, marker = METHODS.get(m, (m, "k", "-", "o"))
            ax.plot(*zip(*pts), marker=marker, ms=3.5, color=color, ls=ls, label=method_label(rec, m))


def plot_times(rec: dict):
    """Figure: median ms per 32768 tokens against T (log-log), per D (rows) and mode (columns), every
    method of the record, and the attention and PaTH floors (with ceilings)."""
    fig, axes, Ds = _grid(rec, "measured time")
    for i, D in enumerate(Ds):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            ax = axes[i, j]
            _plot_methods(ax, rec, lambda m: [(T, _per_tokens(rec, measured_ms(rec, D, T, m, mode), B, T))
                                              for d, T, B, _ in shapes(rec)
                                              if d == D and measured_ms(rec, D, T, m, mode) is not None])
            if rec.get("ceilings"):
                for kind, method, ls in (("attention", "sdpa", ":"), ("path", "ours_path", "-.")):
                    found = [(T, B, floor_for(rec, method, D, T, mode)) for d, T, B, _ in shapes(rec) if d == D]
                    pts = [(T, _per_tokens(rec, f.ms, B, T)) for T, B, f in found if f is not None]
                    ax.plot(*zip(*pts), color="k", lw=0.9, ls=ls, label=f"floor: {KINDS[kind]}")
    return _finish(fig, axes, rec, "ms per 32768 tokens")


def plot_floor_ratios(rec: dict):
    """Figure: measured time / floor against T per D and mode (None without ceilings)."""
    ratios = floor_ratios(rec)
    if not ratios:
        return None
    fig, axes, Ds = _grid(rec, "measured time / floor (1 = at the floor)")
    for i, D in enumerate(Ds):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            ax = axes[i, j]
            _plot_methods(ax, rec, lambda m: sorted((T, v) for (mm, md, d, T), v in ratios.items()
                                                    if (mm, md, d) == (m, mode, D)))
            ax.axhline(1.0, color="k", lw=0.8)
    return _finish(fig, axes, rec, "measured / floor")


def plot_memory(rec: dict):
    """Figure: peak MiB above the inputs per 32768 tokens against T, per D and mode (flat: O(T d) memory)."""
    fig, axes, Ds = _grid(rec, "peak memory above the inputs")
    for i, D in enumerate(Ds):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            def peaks(m, D=D, mode=mode):
                pts = []
                for d, T, B, _ in shapes(rec):
                    r = lookup(rec, D, T, m, mode) if d == D else None
                    if r is not None and r.get("peak_mib") is not None and measured_ms(rec, D, T, m, mode):
                        pts.append((T, _per_tokens(rec, float(r["peak_mib"]), B, T)))
                return pts
            _plot_methods(axes[i, j], rec, peaks)
    return _finish(fig, axes, rec, "peak MiB per 32768 tokens")


def plot_phases(profile: dict, methods: Sequence[str]):
    """Figure: ms per iteration of each method, stacked by phase, one panel per (D, T) and mode of the profile."""
    import matplotlib.pyplot as plt

    keys = sorted({(r["D"], r["T"]) for r in profile["rows"] if r["method"] in methods})
    fig, axes = plt.subplots(len(keys), 2, figsize=(9, 1.4 + 0.55 * len(methods) * len(keys)), squeeze=False)
    seen = set()
    for i, (D, T) in enumerate(keys):
        for j, mode in enumerate(("fwd", "fwdbwd")):
            ax = axes[i, j]
            names = []
            for y, m in enumerate(methods):
                r = _profile_row(profile, D, T, m, mode)
                names.append(method_label(None, m))
                left = 0.0
                for p, ms in (phase_ms(r).items() if r else ()):
                    ax.barh(y, ms, left=left, color=PHASES[p])
                    seen.add(p)
                    left += ms
            ax.set_yticks(range(len(methods)), names)
            ax.invert_yaxis()
            ax.set_xlabel("ms per iteration")
            ax.set_title(f"D = {D}, T = {T}, {'forward' if mode == 'fwd' else 'forward + backward'}")
    from matplotlib.patches import Patch

    used = [p for p in PHASES if p in seen]
    fig.legend([Patch(color=PHASES[p]) for p in used], used, loc="lower center", ncol=2, frameon=False)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, min(0.45, (0.2 + 0.22 * -(-len(used) // 2)) / height), 1, 1))
    return fig


def plot_group_difference(profile: dict, a: str, b: str, mode: str = "fwdbwd"):
    """Figure: ``a``'s minus ``b``'s ms per iteration (:func:`~.phases.group_difference`), one row per
    (D, T), one column per group of phases and the sum; red where ``a`` takes longer, blue where it
    saves, on a symmetric log scale of colour, each cell labelled with its value. None without rows."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import SymLogNorm

    diff = group_difference(profile, a, b, mode)
    if not diff:
        return None
    groups = list(dict.fromkeys(g for d in diff.values() for g in d))
    groups = [g for g in groups if g != "all kernels"] + ["all kernels"]
    grid = [[d.get(g, 0.0) for g in groups] for d in diff.values()]
    top = max(abs(v) for row in grid for v in row) or 1.0
    norm = SymLogNorm(linthresh=1.0, vmin=-top, vmax=top, base=10)
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.45 * len(diff)))
    image = ax.imshow(grid, cmap="RdBu_r", norm=norm, aspect="auto")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            dark = abs(norm(v) - 0.5) > 0.3
            ax.text(j, i, f"{v:+.2f}", ha="center", va="center", color="white" if dark else "black")
    ax.axvline(len(groups) - 1.5, color="white", linewidth=4)
    short = {"forward attention loops": "forward\nloops", "backward attention loops": "backward\nloops"}
    ax.set_xticks(range(len(groups)), [short.get(g, g.replace(" ", "\n", 1)) for g in groups])
    ax.set_yticks(range(len(diff)), [f"d = {D}, T = {T}" for D, T in diff])
    ax.set_xlabel("group of phases")
    ax.set_ylabel("head dimension, sequence length")
    what = "forward" if mode == "fwd" else "forward + backward"
    ax.set_title(f"{method_label(None, a)} minus {method_label(None, b)}, {what}")
    ticks = [t for t in (1, 3, 10, 30, 100, 300) if t <= top]
    bar = fig.colorbar(image, ax=ax, ticks=[-t for t in ticks[::-1]] + [0] + ticks)
    bar.ax.set_yticklabels([f"{t:+g}" if t else "0" for t in bar.get_ticks()])
    bar.set_label("difference, ms per iteration\n(red: the first takes longer)")
    fig.tight_layout()
    return fig


def render_floor(rec: Optional[dict], T: int, D: int, mode: str):
    """Figure for the widget: at (T, D, mode), each kind's operations and bytes (left), its two floors
    (bars, with ceilings) and the measured times of the record's methods of that kind (markers, with
    their ratio to the floor) (right)."""
    import matplotlib.pyplot as plt

    shp = [s for s in shapes(rec) if s[:2] == (D, T)] or [(D, T, max(1, TOKENS // T), 2048 // D)]
    B, H = shp[0][2], shp[0][3]
    ceil = (rec or {}).get("ceilings")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4.4), gridspec_kw=dict(width_ratios=[1, 1.4]))
    kinds = list(KINDS)
    floors = {}
    for kind in kinds:
        kw = {}
        if kind in ("path", "pathfox"):
            bt, sb = path_config(rec, D, T, mode)
            kw = dict(block_size=bt, seg_blocks=sb)
        floors[kind] = time_floor(kind, mode, T, D, B, H, ceil, **kw)
    ys = list(range(len(kinds)))
    ax1.barh(ys, [floors[k].flops / 1e12 for k in kinds], color="#457b9d", height=0.6)
    for y, k in zip(ys, kinds):
        ax1.text(0.02, y, f"{floors[k].nbytes / 1e9:.2f} GB to move", transform=ax1.get_yaxis_transform(),
                 va="center", color="white")
    ax1.set_yticks(ys, [SHORT_KIND[k] for k in kinds])
    ax1.set_ylim(len(kinds) - 0.5, -0.5)
    ax1.set_xlabel("TFLOP counted")
    ax1.set_title(f"T = {T}, D = {D}, B = {B}, H = {H}:\nthe work")
    plotted = False
    if ceil:
        ax2.barh([y - 0.3 for y in ys], [floors[k].compute_ms for k in kinds], height=0.16, color="#264653",
                 label=f"floor from operations ({ceil['matmul_tflops']:.0f} TFLOP/s)")
        ax2.barh([y - 0.12 for y in ys], [floors[k].memory_ms for k in kinds], height=0.16, color="#a8dadc",
                 label=f"floor from bytes ({ceil['copy_gbs']:.0f} GB/s)")
        for y, k in zip(ys, kinds):
            floor_ms = floors[k].ms                      # (not None: the record has ceilings)
            if floor_ms is not None:
                ax2.text(floor_ms * 1.08, y - 0.3, f"{floor_ms:.2f} ms", va="center")
        plotted = True
    else:
        ax2.text(0.5, 0.5, "no measured ceilings in this record:\nno time floor", transform=ax2.transAxes,
                 ha="center", va="center", color="0.4")
    slot = {k: 0 for k in kinds}
    for m in methods_present(rec):
        ms, m_kind = measured_ms(rec, D, T, m, mode), KIND_OF.get(m)
        if ms is None or m_kind is None or m_kind not in kinds:
            continue
        m_y = kinds.index(m_kind) + 0.1 + 0.2 * slot[m_kind]
        slot[m_kind] += 1
        _, color, _, marker = METHODS[m]
        ax2.plot(ms, m_y, marker=marker, ms=7, ls="", color=color, mec="k", label=method_label(rec, m))
        floor_ms = floors[m_kind].ms
        if floor_ms:
            ax2.text(ms * 1.12, m_y, f"{ms / floor_ms:.1f}x", va="center")
        plotted = True
    if plotted:
        ax2.set_xscale("log")
        fig.legend(*ax2.get_legend_handles_labels(), loc="lower center", ncol=2, frameon=False)
    ax2.set_yticks(ys, [""] * len(kinds))
    ax2.set_ylim(len(kinds) - 0.5, -0.5)
    ax2.set_xlabel("ms (log scale)")
    ax2.set_title(f"{'forward' if mode == 'fwd' else 'forward + backward'}:\nfloors (bars), measured (markers)")
    n_legend = len(ax2.get_legend_handles_labels()[1])
    fig.tight_layout(rect=(0, min(0.5, (0.15 + 0.22 * -(-n_legend // 2)) / fig.get_size_inches()[1]), 1, 1))
    return fig
