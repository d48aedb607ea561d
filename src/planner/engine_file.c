/* engine_file.c: the .tpe engine file of engine_file.h: writer, validating reader, and the way back to fp32
 * parameters.
 *
 * The file is untrusted input when read: every length, offset, count and dimension is checked before it is
 * used, sizes are computed with overflow checks, every allocation failure becomes TP_ERR_OOM, and every
 * message is one line (names from the file are shortened and control characters replaced). */
#include "planner/engine_file.h"
#include "core/files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <jansson.h>

#include "core/util.h"

#include "tp_build_info.h"

/* Tensor bytes go to and from the file as they lie in memory (f16/bf16 codes, packed elements, f32 scales),
 * which is the file's little-endian order only on a little-endian host. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "engine_file.c assumes a little-endian host");
#endif

/* Longest piece of a file-supplied name quoted in a message, so a hostile name cannot fill the 512 bytes. */
#define NAME_MAX_QUOTE 120

/* the largest GEMM choice: TP_GEMM_CHOICE_SM90_GROUP (cuda_engine.h; this file builds without CUDA) */
#define EF_MAX_ALGO 1006

/* ---- CRC-32 ------------------------------------------------------------------------------------------- */

uint32_t tp_crc32(uint32_t crc, const void *data, size_t n) {
    /* IEEE 802.3 / zlib CRC-32: reflected polynomial 0xEDB88320 (0x04C11DB7 bit-reversed), register initialized
     * to 0xFFFFFFFF and inverted at the end (the ~ on entry and exit, which also makes chaining work). The
     * byte table is rebuilt per call: 2048 steps, nothing next to the megabytes hashed, and no shared state
     * between threads. */
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

/* ---- messages ----------------------------------------------------------------------------------------- */

/* Replaces control characters in place, so that a path or a name with a newline keeps the message on one
 * line (jansson has already checked that the header's strings are valid UTF-8). */
static void one_line(char *s) {
    for (unsigned char *p = (unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7F) *p = '?';
}

/* A quotable copy of a file-supplied name: cut after NAME_MAX_QUOTE bytes on a character boundary, "..."
 * appended. Returns buf (NAME_MAX_QUOTE + 4 bytes). */
#define QBUF (NAME_MAX_QUOTE + 4)
static const char *quote(char *buf, const char *s) {
    size_t n = strlen(s);
    if (n <= NAME_MAX_QUOTE) {
        memcpy(buf, s, n + 1);
    } else {
        n = NAME_MAX_QUOTE;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--; /* do not cut a UTF-8 sequence */
        memcpy(buf, s, n);
        memcpy(buf + n, "...", 4);
    }
    one_line(buf);
    return buf;
}

/* File errors: "path: ..." on one line (tp_fail_path). */
#define ef_fail tp_fail_path

/* ---- little-endian integers --------------------------------------------------------------------------- */

static void put_le(unsigned char *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *b, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

static uint64_t align_up(uint64_t x) { return (x + TP_ENGINE_ALIGN - 1) / TP_ENGINE_ALIGN * TP_ENGINE_ALIGN; }

/* ---- sizes of a stored tensor ------------------------------------------------------------------------- */

/* Element and scale bytes of a tensor of shape (rows = numel / K, K = last dim) stored in format qf, as
 * tp_quantize lays them out with is_weight = 1 (qformat.c make_geom; fp8-block128 weights: 128 x 128 tiles).
 * For plain storage (TP_QF_NONE) *scale_bytes is 0 and *elem_bytes numel * element size. -1 on overflow. */
static int stored_bytes(tp_qformat qf, tp_dtype dt, int64_t numel, int64_t K, uint64_t *elem_bytes,
                        uint64_t *scale_bytes) {
    if (numel < 1 || K < 1 || numel % K) return -1;
    uint64_t n = (uint64_t)numel;
    if (qf == TP_QF_NONE) {
        uint64_t eb = tp_dtype_info(dt)->bytes;
        if (n > UINT64_MAX / 8 / eb) return -1;
        *elem_bytes = n * eb;
        *scale_bytes = 0;
        return 0;
    }
    const tp_qformat_traits *t = tp_qformat_info(qf);
    if (n > UINT64_MAX / 8) return -1;
    *elem_bytes = t->bits == 4 ? (n + 1) / 2 : n;
    uint64_t rows = n / (uint64_t)K, k = (uint64_t)K;
    uint64_t wr = t->block == 0 ? rows : (qf == TP_QF_FP8_BLOCK128 ? (uint64_t)t->weight_rows : 1);
    uint64_t bk = t->block == 0 ? k : (uint64_t)t->block;
    uint64_t nrb = (rows + wr - 1) / wr, nkb = (k + bk - 1) / bk;
    *scale_bytes = nrb * nkb * (t->scale == TP_F32 ? 4u : 1u); /* <= numel * 4: no overflow */
    return 0;
}

static int64_t shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

/* ---- writing ------------------------------------------------------------------------------------------ */

typedef struct {
    const tp_param *p;
    tp_qformat qf;
    tp_dtype dt;
    void *plain;    /* plain storage bytes */
    tp_qtensor q;   /* quantized storage */
    const void *elems;
    uint64_t elem_bytes, scale_bytes, off, soff;
    uint32_t crc, scrc;
} wtensor;

/* JSON building: each helper takes ownership of v (as jansson's *_new calls do) and sets *bad on failure, so
 * that a long sequence of fields needs one check at the end. */
static void jset(json_t *o, const char *k, json_t *v, int *bad) {
    if (!v || !o) {
        json_decref(v);
        *bad = 1;
        return;
    }
    if (json_object_set_new(o, k, v)) *bad = 1;
}

static void jappend(json_t *a, json_t *v, int *bad) {
    if (!v || !a) {
        json_decref(v);
        *bad = 1;
        return;
    }
    if (json_array_append_new(a, v)) *bad = 1;
}

static json_t *model_json(const tp_model *m, int *bad) {
    json_t *j = tp_model_to_json(m);
    if (!j) *bad = 1;
    return j;
}

static json_t *policy_json(const tp_policy *p, int *bad) {
    json_t *o = json_object(), *rows = json_array();
    jset(o, "default", json_string(tp_precision_name(p->def)), bad);
    for (int i = 0; i < p->n_rules; i++) {
        json_t *r = json_object();
        jset(r, "layers", json_string(p->rules[i].glob), bad);
        jset(r, "precision", json_string(tp_precision_name(p->rules[i].prec)), bad);
        jset(r, "_builtin", json_boolean(p->rules[i].builtin != 0), bad);
        jappend(rows, r, bad);
    }
    jset(o, "overrides", rows, bad);
    return o;
}

static const char *storage_name(const wtensor *t) {
    return t->qf != TP_QF_NONE ? tp_qformat_info(t->qf)->name : tp_dtype_info(t->dt)->name;
}

static json_t *gemm_json(const tp_engine_gemm_sel *gs, int *bad) {
    if (!gs) return json_null();
    json_t *o = json_object(), *a = json_array();
    jset(o, "gpu", json_string(gs->gpu), bad);
    jset(o, "cublaslt", json_integer(gs->cublaslt), bad);
    jset(o, "batch", json_integer(gs->batch), bad);
    if (gs->fp8_accum != TP_FP8_ACCUM_UNKNOWN)
        jset(o, "fp8_accum", json_string(gs->fp8_accum == TP_FP8_ACCUM_PROMOTE ? "promote" : "fast"), bad);
    for (int i = 0; i < gs->n_ops; i++) jappend(a, json_integer(gs->algo[i]), bad);
    jset(o, "algos", a, bad);
    return o;
}

static json_t *header_json(const tp_model *cfg, tp_precision prec, const tp_policy *pol, int sm,
                           const tp_graph *g, const tp_plan *plan, const float *act_amax, const wtensor *wt, int n,
                           uint64_t weight_bytes, const tp_engine_gemm_sel *gemm, int *bad) {
    json_t *root = json_object();
    jset(root, "tprof", json_string(TPROF_VERSION), bad);
    jset(root, "commit", json_string(TP_GIT_COMMIT), bad);
    jset(root, "model", model_json(cfg, bad), bad);
    jset(root, "precision", json_string(tp_precision_name(prec)), bad);
    jset(root, "policy", policy_json(pol, bad), bad);
    jset(root, "target_sm", json_integer(sm), bad);
    json_t *cal = json_object();
    for (int v = 0; act_amax && v < g->n_values; v++)
        if (g->values[v].kind != TP_VAL_PARAM && !isnan(act_amax[v]))
            jset(cal, g->values[v].name, json_real((double)act_amax[v]), bad);
    jset(root, "calibration", cal, bad);
    json_t *ops = json_array();
    for (int i = 0; i < g->n_ops; i++) {
        json_t *o = json_object();
        jset(o, "layer", json_string(g->ops[i].layer), bad);
        jset(o, "op", json_string(tp_op_kind_name(g->ops[i].kind)), bad);
        jset(o, "precision", json_string(tp_precision_name(plan->op_prec[i])), bad);
        jset(o, "how", json_string(plan->op_note[i]), bad);
        jset(o, "emulated", json_boolean(plan->op_emulated[i] != 0), bad);
        const int head = plan->prog.op_call[i];
        jset(o, "kernel", json_string(tp_call_kind_get(tp_program_kind(&plan->prog, i))->name), bad);
        jset(o, "fused_into", head != i ? json_string(g->ops[head].layer) : json_null(), bad);
        jappend(ops, o, bad);
    }
    jset(root, "ops", ops, bad);
    json_t *ts = json_array();
    for (int i = 0; i < n; i++) {
        const wtensor *t = &wt[i];
        json_t *o = json_object(), *shape = json_array();
        jset(o, "name", json_string(t->p->name), bad);
        jset(o, "storage", json_string(storage_name(t)), bad);
        for (int d = 0; d < t->p->ndim; d++) jappend(shape, json_integer(t->p->shape[d]), bad);
        jset(o, "shape", shape, bad);
        jset(o, "offset", json_integer((json_int_t)t->off), bad);
        jset(o, "bytes", json_integer((json_int_t)t->elem_bytes), bad);
        jset(o, "crc32", json_integer(t->crc), bad);
        if (t->qf != TP_QF_NONE) {
            jset(o, "scales_offset", json_integer((json_int_t)t->soff), bad);
            jset(o, "scales_bytes", json_integer((json_int_t)t->scale_bytes), bad);
            jset(o, "scales_crc32", json_integer(t->scrc), bad);
            jset(o, "global_scale", json_real((double)t->q.global_scale), bad);
        }
        jappend(ts, o, bad);
    }
    jset(root, "tensors", ts, bad);
    jset(root, "weight_bytes", json_integer((json_int_t)weight_bytes), bad);
    jset(root, "gemm_selection", gemm_json(gemm, bad), bad);
    return root;
}

/* How a parameter is stored (see tp_engine_file_write). */
static tp_status choose_storage(const char *path, const tp_plan *plan, int v, wtensor *t, tp_error *err) {
    char qn[QBUF];
    t->qf = plan->value_qf[v];
    if (t->qf != TP_QF_NONE) {
        if (!tp_qformat_info(t->qf))
            return ef_fail(err, TP_ERR_ARG, path, "parameter '%s': unknown quantized format %d",
                           quote(qn, t->p->name), (int)t->qf);
        t->dt = tp_qformat_info(t->qf)->elem;
        return TP_OK;
    }
    tp_dtype dt = plan->value_dt[v];
    if (dt == TP_E4M3) { /* fp8's weights: E4M3 with a per-tensor scale, i.e. the packed "fp8" format */
        t->qf = TP_QF_FP8_TENSOR;
        t->dt = TP_E4M3;
        return TP_OK;
    }
    if (dt != TP_F32 && dt != TP_F16 && dt != TP_BF16)
        return ef_fail(err, TP_ERR_ARG, path, "parameter '%s': storage %s has no engine-file form (f32, f16, bf16, "
                       "or a quantized format)", quote(qn, t->p->name),
                       tp_dtype_info(dt) ? tp_dtype_info(dt)->name : "?");
    t->dt = dt;
    return TP_OK;
}

/* Converts or quantizes one parameter into its stored bytes and checksums them. */
static tp_status encode_tensor(const char *path, wtensor *t, tp_error *err) {
    char qn[QBUF];
    const tp_param *p = t->p;
    if (t->qf != TP_QF_NONE) {
        const int64_t K = p->shape[p->ndim - 1];
        tp_error qe;
        tp_status s = tp_quantize(t->qf, p->data, p->numel / K, K, 1, 0.0f, &t->q, &qe);
        if (s) return ef_fail(err, s, path, "parameter '%s': %s", quote(qn, p->name), qe.msg);
        if (!isfinite(t->q.global_scale))
            return ef_fail(err, TP_ERR_ARG, path, "parameter '%s': non-finite weights (%s global scale %g)",
                           quote(qn, p->name), tp_qformat_info(t->qf)->name, (double)t->q.global_scale);
        t->elems = t->q.elems;
        t->elem_bytes = t->q.elem_bytes;
        t->scale_bytes = t->q.scale_bytes;
        t->crc = tp_crc32(0, t->q.elems, t->q.elem_bytes);
        t->scrc = tp_crc32(0, t->q.scales, t->q.scale_bytes);
        return TP_OK;
    }
    uint64_t eb, sb;
    if (stored_bytes(TP_QF_NONE, t->dt, p->numel, p->shape[p->ndim - 1], &eb, &sb) || eb > SIZE_MAX)
        return ef_fail(err, TP_ERR_ARG, path, "parameter '%s': too many elements", quote(qn, p->name));
    t->plain = malloc((size_t)eb);
    if (!t->plain)
        return ef_fail(err, TP_ERR_OOM, path, "out of host memory converting '%s' (%llu bytes)", quote(qn, p->name),
                       (unsigned long long)eb);
    tp_convert_from_f32(t->dt, p->data, t->plain, (size_t)p->numel, 1.0f);
    t->elems = t->plain;
    t->elem_bytes = eb;
    t->crc = tp_crc32(0, t->plain, (size_t)eb);
    return TP_OK;
}

static tp_status write_all(FILE *f, const void *p, uint64_t n, const char *path, const char *what, tp_error *err) {
    if (n && fwrite(p, 1, (size_t)n, f) != (size_t)n)
        return ef_fail(err, TP_ERR_IO, path, "cannot write the %s: %s", what, strerror(errno));
    return TP_OK;
}

/* Zero bytes from position *pos up to target. */
static tp_status write_pad(FILE *f, uint64_t *pos, uint64_t target, const char *path, tp_error *err) {
    static const unsigned char zeros[TP_ENGINE_ALIGN];
    while (*pos < target) {
        uint64_t k = target - *pos < sizeof zeros ? target - *pos : sizeof zeros;
        tp_status s = write_all(f, zeros, k, path, "padding", err);
        if (s) return s;
        *pos += k;
    }
    return TP_OK;
}

/* Matches each parameter with its graph value: vmap[p] = v, the first value naming it. Every parameter must appear,
 * with its shape, and every parameter value must name one; a parameter read through several values (a pipeline's
 * repeated steps) must be stored alike in each (one tensor in the file). */
static tp_status map_params(const char *path, const tp_params *params, const tp_graph *g, const tp_plan *plan,
                            int *vmap, tp_error *err) {
    char qn[QBUF];
    for (int i = 0; i < params->n_params; i++) vmap[i] = -1;
    for (int v = 0; v < g->n_values; v++) {
        const tp_value *val = &g->values[v];
        if (val->kind != TP_VAL_PARAM) continue;
        int pi = val->param_index;
        if (pi < 0 || pi >= params->n_params)
            return ef_fail(err, TP_ERR_SHAPE, path, "graph value '%s': parameter index %d out of range (%d parameters)",
                           quote(qn, val->name), pi, params->n_params);
        const int u = vmap[pi];
        if (u >= 0 && (plan->value_dt[u] != plan->value_dt[v] || plan->value_qf[u] != plan->value_qf[v] ||
                       plan->value_scaled[u] != plan->value_scaled[v]))
            return ef_fail(err, TP_ERR_UNSUPPORTED, path, "parameter '%s' is read through several graph values stored "
                           "differently by the plan (%s and %s): one tensor in the file cannot be both",
                           quote(qn, params->params[pi].name), tp_dtype_info(plan->value_dt[u])->name,
                           tp_dtype_info(plan->value_dt[v])->name);
        const tp_param *p = &params->params[pi];
        int same = p->ndim == val->ndim && strcmp(p->name, val->name) == 0;
        for (int d = 0; same && d < p->ndim; d++) same = p->shape[d] == val->shape[d];
        if (!same)
            return ef_fail(err, TP_ERR_SHAPE, path, "graph value '%s' does not match parameter '%s' (name or shape)",
                           quote(qn, val->name), p->name);
        if (u < 0) vmap[pi] = v;
    }
    for (int i = 0; i < params->n_params; i++) {
        const tp_param *p = &params->params[i];
        if (vmap[i] < 0)
            return ef_fail(err, TP_ERR_SHAPE, path, "parameter '%s' is not in the graph", quote(qn, p->name));
        if (p->ndim < 1 || p->ndim > TP_MAX_DIMS || shape_numel(p->ndim, p->shape) != p->numel)
            return ef_fail(err, TP_ERR_SHAPE, path, "parameter '%s': bad shape", quote(qn, p->name));
        if (!p->data) return ef_fail(err, TP_ERR_ARG, path, "parameter '%s' has no data", quote(qn, p->name));
    }
    return TP_OK;
}

tp_status tp_engine_file_write(const char *path, const tp_model *cfg, tp_precision prec, const tp_policy *pol,
                               int sm, const tp_params *params, const tp_graph *g, const tp_plan *plan,
                               const float *act_amax, const tp_engine_gemm_sel *gemm, tp_error *err) {
    if (!path || !*path) return tp_fail(err, TP_ERR_ARG, "engine file: no output path given");
    if (!cfg || !params || !g || !plan)
        return ef_fail(err, TP_ERR_ARG, path, "missing model configuration, parameters, graph or plan");
    tp_error ve;
    if (tp_model_validate(cfg, &ve)) return ef_fail(err, TP_ERR_ARG, path, "model: %s", ve.msg);
    if (plan->requested != prec)
        return ef_fail(err, TP_ERR_ARG, path, "the plan is for %s, the engine precision is %s",
                       tp_precision_name(plan->requested), tp_precision_name(prec));
    if (plan->sm != sm)
        return ef_fail(err, TP_ERR_ARG, path, "the plan is for sm %d, the target is sm %d", plan->sm, sm);
    if (plan->n_values != g->n_values || plan->n_ops != g->n_ops)
        return ef_fail(err, TP_ERR_ARG, path, "the plan (%d values, %d ops) is not the graph's (%d values, %d ops)",
                       plan->n_values, plan->n_ops, g->n_values, g->n_ops);
    if (gemm) {
        if (gemm->n_ops != g->n_ops || !gemm->algo || gemm->batch < 1 || gemm->cublaslt < 0)
            return ef_fail(err, TP_ERR_ARG, path, "GEMM selection: %d ops for a graph of %d, batch %d", gemm->n_ops,
                           g->n_ops, gemm->batch);
        if (gemm->fp8_accum < TP_FP8_ACCUM_UNKNOWN || gemm->fp8_accum > TP_FP8_ACCUM_PROMOTE)
            return ef_fail(err, TP_ERR_ARG, path, "GEMM selection: FP8 accumulation %d (expected -1, 0 or 1)",
                           gemm->fp8_accum);
        for (int i = 0; i < g->n_ops; i++)
            if (gemm->algo[i] < -1 || gemm->algo[i] > EF_MAX_ALGO)
                return ef_fail(err, TP_ERR_ARG, path, "GEMM selection: algorithm %d for op %s", gemm->algo[i],
                               g->ops[i].layer);
    }
    tp_policy policy;
    if (pol) policy = *pol;
    else tp_policy_default(&policy, prec);
    if (policy.def != prec)
        return ef_fail(err, TP_ERR_ARG, path, "the policy's default is %s, the engine precision %s",
                       tp_precision_name(policy.def), tp_precision_name(prec));
    if (act_amax)
        for (int v = 0; v < g->n_values; v++)
            if (g->values[v].kind != TP_VAL_PARAM && !isnan(act_amax[v]) && !(act_amax[v] >= 0 && isfinite(act_amax[v]))) {
                char qn[QBUF];
                return ef_fail(err, TP_ERR_ARG, path, "calibration: amax %g of '%s' is not a finite value >= 0",
                               (double)act_amax[v], quote(qn, g->values[v].name));
            }

    const int n = params->n_params;
    tp_status s = TP_OK;
    json_t *root = NULL;
    char *hdr = NULL;
    FILE *f = NULL;
    tp_outfile out = {0};
    int *vmap = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    wtensor *wt = calloc((size_t)(n > 0 ? n : 1), sizeof *wt);
    if (!vmap || !wt) {
        s = ef_fail(err, TP_ERR_OOM, path, "out of host memory");
        goto done;
    }
    if ((s = map_params(path, params, g, plan, vmap, err))) goto done;

    /* Encode every tensor first: the header that precedes the data holds their checksums. Offsets are relative
     * to the data section, so they do not depend on the header's length. */
    uint64_t off = 0, weight_bytes = 0;
    for (int i = 0; i < n; i++) {
        wtensor *t = &wt[i];
        t->p = &params->params[i];
        if ((s = choose_storage(path, plan, vmap[i], t, err))) goto done;
        if ((s = encode_tensor(path, t, err))) goto done;
        t->off = align_up(off);
        off = t->off + t->elem_bytes;
        if (t->qf != TP_QF_NONE) {
            t->soff = align_up(off);
            off = t->soff + t->scale_bytes;
        }
        weight_bytes += t->elem_bytes + t->scale_bytes;
    }

    int bad = 0;
    root = header_json(cfg, prec, &policy, sm, g, plan, act_amax, wt, n, weight_bytes, gemm, &bad);
    if (bad || !root) {
        s = ef_fail(err, TP_ERR_OOM, path, "out of host memory building the header");
        goto done;
    }
    hdr = json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(17));
    if (!hdr) {
        s = ef_fail(err, TP_ERR_OOM, path, "out of host memory serializing the header");
        goto done;
    }
    const uint64_t H = strlen(hdr);
    const uint64_t D = align_up(TP_ENGINE_PREFIX_BYTES + H + 4);
    unsigned char prefix[TP_ENGINE_PREFIX_BYTES], crcb[4];
    memcpy(prefix, TP_ENGINE_MAGIC, 8);
    put_le(prefix + 8, TP_ENGINE_VERSION, 4);
    put_le(prefix + 12, 0, 4);
    put_le(prefix + 16, H, 8);
    put_le(crcb, tp_crc32(0, hdr, (size_t)H), 4);

    /* written to a temporary file beside the target and renamed into place (core/files.h): an interrupted build
     * leaves the previous engine file whole */
    if ((s = tp_outfile_open(&out, path, "the engine file", err))) goto done;
    f = out.f;
    uint64_t pos = 0;
    if ((s = write_all(f, prefix, sizeof prefix, path, "file prefix", err))) goto done;
    if ((s = write_all(f, hdr, H, path, "header", err))) goto done;
    if ((s = write_all(f, crcb, 4, path, "header checksum", err))) goto done;
    pos = TP_ENGINE_PREFIX_BYTES + H + 4;
    for (int i = 0; i < n; i++) {
        const wtensor *t = &wt[i];
        if ((s = write_pad(f, &pos, D + t->off, path, err))) goto done;
        if ((s = write_all(f, t->elems, t->elem_bytes, path, "tensor data", err))) goto done;
        pos += t->elem_bytes;
        if (t->qf == TP_QF_NONE) continue;
        if ((s = write_pad(f, &pos, D + t->soff, path, err))) goto done;
        if ((s = write_all(f, t->q.scales, t->scale_bytes, path, "tensor scales", err))) goto done;
        pos += t->scale_bytes;
    }
    if (pos == TP_ENGINE_PREFIX_BYTES + H + 4 && (s = write_pad(f, &pos, D, path, err))) goto done; /* no tensors */
    f = NULL;
    s = tp_outfile_commit(&out, err); /* flushed and synced before the rename; a full disk shows here */

done:
    if (f) tp_outfile_abort(&out);
    free(hdr);
    json_decref(root);
    for (int i = 0; wt && i < n; i++) {
        free(wt[i].plain);
        tp_qtensor_free(&wt[i].q);
    }
    free(wt);
    free(vmap);
    return s;
}

/* ---- reading: JSON schema ----------------------------------------------------------------------------- */

/* What a field's message says: "<path>: <where>: '<key>' ...", where is "header", "model", "tensor 'x'"... */
typedef struct {
    const char *path;
    tp_error *err;
} rctx;

/* Fails unless every key of o is in keys (NULL-terminated); keys starting with '_' pass when allow_underscore. */
static tp_status check_keys(rctx *c, const json_t *o, const char *where, const char *const *keys,
                            int allow_underscore) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        int ok = allow_underscore && k[0] == '_';
        for (int i = 0; !ok && keys[i]; i++) ok = strcmp(k, keys[i]) == 0;
        if (!ok) {
            char qk[QBUF];
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: unknown key '%s'", where, quote(qk, k));
        }
    }
    return TP_OK;
}

