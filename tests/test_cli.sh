#!/usr/bin/env bash
# Command-line behaviour: each bad input gives exactly one line on stderr naming the culprit and a non-zero
# exit (not a crash: exit codes >= 128 are signals); a good small run succeeds on the CPU.
set -u
TPROF=${1:?usage: test_cli.sh path/to/tprof}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# expect_error NAME RC PATTERN ARGS...: the bad-input catalogue: exit status RC (README's classes: 2 usage, 3 input,
# 4 unsupported, 5 out of memory, 6 runtime; lint's own), one stderr line matching PATTERN (the file, field or value)
expect_error() {
  local name=$1 want=$2 pattern=$3
  shift 3
  "$TPROF" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ $rc -eq "$want" ] && [ "$lines" -eq 1 ] && grep -q -- "$pattern" "$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: rc=$rc (wanted $want), $lines stderr lines, wanted /$pattern/:"
    sed 's/^/    /' "$tmp/err"
  fi
}

expect_ok() {
  local name=$1 pattern=$2
  shift 2
  "$TPROF" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq 0 ] && grep -q -- "$pattern" "$tmp/out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: rc=$rc, wanted /$pattern/ in stdout:"
    sed 's/^/    /' "$tmp/out" "$tmp/err" | tail -20
  fi
}

# expect_rc NAME RC PATTERN ARGS...: exit status exactly RC, PATTERN in stdout (commands whose status is the answer)
expect_rc() {
  local name=$1 want=$2 pattern=$3
  shift 3
  "$TPROF" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq "$want" ] && grep -q -- "$pattern" "$tmp/out"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: rc=$rc (wanted $want), wanted /$pattern/ in stdout:"
    sed 's/^/    /' "$tmp/out" "$tmp/err" | tail -20
  fi
}

# expect_exit NAME RC ARGS...: exit status exactly RC (README's classes), one line on stderr
expect_exit() {
  local name=$1 want=$2
  shift 2
  "$TPROF" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq "$want" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL $name: rc=$rc (wanted $want):"
    sed 's/^/    /' "$tmp/err" | tail -5
  fi
}

small=(--device cpu --iterations 1 --warmup 0)
tok=(--model vit-tiny --img-size 48 --patch-size 16 --embed-dim 64 --depth 2 --heads 2 --num-classes 10)

# The catalogue by class, one file a class (tests/cli/*.sh: core, outputs, inputs, config, options, memory,
# models), each sourced here with the helpers and $tmp above. Arguments after the binary name the files to run
# (ctest runs each as its own test, in parallel); none: every file.
shift
if [ $# -eq 0 ]; then set -- "$(dirname "$0")"/cli/*.sh; fi
for cases in "$@"; do
  . "$cases"
done

echo "test_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
