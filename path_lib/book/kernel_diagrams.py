"""Diagrams and small helpers for the kernel chapter (book/part3/07_kernel.ipynb).

    from path_lib.book.kernel_diagrams import tile_phases, tile_grid_figure, segment_figure

    phases = tile_phases(T=1000, BT=64, SB=4)     # [NB, NB]: which loop computes each tile
    fig = tile_grid_figure(1000, 64, 4)           # the causal grid of tiles, coloured by that
    fig = segment_figure(1024, 64, 4)             # blocks, segments and what is precomputed for them

Tile classification (``tile_phases``), for query block ``c`` and key block ``b <= c`` of the forward
in ``kernels/path_lib/kernels/_triton_kernels.py``, with ``SB`` blocks per segment and ``ks = c // SB`` the query's
segment:

* ``DIAGONAL`` (``b == c``): ``_fwd_kernel``, the intra-block UT form;
* ``OWN_SEGMENT`` (``ks * SB <= b < c``): ``_fwd_kernel``'s thin scan, the query moved block by block;
* ``EARLIER_SEGMENT`` (``b < ks * SB``): plain attention of the query state ``Q0 Om(ks, k)`` against the
  keys moved to the end of their segment ``k`` (``_fwd_inter_kernel`` on 128-row programs on a big GPU
  with 16-bit inputs, else ``_earlier_segments`` inside ``_fwd_kernel``).

``SB=None`` means one segment for the whole sequence: the blockwise scan of chapter 6, which is what
the teaching kernel (``kernels/path_lib/kernels/teaching.py``) runs. Every drawing function returns a
``matplotlib.figure.Figure`` and never calls ``plt.show``.
"""
from __future__ import annotations

import inspect
import os
from typing import List, Optional

import torch

__all__ = ["NOT_COMPUTED", "DIAGONAL", "OWN_SEGMENT", "EARLIER_SEGMENT", "tile_phases", "visit_order",
           "phase_counts", "tile_grid_figure", "segment_figure", "source_excerpt", "fold_line",
           "fit_to_width", "kernel_docstrings",
           "compile_table", "table_columns", "random_inputs"]

NOT_COMPUTED, DIAGONAL, OWN_SEGMENT, EARLIER_SEGMENT = 0, 1, 2, 3
_COLORS = {NOT_COMPUTED: "#ffffff", DIAGONAL: "#f4a261", OWN_SEGMENT: "#2a9d8f", EARLIER_SEGMENT: "#457b9d"}


