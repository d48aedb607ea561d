# Models by the names users already have (issue 40): --model takes a checkpoint folder, a .safetensors file, an
# ONNX or engine file, a model description by its content, or a Hugging Face id from the local hub cache; --weights
# alone with transformers' config.json names the model; lint takes the same; every subcommand refuses what it does
# not know. Sourced by tests/test_cli.sh (its helpers, $tmp, $TPROF).

mrun=(--device cpu --iterations 1 --warmup 0)

# A hub cache laid out as huggingface_hub lays it: refs/main holds the commit hash; snapshots/<hash>/ holds the
# files as symlinks into blobs/, each blob named by its sha256.
hub="$tmp/hub"
repo="$hub/models--org--qwen-tiny"
hash=0123456789abcdef0123456789abcdef01234567
mkdir -p "$repo/refs" "$repo/blobs" "$repo/snapshots/$hash"
printf '%s' "$hash" >"$repo/refs/main"
for f in tests/fixtures/hf_qwen2_tiny/*; do
  sum=$(sha256sum "$f" | cut -c1-64)
  cp "$f" "$repo/blobs/$sum"
  ln -s "../../blobs/$sum" "$repo/snapshots/$hash/$(basename "$f")"
done
HF_HUB_CACHE="$hub" expect_ok "hub id from HF_HUB_CACHE, named by its id" "^tprof bench: org/qwen-tiny (Qwen2ForCausalLM" \
  bench "${mrun[@]}" --model org/qwen-tiny --prompt 8 --gen 2
HF_HUB_CACHE="$tmp/nowhere" HF_HOME="$tmp" expect_ok "hub id from HF_HOME/hub when HF_HUB_CACHE lacks it" \
  "org/qwen-tiny (Qwen2ForCausalLM" bench "${mrun[@]}" --model org/qwen-tiny --prompt 8 --gen 2
HF_HUB_CACHE="$hub" expect_ok "hub snapshot as --weights: named by its id, not its hash" "^tprof bench: org/qwen-tiny (" \
  bench "${mrun[@]}" --weights "$repo/snapshots/$hash" --prompt 8 --gen 2
HF_HUB_CACHE="$hub" HF_HOME="$tmp/nohome" HOME="$tmp/nohome" expect_error "hub id not in the cache" 3 \
  "'org/missing' is not a file or folder, nor in the Hugging Face cache (no models--org--missing in \$HF_HUB_CACHE=$hub, .*run \`hf download org/missing\` (or \`huggingface-cli download org/missing\`)" \
  bench "${mrun[@]}" --model org/missing
mkdir -p "$hub/models--org--norefs/snapshots"
HF_HUB_CACHE="$hub" expect_error "hub id without refs/main" 3 "org/norefs: .*refs/main: no readable commit hash" \
  bench "${mrun[@]}" --model org/norefs
HF_HUB_CACHE="$hub" expect_error "lint: hub id not in the cache (lint's class 2)" 2 "hf download org/missing" \
  lint --model org/missing

# The issue's Done-when: a checkpoint folder as the model, no preset named, the decoder's --prompt applies
expect_ok "checkpoint folder as --model names Qwen2" "^tprof bench: hf_qwen2_tiny (Qwen2ForCausalLM: .*prompt 8 " \
  bench --device cpu --model tests/fixtures/hf_qwen2_tiny --prompt 8
expect_ok "checkpoint .safetensors as --model" "hf_gemma_tiny (GemmaForCausalLM" \
  bench "${mrun[@]}" --model tests/fixtures/hf_gemma_tiny/model.safetensors --prompt 8 --gen 2
expect_ok "sharded index as --model" "hf_llama_tiny (LlamaForCausalLM" \
  bench "${mrun[@]}" --model tests/fixtures/hf_llama_tiny/model.safetensors.index.json --prompt 8 --gen 2
expect_ok "--weights alone with transformers' config.json: the decoder, not the default ViT" \
  "^tprof bench: hf_gemma_tiny (GemmaForCausalLM: .*prompt 8 + gen 2" \
  bench "${mrun[@]}" --weights tests/fixtures/hf_gemma_tiny --prompt 8 --gen 2
expect_ok "timm folder as --model: its architecture and model_args" \
  "^tprof bench: vit_tprof_golden_patch8_32 (img 32, patch 8, dim 64, depth 2, heads 2, 16 tokens, avg pool, 6 classes)" \
  bench "${mrun[@]}" --model tests/fixtures/timm_crop100
expect_ok "timm folder as --model: its preprocessing" "^preprocessing from tests/fixtures/timm_crop100/config.json" \
  bench "${mrun[@]}" --model tests/fixtures/timm_crop100
expect_error "--model DIR and --weights" 2 "carries what --weights gives: drop one of them" \
  bench "${mrun[@]}" --model tests/fixtures/hf_qwen2_tiny --weights tests/fixtures/hf_qwen2_tiny
mkdir -p "$tmp/bert" "$tmp/nocfg"
printf '{"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 8}\n' >"$tmp/bert/config.json"
expect_error "checkpoint of an architecture tprof does not build" 4 "architecture 'BertForMaskedLM'" \
  bench "${mrun[@]}" --model "$tmp/bert"
expect_error "checkpoint folder without config.json" 3 "nocfg: no config.json beside it" \
  bench "${mrun[@]}" --model "$tmp/nocfg"
printf '{"something": 1}\n' >"$tmp/other.json"
expect_error "a JSON file of no model kind" 3 "other.json: a JSON file that is neither a model description" \
  bench "${mrun[@]}" --model "$tmp/other.json"
printf 'hello\n' >"$tmp/notes.txt"
expect_error "a file of no model kind" 3 "notes.txt: not a model tprof reads" bench "${mrun[@]}" --model "$tmp/notes.txt"
expect_error "a missing model file" 3 "nope.onnx: no such file or folder" bench "${mrun[@]}" --model "$tmp/nope.onnx"
expect_error "an unknown preset name" 2 "unknown model 'vit-b17' (nor a file, folder or Hugging Face id" \
  bench "${mrun[@]}" --model vit-b17

# A model description by its content, whatever its name; an engine file by its magic bytes; ONNX as --onnx
printf '{"family": "pipeline", "name": "pi0-two-cams", "cams": 2, "img": 28, "patch": 14, "v_width": 48, "v_depth": 1,
 "v_heads": 4, "v_mlp": 96, "width": 64, "depth": 2, "heads": 4, "kv_heads": 1, "head_dim": 16, "mlp": 128, "vocab": 50,
 "lang": 4, "e_width": 32, "e_mlp": 64, "horizon": 5, "action_dim": 7, "state_dim": 7, "steps": 4}\n' >"$tmp/pipe.model"
expect_ok "pipeline description without .json" "^tprof bench: pi0-two-cams (pipeline" \
  bench "${mrun[@]}" --model "$tmp/pipe.model" --batch 1
expect_ok "build for the engine file" "Engine" build --model vit-tiny --img-size 32 --patch-size 16 --batch 1 --precision fp32 --arch sm_90 \
  -o "$tmp/eng.bin"
expect_ok "engine file as --model, told by its magic" "^tprof bench: vit_tiny_patch16_224+custom (img 32" \
  bench "${mrun[@]}" --model "$tmp/eng.bin"
expect_error "engine file as --model and --engine" 2 "is an engine file and carries what --engine gives" \
  bench "${mrun[@]}" --model "$tmp/eng.bin" --engine "$tmp/eng.bin"
expect_ok "ONNX file as --model" "^tprof bench: vit_avg_op17.onnx " \
  bench "${mrun[@]}" --model tests/fixtures/onnx_vit/vit_avg_op17.onnx

# lint takes the same models; what it cannot lint it refuses by name
expect_rc "lint: a checkpoint folder" 1 "^tprof lint: hf_qwen2_tiny (" lint --model tests/fixtures/hf_qwen2_tiny
expect_rc "lint: a timm folder" 1 "^tprof lint: vit_tprof_golden_patch8_32 (" lint --model tests/fixtures/timm_crop100
HF_HUB_CACHE="$hub" expect_rc "lint: a hub id" 1 "^tprof lint: org/qwen-tiny (" lint --model org/qwen-tiny
expect_rc "lint: an engine file" 1 "^tprof lint: vit_tiny_patch16_224+custom (" lint --model "$tmp/eng.bin"
expect_error "lint: a pipeline description, refused by name" 2 "pi0-two-cams: tprof lint reads ViTs and decoders; pipelines not yet" \
  lint --model "$tmp/pipe.model"

# Every subcommand refuses unknown options and stray arguments: exit 2, one line
expect_error "models: unknown option" 2 "models: unknown option '--json'" models --json x
expect_error "models: unknown option, no value" 2 "models: unknown option '--frobnicate'" models --frobnicate
expect_error "models: stray argument" 2 "models: unexpected argument 'vit'" models vit
expect_error "caps: unknown option" 2 "caps: unknown option '--frobnicate'" caps --frobnicate
expect_error "caps: stray argument" 2 "caps: unexpected argument 'x'" caps --arch=sm_90 x
expect_error "caps: --arch without a value" 2 "option --arch needs a value" caps --arch
expect_error "lint: stray argument" 2 "lint: unexpected argument 'stray'" lint stray
expect_error "inspect: unknown option" 2 "inspect: unknown option '--frobnicate'" inspect tests/fixtures/onnx/tiny.onnx --frobnicate
expect_error "inspect: stray argument" 2 "got 'extra' as well" inspect tests/fixtures/onnx/tiny.onnx extra
expect_error "bench: stray argument" 2 "unknown option 'stray'" bench stray
