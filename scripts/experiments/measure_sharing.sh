#!/usr/bin/env bash
# How many training steps a second one GPU gives when several small runs share it: processes
# time-sliced (the default) against the same processes under CUDA MPS, which lets kernels of
# different processes run at once. Sizes: the equal-training language model (256 wide, 4 layers)
# and a larger one (512 wide, 8 layers). Writes $OUT/<mode>/timing_lm.json (with provenance).
#   PATH_BOOK_COMMIT=<commit> bash scripts/experiments/measure_sharing.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,compute_mode --format=csv,noheader
python3 -c "import path_lib.kernels, triton, torch; print('kernels import; triton', triton.__version__, 'torch', torch.__version__)"
M=RoPE,PaTH,PaTH-FoX
timeout 100 python3 scripts/experiments/time_gpu.py --what lm --sizes 256x4x64 --models $M --procs 12 \
    --steps 30 --out "$OUT/timeslice" 2>&1 | grep -v -i warn
if command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
  mkdir -p /tmp/mps_pipe /tmp/mps_log
  nvidia-cuda-mps-control -d && echo "MPS daemon started"
  timeout 200 python3 scripts/experiments/time_gpu.py --what lm --sizes 256x4x64 --models $M \
      --procs 12,24 --steps 30 --out "$OUT/mps" 2>&1 | grep -v -i warn
  timeout 100 python3 scripts/experiments/time_gpu.py --what lm --sizes 512x8x64 --models $M --procs 12 \
      --steps 20 --out "$OUT/mps_large" 2>&1 | grep -v -i warn
  [ "${MPS_KEEP:-0}" = 1 ] || echo quit | nvidia-cuda-mps-control
  tail -n 5 /tmp/mps_log/control.log 2>/dev/null
else
  echo "no nvidia-cuda-mps-control on this machine"
fi
