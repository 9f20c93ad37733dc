"""The recorded GPU runs behind the kernels' status: the sweep that sets ``path_lib.kernels.GPU_VERIFIED`` and
the benchmark the speed chapter renders (CPU only: reads JSON, runs no kernel)."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LATEST_BENCH = "bench_path.json"      # the current record (path_lib.records.RECORDS["bench"])


def test_verified_flag_names_a_complete_passing_sweep():
    import path_lib.kernels
    rec = json.loads((ROOT / path_lib.kernels.VERIFIED_BY).read_text())
    assert rec["passed"] == rec["total"] == len(rec["cases"]) >= 24
    names = {c["name"] for c in rec["cases"]}
    for dt in ("bfloat16", "float16", "float32"):
        for D in (32, 64, 128):
            assert f"grid_{dt}_D{D}" in names
    assert {"varlen_bf16", "varlen_fp32", "long_T_forward", "transform_keys_to_end", "tiny_grad_bf16", "short_conv_bf16",
            "forward_only_D128_fp16_T1024", "forward_only_D128_bf16_T1700"} <= names
    assert all(c["ok"] for c in rec["cases"])
    # the verified record names what the sweep ran: its code (both hashes), Triton version and GPU
    verified, prov = path_lib.kernels.VERIFIED, rec["provenance"]
    assert (rec["kernel_code_sha256"], rec["kernel_sources_sha256"]) == (verified["code_sha256"],
                                                                          verified["sources_sha256"])
    assert ".".join(prov["triton"].split(".")[:2]) == verified["triton"] and prov["device"] == verified["gpu"]
    assert "H200" in prov["device"] and tuple(verified["capability"]) == (9, 0)
    # the commit as passed to the device run (PATH_BOOK_COMMIT): full or abbreviated (v6: 7 digits)
    assert re.fullmatch(r"[0-9a-f]{7,40}", prov["commit"])


def test_the_kernels_on_main_are_the_verified_ones():
    """Fails whenever the kernels' code differs from the code the last GPU sweep passed, so that an
    unswept kernel change cannot land unnoticed (comments and docstrings may change freely). The Triton
    version is the machine's: it decides GPU_VERIFIED, not this test."""
    import path_lib.kernels
    assert path_lib.kernels.verification().code, (
        "the kernel code changed since the sweep in path_lib.kernels.VERIFIED_BY. Run the GPU sweep "
        "(PATH_BOOK_COMMIT=<commit> bash benchmarks/run_device.sh sweep) and update path_lib.kernels.VERIFIED "
        "(benchmarks/DESIGN.md, How to change a kernel).")


def test_gpu_verified_needs_the_swept_code_and_triton_version(monkeypatch):
    """GPU_VERIFIED holds exactly when the code is the swept code and Triton's major.minor is the sweep's;
    under another Triton the kernels say plainly that they are unverified there, and auto falls back
    (a code hash and a Triton version are faked: the machine's own are whatever they are)."""
    import path_lib.kernels as kernels
    from path_lib import impl
    assert kernels.GPU_VERIFIED is kernels.verification().verified
    assert "sm_75) was not in the sweep" in kernels.verification().describe(kernels.T4)
    assert "not in the sweep" not in kernels.verification().describe(kernels.H200)
    swept = kernels.VERIFIED["triton"]
    monkeypatch.setattr(kernels, "sources_sha256", lambda: "not the sweep's bytes")
    for code in (kernels.VERIFIED["code_sha256"], "another code"):
        monkeypatch.setattr(kernels, "code_sha256", lambda code=code: code)
        for version, same in ((swept + ".0", True), (swept + ".1+git", True), ("2.0.0", False), ("", False)):
            monkeypatch.setattr(kernels, "_triton_version", lambda version=version: version)
            kernels.verification.cache_clear()
            found = kernels.verification()
            assert found.code == (code == kernels.VERIFIED["code_sha256"]) and found.triton == version
            assert found.verified == (found.code and same) == kernels.GPU_VERIFIED
            assert (found.reason == "") == found.verified and found.describe().startswith(
                "verified" if found.verified else "unverified")
            if found.code and not same:
                assert f"unverified with Triton {version or '(none)'}" in found.reason and swept in found.reason
                assert impl.kernels_state()[:2] == (True, False) and "Triton" in impl.kernels_state()[2]
    kernels.verification.cache_clear()


def test_the_gate_costs_nothing_at_import():
    """Importing the kernels hashes nothing: the gate is read on first use (a fresh interpreter)."""
    import subprocess
    import sys
    code = "import path_lib.kernels as k\nprint(k.verification.cache_info().currsize)\n"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "0"


