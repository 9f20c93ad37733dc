"""Small helpers for the book's notebooks: device, size presets, recorded GPU results, the table of contents.

    from path_lib.book.notebook import DEVICE, preset_sizes, optional_record, show_provenance

    lengths = preset_sizes("blockwise.lengths")   # this machine's row of path_lib.hardware.PRESET_TABLE
    bench = optional_record("bench")      # the current speed record, by its stable name (None if missing)
    show_provenance(bench)                # prints the "Recorded run: ..." label

``device``, ``preset_name``, ``preset_sizes`` and ``pick_preset`` are the library's (:mod:`path_lib.hardware`:
the preset table), and
``optional_record`` and ``repo_root`` are :mod:`path_lib.records`' (the registry, provenance, schema
versions, writing and loading of records live there), here so that a chapter imports its helpers from
one place. The helpers of this module's own need IPython (:func:`show_provenance`) or pyyaml (:func:`toc_files`).
"""
from __future__ import annotations

import re
from pathlib import Path

from ..hardware import device, pick_preset, preset_name, preset_sizes
from ..records import optional_record, provenance_label, repo_root

__all__ = ["DEVICE", "device", "preset_name", "preset_sizes", "pick_preset", "optional_record", "repo_root", "show_provenance", "toc_files"]

DEVICE = device()


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
