/* caps.c: the capability table of caps.h. The entries are derived by a few rules from the compute capability
 * rather than written out per architecture, so that an architecture outside the table (sm_80, a future sm_13x)
 * gets an answer by the same rules; tests/test_planner.c holds the explicit table they must reproduce.
 *
 * Why the emulations are exact (the reason they may be called by the format's name):
 *   MXFP8 -> BF16: an element is q * 2^e with q an E4M3 value (4 significant bits, a multiple of 2^-9) and
 *     e = floor(log2 amax) - 8 in [-127, 119]: at most 448 * 2^119 < BF16's max, 4 bits fit BF16's 8, and the
 *     product is a multiple of 2^(e-9), representable even as a BF16 subnormal (multiples of 2^-133) whenever
 *     e >= -124, i.e. for every block whose amax >= 2^-116. Smaller blocks flush exactly as BF16 storage would.
 *   NVFP4 -> BF16: q * s with q in E2M1 (2 significant bits) and s a UE4M3 scale (4 bits) has at most 6
 *     significant bits and lies in [2^-10, 2688]: always exact. The FP32 per-tensor scale s2 is not folded into
 *     the elements (that product would round) but into the GEMM's alpha, which multiplies the FP32 accumulator.
 *   MXFP4 -> BF16: q * 2^e, q a multiple of 0.5 up to 6, e in [-127, 125]: always exact. */
#include "planner/caps.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const tp_arch ARCHS[] = {
    {89, "Ada", "L4, L40S, RTX 4090"},
    {90, "Hopper", "H100, H200"},
    {100, "Blackwell", "B200, GB200"},
    {103, "Blackwell Ultra", "B300, GB300"},
    {110, "Blackwell", "Jetson Thor"},
    {120, "Blackwell", "RTX PRO 6000, RTX 50xx"},
    {121, "Blackwell", "DGX Spark GB10"},
};
#define N_ARCHS ((int)(sizeof ARCHS / sizeof ARCHS[0]))

const tp_arch *tp_caps_archs(int *n) {
    if (n) *n = N_ARCHS;
    return ARCHS;
}

const tp_arch *tp_caps_arch_find(int sm) {
    for (int i = 0; i < N_ARCHS; i++)
        if (ARCHS[i].sm == sm) return &ARCHS[i];
    return NULL;
}

const char *tp_path_kind_name(tp_path_kind k) {
    switch (k) {
    case TP_PATH_NATIVE: return "native";
    case TP_PATH_EMULATED: return "emulated";
    case TP_PATH_UNSUPPORTED: return "unsupported";
    }
    return "?";
}

