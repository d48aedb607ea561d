/* persist.h: the persistent decode kernel (docs/persistent.md, issue 42): one launch runs a whole decode step as an
 * instruction stream (planner/istream.h), one queue per block, one block per SM (8 consumer warps and a producer
 * warp), dependencies through counters in global memory instead of kernel boundaries, and the weights streamed
 * through shared memory in tiles of up to 64 KB (TMA bulk copies, TPK_PERSIST_STAGES deep) in queue order, across
 * instruction boundaries: the next instruction's first tiles are in flight while the current one finishes and while
 * the next one waits for its activations. sm_90 and later; 16-bit activations, 16-bit or E4M3 weights; M sequences
 * of one token each (1 <= M <= TPK_PERSIST_MAX_M). C header, the formats the host
 * (exec/cuda/engine/engine_persist.c) writes and the kernel reads.
 *
 * Instructions (each a part of a call; the call's record says what to do):
 *   EMBED  y (M, C): row m = table[id] * scale, id = ids[m] (an id outside [0, V) writes NaN, as tpk_token_embed).
 *   GEMV   y (M, N) = x' W^T [+ bias] [+ res] over rows [f0, f1) of W (N, K) row-major, x' = x (M, K) row-major or,
 *          with a norm prologue, RMSNorm(x) row by row rounded to the activation type (decoder_ops.h tpk_rmsnorm's
 *          arithmetic), the fp32 sum rounded once (gemv.h's epilogue); res (M, N). With a GLU epilogue the part
 *          covers output columns [f0, f1): W's rows gate0 + c and up0 + c, y[m, c] = act(g + bias) * (u + bias) in
 *          fp32, rounded once (gemv.h's fused form, act as tpk_glu's). x is held in shared memory, M rows of xp
 *          values; where M K values do not fit (TPK_PERSIST_XS) K is cut into nk chunks of kc columns, the tiles run
 *          chunk by chunk (a chunk's row blocks, then the next chunk's), and the rows' fp32 sums wait in shared
 *          memory (TPK_PERSIST_ACC) until the last chunk (no norm prologue and no GLU then: the host's rule).
 *   ATTN   one (sequence, KV head, row group, key chunk) piece of a decode step's attention (T = 1): the G query
 *          heads of the KV head rotated (RoPE at the cache position, rounded as tpk_rope's store), the new key
 *          rotated and, by row group 0 of the chunk holding it, written with the new value into the cache at row
 *          `past`; the scores of keys [lo, min(lo + chunk, past + 1)) with an online softmax (base 2); the pieces of
 *          a (sequence, KV head, row group) merged by the last one to finish (an arrival counter), which writes the
 *          output rows (rounded to the activation type) and only then signals the output's counter, by n_chunks at
 *          once. */
#ifndef TP_PERSIST_H
#define TP_PERSIST_H

#include <stddef.h>

#include "exec/cuda/kernels/decoder_ops.h" /* tp_stream */

