# Thin front over CMake. `make run`: the main job on the embedded default; `make test`: every test, then the CPU
# part again under AddressSanitizer + UndefinedBehaviorSanitizer (clang, $(BUILD)-san) with a short run of every
# libFuzzer harness (scripts/fuzz.sh, FUZZ_SECONDS each).
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 8

.PHONY: all setup build run test sanitize clean

all: build

setup:
	@bash scripts/setup.sh

# Headers for the CUDA build from NVIDIA's wheels on PyPI (tools/fetch_wheel_headers.py), fetched once, best effort:
# cuSPARSELt's (the library is loaded at run time; without it the 2:4 sparse GEMMs compile as unsupported and say
# so) and CUTLASS's (header-only; without them the weight-only FP8 prefill GEMM through CUTLASS compiles as
# unsupported and says so). The CPU-only `make run` needs neither.
CUSPARSELT_H := third_party/cusparselt/include/cusparseLt.h
CUTLASS_H := third_party/cutlass/include/cutlass/cutlass.h

build: setup
	@[ -e $(CUSPARSELT_H) ] || ! command -v python3 >/dev/null || python3 tools/fetch_wheel_headers.py cusparselt third_party/cusparselt || \
	  echo "make: no cuSPARSELt header: tprof's 2:4 sparse GEMMs will report themselves unsupported" >&2
	@[ -e $(CUTLASS_H) ] || ! command -v python3 >/dev/null || python3 tools/fetch_wheel_headers.py cutlass third_party/cutlass || \
	  echo "make: no CUTLASS headers: the weight-only FP8 prefill GEMM through CUTLASS will report itself unsupported" >&2
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Without a GPU (no /dev/nvidia0, or nvidia-smi lists none), the CUDA kernels could not run here: build and run the
# CPU part alone ($(BUILD)-cpu, minutes faster on a small machine) and say so. make test still compiles everything.
run: setup
	@if [ -e /dev/nvidia0 ] && nvidia-smi -L >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory build && $(BUILD)/tprof bench; \
	else \
	  echo "make run: no NVIDIA GPU here (/dev/nvidia0 or nvidia-smi): building the CPU part only ($(BUILD)-cpu), then tprof bench on the CPU"; \
	  cmake -S . -B $(BUILD)-cpu $(CMAKE_FLAGS) -DTPROF_WITH_CUDA=OFF >/dev/null && \
	  cmake --build $(BUILD)-cpu -j $(JOBS) --target tprof && $(BUILD)-cpu/tprof bench; \
	fi

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory sanitize

sanitize: setup
	@cmake -S . -B $(BUILD)-san -DTPROF_WITH_CUDA=OFF -DCMAKE_C_COMPILER=clang -DTPROF_SANITIZE=ON -DTPROF_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD)-san -j $(JOBS)
	bash scripts/ctest_sanitized.sh $(BUILD)-san $(JOBS)
	FUZZ_JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_SECONDS) $(BUILD)-san

clean:
	rm -rf $(BUILD) $(BUILD)-san $(BUILD)-cpu
