/* pipeline_ops.cu: the pipeline ops' kernels (contracts in pipeline_ops.h). CUDA C as kernels.cu: templates only
 * for element types; each entry point dispatches over tp_dtype and refuses what it does not take before launching. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "exec/cuda/kernels/act_types.cuh"
#include "exec/cuda/kernels/pdl.cuh"
#include "exec/cuda/kernels/pipeline_ops.h"

#define PIPE_THREADS 256
#define PIPE_MAX_BLOCKS 8192
#define PIPE_INVALID ((int)cudaErrorInvalidValue)

#define PIPE_BY_ACT TPK_BY_ACT /* act_types.cuh */

static size_t esz(tp_dtype dt) { return dt == TP_F32 ? 4 : dt == TP_F16 || dt == TP_BF16 ? 2 : 0; }

static unsigned grid_for(size_t work) {
    size_t b = (work + PIPE_THREADS - 1) / PIPE_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b > PIPE_MAX_BLOCKS ? PIPE_MAX_BLOCKS : b);
}

static int launched(void) { return (int)cudaGetLastError(); }

/* ---- SiLU ---------------------------------------------------------------------------------------------------- */

/* The elementwise kernels below start with PDL's trigger and wait (pdl.cuh): everything they read is written by
 * the kernels before them; launched through tpk_pdl_launch_kernel, so a denoise step's chain of short kernels
 * overlaps each launch with its predecessor's tail. */
template <typename TX, typename TY> __global__ void silu_kernel(const TX *x, TY *y, size_t n) {
    tpk_pdl_trigger();
    tpk_pdl_wait();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = ld1(x, i);
        st1(y, i, v / (1.0f + expf(-v)));
    }
}

extern "C" int tpk_silu(const void *x, tp_dtype xdt, void *y, tp_dtype ydt, size_t n, tp_stream stream) {
    if (n == 0) return (int)cudaSuccess;
    if (!x || !y) return PIPE_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    PIPE_BY_ACT(xdt, TX, PIPE_BY_ACT(ydt, TY, return tpk_pdl_launched(tpk_pdl_launch_kernel(
                                                  silu_kernel<TX, TY>, dim3(grid_for(n)), dim3(PIPE_THREADS),
                                                  (size_t)0, s, (const TX *)x, (TY *)y, n))))
}

/* ---- the Euler step ------------------------------------------------------------------------------------------ */

template <typename TV> __global__ void euler_kernel(const float *x, const TV *v, float *y, float dt, size_t n) {
    tpk_pdl_trigger();
    tpk_pdl_wait();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = __fadd_rn(x[i], __fmul_rn(dt, ld1(v, i))); /* two roundings, no FMA: as the reference's tensors */
}

extern "C" int tpk_euler(const float *x, const void *v, tp_dtype vdt, float *y, float dt, size_t n, tp_stream stream) {
    if (n == 0) return (int)cudaSuccess;
    if (!x || !v || !y) return PIPE_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    PIPE_BY_ACT(vdt, TV, return tpk_pdl_launched(tpk_pdl_launch_kernel(euler_kernel<TV>, dim3(grid_for(n)),
                                                                       dim3(PIPE_THREADS), (size_t)0, s, x,
                                                                       (const TV *)v, y, dt, n)))
}

/* ---- the time embedding beside every row ----------------------------------------------------------------------- */

template <typename T> __global__ void time_concat_kernel(const T *x, const float *emb, T *y, int64_t rows, int C, int D) {
    tpk_pdl_trigger();
    tpk_pdl_wait();
    const size_t W = (size_t)C + D, n = (size_t)rows * W, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t r = i / W, c = i - r * W;
        st1(y, i, c < (size_t)C ? ld1(x, r * C + c) : emb[c - C]);
    }
}

extern "C" int tpk_time_concat(const void *x, tp_dtype dt, const float *emb, void *y, int64_t rows, int C, int D,
                               tp_stream stream) {
    if (rows < 0 || C < 0 || D < 0) return PIPE_INVALID;
    if (rows == 0 || C + D == 0) return (int)cudaSuccess;
    if (!x || !emb || !y) return PIPE_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    PIPE_BY_ACT(dt, T, return tpk_pdl_launched(tpk_pdl_launch_kernel(
                           time_concat_kernel<T>, dim3(grid_for((size_t)rows * (C + D))), dim3(PIPE_THREADS), (size_t)0,
                           s, (const T *)x, emb, (T *)y, rows, C, D)))
}

