"""The chapters that need no kernel run where Triton cannot be installed (macOS, Windows, CPU-only).

Each notebook is executed top to bottom in a fresh kernel whose interpreter cannot import Triton: a
``sitecustomize`` put first on ``PYTHONPATH`` sets ``sys.modules["triton"] = None``, so every
``import triton`` (direct, or inside ``path_lib.kernels``) raises ImportError, as on a machine without
it. A first cell, added to the executed copy, checks that the block is in place inside the kernel.

Only the cheap chapters are executed here (the introduction, Part I, chapters 11 and 13: about two
minutes together on a busy two-core machine); chapters 5, 6, 12 and 12b train models
for minutes and are executed the same way under ``-m slow``. The intro lists which chapters run
without Triton; this file is where that list is checked.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from unittest import mock

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent

CHEAP = ["book/intro.ipynb", "book/part1/01_why_data_dependent.ipynb",
         "book/part1/02_householder.ipynb", "book/part1/03_ut_transform.ipynb",
         "book/part1/04_path_attention.ipynb", "book/part4/11_extrapolation_theory.ipynb",
         "book/part4/13_claims.ipynb"]
SLOW = ["book/part2/05_expressivity.ipynb", "book/part3/06_blockwise.ipynb",
        "book/part4/12_lm_experiments.ipynb", "book/part4/12b_conversion.ipynb"]

BLOCK_TRITON = 'import sys\nsys.modules["triton"] = None\n'
CHECK_CELL = ('import importlib.util, sys\n'
              'assert sys.modules.get("triton", 0) is None, "triton is not blocked"\n'
              'assert importlib.util.find_spec("triton") is None\n')


@pytest.fixture(scope="module")
def no_triton_env(tmp_path_factory):
    """The environment of a kernel that cannot import Triton (and renders widgets statically)."""
    site = tmp_path_factory.mktemp("no_triton")
    (site / "sitecustomize.py").write_text(BLOCK_TRITON)
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"PYTHONPATH": path, "PATH_BOOK_STATIC": "1", "MPLBACKEND": "Agg"}


def run_without_triton(path: Path, env: dict) -> None:
    """Execute the notebook at ``path`` in a kernel started with ``env`` (its folder as working dir)."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(CHECK_CELL))
    with mock.patch.dict(os.environ, env):    # the kernel inherits this process's environment
        client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                         resources={"metadata": {"path": str(path.parent)}})
        client.execute()


def test_the_block_works(no_triton_env, tmp_path):
    """The sitecustomize really makes Triton unimportable in a child interpreter."""
    import subprocess

    code = "import importlib.util; print(importlib.util.find_spec('triton'))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **no_triton_env},
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "None", out


@pytest.mark.parametrize("name", CHEAP)
def test_chapter_runs_without_triton(no_triton_env, name):
    run_without_triton(ROOT / name, no_triton_env)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_training_chapter_runs_without_triton(no_triton_env, name):
    run_without_triton(ROOT / name, no_triton_env)
