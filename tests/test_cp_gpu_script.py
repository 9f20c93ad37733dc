"""benchmarks/cp_single_gpu.py needs a GPU; without one it must stop with status 2 and one plain line,
before writing anything (the GPU run itself is the lead's: see the script's header)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_fails_cleanly_without_cuda(tmp_path):
    out = tmp_path / "cp.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "benchmarks/cp_single_gpu.py", "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "needs a CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


CPU_CASE = """
import datetime, json, sys
import torch, torch.distributed as dist
sys.path.insert(0, "benchmarks")
import cp_single_gpu as S
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
r = S.check_case("cpu", dict(B=1, T=40, Hq=2, Hk=1, D=32, gate=True), torch.float32,
                 torch.Generator().manual_seed(0), device="cpu", timing=False)
dist.destroy_process_group()
print(json.dumps(r))
"""


def test_script_case_on_cpu_under_the_triton_interpreter():
    """The script's comparison on the CPU (float32, Triton interpreter, gloo world of 1): context-parallel and
    chunked (2 and 4 chunks), each blockwise and with the kernels, and the kernels alone, all seven tensors,
    against the float64 reference."""
    import json
    import pytest
    pytest.importorskip("triton")
    from path_lib.book.gloo_group import free_port
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", CPU_CASE % free_port()], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(r["errors"]) == {"context_parallel", "context_parallel_kernels", "chunked_2", "chunked_4",
                                "chunked_2_kernels", "chunked_4_kernels", "kernels"}
    for method, errs in r["errors"].items():
        assert set(errs) == {"o", "dq", "dk", "dv", "dw", "dbeta", "dg"}, method
        assert all(0 <= e < 1e-5 for e in errs.values()), (method, errs)
    assert r["ok"]
