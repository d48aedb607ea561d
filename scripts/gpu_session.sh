#!/usr/bin/env bash
# The one call on the GPU machine (device tool): GPU facts, optional timm fixtures, GPU tests, benchmarks.
# Build here first (make build), carry build/, run: bash scripts/gpu_session.sh [golden] [tests] [bench]
# Everything goes to $OUT/session.log; JSON results to $OUT/*.json, fixtures to $OUT/fixtures/.
set -uo pipefail
OUT=${OUT:-out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
steps=${*:-tests bench}
echo "=== $(date -u +%FT%TZ) commit $(git rev-parse HEAD 2>/dev/null || echo unknown) steps: $steps"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv
rc=0
for s in $steps; do
  case $s in
  golden)
    echo "=== timm golden fixtures"
    python3 tools/make_timm_golden.py "$OUT/fixtures" || rc=1
    ;;
  tests)
    echo "=== GPU tests"
    "$BUILD/tests/test_gpu" || rc=1
    ;;
  bench)
    echo "=== default run: tprof bench"
    "$BUILD/tprof" bench --json "$OUT/bench_default.json" || rc=1
    echo "=== all precisions"
    "$BUILD/tprof" bench --model vit-b16 --batch 64 --precision fp32,fp16,bf16,fp8 --plan \
      --json "$OUT/bench_all_precisions.json" || rc=1
    ;;
  image)
    img=/opt/torch/.venv/lib/python3.12/site-packages/skimage/data
    echo "=== real images from $img"
    "$BUILD/tprof" bench --model vit-b16 --batch 8 --precision fp16,fp8 --image "$img" --duration 1 || rc=1
    ;;
  errors)
    echo "=== errors: each must be one line and a non-zero exit, not a crash"
    "$BUILD/tprof" bench --model vit-b8 --batch 10000 --precision fp16 --ref-images 1 --iterations 1 --duration 0
    echo "exit code $? (expected 1: out of GPU memory)"
    ;;
  *) echo "unknown step $s"; rc=1 ;;
  esac
done
echo "=== done rc=$rc"
exit $rc
