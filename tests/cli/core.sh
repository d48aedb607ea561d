# The first catalogue (sourced by tests/test_cli.sh): missing and corrupt files, option values, sweeps, engine
# files, ONNX, tensor parallelism; the classes of issue 40 have files of their own beside this one.

expect_error "missing weights file" 3 "nope.safetensors" bench "${small[@]}" --weights "$tmp/nope.safetensors"
# the exit status by class: usage 2, input 3, unsupported 4, out of memory 5
expect_exit "exit: usage" 2 bench --batch zero
expect_exit "exit: input" 3 bench "${small[@]}" --weights "$tmp/nope.safetensors"
expect_exit "exit: unsupported" 4 build --model llama-tiny --batch 1 --precision fp8-wo --arch sm_89 -o "$tmp/u.tpe"
expect_exit "exit: out of memory" 5 bench --device cpu --model vit-tiny --batch 1000000
head -c 100 /dev/urandom >"$tmp/corrupt.safetensors"
expect_error "corrupt safetensors" 3 "corrupt.safetensors" bench "${small[@]}" --weights "$tmp/corrupt.safetensors"
head -c 5000 tests/fixtures/timm_vit_token.safetensors >"$tmp/trunc.safetensors"
expect_error "truncated safetensors" 3 "trunc.safetensors" bench "${small[@]}" "${tok[@]}" --weights "$tmp/trunc.safetensors"
expect_error "shape mismatch" 3 "shape \[1, 1, 64\] in file, model expects \[1, 1, 32\]" bench "${small[@]}" "${tok[@]}" --embed-dim 32 --weights tests/fixtures/timm_vit_token.safetensors
expect_error "wrong model for the weights" 3 "timm_vit_token.safetensors" bench "${small[@]}" --model vit-tiny --weights tests/fixtures/timm_vit_token.safetensors
# weights holding NaN: refused with the tensor's name and count, run with a warning under --allow-nonfinite
python3 - tests/fixtures/timm_vit_token.safetensors "$tmp/nan.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = next(k for k, v in h.items() if k != "__metadata__" and v["dtype"] == "F32" and v["data_offsets"][1] > v["data_offsets"][0])
at = 8 + n + h[name]["data_offsets"][0]
b[at:at + 4] = struct.pack("<I", 0x7FC00000)
open(sys.argv[2], "wb").write(b)
PY
expect_error "NaN weights" 3 "tensor 'blocks.0.attn.proj.bias' holds 1 non-finite value (NaN or Inf) of 64; --allow-nonfinite" \
  bench "${small[@]}" "${tok[@]}" --weights "$tmp/nan.safetensors"
expect_ok "NaN weights allowed" "Warning: .*nan.safetensors: tensor .* holds 1 non-finite value" \
  bench "${small[@]}" "${tok[@]}" --weights "$tmp/nan.safetensors" --allow-nonfinite
