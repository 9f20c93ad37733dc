"""The kernel chapter's diagrams and helpers (path_lib/book/kernel_diagrams.py): the tile classification
against the kernel's loop bounds and the operation counts of path_lib.theory.costs, the figures, the source
and docstring helpers, the compile table and the inputs."""
from __future__ import annotations

import types

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from path_lib.theory import costs  # noqa: E402
from path_lib.book.kernel_diagrams import (DIAGONAL, EARLIER_SEGMENT, NOT_COMPUTED, OWN_SEGMENT,  # noqa: E402
                                           compile_table, fit_to_width, fold_line, kernel_docstrings, table_columns, phase_counts, random_inputs,
                                           segment_figure, source_excerpt, tile_grid_figure, tile_phases,
                                           visit_order)


def test_tile_phases_by_hand():
    # 5 blocks of 16 (the last one 4 tokens long), segments of 2 blocks: {0, 1}, {2, 3}, {4}
    p = tile_phases(68, 16, 2)
    D, O, E, N = DIAGONAL, OWN_SEGMENT, EARLIER_SEGMENT, NOT_COMPUTED
    expected = torch.tensor([[D, N, N, N, N],
                             [O, D, N, N, N],
                             [E, E, D, N, N],
                             [E, E, O, D, N],
                             [E, E, E, E, D]])
    assert torch.equal(p, expected)