static tp_status field(rctx *c, const json_t *o, const char *where, const char *key, json_type want,
                       const char *expect, const json_t **out) {
    const json_t *v = json_object_get(o, key);
    if (!v) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: '%s' is missing", where, key);
    int ok = json_typeof(v) == want || (want == JSON_TRUE && json_is_boolean(v)) ||
             (want == JSON_REAL && json_is_number(v));
    if (!ok) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: '%s' is %s, expected %s", where, key, tp_json_kind(v), expect);
    *out = v;
    return TP_OK;
}

static tp_status get_obj(rctx *c, const json_t *o, const char *where, const char *key, const json_t **out) {
    return field(c, o, where, key, JSON_OBJECT, "an object", out);
}

static tp_status get_arr(rctx *c, const json_t *o, const char *where, const char *key, const json_t **out) {
    return field(c, o, where, key, JSON_ARRAY, "an array", out);
}

static tp_status get_int(rctx *c, const json_t *o, const char *where, const char *key, int64_t lo, int64_t hi,
                         int64_t *out) {
    const json_t *v = NULL;
    tp_status s = field(c, o, where, key, JSON_INTEGER, "an integer", &v);
    if (s) return s;
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: '%s' is %lld, expected %lld..%lld", where, key,
                       (long long)x, (long long)lo, (long long)hi);
    *out = (int64_t)x;
    return TP_OK;
}

