"""Small helpers for the book's notebooks: device, size presets, recorded GPU results, the table of contents.

    from path_lib.book.notebook import DEVICE, preset_sizes, optional_record, show_provenance

    lengths = preset_sizes("blockwise.lengths")   # this machine's row of path_lib.hardware.PRESET_TABLE
    bench = optional_record("bench")      # the current speed record, by its stable name (None if missing)
    show_provenance(bench)                # prints the "Recorded run: ..." label
    show_provenance_dropdown(bench)       # the same, collapsed: device, versions, commit, date, command

``device``, ``preset_name``, ``preset_sizes`` and ``pick_preset`` are the library's (:mod:`path_lib.hardware`:
the preset table), and
``optional_record`` and ``repo_root`` are :mod:`path_lib.records`' (the registry, provenance, schema
versions, writing and loading of records live there), here so that a chapter imports its helpers from
one place. The helpers of this module's own need IPython (:func:`show_provenance`) or pyyaml (:func:`toc_files`).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from ..hardware import device, pick_preset, preset_name, preset_sizes
from ..records import optional_record, repo_root

__all__ = ["DEVICE", "device", "preset_name", "preset_sizes", "pick_preset", "optional_record", "repo_root",
           "show_provenance", "public_command", "provenance_details", "show_provenance_dropdown", "toc_files"]

DEVICE = device()


def show_provenance(data: dict, summary: str = "How this run was made", notes: Sequence[str] = ()) -> None:
    """Display how a recorded result was made, under the table or figure built from it: a collapsed
    dropdown (:func:`provenance_details`: device, versions, commit, date, the public command)."""
    from IPython.display import HTML, display

    display(HTML(provenance_details(data, summary, notes)))


#: Options of the run scripts that say where a run kept its files or how a machine's time was split
#: (resumable state, output paths, budgets per call, parallel workers): they do not change the result,
#: so :func:`public_command` leaves them out, with their values.
MACHINE_OPTIONS = ("--state", "--resume-from", "--out", "--out-dir", "--budget-s", "--deadline-s", "--workers",
                   "--json")
#: Folders of the machine a run happened on: a word under one of them is the machine's, not the reader's.
MACHINE_PATHS = ("/tmp/", "/root/", "/work/")


def public_command(command: str) -> str:
    """The command a reader runs to reproduce a record, from the one the record stores: the run
    script's path in this repository (``scripts/experiments/...``) and its options, less
    :data:`MACHINE_OPTIONS` (with their values) and environment assignments (``NAME=value``)."""
    import shlex

    if not isinstance(command, str):
        raise TypeError(f"command must be a str, got {type(command).__name__}")
    words = shlex.split(command)
    out: list = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        name = w.split("=", 1)[0]
        if name in MACHINE_OPTIONS:
            skip = "=" not in w
            continue
        if not out and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w):
            continue
        if w.startswith(MACHINE_PATHS) or w.split("=", 1)[-1].startswith(MACHINE_PATHS):
            continue
        if w.startswith("experiments/"):
            w = "scripts/" + w
        out.append(w)
    if out and out[0] in ("python3", "python"):
        out[0] = "python"
    return " ".join(shlex.quote(w) for w in out)


def provenance_details(data: dict, summary: str = "How this run was made", notes: Sequence[str] = ()) -> str:
    """HTML of a collapsed ``<details>`` block with a record's provenance: device, versions, commit,
    date and :func:`public_command`, then ``notes`` (how the record came about, such as which code it
    timed: facts for the reader who opens it, not the chapter's text). It renders as a dropdown in
    Jupyter, Colab and the static site."""
    import html

    p = data["provenance"]
    rows = [("device", p.get("device")),
            ("versions", f"torch {p.get('torch')}, triton {p.get('triton')}, Python {p.get('python')}"),
            ("commit", str(p.get("commit"))), ("date", str(p.get("date", ""))[:10])]
    items = "".join(f"<li>{k}: {html.escape(str(v))}</li>" for k, v in rows)
    command = html.escape(public_command(str(p.get("command", ""))))
    extra = "".join(f"<li>note: {html.escape(str(n))}</li>" for n in notes)
    return (f"<details><summary>{html.escape(summary)}</summary><ul>{items}"
            f"<li>command: <code>{command}</code></li>{extra}</ul></details>")


def show_provenance_dropdown(data: dict, summary: str = "How this run was made") -> None:
    """:func:`show_provenance` (the name chapters 5, 12 and 12b use)."""
    show_provenance(data, summary)


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
