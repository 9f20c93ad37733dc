"""Small helpers for the book's notebooks: device, size presets, recorded GPU results.

    from path_lib.book.notebook import DEVICE, pick_preset, load_result, show_provenance

    cfg = pick_preset(tiny=dict(T=64, steps=200), full=dict(T=1024, steps=5000))
    bench = load_record("bench")          # the current speed record, by its stable name (RECORDS)
    show_provenance(bench)                # prints the "Recorded run: ..." label

``device`` and ``pick_preset`` are the library's (:mod:`path_lib.experiments.hardware`), here so that a
chapter imports its helpers from one place.
"""
from __future__ import annotations

import json
import re
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from ..experiments.hardware import device, pick_preset
from ..experiments.provenance import provenance_label

__all__ = ["REPOSITORY", "BRANCH", "RECORDS", "PENDING_RECORDS", "DEFAULT_RECORDS_BASE", "DEVICE", "device", "pick_preset",
           "repo_root", "records_base", "record_path", "load_result", "load_record", "optional_result",
           "optional_record", "show_provenance", "toc_files"]

# Must agree with `repository:` in _config.yml and book/_templates/first_cell.py (a test checks).
REPOSITORY = "https://github.com/path-attention/path-book"
BRANCH = "main"

DEVICE = device()


def repo_root() -> Optional[Path]:
    """The repository checkout this path_lib was imported from, or None (pip-installed, e.g. Colab)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "_toc.yml").exists() and (root / "path_lib").is_dir() else None


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
    "lm": "results/lm/lm_full.json",                           # trained language models, experiments/run_lm.py
    "flip_flop": "results/synthetic/flip_flop.json",           # experiments/run_synthetic.py
    "a5": "results/synthetic/a5_layers.json",
    "mqrar": "results/synthetic/mqrar.json",
    "conversion": "results/lm/conversion.json",                # RoPE -> PaTH conversion, experiments/run_conversion.py
}

#: Names registered before their first GPU run: the file may be absent (``optional_record`` then says so).
PENDING_RECORDS: set = set()

#: Where records come from when path_lib runs without a checkout (pip-installed, e.g. on Colab): the
#: repository's raw files on ``BRANCH``. ``PATH_BOOK_RECORDS_BASE`` overrides it (a fork, a mirror,
#: ``http://127.0.0.1:8000/`` in the tests); set, it is used even inside a checkout.
DEFAULT_RECORDS_BASE = (REPOSITORY.replace("https://github.com/", "https://raw.githubusercontent.com/")
                        + f"/{BRANCH}/")


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


def load_result(relpath: str) -> dict:
    """Load a recorded result (JSON with a ``provenance`` block) by its path in the repository.

    Reads the file from the checkout when there is one; otherwise (pip-installed, e.g. on Colab)
    downloads it from :func:`records_base`. Raises FileNotFoundError when the record does not exist
    (also a 404 from the server), OSError when it cannot be fetched, ValueError without provenance.
    """
    if not isinstance(relpath, (str, os.PathLike)):
        raise TypeError(f"relpath must be a path in the repository, got {type(relpath).__name__}")
    relpath = str(relpath).lstrip("/")
    base = records_base()
    if base is None:
        root = repo_root()
        path = root / relpath
        if not path.exists():
            raise FileNotFoundError(f"recorded result {relpath} does not exist in {root}")
        data = json.loads(path.read_text())
    else:
        url = base + relpath
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                data = json.loads(resp.read().decode())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise FileNotFoundError(f"recorded result {relpath} does not exist at {base}") from None
            raise OSError(f"could not fetch {url}: HTTP {e.code}") from None
        except urllib.error.URLError as e:
            raise OSError(f"could not fetch {url}: {e.reason}") from None
    if not isinstance(data, dict) or "provenance" not in data:
        raise ValueError(f"{relpath} has no provenance block")
    return data


def load_record(name: str) -> dict:
    """The current record ``name`` (a key of :data:`RECORDS`, e.g. ``"bench"``), by its stable path."""
    return load_result(record_path(name))


def optional_result(relpath: str, what: str = "result") -> Optional[dict]:
    """``load_result(relpath)``, or None when the record is missing or cannot be fetched; then it says
    so in one plain sentence (``No recorded {what} ({file name}).``) instead of raising, so that a
    chapter can go on without it."""
    try:
        return load_result(relpath)
    except (FileNotFoundError, OSError, ValueError) as e:
        reason = "" if isinstance(e, FileNotFoundError) else f": {e}"
        print(f"No recorded {what} ({Path(str(relpath)).name}){reason}.")
        return None


def optional_record(name: str, what: Optional[str] = None) -> Optional[dict]:
    """``load_record(name)``, or None with one plain sentence when it is missing or unreachable."""
    return optional_result(record_path(name), what or name)


def show_provenance(data: dict) -> None:
    """Display the provenance label of a recorded result under the table/figure built from it
    (the command as code, so that it can be copied as it ran)."""
    from IPython.display import Markdown, display

    p = data["provenance"]
    label = provenance_label(data).split("; command:")[0]
    display(Markdown(f"*{label}*; command: `{p['command']}`"))


def toc_files(root=None) -> list:
    """Document names of the book's ``_toc.yml`` (root, then parts and chapters), in order, as written
    there (relative to the repository root, suffix removed). Used by the build scripts and the tests."""
    import yaml

    root = Path(root) if root is not None else repo_root()
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    walk(toc.get("chapters"))
    for part in toc.get("parts") or []:
        walk(part.get("chapters"))
    return [re.sub(r"\.(ipynb|md)$", "", f) for f in files]
