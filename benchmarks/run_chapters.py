"""Execute the book's pages top to bottom, one IPython shell each, and time them.

Two ways to run it:

* **As a reader without a checkout** (``--installed``, the Colab case): build the wheel of this
  checkout (``pip wheel --no-deps``), install it into a fresh virtual environment (which sees torch,
  IPython, matplotlib, ... of the running interpreter, as Colab's preinstalled packages), serve the
  repository's records over ``http://127.0.0.1`` with ``PATH_BOOK_RECORDS_BASE`` pointing at it, and
  run every page of ``_toc.yml`` (or the pages given) from an empty folder outside the checkout, with
  each ``--preset`` forced through ``PATH_BOOK_PRESET``. One record per preset,
  ``benchmarks/results/chapter_times_<preset>.json``: per page ``ok``, ``seconds``, the cells' times
  and the failing cell if any; its provenance says that it ran without a checkout::

      PYTHONPATH=. python benchmarks/run_chapters.py --installed --preset tiny
      PYTHONPATH=. python benchmarks/run_chapters.py --installed --preset small book/part3/07_kernel.ipynb

* **Inside the checkout** (the older form, no ``--installed``): the chapters given run with the
  checkout on ``PYTHONPATH`` and the chapter's folder as working directory (as the book build does)::

      PYTHONPATH=. python3 benchmarks/run_chapters.py book/part3/07_kernel.ipynb [...] [--json out.json]

A cell that raises stops that page. Prints one line per page (and the failing cell's source and
traceback); exits 1 if any page failed.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from path_lib.hardware import PRESET_SPELLINGS, canonical_preset  # noqa: E402  (the preset table's names)

# Runs in the page's process: the code cells in order, each cell's seconds (and the failing cell) as
# JSON lines into the file named by argv[1], so that a page that times out still leaves its cells.
RUNNER = r"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
cells = json.loads(sys.stdin.read())
shell = InteractiveShell.instance()
with open(sys.argv[1], "a") as log:
    for i, src in cells:
        t0 = time.time()
        result = shell.run_cell(src)
        ok = bool(result.success)
        log.write(json.dumps(dict(cell=i, seconds=round(time.time() - t0, 2), ok=ok)) + "\n")
        log.flush()
        print(f"[cell {i}: {time.time() - t0:.1f} s]", flush=True)
        if not ok:
            print("FAILED CELL", i, ":\n" + src, flush=True)
            sys.exit(1)
"""


def code_cells(path: Path) -> list:
    """``[(index, source)]`` of the notebook's code cells, in order (``index`` counts all cells)."""
    nb = json.loads(path.read_text())

    def plain(src):  # a plain shell has no GUI hooks: %matplotlib lines go (MPLBACKEND=Agg instead)
        return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%matplotlib"))
    return [(i, plain("".join(c["source"]))) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]


def toc_pages(root: Path = ROOT) -> list:
    """The notebook pages of ``_toc.yml`` (root, chapters, sections), in order, relative to ``root``
    (:func:`path_lib.book.notebook.toc_files` with the ``.ipynb`` suffix). Markdown pages (the
    bibliography) hold no code and are left out."""
    from path_lib.book.notebook import toc_files

    return [f + ".ipynb" for f in toc_files(root) if (Path(root) / (f + ".ipynb")).exists()]


def run_page(path: Path, timeout: float, *, python: str = sys.executable, env: dict | None = None,
             cwd: Path | None = None) -> dict:
    """Run one page's code cells in a fresh process. Returns ``dict(ok, seconds, cells, failed_cell,
    log_tail)``: ``cells`` ``[[index, seconds], ...]`` for the cells that ran, ``failed_cell`` None or
    ``dict(index, source)`` (a page that ran out of time fails at the cell that was running);
    ``log_tail`` the end of its output when it failed."""
    cells = code_cells(path)
    with tempfile.TemporaryDirectory(prefix="page_cells_") as tmp:
        log_file = Path(tmp) / "cells.jsonl"
        log_file.touch()
        t0 = time.time()
        try:
            out = subprocess.run([python, "-c", RUNNER, str(log_file)], input=json.dumps(cells), text=True,
                                 capture_output=True, cwd=cwd or path.parent, env=env, timeout=timeout)
            ok, log = out.returncode == 0, out.stdout + out.stderr
        except subprocess.TimeoutExpired as e:
            text = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            ok, log = False, f"timed out after {timeout:.0f} s\n{text}"
        seconds = round(time.time() - t0, 1)
        done = [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]
    failed = None
    if not ok:
        ran = {d["cell"] for d in done if d["ok"]}
        bad = next((i for i, _ in cells if i not in ran), None)
        if bad is not None:
            failed = dict(index=bad, source=dict(cells)[bad][:2000])
    return dict(ok=ok, seconds=seconds, cells=[[d["cell"], d["seconds"]] for d in done],
                failed_cell=failed, log_tail="" if ok else log[-4000:])


