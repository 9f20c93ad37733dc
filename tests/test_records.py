"""path_lib.records: a record written with its provenance reads back as written, every registered name
points at a recorded file, schema versions are checked with named errors, and records load from a
remote base URL (a local http.server on 127.0.0.1: nothing leaves this machine)."""
from __future__ import annotations

import datetime as dt
import functools
import http.server
import json
import platform
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import torch

from path_lib import records
from path_lib.records import (RECORDS, SCHEMAS, SchemaError, load_record, load_result, optional_record,
                              provenance_label, read_result, record_path, schema_version, write_result)

ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------------------------
# writing and reading back, with provenance
# ----------------------------------------------------------------------------------------------

def test_round_trip_keeps_the_data_and_adds_the_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH_BOOK_COMMIT", "0123456789abcdef")
    data = {"rows": [{"D": 64, "T": 1024, "ms": 0.25}], "note": "a test", "loss": torch.tensor([1.5, 2.0])}
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    path = write_result(tmp_path / "deeper" / "rec.json", data, command="python bench.py --quick")
    after = dt.datetime.now(dt.timezone.utc)
    assert path == tmp_path / "deeper" / "rec.json"
    back = read_result(path)
    assert back["rows"] == data["rows"] and back["note"] == "a test"
    assert back["loss"] == [1.5, 2.0]                        # tensors are written as lists
    p = back["provenance"]
    assert p["command"] == "python bench.py --quick" and p["commit"] == "0123456789abcdef"
    assert p["torch"] == torch.__version__ and p["python"] == platform.python_version()
    assert p["device"].startswith("CPU") or torch.cuda.is_available()
    assert before <= dt.datetime.fromisoformat(p["date"]) <= after
    assert "provenance" not in data                          # the caller's dict is left alone
    label = provenance_label(back)
    assert label.startswith(f"Recorded run: {p['device']}, torch {torch.__version__}") and "0123456789" in label
    assert label.endswith("command: python bench.py --quick")


def test_provenance_names_the_checkouts_commit_without_an_override(monkeypatch):
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs the git checkout")
    monkeypatch.delenv("PATH_BOOK_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    commit = records.provenance("x")["commit"]
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", commit) and commit.split("+")[0] == head


def test_reading_refuses_missing_files_and_records_without_provenance(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.json"):
        read_result(tmp_path / "nothing.json")
    (tmp_path / "bare.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="no provenance block"):
        read_result(tmp_path / "bare.json")


# ----------------------------------------------------------------------------------------------
# the registry
# ----------------------------------------------------------------------------------------------

def test_every_registered_name_loads_its_file_from_the_checkout(monkeypatch):
    monkeypatch.delenv("PATH_BOOK_RECORDS_BASE", raising=False)
    assert records.repo_root() == ROOT and records.records_base() is None
    assert {"bench", "sweep", "profile", "lm"} <= set(RECORDS)
    for name, rel in RECORDS.items():
        if name in records.PENDING_RECORDS and not (ROOT / rel).exists():
            continue
        assert record_path(name) == rel and (ROOT / rel).is_file(), name
        assert load_record(name) == json.loads((ROOT / rel).read_text()), name


def test_bad_names_are_named_errors():
    with pytest.raises(ValueError, match="name must be one of .*'bench'.*got 'bench_v16'"):
        record_path("bench_v16")
    with pytest.raises(TypeError, match="name must be a str"):
        load_record(3)
    with pytest.raises(ValueError, match="name must be one of"):
        schema_version({}, "no_such_record")
    with pytest.raises(TypeError, match="relpath must be a path"):
        load_result(None)


# ----------------------------------------------------------------------------------------------
# schema versions
# ----------------------------------------------------------------------------------------------

def test_known_schema_versions_are_read():
    assert schema_version({"rows": []}, "bench") == 1                 # no "schema" key: the first format
    assert schema_version({"schema": 2}, "bench") == 2
    assert records.current_schema("bench") == SCHEMAS["bench"][-1] == 2
    assert schema_version({}, "lm") == 1 and records.current_schema("lm") == 1
    assert schema_version(json.loads((ROOT / RECORDS["bench"]).read_text()), "bench") in SCHEMAS["bench"]


@pytest.mark.parametrize("name, schema, message", [
    ("bench", 3, r"record 'bench' has schema 3, not one of \[1, 2\].*newer"),
    ("bench", 0, r"record 'bench' has schema 0, not one of \[1, 2\]"),
    ("bench", "2", r"record 'bench': schema must be an int, one of \[1, 2\], got '2'"),
    ("bench", True, r"record 'bench': schema must be an int"),
    ("lm", 2, r"record 'lm' has schema 2, not one of \[1\]"),
])
def test_unknown_schema_versions_are_named_errors(name, schema, message):
    with pytest.raises(SchemaError, match=message) as err:
        schema_version({"schema": schema, "rows": []}, name)
    assert isinstance(err.value, ValueError)                  # callers that catch ValueError still do


# ----------------------------------------------------------------------------------------------
# remote loading: PATH_BOOK_RECORDS_BASE served by a local http.server
# ----------------------------------------------------------------------------------------------

class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.endswith("/broken.json"):
            self.send_error(500)
        else:
            super().do_GET()


@pytest.fixture
def served(tmp_path):
    """A folder laid out like the repository, served over 127.0.0.1; yields (folder, base URL)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_record_written_here_loads_from_the_remote_base(served, monkeypatch, capsys):
    folder, base = served
    monkeypatch.setenv("PATH_BOOK_RECORDS_BASE", base)             # no trailing slash: one is added
    assert records.records_base() == base + "/"
    written = write_result(folder / RECORDS["bench"], {"schema": 2, "rows": [{"D": 64}]}, command="bench")
    assert load_record("bench") == read_result(written)
    assert load_result("/" + RECORDS["bench"]) == read_result(written)
    with pytest.raises(FileNotFoundError, match=f"{RECORDS['lm']} does not exist at {base}/"):
        load_record("lm")
    assert optional_record("lm", "language-model run") is None
    assert capsys.readouterr().out == "No recorded language-model run (lm_full.json).\n"


def test_remote_failures_are_named(served, monkeypatch, capsys):
    folder, base = served
    monkeypatch.setenv("PATH_BOOK_RECORDS_BASE", base + "/")
    (folder / "bare.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="bare.json has no provenance block"):
        load_result("bare.json")
    with pytest.raises(OSError, match="HTTP 500"):
        load_result("broken.json")
    write_result(folder / RECORDS["bench"], {"schema": 9, "rows": []}, command="bench")
    with pytest.raises(SchemaError, match="record 'bench' has schema 9"):
        load_record("bench")
    assert optional_record("bench") is None
    assert capsys.readouterr().out.startswith("No recorded bench (bench_path.json): record 'bench' has schema 9")
    monkeypatch.setenv("PATH_BOOK_RECORDS_BASE", "http://127.0.0.1:9/")     # nothing listens there
    with pytest.raises(OSError, match="could not fetch http://127.0.0.1:9/"):
        load_result(RECORDS["bench"])
