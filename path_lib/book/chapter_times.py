"""How long each chapter takes to run, measured: the introduction's table and a one-line note per chapter.

    from path_lib.book.chapter_times import load_times, book_pages, times_markdown, runs_text
    times = load_times()                        # the timing records, from the checkout or fetched
    pages, titles = book_pages()                # the chapters in the book's order, by title
    display(Markdown(times_markdown(times, pages, titles)))
    display(Markdown(runs_text(times)))         # where and when each column was measured

The records are ``benchmarks/results/chapter_times_<preset>.json`` (``tiny``, ``small``, ``full``; any
may be missing), written by ``benchmarks/run_chapters.py --installed``, which runs every page from the
installed package in a fresh process, as a reader on Colab does; ``benchmarks/run_colab.sh`` is that run
on a GPU with the ``small`` preset (the Colab GPU's sizes, in float16). Each has per page ``ok`` and
``seconds`` and, in its provenance, the machine it ran on:

* a record from a CPU with the ``tiny`` preset (the book build's sizes) gives the CPU column;
* a record from a GPU gives a GPU column for its preset.

Every time shown is one of these measurements. A page with no successful GPU measurement reads
"not measured": no GPU time is estimated, and none is taken from the CPU.

No Sphinx, no IPython: plain functions of dicts, so that the introduction and the tests share them.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

__all__ = ["TIMES_RECORDS", "GPU_PRESETS", "NOT_MEASURED", "page_key", "about", "on_cpu", "page_times",
           "collect_times", "load_times", "chapter_note", "times_table", "times_markdown", "runs_text",
           "notebook_title", "book_pages"]

TIMES_RECORDS = {p: f"benchmarks/results/chapter_times_{p}.json" for p in ("tiny", "small", "full")}
#: The GPU columns, in this order when they exist: the Colab GPU's sizes, then the large GPUs'.
GPU_PRESETS = ("small", "full")
NOT_MEASURED = "not measured"


def page_key(path: str) -> str:
    """``"book/part3/07_kernel"`` for any spelling of a page: with or without ``.ipynb``, absolute paths
    of any checkout (the part from the last ``book/`` on)."""
    if not isinstance(path, str):
        raise TypeError(f"path must be a str (a page such as 'book/part3/07_kernel'), got {type(path).__name__}")
    p = path.replace("\\", "/")
    i = p.rfind("book/")
    p = p[i:] if i >= 0 else p
    return re.sub(r"\.(ipynb|md)$", "", p)


def about(seconds: float) -> str:
    """``"about 35 s"``, ``"about 4 min"``: a duration rounded for a reader (whole seconds below 100 s,
    whole minutes from there)."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    if seconds < 99.5:
        return f"about {max(1, round(seconds))} s"
    return f"about {max(2, round(seconds / 60))} min"


def on_cpu(record: dict) -> bool:
    """Whether the record ran on a CPU (its provenance's device)."""
    return str(record.get("provenance", {}).get("device", "")).upper().startswith("CPU")


def page_times(record: dict) -> Dict[str, dict]:
    """``{page: dict(seconds, ok, preset, device)}`` of a timing record (its ``pages`` rows)."""
    if not isinstance(record, dict) or "provenance" not in record:
        raise ValueError("record must be a recorded result (a dict with a provenance block)")
    device = record["provenance"].get("device", "unknown device")
    out = {}
    for row in record.get("pages") or []:
        out[page_key(row["page"])] = dict(seconds=float(row["seconds"]), ok=bool(row["ok"]),
                                          preset=row.get("preset", record.get("preset", "tiny")), device=device)
    return out


def _run(record: dict, where: str, preset: str) -> dict:
    prov = record["provenance"]
    return dict(where=where, preset=preset, device=str(prov.get("device", "unknown device")),
                torch=str(prov.get("torch", "")), date=str(prov.get("date", ""))[:10])


def collect_times(records: Dict[str, Optional[dict]]) -> dict:
    """Sort timing records into ``dict(cpu={page: row}, gpu={preset: {page: row}}, runs=[...])``.

    ``cpu``: the pages that ran successfully in a CPU record with the ``tiny`` preset. ``gpu``: per preset,
    the pages that ran successfully in a GPU record. ``runs``: per record used, ``dict(where, preset,
    device, torch, date)``. A failed page has no time; a missing record (None) is left out."""
    cpu: Dict[str, dict] = {}
    gpu: Dict[str, Dict[str, dict]] = {}
    runs: List[dict] = []
    for rec in records.values():
        if rec is None:
            continue
        rows = page_times(rec)
        presets = sorted({r["preset"] for r in rows.values()})
        if on_cpu(rec):
            good = {k: r for k, r in rows.items() if r["ok"] and r["preset"] == "tiny"}
            cpu.update(good)
            if good:
                runs.append(_run(rec, "CPU", "tiny"))
            continue
        for preset in presets:
            good = {k: r for k, r in rows.items() if r["ok"] and r["preset"] == preset}
            if good:
                gpu.setdefault(preset, {}).update(good)
                runs.append(_run(rec, "GPU", preset))
    return dict(cpu=cpu, gpu=gpu, runs=runs)


def load_times(load: Optional[Callable[[str], dict]] = None) -> dict:
    """:func:`collect_times` of :data:`TIMES_RECORDS` as the chapters load records
    (``path_lib.records.load_result``: the checkout's files, or the repository's raw files without a
    checkout); a missing or unreachable record is left out. ``load`` replaces the loader (tests)."""
    if load is None:
        from ..records import load_result
        load = load_result
    records: Dict[str, Optional[dict]] = {}
    for name, rel in TIMES_RECORDS.items():
        try:
            records[name] = load(rel)
        except (FileNotFoundError, OSError, ValueError):
            records[name] = None
    return collect_times(records)


