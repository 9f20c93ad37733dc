"""CI check of the Triton kernels on the CPU: runs ``tests/test_kernels_interpret_cases.py`` in a
subprocess with ``TRITON_INTERPRET=1`` (float32, tiny shapes; forward and every gradient against the
float64 reference, the gate, grouped-query heads, ``cu_seqlens``, bad inputs).

The variable has to be set before the process first imports triton (which decides then whether
``tl.max``/``tl.sum`` etc. are interpreted), and setting it in this process would also turn the
GPU tests of the same session into interpreted ones: hence the subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

CASES = Path(__file__).with_name("test_kernels_interpret_cases.py")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
                    reason="TRITON_INTERPRET is set: the cases module runs in this process instead")
def test_kernels_under_triton_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1")
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "pytest", str(CASES), "-q", "-p", "no:cacheprovider"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    print(out)
    assert proc.returncode == 0, f"interpreted kernel cases failed:\n{out}"
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.split("\n")[-2], out
