"""The book's one figure style: resolution and font sizes, as matplotlib rcParams.

Importing :mod:`path_lib.book` (every chapter imports one of its helpers before it draws) applies
it, so chapters set no resolution or font size of their own::

    from path_lib.book import style
    style.apply()                          # again, e.g. after matplotlib.rcdefaults()
    style.small_text(fig)                  # texts of a Figure under MIN_TEXT_PX on the page

Figures are rendered at :data:`DPI` (150). On the page a figure is shown at its natural size, or
scaled down to the content column (:data:`COLUMN_PX`, about 684 px in a 1280 px window) when wider.
So a text of ``pt`` points is ``pt / 72 * DPI * min(1, COLUMN_PX / width_px)`` pixels high on the
page (:func:`text_px_on_page`): the style's smallest size, 10 pt, stays at or above
:data:`MIN_TEXT_PX` (10 px) for figures up to about 9.5 inches wide (with the margins that the
notebook's tight bounding box adds).
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple, cast

__all__ = ["DPI", "COLUMN_PX", "MIN_TEXT_PX", "RC", "apply", "text_px_on_page", "small_text"]

#: Resolution of every figure, on screen (inline output) and saved (widget frames).
DPI = 150
#: Width of the book's content column in a 1280 px window (book/_static/path_book.css).
COLUMN_PX = 684
#: Smallest text height on the page, in CSS pixels, that legends and tick labels may have.
MIN_TEXT_PX = 10.0

RC: Dict[str, object] = {
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "font.size": 11,
    "axes.titlesize": 11,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "legend.title_fontsize": 10,
    "figure.titlesize": 12,
}


def apply() -> None:
    """Set :data:`RC` in matplotlib's rcParams (a no-op without matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        return
    cast(Any, matplotlib.rcParams).update(RC)


def text_px_on_page(points: float, width_px: float, dpi: float = DPI,
                    column_px: float = COLUMN_PX) -> float:
    """Height in CSS pixels, on the page, of a ``points``-point text in a figure image ``width_px``
    pixels wide rendered at ``dpi`` (scaled down to ``column_px`` when wider)."""
    for name, value in (("points", points), ("width_px", width_px), ("dpi", dpi),
                        ("column_px", column_px)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return points / 72.0 * dpi * min(1.0, column_px / width_px)


def small_text(fig, min_px: float = MIN_TEXT_PX) -> List[Tuple[str, float]]:
    """``(text, px)`` for every visible, non-empty text of the matplotlib ``fig`` that would be
    under ``min_px`` on the page, the figure being saved as the notebook saves it (tight bounding
    box, at the figure's dpi)."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    canvas = fig.canvas
    if not hasattr(canvas, "get_renderer"):       # a bare Figure(): draw it with Agg
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    width_px = (fig.get_tightbbox(renderer).width + 0.2) * fig.dpi   # 0.1 in padding each side
    out = []
    for text in fig.findobj(Text):
        if not (text.get_visible() and text.get_text().strip()):
            continue
        if not text.get_window_extent(renderer).width > 0:
            continue
        px = text_px_on_page(float(text.get_fontsize()), width_px, fig.dpi)
        if px < min_px:
            out.append((text.get_text(), round(px, 1)))
    return out