# --- without a checkout: wheel, clean environment, records over localhost --------------------------

#: left out of the copy that the wheel is built from when git cannot list the files
_NOT_SOURCES = (".git", ".venv", "_build", "__pycache__", "*.egg-info", "build", "dist", ".whl", ".gl", ".variants",
                "node_modules", ".pytest_cache", ".hypothesis", ".ipynb_checkpoints", "runs")


def build_wheel(root: Path, dest: Path, *, isolation: bool = False) -> Path:
    """``pip wheel --no-deps`` of a copy of ``root``'s files (git's tracked and unignored ones, so that
    the build leaves nothing in the checkout; without git, the tree less :data:`_NOT_SOURCES`).
    Returns the wheel's path."""
    src = dest / "src"
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                                capture_output=True, text=True)
    except OSError:                     # no git (a copy of the tree, as on the device machine)
        listed = None
    if listed is None or listed.returncode != 0:
        shutil.copytree(root, src, ignore=shutil.ignore_patterns(*_NOT_SOURCES))
    else:
        for rel in filter(None, listed.stdout.split("\0")):
            if (root / rel).is_file():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / rel, src / rel)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dest), str(src)]
    if not isolation:                  # offline: the running interpreter's setuptools builds it
        cmd.insert(4, "--no-build-isolation")
    out = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if out.returncode != 0 or not wheels:
        raise RuntimeError(f"pip wheel failed:\n{out.stdout}\n{out.stderr}")
    return wheels[-1]


def make_env(wheel: Path, where: Path) -> str:
    """A virtual environment in ``where`` with ``wheel`` installed (no dependencies), seeing the running
    interpreter's packages (torch, IPython, ...) behind its own. Returns its python.

    ``venv --system-site-packages`` made from inside a virtual environment sees the base interpreter's
    packages, not this environment's: a ``.pth`` file adds this interpreter's site-packages folders
    (as plain paths, so that their own ``.pth`` files, e.g. an editable path_lib, are not run)."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(where)],
                   check=True, capture_output=True)
    python = str(where / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    if sys.prefix != sys.base_prefix:
        parents = [p for p in site.getsitepackages() if Path(p).is_dir()]
        (Path(purelib) / "_parent_env.pth").write_text("\n".join(parents) + "\n")
    out = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                          "--no-index", "--no-compile", str(wheel)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"installing {wheel.name} failed:\n{out.stdout}\n{out.stderr}")
    return python


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve_records(root: Path):
    """Serve ``root`` (the repository: its records) on ``http://127.0.0.1:<free port>/``; yields the URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def page_env(preset: str, base: str) -> dict:
    """The environment of a page run without a checkout: no PYTHONPATH, the preset forced, the records'
    base URL, static figures and a file backend for matplotlib (as the book build)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PATH_BOOK_PRESET", "VIRTUAL_ENV")}
    env.update(PATH_BOOK_PRESET=preset, PATH_BOOK_RECORDS_BASE=base, PATH_BOOK_STATIC="1", MPLBACKEND="Agg")
    return env


def installed_origin(python: str, env: dict, cwd: Path) -> str:
    """Where the environment imports path_lib from; a RuntimeError if that is inside the checkout."""
    out = subprocess.run([python, "-c", "import path_lib, path_lib.kernels; print(path_lib.__file__)"],
                         capture_output=True, text=True, env=env, cwd=cwd)
    if out.returncode != 0:
        raise RuntimeError(f"the environment cannot import path_lib:\n{out.stderr}")
    origin = out.stdout.strip()
    if Path(origin).resolve().is_relative_to(ROOT):
        raise RuntimeError(f"path_lib came from the checkout ({origin}), not from the wheel")
    return origin


def run_installed(pages: list, presets: list, *, out_dir: Path, timeout: float, isolation: bool = False,
                  command: str = "") -> list:
    """Every page with every preset, without a checkout; one record per preset in ``out_dir``.
    Returns the records' paths."""
    from path_lib.records import write_result

    written = []
    with tempfile.TemporaryDirectory(prefix="book_reader_") as tmp, serve_records(ROOT) as base:
        tmp = Path(tmp)
        commit = _commit(ROOT)          # what the wheel is built from (the tree may change while pages run)
        wheel = build_wheel(ROOT, tmp / "wheel", isolation=isolation)
        python = make_env(wheel, tmp / "venv")
        for preset in presets:
            rows = []
            for page in pages:
                cwd = tmp / "pages" / preset / Path(page).stem      # an empty folder, as /content on Colab
                cwd.mkdir(parents=True)
                env = page_env(preset, base)
                origin = installed_origin(python, env, cwd)
                r = run_page(ROOT / page, timeout, python=python, env=env, cwd=cwd)
                rows.append(dict(page=str(Path(page).with_suffix("")), preset=preset, **r))
                print(f"{'ok    ' if r['ok'] else 'FAILED'} {page} [{preset}]: {r['seconds']} s", flush=True)
                if not r["ok"]:
                    print(r["log_tail"], flush=True)
            data = dict(preset=preset, checkout=False, wheel=wheel.name, path_lib_from=origin,
                        records_base="the repository served on 127.0.0.1 (PATH_BOOK_RECORDS_BASE)",
                        dtype_forced=os.environ.get("PATH_BOOK_DTYPE") or None, timeout_s=timeout, pages=rows)
            with mock.patch.dict(os.environ, PATH_BOOK_COMMIT=commit):    # the record's provenance reads it
                path = write_result(out_dir / f"chapter_times_{preset}.json", data, command=command)
            _mark_without_checkout(path, wheel.name)
            written.append(path)
    return written