int tp_caps_build_has_cuda(void) {
#ifdef TPROF_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

static tp_cap cap(tp_path_kind kind, const char *how, const char *cost, int implemented) {
    tp_cap c = {kind, how, cost, implemented, 0};
    return c;
}

/* The rules. major = compute capability major: 8 Ampere/Ada, 9 Hopper, 10/11/12 Blackwell. */
static tp_cap derive(int sm, tp_precision p) {
    int major = sm / 10;
    int blackwell = major >= 10; /* block-scaled MMA (tcgen05 on 10.x/11.0, mma.sync block_scale on 12.x) */
    int hopper = major == 9;
    /* Emulated MX/NV formats are implemented (kernels by the lead) for the pre-Blackwell GPUs tprof is tested on;
     * sm_80..sm_88 could run them (BF16 exists) but nobody has. */
    int emu_impl = sm >= 89 && !blackwell;
    static const char *NO_BS_BEFORE_80 =
        "no block-scaled MMA before Blackwell, and the exact emulation dequantizes into BF16, which needs sm_80 or "
        "newer";
    if (sm < 75) return cap(TP_PATH_UNSUPPORTED, "CUDA 13 builds for compute capability 7.5 and newer only", NULL, 0);
    switch (p) {
    case TP_PREC_FP32: return cap(TP_PATH_NATIVE, "cuBLASLt FP32 GEMM, TF32 off", NULL, 1);
    case TP_PREC_FP16: return cap(TP_PATH_NATIVE, "cuBLASLt FP16 tensor cores, FP32 accumulation", NULL, 1);
    case TP_PREC_BF16:
        if (sm >= 80) return cap(TP_PATH_NATIVE, "cuBLASLt BF16 tensor cores, FP32 accumulation", NULL, 1);
        return cap(TP_PATH_UNSUPPORTED, "BF16 tensor cores need sm_80 or newer", NULL, 0);
    case TP_PREC_FP8:
        if (sm >= 89) return cap(TP_PATH_NATIVE, "cuBLASLt E4M3, per-tensor scales, FP32 accumulation", NULL, 1);
        return cap(TP_PATH_UNSUPPORTED, "E4M3 tensor cores need sm_89 or newer", NULL, 0);
    case TP_PREC_FP8_BLOCK:
        if (hopper)
            return cap(TP_PATH_NATIVE,
                       "cuBLASLt VEC128_32F/BLK128x128_32F (1x128, 128x128 FP32 scales), FP32 accumulation",
                       NULL, 1);
        if (sm >= 89)
            return cap(TP_PATH_EMULATED, "E4M3 GEMM per 128-wide K slice, FP32 rescale",
                       "K/128 E4M3 GEMMs instead of one, plus an FP32 rescale-and-add of every partial product", 0);
        /* Unlike the MX formats, E4M3 x an arbitrary FP32 block scale does not fit BF16 exactly. */
        return cap(TP_PATH_UNSUPPORTED,
                   "needs E4M3 tensor cores (sm_89 or newer); E4M3 times an FP32 block scale is not exact in BF16",
                   NULL, 0);
    case TP_PREC_MXFP8:
        if (blackwell)
            return cap(TP_PATH_NATIVE, "cuBLASLt VEC32_UE8M0, 128x4 swizzled scales, FP32 accumulation", NULL, 1);
        if (sm >= 80)
            return cap(TP_PATH_EMULATED, "exact dequantization to BF16, BF16 tensor-core GEMM, FP32 accumulation",
                       "BF16 tensor-core rate instead of FP8; dequantized operands take 2 bytes/element instead of "
                       "1 + 1/32",
                       emu_impl);
        return cap(TP_PATH_UNSUPPORTED, NO_BS_BEFORE_80, NULL, 0);
    case TP_PREC_NVFP4:
        if (blackwell)
            return cap(TP_PATH_NATIVE, "cuBLASLt VEC16_UE4M3 + FP32 alpha, 128x4 swizzled scales, FP32 accumulation",
                       NULL, 1);
        if (sm >= 80)
            return cap(TP_PATH_EMULATED,
                       "exact dequantization to BF16, per-tensor scale folded into alpha; BF16 tensor-core GEMM, FP32 "
                       "accumulation",
                       "BF16 tensor-core rate instead of FP4; dequantized operands take 2 bytes/element instead of "
                       "0.5 + 1/16",
                       emu_impl);
        return cap(TP_PATH_UNSUPPORTED, NO_BS_BEFORE_80, NULL, 0);
    case TP_PREC_MXFP4:
        if (blackwell)
            return cap(TP_PATH_NATIVE, "cuBLASLt E2M1 with VEC32_UE8M0, 128x4 swizzled scales, FP32 accumulation",
                       NULL, 1);
        if (sm >= 80)
            return cap(TP_PATH_EMULATED, "exact dequantization to BF16, BF16 tensor-core GEMM, FP32 accumulation",
                       "BF16 tensor-core rate instead of FP4; dequantized operands take 2 bytes/element instead of "
                       "0.5 + 1/32",
                       emu_impl);
        return cap(TP_PATH_UNSUPPORTED, NO_BS_BEFORE_80, NULL, 0);
    case TP_PREC_FP8_WO:
        /* tprof's decode GEMV (gemv.h): cvt.f16x2.e4m3x2 (sm_89) and thread-block clusters (sm_90), built for sm_90 */
        if (hopper)
            return cap(TP_PATH_NATIVE,
                       "weight-only: E4M3 weights (per-tensor FP32 scale), FP16 activations; decode steps (<= 8 rows) "
                       "in tprof's GEMV, the weights decoded in registers; longer inputs (prefill) dequantize the "
                       "weights to FP16 (exact) for cuBLASLt's FP16 GEMM at the FP16 rate, the scale in alpha",
                       NULL, 1);
        return cap(TP_PATH_UNSUPPORTED, "tprof's FP8 weight-only GEMV is built for sm_90 (Hopper) only", NULL, 0);
    case TP_PREC_NVFP4_WO:
        if (hopper)
            return cap(TP_PATH_NATIVE,
                       "weight-only: NVFP4 weights (E2M1, UE4M3 per 16 along K, FP32 per tensor), FP16 activations; "
                       "decode steps (<= 8 rows) in tprof's GEMV, the weights decoded in registers; longer inputs "
                       "(prefill) expand E2M1 x UE4M3 to FP16 (exact) for cuBLASLt's FP16 GEMM, the FP32 scale in alpha",
                       NULL, 1);
        return cap(TP_PATH_UNSUPPORTED, "tprof's NVFP4 weight-only GEMV is built for sm_90 (Hopper) only", NULL, 0);
    default: break;
    }
    return cap(TP_PATH_UNSUPPORTED, "unknown precision", NULL, 0);
}

tp_cap tp_caps_lookup(int sm, tp_precision p) {
    tp_cap c = derive(sm, p);
    c.derived = tp_caps_arch_find(sm) == NULL;
    return c;
}

tp_status tp_caps_parse_arch(const char *s, int *sm, tp_error *err) {
    const char *q = s ? s : "";
    int v = -1, prefixed = 0;
    if ((q[0] == 's' || q[0] == 'S') && (q[1] == 'm' || q[1] == 'M')) {
        q += 2;
        if (*q == '_') q++;
        prefixed = 1;
    }
    const char *d = q;
    while (isdigit((unsigned char)*q)) q++;
    size_t nd = (size_t)(q - d);
    if (!prefixed && nd >= 1 && nd <= 2 && *q == '.') {
        /* "9.0", "12.1": a compute capability as nvidia-smi --query-gpu=compute_cap prints it */
        int major = atoi(d);
        q++;
        if (isdigit((unsigned char)q[0]) && q[1] == '\0') v = major * 10 + (q[0] - '0');
    } else if (nd >= 2 && nd <= 3) {
        /* nvcc's arch-specific ("sm_90a") and family ("sm_100f") suffixes name the same hardware */
        if (*q == 'a' || *q == 'f') q++;
        if (*q == '\0') v = atoi(d);
    }
    if (v < 10 || v > 999)
        return tp_fail(err, TP_ERR_ARG,
                       "unknown GPU architecture '%s' (expected sm_XX, XX or X.Y, e.g. sm_90, 90 or 9.0)",
                       s ? s : "(null)");
    *sm = v;
    return TP_OK;
}

static void gpu_desc(int sm, const char *gpu_name, char *buf, size_t n) {
    const tp_arch *a = tp_caps_arch_find(sm);
    if (gpu_name && *gpu_name) snprintf(buf, n, "%s (sm_%d)", gpu_name, sm);
    else if (a) snprintf(buf, n, "sm_%d (%s: %s)", sm, a->family, a->products);
    else snprintf(buf, n, "sm_%d", sm);
}

tp_status tp_caps_require(int sm, const char *gpu_name, tp_precision p, const char *layer, tp_error *err) {
    tp_cap c = tp_caps_lookup(sm, p);
    if (c.kind != TP_PATH_UNSUPPORTED && c.implemented) return TP_OK;
    char gpu[160], where[160];
    gpu_desc(sm, gpu_name, gpu, sizeof gpu);
    if (layer) snprintf(where, sizeof where, "layer %s: ", layer);
    else where[0] = '\0';
    if (c.kind == TP_PATH_UNSUPPORTED)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "%sprecision %s cannot run on %s: %s", where, tp_precision_name(p), gpu,
                       c.how);
    return tp_fail(err, TP_ERR_UNSUPPORTED,
                   "%sprecision %s on %s: the %s path (%s) is not implemented in this build of tprof", where,
                   tp_precision_name(p), gpu, tp_path_kind_name(c.kind), c.how);
}