def test_the_gate_ignores_comments_and_docstrings_but_not_code():
    import path_lib.kernels
    src = 'def f(x):\n    """Doc."""\n    # a comment\n    return x + 1  # trailing\n'
    assert path_lib.kernels.code_text(src) == "def f(x):\n    return x + 1\n"
    assert path_lib.kernels.code_text(src.replace("Doc.", "Fixed typo.").replace("a comment", "")) == path_lib.kernels.code_text(src)
    assert path_lib.kernels.code_text(src.replace("x + 1", "x + 2")) != path_lib.kernels.code_text(src)
    assert path_lib.kernels.code_text('s = "# not a comment"\n') == 's = "# not a comment"\n'


def test_the_gate_hashes_every_module_the_kernels_run():
    """Every private module of ``path_lib.kernels`` is hashed for the gate, but the three that only call
    the hashed ones (the chunk API of context parallelism, the decoding kernel and the teaching kernel,
    which are tested on their own); a new stage module that is not added to ``_SOURCES`` fails here."""
    import path_lib.kernels
    folder = ROOT / "kernels" / "path_lib" / "kernels"
    private = {p.name for p in folder.glob("_*.py")} - {"__init__.py"}
    hashed = set(path_lib.kernels._SOURCES)
    assert private <= hashed, sorted(private - hashed)
    assert hashed - private == {"short_conv.py"}
    assert {p.name for p in folder.glob("*.py")} - hashed == {"__init__.py", "context.py", "decode.py",
                                                                "teaching.py"}


def test_auto_backend_is_blockwise_on_cpu():
    import torch
    from path_lib.nn.layers import PaTHAttention
    layer = PaTHAttention(64, 2, backend="auto")
    assert layer._resolve_backend(torch.zeros(1, 4, 2, 32)) == "blockwise"


HISTORY = ROOT / "benchmarks" / "results" / "history"


@pytest.mark.parametrize("name", sorted(p.name for p in HISTORY.glob("*.json")
                                        if p.name.startswith(("bench_path", "profile_parts", "tune_", "repeat_cell"))))
def test_speed_records_have_provenance_and_numbers(name):
    rec = json.loads((HISTORY / name).read_text())
    assert {"device", "torch", "triton", "commit", "date", "command"} <= set(rec["provenance"])
    assert rec["rows"] and all(("ms" in r or "wall_ms" in r or "error" in r) for r in rec["rows"])


def test_the_recorded_benchmark_is_of_the_verified_kernels():
    """The current speed record (bench_path.json) timed the kernel sources that the sweep verified, or
    code declared timing-equivalent to them (path_lib.kernels.TIMING_EQUIVALENT, which the speed chapter prints):
    it records their code hash."""
    import path_lib.kernels
    bench = json.loads((ROOT / "benchmarks" / "results" / LATEST_BENCH).read_text())
    recorded = bench["kernel_code_sha256"]
    assert recorded == path_lib.kernels.VERIFIED["code_sha256"] or recorded in path_lib.kernels.TIMING_EQUIVALENT
    methods = {r["method"] for r in bench["rows"]}
    assert {"sdpa", "sdpa_flash", "ours_path", "ours_pathfox", "fla_path", "fla_pathfox"} <= methods
    assert {r["D"] for r in bench["rows"]} == {64, 128}
    assert bench["schema"] == 2 and bench["ceilings"]["matmul_tflops"] > 0 and bench["ceilings"]["copy_gbs"] > 0


def test_the_timing_equivalence_holds_in_its_records():
    """Each entry of ``TIMING_EQUIVALENT`` that cites A/B records (``bench_split_ab_*``) is what they show:
    the earlier code and the code it was compared with (the verified code when the entry was made), timed on
    one GPU, differ by at most the percentage it states (mean over rounds, every cell of ours)."""
    import path_lib.kernels
    for old, why in path_lib.kernels.TIMING_EQUIVALENT.items():
        m = re.search(r"history/(bench_\w+?_ab)_\*\.json", why)
        if m is None:
            continue
        times: dict = {}
        for path in sorted((ROOT / "benchmarks" / "results" / "history").glob(m.group(1) + "_*.json")):
            rec = json.loads(path.read_text())
            code = rec["kernel_code_sha256"]
            assert "H200" in rec["provenance"]["device"]
            for r in rec["rows"]:
                if r["method"].startswith("ours") and r["ms"] is not None:
                    key = (r["D"], r["T"], r["mode"], r["method"])
                    times.setdefault(key, {}).setdefault(code, []).append(r["ms"])
        assert times and all(len(v) == 2 and old in v for v in times.values())
        worst = max(abs(sum(ms for c, ms in v.items() if c != old for ms in ms) / sum(v[old]) - 1)
                    for v in times.values())
        stated = float(re.search(r"at most ([0-9.]+) %", why).group(1))
        assert 100 * worst <= stated, (worst, stated)


