/* attention.cu: fused multi-head attention on tensor cores, FlashAttention-2 style (contract in attention.h): the
 * product's entry points. tpk_flash_attention runs the kernel of attention_impl.cuh (its design and measurements
 * are there) in its default configuration (variant 1: 4 warps x 16 query rows, <= 128 registers for D <= 64), the
 * only one compiled here; the lab's other variants, and the TPK_FA_ABLATIONS diagnostics, are compiled only into
 * the labs and the GPU tests (bench/attention_variants.cu). The second half of this file is the general kernel
 * behind tpk_flash_attention_ex. */
#include "exec/cuda/attention/attention_impl.cuh"
#include "exec/cuda/kernels/pdl.cuh"

/* the default configuration: variant 1 of tpk_flash_attention_variant (bench/lab_variants.h) */
template <typename TI, typename TO, int D> static int fa_default(const fa_args *a) {
    return fa_launch<TI, TO, D, 4, 1, true, D <= 64 ? 4 : 1>(a);
}

template <typename TI, typename TO> static int fa_by_d(int D, const fa_args *a) {
    switch (D) {
    case 32: return fa_default<TI, TO, 32>(a);
    case 64: return fa_default<TI, TO, 64>(a);
    case 80: return fa_default<TI, TO, 80>(a);
    case 96: return fa_default<TI, TO, 96>(a);
    case 128: return fa_default<TI, TO, 128>(a);
    default: return TPK_INVALID;
    }
}

template <typename TI> static int fa_by_out(tp_dtype out_dt, int D, const fa_args *a) {
    switch (out_dt) {
    case TP_F16: return fa_by_d<TI, __half>(D, a);
    case TP_BF16: return fa_by_d<TI, __nv_bfloat16>(D, a);
    case TP_E4M3: return fa_by_d<TI, e4m3_t>(D, a);
    default: return TPK_INVALID;
    }
}

extern "C" int tpk_flash_attention(const void *qkv, tp_dtype in_dt, void *out, tp_dtype out_dt,
                                   const float *out_scale, int B, int T, int H, int D, float scale,
                                   tp_stream stream) {
    const int rc = fa_check(qkv, in_dt, out, out_dt, out_scale, B, T, H, D);
    if (rc != FA_GO) return rc;
    fa_args a = {qkv, out, out_scale, B, T, H, scale, (cudaStream_t)stream};
    switch (in_dt) {
    case TP_F16: return fa_by_out<__half>(out_dt, D, &a);
    case TP_BF16: return fa_by_out<__nv_bfloat16>(out_dt, D, &a);
    default: return TPK_INVALID;
    }
}

/* ================================================================================================================
 * The general kernel (tpk_flash_attention_ex, attention.h): separate strided Q/K/V/O, Tq != Tkv, causal masks
 * aligned bottom-right, grouped-query attention, split-KV. Same per-tile code as above (fa_tile, fa_load_tile; the
 * per-row limits through fa_tile's ROWS mode), 4 warps a CTA, Q in registers.
 *
 * Rows. A CTA owns a tile of "rows" of one (batch b, KV head hk): row r = t * G + i is query t of head
 * hk * G + i (G = H / Hkv), so the G query heads that share a KV head share every K/V tile the CTA loads, and M =
 * G * Tq rows exist per (b, hk). Tiles: BMR = 64 rows (4 warps x 16; prefill) or, when M <= 16 (decode: Tq * G
 * <= 16), BMR = 16 rows (DEC: less shared memory, so 3 CTAs per SM at D = 128 instead of 2, registers capped at
 * 168 for that: more K/V bytes in flight). A tile holding <= 16 rows (always with DEC) runs in split mode as the
 * kernel above: each warp takes 16 keys of every 64-key tile and the 4 partial states are merged through shared
 * memory at the end.
 * Keys. Split s (of n_splits) covers keys [s L, s L + L) (L a multiple of 64). With causal, row r sees keys
 * j < lim(r) = t + Tkv - Tq + 1 (t = r / G), so the CTA's key loop ends at lim(its last row): tiles wholly above the
 * diagonal are never loaded. Per warp and 64-key tile: no row of the warp sees a key there -> skipped; every row
 * sees all of it -> the unmasked tile code; else the masked code with each row's own limit (fa_tile ROWS).
 * Work order: the (b, KV head) pairs are cut into groups of hg whose K/V fit in half the L2 (hg = L2 / 2 / (Tkv
 * D 4 bytes)); blockIdx.x runs group by group, and inside a group over query tiles (slowest) then pairs, then
 * splits (fastest). So the CTAs running together share the K/V of a few heads in L2, and the longest query tiles
 * start first (causal: the last tiles, which see the most keys; non-causal: the full tiles before the ragged last
 * one), so short CTAs fill the tail. Measured on an H200 (causal prefill, H 32, D 128): query tile slowest over all
 * heads, B 8 S 4096 streamed each head's 2 MB of K/V from HBM for every tile (218 TFLOP/s against 275 at B 1);
 * heads slowest, B 1 S 1024 lost the longest-first balance (178 -> 139 TFLOP/s). Groups keep both.
 * Measured (H200, f16, D 128, H 32, bench/results/2026-11-21_h200_decoder_attention.json; cuDNN 9.19 alongside):
 * causal prefill 181 (B 1, S 1024) to 263 (B 8, S 4096) TFLOP/s, 26-38% of the measured FP16 GEMM peak, against
 * cuDNN's 258-535 (its Hopper engine uses wgmma; mma.sync here); decode (Tq 1) at B 64 reads K/V at 3.5-4.3 TB/s
 * (cuDNN 4.0-4.6) and at B 1 takes 3-13% longer than cuDNN (split-KV: 8 to 43 key ranges).
 * Output: n_splits = 1 -> O / l written in out_dt (l = 0: a row that saw no key -> zeros); n_splits > 1 -> per row
 * the fp32 partial state (m = row max of s * |scale| log2 e, l = sum of 2^(s |scale| log2 e - m), unnormalized O)
 * to the workspace, merged by flash_attn_combine_kernel.
 * ============================================================================================================== */

