# Options: each takes effect or is refused by name (issue 40, "Nothing lost, nothing silent"). Sourced by
# tests/test_cli.sh (its helpers, $tmp, small=(...) and tok=(...)).

# --policy-file is for the precision it names: without --precision that one runs; a list must hold it
echo '{"default": "nvfp4", "overrides": [{"layers": "head", "precision": "fp16"}]}' >"$tmp/pf_nvfp4.json"
echo '{"default": "fp16", "overrides": [{"layers": "head", "precision": "fp32"}]}' >"$tmp/pf_fp16.json"
echo '{"default": "fp32", "overrides": [{"layers": "blocks.0.*", "precision": "fp32"}]}' >"$tmp/pf_fp32.json"
expect_error "policy-file default vs precision" 2 \
  "--policy-file $tmp/pf_nvfp4.json: its default is nvfp4, and --precision fp32 does not include it" \
  bench "${small[@]}" "${tok[@]}" --precision fp32 --policy-file "$tmp/pf_nvfp4.json"
expect_error "policy-file list without its precision" 2 "its default is nvfp4, and --precision fp32,fp16 does not" \
  bench "${small[@]}" "${tok[@]}" --precision fp32,fp16 --policy-file "$tmp/pf_nvfp4.json"
expect_error "policy-file attribution default" 2 "--precision bf16,fp8 (--attribution's default) does not include it" \
  bench "${tok[@]}" --attribution --policy-file "$tmp/pf_nvfp4.json"
expect_error "policy-file build mismatch" 2 "its default is nvfp4, and --precision fp16 does not include it" \
  build "${tok[@]}" --batch 1 --precision fp16 --arch sm_90 --policy-file "$tmp/pf_nvfp4.json" -o "$tmp/pf.tpe"
expect_error "policy-file missing" 3 "$tmp/none.json: cannot open --policy-file: No such file" \
  bench "${small[@]}" "${tok[@]}" --policy-file "$tmp/none.json"
expect_ok "policy-file sets the precision" "Engine $tmp/pf.tpe: fp16 for sm_90" \
  build "${tok[@]}" --batch 1 --arch sm_90 --policy-file "$tmp/pf_fp16.json" -o "$tmp/pf.tpe"
expect_ok "policy-file applied" "override 'blocks.0.\*=fp32'" \
  bench "${small[@]}" "${tok[@]}" --plan --policy-file "$tmp/pf_fp32.json"
# --plan lists each op's call in the program (its kernel) and the program's counts (the CPU fuses nothing)
expect_ok "plan shows the program" "program: [0-9]* calls for [0-9]* ops (an engine" bench "${small[@]}" "${tok[@]}" --plan
expect_ok "plan shows kernels" "attn.qkv  *linear  *fp32  gemm " bench "${small[@]}" "${tok[@]}" --plan
# an engine file records its program: a run that lowers another (here the CPU, which fuses nothing) says so
expect_ok "engine file program built" "Engine $tmp/prog.tpe: fp32 for sm_90" \
  build "${tok[@]}" --batch 1 --precision fp32 --arch sm_90 -o "$tmp/prog.tpe"
expect_ok "engine file program differs" "Engine file: the program it records (lowered for sm_90) differs from this run's" \
  bench --engine "$tmp/prog.tpe" --device cpu --iterations 1 --warmup 0
# in a list: said which precision it is for (fp16 then fails on the CPU, exit 4, after the note)
expect_rc "policy-file in a list" 4 "Policy file $tmp/pf_fp32.json: for fp32 (its default); the other precisions" \
  bench "${small[@]}" "${tok[@]}" --precision fp32,fp16 --policy-file "$tmp/pf_fp32.json"

# --shapes against --prompt or --batch: refused with both values
ol=tests/fixtures/onnx_llama/llama_op18.onnx
expect_error "shapes vs prompt" 2 "--shapes 'input_ids:1x12': prompt 12 against --prompt 5" \
  bench "${small[@]}" --onnx $ol --prompt 5 --shapes input_ids:1x12 --gen 2
expect_error "shapes vs batch" 2 "--shapes 'input_ids:1x12': batch 1 against --batch 2" \
  bench "${small[@]}" --onnx $ol --batch 2 --shapes input_ids:1x12 --gen 2
expect_ok "shapes and prompt agree" "prompt 12 + gen 2), batch 1" \
  bench "${small[@]}" --onnx $ol --prompt 12 --shapes input_ids:1x12 --gen 2

# --gen on the CPU decodes: the executor's steps over its KV cache, timed and labelled the CPU's
expect_ok "cpu decode" "Decode (tg3, on the CPU executor, host clock): .* ms per step" \
  bench "${small[@]}" --model llama-tiny --prompt 8 --gen 3 --batch 2
expect_ok "cpu decode greedy" "Greedy tokens vs the FP32 reference: 100.0 % agree (2 sequences x 4 tokens" \
  bench "${small[@]}" --model llama-tiny --prompt 8 --gen 3 --batch 2
expect_ok "cpu decode table" "| llama-tiny | fp32 | 1 | tg3 |" bench "${small[@]}" --model llama-tiny --prompt 8 --gen 3

# options the run cannot use: refused by name (exit 2), not dropped
gpu_only="a GPU engine's option, and this run is on the CPU (--device cpu)"
expect_error "cpu: --gemm" 2 "--gemm: $gpu_only" bench "${small[@]}" "${tok[@]}" --gemm cublaslt
expect_error "cpu: --attention" 2 "--attention: $gpu_only" bench "${small[@]}" "${tok[@]}" --attention flash
expect_error "cpu: --pdl" 2 "--pdl: $gpu_only" bench "${small[@]}" --model llama-tiny --prompt 8 --gen 2 --pdl off
expect_error "cpu: --gemv-groups" 2 "--gemv-groups: $gpu_only" bench "${small[@]}" --model llama-tiny --gemv-groups off
expect_error "cpu: --decode-kernel" 2 "--decode-kernel: $gpu_only" bench "${small[@]}" --model llama-tiny \
  --decode-kernel persistent
