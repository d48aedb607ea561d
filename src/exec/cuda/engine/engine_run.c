/* engine_run.c, the run phase (it calls engine_launch.c and engine_memory.c): one run's start and end
 * (tpe_launch_begin, tpe_launch_end), a whole pass op by op on one engine or on every rank in lockstep
 * (tpe_launch_ranks), the warm-up pass and the CUDA graph capture (tpe_warm_capture), a modular engine's stages
 * and handoffs, and the public API of a built engine: runs, timings, inputs and outputs, calibration passes,
 * captures, and the queries of what its build chose and allocated. C11. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "exec/cuda/attention/attention.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "exec/cuda/engine/engine_internal.h"
#include "exec/cuda/kernels/decoder_ops.h"
#include "exec/cuda/kernels/kernels.h"
#include "exec/cuda/vendor/gemm_cublaslt.h"
#include "formats/dtype.h"

#include <nvtx3/nvToolsExt.h>

/* A graph with a KV cache: its first op starts from an empty cache (a prefill), and its last ones move the position
 * on and, decoding greedily, feed the next token back; attributed to the ops around them for the profiler. */
tp_status tpe_launch_begin(tp_engine *e, tp_error *err) {
    if (!e->resets_past) return TP_OK;
    HOOK(e, 0, TP_CAT_MEMORY);
    if (cudaMemsetAsync(e->d_past, 0, sizeof(int), e->stream) != cudaSuccess)
        return tp_fail(err, TP_ERR_CUDA, "resetting the KV cache position: %s", cudaGetErrorString(cudaGetLastError()));
    return TP_OK;
}

tp_status tpe_launch_end(tp_engine *e, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    if (g->kv_len > 0) {
        const int last = g->values[g->output].producer;
        HOOK(e, last, TP_CAT_OTHER);
        int rc = e->feed_argmax ? tpk_argmax(e->dptr[g->output], e->plan->value_dt[g->output], e->dptr[g->input],
                                             (int)g->batch, (int)value_cols(e, g->output), e->stream)
                                : 0;
        if (!rc) rc = tpk_advance(e->d_past, (int)g->tokens, e->stream);
        if (rc) st = tp_fail(err, TP_ERR_CUDA, "the decode step's end (argmax, position): %s",
                             cudaGetErrorString((cudaError_t)rc));
    }
    HOOK(e, -1, TP_CAT_OTHER);
    return st;
}

/* Every op inside an NVTX range named after its layer, so external tools (nsys, ncu --nvtx) see the model. */

static tp_status launch_all(tp_engine *e, tp_error *err) {
    if (e->ranks) return tpe_launch_ranks(e, err);
    tp_status st = tpe_launch_begin(e, err);
    if (e->pk_on && !st) { /* the whole step in one persistent kernel (engine_persist.c), then argmax and position */
        nvtxRangePushA("persistent decode step");
        const int rc = tpe_persist_launch(e);
        nvtxRangePop();
        if (rc) return tp_fail(err, TP_ERR_CUDA, "the persistent decode step: %s", cudaGetErrorString((cudaError_t)rc));
        return tpe_launch_end(e, err);
    }
    for (int i = 0; i < e->g->n_ops && !st; i++) {
        nvtxRangePushA(e->g->ops[i].layer);
        st = tpe_launch_op(e, i, err);
        nvtxRangePop();
    }
    return st ? st : tpe_launch_end(e, err);
}

/* Every rank's engine (the engine itself without tensor parallelism). */
static int n_ranks(const tp_engine *e) { return e->ranks ? e->n_ranks : 1; }

static tp_engine *rank_engine(tp_engine *e, int r) { return e->ranks ? e->ranks[r] : e; }

