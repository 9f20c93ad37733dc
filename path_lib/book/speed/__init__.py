"""Helpers of the speed chapter (``book/part3/10_speed``): time floors, the benchmark record, profiles by phase.

    from path_lib.book import speed
    from path_lib.records import optional_record

    bench = speed.normalize_bench(optional_record("bench"))       # None when there is no record
    f = speed.time_floor("path", "fwd", T=4096, D=64, B=8, H=32, ceilings=bench["ceilings"])
    f.ms, f.bound                                                 # the floor and what sets it

**Floors.** A GPU has two ceilings: the rate of its matrix products (``matmul_tflops``, bf16) and its
memory bandwidth (``copy_gbs``). A computation that needs ``ops`` matrix-product operations and must
move ``nbytes`` bytes cannot take less than ``max(ops / rate, nbytes / bandwidth)``:

* operations (:func:`floor_flops`): attention's forward is FlashAttention's count
  (:func:`path_lib.theory.costs.flash_attention_cost`, causal, two products per tile); its backward does five
  products per tile (recompute ``S = Q K^T``, ``dP = dO V^T``, ``dV = P^T dO``, ``dQ = dS K``,
  ``dK = dS^T Q``), so forward+backward is 3.5 times the forward. PaTH's forward is the segmented
  kernel's count (:func:`path_lib.theory.costs.path_segmented_cost`); its backward contains at least
  attention's five products, so PaTH's forward+backward floor is its forward plus attention's backward.
* bytes (:func:`floor_bytes`): every input read once and every output written once: q, k, v, o (and
  do, dq, dk, dv) in the 16-bit input dtype; w, beta, g (and dw, dbeta, dg) in float32.

**Records.** :func:`normalize_bench` turns the benchmark record (``load_record("bench")``, written by
``benchmarks/bench_path.py``; its schema versions are ``path_lib.records.SCHEMAS["bench"]``) into one
form: schema 2 as is; the older format (no ``schema`` key, its ``sdpa`` rows the FlashAttention backend
forced, no ceilings) with ``sdpa`` renamed ``sdpa_flash`` and a plain note that the default SDPA and the
ceilings are missing.

**Profiles.** :func:`phase_of` maps a CUDA kernel name of the recorded profile (``"profile"``) to the
phase of the algorithm it belongs to (:data:`PHASES`); unknown names go to ``"other"``.

**T4.** :func:`launcher_config` replays the kernels' launcher (block length, then one segment) against
the recorded ahead-of-time compile reports; :data:`T4` holds the datasheet figures of an NVIDIA T4.

**Modules.** One per job; every name is also an attribute of this package (``speed.<name>``):

    bench_record     the benchmark record: methods, shapes, normalize_bench, look-ups of its rows
    floors           floor_flops, floor_bytes, Floor, time_floor, the kernels' blocking of a record
    tables           Markdown tables of the benchmark record, the kernels' targets cell by cell
    phases           the profile by phase of the algorithm (the kernel phase map) and its tables
    compile_reports  the ahead-of-time compile reports and the T4's floors
    plots            the chapter's figures (matplotlib)
    other_records    decoding, end to end, short convolution and context-parallel records
"""
from __future__ import annotations

from .bench_record import (BACKEND_NAMES, BENCH_SHAPES, FLA_PAIR, KIND_OF, KINDS, METHODS, TOKENS, check_ceilings,
                           lookup, measured_ms, method_label, methods_present, normalize_bench, reference_method,
                           sdpa_backends, shapes)
from .floors import Floor, floor_bytes, floor_flops, floor_for, path_config, time_floor
from .tables import (KERNEL_TARGETS, agrees, count_table, floor_ratios, memory_table, ratios_between, repeat_check,
                     target_status, time_table, versus_fla)
from .phases import (KERNEL_PHASES, PHASE_GROUPS, PHASES, group_difference, group_table, phase_groups, phase_ms,
                     phase_of, phase_table, unmapped_kernels)
from .compile_reports import T4, compile_summary, compile_table, launcher_config, t4_floors
from .plots import (SHORT_KIND, plot_floor_ratios, plot_group_difference, plot_memory, plot_phases, plot_times,
                    render_floor)
from .other_records import CP_METHODS, LM_NAMES, cp_tables, decode_tables, lm_throughput_tables, short_conv_table

__all__ = ["METHODS", "KINDS", "KIND_OF", "FLA_PAIR", "BACKEND_NAMES", "BENCH_SHAPES", "TOKENS", "T4",
           "PHASES", "KERNEL_PHASES",
           "normalize_bench", "method_label", "sdpa_backends", "lookup", "measured_ms", "shapes",
           "methods_present", "reference_method", "check_ceilings",
           "floor_flops", "floor_bytes", "Floor", "time_floor", "path_config", "floor_for",
           "time_table", "versus_fla", "ratios_between", "floor_ratios", "count_table", "memory_table",
           "repeat_check", "PHASE_GROUPS", "phase_of", "phase_ms", "phase_groups", "unmapped_kernels", "phase_table",
           "group_table", "group_difference",
           "compile_summary", "compile_table", "launcher_config", "t4_floors", "agrees",
           "plot_times", "plot_floor_ratios", "plot_memory", "plot_phases", "plot_group_difference", "render_floor", "decode_tables",
           "lm_throughput_tables", "LM_NAMES", "CP_METHODS", "SHORT_KIND", "cp_tables", "short_conv_table", "KERNEL_TARGETS", "target_status"]
