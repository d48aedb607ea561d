/* gemm_sm90.h: tprof's own GEMM for Hopper (gemm_sm90.cu: TMA loads, an mbarrier pipeline, wgmma), for the epilogues
 * cuBLASLt does not have. cuBLASLt's only GELU epilogue is the tanh approximation, so a model with the exact (erf)
 * GELU, as torch.nn.GELU() and timm's ViTs, ran fc1 in cuBLASLt and the GELU as a separate kernel that reads and
 * writes the whole hidden activation again (ViT-B/16 at batch 64 on an H200: fc1 86 us + GELU 47 us per layer).
 * This GEMM computes the GELU on its fp32 accumulators and writes only the GELU's output. The engines time it against
 * cuBLASLt + tpk_gelu when they are built and keep the faster (cuda_engine.c, TP_GEMM_CHOICE_SM90_GELU): on an H100
 * 124 against 146 us for ViT-B/16's fc1 at batch 64, on an H200 a tie (bench/gemm_lab.c; gemm_sm90.cu says where
 * the time goes). With E4M3 operands (tpk_gemm_sm90_fp8) it also writes the GELU's E4M3 codes, which the FP8
 * engines' fc2 reads: 74.8 against 65.1 + 39.7 us on an H200 (commit 7b94749), and the FP8 engines' plain GEMMs
 * (qkv, proj + residual, fc2 + residual) where it beats cuBLASLt. Plain 16-bit GEMMs stay with cuBLASLt, faster
 * at them. It is tested like every kernel (tests/gpu/test_gpu_gemm_sm90.c).
 * Same conventions as kernels.h: enqueues on `stream`, returns cudaGetLastError() as an int (0 = cudaSuccess), never
 * synchronizes or allocates (graph-capturable: the TMA descriptors are kernel parameters, encoded on the host). */
#ifndef TP_GEMM_SM90_H
#define TP_GEMM_SM90_H

#include <stdint.h>

#include "exec/cuda/kernels/kernels.h"
#include "planner/supports.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The shape and type rules of tpk_gemm_sm90 without a device (planner/supports.h, TP_KERNEL_GEMM_SM90): dt F16 or
 * BF16 (A, W, bias and D all in dt); K % 8 == 0 (TMA needs 16-byte row strides); N % 8 == 0 (D is written in
 * 16-byte chunks of 8 columns); M, N, K > 0. 1 when they hold. */
static inline int tpk_gemm_sm90_shape_ok(tp_dtype dt, int64_t M, int64_t N, int64_t K) {
    tp_kernel_shape s = {dt, M, N, K, 0, 0};
    return tp_supports(TP_KERNEL_GEMM_SM90, &s, NULL, 0);
}

/* 1 when tpk_gemm_sm90 can run on the current device: compute capability 9.0 (wgmma and this kernel's TMA
 * descriptors exist on sm_90a only) and the driver's cuTensorMapEncodeTiled is reachable. */
int tpk_gemm_sm90_supported(void);

/* D (M, N) row-major in dt = epi(A (M, K) @ W (N, K)^T + bias (N)), PyTorch's Linear convention, with
 *   A    (M, K) row-major in dt, 16-byte aligned;  W (N, K) row-major in dt, 16-byte aligned (the weight);
 *   bias (N) in dt or NULL, 4-byte aligned;  D (M, N) row-major in dt, 16-byte aligned, not overlapping A or W;
 *   gelu 0: epi = identity; 1: epi = the exact GELU 0.5 v (1 + erf(v / sqrt 2)) (gelu.cuh, as tpk_gelu computes
 *        it) applied to the fp32 value v = A W^T + bias before the one rounding to dt.
 * fp32 accumulation; bias added in fp32; one RNE rounding per element (the unfused cuBLASLt + tpk_gelu path rounds
 * twice: the GEMM output, then the GELU's).
 * Errors: cudaErrorInvalidValue without a launch when the shape rules (tpk_gemm_sm90_shape_ok) fail, gelu is not
 * 0 or 1, a pointer is NULL or misaligned, the device is not sm_90, or the driver rejects a TMA descriptor
 * (cuTensorMapEncodeTiled); the runtime's error when setting the kernel's shared-memory size fails. */
