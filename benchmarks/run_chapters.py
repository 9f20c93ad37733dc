"""Execute book chapters top to bottom in one IPython shell each, without Jupyter: the check that a
chapter's GPU path (its "full" preset, as a Colab GPU reader runs it) works, on a machine that has
IPython but no notebook server (the device machine).

    PYTHONPATH=. python3 benchmarks/run_chapters.py book/part3/07_kernel.ipynb [...] [--json out.json]

Each chapter runs in a fresh process with the chapter's folder as working directory (as the book
build does); a cell that raises stops that chapter. Prints per chapter: cells run, seconds, and the
failing cell's source and traceback if one failed; exits 1 if any chapter failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RUNNER = r"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
cells = json.loads(sys.stdin.read())
shell = InteractiveShell.instance()
for i, src in cells:
    t0 = time.time()
    result = shell.run_cell(src)
    print(f"[cell {i}: {time.time() - t0:.1f} s]", flush=True)
    if not result.success:
        print("FAILED CELL", i, ":\n" + src, flush=True)
        sys.exit(1)
"""


def code_cells(path: Path) -> list:
    """``[(index, source)]`` of the notebook's code cells, in order."""
    nb = json.loads(path.read_text())
    def plain(src):  # a plain shell has no GUI hooks: %matplotlib lines go (MPLBACKEND=Agg instead)
        return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("%matplotlib"))
    return [(i, plain("".join(c["source"]))) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]


def run(path: Path, timeout: float) -> dict:
    t0 = time.time()
    env = dict(os.environ, PATH_BOOK_STATIC="1", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path.cwd()), env.get("PYTHONPATH")]))
    try:
        out = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(code_cells(path)), text=True,
                             capture_output=True, cwd=path.parent, env=env, timeout=timeout)
        ok, log = out.returncode == 0, out.stdout + out.stderr
    except subprocess.TimeoutExpired as e:
        ok, log = False, f"timed out after {timeout:.0f} s\n{e.stdout or ''}"
    return dict(chapter=str(path), ok=ok, seconds=round(time.time() - t0, 1), log_tail=log[-4000:])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("chapters", nargs="+")
    ap.add_argument("--json", default=None)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    results = []
    for ch in args.chapters:
        r = run(Path(ch).resolve(), args.timeout)
        results.append(r)
        print(f"{'ok    ' if r['ok'] else 'FAILED'} {ch}: {r['seconds']} s", flush=True)
        if not r["ok"]:
            print(r["log_tail"], flush=True)
    if args.json:
        from path_lib.records import write_result
        write_result(args.json, dict(rows=results), command="PYTHONPATH=. python3 " + " ".join(sys.argv))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