static tp_status get_i32(rctx *c, const json_t *o, const char *where, const char *key, int lo, int hi, int *out) {
    int64_t x = 0;
    tp_status s = get_int(c, o, where, key, lo, hi, &x);
    if (!s) *out = (int)x;
    return s;
}

static tp_status get_u32(rctx *c, const json_t *o, const char *where, const char *key, uint32_t *out) {
    int64_t x = 0;
    tp_status s = get_int(c, o, where, key, 0, UINT32_MAX, &x);
    if (!s) *out = (uint32_t)x;
    return s;
}

/* A number (integer or real) that must be finite; as_float: also finite once rounded to f32. */
static tp_status get_num(rctx *c, const json_t *o, const char *where, const char *key, int as_float, double *out) {
    const json_t *v = NULL;
    tp_status s = field(c, o, where, key, JSON_REAL, "a number", &v);
    if (s) return s;
    double x = json_number_value(v);
    if (!isfinite(x) || (as_float && !isfinite((float)x)))
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: '%s' is %g, expected a finite %s", where, key, x,
                       as_float ? "f32" : "number");
    *out = x;
    return TP_OK;
}

static tp_status get_bool(rctx *c, const json_t *o, const char *where, const char *key, int *out) {
    const json_t *v;
    tp_status s = field(c, o, where, key, JSON_TRUE, "a boolean", &v);
    if (!s) *out = json_is_true(v);
    return s;
}