#define FX_MAX_SPLITS 128
#define FX_MAX_DEV 64

/* What the launch needs besides the kernel parameters: the keys (virtual ones in the masked mode), the head dim,
 * the split request and workspace, the output type, the mode. */
typedef struct {
    int Tkv, D, num_splits, masked;
    tp_dtype in_dt, out_dt;
    void *workspace;
    size_t workspace_bytes;
} fx_req;

typedef struct {
    const void *q, *k, *v;
    void *o;
    long long q_bs, q_rs, k_bs, k_rs, v_bs, v_rs, o_bs, o_rs; /* elements */
    const float *out_scale;
    float *ws_o, *ws_ml; /* split-KV partials: [split][row][D] and [split][row][2] (m, l); row = (b H + h) Tq + t */
    long long R;         /* B * H * Tq */
    int H, Hkv, G, Tq, Tkv, M, n_bh, n_mtiles, n_splits, split_keys, off, causal;
    int hg; /* (b, KV head) pairs per group of the work order */
    float sl2;
    uint32_t qneg;
    /* pi0's masks (tpk_flash_attention_masked; MSK kernels only). The keys are two sources laid end to end in a
     * "virtual" key order: the padded source kp, vp (Tp keys) at 0 .. tp64 - 1 (tp64 = Tp rounded up to the 64-key
     * tile), then the own keys k, v (Tk) at tp64 .. Tkv - 1 (Tkv = tp64 + Tk), so no tile mixes sources; one source
     * (kp NULL): tp64 = 0 and the own keys are the padded ones. */
    const void *kp, *vp;
    long long kp_bs, kp_rs, vp_bs, vp_rs;
    const float *valid; /* device, B fp32 counts */
    int tp64, Tp, Tk, prefix, first_block;
} fx_params;

/* Exclusive end of the keys row r sees, clamped to the CTA's key range end kv_hi. */
__device__ __forceinline__ int fx_lim(const fx_params &p, int kv_hi, int r) {
    return p.causal ? min(kv_hi, r / p.G + p.off + 1) : kv_hi;
}

/* The masked mode's limits (tp_cpu_masked_attention's rules): sample b's padded keys below cap = prefix +
 * (int)valid[b] are visible (the count clamped so that a corrupt count masks every key or none, never overflows).
 * capp: the padded source's visible keys, capo: the own source's. */
__device__ __forceinline__ void fx_caps(const fx_params &p, int b, int *capp, int *capo) {
    const float vf = fminf(fmaxf(p.valid[b], -1e9f), 1e9f); /* NaN -> -1e9: nothing visible */
    const long long nv = (long long)p.prefix + (long long)(int)vf;
    const int cap = nv < 0 ? 0 : nv > 0x7FFFFFFFLL ? 0x7FFFFFFF : (int)nv;
    *capp = p.kp ? min(p.Tp, cap) : 0;
    *capo = p.kp ? p.Tk : min(p.Tk, cap);
}

/* Exclusive end, in virtual keys, of what row r sees in the tile starting at virtual key vk (masked mode): every
 * row the same in the padded source's tiles; in the own source's, the first query (rows 0 .. G - 1: t = 0) sees the
 * own first key only when first_block. Clamped to kv_hi; monotone in r. */
__device__ __forceinline__ int fx_mlim(const fx_params &p, int kv_hi, int vk, int capp, int capo, int r) {
    if (vk < p.tp64) return min(kv_hi, capp);
    return min(kv_hi, p.tp64 + (p.first_block && r < p.G ? min(1, capo) : capo));
}

/* The K, V rows of the tile at virtual key vk (masked mode) for (b, hk): *k, *v at its first key, their row
 * strides; returns the keys of the tile that may be read (<= 0: none; loads zero-fill the rest). */
template <typename TI, int D>
__device__ __forceinline__ int fx_msrc(const fx_params &p, int b, int hk, int vk, int kv_hi, int capp, int capo,
                                       const TI **k, const TI **v, size_t *krs, size_t *vrs) {
    if (vk < p.tp64) {
        *k = reinterpret_cast<const TI *>(p.kp) + (long long)b * p.kp_bs + (long long)hk * D + (long long)vk * p.kp_rs;
        *v = reinterpret_cast<const TI *>(p.vp) + (long long)b * p.vp_bs + (long long)hk * D + (long long)vk * p.vp_rs;
        *krs = (size_t)p.kp_rs, *vrs = (size_t)p.vp_rs;
        return min(capp, kv_hi) - vk;
    }
    const int j = vk - p.tp64;
    *k = reinterpret_cast<const TI *>(p.k) + (long long)b * p.k_bs + (long long)hk * D + (long long)j * p.k_rs;
    *v = reinterpret_cast<const TI *>(p.v) + (long long)b * p.v_bs + (long long)hk * D + (long long)j * p.v_rs;
    *krs = (size_t)p.k_rs, *vrs = (size_t)p.v_rs;
    return min(capo, kv_hi - p.tp64) - j;
}

/* One 64-key tile of K and V into shared memory (k_s, v_s) at virtual key vk (masked mode). */
template <typename TI, int D, int BN, int NT>
__device__ __forceinline__ void fx_mload(const fx_params &p, uint32_t k_s, uint32_t v_s, int b, int hk, int vk,
                                         int kv_hi, int capp, int capo, int tid) {
    const TI *k, *v;
    size_t krs, vrs;
    const int n = fx_msrc<TI, D>(p, b, hk, vk, kv_hi, capp, capo, &k, &v, &krs, &vrs);
    if (n >= BN) {
        fa_load_tile<TI, D, BN, NT, true>(k_s, k, krs, BN, tid);
        fa_load_tile<TI, D, BN, NT, true>(v_s, v, vrs, BN, tid);
    } else {
        fa_load_tile<TI, D, BN, NT, false>(k_s, k, krs, n, tid);
        fa_load_tile<TI, D, BN, NT, false>(v_s, v, vrs, n, tid);
    }
}

