"""Facts that the documents repeat, checked against the code that holds them: the code line length, the
preset names, the version, the sweep's size, the files they name (the layer chain is tests/test_layout.py's).
A document that drifts from the code fails here instead of misleading a reader."""
from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the documents a contributor reads today (HISTORY.md and CHANGELOG.md keep the past as it was)
CURRENT = ("README.md", "CONTRIBUTING.md", "benchmarks/DESIGN.md")


def text(doc: str) -> str:
    return (ROOT / doc).read_text()


def test_the_code_line_length_is_the_structure_tests():
    from test_book_structure import MAX_CODE_LINE_CHARS
    said = [(doc, int(n)) for doc in CURRENT
            for n in re.findall(r"code lines of at most (\d+)\s+characters", text(doc))]
    assert said, "CONTRIBUTING.md states the chapters' code line length"
    assert all(n == MAX_CODE_LINE_CHARS for _, n in said), said


def test_the_documents_name_the_presets_of_the_table():
    from path_lib.hardware import PRESET_NAMES
    said = [(doc, m) for doc in CURRENT for m in re.findall(r"PATH_BOOK_PRESET=([a-z0-9|]+)", text(doc))]
    assert len({doc for doc, _ in said}) >= 2, said
    assert all(tuple(m.split("|")) == PRESET_NAMES for _, m in said), said


def test_one_version_everywhere():
    import path_lib
    version = tomllib.loads(text("pyproject.toml"))["project"]["version"]
    assert path_lib.__version__ == version
    released = re.findall(r"^## (\d+\.\d+\.\d+)", text("CHANGELOG.md"), flags=re.M)
    assert released and released[0] == version
    current = [(doc, v) for doc in CURRENT for v in re.findall(r"pre-release \((\d+\.\d+\.\d+)", text(doc))]
    assert current and all(v == version for _, v in current), current


def test_the_documents_state_the_sweeps_size():
    import path_lib.kernels
    rec = json.loads((ROOT / path_lib.kernels.VERIFIED_BY).read_text())
    pairs = [(doc, (int(a), int(b))) for doc in CURRENT for pattern in (r"(\d+) of (\d+) coverage points",
                                                                      r"swept (\d+) of (\d+)")
             for a, b in re.findall(pattern, text(doc))]
    assert pairs and all(p == (rec["passed"], rec["total"]) for _, p in pairs), pairs
    cases = re.findall(r"\*\*The sweep\*\*[^:]*: (\d+) cases", text("benchmarks/DESIGN.md"))
    assert cases == [str(rec["total"])]


def _tracked() -> set:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        pytest.skip("not a git checkout")
    files = set(out.stdout.split())
    return files | {str(parent) for f in files for parent in PurePosixPath(f).parents}


#: what a document may name that the repository does not hold: outputs and machine paths
NOT_IN_THE_TREE = (".venv/", "_build/", "runs/", "/tmp/", "build/", "dist/")


@pytest.mark.parametrize("doc", CURRENT)
def test_the_current_documents_name_files_that_exist(doc):
    """Every path in backquotes (``a/b.py``, ``history/x.json``) is in the repository, read from the root, the
    document's folder or ``benchmarks/results/`` (where the records' names are relative to)."""
    tree = _tracked()
    bases = ("", str(PurePosixPath(doc).parent), "benchmarks/results")
    missing = []
    for path in re.findall(r"`([A-Za-z0-9_./-]+/[A-Za-z0-9_.-]+)/?`", text(doc)):
        if path.startswith(NOT_IN_THE_TREE) or any(c in path for c in "*<>$") or "..." in path \
                or path.isupper() or "/ORG/" in path:             # patterns, not paths
            continue
        if not any(str(PurePosixPath(base) / path) in tree for base in bases):
            missing.append(path)
    assert not missing, missing