def _gpu_presets(times: dict) -> List[str]:
    have = [p for p in GPU_PRESETS if times["gpu"].get(p)]
    return have + sorted(p for p in times["gpu"] if p not in GPU_PRESETS and times["gpu"][p])


def chapter_note(page: str, times: dict) -> str:
    """One line for the top of a chapter: ``"About 35 s on a CPU (tiny preset); GPU: about 12 s on a
    Tesla T4 (small preset)"``, or ``"...; GPU: not measured"``."""
    key = page_key(page)
    cpu = times["cpu"].get(key)
    first = f"{about(cpu['seconds']).capitalize()} on a CPU (tiny preset)" if cpu else f"CPU: {NOT_MEASURED}"
    gpus = [times["gpu"][p][key] for p in _gpu_presets(times) if key in times["gpu"][p]]
    second = "; ".join(f"{about(r['seconds'])} on {r['device']} ({r['preset']} preset)" for r in gpus)
    return f"{first}; GPU: {second or NOT_MEASURED}"


def _pages_of(times: dict) -> List[str]:
    seen: Dict[str, None] = {}
    for group in [times["cpu"], *times["gpu"].values()]:
        for key in group:
            seen.setdefault(key, None)
    return list(seen)


def times_table(times: dict, pages: Optional[Iterable[str]] = None) -> List[dict]:
    """Rows ``dict(page, cpu, gpu={preset: text})`` for ``pages`` (default: every page a record times, in
    the records' order); a text is :func:`about` of a measurement or :data:`NOT_MEASURED`."""
    presets = _gpu_presets(times)
    rows = []
    for page in (_pages_of(times) if pages is None else pages):
        key = page_key(page)
        cpu = times["cpu"].get(key)
        gpu = {p: about(times["gpu"][p][key]["seconds"]) if key in times["gpu"][p] else NOT_MEASURED
               for p in presets}
        rows.append(dict(page=key, cpu=about(cpu["seconds"]) if cpu else NOT_MEASURED, gpu=gpu))
    return rows


def times_markdown(times: dict, pages: Optional[Iterable[str]] = None,
                   titles: Optional[Dict[str, str]] = None) -> str:
    """:func:`times_table` as a Markdown table: a chapter column (``titles`` maps a page to the name
    shown), the CPU column and one GPU column per GPU preset measured (one "GPU" column reading
    "not measured" when there is none)."""
    presets = _gpu_presets(times)
    heads = [f"GPU, {p} preset" for p in presets] or ["GPU"]
    lines = ["| Chapter | CPU, tiny preset | " + " | ".join(heads) + " |",
             "|---|---|" + "---|" * len(heads)]
    for r in times_table(times, pages):
        name = (titles or {}).get(r["page"], r["page"])
        gpu = [r["gpu"][p] for p in presets] or [NOT_MEASURED]
        lines.append(f"| {name} | {r['cpu']} | " + " | ".join(gpu) + " |")
    return "\n".join(lines)


def runs_text(times: dict) -> str:
    """One sentence per column of :func:`times_markdown`: the machine, PyTorch version and date of the
    run it comes from (or that no GPU run is recorded)."""
    out = []
    for run in times["runs"]:
        column = "CPU column" if run["where"] == "CPU" else f"GPU column ({run['preset']} preset)"
        torch = f", PyTorch {run['torch']}" if run["torch"] else ""
        out.append(f"{column}: {run['device']}{torch}, {run['date']}.")
    if not any(run["where"] == "GPU" for run in times["runs"]):
        out.append(f"No run of the chapters on a GPU is recorded: every GPU time reads \"{NOT_MEASURED}\".")
    return " ".join(out)


def notebook_title(path: Path) -> Optional[str]:
    """The first ``# `` heading of a notebook's Markdown cells (None when it has none)."""
    cells = json.loads(Path(path).read_text()).get("cells", [])
    for cell in cells:
        if cell.get("cell_type") != "markdown":
            continue
        source = "".join(cell.get("source", []))
        m = re.search(r"^# +(.+?)\s*$", source, re.M)
        if m:
            return m.group(1)
    return None


def _numbers(root: Path) -> Dict[str, str]:
    """The numbers the site gives the pages of numbered parts: chapters counted across the parts, a
    chapter's sections as ``"10.1"``."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    out: Dict[str, str] = {}
    n = 0
    for part in toc.get("parts") or []:
        if not part.get("numbered"):
            continue
        for chapter in part.get("chapters") or []:
            n += 1
            out[page_key(chapter["file"])] = str(n)
            for j, section in enumerate(chapter.get("sections") or [], 1):
                out[page_key(section["file"])] = f"{n}.{j}"
    return out


def book_pages(root: Optional[Path] = None) -> Tuple[List[str], Dict[str, str]]:
    """The notebook pages of the book's table of contents, in order, and their titles as the site
    shows them (their first heading, after the chapter's number: ``"7. The kernel"``). Without a
    checkout (``root`` None and none found): ``([], {})``, and the table lists the pages the records
    time, by file name."""
    from ..records import repo_root
    from .notebook import toc_files

    root = Path(root) if root is not None else repo_root()
    if root is None:
        return [], {}
    numbers = _numbers(root)
    pages, titles = [], {}
    for name in toc_files(root):
        path = root / f"{name}.ipynb"
        if path.exists():
            pages.append(name)
            title = notebook_title(path) or name
            titles[name] = f"{numbers[name]}. {title}" if name in numbers else title
    return pages, titles
