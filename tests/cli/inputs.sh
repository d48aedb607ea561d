# Inputs (sourced by tests/test_cli.sh): no reader blocks on a FIFO, a folder where a file is expected (or the
# reverse) is named as such, and an input of the wrong kind for the model is refused.

mkfifo "$tmp/in.fifo"
# each reader option given a FIFO: refused at once (timeout turns a regression's hang into a failure, rc 124)
for opt in "--model llama-tiny --tokens" "--model llama-tiny --perplexity" "--model vit-tiny --weights" \
  "--model vit-tiny --image" "--model vit-tiny --policy-file" "--model vit-tiny --calib-data" "--engine" "--onnx"; do
  name=${opt##* }
  timeout 20 "$TPROF" bench --device cpu $opt "$tmp/in.fifo" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 3 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "$tmp/in.fifo: $name is a FIFO; expected a regular file" "$tmp/err"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL in-fifo $name: rc=$rc (wanted 3):"
    sed 's/^/    /' "$tmp/err"
  fi
done
timeout 20 "$TPROF" inspect "$tmp/in.fifo" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 3 ] && grep -q "is a FIFO" "$tmp/err"; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL in-fifo inspect: rc=$rc (wanted 3)"; sed 's/^/    /' "$tmp/err"; fi

# a folder where a file is expected
mkdir -p "$tmp/a_folder"
expect_error in-tokens-folder 3 "$tmp/a_folder: --tokens is a folder; expected a file" \
  bench "${small[@]}" --model llama-tiny --tokens "$tmp/a_folder"
expect_error in-policy-folder 3 "$tmp/a_folder: --policy-file is a folder; expected a file" \
  bench "${small[@]}" --model vit-tiny --policy-file "$tmp/a_folder"
expect_error in-engine-folder 3 "$tmp/a_folder: --engine is a folder; expected a file" bench "${small[@]}" --engine "$tmp/a_folder"

# an input of the other kind: token ids to a ViT, images to a decoder
printf '1 2 3\n' >"$tmp/ids.txt"
expect_error in-tokens-vit 2 "--tokens $tmp/ids.txt: vit_tiny_patch16_224 takes images (--image PATH), not token ids" \
  bench "${small[@]}" --model vit-tiny --tokens "$tmp/ids.txt"
expect_error in-image-decoder 2 "--image tests/fixtures/preprocess_tiny.png: llama-tiny takes token ids" \
  bench "${small[@]}" --model llama-tiny --image tests/fixtures/preprocess_tiny.png

# a path longer than the message buffer: the reason survives, the path is shortened in its middle
long=$tmp/$(printf 'd%.0s' $(seq 1 3000))/x.json
expect_error in-long-path 2 "d\.\.\.d.*/x.json: cannot write --json: folder .* does not exist" bench "${small[@]}" --model vit-tiny --json "$long"
