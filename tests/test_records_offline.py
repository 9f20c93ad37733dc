"""Records without a checkout (pip-installed path_lib, as on Colab): the chapters' record loading works
from the repository's raw files. The repository is served over 127.0.0.1 and ``path_lib`` is copied
alone into a temporary folder, so no checkout is in sight; then every record that chapters 7, 10 and 12
load by name is fetched through ``PATH_BOOK_RECORDS_BASE``. Offline: nothing leaves this machine."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ("book/part3/07_kernel.ipynb", "book/part3/10_speed.ipynb", "book/part4/12_lm_experiments.ipynb")
CALL = re.compile(r"""\b(?:load_record|optional_record)\(\s*["']([A-Za-z0-9_]+)["']""")


def record_names(notebook: str) -> set:
    """The record names that a chapter's code cells load with load_record / optional_record."""
    nb = json.loads((ROOT / notebook).read_text())
    src = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    return set(CALL.findall(src))


@pytest.fixture(scope="module")
def served_repo():
    """The repository served on 127.0.0.1 by benchmarks/run_chapters.py's server; yields its base URL."""
    spec = importlib.util.spec_from_file_location("run_chapters", ROOT / "benchmarks" / "run_chapters.py")
    run_chapters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_chapters)
    with run_chapters.serve_records(ROOT) as base:
        yield base


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A folder holding path_lib alone (no _toc.yml, no records): what pip leaves on Colab."""
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(ROOT / "path_lib", site / "path_lib", ignore=shutil.ignore_patterns("__pycache__"))
    return site


def run_without_checkout(site: Path, base: str, code: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "PATH_BOOK_RECORDS_BASE": base}
    return subprocess.run([sys.executable, "-c", code], cwd=site, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_records_load_without_a_checkout(chapter, served_repo, installed):
    names = sorted(record_names(chapter))
    assert names, f"{chapter} loads no record by name (load_record / optional_record)"
    code = f"""
import json
from path_lib.records import repo_root, load_record, records_base
assert repo_root() is None, repo_root()
assert records_base() == {served_repo!r}
for name in {names!r}:
    data = load_record(name)
    assert "provenance" in data, name
print(json.dumps({{name: load_record(name)["provenance"]["date"] for name in {names!r}}}))
"""
    out = run_without_checkout(installed, served_repo, code)
    assert out.returncode == 0, out.stderr
    assert set(json.loads(out.stdout.strip().splitlines()[-1])) == set(names)


def test_a_missing_or_unreachable_record_is_one_plain_sentence(served_repo, installed):
    code = """
from path_lib.records import optional_record, optional_result
assert optional_result("benchmarks/results/no_such_record.json", "benchmark") is None
assert optional_record("bench") is None
"""
    missing = run_without_checkout(installed, served_repo, code.replace('optional_record("bench") is None',
                                                                          'optional_record("bench") is not None'))
    assert missing.returncode == 0, missing.stderr
    assert missing.stdout.strip() == "No recorded benchmark (no_such_record.json)."
    dead = run_without_checkout(installed, "http://127.0.0.1:9/", code.replace('"benchmarks/results/no_such', '"x/no_such'))
    assert dead.returncode == 0, dead.stderr
    lines = dead.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("No recorded ") for line in lines), lines


def test_default_base_is_the_repositorys_raw_files(installed):
    code = """
import path_lib.records as records
print(records.records_base())
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed)}
    out = subprocess.run([sys.executable, "-c", code], cwd=installed, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "https://raw.githubusercontent.com/path-attention/path-book/main/"


def test_every_record_name_points_at_a_recorded_file():
    from path_lib.records import PENDING_RECORDS, RECORDS
    for name, rel in RECORDS.items():
        if name in PENDING_RECORDS and not (ROOT / rel).exists():
            continue                        # registered before its first run
        data = json.loads((ROOT / rel).read_text())
        assert "provenance" in data, name
        assert "history/" not in rel, name


def test_bad_record_names_are_named_errors():
    from path_lib.records import load_record
    with pytest.raises(ValueError, match="name must be one of"):
        load_record("bench_v16")
    with pytest.raises(TypeError, match="name must be a str"):
        load_record(3)
