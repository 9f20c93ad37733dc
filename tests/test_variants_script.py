"""benchmarks/variants.sh (kernel variants compared in one device call): its CPU side, `prepare`,
and its argument checks (the `run` side needs a GPU)."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "variants.sh"


def _sh(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True)


def test_prepare_archives_a_revision_that_imports_on_its_own():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs the git checkout")
    out = ROOT / ".variants" / "HEAD"
    try:
        r = _sh("prepare", "HEAD")
        assert r.returncode == 0, r.stderr
        for rel in ("path_lib/kernels/_triton_kernels.py", "path_lib/kernels/_config.py", "path_lib/kernels/_triton_forward.py",
                    "benchmarks/profile_parts.py",
                    "benchmarks/bench_path.py", "benchmarks/__init__.py", "path_lib/records.py"):
            assert (out / rel).is_file(), rel
        # the archived kernels are the committed ones, byte for byte
        committed = subprocess.run(["git", "show", "HEAD:kernels/path_lib/kernels/_triton_backward.py"], cwd=ROOT,
                                   capture_output=True).stdout
        assert (out / "path_lib" / "kernels" / "_triton_backward.py").read_bytes() == committed
        assert not (out / "kernels").exists()
    finally:
        shutil.rmtree(out, ignore_errors=True)
        try:
            out.parent.rmdir()  # .variants/ itself, when nothing else is prepared
        except OSError:
            pass


@pytest.mark.parametrize("args", [[], ["prepare"], ["run"], ["bogus"], ["run", "not-prepared|"]])
def test_bad_arguments_exit_2_with_usage(args):
    r = _sh(*args)
    assert r.returncode == 2 and ("usage" in r.stderr or "not prepared" in r.stderr)