def test_the_recorded_baseline_is_pytorchs_default_sdpa():
    """The speed record's baseline is PyTorch's default dispatch, whose backend is recorded (cuDNN on an
    H200) and is the fastest SDPA of the run at every cell (the forced FlashAttention row is slower)."""
    bench = json.loads((ROOT / "benchmarks" / "results" / LATEST_BENCH).read_text())
    rows = {(r["D"], r["T"], r["mode"], r["method"]): r for r in bench["rows"]}
    for (D, T, mode, method), r in rows.items():
        if method == "sdpa":
            assert r["backend"] in ("cudnn", "flash", "efficient", "math") and r["kernels"], r
            assert r["ms"] <= rows[(D, T, mode, "sdpa_flash")]["ms"], (D, T, mode)


def test_the_recorded_benchmark_meets_the_speed_requirement():
    """Issue 3's "must": the shipped kernels are faster than fla-core's at every recorded shape, forward
    and forward+backward, PaTH and PaTH-FoX (D in {64, 128}, T in {1024, 4096, 16384} at B*T = 32768, and
    T = 65536 at B = 1)."""
    bench = json.loads((ROOT / "benchmarks" / "results" / LATEST_BENCH).read_text())
    ms = {(r["D"], r["T"], r["mode"], r["method"]): r["ms"] for r in bench["rows"] if r.get("ms")}
    cells = {(D, T, mode) for (D, T, mode, _) in ms}
    assert {(D, T) for (D, T, _) in cells} == {(D, T) for D in (64, 128) for T in (1024, 4096, 16384, 65536)}
    slower = [(D, T, mode, ours, ms[(D, T, mode, ours)], ms[(D, T, mode, theirs)])
              for (D, T, mode) in sorted(cells)
              for ours, theirs in (("ours_path", "fla_path"), ("ours_pathfox", "fla_pathfox"))
              if ms[(D, T, mode, ours)] >= ms[(D, T, mode, theirs)]]
    assert not slower, f"slower than fla: {slower}"


def test_the_closest_cells_hold_in_every_round():
    """The run-to-run check of the benchmark's closest PaTH cells (ours and fla interleaved, several
    rounds on fresh inputs): ours is the faster in every round, and the summary is that of the rows."""
    from benchmarks.repeat_cell import summarize
    rec = json.loads((ROOT / "benchmarks" / "results" / "repeat_cell.json").read_text())
    pairs = sorted({(s["ours"], s["theirs"]) for s in rec["summary"]})
    assert summarize(rec["rows"], pairs) == rec["summary"]
    assert (128, 4096, "fwdbwd") in {(s["D"], s["T"], s["mode"]) for s in rec["summary"]}
    for s in rec["summary"]:
        assert s["rounds"] >= 5 and s["ours_faster_rounds"] == s["rounds"] and s["ratio_max"] < 1, s


def test_optional_result_loads_a_record_or_says_it_is_missing(capsys):
    from path_lib.records import optional_result
    rec = optional_result("benchmarks/results/" + LATEST_BENCH, "benchmark")
    assert rec is not None and "provenance" in rec and rec["rows"]
    assert optional_result("benchmarks/results/no_such_record.json", "profile") is None
    assert "No recorded profile (no_such_record.json)." in capsys.readouterr().out


def test_design_describes_the_verified_kernels():
    """benchmarks/DESIGN.md's opening names the verified code (hash prefix), its sweep's commit and its
    coverage, as the sweep record says (the document drifted once: v17 and "24 of 24" against v22 and 25)."""
    import path_lib.kernels
    rec = json.loads((ROOT / path_lib.kernels.VERIFIED_BY).read_text())
    opening = (ROOT / "benchmarks" / "DESIGN.md").read_text().split("## ", 1)[0]
    assert f"`{path_lib.kernels.VERIFIED['code_sha256'][:8]}...`" in opening
    assert f"commit {rec['provenance']['commit'][:7]}" in opening
    assert f"{rec['passed']} of {rec['total']}" in opening
