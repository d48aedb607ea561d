#!/usr/bin/env bash
# The one call on the GPU machine (device tool): GPU facts, optional timm fixtures, GPU tests, benchmarks.
# Build here first (make build), carry build/, run: bash scripts/gpu_session.sh [golden] [tests] [bench]
# (decoders: decoder decoder_check decoder_profile groups pdl fusions hfpeers w8a8 persistent fp8block wogemm; tensor parallelism on 2+ GPUs: tp, tp70b and tp100 (4+ GPUs), tphang, tplaunch, gpus; pipelines: vision, pi0, pi0_onecall, pi0ref, mixed; 2:4 sparsity: sparse, sparse_epi, sparse_gap, spgemm_algs, sparse_compare; ONNX import: onnx, onnx_llama; the binaries can travel as .dev/bins.tar.xz, see docs/device.md)
# Everything goes to $OUT/session.log; JSON results to $OUT/*.json, fixtures to $OUT/fixtures/.
set -uo pipefail
OUT=${OUT:-out}
BUILD=${BUILD:-build}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
steps=${*:-tests bench}
# cuDNN (for --attention auto/cudnn) from the same place PyTorch loads it, when that exists: the GPU machines also
# have an older system cuDNN (9.14) on the loader path, which tprof's search would find first
venv_cudnn=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib
if [ -z "${TPROF_CUDNN_LIB:-}" ] && [ -d "$venv_cudnn" ]; then export TPROF_CUDNN_LIB=$venv_cudnn; fi
# cuSPARSELt (2:4 sparse GEMMs, issue 22) lives in the same venv (0.8 layout; tprof's search finds it there too)
venv_cusparselt=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cusparselt/lib
if [ -z "${TPROF_CUSPARSELT_LIB:-}" ] && [ -d "$venv_cusparselt" ]; then export TPROF_CUSPARSELT_LIB=$venv_cusparselt; fi
echo "=== $(date -u +%FT%TZ) $("$BUILD/tprof" --version 2>/dev/null || echo "tprof: not built") steps: $steps"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv
rc=0
# suites PREFIX PATTERN SUITE...: each GPU test suite alone into $OUT/PREFIX_SUITE.log, the lines matching PATTERN shown
suites() {
  local prefix=$1 pattern=$2 suite
  shift 2
  for suite in "$@"; do
    CK_RUN_SUITE=$suite "$BUILD/tests/test_gpu" > "$OUT/${prefix}_$suite.log" 2>&1 || rc=1
    grep -E "FAIL|:F:|:E:|Checks|$pattern" "$OUT/${prefix}_$suite.log" | grep -v "^  ok" | tail -40
  done
}
# pi0_torch SECONDS JSON LOG: bench/pi0_reference.py's PyTorch peer of pi0 (bf16, batch 1: eager per stage, one CUDA
# graph, torch.compile PI0_COMPILE), its last lines shown
pi0_torch() {
  echo "--- bench/pi0_reference.py: pi0 in PyTorch bf16 (eager per stage, one CUDA graph, torch.compile ${PI0_COMPILE:-default})"
  PYTHONUNBUFFERED=1 timeout "$1" python3 bench/pi0_reference.py bench --config pi0 --batch 1 --dtype bf16 \
    --compile-mode "${PI0_COMPILE:-default}" --json "$2" > "$3" 2>&1 || rc=1
  tail -4 "$3"
}
for s in $steps; do
  case $s in
  golden)
    echo "=== timm golden fixtures"
    python3 tools/make_timm_golden.py "$OUT/fixtures" || rc=1
    ;;
  tests)
    # the whole suite outgrows one 10-minute device call (bench/results/2026-11-26_h100_gpu_tests_final.log):
    # GPU_SUITES="gpu_ops gpu_gemv ..." runs those suites one after another instead
    echo "=== GPU tests${GPU_SUITES:+: $GPU_SUITES}"
    if [ -n "${GPU_SUITES:-}" ]; then
      suites tests "^decoder case" $GPU_SUITES
    else
      "$BUILD/tests/test_gpu" || rc=1
    fi
    ;;
  bench)
    echo "=== default run: tprof bench"
    "$BUILD/tprof" bench --json "$OUT/bench_default.json" || rc=1
    echo "=== all precisions"
    "$BUILD/tprof" bench --model vit-b16 --batch 64 --precision fp32,fp16,bf16,fp8 --plan \
      --json "$OUT/bench_all_precisions.json" || rc=1
    ;;
  decoder)
    echo "=== decoder: a Llama-7B-shaped layer (1 layer, vocabulary 256: the layer's weights dominate), decode with ~1024 cached tokens"
    "$BUILD/tprof" bench --model llama-2-7b --layers 1 --vocab 256 --prompt 992 --gen 64 --batch 1 \
      --precision fp16,bf16,fp8-wo,nvfp4-wo --json "$OUT/decoder_llama7b_layer.json" || rc=1
    echo "=== decoder: llama-3.2-1b, pp512 tg128, batch 1 and 8"
    "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --gen 128 --batch 1,8 --precision fp16,bf16,fp8-wo,nvfp4-wo \
      --json "$OUT/decoder_llama32_1b.json" || rc=1
    ;;
  fp8block)
    # issue 43: fp8-block's decode GEMV and its RMSNorm writing the prefill GEMMs' FP8 block-128 input: the suites
    # (the kernel against tp_quantize, engines against the CPU's emulation), then Llama pp512 tg128 beside fp16 and
    # fp8-wo
    echo "=== fp8-block (issue 43): gpu_decoder_ops, gpu_gemv, gpu_decoder_engine, Llama pp512 tg128"
    suites fp8block "rmsnorm fp8 block-128|fp8-block decode|fp8-block prefill" gpu_decoder_ops gpu_gemv gpu_decoder_engine
    for m in llama-3.2-1b llama-3.1-8b; do
      "$BUILD/tprof" bench --model $m --prompt 512 --gen 128 --batch 1 --precision fp16,fp8-wo,fp8-block \
        --json "$OUT/fp8block_$m.json" > "$OUT/fp8block_$m.log" 2>&1 || rc=1
      grep -E "^\| Llama|kernels a step" "$OUT/fp8block_$m.log"
    done
    ;;
  wogemm)
    # issue 43 item 2: weight-only FP8 prefill without the dequantized copy (tpk_gemm_sm90_wo_fp8): its GPU cases,
    # the lab against cuBLASLt on 16-bit weights and dequantize + cuBLASLt, then the 8B and 1B prefills
    echo "=== weight-only FP8 prefill GEMM (issue 43): gpu_gemm_sm90, wo_gemm_lab, Llama pp512"
    suites wogemm "gemm_sm90_wo_fp8" gpu_gemm_sm90
    "$BUILD/wo_gemm_lab" 30 f16 512 | tee "$OUT/wo_gemm_lab.log" || rc=1
    for m in llama-3.2-1b llama-3.1-8b; do
      "$BUILD/tprof" bench --model $m --prompt 512 --gen 32 --batch 1 --precision fp16,fp8-wo,nvfp4-wo --plan \
        --json "$OUT/wogemm_$m.json" > "$OUT/wogemm_$m.log" 2>&1 || rc=1
      grep -E "^\| Llama|gemm_sm90_wo|W8A16" "$OUT/wogemm_$m.log" | head -20
    done
    ;;
  persistent)
    # issue 42: the persistent decode step. Its GPU suite (against the graph path), then Llama-3.2-1B tg128 over the
    # weight pipeline's lab knobs (TPROF_PERSIST_STAGES, _AHEAD: tiles prefetched into L2, _PAD: bank-conflict
    # padding; engines without them ignore them), each with its per-role records, then tprof profile on the step
    echo "=== persistent decode step (issue 42): gpu_persistent, then llama-3.2-1b tg128 over the lab knobs"
    suites persistent "persistent case|persistent under auto" gpu_persistent
    echo "--- gpu_persistent at 3 stages (TPROF_PERSIST_STAGES=3: the default until 2 passed and measured faster)"
    TPROF_PERSIST_STAGES=3 suites persistent3 "persistent case|persistent under auto" gpu_persistent
    pb=(bench --model llama-3.2-1b --prompt 512 --gen 128 --batch 1 --duration 0.5 --reference none)
    "$BUILD/tprof" "${pb[@]}" --precision fp16,fp8-wo --decode-kernel graph --json "$OUT/persistent_graph.json" \
      > "$OUT/persistent_graph.log" 2>&1 || rc=1
    grep -E "^\| llama|Decode step|error" "$OUT/persistent_graph.log" | head -8
    for knobs in ${PERSIST_KNOBS:-"3 0 0" "2 0 0" "2 0 1"}; do
      set -- $knobs
      echo "--- persistent: stages $1, L2 ahead $2, pad $3"
      TPROF_PERSIST_TRACE=1 TPROF_PERSIST_STAGES=$1 TPROF_PERSIST_AHEAD=$2 TPROF_PERSIST_PAD=$3 "$BUILD/tprof" \
        "${pb[@]}" --precision fp16,fp8-wo --decode-kernel persistent --json "$OUT/persistent_$1_$2_$3.json" \
        > "$OUT/persistent_$1_$2_$3.log" 2>&1 || rc=1
      grep -E "^\| llama|Decode step|persistent step records|input_layernorm|rope_q|o_proj|post_att|down_proj|model.norm|error" \
        "$OUT/persistent_$1_$2_$3.log" | head -24
    done
    "$BUILD/tprof" profile --model llama-3.2-1b --prompt 512 --gen 128 --batch 1 --precision fp16 --reference none \
      --decode-kernel persistent --out "$OUT/persistent_profile" > "$OUT/persistent_profile.log" 2>&1 || rc=1
    grep -E "attribut|per layer|persistent|error" "$OUT/persistent_profile.log" | head -20
    ;;
  w8a8)
    echo "=== W8A8 FP8 decoders (issue 20): the GEMV and decoder-engine GPU suites, then the 7B-shaped layer and llama-3.2-1b"
    suites w8a8 "decoder case .* fp8:|w8a8" gpu_gemv gpu_decoder_engine
    "$BUILD/tprof" bench --model llama-2-7b --layers 1 --vocab 256 --prompt 992 --gen 64 --batch 1 --duration 0.5 \
      --precision fp16,fp8,fp8-wo --plan --json "$OUT/w8a8_llama7b_layer.json" > "$OUT/w8a8_llama7b_layer.log" 2>&1 || rc=1
    grep -E "tg64|pp992|Decode|Greedy|Accuracy|Calibrat|q_proj|o_proj|down_proj" "$OUT/w8a8_llama7b_layer.log" | head -40
    "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --gen 128 --batch 1,8 --duration 0.5 \
      --precision fp16,fp8,fp8-wo --json "$OUT/w8a8_llama32_1b.json" > "$OUT/w8a8_llama32_1b.log" 2>&1 || rc=1
    grep -E "tg128|pp512|Greedy|Accuracy|Calibrat|error" "$OUT/w8a8_llama32_1b.log" | head -40
    ;;
  blockfmt)
    echo "=== decoders in fp8-block, nvfp4, mxfp8 (issue 20): the decoder-engine GPU suite, then llama-3.2-1b"
    suites blockfmt "prefill: engine vs emulation" gpu_decoder_engine
    "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --gen 64 --batch 1 --duration 0.5 \
      --precision fp16,fp8,fp8-block,mxfp8,nvfp4 --json "$OUT/blockfmt_llama32_1b.json" > "$OUT/blockfmt_llama32_1b.log" 2>&1 || rc=1
    grep -E "tg64|pp512|Greedy|Accuracy|Calibrat|error|emulated" "$OUT/blockfmt_llama32_1b.log" | head -40
    ;;
  kvfp8)
    echo "=== the FP8 KV cache (issue 20): decoder ops and decoder-engine GPU suites, then Llama-3.2-1B with a long context"
    suites kvfp8 "fp8 KV cache|prefill: engine vs emulation" gpu_decoder_ops gpu_decoder_engine
    for kv in auto fp8; do
      "$BUILD/tprof" bench --model llama-3.2-1b --prompt 4096 --gen 64 --batch 1,8 --duration 0.5 --precision fp16 \
        --kv-cache $kv --json "$OUT/kvfp8_llama32_1b_p4096_$kv.json" > "$OUT/kvfp8_llama32_1b_p4096_$kv.log" 2>&1 || rc=1
      grep -E "tg64|pp4096|Greedy|Accuracy|error" "$OUT/kvfp8_llama32_1b_p4096_$kv.log" | head -20
    done
    ;;
  oom)
    echo "=== out of GPU memory (issue 23): the engine suite (test_engine_out_of_memory), then a decoder whose KV cache cannot fit"
    suites oom "out of GPU memory on purpose" gpu_engine
    "$BUILD/tprof" bench --model llama-3.2-1b --batch 64 --prompt 65536 --gen 1 --reference none --precision fp16 \
      --duration 0.1 > "$OUT/oom_bench.log" 2>&1
    code=$?
    tail -2 "$OUT/oom_bench.log"
    echo "tprof exit $code (want 5: out of memory)"
    [ $code -eq 5 ] || rc=1
    ;;
  sanitize)
    # compute-sanitizer over GPU suites (issue 23): SAN_TOOLS (memcheck racecheck initcheck) x SAN_SUITES, each run
    # under SAN_TIMEOUT seconds; a finding fails the step (--error-exitcode)
    # SAN_CASES (optional): run only these test cases (Check's CK_RUN_CASE) of each suite, one run per case, so a
    # suite too slow under racecheck for one call is covered over several. SAN_JOBS (default 1): runs at a time;
    # only worth it for runs bound by the tests' CPU references: racecheck is GPU-bound, and runs sharing one GPU
    # slow each other down about as much as they share it (2026-11-26, bench/results/README.md)
    # SAN_PRINT_LIMIT: reports printed per run (default 20). SAN_GPUS="0 1": runs take these GPUs in turn
    # (CUDA_VISIBLE_DEVICES), SAN_JOBS at a time; a suite that needs several GPUs (gpu_tensor_parallel) gets them
    # all. Vendor kernels stay checked: leaving cuBLASLt's out (--kernel-name-exclude kns=nvjet, compute-sanitizer
    # 2025.3.1) made racecheck fail at their first launch with an internal error
    # (bench/results/2026-11-26_h100x4_sanitize_racecheck_exclude.log).
    san_gpus=(${SAN_GPUS:-})
    san_n=0
    san_one() { # tool suite case(or empty) name gpu(or empty)
      local t0 code spx=
      t0=$(date +%s)
      # cuSPARSELt 0.8.0's F16 configurations 36+ compute wrong values under memcheck only (docs/sparsity.md,
      # spgemm_algs): the sparse suite runs memcheck on the default configuration, not the searched one
      [ "$1" = memcheck ] && [ "$2" = gpu_sparse ] && spx=TPROF_SPGEMM_SEARCH=0
      echo "# compute-sanitizer --tool $1 on $2${3:+ case $3}${5:+, CUDA_VISIBLE_DEVICES=$5}${spx:+, $spx}" \
        > "$OUT/sanitize_$1_$4.log"
      env $spx CK_RUN_SUITE="$2" ${3:+CK_RUN_CASE=$3} ${5:+CUDA_VISIBLE_DEVICES=$5} CK_FORK=no timeout "${SAN_TIMEOUT:-300}" \
        compute-sanitizer --tool "$1" --error-exitcode 99 --print-limit "${SAN_PRINT_LIMIT:-20}" \
        "$BUILD/tests/test_gpu" >> "$OUT/sanitize_$1_$4.log" 2>&1
      code=$?
      echo "=== compute-sanitizer --tool $1: $2${3:+ (case $3)}: exit $code after $(( $(date +%s) - t0 )) s;" \
        "$(grep -E 'SUMMARY|Checks' "$OUT/sanitize_$1_$4.log" | tr '\n' ' ')"
      return $code
    }
    pids=()
    for tool in ${SAN_TOOLS:-memcheck}; do
      for suite in ${SAN_SUITES:-gpu_ops}; do
        for tc in ${SAN_CASES:-all}; do
          [ "$tc" = all ] && tc= && name=$suite || name=${suite}_$tc
          while [ "$(jobs -rp | wc -l)" -ge "${SAN_JOBS:-1}" ]; do sleep 1; done
          gpu=
          if [ ${#san_gpus[@]} -gt 0 ] && [ "$suite" != gpu_tensor_parallel ]; then
            gpu=${san_gpus[$(( san_n % ${#san_gpus[@]} ))]}
            san_n=$(( san_n + 1 ))
          fi
          san_one "$tool" "$suite" "$tc" "$name" "$gpu" &
          pids+=($!)
        done
      done
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    ;;
  decoder_check)
    echo "=== the batch-8, 512-token decoder mismatch of 2026-11-25 (bench/results/..._decoder_b8_prompt512_mismatch.log):"
    echo "=== with the buffer fix (tp_plan_buffers) both must agree with the CPU executor (cosine ~1, top-1 100 %)"
    "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --layers 2 --gen 2 --batch 8 --precision fp16,fp32 \
      --duration 0.1 --no-gemm-select --reference cpu | grep -E "Accuracy|Greedy|first diff" || rc=1
    "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --gen 16 --batch 8 --precision fp16 --duration 0.3 \
      | grep -E "Accuracy|Greedy|first diff|tg16" || rc=1
    ;;
  decoder_profile)
    echo "=== tprof profile on decode steps, with and without the CUDA graph: launch gaps, per-layer time, GEMV bytes"
    "$BUILD/tprof" profile --model llama-3.2-1b --prompt 512 --gen 32 --batch 1 --precision fp16 --profile-iters 16 \
      --duration 0.5 --out /tmp/tprof-dec > "$OUT/decoder_profile.log" 2>&1 || rc=1
    "$BUILD/tprof" profile --no-graph --model llama-3.2-1b --prompt 512 --gen 32 --batch 1 --precision fp16 \
      --profile-iters 16 --duration 0.5 --out /tmp/tprof-dec-eager > "$OUT/decoder_profile_eager.log" 2>&1 || rc=1
    grep -E "decode steps traced|Traced|span|gap|not launched" "$OUT/decoder_profile.log" "$OUT/decoder_profile_eager.log"
    ;;
  pdl)
    echo "=== programmatic dependent launch (--pdl on|off, kernels/pdl.cuh) and q/k/v, gate/up groups: decode steps"
    for a in "--pdl off" "--pdl on" "--pdl off --gemv-groups on" "--pdl on --gemv-groups on"; do
      echo "--- llama-3.2-1b pp512 tg128 b1 fp16: $a"
      "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --gen 128 --batch 1 --precision fp16 --duration 0.5 \
        --ref-samples 1 $a --json "$OUT/pdl_1b_${a// /_}.json" | grep -E "tg128|Decode|Greedy|Accuracy" || rc=1
    done
    for a in "--pdl off" "--pdl on"; do
      echo "--- Llama-7B-shaped layer, decode with ~1024 cached tokens: $a"
      "$BUILD/tprof" bench --model llama-2-7b --layers 1 --vocab 256 --prompt 992 --gen 64 --batch 1 --duration 0.5 \
        --precision fp16,fp8-wo,nvfp4-wo $a --json "$OUT/pdl_7b_layer_${a// /_}.json" | grep -E "tg64|Decode graph" || rc=1
    done
    "$BUILD/tprof" profile --model llama-3.2-1b --prompt 512 --gen 32 --batch 1 --precision fp16 --profile-iters 16 \
      --duration 0.5 --ref-samples 1 --out /tmp/tprof-pdl > "$OUT/pdl_profile.log" 2>&1 || rc=1
    grep -E "decode steps traced|Traced|overlap" "$OUT/pdl_profile.log"
    ;;
  compare_decoder)
    echo "=== tprof compare on a decoder: the prefill's report and the decode-step section (fp16, fp8-wo, nvfp4-wo)"
    rm -rf report_decoder
    "$BUILD/tprof" compare --model llama-3.2-1b --prompt 512 --gen 64 --batch 1 --precision fp16,fp8-wo,nvfp4-wo \
      --profile-iters 16 --ref-samples 1 --out report_decoder --json report_decoder/bench.json \
      > "$OUT/compare_decoder.log" 2>&1 || rc=1
    sed -n '/## Decode steps/,/## Theoretical/p' report_decoder/report.md | head -60
    tar czf "$OUT/report_decoder.tgz" --exclude='*.trace.json' --exclude='*.chrome.json' report_decoder
    ;;
  fusions)
    echo "=== issue 41: each fusion applied after the build (TPROF_FUSE_SKIP) on and off, Llama-3.2-1B tg128 at batch 1,"
    echo "=== two rounds; then a traced decode step at batch 1: each call's time against its roofline floor"
    for round in 1 2; do
      for skip in "" "gemv+glu"; do
        echo "--- round $round, TPROF_FUSE_SKIP=${skip:-(none)}"
        TPROF_FUSE_SKIP=$skip "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --gen 128 --batch 1 \
          --precision fp16,nvfp4-wo,fp8-wo --gemv-groups on --duration 0.5 | grep -E "tg128 \||Decode graph" || rc=1
      done
    done
    for p in fp16 nvfp4-wo; do
      "$BUILD/tprof" profile --model llama-3.2-1b --prompt 512 --gen 32 --batch 1 --precision $p --gemv-groups on \
        --profile-iters 16 --duration 0.5 --ref-samples 1 --out /tmp/tprof-fus > "$OUT/fusions_profile_$p.log" 2>&1 || rc=1
      sed -n '/decode steps traced/,/^Trace:/p' "$OUT/fusions_profile_$p.log" | head -70
    done
    ;;
  groups)
    echo "=== q/k/v and gate/up as one GEMV each (--gemv-groups), off / on / auto, Llama-3.2-1B decode at batch 1"
    for m in off on auto; do
      "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --gen 64 --batch 1 --precision fp16 --duration 0.5 \
        --gemv-groups $m | grep -E "tg64|Greedy|Accuracy" || rc=1
    done
    ;;
  tp)
    ngpu=$(nvidia-smi -L | wc -l)
    tps=1
    for t in 2 4 8; do [ "$t" -le "$ngpu" ] && tps="$tps $t"; done
    tmax=${tps##* }
    echo "=== tensor parallelism (--tp) on $ngpu GPUs: the GPU suite (TP 2 and 4), Llama-3.1-8B at TP $tps, the profile's communication share at TP $tmax"
    nvidia-smi topo -m
    CK_RUN_SUITE=gpu_tensor_parallel "$BUILD/tests/test_gpu" 2>&1 | grep -v '^ok' | tee "$OUT/tp_tests.log"
    grep -q "Failures: 0, Errors: 0" "$OUT/tp_tests.log" || rc=1
    # a case that needs more GPUs than the machine has passes without running: say so, and fail where it should run
    if grep -q "not run" "$OUT/tp_tests.log"; then
      echo "note: $(grep -c 'not run' "$OUT/tp_tests.log") TP case(s) not run on $ngpu GPU(s)"
      [ "$ngpu" -ge 4 ] && rc=1
    fi
    : > "$OUT/tp_llama31_8b.log"
    for t in $tps; do
      start=$SECONDS
      "$BUILD/tprof" bench --model llama-3.1-8b --prompt 512 --gen 128 --batch 1 --precision fp16 --tp $t --duration 1 \
        --ref-samples 1 --json "$OUT/tp${t}_llama31_8b.json" >> "$OUT/tp_llama31_8b.log" 2>&1 || rc=1
      echo "TP $t: the whole command $((SECONDS - start)) s" | tee -a "$OUT/tp_llama31_8b.log"
    done
    grep -E "Tensor parallel|reference:|engine build|pp512|tg128|cosine|Greedy|error" "$OUT/tp_llama31_8b.log"
    "$BUILD/tprof" profile --model llama-3.1-8b --prompt 512 --gen 32 --batch 1 --precision fp16 --tp $tmax --duration 0.5 \
      --profile-iters 8 --ref-samples 1 --out /tmp/tprof-tp > "$OUT/tp${tmax}_llama31_8b_profile.log" 2>&1 || rc=1
    grep -E "^communication|^total|Traced|tg32|pp512" "$OUT/tp${tmax}_llama31_8b_profile.log" | head -20
    ;;
  tp70b)
    # TP70B: the ranks of the whole-model runs (default 4); TP70B_LIST: the whole-model runs (default "$TP70B")
    t70=${TP70B:-4}
    echo "=== Llama-3.1-70B shape: 2 layers at TP $t70 against the GPU's FP32 reference; the whole model refused on one GPU; the whole model at TP ${TP70B_LIST:-$t70}"
    m70="--model llama-3.1-70b --batch 1 --precision fp16"
    start=$SECONDS
    "$BUILD/tprof" bench $m70 --layers 2 --prompt 512 --gen 32 --tp $t70 --duration 0.5 --ref-samples 1 \
      --json "$OUT/tp${t70}_llama31_70b_2layers.json" > "$OUT/tp70b.log" 2>&1 || rc=1
    echo "2 layers: $((SECONDS - start)) s" >> "$OUT/tp70b.log"
    start=$SECONDS
    "$BUILD/tprof" bench $m70 --prompt 512 --gen 128 --reference none --duration 1 >> "$OUT/tp70b.log" 2>&1
    echo "one GPU: exit $? (5: refused for memory) after $((SECONDS - start)) s" >> "$OUT/tp70b.log"
    for t in ${TP70B_LIST:-$t70}; do
      start=$SECONDS
      "$BUILD/tprof" profile $m70 --prompt 512 --gen 128 --tp $t --reference none --duration 1 --profile-iters 8 \
        --json "$OUT/tp${t}_llama31_70b.json" --out /tmp/tprof-tp70 > "$OUT/tp${t}_llama31_70b_profile.log" 2>&1
      x=$?
      [ $x -eq 0 ] || rc=1
      echo "TP $t whole model: exit $x after $((SECONDS - start)) s" >> "$OUT/tp70b.log"
      grep -E "^communication|^total|Traced|Weights:|engine build|pp512|tg128|error" "$OUT/tp${t}_llama31_70b_profile.log" >> "$OUT/tp70b.log"
    done
    grep -E "Tensor parallel|reference:|engine build|pp512|tg|cosine|Greedy|error|exit|layers:|^communication|^total" "$OUT/tp70b.log"
    ;;
  tplaunch)
    # --tp-launch serial against threads, one machine, one call: Llama-3.1-8B at TP $TPL (default: the GPUs there)
    t=${TPL:-$(nvidia-smi -L | wc -l)}
    echo "=== --tp-launch serial vs threads, Llama-3.1-8B at TP $t: decode and prefill, then each one's profile"
    for m in serial threads; do
      "$BUILD/tprof" profile --model llama-3.1-8b --prompt 512 --gen 64 --batch 1 --precision fp16 --tp $t \
        --tp-launch $m --reference none --duration 1 --profile-iters 8 --json "$OUT/tplaunch_${m}.json" \
        --out /tmp/tprof-tpl-$m > "$OUT/tplaunch_${m}.log" 2>&1 || rc=1
      grep -E "Tensor parallel: .* joined|pp512|tg64|^communication|^total" "$OUT/tplaunch_${m}.log" | head -8
    done
    ;;
  tphang)
    # the 100-layer stack stalled with GPU 0 busy and the others idle (bench/results 2026-11-26 h200x4 tp100): the
    # same number of layers in Llama-3.1-8B's shape (fast to make) at TP ${TPH_TP:-4}, line-buffered, and a stall
    # past TPH_MAX_S seconds gets every thread's stack from cuda-gdb before it is stopped
    t=${TPH_TP:-4}
    for n in ${TPH_LAYERS:-100 200}; do
      echo "=== $n layers of Llama-3.1-8B's shape at TP $t (--tp-launch ${TPH_LAUNCH:-serial})"
      NCCL_DEBUG=WARN stdbuf -oL -eL "$BUILD/tprof" bench --model llama-3.1-8b --layers "$n" --batch 1 --precision fp16 \
        --prompt 512 --gen 64 --reference none --duration 1 --tp "$t" --tp-launch "${TPH_LAUNCH:-serial}" \
        > "$OUT/tphang_${n}_${TPH_LAUNCH:-serial}.log" 2>&1 &
      pid=$!
      start=$SECONDS
      while kill -0 $pid 2>/dev/null && [ $((SECONDS - start)) -lt "${TPH_MAX_S:-150}" ]; do sleep 2; done
      if kill -0 $pid 2>/dev/null; then
        echo "--- still running after $((SECONDS - start)) s: GPU use, then every thread's stack"
        nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader
        bt="$OUT/tphang_${n}_${TPH_LAUNCH:-serial}_bt.log"
        timeout 120 cuda-gdb -batch -p $pid -ex "info threads" -ex "thread apply all bt 25" > "$bt" 2>&1
        sed -n '/^Thread 1 (/,/^$/p' "$bt" | head -20
        kill -9 $pid
        rc=1
      fi
      wait $pid 2>/dev/null
      echo "exit $? after $((SECONDS - start)) s"
      grep -E "Tensor parallel|Weights:|pp512|tg64|error|WARN" "$OUT/tphang_${n}_${TPH_LAUNCH:-serial}.log" | head -12
    done
    ;;
  tp100)
    # a stack of 100 70B-shaped layers (175 GB in fp16, more than one H200 holds) at TP ${TP100:-4}, sampled every
    # 15 s (GPU memory and use, the process's state, memory and threads' wait channels) to see where the time goes
    t=${TP100:-4}
    echo "=== 100 layers of Llama-3.1-70B's shape at TP $t, sampled"
    "$BUILD/tprof" bench --model llama-3.1-70b --layers 100 --batch 1 --precision fp16 --prompt 512 --gen 64 \
      --reference none --duration 1 --tp $t --tp-launch "${TP100_LAUNCH:-serial}" --json "$OUT/tp${t}_llama31_70b_100layers.json" \
      > "$OUT/tp${t}_llama31_70b_100layers.log" 2>&1 &
    pid=$!
    start=$SECONDS
    : > "$OUT/tp100_samples.log"
    while kill -0 $pid 2>/dev/null; do
      if [ $((SECONDS - start)) -ge "${TP100_MAX_S:-480}" ]; then # stop it inside the call's limit, logs kept
        echo "--- stopped after $((SECONDS - start)) s (TP100_MAX_S)" >> "$OUT/tp100_samples.log"
        kill $pid
        break
      fi
      sleep 15
      {
        echo "--- $((SECONDS - start)) s: $(grep -E '^(State|VmRSS|Threads)' /proc/$pid/status 2>/dev/null | tr -s '\t ' ' ' | tr '\n' ';')"
        nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader | tr '\n' ';'
        echo
        for w in /proc/$pid/task/*/wchan; do cat "$w" 2>/dev/null; echo; done | sort | uniq -c | tr '\n' ';'
        echo
        tail -c 200 "$OUT/tp${t}_llama31_70b_100layers.log" | tail -1
      } >> "$OUT/tp100_samples.log"
    done
    wait $pid
    x=$?
    [ $x -eq 0 ] || rc=1
    echo "exit $x after $((SECONDS - start)) s"
    tail -5 "$OUT/tp100_samples.log"
    grep -E "Tensor parallel|Weights:|engine build|pp512|tg64|error" "$OUT/tp${t}_llama31_70b_100layers.log"
    ;;
  vision)
    echo "=== issue 21's vision stage on the GPU: the SigLIP-shaped engine tests (head dims 64 and 72), pi0's vision shape in fp16/bf16/fp8"
    CK_RUN_SUITE=gpu_engine CK_RUN_CASE=siglip "$BUILD/tests/test_gpu" 2>&1 | grep -v '^ok' | tee "$OUT/vision_tests.log"
    grep -q "Failures: 0, Errors: 0" "$OUT/vision_tests.log" || rc=1
    "$BUILD/tprof" profile --model vit-b16 --patch-size 14 --embed-dim 1152 --depth 27 --heads 16 --mlp-ratio 3.7362 \
      --no-class-token --global-pool none --num-classes 2048 --act-layer gelu_tanh --batch 3 --precision fp16,bf16,fp8 \
      --duration 1 --profile-iters 10 --json "$OUT/siglip_so400m_b3.json" --out /tmp/tprof-siglip \
      > "$OUT/siglip_so400m_b3_profile.log" 2>&1 || rc=1
    grep -E "^(fp16|bf16|fp8) |^(GEMM|attention|total) " "$OUT/siglip_so400m_b3_profile.log"
    ;;
  pi0)
    # PI0_RUNS: name:mode:fusion:precisions:reference items; PI0_S: each run's limit (s); PI0_TORCH_S: the PyTorch
    # peer's (0: none); PI0_TESTS=0, PI0_PROFILE=0: without the GPU tests, the profile. Everything into $OUT/pi0/, packed as $OUT/pi0_results.tar.xz
    d="$OUT/pi0"
    mkdir -p "$d"
    echo "=== issue 21 on the GPU: pipeline kernels and pi0-small's engine against the CPU; pi0 (3 cameras, 10 steps) per mode"
    if [ "${PI0_TESTS:-1}" != 0 ]; then
      CK_RUN_SUITE=gpu_pipeline_ops "$BUILD/tests/test_gpu" > "$d/gpu_tests.log" 2>&1 || rc=1
      grep -E "pi0-small|pi0's|Checks|FAIL|:F:|:E:" "$d/gpu_tests.log"
    fi
    for run in ${PI0_RUNS:-graph:graph:on:fp16,bf16,fp8:gpu graph_nofuse:graph:off:bf16,fp8:none \
               modular:modular:on:bf16,fp8:none modular_nofuse:modular:off:bf16,fp8:none eager:eager:on:bf16,fp8:none}; do
      IFS=: read -r name mode fusion precs ref <<< "$run"
      echo "--- pi0 $name: --pipeline $mode --fusion $fusion --precision $precs --reference $ref"
      timeout "${PI0_S:-90}" "$BUILD/tprof" bench --model pi0 --batch 1 --precision "$precs" --pipeline "$mode" \
        --fusion "$fusion" --reference "$ref" --duration 1 --ref-samples 1 $([ "$name" = graph ] && echo --plan) \
        --json "$d/$name.json" > "$d/$name.log" 2>&1 || rc=1
      grep -E "^(fp16|bf16|fp8|fp32) +[0-9]|Accuracy|error|engine build" "$d/$name.log" | head -10
    done
    if [ -n "${PI0_ATTR:-}" ]; then # the attribution as one command (bench/attribution.h)
      echo "--- tprof bench --attribution (bf16 modular unfused -> fp8 one graph)"
      timeout "${PI0_S:-90}" "$BUILD/tprof" bench --model pi0 --batch 1 --attribution --reference none --duration 1 \
        --json "$d/attribution.json" > "$d/attribution.log" 2>&1 || rc=1
      sed -n '/=== Attribution/,$p' "$d/attribution.log"
    fi
    tar cJf "$OUT/pi0_results.tar.xz" -C "$OUT" pi0 && rm -rf "$d"
    if [ "${PI0_TORCH_S:-150}" -gt 0 ]; then
      pi0_torch "${PI0_TORCH_S:-150}" "$OUT/pi0_torch_bf16.json" "$OUT/pi0_torch_bf16.log"
    fi
    if [ "${PI0_PROFILE:-1}" != 0 ]; then
      echo "--- tprof profile, one graph, bf16 and fp8: per-stage time"
      timeout "${PI0_S:-90}" "$BUILD/tprof" profile --model pi0 --batch 1 --precision bf16,fp8 --reference none \
        --duration 1 --profile-iters 5 --out /tmp/tprof-pi0 > "$OUT/pi0_profile.log" 2>&1 || rc=1
      grep -A5 "^Per-stage time" "$OUT/pi0_profile.log"
      xz -9 "$OUT/pi0_profile.log"
    fi
    ;;
  pi0_onecall)
    # issue 21's "Done when" in one call: pi0 (3 cameras, 10 steps, batch 1) fp8 in one CUDA graph, modular and
    # eager, each under tprof profile (per-stage ms from the traced kernels, Hz from the event-timed median), the
    # graph run's actions against the FP32 reference on the GPU; then the PyTorch bf16 peer (eager per stage, one
    # CUDA graph, torch.compile). Logs and JSON into $OUT/pi0_onecall.tar.xz (the traces stay on the machine)
    d="$OUT/pi0_onecall"
    mkdir -p "$d"
    echo "=== issue 21 in one call: pi0 fp8 graph / modular / eager under tprof profile, then PyTorch bf16"
    for mode in ${PI0_MODES:-graph modular eager}; do
      ref=none
      [ "$mode" = graph ] && ref=gpu
      echo "--- tprof profile --model pi0 --precision ${PI0_PREC:-fp8} --pipeline $mode --reference $ref"
      timeout "${PI0_S:-150}" "$BUILD/tprof" profile --model pi0 --batch 1 --precision "${PI0_PREC:-fp8}" \
        --pipeline "$mode" --reference $ref --ref-samples 1 --duration 1 --profile-iters 5 \
        --out "/tmp/tprof-pi0-$mode" --json "$d/$mode.json" > "$d/$mode.log" 2>&1 || rc=1
      grep -E "^(fp8|bf16|fp16) +[0-9]|^Accuracy|^Throughput|error" "$d/$mode.log" | head -6
      grep -A6 "^Per-stage time" "$d/$mode.log"
    done
    pi0_torch "${PI0_TORCH_S:-480}" "$d/torch_bf16.json" "$d/torch_bf16.log"
    tar cJf "$OUT/pi0_onecall.tar.xz" -C "$OUT" pi0_onecall && rm -rf "$d"
    ;;
  sparse_compare)
    # issue 22: tprof compare on ViT-B/16 batch 64 with --sparsity 2:4 (auto: each eligible linear sparse where it
    # timed faster at build), fp16 and fp8: the report's 2:4 sparsity section; the report into $OUT/sparse_compare.tar.xz
    rm -rf sparse_report
    "$BUILD/tprof" compare --model vit-b16 --batch 64 --precision ${SPARSE_PRECS:-fp16,fp8} --sparsity 2:4 \
      --sparse-gemm auto --duration 2 --ref-samples 4 --out sparse_report --json sparse_report/bench.json \
      > "$OUT/sparse_compare.log" 2>&1 || rc=1
    grep -E "^(fp16|fp8) +[0-9]|sparse GEMMs|Sparsity|error" "$OUT/sparse_compare.log" | head -12
    sed -n '/^## 2:4 sparsity/,/^## /p' sparse_report/report.md | head -30
    rm -f sparse_report/*.trace.json sparse_report/*.chrome.json
    tar cJf "$OUT/sparse_compare.tar.xz" sparse_report
    ;;
  pi0prot)
    # issue 21: the drift per stage and the FP32 protection's cost: the pipeline GPU tests (taps, --fp32-protect
    # tensors against regs), then pi0 in PROT_PRECS with the GPU reference, regs then tensors, one graph
    d="$OUT/pi0prot"
    mkdir -p "$d"
    echo "=== pi0: drift per stage against the FP32 GPU reference, --fp32-protect regs against tensors"
    if [ "${PI0_TESTS:-1}" != 0 ]; then
      CK_RUN_SUITE=gpu_pipeline_ops "$BUILD/tests/test_gpu" > "$d/gpu_tests.log" 2>&1 || rc=1
      grep -E "drift|fp32-protect|Checks|FAIL|:F:|:E:" "$d/gpu_tests.log" | grep -E "fp16 graph, unfused|Checks|FAIL|:F:|:E:|fp32-protect" | head -30
    fi
    for prot in ${PROT_MODES:-regs tensors}; do
      timeout "${PI0_S:-150}" "$BUILD/tprof" bench --model pi0 --batch 1 --precision "${PROT_PRECS:-bf16,fp8}" \
        --fp32-protect "$prot" --reference gpu --ref-samples 1 --duration 1 --json "$d/pi0_$prot.json" \
        > "$d/pi0_$prot.log" 2>&1 || rc=1
      grep -E "^(fp16|bf16|fp8) +[0-9]|^  (vision|prefix|expert)|Drift|FP32 protection|error" "$d/pi0_$prot.log" | head -40
    done
    tar cJf "$OUT/pi0prot.tar.xz" -C "$OUT" pi0prot && rm -rf "$d"
    ;;
  sparse)
    # issue 22: the sparse GEMMs against the CPU (cuSPARSELt required; SPARSE_TESTS=0: not them), then ViT-B/16 at
    # batch 64 dense and 2:4 per precision in SPARSE_PRECS (default fp16 fp8), then the GEMM lab and PyTorch's peer
    # (SPARSE_LAB=0: not them)
    echo "=== 2:4 sparsity: GPU tests (cuSPARSELt), then ViT-B/16 batch 64 dense and --sparsity 2:4"
    if [ "${SPARSE_TESTS:-1}" != 0 ]; then
      TPROF_REQUIRE_CUSPARSELT=1 CK_RUN_SUITE=gpu_sparse "$BUILD/tests/test_gpu" > "$OUT/sparse_gpu_tests.log" 2>&1 || rc=1
      grep -E "info|skip|FAIL|:F:|:E:|Checks|linears|cosine|compressed" "$OUT/sparse_gpu_tests.log" | grep -v "info  .*cuSPARSELt 0" | head -30
    fi
    # SPARSE_RUNS: dense, and --sparsity 2:4 with --sparse-gemm auto, force or off (off: the pruned weights dense,
    # the control that separates the sparse GEMMs' effect from the pruned values')
    for p in ${SPARSE_PRECS:-fp16 fp8}; do
      for n in ${SPARSE_RUNS:-dense auto}; do
        sp=$([ "$n" = dense ] || echo "--sparsity 2:4 --sparse-gemm $n")
        "$BUILD/tprof" bench --model vit-b16 --batch 64 --precision $p --duration 2 --ref-samples 4 $sp \
          --json "$OUT/sparse_vitb16_${p}_$n.json" > "$OUT/sparse_vitb16_${p}_$n.log" 2>&1 || rc=1
        grep -E "Sparsity|Pruning|sparse GEMMs|^$p +[0-9]|Accuracy|error" "$OUT/sparse_vitb16_${p}_$n.log"
        xz -9 "$OUT/sparse_vitb16_${p}_$n.log"
      done
    done
    if [ "${SPARSE_LAB:-1}" != 0 ]; then
      echo "--- the GEMM lab: cuBLASLt dense against cuSPARSELt 2:4 (bench/sparse_lab.c), then PyTorch's semi-structured"
      for ty in f16 bf16; do "$BUILD/sparse_lab" 50 64 $ty --json "$OUT/sparse_lab_$ty.json" || rc=1; done
      python3 bench/sparse_peers.py --batch 64 --dtype f16 --json "$OUT/sparse_peers_f16.json" || rc=1
    fi
    ;;
  sparse_gap)
    # issue 22's open FP8 gap (docs/sparsity.md): ViT-B/16 batch 64 (GAP_PREC, default fp8), dense against one
    # cuSPARSELt plan on block 0's qkv stopped at each step (lab switches TPROF_SPARSE_PROBE, TPROF_SPGEMM_COMPRESS,
    # TPROF_SPGEMM_SEARCH), the dense GEMM kept in every run; GAP_ROUNDS rounds alternating; GAP_CMD=profile traces
    # the kernels (CUPTI) instead; GAP_ENV is added to every run's environment; plans in the JSON to diff
    tag=${GAP_TAG:-sparse_gap}
    d="$OUT/$tag"
    gp=${GAP_PREC:-fp8}
    mkdir -p "$d"
    echo "=== the $gp gap ($tag${GAP_ENV:+, $GAP_ENV}): one sparse plan's life, step by step"
    q="--sparsity 2:4 --sparse-layers blocks.0.attn.qkv"
    for r in $(seq 1 "${GAP_ROUNDS:-2}"); do
      for v in ${GAP_VARIANTS:-dense off fc1 plan0 plan1 plan2 value full}; do
        case $v in
        dense) env=""; sp="" ;;
        off) env=""; sp="$q --sparse-gemm off" ;;
        fc1) env=""; sp="--sparsity 2:4 --sparse-layers blocks.0.mlp.fc1" ;;
        plan0) env="TPROF_SPARSE_PROBE=plan TPROF_SPGEMM_COMPRESS=0 TPROF_SPGEMM_SEARCH=0"; sp="$q" ;;
        plan1) env="TPROF_SPARSE_PROBE=plan TPROF_SPGEMM_SEARCH=0"; sp="$q" ;;
        plan2) env="TPROF_SPARSE_PROBE=plan"; sp="$q" ;;
        value) env="TPROF_SPARSE_PROBE=value"; sp="$q" ;;
        full) env=""; sp="$q" ;;
        esac
        out=""
        [ "${GAP_CMD:-bench}" = profile ] && out="--out $d/prof_${v}_$r --profile-iters 10"
        smi=""
        if [ -n "${GAP_SMI:-}" ]; then # the clocks and power while it runs, every 50 ms
          nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
            --format=csv,noheader,nounits -lms 50 > "$d/${v}_$r.smi" 2>&1 & smi=$!
        fi
        env ${GAP_ENV:-} $env "$BUILD/tprof" ${GAP_CMD:-bench} --model vit-b16 --batch 64 --precision $gp --duration 2 \
          --reference none $sp $out ${GAP_ARGS:-} --plan --json "$d/${v}_$r.json" > "$d/${v}_$r.log" 2>&1 || rc=1
        grep "sparse probe" "$d/${v}_$r.log"
        if [ -n "$smi" ]; then
          kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
          python3 - "$d/${v}_$r.smi" << 'PY'
import sys, statistics
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") >= 4]
hot = [r for r in rows if r[2].replace(".", "").isdigit() and float(r[2]) > 250]
if hot:
    sm = [float(r[0]) for r in hot]; pw = [float(r[2]) for r in hot]
    reasons = sorted(set(r[4].strip() for r in hot))
    print("  smi: %d samples over 250 W: SM clock median %.0f MHz (min %.0f), power median %.0f W, reasons %s"
          % (len(hot), statistics.median(sm), min(sm), statistics.median(pw), reasons))
else:
    print("  smi: no samples over 250 W of", len(rows))
PY
        fi
        echo "$v round $r: $(grep -E "^$gp +[0-9]" "$d/${v}_$r.log" | head -1) $(grep -c error "$d/${v}_$r.log") errors"
      done
    done
    tar cJf "$OUT/$tag.tar.xz" -C "$OUT" "$tag" && rm -rf "$d"
    ;;
  spgemm_algs)
    # issue 23: gpu_sparse's F16 checks computed wrong values under compute-sanitizer memcheck only. Per run the
    # suite once (its log in spgemm_algs.tar.xz), the algorithm each check ran and its failures shown: plain and
    # under memcheck, searched and not (TPROF_SPGEMM_SEARCH=0); then configuration ids forced (TPROF_SPGEMM_ALG) on the GEMM checks alone (case `sparse`): SPA_MC_IDS under
    # memcheck, then every id cuSPARSELt offers without the tool, then every id under memcheck, while SPA_BUDGET
    # seconds (default 480) last. SPA_STEPS picks the first part's runs (default: all three). The workspace-poison
    # runs of 2026-11-27 (a lab switch TPROF_SPGEMM_WS_FILL, f42a76f..b871bee) changed nothing and were taken out.
    d="$OUT/spgemm_algs"
    mkdir -p "$d"
    t_spa=$(date +%s)
    sp() { # NAME TOOL(plain|memcheck) CASE(or all) ENV...
      local name=$1 tool=$2 tc=$3 code
      shift 3
      local wrap=()
      [ "$tool" = memcheck ] && wrap=(compute-sanitizer --tool memcheck --print-limit 5)
      [ "$tc" = all ] && tc=
      env CK_RUN_SUITE=gpu_sparse ${tc:+CK_RUN_CASE=$tc} CK_FORK=no "$@" timeout "${SPA_TIMEOUT:-240}" "${wrap[@]}" \
        "$BUILD/tests/test_gpu" > "$d/$name.log" 2>&1
      code=$?
      echo "=== $name ($tool${tc:+, case $tc}${*:+, $*}): exit $code; $(grep -E "Checks" "$d/$name.log")"
      # each check's algorithm, then its verdict, on one line
      awk '/compressed weight/ { sub(/.*; /, ""); alg = $0 }
           /^  (ok|FAIL) +sparse GEMM/ { split($0, a, " [|] "); v = $1; sub(/^ +/, "", a[1]);
             r = $0; sub(/.*rel_l2=/, "", r); sub(/ .*/, "", r); printf "    %s [%s] rel_l2 %s\n", a[1], alg, r }
           /cosine|ERROR SUMMARY|TPROF_SPGEMM_ALG/ { print "    " $0 }' "$d/$name.log" | cut -c1-220 | sort -u
      return 0
    }
    left() { [ $(( $(date +%s) - t_spa )) -lt "${SPA_BUDGET:-480}" ]; }
    for st in ${SPA_STEPS:-plain memcheck memcheck_nosearch}; do
      case $st in
      plain) sp plain plain all ;;
      memcheck) sp memcheck memcheck all ;;
      memcheck_nosearch) sp memcheck_nosearch memcheck all TPROF_SPGEMM_SEARCH=0 ;;
      esac
    done
    for id in ${SPA_MC_IDS:-}; do left && sp "memcheck_alg$id" memcheck sparse TPROF_SPGEMM_ALG=$id; done
    for id in $(seq 0 "${SPA_MAX_ID:-52}"); do left && sp "plain_alg$id" plain sparse TPROF_SPGEMM_ALG=$id; done
    for id in $(seq 0 "${SPA_MAX_ID:-52}"); do left && sp "memcheck_alg$id" memcheck sparse TPROF_SPGEMM_ALG=$id; done
    echo "=== spgemm_algs: $(( $(date +%s) - t_spa )) s"
    tar cJf "$OUT/spgemm_algs.tar.xz" -C "$OUT" spgemm_algs && rm -rf "$d"
    ;;
  onnx)
    # issue 24: ViT-B/16 from ONNX against the preset on the same weights: tools/export_timm_onnx.py writes the
    # TorchScript export (opset 17) and timm's state_dict; then ONNX_ROUNDS rounds of the preset (--weights) and
    # --onnx alternating, fp16 and fp8 at batch 64 with --plan; the plans' kernels compared
    d="$OUT/onnx"
    mkdir -p "$d"
    echo "=== ONNX import: ViT-B/16 exported by torch, against the preset on the same weights"
    python3 tools/export_timm_onnx.py vit_base_patch16_224 "$d/vit_b16.onnx" --safetensors "$d/vit_b16.safetensors" \
      > "$d/export.log" 2>&1 || { rc=1; tail -5 "$d/export.log"; }
    for r in $(seq 1 "${ONNX_ROUNDS:-2}"); do
      [ "${ONNX_VITB:-1}" = 0 ] && break
      for v in preset onnx; do
        src="--model vit-b16 --weights $d/vit_b16.safetensors"
        [ "$v" = onnx ] && src="--onnx $d/vit_b16.onnx"
        "$BUILD/tprof" bench $src --batch 64 --precision ${ONNX_PRECS:-fp16,fp8} --plan --duration 3 --ref-samples 4 \
          --json "$d/${v}_$r.json" > "$d/${v}_$r.log" 2>&1 || rc=1
        echo "$v round $r:"; grep -E "^(fp16|fp8) +[0-9]|ONNX import|error" "$d/${v}_$r.log" | cut -c1-400
      done
    done
    python3 tools/plan_kernels.py "$d"/preset_1.json "$d"/preset_2.json "$d"/onnx_1.json "$d"/onnx_2.json \
      | tee "$d/plans_compared.txt"
    echo "--- the FP8 Q/DQ fixture as the file quantizes it (explicit quantization; the 10-class head kept fp16)"
    "$BUILD/tprof" bench --onnx tests/fixtures/onnx_vit/vit_fp8_qdq_op19.onnx --batch 2 --precision fp16 \
      --policy head=fp16 --plan --duration 1 --json "$d/qdq.json" > "$d/qdq.log" 2>&1 || rc=1
    grep -E "^fp16 +[0-9]|Accuracy|error|blocks.0.attn.qkv " "$d/qdq.log" | cut -c1-300
    rm -f "$d/vit_b16.onnx" "$d/vit_b16.safetensors"
    tar cJf "$OUT/onnx.tar.xz" -C "$OUT" onnx && rm -rf "$d"
    ;;
  onnx_llama)
    # issue 24: the tiny Llama ONNX export on the GPU against the same checkpoint loaded as HF safetensors (the
    # preset path), prefill and decode, greedy agreement and logits against the FP32 GPU reference
    d="$OUT/onnx_llama"
    mkdir -p "$d"
    echo "=== ONNX import: a small Llama (head dim 64) exported on this machine, against its HF checkpoint"
    python3 tools/make_onnx_llama_fixture.py "$d/x" --hidden 256 --heads 4 --kv-heads 2 --layers 2 --inter 512 \
      --vocab 512 --hf-dir "$d/x/hf" > "$d/export.log" 2>&1 || { rc=1; tail -5 "$d/export.log"; }
    for v in hf onnx; do
      src="--model llama-tiny --weights $d/x/hf"
      [ "$v" = onnx ] && src="--onnx $d/x/llama_op18.onnx"
      "$BUILD/tprof" bench $src --batch 1 --prompt 64 --gen 32 --precision fp16,bf16,fp8-wo,nvfp4-wo --duration 1 \
        --json "$d/$v.json" > "$d/$v.log" 2>&1 || rc=1
      echo "$v:"; grep -E "^(fp16|bf16|fp8-wo|nvfp4-wo) +[0-9]|ONNX import|greedy|error" "$d/$v.log" | cut -c1-300
    done
    rm -rf "$d/x/hf" "$d/x/llama_op18.onnx"
    tar cJf "$OUT/onnx_llama.tar.xz" -C "$OUT" onnx_llama && rm -rf "$d"
    ;;
  sparse_epi)
    # issue 22: where the engine's sparse GEMMs lose their lab speedup: the epilogues (residual apart or in place,
    # GELU and which GELU cuSPARSELt computes) and E4M3; then ViT-B/16 batch 64 fp8 dense against 2:4. Everything
    # into $OUT/sparse_epi/, packed as $OUT/sparse_epi.tar.xz (a call returns 8 files)
    d="$OUT/sparse_epi"
    mkdir -p "$d"
    echo "=== sparse_lab per epilogue (f16, e4m3), then ViT-B/16 batch 64 ${SPARSE_PREC:-fp8} dense and --sparsity 2:4"
    for te in ${SPARSE_EPI:-f16:bias f16:residual f16:inplace f16:gelu e4m3:bias e4m3:residual e4m3:inplace}; do
      IFS=: read -r ty ep <<< "$te"
      "$BUILD/sparse_lab" 50 64 "$ty" --epilogue "$ep" --json "$d/sparse_lab_${ty}_$ep.json" | tee "$d/sparse_lab_${ty}_$ep.log" \
        | grep -v "^| llama\|^| ---" || rc=1
    done
    for sp in "" "--sparsity 2:4"; do
      n=$([ -n "$sp" ] && echo sparse || echo dense)
      "$BUILD/tprof" bench --model vit-b16 --batch 64 --precision ${SPARSE_PREC:-fp8} --duration 2 --ref-samples 4 $sp \
        --plan --json "$d/vitb16_${SPARSE_PREC:-fp8}_$n.json" > "$d/vitb16_${SPARSE_PREC:-fp8}_$n.log" 2>&1 || rc=1
      grep -E "Sparsity|sparse GEMMs|^fp(8|16) +[0-9]|Accuracy|error" "$d/vitb16_${SPARSE_PREC:-fp8}_$n.log"
      grep -E "blocks.0.(attn.qkv|attn.proj|mlp.fc1|mlp.fc2) " "$d/vitb16_${SPARSE_PREC:-fp8}_$n.log" | cut -c1-90,150-420
    done
    tar cJf "$OUT/sparse_epi.tar.xz" -C "$OUT" sparse_epi && rm -rf "$d"
    ;;
  mixed)
    # issue 21: several quantized formats in one engine: the GPU test against the CPU emulation, then pi0 with a
    # per-stage policy (PI0_MIXED: precision:policy items) against the FP32 GPU reference
    echo "=== several quantized formats in one engine: gpu_engine/mixed, then pi0 per-stage formats"
    CK_RUN_SUITE=gpu_engine CK_RUN_CASE=mixed "$BUILD/tests/test_gpu" > "$OUT/mixed_gpu_tests.log" 2>&1 || rc=1
    grep -E "engine fp16 \+|FAIL|:F:|:E:|Checks" "$OUT/mixed_gpu_tests.log"
    for run in ${PI0_MIXED:-"fp16:prefix.*=fp8,expert.*=nvfp4-wo" "fp8:expert.*=fp8-wo" "fp8:expert.*=nvfp4-wo"}; do
      prec=${run%%:*} pol=${run#*:}
      n=$(echo "${prec}_$pol" | tr -c 'a-z0-9_\n' '_')
      echo "--- pi0 --precision $prec --policy '$pol'"
      timeout "${PI0_S:-150}" "$BUILD/tprof" bench --model pi0 --batch 1 --precision "$prec" --policy "$pol" \
        --duration 1 --ref-samples 1 --plan --json "$OUT/pi0_mixed_$n.json" > "$OUT/pi0_mixed_$n.log" 2>&1 || rc=1
      grep -E "^(fp16|bf16|fp8) +[0-9]|Accuracy|error|engine build" "$OUT/pi0_mixed_$n.log" | head -6
      grep -E "^  (prefix.layers.0.mlp.gate_proj|expert.step0.layers.0.mlp.gate_proj|expert.step0.layers.0.self_attn.q_proj) " \
        "$OUT/pi0_mixed_$n.log" | cut -c1-200
      xz -9 "$OUT/pi0_mixed_$n.log"
    done
    ;;
  pi0ref)
    # PI0_COMPILE: torch.compile's mode for the peer (openpi compiles with max-autotune, which takes minutes)
    echo "=== bench/pi0_reference.py: the pi0-small golden again (this torch) against the committed one, then pi0 in PyTorch on the GPU"
    python3 bench/pi0_reference.py golden "$OUT" --config pi0-small || rc=1
    python3 - "$OUT/pi0_small.io.safetensors" <<'PY' || rc=1
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file("tests/fixtures/pi0_small.io.safetensors")
for k in ("vision_out", "velocity_step0", "actions"):
    d = ((a[k] - b[k]).norm() / b[k].norm()).item()
    print(f"pi0-small {k}: this torch against the committed fixture, relative L2 {d:.2e}")
    if d > 1e-5: sys.exit(1)
