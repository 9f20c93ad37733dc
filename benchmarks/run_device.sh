#!/usr/bin/env bash
# One device call for the kernels: the correctness sweep (sharded over parallel processes, so the Triton
# compiles run in parallel), then optionally the per-kernel profile and the benchmark, with the time left.
# Logs and JSON under $OUT (or benchmarks/results); at most 8 files come back from a device call, so the
# shard files stay in /tmp and only the merged sweep is written to $OUT.
#
# Needs fla-core's wheel in .whl/ for the fla comparison
# (python3 -m pip download --no-deps fla-core==0.6.0 -d .whl) and `carry: [".whl"]` on the device tool.
# The device copy has no git: pass the commit for provenance, e.g.
#   PATH_BOOK_COMMIT=$(git rev-parse HEAD) bash benchmarks/run_device.sh sweep,profile
# Usage: bash benchmarks/run_device.sh [STEPS]   STEPS: comma list of sweep, profile, variants, bench,
#   tune, diag32 (default sweep,bench); bench = every shape of bench_path.py (compiled in parallel first, resumable); variants = benchmarks/prep_variants.py with Nsight Compute;
#   tune = benchmarks/tune_segments.py (segment lengths and warp counts);
#   colab = benchmarks/run_colab.sh (every page with the small preset in float16, without a checkout, and the sweep's float16 cases);
#   diag32 = head dim 32 natively on Hopper (the padding work-around off) under compute-sanitizer. PATH_DEVICE_BUDGET_S: seconds this script may use in all (default 560).
#   PATH_SWEEP_SHARDS: parallel sweep processes (default 7).
# A CUDA fault poisons a process: a shard then exits with status 3 and is resumed in a fresh process
# (the faulting case recorded with the kernel's name: PATH_KERNELS_SYNC=1).
set -o pipefail
OUTDIR=${OUT:-benchmarks/results}
export PYTHONUNBUFFERED=1
BUDGET=${PATH_DEVICE_BUDGET_S:-560}
STEPS=",${1:-sweep,bench},"
SHARDS=${PATH_SWEEP_SHARDS:-7}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
# path_lib.kernels lives in kernels/path_lib/kernels/; path_lib finds it there in a checkout by itself
# (path_lib/__init__.py adds the folder to the package's search path), so no install is needed here
python3 -c "import path_lib.kernels" || { echo "run_device: path_lib.kernels does not import from $PWD" >&2; exit 1; }
left() { echo $(( BUDGET - SECONDS )); }
has() { [[ "$STEPS" == *",$1,"* ]]; }

if has sweep; then
  mkdir -p /tmp/sweep
  for k in $(seq 0 $(( SHARDS - 1 ))); do
    (
      RESUME=""
      for attempt in 1 2 3 4; do
        PATH_KERNELS_SYNC=1 timeout $(( $(left) - 60 )) python3 benchmarks/correctness_sweep.py --shard "$k/$SHARDS" \
          $RESUME --out "/tmp/sweep/shard_$k.json" >> "/tmp/sweep/shard_$k.log" 2>&1
        rc=$?
        echo "shard $k attempt $attempt: exit $rc at ${SECONDS}s" >> "/tmp/sweep/shard_$k.log"
        [ $rc -eq 3 ] || break
        RESUME="--resume"
      done
    ) &
  done
  wait
  for k in $(seq 0 $(( SHARDS - 1 ))); do grep -v -i warn "/tmp/sweep/shard_$k.log"; done | tee "$OUTDIR/sweep.log"
  python3 benchmarks/correctness_sweep.py --merge /tmp/sweep/shard_*.json --out "$OUTDIR/correctness_sweep.json" \
    | tee -a "$OUTDIR/sweep.log"
fi
if has profile && [ "$(left)" -ge 60 ]; then
  timeout $(( $(left) - 5 )) python3 benchmarks/profile_parts.py --out "$OUTDIR/profile_parts.json" \
    ${PATH_PROFILE_ARGS:-} 2>&1 | grep -v -i warn | tee "$OUTDIR/profile.log"
