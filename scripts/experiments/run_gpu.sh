#!/usr/bin/env bash
# The equal-training GPU runs, one call on one H200 (see scripts/experiments/gpu_plan.md). The SAME command
# every call: it resumes from the previous call's state when that state was copied back into
# runs/gpu_state/ (git-ignored) and carried along.
#
#   PATH_BOOK_COMMIT=<commit> bash scripts/experiments/run_gpu.sh            # default: lm, then flip_flop, then a5
#   PATH_BOOK_COMMIT=<commit> PHASES=flip_flop,a5 bash scripts/experiments/run_gpu.sh
#
# Environment: OUT (required: where results go), PATH_BOOK_COMMIT (recorded in every record),
# PHASES (default lm,flip_flop,a5), BUDGET_S (default 510: seconds of this call), WORKERS (default 14),
# EXTRA (more run_equal.py options, e.g. "--a5-models rope,path --a5-lengths 16").
# Returns in $OUT: lm_full.json, flip_flop.json, a5_layers.json (and mqrar.json if asked), log.txt,
# state.tar or state.tar.part00..02 (at most 8 files, each < 16 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the output folder}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PATH_BOOK_COMMIT="${PATH_BOOK_COMMIT:-unknown}"
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"
PHASES="${PHASES:-lm,flip_flop,a5}"
mkdir -p "$OUT" runs/gpu_state
# MPS=1: run the workers under CUDA MPS (kernels of different processes run at once instead of taking
# turns; see measure_sharing.sh for the measured gain); the daemon is stopped when this script ends
if [ "${MPS:-0}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p /tmp/mps_pipe /tmp/mps_log
  pgrep -f nvidia-cuda-mps-control >/dev/null || nvidia-cuda-mps-control -d
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
  echo "run_gpu: workers under CUDA MPS"
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
# shellcheck disable=SC2086
python3 scripts/experiments/run_equal.py --phases "$PHASES" --state /tmp/path_book_gpu_state \
    --resume-from runs/gpu_state --out "$OUT" --budget-s "${BUDGET_S:-510}" --workers "${WORKERS:-14}" \
    ${EXTRA:-} 2>&1 | grep -v -E "Warning|warnings.warn" | tail -n 60
ls -la "$OUT"