static void title(int sm, char *buf, size_t n) {
    const tp_arch *a = tp_caps_arch_find(sm);
    if (a) snprintf(buf, n, "sm_%d  %s (%s)", sm, a->family, a->products);
    else snprintf(buf, n, "sm_%d  (not in the table; derived from compute capability %d.%d)", sm, sm / 10, sm % 10);
}

void tp_caps_print(int sm, FILE *f) {
    char t[256];
    title(sm, t, sizeof t);
    int cuda = tp_caps_build_has_cuda();
    size_t w_how = strlen("how");
    for (int p = 0; p < TP_PREC_COUNT; p++) {
        size_t l = strlen(tp_caps_lookup(sm, (tp_precision)p).how);
        if (l > w_how) w_how = l;
    }
    fprintf(f, "%s\n\n", t);
    fprintf(f, "%-10s  %-11s  %-*s  %s\n", "precision", "hardware", (int)w_how, "how", "in this build");
    for (int p = 0; p < TP_PREC_COUNT; p++) {
        tp_cap c = tp_caps_lookup(sm, (tp_precision)p);
        fprintf(f, "%-10s  %-11s  %-*s  %s\n", tp_precision_name((tp_precision)p), tp_path_kind_name(c.kind),
                (int)w_how, c.how, c.kind != TP_PATH_UNSUPPORTED && c.implemented && cuda ? "yes" : "no");
        if (c.cost) fprintf(f, "%-10s  %-11s  cost: %s\n", "", "", c.cost);
    }
    fprintf(f, "\nnative: the GPU's tensor cores run the format. emulated: the format's exact result (up to FP32 "
               "accumulation order) through other instructions, at the cost shown; such ops are labelled 'emulated' "
               "in every output.\n");
    if (!tp_caps_arch_find(sm))
        fprintf(f, "sm_%d is not in the table; derived from compute capability %d.%d by the rules (BF16 from sm_80, "
                   "FP8 from sm_89, FP8 block-128 scales on sm_90, block-scaled MMA from sm_100); not checked on "
                   "such a GPU.\n",
                sm, sm / 10, sm % 10);
    if (sm >= 100)
        fprintf(f, "The native block-scaled paths (mxfp8, nvfp4, mxfp4) are built and their quantizers and scale "
                   "layouts are tested on Hopper, but tprof's tests have not yet run their GEMMs on a Blackwell "
                   "GPU.\n");
    if (!cuda) fprintf(f, "this tprof was built without a CUDA toolkit: no GPU path runs in this build.\n");
}