@pytest.mark.parametrize("T,BT,SB", [(1000, 64, 4), (4096, 64, 6), (100, 16, 3), (64, 16, 1), (50, 16, 8)])
def test_tile_phases_follow_the_kernel_loops(T, BT, SB):
    """Re-derive each tile from _fwd_kernel's own loop bounds: own segment j = c-1 ... (c // SB) * SB,
    earlier segments kseg = c // SB - 1 ... 0 with blocks kseg * SB + 0 ... SB - 1."""
    p = tile_phases(T, BT, SB)
    NB = -(-T // BT)
    for c in range(NB):
        a_blk = (c // SB) * SB
        own = {c - 1 - j for j in range(c - a_blk)}
        earlier = {kseg * SB + jb for kseg in range(c // SB) for jb in range(SB)}
        for b in range(NB):
            want = (DIAGONAL if b == c else OWN_SEGMENT if b in own else EARLIER_SEGMENT if b in earlier
                    else NOT_COMPUTED)
            assert int(p[c, b]) == want, (c, b)
        order = visit_order(T, BT, SB, c)
        assert sorted(order) == list(range(c + 1)) and order[0] == c


@pytest.mark.parametrize("T,D,BT,SB", [(4096, 64, 64, 6), (1000, 128, 64, 4), (300, 32, 16, 2)])
def test_tile_counts_match_the_operation_counts(T, D, BT, SB):
    """path_lib.theory.costs counts 8 BT^2 D per own-segment tile and 4 BT^2 D per earlier-segment tile (its
    tests emulate the kernel's loops tile by tile): the classification must give the same totals."""
    n = phase_counts(T, BT, SB)
    c = costs.path_segmented_cost(T, D, block_size=BT, seg_blocks=SB).flops_by_part
    assert n["diagonal"] == -(-T // BT)
    assert 8 * BT * BT * D * n["own segment"] == c["kernel_own_segment"]
    assert 4 * BT * BT * D * n["earlier segments"] == c["kernel_earlier_segments"]


def test_one_segment_is_the_blockwise_scan():
    p = tile_phases(100, 16, None)
    assert torch.equal(p, tile_phases(100, 16, 7))
    assert not (p == EARLIER_SEGMENT).any()
    assert visit_order(100, 16, None, 6) == [6, 5, 4, 3, 2, 1, 0]
    assert phase_counts(100, 16) == {"diagonal": 7, "own segment": 21, "earlier segments": 0}


@pytest.mark.parametrize("bad", [dict(T=0, BT=16), dict(T=10, BT=0), dict(T=10, BT=16, SB=0),
                                 dict(T=10.0, BT=16), dict(T=10, BT=16, SB=True)])
def test_bad_blocking(bad):
    with pytest.raises(ValueError):
        tile_phases(**bad)


def test_bad_query_block():
    with pytest.raises(ValueError, match="query_block"):
        visit_order(100, 16, 2, 7)


def test_figures():
    figs = [tile_grid_figure(1000, 64, 4, query_block=13), tile_grid_figure(100, 16, None, query_block=5),
            tile_grid_figure(4096, 64, 6, split=False), segment_figure(1024, 64, 4),
            segment_figure(200, 16, 2, query=150, key=40), segment_figure(64, 16, 2)]
    for fig in figs:
        assert isinstance(fig, Figure)
        fig.canvas.draw()
    legend = [t.get_text() for t in figs[0].legends[0].get_texts()]
    assert any("_fwd_inter_kernel" in t and "(96 tiles)" in t for t in legend), legend
    assert any("_fwd_kernel," in t for t in [t.get_text() for t in figs[2].legends[0].get_texts()])
    with pytest.raises(ValueError):
        segment_figure(100, 16, 2, query=10, key=20)
    with pytest.raises(ValueError, match="earlier segment"):
        segment_figure(100, 16, 2, query=30, key=20)


def _documented(x):
    """a function with a docstring"""
    y = x + 1   # marker-a
    z = y * 2   # marker-b
    return z


def test_source_excerpt():
    full = source_excerpt(_documented)
    assert full.startswith("# ") and "def _documented" in full and "return z" in full
    part = source_excerpt(_documented, "marker-a", "marker-b")
    assert part.splitlines()[1].strip().startswith("y = x + 1") and "z = y" not in part
    with pytest.raises(ValueError, match="no-such-marker"):
        source_excerpt(_documented, "no-such-marker")
    with pytest.raises(ValueError, match="marker-a"):
        source_excerpt(_documented, "marker-b", "marker-a")      # the stop marker comes before the start


def test_kernel_docstrings_recognise_kernels_by_fn():
    fake = types.SimpleNamespace(fn=_documented)   # what @triton.jit returns, compiled or interpreted
    mod = types.ModuleType("m")
    mod._bwd_fake_kernel, mod._fwd_fake_kernel, mod._bwd_plain = fake, fake, _documented
    assert kernel_docstrings(mod, "bwd") == {"_bwd_fake_kernel": "a function with a docstring"}


def test_kernel_docstrings_of_the_real_kernels():
    pytest.importorskip("triton")
    from path_lib.kernels import _triton_kernels
    docs = kernel_docstrings(_triton_kernels, "bwd")
    assert {"_bwd_inter_q_kernel", "_bwd_inter_kv_kernel", "_bwd_intra_kernel", "_bwd_diag_kernel",
            "_bwd_block_kernel"} <= set(docs)
    assert all(d and d != "(no docstring)" for d in docs.values())


def test_compile_table():
    data = {"rows": [dict(dtype="bf16", D=64, BT=64, kernel="_fwd_kernel", num_warps=4, num_stages=1,
                          shared_bytes=12288, regs=168, stack_bytes=0),
                     dict(dtype="fp32", D=64, BT=32, kernel="_fwd_kernel", num_warps=4, shared_bytes=1024,
                          regs=100, stack_bytes=0),
                     dict(dtype="bf16", D=128, BT=64, kernel="_ut_kernel", error="out of resources")]}
    table = compile_table(data, dtypes=("bf16",))
    lines = table.splitlines()
    assert len(lines) == 4 and "| 12 KiB | 168 | 0 |" in lines[2] and "failed: out of resources" in lines[3]
    assert len(compile_table(data).splitlines()) == 5
    narrow = compile_table(data, dtypes=("bf16",), head_dim=64).splitlines()
    assert len(narrow) == 3 and narrow[2] == "| `_fwd_kernel` | 4 | 1 | 12 | 168 | 0 |"


def test_random_inputs():
    q, k, v, w, beta, g = random_inputs(2, 9, 4, 2, 16, seed=3)
    assert q.shape == (2, 9, 4, 16) and k.shape == v.shape == w.shape == (2, 9, 2, 16)
    assert beta.shape == (2, 9, 2) and g.shape == (2, 9, 4) and (g <= 0).all()
    assert torch.allclose(w.norm(dim=-1), torch.ones(2, 9, 2)) and 0 <= beta.min() and beta.max() <= 2
    again = random_inputs(2, 9, 4, 2, 16, seed=3, gate=False)
    assert torch.equal(again[0], q) and again[5] is None


def test_table_columns():
    table = "| a | b | c |\n|---|--:|---|\n| 1 | 2 | 3 |\n| 4 | 5 | 6 |"
    assert table_columns(table, ["c", 0]) == "| c | a |\n|---|---|\n| 3 | 1 |\n| 6 | 4 |"
    assert table_columns(table, [1]).splitlines()[1] == "|--:|"
    assert table_columns(table, [("b", "B"), 0]).splitlines()[0] == "| B | a |"
    with pytest.raises(ValueError, match="'d'"):
        table_columns(table, ["d"])
    with pytest.raises(ValueError, match="index 3"):
        table_columns(table, [3])


def test_fold_line():
    line = "    result = some_function(alpha, beta, gamma, delta, epsilon)  # a comment that runs on"
    parts = fold_line(line, 40)
    assert all(len(p) <= 40 for p in parts) and len(parts) > 1
    assert all(p.startswith("    \u21aa ") for p in parts[1:])
    assert " ".join(p.replace("\u21aa ", "") for p in parts).split() == line.split()
    assert fold_line("short", 40) == ["short"]
    assert fold_line("x" * 50, 40) == ["x" * 50]             # nowhere to break: left long
    folded = source_excerpt(_documented, width=20)
    assert all(len(line) <= 20 for line in folded.splitlines()[1:])
    assert "    # marker-a\n    y = x + 1" in folded and "return z" in folded


def test_fit_to_width_refills_comments_and_plain_docstring_paragraphs():
    src = ['def f(x):',
           '    """A docstring paragraph whose single line is much longer than the page allows here.',
           '',
           '    * a list item that is long enough to need folding, which must stay a list item, yes',
           '    """',
           '    # a comment block whose first line is long enough to go over the width of the page',
           '    # and a second line',
           '    return x  # short']
    out = fit_to_width(src, 40, docstring=(1, 4))
    assert all(len(line) <= 40 for line in out)
    assert out[1].startswith('    """A docstring') and out[-1] == "    return x  # short"
    doc = out[1:out.index('    """') + 1]
    assert " ".join(doc[:doc.index("")]).split() == \
        '"""A docstring paragraph whose single line is much longer than the page allows here.'.split()
    item = [line for line in doc if line.strip().startswith(("* ", "\u21aa"))]
    assert item[0].strip().startswith("* a list item") and len(item) > 1      # folded, not refilled
    comments = [line for line in out if line.strip().startswith("#")]
    assert all(c.startswith("    # ") for c in comments)
    assert " ".join(c.strip()[2:] for c in comments).split() == \
        "a comment block whose first line is long enough to go over the width of the page and a second line".split()


def test_fit_to_width_moves_a_long_lines_comment_above_it():
    out = fit_to_width(["    total = alpha + beta + gamma          # the sum of the three terms"], 40)
    assert out == ["    # the sum of the three terms", "    total = alpha + beta + gamma"]
    assert fit_to_width(['    s = "a # b" + name_of_something_long_enough'], 40)[0].startswith('    s = "a # b"')
