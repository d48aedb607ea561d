/* engine_tp.c, the tensor-parallel phase, the highest (it calls cuda_engine.c's build and engine_run.c's warm-up and
 * capture): tensor-parallel engines (cuda_engine.h tp_engine_build_tp): one engine per rank and GPU, built one after
 * the other (rank 0 times its GEMM choices, which every rank then takes: mirror_rank0), then warmed up and captured
 * together (tpe_warm_capture, tpe_launch_ranks in engine_run.c): one host thread launches op i on every rank before
 * op i + 1 on any, and the ranks' all-reduces of one op go to NCCL as one group, which is how NCCL lets a single
 * thread drive several GPUs (a rank's collective would otherwise wait for peers whose launches the thread has not
 * made yet). Each rank's stream is captured into its own CUDA graph; replays are launched rank after rank, and the
 * NCCL kernels inside the graphs meet on the GPUs. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "exec/cuda/engine/engine_internal.h"

/* Every rank runs rank 0's implementations (timed on rank 0 only: the ranks' ops have the same shapes). It matters
 * beyond build time: the ops every rank computes alike (the LM head) must round alike, or ranks whose logits
 * differed in a near-tie would feed different greedy tokens and go on computing different sequences. */
static int same_desc(const tp_gemm_plan *a, const tp_gemm_plan *b) {
    return a && b && tpe_same_gemm(tp_gemm_plan_desc(a), tp_gemm_plan_desc(b)) &&
           tp_gemm_plan_candidates(a) == tp_gemm_plan_candidates(b);
}

static void mirror_rank0(tp_engine *const *R, int n) {
    const tp_graph *g = R[0]->g;
    for (int r = 1; r < n; r++)
        for (int i = 0; i < g->n_ops; i++) {
            tp_engine *x = R[r];
            /* rank 0 alone adds a row-parallel bias: another GEMM, whose output is a rank's own partial sum, so
             * the rank keeps cuBLASLt's first candidate (gemm_first); every op all ranks compute alike has one
             * shape and one type on every rank, hence one description */
            if (R[0]->gplan[i] && !same_desc(R[0]->gplan[i], x->gplan[i])) continue;
            if (R[0]->gplan[i]) tp_gemm_plan_select(x->gplan[i], tp_gemm_plan_choice(R[0]->gplan[i]));
            /* the GEMMs' calls as rank 0's build rewrote them (a linear's kernel, a GELU joined to it, a sibling
             * group joined into its leader); every rank keeps its own attention choice (and its cuDNN plans) */
            if (g->ops[i].kind == TP_OP_LINEAR || g->ops[R[0]->prog.op_call[i]].kind == TP_OP_LINEAR) {
                x->prog.calls[i] = R[0]->prog.calls[i];
                x->prog.op_call[i] = R[0]->prog.op_call[i];
            }
            x->gemm_us[i] = R[0]->gemm_us[i];
            x->cutlass_tile[i] = R[0]->cutlass_tile[i];
            memcpy(x->impl_note[i], R[0]->impl_note[i], sizeof x->impl_note[i]);
        }
}

tp_status tp_engine_build_tp(const tp_graph *const *g, const tp_params *const *params, const tp_plan *const *plan,
                             int n, const tp_engine_options *opt, tp_engine **out, tp_error *err) {
    *out = NULL;
    if (n < 2) return tp_fail(err, TP_ERR_ARG, "a tensor-parallel engine of %d ranks: build one engine instead", n);
    if (opt->decode_kernel == TP_DECODE_PERSISTENT && opt->feed_argmax)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "--decode-kernel persistent: not with tensor parallelism yet (issue 42 "
                       "item 5); --decode-kernel graph or auto");
    tp_status st = tp_graph_check_ranks(g, n, err);
    if (st) return st;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    if (opt->device + n > count)
        return tp_fail(err, TP_ERR_NO_GPU, "--tp %d on GPUs %d..%d: this machine has %d GPU%s", n, opt->device,
                       opt->device + n - 1, count, count == 1 ? "" : "s");
    const tp_engine *share = opt->share;
    if (share && (!share->ranks || share->n_ranks != n))
        return tp_fail(err, TP_ERR_ARG, "the shared engine is not a tensor-parallel engine of %d ranks", n);
    tp_engine **R = calloc((size_t)n, sizeof *R);
    int *devs = malloc(sizeof(int) * (size_t)n);
    tp_nccl *nccl = share ? share->nccl : NULL;
    if (!R || !devs) {
        free(R);
        free(devs);
        return tp_fail(err, TP_ERR_OOM, "out of host memory");
    }
    for (int r = 0; r < n; r++) devs[r] = opt->device + r;
    if (!nccl) st = tp_nccl_init(n, devs, &nccl, err);
    for (int r = 0; r < n && !st; r++) {
        tp_engine_options o = *opt;
        o.device = devs[r];
        o.share = share ? share->ranks[r] : NULL;
        o.hook = r == 0 ? opt->hook : NULL; /* the profiler attributes rank 0's kernels */
        o.hook_user = r == 0 ? opt->hook_user : NULL;
        o.gemm_choice = r == 0 ? opt->gemm_choice : NULL;
        o.gemm_first = r == 0 ? opt->gemm_first : 1; /* the others take rank 0's choices (mirror_rank0) */
        if ((st = tpe_build(g[r], params[r], plan[r], &o, &R[r], err))) break;
        R[r]->rank = r;
        R[r]->nccl = nccl;
    }
    if (!st) mirror_rank0(R, n);
    for (int r = 0; r < n && !st; r++) st = tpe_fuse_built(R[r], err); /* every rank joins alike: the same kinds */
    if (!st) {
        R[0]->ranks = R;
        R[0]->n_ranks = n;
        R[0]->owns_nccl = !share;
        st = tpe_warm_capture(R[0], err);
        if (st) tp_engine_destroy(R[0]); /* the leader takes the ranks and the communicators with it */
        else *out = R[0];
    } else {
        for (int r = 0; r < n; r++) tp_engine_destroy(R[r]);
        free(R);
        if (!share) tp_nccl_destroy(nccl);
    }
    free(devs);
    cudaSetDevice(opt->device);
    return st;
}

int tp_engine_tp_size(const tp_engine *e) { return e && e->ranks ? e->n_ranks : 1; }

const char *tp_engine_nccl(const tp_engine *e) { return e && e->ranks ? tp_nccl_describe(e->nccl) : NULL; }