int tpk_gemm_sm90(const void *A, const void *W, const void *bias, void *D, tp_dtype dt, int M, int N, int K,
                  int gelu, tp_stream stream);

/* The kernel's variants: 0 = each consumer warpgroup writes its whole 128 x 128 tile (6 pipeline stages); 1 = rows
 * 64-127 of each tile go through shared memory in fp32 to three helper warps, which add the bias, apply the GELU and
 * store them while the consumer writes rows 0-63 (4 stages). Same results bit for bit. tpk_gemm_sm90 runs
 * TPK_GEMM_SM90_DEFAULT_VARIANT(gelu), the only one per epilogue the product compiles; tpk_gemm_sm90_variant, which
 * runs either, is compiled only into the labs and the GPU tests (bench/gemm_sm90_variants.cu, declared in
 * bench/lab_variants.h). */
/* The shape and type rules of tpk_gemm_sm90_fp8 (TP_KERNEL_GEMM_SM90_FP8, as tpk_gemm_sm90_shape_ok): d_dt F16 or E4M3;
 * K % 16 == 0 (16-byte rows of E4M3); N % 8 == 0 for an F16 D, N % 16 == 0 for an E4M3 D (16-byte chunks of
 * columns); M, N, K > 0. 1 when they hold. */
static inline int tpk_gemm_sm90_fp8_shape_ok(tp_dtype d_dt, int64_t M, int64_t N, int64_t K) {
    tp_kernel_shape s = {d_dt, M, N, K, 0, 0};
    return tp_supports(TP_KERNEL_GEMM_SM90_FP8, &s, NULL, 0);
}

/* FP8 operands: D (M, N) row-major in d_dt = epi(alpha (A (M, K) @ W (N, K)^T) + bias (N)) [+ R (M, N)],
 * alpha = a_scale w_scale,
 *   A (M, K), W (N, K) row-major E4M3 codes, 16-byte aligned, with their per-tensor storage scales a_scale, w_scale
 *        (device fp32 scalars: the real value of a code q is q * scale, formats/qformat.h);
 *   bias (N) F16 or NULL, 4-byte aligned (cuBLASLt's bias type for FP8 GEMMs);
 *   R (M, N) row-major F16 or NULL, 16-byte aligned: a residual added in fp32 before the one rounding (cuBLASLt's
 *        D = alpha A W^T + C + bias with C = R), only with an F16 D, gelu 0 and variant 0 or 2; R may be D itself (an
 *        in-place x += proj(...): every element of a tile is read, and its value used, by the warp that later
 *        stores it, with a __syncwarp between), but must not overlap D otherwise. ViT-B/16 at batch 64 on an H200
 *        (gemm_lab fp8): proj + residual 28.0 us, fc2 + residual 56.3, as cuBLASLt with its C (27.9, 56.0); the
 *        residual costs 10 and 7 us where cuBLASLt's costs 5 (bench/results/README.md), so the engines time both.
 *   D F16, or E4M3 codes q = sat(rne(v r)), r = RN(1 / d_scale), d_scale a device fp32 scalar: cuBLASLt's rounding
 *        of an E4M3 D (a product by the reciprocal; kernels.h's kernels divide, and the two codes differ, by one,
 *        only where v / d_scale lies within 1.5 fp32 ulps of an E4M3 midpoint); 16-byte aligned, not overlapping A
 *        or W;
 *   gelu as tpk_gemm_sm90; an E4M3 D takes gelu.cuh's gelu_as (tpk_gelu's GELU for E4M3 outputs);
 *   variant 0, as tpk_gemm_sm90's variant 0 (no helper warps), or 2 (an F16 D only): variant 0 with tiles of
 *        128 x 96 instead of 128 x 128 (wgmma m64n96k32), for the shapes where 96-wide tiles spread more evenly
 *        over the SMs: the two tpk_gemm_sm90_fp8_pick_variant chooses from, the only ones the product compiles.
 *        Variant 1 (the helper warps, never the choice) is compiled only into the labs and the GPU tests:
 *        tpk_gemm_sm90_fp8_variant (bench/gemm_sm90_variants.cu, declared in bench/lab_variants.h) takes the same
 *        arguments and variants 0, 1 and 2; here variant 1 is cudaErrorInvalidValue.
 * K moves in steps of 128 (wgmma m64n128k32 e4m3, fp32 accumulators); the scales and the bias are applied in fp32
 * to the accumulators, one rounding. Accumulation: the tensor cores' own, without the periodic promotion of partial
 * sums into separate fp32 registers that cuBLASLt does with FAST_ACCUM off (gemm_cublaslt.c): a 128 x 128 tile per
 * consumer warpgroup leaves no registers for a second set. bench/gemm_lab.c measures what that costs in accuracy.
 * Errors: as tpk_gemm_sm90, and cudaErrorInvalidValue when tpk_gemm_sm90_fp8_shape_ok fails, a scale pointer is
 * NULL (d_scale: only with an E4M3 D) or not 4-byte aligned, R is misaligned or given with an E4M3 D, gelu 1 or
 * variant 1, variant 2 is asked with an E4M3 D, or variant is not 0 or 2 (not 0, 1 or 2 for
 * tpk_gemm_sm90_fp8_variant). */