PY
    PYTHONUNBUFFERED=1 python3 bench/pi0_reference.py bench --config pi0 --batch 1 --dtype bf16 \
      --compile-mode "${PI0_COMPILE:-default}" --json "$OUT/pi0_torch_b1.json" || rc=1
    ;;
  gpus)
    echo "=== --gpus: a decoder batch sweep dealt over GPUs 0 and 1, one process each"
    "$BUILD/tprof" bench --model llama-3.2-1b --prompt 128 --gen 32 --batch 1,4,8,16 --gpus 0,1 --precision fp16 \
      --duration 0.5 --ref-samples 1 --json "$OUT/gpus_sweep.json" > "$OUT/gpus_sweep.log" 2>&1 || rc=1
    grep -E "Sweep over|GPU [0-9]: batch|#####|tg32|Greedy|error" "$OUT/gpus_sweep.log"
    sed -n '/=== Batch sweep/,$p' "$OUT/gpus_sweep.log"
    ;;
  hfpeers)
    echo "=== tprof, then HF transformers on the same GPU in the same call (bench/hf_peers.py)"
    "$BUILD/tprof" bench --model llama-3.2-1b --prompt 512 --gen 128 --batch 1 --precision fp16,bf16 --duration 1 \
      --ref-samples 1 --json "$OUT/peers_tprof_llama32_1b.json" | grep -E "pp512|tg128|Decode|Greedy" || rc=1
    "$BUILD/tprof" bench --model llama-2-7b --layers 1 --vocab 256 --prompt 992 --gen 64 --batch 1 --duration 1 \
      --precision fp16,fp8-wo,nvfp4-wo --json "$OUT/peers_tprof_llama7b_layer.json" | grep -E "pp992|tg64|Greedy" || rc=1
    python3 bench/hf_peers.py --model llama-3.2-1b --prompt 512 --gen 128 --json "$OUT/hf_peers_llama32_1b.json" || rc=1
    python3 bench/hf_peers.py --model llama-2-7b --layers 1 --vocab 256 --prompt 992 --gen 64 \
      --json "$OUT/hf_peers_llama7b_layer.json" || rc=1
    ;;
  image)
    img=/opt/torch/.venv/lib/python3.12/site-packages/skimage/data
    echo "=== real images from $img"
    "$BUILD/tprof" bench --model vit-b16 --batch 8 --precision fp16,fp8 --image "$img" --duration 1 || rc=1
    ;;
  compare)
    echo "=== tprof compare: fp16, bf16, fp8 with CUPTI profiles, the report, and the 5% bar on traced time"
    rm -rf report
    "$BUILD/tprof" compare --model vit-b16 --batch 64 --precision fp16,bf16,fp8 --out report \
      --json report/bench.json || rc=1
    python3 - <<'PY' || rc=1
