#include "planner/supports.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const NAMES[TP_KERNEL_COUNT] = {
    [TP_KERNEL_GEMM_FP8] = "cuBLASLt FP8 GEMM",
    [TP_KERNEL_GEMM_FP8_BLOCK] = "cuBLASLt FP8 block-128 GEMM",
    [TP_KERNEL_GEMM_BLOCK_SCALED] = "block-scaled GEMM",
    [TP_KERNEL_GEMM_SM90] = "tprof sm90 GEMM",
    [TP_KERNEL_GEMM_SM90_FP8] = "tprof sm90 FP8 GEMM",
    [TP_KERNEL_PATCH_EMBED_FUSED] = "tprof fused patch embedding",
    [TP_KERNEL_ATTENTION_FLASH] = "tprof flash attention",
    [TP_KERNEL_ATTENTION_MASKED_FLASH] = "tprof flash attention, pi0's masks",
    [TP_KERNEL_ROPE_KV_APPEND] = "tprof RoPE + KV-cache append",
};

const char *tp_kernel_name(tp_kernel k) { return (unsigned)k < TP_KERNEL_COUNT ? NAMES[k] : "?"; }

/* The reason, when there is one, and the answer */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int verdict(int ok, char *why, size_t n, const char *fmt, ...) {
    if (!ok && why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return ok;
}

/* Kernels index with 32-bit ints */
static int fits_int(const tp_kernel_shape *s) {
    return s->m <= 0x7fffffffLL && s->n <= 0x7fffffffLL && s->k <= 0x7fffffffLL;
}

int tp_supports_dim(tp_dim_rule r, int64_t x, int param, int64_t *mult) {
    int64_t m = 0;
    if (param > 0) m = r == TP_DIM_K_BLOCK ? param : (128 % param == 0 ? 128 / param : 0);
    if (mult) *mult = m;
    return x > 0 && m > 0 && x % m == 0;
}

int tp_supports(tp_kernel k, const tp_kernel_shape *s, char *why, size_t n) {
    if (why && n) why[0] = 0;
    const long long M = (long long)s->m, N = (long long)s->n, K = (long long)s->k;
    switch (k) {
    case TP_KERNEL_GEMM_FP8:
        return verdict(tp_supports_dim(TP_DIM_ROW16, K, 8, NULL) && tp_supports_dim(TP_DIM_ROW16, N, 8, NULL), why, n,
                       "fp8 GEMM needs K and N multiples of 16 (cuBLASLt FP8 alignment); K = %lld, N = %lld", K, N);
    case TP_KERNEL_GEMM_FP8_BLOCK:
        return verdict(K > 0 && N > 0 && K % 16 == 0 && N % 8 == 0, why, n,
                       "fp8-block GEMM needs K %% 16 == 0 and N %% 8 == 0 (cuBLASLt FP8 alignment); K = %lld, N = %lld",
                       K, N);
    case TP_KERNEL_GEMM_BLOCK_SCALED:
        if (s->block <= 0) return verdict(0, why, n, "block-scaled GEMM: block %lld must be positive",
                                          (long long)s->block);
        return verdict(tp_supports_dim(TP_DIM_K_BLOCK, K, s->block, NULL), why, n,
                       "block-scaled GEMM needs K %% %d == 0 (no partial block along K); K = %lld", s->block, K);
    case TP_KERNEL_GEMM_SM90:
        if (s->dt != TP_F16 && s->dt != TP_BF16)
            return verdict(0, why, n, "tprof sm90 GEMM takes f16 or bf16 operands (dtype %d)", (int)s->dt);
        return verdict(M > 0 && N > 0 && K > 0 && K % 8 == 0 && N % 8 == 0 && fits_int(s), why, n,
                       "tprof sm90 GEMM needs K and N multiples of 8 (16-byte TMA rows, 8-column stores); K = %lld, "
                       "N = %lld", K, N);
    case TP_KERNEL_GEMM_SM90_FP8: {
        if (s->dt != TP_F16 && s->dt != TP_E4M3)
            return verdict(0, why, n, "tprof sm90 FP8 GEMM writes f16 or e4m3 (dtype %d)", (int)s->dt);
        const int nmul = s->dt == TP_E4M3 ? 16 : 8;
        if (!(M > 0 && N > 0 && K > 0 && K % 16 == 0 && fits_int(s)))
            return verdict(0, why, n, "tprof sm90 FP8 GEMM needs K a multiple of 16 (16-byte E4M3 rows); K = %lld",
                           K);
        return verdict(N % nmul == 0, why, n, "tprof sm90 FP8 GEMM needs N a multiple of %d for this output; N = %lld",
                       nmul, N);
    }
    case TP_KERNEL_PATCH_EMBED_FUSED: {
        const int P = s->patch;
        if (s->dt != TP_F16 && s->dt != TP_BF16)
            return verdict(0, why, n, "fused patch embedding takes f16 or bf16 weights (dtype %d)", (int)s->dt);
        if (!(P > 0 && P % 4 == 0 && (3 * P * P) % 64 == 0))
            return verdict(0, why, n, "fused patch embedding needs P %% 4 == 0 (whole float4 rows) and 3 P^2 %% 64 == 0 "
                           "(a 64-wide K step in one channel); P = %d", P);
        return verdict(N > 0 && N % 8 == 0, why, n, "fused patch embedding needs C %% 8 == 0; C = %lld", N);
    }
    case TP_KERNEL_ATTENTION_FLASH: {
        const int64_t D = s->k;
        if (s->dt != TP_F16 && s->dt != TP_BF16)
            return verdict(0, why, n, "flash attention takes f16 or bf16 Q/K/V (dtype %d)", (int)s->dt);
        return verdict(D == 32 || D == 64 || D == 80 || D == 96 || D == 128, why, n,
                       "flash attention is compiled for head dim 32, 64, 80, 96 and 128; head dim %lld", (long long)D);
    }
    case TP_KERNEL_ATTENTION_MASKED_FLASH: {
        const int64_t D = s->k;
        if (s->dt != TP_F16 && s->dt != TP_BF16)
            return verdict(0, why, n, "the masked flash attention takes f16 or bf16 Q/K/V (dtype %d)", (int)s->dt);
        return verdict(D == 16 || D == 32 || D == 64 || D == 128 || D == 256, why, n,
                       "the masked flash attention is compiled for head dim 16, 32, 64, 128 and 256; head dim %lld",
                       (long long)D);
    }
    case TP_KERNEL_ROPE_KV_APPEND: {
        const int64_t D = s->k, W = s->n;
        if (s->dt != TP_F32 && s->dt != TP_F16 && s->dt != TP_BF16)
            return verdict(0, why, n, "RoPE + KV append takes f32, f16 or bf16 keys (dtype %d)", (int)s->dt);
        if (!(D >= 2 && D % 2 == 0 && D <= 1024))
            return verdict(0, why, n, "RoPE + KV append needs an even head dim of at most 1024; head dim %lld",
                           (long long)D);
        return verdict(W > 0 && W % D == 0 && W <= 4096, why, n,
                       "RoPE + KV append holds a cache row of at most 4096 values in shared memory; row %lld",
                       (long long)W);
    }
    default: return verdict(0, why, n, "unknown kernel %d", (int)k);
    }
}
