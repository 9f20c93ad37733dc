#!/usr/bin/env bash
# Compare kernel variants (git revisions and/or environment settings) per kernel, in one device call.
#
#   bash benchmarks/variants.sh prepare REV [REV ...]      # here: git archive each REV into .variants/REV
#                                                          # (kernels at path_lib/kernels/, as a wheel installs them)
#   # then on the device (device tool, carry: [".variants"]):
#   bash benchmarks/variants.sh run "REV|ENV" ["REV|ENV" ...]
#
# "REV|ENV": a prepared revision and optional space-separated settings, e.g.
#   "main|" "kernels-v8-candidate|" "main|PATH_KERNELS_WARPS=intra=8"
# `run` compiles every variant first, in parallel processes (Triton's cache), then times them one at a
# time with benchmarks/profile_parts.py (ours only; per-kernel GPU time) and prints the forward+backward
# totals and the kernels matching VARIANTS_GREP. Printed only: a result worth keeping is re-measured
# at a committed revision with run_device.sh (sweep, profile, bench).
#   VARIANTS_SHAPES (default 128:1024,128:16384,64:1024,64:16384), VARIANTS_GREP (default: every kernel)
set -o pipefail
cmd=${1:-}; shift || true
case "$cmd" in
  prepare)
    [ $# -ge 1 ] || { echo "usage: $0 prepare REV [REV ...]" >&2; exit 2; }
    for rev in "$@"; do
      dir=".variants/${rev//\//_}"
      rm -rf "$dir" && mkdir -p "$dir"
      git archive "$rev" kernels benchmarks/profile_parts.py benchmarks/bench_path.py path_lib \
        | tar -x -C "$dir" || exit 1
      # the installed layout, so the copy imports without an install: path_lib/kernels/ (kernels/path_lib/kernels/
      # in a checkout; kernels/ itself before 0.4)
      if [ -d "$dir/kernels/path_lib/kernels" ]; then mv "$dir/kernels/path_lib/kernels" "$dir/path_lib/kernels"
      else mv "$dir/kernels" "$dir/path_lib/kernels"; fi
      rm -rf "$dir/kernels"
      touch "$dir/benchmarks/__init__.py"
      echo "$dir: $(git rev-parse --short "$rev")"
    done ;;
  run)
    [ $# -ge 1 ] || { echo "usage: $0 run \"REV|ENV\" [...]" >&2; exit 2; }
    export PYTHONUNBUFFERED=1
    for spec in "$@"; do
      rev=${spec%%|*}; dir=".variants/${rev//\//_}"
      [ -d "$dir" ] || { echo "not prepared: $dir (run '$0 prepare' here first, carry .variants)" >&2; exit 2; }
    done
    for spec in "$@"; do
      rev=${spec%%|*}; env_=${spec#*|}; dir=".variants/${rev//\//_}"
      ( env $env_ python3 - "$dir" <<'PY' 2>&1 | grep -v -i warn | tail -n 2 ) &
import sys
sys.path.insert(0, sys.argv[1])
import torch
import path_lib.kernels as kernels
for D in (128, 64):
    H, T = 2048 // D, 1024
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, T, H, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(3))
    w = torch.nn.functional.normalize(torch.randn(1, T, H, D, device="cuda", generator=g), dim=-1).requires_grad_()
    b = (2 * torch.rand(1, T, H, device="cuda", generator=g)).requires_grad_()
    kernels.path_attention(q, k, v, w, b, None, check_values=False).sum().backward()
torch.cuda.synchronize()
print("compiled", sys.argv[1], flush=True)
PY
    done
    wait
    for spec in "$@"; do
      rev=${spec%%|*}; env_=${spec#*|}; dir=".variants/${rev//\//_}"
      echo "#### $rev $env_"
      env $env_ timeout 300 python3 "$dir/benchmarks/profile_parts.py" --methods ours_path --iters 3 --top 14 \
        --shapes "${VARIANTS_SHAPES:-128:1024,128:16384,64:1024,64:16384}" --out /tmp/variants_profile.json 2>&1 \
        | grep -v -i warn | grep -E "fwdbwd|${VARIANTS_GREP:-_kernel}|rror"
    done ;;
  *) echo "usage: $0 prepare REV [REV ...] | run \"REV|ENV\" [...]" >&2; exit 2 ;;
esac
