"""Recorded results: the registry of current records, their provenance, schema versions, writing and loading.

    from path_lib.records import write_result, load_record, provenance_label

    write_result("benchmarks/results/bench_path.json", data)   # data plus a "provenance" block
    bench = load_record("bench")                               # the current record, by its stable name
    provenance_label(bench)                                    # "Recorded run: NVIDIA H200, torch ..."

**Registry.** :data:`RECORDS` maps the stable name of each current record (``"bench"``, ``"lm"``, ...)
to its path in the repository: what the book, the README and the tests read. A new GPU run replaces
the file under the same name; earlier runs are kept in ``benchmarks/results/history/`` and no chapter
reads them.

**Provenance.** :func:`write_result` writes a record as JSON with a ``provenance`` block
(:func:`provenance`: the GPU or CPU, torch, triton and Python versions, the commit (``+dirty`` when the
checkout had uncommitted changes; ``PATH_BOOK_COMMIT`` overrides it), the UTC date and the exact command).

**Schemas.** A record that changed its format carries ``schema`` (a record without it is version 1);
:data:`SCHEMAS` lists the versions the readers know, the last one being what the writer writes now.
:func:`schema_version` raises :class:`SchemaError` (a ValueError) naming the record for any other.

**Loading.** :func:`load_result` reads a record by its repository path from the checkout when there is
one; without a checkout (pip-installed, e.g. on Colab) it fetches the file from :func:`records_base`
(the repository's raw files, or ``PATH_BOOK_RECORDS_BASE``). :func:`load_record` does so by stable
name and checks the schema; the ``optional_*`` forms print one plain sentence instead of raising.

At the bottom of the library, above :mod:`path_lib.validation` (its only import from path_lib, for the
argument checks); triton only inside :func:`provenance`.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional, Tuple

from .validation import check_mapping, check_path, check_str

__all__ = ["REPOSITORY", "BRANCH", "RECORDS", "PENDING_RECORDS", "DEFAULT_RECORDS_BASE", "SCHEMAS", "SchemaError",
           "repo_root", "records_base", "record_path", "schema_version", "current_schema",
           "provenance", "write_result", "read_result", "load_result", "load_record", "optional_result",
           "optional_record", "provenance_label"]

# Must agree with `repository:` in _config.yml and book/_templates/first_cell.py (a test checks).
REPOSITORY = "https://github.com/path-attention/path-book"
BRANCH = "main"

# ------------------------------------------------------------------------------------------------
# the registry
# ------------------------------------------------------------------------------------------------

#: The current record of each kind, by a stable name: what the book, the README and the tests read.
#: A new GPU run replaces the file under the same name; earlier runs are kept in
#: ``benchmarks/results/history/`` (see its README) and are never read by a chapter.
RECORDS = {
    "bench": "benchmarks/results/bench_path.json",             # speed and memory, benchmarks/bench_path.py
    "sweep": "benchmarks/results/correctness_sweep.json",      # GPU correctness, sets path_lib.kernels.GPU_VERIFIED
    "profile": "benchmarks/results/profile_parts.json",        # time per kernel, benchmarks/profile_parts.py
    "repeat": "benchmarks/results/repeat_cell.json",           # run-to-run check of the closest cells
    "decode": "benchmarks/results/bench_decode.json",          # decode step vs SDPA, benchmarks/bench_decode.py
    "cp_single_gpu": "benchmarks/results/cp_single_gpu.json",  # context parallel, N = 1, benchmarks/cp_single_gpu.py
    "lm_throughput": "benchmarks/results/bench_lm_throughput.json",  # training tokens/s, benchmarks/bench_lm_throughput.py
    "short_conv": "benchmarks/results/bench_short_conv.json",  # w's fused pass vs PyTorch, benchmarks/bench_short_conv.py
    "compile_sm90": "benchmarks/results/compile_sm90.json",    # AOT resource report, H100/H200
    "compile_sm75_fp16_D64": "benchmarks/results/compile_sm75_fp16_D64_bt32.json",    # T4
    "compile_sm75_fp16_D128": "benchmarks/results/compile_sm75_fp16_D128_bt16.json",
    "compile_sm75_fp16_D128_bt32": "benchmarks/results/compile_sm75_fp16_D128_bt32.json",
    "compile_sm75_fp32": "benchmarks/results/compile_sm75_fp32_bt16.json",
    "compile_sm75_single_segment": "benchmarks/results/compile_sm75_single_segment_D128_bt16.json",
    "lm": "results/lm/lm_full.json",                           # trained language models, scripts/experiments/run_lm.py
    "flip_flop": "results/synthetic/flip_flop.json",           # scripts/experiments/run_synthetic.py
    "a5": "results/synthetic/a5_layers.json",
    "mqrar": "results/synthetic/mqrar.json",
    "conversion": "results/lm/conversion.json",                # RoPE -> PaTH conversion, scripts/experiments/run_conversion.py
    # the runs that decide the claims (scripts/experiments/run_equal.py, gpu_plan.md): 2,000 steps, 5 seeds
    "lm_decide_stdlib": "results/lm/lm_decide_stdlib.json",    # nine models on the code corpus
    "lm_decide_brown": "results/lm/lm_decide_brown.json",      # nine models on English prose (Brown Corpus)
    "lm_decide_large_stdlib": "results/lm/lm_decide_large_stdlib.json",  # 26M parameters, four models
    "flip_flop_deep": "results/synthetic/flip_flop_L2d128.json",  # 2 layers of width 128: a RoPE that learns
    "phonebook": "results/synthetic/phonebook.json",           # retrieval with its positive control
    "sharing_timeslice": "results/calibration/sharing_timeslice.json",  # steps/s, 12 small runs taking turns
    "sharing_mps": "results/calibration/sharing_mps.json",     # the same under CUDA MPS (12 and 24 runs)
}

#: Names registered before their first GPU run: the file may be absent (``optional_record`` then says so).
PENDING_RECORDS: set = {"lm_decide_stdlib", "lm_decide_brown", "lm_decide_large_stdlib"}

#: Where records come from when path_lib runs without a checkout (pip-installed, e.g. on Colab): the
#: repository's raw files on ``BRANCH``. ``PATH_BOOK_RECORDS_BASE`` overrides it (a fork, a mirror,
#: ``http://127.0.0.1:8000/`` in the tests); set, it is used even inside a checkout.
DEFAULT_RECORDS_BASE = (REPOSITORY.replace("https://github.com/", "https://raw.githubusercontent.com/")
                        + f"/{BRANCH}/")


def repo_root() -> Optional[Path]:
    """The repository checkout this path_lib was imported from, or None (pip-installed, e.g. Colab)."""
    root = Path(__file__).resolve().parents[1]          # this file: path_lib/records.py
    return root if (root / "_toc.yml").exists() and (root / "path_lib").is_dir() else None


def records_base() -> Optional[str]:
    """The URL records are fetched from, or None when they are read from the checkout."""
    base = os.environ.get("PATH_BOOK_RECORDS_BASE", "").strip()
    if base:
        return base if base.endswith("/") else base + "/"
    return None if repo_root() is not None else DEFAULT_RECORDS_BASE


def record_path(name: str) -> str:
    """The repository path of the current record ``name`` (a key of :data:`RECORDS`)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, one of {sorted(RECORDS)}, got {type(name).__name__}")
    if name not in RECORDS:
        raise ValueError(f"name must be one of {sorted(RECORDS)}, got {name!r}")
    return RECORDS[name]