json_t *tp_caps_json(int sm) {
    const tp_arch *a = tp_caps_arch_find(sm);
    int cuda = tp_caps_build_has_cuda();
    char arch[16], cc[16];
    snprintf(arch, sizeof arch, "sm_%d", sm);
    snprintf(cc, sizeof cc, "%d.%d", sm / 10, sm % 10);
    json_t *rows = json_array();
    json_t *o = json_pack("{s:i, s:s, s:s, s:o, s:o, s:b, s:o, s:b}", "sm", sm, "arch", arch, "compute_capability", cc,
                          "family", a ? json_string(a->family) : json_null(), "products",
                          a ? json_string(a->products) : json_null(), "derived", a == NULL, "note",
                          a ? json_null() : json_string("not in the table; derived from compute capability"),
                          "cuda_executor", cuda);
    if (!o || !rows) goto oom;
    for (int p = 0; p < TP_PREC_COUNT; p++) {
        tp_cap c = tp_caps_lookup(sm, (tp_precision)p);
        int ok = c.kind != TP_PATH_UNSUPPORTED && c.implemented;
        json_t *r = json_pack("{s:s, s:s, s:s, s:o, s:b, s:b}", "precision", tp_precision_name((tp_precision)p),
                              "path", tp_path_kind_name(c.kind), "how", c.how, "cost",
                              c.cost ? json_string(c.cost) : json_null(), "implemented", c.implemented != 0,
                              "in_this_build", ok && cuda);
        if (!r || json_array_append_new(rows, r)) goto oom;
    }
    if (json_object_set_new(o, "precisions", rows)) {
        rows = NULL;
        goto oom;
    }
    return o;
oom:
    json_decref(rows);
    json_decref(o);
    return NULL;
}