/* Rows row0 .. row0 + ROWS - 1 of (b, hk) into shared memory at dst (rows of D + 8 elements); rows >= M are
 * zero-filled (cp.async with src-size 0 reads nothing). */
template <typename TI, int D, int ROWS, int NT>
__device__ __forceinline__ void fx_load_q(uint32_t dst, const fx_params &p, int b, int hk, int row0, int tid) {
    constexpr int CH = D / 8, LDB = (D + 8) * (int)sizeof(TI), N = ROWS * CH, ITERS = (N + NT - 1) / NT;
    const TI *q = reinterpret_cast<const TI *>(p.q) + (long long)b * p.q_bs + (long long)hk * p.G * D;
#pragma unroll
    for (int i = 0; i < ITERS; i++) {
        const int e = tid + i * NT;
        if (N % NT == 0 || e < N) {
            const int r = e / CH, c = e % CH, row = row0 + r;
            const bool in = row < p.M;
            const int t = in ? row / p.G : 0, hi = in ? row - t * p.G : 0;
            cp_async16(dst + (uint32_t)(r * LDB + c * 16), q + (long long)t * p.q_rs + hi * D + c * 8, in ? 16 : 0);
        }
    }
}

/* Per-row destination of output row r of (b, hk), in bytes from p.o. */
template <typename TO>
__device__ __forceinline__ long long fx_out_off(const fx_params &p, int b, int hk, int r, int D) {
    const int t = r / p.G, h = hk * p.G + (r - t * p.G);
    return ((long long)b * p.o_bs + (long long)t * p.o_rs + (long long)h * D) * (long long)sizeof(TO);
}

