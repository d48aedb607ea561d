/* fuzz_readers.c: libFuzzer harnesses for every reader of outside input (issue 23), one binary per reader, chosen
 * at compile time by TP_FUZZ_READER (tests/fuzz/CMakeLists.txt):
 *   1 safetensors (tp_st_open)            2 engine file (tp_engine_file_read)
 *   3 engine file with a valid header CRC (the input becomes the header JSON of a well-formed file, so the fuzzer
 *     reaches the JSON and schema checks instead of stopping at the checksum)
 *   4 policy JSON (tp_policy_load_json)   5 profile trace JSON (tp_trace_load)
 *   6 HF config.json (tp_hf_config_read)  7 timm config.json (tp_timm_config_read)
 *   8 token-id file (tp_tokens_read)      9 image (tp_image_load: PNG, JPEG, BMP through stb_image)
 *  10 HF sharded index (tp_hf_load_params on a model.safetensors.index.json naming two tiny tensors)
 *  11 ONNX model (tp_onnx_load; an external data file tiny_ext.onnx.data of 256 bytes beside it, the name the
 *     seed fixture tiny_ext.onnx uses, so external reads are reached)
 *  12 ONNX import (tp_onnx_import: the reader, then the architecture walk over what it read; seeded with the timm
 *     ViT and Llama exports of tests/fixtures/onnx_vit and onnx_llama)
 *  13 a run's JSON for tprof diff (tp_diff_load; then the run compared with itself and written as Markdown and
 *     JSON, so the matching, the statistics and the writers see whatever the reader accepted)
 * Every reader takes a path, so each input is written to a file first (the readers' own file handling is part of
 * what is fuzzed). A harness only checks that the reader returns, without a sanitizer report or a leak, and that a
 * failure comes with a one-line message; the readers' answers are the unit tests' business. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/hf_config.h"
#include "io/image.h"
#include "io/onnx.h"
#include "io/safetensors.h"
#include "io/timm_config.h"
#include "io/tokens.h"
#include "models/onnx_import.h"
#include "planner/engine_file.h"
#include "planner/policy.h"
#include "profile/trace.h"
#include "report/diff.h"

#ifndef TP_FUZZ_READER
#error "TP_FUZZ_READER must be defined (1..13)"
#endif

static char g_path[256], g_dir[256];

static void setup_paths(void) {
    if (g_path[0]) return;
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/tprof_fuzz_%d_%ld", t && *t ? t : "/tmp", TP_FUZZ_READER, (long)getpid());
    if (mkdir(g_dir, 0700) != 0) abort();
    snprintf(g_path, sizeof g_path, "%s/%s", g_dir,
             TP_FUZZ_READER == 6 || TP_FUZZ_READER == 7 ? "config.json"
             : TP_FUZZ_READER == 10                     ? "model.safetensors.index.json"
             : TP_FUZZ_READER == 11 || TP_FUZZ_READER == 12 ? "model.onnx"
                                                        : "input");
}

static void write_file(const char *path, const uint8_t *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(d, 1, n, f) != n) abort();
    fclose(f);
}

/* a failure must come with a message of one line */
static void check_err(tp_status st, const tp_error *e) {
    if (st == TP_OK) return;
    if (!e->msg[0] || strchr(e->msg, '\n')) abort();
}


