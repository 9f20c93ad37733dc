"""Provenance for recorded results: which machine, software, commit, date and command produced them."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

__all__ = ["provenance", "write_result", "read_result", "provenance_label"]


def _git_commit() -> str:
    here = Path(__file__).resolve().parents[2]      # the checkout (this file: path_lib/experiments/provenance.py)
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
    """Write ``data`` with a ``provenance`` block as JSON to ``path`` (parent folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = dict(data)
    record["provenance"] = provenance(command)
    path.write_text(json.dumps(record, indent=2, sort_keys=False, default=_jsonable) + "\n")
    return path


def _jsonable(x: Any):
    try:
        return x.tolist()
    except AttributeError:
        return str(x)


def read_result(path) -> dict:
    """Load a recorded result; raises FileNotFoundError naming the file, ValueError without provenance."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"recorded result {path} does not exist")
    data = json.loads(path.read_text())
    if "provenance" not in data:
        raise ValueError(f"{path} has no provenance block")
    return data


def provenance_label(data: dict) -> str:
    """A one-line label for a recorded result, for figure captions and table notes."""
    p = data["provenance"]
    return (f"Recorded run: {p['device']}, torch {p['torch']}, triton {p.get('triton')}, "
            f"commit {str(p['commit'])[:10]}, {p['date']}; command: {p['command']}")
