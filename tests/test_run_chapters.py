"""benchmarks/run_chapters.py: pages run without a checkout (the built wheel in a clean environment, the
records served on 127.0.0.1), each preset forced, one timed record per preset. CPU only: two cheap pages."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("run_chapters", ROOT / "benchmarks" / "run_chapters.py")
rc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rc)


def notebook(path: Path, *sources: str) -> Path:
    cells = [dict(cell_type="code", source=s, metadata={}, outputs=[], execution_count=None) for s in sources]
    cells.insert(1, dict(cell_type="markdown", source="text", metadata={}))
    path.write_text(json.dumps(dict(cells=cells, metadata={}, nbformat=4, nbformat_minor=5)))
    return path


def test_toc_pages_are_every_notebook_of_the_toc():
    pages = rc.toc_pages(ROOT)
    assert pages[0] == "book/intro.ipynb"
    assert "book/part3/10b_scale_out.ipynb" in pages and "book/part4/12b_conversion.ipynb" in pages
    assert all((ROOT / p).is_file() and p.endswith(".ipynb") for p in pages)
    assert pages.index("book/part3/10_speed.ipynb") + 1 == pages.index("book/part3/10b_scale_out.ipynb")
    assert len(pages) == len(set(pages))


def test_presets_by_name():
    assert [rc.canonical_preset(p) for p in ("tiny", "T4", "small", "full")] == ["tiny", "small", "small", "full"]
    with pytest.raises(ValueError, match="preset must be one of"):
        rc.canonical_preset("medium")


def test_a_failing_cell_is_named(tmp_path):
    nb = notebook(tmp_path / "bad.ipynb", "x = 1", "%matplotlib inline\ny = x + 1", "raise RuntimeError('boom')",
                  "z = 3")
    r = rc.run_page(nb, timeout=120)
    assert not r["ok"] and r["failed_cell"]["index"] == 3
    assert "boom" in r["failed_cell"]["source"] and "RuntimeError" in r["log_tail"]
    assert [c[0] for c in r["cells"]] == [0, 2, 3]          # the cells that ran, the failing one last


def test_a_page_out_of_time_fails_at_the_running_cell(tmp_path):
    nb = notebook(tmp_path / "slow.ipynb", "x = 1", "import time\ntime.sleep(60)")
    r = rc.run_page(nb, timeout=8)
    assert not r["ok"] and r["failed_cell"]["index"] == 2 and "timed out" in r["log_tail"]


@pytest.mark.slow
def test_two_pages_without_a_checkout(tmp_path):
    out = tmp_path / "records"
    status = rc.main(["--installed", "--preset", "tiny", "--preset", "t4", "--out-dir", str(out), "--timeout", "300",
                      "book/intro.ipynb", "book/part1/01_why_data_dependent.ipynb"])
    assert status == 0
    for preset in ("tiny", "small"):
        rec = json.loads((out / f"chapter_times_{preset}.json").read_text())
        assert rec["provenance"]["checkout"] is False and rec["provenance"]["installed"].endswith(".whl")
        assert rec["checkout"] is False and rec["preset"] == preset
        assert not Path(rec["path_lib_from"]).resolve().is_relative_to(ROOT)
        assert [r["page"] for r in rec["pages"]] == ["book/intro", "book/part1/01_why_data_dependent"]
        for r in rec["pages"]:
            assert r["ok"] and r["preset"] == preset and r["failed_cell"] is None
            assert r["seconds"] >= sum(s for _, s in r["cells"]) > 0
    # the notes read these records as they are written
    from path_lib.book import chapter_times as ct
    times = ct.collect_times({"tiny": json.loads((out / "chapter_times_tiny.json").read_text())})
    assert ct.chapter_note("book/intro", times).endswith("on a CPU (tiny preset); GPU: not measured")


def test_pages_must_be_notebooks_of_the_checkout(tmp_path):
    with pytest.raises(ValueError, match="page must be a notebook"):
        rc.main(["--installed", "--out-dir", str(tmp_path), str(notebook(tmp_path / "x.ipynb", "1"))])


def test_wheel_without_git_leaves_out_build_outputs(tmp_path):
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("X = 1\n")
    (src / "pkg" / "__pycache__").mkdir()
    (src / "pkg" / "__pycache__" / "junk.pyc").write_bytes(b"0")
    (src / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = '
                                        '"setuptools.build_meta"\n[project]\nname = "pkg"\nversion = "1.0"\n'
                                        '[tool.setuptools]\npackages = ["pkg"]\n')
    wheel = rc.build_wheel(src, tmp_path / "out")     # no git repository here: the tree is copied
    assert wheel.name.startswith("pkg-1.0") and wheel.suffix == ".whl"
    assert not (tmp_path / "out" / "src" / "pkg" / "__pycache__").exists()
    assert not list(src.glob("*.egg-info")) and not (src / "build").exists()   # nothing left in the source
