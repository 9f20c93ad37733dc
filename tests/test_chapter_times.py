"""The time on the page: the introduction's table and the chapters' notes from run_chapters.py's records
(made up here, and the repository's own). Every GPU time shown is a GPU measurement: none is estimated,
none is copied from the CPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from path_lib.book import chapter_times as ct

ROOT = Path(__file__).resolve().parent.parent


def record(device, pages, **extra):
    return dict(extra, pages=pages, provenance=dict(device=device, torch="2.13.0", command="x",
                                                    date="2026-12-05T07:38:41+00:00"))


def row(page, seconds, ok=True, preset="tiny"):
    return dict(page=page, seconds=seconds, ok=ok, preset=preset, cells=[], failed_cell=None)


CPU = record("CPU (x86_64)", [row("book/intro", 4.5), row("book/part3/07_kernel", 41.2),
                              row("book/part4/12_lm_experiments", 612.0), row("book/part3/08_decoding", 30, ok=False)],
             preset="tiny")
T4 = record("Tesla T4", [row("book/part3/07_kernel", 95.0, preset="small"),
                         row("book/part3/08_decoding", 12.0, ok=False, preset="small")], preset="small")
H200 = record("NVIDIA H200", [row("book/part3/07_kernel", 62.7, preset="full"),
                              row("book/intro", 3.0, preset="full")], preset="full")
# a CPU record of the small preset (run_colab.sh checked on a CPU): neither a CPU column nor a GPU one
CPU_SMALL = record("CPU (x86_64)", [row("book/intro", 50.0, preset="small")], preset="small")


def test_page_key_and_about():
    assert ct.page_key("/work/x/book/part3/07_kernel.ipynb") == "book/part3/07_kernel"
    assert ct.page_key("book/intro") == "book/intro"
    assert [ct.about(s) for s in (0.2, 4.5, 13.4, 35.1, 99, 123, 612)] == [
        "about 1 s", "about 4 s", "about 13 s", "about 35 s", "about 99 s", "about 2 min", "about 10 min"]
    with pytest.raises(ValueError, match="seconds"):
        ct.about(-1)
    with pytest.raises(TypeError, match="path must be a str"):
        ct.page_key(7)


def test_without_a_gpu_record_no_gpu_time_is_shown():
    times = ct.collect_times(dict(tiny=CPU, small=CPU_SMALL))
    assert times["gpu"] == {} and set(times["cpu"]) == {"book/intro", "book/part3/07_kernel",
                                                         "book/part4/12_lm_experiments"}
    assert ct.chapter_note("book/part3/07_kernel", times) == "About 41 s on a CPU (tiny preset); GPU: not measured"
    # a failed page has no time; a page no record names neither
    assert ct.chapter_note("book/part3/08_decoding.ipynb", times) == "CPU: not measured; GPU: not measured"
    md = ct.times_markdown(times, pages=["book/intro", "book/part2/05_expressivity"], titles={"book/intro": "Intro"})
    assert md.splitlines() == ["| Chapter | CPU, tiny preset | GPU |", "|---|---|---|",
                               "| Intro | about 4 s | not measured |",
                               "| book/part2/05_expressivity | not measured | not measured |"]
    text = ct.runs_text(times)
    assert text.startswith("CPU column: CPU (x86_64), PyTorch 2.13.0, 2026-12-05.") and "not measured" in text


def test_gpu_columns_are_the_gpu_measurements():
    times = ct.collect_times(dict(tiny=CPU, small=T4, full=H200))
    assert ct.chapter_note("book/part3/07_kernel", times) == (
        "About 41 s on a CPU (tiny preset); GPU: about 95 s on Tesla T4 (small preset); "
        "about 63 s on NVIDIA H200 (full preset)")
    rows = ct.times_table(times, ["book/intro", "book/part3/07_kernel", "book/part3/08_decoding"])
    assert rows[0] == dict(page="book/intro", cpu="about 4 s", gpu=dict(small="not measured", full="about 3 s"))
    assert rows[1]["gpu"] == dict(small="about 95 s", full="about 63 s")
    assert rows[2] == dict(page="book/part3/08_decoding", cpu="not measured",
                           gpu=dict(small="not measured", full="not measured"))
    lines = ct.times_markdown(times, pages=["book/part3/07_kernel"]).splitlines()
    assert lines[0] == "| Chapter | CPU, tiny preset | GPU, small preset | GPU, full preset |"
    assert lines[2] == "| book/part3/07_kernel | about 41 s | about 95 s | about 63 s |"
    assert ct.runs_text(times) == ("CPU column: CPU (x86_64), PyTorch 2.13.0, 2026-12-05. "
                                   "GPU column (small preset): Tesla T4, PyTorch 2.13.0, 2026-12-05. "
                                   "GPU column (full preset): NVIDIA H200, PyTorch 2.13.0, 2026-12-05.")


def test_default_pages_are_those_the_records_time():
    rows = ct.times_table(ct.collect_times(dict(tiny=CPU, full=H200)))
    assert [r["page"] for r in rows] == ["book/intro", "book/part3/07_kernel", "book/part4/12_lm_experiments"]


def test_load_times_reads_only_the_timing_records():
    store = {ct.TIMES_RECORDS["tiny"]: CPU, ct.TIMES_RECORDS["small"]: T4}
    asked = []

    def load(rel):
        asked.append(rel)
        if rel not in store:
            raise FileNotFoundError(rel)
        return store[rel]
    times = ct.load_times(load)
    assert asked == list(ct.TIMES_RECORDS.values())
    assert set(times["cpu"]) == {"book/intro", "book/part3/07_kernel", "book/part4/12_lm_experiments"}
    assert set(times["gpu"]) == {"small"} and set(times["gpu"]["small"]) == {"book/part3/07_kernel"}


def test_the_repository_records_give_measured_times_only():
    times = ct.load_times()
    on_disk = {p: json.loads((ROOT / rel).read_text()) for p, rel in ct.TIMES_RECORDS.items()
               if (ROOT / rel).exists()}
    for preset, rows in times["gpu"].items():
        for page, r in rows.items():
            rec = next(d for d in on_disk.values() if not ct.on_cpu(d) and any(
                ct.page_key(x["page"]) == page and x["preset"] == preset for x in d["pages"]))
            measured = next(x for x in rec["pages"] if ct.page_key(x["page"]) == page and x["preset"] == preset)
            assert r["seconds"] == measured["seconds"] and measured["ok"]
    for page, r in times["cpu"].items():
        assert any(ct.on_cpu(d) and any(ct.page_key(x["page"]) == page and x["seconds"] == r["seconds"]
                                        for x in d["pages"]) for d in on_disk.values())


def test_book_pages_are_the_toc_notebooks_with_their_titles():
    pages, titles = ct.book_pages(ROOT)
    assert pages[0] == "book/intro" and "book/part3/07_kernel" in pages
    assert all((ROOT / f"{p}.ipynb").exists() for p in pages)
    # every notebook has its heading: no title falls back to the page's path
    assert set(titles) == set(pages) and all(t and t != p and not t.startswith("#") for p, t in titles.items())
    # numbered as the site numbers them: chapters across the parts, sections under their chapter
    assert titles["book/part1/01_why_data_dependent"].startswith("1. ")
    assert titles["book/part3/07_kernel"].startswith("7. ") and titles["book/part3/10b_scale_out"].startswith("10.1. ")
    assert not titles["book/intro"][0].isdigit()


def test_notebook_title(tmp_path):
    nb = tmp_path / "x.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["# a comment"]},
                                        {"cell_type": "markdown", "source": ["Text\n", "# The title\n"]}]}))
    assert ct.notebook_title(nb) == "The title"
    nb.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["## Only a section"]}]}))
    assert ct.notebook_title(nb) is None


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