#if TP_FUZZ_READER == 10
/* two tiny F32 tensors in one shard, the index being the fuzzed input */
static void write_shard(void) {
    static const char hdr[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    uint8_t buf[8 + sizeof hdr - 1 + 12];
    const uint64_t n = sizeof hdr - 1;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, hdr, n);
    memset(buf + 8 + n, 0, 12);
    char p[512];
    snprintf(p, sizeof p, "%s/model-00001-of-00001.safetensors", g_dir);
    write_file(p, buf, sizeof buf);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    setup_paths();
    tp_error e;
    memset(&e, 0, sizeof e);
    tp_status st = TP_OK;
#if TP_FUZZ_READER == 3
    /* engine_file.h's framing: magic, version 3, reserved 0, u64 header length, the header, its CRC-32, zeros up
     * to the next multiple of 64 (the data section follows: none here, so the reader checks the JSON against an
     * empty data section) */
    const size_t pad = (24 + n + 4 + 63) / 64 * 64;
    uint8_t *buf = calloc(pad, 1);
    if (!buf) return 0;
    memcpy(buf, TP_ENGINE_MAGIC, 8);
    const uint32_t ver = 3, crc = tp_crc32(0, d, n);
    const uint64_t len = n;
    memcpy(buf + 8, &ver, 4), memcpy(buf + 16, &len, 8);
    if (n) memcpy(buf + 24, d, n);
    memcpy(buf + 24 + n, &crc, 4);
    write_file(g_path, buf, pad);
    free(buf);
#else
    write_file(g_path, d, n);
#endif
#if TP_FUZZ_READER == 1
    tp_safetensors s;
    st = tp_st_open(g_path, &s, &e);
    if (st == TP_OK) tp_st_close(&s);
#elif TP_FUZZ_READER == 2 || TP_FUZZ_READER == 3
    tp_engine_file f;
    st = tp_engine_file_read(g_path, &f, &e);
    tp_engine_file_free(&f);
#elif TP_FUZZ_READER == 4
    tp_policy p;
    tp_policy_default(&p, TP_PREC_FP16);
    st = tp_policy_load_json(g_path, &p, &e);
#elif TP_FUZZ_READER == 5
    tp_trace t;
    tp_trace_init(&t);
    st = tp_trace_load(g_path, &t, &e);
    tp_trace_free(&t);
#elif TP_FUZZ_READER == 6
    tp_hf_config c;
    st = tp_hf_config_read(g_path, &c, &e);
#elif TP_FUZZ_READER == 7
    tp_timm_config c;
    st = tp_timm_config_read(g_path, &c, &e);
#elif TP_FUZZ_READER == 8
    float ids[64];
    int got = 0;
    st = tp_tokens_read(g_path, 1000, 64, ids, &got, &e);
#elif TP_FUZZ_READER == 9
    /* images up to 2^18 pixels (512 x 512): larger ones decode and resize for seconds under ASan, which stalled the
     * search (2026-11-26); the size check itself is fuzzed all the same */
    const tp_preprocess pp = {32, 0.875, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, TP_INTERP_BICUBIC, TP_CROP_CENTER, 0,
                              262144.0};
    float *dst = malloc(sizeof(float) * 3 * 32 * 32);
    if (!dst) return 0;
    st = tp_image_load(g_path, &pp, dst, &e);
    free(dst);
#elif TP_FUZZ_READER == 10
    static int shard_written;
    if (!shard_written) write_shard(), shard_written = 1;
    float a[2], b[1];
    const tp_param_spec specs[2] = {{"a", 1, {2}, a}, {"b", 1, {1}, b}};
    st = tp_hf_load_params(g_path, specs, 2, &e);
#elif TP_FUZZ_READER == 11
    static int ext_written;
    if (!ext_written) {
        uint8_t ext[256];
        for (int i = 0; i < 256; i++) ext[i] = (uint8_t)i;
        char p[512];
        snprintf(p, sizeof p, "%s/tiny_ext.onnx.data", g_dir);
        write_file(p, ext, sizeof ext);
        ext_written = 1;
    }
    tp_onnx_model *m = NULL;
    st = tp_onnx_load(g_path, &m, &e);
    tp_onnx_free(m);
#elif TP_FUZZ_READER == 12
    tp_model model;
    tp_params params;
    st = tp_onnx_import(g_path, &model, &params, NULL, &e);
    tp_params_free(&params);
#elif TP_FUZZ_READER == 13
    tp_diff_run runs[2] = {{0}, {0}};
    st = tp_diff_load(g_path, &runs[0], &e);
    if (!st) st = tp_diff_load(g_path, &runs[1], &e);
    if (!st) {
        tp_diff d;
        st = tp_diff_compute(runs, 2, 3, &d, &e);
        FILE *sink = fopen("/dev/null", "w");
        if (!st && sink) st = tp_diff_write(&d, TP_DIFF_MD, sink, &e);
        if (!st && sink) st = tp_diff_write(&d, TP_DIFF_JSON, sink, &e);
        if (sink) fclose(sink);
        tp_diff_free(&d);
    }
    tp_diff_run_free(&runs[0]);
    tp_diff_run_free(&runs[1]);
#else
#error "TP_FUZZ_READER out of range"
#endif
    check_err(st, &e);
    return 0;
}