expect_error "unknown precision" 2 "fp7" bench "${small[@]}" --precision fp32,fp7
expect_error "batch 0" 2 "--batch '0'" bench "${small[@]}" --batch 0
expect_error "batch not a number" 2 "--batch 'x'" bench "${small[@]}" --batch x
expect_error "batch list with a hole" 2 "--batch '1,,2'" bench "${small[@]}" --batch 1,,2
expect_error "batch list entry 0" 2 "--batch '0'" bench "${small[@]}" --batch 1,0
expect_error "batch list for profile" 2 "a list of sizes" profile --device cpu --model vit-tiny --batch 1,2
expect_error "unknown gelu form" 2 "--gelu: unknown form 'fast'" bench "${small[@]}" --gelu fast
expect_error "unknown gemm choice" 2 "--gemm: unknown choice 'tprof'" bench "${small[@]}" --gemm tprof
expect_error "unknown fp8 accumulation" 2 "--fp8-accum: unknown choice 'slow'" bench "${small[@]}" --fp8-accum slow
expect_error "fp8 accumulation without a value" 2 "--fp8-accum" bench "${small[@]}" --fp8-accum
expect_error "gelu form for an engine file" 2 "not stored in the engine file" build --model vit-tiny --precision fp32 --gelu tanh -o "$tmp/g.tpe"
# a sweep on the CPU: one run and one JSON per size, then the sweep table
expect_ok "batch sweep" "=== Batch sweep" bench "${small[@]}" --img-size 32 --patch-size 16 --batch 1,2 --json "$tmp/sw.json"
if [ -s "$tmp/sw_b1.json" ] && [ -s "$tmp/sw_b2.json" ] && grep -q '"batch": 2' "$tmp/sw_b2.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL batch sweep: per-batch JSON files sw_b1.json / sw_b2.json missing or wrong"
fi
echo "not an image" >"$tmp/cat.png"
expect_error "unreadable image" 3 "cat.png" bench "${small[@]}" --image "$tmp/cat.png"
expect_error "missing image" 3 "nothere.jpg" bench "${small[@]}" --image "$tmp/nothere.jpg"
expect_error "missing calibration data" 3 "nothere.png: cannot open --calib-data: No such file" bench "${small[@]}" --calib-data "$tmp/nothere.png"
expect_error "unknown option" 2 "--frobnicate" bench --frobnicate
expect_error "unknown model" 2 "vit-xxl" bench "${small[@]}" --model vit-xxl
expect_error "patch does not divide" 2 "--patch-size 15" bench "${small[@]}" --patch-size 15
expect_error "fp16 on the CPU" 4 "CPU executor runs fp32 only" bench "${small[@]}" "${tok[@]}" --precision fp16
expect_error "missing value" 2 "needs a value" bench --model
expect_error "unknown command" 2 "frob" frob
expect_error "profile without a GPU" 2 "needs a GPU" profile --device cpu --model vit-tiny
expect_error "profile option given to bench" 2 "--top" bench --top 5
expect_error "policy without '='" 2 "blocks.0.mlp" bench "${small[@]}" "${tok[@]}" --policy "blocks.0.mlp"
expect_error "policy with an unknown precision" 2 "fp5" bench "${small[@]}" "${tok[@]}" --policy "head=fp5"
expect_error "missing policy file" 3 "nope.json" bench "${small[@]}" "${tok[@]}" --policy-file "$tmp/nope.json"
expect_error "caps: unknown architecture" 2 "sm_x9" caps --arch sm_x9
expect_error "build without -o" 2 "-o FILE" build "${tok[@]}" --precision fp16 --arch sm_90
expect_error "unknown calibration method" 2 "--calib: unknown method 'kl'" bench --calib kl
expect_error "calibration percentile out of range" 2 "--calib-percentile '101'" bench --calib-percentile 101
expect_error "build nvfp4 without a GPU" 6 "calibration on a GPU" build --device cpu "${tok[@]}" --precision nvfp4 --arch sm_90 -o "$tmp/n.tpe"
expect_error "engine file missing" 3 "nope.tpe" bench --engine "$tmp/nope.tpe"
expect_error "batch larger than host memory" 5 "of host memory" bench --device cpu --model vit-tiny --batch 1000000

expect_ok "timm checkpoint on the CPU" "Accuracy vs FP32 CPU reference" bench "${small[@]}" "${tok[@]}" --batch 2 \
  --weights tests/fixtures/timm_vit_token.safetensors --json "$tmp/r.json"
if python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['results'][0]['latency']['runs']>=1" "$tmp/r.json" 2>/dev/null; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL json report is not valid JSON with results"
fi
expect_ok "models list" "vit_base_patch16_224" models
# per-command help: the command's own text, example and options
expect_ok "caps --help" "tprof caps: which precision runs native" caps --help
expect_ok "models --help" "tprof models: list the model presets" models --help
expect_ok "build --help" "tprof build --model vit-b16 --batch 64 --precision fp8 -o" build --help
expect_ok "bench --help lists every precision of the format table" "comma list of fp32,fp16,bf16,fp8,fp8-block,mxfp8,nvfp4,mxfp4,fp8-wo,nvfp4-wo" bench --help
expect_ok "lint --help" "lint options:" lint --help
if "$TPROF" bench --help | grep -q "lint options:"; then
  fail=$((fail + 1)); echo "FAIL bench --help prints lint's options"
