# Config fields (issue 40, "Nothing lost, nothing silent"): HF config.json read where transformers reads it, its
# errors naming the file, the field and the value; max_position_embeddings against the context (--strict); token
# files and pipeline JSON named by index and key. Sourced by tests/test_cli.sh (its helpers, $tmp, $TPROF).

# cfg_write EXPR: $tmp/cfg/config.json = the tiny Mistral checkpoint's config.json changed by the Python statements
# EXPR on its dict c; the checkpoint's weights beside it
mkdir -p "$tmp/cfg"
ln -sf "$PWD/tests/fixtures/hf_mistral_tiny/model.safetensors" "$tmp/cfg/model.safetensors"
cfg_write() {
  python3 -c "import json, sys
c = json.load(open('tests/fixtures/hf_mistral_tiny/config.json'))
exec(sys.argv[1])
json.dump(c, open(sys.argv[2], 'w'))" "$1" "$tmp/cfg/config.json"
}
cfgrun=(--device cpu --model llama-tiny --batch 1 --duration 0 --iterations 1 --warmup 0 --weights "$tmp/cfg")

# the rotary fields at the top level (transformers 4's place, still read by 5)
cfg_write "c['partial_rotary_factor'] = 0.5"
expect_error "config: top-level partial_rotary_factor refused" 4 \
  "cfg/config.json: field 'partial_rotary_factor' 0.5: .*full rotary embeddings (1.0) only" bench "${cfgrun[@]}"
cfg_write "c['rope_parameters']['partial_rotary_factor'] = 0.25"
expect_error "config: rope_parameters.partial_rotary_factor refused" 4 \
  "field 'rope_parameters.partial_rotary_factor' 0.25" bench "${cfgrun[@]}"
cfg_write "c['partial_rotary_factor'] = 1.0"
expect_ok "config: top-level partial_rotary_factor 1 runs" "configuration from $tmp/cfg/config.json" \
  bench "${cfgrun[@]}" --prompt 8 --gen 2
cfg_write "del c['rope_parameters']['rope_theta']; c['rope_theta'] = 12345.0"
expect_ok "config: top-level rope_theta beside rope_parameters without one" "rope 12345;" \
  bench "${cfgrun[@]}" --prompt 8 --gen 2
cfg_write "c['rope_scaling'] = {'type': 'dynamic', 'factor': 2.0}"
expect_error "config: a top-level rope_scaling replaces rope_parameters" 4 "field 'rope_scaling.rope_type' \"dynamic\"" \
  bench "${cfgrun[@]}"

# max_position_embeddings against --prompt + --gen: a warning, an error with --strict
cfg_write "c['max_position_embeddings'] = 16"
expect_ok "config: context past max_position_embeddings warns" \
  "^warning: cfg: the context 20 (--prompt 12 + --gen 8) exceeds max_position_embeddings 16" \
  bench "${cfgrun[@]}" --prompt 12 --gen 8
expect_error "config: --strict refuses the context past max_position_embeddings" 2 \
  "exceeds max_position_embeddings 16: .*(--strict)" bench "${cfgrun[@]}" --prompt 12 --gen 8 --strict
expect_error "config: build --strict too" 2 "exceeds max_position_embeddings 16" \
  build --model llama-tiny --weights "$tmp/cfg" --prompt 12 --gen 8 --strict --precision fp16 --arch sm_90 -o "$tmp/cfg.tpe"
expect_ok "config: within max_position_embeddings, --strict runs" "configuration from" \
  bench "${cfgrun[@]}" --prompt 12 --gen 4 --strict
expect_error "config: a preset's max_position_embeddings (Llama-2-7b 4096)" 2 \
  "Llama-2-7b-hf: the context 4200 (--prompt 4000 + --gen 200) exceeds max_position_embeddings 4096" \
  build --model llama-2-7b --prompt 4000 --gen 200 --strict --precision fp16 --arch sm_90 -o "$tmp/l2.tpe"
expect_ok "--strict in bench --help" "--strict  .*max_position_embeddings" bench --help

# errors name config.json, its fields and values (exit 3), not the preset and a derived number
cfg_write "c['hidden_size'] = 48; c['num_attention_heads'] = 5; c['num_key_value_heads'] = 5; del c['head_dim']"
expect_error "config: heads not dividing the width" 3 \
  "cfg/config.json: num_attention_heads 5 does not divide hidden_size 48" bench "${cfgrun[@]}"
cfg_write "c['num_key_value_heads'] = 3"
expect_error "config: heads over KV heads" 3 "cfg/config.json: num_attention_heads 8 is not a multiple of num_key_value_heads 3" \
  bench "${cfgrun[@]}"
cfg_write "c['num_hidden_layers'] = 0"
expect_error "config: an out-of-range value shown" 3 "field 'num_hidden_layers': 0 is outside \[1, 100000\]" \
  bench "${cfgrun[@]}"
cfg_write "c['vocab_size'] = '300'"
expect_error "config: a value of the wrong type shown" 3 "field 'vocab_size': expected an integer .*, got \"300\"" \
  bench "${cfgrun[@]}"
cfg_write "c['sliding_window'] = 100"
expect_error "config: the sliding window names the field" 4 \
  "cfg/config.json: sliding_window 100: the context 256 (--prompt 128 + --gen 128) exceeds it" bench "${cfgrun[@]}"
cfg_write "c['model_type'] = 'llama'"
expect_error "config: model_type against architectures" 3 "model_type 'llama' and architectures \[\"MistralForCausalLM\"\] disagree" \
  bench "${cfgrun[@]}"
cfg_write "c['layer_types'] = ['full_attention', 'chunked_attention']"
expect_error "config: an unknown layer type" 4 "field 'layer_types\[1\]' \"chunked_attention\"" bench "${cfgrun[@]}"

# token files: the 1-based index and the text as written
for t in "1.5" "1,2,3" "0x10"; do
  printf '7 %s 9 9' "$t" >"$tmp/cfg_tokens.txt"
  expect_error "token file with '$t'" 3 "cfg_tokens.txt: token 2 is not an integer: '$t'" \
    bench --device cpu --model llama-tiny --batch 1 --duration 0 --iterations 1 --warmup 0 --prompt 4 \
    --tokens "$tmp/cfg_tokens.txt"
done

# a pipeline described by JSON: errors name the key
printf '{"family": "pipeline", "name": "p", "cams": 1, "img": 28, "patch": 14, "v_width": 2000000, "v_depth": 1,
 "v_heads": 2, "v_mlp": 96, "width": 64, "depth": 1, "heads": 2, "kv_heads": 1, "head_dim": 32, "mlp": 128,
 "vocab": 300, "lang": 4, "e_width": 32, "e_mlp": 64, "horizon": 5, "action_dim": 7, "state_dim": 7, "steps": 4}\n' \
  >"$tmp/cfg_pipe.json"
expect_error "pipeline JSON: a size too large names its key" 3 "cfg_pipe.json: model: p: 'v_width' is 2000000, above 2^20" \
  bench --device cpu --model "$tmp/cfg_pipe.json" --batch 1
sed 's/"v_width": 2000000/"v_width": 48, "v_widht": 48/' "$tmp/cfg_pipe.json" >"$tmp/cfg_pipe2.json"
expect_error "pipeline JSON: an unknown key named" 3 "cfg_pipe2.json: model: unknown key 'v_widht'" \
  bench --device cpu --model "$tmp/cfg_pipe2.json" --batch 1
