"""Interactive figures that work in a live kernel *and* on the static (offline) book site.

One call, two behaviours::

    from path_lib.book.widgets import interactive_figure

    def render(beta, length):
        fig, ax = plt.subplots(figsize=(4, 3))
        ...                                   # draw for this (beta, length)
        return fig                            # a matplotlib Figure; closed for you

    interactive_figure(render, beta=[0, 0.5, 1, 1.5, 2], length=[1, 2, 4, 8])

- Live Jupyter / Colab (ipywidgets importable, ``PATH_BOOK_STATIC`` unset): ``ipywidgets.interact``
  with one ``SelectionSlider`` per parameter over exactly these values.
- Static mode (``PATH_BOOK_STATIC=1``, which ``make book`` sets, or no ipywidgets): every combination
  is rendered once to PNG and emitted as one self-contained HTML block with ``<input type="range">``
  sliders and a few lines of inline JavaScript that swap the image. No external library, no network.

The HTML has stable hooks for tests and styling: the container ``div.path-widget`` (attribute
``data-frames`` = number of images, ``data-frame`` = index shown), sliders
``input.path-widget-slider[data-param=<name>]``, current value labels ``span.path-widget-value``,
and the image ``img.path-widget-frame``.

Frames are ordered as ``itertools.product`` over the sliders in the order given (last slider fastest).
Keep grids small: every frame is a PNG inside the page. More than ``max_frames`` (200) is refused.
"""
from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import numbers
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from . import style

__all__ = ["interactive_figure", "static_widget_html", "static_mode", "MAX_FRAMES"]

MAX_FRAMES = 200
_counter = itertools.count()


def static_mode() -> bool:
    """True when widgets must be rendered as static HTML (book build, or no ipywidgets)."""
    if os.environ.get("PATH_BOOK_STATIC") == "1":
        return True
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return True
    return False


def _label(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{float(value):.4g}"


def _check_grids(render: Callable, sliders: Dict[str, Sequence], max_frames: int) -> Dict[str, List]:
    if not callable(render):
        raise TypeError(f"render must be callable, got {type(render).__name__}")
    if not sliders:
        raise ValueError("interactive_figure needs at least one slider, e.g. beta=[0, 1, 2]")
    grids: Dict[str, List] = {}
    for name, values in sliders.items():
        # str is iterable and sets/dicts have no order: all are almost certainly mistakes.
        if isinstance(values, (str, bytes, set, frozenset, dict)) or not hasattr(values, "__iter__"):
            raise ValueError(f"slider {name!r} must be a list of values, got {type(values).__name__}")
        # numpy / torch scalars -> Python numbers, so labels read "0.5", not "tensor(0.5000)"
        values = [v.item() if getattr(v, "ndim", None) == 0 and hasattr(v, "item") else v for v in values]
        if not values:
            raise ValueError(f"slider {name!r} has no values")
        labels = [_label(v) for v in values]
        if len(set(labels)) != len(labels):
            raise ValueError(f"slider {name!r} has repeated values: {labels}")
        grids[name] = values
    n = 1
    for values in grids.values():
        n *= len(values)
    if n > max_frames:
        sizes = " x ".join(str(len(v)) for v in grids.values())
        raise ValueError(f"slider grid has {n} combinations ({sizes}), more than max_frames={max_frames}: "
                         "use fewer values per slider")
    return grids


def _initial_indices(grids: Dict[str, List], initial: Optional[Dict[str, Any]]) -> List[int]:
    initial = dict(initial or {})
    unknown = set(initial) - set(grids)
    if unknown:
        raise ValueError(f"initial names unknown sliders: {sorted(unknown)}")
    out = []
    for name, values in grids.items():
        if name not in initial:
            out.append(0)
            continue
        labels = [_label(v) for v in values]
        want = _label(initial[name])
        if want not in labels:
            raise ValueError(f"initial value {initial[name]!r} for slider {name!r} is not one of {labels}")
        out.append(labels.index(want))
    return out


def _figure_png(fig, dpi: Optional[int]) -> str:
    """Render a matplotlib Figure to base64 PNG, then close it (figures must not leak).
    ``dpi=None``: the book's style (:data:`path_lib.book.style.DPI`)."""
    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise TypeError(f"render must return a matplotlib Figure, got {type(fig).__name__}")
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=style.DPI if dpi is None else dpi, bbox_inches="tight",
                    metadata={"Software": None})
        return base64.b64encode(buf.getvalue()).decode("ascii")
    finally:
        _close(fig)


def _close(fig) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)  # harmless for figures that pyplot never knew about


_JS = """
(function () {
  var root = document.getElementById("%(id)s");
  if (!root || root.getAttribute("data-ready") === "1") { return; }
  root.setAttribute("data-ready", "1");
  var data = JSON.parse(root.querySelector("script.path-widget-data").textContent);
  var sliders = root.querySelectorAll("input.path-widget-slider");
  var img = root.querySelector("img.path-widget-frame");
  function update() {
    var idx = 0, parts = [];
    for (var k = 0; k < sliders.length; k++) {
      var i = parseInt(sliders[k].value, 10), label = data.labels[k][i];
      idx = idx * data.labels[k].length + i;
      sliders[k].parentNode.querySelector(".path-widget-value").textContent = label;
      sliders[k].setAttribute("aria-valuetext", label);
      parts.push(data.names[k] + " = " + label);
    }
    img.src = "data:image/png;base64," + data.frames[idx];
    img.alt = data.title + " (" + parts.join(", ") + ")";
    root.setAttribute("data-frame", String(idx));
  }
  for (var k = 0; k < sliders.length; k++) {
    sliders[k].addEventListener("input", update);
    sliders[k].addEventListener("change", update);
  }
  update();
})();
"""

