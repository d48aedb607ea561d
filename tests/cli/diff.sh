# tprof diff (issue 44): the regression gate's exit status on a doctored slower copy of a real run and on the run
# against itself, every format, decoder runs (pp and tg matched), and bad input (one line, the file or value
# named). Sourced by tests/test_cli.sh (its helpers, $tmp, $TPROF).

dfx=tests/fixtures/diff
expect_rc "diff: gate fails on a doctored 5 % slower run" 1 "| B | vit_base_patch16_224 fp16 | 64 | forward |" \
  diff "$dfx/vit_b16_b64_after.json" "$dfx/vit_b16_b64_slower.json" --fail-above 2
expect_rc "diff: the same gate at 10 % passes" 0 "slower" \
  diff "$dfx/vit_b16_b64_after.json" "$dfx/vit_b16_b64_slower.json" --fail-above 10
expect_rc "diff: a run against itself passes the strictest gate" 0 "| same |" \
  diff "$dfx/vit_b16_b64_after.json" "$dfx/vit_b16_b64_after.json" --fail-above 0
expect_ok "diff: CSV header" "^run,file,model,precision,batch,test,a_median_ms" \
  diff "$dfx/vit_b16_b64_before.json" "$dfx/vit_b16_b64_after.json" --format csv
expect_ok "diff: JSON" '"format": "tprof-diff-1"' \
  diff "$dfx/vit_b16_b64_before.json" "$dfx/vit_b16_b64_after.json" --format json
expect_ok "diff: kernels that appeared" "cudnn_generated_fort_native_sdpa.* appeared" \
  diff "$dfx/vit_b16_b64_before.json" "$dfx/vit_b16_b64_after.json"
"$TPROF" diff "$dfx/vit_b16_b64_before.json" "$dfx/vit_b16_b64_after.json" --out "$tmp/diff.md" \
  --html "$tmp/diff.html" >"$tmp/out" 2>&1
if [ -s "$tmp/out" ] && ! grep -q "written" "$tmp/out" || ! grep -q "<svg " "$tmp/diff.html" ||
  ! grep -q "appeared" "$tmp/diff.md"; then
  fail=$((fail + 1))
  echo "FAIL diff: --out and --html files"
else
  pass=$((pass + 1))
fi

# decoders: the prefill and the decode step matched as their own tests
"$TPROF" bench "${small[@]}" --model llama-tiny --prompt 16 --gen 8 --json "$tmp/dec_a.json" >/dev/null 2>&1
"$TPROF" bench "${small[@]}" --model llama-tiny --prompt 16 --gen 8 --json "$tmp/dec_b.json" >/dev/null 2>&1
expect_ok "diff: decoder runs, pp" "| B | llama-tiny fp32 | 1 | pp16 |" diff "$tmp/dec_a.json" "$tmp/dec_b.json"
expect_ok "diff: decoder runs, tg" "| B | llama-tiny fp32 | 1 | tg8 |" diff "$tmp/dec_a.json" "$tmp/dec_b.json"
expect_ok "diff: another model's results listed unmatched" "A: vit_base_patch16_224 fp16 batch 64 forward" \
  diff "$dfx/vit_b16_b64_after.json" "$tmp/dec_a.json"

# bad input
expect_error "diff: one file" 2 "two JSON files or more" diff "$dfx/vit_b16_b64_after.json"
expect_error "diff: unknown option" 2 "unknown option '--bogus'" diff "$dfx/vit_b16_b64_after.json" \
  "$dfx/vit_b16_b64_after.json" --bogus
expect_error "diff: bad --format" 2 "--format 'xml'" diff "$dfx/vit_b16_b64_after.json" \
  "$dfx/vit_b16_b64_after.json" --format xml
expect_error "diff: bad --fail-above" 2 "--fail-above '-1'" diff "$dfx/vit_b16_b64_after.json" \
  "$dfx/vit_b16_b64_after.json" --fail-above -1
expect_error "diff: bad --top" 2 "--top '0'" diff "$dfx/vit_b16_b64_after.json" "$dfx/vit_b16_b64_after.json" --top 0
expect_error "diff: missing file" 3 "nothere.json" diff "$dfx/vit_b16_b64_after.json" "$tmp/nothere.json"
printf '{"results": [' >"$tmp/cut.json"
expect_error "diff: a cut JSON file" 3 "cut.json: line 1" diff "$dfx/vit_b16_b64_after.json" "$tmp/cut.json"
echo '{"x": 1}' >"$tmp/other.json"
expect_error "diff: a JSON that is not tprof's" 3 "other.json: not a JSON of tprof bench, profile or compare" \
  diff "$dfx/vit_b16_b64_after.json" "$tmp/other.json"
mkfifo "$tmp/diff.fifo"
expect_error "diff: a FIFO is refused, not read" 3 "diff.fifo.*FIFO" diff "$dfx/vit_b16_b64_after.json" "$tmp/diff.fifo"
cp "$dfx/vit_b16_b64_after.json" "$tmp/in.json"
expect_error "diff: --out over an input" 2 "--out .*in.json is also an input" diff "$dfx/vit_b16_b64_before.json" \
  "$tmp/in.json" --out "$tmp/in.json"
expect_error "diff: --html into a missing folder" 2 "nofolder" diff "$dfx/vit_b16_b64_before.json" "$tmp/in.json" \
  --html "$tmp/nofolder/d.html"