/* A string of at most cap - 1 bytes into buf; longer ones are an error unless truncate. */
static tp_status get_str(rctx *c, const json_t *o, const char *where, const char *key, char *buf, size_t cap,
                         int truncate) {
    const json_t *v;
    tp_status s = field(c, o, where, key, JSON_STRING, "a string", &v);
    if (s) return s;
    const char *str = json_string_value(v);
    size_t len = json_string_length(v);
    if (strlen(str) != len) /* "\u0000" inside: C strings cannot hold it */
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: '%s' contains a NUL character", where, key);
    if (len >= cap && !truncate)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: '%s' is %zu bytes long, at most %zu", where, key, len,
                       cap - 1);
    snprintf(buf, cap, "%s", str);
    return TP_OK;
}

static tp_status get_prec(rctx *c, const json_t *o, const char *where, const char *key, tp_precision *out) {
    char name[32];
    tp_status s = get_str(c, o, where, key, name, sizeof name, 0);
    if (s) return s;
    tp_error pe;
    if (tp_precision_parse(name, out, &pe))
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: '%s': %s", where, key, pe.msg);
    return TP_OK;
}

/* The model through its family (models/model.h): version 3 names the family; versions 1 and 2 predate families and
 * hold a ViT's configuration. */
static tp_status parse_model(rctx *c, const json_t *m, uint32_t version, tp_model *model) {
    tp_error me = {0};
    tp_status s = tp_model_from_json(m, version < 3 ? "vit" : NULL, model, &me);
    if (s) return ef_fail(c->err, s == TP_ERR_OOM ? TP_ERR_OOM : TP_ERR_FORMAT, c->path, "%s", me.msg);
    return TP_OK;
}

/* The engine's policy, with the rules exactly as written ("_builtin" restores the builtin flag). */
static tp_status parse_policy(rctx *c, const json_t *o, tp_policy *p) {
    static const char *const keys[] = {"default", "overrides", NULL};
    static const char *const rkeys[] = {"layers", "precision", NULL};
    tp_status s;
    const json_t *ov;
    tp_precision def;
    if ((s = check_keys(c, o, "policy", keys, 1))) return s;
    if ((s = get_prec(c, o, "policy", "default", &def))) return s;
    tp_policy_init(p, def);
    if ((s = get_arr(c, o, "policy", "overrides", &ov))) return s;
    size_t i;
    const json_t *r;
    json_array_foreach(ov, i, r) {
        char w[64];
        snprintf(w, sizeof w, "policy.overrides[%zu]", i);
        if (!json_is_object(r))
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s is %s, expected an object", w, tp_json_kind(r));
        if ((s = check_keys(c, r, w, rkeys, 1))) return s;
        tp_precision prec;
        int builtin = 0;
        if ((s = get_prec(c, r, w, "precision", &prec))) return s;
        if (json_object_get(r, "_builtin") && (s = get_bool(c, r, w, "_builtin", &builtin))) return s;
        const json_t *l = json_object_get(r, "layers");
        if (!l) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: 'layers' is missing", w);
        size_t nl = json_is_array(l) ? json_array_size(l) : 1;
        if (!json_is_array(l) && !json_is_string(l))
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: 'layers' is %s, expected a glob string or an array "
                           "of them", w, tp_json_kind(l));
        if (nl == 0) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: 'layers' is an empty array", w);
        for (size_t j = 0; j < nl; j++) {
            const json_t *gl = json_is_array(l) ? json_array_get(l, j) : l;
            if (!json_is_string(gl) || strlen(json_string_value(gl)) != json_string_length(gl))
                return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: 'layers' entry %zu is not a glob string", w, j);
            tp_error ge;
            if (tp_policy_add(p, json_string_value(gl), prec, &ge))
                return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: %s", w, ge.msg);
            p->rules[p->n_rules - 1].builtin = builtin;
        }
    }
    return TP_OK;
}

