"""Execute the book's notebooks two at a time, before the (serial) Sphinx build.

Jupyter Book executes notebooks one after another; on a 2-core machine running two at once
roughly halves that part of the build. This script fills the jupyter-cache that the build
reads (`execute_notebooks: cache`, cache `_build/.jupyter_cache`) from a *fresh* cache, so
every notebook is executed against the current path_lib. A notebook that fails here is simply
not cached: the Sphinx build executes it again and reports the error as usual (a build failure
under -W), so this step never hides a failure.

Usage: python scripts/execute_notebooks.py   (run from anywhere; make book does it)
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import yaml
from jupyter_cache import get_cache
from jupyter_cache.executors import load_executor

from path_lib.book.notebook import toc_files

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / ".jupyter_cache"


def toc_notebooks() -> list[Path]:
    paths = [ROOT / (f + ".ipynb") for f in toc_files(ROOT)]
    return [p for p in paths if p.exists()]


def main() -> int:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    timeout = int(config.get("execute", {}).get("timeout", 600))
    shutil.rmtree(CACHE, ignore_errors=True)  # fresh: path_lib may have changed
    cache = get_cache(str(CACHE))
    notebooks = toc_notebooks()
    for nb in notebooks:
        cache.add_nb_to_project(str(nb))
    logging.basicConfig(level=logging.INFO, format="execute_notebooks: %(message)s")
    logger = logging.getLogger("execute_notebooks")
    executor = load_executor("local-parallel", cache=cache, logger=logger)
    result = executor.run_and_cache(timeout=timeout, allow_errors=False)
    failed = result.excepted + result.errored
    print(f"execute_notebooks: {len(result.succeeded)} of {len(notebooks)} notebooks executed and cached"
          + (f"; failed (the build will re-run and report them): {failed}" if failed else ""))
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
