"""The speed benchmark's bookkeeping, on the CPU: shapes parse, the SDPA backend is named from the CUDA
kernels it launched, and the closing table is computed from the rows (the timings need a GPU; their
results are the recorded benchmark)."""
import pytest

from benchmarks.bench_path import backend_of, parse_shapes, summary_lines


def test_parse_shapes():
    assert parse_shapes("64:1024,128:65536") == [(64, 1024), (128, 65536)]
    with pytest.raises(ValueError, match="--shapes"):
        parse_shapes("32:1024")
    with pytest.raises(ValueError):
        parse_shapes("64-1024")


@pytest.mark.parametrize("names, backend", [
    (["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_128x128x128"], "cudnn"),
    (["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>"], "flash"),
    (["fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)"], "efficient"),
    (["ampere_bf16_s16816gemm_bf16_128x64", "void at::native::softmax_warp_forward<>"], "math"),
    (["elementwise_kernel"], "unknown"),
])
def test_backend_of(names, backend):
    assert backend_of(names) == backend


def test_summary_lines_give_ratios_to_sdpa_and_fla():
    rows = [dict(D=64, T=1024, method=m, mode="fwd", ms=ms) for m, ms in
            (("sdpa", 0.5), ("sdpa_flash", 0.8), ("ours_path", 2.0), ("fla_path", 4.0), ("ours_pathfox", 3.0))]
    lines = summary_lines(rows)
    fwd = next(line for line in lines if "| fwd |" in line)
    assert "| 0.50 | 0.80 | 2.00 (4.00x, 0.50x) | 3.00 |" in fwd     # PaTH-FoX: no fla row, so no ratio
    assert "| fwdbwd |" in lines[-1] and lines[-1].count("| - ") >= 6


def test_lm_throughput_script_runs_tiny_on_the_cpu(tmp_path):
    """benchmarks/bench_lm_throughput.py (issue 22's end-to-end measurement) at tiny sizes: a record
    with provenance, every model timed, ratios to RoPE's tokens per second computed from the rows."""
    import json

    from benchmarks.bench_lm_throughput import MODELS, main
    out = tmp_path / "t.json"
    assert main(["--tiny", "--device", "cpu", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert [r["attention"] for r in rec["rows"]] == list(MODELS) and rec["provenance"]["command"]
    rope = rec["rows"][0]["tokens_per_second"]
    for r in rec["rows"]:
        assert r["steps_timed"] == 2 and r["tokens_per_second"] == pytest.approx(32 / r["seconds_per_step"])
        assert r["cuda_graph"] is False
        assert r["ratio_to_rope"] == pytest.approx(r["tokens_per_second"] / rope)
    assert rec["rows"][1]["backend"] == "blockwise" and rec["config"]["length"] == 16
    assert rec["config"]["modes"] == "eager"


def test_lm_throughput_script_sorts_kernels_by_kind_and_refuses_bad_modes():
    """The step profile's kinds come from the kernels' names; a graph needs a GPU; rope comes first."""
    from benchmarks.bench_lm_throughput import PATH_KERNEL_NAMES, kernel_kind, main
    assert {kernel_kind(n) for n in PATH_KERNEL_NAMES} == {"PaTH kernels"}
    assert kernel_kind("cudnn_generated_fort_native_sdpa_sm90_flash_bprop") == "attention (SDPA)"
    assert kernel_kind("nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT") == "matrix products"
    assert kernel_kind("void at::native::bfloat16_copy_kernel_cuda") == "other (elementwise, reductions, copies)"
    for bad in (["--modes", "graph"], ["--modes", "lazy"], ["--models", "path,rope"]):
        with pytest.raises(SystemExit):
            main(["--tiny", "--device", "cpu", "--out", "/dev/null", *bad])