static tp_status parse_calibration(rctx *c, const json_t *o, tp_engine_file *f) {
    size_t n = json_object_size(o);
    if (n == 0) return TP_OK;
    if (n > INT_MAX) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "calibration: too many entries");
    f->calib_names = calloc(n, sizeof *f->calib_names);
    f->calib_amax = calloc(n, sizeof *f->calib_amax);
    if (!f->calib_names || !f->calib_amax)
        return ef_fail(c->err, TP_ERR_OOM, c->path, "out of host memory for %zu calibration entries", n);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        char qk[QBUF];
        size_t len = strlen(k);
        if (len == 0 || len >= TP_NAME_LEN)
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "calibration: value name '%s' is %zu bytes, expected "
                           "1..%d", quote(qk, k), len, TP_NAME_LEN - 1);
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(x >= 0) || !isfinite((float)x))
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "calibration: '%s' is %s, expected a finite amax >= 0",
                           quote(qk, k), json_is_number(v) ? "out of range" : tp_json_kind(v));
        memcpy(f->calib_names[f->n_calib], k, len + 1);
        f->calib_amax[f->n_calib++] = (float)x;
    }
    return TP_OK;
}

/* An op's call in the writer's program (version 4): "kernel" a registry name, "fused_into" null or a layer name. */
static tp_status parse_op_program(rctx *c, const json_t *o, const char *w, tp_engine_op *op) {
    char kernel[40];
    tp_status s = get_str(c, o, w, "kernel", kernel, sizeof kernel, 1);
    if (s) return s;
    const int k = tp_call_kind_parse(kernel);
    if (k <= TP_CALL_NONE) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: unknown kernel '%s'", w, kernel);
    op->kernel = (tp_call_kind)k;
    const json_t *fi = json_object_get(o, "fused_into");
    if (json_is_null(fi)) return TP_OK;
    if (!json_is_string(fi))
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: 'fused_into' is %s, expected a layer name or null", w,
                       tp_json_kind(fi));
    return get_str(c, o, w, "fused_into", op->fused_into, sizeof op->fused_into, 0);
}

static tp_status parse_ops(rctx *c, const json_t *a, tp_engine_file *f) {
    static const char *const keys_v3[] = {"layer", "op", "precision", "how", "emulated", NULL};
    static const char *const keys[] = {"layer", "op", "precision", "how", "emulated", "kernel", "fused_into", NULL};
    const int program = f->version >= 4;
    size_t n = json_array_size(a);
    if (n == 0) return TP_OK;
    if (n > INT_MAX) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "ops: too many entries");
    f->ops = calloc(n, sizeof *f->ops);
    if (!f->ops) return ef_fail(c->err, TP_ERR_OOM, c->path, "out of host memory for %zu ops", n);
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(a, i);
        tp_engine_op *op = &f->ops[i];
        char w[48], kind[32];
        tp_status s;
        snprintf(w, sizeof w, "ops[%zu]", i);
        if (!json_is_object(o)) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s is %s, expected an object", w, tp_json_kind(o));
        if ((s = check_keys(c, o, w, program ? keys : keys_v3, 0))) return s;
        if ((s = get_str(c, o, w, "layer", op->layer, sizeof op->layer, 0))) return s;
        if ((s = get_str(c, o, w, "op", kind, sizeof kind, 1))) return s;
        int k = 0;
        while (k < TP_OP_KIND_COUNT && strcmp(kind, tp_op_kind_name((tp_op_kind)k)) != 0) k++;
        if (k == TP_OP_KIND_COUNT) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: unknown op kind '%s'", w, kind);
        op->kind = (tp_op_kind)k;
        if ((s = get_prec(c, o, w, "precision", &op->prec))) return s;
        if ((s = get_str(c, o, w, "how", op->how, sizeof op->how, 1))) return s;
        if ((s = get_bool(c, o, w, "emulated", &op->emulated))) return s;
        if (program && (s = parse_op_program(c, o, w, op))) return s;
        f->n_ops = (int)i + 1;
    }
    return TP_OK;
}

/* Where a tensor's regions lie (relative to the data section), before its data is read. */
typedef struct {
    uint64_t off, bytes, soff, sbytes;
    uint32_t crc, scrc;
} tregion;

static tp_status parse_tensor(rctx *c, const json_t *o, size_t i, tp_engine_tensor *t, tregion *r) {
    static const char *const pkeys[] = {"name", "storage", "shape", "offset", "bytes", "crc32", NULL};
    static const char *const qkeys[] = {"name", "storage", "shape", "offset", "bytes", "crc32", "scales_offset",
                                        "scales_bytes", "scales_crc32", "global_scale", NULL};
    char w[48 + QBUF], qn[QBUF];
    tp_status s;
    snprintf(w, sizeof w, "tensors[%zu]", i);
    if (!json_is_object(o)) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s is %s, expected an object", w, tp_json_kind(o));
    if ((s = get_str(c, o, w, "name", t->name, sizeof t->name, 0))) return s;
    if (!t->name[0]) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: empty name", w);
    snprintf(w, sizeof w, "tensor '%s'", quote(qn, t->name));
    char storage[32];
    if ((s = get_str(c, o, w, "storage", storage, sizeof storage, 1))) return s;
    int qf = tp_qformat_parse(storage);
    t->qf = qf > 0 ? (tp_qformat)qf : TP_QF_NONE;
    if (qf > 0) {
        t->dtype = tp_qformat_info(t->qf)->elem;
    } else if (strcmp(storage, "f32") == 0) {
        t->dtype = TP_F32;
    } else if (strcmp(storage, "f16") == 0) {
        t->dtype = TP_F16;
    } else if (strcmp(storage, "bf16") == 0) {
        t->dtype = TP_BF16;
    } else {
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: unknown storage '%s' (expected f32, f16, bf16, fp8, "
                       "fp8-block128, mxfp8, nvfp4 or mxfp4)", w, quote(qn, storage));
    }
    if ((s = check_keys(c, o, w, t->qf ? qkeys : pkeys, 0))) return s;
    const json_t *sh;
    if ((s = get_arr(c, o, w, "shape", &sh))) return s;
    size_t nd = json_array_size(sh);
    if (nd < 1 || nd > TP_MAX_DIMS)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: shape has %zu dimensions, expected 1..%d", w, nd,
                       TP_MAX_DIMS);
    t->ndim = (int)nd;
    for (size_t d = 0; d < nd; d++) {
        const json_t *e = json_array_get(sh, d);
        if (!json_is_integer(e) || json_integer_value(e) < 1)
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: shape[%zu] is %s, expected a positive integer", w, d,
                           json_is_integer(e) ? "not positive" : tp_json_kind(e));
        t->shape[d] = (int64_t)json_integer_value(e);
    }
    t->numel = shape_numel(t->ndim, t->shape);
    if (t->numel < 0) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: shape has too many elements", w);
    int64_t x;
    if ((s = get_int(c, o, w, "offset", 0, INT64_MAX, &x))) return s;
    r->off = (uint64_t)x;
    if ((s = get_int(c, o, w, "bytes", 0, INT64_MAX, &x))) return s;
    r->bytes = (uint64_t)x;
    if ((s = get_u32(c, o, w, "crc32", &r->crc))) return s;
    t->q.global_scale = 1.0f;
    if (t->qf) {
        if ((s = get_int(c, o, w, "scales_offset", 0, INT64_MAX, &x))) return s;
        r->soff = (uint64_t)x;
        if ((s = get_int(c, o, w, "scales_bytes", 0, INT64_MAX, &x))) return s;
        r->sbytes = (uint64_t)x;
        if ((s = get_u32(c, o, w, "scales_crc32", &r->scrc))) return s;
        double gs = 0;
        if ((s = get_num(c, o, w, "global_scale", 1, &gs))) return s;
        if (tp_qformat_info(t->qf)->global_scale ? !((float)gs > 0) : (float)gs != 1.0f)
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "%s: 'global_scale' is %g, expected %s", w, gs,
                           tp_qformat_info(t->qf)->global_scale ? "> 0" : "1 (the format has no global scale)");
        t->q.global_scale = (float)gs;
    }
    return TP_OK;
}

