"""Small helpers for the book's notebooks: device, size presets, recorded GPU results.

    from path_lib.notebook import DEVICE, pick_preset, load_result, show_provenance

    cfg = pick_preset(tiny=dict(T=64, steps=200), full=dict(T=1024, steps=5000))
    data = load_result("benchmarks/results/speed_h200.json")   # recorded on a GPU, with provenance
    show_provenance(data)                                       # prints the "Recorded run: ..." label
"""
from __future__ import annotations

import json
import re
import os
import urllib.request
from pathlib import Path
from typing import Optional, TypeVar

from .provenance import provenance_label

__all__ = ["REPOSITORY", "BRANCH", "DEVICE", "device", "pick_preset", "repo_root", "load_result",
           "optional_result", "show_provenance", "latest_result", "toc_files"]

# Must agree with `repository:` in _config.yml and book/_templates/first_cell.py (a test checks).
REPOSITORY = "https://github.com/path-attention/path-book"
BRANCH = "main"

P = TypeVar("P")


def device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


DEVICE = device()


def pick_preset(tiny: P, full: P) -> P:
    """The ``full`` preset on a CUDA machine, the ``tiny`` one on CPU (the book build, laptops).

    ``PATH_BOOK_PRESET=tiny`` or ``=full`` forces a choice (e.g. a quick look on a GPU).
    """
    forced = os.environ.get("PATH_BOOK_PRESET", "").strip().lower()
    if forced in ("tiny", "full"):
        return tiny if forced == "tiny" else full
    if forced:
        raise ValueError(f"PATH_BOOK_PRESET must be 'tiny' or 'full', got {forced!r}")
    return full if device() == "cuda" else tiny


def repo_root() -> Optional[Path]:
    """The repository checkout this path_lib was imported from, or None (pip-installed, e.g. Colab)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "_toc.yml").exists() and (root / "path_lib").is_dir() else None


def load_result(relpath: str) -> dict:
    """Load a recorded result (JSON with a ``provenance`` block) by its path in the repository.

    Reads the file from the checkout when there is one; otherwise (Colab, where path_lib was
    pip-installed) downloads it from the repository's ``BRANCH``.
    """
    relpath = str(relpath).lstrip("/")
    root = repo_root()
    if root is not None:
        path = root / relpath
        if not path.exists():
            raise FileNotFoundError(f"recorded result {relpath} does not exist in {root}")
        data = json.loads(path.read_text())
    else:
        owner_repo = REPOSITORY.removeprefix("https://github.com/")
        url = f"https://raw.githubusercontent.com/{owner_repo}/{BRANCH}/{relpath}"
        with urllib.request.urlopen(url, timeout=30) as resp:
            data = json.loads(resp.read().decode())
    if "provenance" not in data:
        raise ValueError(f"{relpath} has no provenance block")
    return data


def optional_result(relpath: str, what: str = "result") -> Optional[dict]:
    """``load_result(relpath)``, or None when the record is missing or cannot be fetched; then it says
    so (``No recorded {what} {file name}.``) instead of raising, so that a chapter can go on without it."""
    try:
        return load_result(relpath)
    except (FileNotFoundError, OSError) as e:
        print(f"No recorded {what} {Path(relpath).name}." + ("" if isinstance(e, FileNotFoundError) else f" ({e})"))
        return None


def latest_result(pattern: str, folder: str = "benchmarks/results"):
    """The recorded result in ``folder`` (of the checkout) whose file name matches ``pattern`` and whose
    provenance date is the latest, as ``(file name, data)``; ``(None, None)`` when there is none
    (or no checkout). Files without a provenance block are not recorded results and are skipped."""
    root = repo_root()
    if root is None:
        return None, None
    found = []
    for path in (root / folder).glob(pattern):
        try:
            data = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and "provenance" in data:
            found.append((data["provenance"].get("date", ""), path.name, data))
    if not found:
        return None, None
    _, name, data = max(found, key=lambda x: x[0])
    return name, data


def show_provenance(data: dict) -> None:
    """Display the provenance label of a recorded result under the table/figure built from it."""
    from IPython.display import Markdown, display

    display(Markdown(f"*{provenance_label(data)}*"))


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