expect_error "cpu: --no-graph" 2 "--no-graph: $gpu_only" bench "${small[@]}" "${tok[@]}" --no-graph
expect_error "cpu: --fusion" 2 "--fusion: $gpu_only" bench "${small[@]}" "${tok[@]}" --fusion off
expect_error "cpu: --gelu" 2 "--gelu: $gpu_only" bench "${small[@]}" "${tok[@]}" --gelu tanh
expect_error "cpu: --tp-launch" 2 "--tp-launch: $gpu_only" bench "${small[@]}" --model llama-tiny --tp-launch threads
expect_error "cpu: --sparse-gemm" 2 "--sparse-gemm: $gpu_only" bench "${small[@]}" "${tok[@]}" --sparsity 2:4 \
  --sparse-gemm force
expect_error "cpu: --calib-data read, then refused" 2 "--calib-data: the GPU engines' calibration .* on the CPU" \
  bench "${small[@]}" "${tok[@]}" --calib-data tests/fixtures/preprocess_expect_00.png
expect_error "gemv-groups for a ViT" 2 "--gemv-groups: a decoder's decode steps, and .* (family vit) has none" \
  bench "${tok[@]}" --gemv-groups on
expect_error "decode-kernel for a ViT" 2 "--decode-kernel: a decoder's decode steps, and .* (family vit) has none" \
  bench "${tok[@]}" --decode-kernel auto
expect_error "decode-kernel for pi0" 2 "--decode-kernel: a decoder's decode steps, and pi0-small (family pipeline)" \
  bench --model pi0-small --decode-kernel persistent
expect_error "cpu: --prefill-activations" 2 "--prefill-activations: $gpu_only" bench "${small[@]}" --model llama-tiny \
  --precision fp8-wo --prefill-activations fp8
expect_error "prefill-activations without fp8-wo" 2 \
  "--prefill-activations fp8: fp8-wo's prefill, and --precision has no fp8-wo" \
  bench "${small[@]}" --model llama-tiny --precision fp16 --prefill-activations fp8
expect_error "prefill-activations for a ViT" 2 "--prefill-activations fp8: a decoder's prefill" \
  bench "${tok[@]}" --precision fp8-wo --prefill-activations fp8
expect_error "prefill-activations with --tp" 2 "--prefill-activations fp8: one GPU's" \
  bench --model llama-tiny --precision fp8-wo --tp 2 --prefill-activations fp8
echo '{"default": "fp8-wo", "overrides": [{"layers": "lm_head", "precision": "fp16"}]}' >"$tmp/pf_fp8wo.json"
expect_error "prefill-activations with --policy-file" 2 "--prefill-activations fp8: the fp8 policy's prefill, and a" \
  bench --model llama-tiny --precision fp8-wo --policy-file "$tmp/pf_fp8wo.json" --prefill-activations fp8
expect_error "prefill-activations type" 2 "--prefill-activations: unknown type 'int8' (expected fp16 or fp8)" \
  bench --model llama-tiny --prefill-activations int8
expect_error "decode-kernel form" 2 "--decode-kernel: unknown form 'fast' (expected graph, persistent or auto)" \
  bench --model llama-tiny --decode-kernel fast
expect_error "build: --gemm without a GPU" 2 "--gemm: tprof build uses it on a GPU .* has none (--device cpu)" \
  build --device cpu "${tok[@]}" --batch 1 --precision fp16 --arch sm_90 --gemm cublaslt -o "$tmp/x.tpe"
expect_error "build: --json" 2 "--json: tprof build writes the engine file and runs nothing" \
  build "${tok[@]}" --batch 1 --precision fp16 --arch sm_90 --json "$tmp/b.json" -o "$tmp/x.tpe"
expect_error "build: --iterations" 2 "--iterations: tprof build writes the engine file and runs nothing" \
  build "${tok[@]}" --batch 1 --precision fp16 --arch sm_90 --iterations 5 -o "$tmp/x.tpe"
expect_error "build: --fusion" 2 "--fusion: tprof build writes the engine file and runs nothing" \
  build "${tok[@]}" --batch 1 --precision fp16 --arch sm_90 --fusion off -o "$tmp/x.tpe"
expect_error "engine: --calib" 2 "--engine $tmp/pf.tpe carries its activation scales: drop --calib" \
  bench "${small[@]}" --engine "$tmp/pf.tpe" --calib entropy
expect_error "calib max with a percentile" 2 "--calib max with --calib-percentile" \
  bench "${small[@]}" "${tok[@]}" --calib max --calib-percentile 99.9
expect_error "onnx-check without onnx" 2 "--onnx-check: the check of an --onnx import, and there is no --onnx" \
  bench "${small[@]}" "${tok[@]}" --onnx-check off
expect_error "sparse-layers without sparsity" 2 "--sparse-layers head without --sparsity 2:4" \
  bench "${small[@]}" "${tok[@]}" --sparse-layers head
expect_error "allow-nonfinite without weights" 2 "--allow-nonfinite: about the values of --weights" \
  bench "${small[@]}" "${tok[@]}" --allow-nonfinite
expect_error "attribution with a sweep" 2 "--attribution with a sweep (--batch LIST)" \
  bench "${tok[@]}" --attribution --batch 1,2
expect_error "a flag with a value" 2 "--plan takes no value ('--plan=no')" bench "${small[@]}" "${tok[@]}" --plan=no
