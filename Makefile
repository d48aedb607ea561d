# Thin front over CMake. `make run`: the main job on the embedded default; `make test`: every test, then the CPU
# part again under AddressSanitizer + UndefinedBehaviorSanitizer (clang, $(BUILD)-san) with a short run of every
# libFuzzer harness (scripts/fuzz.sh, FUZZ_SECONDS each).
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 30

.PHONY: all setup build run test sanitize clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
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
	ctest --test-dir $(BUILD) --output-on-failure
	@$(MAKE) --no-print-directory sanitize

sanitize: setup
	@cmake -S . -B $(BUILD)-san -DTPROF_WITH_CUDA=OFF -DCMAKE_C_COMPILER=clang -DTPROF_SANITIZE=ON -DTPROF_FUZZ=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD)-san -j $(JOBS)
	ctest --test-dir $(BUILD)-san --output-on-failure
	bash scripts/fuzz.sh $(FUZZ_SECONDS) $(BUILD)-san

clean:
	rm -rf $(BUILD) $(BUILD)-san $(BUILD)-cpu