/* The byte counts the storage and shape imply (quantized: K = last dim, as the writer quantized it). Checked
 * after the shapes are known to be the model's, so that a wrong shape is reported as such. */
static tp_status check_sizes(rctx *c, const tp_engine_tensor *t, const tregion *r) {
    char qn[QBUF];
    const char *storage = t->qf ? tp_qformat_info(t->qf)->name : tp_dtype_info(t->dtype)->name;
    uint64_t eb, sb;
    if (stored_bytes(t->qf, t->dtype, t->numel, t->shape[t->ndim - 1], &eb, &sb) != 0)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s': shape has too many elements", quote(qn, t->name));
    if (r->bytes != eb)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s': 'bytes' is %llu, a %s tensor of %lld elements "
                       "has %llu", quote(qn, t->name), (unsigned long long)r->bytes, storage, (long long)t->numel,
                       (unsigned long long)eb);
    if (t->qf && r->sbytes != sb)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s': 'scales_bytes' is %llu, a %s tensor of this "
                       "shape has %llu", quote(qn, t->name), (unsigned long long)r->sbytes, storage,
                       (unsigned long long)sb);
    if (eb > SIZE_MAX || sb > SIZE_MAX)
        return ef_fail(c->err, TP_ERR_OOM, c->path, "tensor '%s': %llu bytes do not fit in memory", quote(qn, t->name),
                       (unsigned long long)eb);
    return TP_OK;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const tp_engine_tensor *const *)a)->name, (*(const tp_engine_tensor *const *)b)->name);
}

/* The tensors must be exactly the model's parameters: no duplicate, none missing, none extra, same shapes. */
static tp_status check_against_model(rctx *c, tp_engine_file *f) {
    char qn[QBUF];
    tp_params shapes;
    tp_error me;
    tp_status s = tp_model_params_shapes(&f->model, &shapes, &me);
    if (s) return ef_fail(c->err, s == TP_ERR_OOM ? TP_ERR_OOM : TP_ERR_FORMAT, c->path, "model: %s", me.msg);
    const tp_engine_tensor **sorted = malloc(sizeof *sorted * (size_t)(f->n_tensors > 0 ? f->n_tensors : 1));
    if (!sorted) {
        tp_params_free(&shapes);
        return ef_fail(c->err, TP_ERR_OOM, c->path, "out of host memory checking tensor names");
    }
    for (int i = 0; i < f->n_tensors; i++) sorted[i] = &f->tensors[i];
    qsort(sorted, (size_t)f->n_tensors, sizeof *sorted, cmp_tensor_name);
    for (int i = 1; i < f->n_tensors && !s; i++)
        if (strcmp(sorted[i]->name, sorted[i - 1]->name) == 0)
            s = ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s' appears twice", quote(qn, sorted[i]->name));
    char *seen = calloc((size_t)(f->n_tensors > 0 ? f->n_tensors : 1), 1);
    if (!seen && !s) s = ef_fail(c->err, TP_ERR_OOM, c->path, "out of host memory checking tensor names");
    for (int i = 0; i < shapes.n_params && !s; i++) {
        const tp_param *p = &shapes.params[i];
        tp_engine_tensor key;
        const tp_engine_tensor *kp = &key, **hit;
        memcpy(key.name, p->name, sizeof key.name);
        hit = bsearch(&kp, sorted, (size_t)f->n_tensors, sizeof *sorted, cmp_tensor_name);
        if (!hit) {
            s = ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s' of the model is missing", p->name);
            break;
        }
        seen[*hit - f->tensors] = 1;
        int same = (*hit)->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = (*hit)->shape[d] == p->shape[d];
        if (!same) s = ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s': shape differs from the model's", p->name);
    }
    if (!s && f->n_tensors != shapes.n_params) {
        /* every parameter was found and there are no duplicates, so the others are extra */
        for (int i = 0; i < f->n_tensors; i++)
            if (!seen[i]) {
                s = ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s' is not a parameter of the model (%d tensors, "
                            "the model has %d)", quote(qn, f->tensors[i].name), f->n_tensors, shapes.n_params);
                break;
            }
    }
    free(seen);
    free(sorted);
    tp_params_free(&shapes);
    return s;
}

/* "gemm_selection" (version 2): null, or its object with one algorithm index per op. */
static tp_status parse_gemm(rctx *c, const json_t *root, tp_engine_file *f) {
    static const char *const keys[] = {"gpu", "cublaslt", "batch", "algos", "fp8_accum", NULL};
    const char *w = "gemm_selection";
    const json_t *o = json_object_get(root, w), *a;
    tp_status s;
    if (!o) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "header: missing key 'gemm_selection'");
    if (json_is_null(o)) return TP_OK;
    if (!json_is_object(o))
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "header: 'gemm_selection' is %s, expected an object or null",
                       tp_json_kind(o));
    if ((s = check_keys(c, o, w, keys, 0))) return s;
    if ((s = get_str(c, o, w, "gpu", f->gemm.gpu, sizeof f->gemm.gpu, 1))) return s;
    if ((s = get_i32(c, o, w, "cublaslt", 0, INT_MAX, &f->gemm.cublaslt))) return s;
    if ((s = get_i32(c, o, w, "batch", 1, INT_MAX, &f->gemm.batch))) return s;
    f->gemm.fp8_accum = TP_FP8_ACCUM_UNKNOWN;
    if (json_object_get(o, "fp8_accum")) {
        char acc[16];
        if ((s = get_str(c, o, w, "fp8_accum", acc, sizeof acc, 0))) return s;
        if (strcmp(acc, "fast") != 0 && strcmp(acc, "promote") != 0)
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "gemm_selection: 'fp8_accum' is '%s', expected fast or "
                           "promote", acc);
        f->gemm.fp8_accum = strcmp(acc, "fast") == 0 ? TP_FP8_ACCUM_FAST : TP_FP8_ACCUM_PROMOTE;
    }
    if ((s = get_arr(c, o, w, "algos", &a))) return s;
    if (json_array_size(a) != (size_t)f->n_ops)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "gemm_selection: 'algos' has %zu entries for %d ops",
                       json_array_size(a), f->n_ops);
    f->gemm.algo = malloc(sizeof(int) * (size_t)(f->n_ops > 0 ? f->n_ops : 1));
    if (!f->gemm.algo) return ef_fail(c->err, TP_ERR_OOM, c->path, "out of host memory");
    for (int i = 0; i < f->n_ops; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > EF_MAX_ALGO)
            return ef_fail(c->err, TP_ERR_FORMAT, c->path, "gemm_selection: algos[%d] (%s) is %s, expected an integer "
                           "in -1..1002", i, f->ops[i].layer, json_is_integer(v) ? "out of range" : tp_json_kind(v));
        f->gemm.algo[i] = (int)json_integer_value(v);
    }
    f->gemm.n_ops = f->n_ops;
    f->has_gemm = 1;
    return TP_OK;
}