# ------------------------------------------------------------------------------------------------
# schema versions
# ------------------------------------------------------------------------------------------------

#: The schema versions the readers know, per record name, oldest first; the last is what the writer
#: writes now. A record without a ``schema`` key is version 1; a name not listed has version 1 only.
#: ``bench``: 1, the ``sdpa`` rows are PyTorch's FlashAttention backend forced and there are no ceilings;
#: 2, the default SDPA dispatch (``sdpa``) and the forced backend (``sdpa_flash``), with measured ceilings.
SCHEMAS = {"bench": (1, 2)}


class SchemaError(ValueError):
    """A record's ``schema`` is not a version its readers know (or no version at all)."""


def _known_schemas(name: str) -> Tuple[int, ...]:
    record_path(name)                       # a registered name, or the named TypeError / ValueError
    return SCHEMAS.get(name, (1,))


def current_schema(name: str) -> int:
    """The schema version that the writer of record ``name`` writes now (1 for a name without schemas)."""
    return _known_schemas(name)[-1]


def schema_version(data: dict, name: str) -> int:
    """The schema version of ``data``, a record of the kind ``name`` (1 when it has no ``schema`` key).

    Raises :class:`SchemaError` naming the record when the version is not an int or not one of
    :data:`SCHEMAS` [``name``]; TypeError / ValueError for a ``name`` that is not in :data:`RECORDS`."""
    known = _known_schemas(name)
    if not isinstance(data, dict):
        raise TypeError(f"data must be a record (a dict), got {type(data).__name__}")
    version = data.get("schema", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise SchemaError(f"record {name!r}: schema must be an int, one of {list(known)}, got {version!r}")
    if version not in known:
        newer = " (written by a newer path_lib?)" if version > known[-1] else ""
        raise SchemaError(f"record {name!r} has schema {version}, not one of {list(known)} that path_lib "
                          f"reads{newer}")
    return version


# ------------------------------------------------------------------------------------------------
# provenance and writing
# ------------------------------------------------------------------------------------------------

def _git_commit() -> str:
    here = Path(__file__).resolve().parents[1]      # the checkout (this file: path_lib/records.py)
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        commit = out.stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("PATH_BOOK_COMMIT", "unknown")


def provenance(command: Optional[str] = None) -> dict:
    """A dict describing where and how a result was produced (device, versions, commit, date, command)."""
    check_str(command, "command", empty=True, optional=True)
    import torch
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.processor() or platform.machine()})"
    return {
        "device": device,
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "commit": os.environ.get("PATH_BOOK_COMMIT") or _git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command if command is not None else " ".join([Path(sys.executable).name] + sys.argv),
    }