template <typename TI, typename TO, int D, bool DEC, bool MSK>
__global__ void __launch_bounds__(128, D <= 64 ? 4 : D > 128 ? 1 : DEC ? 3 : 2) flash_attn_ex_kernel(const fx_params p) {
    constexpr int NW = 4, BMR = DEC ? 16 : NW * 16, BN = FA_BN, LD = D + 8, NT = NW * 32, KD = D / 16, ND = D / 8;
    /* Q's A fragments in registers up to D 128; at D 256 the 128 fp32 accumulators of O leave no room for them,
     * so fa_tile reads them from shared memory at every tile */
    constexpr bool QR = D <= 128;
    constexpr uint32_t QB = (uint32_t)(BMR * LD * sizeof(TI)), TILE_B = (uint32_t)(BN * LD * sizeof(TI));
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c2 = 2 * (lane & 3);
    /* PDL (pdl.cuh): everything this kernel reads is written by the kernels before it */
    tpk_pdl_trigger();
    tpk_pdl_wait();

    const int sp = (int)(blockIdx.x % (unsigned)p.n_splits), rest = (int)(blockIdx.x / (unsigned)p.n_splits);
    const int grp = rest / (p.hg * p.n_mtiles), within = rest - grp * p.hg * p.n_mtiles; /* group, place in it */
    const int gh = min(p.hg, p.n_bh - grp * p.hg);                                          /* pairs in it */
    const int j = within / gh, bh = grp * p.hg + (within - j * gh);
    const int mt = p.causal ? p.n_mtiles - 1 - j : j;
    const int b = bh / p.Hkv, hk = bh - b * p.Hkv;
    const int row0 = mt * BMR, last = min(row0 + BMR, p.M) - 1; /* the tile's rows: row0 .. last */
    const bool split = DEC || last - row0 < 16;                  /* CTA-uniform */
    const int kv_lo = sp * p.split_keys;
    int kv_hi = min(p.Tkv, kv_lo + p.split_keys);
    if (p.causal) kv_hi = min(kv_hi, last / p.G + p.off + 1); /* the last row's diagonal: nothing above it loads */
    const int nkt = kv_hi > kv_lo ? (kv_hi - kv_lo + BN - 1) / BN : 0;
    int capp = 0, capo = 0;
    if (MSK) fx_caps(p, b, &capp, &capo);

    const uint32_t q_s = smem_u32(fa_smem), k_s = q_s + QB, v_s = k_s + 2 * TILE_B;
    const size_t krs = (size_t)p.k_rs, vrs = (size_t)p.v_rs;
    const TI *kbase = NULL, *vbase = NULL;
    fx_load_q<TI, D, BMR, NT>(q_s, p, b, hk, row0, tid);
    if (MSK && nkt > 0) {
        fx_mload<TI, D, BN, NT>(p, k_s, v_s, b, hk, kv_lo, kv_hi, capp, capo, tid);
    } else if (nkt > 0) {
        kbase = reinterpret_cast<const TI *>(p.k) + (long long)b * p.k_bs + (long long)hk * D +
                (long long)kv_lo * p.k_rs;
        vbase = reinterpret_cast<const TI *>(p.v) + (long long)b * p.v_bs + (long long)hk * D +
                (long long)kv_lo * p.v_rs;
        fa_load_tile<TI, D, BN, NT, false>(k_s, kbase, krs, kv_hi - kv_lo, tid);
        fa_load_tile<TI, D, BN, NT, false>(v_s, vbase, vrs, kv_hi - kv_lo, tid);
    }
    cp_async_commit();

    const int qw = split ? 0 : warp, kw = split ? warp * 16 : 0;
    const int w0 = row0 + qw * 16, wl = min(w0 + 15, last); /* the warp's rows w0 .. wl */
    const bool active = w0 <= last;                         /* warp-uniform */
    int lim_a = fx_lim(p, kv_hi, min(w0 + g, wl)), lim_b = fx_lim(p, kv_hi, min(w0 + g + 8, wl));
    int w_lo = fx_lim(p, kv_hi, w0), w_hi = fx_lim(p, kv_hi, wl); /* lim is monotone in r */

    const uint32_t q_addr = q_s + (uint32_t)(((qw * 16 + (lane & 15)) * LD + (lane >> 4) * 8) * sizeof(TI));
    const uint32_t k_addr =
        k_s + (uint32_t)(((kw + (lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8) * sizeof(TI));
    const uint32_t v_addr = v_s + (uint32_t)(((kw + (lane & 15)) * LD + (lane >> 4) * 8) * sizeof(TI));

    uint32_t qf[QR ? KD : 1][4];
    float o[1][ND][4], ms[1][2], l[1][2];
#pragma unroll
    for (int n = 0; n < ND; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
    ms[0][0] = ms[0][1] = -INFINITY;
    l[0][0] = l[0][1] = 0.0f;

    for (int kt = 0; kt < nkt; kt++) {
        const int buf = kt & 1;
        cp_async_wait<0>();
        __syncthreads(); /* tile kt visible to all; every warp is done with buffer buf ^ 1 */
        if (kt + 1 < nkt) {
            const int r1 = (kt + 1) * BN;
            const uint32_t nb = (uint32_t)(buf ^ 1) * TILE_B;
            if (MSK) {
                fx_mload<TI, D, BN, NT>(p, k_s + nb, v_s + nb, b, hk, kv_lo + r1, kv_hi, capp, capo, tid);
            } else if (kv_lo + r1 + BN <= kv_hi) {
                fa_load_tile<TI, D, BN, NT, true>(k_s + nb, kbase + (size_t)r1 * krs, krs, BN, tid);
                fa_load_tile<TI, D, BN, NT, true>(v_s + nb, vbase + (size_t)r1 * vrs, vrs, BN, tid);
            } else {
                fa_load_tile<TI, D, BN, NT, false>(k_s + nb, kbase + (size_t)r1 * krs, krs, kv_hi - kv_lo - r1, tid);
                fa_load_tile<TI, D, BN, NT, false>(v_s + nb, vbase + (size_t)r1 * vrs, vrs, kv_hi - kv_lo - r1, tid);
            }
            cp_async_commit();
        }
        if (!active) continue;
        if (QR && kt == 0) {
#pragma unroll
            for (int kk = 0; kk < (QR ? KD : 0); kk++) {
                ldsm_x4(q_addr + kk * 32, qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
#pragma unroll
                for (int r = 0; r < 4; r++) qf[kk][r] ^= p.qneg;
            }
        }
        const uint32_t kb = k_addr + (uint32_t)buf * TILE_B, vb = v_addr + (uint32_t)buf * TILE_B;
        const int k0 = kv_lo + kt * BN + kw; /* the first key of the warp's part of the tile */
        if (MSK) { /* the limits of the tile's source (fx_mlim) */
            const int vk = kv_lo + kt * BN;
            lim_a = fx_mlim(p, kv_hi, vk, capp, capo, min(w0 + g, wl));
            lim_b = fx_mlim(p, kv_hi, vk, capp, capo, min(w0 + g + 8, wl));
            w_lo = fx_mlim(p, kv_hi, vk, capp, capo, w0), w_hi = fx_mlim(p, kv_hi, vk, capp, capo, wl);
        }
        if (k0 >= w_hi) continue;           /* no row of the warp sees a key here */
        if (split) {
            if (k0 + 16 <= w_lo)
                fa_tile<TI, D, 1, QR, 1, false, 0>(o, ms, l, qf, q_addr, kb, vb, 16, p.sl2, p.qneg, lane);
            else
                fa_tile<TI, D, 1, QR, 1, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, lim_a - k0, p.sl2, p.qneg,
                                                          lane, lim_b - k0);
        } else if (k0 + BN <= w_lo) {
            fa_tile<TI, D, 1, QR, BN / 16, false, 0>(o, ms, l, qf, q_addr, kb, vb, BN, p.sl2, p.qneg, lane);
        } else {
            const int va = lim_a - k0, vb2 = lim_b - k0;
            switch ((min(BN, w_hi - k0) + 15) / 16) {
            case 1:
                fa_tile<TI, D, 1, QR, 1, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, va, p.sl2, p.qneg, lane, vb2);
                break;
            case 2:
                fa_tile<TI, D, 1, QR, 2, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, va, p.sl2, p.qneg, lane, vb2);
                break;
            case 3:
                fa_tile<TI, D, 1, QR, 3, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, va, p.sl2, p.qneg, lane, vb2);
                break;
            default:
                fa_tile<TI, D, 1, QR, 4, true, 0, true>(o, ms, l, qf, q_addr, kb, vb, va, p.sl2, p.qneg, lane, vb2);
                break;
            }
        }
    }
    if (nkt == 0) { /* no K/V tile: the Q copies must land before the staging below reuses their rows */
        cp_async_wait<0>();
        __syncthreads();
    }

    if (split) {
        /* merge the 4 partial states into warp 0's through the K/V buffers, as flash_attn_kernel does; a warp that
         * saw no key has m = -inf and l = 0 (reference 0 when every m is -inf: weights 2^-inf = 0, never NaN) */
        constexpr int NV = 4 + 4 * ND;
        static_assert((NW - 1) * NV * 32 * 4 <= 4 * BN * LD * (int)sizeof(TI), "merge buffer exceeds K/V smem");
        float *mb = reinterpret_cast<float *>(fa_smem + QB);
        if (!fa_merge_warps<NW, ND>(ms[0], l[0], o[0], mb, warp, lane)) return;
    }
    if (!active) return;

    float l0 = l[0][0], l1 = l[0][1];
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);

    if (p.n_splits > 1) {
        /* the partial state of the thread's two rows (ms is already the same in the 4 threads of a quad) */
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int r = w0 + g + 8 * half;
            if (r > last) continue;
            const int t = r / p.G, h = hk * p.G + (r - t * p.G);
            const long long slot = (long long)sp * p.R + ((long long)b * p.H + h) * p.Tq + t;
            float *po = p.ws_o + slot * D + c2;
#pragma unroll
            for (int n = 0; n < ND; n++)
                *reinterpret_cast<float2 *>(po + n * 8) = make_float2(o[0][n][2 * half], o[0][n][2 * half + 1]);
            if ((lane & 3) == 0)
                *reinterpret_cast<float2 *>(p.ws_ml + 2 * slot) = make_float2(ms[0][half], half ? l1 : l0);
        }
        return;
    }

    /* O / l in out_dt, staged in the warp's own Q rows (split mode: warp 0, rows 0..15), then 16-byte chunks */
    constexpr int SROW = LD * (int)sizeof(TI), OCH = D * (int)sizeof(TO) / 16;
    const float sc = fa_out_scale<TO>(p.out_scale), rcp = 1.0f / sc;
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f; /* no key seen: 0 */
    unsigned char *st = fa_smem + (size_t)warp * 16 * SROW;
    __syncwarp(); /* every lane's last ldmatrix of these Q rows before any lane overwrites them (racecheck) */
