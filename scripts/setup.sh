#!/usr/bin/env bash
# Installs what the build needs on a Debian/Ubuntu machine (the CUDA toolkit itself is not installed here:
# without it the CPU-only part builds). Idempotent: installs only what is missing.
set -euo pipefail
need=()
have_file() { [ -e "$1" ] || compgen -G "$1" >/dev/null; }
command -v cmake >/dev/null || need+=(cmake)
command -v make >/dev/null || need+=(make)
command -v gcc >/dev/null || need+=(gcc)
have_file /usr/include/jansson.h && have_file "/usr/lib/*/libjansson.a" || need+=(libjansson-dev)
have_file /usr/include/stb/stb_image.h || need+=(libstb-dev)
have_file /usr/include/check.h && have_file "/usr/lib/*/libcheck.a" || need+=(check)
have_file "/usr/lib/*/libsubunit.a" || need+=(libsubunit-dev)
# ONNX import (issue 24): protobuf-c (its static library and its compiler) and the ONNX schema from libonnx-dev
have_file /usr/include/protobuf-c/protobuf-c.h && have_file "/usr/lib/*/libprotobuf-c.a" || need+=(libprotobuf-c-dev)
command -v protoc-c >/dev/null || need+=(protobuf-c-compiler)
have_file /usr/include/onnx/onnx.proto || need+=(libonnx-dev)
# make test's sanitizer build and libFuzzer harnesses: clang with its runtime (and OpenMP for clang)
command -v clang >/dev/null || need+=(clang)
if command -v clang >/dev/null; then
  v=$(clang -dumpversion | cut -d. -f1)
  printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
    clang -x c -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null || need+=("libclang-rt-$v-dev")
  have_file "/usr/lib/llvm-$v/lib/libomp.so" || have_file "/usr/lib/*/libomp.so*" || need+=("libomp-$v-dev")
fi
[ ${#need[@]} -eq 0 ] && exit 0
echo "setup: installing ${need[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v apt-get >/dev/null; then
  echo "setup: apt-get not found; install these Debian packages by other means: ${need[*]}" >&2
  exit 1
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