_CSS = (".path-widget{margin:0.5em 0 1em 0}"
        ".path-widget-controls{display:flex;flex-wrap:wrap;gap:0.4em 1.5em;margin-bottom:0.4em}"
        ".path-widget-control{display:flex;align-items:center;gap:0.5em;font-family:monospace}"
        ".path-widget-value{min-width:4em}"
        ".path-widget-frame{max-width:100%;height:auto}")


def static_widget_html(render: Callable[..., Any], *, initial: Optional[Dict[str, Any]] = None,
                       title: Optional[str] = None, dpi: Optional[int] = None, max_frames: int = MAX_FRAMES,
                       **sliders: Sequence) -> str:
    """Render every combination of the slider grids and return the self-contained HTML (a str)."""
    grids = _check_grids(render, sliders, max_frames)
    start = _initial_indices(grids, initial)
    names = list(grids)
    frames = []
    for combo in itertools.product(*grids.values()):
        frames.append(_figure_png(render(**dict(zip(names, combo))), dpi))
    labels = [[_label(v) for v in grids[n]] for n in names]
    title = title or str(getattr(render, "__name__", "figure"))
    digest = hashlib.sha1("".join(frames[:3]).encode() + repr(labels).encode()).hexdigest()[:10]
    wid = f"path-widget-{digest}-{next(_counter)}"

    idx = 0
    for k, i in enumerate(start):
        idx = idx * len(labels[k]) + i
    controls = []
    for k, name in enumerate(names):
        controls.append(
            f'<label class="path-widget-control">{html.escape(name)} '
            f'<input type="range" class="path-widget-slider" data-param="{html.escape(name)}" '
            f'min="0" max="{len(labels[k]) - 1}" step="1" value="{start[k]}" '
            f'aria-label="{html.escape(name)}" aria-valuetext="{html.escape(labels[k][start[k]])}"> '
            f'<span class="path-widget-value">{html.escape(labels[k][start[k]])}</span></label>')
    payload = json.dumps({"names": names, "labels": labels, "frames": frames, "title": title})
    payload = payload.replace("</", "<\\/")  # never close the <script> early
    alt = title + " (" + ", ".join(f"{n} = {labels[k][start[k]]}" for k, n in enumerate(names)) + ")"
    return (
        f'<div class="path-widget" id="{wid}" data-frames="{len(frames)}" data-frame="{idx}">'
        f"<style>{_CSS}</style>"
        f'<div class="path-widget-controls">{"".join(controls)}</div>'
        f'<img class="path-widget-frame" alt="{html.escape(alt)}" src="data:image/png;base64,{frames[idx]}">'
        f'<script type="application/json" class="path-widget-data">{payload}</script>'
        f"<script>{_JS % {'id': wid}}</script>"
        "</div>"
    )


def interactive_figure(render: Callable[..., Any], *, initial: Optional[Dict[str, Any]] = None,
                       title: Optional[str] = None, dpi: Optional[int] = None, max_frames: int = MAX_FRAMES,
                       **sliders: Sequence) -> None:
    """Show ``render(**values)`` with one slider per keyword argument, live or static (see module doc).

    Args:
        render: called with one keyword per slider, returns a ``matplotlib.figure.Figure``
            (it is closed after use; create it with ``plt.subplots`` or ``Figure``).
        initial: optional ``{name: value}`` for the starting position (default: each first value).
        title: alt text prefix for the static image (default: ``render.__name__``).
        dpi: resolution of the static PNG frames (default: the book's, :data:`path_lib.book.style.DPI`).
        max_frames: refuse grids with more combinations than this (ValueError).
        **sliders: ``name=[v0, v1, ...]``; names must not be ``initial``, ``title``, ``dpi``, ``max_frames``.
    Displays the widget and returns None.
    """
    from IPython.display import HTML, display

    if static_mode():
        display(HTML(static_widget_html(render, initial=initial, title=title, dpi=dpi,
                                        max_frames=max_frames, **sliders)))
        return None

    import ipywidgets as widgets

    grids = _check_grids(render, sliders, max_frames)
    start = _initial_indices(grids, initial)
    controls = {
        name: widgets.SelectionSlider(
            options=[(_label(v), v) for v in values], value=values[start[k]], description=name,
            continuous_update=False, style={"description_width": "initial"})
        for k, (name, values) in enumerate(grids.items())
    }

    def show(**values):
        fig = render(**values)
        from matplotlib.figure import Figure

        if not isinstance(fig, Figure):
            raise TypeError(f"render must return a matplotlib Figure, got {type(fig).__name__}")
        try:
            display(fig)
        finally:
            _close(fig)

    widgets.interact(show, **controls)
    return None