static tp_status parse_header(rctx *c, const json_t *root, tp_engine_file *f, tregion **regions) {
    static const char *const keys[] = {"tprof", "commit", "model", "precision", "policy", "target_sm",
                                       "calibration", "ops", "tensors", "weight_bytes", "gemm_selection", NULL};
    static const char *const keys_v1[] = {"tprof", "commit", "model", "precision", "policy", "target_sm",
                                          "calibration", "ops", "tensors", "weight_bytes", NULL};
    const char *w = "header";
    tp_status s;
    const json_t *o;
    if (!json_is_object(root))
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "the header is %s, expected an object", tp_json_kind(root));
    if ((s = check_keys(c, root, w, f->version == 1 ? keys_v1 : keys, 0))) return s;
    if ((s = get_str(c, root, w, "tprof", f->tprof_version, sizeof f->tprof_version, 1))) return s;
    if ((s = get_str(c, root, w, "commit", f->commit, sizeof f->commit, 1))) return s;
    if ((s = get_obj(c, root, w, "model", &o))) return s;
    if ((s = parse_model(c, o, f->version, &f->model))) return s;
    if ((s = get_prec(c, root, w, "precision", &f->precision))) return s;
    if ((s = get_obj(c, root, w, "policy", &o))) return s;
    if ((s = parse_policy(c, o, &f->policy))) return s;
    if (f->policy.def != f->precision)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "header: 'precision' is %s but the policy's default is %s",
                       tp_precision_name(f->precision), tp_precision_name(f->policy.def));
    if ((s = get_i32(c, root, w, "target_sm", 0, 1000, &f->target_sm))) return s;
    if ((s = get_obj(c, root, w, "calibration", &o))) return s;
    if ((s = parse_calibration(c, o, f))) return s;
    if ((s = get_arr(c, root, w, "ops", &o))) return s;
    if ((s = parse_ops(c, o, f))) return s;
    f->has_program = f->version >= 4;
    if (f->version >= 2 && (s = parse_gemm(c, root, f))) return s;
    int64_t wb;
    if ((s = get_int(c, root, w, "weight_bytes", 0, INT64_MAX, &wb))) return s;
    f->weight_bytes = (uint64_t)wb;
    if ((s = get_arr(c, root, w, "tensors", &o))) return s;
    size_t n = json_array_size(o);
    if (n == 0) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "header: 'tensors' is empty");
    if (n > INT_MAX) return ef_fail(c->err, TP_ERR_FORMAT, c->path, "header: too many tensors");
    f->tensors = calloc(n, sizeof *f->tensors);
    *regions = calloc(n, sizeof **regions);
    if (!f->tensors || !*regions) return ef_fail(c->err, TP_ERR_OOM, c->path, "out of host memory for %zu tensors", n);
    f->n_tensors = (int)n;
    for (size_t i = 0; i < n; i++)
        if ((s = parse_tensor(c, json_array_get(o, i), i, &f->tensors[i], &(*regions)[i]))) return s;
    if ((s = check_against_model(c, f))) return s;
    for (size_t i = 0; i < n; i++)
        if ((s = check_sizes(c, &f->tensors[i], &(*regions)[i]))) return s;
    return TP_OK;
}

/* ---- reading: the file -------------------------------------------------------------------------------- */

/* Reads n bytes at file offset off into a new buffer (malloc(0) avoided). */
static tp_status read_region(rctx *c, FILE *fp, uint64_t off, uint64_t n, const char *what, void **out) {
    void *b = malloc(n ? (size_t)n : 1);
    if (!b) return ef_fail(c->err, TP_ERR_OOM, c->path, "out of host memory for %s (%llu bytes)", what,
                           (unsigned long long)n);
    if (fseeko(fp, (off_t)off, SEEK_SET) != 0 || fread(b, 1, (size_t)n, fp) != (size_t)n) {
        int e = errno;
        free(b);
        return ef_fail(c->err, TP_ERR_IO, c->path, "cannot read %s: %s", what,
                       ferror(fp) ? strerror(e) : "early end of file (file changed while reading?)");
    }
    *out = b;
    return TP_OK;
}

/* Checks one region's place: 64-byte aligned, after the previous region (*cursor), inside the file. */
static tp_status check_region(rctx *c, const char *tname, const char *what, uint64_t off, uint64_t bytes,
                              uint64_t D, uint64_t fsize, uint64_t *cursor) {
    char qn[QBUF];
    if (off % TP_ENGINE_ALIGN)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s': %s offset %llu is not a multiple of %d",
                       quote(qn, tname), what, (unsigned long long)off, TP_ENGINE_ALIGN);
    if (off < *cursor)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "tensor '%s': %s offset %llu overlaps the previous region, "
                       "which ends at %llu", quote(qn, tname), what, (unsigned long long)off,
                       (unsigned long long)*cursor);
    if (off > UINT64_MAX - D - bytes || D + off + bytes > fsize)
        return ef_fail(c->err, TP_ERR_FORMAT, c->path, "truncated: tensor '%s' (%s) ends at byte %llu, file has %llu "
                       "bytes", quote(qn, tname), what,
                       off > UINT64_MAX - D - bytes ? (unsigned long long)UINT64_MAX : (unsigned long long)(D + off + bytes),
                       (unsigned long long)fsize);
    *cursor = off + bytes;
    return TP_OK;
}

void tp_engine_file_free(tp_engine_file *f) {
    if (!f) return;
    for (int i = 0; f->tensors && i < f->n_tensors; i++) {
        free(f->tensors[i].data);
        tp_qtensor_free(&f->tensors[i].q);
    }
    free(f->tensors);
    free(f->ops);
    free(f->calib_names);
    free(f->calib_amax);
    free(f->gemm.algo);
    memset(f, 0, sizeof *f);
}