fi
if has diag32; then   # each in a fresh process, since a fault poisons it
  for args in "--Hq 4 --Hk 2" "--Hq 2 --Hk 2"; do
    [ "$(left)" -lt 30 ] && break
    echo "== native D=32 $args" | tee -a "$OUTDIR/diag.log"
    PATH_KERNELS_PAD_D32=0 PATH_KERNELS_SYNC=1 timeout $(( $(left) - 5 )) python3 benchmarks/fault_case.py $args 2>&1 \
      | grep -v -i warn | tail -n 12 | tee -a "$OUTDIR/diag.log"
  done
  if command -v compute-sanitizer >/dev/null && [ "$(left)" -ge 60 ]; then
    echo "== compute-sanitizer, native D=32" | tee -a "$OUTDIR/diag.log"
    PATH_KERNELS_PAD_D32=0 timeout $(( $(left) - 5 )) compute-sanitizer --tool memcheck --print-limit 6 \
      python3 benchmarks/fault_case.py 2>&1 | grep -v -i warn | tail -n 60 | tee -a "$OUTDIR/diag.log"
  fi
fi
if has variants && [ "$(left)" -ge 60 ]; then
  # compile the variants in 8 parallel processes first (Triton's disk cache), then time them in one
  for k in 0 1 2 3 4 5 6 7; do
    timeout $(( $(left) - 30 )) python3 benchmarks/prep_variants.py --compile-only "$k/8" ${PATH_VARIANTS_ARGS:-} \
      > "/tmp/variants_compile_$k.log" 2>&1 &
  done
  wait
  tail -n 3 /tmp/variants_compile_*.log | grep -i -B2 error | head -20
  timeout $(( $(left) - 5 )) python3 benchmarks/prep_variants.py --out "$OUTDIR/prep_variants.json" --ncu ${PATH_VARIANTS_ARGS:-} 2>&1 \
    | grep -v -i warn | tee "$OUTDIR/variants.log"
fi
if has tune && [ "$(left)" -ge 60 ]; then
  timeout $(( $(left) - 5 )) python3 benchmarks/tune_segments.py --out "$OUTDIR/tune_segments.json" ${PATH_TUNE_ARGS:-} 2>&1 \
    | grep -v -i warn | tee "$OUTDIR/tune.log"
fi
if has bench && [ "$(left)" -ge 60 ]; then
  SHAPES=${PATH_BENCH_SHAPES:-64:1024,64:4096,64:16384,64:65536,128:1024,128:4096,128:16384,128:65536}
  # compile first, one process per shape in parallel (Triton's disk cache), then time in one process
  for shape in ${SHAPES//,/ }; do
    timeout $(( $(left) - 30 )) python3 benchmarks/bench_path.py --warm-only --shapes "$shape" \
      > "/tmp/bench_warm_${shape/:/_}.log" 2>&1 &
  done
  wait
  grep -il "error" /tmp/bench_warm_*.log | head -5
  echo "bench: compiled at ${SECONDS}s"
  RESUME=""; [ -f "$OUTDIR/bench_path.json" ] && RESUME="--resume"
  timeout $(( $(left) - 5 )) python3 benchmarks/bench_path.py --shapes "$SHAPES" $RESUME ${PATH_BENCH_ARGS:-} \
    --budget-s $(( $(left) - 90 )) --out "$OUTDIR/bench_path.json" 2>&1 | tee "$OUTDIR/bench.log" | grep -v "^{'D'"
fi
if has colab && [ "$(left)" -ge 60 ]; then
  PATH_COLAB_TIMEOUT_S=${PATH_COLAB_TIMEOUT_S:-300} timeout $(( $(left) - 5 )) bash benchmarks/run_colab.sh
fi
echo "run_device.sh done at ${SECONDS}s"