#pragma unroll
    for (int n = 0; n < ND; n++) {
        st2(st + g * SROW + (n * 8 + c2) * (int)sizeof(TO), o[0][n][0] * inv0, o[0][n][1] * inv0, sc, rcp, TO());
        st2(st + (g + 8) * SROW + (n * 8 + c2) * (int)sizeof(TO), o[0][n][2] * inv1, o[0][n][3] * inv1, sc, rcp,
            TO());
    }
    __syncwarp();
    unsigned char *obase = reinterpret_cast<unsigned char *>(p.o);
#pragma unroll
    for (int i = 0; i < (16 * OCH + 31) / 32; i++) {
        const int e = lane + i * 32;
        if ((16 * OCH) % 32 == 0 || e < 16 * OCH) {
            const int r = e / OCH, c = e % OCH;
            if (w0 + r <= last)
                *reinterpret_cast<uint4 *>(obase + fx_out_off<TO>(p, b, hk, w0 + r, D) + c * 16) =
                    *reinterpret_cast<const uint4 *>(st + r * SROW + c * 16);
        }
    }
}

/* Merges the n_splits partial states of every row, one CTA (4 warps) a row: m = max_s m_s, weights w_s =
 * 2^(m_s - m) (0 for a split that saw no key), l = sum_s w_s l_s, O = sum_s w_s O_s / l (0 when l = 0), written in
 * out_dt as the main kernel's epilogue would. Warp w sums the splits s = w, w + 4, ... with 16-byte loads (lane: 4
 * columns), 4 splits' loads in flight at a time; the 4 warp sums meet in shared memory. (A first version, one warp
 * a row looping over the splits with dependent 8-byte loads, took ~25 us for 43 splits at B 1 on an H200: a chain of
 * L2 latencies with 8 CTAs in the whole grid.) Columns in passes of 128 (D 256: two). */
template <typename TO> __global__ void __launch_bounds__(128) flash_attn_combine_kernel(const fx_params p, int D) {
    __shared__ float wsh[FX_MAX_SPLITS], red[2][4];
    __shared__ float4 part[4][32];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, n = p.n_splits;
    tpk_pdl_trigger(); /* PDL (pdl.cuh): the partials come from the kernel before */
    tpk_pdl_wait();
    const long long row = blockIdx.x;
    const float2 *ml = reinterpret_cast<const float2 *>(p.ws_ml);
    const float2 st = tid < n ? ml[tid * p.R + row] : make_float2(-INFINITY, 0.0f); /* n <= 128 = threads */
    float m = st.x;
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
    if (lane == 0) red[0][warp] = m;
    __syncthreads();
    m = fmaxf(fmaxf(red[0][0], red[0][1]), fmaxf(red[0][2], red[0][3]));
    const float ref = m == -INFINITY ? 0.0f : m;
    const float w_s = st.x == -INFINITY ? 0.0f : fast_exp2(st.x - ref);
    if (tid < n) wsh[tid] = w_s;
    float L = w_s * st.y;
#pragma unroll
    for (int w = 16; w >= 1; w >>= 1) L += __shfl_xor_sync(0xffffffffu, L, w);
    if (lane == 0) red[1][warp] = L;
    __syncthreads();
    L = red[1][0] + red[1][1] + red[1][2] + red[1][3];
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    const int t = (int)(row % p.Tq), bh = (int)(row / p.Tq), h = bh % p.H, b = bh / p.H;
    const float sc = fa_out_scale<TO>(p.out_scale), rcp = 1.0f / sc;
    for (int c = 4 * lane; c - 4 * lane < D; c += 128) { /* 128 columns a pass: one pass up to D 128, two at 256 */
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (c < D) {
            const float *base = p.ws_o + row * D + c;
#pragma unroll 4
            for (int s = warp; s < n; s += 4) {
                const float4 x = *reinterpret_cast<const float4 *>(base + (long long)s * p.R * D);
                const float w = wsh[s]; /* the O of a split that saw no key is 0 (written so), never garbage */
                acc.x = fmaf(w, x.x, acc.x), acc.y = fmaf(w, x.y, acc.y);
                acc.z = fmaf(w, x.z, acc.z), acc.w = fmaf(w, x.w, acc.w);
            }
        }
        if (c > 4 * lane) __syncthreads(); /* warp 0 is done reading the previous pass's parts */
        part[warp][lane] = acc;
        __syncthreads();
        if (warp > 0 || c >= D) continue;
        float4 o = part[0][lane];
        for (int w = 1; w < 4; w++) {
            const float4 x = part[w][lane];
            o.x += x.x, o.y += x.y, o.z += x.z, o.w += x.w;
        }
        unsigned char *orow = reinterpret_cast<unsigned char *>(p.o) +
                              ((long long)b * p.o_bs + (long long)t * p.o_rs + (long long)h * D + c) *
                                  (long long)sizeof(TO);
        st2(orow, o.x * inv, o.y * inv, sc, rcp, TO());
        st2(orow + 2 * sizeof(TO), o.z * inv, o.w * inv, sc, rcp, TO());
    }
}

/* ---- host side of the general kernel --------------------------------------------------------------------------- */

/* Key ranges actually used when asking for n over ntiles 64-key tiles (whole tiles per range). */
static int fx_ranges(int n, int ntiles) {
    const int per = (ntiles + n - 1) / n;
    return (ntiles + per - 1) / per;
}