def _check_blocking(T, BT, SB):
    for name, x in (("T", T), ("BT", BT)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name} must be a positive int, got {x!r}")
    if SB is not None and (isinstance(SB, bool) or not isinstance(SB, int) or SB < 1):
        raise ValueError(f"SB must be a positive int or None (one segment), got {SB!r}")
    NB = -(-T // BT)
    return NB, (NB if SB is None else SB)


def tile_phases(T: int, BT: int, SB: Optional[int] = None) -> torch.Tensor:
    """Which part of the forward computes each ``BT x BT`` tile of the causal ``T x T`` logit matrix.

    Args:
        T: sequence length; BT: block length (the last block may be shorter); SB: blocks per segment,
            or None for a single segment (the blockwise scan, the teaching kernel).
    Returns:
        ``[NB, NB]`` int64, rows query blocks, columns key blocks: ``NOT_COMPUTED`` above the diagonal,
        else ``DIAGONAL``, ``OWN_SEGMENT`` or ``EARLIER_SEGMENT`` (module docstring).
    """
    NB, SB = _check_blocking(T, BT, SB)
    c = torch.arange(NB)[:, None]
    b = torch.arange(NB)[None, :]
    seg_start = (c // SB) * SB
    out = torch.full((NB, NB), NOT_COMPUTED, dtype=torch.int64)
    out[(b < seg_start) & (b <= c)] = EARLIER_SEGMENT
    out[(b >= seg_start) & (b < c)] = OWN_SEGMENT
    out[b == c] = DIAGONAL
    return out


def visit_order(T: int, BT: int, SB: Optional[int], query_block: int) -> list:
    """Key blocks in the order one query block's program(s) visit them: the diagonal tile, the own
    segment right to left (``_fwd_kernel``'s thin scan), then the earlier segments right to left, and
    inside each of those the blocks left to right (as ``_earlier_segments`` loops: every key of such a
    segment meets the same query state, so any order gives the same softmax)."""
    NB, SB = _check_blocking(T, BT, SB)
    if isinstance(query_block, bool) or not isinstance(query_block, int) or not 0 <= query_block < NB:
        raise ValueError(f"query_block must be an int in [0, {NB}), got {query_block!r}")
    ks = query_block // SB
    order = [query_block] + list(range(query_block - 1, ks * SB - 1, -1))
    for kseg in range(ks - 1, -1, -1):
        order += list(range(kseg * SB, (kseg + 1) * SB))
    return order


def phase_counts(T: int, BT: int, SB: Optional[int] = None) -> dict:
    """Number of tiles of each phase, ``{"diagonal": n, "own segment": n, "earlier segments": n}``."""
    p = tile_phases(T, BT, SB)
    return {"diagonal": int((p == DIAGONAL).sum()), "own segment": int((p == OWN_SEGMENT).sum()),
            "earlier segments": int((p == EARLIER_SEGMENT).sum())}


def _phase_labels(split: bool, teaching: bool):
    if teaching:
        return {DIAGONAL: "diagonal tile:\nintra-block UT form",
                OWN_SEGMENT: "earlier blocks: the scan,\nquery moved across each block"}
    return {DIAGONAL: "diagonal: _fwd_kernel,\nintra-block UT form",
            OWN_SEGMENT: "own segment: _fwd_kernel,\nthin scan",
            EARLIER_SEGMENT: ("earlier segments: _fwd_inter_kernel," if split else
                              "earlier segments: _fwd_kernel,")
            + "\nplain attention after one\nD x D product per segment"}


def tile_grid_figure(T: int, BT: int, SB: Optional[int] = None, *, split: bool = True,
                     query_block: Optional[int] = None, title: Optional[str] = None, size: float = 4.2):
    """The causal ``T x T`` grid of tiles coloured by the phase that computes each (``tile_phases``).

    Args:
        T, BT, SB: as :func:`tile_phases` (``SB=None``: the teaching kernel's single scan).
        split: label the earlier-segment tiles as ``_fwd_inter_kernel``'s (the default on a big GPU with
            16-bit inputs) rather than ``_fwd_kernel``'s.
        query_block: outline this query block's row and number its tiles in visit order (when the
            grid has at most 24 blocks).
    Returns:
        a ``matplotlib.figure.Figure``.
    """
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    phases = tile_phases(T, BT, SB)
    NB, sb = _check_blocking(T, BT, SB)
    edges = np.minimum(np.arange(NB + 1) * BT, T)
    width = size + 2.8                                  # the grid, then the legend on the right
    fig = Figure(figsize=(width, size))
    left, axw = 0.8 / width, 0.8 * size / width
    ax = fig.add_axes((left, 0.12, axw, 0.78))
    cmap = ListedColormap([_COLORS[k] for k in range(4)])
    ax.pcolormesh(edges, edges, phases.numpy(), cmap=cmap, vmin=-0.5, vmax=3.5,
                  edgecolors="white" if NB <= 32 else "face", linewidth=0.6 if NB <= 32 else 0)
    if SB is not None:
        for s in range(sb, NB, sb):
            x = s * BT
            ax.plot([x, x], [x, T], color="black", lw=1.0)          # segment boundary (keys)
            ax.plot([0, x], [x, x], color="black", lw=1.0)          # segment boundary (queries)
    if query_block is not None:
        order = visit_order(T, BT, SB, query_block)
        y0, y1 = edges[query_block], edges[query_block + 1]
        ax.add_patch(Rectangle((0, y0), edges[query_block + 1], y1 - y0, fill=False, ec="#e63946", lw=2))
        if NB <= 24:
            for n, b in enumerate(order):
                ax.text((edges[b] + edges[b + 1]) / 2, (y0 + y1) / 2, "d" if n == 0 else str(n),
                        ha="center", va="center", fontsize=7, color="white")
    ax.set_xlim(0, T); ax.set_ylim(T, 0); ax.set_aspect("equal")
    ax.set_xlabel("key position j"); ax.set_ylabel("query position i")
    ax.tick_params(labelsize=7)
    teaching = SB is None
    labels = _phase_labels(split, teaching)
    counts = phase_counts(T, BT, SB)
    n_of = {DIAGONAL: counts["diagonal"], OWN_SEGMENT: counts["own segment"],
            EARLIER_SEGMENT: counts["earlier segments"]}
    handles = [Patch(color=_COLORS[k], label=f"{labels[k]}\n({n_of[k]} tiles)") for k in labels]
    if SB is not None:
        handles.append(Patch(fc="white", ec="black", label="segment boundary"))
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(left + axw + 0.02, 0.5),
               fontsize=7, frameon=False)
    if title is None:
        ns = -(-NB // sb)
        title = (f"T = {T}, BT = {BT}: {NB} blocks, one scan" if teaching else
                 f"T = {T}, BT = {BT}, SB = {sb}: {NB} blocks in {ns} segment{'s' if ns > 1 else ''}")
    ax.set_title(title, fontsize=9)
    return fig


def segment_figure(T: int, BT: int, SB: int, *, query: Optional[int] = None, key: Optional[int] = None):
    """Blocks and segments of a sequence, and what is precomputed for each (top), with the way one
    query meets one key of an earlier segment (bottom): the key moved to its segment's end, the query
    moved to its own segment's start by the thin scan (``Q0``), and one ``D x D`` product ``Om``
    for the whole segments in between.

    Args:
        T, BT, SB: sequence length, block length, blocks per segment (at least 3 segments are needed
            for a segment in between; fewer draw no ``Om`` bracket).
        query, key: token positions, the key in an earlier segment than the query (default: a query
            in the last segment, a key in the first).
    Returns:
        a ``matplotlib.figure.Figure``.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, Rectangle

    NB, SB = _check_blocking(T, BT, SB)
    L = SB * BT
    NS = -(-NB // SB)
    query = T - 1 - BT // 3 if query is None else query
    key = min(BT + BT // 3, T - 1) if key is None else key
    if not (0 <= key < query < T):
        raise ValueError(f"need 0 <= key < query < T, got key={key}, query={query}, T={T}")
    fig = Figure(figsize=(9, 4.6))
    ax = fig.add_axes((0.02, 0.02, 0.96, 0.96))
    ax.set_xlim(-0.02 * T, 1.02 * T); ax.set_ylim(-4.3, 2.2); ax.axis("off")
    shades = ["#e9f5f3", "#dbe7f0"]
    for s in range(NS):
        a, e = s * L, min((s + 1) * L, T)
        ax.add_patch(Rectangle((a, 0), e - a, 1, fc=shades[s % 2], ec="black", lw=1.2))
        ax.text((a + e) / 2, 1.55, f"segment {s}", ha="center", fontsize=10)
        ax.text((a + e) / 2, 1.15, r"$\mathrm{Seg}_{%d}$" % s, ha="center", fontsize=10, color="#1d3557")
    for b in range(1, NB):
        if b % SB:
            ax.plot([b * BT, b * BT], [0, 1], color="gray", lw=0.5)
    ks, kk = (query // BT) // SB, (key // BT) // SB
    if kk >= ks:
        raise ValueError(f"the key (position {key}, segment {kk}) must lie in an earlier segment than the "
                         f"query (position {query}, segment {ks})")
    # the key: to its block's end, then to its segment's end
    k_block_end, k_seg_end = min((key // BT + 1) * BT, T), min((kk + 1) * L, T)
    q_seg_start = ks * L
    ax.plot([k_block_end, k_block_end], [0, 1], color="#e76f51", lw=1.5, ls=":")   # the key's block end
    ax.plot([key], [0.5], "o", color="#e76f51", ms=6)
    ax.plot([query], [0.5], "o", color="#e63946", ms=6)
    ax.text(key, -0.25, "key j", ha="center", va="top", fontsize=10)
    ax.text(query, -0.25, "query i", ha="center", va="top", fontsize=10)

    def arrow(x0, x1, y, color, text):
        ax.add_patch(FancyArrowPatch((x0, y), (x1, y), arrowstyle="-|>", mutation_scale=10, color=color, lw=1.5))
        ax.text((x0 + x1) / 2, y - 0.12, text, ha="center", va="top", fontsize=10, color=color)

    arrow(key, k_seg_end, -0.85, "#e76f51", "key moved to its block's end, then to its\nsegment's end (precomputed: Kseg)")
    arrow(query, q_seg_start, -0.85, "#e63946",
          "own segment: thin scan,\nquery moved to its segment's start (Q0)")
    if ks - kk >= 2:
        arrow(q_seg_start, k_seg_end, -1.9, "#1d3557",
              r"one $D\times D$ product: $\Omega(%d, %d) = $" % (ks, kk)
              + " ".join(r"$\mathrm{Seg}_{%d}$" % s for s in range(ks - 1, kk, -1)) + " (precomputed)")
    ax.text(0, -2.75, "per block j:  UT matrix $\\mathcal{T}_j$,  $\\mathcal{T}_j W_j$,  keys at the block's end "
            "$\\overrightarrow{K}_j$,\n    $M_j = \\mathcal{T}_j\\,\\mathrm{strictLower}(W_j K_j^\\top)$",
            fontsize=10, va="center")
    ax.text(0, -3.45, "per segment k:  keys at the segment's end Kseg,  Seg$_k$ (a $D\\times D$ product)",
            fontsize=10, va="center")
    ax.text(0, -3.95, f"per pair of segments:  $\\Omega$ ({NS * (NS - 1) // 2} matrices of $D\\times D$ "
            f"for {NS} segments)", fontsize=10, va="center")
    ax.text(T / 2, 2.05, f"T = {T}, {NB} blocks of {BT}, {SB} blocks per segment", ha="center", fontsize=11)
    return fig


# ----------------------------------------------------------------------------------------------
# source, docstrings and records, for the chapter's listings
# ----------------------------------------------------------------------------------------------

def _python_function(obj):
    """The Python function behind ``obj``: a ``@triton.jit`` kernel keeps it in ``.fn``, compiled
    (``JITFunction``) or interpreted (``InterpretedFunction``, under ``TRITON_INTERPRET=1``)."""
    return getattr(obj, "fn", obj)


FOLD_MARK = "\u21aa "   # starts the continuation of a folded line


def fold_line(line: str, width: int) -> list:
    """``line`` folded at spaces into lines of at most ``width`` characters where it can be: each
    continuation keeps the line's indent and starts with :data:`FOLD_MARK`. A stretch without a space
    to break at stays longer than ``width``."""
    indent = " " * (len(line) - len(line.lstrip()))
    lead = indent + FOLD_MARK
    out, first = [], True
    while len(line) > width:
        lo = len(indent if first else lead) + 1
        cut = line.rfind(", ", lo, width)          # after a comma where one is in the second half
        cut = cut + 1 if cut > (lo + width) // 2 else line.rfind(" ", lo, width + 1)
        if cut < 0:
            break
        out.append(line[:cut].rstrip())
        line, first = lead + line[cut:].lstrip(), False
    return out + [line]


def source_excerpt(obj, start: Optional[str] = None, stop: Optional[str] = None, root=None,
                   width: Optional[int] = None) -> str:
    """The real source of ``obj`` (a Triton kernel or a Python function), from the first line that
    contains ``start`` up to (not including) the next line that contains ``stop``, or the end; headed
    by ``# path, lines a-b`` (path relative to ``root`` when given). A ``start`` that is not in the
    source, or a ``stop`` that is not after it, raises ``ValueError``: a listing whose marker has gone
    from the source fails the build instead of printing something the prose does not describe. With
    ``width``, lines longer than that are folded for a page (:func:`fold_line`); the line numbers in
    the header stay those of the file."""
    fn = _python_function(obj)
    lines, first = inspect.getsourcelines(fn)
    path = inspect.getsourcefile(fn)
    if root is not None and path is not None:
        path = os.path.relpath(path, str(root))
    name = getattr(fn, "__qualname__", repr(fn))
    i0, i1 = 0, len(lines)
    if start is not None:
        hits = [i for i, line in enumerate(lines) if start in line]
        if not hits:
            raise ValueError(f"start marker {start!r} is not in the source of {name}")
        i0 = hits[0]
    if stop is not None:
        ends = [i for i, line in enumerate(lines) if stop in line and i > i0]
        if not ends:
            raise ValueError(f"stop marker {stop!r} is not in the source of {name} after its start")
        i1 = ends[0]
    body = "".join(lines[i0:i1]).rstrip()
    if width is not None:
        doc = _docstring_span(lines) if i0 == 0 else None
        body = "\n".join(fit_to_width(body.splitlines(), width, doc))
    return f"# {path}, lines {first + i0}-{first + i1 - 1}\n" + body


def _docstring_span(lines) -> Optional[tuple]:
    """0-based first and last line of the docstring of the function whose source is ``lines``."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or ast.get_docstring(fn) is None:
        return None
    node = fn.body[0]
    if node.end_lineno is None:                          # (ast.parse sets it; a built tree may not)
        return None
    return node.lineno - 1, node.end_lineno - 1


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _fill(words: str, width: int, indent: str, prefix: str = "") -> list:
    import textwrap

    return textwrap.wrap(words, width, initial_indent=indent + prefix, subsequent_indent=indent + prefix,
                         break_long_words=False, break_on_hyphens=False)


def _reflow_docstring(lines: list, width: int) -> list:
    """A docstring's lines (opening quotes on the first, closing on the last) with each plain paragraph
    that has a line over ``width`` refilled; lists, indented blocks and ``Args:``-style sections keep
    their lines (folded where too long)."""
    indent, first = _indent(lines[0]), lines[0].strip()
    quote = first[:3]
    if quote not in ('"""', "'''") or not lines[-1].rstrip().endswith(quote):
        return [part for line in lines for part in fold_line(line, width)]
    alone = len(lines) > 1 and lines[-1].strip() == quote        # closing quotes on a line of their own
    text = [indent + first[3:]] + lines[1:]
    text[-1] = text[-1].rstrip()[:-3]
    paragraphs: List[Optional[List[str]]] = []           # None: a blank line between paragraphs
    cur: List[str] = []
    for line in text:
        if line.strip():
            cur.append(line)
        else:
            paragraphs += [cur, None] if cur else [None]
            cur = []
    paragraphs += [cur] if cur else []
    out = []
    for para in paragraphs:
        if para is None:
            out.append("")
            continue
        plain = all(_indent(line) == indent for line in para) and not any(
            line.strip().startswith(("* ", "- ", "+ ")) or line.rstrip().endswith(":") for line in para)
        if plain and any(len(line) > width - 3 for line in para):
            out += _fill(" ".join(line.strip() for line in para), width - 3, indent)
        else:
            out += [part for line in para for part in fold_line(line, width)]
    while out and not out[-1].strip():
        out.pop()
    out[0] = indent + quote + out[0][len(indent):]
    if alone:
        out.append(indent + quote)
    else:
        out[-1] += quote
    return out


def fit_to_width(lines: list, width: int, docstring: Optional[tuple] = None) -> list:
    """Source ``lines`` made to fit ``width`` characters for a page: runs of whole-line comments with a
    line over ``width`` are refilled as one paragraph, so is each plain paragraph of the docstring at
    ``docstring`` (0-based first and last line), and every other long line is folded at a space
    (:func:`fold_line`). The code's tokens are unchanged; only where lines break differs."""
    out, i = [], 0
    while i < len(lines):
        if docstring is not None and i == docstring[0]:
            out += _reflow_docstring(lines[i:docstring[1] + 1], width)
            i = docstring[1] + 1
            continue
        line = lines[i]
        if line.lstrip().startswith("#"):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("#") and _indent(lines[j]) == _indent(line):
                j += 1
            block = lines[i:j]
            if any(len(b) > width for b in block):
                out += _fill(" ".join(b.strip()[1:].strip() for b in block), width, _indent(line), "# ")
            else:
                out += block
            i = j
            continue
        comment = _inline_comment(line) if len(line) > width else None
        if comment is not None:       # a long line's trailing comment goes on a line of its own above it
            code = line[:comment].rstrip()
            out += _fill(line[comment:].lstrip("#").strip(), width, _indent(line), "# ")
            out += fold_line(code, width)
        else:
            out += fold_line(line, width)
        i += 1
    return out


def _inline_comment(line: str) -> Optional[int]:
    """The column where ``line``'s trailing comment starts, when code comes before it; else None."""
    import io
    import tokenize

    try:
        for tok in tokenize.generate_tokens(io.StringIO(line + "\n").readline):
            if tok.type == tokenize.COMMENT:
                return tok.start[1] if line[:tok.start[1]].strip() else None
    except (tokenize.TokenError, SyntaxError):      # a line inside a longer statement: what was read
        pass
    return None


def kernel_docstrings(module, contains: str = "") -> dict:
    """``{name: docstring}`` of the ``@triton.jit`` kernels in ``module`` whose name contains
    ``contains``, in definition order. A kernel is recognised by its ``.fn`` attribute, which works
    compiled and under ``TRITON_INTERPRET=1`` alike (the classes differ)."""
    out = {}
    for name, obj in vars(module).items():
        fn = getattr(obj, "fn", None)
        if fn is not None and callable(fn) and contains in name:
            out[name] = inspect.getdoc(fn) or "(no docstring)"
    return out


def compile_table(data: dict, dtypes=None, head_dim: Optional[int] = None) -> str:
    """A Markdown table of a compile report (``RECORDS["compile_sm90"]``): registers, shared memory and
    spills per kernel, optionally only for the given dtypes (e.g. ``("bf16",)``). With ``head_dim`` only
    the rows of that head dim, in six narrow columns (kernel, warps, stages, shared KiB, registers per
    thread, spilled bytes per thread), so that the table fits a page's text column."""
    if head_dim is not None:
        return _compile_table_narrow(data, dtypes, head_dim)
    lines = ["| dtype | D | BT | kernel | warps | stages | shared memory | registers / thread | spilled bytes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in data.get("rows", []):
        if dtypes and r.get("dtype") not in dtypes:
            continue
        head = f"| {r.get('dtype')} | {r.get('D')} | {r.get('BT')} | `{r.get('kernel')}` "
        if r.get("error"):
            lines.append(head + f"| - | - | failed: {str(r['error'])[:60]} | - | - |")
            continue
        lines.append(head + f"| {r['num_warps']} | {r.get('num_stages', '-')} | "
                     f"{r['shared_bytes'] / 1024:.0f} KiB | {r['regs']} | {r['stack_bytes']} |")
    return "\n".join(lines)


def table_columns(table: str, columns) -> str:
    """The Markdown ``table`` (a header row, a separator row, body rows; lines that do not start with
    ``|`` are kept as they are, before the table) cut to ``columns``: header names or 0-based indices,
    in the order given, each optionally as a pair ``(column, new header)``. Splits or narrows a table
    that a helper returns so that it fits a page."""
    lines = table.strip("\n").splitlines()
    lead = [line for line in lines if not line.startswith("|")]
    rows = [[cell.strip() for cell in line.strip()[1:-1].split("|")]
            for line in lines if line.startswith("|")]
    if len(rows) < 2:
        raise ValueError("table: expected a Markdown table with a header and a separator row")
    index, names = [], []
    for col in columns:
        col, name = col if isinstance(col, tuple) else (col, None)
        names.append(name)
        if isinstance(col, int) and not isinstance(col, bool):
            if not 0 <= col < len(rows[0]):
                raise ValueError(f"columns: index {col} outside the table's {len(rows[0])} columns")
            index.append(col)
        elif col in rows[0]:
            index.append(rows[0].index(col))
        else:
            raise ValueError(f"columns: {col!r} is not a header of the table {rows[0]}")
    rows[0] = [rows[0][i] if name is None else name for i, name in zip(index, names)]
    body = ["| " + " | ".join(rows[0]) + " |"]
    body += ["| " + " | ".join(row[i] for i in index) + " |" for row in rows[1:]]
    body[1] = "|" + "|".join(rows[1][i] if rows[1][i].strip("-:") == "" else "---" for i in index) + "|"
    return "\n".join(lead + body)


def _compile_table_narrow(data: dict, dtypes, head_dim: int) -> str:
    lines = ["| kernel | warps | stages | shared KiB | registers | spilled bytes |",
             "|---|--:|--:|--:|--:|--:|"]
    for r in data.get("rows", []):
        if (dtypes and r.get("dtype") not in dtypes) or r.get("D") != head_dim:
            continue
        if r.get("error"):
            lines.append(f"| `{r.get('kernel')}` | - | - | failed: {str(r['error'])[:40]} | - | - |")
            continue
        lines.append(f"| `{r.get('kernel')}` | {r['num_warps']} | {r.get('num_stages', '-')} | "
                     f"{r['shared_bytes'] / 1024:.0f} | {r['regs']} | {r['stack_bytes']} |")
    return "\n".join(lines)


def random_inputs(B: int, T: int, Hq: int, Hk: int, D: int, *, dtype=torch.float32, gate: bool = True,
                  seed: int = 0, device="cpu"):
    """Fresh inputs in the public layout: q ``[B, T, Hq, D]``, k, v ``[B, T, Hk, D]`` in ``dtype``; unit
    w ``[B, T, Hk, D]`` and beta ``[B, T, Hk]`` uniform in [0, 2], float32; log gates g ``[B, T, Hq]``
    float32 (None without ``gate``). Drawn on the CPU from ``seed``, then moved to ``device``."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, Hq, D, generator=g)
    k, v = (torch.randn(B, T, Hk, D, generator=g) for _ in range(2))
    w = torch.randn(B, T, Hk, D, generator=g)
    w = w / w.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    beta = 2 * torch.rand(B, T, Hk, generator=g)
    gl = torch.nn.functional.logsigmoid(torch.randn(B, T, Hq, generator=g) + 2) if gate else None
    to = lambda x, dt: None if x is None else x.to(device=device, dtype=dt)  # noqa: E731
    return (to(q, dtype), to(k, dtype), to(v, dtype), to(w, torch.float32), to(beta, torch.float32),
            to(gl, torch.float32))