int tpk_gemm_sm90_fp8(const void *A, const float *a_scale, const void *W, const float *w_scale, const void *bias,
                      const void *R, void *D, tp_dtype d_dt, const float *d_scale, int M, int N, int K, int gelu,
                      int variant, tp_stream stream);

/* Weight-only FP8 (W8A16) for a prefill's linears: D (M, N) row-major in dt = w_scale (A (M, K) @ e4m3(W) (N, K)^T)
 * + bias (N) [+ R (M, N)], without the dequantized weight copy the engines' cuBLASLt path writes and reads first:
 *   A    (M, K) row-major in dt (F16 or BF16), 16-byte aligned;  W (N, K) row-major E4M3 codes, 16-byte aligned;
 *   w_scale one fp32 on the device (the weight's per-tensor scale, 4-byte aligned, not NULL);
 *   bias (N) in dt or NULL, 4-byte aligned;  R (M, N) in dt or NULL, 16-byte aligned, as tpk_gemm_sm90_fp8's R (it
 *   may be D itself);  D (M, N) row-major in dt, 16-byte aligned, not overlapping A or W.
 * Each stage's 128 x 64 codes arrive by TMA into shared memory and are converted there to dt (exact: every E4M3 value
 * is an FP16 and a BF16 value) in the layout the 16-bit wgmma reads, by the consumer warpgroup while its previous
 * stage's MMAs run (gemm_sm90_impl.cuh gm_convert_w); then the 16-bit kernel's K loop (m64n128k16, fp32
 * accumulators) and its epilogue with alpha = *w_scale: v = alpha acc + bias [+ R], one rounding. K % 16 == 0 (16-byte
 * E4M3 rows), N % 8 == 0; M, N, K > 0. Errors as tpk_gemm_sm90's, and cudaErrorInvalidValue for a NULL or misaligned
 * w_scale or a misaligned R. */
int tpk_gemm_sm90_wo_fp8(const void *A, const void *W, const float *w_scale, const void *bias, const void *R, void *D,
                         tp_dtype dt, int M, int N, int K, tp_stream stream);
/* Weight-only NVFP4 (W4A16), as tpk_gemm_sm90_wo_fp8: W as gemv.h's NVFP4 (N K / 2 bytes of E2M1 codes, the even
 * element in the low nibble, 16-byte aligned), scales (N, K / 16) UE4M3 codes row-major (2-byte aligned), s2 the
 * per-tensor scale (device fp32): D = s2 (A @ (e2m1 x ue4m3)(W)^T) + bias [+ R]. Each stage's codes arrive by TMA, its
 * block scales by plain loads a stage ahead, and the consumer converts them to dt in shared memory (every
 * e2m1 x ue4m3 is exact in FP16 and BF16). K % 32 == 0 (16-byte rows of codes), N % 8 == 0. Errors as
 * tpk_gemm_sm90_wo_fp8's, and cudaErrorInvalidValue for NULL or misaligned scales. */
