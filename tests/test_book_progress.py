"""path_lib.book.progress: the plain-text bar of the static build, the choice of bar, the counted work
and the expected-time note of the chapters' long cells."""
from __future__ import annotations

import io

import pytest

from path_lib.book import progress as pg
from path_lib.hardware import GPUS, estimate_seconds


def lines_of(total, updates, lines=4):
    out = io.StringIO()
    bar = pg.TextBar(total, "train", lines=lines, file=out)
    for n in updates:
        bar.update(n)
    bar.close()
    return out.getvalue().splitlines()


def test_text_bar_prints_start_quarters_and_end_once():
    got = lines_of(8, [1] * 8)
    counts = [line.split(":")[1].split("(")[0].strip() for line in got]
    assert counts == ["0/8", "2/8", "4/8", "6/8", "8/8"]
    assert got[-1].startswith("train: 8/8 (100%), ")


def test_text_bar_few_items_and_jumps():
    # fewer items than steps of the bar: a line per item, the end once
    assert [ln.split(" (")[0] for ln in lines_of(2, [1, 1])] == ["train: 0/2", "train: 1/2", "train: 2/2"]
    # one update past the end is clipped to the total; closing again prints nothing
    assert [ln.split(" (")[0] for ln in lines_of(3, [5])] == ["train: 0/3", "train: 3/3"]


def test_text_bar_as_context_manager_ends_even_if_unfinished():
    out = io.StringIO()
    with pg.TextBar(10, "eval", file=out) as bar:
        bar.update(3)
    assert out.getvalue().splitlines()[-1].startswith("eval: 3/10 (30%)")


@pytest.mark.parametrize("kw, err, name", [
    (dict(total=0), ValueError, "total"), (dict(total=2.0), TypeError, "total"),
    (dict(total=True), TypeError, "total"), (dict(total=3, lines=0), ValueError, "lines"),
    (dict(total=3, desc=1), TypeError, "desc")])
def test_text_bar_bad_input_names_the_argument(kw, err, name):
    with pytest.raises(err, match=name):
        pg.TextBar(**kw, file=io.StringIO())


def test_progress_bar_is_text_in_the_static_build(monkeypatch):
    monkeypatch.setenv("PATH_BOOK_STATIC", "1")
    assert pg.static_build()
    assert isinstance(pg.progress_bar(3, "x", file=io.StringIO()), pg.TextBar)
    monkeypatch.setenv("PATH_BOOK_STATIC", "0")
    assert not pg.static_build()
    bar = pg.progress_bar(3, "x", file=io.StringIO())
    assert not isinstance(bar, pg.TextBar) and hasattr(bar, "update")
    bar.close()


def test_training_work_counts_as_documented():
    d, layers, batch, length, steps = 64, 2, 16, 128, 10
    params = 12 * layers * d * d + 2 * 256 * d
    flops, nbytes, launches = pg.training_work(d, layers, batch, length, steps)
    assert flops == steps * (6 * params * batch * length + 12 * batch * length ** 2 * d * layers)
    assert nbytes == steps * 4 * (60 * layers * batch * length * d + 16 * params)
    assert launches == steps * (150 * layers + 100)
    # PaTH doubles the attention term only
    path_flops = pg.training_work(d, layers, batch, length, steps, path=True)[0]
    assert path_flops - flops == steps * 12 * batch * length ** 2 * d * layers


def test_evaluation_work_counts_as_documented():
    d, layers, tokens, length = 32, 1, 16384, 256
    params = 12 * layers * d * d + 2 * 256 * d
    flops, nbytes, launches = pg.evaluation_work(d, layers, tokens, length)
    assert flops == 2 * params * tokens + 4 * tokens * length * d * layers
    assert nbytes == 4 * 20 * layers * tokens * d
    assert launches == 2 * 50 * layers


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_work_bad_sizes_name_the_argument(bad):
    with pytest.raises((TypeError, ValueError), match="steps"):
        pg.training_work(8, 1, 1, 8, bad)
    with pytest.raises((TypeError, ValueError), match="tokens"):
        pg.evaluation_work(8, 1, bad, 8)


def test_t4_seconds_is_the_estimate_of_the_summed_work():
    a, b = pg.training_work(64, 1, 32, 64, 100), pg.evaluation_work(64, 1, 8192, 64)
    summed = [x + y for x, y in zip(a, b)]
    assert pg.t4_seconds([a, b]) == estimate_seconds(*summed, gpu="t4", precision="fp32")
    # launch-bound: more launches, more time; the half-precision peak is faster than fp32's
    assert GPUS["t4"].half_tflops > GPUS["t4"].fp32_tflops
    assert pg.t4_seconds([a], precision="half") < pg.t4_seconds([a])
    with pytest.raises(ValueError, match="works"):
        pg.t4_seconds([(1.0, 2.0)])


def test_expected_time_note_says_estimate():
    note = pg.expected_time_note(42.4)
    flat = " ".join(note.split())
    assert "about 42 s" in flat and "T4" in flat and "estimate" in flat and "small preset" in flat
    assert "about 3 min" in pg.expected_time_note(170.0)
    assert all(len(line) <= 40 for line in pg.expected_time_note(5.0, width=40).splitlines())
    assert max(len(line) for line in note.splitlines()) <= 78
    for bad in (-1.0, float("nan"), float("inf"), "5"):
        with pytest.raises(ValueError, match="t4_s"):
            pg.expected_time_note(bad)