def write_result(path, data: dict, *, command: Optional[str] = None) -> Path:
    """Write ``data`` (a dict) with a ``provenance`` block as JSON to ``path`` (parent folders created)."""
    path = check_path(path, "path", kind="file")
    record = dict(check_mapping(data, "data"))
    record["provenance"] = provenance(command)
    text = json.dumps(record, indent=2, sort_keys=False, default=_jsonable) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _jsonable(x: Any):
    try:
        return x.tolist()
    except AttributeError:
        return str(x)


def provenance_label(data: dict) -> str:
    """A one-line label for a recorded result, for figure captions and table notes."""
    check_mapping(data, "data", keys=("provenance",))
    p = check_mapping(data["provenance"], "data['provenance']", keys=("device", "torch", "commit", "date", "command"))
    return (f"Recorded run: {p['device']}, torch {p['torch']}, triton {p.get('triton')}, "
            f"commit {str(p['commit'])[:10]}, {p['date']}; command: {p['command']}")


# ------------------------------------------------------------------------------------------------
# reading and loading
# ------------------------------------------------------------------------------------------------

def read_result(path) -> dict:
    """Load a recorded result from a local file; raises FileNotFoundError naming the file, ValueError without
    provenance."""
    path = check_path(path, "path", kind="file")
    if not path.exists():
        raise FileNotFoundError(f"recorded result {path} does not exist")
    data = _parse(path.read_bytes(), f"path {path}")
    if not isinstance(data, dict) or "provenance" not in data:
        raise ValueError(f"path {path} holds no recorded result (no provenance block)")
    return data


def _parse(raw: bytes, where: str):
    """JSON text, or a ValueError naming ``where`` (not JSON, not UTF-8)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where} is not a JSON record ({type(e).__name__}: {e})") from None


def load_result(relpath: str) -> dict:
    """Load a recorded result (JSON with a ``provenance`` block) by its path in the repository.

    Reads the file from the checkout when there is one; otherwise (pip-installed, e.g. on Colab)
    downloads it from :func:`records_base`. Raises FileNotFoundError when the record does not exist
    (also a 404 from the server), OSError when it cannot be fetched, ValueError without provenance.
    """
    if not isinstance(relpath, (str, os.PathLike)):
        raise TypeError(f"relpath must be a path in the repository, got {type(relpath).__name__}")
    relpath = str(relpath).lstrip("/")
    if not relpath or ".." in Path(relpath).parts:
        raise ValueError(f"relpath must be a path inside the repository, got {relpath!r}")
    base = records_base()
    if base is None:
        root = repo_root()
        if root is None:        # records_base() saw a checkout; it went away since
            raise FileNotFoundError(f"recorded result {relpath}: the checkout it was read from is gone")
        path = root / relpath
        if not path.is_file():
            raise FileNotFoundError(f"recorded result {relpath} does not exist in {root}")
        data = _parse(path.read_bytes(), f"relpath {relpath}")
    else:
        url = base + relpath
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise FileNotFoundError(f"recorded result {relpath} does not exist at {base}") from None
            raise OSError(f"could not fetch {url}: HTTP {e.code}") from None
        except urllib.error.URLError as e:
            raise OSError(f"could not fetch {url}: {e.reason}") from None
        data = _parse(raw, f"relpath {relpath}")
    if not isinstance(data, dict) or "provenance" not in data:
        raise ValueError(f"relpath {relpath} has no provenance block")
    return data


def load_record(name: str) -> dict:
    """The current record ``name`` (a key of :data:`RECORDS`, e.g. ``"bench"``), by its stable path; raises
    :class:`SchemaError` when its schema version is not one path_lib reads (:func:`schema_version`)."""
    data = load_result(record_path(name))
    schema_version(data, name)
    return data


def _or_sentence(load, relpath: str, what: str) -> Optional[dict]:
    """``load()``, or None after one plain sentence when the record is missing, unreachable or unreadable."""
    try:
        return load()
    except (FileNotFoundError, OSError, ValueError) as e:
        reason = "" if isinstance(e, FileNotFoundError) else f": {e}"
        print(f"No recorded {what} ({Path(str(relpath)).name}){reason}.")
        return None


def optional_result(relpath: str, what: str = "result") -> Optional[dict]:
    """``load_result(relpath)``, or None when the record is missing or cannot be fetched; then it says
    so in one plain sentence (``No recorded {what} ({file name}).``) instead of raising, so that a
    chapter can go on without it."""
    check_str(what, "what")
    if not isinstance(relpath, (str, os.PathLike)):
        raise TypeError(f"relpath must be a path in the repository, got {type(relpath).__name__}")
    return _or_sentence(lambda: load_result(relpath), relpath, what)


def optional_record(name: str, what: Optional[str] = None) -> Optional[dict]:
    """``load_record(name)``, or None with one plain sentence when it is missing, unreachable or of a schema
    version path_lib does not read. A name not in :data:`RECORDS` still raises."""
    check_str(what, "what", optional=True)
    return _or_sentence(lambda: load_record(name), record_path(name), what or name)
