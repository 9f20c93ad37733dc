"""path_lib.book.widgets (static HTML sliders / live ipywidgets) and path_lib.book.notebook presets. Fast."""
from __future__ import annotations

import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from path_lib.book import notebook, widgets  # noqa: E402


def render(beta, length=1):
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [beta, length])
    return fig


def payload(html: str) -> dict:
    m = re.search(r'<script type="application/json" class="path-widget-data">(.*?)</script>', html, re.S)
    assert m, "no data block"
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_static_html_has_one_frame_per_combination():
    html = widgets.static_widget_html(render, dpi=20, beta=[0, 0.5, 1], length=[1, 2])
    data = payload(html)
    assert len(data["frames"]) == 6 and len(set(data["frames"])) == 6
    assert data["names"] == ["beta", "length"]
    assert data["labels"] == [["0", "0.5", "1"], ["1", "2"]]
    assert 'class="path-widget"' in html and 'data-frames="6"' in html
    assert html.count('class="path-widget-slider"') == 2
    assert 'data-param="beta"' in html and 'max="2"' in html and 'max="1"' in html
    assert 'class="path-widget-frame"' in html and "data:image/png;base64," in html
    assert "addEventListener(\"input\"" in html  # the inline JS that swaps frames
    assert "http://" not in html and "https://" not in html  # nothing fetched from the network
    assert plt.get_fignums() == []  # every rendered figure was closed


def test_frame_order_is_product_order_and_initial_value():
    seen = []

    def rec(a, b):
        seen.append((a, b))
        return render(a, b)

    html = widgets.static_widget_html(rec, dpi=20, initial={"a": 2, "b": 20}, a=[1, 2], b=[10, 20, 30])
    assert seen == [(1, 10), (1, 20), (1, 30), (2, 10), (2, 20), (2, 30)]
    assert 'data-frame="4"' in html  # (a=2, b=20): 1 * 3 + 1
    data = payload(html)
    assert f'src="data:image/png;base64,{data["frames"][4]}"' in html


def test_numpy_and_torch_values_get_plain_labels():
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    html = widgets.static_widget_html(render, dpi=20, beta=np.array([0.25, 0.5]), length=torch.tensor([1, 2]))
    assert payload(html)["labels"] == [["0.25", "0.5"], ["1", "2"]]


def test_ids_are_unique_per_call():
    a = widgets.static_widget_html(render, dpi=20, beta=[0, 1])
    b = widgets.static_widget_html(render, dpi=20, beta=[0, 1])
    ida = re.search(r'id="(path-widget-[^"]+)"', a).group(1)
    idb = re.search(r'id="(path-widget-[^"]+)"', b).group(1)
    assert ida != idb


def test_labels_are_escaped():
    html = widgets.static_widget_html(lambda mode: render(1.0), dpi=20, mode=["</script><b>", "x"])
    assert "</script><b>" not in html
    assert payload(html)["labels"] == [["</script><b>", "x"]]


@pytest.mark.parametrize("sliders, match", [
    ({}, "at least one slider"),
    ({"beta": []}, "no values"),
    ({"beta": "012"}, "list of values"),
    ({"beta": {0, 1}}, "list of values"),
    ({"beta": 3}, "list of values"),
    ({"beta": [1, 1.0]}, "repeated"),
    ({"a": list(range(15)), "b": list(range(14))}, "max_frames"),
])
def test_bad_grids_raise_value_error(sliders, match):
    with pytest.raises(ValueError, match=match):
        widgets.static_widget_html(render, **sliders)


def test_bad_initial_and_bad_render():
    with pytest.raises(ValueError, match="unknown sliders"):
        widgets.static_widget_html(render, initial={"gamma": 1}, beta=[0, 1])
    with pytest.raises(ValueError, match="not one of"):
        widgets.static_widget_html(render, initial={"beta": 7}, beta=[0, 1])
    with pytest.raises(TypeError, match="Figure"):
        widgets.static_widget_html(lambda beta: "not a figure", beta=[0, 1])
    with pytest.raises(TypeError, match="callable"):
        widgets.static_widget_html(None, beta=[0, 1])
    with pytest.raises(ValueError, match="max_frames=4"):
        widgets.static_widget_html(render, max_frames=4, beta=[0, 1, 2, 3, 4])


def test_interactive_figure_static_mode_displays_html(monkeypatch):
    shown = []
    monkeypatch.setenv("PATH_BOOK_STATIC", "1")
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    assert widgets.static_mode()
    assert widgets.interactive_figure(render, dpi=20, beta=[0, 1], length=[1, 2, 4]) is None
    assert len(shown) == 1
    assert 'data-frames="6"' in shown[0].data


def test_static_mode_without_ipywidgets(monkeypatch):
    monkeypatch.delenv("PATH_BOOK_STATIC", raising=False)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import fails
    assert widgets.static_mode()


def test_interactive_figure_live_mode_uses_selection_sliders(monkeypatch):
    ipywidgets = pytest.importorskip("ipywidgets")
    monkeypatch.delenv("PATH_BOOK_STATIC", raising=False)
    calls = {}
    monkeypatch.setattr(ipywidgets, "interact", lambda f, **kw: calls.update(f=f, kw=kw))
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    widgets.interactive_figure(render, initial={"length": 2}, beta=[0, 0.5], length=[1, 2])
    kw = calls["kw"]
    assert set(kw) == {"beta", "length"}
    assert all(isinstance(s, ipywidgets.SelectionSlider) for s in kw.values())
    assert [label for label, _ in kw["beta"].options] == ["0", "0.5"] and kw["length"].value == 2
    calls["f"](beta=0.5, length=2)  # what interact calls on a slider move
    assert len(shown) == 1 and plt.get_fignums() == []


def test_pick_preset(monkeypatch):
    tiny, full = {"T": 8}, {"T": 4096}
    monkeypatch.delenv("PATH_BOOK_PRESET", raising=False)
    expected = full if notebook.device() == "cuda" else tiny
    assert notebook.pick_preset(tiny, full) is expected
    monkeypatch.setenv("PATH_BOOK_PRESET", "full")
    assert notebook.pick_preset(tiny, full) is full
    monkeypatch.setenv("PATH_BOOK_PRESET", "tiny")
    assert notebook.pick_preset(tiny, full) is tiny
    monkeypatch.setenv("PATH_BOOK_PRESET", "huge")
    with pytest.raises(ValueError, match="PATH_BOOK_PRESET"):
        notebook.pick_preset(tiny, full)
