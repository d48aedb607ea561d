/* gemm_cutlass.cu: gemm_cutlass.h's weight-only FP8 GEMM through CUTLASS 4's Hopper mixed-input collective
 * (sm90_mma_tma_gmma_rs_warpspecialized_mixed_input, "convert only": no group scales, the per-tensor scale is the
 * epilogue's alpha). CUTLASS is a C++ template library, so this wrapper is C++ where the rest of tprof's CUDA is C
 * style; what it exports is gemm_cutlass.h's C API. Built for sm_90a (CMakeLists.txt, with the headers) or as the
 * entry points below that refuse, saying why (without them). */
#include "exec/cuda/vendor/gemm_cutlass.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

extern "C" const char *tp_cutlass_tile_name(int tile) {
    return tile == TP_CUTLASS_TILE_128X128 ? "128 x 128" : tile == TP_CUTLASS_TILE_64X128 ? "64 x 128" : NULL;
}

#if TPROF_HAVE_CUTLASS
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>
#include <cutlass/version.h>

namespace tp_cutlass {
using namespace cute;

/* The narrow E4M3 "A" (the weights, K-major), the 16-bit "B" (the activations, K-major), fp32 accumulation, C and D
 * column-major in the 16-bit type (= tprof's row-major y). Template parameters: the 16-bit type and the tile's extent
 * over y's rows (CUTLASS's N), compile-time constants. */
template <typename T, int TM> struct WoFp8 {
    using EW = cutlass::float_e4m3_t;
    using Tile = Shape<_128, Int<TM>, _64>;
    using Cluster = Shape<_1, _1, _1>;
    using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, T, cutlass::layout::ColumnMajor, 8, T,
        cutlass::layout::ColumnMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
    using Main = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, EW, cutlass::layout::RowMajor, 16, T,
        cutlass::layout::ColumnMajor, 8, float, Tile, Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
        cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Main, Epi>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

/* y^T (N, M) = alpha W (N, K) x^T (+ R^T) in CUTLASS's terms: problem (N, M, K). The arguments are rebuilt per call
 * (host work only: the TMA descriptors), so one call serves every shape and a CUDA graph captures the launch. */
template <typename T, int TM>
static int run(const void *x, const void *W, const float *w_scale, const void *R, void *y, int M, int N, int K,
               cudaStream_t s) {
    using G = WoFp8<T, TM>;
    using Kernel = typename G::Kernel;
    using Gemm = typename G::Gemm;
    const auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(N, K, 1));
    const auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(M, K, 1));
    const auto sc = cutlass::make_cute_packed_stride(typename Kernel::StrideC{}, make_shape(N, M, 1));
    const auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(N, M, 1));
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {N, M, K, 1},
                                  {(const typename G::EW *)W, sa, (const T *)x, sb},
                                  {{}, (const T *)(R ? R : y), sc, (T *)y, sd}};
    args.epilogue.thread.alpha_ptr = w_scale;
    args.epilogue.thread.beta = R ? 1.0f : 0.0f;
    Gemm gemm;
    /* the data-parallel tile schedule needs no workspace; a future one that does is refused, not run unsized */
    if (gemm.can_implement(args) != cutlass::Status::kSuccess || Gemm::get_workspace_size(args) != 0)
        return cudaErrorUnknown;
    if (gemm.initialize(args, nullptr, s) != cutlass::Status::kSuccess) return cudaErrorUnknown;
    const cutlass::Status st = gemm.run(s, nullptr, /*launch_with_pdl=*/true);
    const cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) return le;
    return st == cutlass::Status::kSuccess ? 0 : cudaErrorUnknown;
}
} // namespace tp_cutlass

static int device_is_sm90(void) {
    int dev = 0, major = 0, minor = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
           minor == 0;
}

extern "C" int tp_cutlass_available(char *why, size_t n) {
    if (device_is_sm90()) return 1;
    if (why && n) snprintf(why, n, "CUTLASS's mixed-input GEMM is built for sm_90a; this device is not compute "
                                   "capability 9.0");
    return 0;
}

extern "C" const char *tp_cutlass_version(void) {
#define TP_STR2(x) #x
#define TP_STR(x) TP_STR2(x)
    return TP_STR(CUTLASS_MAJOR) "." TP_STR(CUTLASS_MINOR) "." TP_STR(CUTLASS_PATCH);
}

extern "C" int tp_cutlass_wo_fp8(const void *x, const void *W, const float *w_scale, const void *R, void *y,
                                 tp_dtype dt, int M, int N, int K, int tile, tp_stream stream) {
    if (!device_is_sm90()) return cudaErrorNotSupported;
    const uintptr_t mis = (uintptr_t)x | (uintptr_t)W | (uintptr_t)R | (uintptr_t)y;
    if (!tp_cutlass_wo_shape_ok(dt, M, N, K) || !tp_cutlass_tile_name(tile) || !w_scale || ((uintptr_t)w_scale & 3) ||
        (mis & 15))
        return cudaErrorInvalidValue;
    cudaStream_t s = (cudaStream_t)stream;
    using namespace tp_cutlass;
    if (tile == TP_CUTLASS_TILE_64X128)
        return dt == TP_F16 ? run<cutlass::half_t, 64>(x, W, w_scale, R, y, M, N, K, s)
                            : run<cutlass::bfloat16_t, 64>(x, W, w_scale, R, y, M, N, K, s);
    return dt == TP_F16 ? run<cutlass::half_t, 128>(x, W, w_scale, R, y, M, N, K, s)
                        : run<cutlass::bfloat16_t, 128>(x, W, w_scale, R, y, M, N, K, s);
}

#else /* built without CUTLASS's headers: every entry point refuses, saying why */

extern "C" int tp_cutlass_available(char *why, size_t n) {
    if (why && n) snprintf(why, n, "this tprof was built without CUTLASS's headers (make build fetches them: "
                                   "tools/fetch_wheel_headers.py cutlass)");
    return 0;
}

extern "C" const char *tp_cutlass_version(void) { return "none"; }

extern "C" int tp_cutlass_wo_fp8(const void *x, const void *W, const float *w_scale, const void *R, void *y,
                                 tp_dtype dt, int M, int N, int K, int tile, tp_stream stream) {
    (void)x, (void)W, (void)w_scale, (void)R, (void)y, (void)dt, (void)M, (void)N, (void)K, (void)tile, (void)stream;
    return cudaErrorNotSupported;
}

#endif