tp_status tp_engine_file_read(const char *path, tp_engine_file *out, tp_error *err) {
    if (!out) return tp_fail(err, TP_ERR_ARG, "engine file: no output given");
    memset(out, 0, sizeof *out);
    if (!path || !*path) return tp_fail(err, TP_ERR_ARG, "engine file: no path given");
    rctx c = {path, err};
    tp_status s = TP_OK;
    unsigned char *hdr = NULL;
    json_t *root = NULL;
    tregion *regions = NULL;
    tp_engine_file *f = malloc(sizeof *f); /* parsed aside, so *out stays empty on error */
    if (!f) return ef_fail(err, TP_ERR_OOM, path, "out of host memory");
    memset(f, 0, sizeof *f);
    FILE *fp = tp_input_open(path, "the engine file", err);
    if (!fp) {
        free(f);
        return err ? err->code : TP_ERR_IO;
    }
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        s = ef_fail(err, TP_ERR_IO, path, "cannot stat: %s", strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        s = ef_fail(err, TP_ERR_IO, path, "not a regular file");
        goto done;
    }
    const uint64_t fsize = (uint64_t)sb.st_size;
    f->file_bytes = fsize;

    /* The fixed prefix: magic, version, reserved, header length. */
    unsigned char pre[TP_ENGINE_PREFIX_BYTES];
    size_t got = fread(pre, 1, sizeof pre, fp);
    if (got < sizeof pre && ferror(fp)) {
        s = ef_fail(err, TP_ERR_IO, path, "cannot read: %s", strerror(errno));
        goto done;
    }
    if (got == 0) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "empty file, not a tprof engine file");
        goto done;
    }
    if (memcmp(pre, TP_ENGINE_MAGIC, got < 8 ? got : 8) != 0) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "not a tprof engine file (the first bytes are not \"TPRFENG\\0\")");
        goto done;
    }
    if (got < sizeof pre) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "truncated: %zu bytes, shorter than the %d-byte file prefix", got,
                    TP_ENGINE_PREFIX_BYTES);
        goto done;
    }
    const uint32_t version = (uint32_t)get_le(pre + 8, 4), reserved = (uint32_t)get_le(pre + 12, 4);
    const uint64_t H = get_le(pre + 16, 8);
    if (version < TP_ENGINE_MIN_VERSION || version > TP_ENGINE_VERSION) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "engine file version %u, this tprof reads versions %u to %u (rebuild "
                    "the engine with this tprof)", version, TP_ENGINE_MIN_VERSION, TP_ENGINE_VERSION);
        goto done;
    }
    f->version = version;
    if (reserved != 0) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "reserved prefix field is %u, expected 0 (file corrupted)", reserved);
        goto done;
    }
    if (H < 2 || H > TP_ENGINE_MAX_HEADER) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "header length %llu out of range 2..%llu (file corrupted)",
                    (unsigned long long)H, (unsigned long long)TP_ENGINE_MAX_HEADER);
        goto done;
    }
    if (TP_ENGINE_PREFIX_BYTES + H + 4 > fsize) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "truncated: the header and its checksum end at byte %llu, file has "
                    "%llu bytes", (unsigned long long)(TP_ENGINE_PREFIX_BYTES + H + 4), (unsigned long long)fsize);
        goto done;
    }
    hdr = malloc((size_t)H + 4);
    if (!hdr) {
        s = ef_fail(err, TP_ERR_OOM, path, "out of host memory for the %llu-byte header", (unsigned long long)H);
        goto done;
    }
    if (fread(hdr, 1, (size_t)H + 4, fp) != (size_t)H + 4) {
        s = ef_fail(err, TP_ERR_IO, path, "cannot read the header: %s",
                    ferror(fp) ? strerror(errno) : "early end of file (file changed while reading?)");
        goto done;
    }
    const uint32_t stored = (uint32_t)get_le(hdr + H, 4), computed = tp_crc32(0, hdr, (size_t)H);
    if (stored != computed) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "header checksum mismatch (file corrupted): stored 0x%08X, computed "
                    "0x%08X", stored, computed);
        goto done;
    }
    const uint64_t D = align_up(TP_ENGINE_PREFIX_BYTES + H + 4);
    if (D > fsize) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "truncated: the data section starts at byte %llu, file has %llu bytes",
                    (unsigned long long)D, (unsigned long long)fsize);
        goto done;
    }

    json_error_t je;
    root = json_loadb((const char *)hdr, (size_t)H, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "header: invalid JSON at line %d column %d: %s", je.line, je.column,
                    je.text);
        goto done;
    }
    free(hdr);
    hdr = NULL;
    if ((s = parse_header(&c, root, f, &regions))) goto done;

    /* Every region's place before any data is read, so a truncated file is reported as such at once. */
    uint64_t cursor = 0, sum = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const tp_engine_tensor *t = &f->tensors[i];
        const tregion *r = &regions[i];
        if ((s = check_region(&c, t->name, "elements", r->off, r->bytes, D, fsize, &cursor))) goto done;
        if (t->qf && (s = check_region(&c, t->name, "scales", r->soff, r->sbytes, D, fsize, &cursor))) goto done;
        sum += r->bytes + r->sbytes; /* each below the file size: no overflow */
    }
    if (D + cursor != fsize) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "%llu unexpected bytes after the last tensor, which ends at byte %llu "
                    "(file corrupted or appended to)", (unsigned long long)(fsize - D - cursor),
                    (unsigned long long)(D + cursor));
        goto done;
    }
    if (sum != f->weight_bytes) {
        s = ef_fail(err, TP_ERR_FORMAT, path, "header: 'weight_bytes' is %llu, the tensors hold %llu",
                    (unsigned long long)f->weight_bytes, (unsigned long long)sum);
        goto done;
    }

    for (int i = 0; i < f->n_tensors; i++) {
        tp_engine_tensor *t = &f->tensors[i];
        const tregion *r = &regions[i];
        char qn[QBUF], what[QBUF + 32];
        snprintf(what, sizeof what, "tensor '%s'", quote(qn, t->name));
        void *elems = NULL, *scales = NULL;
        if ((s = read_region(&c, fp, D + r->off, r->bytes, what, &elems))) goto done;
        uint32_t crc = tp_crc32(0, elems, (size_t)r->bytes);
        if (t->qf) {
            t->q.elems = elems; /* owned by t from here on */
            t->q.elem_bytes = (size_t)r->bytes;
        } else {
            t->data = elems;
        }
        t->bytes = (size_t)r->bytes;
        if (crc != r->crc) {
            s = ef_fail(err, TP_ERR_FORMAT, path, "%s: checksum mismatch (file corrupted): stored 0x%08X, computed "
                        "0x%08X", what, r->crc, crc);
            goto done;
        }
        if (!t->qf) continue;
        if ((s = read_region(&c, fp, D + r->soff, r->sbytes, what, &scales))) goto done;
        t->q.scales = scales;
        t->q.scale_bytes = (size_t)r->sbytes;
        t->q.format = t->qf;
        t->q.K = t->shape[t->ndim - 1];
        t->q.rows = t->numel / t->q.K;
        crc = tp_crc32(0, scales, (size_t)r->sbytes);
        if (crc != r->scrc) {
            s = ef_fail(err, TP_ERR_FORMAT, path, "%s: scales checksum mismatch (file corrupted): stored 0x%08X, "
                        "computed 0x%08X", what, r->scrc, crc);
            goto done;
        }
    }

done:
    fclose(fp);
    free(hdr);
    free(regions);
    json_decref(root);
    if (s == TP_OK) *out = *f;
    else tp_engine_file_free(f);
    free(f);
    return s;
}

/* ---- back to parameters ------------------------------------------------------------------------------- */

const tp_engine_tensor *tp_engine_file_find(const tp_engine_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

tp_status tp_engine_file_params(const tp_engine_file *f, tp_params *out, tp_error *err) {
    memset(out, 0, sizeof *out);
    tp_status s = tp_model_params_shapes(&f->model, out, err);
    if (s) return s;
    for (int i = 0; i < out->n_params; i++) {
        tp_param *p = &out->params[i];
        /* the file's order is the model's, so the direct guess almost always hits */
        const tp_engine_tensor *t = i < f->n_tensors && strcmp(f->tensors[i].name, p->name) == 0
                                        ? &f->tensors[i]
                                        : tp_engine_file_find(f, p->name);
        int same = t && t->ndim == p->ndim && t->numel == p->numel;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            s = tp_fail(err, TP_ERR_FORMAT, "engine file: tensor '%s' is missing or has another shape", p->name);
            break;
        }
        p->data = malloc(sizeof(float) * (size_t)p->numel);
        if (!p->data) {
            s = tp_fail(err, TP_ERR_OOM, "out of host memory decoding '%s' (%lld values)", p->name,
                        (long long)p->numel);
            break;
        }
        if (t->qf) {
            if ((s = tp_dequantize(&t->q, p->data, err))) break;
        } else {
            tp_convert_to_f32(t->dtype, t->data, p->data, (size_t)p->numel, 1.0f);
        }
    }
    if (s) tp_params_free(out);
    return s;
}

int tp_engine_file_program_diff(const tp_engine_file *f, const tp_graph *g, const tp_plan *plan, char *msg, size_t n) {
    if (n) msg[0] = 0;
    if (!f->has_program || f->n_ops != g->n_ops) return -1;
    const tp_program *prog = &plan->prog;
    int first = -1, stored_calls = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const int head = prog->op_call[i];
        const char *into = head != i ? g->ops[head].layer : "";
        stored_calls += f->ops[i].fused_into[0] == 0;
        if (first < 0 && (f->ops[i].kernel != tp_program_kind(prog, i) || strcmp(f->ops[i].fused_into, into) != 0))
            first = i;
    }
    if (first < 0) return 0;
    const tp_engine_op *o = &f->ops[first];
    const int head = prog->op_call[first];
    snprintf(msg, n, "%s: the file's %s%s%s, this run's %s%s%s; %d calls in the file's program, %d in this run's",
             g->ops[first].layer, tp_call_kind_get(o->kernel)->name, o->fused_into[0] ? " in the call of " : "",
             o->fused_into, tp_call_kind_get(tp_program_kind(prog, first))->name, head != first ? " in the call of " : "",
             head != first ? g->ops[head].layer : "", stored_calls, tp_program_n_calls(prog));
    return 1;
}

int tp_engine_file_calibration(const tp_engine_file *f, const tp_graph *g, float *act_amax) {
    int found = 0;
    for (int v = 0; v < g->n_values; v++) {
        act_amax[v] = NAN;
        for (int i = 0; i < f->n_calib; i++)
            if (strcmp(f->calib_names[i], g->values[v].name) == 0) {
                act_amax[v] = f->calib_amax[i];
                found++;
                break;
            }
    }
    return found;
}
