"""The time on the page: notes and the table from run_chapters.py's records (made up here, and the
repository's own where they exist)."""
from __future__ import annotations

import pytest

from path_lib.book import chapter_times as ct


def record(device, pages, **extra):
    return dict(extra, pages=pages, provenance=dict(device=device, command="x", date="2026-12-05"))


def row(page, seconds, ok=True, preset="tiny"):
    return dict(page=page, seconds=seconds, ok=ok, preset=preset, cells=[], failed_cell=None)


CPU = record("CPU (x86_64)", [row("book/intro", 4.5), row("book/part3/07_kernel", 41.2),
                              row("book/part4/12_lm_experiments", 612.0), row("book/part3/08_decoding", 30, ok=False)],
             preset="tiny")
T4 = record("Tesla T4", [row("book/part3/07_kernel", 95.0, preset="small")], preset="small")
H200 = record("NVIDIA H200", [row("book/part3/07_kernel", 62.7, preset="full"),
                              row("book/intro", 3.0, preset="full")], preset="full")
LEGACY = dict(rows=[dict(chapter="/somewhere/.gpucheck/repo/book/part3/07_kernel.ipynb", ok=True, seconds=62.7,
                         log_tail="")], provenance=dict(device="NVIDIA H200", command="x", date="d"))
EST = record("CPU (x86_64)", [row("book/part4/12_lm_experiments", 250.0, preset="small")], gpu="T4", preset="small")


def test_page_key_and_about():
    assert ct.page_key("/work/x/book/part3/07_kernel.ipynb") == "book/part3/07_kernel"
    assert ct.page_key("book/intro") == "book/intro"
    assert [ct.about(s) for s in (0.2, 4.5, 13.4, 35.1, 99, 123, 612)] == [
        "about 1 s", "about 4 s", "about 13 s", "about 35 s", "about 99 s", "about 2 min", "about 10 min"]
    with pytest.raises(ValueError, match="seconds"):
        ct.about(-1)
    with pytest.raises(TypeError, match="path must be a str"):
        ct.page_key(7)


def test_notes_cpu_only():
    times = ct.collect_times(dict(tiny=CPU))
    assert ct.chapter_note("book/part3/07_kernel", times) == "About 41 s on a CPU (book build); GPU: not yet measured"
    # a failed page has no time; a page no record names neither
    assert ct.chapter_note("book/part3/08_decoding.ipynb", times).startswith("CPU time not yet measured")
    assert ct.chapter_note("book/part1/02_householder", times) == "CPU time not yet measured; GPU: not yet measured"


def test_notes_measured_gpu_before_an_estimate_and_t4_first():
    times = ct.collect_times(dict(tiny=CPU, full=H200, estimate=EST))
    assert ct.chapter_note("book/part3/07_kernel", times) == (
        "About 41 s on a CPU (book build); GPU: about 63 s on an NVIDIA H200 (measured, full preset)")
    assert ct.chapter_note("book/part4/12_lm_experiments", times) == (
        "About 10 min on a CPU (book build); GPU: about 4 min on a T4 (small preset, estimate)")
    times = ct.collect_times(dict(tiny=CPU, small=T4, full=H200))
    assert ct.chapter_note("book/part3/07_kernel", times).endswith("about 95 s on a Tesla T4 (measured, small preset)")


def test_legacy_gpu_record_counts_as_measured():
    times = ct.collect_times(dict(legacy_gpu=LEGACY))
    assert "NVIDIA H200 (measured, full preset)" in ct.chapter_note("book/part3/07_kernel", times)


def test_table_rows_and_markdown():
    times = ct.collect_times(dict(tiny=CPU, full=H200, estimate=EST))
    rows = ct.times_table(times)
    assert [r["page"] for r in rows] == ["book/intro", "book/part3/07_kernel", "book/part4/12_lm_experiments"]
    assert rows[0] == dict(page="book/intro", cpu="about 4 s", gpu="about 3 s on an NVIDIA H200 (measured, full preset)")
    md = ct.times_markdown(times, pages=["book/intro", "book/part2/05_expressivity"], titles={"book/intro": "Intro"})
    lines = md.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| Intro | about 4 s |")
    assert lines[3] == "| book/part2/05_expressivity | not yet measured | not yet measured |"


def test_load_times_leaves_out_missing_records():
    store = {ct.TIMES_RECORDS["tiny"]: CPU, ct.ESTIMATE_RECORD: EST}

    def load(rel):
        if rel not in store:
            raise FileNotFoundError(rel)
        return store[rel]
    times = ct.load_times(load)
    assert set(times["cpu"]) == {"book/intro", "book/part3/07_kernel", "book/part4/12_lm_experiments"}
    assert times["gpu"] == {} and set(times["estimate"]) == {"book/part4/12_lm_experiments"}


def test_load_times_from_the_checkout():
    # the repository's earlier GPU check of chapter 7 is a measured GPU time
    times = ct.load_times()
    assert "(measured, full preset)" in ct.chapter_note("book/part3/07_kernel", times)
    # every page the CPU record times has its note; the estimate is labelled as one
    for page in times["cpu"]:
        note = ct.chapter_note(page, times)
        assert note.startswith("About ") and " on a CPU (book build); GPU: about " in note, note
        assert note.endswith(("estimate)", "preset)")), note


def test_bad_records_are_named():
    with pytest.raises(ValueError, match="record must be"):
        ct.page_times(dict(pages=[]))


def _estimate_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "estimate_t4.py"
    spec = importlib.util.spec_from_file_location("estimate_t4", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_t4_estimates_read_the_small_presets_from_the_tables():
    """The estimate counts the small preset's sizes as the library's tables hold them (the preset table and
    the experiments' PRESETS), and runs no notebook code to learn them."""
    import ast
    from pathlib import Path

    est = _estimate_module()
    from path_lib.hardware import preset_sizes
    from path_lib.experiments.lm import PRESETS as LM
    from path_lib.training.loop import PRESETS as TASKS

    assert est.WORK["book/part4/12_lm_experiments"][2]("small") == LM["small"]
    assert est.WORK["book/part2/05_expressivity"][2]("small") == TASKS["flip_flop"]["small"]
    assert est.WORK["book/part3/08_decoding"][2]("small") == preset_sizes("decoding.kernel_steps", preset="small")
    source = (Path(__file__).resolve().parent.parent / "benchmarks" / "estimate_t4.py").read_text()
    called = {ast.unparse(n.func) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)}
    assert not called & {"exec", "eval", "compile"}


def test_t4_estimate_of_a_page():
    est = _estimate_module()
    cells = est.code_cells("book/part3/06_blockwise")
    timed = next(i for i, s in cells.items() if "timings[impl].append(best_time(" in s)
    row = dict(page="book/part3/06_blockwise", seconds=20.0, ok=True, cells=[[timed, 5.0], [timed + 1, 2.0]])
    out = est.estimate_page(row)
    assert out["counted_cells"] == [timed] and out["other_cells_cpu_seconds"] == 15.0
    assert out["seconds"] == pytest.approx(15.0 + out["counted_seconds_t4"], abs=0.1)
    assert 0 < out["counted_seconds_h200"] < out["counted_seconds_t4"]
    plain = est.estimate_page(dict(page="book/intro", seconds=4.0, ok=True, cells=[[1, 1.0]]))
    assert plain["seconds"] == 4.0 and "CPU seconds" in plain["basis"]