else pass=$((pass + 1)); fi
expect_ok "build an mxfp8 engine file for sm_90" "mxfp8 for sm_90" build "${tok[@]}" --precision mxfp8 --arch sm_90 \
  --weights tests/fixtures/timm_vit_token.safetensors -o "$tmp/m.tpe"
head -c 3000 "$tmp/m.tpe" >"$tmp/cut.tpe"
expect_error "truncated engine file" 3 "cut.tpe: truncated" bench --engine "$tmp/cut.tpe"
expect_error "engine file with --model" 2 "drop --model" bench --engine "$tmp/m.tpe" --model vit-b16
expect_error "engine file with --calib-data" 2 "drop --calib-data" bench --engine "$tmp/m.tpe" --calib-data "$tmp/x.png"
expect_error "entropy calibration on the CPU" 2 "--calib: a GPU engine's option, and this run is on the CPU" bench \
  --device cpu --model vit-tiny --batch 1 --calib entropy
expect_ok "caps for Blackwell" "VEC32_UE8M0" caps --arch sm_100
expect_ok "caps for Hopper" "emulated" caps --arch sm_90

# tprof lint: 0 when every requested format can run as asked, 1 when one cannot, 2 for a bad option, 3 when the
# JSON cannot be written
expect_rc "lint: ViT-B/16 224 with a class token fails mxfp8/nvfp4 attention" 1 \
  "mxfp8: attention cannot run as asked: 2 rules fail" lint --model vit-b16 --json "$tmp/lint_fail.json"
expect_rc "lint: 256/16 without a class token passes" 0 "nvfp4: usable as asked" \
  lint --model vit-b16 --img-size 256 --no-class-token --global-pool avg --precision mxfp8,nvfp4 --json "$tmp/lint.json"
if python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['ok'] and d['tokens']==256 and len(d['formats'])==2" "$tmp/lint.json" 2>/dev/null &&
   python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert not d['ok'] and d['formats'][0]['rules'][0]['status']=='FAIL'" "$tmp/lint_fail.json" 2>/dev/null; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL lint JSON files missing or wrong"
