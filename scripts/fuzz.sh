#!/usr/bin/env bash
# Runs tprof's libFuzzer harnesses (tests/fuzz/fuzz_readers.c), each for SECONDS on a corpus seeded from
# tests/fuzz/seeds/<reader>/ and the test fixtures, and prints per harness the executions and the result.
# usage: scripts/fuzz.sh SECONDS [BUILD_DIR] [READER...]   (BUILD_DIR configured with -DTPROF_FUZZ=ON, clang)
# A crash, leak, sanitizer report or timeout leaves its reproducer in BUILD_DIR/fuzz-artifacts/ and makes the
# script exit 1. make test runs it for a few seconds per harness; longer runs (issue 23: >= 10^7 executions each)
# are recorded under bench/results/.
set -uo pipefail
secs=${1:?usage: scripts/fuzz.sh SECONDS [BUILD_DIR] [READER...]}
build=${2:-build-san}
shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/.." && pwd)
readers=${*:-safetensors engine_file engine_file_crc policy trace hf_config timm_config tokens image hf_index onnx onnx_import}
fx=$root/tests/fixtures
seeds_of() { # extra seeds from the fixtures, per reader
  case $1 in
  safetensors) ls "$fx"/hf_llama_tiny/*.safetensors "$fx"/timm_vit_token.safetensors 2>/dev/null ;;
  trace) ls "$fx"/h200_vit-b16_b64_fp16_roofline.trace.json ;;
  hf_config) ls "$fx"/hf_*/config.json ;;
  timm_config) ls "$fx"/timm_*/config.json ;;
  image) ls "$fx"/preprocess_expect_1*.png ;;
  hf_index) ls "$fx"/hf_llama_tiny/model.safetensors.index.json ;;
  onnx) ls "$fx"/onnx/*.onnx ;;
  onnx_import) ls "$fx"/onnx_vit/*.onnx "$fx"/onnx_llama/*.onnx ;;
  esac
}
rc=0
art=$build/fuzz-artifacts
mkdir -p "$art"
for r in $readers; do
  bin=$build/tests/fuzz/fuzz_$r
  [ -x "$bin" ] || { echo "fuzz: $bin not built (configure $build with -DTPROF_FUZZ=ON)"; rc=1; continue; }
  corpus=$(mktemp -d "${TMPDIR:-/tmp}/tprof_corpus_${r}_XXXX")
  [ -d "$root/tests/fuzz/seeds/$r" ] && cp "$root"/tests/fuzz/seeds/"$r"/* "$corpus"/ 2>/dev/null
  for f in $(seeds_of "$r"); do cp "$f" "$corpus/$(basename "$(dirname "$f")")_$(basename "$f")"; done
  log=$(mktemp "${TMPDIR:-/tmp}/tprof_fuzz_${r}_XXXX.log")
  ASAN_OPTIONS=detect_leaks=1 "$bin" "$corpus" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix="$art/${r}-" -print_final_stats=1 >"$log" 2>&1
  code=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  if [ $code -eq 0 ]; then
    echo "fuzz_$r: ${runs:-?} executions in ${secs} s, no finding"
  else
    echo "fuzz_$r: FAILED (exit $code) after ${runs:-?} executions; reproducer in $art/, log:"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -8 | sed 's/^/    /'
    rc=1
  fi
  rm -rf "$corpus" "$log"
done
exit $rc