/* Key ranges for ctas CTAs over ntiles 64-key tiles, slots resident CTAs on the device. Requested (>= 1): that
 * many, at most one a tile. Automatic, as FlashAttention-2's num_splits_heuristic (flash_api.cpp) reasons: for
 * every n up to min(ntiles, FX_MAX_SPLITS), the wave efficiency e(n) = w / ceil(w) of w = ctas * ranges(n) / slots
 * waves, and the smallest n within 85% of the best e (a CTA's run time is about its share of the keys, so a last
 * partial wave costs a whole wave's time: B 64 x 8 KV heads decode is 512 CTAs, 1.3 waves of 396 at D 128, so it
 * takes 2 key ranges); none when there are 4 or more waves already (e >= 0.8). FlashAttention-2 also returns 1
 * once the CTAs fill 80% of the slots; that would leave the 1.3-wave case above unsplit. */
static int fx_splits(int requested, long long ctas, int ntiles, long long slots) {
    const int cap = ntiles < FX_MAX_SPLITS ? ntiles : FX_MAX_SPLITS;
    if (cap <= 1) return 1;
    if (requested >= 1) return fx_ranges(requested < cap ? requested : cap, ntiles);
    if (ctas >= 4 * slots) return 1;
    double eff[FX_MAX_SPLITS + 1], best = 0.0;
    for (int n = 1; n <= cap; n++) {
        const double w = (double)ctas * fx_ranges(n, ntiles) / (double)slots;
        eff[n] = w / ceil(w);
        if (eff[n] > best) best = eff[n];
    }
    for (int n = 1; n <= cap; n++)
        if (eff[n] >= 0.85 * best) return fx_ranges(n, ntiles);
    return 1;
}

/* Plans (and unless plan_only, launches) one instantiation: kernel attribute and occupancy cached per device
 * (host-side queries only: allowed during stream capture), the split count, the workspace. */
template <typename TI, typename TO, int D, bool DEC, bool MSK>
static int fx_run(const fx_req *a, fx_params *p, int plan_only, int *splits_out, size_t *bytes_out,
                  cudaStream_t stream) {
    constexpr int BMR = DEC ? 16 : 64;
    const size_t smem = (size_t)(BMR + 4 * FA_BN) * (D + 8) * sizeof(TI);
    static int s_occ[FX_MAX_DEV], s_sms[FX_MAX_DEV], s_l2[FX_MAX_DEV]; /* 0 = not queried yet (benign races) */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return (int)e;
    if (dev < 0 || dev >= FX_MAX_DEV) return TPK_INVALID;
    if (smem > 48 * 1024) /* every call, as fa_launch: it lives in the device's context */
        e = cudaFuncSetAttribute(flash_attn_ex_kernel<TI, TO, D, DEC, MSK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
    if (e != cudaSuccess) return (int)e;
    if (s_occ[dev] == 0) {
        int sms = 0, occ = 0, l2 = 0;
        e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
        if (e == cudaSuccess)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, flash_attn_ex_kernel<TI, TO, D, DEC, MSK>, 128, smem);
        if (e != cudaSuccess) return (int)e;
        s_sms[dev] = sms > 0 ? sms : 1;
        s_l2[dev] = l2 > 0 ? l2 : 1;
        s_occ[dev] = occ > 0 ? occ : 1;
    }
    p->n_mtiles = (p->M + BMR - 1) / BMR;
    const long long kv_pair = (long long)a->Tkv * D * 2 * (long long)sizeof(TI); /* K and V of one (b, hk) */
    const long long hg = kv_pair > 0 ? (long long)s_l2[dev] / 2 / kv_pair : p->n_bh;
    p->hg = hg < 1 ? 1 : hg > p->n_bh ? p->n_bh : (int)hg;
    const long long ctas = (long long)p->n_bh * p->n_mtiles;
    const int ntiles = (a->Tkv + FA_BN - 1) / FA_BN;
    int n = a->Tkv > 0 ? fx_splits(a->num_splits, ctas, ntiles, (long long)s_sms[dev] * s_occ[dev]) : 1;
    const size_t per_split = (size_t)p->R * (size_t)(D + 2) * sizeof(float);
    if (!plan_only && n > 1 && (size_t)n * per_split > a->workspace_bytes) {
        const size_t fit = a->workspace ? a->workspace_bytes / per_split : 0;
        n = fit >= 2 ? (int)fit : 1;
    }
    /* L = whole tiles per range; the count actually needed for L */
    const int tiles_per = (ntiles + n - 1) / (n > 0 ? n : 1);
    p->split_keys = (tiles_per > 0 ? tiles_per : 1) * FA_BN;
    p->n_splits = a->Tkv > 0 ? (a->Tkv + p->split_keys - 1) / p->split_keys : 1;
    if (splits_out) *splits_out = p->n_splits;
    if (bytes_out) *bytes_out = p->n_splits > 1 ? (size_t)p->n_splits * per_split : 0;
    if (plan_only) return 0;
    const long long blocks = ctas * p->n_splits;
    if (blocks > 0x7FFFFFFFLL) return TPK_INVALID;
    if (p->n_splits > 1) {
        p->ws_o = reinterpret_cast<float *>(a->workspace);
        p->ws_ml = p->ws_o + (size_t)p->n_splits * (size_t)p->R * D;
    }
    /* both kernels with the PDL attribute (pdl.cuh): each may start while the kernel before it finishes */
    e = tpk_pdl_launch_kernel(flash_attn_ex_kernel<TI, TO, D, DEC, MSK>, dim3((unsigned)blocks), dim3(128), smem,
                              stream, *p);
    if (e != cudaSuccess || p->n_splits == 1) return tpk_pdl_launched(e);
    const long long cblocks = p->R; /* one CTA a row */
    if (cblocks > 0x7FFFFFFFLL) return TPK_INVALID;
    return tpk_pdl_launched(tpk_pdl_launch_kernel(flash_attn_combine_kernel<TO>, dim3((unsigned)cblocks), dim3(128),
                                                  (size_t)0, stream, *p, D));
}

