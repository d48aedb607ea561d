/* lint.c: the format rules of lint.h as one table, their fixes, the text report and the JSON. */
#include "lint/lint.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/util.h"
#include "formats/precision.h"
#include "planner/supports.h"

/* ---- small helpers ---------------------------------------------------------------------------------- */

#define DETAIL(c, ...) tp_append((c)->detail, sizeof (c)->detail, __VA_ARGS__)
#define FIX(c, ...) tp_append((c)->fix, sizeof (c)->fix, __VA_ARGS__)

static void value(tp_lint_check *c, const char *name, int64_t v) {
    CHECK(c->n_values < TP_LINT_MAX_VALUES);
    snprintf(c->values[c->n_values].name, sizeof c->values[0].name, "%s", name);
    c->values[c->n_values++].v = v;
}

static int64_t ceil_to(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The layer name without the "blocks.*." prefix: "attn.qkv", "patch_embed.proj". */
static const char *short_layer(const char *l) { return strncmp(l, "blocks.*.", 9) == 0 ? l + 9 : l; }

/* ---- formats ---------------------------------------------------------------------------------------- */

static void format_init(tp_lint_format *f, tp_precision p) {
    memset(f, 0, sizeof *f);
    f->prec = p;
    f->qf = tp_precision_info(p)->lint_qf;
    const tp_qformat_traits *t = tp_qformat_info(f->qf);
    CHECK(t != NULL);
    f->block = f->qf == TP_QF_NONE ? 0 : t->block;
    f->bits = f->qf != TP_QF_NONE ? t->bits : p == TP_PREC_FP32 ? 32 : 16;
}

static int quantized(const tp_lint_format *f) { return f->qf != TP_QF_NONE; }

/* N-A with the reason: no block along K (per tensor), or not quantized at all. */
static int not_blocked(const tp_lint_format *f, tp_lint_check *c) {
    if (f->block) return 0;
    c->status = TP_LINT_NA;
    DETAIL(c, quantized(f) ? "%s scales per tensor: no block along K" : "%s is not quantized: no block",
           tp_precision_name(f->prec));
    return 1;
}

static int not_quantized(const tp_lint_format *f, tp_lint_check *c) {
    if (quantized(f)) return 0;
    c->status = TP_LINT_NA;
    DETAIL(c, "%s is not quantized", tp_precision_name(f->prec));
    return 1;
}

/* A fix in the family's own knobs (tp_family.fix), appended to the check's */
static void family_fix(const tp_lint_model *m, tp_fix_kind kind, int block, int mult, tp_lint_check *c) {
    char buf[sizeof c->fix] = "";
    m->model.family->fix(m->model.cfg.bytes, &m->sh, kind, block, mult, buf, sizeof buf);
    FIX(c, "%s", buf);
}

/* ---- the rules ------------------------------------------------------------------------------------------ */

#define BLOCK_SOURCE                                                                                           \
    "OCP Microscaling Formats (MX) v1.0 section 5 (MXFP8/MXFP4: 32-element blocks along the reduction "       \
    "dimension); NVIDIA NVFP4: 16-element blocks (TensorRT Model Optimizer nvfp4_tensor.py, cuBLASLt "         \
    "VEC16_UE4M3); FP8 block-128: 1x128 activation blocks (DeepSeek-V3 arXiv:2412.19437, cuBLASLt VEC128_32F)"

enum { R_SEQ, R_HEAD_DIM, R_CLASS_TOKEN, R_PATCH, R_K_BLOCK, R_ROW_ALIGN, R_KEPT_HIGH, R_LAYOUT, R_SPARSE, N_RULES };
_Static_assert(N_RULES == TP_LINT_N_RULES, "lint.h's rule count");

static const tp_lint_rule_info RULES[N_RULES] = {
    [R_SEQ] = {"attn.seq_block", "attention",
               "attention sequence length T (the keys) a multiple of the block: P V contracts over T, and block "
               "scales run along the contraction",
               BLOCK_SOURCE},
    [R_HEAD_DIM] = {"attn.head_dim_block", "attention",
                    "head dim D = embed_dim / heads a multiple of the block: Q K^T contracts over D",
                    BLOCK_SOURCE},
    [R_CLASS_TOKEN] = {"attn.class_token", "attention",
                       "no class token: it makes T = patches + 1, and a square number of patches plus one is never "
                       "a multiple of 16 (squares mod 16 are 0, 1, 4, 9), so no block format's T rule can hold",
                       "arithmetic; timm VisionTransformer (class_token=False, global_pool='avg')"},
    [R_PATCH] = {"model.patch_divides_image", "model",
                 "image size a multiple of the patch size: the patch embedding (a stride-P convolution) would crop "
                 "the remainder, and tprof refuses such a model",
                 "timm PatchEmbed (strict_img_size); the ViT family's validation (src/models/vit.c)"},
    [R_K_BLOCK] = {"gemm.k_block", "gemm",
                   "K of every Linear layer in the blocks (qkv, proj, fc1: embed dim; fc2: mlp hidden) a multiple "
                   "of the block: block-scaled GEMMs take no partial block, and tprof's planner refuses one",
                   BLOCK_SOURCE "; cuBLASLt block-scaled matmul (K a multiple of the scale block); "
                   "src/planner/plan.c"},
    [R_ROW_ALIGN] = {"gemm.row_align", "gemm",
                     "16-byte rows for the low-precision operands of the blocks' GEMMs: K x bits / 8 a multiple "
                     "of 16 bytes (K % 16 at 8 bits, K % 32 at 4 bits), and N a multiple of 16",
                     "cuBLAS documentation, cublasLtMatmul: FP8 and block-scaled (Blackwell) operands need "
                     "16-byte-aligned leading dimensions; PyTorch torch._scaled_mm checks K and N % 16"},
    [R_KEPT_HIGH] = {"gemm.kept_high", "gemm",
                     "the K and N checks for the layers tprof's default policy keeps in fp16/bf16 (patch "
                     "embedding, head): a WARN, since they matter only if a --policy quantizes them",
                     "tprof's default policy (src/planner/policy.c: patch_embed.proj=fp16, head=fp16)"},
    [R_LAYOUT] = {"attn.layout", "attention",
                  "attention reads the fused qkv output (B, T, 3, H, D) in place as B*H strided [T, D] matrices "
                  "(the [B*H, S, D] layout, no transpose copy); tprof's CUDA kernel holds D <= 128",
                  "timm Attention.forward (qkv.reshape(B, N, 3, H, D)); src/exec/cuda/kernels/kernels.h tpk_attention"},
    [R_SPARSE] = {"gemm.sparse_24", "gemm",
                  "for --sparsity 2:4: N and K of every Linear layer in the blocks multiples of 16, the 16-bit "
                  "structured operand cuSPARSELt takes (a WARN: a layer that cannot stays dense, named)",
                  "PyTorch's cuSPARSELt backend (torch/sparse/semi_structured.py: 16 x 16 for fp16/bf16) and "
                  "cuSPARSELt's own size checks; src/exec/cuda/vendor/sparse_cusparselt.h"},
};

const tp_lint_rule_info *tp_lint_rules(void) { return RULES; }

/* Appends "x = q x b" or "x % b = r" to the detail; 1 when x is a multiple of b. */
static int multiple(tp_lint_check *c, int64_t x, int64_t b) {
    if (x % b == 0) {
        DETAIL(c, "%lld = %lld x %lld", (long long)x, (long long)(x / b), (long long)b);
        return 1;
    }
    DETAIL(c, "%lld %% %lld = %lld", (long long)x, (long long)b, (long long)(x % b));
    return 0;
}

static void rule_seq(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    if (not_blocked(f, c)) return;
    const int T = m->sh.tokens, b = f->block;
    value(c, "T", T);
    value(c, "patches", m->sh.patches);
    value(c, "class_tokens", m->sh.extra_tokens);
    value(c, "block", b);
    DETAIL(c, "%s; ", m->sh.tokens_how);
    if (multiple(c, T, b)) return;
    c->status = TP_LINT_FAIL;
    family_fix(m, TP_FIX_SEQ_BLOCK, b, 0, c);
    /* padding is exact when the padded keys are masked to -inf before the softmax; it costs the square */
    const int64_t Tp = ceil_to(T, b);
    value(c, "T_padded", Tp);
    FIX(c, "; or pad the sequence to %lld keys and mask the padding (+%.1f%% attention FLOP: (%lld^2 - %d^2) / %d^2)",
        (long long)Tp, 100.0 * ((double)Tp * Tp - (double)T * T) / ((double)T * T), (long long)Tp, T, T);
}

static void rule_head_dim(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    if (not_blocked(f, c)) return;
    const int D = m->sh.head_dim, b = f->block;
    value(c, "D", D);
    value(c, "embed_dim", m->sh.embed_dim);
    value(c, "heads", m->sh.heads);
    value(c, "block", b);
    if ((int64_t)D * m->sh.heads == m->sh.embed_dim) DETAIL(c, "D = %d / %d heads = %d; ", m->sh.embed_dim, m->sh.heads, D);
    else DETAIL(c, "D = %d (the model's head dim, %d heads over embed %d); ", D, m->sh.heads, m->sh.embed_dim);
    if (multiple(c, D, b)) return;
    c->status = TP_LINT_FAIL;
    family_fix(m, TP_FIX_HEAD_DIM, b, 0, c);
    /* zero columns of Q and K add nothing to Q K^T; V's zero columns give output columns that are dropped */
    const int64_t Dp = ceil_to(D, b);
    FIX(c, "; or zero-pad the head dim to %lld inside attention (exact; +%.0f%% attention FLOP)", (long long)Dp,
        100.0 * (double)(Dp - D) / D);
}

static void rule_class_token(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    if (not_blocked(f, c)) return;
    value(c, "class_tokens", m->sh.extra_tokens);
    if (!m->sh.patch_size) {
        c->status = TP_LINT_NA;
        DETAIL(c, "not an image model: no class token");
        return;
    }
    if (!m->sh.extra_tokens) {
        DETAIL(c, "no class token: T = %d patches", m->sh.patches);
        return;
    }
    DETAIL(c, "class token on: T = %d + %d = %d", m->sh.patches, m->sh.extra_tokens, m->sh.tokens);
    c->status = TP_LINT_FAIL;
    family_fix(m, TP_FIX_CLASS_TOKEN, f->block, 0, c);
}

static void rule_patch(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    (void)f;
    if (!m->sh.patch_size) {
        c->status = TP_LINT_NA;
        DETAIL(c, "no patch embedding");
        return;
    }
    const int S = m->sh.img_size, P = m->sh.patch_size;
    value(c, "img_size", S);
    value(c, "patch_size", P);
    if (multiple(c, S, P)) return;
    DETAIL(c, ": the last %d pixel rows and columns would be cropped (%d x %d patches)", S % P, m->sh.grid, m->sh.grid);
    c->status = TP_LINT_FAIL;
    family_fix(m, TP_FIX_PATCH, 0, 0, c);
}

/* Checks one dimension ('K' or 'N') of the GEMMs whose kept_high is `kept` against mult, one clause per
 * distinct size ("K = 768 (attn.qkv, attn.proj, mlp.fc1) = 24 x 32"); records each GEMM's size as a value
 * (unless `record` is 0); returns how many distinct sizes fail, and sets bit i of *failed for each failing
 * GEMM i. */
static int check_dim(const tp_lint_model *m, int kept, char dim, tp_dim_rule rule, int param, int record,
                     tp_lint_check *c, unsigned *failed) {
    int64_t mult64 = 0;
    tp_supports_dim(rule, 1, param, &mult64); /* the multiple the rule asks, for the detail */
    const int mult = (int)mult64;
    int bad = 0, first = 1;
    for (int i = 0; i < m->sh.n_gemms; i++) {
        const tp_model_gemm *gi = &m->sh.gemms[i];
        if (gi->kept_high != kept) continue;
        const int64_t x = dim == 'K' ? gi->k : gi->n;
        if (record) {
            char name[28];
            snprintf(name, sizeof name, "%s.%c", short_layer(gi->layer), dim);
            value(c, name, x);
        }
        int seen = 0; /* one clause per distinct size, at its first layer */
        for (int j = 0; j < i; j++)
            seen |= m->sh.gemms[j].kept_high == kept && (dim == 'K' ? m->sh.gemms[j].k : m->sh.gemms[j].n) == x;
        if (seen) continue;
        DETAIL(c, "%s%c = %lld (", first ? "" : ", ", dim, (long long)x);
        first = 0;
        for (int j = i, k = 0; j < m->sh.n_gemms; j++) {
            const tp_model_gemm *gj = &m->sh.gemms[j];
            if (gj->kept_high != kept || (dim == 'K' ? gj->k : gj->n) != x) continue;
            DETAIL(c, "%s%s", k++ ? ", " : "", short_layer(gj->layer));
            if (!tp_supports_dim(rule, x, param, NULL)) *failed |= 1u << j;
        }
        if (!tp_supports_dim(rule, x, param, NULL)) DETAIL(c, "): %lld %% %d = %lld", (long long)x, mult, (long long)(x % mult)), bad++;
        else DETAIL(c, ") = %lld x %d", (long long)(x / mult), mult);
    }
    return bad;
}

/* Elements per 16 bytes at the format's element width. */
static int row_elems(const tp_lint_format *f) { return 128 / f->bits; }

/* The multiple that satisfies gemm.k_block and gemm.row_align at once (K and N), so that the fix of one rule
 * does not break the other: 16 for fp8, 32 for mxfp8, nvfp4 and mxfp4, 128 for fp8-block. */
static int gemm_multiple(const tp_lint_format *f) {
    return (int)tp_lcm64(tp_lcm64(f->block ? f->block : 1, row_elems(f)), 16);
}

static void rule_k_block(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    if (not_blocked(f, c)) return;
    unsigned failed = 0;
    value(c, "block", f->block);
    if (!check_dim(m, 0, 'K', TP_DIM_K_BLOCK, f->block, 1, c, &failed)) return;
    c->status = TP_LINT_FAIL;
    family_fix(m, TP_FIX_GEMM_DIMS, f->block, gemm_multiple(f), c);
}

static void rule_row_align(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    if (not_quantized(f, c)) return;
    const int r = row_elems(f);
    unsigned failed = 0;
    value(c, "k_multiple", r);
    DETAIL(c, "%d-bit elements, %d per 16 bytes: ", f->bits, r);
    int bad = check_dim(m, 0, 'K', TP_DIM_ROW16, f->bits, 1, c, &failed);
    DETAIL(c, "; ");
    bad += check_dim(m, 0, 'N', TP_DIM_ROW16, 8, 1, c, &failed);
    if (!bad) return;
    c->status = TP_LINT_FAIL;
    /* N of the blocks' GEMMs is 3C, C or the mlp hidden size, so both dimensions come down to C and hidden */
    family_fix(m, TP_FIX_GEMM_DIMS, f->block, gemm_multiple(f), c);
}

static void rule_kept_high(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    if (not_quantized(f, c)) return;
    unsigned failed = 0;
    int bad = 0;
    if (f->block) {
        DETAIL(c, "block %d: ", f->block);
        bad += check_dim(m, 1, 'K', TP_DIM_K_BLOCK, f->block, 1, c, &failed);
        DETAIL(c, "; ");
    }
    DETAIL(c, "rows of %d: ", row_elems(f));
    bad += check_dim(m, 1, 'K', TP_DIM_ROW16, f->bits, !f->block, c, &failed);
    DETAIL(c, "; ");
    bad += check_dim(m, 1, 'N', TP_DIM_ROW16, 8, 1, c, &failed);
    if (!bad) return;
    c->status = TP_LINT_WARN;
    FIX(c, "keep ");
    for (int i = 0, k = 0; i < m->sh.n_gemms; i++)
        if (failed >> i & 1) FIX(c, "%s%s", k++ ? " and " : "", short_layer(m->sh.gemms[i].layer));
    FIX(c, " in fp16/bf16, as tprof's default policy does: a --policy that quantizes %s cannot run in %s",
        (failed & (failed - 1)) ? "them" : "it", tp_precision_name(f->prec));
}

static void rule_layout(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    (void)f;
    const int D = m->sh.head_dim, H = m->sh.heads, C = m->sh.embed_dim;
    if (!m->sh.packed_qkv) {
        c->status = TP_LINT_NA;
        DETAIL(c, "separate q, k, v (%d heads over %d KV heads): this rule checks the packed-qkv attention kernel", H,
               m->sh.kv_heads);
        return;
    }
    value(c, "T", m->sh.tokens);
    value(c, "H", H);
    value(c, "D", D);
    value(c, "row_stride", 3 * C);
    DETAIL(c, "qkv (B, %d, 3, %d, %d) read as B*%d [%d, %d] matrices with row stride %d; D = %d %s 128", m->sh.tokens,
           H, D, H, m->sh.tokens, D, 3 * C, D, D <= 128 ? "<=" : ">");
    if (D <= 128) return;
    c->status = TP_LINT_FAIL;
    int h = (C + 127) / 128;
    while (C % h || C / h > 128) h++; /* ends at h = C at the latest (D = 1) */
    FIX(c, "use --heads %d (head dim %d): the kernel keeps a row of D values per thread block", h, C / h);
}

static void rule_sparse(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c) {
    if (f->prec != TP_PREC_FP16 && f->prec != TP_PREC_BF16) {
        c->status = TP_LINT_NA;
        DETAIL(c, "%s: this rule checks the 16-bit sparse GEMMs (fp8's need multiples of 32)",
               tp_precision_name(f->prec));
        return;
    }
    unsigned failed = 0;
    int bad = check_dim(m, 0, 'K', TP_DIM_K_BLOCK, 16, 1, c, &failed);
    DETAIL(c, "; ");
    bad += check_dim(m, 0, 'N', TP_DIM_K_BLOCK, 16, 1, c, &failed);
    if (!bad) return;
    c->status = TP_LINT_WARN;
    FIX(c, "with --sparsity 2:4, ");
    for (int i = 0, k = 0; i < m->sh.n_gemms; i++)
        if (failed >> i & 1) FIX(c, "%s%s", k++ ? " and " : "", short_layer(m->sh.gemms[i].layer));
    FIX(c, " stay%s dense: make N and K multiples of 16 to let cuSPARSELt run %s", (failed & (failed - 1)) ? "" : "s",
        (failed & (failed - 1)) ? "them" : "it");
}

typedef void (*rule_fn)(const tp_lint_model *m, const tp_lint_format *f, tp_lint_check *c);
static const rule_fn RULE_FN[N_RULES] = {
    [R_SEQ] = rule_seq,         [R_HEAD_DIM] = rule_head_dim,   [R_CLASS_TOKEN] = rule_class_token,
    [R_PATCH] = rule_patch,     [R_K_BLOCK] = rule_k_block,     [R_ROW_ALIGN] = rule_row_align,
    [R_KEPT_HIGH] = rule_kept_high, [R_LAYOUT] = rule_layout,   [R_SPARSE] = rule_sparse,
};

/* ---- the model and the run ------------------------------------------------------------------------------ */

tp_status tp_lint_describe(const tp_model *model, tp_lint_model *m, tp_error *err) {
    memset(m, 0, sizeof *m);
    m->model = *model;
    return model->family->shapes(model->cfg.bytes, &m->sh, err);
}

tp_status tp_lint_run(const tp_lint_model *m, const tp_precision *precs, int n, tp_lint_result *out,
                      tp_error *err) {
    if (n < 1 || n > TP_PREC_COUNT)
        return tp_fail(err, TP_ERR_ARG, "--precision: give 1 to %d precisions, not %d", TP_PREC_COUNT, n);
    for (int i = 0; i < n; i++) {
        if ((unsigned)precs[i] >= TP_PREC_COUNT)
            return tp_fail(err, TP_ERR_ARG, "--precision: unknown precision %d", (int)precs[i]);
        for (int j = 0; j < i; j++)
            if (precs[j] == precs[i])
                return tp_fail(err, TP_ERR_ARG, "--precision: %s given twice", tp_precision_name(precs[i]));
    }
    memset(out, 0, sizeof *out);
    out->model = *m;
    out->n_formats = n;
    for (int i = 0; i < n; i++) {
        tp_lint_format *f = &out->formats[i];
        format_init(f, precs[i]);
        for (int r = 0; r < N_RULES; r++) {
            tp_lint_check *c = &f->checks[r];
            c->id = RULES[r].id;
            c->area = RULES[r].area;
            c->description = RULES[r].description;
            c->source = RULES[r].source;
            c->status = TP_LINT_PASS;
            RULE_FN[r](&out->model, f, c);
            f->n_pass += c->status == TP_LINT_PASS;
            f->n_fail += c->status == TP_LINT_FAIL;
            f->n_warn += c->status == TP_LINT_WARN;
            f->n_na += c->status == TP_LINT_NA;
        }
    }
    return TP_OK;
}

tp_status tp_lint(const tp_model *model, const tp_precision *precs, int n, tp_lint_result *out, tp_error *err) {
    tp_lint_model m;
    tp_status st = tp_lint_describe(model, &m, err);
    return st ? st : tp_lint_run(&m, precs, n, out, err);
}

int tp_lint_format_ok(const tp_lint_format *f) { return f->n_fail == 0; }

int tp_lint_ok(const tp_lint_result *r) {
    for (int i = 0; i < r->n_formats; i++)
        if (!tp_lint_format_ok(&r->formats[i])) return 0;
    return 1;
}

const char *tp_lint_status_name(tp_lint_status s) {
    static const char *N[] = {"PASS", "FAIL", "WARN", "N-A"};
    return (unsigned)s < 4 ? N[s] : "?";
}

void tp_lint_verdict(const tp_lint_format *f, char *buf, size_t n) {
    buf[0] = 0;
    const char *name = tp_precision_name(f->prec);
    if (tp_lint_format_ok(f)) {
        tp_append(buf, n, "%s: usable as asked: %d rule%s pass", name, f->n_pass, f->n_pass == 1 ? "" : "s");
        if (f->n_warn) tp_append(buf, n, ", %d warn%s (layers kept high)", f->n_warn, f->n_warn == 1 ? "s" : "");
        if (f->n_na) tp_append(buf, n, ", %d N-A", f->n_na);
        return;
    }
    /* what cannot run, by area, in the order of the table's areas */
    static const char *AREAS[][2] = {{"attention", "attention"}, {"gemm", "the GEMMs"}, {"model", "the model"}};
    tp_append(buf, n, "%s: ", name);
    int k = 0;
    for (int a = 0; a < 3; a++) {
        int hit = 0;
        for (int r = 0; r < N_RULES; r++)
            hit |= f->checks[r].status == TP_LINT_FAIL && strcmp(f->checks[r].area, AREAS[a][0]) == 0;
        if (hit) tp_append(buf, n, "%s%s", k++ ? " and " : "", AREAS[a][1]);
    }
    tp_append(buf, n, " cannot run as asked: %d rule%s (", f->n_fail, f->n_fail == 1 ? " fails" : "s fail");
    k = 0;
    for (int r = 0; r < N_RULES; r++)
        if (f->checks[r].status == TP_LINT_FAIL) tp_append(buf, n, "%s%s", k++ ? ", " : "", f->checks[r].id);
    tp_append(buf, n, ")");
}

/* ---- output --------------------------------------------------------------------------------------------- */

void tp_lint_print(const tp_lint_result *r, FILE *f) {
    const tp_lint_model *m = &r->model;
    fprintf(f, "tprof lint: %s (%s)\n", tp_model_name(&m->model), m->model.family->title);
    fprintf(f, "  %s\n", m->sh.tokens_how);
    fprintf(f, "  embed %d, %d heads", m->sh.embed_dim, m->sh.heads);
    if (m->sh.kv_heads && m->sh.kv_heads != m->sh.heads)
        fprintf(f, " (%d KV head%s)", m->sh.kv_heads, m->sh.kv_heads == 1 ? "" : "s");
    fprintf(f, " -> head dim %d; mlp hidden %d; depth %d\n", m->sh.head_dim, m->sh.mlp_hidden, m->sh.depth);
    fprintf(f, "  GEMMs (N x K):");
    for (int i = 0; i < m->sh.n_gemms; i++)
        fprintf(f, "%s %s %lld x %lld%s", i ? "," : "", short_layer(m->sh.gemms[i].layer), (long long)m->sh.gemms[i].n,
                (long long)m->sh.gemms[i].k, m->sh.gemms[i].kept_high ? " (kept high)" : "");
    fprintf(f, "\n\n%-26s %-10s %-6s %s\n", "rule", "format", "status", "detail");
    for (int i = 0; i < r->n_formats; i++) {
        const tp_lint_format *fm = &r->formats[i];
        for (int k = 0; k < N_RULES; k++) {
            const tp_lint_check *c = &fm->checks[k];
            fprintf(f, "%-26s %-10s %-6s %s\n", c->id, tp_precision_name(fm->prec), tp_lint_status_name(c->status),
                    c->detail);
            if (c->fix[0]) fprintf(f, "%-44s fix: %s\n", "", c->fix); /* under the detail column */
        }
    }
    fprintf(f, "\n");
    for (int i = 0; i < r->n_formats; i++) {
        char buf[512];
        tp_lint_verdict(&r->formats[i], buf, sizeof buf);
        fprintf(f, "%s\n", buf);
    }
}

/* JSON: json_pack's "o" and the *_new calls take ownership of their value even when they fail, and json_pack
 * returns NULL when out of memory, so one flag at the end covers every allocation. */
static json_t *check_json(const tp_lint_check *c, int *oom) {
    json_t *vals = json_object();
    for (int i = 0; i < c->n_values; i++)
        *oom |= json_object_set_new(vals, c->values[i].name, json_integer(c->values[i].v)) != 0;
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s?,s:o}", "id", c->id, "area", c->area, "description",
                     c->description, "source", c->source, "status", tp_lint_status_name(c->status), "detail",
                     c->detail, "fix", c->fix[0] ? c->fix : NULL, "values", vals);
}

