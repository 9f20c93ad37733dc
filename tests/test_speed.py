"""path_lib.book.speed: time floors against hand-computed counts, the benchmark record in both formats,
the profile's kernels by phase, the T4 launcher replay against the recorded compile reports. CPU, fast."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from path_lib.theory import costs  # noqa: E402
from path_lib.book import speed  # noqa: E402
from path_lib.records import SchemaError, load_record  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------------------------------------
# synthetic records (fixtures of the tests only)
# ------------------------------------------------------------------------------------------------

NEW_METHODS = ("sdpa", "sdpa_flash", "ours_path", "ours_pathfox", "fla_path", "fla_pathfox", "fla_fox")


def new_record(ceilings=True):
    rows = []
    for D in (64, 128):
        for T in (1024, 4096):
            B, H = 32768 // T, 2048 // D
            for i, m in enumerate(NEW_METHODS):
                for mode in ("fwd", "fwdbwd"):
                    ms = (1 + i) * T / 1024 * (3 if mode == "fwdbwd" else 1)
                    r = dict(D=D, H=H, T=T, B=B, method=m, mode=mode, ms=ms, peak_mib=100.0 + i)
                    if m == "sdpa":
                        r.update(backend="cudnn", kernels=["cudnn_generated_fort_native_sdpa_sm90"])
                    if m.startswith("ours"):
                        r["config"] = {"block": 64, "seg_blocks": 4}
                    rows.append(r)
    rows.append(dict(D=64, H=32, T=65536, B=1, method="ours_path", mode="fwd", ms=None, error="OutOfMemory"))
    rows.append(dict(D=64, H=32, T=65536, B=1, method="fla_path", mode="fwd", ms=None, error="not measured: slow"))
    rec = dict(schema=2, fla="0.6.0", dtype="bfloat16", tokens=32768, hidden=2048, rows=rows,
               provenance=dict(device="GPU", torch="2", triton="3", commit="abc", date="2026", command="x"))
    if ceilings:
        rec["ceilings"] = {"matmul_tflops": 700.0, "copy_gbs": 4000.0, "note": "measured"}
    return rec


def old_record():
    rec = new_record(ceilings=False)
    del rec["schema"]
    rec["rows"] = [dict(r, method="sdpa") for r in rec["rows"] if r["method"] == "sdpa_flash"] + \
                  [r for r in rec["rows"] if r["method"] not in ("sdpa", "sdpa_flash")]
    for r in rec["rows"]:
        r.pop("backend", None), r.pop("kernels", None), r.pop("config", None)
    return rec


# ------------------------------------------------------------------------------------------------
# floors: hand-computed numbers for T = 128, D = 64 (two blocks of 64)
# ------------------------------------------------------------------------------------------------
# attention: 2 diagonal tiles (computed densely) + 1 off-diagonal tile = 3 * 64 * 64 = 12288 entries;
# Q K^T and P V: 2 * 12288 * 64 each -> forward 3,145,728; backward 5 products -> 7,864,320.
ATT_FWD, ATT_BWD = 3_145_728, 7_864_320
# PaTH segmented (block 64, 2 blocks per segment, one segment), costs.path_segmented_cost by hand:
# diagonal 2 * (2*64*64*64*4 + 2*64^3) = 5,242,880; own segment 8*64*64*64 = 2,097,152; earlier 0;
# precompute 2 * (2,097,152 + 524,288 + 524,288) + 2*2*64^3 + 2*2*64*64*64 = 8,388,608;
# UT solve 2 * 64*64*63 = 516,096. Total 16,244,736.
PATH_FWD = 16_244_736


def test_attention_operations_by_hand():
    assert speed.floor_flops("attention", "fwd", 128, 64) == ATT_FWD
    assert speed.floor_flops("attention", "fwdbwd", 128, 64) == ATT_FWD + ATT_BWD
    assert speed.floor_flops("attention", "fwdbwd", 128, 64) == 3.5 * ATT_FWD
    assert speed.floor_flops("fox", "fwd", 128, 64, B=2, H=3) == 6 * ATT_FWD


def test_path_operations_by_hand():
    assert speed.floor_flops("path", "fwd", 128, 64, seg_blocks=2) == PATH_FWD
    assert speed.floor_flops("path", "fwdbwd", 128, 64, seg_blocks=2) == PATH_FWD + ATT_BWD
    assert speed.floor_flops("pathfox", "fwdbwd", 128, 64, B=2, H=1, seg_blocks=2) == 2 * (PATH_FWD + ATT_BWD)
    assert PATH_FWD == costs.path_segmented_cost(128, 64, seg_blocks=2).flops


def test_bytes_by_hand():
    # T * D = 8192 elements; bf16 q, k, v, o (+ do, dq, dk, dv); float32 w (8192), beta (128), g (128)
    assert speed.floor_bytes("attention", "fwd", 128, 64) == 4 * 8192 * 2 == 65_536
    assert speed.floor_bytes("attention", "fwdbwd", 128, 64) == 131_072
    assert speed.floor_bytes("path", "fwd", 128, 64) == 65_536 + 4 * (8192 + 128) == 98_816
    assert speed.floor_bytes("path", "fwdbwd", 128, 64) == 2 * 98_816
    assert speed.floor_bytes("pathfox", "fwd", 128, 64) == 98_816 + 512
    assert speed.floor_bytes("fox", "fwdbwd", 128, 64, B=2, H=2) == 4 * (131_072 + 1024)


def test_time_floor_takes_the_larger_of_the_two_times():
    f = speed.time_floor("attention", "fwd", 128, 64, ceilings={"matmul_tflops": 1.0, "copy_gbs": 1.0})
    assert f.compute_ms == pytest.approx(ATT_FWD / 1e12 * 1e3)
    assert f.memory_ms == pytest.approx(65_536 / 1e9 * 1e3)
    assert f.ms == f.memory_ms and f.bound == "memory"
    g = speed.time_floor("attention", "fwd", 16384, 64, B=2, H=32, ceilings={"matmul_tflops": 700, "copy_gbs": 4000})
    assert g.bound == "compute" and g.ms == g.compute_ms
    assert g.intensity == pytest.approx(g.flops / g.nbytes)
    none = speed.time_floor("path", "fwd", 128, 64)
    assert none.ms is None and none.bound is None and none.compute_ms is None


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("T", [64, 1000, 1024, 4096, 16384, 65536])
def test_path_floor_is_at_least_attentions(T, D):
    B, H = max(1, 32768 // T), 2048 // D
    for mode in ("fwd", "fwdbwd"):
        for fwd_only in (False, True):
            import path_lib.kernels
            bt, sb = path_lib.kernels.blocking(T, D, forward_only=fwd_only)
            p = speed.floor_flops("path", mode, T, D, B, H, block_size=bt, seg_blocks=sb)
            a = speed.floor_flops("attention", mode, T, D, B, H)
            assert p >= a
            assert speed.floor_bytes("path", mode, T, D, B, H) > speed.floor_bytes("attention", mode, T, D, B, H)
    assert speed.floor_flops("path", "fwdbwd", T, D, B, H) >= 3.5 * speed.floor_flops("attention", "fwd", T, D, B, H)


def test_bad_kinds_modes_and_ceilings():
    with pytest.raises(ValueError, match="kind"):
        speed.floor_flops("flash", "fwd", 128, 64)
    with pytest.raises(ValueError, match="mode"):
        speed.floor_bytes("path", "bwd", 128, 64)
    for bad in (None, {}, {"matmul_tflops": 700}, {"matmul_tflops": -1, "copy_gbs": 1},
                {"matmul_tflops": float("nan"), "copy_gbs": 1}, {"matmul_tflops": "x", "copy_gbs": 1}, [1, 2]):
        assert speed.check_ceilings(bad) is None
    assert speed.check_ceilings({"matmul_tflops": "700", "copy_gbs": 4000})["matmul_tflops"] == 700.0


# ------------------------------------------------------------------------------------------------
# records
# ------------------------------------------------------------------------------------------------

def test_normalize_the_new_format():
    rec = speed.normalize_bench(new_record())
    assert rec["schema"] == 2 and rec["has_default_sdpa"] and rec["notes"] == []
    assert rec["ceilings"]["matmul_tflops"] == 700.0
    assert speed.method_label(rec, "sdpa") == "SDPA default (cuDNN)"
    assert speed.method_label(rec, "sdpa_flash") == "SDPA, FlashAttention backend forced"
    assert speed.reference_method(rec) == "sdpa"
    assert speed.sdpa_backends(rec) == {"cudnn": 8}
    assert speed.methods_present(rec) == list(NEW_METHODS)
    assert (64, 65536, 1, 32) in speed.shapes(rec)
    assert speed.path_config(rec, 64, 1024, "fwd") == (64, 4)
    assert speed.path_config(rec, 128, 1024, "fwdbwd") == (64, 4)
    # a call without gradients uses longer segments at D = 128 (the launcher's rule, whatever the record says)
    assert speed.path_config(rec, 128, 1024, "fwd") == (64, 16)
    import path_lib.kernels
    for D in (64, 128):
        for T in (1024, 4096, 16384, 65536):
            for mode in ("fwd", "fwdbwd"):
                assert speed.path_config(None, D, T, mode) == path_lib.kernels.blocking(T, D, forward_only=mode == "fwd")


def test_normalize_the_old_format():
    raw = old_record()
    rec = speed.normalize_bench(raw)
    assert rec["schema"] == 1 and not rec["has_default_sdpa"] and rec["ceilings"] is None
    assert "sdpa" not in speed.methods_present(rec) and "sdpa_flash" in speed.methods_present(rec)
    assert any("default SDPA dispatch is not in it" in n for n in rec["notes"])
    assert any("no measured ceilings" in n for n in rec["notes"])
    assert any(r["method"] == "sdpa" for r in raw["rows"]), "the input must not be changed"
    assert speed.reference_method(rec) == "sdpa_flash"
    assert speed.floor_ratios(rec) == {} and speed.plot_floor_ratios(rec) is None
    import path_lib.kernels
    assert speed.path_config(rec, 128, 4096, "fwd") == path_lib.kernels.blocking(4096, 128, forward_only=True)


def test_normalize_rejects_malformed_records():
    assert speed.normalize_bench(None) is None
    with pytest.raises(ValueError, match="lacks"):
        speed.normalize_bench(dict(rows=[dict(D=64, T=1024, method="sdpa", mode="fwd")]))
    with pytest.raises(ValueError, match="list of rows"):
        speed.normalize_bench(dict(rows=None))


@pytest.mark.parametrize("schema", [3, "2", None])
def test_normalize_refuses_schema_versions_it_does_not_know(schema):
    rec = dict(new_record(), schema=schema)
    with pytest.raises(SchemaError, match="record 'bench'.*schema.*1, 2"):
        speed.normalize_bench(rec)


def test_the_package_keeps_every_name_the_chapters_use():
    """``speed`` is a package of modules by job; a chapter still reaches every helper as ``speed.<name>``."""
    used = set()
    for nb in (ROOT / "book").rglob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        src = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        used |= set(re.findall(r"\bspeed\.([A-Za-z_][A-Za-z0-9_]*)", src))
        used |= {n.strip() for m in re.findall(r"from path_lib\.book\.speed import ([^\n]+)", src)
                 for n in m.split(",")}
    assert {"normalize_bench", "time_floor", "decode_tables", "cp_tables"} <= used
    missing = sorted(n for n in used if not hasattr(speed, n))
    assert not missing, missing
    assert set(speed.__all__) <= set(dir(speed))
    for module in (speed.bench_record, speed.floors, speed.tables, speed.phases, speed.compile_reports,
                   speed.plots, speed.other_records):
        assert len(Path(module.__file__).read_text().splitlines()) < 800, module.__name__


def test_tables_say_what_is_missing():
    rec = speed.normalize_bench(new_record())
    fwd = speed.time_table(rec, "fwd")
    assert "SDPA default (cuDNN)" in fwd and "failed" in fwd and "not measured" in fwd
    assert "(2.00x)" in fwd                                 # sdpa_flash = 2 x sdpa in the fixture
    table, ratios = speed.versus_fla(rec)
    assert ratios == [pytest.approx(3 / 5), pytest.approx(4 / 6)] * 8   # 4 shapes x 2 modes
    assert "**" not in table                                # ours is faster everywhere in the fixture
    slow = new_record()
    for r in slow["rows"]:
        if r["method"] == "ours_path":
            r["ms"] = 100.0 if r["ms"] is not None else None
    assert "**" in speed.versus_fla(speed.normalize_bench(slow))[0]


def test_floor_ratios_are_finite_and_use_the_right_kind():
    rec = speed.normalize_bench(new_record())
    ratios = speed.floor_ratios(rec)
    assert ratios and all(math.isfinite(v) and v > 0 for v in ratios.values())
    f = speed.floor_for(rec, "fla_fox", 64, 1024, "fwdbwd")
    assert f.kind == "fox" and f.flops == speed.floor_flops("attention", "fwdbwd", 1024, 64, 32, 32)
    p = speed.floor_for(rec, "fla_path", 64, 1024, "fwd")
    assert p.flops == speed.floor_flops("path", "fwd", 1024, 64, 32, 32, block_size=64, seg_blocks=4)
    assert speed.floor_for(rec, "sdpa", 64, 2048, "fwd") is None
    table, data = speed.count_table(speed.shapes(rec), rec, rec["ceilings"])
    assert "PaTH floor" in table and all(d["path_fwd_ratio"] >= 1 for d in data)


def test_the_current_record_normalizes():
    rec = speed.normalize_bench(load_record("bench"))
    assert rec["rows"] and set(speed.methods_present(rec)) <= set(speed.METHODS)
    for v in speed.floor_ratios(rec).values():
        assert math.isfinite(v) and v > 0
    for mode in ("fwd", "fwdbwd"):
        assert speed.time_table(rec, mode).count("\n") == len(speed.shapes(rec)) + 1


def test_agrees_prints_the_verdict(capsys):
    assert speed.agrees("x", 3.5, 3.5)
    assert not speed.agrees("y", 3.0, 3.5)
    out = capsys.readouterr().out
    assert "x: computed 3.5, stated 3.5: agrees" in out and "y:" in out and "DIFFERS" in out


# ------------------------------------------------------------------------------------------------
# profile phases
# ------------------------------------------------------------------------------------------------

def test_every_recorded_kernel_has_a_phase():
    prof = load_record("profile")
    names = {k for r in prof["rows"] for k in (r.get("kernels_ms") or {})}
    assert names
    assert all(speed.phase_of(n) in speed.PHASES for n in names)
    ours = [m for m in {r["method"] for r in prof["rows"]} if m.startswith("ours")]
    assert ours
    assert speed.unmapped_kernels(prof, ours) == {}, "every kernel of ours must have a phase, not 'other'"
    for r in prof["rows"]:
        assert sum(speed.phase_ms(r).values()) == pytest.approx(sum(r["kernels_ms"].values()))


def test_every_kernel_of_ours_is_mapped():
    import inspect

    import path_lib.kernels._triton_kernels as tk
    jitted = [n for n, obj in vars(tk).items() if n.endswith("_kernel") and hasattr(obj, "fn")
              and "tl.program_id" in inspect.getsource(obj.fn)]
    assert jitted
    assert [n for n in jitted if speed.phase_of(n) == "other"] == []


def test_phase_of_names():
    assert speed.phase_of("_bwd_block_kernel") == "backward: chain rule through the UT transform"
    assert speed.phase_of("void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float> >") == "gate cumsum"
    assert speed.phase_of("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>") == "PyTorch glue"
    assert speed.phase_of("some_new_kernel") == "other"
    prof = {"rows": [dict(D=64, T=1024, method="ours_path", mode="fwd", wall_ms=1.0,
                          kernels_ms={"_fwd_kernel": 0.5, "mystery": 0.25})]}
    assert speed.unmapped_kernels(prof) == {"ours_path": ["mystery"]}
    table = speed.phase_table(prof, 64, 1024, "fwd", ["ours_path", "fla_path"])
    assert "mystery" not in table and "| other | 0.25 |" in table and "**1.00**" in table
    assert speed.phase_table(prof, 64, 4096, "fwd", ["ours_path"]) is None


# ------------------------------------------------------------------------------------------------
# compile reports and the T4
# ------------------------------------------------------------------------------------------------

T4_RECORDS = ("compile_sm75_fp16_D64", "compile_sm75_fp16_D128", "compile_sm75_fp16_D128_bt32",
              "compile_sm75_fp32", "compile_sm75_single_segment")


def test_launcher_replay_on_the_recorded_t4_reports():
    summary = speed.compile_summary({n: load_record(n) for n in T4_RECORDS})
    assert summary and "| fp16 | 64 | 32 |" in speed.compile_table(summary)
    assert speed.launcher_config(summary, 64, "fp16") == dict(BT=32, one_segment=False, fits=True,
                                                              why="block 32: every kernel fits")
    d128 = speed.launcher_config(summary, 128, "fp16")
    assert (d128["BT"], d128["one_segment"], d128["fits"]) == (16, True, True)
    f32 = speed.launcher_config(summary, 128, "fp32")
    assert (f32["BT"], f32["one_segment"], f32["fits"]) == (16, True, True)
    # an H200's shared memory starts at block 64, which no sm_75 report covers: nothing is claimed
    assert speed.launcher_config(summary, 64, "fp16", smem_bytes=232448)["fits"] is None


def test_launcher_replay_synthetic():
    rows = [dict(dtype="fp16", D=64, BT=32, kernel="_fwd_kernel", shared_bytes=70000, stack_bytes=0),
            dict(dtype="fp16", D=64, BT=16, kernel="_fwd_kernel", shared_bytes=30000, stack_bytes=8)]
    s = speed.compile_summary({"r": dict(rows=rows)})
    assert [x["fits"] for x in s] == [True, False]
    c = speed.launcher_config(s, 64, "fp16")
    assert (c["BT"], c["one_segment"], c["fits"]) == (16, False, True) and "too large" in c["why"]
    c = speed.launcher_config(speed.compile_summary({"r": dict(rows=rows[:1])}), 64, "fp16")
    assert c["fits"] is None and "not compiled" in c["why"]


# ------------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [new_record, old_record])
def test_figures_draw(make):
    rec = speed.normalize_bench(make())
    for fig in (speed.plot_times(rec), speed.plot_memory(rec), speed.render_floor(rec, 1024, 64, "fwdbwd"),
                speed.render_floor(rec, 65536, 128, "fwd")):
        assert isinstance(fig, Figure)
        plt.close(fig)
    ratios = speed.plot_floor_ratios(rec)
    assert (ratios is None) == (rec["ceilings"] is None)
    if ratios is not None:
        plt.close(ratios)


def test_widget_frame_without_a_record_and_the_phase_figure():
    fig = speed.render_floor(None, 4096, 64, "fwd")
    assert isinstance(fig, Figure)
    plt.close(fig)
    fig = speed.plot_phases(load_record("profile"), ["ours_path", "fla_path"])
    assert isinstance(fig, Figure)
    plt.close(fig)


def test_group_difference_subtracts_groups_per_shape():
    row = lambda m, D, T, mode, k: {"method": m, "D": D, "T": T, "mode": mode,  # noqa: E731
                                    "kernels_ms": k, "wall_ms": 1.0}
    prof = {"rows": [row("a", 64, 1024, "fwdbwd", {"_fwd_kernel": 2.0, "_bwd_block_kernel": 3.0}),
                     row("b", 64, 1024, "fwdbwd", {"parallel_path_fwd_kernel": 5.0, "Memcpy HtoD": 0.5}),
                     row("a", 64, 4096, "fwdbwd", {"_fwd_kernel": 1.0}),     # no "b" row here: left out
                     row("b", 64, 1024, "fwd", {"parallel_path_fwd_kernel": 9.0})]}
    d = speed.group_difference(prof, "a", "b")
    assert list(d) == [(64, 1024)]
    assert d[(64, 1024)] == {"forward attention loops": -3.0, "backward chain rule": 3.0,
                             "PyTorch glue": -0.5, "all kernels": -0.5}
    assert speed.group_difference(prof, "a", "b", "fwd") == {} and speed.plot_group_difference(prof, "a", "b", "fwd") is None
    fig = speed.plot_group_difference(load_record("profile"), "ours_path", "fla_path")
    assert isinstance(fig, Figure) and fig.get_size_inches()[0] <= 9
    plt.close(fig)


def test_decode_tables_count_the_cells_within_the_target():
    row = lambda B, L, ours, sdpa: {"batch": B, "length": L, "triton_ms": ours, "sdpa_ms": sdpa,  # noqa: E731
                                    "sdpa_backend": "cudnn", "ratio_to_sdpa": ours / sdpa, "floor_ratio": 1.53,
                                    "triton_host_ms": 0.1, "sdpa_host_ms": 0.05, "pytorch_ratio_to_sdpa": 9.0}
    rec = {"rows": [row(32, 4096, 0.3, 0.1), row(1, 1024, 0.08, 0.06)],
           "precision": {"rows": {"fp32": [{"steps": 10, "key_rel_err_median": 1e-6}],
                                  "bf16": [{"steps": 10, "key_rel_err_median": 2e-2}]}}}
    table, prec, summary = speed.decode_tables(rec)
    lines = table.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| 1 | 1,024 | 80 | 60 (cudnn) | 1.33 |")    # sorted by batch
    assert "| 32 | 4,096 | 300 | 100 (cudnn) | 3.00 |" in lines[3]
    assert prec.splitlines()[2] == "| fp32 | 1.0e-06 |" and "after 10 steps" in prec
    assert summary.startswith("1 of 2 cells are within 2x of SDPA; not batch 32 at 4,096 (3.00x, host 100 against 50")


def test_lm_throughput_tables_report_ratios_gpu_time_and_the_target():
    """Rows per model and mode, the memory only for eager steps, the GPU time by kind with the attention kernels
    merged into one column, and a sentence whose verdict follows the ratios."""
    def row(att, graph, sec, ratio, gpu=None):
        r = {"attention": att, "cuda_graph": graph, "seconds_per_step": sec, "tokens_per_second": 8192 / sec,
             "ratio_to_rope": ratio, "step_peak_mib": 0.0 if graph else 1000.0}
        if gpu:
            r["profile"] = {"gpu_ms": sum(gpu.values()), "gpu_ms_by_kind": gpu}
        return r
    rec = {"rope_sdpa_backend": "cudnn", "rows": [
        row("rope", False, 0.040, 1.0, {"attention (SDPA)": 6.0, "matrix products": 14.0}),
        row("path", False, 0.050, 0.8, {"PaTH kernels": 12.0, "matrix products": 15.0, "convolution": 2.0}),
        row("rope", True, 0.030, 1.0), row("path", True, 0.040, 0.75)]}
    table, gpu, summary = speed.lm_throughput_tables(rec)
    lines = table.splitlines()
    assert lines[2] == "| RoPE | SDPA (cudnn) | eager | 204,800 | 40.0 | 1.00 | 1,000 |"
    assert lines[5] == "| PaTH | Triton kernels | CUDA graph | 204,800 | 40.0 | 0.75 | - |"
    g = gpu.splitlines()
    assert g[0] == "| model | attention kernels | matrix products | convolution | GPU in all | GPU busy |"
    assert g[2] == "| RoPE | 6.0 | 14.0 | 0.0 | 20.0 | 50% |" and g[3] == "| PaTH | 12.0 | 15.0 | 2.0 | 29.0 | 58% |"
    assert summary.startswith("Against RoPE's tokens per second, PaTH trains at 0.75x with the step in a CUDA graph "
                              "and at 0.80x eager: the target of 0.8x is not met.")
    assert "the PaTH kernels take 12.0 ms where SDPA takes 6.0 ms" in summary
    assert "is met" in speed.lm_throughput_tables(rec, target=0.7)[2]


def test_cp_tables_from_the_record():
    """The single-GPU context-parallel table: one row per case with every method's worst error and time, '-' where
    the record has none, and the ratio ranges to the kernels alone computed from the rows."""
    from path_lib.records import load_record
    rec = load_record("cp_single_gpu")
    table, sentence = speed.cp_tables(rec)
    lines = table.splitlines()
    cases = [c for c in rec["cases"] if "errors" in c]
    assert len(lines) == 2 + len(cases) and all(line.count("|") == 6 for line in lines)
    for c, line in zip(cases, lines[2:]):
        assert line.startswith(f"| {c['name']} | ")
        shown = [m for m, _ in speed.CP_METHODS]
        assert line.count(" - ") == sum(m not in c["errors"] for m in shown)
        assert line.count(" ms)") == sum(m in c["ms_fwd_bwd"] for m in shown)
    assert sentence.startswith(f"{rec['passed']} of {rec['total']} checks")
    r = [c["ms_fwd_bwd"]["context_parallel_kernels"] / c["ms_fwd_bwd"]["kernels"] for c in cases]
    assert f"kernels (1 rank) {min(r):.1f}x" in sentence
    fake = {"passed": 1, "total": 1, "tolerances": {"float32": 1e-4}, "world_size": 1, "backend": "gloo",
            "cases": [{"name": "c", "errors": {"kernels": {"o": 1e-6}, "context_parallel_kernels": {"o": 2e-6}},
                       "ms_fwd_bwd": {"kernels": 2.0, "context_parallel_kernels": 3.0}}]}
    t, s = speed.cp_tables(fake)
    assert t.splitlines()[2] == "| c | - | 2.0e-06 (3.0 ms) | - | 1.0e-06 (2.0 ms) |"
    assert s.endswith("alone: kernels (1 rank) 1.5x.")


def test_short_conv_table_from_the_record():
    """The short-convolution table: two rows per shape with ms and floor ratios read from the record, and a sentence
    whose speed-ups and error comparison are recomputed from its rows (a synthetic record flips the verdict)."""
    rec = load_record("short_conv")
    table, sentence = speed.short_conv_table(rec)
    lines = table.splitlines()
    shapes = {(r["B"], r["T"], r["C"], r["H"]) for r in rec["rows"]}
    assert len(lines) == 2 + 2 * len(shapes)
    by = {(r["B"], r["C"], r["method"], r["mode"]): r for r in rec["rows"]}
    B, _, C, _ = sorted(shapes)[0]
    fused = by[B, C, "fused", "fwdbwd"]
    assert f"{fused['ms']:.3f} ({fused['x_floor']:.1f}x)" in lines[3] and "fused" in lines[3]
    speedup = by[B, C, "pytorch", "fwdbwd"]["ms"] / fused["ms"]
    assert f"{speedup:.1f}x forward+backward at B x T x C = {B} x" in sentence
    worse = {"rows": [dict(r, w_max_abs=1.0) if r["method"] == "fused" else r for r in rec["rows"]]}
    assert "is no closer to" in speed.short_conv_table(worse)[1]


def test_target_status_marks_each_cell_against_its_target():
    """A synthetic record: the worse of PaTH and PaTH-FoX decides a speed cell, memory is against fla's peak
    of the same pair, and "met" follows the thresholds (2x forward at T = 1024, 1.5x beyond; < 1 against fla)."""
    def row(T, method, mode, ms, peak=None):
        return {"D": 64, "T": T, "B": 1, "H": 32, "method": method, "mode": mode, "ms": ms, "peak_mib": peak}
    rows = []
    for T, ours in ((1024, (1.9, 2.1)), (4096, (1.4, 1.45))):
        for mode, scale in (("fwd", 1.0), ("fwdbwd", 1.0)):
            rows += [row(T, "sdpa", mode, 1.0), row(T, "ours_path", mode, ours[0] * scale, 90.0),
                     row(T, "ours_pathfox", mode, ours[1] * scale, 110.0), row(T, "fla_path", mode, 3.0, 100.0),
                     row(T, "fla_pathfox", mode, 3.0, 100.0)]
    table, sentence = speed.target_status({"rows": rows})
    lines = table.splitlines()
    assert lines[2] == "| 64 | 1,024 | 2.10x (2x) | 2.10x met (3x) | 1.10x | 1.10x | 0.70x met |"
    assert lines[3] == "| 64 | 4,096 | 1.45x met (1.5x) | 1.45x met (2x) | 1.10x | 1.10x | 0.48x met |"
    assert sentence.startswith("Speed targets against SDPA met in 3 of 4 cells; memory targets "
                               "(at or below fla's peak) in 0 of 4; faster than fla in 2 of 2 shapes")
    assert "The farthest speed cell is D = 64, T = 1,024 (forward, 2.1x SDPA against 2x)." in sentence