template <typename TI, typename TO, int D, bool MSK>
static int fx_by_mode(const fx_req *a, fx_params *p, int plan_only, int *splits, size_t *bytes, cudaStream_t s) {
    return p->M <= 16 ? fx_run<TI, TO, D, true, MSK>(a, p, plan_only, splits, bytes, s)
                      : fx_run<TI, TO, D, false, MSK>(a, p, plan_only, splits, bytes, s);
}

/* The head dims: tpk_flash_attention_ex's, and the masked mode's (pi0: 256; pi0-small: 16) */
template <typename TI, typename TO>
static int fx_by_d(const fx_req *a, fx_params *p, int plan_only, int *splits, size_t *bytes, cudaStream_t s) {
    if (a->masked) {
        switch (a->D) {
        case 16: return fx_by_mode<TI, TO, 16, true>(a, p, plan_only, splits, bytes, s);
        case 32: return fx_by_mode<TI, TO, 32, true>(a, p, plan_only, splits, bytes, s);
        case 64: return fx_by_mode<TI, TO, 64, true>(a, p, plan_only, splits, bytes, s);
        case 128: return fx_by_mode<TI, TO, 128, true>(a, p, plan_only, splits, bytes, s);
        case 256: return fx_by_mode<TI, TO, 256, true>(a, p, plan_only, splits, bytes, s);
        default: return TPK_INVALID;
        }
    }
    switch (a->D) {
    case 32: return fx_by_mode<TI, TO, 32, false>(a, p, plan_only, splits, bytes, s);
    case 64: return fx_by_mode<TI, TO, 64, false>(a, p, plan_only, splits, bytes, s);
    case 80: return fx_by_mode<TI, TO, 80, false>(a, p, plan_only, splits, bytes, s);
    case 96: return fx_by_mode<TI, TO, 96, false>(a, p, plan_only, splits, bytes, s);
    case 128: return fx_by_mode<TI, TO, 128, false>(a, p, plan_only, splits, bytes, s);
    default: return TPK_INVALID;
    }
}

template <typename TI>
static int fx_by_out(const fx_req *a, fx_params *p, int plan_only, int *splits, size_t *bytes, cudaStream_t s) {
    switch (a->out_dt) {
    case TP_F16: return fx_by_d<TI, __half>(a, p, plan_only, splits, bytes, s);
    case TP_BF16: return fx_by_d<TI, __nv_bfloat16>(a, p, plan_only, splits, bytes, s);
    case TP_E4M3: return fx_by_d<TI, e4m3_t>(a, p, plan_only, splits, bytes, s);
    default: return TPK_INVALID;
    }
}

/* Checks *a and fills the kernel parameters; 1 = work to do, 0 = empty (success, no launch), < 0 = invalid.
 * check_ptrs: also the pointers (the enqueue; the plan query ignores them). */
static int fx_prepare(const tpk_attn_args *a, fx_params *p, int check_ptrs) {
    if (!a) return -1;
    if ((a->in_dt != TP_F16 && a->in_dt != TP_BF16) ||
        (a->out_dt != TP_F16 && a->out_dt != TP_BF16 && a->out_dt != TP_E4M3))
        return -1;
    if (a->D != 32 && a->D != 64 && a->D != 80 && a->D != 96 && a->D != 128) return -1;
    if (a->B < 0 || a->H < 0 || a->Hkv < 1 || a->Tq < 0 || a->Tkv < 0 || a->num_splits < 0) return -1;
    if (a->H % a->Hkv != 0 || !isfinite(a->scale)) return -1;
    const long long s_in[6] = {a->q_batch_stride, a->q_row_stride, a->k_batch_stride,
                               a->k_row_stride,   a->v_batch_stride, a->v_row_stride};
    for (int i = 0; i < 6; i++)
        if (s_in[i] < 0 || s_in[i] % 8 != 0) return -1; /* 16-byte steps for cp.async */
    const long long oq = a->out_dt == TP_E4M3 ? 16 : 8;  /* 16-byte output chunks */
    if (a->o_batch_stride < 0 || a->o_row_stride < 0 || a->o_batch_stride % oq != 0 || a->o_row_stride % oq != 0)
        return -1;
    if (a->B == 0 || a->H == 0 || a->Tq == 0) return 0;
    const long long M = (long long)(a->H / a->Hkv) * a->Tq, R = (long long)a->B * a->H * a->Tq;
    if (M > 0x7FFFFFFFLL - 64 || (long long)a->B * a->Hkv > 0x7FFFFFFFLL || (long long)a->Tkv + FA_BN > 0x7FFFFFFFLL)
        return -1;
    if (check_ptrs) {
        if (!a->q || !a->o || (a->Tkv > 0 && (!a->k || !a->v))) return -1;
        if (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v | (uintptr_t)a->o | (uintptr_t)a->workspace) % 16)
            return -1;
        if (a->out_dt == TP_E4M3 && !a->out_scale) return -1;
    }
    memset(p, 0, sizeof *p);
    p->q = a->q, p->k = a->k, p->v = a->v, p->o = a->o;
    p->q_bs = a->q_batch_stride, p->q_rs = a->q_row_stride, p->k_bs = a->k_batch_stride, p->k_rs = a->k_row_stride;
    p->v_bs = a->v_batch_stride, p->v_rs = a->v_row_stride, p->o_bs = a->o_batch_stride, p->o_rs = a->o_row_stride;
    p->out_scale = a->out_scale;
    p->R = R;
    p->H = a->H, p->Hkv = a->Hkv, p->G = a->H / a->Hkv, p->Tq = a->Tq, p->Tkv = a->Tkv, p->M = (int)M;
    p->n_bh = a->B * a->Hkv;
    p->off = a->Tkv - a->Tq;
    p->causal = a->causal != 0;
    p->sl2 = fabsf(a->scale) * 1.44269504088896340736f; /* log2(e): softmax with exp2; the sign goes into Q */
    p->qneg = a->scale < 0.0f ? 0x80008000u : 0u;
    return 1;
}

