#!/usr/bin/env bash
# One device call: correctness sweep, then the benchmark, logs and JSON under $OUT (or benchmarks/results).
# Needs fla-core's wheel in .whl/ (python3 -m pip download --no-deps fla-core==0.6.0 -d .whl) and
# `carry: [".whl"]` on the device tool. The device copy has no git: pass the commit for provenance,
# e.g. run "PATH_BOOK_COMMIT=<git rev-parse HEAD output> bash benchmarks/run_device.sh".
# Usage: bash benchmarks/run_device.sh [--full]
set -o pipefail
OUTDIR=${OUT:-benchmarks/results}
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
TS="1024,4096,16384"            # fits one 10-minute call with the sweep's compiles
[ "$1" = "--full" ] && TS="1024,2048,4096,8192,16384"
timeout 300 python3 benchmarks/correctness_sweep.py --out "$OUTDIR/correctness_sweep.json" 2>&1 | grep -v -i warn | tee "$OUTDIR/sweep.log"
timeout 270 python3 benchmarks/bench_path.py --Ts "$TS" --out "$OUTDIR/bench_path.json" 2>&1 | tee "$OUTDIR/bench.log" | grep -v "^{'D'"