int tpk_gemm_sm90_wo_nvfp4(const void *A, const void *W, const void *scales, const float *s2, const void *bias,
                           const void *R, void *D, tp_dtype dt, int M, int N, int K, tp_stream stream);

/* the variant tpk_gemm_sm90 runs (bench/results: gemm_lab) */
#define TPK_GEMM_SM90_DEFAULT_VARIANT(gelu) ((gelu) ? 1 : 0)
/* The variant the FP8 engines run tpk_gemm_sm90_fp8 in for a D (M, N) of d_dt on a GPU with `sms` SMs: 2 for an
 * F16 D where 128 x 96 tiles leave the busiest SM less to do than 128 x 128 ones, 0 otherwise. The kernel is
 * persistent and an SM runs its tiles one after another, so a GEMM takes ceil(tiles / SMs) tile times; a 128 x 96
 * tile takes 0.82 of a 128 x 128 one's time (measured, not 0.75; likely because the m64n96 MMA reads more shared
 * memory per FLOP, not verified). ViT-B/16 batch 64 on 132 SMs (gemm_lab fp8, H200, commit f5d8f33): proj and fc2
 * (N 768) 6 x 0.82 against 5 tile times, so 2 (proj 17.4 us against 17.9, + residual 24.3 against 28.1; fc2 48.8
 * against 49.7, + residual 53.1 against 56.3); qkv (N 2304) 18 x 0.82 against 14, so 0 (v2 44.7 against 42.9);
 * fc1 (E4M3 D) 0. Variant 1 (helper warps) is never the choice:
 * with 128 of K per E4M3 stage fc1's K 768 fits in variant 0's 6 stages and runs no faster with 4 and the helpers
 * (H200, fc1 + GELU -> E4M3 at batch 64: v0 74.8 us, v1 85.5; bench/results/README.md). sms: the device's SM
 * count (cudaDevAttrMultiProcessorCount; the engines read it once when they are built); 0 for sms <= 0. Pure
 * arithmetic: no CUDA call. */
int tpk_gemm_sm90_fp8_pick_variant(tp_dtype d_dt, int M, int N, int sms);

/* Sibling linears reading one E4M3 input as one FP8 GEMM (a prefill's q/k/v, gate/up): W (N, K) row-major E4M3 holds
 * the n members' weights one after the other (N = cols[0] + ... + cols[n - 1]), col_scales (N) fp32 on the device
 * each member's per-tensor weight scale over its columns (8-byte aligned), bias (N) F16 or NULL; member j's output
 * D[j] (M, cols[j]) row-major F16, 16-byte aligned, apart from A and W:
 *     D[j][m][c] = a_scale col_scales[o_j + c] (A W^T)[m][o_j + c] + bias[o_j + c],  o_j = cols[0] + .. + cols[j-1]
 * The same kernel as tpk_gemm_sm90_fp8's with an F16 D (its tiles picked as tpk_gemm_sm90_fp8_pick_variant picks for
 * sms SMs), one scale per column and each 16-byte chunk of the output stored to its member. n 1 ..
 * TPK_GEMM_SM90_GROUP_MAX, every cols[j] a positive multiple of 8; K % 16 == 0. Errors as tpk_gemm_sm90_fp8's. */
#define TPK_GEMM_SM90_GROUP_MAX 4
int tpk_gemm_sm90_fp8_group(const void *A, const float *a_scale, const void *W, const float *col_scales,
                            const void *bias, int n, const int *cols, void *const *D, int M, int K, int sms,
                            tp_stream stream);

#ifdef __cplusplus
}
#endif

#endif
