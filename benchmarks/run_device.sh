#!/usr/bin/env bash
# One device call: correctness sweep first, then the benchmark with the time that is left; logs and JSON
# under $OUT (or benchmarks/results).
# Needs fla-core's wheel in .whl/ (python3 -m pip download --no-deps fla-core==0.6.0 -d .whl) and
# `carry: [".whl"]` on the device tool. The device copy has no git: pass the commit for provenance,
# e.g. run "PATH_BOOK_COMMIT=<git rev-parse HEAD output> bash benchmarks/run_device.sh" (a git-ignored
# .commit file only travels when `carry` names it: carry [".whl", ".commit"]; v3 recorded "unknown").
# Usage: bash benchmarks/run_device.sh [--full]
#   PATH_DEVICE_BUDGET_S: seconds this script may use in all (default 560; the sweep gets what it needs,
#   the benchmark only what is left, and is skipped under 60 s).
# A CUDA fault poisons the process: the sweep then exits with status 3 and is resumed in a fresh
# process (the faulting case recorded with the kernel's name: PATH_KERNELS_SYNC=1).
set -o pipefail
OUTDIR=${OUT:-benchmarks/results}
export PYTHONUNBUFFERED=1
BUDGET=${PATH_DEVICE_BUDGET_S:-560}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
TS="1024,4096,16384"            # fits one 10-minute call with the sweep's compiles
[ "$1" = "--full" ] && TS="1024,2048,4096,8192,16384"
left() { echo $(( BUDGET - SECONDS )); }
RESUME=""
for attempt in 1 2 3 4 5 6; do
  [ "$(left)" -lt $(( ${PATH_DIAG_RESERVE_S:-60} + 20 )) ] && break
  PATH_KERNELS_SYNC=1 timeout $(( $(left) - ${PATH_DIAG_RESERVE_S:-60} )) python3 benchmarks/correctness_sweep.py $RESUME \
    --out "$OUTDIR/correctness_sweep.json" 2>&1 | grep -v -i warn | tee -a "$OUTDIR/sweep.log"
  rc=$?
  echo "sweep attempt $attempt: exit $rc at ${SECONDS}s" | tee -a "$OUTDIR/sweep.log"
  [ $rc -eq 3 ] || break
  RESUME="--resume"
done
# diagnosis: head dim 32 natively (the Hopper work-around off), each in a fresh process since a fault
# poisons it; with grouped-query heads (the sweep's first case), then without; then under
# compute-sanitizer (which works on some runtimes only)
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
if [ "$(left)" -ge 60 ]; then
  timeout $(( $(left) - 5 )) python3 benchmarks/bench_path.py --Ts "$TS" --out "$OUTDIR/bench_path.json" 2>&1 \
    | tee "$OUTDIR/bench.log" | grep -v "^{'D'"
else
  echo "benchmark skipped: $(left) s left of the ${BUDGET} s budget" | tee "$OUTDIR/bench.log"
fi
