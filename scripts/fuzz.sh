#!/usr/bin/env bash
# Runs tprof's libFuzzer harnesses (tests/fuzz/fuzz_readers.c), each for SECONDS on a corpus seeded from
# tests/fuzz/seeds/<reader>/ and the test fixtures, and prints per harness the executions and the result.
# usage: scripts/fuzz.sh SECONDS [BUILD_DIR] [READER...]   (BUILD_DIR configured with -DTPROF_FUZZ=ON, clang)
# A crash, leak, sanitizer report or timeout leaves its reproducer in BUILD_DIR/fuzz-artifacts/ and makes the
# script exit 1. make test runs it for a few seconds per harness; longer runs (issue 23: >= 10^7 executions each)
# are recorded under bench/results/.
# Environment: FUZZ_RUNS=N stops each harness after N executions (libFuzzer -runs; SECONDS still bounds it), as
# for issue 23's 10^7 runs; FUZZ_LOGDIR=DIR keeps each harness's full log there; FUZZ_JOBS=N runs N harnesses at
# once (default 1).
set -uo pipefail
secs=${1:?usage: scripts/fuzz.sh SECONDS [BUILD_DIR] [READER...]}
build=${2:-build-san}
shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/.." && pwd)
readers=${*:-safetensors engine_file engine_file_crc policy trace hf_config timm_config tokens image hf_index onnx onnx_import diff_run}
fx=$root/tests/fixtures
# The trace and ONNX-import seeds are small files in tests/fuzz/seeds (a 6-op slice of the roofline trace fixture;
# micro ViT, Llama and Gemma exports without the exporter's per-node metadata, 33-43 kB): the fixtures themselves
# (0.1-0.9 MB) made each execution 2-30 times slower for the same op patterns.
seeds_of() { # extra seeds from the fixtures, per reader
  case $1 in
  safetensors) ls "$fx"/hf_llama_tiny/*.safetensors "$fx"/timm_vit_token.safetensors 2>/dev/null ;;
  hf_config) ls "$fx"/hf_*/config.json ;;
  timm_config) ls "$fx"/timm_*/config.json ;;
  image) ls "$fx"/preprocess_expect_1*.png ;;
  hf_index) ls "$fx"/hf_llama_tiny/model.safetensors.index.json ;;
  onnx) ls "$fx"/onnx/*.onnx ;;
  esac
}
# The harnesses write each input to a file under TMPDIR (the readers take paths): tmpfs (/dev/shm) where there is
# one, about 1.5-2 times the executions per second of a disk-backed /tmp (2026-11-26, 2-core machine)
base=${TMPDIR:-/tmp}
[ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
harness_tmp=$(mktemp -d "$base/tprof_fuzz_XXXX") || exit 1
trap 'rm -rf "$harness_tmp"' EXIT
rc=0
art=$build/fuzz-artifacts
mkdir -p "$art"
# one harness: its result line on stdout, exit 1 on a finding
fuzz_one() {
  local r=$1 bin=$build/tests/fuzz/fuzz_$1 corpus log code runs extra=()
  [ -x "$bin" ] || { echo "fuzz: $bin not built (configure $build with -DTPROF_FUZZ=ON)"; return 1; }
  corpus=$(mktemp -d "${TMPDIR:-/tmp}/tprof_corpus_${r}_XXXX")
  [ -d "$root/tests/fuzz/seeds/$r" ] && cp "$root"/tests/fuzz/seeds/"$r"/* "$corpus"/ 2>/dev/null
  for f in $(seeds_of "$r"); do cp "$f" "$corpus/$(basename "$(dirname "$f")")_$(basename "$f")"; done
  log=$(mktemp "${TMPDIR:-/tmp}/tprof_fuzz_${r}_XXXX.log")
  [ -n "${FUZZ_RUNS:-}" ] && extra+=(-runs="$FUZZ_RUNS")
  TMPDIR=$harness_tmp ASAN_OPTIONS=detect_leaks=1 "$bin" "$corpus" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix="$art/${r}-" -print_final_stats=1 "${extra[@]}" >"$log" 2>&1
  code=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  [ -n "${FUZZ_LOGDIR:-}" ] && mkdir -p "$FUZZ_LOGDIR" && cp "$log" "$FUZZ_LOGDIR/fuzz_$r.log"
  if [ $code -eq 0 ]; then
    echo "fuzz_$r: ${runs:-?} executions (limit ${FUZZ_RUNS:+$FUZZ_RUNS runs, }${secs} s), no finding"
  else
    echo "fuzz_$r: FAILED (exit $code) after ${runs:-?} executions; reproducer in $art/, log:"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -8 | sed 's/^/    /'
  fi
  rm -rf "$corpus" "$log"
  return $((code != 0))
}
# FUZZ_JOBS harnesses at a time (make test: one per core); each line printed whole when its harness ends
jobs_max=${FUZZ_JOBS:-1}
running=0
for r in $readers; do
  if [ "$running" -ge "$jobs_max" ]; then
    wait -n || rc=1
    running=$((running - 1))
  fi
  fuzz_one "$r" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || rc=1
  running=$((running - 1))
done
exit $rc