/* ---- concatenation and slices along tokens: strided copies ----------------------------------------------------- */

extern "C" int tpk_concat_tokens(const void *a, const void *b, void *y, tp_dtype dt, int B, int64_t Ta, int64_t Tb,
                                 int64_t C, tp_stream stream) {
    const size_t es = esz(dt);
    if (!es || B < 0 || Ta < 0 || Tb < 0 || C < 0) return PIPE_INVALID;
    if (B == 0 || C == 0 || Ta + Tb == 0) return (int)cudaSuccess;
    if (!a || !b || !y) return PIPE_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    const size_t wa = (size_t)Ta * C * es, wb = (size_t)Tb * C * es, wy = wa + wb;
    cudaError_t e = cudaSuccess;
    if (wa) e = cudaMemcpy2DAsync(y, wy, a, wa, wa, (size_t)B, cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess && wb) e = cudaMemcpy2DAsync((char *)y + wa, wy, b, wb, wb, (size_t)B, cudaMemcpyDeviceToDevice, s);
    return (int)e;
}

extern "C" int tpk_slice_tokens(const void *x, void *y, tp_dtype dt, int B, int64_t T, int64_t start, int64_t n,
                                int64_t C, tp_stream stream) {
    const size_t es = esz(dt);
    if (!es || B < 0 || T < 0 || start < 0 || n < 0 || start + n > T || C < 0) return PIPE_INVALID;
    if (B == 0 || n == 0 || C == 0) return (int)cudaSuccess;
    if (!x || !y) return PIPE_INVALID;
    const size_t wx = (size_t)T * C * es, wy = (size_t)n * C * es;
    return (int)cudaMemcpy2DAsync(y, wy, (const char *)x + (size_t)start * C * es, wx, wy, (size_t)B,
                                  cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
}

/* ---- the masked attention -------------------------------------------------------------------------------------- */

/* One block per (query t, head h, sample b): q in shared memory, each thread scores its keys (a whole row each:
 * D products), the block's max and sum, then each thread accumulates output dimensions over the visible keys. */
template <typename T>
__global__ void masked_attention_kernel(const T *q, const T *k, const T *v, const T *kp, const T *vp,
                                        const float *valid, T *o, int H, int Hkv, int D, int Tq, int Tk, int Tp,
                                        int prefix, int first_block, float scale) {
    extern __shared__ float sm[]; /* q (D), scores (Tp + Tk), reduction scratch (32) */
    float *qs = sm, *sc = sm + D, *red = sc + Tp + Tk;
    const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, G = H / Hkv, W = Hkv * D, n = Tp + Tk;
    const int nvalid = prefix + (int)valid[b];
    const size_t qo = (((size_t)b * Tq + t) * H + h) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = ld1(q, qo + d);
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const int own = j >= Tp, jj = own ? j - Tp : j;
        const int padded = kp ? !own : 1;
        int vis = !(padded && jj >= nvalid);
        if (own && first_block && t == 0 && jj > 0) vis = 0;
        float s = -INFINITY;
        if (vis) {
            const T *kr = own ? k + ((size_t)b * Tk + jj) * W + (size_t)(h / G) * D
                              : kp + ((size_t)b * Tp + jj) * W + (size_t)(h / G) * D;
            float acc = 0.0f;
            for (int d = 0; d < D; d++) acc = fmaf(qs[d], ld1(kr, d), acc);
            s = acc * scale;
        }
        sc[j] = s;
        mx = fmaxf(mx, s);
    }
    /* block max, then block sum of exp(s - max) */
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) mx = fmaxf(mx, red[w]);
    __syncthreads();
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float e = sc[j] == -INFINITY ? 0.0f : expf(sc[j] - mx);
        sc[j] = e;
        sum += e;
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) sum += red[w];
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* nothing visible: zeros, as the CPU's */
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < n; j++) {
            if (sc[j] == 0.0f) continue;
            const int own = j >= Tp, jj = own ? j - Tp : j;
            const T *vr = own ? v + ((size_t)b * Tk + jj) * W + (size_t)(h / G) * D
                              : vp + ((size_t)b * Tp + jj) * W + (size_t)(h / G) * D;
            acc = fmaf(sc[j], ld1(vr, d), acc);
        }
        st1(o, qo + d, acc * inv);
    }
}