#ifdef __cplusplus
extern "C" {
#endif

enum { TPK_PI_EMBED = 1, TPK_PI_GEMV = 2, TPK_PI_ATTN = 3 };
enum { TPK_PE_NONE = 0, TPK_PE_RES = 1, TPK_PE_GLU_SILU = 2, TPK_PE_GLU_GELU = 3 };
/* a GEMV's weight format: the activations' 16-bit type, or FP8 (E4M3 codes, FP16 activations; W = e4m3(q) *
 * channel scale * tensor scale, gemv.h tpk_gemv_fp8's rule; weight-only, or W8A8 with tpk_pcall.xsc) */
enum { TPK_PW_16 = 0, TPK_PW_E4M3 = 1 };

#define TPK_PERSIST_THREADS 256   /* consumer threads of a block (plus one producer warp) */
#define TPK_PERSIST_MAX_M 8       /* sequences (rows of x) a step at most: the 8 columns of an mma's B operand */
#define TPK_PERSIST_MAX_MEM 4     /* members of a sibling group (q, k, v; gate, up) */
#define TPK_PERSIST_RING (128 * 1024) /* bytes of the weight stages, cut into tpk_pprog.stages tiles */
#define TPK_PERSIST_MAX_STAGES 12
#define TPK_PERSIST_TILE (64 * 1024)  /* a tile of an instruction's weight rows */
/* Tiles in flight: 2 (the ring's room since batches of up to 8 rows took shared memory for x). Measured faster than
 * 3 in two H200 calls (Llama-3.2-1B step 1.2032 against 1.2341 ms,
 * bench/results/2026-11-28_h200_issue42_persistent_step.log; 1.2288 against 1.2493 ms fp16 and 1.2745 against 1.2831
 * fp8-wo, 2026-11-29_h200_issue42_persistent_knobs.log: the fewer bytes every SM has queued, the sooner the tiles of
 * the op after a dependency hop arrive); the GPU suite (gpu_persistent, 13 checks) passes at 2 and at 3
 * (2026-11-29_h200_issue43_fp8_block_gemv.log). One stage: 1.73 ms (no overlap of a tile's copy and math). */
#define TPK_PERSIST_STAGES 2
/* Tiles the producer prefetches into L2 beyond the ring (cp.async.bulk.prefetch.L2), so a block's share of HBM keeps
 * streaming while its ring is full and its consumers wait at a dependency hop. */
#define TPK_PERSIST_L2_AHEAD 0
#define TPK_PERSIST_XS (72 * 1024)    /* bytes of the instruction scratch: x (M rows of xp 16-bit values: 8 x (4096 + 32)), attention */
#define TPK_PERSIST_ACC 2048          /* fp32 sums of a K-chunked GEMV instruction's rows x M at most */
#define TPK_PERSIST_RB 8              /* query rows (heads) of one attention piece at most */

typedef struct {
    int kind;       /* TPK_PI_* */
    /* EMBED */
    const float *ids;
    const void *table;
    int V;
    float escale;
    int M;          /* sequences: the rows of x, y and res (EMBED, GEMV), the batch (ATTN) */
    /* GEMV and EMBED: x (M, K) and y (M, N or C), 16-bit unless y32 (y fp32: logits) */
    const void *x, *w, *bias, *res;
    void *y;
    int y32;
    const void *norm_w; /* RMSNorm prologue's weight (K), 16-bit or fp32 (norm_w32), or NULL */
    int norm_w32;
    float eps, norm_off;
    int K, N, epi;  /* epi: TPK_PE_* */
    int wfmt;       /* TPK_PW_*: E4M3 weights take up to 32 rows a tile (two mma row halves) */
    const float *wcs, *wts; /* E4M3: channel scales (N, device; a GEMV group's per-row ones) and the tensor scale
                               (one, device), each may be NULL (1) */
    const float *xsc;       /* W8A8 (E4M3 weights, FP16 activations): x's per-tensor scale (device), else NULL. x is
                               rounded to e4m3(x / xsc) as it enters shared memory (after the RMSNorm prologue's
                               rounding to FP16) and *xsc joins the row's scale: gemv.h tpk_gemv_w8a8's rule */
    int gate0, up0; /* GLU: the first rows of gate and up in W */
    int n_mem;      /* a sibling group without GLU (> 1): its members' outputs one after the other in y, member j's
                       (M, mem_n[j]) row-major: output row n of W goes to the member holding it */
    int mem_n[TPK_PERSIST_MAX_MEM];
    int tile_rows;  /* rows (GLU: output columns) of one weight tile, at most tpk_pprog.tile bytes (GLU: both
                       halves); an instruction's rows stream through the stages tile after tile */
    int kc, nk;     /* K in nk chunks of kc columns (the last one shorter): a tile holds tile_rows rows of one chunk
                       (nk 1: kc = K); kc a multiple of 64 when nk > 1 */
    int xp;         /* 16-bit values from a row of x to the next in shared memory (kc, padded by 32 when M > 1 so the
                       two rows an 8-lane phase of a 16-byte load reads fall in different banks) */
    int pitch;      /* bytes from a row of a tile to the next in shared memory: the row's bytes padded to 64 modulo
                       128 (16-bit: the two rows one 8-lane phase of a 16-byte load reads) or to 32 modulo 128
                       (E4M3: the four rows of a 16-lane phase of an 8-byte load), so they fall in different banks
                       (persist.cu gemv_tile); the producer copies row by row */
    /* ATTN: q (M, H D), k, v (M, Hkv D) as the q/k/v GEMV wrote them (before RoPE); the cache (2, M, L, Hkv D) */
    const void *q, *k, *v;
    void *cache, *out;
    const float *inv_freq; /* D / 2 */
    int H, Hkv, D, L, G, rb, n_rg, chunk, n_chunks;
    float scale;        /* multiplies Q K^T */
    float *ws;          /* partials: [M][Hkv][n_rg][n_chunks][rb] x (D + 2) fp32 */
    int arrive;         /* the first of M Hkv n_rg arrival counters (in the counter array) */
} tpk_pcall;

typedef struct {
    int call;            /* index into the call table */
    int f0, f1;          /* GEMV: rows (columns with GLU); ATTN: the piece f0 */
    int first_wait, n_waits;
    int first_signal, n_signals;
    int n_tiles;         /* GEMV: its weight tiles, nk ceil((f1 - f0) / tile_rows); 0 otherwise */
} tpk_pinstr;

typedef struct {
    int counter, target;
} tpk_pwait;

typedef struct {
    const tpk_pcall *calls;
    const tpk_pinstr *instrs;
    const tpk_pwait *waits;
    const int *signals;
    const int *queue_start, *queue; /* block b runs queue[queue_start[b] .. queue_start[b + 1]) */
    int *counters;                  /* n_counters ints, zero before every launch */
    int n_counters;
    const int *past;                /* the cache position (graph.h tp_graph.past) */
    int n_blocks;
    int bf16;                       /* activations and weights BF16 (else FP16) */
    int max_m;                      /* the calls' M at most: 1 runs the batch-1 kernel (M a compile-time constant) */
    int stages, tile;               /* the weight ring: stages x tile bytes <= TPK_PERSIST_RING */
    int l2_ahead;                   /* tiles the producer prefetches into L2 beyond the ring (0: none); they keep the
                                       block's share of HBM busy while its ring is full and its consumers wait */
    unsigned long long *rec;        /* NULL, or 3 per instruction (global order): %globaltimer (ns) when its block
                                       reached it, when its waits were met, when it signalled */
} tpk_pprog;

/* Dynamic shared memory of the kernel (bytes). */
size_t tpk_persist_smem(void);
/* 0 when n_blocks blocks of the kernel (288 threads each) are all resident at once on device `device` (one per SM at most: the
 * dependencies spin, so a block that never starts would hang the others), else a CUDA error (cudaErrorInvalidValue:
 * more blocks than SMs, or shared memory too small; a compute capability below 9.0: cudaErrorInvalidDeviceFunction). */
int tpk_persist_check(int device, int n_blocks);
/* Zeroes the counters and launches the step on stream (p and every pointer in it device memory, p itself too:
 * d_prog). n_blocks from the host copy h. Errors: a CUDA error code. */
int tpk_persist_launch(const tpk_pprog *d_prog, const tpk_pprog *h, tp_stream stream);

#ifdef __cplusplus
}
#endif

#endif