static json_t *format_json(const tp_lint_format *f, int *oom) {
    json_t *rules = json_array();
    for (int r = 0; r < N_RULES; r++) *oom |= json_array_append_new(rules, check_json(&f->checks[r], oom)) != 0;
    char verdict[512];
    tp_lint_verdict(f, verdict, sizeof verdict);
    return json_pack("{s:s,s:s,s:i,s:i,s:b,s:s,s:{s:i,s:i,s:i,s:i},s:o}", "precision", tp_precision_name(f->prec),
                     "qformat", tp_qformat_info(f->qf)->name, "block", f->block, "element_bits", f->bits, "usable",
                     tp_lint_format_ok(f), "verdict", verdict, "counts", "pass", f->n_pass, "fail", f->n_fail, "warn",
                     f->n_warn, "na", f->n_na, "rules", rules);
}

json_t *tp_lint_json(const tp_lint_result *r) {
    int oom = 0;
    const tp_lint_model *m = &r->model;
    /* the model's keys are those of `tprof bench --json` and engine files (tp_model_to_json) */
    json_t *model = tp_model_to_json(&m->model);
    oom |= !model;
    json_t *gemms = json_array(), *formats = json_array();
    for (int i = 0; i < m->sh.n_gemms; i++) {
        const tp_model_gemm *g = &m->sh.gemms[i];
        oom |= json_array_append_new(gemms, json_pack("{s:s,s:I,s:I,s:b}", "layer", g->layer, "n", (json_int_t)g->n,
                                                      "k", (json_int_t)g->k, "kept_high", g->kept_high)) != 0;
    }
    for (int i = 0; i < r->n_formats; i++)
        oom |= json_array_append_new(formats, format_json(&r->formats[i], &oom)) != 0;
    json_t *root = json_pack("{s:s,s:b,s:o,s:i,s:i,s:i,s:i,s:o,s:o}", "tool", "tprof lint " TPROF_VERSION, "ok",
                             tp_lint_ok(r), "model", model, "grid", m->sh.grid, "patches", m->sh.patches, "tokens",
                             m->sh.tokens, "head_dim", m->sh.head_dim, "gemms", gemms, "formats", formats);
    if (oom || !root) {
        json_decref(root);
        return NULL;
    }
    return root;
}

tp_status tp_lint_write_json(const tp_lint_result *r, const char *path, tp_error *err) {
    json_t *j = tp_lint_json(r);
    if (!j) return tp_fail(err, TP_ERR_OOM, "out of memory writing the lint JSON");
    tp_status st = tp_json_write_file(j, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER, "the lint JSON", err);
    json_decref(j);
    return st;
}
