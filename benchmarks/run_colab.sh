#!/usr/bin/env bash
# The Colab reader's run, on a GPU: every page of the book with the small (T4-class) preset and the
# float16 format forced (a T4 has no bfloat16 arithmetic; PATH_BOOK_DTYPE=float16 makes a newer GPU
# compute as a T4 does), from the built wheel without a checkout (benchmarks/run_chapters.py
# --installed: the records served on 127.0.0.1), then the kernels' float16 cases of the correctness
# sweep. On a T4 itself the same command measures the T4 times that the chapters' notes show.
#
#   PATH_BOOK_COMMIT=$(git rev-parse HEAD) bash benchmarks/run_colab.sh            # every page
#   bash benchmarks/run_colab.sh book/intro.ipynb book/part3/07_kernel.ipynb      # some pages
#   on the device machine (OUT set): bash benchmarks/run_colab.sh, its records come back from $OUT
#
# Writes $OUT (or benchmarks/results)/chapter_times_small.json, chapter_times_full.json (PATH_COLAB_FULL=0
# leaves the full preset out) and correctness_sweep_fp16.json (the full
# sweep's record, correctness_sweep.json, is left alone). Without a CUDA device the pages run on the
# CPU (a check of the script; slow at the small sizes: give cheap pages) and the sweep is skipped.
# PATH_COLAB_TIMEOUT_S: seconds per page (default 900). Exit status: 1 if a page or a case failed.
set -o pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-benchmarks/results}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PATH_BOOK_DTYPE=${PATH_BOOK_DTYPE:-float16}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUTDIR"
status=0

echo "== pages, small preset, $PATH_BOOK_DTYPE, without a checkout"
"$PY" benchmarks/run_chapters.py --installed --preset small --out-dir "$OUTDIR" \
  --timeout "${PATH_COLAB_TIMEOUT_S:-900}" "$@" 2>&1 | tee "$OUTDIR/colab_pages.log" || status=1
if [ "${PATH_COLAB_FULL:-1}" = 1 ]; then   # the full preset in the GPU's own format (bfloat16 on Ampere and later)
  echo "== pages, full preset, native format, without a checkout"
  PATH_BOOK_DTYPE= "$PY" benchmarks/run_chapters.py --installed --preset full --out-dir "$OUTDIR" \
    --timeout "${PATH_COLAB_TIMEOUT_S:-900}" "$@" 2>&1 | tee "$OUTDIR/colab_pages_full.log" || status=1
fi

if "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "== kernels: the float16 cases of the correctness sweep"
  PATH_KERNELS_SYNC=1 "$PY" benchmarks/correctness_sweep.py --match 'float16|fp16' --skip-long \
    --out "$OUTDIR/correctness_sweep_fp16.json" 2>&1 | grep -v -i warn | tee "$OUTDIR/colab_sweep.log" || status=1
else
  echo "== no CUDA device: the float16 sweep cases are skipped"
  echo "   (on a GPU: $PY benchmarks/correctness_sweep.py --match 'float16|fp16' --skip-long --out $OUTDIR/correctness_sweep_fp16.json)"
fi
echo "run_colab.sh done at ${SECONDS}s, status $status"
exit $status
