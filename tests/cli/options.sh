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
expect_error "policy-file missing" 3 "--policy-file: $tmp/none.json: cannot open the policy file" \
  bench "${small[@]}" "${tok[@]}" --policy-file "$tmp/none.json"
expect_ok "policy-file sets the precision" "Engine $tmp/pf.tpe: fp16 for sm_90" \
  build "${tok[@]}" --batch 1 --arch sm_90 --policy-file "$tmp/pf_fp16.json" -o "$tmp/pf.tpe"
expect_ok "policy-file applied" "override 'blocks.0.\*=fp32'" \
  bench "${small[@]}" "${tok[@]}" --plan --policy-file "$tmp/pf_fp32.json"
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
