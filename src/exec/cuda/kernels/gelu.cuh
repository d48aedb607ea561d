/* gelu.cuh: the exact (erf) GELU in fp32 on the SFU, shared by the elementwise GELU kernel (kernels.cu) and the
 * GELU epilogue of tprof's Hopper GEMM (gemm_sm90.cu), so a fused and an unfused GELU compute the same function.
 * Header-only, __device__ __forceinline__; CUDA C. */
#ifndef TP_GELU_CUH
#define TP_GELU_CUH

/* 0.5 x (1 + erf(x / sqrt 2)) written as 0.5 x erfc(-x / sqrt 2): the same function, but 1 + erff(.) cancels
 * catastrophically for x below about -3 (at x = -3.6 the fp32 sum keeps only ~12 bits, a 5.5e-5 relative error
 * seen on H200). erfc(z) for z >= 0 as t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P the degree-9 Chebyshev fit of
 * Numerical Recipes' erfcc (Press et al., Numerical Recipes in C, 2nd ed., section 6.2: fractional error below
 * 1.2e-7 everywhere), and erfc(-z) = 2 - erfc(z): accurate in both tails (a few 1e-7 relative in fp32), and one
 * reciprocal, one exp and ten FMAs instead of erfcf's branches (the GELU kernel was bound by them: 80 us for
 * ViT-B's 38.7M fc1 outputs on an H200, twice its memory time; 65 us with this, rcp.rn and __expf). That
 * kernel (kernels.cu) is near both limits (about 22 instructions per element against 4 bytes of f16 traffic), so the
 * reciprocal is rcp.approx, the exponential ex2.approx.ftz, and every thread keeps GELU_UNROLL 16-byte loads in
 * flight: 47 us f16 -> f16, 42 us f16 -> E4M3 (with gelu_as below) on an H200, CUPTI-traced in the engines. */
/* 2^x by ex2.approx.ftz (max relative error 2^-22.5 per the PTX ISA): __expf's non-ftz form adds a rescaling
 * around it for results below 2^-126, which only GELU(x < -13) would reach: it is then 0 instead of ~1e-38. */
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* 1 / x by rcp.approx.ftz (max error 1 ulp): for the t = 1 / (1 + c |z|) in [0, 1] of the erfc fits below,
 * where it moves erfc by a few 1e-7 relative */
__device__ __forceinline__ float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* c[0] t^(N-1) + ... + c[N-1] by Horner's rule, one FMA per coefficient (unrolled: the coefficients become
 * immediates) */
template <int N> __device__ __forceinline__ float horner(const float (&c)[N], float t) {
    float p = c[0];
#pragma unroll
    for (int i = 1; i < N; i++) p = fmaf(p, t, c[i]);
    return p;
}

/* GELU(v) = 0.5 v erfc(z), z = -v / sqrt 2, from e = erfc(|z|): erfc(-|z|) = 2 - erfc(|z|) */
__device__ __forceinline__ float gelu_from_erfc(float v, float z, float e) {
    return 0.5f * v * (z < 0.0f ? 2.0f - e : e);
}

__device__ __forceinline__ float gelu_f(float v) {
    const float z = -v * 0.70710678118654752440f, az = fabsf(z), t = rcp_approx(fmaf(0.5f, az, 1.0f));
    static const float c[10] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                                -0.18628806f, 0.09678418f,  0.37409196f, 1.00002368f, -1.26551223f};
    const float p = horner(c, t);
    return gelu_from_erfc(v, z, t * ex2_ftz(fmaf(-az, az, p) * 1.4426950408889634f));
}

/* GELU for an E4M3 output: erfc by Abramowitz & Stegun 7.1.26 (Handbook of Mathematical Functions, 1964:
 * erfc(z) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2), t = 1 / (1 + p z), |error| <= 1.5e-7 absolute),
 * five FMAs instead of ten. Its absolute error in GELU, at most 0.5 |x| 1.5e-7 (7.5e-7 at |x| = 10), is below
 * the smallest nonzero E4M3 step (2^-9 scale) whenever scale > 4e-4 (a calibrated amax over 0.17), so it moves a
 * rounding only where the exact quotient lies that close to a midpoint; and the E4M3 GELU is the FP8 engine's
 * hottest elementwise kernel (fc1's 38.7M outputs per ViT-B layer at batch 64). Other outputs keep gelu_f. */
/* gelu_as is written in v itself, so the FP8 GEMM epilogue that runs it per output (bound by the SMs' FMA and SFU
 * throughput, gemm_sm90.cu) spends fewer instructions: with z = -v / sqrt 2, |z| = |v| / sqrt 2 goes into t's
 * constant, z^2 log2(e) = u^2 with u = v sqrt(log2(e) / 2), A&S's coefficients are halved so the sum gives
 * h = erfc(|z|) / 2, and z < 0 is v > 0: GELU(v) = v (1 - h) for v > 0, v h otherwise. Checked in fp32 emulation
 * against the unfolded form over [-12, 12] and N(0, 3): the same worst errors. On an H200 (commit 8df1455, ViT-B/16
 * batch 64, at engine build) fc1 + GELU -> E4M3 took 86.0 instead of 88.1 us and the GELU -> E4M3 kernel 39.5
 * instead of 40.8. gelu_f keeps its form: folded the same way, the 16-bit fused fc1 (variant 1) took 131.4 instead
 * of 124.4 us in the same run (bench/results/README.md). */
#define GELU_U 0.84932180028801907f /* sqrt(log2(e) / 2) */

__device__ __forceinline__ float gelu_as(float v) {
    /* 0.3275911 / sqrt 2; the coefficients are A&S's halved (h = erfc / 2 directly) */
    const float t = rcp_approx(fmaf(0.231641889f, fabsf(v), 1.0f)), u = v * GELU_U;
    static const float c[5] = {0.530702715f, -0.726576014f, 0.710706871f, -0.142248368f, 0.127414796f};
    const float p = horner(c, t);
    const float h = t * p * ex2_ftz(-u * u);
    return v * (v > 0.0f ? 1.0f - h : h);
}

/* GELU's tanh form 0.5 v (1 + tanh(z)), z = sqrt(2/pi) (v + 0.044715 v^3) (Hendrycks and Gimpel 2016; timm's
 * gelu_tanh, SigLIP's MLP), as v sigmoid(2 z) = v / (1 + e^(-2 z)): no 1 + tanh cancellation for v < 0; the
 * exponential by ex2.approx.ftz (2 z log2 e folded into one constant), the quotient by __fdividef. */
__device__ __forceinline__ float gelu_tanh_f(float v) {
    const float u = 2.3022082f * fmaf(0.044715f * v, v * v, v); /* 2 sqrt(2/pi) log2(e) (v + 0.044715 v^3) */
    return __fdividef(v, 1.0f + ex2_ftz(-u));
}

#endif