fi
expect_rc "lint: fp8 per tensor has no block rule" 0 "fp8: usable as asked" lint --precision fp8
expect_error "lint: unknown option" 2 "--frobnicate" lint --frobnicate
expect_error "lint: unknown precision" 2 "fp7" lint --precision mxfp8,fp7
expect_error "lint: missing value" 2 "--json needs a value" lint --json
expect_error "lint: heads do not divide" 2 "--heads 7" lint --heads 7
expect_error "lint: JSON cannot be written" 3 "nodir/l.json" lint --json "$tmp/nodir/l.json"
"$TPROF" lint --json "$tmp/nodir/l.json" >/dev/null 2>&1
rc=$?
if [ $rc -eq 3 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL lint: unwritable JSON exits $rc, not 3"; fi
"$TPROF" lint --frobnicate >/dev/null 2>&1
rc=$?
if [ $rc -eq 2 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL lint: bad option exits $rc, not 2"; fi

# The checkpoint's own preprocessing (issue 19): config.json beside the weights, a warning without it, the family's
# knobs through the CLI, --reference on a run without a GPU
golden=(--device cpu --model vit-tiny --img-size 32 --patch-size 8 --embed-dim 48 --depth 2 --heads 3 --num-classes 10
        --image tests/fixtures/preprocess_timm_a.png --batch 1 --duration 0 --iterations 1 --warmup 0)
expect_ok "checkpoint config.json read" "source: tests/fixtures/timm_in1k_crop090/config.json" \
  bench "${golden[@]}" --weights tests/fixtures/timm_in1k_crop090/model.safetensors
mkdir -p "$tmp/nocfg" && cp tests/fixtures/timm_in1k_crop090/model.safetensors "$tmp/nocfg/"
expect_ok "checkpoint without config.json warns" "warning: no config.json beside" \
  bench "${golden[@]}" --weights "$tmp/nocfg/model.safetensors"
expect_ok "--mean kept over config.json" "mean (0.1, 0.2, 0.3), std (0.229" \
  bench "${golden[@]}" --weights tests/fixtures/timm_in1k_crop090/model.safetensors --mean 0.1,0.2,0.3
expect_error "config.json contradicts --num-classes" 3 "num_classes 10, but the model has 7" \
  bench "${golden[@]}" --weights tests/fixtures/timm_in1k_crop090/model.safetensors --num-classes 7
expect_error "--mean needs three numbers" 2 "R,G,B" bench --device cpu --mean 1,2
expect_error "--interpolation unknown" 2 "lanczos" bench --device cpu --interpolation lanczos
expect_error "--reference unknown" 2 "unknown reference 'tpu'" bench --device cpu --reference tpu
expect_error "--reference gpu on the CPU" 2 "--reference gpu" bench --device cpu --reference gpu
expect_ok "--reference none" "Accuracy: not checked" bench "${golden[@]}" --reference none
expect_ok "models lists the family" "^vit  *vit_base_patch16_224" models

# Decoders (issue 20): HF checkpoints by folder, their config.json, prefill on the CPU, refusals by name
dec=(--device cpu --model llama-tiny --batch 3 --duration 0 --iterations 1 --warmup 0)
expect_ok "models lists the decoders" "^decoder  *Llama-3.2-1B  *llama-3.2-1b" models
expect_ok "decoder prefill on the CPU" "sequences/s" bench "${dec[@]}" --prompt 19 --gen 3
expect_ok "HF checkpoint folder (sharded)" "configuration from tests/fixtures/hf_llama_tiny/config.json" \
  bench "${dec[@]}" --prompt 19 --weights tests/fixtures/hf_llama_tiny
expect_ok "HF checkpoint: the model named by its folder" "hf_gemma_tiny (GemmaForCausalLM" \
  bench "${dec[@]}" --prompt 8 --weights tests/fixtures/hf_gemma_tiny/model.safetensors
printf '1 2 3 x' >"$tmp/tokens.txt"
expect_error "token file with a non-integer" 3 "token 4 is not an integer" bench "${dec[@]}" --prompt 4 --tokens "$tmp/tokens.txt"
printf '1 2 3' >"$tmp/tokens.txt"
expect_error "token file too short" 3 "3 token ids, the prompt needs 4" bench "${dec[@]}" --prompt 4 --tokens "$tmp/tokens.txt"
printf '1 2 3 999' >"$tmp/tokens.txt"
expect_error "token outside the vocabulary" 3 "outside the vocabulary" bench "${dec[@]}" --prompt 4 --tokens "$tmp/tokens.txt"
expect_error "decoder knob bad value" 2 "--prompt '0'" bench "${dec[@]}" --prompt 0
expect_error "decoder in mxfp8: a K the block does not divide" 4 "down_proj: mxfp8: block-scaled GEMM needs K % 32 == 0 .*K = 176" \
  build --model llama-tiny --batch 1 --precision mxfp8 --arch sm_90 -o "$tmp/d.tpe"
expect_ok "decoder in fp8-block for sm_90: an engine file" "fp8-block for sm_90" \
  build --model llama-tiny --batch 1 --precision fp8-block --arch sm_90 -o "$tmp/d.tpe"
expect_error "fp8 KV cache on the fp32 CPU executor" 4 "kv-cache fp8: layer .*kv_append: the cache is quantized from 16-bit k and v; this engine's activations are f32" \
  bench "${dec[@]}" --prompt 8 --kv-cache fp8
expect_error "fp8 KV cache for a ViT" 4 "kv-cache fp8: this model has no KV cache" bench "${small[@]}" --model vit-tiny --img-size 32 --patch-size 16 --batch 1 --kv-cache fp8
expect_error "kv-cache: bad value" 2 "--kv-cache" bench "${dec[@]}" --kv-cache fp4
expect_ok "lint: decoder rules" "separate q, k, v" lint --model llama-3.1-8b
seq 1 80 | tr '\n' ' ' >"$tmp/ppl.txt"
expect_ok "perplexity over a token file" "Perplexity over .*(2 windows of 37 tokens, 72 predicted)" \
  bench "${dec[@]}" --prompt 37 --perplexity "$tmp/ppl.txt"
expect_error "perplexity: a file shorter than a window" 3 "a window needs 90" bench "${dec[@]}" --prompt 90 --perplexity "$tmp/ppl.txt"
expect_error "perplexity of an image model" 2 "not a language model" bench --device cpu --model vit-tiny --batch 1 \
  --perplexity "$tmp/ppl.txt"
# pipelines (issue 21): a preset on the CPU, another pipeline described by a JSON file, a file missing a field
expect_ok "pipeline pi0-small on the CPU" "the output is actions" bench --device cpu --model pi0-small --batch 1
printf '{"family": "pipeline", "name": "pi0-two-cams", "cams": 2, "img": 28, "patch": 14, "v_width": 48, "v_depth": 1,
 "v_heads": 4, "v_mlp": 96, "width": 64, "depth": 2, "heads": 4, "kv_heads": 1, "head_dim": 16, "mlp": 128, "vocab": 50,
 "lang": 4, "e_width": 32, "e_mlp": 64, "horizon": 5, "action_dim": 7, "state_dim": 7, "steps": 4}\n' >"$tmp/pipe.json"
expect_ok "pipeline from a JSON file" "pi0-two-cams .*4 Euler steps" bench --device cpu --model "$tmp/pipe.json" --batch 1
echo '{"family": "pipeline", "name": "x", "cams": 2}' >"$tmp/pipe_bad.json"
expect_error "pipeline JSON missing a field" 3 "pipe_bad.json: model: 'img' is missing" bench --device cpu \
  --model "$tmp/pipe_bad.json"
expect_error "pipeline mode unknown" 2 "--pipeline: unknown mode 'bogus'" bench --model pi0-small --pipeline bogus
expect_error "pipeline mode on a ViT" 2 "is not a pipeline (family vit)" bench --device cpu --model vit-tiny \
  --pipeline modular
expect_error "pipeline mode on the CPU" 2 "the modes are the GPU engine's" bench --device cpu --model pi0-small \
  --pipeline modular
expect_error "attribution on the CPU" 2 "--attribution: its modes" bench --device cpu --model pi0-small --attribution
expect_error "attribution with a mode" 2 "--attribution sets --pipeline and --fusion itself" bench --model pi0-small \
  --attribution --fusion off
expect_error "fp32 protection: bad mode" 2 "--fp32-protect: unknown mode 'fp16'" bench --model pi0-small --fp32-protect fp16
expect_error "fp32 protection on the CPU" 2 "--fp32-protect tensors: the CPU executor runs every op in FP32" bench \
  --device cpu --model pi0-small --fp32-protect tensors
expect_ok "fp32 protection regs on the CPU" "the output is actions" bench --device cpu --model pi0-small --batch 1 \
  --fp32-protect regs
expect_ok "pipeline engine file" "Engine .*pi0.tpe: fp32 for sm_90" build --model pi0-small --arch sm_90 \
  --precision fp32 -o "$tmp/pi0.tpe"
expect_ok "pipeline engine file on the CPU" "relative L2 = 0.000e+00" bench --device cpu --engine "$tmp/pi0.tpe" \
  --duration 0
# 2:4 sparsity (issue 22): pruning on the CPU, its cost against the dense model; bad patterns and globs refused
expect_ok "sparsity 2:4" "Sparsity 2:4 .*24 pruned by magnitude along K" bench --device cpu --model vit-tiny --img-size 32 \
  --patch-size 16 --batch 2 --duration 0 --sparsity 2:4 --sparse-layers 'blocks.*.mlp.*'
expect_ok "sparsity pruning cost" "Pruning cost, the pruned model's FP32 reference against the dense one's" bench \
  --device cpu --model vit-tiny --img-size 32 --patch-size 16 --batch 2 --duration 0 --sparsity 2:4
expect_error "sparsity pattern" 2 "--sparsity: unknown pattern '1:4'" bench --model vit-tiny --sparsity 1:4
expect_error "sparse-gemm without sparsity" 2 "--sparse-gemm off without --sparsity 2:4" bench --device cpu \
  --model vit-tiny --duration 0 --sparse-gemm off
expect_error "sparse-gemm mode" 2 "--sparse-gemm: unknown mode 'fast'" bench --model vit-tiny --sparsity 2:4 \
  --sparse-gemm fast
expect_error "sparsity glob" 2 "'mlp.*' matches no linear layer" bench --device cpu --model vit-tiny --img-size 32 \
  --patch-size 16 --duration 0 --sparsity 2:4 --sparse-layers 'mlp.*'
# tprof inspect: an ONNX file as the reader sees it (issue 24); a file it refuses gets the reader's one line
expect_ok "inspect onnx" "x  *float32  *(batch, 4)" inspect tests/fixtures/onnx/tiny_ext.onnx
expect_ok "inspect onnx external" "Initializers: 4, 80 bytes .*2 of them external" inspect \
  tests/fixtures/onnx/tiny_ext.onnx
expect_ok "inspect onnx ops" "Nodes: 7, by op type: Add 1, Cast 1, Constant 1" inspect tests/fixtures/onnx/tiny.onnx
expect_error "inspect bad onnx" 3 "node 1 'mm' (MatMul) input 'nobody'" inspect tests/fixtures/onnx/bad_order.onnx
expect_error "inspect no file" 2 "inspect: expected one ONNX file" inspect
expect_error "inspect missing" 3 "missing.onnx: cannot open" inspect missing.onnx
# --onnx (issue 24): a timm ViT export imported, checked against the file's own graph, and benchmarked; refusals
vx=tests/fixtures/onnx_vit
expect_ok "onnx import" "ONNX import: .*vit_op17.onnx: timm VisionTransformer.*heads 3.*checked: .*relative L2" bench \
  "${small[@]}" --onnx $vx/vit_op17.onnx --batch 2
expect_ok "onnx dynamo" "fp32 .*100.0" bench "${small[@]}" --onnx $vx/vit_dynamo_op18.onnx --batch 3
expect_ok "onnx qdq" "Q/DQ on 9 linears.*activation Q/DQ off" bench "${small[@]}" --onnx $vx/vit_fp8_qdq_op19.onnx
expect_ok "onnx unchecked" "NOT CHECKED against the file" bench "${small[@]}" --onnx $vx/vit_op18.onnx --onnx-check off
expect_ok "onnx build" "ONNX import: .*checked" build --onnx $vx/vit_op17.onnx --batch 2 --precision fp16 --arch sm_90 \
  -o "$tmp/onnx.tpe"
expect_ok "onnx llama" "ONNX import: .*llama_op18.onnx: Llama-style decoder.*prompt 12 + gen 3.*checked: .*relative L2" \
  bench "${small[@]}" --onnx tests/fixtures/onnx_llama/llama_op18.onnx --prompt 12 --gen 3
expect_ok "onnx shapes" "batch 3, " bench "${small[@]}" --onnx $vx/vit_op17.onnx --shapes input:3x3x32x32
expect_ok "onnx shapes decoder" "prompt 20 + gen 2), batch 2" bench "${small[@]}" --onnx \
  tests/fixtures/onnx_llama/llama_op18.onnx --shapes input_ids:2x20 --gen 2
expect_error "onnx shapes side" 2 "dimension 2 is 64; the file fixes it at 32" bench "${small[@]}" --onnx \
  $vx/vit_op17.onnx --shapes input:3x3x64x64
expect_error "onnx shapes name" 2 "expected input:DIMS (the file's input is 'input')" bench "${small[@]}" --onnx \
  $vx/vit_op17.onnx --shapes x:3x3x32x32
expect_error "shapes without onnx" 2 "--shapes input:1x3x224x224: the shape of an ONNX file's input" bench \
  "${small[@]}" --model vit-tiny --shapes input:1x3x224x224
expect_error "onnx and model" 2 "carries the model and its weights: drop --model" bench "${small[@]}" --onnx \
  $vx/vit_op17.onnx --model vit-tiny
expect_error "onnx and knob" 2 "drop a model knob" bench "${small[@]}" --onnx $vx/vit_op17.onnx --depth 3
expect_error "onnx not a vit" 4 "tiny.onnx: 1 inputs and 2 outputs" bench "${small[@]}" --onnx tests/fixtures/onnx/tiny.onnx
expect_error "onnx missing" 3 "nope.onnx: cannot open" bench "${small[@]}" --onnx "$tmp/nope.onnx"
expect_error "onnx-check mode" 2 "--onnx-check: unknown mode 'maybe'" bench "${small[@]}" --onnx $vx/vit_op17.onnx \
  --onnx-check maybe
expect_error "onnx and engine" 2 "drop --onnx" bench "${small[@]}" --engine "$tmp/onnx.tpe" --onnx $vx/vit_op17.onnx
expect_error "onnx qdq precision" 4 "--precision fp8 with a Q/DQ ONNX file" build --onnx $vx/vit_fp8_qdq_op19.onnx \
  --batch 2 --precision fp8 --arch sm_90 -o "$tmp/q.tpe"
expect_error "onnx qdq head" 4 "layer head: fp8 GEMM needs K and N multiples of 16" build --onnx \
  $vx/vit_fp8_qdq_op19.onnx --batch 2 --precision fp16 --arch sm_90 -o "$tmp/q.tpe"
echo '{"default": "fp16"}' > "$tmp/p.json"
expect_error "onnx qdq policy file" 2 "--policy-file with a Q/DQ ONNX file" build --onnx $vx/vit_fp8_qdq_op19.onnx \
  --batch 2 --precision fp16 --arch sm_90 --policy-file "$tmp/p.json" -o "$tmp/q.tpe"
# tensor parallelism and sweeps over GPUs: refused by name where they cannot run
expect_error tp-zero 2 "--tp '0'" bench --model llama-tiny --tp 0
expect_error tp-cpu 2 "tensor parallelism runs on GPUs" bench --model llama-tiny --tp 2 --device cpu
expect_error precision-twice 2 "--precision 'fp32,fp32': fp32 given twice" bench --device cpu --model vit-tiny --precision fp32,fp32
expect_error json-folder 2 "$tmp/none/x.json: cannot write --json: folder '$tmp/none' does not exist" bench --device cpu --model vit-tiny --json "$tmp/none/x.json"
expect_error save-output-folder 2 "is a folder" bench --device cpu --model vit-tiny --save-output "$tmp"
expect_error build-o-folder 2 "folder '$tmp/none' does not exist" build --model vit-tiny --batch 1 --precision fp16 --arch sm_90 -o "$tmp/none/e.tpe"
expect_error pdl-mode 2 "--pdl: unknown mode 'maybe' (expected on or off)" bench --model llama-tiny --pdl maybe
expect_error gpus-one-batch 2 "a sweep's batch sizes" bench --model vit-tiny --gpus 0,1 --batch 8
expect_error gpus-twice 2 "GPU 1 given twice" bench --model vit-tiny --gpus 1,1 --batch 1,2
expect_error gpus-bad 2 "expected a list" bench --model vit-tiny --gpus 0,,1 --batch 1,2
expect_error gpus-cpu 2 "this run is on the CPU" bench --model vit-tiny --gpus 0,1 --batch 1,2 --device cpu
expect_error gpus-tp 2 "not with --tp" bench --model llama-tiny --gpus 0,1 --batch 1,2 --tp 2
