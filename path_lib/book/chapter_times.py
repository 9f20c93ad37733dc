"""How long each page of the book takes to run: a one-line note per chapter and the table for all of
them, from the timing records of ``benchmarks/run_chapters.py --installed`` (run without a checkout).

    from path_lib.book.chapter_times import load_times, chapter_note, times_table, times_markdown
    times = load_times()                              # the records, from the checkout or fetched
    print(chapter_note("book/part3/07_kernel", times))
    # About 31 s on a CPU (book build); GPU: about 63 s on an NVIDIA H200 (measured, full preset)
    display(Markdown(times_markdown(times)))          # every page: CPU, GPU (measured / estimate)

Records read (any may be missing):

* ``benchmarks/results/chapter_times_<preset>.json`` (``tiny``, ``small``, ``full``): per page ``ok`` and
  ``seconds``, the machine in the provenance. A CPU record gives the CPU column (the book build's
  preset), a GPU record a *measured* GPU time.
* ``benchmarks/results/chapters_gpu.json``: the earlier GPU check of single chapters (full preset).
* ``benchmarks/results/chapter_estimates_t4.json``: *estimated* seconds on a T4 with the small preset
  (``benchmarks/estimate_t4.py``; the formula is :func:`path_lib.hardware.estimate_seconds`).

No Sphinx, no IPython: plain functions of dicts, so that the intro, a chapter and the tests share them.
"""
from __future__ import annotations

import math
import re
from typing import Callable, Dict, Iterable, List, Optional

__all__ = ["TIMES_RECORDS", "ESTIMATE_RECORD", "LEGACY_GPU_RECORD", "page_key", "about", "on_cpu", "page_times",
           "collect_times", "load_times", "chapter_note", "times_table", "times_markdown"]

TIMES_RECORDS = {p: f"benchmarks/results/chapter_times_{p}.json" for p in ("tiny", "small", "full")}
ESTIMATE_RECORD = "benchmarks/results/chapter_estimates_t4.json"
LEGACY_GPU_RECORD = "benchmarks/results/chapters_gpu.json"


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
    """``{page: dict(seconds, ok, preset, device)}`` of a timing record: the ``pages`` rows of
    ``run_chapters.py --installed``, or the ``rows`` of the earlier single-chapter GPU check."""
    if not isinstance(record, dict) or "provenance" not in record:
        raise ValueError("record must be a recorded result (a dict with a provenance block)")
    device = record["provenance"].get("device", "unknown device")
    out = {}
    for row in record.get("pages") or record.get("rows") or []:
        key = page_key(row.get("page") or row.get("chapter"))
        out[key] = dict(seconds=float(row["seconds"]), ok=bool(row["ok"]),
                        preset=row.get("preset", record.get("preset", "full")), device=device)
    return out


def collect_times(records: Dict[str, Optional[dict]]) -> dict:
    """Sort the records (by their names: keys of :data:`TIMES_RECORDS`, ``"estimate"``, ``"legacy_gpu"``)
    into ``dict(cpu={page: row}, gpu={page: [rows, measured]}, estimate={page: row})``."""
    cpu: Dict[str, dict] = {}
    gpu: Dict[str, List[dict]] = {}
    estimate: Dict[str, dict] = {}
    for name, rec in records.items():
        if rec is None:
            continue
        if name == "estimate":
            for key, row in page_times(rec).items():
                estimate[key] = dict(row, device=rec.get("gpu", "T4"))
            continue
        for key, row in page_times(rec).items():
            if not row["ok"]:
                continue
            if on_cpu(rec):
                if row["preset"] == "tiny":
                    cpu[key] = row
            else:
                gpu.setdefault(key, []).append(row)
    return dict(cpu=cpu, gpu=gpu, estimate=estimate)


def load_times(load: Optional[Callable[[str], dict]] = None) -> dict:
    """:func:`collect_times` of the records as the chapters load them (``path_lib.records.load_result``:
    the checkout's files, or the repository's raw files without a checkout); a missing or unreachable
    record is left out. ``load`` replaces the loader (tests)."""
    if load is None:
        from ..records import load_result
        load = load_result
    names = dict(TIMES_RECORDS, estimate=ESTIMATE_RECORD, legacy_gpu=LEGACY_GPU_RECORD)
    records: Dict[str, Optional[dict]] = {}
    for name, rel in names.items():
        try:
            records[name] = load(rel)
        except (FileNotFoundError, OSError, ValueError):
            records[name] = None
    return collect_times(records)


def _article(device: str) -> str:
    return "an" if device[:1].upper() in "AEIOU" or device.upper().startswith(("NVIDIA", "H1", "H2")) else "a"


def _gpu_text(key: str, times: dict) -> str:
    measured = sorted(times["gpu"].get(key, []), key=lambda r: (r["preset"] != "small", r["seconds"]))
    if measured:
        r = measured[0]
        return f"{about(r['seconds'])} on {_article(r['device'])} {r['device']} (measured, {r['preset']} preset)"
    est = times["estimate"].get(key)
    if est is not None:
        return f"{about(est['seconds'])} on a {est['device']} ({est['preset']} preset, estimate)"
    return "not yet measured"


def chapter_note(page: str, times: dict) -> str:
    """One line for the top of a chapter: ``"About 35 s on a CPU (book build); GPU: not yet measured"``,
    the GPU part a measured time (a GPU record; the T4-class ``small`` preset first) or an estimate."""
    key = page_key(page)
    cpu = times["cpu"].get(key)
    first = (f"{about(cpu['seconds'])[0].upper()}{about(cpu['seconds'])[1:]} on a CPU (book build)"
             if cpu else "CPU time not yet measured")
    return f"{first}; GPU: {_gpu_text(key, times)}"


def times_table(times: dict, pages: Optional[Iterable[str]] = None) -> List[dict]:
    """Rows ``dict(page, cpu, gpu)`` (texts, as in :func:`chapter_note`), for ``pages`` (default: every page
    that any record times, in the book's order as the records list them)."""
    if pages is None:
        seen: Dict[str, None] = {}
        for group in (times["cpu"], times["gpu"], times["estimate"]):
            for key in group:
                seen.setdefault(key, None)
        pages = list(seen)
    rows = []
    for page in pages:
        key = page_key(page)
        cpu = times["cpu"].get(key)
        rows.append(dict(page=key, cpu=about(cpu["seconds"]) if cpu else "not yet measured",
                         gpu=_gpu_text(key, times)))
    return rows


def times_markdown(times: dict, pages: Optional[Iterable[str]] = None,
                   titles: Optional[Dict[str, str]] = None) -> str:
    """:func:`times_table` as a Markdown table (``titles`` maps a page to the name shown)."""
    lines = ["| Page | CPU (book build, tiny preset) | GPU |", "|---|---|---|"]
    for r in times_table(times, pages):
        name = (titles or {}).get(r["page"], r["page"])
        lines.append(f"| {name} | {r['cpu']} | {r['gpu']} |")
    return "\n".join(lines)