static int fx_launch(const fx_req *q, fx_params *p, int r, int plan_only, int *splits, size_t *bytes,
                     cudaStream_t s) {
    if (r < 0) return TPK_INVALID;
    if (r == 0) {
        if (splits) *splits = 1;
        if (bytes) *bytes = 0;
        return (int)cudaSuccess;
    }
    return q->in_dt == TP_F16 ? fx_by_out<__half>(q, p, plan_only, splits, bytes, s)
                              : fx_by_out<__nv_bfloat16>(q, p, plan_only, splits, bytes, s);
}

static int fx_dispatch(const tpk_attn_args *a, int plan_only, int *splits, size_t *bytes, cudaStream_t s) {
    fx_params p;
    const int r = fx_prepare(a, &p, !plan_only);
    if (r < 0) return TPK_INVALID;
    const fx_req q = {a->Tkv, a->D, a->num_splits, 0, a->in_dt, a->out_dt, a->workspace, a->workspace_bytes};
    return fx_launch(&q, &p, r, plan_only, splits, bytes, s);
}

extern "C" int tpk_flash_attention_ex(const tpk_attn_args *a, tp_stream stream) {
    return fx_dispatch(a, 0, NULL, NULL, (cudaStream_t)stream);
}

extern "C" int tpk_flash_attention_ex_plan(const tpk_attn_args *a, int *splits, size_t *bytes) {
    return fx_dispatch(a, 1, splits, bytes, (cudaStream_t)0);
}

/* ---- the masked mode (tpk_flash_attention_masked, attention.h) ------------------------------------------------- */

extern "C" int tpk_flash_attention_masked_supported(tp_dtype in_dt, tp_dtype out_dt, int D) {
    return (in_dt == TP_F16 || in_dt == TP_BF16) && (out_dt == in_dt || out_dt == TP_E4M3) &&
           (D == 16 || D == 32 || D == 64 || D == 128 || D == 256);
}

/* The general kernel's parameters for *a's contiguous layouts (attention.h); 1 = work, 0 = empty, < 0 = invalid. */
static int fx_prepare_masked(const tpk_masked_attn_args *a, fx_params *p, fx_req *q, int check_ptrs) {
    if (!a || !tpk_flash_attention_masked_supported(a->in_dt, a->out_dt, a->D)) return -1;
    if (a->B < 0 || a->H < 0 || a->Hkv < 1 || a->Tq < 0 || a->Tk < 0 || a->Tp < 0 || a->prefix < 0 ||
        a->num_splits < 0 || a->H % a->Hkv != 0 || !isfinite(a->scale))
        return -1;
    const int two = a->kp != NULL || a->vp != NULL;
    if (two && (!a->kp || !a->vp)) return -1;
    if (!two && a->Tp != 0) return -1;
    const long long tp64 = two ? ((long long)a->Tp + FA_BN - 1) / FA_BN * FA_BN : 0, Tkv = tp64 + a->Tk;
    const long long W = (long long)a->Hkv * a->D, QW = (long long)a->H * a->D;
    if (Tkv + FA_BN > 0x7FFFFFFFLL || (long long)a->Tq * QW > 0x7FFFFFFFLL || (long long)a->B * a->Hkv > 0x7FFFFFFFLL)
        return -1;
    if (a->B == 0 || a->H == 0 || a->Tq == 0) return 0;
    if (check_ptrs) {
        if (!a->q || !a->o || !a->valid || (a->Tk > 0 && (!a->k || !a->v))) return -1;
        if (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v | (uintptr_t)a->kp | (uintptr_t)a->vp |
             (uintptr_t)a->o | (uintptr_t)a->workspace) % 16)
            return -1;
        if (a->out_dt == TP_E4M3 && !a->out_scale) return -1;
    }
    memset(p, 0, sizeof *p);
    p->q = a->q, p->k = a->k, p->v = a->v, p->o = a->o, p->kp = a->kp, p->vp = a->vp, p->valid = a->valid;
    p->q_rs = p->o_rs = QW, p->q_bs = p->o_bs = (long long)a->Tq * QW;
    p->k_rs = p->v_rs = W, p->k_bs = p->v_bs = (long long)a->Tk * W;
    p->kp_rs = p->vp_rs = W, p->kp_bs = p->vp_bs = (long long)a->Tp * W;
    p->out_scale = a->out_scale;
    p->R = (long long)a->B * a->H * a->Tq;
    p->H = a->H, p->Hkv = a->Hkv, p->G = a->H / a->Hkv, p->Tq = a->Tq, p->Tkv = (int)Tkv;
    p->M = (int)((long long)p->G * a->Tq);
    p->n_bh = a->B * a->Hkv;
    p->tp64 = (int)tp64, p->Tp = a->Tp, p->Tk = a->Tk, p->prefix = a->prefix, p->first_block = a->first_block != 0;
    p->sl2 = fabsf(a->scale) * 1.44269504088896340736f;
    p->qneg = a->scale < 0.0f ? 0x80008000u : 0u;
    const fx_req req = {(int)Tkv, a->D, a->num_splits, 1, a->in_dt, a->out_dt, a->workspace, a->workspace_bytes};
    *q = req;
    return 1;
}

extern "C" int tpk_flash_attention_masked(const tpk_masked_attn_args *a, tp_stream stream) {
    fx_params p;
    fx_req q;
    const int r = fx_prepare_masked(a, &p, &q, 1);
    return fx_launch(&q, &p, r, 0, NULL, NULL, (cudaStream_t)stream);
}

extern "C" int tpk_flash_attention_masked_plan(const tpk_masked_attn_args *a, int *splits, size_t *bytes) {
    fx_params p;
    fx_req q;
    const int r = fx_prepare_masked(a, &p, &q, 0);
    return fx_launch(&q, &p, r, 1, splits, bytes, (cudaStream_t)0);
}