import json
d = json.load(open("report/bench.json"))
for r in d["results"]:
    p = r["profile"]
    traced = p["kernel_ns_per_iter"] / 1e6
    event = r["latency"]["median_ms"]
    gap = abs(traced - event) / event
    print(f"{r['precision']}: traced {traced:.4f} ms/iter, event-timed {event:.4f} ms, gap {100*gap:.2f} %, "
          f"unattributed {p['unattributed']}")
    assert gap < 0.05, "traced kernel time is not within 5% of the event-timed GPU compute time"
    assert p["unattributed"] == 0, "kernels without a layer"
PY
    tar czf "$OUT/report.tgz" report
    ;;
  attention)
    echo "=== attention alone: tprof's kernels and cuDNN's SDPA (bench/attention_lab.cu, attention_wgmma_lab.c, sdpa_lab.c: ViT and decoder shapes)"
    "$BUILD/attention_lab" || rc=1
    "$BUILD/attention_wgmma_lab" || rc=1
    "$BUILD/sdpa_lab" all --json "$OUT/sdpa_lab.json" || rc=1
    ;;
  peers)
    echo "=== PyTorch (timm) side by side with tprof: bench/pytorch_peers.py"
    python3 bench/pytorch_peers.py --tprof "$BUILD/tprof" --json "$OUT/peers.json" ${PEERS_ARGS:-} || rc=1
    ;;
  formats)
    echo "=== tprof compare: fp16, fp8, fp8-block (native), mxfp8, nvfp4, mxfp4 (emulated on Hopper)"
    rm -rf report_formats
    "$BUILD/tprof" compare --model vit-b16 --batch 64 --precision fp16,fp8,fp8-block,mxfp8,nvfp4,mxfp4 --out report_formats \
      --json report_formats/bench.json --profile-iters 10 --plan > "$OUT/formats.log" 2>&1 || rc=1
    grep -E "performance summary|Accuracy vs|EMULATED|Weights in|traced|Comparison report|error" "$OUT/formats.log"
    tar czf "$OUT/report_formats.tgz" report_formats
    ;;
  engine)
    echo "=== engine files: build (with calibration) then run; the file's engine must give the same logits"
    # --no-gemm-select and --attention flash: both engines run cuBLASLt's first algorithms and the same attention
    # kernel (timed selection may pick different, equally fast ones in two builds, whose bits differ: with cuDNN
    # loadable, the attention chosen by time flipped between two runs of the emulated formats, commit 489e962)
    for p in fp8 nvfp4 mxfp8 fp8-block mxfp4; do
      "$BUILD/tprof" build --model vit-b16 --batch 64 --precision $p -o "$OUT/vit-b16-$p.tpe" || rc=1
      "$BUILD/tprof" bench --engine "$OUT/vit-b16-$p.tpe" --batch 64 --duration 1 --no-gemm-select --attention flash --save-output "$OUT/e_$p.st" \
        | grep -E "Compute Time|EMULATED" || rc=1
      "$BUILD/tprof" bench --model vit-b16 --batch 64 --precision $p --duration 1 --no-gemm-select --attention flash --save-output "$OUT/d_$p.st" \
        | grep -E "Compute Time" || rc=1
      python3 - "$OUT/e_$p.st" "$OUT/d_$p.st" "$p" <<'PY' || rc=1