extern "C" int tpk_masked_attention(const void *q, const void *k, const void *v, const void *kp, const void *vp,
                                    const float *valid, void *o, tp_dtype dt, int B, int H, int Hkv, int D, int Tq,
                                    int Tk, int Tp, int prefix, int first_block, float scale, tp_stream stream) {
    if (B < 0 || Tq < 0 || Tk < 0 || H <= 0 || Hkv <= 0 || H % Hkv || D <= 0 || D > 256 || prefix < 0 ||
        (kp ? Tp < 0 : Tp != 0) || (long long)Tp + Tk > TPK_MASKED_ATTN_MAX_KEYS || !!kp != !!vp || H > 65535 ||
        B > 65535)
        return PIPE_INVALID;
    if (B == 0 || Tq == 0) return (int)cudaSuccess;
    if (!q || !k || !v || !valid || !o) return PIPE_INVALID;
    const size_t smem = sizeof(float) * ((size_t)D + Tp + Tk + 32);
    cudaStream_t s = (cudaStream_t)stream;
    const dim3 grid((unsigned)Tq, (unsigned)H, (unsigned)B);
    PIPE_BY_ACT(dt, T, masked_attention_kernel<T><<<grid, 128, smem, s>>>(
                           (const T *)q, (const T *)k, (const T *)v, (const T *)kp, (const T *)vp, valid, (T *)o, H,
                           Hkv, D, Tq, Tk, Tp, prefix, first_block, scale);
                return launched())
}

/* ---- the masked softmax of the unfused attention ------------------------------------------------------------- */

static __device__ __forceinline__ float block_reduce(float v, int is_max, float *red) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    __syncthreads(); /* red is reused: the previous reduction's readers are done */
    if (lane == 0) red[wid] = v;
    __syncthreads();
    float r = is_max ? -INFINITY : 0.0f;
    for (int k = 0; k < nw; k++) r = is_max ? fmaxf(r, red[k]) : r + red[k];
    return r;
}

template <typename TP>
__global__ void masked_softmax_kernel(const float *S, TP *P, const float *valid, int H, int Tq, int Tp, int o0, int Tk,
                                      int ld, int prefix, int two, int first_block) {
    __shared__ float red[32];
    const long long r = blockIdx.x;
    const int t = (int)(r % Tq), b = (int)(r / ((long long)H * Tq)), n = o0 + Tk;
    const int nvalid = prefix + (int)valid[b]; /* truncated as the CPU's (int64_t) cast */
    const float *s = S + r * ld;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const int own = j >= o0, jj = own ? j - o0 : j, padded = two ? !own : 1;
        const int vis = !(padded && jj >= nvalid) && !(own && first_block && t == 0 && jj > 0) && (own || j < Tp);
        if (vis) mx = fmaxf(mx, s[j]);
    }
    mx = block_reduce(mx, 1, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const int own = j >= o0, jj = own ? j - o0 : j, padded = two ? !own : 1;
        const int vis = !(padded && jj >= nvalid) && !(own && first_block && t == 0 && jj > 0) && (own || j < Tp);
        if (vis) sum += expf(s[j] - mx);
    }
    sum = block_reduce(sum, 0, red);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f; /* nothing visible: zeros, as the CPU's */
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const int own = j >= o0, jj = own ? j - o0 : j, padded = two ? !own : 1;
        const int vis = !(padded && jj >= nvalid) && !(own && first_block && t == 0 && jj > 0) && (own || j < Tp);
        st1(P, (size_t)(r * ld + j), vis ? expf(s[j] - mx) * inv : 0.0f);
    }
}

extern "C" int tpk_masked_softmax(const float *S, void *P, tp_dtype pdt, const float *valid, int B, int H, int Tq,
                                  int Tp, int o0, int Tk, int ld, int prefix, int two, int first_block,
                                  tp_stream stream) {
    if (B < 1 || H < 1 || Tq < 1 || Tp < 0 || o0 < Tp || Tk < 1 || ld < o0 + Tk || prefix < 0 || (two && Tp < 1) ||
        (!two && (Tp != 0 || o0 != 0)) || !S || !P || !valid || (long long)B * H * Tq > 0x7FFFFFFFLL)
        return PIPE_INVALID;
    cudaStream_t s = (cudaStream_t)stream;
    const unsigned grid = (unsigned)((long long)B * H * Tq);
    PIPE_BY_ACT(pdt, TP, masked_softmax_kernel<TP><<<grid, 256, 0, s>>>(S, (TP *)P, valid, H, Tq, Tp, o0, Tk, ld,
                                                                         prefix, two, first_block);
                return launched())
}
