# Outputs (sourced by tests/test_cli.sh): no output path destroys an input or a non-regular file; every output is
# written through a temporary file renamed into place, so a failed write leaves what was there and no debris.

# an output that is also an input is refused before any work, and the input is left as it was
cp tests/fixtures/timm_vit_token.safetensors "$tmp/in.safetensors"
sum_before=$(cksum <"$tmp/in.safetensors")
expect_error out-is-input 2 "--json $tmp/in.safetensors: the same file as the input --weights $tmp/in.safetensors" \
  bench "${small[@]}" "${tok[@]}" --weights "$tmp/in.safetensors" --json "$tmp/in.safetensors"
expect_error out-is-input-save 2 "the same file as the input --weights" \
  bench "${small[@]}" "${tok[@]}" --weights "$tmp/in.safetensors" --save-output "$tmp/in.safetensors"
ln -sf "$tmp/in.safetensors" "$tmp/in_link.json"
expect_error out-link-to-input 2 "the same file as the input --weights" \
  bench "${small[@]}" "${tok[@]}" --weights "$tmp/in.safetensors" --json "$tmp/in_link.json"
# a file of a checkpoint folder given as an input (its config.json) is an input too
cp -r tests/fixtures/hf_qwen2_tiny "$tmp/qwen"
expect_error out-in-input-folder 2 "a file of the input folder --weights $tmp/qwen" \
  bench --device cpu --iterations 1 --warmup 0 --model llama-tiny --weights "$tmp/qwen" --prompt 8 --gen 1 \
  --json "$tmp/qwen/config.json"
if [ "$(cksum <"$tmp/in.safetensors")" = "$sum_before" ] && cmp -s tests/fixtures/hf_qwen2_tiny/config.json "$tmp/qwen/config.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL outputs: an input file changed after the refusals"
fi

# non-regular files are refused, never replaced
mkfifo "$tmp/fifo.json"
expect_error out-fifo 2 "$tmp/fifo.json: --json is a FIFO; tprof writes only regular files" \
  bench "${small[@]}" --model vit-tiny --json "$tmp/fifo.json"
expect_error out-fifo-engine 2 "$tmp/fifo.json: -o is a FIFO" \
  build --model vit-tiny --batch 1 --precision fp16 --arch sm_90 -o "$tmp/fifo.json"
if [ -p "$tmp/fifo.json" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL out-fifo: the FIFO was replaced"; fi
expect_error out-chardev 2 "/dev/null: --save-output is a character device" \
  bench "${small[@]}" --model vit-tiny --save-output /dev/null

# a symbolic link: its target is written, the link stays a link, and the note says so
echo old >"$tmp/real.tpe"
ln -s real.tpe "$tmp/link.tpe"
expect_ok out-link-build "Engine $tmp/link.tpe" build --model vit-tiny --batch 1 --precision fp16 --arch sm_90 -o "$tmp/link.tpe"
if [ -L "$tmp/link.tpe" ] && ! grep -qx old "$tmp/real.tpe" && grep -q "is a symbolic link: writing its target $tmp/real.tpe" "$tmp/err"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL out-link-build: link replaced, target not written, or no note:"
  ls -l "$tmp/link.tpe" "$tmp/real.tpe" | sed 's/^/    /'
  sed 's/^/    /' "$tmp/err"
fi
ln -s "$tmp/dangling_target.json" "$tmp/dangling.json"
expect_ok out-dangling-link "JSON report: $tmp/dangling.json" bench "${small[@]}" --model vit-tiny --img-size 32 \
  --patch-size 16 --depth 1 --json "$tmp/dangling.json"
if [ -L "$tmp/dangling.json" ] && grep -q '"results"' "$tmp/dangling_target.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL out-dangling-link: the link's target was not written"
fi

# a failed write (a file-size limit stands in for a full disk) leaves the old file whole and no temporary file
echo "keep me" >"$tmp/saved.safetensors"
(trap '' XFSZ; ulimit -f 1; "$TPROF" bench "${small[@]}" --model vit-tiny --img-size 32 --patch-size 16 --save-output "$tmp/saved.safetensors") \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 3 ] && [ "$(cat "$tmp/saved.safetensors")" = "keep me" ] && ! ls -a "$tmp" | grep -q '\.saved\.safetensors\.tmp' &&
  grep -q "saved.safetensors: cannot write" "$tmp/err"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL out-failed-write: rc=$rc (wanted 3), the old file or the temporary file:"
  ls -la "$tmp" | grep saved | sed 's/^/    /'
  sed 's/^/    /' "$tmp/err"
fi
# and a successful one replaces the file and keeps its permissions
chmod 640 "$tmp/saved.safetensors"
expect_ok out-replace "Outputs (per precision, safetensors): $tmp/saved.safetensors" \
  bench "${small[@]}" --model vit-tiny --img-size 32 --patch-size 16 --depth 1 --save-output "$tmp/saved.safetensors"
if [ "$(stat -c %a "$tmp/saved.safetensors")" = 640 ] && ! grep -qx "keep me" "$tmp/saved.safetensors"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL out-replace: mode $(stat -c %a "$tmp/saved.safetensors") (wanted 640) or the file not replaced"
fi

# the files a run derives from its outputs: a sweep's JSON per size, profile's and compare's files in --out
mkfifo "$tmp/sweep_b2.json"
expect_error out-sweep-fifo 2 "$tmp/sweep_b2.json: --json (one file per batch size) is a FIFO" \
  bench "${small[@]}" --model vit-tiny --img-size 32 --patch-size 16 --batch 1,2 --json "$tmp/sweep.json"
mkdir -p "$tmp/report_dir"
mkfifo "$tmp/report_dir/report.md"
expect_error out-dir-fifo 2 "$tmp/report_dir/report.md: --out's file is a FIFO" \
  compare --device cpu --model vit-tiny --out "$tmp/report_dir"

# tprof lint's --json never replaces what it lints (it overwrote a checkpoint's config.json before)
cp -r tests/fixtures/hf_qwen2_tiny "$tmp/lintq"
expect_error out-lint-input-folder 3 "a file of the input folder --model $tmp/lintq" \
  lint --model "$tmp/lintq" --json "$tmp/lintq/config.json"
expect_error out-lint-input-file 3 "the same file as the input --model $tmp/lintq/config.json" \
  lint --model "$tmp/lintq/config.json" --json "$tmp/lintq/config.json"
if cmp -s tests/fixtures/hf_qwen2_tiny/config.json "$tmp/lintq/config.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL out-lint: the checkpoint's config.json changed"
fi

# where the run's time went (issue 43, item 4): the summary's Phases line and the JSON's phases_s, in order
expect_ok out-phases-line "^Phases (wall clock, .* s so far): weights synthesized .* s, FP32 reference .* s, fp32 prefill runs .* s, fp32 decode .* s" \
  bench "${small[@]}" --model llama-tiny --prompt 16 --gen 4 --json "$tmp/phases.json"
if python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
names = [p['phase'] for p in d['phases_s']]
assert names == ['weights synthesized', 'FP32 reference', 'fp32 prefill runs', 'fp32 decode'], names
assert all(p['s'] >= 0 for p in d['phases_s'])
assert d['results'][0]['build_phases_s'] == []" "$tmp/phases.json"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL out-phases-json: phases_s not as expected in $tmp/phases.json"
fi