import sys
from safetensors.numpy import load_file
e, d = (load_file(f)[sys.argv[3]] for f in sys.argv[1:3])
same = e.shape == d.shape and e.tobytes() == d.tobytes()
print(f"{sys.argv[3]}: logits of the engine loaded from the file and of the engine built directly: "
      f"{'bit-identical' if same else 'DIFFERENT'} ({e.shape[0]} x {e.shape[1]})")
assert same
PY
      ls -l "$OUT/vit-b16-$p.tpe"
      rm -f "$OUT/vit-b16-$p.tpe" "$OUT/e_$p.st" "$OUT/d_$p.st"
    done
    ;;
  eager)
    echo "=== profile without the CUDA graph: eager launches attributed through external correlation ids"
    "$BUILD/tprof" profile --no-graph --model vit-small --batch 8 --precision fp16,fp8 --profile-iters 3 \
      --duration 0.5 --out /tmp/tprof-eager | grep -E "Profile:|Traced|not launched" || rc=1
    ;;
  ncu)
    echo "=== ncu on the BENCHMARK range only (README's command)"
    ncu --clock-control none --nvtx --nvtx-include "BENCHMARK/" --metrics gpu__time_duration.sum \
      --print-summary per-kernel "$BUILD/tprof" bench --precision fp16 --iterations 1 --duration 0 --warmup 0 \
      --ref-images 1 > "$OUT/ncu_nvtx.log" 2>&1 || rc=1
    echo "kernels profiled inside BENCHMARK: $(grep -c '==PROF== Profiling' "$OUT/ncu_nvtx.log")"
    ;;
  errors)
    echo "=== errors: each must be one line and a non-zero exit, not a crash"
    "$BUILD/tprof" bench --model vit-b8 --batch 10000 --precision fp16 --ref-images 1 --iterations 1 --duration 0
    echo "exit code $? (expected 5: out of memory)"
    ;;
  ab)
    # Issue 19's check that the redesign left ViT as it was: the same command with the binary before the change
    # (BASE, built from the commit named in $BASE_COMMIT and carried) and after, interleaved, 3 rounds each.
    base=${BASE:-.base/tprof}
    echo "=== before/after, interleaved: $("$base" --version) vs $("$BUILD/tprof" --version)"
    for i in 1 2 3; do
      for who in before after; do
        bin=$BUILD/tprof; extra=${AB_AFTER_ARGS:-}; [ $who = before ] && bin=$base && extra=""
        "$bin" bench --model vit-b16 --batch 64 --precision fp16,bf16,fp8 $extra --json "$OUT/ab_${who}_$i.json" \
          > "/tmp/ab_${who}_$i.log" 2>&1 || rc=1
        grep -E "^(fp16|bf16|fp8) +[0-9]" "/tmp/ab_${who}_$i.log" | sed "s/^/$who $i: /"
      done
    done
    python3 - "$OUT" <<'PY' || rc=1