/* One run on every rank: graph replays, or eager launches (lockstep over the ranks). */
static tp_status launch_run(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    if (!e->use_graph) return launch_all(e, err);
    for (int k = 0; k < e->n_seg; k++) { /* modular: stage after stage, the host waiting for each */
        int rc = 0;
        CU_TRY(cudaGraphLaunch(e->seg_exec[k], e->stream));
        if ((rc = tpe_handoff(e, k)))
            return tp_fail(err, TP_ERR_CUDA, "stage %d's handoff copies: %s", k, cudaGetErrorString((cudaError_t)rc));
        if (k + 1 < e->n_seg) CU_TRY(cudaStreamSynchronize(e->stream));
        if (k + 1 == e->n_seg) return TP_OK;
    }
    if (e->ranks && e->parallel_launch) {
        /* one host thread per GPU: the replays start together instead of GPU r waiting for r launches before it
         * (the first all-reduce of a step absorbs that wait on GPU 0: bench/results, 2026-11-26 h200x4) */
        const int n = n_ranks(e);
        cudaError_t ce = cudaSuccess;
#pragma omp parallel for num_threads(n) schedule(static, 1)
        for (int r = 0; r < n; r++) {
            tp_engine *x = rank_engine(e, r);
            cudaError_t c = cudaSetDevice(x->device);
            if (c == cudaSuccess) c = cudaGraphLaunch(x->exec, x->stream);
            if (c != cudaSuccess) {
#pragma omp critical
                ce = c;
            }
        }
        cudaSetDevice(e->device);
        return ce == cudaSuccess ? TP_OK : tp_fail(err, TP_ERR_CUDA, "cudaGraphLaunch: %s", cudaGetErrorString(ce));
    }
    for (int r = 0; r < n_ranks(e); r++) {
        tp_engine *x = rank_engine(e, r);
        if (e->ranks) CU_TRY(cudaSetDevice(x->device));
        CU_TRY(cudaGraphLaunch(x->exec, x->stream));
    }
    if (e->ranks) CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

/* Waits for every rank's stream. */
static tp_status sync_all(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    for (int r = 0; r < n_ranks(e); r++) {
        tp_engine *x = rank_engine(e, r);
        if (e->ranks) CU_TRY(cudaSetDevice(x->device));
        CU_TRY(cudaStreamSynchronize(x->stream));
    }
    if (e->ranks) CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

/* CUDA events around n runs on every rank: ev[(r * n + i) * 2] before run i on rank r, + 1 after it. A run's
 * time is the longest of the ranks' (they wait for each other at every all-reduce). */
typedef struct {
    int ranks, n, made;
    cudaEvent_t *ev;
} run_timer;

static tp_status rtimer_create(tp_engine *e, int n, run_timer *t, tp_error *err) {
    tp_status st = TP_OK;
    t->ranks = n_ranks(e);
    t->n = n;
    t->made = 0;
    if (!(t->ev = calloc((size_t)(2 * n * t->ranks), sizeof(cudaEvent_t))))
        return tp_fail(err, TP_ERR_OOM, "out of host memory for %d timing samples", n);
    for (int r = 0; r < t->ranks; r++) {
        if (e->ranks) CU_TRY(cudaSetDevice(rank_engine(e, r)->device));
        for (int k = 0; k < 2 * n; k++, t->made++) CU_TRY(cudaEventCreate(&t->ev[t->made]));
    }
    if (e->ranks) CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

static tp_status rtimer_mark(tp_engine *e, run_timer *t, int i, int end, tp_error *err) {
    tp_status st = TP_OK;
    for (int r = 0; r < t->ranks; r++) CU_TRY(cudaEventRecord(t->ev[(r * t->n + i) * 2 + end], rank_engine(e, r)->stream));
    return TP_OK;
fail:
    return st;
}

/* ms[i]: run i's time (the slowest rank's); *wall: from the first start to the last end on rank 0 */
static tp_status rtimer_read(const run_timer *t, double *ms, double *wall, tp_error *err) {
    tp_status st = TP_OK;
    for (int i = 0; i < t->n; i++) {
        ms[i] = 0;
        for (int r = 0; r < t->ranks; r++) {
            float x = 0;
            CU_TRY(cudaEventElapsedTime(&x, t->ev[(r * t->n + i) * 2], t->ev[(r * t->n + i) * 2 + 1]));
            if (x > ms[i]) ms[i] = x;
        }
    }
    if (wall) {
        float w = 0;
        CU_TRY(cudaEventElapsedTime(&w, t->ev[0], t->ev[2 * t->n - 1]));
        *wall = w;
    }
    return TP_OK;
fail:
    return st;
}

static void rtimer_destroy(run_timer *t) {
    for (int k = 0; k < t->made; k++) cudaEventDestroy(t->ev[k]);
    free(t->ev);
    t->ev = NULL;
}

/* ---- tensor parallelism: every rank's launches in lockstep (engine_tp.c builds the ranks) ----------- */

tp_status tpe_launch_ranks(tp_engine *lead, tp_error *err) {
    const int n = lead->n_ranks;
    tp_engine *const *R = lead->ranks;
    const tp_graph *g = lead->g;
    tp_status st = TP_OK;
    for (int r = 0; r < n && !st; r++) {
        if (cudaSetDevice(R[r]->device) != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "cudaSetDevice(%d)", R[r]->device);
        st = tpe_launch_begin(R[r], err);
    }
    for (int i = 0; i < g->n_ops && !st; i++) {
        const int group = g->ops[i].kind == TP_OP_ALL_REDUCE;
        for (int r = 0; group && r < n; r++) { /* what NCCL takes, checked before any rank's call is enqueued */
            const tp_dtype dt = R[r]->plan->value_dt[g->ops[i].out];
            if (dt != TP_F32 && dt != TP_F16 && dt != TP_BF16)
                return tp_fail(err, TP_ERR_UNSUPPORTED, "layer %s: an all-reduce in %s (NCCL takes fp32, fp16, bf16)",
                               g->ops[i].layer, tp_dtype_info(dt)->name);
        }
        int rc = group ? tp_nccl_group_start(lead->nccl) : 0;
        if (rc) return tp_fail(err, TP_ERR_CUDA, "ncclGroupStart: %s", tp_nccl_error(lead->nccl, rc));
        nvtxRangePushA(g->ops[i].layer);
        for (int r = 0; r < n && !st; r++) {
            if (cudaSetDevice(R[r]->device) != cudaSuccess)
                st = tp_fail(err, TP_ERR_CUDA, "cudaSetDevice(%d)", R[r]->device);
            else
                st = tpe_launch_op(R[r], i, err);
        }
        nvtxRangePop();
        /* the group is closed even after a failed call, so NCCL's group state stays balanced */
        if (group && (rc = tp_nccl_group_end(lead->nccl)) && !st)
            st = tp_fail(err, TP_ERR_CUDA, "layer %s: ncclGroupEnd: %s", g->ops[i].layer, tp_nccl_error(lead->nccl, rc));
        if (group && st) tp_nccl_abort(lead->nccl); /* a rank's collective may wait for a peer that never came */
    }
    for (int r = 0; r < n && !st; r++) {
        cudaSetDevice(R[r]->device);
        st = tpe_launch_end(R[r], err);
    }
    cudaSetDevice(lead->device);
    return st;
}

/* ---- capture -------------------------------------------------------------------------------------- */

/* Counts the graph's programmatic edges (pdl.cuh's launches, captured) and, with strip, makes each an ordinary
 * one: the downstream kernel then starts after the upstream one has completed, as without PDL. */
static tp_status graph_pdl_edges(tp_engine *x, int strip, tp_error *err) {
    size_t n = 0;
    cudaError_t ce = cudaGraphGetEdges(x->graph, NULL, NULL, NULL, &n);
    if (ce != cudaSuccess) return tp_fail(err, TP_ERR_CUDA, "reading the CUDA graph's edges: %s", cudaGetErrorString(ce));
    cudaGraphNode_t *from = malloc((n ? n : 1) * sizeof *from), *to = malloc((n ? n : 1) * sizeof *to);
    cudaGraphEdgeData *ed = malloc((n ? n : 1) * sizeof *ed);
    tp_status st = from && to && ed ? TP_OK : tp_fail(err, TP_ERR_OOM, "out of host memory");
    /* none to read (a one-kernel graph): the call with arrays then answers invalid argument (seen on an H100) */
    if (!st && n > 0 && (ce = cudaGraphGetEdges(x->graph, from, to, ed, &n)) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "reading the CUDA graph's edges: %s", cudaGetErrorString(ce));
    x->pdl_edges = 0;
    x->graph_edges = (int)n;
    x->graph_kernels = 0;
    size_t nn = 0; /* the kernel nodes: what one replay launches */
    if (!st && (ce = cudaGraphGetNodes(x->graph, NULL, &nn)) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "reading the CUDA graph's nodes: %s", cudaGetErrorString(ce));
    cudaGraphNode_t *nodes = !st && nn ? malloc(nn * sizeof *nodes) : NULL;
    if (!st && nn && !nodes) st = tp_fail(err, TP_ERR_OOM, "out of host memory");
    if (!st && nn && (ce = cudaGraphGetNodes(x->graph, nodes, &nn)) != cudaSuccess)
        st = tp_fail(err, TP_ERR_CUDA, "reading the CUDA graph's nodes: %s", cudaGetErrorString(ce));
    for (size_t i = 0; !st && i < nn; i++) {
        enum cudaGraphNodeType t;
        if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel) x->graph_kernels++;
    }
    free(nodes);
    for (size_t i = 0; !st && i < n; i++) {
        if (ed[i].type != cudaGraphDependencyTypeProgrammatic && ed[i].from_port == cudaGraphKernelNodePortDefault)
            continue;
        if (!strip) {
            x->pdl_edges++;
            continue;
        }
        cudaGraphEdgeData plain;
        memset(&plain, 0, sizeof plain);
        if ((ce = cudaGraphRemoveDependencies(x->graph, &from[i], &to[i], &ed[i], 1)) != cudaSuccess ||
            (ce = cudaGraphAddDependencies(x->graph, &from[i], &to[i], &plain, 1)) != cudaSuccess)
            st = tp_fail(err, TP_ERR_CUDA, "making the CUDA graph's programmatic edges ordinary (no_pdl): %s",
                         cudaGetErrorString(ce));
    }
    free(from);
    free(to);
    free(ed);
    return st;
}

int tp_engine_graph_kernels(const tp_engine *e) { return e && e->exec ? e->graph_kernels : -1; }

int tp_engine_pdl_edges(const tp_engine *e, int *total) {
    if (total) *total = e && e->exec ? e->graph_edges : 0;
    return e && e->exec ? e->pdl_edges : -1;
}

/* A modular engine's graphs: each stage's ops captured into a graph of its own (the run's start in the first, its
 * end in the last), instantiated and uploaded. */
static tp_status capture_stages(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    for (int k = 0; k < e->n_seg && !st; k++) {
        CU_TRY(cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal));
        if (k == 0) st = tpe_launch_begin(e, err);
        for (int i = e->seg_first[k]; i < e->seg_first[k + 1] && !st; i++) {
            nvtxRangePushA(e->g->ops[i].layer);
            st = tpe_launch_op(e, i, err);
            nvtxRangePop();
        }
        if (!st && k == e->n_seg - 1) st = tpe_launch_end(e, err);
        cudaGraph_t graph = NULL;
        cudaError_t ce = cudaStreamEndCapture(e->stream, &graph);
        e->seg_graph[k] = graph;
        if (!st && ce != cudaSuccess)
            st = tp_fail(err, TP_ERR_CUDA, "capturing stage %d in a CUDA graph: %s", k, cudaGetErrorString(ce));
        if (st) break;
        e->graph = graph; /* graph_pdl_edges reads e->graph: this stage's */
        st = graph_pdl_edges(e, e->no_pdl, err);
        e->graph = NULL;
        if (st) break;
        CU_TRY(cudaGraphInstantiate(&e->seg_exec[k], graph, 0));
        CU_TRY(cudaGraphUpload(e->seg_exec[k], e->stream));
        CU_TRY(cudaStreamSynchronize(e->stream));
    }
    return st;
fail:
    return st;
}

/* One eager pass (module loading, cuBLASLt warm-up) on a defined (zeroed) input, then the capture; it is never
 * timed, and every timed or checked run uses the real input set later. A leader does both for every rank, the
 * ranks' launches in lockstep (their all-reduces wait for each other), each rank's stream captured into its own
 * graph. */
tp_status tpe_warm_capture(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    const int n = n_ranks(e);
    int capturing = 0;
    for (int r = 0; r < n; r++) {
        tp_engine *x = rank_engine(e, r);
        CU_TRY(cudaSetDevice(x->device));
        for (int k = 0; k < x->g->n_inputs; k++) /* every input defined (token ids and counts in range) */
            CU_TRY(cudaMemsetAsync(x->dptr[x->g->inputs[k]], 0, value_bytes(x, x->g->inputs[k]), x->stream));
        /* a graph with a KV cache warms up at position 0 (any other could run past the cache's end) */
        if (x->g->kv_len > 0) CU_TRY(cudaMemsetAsync(x->d_past, 0, sizeof(int), x->stream));
    }
    CU_TRY(cudaSetDevice(e->device));
    if ((st = launch_all(e, err)) || (st = sync_all(e, err)) || !e->use_graph) return st;
    if (e->n_seg > 0) return capture_stages(e, err);
    for (; capturing < n; capturing++) {
        tp_engine *x = rank_engine(e, capturing);
        CU_TRY(cudaSetDevice(x->device));
        CU_TRY(cudaStreamBeginCapture(x->stream, cudaStreamCaptureModeThreadLocal));
    }
    CU_TRY(cudaSetDevice(e->device));
    st = launch_all(e, err);
    for (int r = 0; r < n; r++) {
        tp_engine *x = rank_engine(e, r);
        cudaGraph_t graph = NULL;
        cudaSetDevice(x->device);
        cudaError_t ce = cudaStreamEndCapture(x->stream, &graph);
        x->graph = graph;
        if (!st && ce != cudaSuccess)
            st = tp_fail(err, TP_ERR_CUDA, "capturing the forward pass in a CUDA graph%s: %s", n > 1 ? " (a rank)" : "",
                         cudaGetErrorString(ce));
    }
    capturing = 0;
    for (int r = 0; r < n && !st; r++) {
        tp_engine *x = rank_engine(e, r);
        CU_TRY(cudaSetDevice(x->device));
        if ((st = graph_pdl_edges(x, x->no_pdl, err))) break;
        CU_TRY(cudaGraphInstantiate(&x->exec, x->graph, 0));
        /* uploaded now, on an idle GPU: a first launch uploads the graph itself, and with tensor parallelism one
         * host thread launching a large graph (100 Llama layers at TP 4) blocked in cudaGraphLaunch while GPU 0 waited
         * in an all-reduce for the ranks not yet launched (bench/results, 2026-11-26 h200x4 tphang) */
        CU_TRY(cudaGraphUpload(x->exec, x->stream));
        CU_TRY(cudaStreamSynchronize(x->stream));
    }
    CU_TRY(cudaSetDevice(e->device));
    return st;
fail:
    for (int r = 0; r < capturing; r++) { /* end what was begun, so the streams stay usable for destroy */
        tp_engine *x = rank_engine(e, r);
        cudaGraph_t graph = NULL;
        cudaSetDevice(x->device);
        if (cudaStreamEndCapture(x->stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    }
    cudaSetDevice(e->device);
    return st;
}

int tpe_handoff(tp_engine *e, int k) {
    for (int h = e->hand_first[k]; h < e->hand_first[k + 1]; h++) {
        const int v = e->hand_v[h];
        cudaError_t ce = cudaMemcpyAsync(e->hand_copy[h], e->dptr[v], value_bytes(e, v), cudaMemcpyDeviceToDevice,
                                         e->stream);
        if (ce != cudaSuccess) return (int)ce;
    }
    return 0;
}

int tp_engine_stages(const tp_engine *e, int i, char *name, size_t n, double *bytes) {
    if (!e || e->n_seg == 0) return 0;
    if (i >= 0 && i < e->n_seg) {
        const tp_op *op = &e->g->ops[e->seg_first[i]];
        if (name && n) snprintf(name, n, "%.*s", (int)tp_layer_stage_len(op->layer), op->layer);
        if (bytes) {
            *bytes = 0;
            for (int h = e->hand_first[i]; h < e->hand_first[i + 1]; h++) *bytes += (double)value_bytes(e, e->hand_v[h]);
        }
    }
    return e->n_seg;
}

/* ---- a built engine: what its build chose, its runs, inputs and outputs ---------------------------- */

const char *tp_engine_op_impl(const tp_engine *e, int op) {
    if (!e || op < 0 || op >= e->g->n_ops || !e->impl_note[op][0]) return NULL;
    return e->impl_note[op];
}

int tp_engine_op_call(const tp_engine *e, int op, const char **kernel) {
    if (kernel) *kernel = NULL;
    if (!e || op < 0 || op >= e->g->n_ops) return -1;
    if (kernel) *kernel = tp_call_kind_get(tpe_kind(e, op))->name;
    return e->prog.op_call[op];
}

int tp_engine_gemm_choice(const tp_engine *e, int op) {
    if (!e || op < 0 || op >= e->g->n_ops || !e->gplan[op]) return -1;
    tp_call_kind k = tpe_kind(e, op);
    /* a member of a sibling GEMM (not its leader): its own choice, kept in its slot for a build without the group */
    if (k == TP_CALL_GEMM_SM90_GROUP && !tp_program_is_head(&e->prog, op)) k = e->prog.calls[op].kind;
    switch (k) {
    case TP_CALL_GEMM_SM90:
    case TP_CALL_GEMM_SM90_WO: return TP_GEMM_CHOICE_SM90;
    case TP_CALL_GEMV: return TP_GEMM_CHOICE_GEMV;
    case TP_CALL_GEMM_CUTLASS_WO: return TP_GEMM_CHOICE_CUTLASS_WO + e->cutlass_tile[op];
    case TP_CALL_GEMM_SM90_GROUP: return TP_GEMM_CHOICE_SM90_GROUP;
    case TP_CALL_GEMM_SM90_GELU: return TP_GEMM_CHOICE_SM90_GELU;
    default: return tp_gemm_plan_choice(e->gplan[op]);
    }
}

double tp_engine_op_bytes(const tp_engine *e, int op) {
    if (!e || op < 0 || op >= e->g->n_ops) return 0.0;
    return tp_program_op_bytes(&e->prog, e->plan, e->g, op); /* the engine's own program: what it runs */
}

int tp_engine_attention_choice(const tp_engine *e, int op) {
    if (!e || op < 0 || op >= e->g->n_ops || e->g->ops[op].kind != TP_OP_ATTENTION) return -1;
    if (e->plan->op_prec[op] == TP_PREC_FP8) return -1;
    return (int)tpe_attn_impl(tpe_kind(e, op));
}

tp_status tp_engine_set_past(tp_engine *e, int64_t past, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    if (g->kv_len <= 0) return tp_fail(err, TP_ERR_ARG, "the engine's graph has no KV cache");
    if (past < 0 || past + g->tokens > g->kv_len)
        return tp_fail(err, TP_ERR_ARG, "cache position %lld: %lld new tokens would overflow the cache of %lld",
                       (long long)past, (long long)g->tokens, (long long)g->kv_len);
    const int p = (int)past;
    for (int r = 0; r < n_ranks(e); r++) {
        tp_engine *x = rank_engine(e, r);
        CU_TRY(cudaSetDevice(x->device));
        CU_TRY(cudaMemcpyAsync(x->d_past, &p, sizeof p, cudaMemcpyHostToDevice, x->stream));
        CU_TRY(cudaStreamSynchronize(x->stream));
    }
    CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

tp_status tp_engine_feed_argmax(const tp_engine *from, tp_engine *to, tp_error *err) {
    const tp_value *o = &from->g->values[from->g->output], *in = &to->g->values[to->g->input];
    tp_status st = TP_OK;
    if (o->ndim != 2 || in->ndim != 2 || in->shape[1] != 1 || o->shape[0] != in->shape[0])
        return tp_fail(err, TP_ERR_ARG, "feeding the next token: (B, V) logits into a (B, 1) input expected");
    if (n_ranks(from) != n_ranks(to))
        return tp_fail(err, TP_ERR_ARG, "feeding the next token: %d ranks into %d", n_ranks(from), n_ranks(to));
    /* every rank computes the same logits (the LM head is whole on each): each feeds its own input */
    for (int r = 0; r < n_ranks(to); r++) {
        const tp_engine *f = rank_engine((tp_engine *)from, r);
        tp_engine *t = rank_engine(to, r);
        CU_TRY(cudaSetDevice(t->device));
        CU_TRY(cudaStreamSynchronize(f->stream));
        int rc = tpk_argmax(f->dptr[f->g->output], f->plan->value_dt[f->g->output], t->dptr[t->g->input],
                            (int)o->shape[0], (int)o->shape[1], t->stream);
        if (rc) return tp_fail(err, TP_ERR_CUDA, "argmax: %s", cudaGetErrorString((cudaError_t)rc));
        CU_TRY(cudaStreamSynchronize(t->stream));
    }
    CU_TRY(cudaSetDevice(to->device));
    return TP_OK;
fail:
    return st;
}

tp_status tp_engine_decode(tp_engine *e, int steps, double *step_ms, float *tokens, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    if (!e->feed_argmax) return tp_fail(err, TP_ERR_ARG, "tp_engine_decode: a decode engine (greedy feedback) expected");
    const int B = (int)g->batch;
    run_timer t = {0};
    float *d_tok = NULL;
    int pushed = 0;
    int past = 0;
    CU_TRY(cudaSetDevice(e->device));
    CU_TRY(cudaMemcpy(&past, e->d_past, sizeof past, cudaMemcpyDeviceToHost));
    if (past < 0 || past + (int64_t)steps * g->tokens > g->kv_len) {
        st = tp_fail(err, TP_ERR_ARG, "%d decode steps after %d cached tokens overflow the KV cache of %lld", steps,
                     past, (long long)g->kv_len);
        goto fail;
    }
    CU_TRY(cudaMalloc((void **)&d_tok, sizeof(float) * (size_t)(steps * B + 1)));
    if ((st = rtimer_create(e, steps, &t, err))) goto fail;
    nvtxRangePushA("BENCHMARK"); /* the decode steps, for nsys and ncu --nvtx */
    pushed = 1;
    for (int s = 0; s < steps; s++) {
        if ((st = rtimer_mark(e, &t, s, 0, err))) goto fail;
        if ((st = launch_run(e, err))) goto fail; /* --no-graph: the launches' gaps are part of the step */
        if ((st = rtimer_mark(e, &t, s, 1, err))) goto fail;
        /* the token this step chose, now the input of the next: kept outside the timed region */
        CU_TRY(cudaMemcpyAsync(d_tok + (size_t)s * B, e->dptr[g->input], sizeof(float) * (size_t)B,
                               cudaMemcpyDeviceToDevice, e->stream));
    }
    if ((st = sync_all(e, err))) goto fail;
    nvtxRangePop();
    pushed = 0;
    if ((st = rtimer_read(&t, step_ms, NULL, err))) goto fail;
    if (tokens) CU_TRY(cudaMemcpy(tokens, d_tok, sizeof(float) * (size_t)(steps * B), cudaMemcpyDeviceToHost));
fail:
    if (pushed) nvtxRangePop();
    rtimer_destroy(&t);
    if (d_tok) cudaFree(d_tok);
    return st;
}

tp_status tp_engine_set_input(tp_engine *e, const float *images, tp_error *err) {
    tp_status st = TP_OK;
    for (int r = 0; r < n_ranks(e); r++) { /* every rank reads the whole input */
        tp_engine *x = rank_engine(e, r);
        CU_TRY(cudaSetDevice(x->device));
        if ((st = tpe_upload_inputs(x, images, err))) goto fail;
        CU_TRY(cudaStreamSynchronize(x->stream));
    }
    CU_TRY(cudaSetDevice(e->device));
    return TP_OK;
fail:
    return st;
}

tp_status tp_engine_attention_cost(tp_engine *e, double *cosine, double *rel_l2, int *n_out, tp_error *err) {
    const tp_graph *g = e->g;
    const tp_plan *pl = e->plan;
    tp_status st = TP_OK;
    if (e->ranks) return tp_fail(err, TP_ERR_UNSUPPORTED, "FP8 attention's cost: unsupported on a tensor-parallel engine");
    void *d_ref = NULL, *h8 = NULL, *h16 = NULL, *d_q16 = NULL, *h_q = NULL;
    float *f8 = NULL, *f16 = NULL, *f_q = NULL;
    int n = 0;
    for (int i = 0; i < g->n_ops; i++) cosine[i] = rel_l2[i] = NAN;
    for (int i = 0; i < g->n_ops && !st; i++) {
        if ((st = tpe_launch_op(e, i, err))) break;
        const tp_op *op = &g->ops[i];
        if (op->kind != TP_OP_ATTENTION || pl->op_prec[i] != TP_PREC_FP8) continue;
        const tp_value *xv = &g->values[op->in[0]], *ov = &g->values[op->out];
        const tp_dtype xdt = pl->value_dt[op->in[0]], ydt = pl->value_dt[op->out];
        /* E4M3 Q/K/V (written by the QKV GEMM): the reference runs on their values in f16 (exact), so the cost
         * is that of P and the output; Q/K/V's own rounding happened in the GEMM */
        const tp_dtype rdt = xdt == TP_E4M3 ? TP_F16 : xdt;
        const size_t m = (size_t)tp_value_numel(ov), rb = m * tp_dtype_info(rdt)->bytes, yb = value_bytes(e, op->out);
        const void *ref_in = e->dptr[op->in[0]];
        if (!d_ref) {
            CU_TRY(cudaMalloc(&d_ref, rb));
            h8 = malloc(yb > rb ? yb : rb);
            h16 = malloc(rb);
            f8 = malloc(sizeof(float) * m);
            f16 = malloc(sizeof(float) * m);
            if (!h8 || !h16 || !f8 || !f16) {
                st = tp_fail(err, TP_ERR_OOM, "out of host memory comparing %s", op->layer);
                break;
            }
        }
        if (xdt == TP_E4M3) {
            const size_t nq = (size_t)tp_value_numel(xv);
            float sq = 1.0f;
            free(h_q), free(f_q), cudaFree(d_q16);
            d_q16 = NULL, h_q = malloc(nq * 2), f_q = malloc(sizeof(float) * nq);
            if (!h_q || !f_q) {
                st = tp_fail(err, TP_ERR_OOM, "out of host memory comparing %s", op->layer);
                break;
            }
            CU_TRY(cudaMalloc(&d_q16, nq * 2));
            CU_TRY(cudaMemcpyAsync(h_q, e->dptr[op->in[0]], nq, cudaMemcpyDeviceToHost, e->stream));
            CU_TRY(cudaMemcpyAsync(&sq, e->d_scales + SCALE_SLOT * op->in[0], sizeof sq, cudaMemcpyDeviceToHost,
                                   e->stream));
            CU_TRY(cudaStreamSynchronize(e->stream));
            tp_convert_to_f32(TP_E4M3, h_q, f_q, nq, sq); /* one scale for Q, K and V (plan.c) */
            tp_convert_from_f32(TP_F16, f_q, h_q, nq, 1.0f);
            CU_TRY(cudaMemcpy(d_q16, h_q, nq * 2, cudaMemcpyHostToDevice));
            ref_in = d_q16;
        }
        /* the reference: the high-precision flash kernel on the same qkv, output in the input's type */
        int rc = tpk_flash_attention(ref_in, rdt, d_ref, rdt, NULL, (int)xv->shape[0], (int)xv->shape[1], op->heads,
                                     op->head_dim, op->scale, e->stream);
        if (rc) {
            st = tp_fail(err, TP_ERR_CUDA, "reference attention for %s: %s", op->layer, cudaGetErrorString((cudaError_t)rc));
            break;
        }
        float ys = 1.0f;
        CU_TRY(cudaMemcpyAsync(h8, e->dptr[op->out], yb, cudaMemcpyDeviceToHost, e->stream));
        CU_TRY(cudaMemcpyAsync(h16, d_ref, rb, cudaMemcpyDeviceToHost, e->stream));
        if (ydt == TP_E4M3)
            CU_TRY(cudaMemcpyAsync(&ys, e->d_scales + SCALE_SLOT * op->out, sizeof ys, cudaMemcpyDeviceToHost, e->stream));
        CU_TRY(cudaStreamSynchronize(e->stream));
        tp_convert_to_f32(ydt, h8, f8, m, ys);
        tp_convert_to_f32(rdt, h16, f16, m, 1.0f);
        double dot = 0, a2 = 0, b2 = 0, d2 = 0;
        for (size_t k = 0; k < m; k++) {
            double a = f8[k], b = f16[k];
            dot += a * b;
            a2 += a * a;
            b2 += b * b;
            d2 += (a - b) * (a - b);
        }
        cosine[i] = dot / sqrt(a2 * b2);
        rel_l2[i] = sqrt(d2 / b2);
        n++;
    }
fail:
    cudaFree(d_ref);
    cudaFree(d_q16);
    free(h_q);
    free(f_q);
    free(h8);
    free(h16);
    free(f8);
    free(f16);
    if (!st) *n_out = n;
    return st;
}

tp_status tp_engine_forward(tp_engine *e, tp_error *err) {
    tp_status st = TP_OK;
    /* poison the output so an unwritten element shows as NaN */
    CU_TRY(cudaSetDevice(e->device));
    CU_TRY(cudaMemsetAsync(e->dptr[e->g->output], 0xFF, value_bytes(e, e->g->output), e->stream));
    if ((st = launch_run(e, err))) return st;
    return sync_all(e, err);
fail:
    return st;
}

tp_status tp_engine_get_output(tp_engine *e, float *out, tp_error *err) {
    tp_status st = TP_OK;
    int v = e->g->output;
    size_t bytes = value_bytes(e, v);
    void *h = malloc(bytes);
    if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    CU_TRY(cudaSetDevice(e->device));
    CU_TRY(cudaMemcpyAsync(h, e->dptr[v], bytes, cudaMemcpyDeviceToHost, e->stream));
    CU_TRY(cudaStreamSynchronize(e->stream));
    tp_convert_to_f32(e->plan->value_dt[v], h, out, (size_t)tp_value_numel(&e->g->values[v]), 1.0f);
    free(h);
    return TP_OK;
fail:
    free(h);
    return st;
}

tp_status tp_engine_calibrate(tp_engine *e, const int *want, float *amax, tp_error *err) {
    const tp_graph *g = e->g;
    tp_status st = TP_OK;
    if (e->ranks) return tp_fail(err, TP_ERR_UNSUPPORTED, "calibration: unsupported on a tensor-parallel engine (calibrate on one GPU)");
    float *h = malloc(sizeof(float) * (size_t)g->n_values);
    if (!h) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    /* every value is stored here: the fusions into the chosen kernels (tpe_fuse_built) are undone, and a KV cache's
     * scale is taken from the k and v its append writes: a call that rotates the keys into the cache (the
     * rope+kv_append rule) keeps the rotated keys in shared memory, so it runs unfused here */
    if (e->prog_chosen.calls) {
        tp_program_free(&e->prog);
        e->prog = e->prog_chosen;
        memset(&e->prog_chosen, 0, sizeof e->prog_chosen);
    }
    for (int i = 0; i < g->n_ops; i++)
        if (tp_program_is_head(&e->prog, i) && tp_program_find(&e->prog, g, i, TP_OP_KV_APPEND) >= 0)
            tp_program_unfuse(&e->prog, g, e->plan, i);
    CU_TRY(cudaMemsetAsync(e->d_amax, 0, sizeof(float) * (size_t)g->n_values, e->stream));
    for (int i = 0; i < g->n_ops; i++) {
        if ((st = tpe_launch_op(e, i, err))) goto fail;
        int v = g->ops[i].out;
        if (!want[v]) continue;
        HOOK(e, i, TP_CAT_QUANT);
        int rc = tpk_amax(e->dptr[v], e->plan->value_dt[v], (size_t)tp_value_numel(&g->values[v]), e->d_amax + v,
                          e->stream);
        if (rc) {
            st = tp_fail(err, TP_ERR_CUDA, "amax of %s: %s", g->values[v].name, cudaGetErrorString((cudaError_t)rc));
            goto fail;
        }
    }
    /* the engine's stream is non-blocking: a plain cudaMemcpy would not wait for the kernels above */
    HOOK(e, -1, TP_CAT_OTHER);
    CU_TRY(cudaMemcpyAsync(h, e->d_amax, sizeof(float) * (size_t)g->n_values, cudaMemcpyDeviceToHost, e->stream));
    CU_TRY(cudaStreamSynchronize(e->stream));
    for (int v = 0; v < g->n_values; v++)
        if (want[v] && !(h[v] <= amax[v])) amax[v] = h[v]; /* NaN propagates */
    free(h);
    return TP_OK;
fail:
    free(h);
    return st;
}

tp_status tp_engine_benchmark(tp_engine *e, double warmup_ms, int iterations, double duration_ms, double **samples,
                              int *n_out, double *wall_ms, tp_error *err) {
    tp_status st = TP_OK;
    run_timer t = {0};
    int n = 0;
    *samples = NULL;
    *n_out = 0;
    /* warm-up: untimed, synchronized runs until warmup_ms have passed (at least one); it also estimates the
     * time per run so the timed region can be sized without any synchronization inside it */
    int warm = 0;
    double t0 = tp_now_ms(), t1;
    do {
        if ((st = launch_run(e, err)) || (st = sync_all(e, err))) goto fail;
        warm++;
        t1 = tp_now_ms();
    } while (t1 - t0 < warmup_ms);
    double est = (t1 - t0) / warm;
    n = iterations > 0 ? iterations : 1;
    if (duration_ms > 0 && est > 0 && duration_ms / est > n) n = (int)ceil(duration_ms / est);
    if (n > 100000) n = 100000;
    if (!(*samples = malloc(sizeof(double) * (size_t)n))) {
        st = tp_fail(err, TP_ERR_OOM, "out of host memory for %d timing samples", n);
        goto fail;
    }
    if ((st = rtimer_create(e, n, &t, err))) goto fail;
    nvtxRangePushA("BENCHMARK");
    for (int i = 0; i < n && !st; i++) {
        if (!(st = rtimer_mark(e, &t, i, 0, err)) && !(st = launch_run(e, err))) st = rtimer_mark(e, &t, i, 1, err);
    }
    if (!st) st = sync_all(e, err);
    nvtxRangePop();
    if (!st) st = rtimer_read(&t, *samples, wall_ms, err);
    if (st) goto fail;
    *n_out = n;
    rtimer_destroy(&t);
    return TP_OK;
fail:
    rtimer_destroy(&t);
    free(*samples);
    *samples = NULL;
    return st;
}

tp_status tp_engine_run_n(tp_engine *e, int n, tp_error *err) {
    tp_status st = TP_OK;
    for (int i = 0; i < n && !st; i++) st = launch_run(e, err);
    return st ? st : sync_all(e, err);
}

double tp_engine_weight_bytes(const tp_engine *e) { return e->weight_bytes; }

double tp_engine_activation_bytes(const tp_engine *e) { return e->act_bytes; }

/* 1 when an eager pass writes value v where the graph says: no producer fused the op after it into its epilogue (a
 * residual add or a GELU: such a GEMM writes that op's output, never its own) */
static int value_written(const tp_engine *e, int v) {
    const int p = e->g->values[v].producer;
    if (!e->dptr[v]) return 0;
    if (p < 0) return 1;
    return !tp_program_inner(&e->prog, e->g, v);
}

tp_status tp_engine_capture(tp_engine *e, float *const *taps, tp_error *err) {
    const tp_graph *g = e->g;
    if (e->ranks) return tp_fail(err, TP_ERR_UNSUPPORTED, "per-stage drift: unsupported on a tensor-parallel engine");
    tp_status st = TP_OK;
    void *h = NULL;
    size_t cap = 0;
    CU_TRY(cudaSetDevice(e->device));
    st = tpe_launch_begin(e, err);
    for (int i = 0; i < g->n_ops && !st; i++) {
        if ((st = tpe_launch_op(e, i, err))) break;
        for (int t = 0; t < g->n_taps && !st; t++) {
            const int v = g->taps[t].value;
            if (v != g->ops[i].out || !taps[t]) continue;
            const size_t n = (size_t)tp_value_numel(&g->values[v]), bytes = value_bytes(e, v);
            if (!value_written(e, v)) { /* not there to read: NaN, shown as such, never another value */
                for (size_t k = 0; k < n; k++) taps[t][k] = NAN;
                continue;
            }
            if (bytes > cap) {
                free(h);
                if (!(h = malloc(cap = bytes))) {
                    st = tp_fail(err, TP_ERR_OOM, "out of host memory reading %s", g->values[v].name);
                    break;
                }
            }
            float scale = 1.0f; /* an E4M3 value's per-tensor scale (value = e4m3 x scale) */
            CU_TRY(cudaMemcpyAsync(h, e->dptr[v], bytes, cudaMemcpyDeviceToHost, e->stream));
            if (e->plan->value_dt[v] == TP_E4M3)
                CU_TRY(cudaMemcpyAsync(&scale, e->d_scales + SCALE_SLOT * v, sizeof scale, cudaMemcpyDeviceToHost,
                                       e->stream));
            CU_TRY(cudaStreamSynchronize(e->stream));
            tp_convert_to_f32(e->plan->value_dt[v], h, taps[t], n, scale);
        }
    }
    if (!st) st = tpe_launch_end(e, err);
    free(h);
    return st;
fail:
    free(h);
    return st;
}
