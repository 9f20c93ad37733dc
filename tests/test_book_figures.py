"""The book's one figure style (path_lib/book/style.py) and the figures the build emits.

- Importing path_lib.book applies the style (150 dpi, fonts of 10 pt and more), so every chapter has
  it without settings of its own.
- The book's plotting helpers draw no text under 10 px on the page, and their heatmaps have labelled
  axes and a colour bar.
- Every figure of the built site (_build/html: cell outputs in _images/ and the frames of static
  widgets) is a PNG of at least 150 dpi, narrow enough that the style's smallest text (10 pt) stays
  at 10 px or more once the page scales the image down to its column. Without a build: skipped
  locally, failed when $CI is set, as in tests/test_book_browser.py.
"""
from __future__ import annotations

import base64
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from path_lib.book import kernel_diagrams, style, viz  # noqa: E402  (applies the style)
from path_lib.book.notebook import toc_files  # noqa: E402
from site_helpers import HTML, built_html

ROOT = Path(__file__).resolve().parent.parent


def test_importing_the_book_helpers_applies_the_style():
    code = ("import matplotlib; before = matplotlib.rcParams['figure.dpi']; "
            "import path_lib.book.notebook; rc = matplotlib.rcParams; "
            "print(before, rc['figure.dpi'], rc['savefig.dpi'], rc['legend.fontsize'], rc['xtick.labelsize'])")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env={**os.environ, "MPLBACKEND": "Agg"}).stdout.split()
    assert float(out[0]) != style.DPI, "matplotlib's default already 150 dpi: the test proves nothing"
    assert [float(x) for x in out[1:]] == [style.DPI, style.DPI, 10.0, 10.0]


def test_style_sizes_stay_legible():
    sizes = [v for k, v in style.RC.items() if "size" in k]
    assert min(sizes) >= 10
    # 10 pt in a narrow figure at 150 dpi: 20.8 px; a 9 in wide one is scaled down to the column
    assert style.text_px_on_page(10, 600) == pytest.approx(10 / 72 * 150)
    assert style.text_px_on_page(10, 9 * 150) == pytest.approx(10 / 72 * 150 * 684 / 1350)
    assert style.text_px_on_page(10, 9 * 150) >= style.MIN_TEXT_PX
    assert style.text_px_on_page(10, 12 * 150) < style.MIN_TEXT_PX


@pytest.mark.parametrize("bad", [0, -1, "10", None, True])
def test_text_px_on_page_rejects_bad_numbers(bad):
    with pytest.raises(ValueError, match="points"):
        style.text_px_on_page(bad, 600)


def test_small_text_finds_small_legends():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3))
    ax.plot([0, 1], label="a line")
    ax.legend(fontsize=6)
    found = style.small_text(fig)
    assert [t for t, _ in found] == ["a line"], found
    ax.legend()
    assert style.small_text(fig) == []
    plt.close(fig)
    with pytest.raises(TypeError, match="fig"):
        style.small_text(ax)


def _maps(n=3, T=12):
    gen = torch.Generator().manual_seed(0)
    return {f"map {i}": viz.causal_softmax(torch.randn(T, T, generator=gen)) for i in range(n)}


def test_heatmaps_have_labelled_axes_and_a_colour_bar():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3.4))
    viz.attention_heatmap(ax, _maps(1)["map 0"], title="one map")
    assert ax.get_xlabel() == "key j" and ax.get_ylabel() == "query i"
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "attention weight"   # the colour bar
    assert style.small_text(fig) == []
    plt.close(fig)

    fig = viz.attention_grid(_maps(5), ncols=3)
    heatmaps = [a for a in fig.axes if a.images]
    assert len(heatmaps) == 5
    # shared labels: each of the 3 columns named at its lowest panel, each of the 2 rows at its first
    assert sum(a.get_xlabel() == "key j" for a in heatmaps) == 3
    assert sum(a.get_ylabel() == "query i" for a in heatmaps) == 2
    assert sum(1 for a in fig.axes if a.get_ylabel() == "attention weight") == 1
    assert style.small_text(fig) == []
    plt.close(fig)


@pytest.mark.parametrize("make", [
    lambda: kernel_diagrams.tile_grid_figure(100, 16, None, query_block=5, size=3.4),
    lambda: kernel_diagrams.tile_grid_figure(1024, 64, 4, query_block=14),
    lambda: kernel_diagrams.segment_figure(1024, 64, 4),
], ids=["tiles-scan", "tiles-segments", "segments"])
def test_kernel_diagrams_are_legible(make):
    fig = make()
    assert fig.dpi == style.DPI
    assert style.small_text(fig) == []


# --- the built site --------------------------------------------------------------------------
def png_info(data: bytes) -> tuple:
    """(width px, height px, dpi or None) of a PNG, from its IHDR and pHYs chunks."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    pos, dpi = 8, None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"pHYs":
            x_per_unit, _, unit = struct.unpack(">IIB", data[pos + 8:pos + 17])
            dpi = x_per_unit * 0.0254 if unit == 1 else None
        if kind in (b"pHYs", b"IDAT"):
            break
        pos += 12 + length
    return width, height, dpi


def test_png_info_reads_matplotlib_output():
    import io

    import matplotlib.pyplot as plt

    fig, _ = plt.subplots(figsize=(2, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=150)
    plt.close(fig)
    width, height, dpi = png_info(buf.getvalue())
    assert (width, height) == (300, 150) and dpi == pytest.approx(150, abs=0.1)


WIDGET_FRAMES = re.compile(r'class="path-widget-data">(.*?)</script>', re.S)
#: Images of cell outputs (Sphinx copies them to _images/; the theme's own icons live in _static/).
IMAGES = re.compile(r'<img[^>]+src="([^"]*_images/[^"]+\.png)"')


def built_figures():
    """(page, what, PNG bytes) for every figure of every page of the built book."""
    import json

    built_html()
    out = []
    for doc in toc_files(ROOT):
        page = HTML / f"{doc}.html"
        text = page.read_text()
        for src in IMAGES.findall(text):
            out.append((doc, src, (page.parent / src).resolve().read_bytes()))
        for k, blob in enumerate(WIDGET_FRAMES.findall(text)):
            frames = json.loads(blob.replace("<\\/", "</"))["frames"]
            out.extend((doc, f"widget {k} frame {i}", base64.b64decode(f)) for i, f in enumerate(frames))
    return out


def test_built_figures_are_sharp_and_legible():
    problems = []
    figures = built_figures()
    assert figures, "the built book has no figures: wrong build directory?"
    smallest_pt = min(v for k, v in style.RC.items() if "size" in k)
    for doc, what, data in figures:
        width, _, dpi = png_info(data)
        if dpi is None or dpi < style.DPI - 0.5:
            problems.append(f"{doc}: {what} at {dpi and round(dpi)} dpi (want {style.DPI})")
            continue
        px = style.text_px_on_page(smallest_pt, width, dpi)
        if px < style.MIN_TEXT_PX:
            problems.append(f"{doc}: {what} is {width} px wide: {smallest_pt} pt text shows at "
                            f"{px:.1f} px on the page")
    assert not problems, f"{len(problems)} of {len(figures)} figures:\n  " + "\n  ".join(problems)