def _commit(root: Path) -> str:
    """The checkout's commit, ``+dirty`` with uncommitted changes to tracked files (as the provenance writes it)."""
    given = os.environ.get("PATH_BOOK_COMMIT")          # a copy without git (the device machine) passes it
    if given:                                           # given wins: a copy's stale git metadata must not
        return given
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
    except OSError:
        head, dirty = "", ""
    if not head:
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _mark_without_checkout(path: Path, wheel: str) -> None:
    """Say in the record's provenance that path_lib ran from the installed wheel, not from a checkout
    (the writer's provenance describes the process that wrote it, which runs in the checkout)."""
    record = json.loads(path.read_text())
    record["provenance"].update(checkout=False, installed=wheel)
    path.write_text(json.dumps(record, indent=2) + "\n")


def _in_checkout(page: str) -> Path:
    """A page given on the command line: absolute, or relative to the checkout (else to the current folder)."""
    p = Path(page)
    if not p.is_absolute():
        p = ROOT / p if (ROOT / p).exists() else Path.cwd() / p
    p = p.resolve()
    if not p.is_relative_to(ROOT) or p.suffix != ".ipynb" or not p.is_file():
        raise ValueError(f"page must be a notebook of this checkout ({ROOT}), got {page!r}")
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="*", help="notebooks (default with --installed: every page of _toc.yml)")
    ap.add_argument("--installed", action="store_true", help="run from the built wheel, without a checkout")
    ap.add_argument("--preset", action="append", default=None, help=f"one of {', '.join(PRESET_SPELLINGS)}; repeatable")
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--json", default=None, help="(inside the checkout) the record to write")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per page (default 300; 3600 installed)")
    ap.add_argument("--build-isolation", action="store_true", help="let pip fetch setuptools (needs network)")
    args = ap.parse_args(argv)
    command = "PYTHONPATH=. python " + " ".join(["benchmarks/run_chapters.py"] + list(argv if argv is not None else sys.argv[1:]))
    if args.installed:
        presets = [canonical_preset(p) for p in (args.preset or ["tiny"])]
        pages = [str(_in_checkout(p).relative_to(ROOT)) for p in args.pages] or toc_pages(ROOT)
        paths = run_installed(pages, presets, out_dir=Path(args.out_dir), timeout=args.timeout or 3600,
                              isolation=args.build_isolation, command=command)
        rows = [r for p in paths for r in json.loads(Path(p).read_text())["pages"]]
        print("records:", *map(str, paths))
        return 0 if all(r["ok"] for r in rows) else 1
    if not args.pages:
        ap.error("give the chapters to run (or --installed for every page)")
    env = dict(os.environ, PATH_BOOK_STATIC="1", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path.cwd()), env.get("PYTHONPATH")]))
    if args.preset:
        env["PATH_BOOK_PRESET"] = canonical_preset(args.preset[-1])
    results = []
    for ch in args.pages:
        r = run_page(Path(ch).resolve(), args.timeout or 300, env=env)
        results.append(dict(chapter=str(ch), **r))
        print(f"{'ok    ' if r['ok'] else 'FAILED'} {ch}: {r['seconds']} s", flush=True)
        if not r["ok"]:
            print(r["log_tail"], flush=True)
    if args.json:
        from path_lib.records import write_result
        write_result(args.json, dict(rows=results), command=command)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