import json, statistics, sys, glob, os
out = sys.argv[1]
med = {}
for who in ("before", "after"):
    for f in sorted(glob.glob(os.path.join(out, f"ab_{who}_*.json"))):
        for r in json.load(open(f))["results"]:
            med.setdefault((who, r["precision"]), []).append(r["latency"]["median_ms"])
rows = []
for p in ("fp16", "bf16", "fp8"):
    b, a = statistics.median(med[("before", p)]), statistics.median(med[("after", p)])
    rows.append({"precision": p, "before_ms": med[("before", p)], "after_ms": med[("after", p)],
                 "before_median_ms": b, "after_median_ms": a, "after_over_before": a / b})
    print(f"{p}: before {b:.4f} ms, after {a:.4f} ms (median of 3 runs' medians), after/before {a / b:.4f}")
json.dump(rows, open(os.path.join(out, "ab_summary.json"), "w"), indent=1)
assert all(abs(r["after_over_before"] - 1) <= 0.02 for r in rows), "before and after differ by more than 2%"
PY
    tar czf "$OUT/ab_runs.tgz" -C "$OUT" $(cd "$OUT" && ls ab_before_*.json ab_after_*.json) && rm -f "$OUT"/ab_before_*.json "$OUT"/ab_after_*.json
    ;;
  h14)
    echo "=== vit-h14 at batch 64: seconds from the start to each line (the reference on the GPU)"
    "$BUILD/tprof" bench --model vit-h14 --batch 64 --precision fp16 --duration 3 2>&1 | python3 -u -c '
import sys, time
t0 = time.time()
for line in sys.stdin:
    print(f"[{time.time() - t0:7.2f} s] {line}", end="")
' || rc=1
    ;;
  *) echo "unknown step $s"; rc=1 ;;
  esac
done
echo "=== done rc=$rc"
exit $rc
