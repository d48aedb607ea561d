#include "profile/cupti_trace.h"

#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The C++ ABI's demangler (libstdc++, linked with the CUDA runtime already); kernel names come mangled. */
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

#define BUF_SIZE (8u << 20)

typedef struct {
    uint64_t key;
    int32_t op;
    int32_t cat;
} id_entry;

/* Open-addressing map from a 64-bit id (graph node id, or external correlation / correlation id) to the op. */
typedef struct {
    id_entry *e;
    size_t cap, n;
} id_map;

static int map_put(id_map *m, uint64_t key, int op, int cat) {
    if (2 * (m->n + 1) > m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 1024;
        id_entry *ne = calloc(nc, sizeof *ne);
        if (!ne) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->e[i].key) {
                size_t j = (size_t)(m->e[i].key * 0x9E3779B97F4A7C15ull) & (nc - 1);
                while (ne[j].key) j = (j + 1) & (nc - 1);
                ne[j] = m->e[i];
            }
        free(m->e);
        m->e = ne;
        m->cap = nc;
    }
    size_t j = (size_t)(key * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
    while (m->e[j].key && m->e[j].key != key) j = (j + 1) & (m->cap - 1);
    if (!m->e[j].key) m->n++;
    m->e[j].key = key;
    m->e[j].op = op;
    m->e[j].cat = cat;
    return 0;
}

static const id_entry *map_get(const id_map *m, uint64_t key) {
    if (!m->cap || !key) return NULL;
    size_t j = (size_t)(key * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
    while (m->e[j].key) {
        if (m->e[j].key == key) return &m->e[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

typedef struct {
    tp_record_kind kind;
    char *name;
    uint64_t start, end, node, bytes;
    uint32_t corr, stream;
    int grid[3], block[3], regs, smem_s, smem_d;
} raw_record;

struct tp_cupti {
    CUpti_SubscriberHandle sub;
    int op, cat;          /* the launch tprof declared last */
    int ext_pushed;       /* an external correlation id is on CUPTI's stack */
    id_map nodes;         /* graph node id -> op */
    id_map external;      /* correlation id -> op (eager launches) */
    raw_record *raw;
    size_t n_raw, cap_raw;
    int oom;
    uint64_t dropped;
    int device;           /* >= 0: keep this device's records only (tp_cupti_set_device) */
};

/* CUPTI's buffer callbacks take no user pointer, so the one live session is reachable through this pointer;
 * CUPTI itself allows a single subscriber per process, so there is never more than one. */
static tp_cupti *g_session;

#define CUPTI_TRY(call, what)                                                                              \
    do {                                                                                                   \
        CUptiResult r_ = (call);                                                                           \
        if (r_ != CUPTI_SUCCESS) {                                                                         \
            const char *s_ = NULL;                                                                         \
            cuptiGetResultString(r_, &s_);                                                                 \
            return tp_fail(err, TP_ERR_UNSUPPORTED, "CUPTI %s failed: %s", what, s_ ? s_ : "unknown error"); \
        }                                                                                                  \
    } while (0)

static void CUPTIAPI on_resource(void *user, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void *data) {
    tp_cupti *c = user;
    if (dom != CUPTI_CB_DOMAIN_RESOURCE) return;
    const CUpti_ResourceData *rd = data;
    const CUpti_GraphData *gd = rd->resourceDescriptor;
    uint64_t id = 0, orig = 0;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
        if (c->op < 0 || cuptiGetGraphNodeId(gd->node, &id) != CUPTI_SUCCESS) return;
        if (map_put(&c->nodes, id, c->op, c->cat)) c->oom = 1;
    } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
        /* instantiation clones every node; the executed (cloned) node's id is what kernel records carry */
        if (cuptiGetGraphNodeId(gd->node, &id) != CUPTI_SUCCESS ||
            cuptiGetGraphNodeId(gd->originalNode, &orig) != CUPTI_SUCCESS)
            return;
        const id_entry *e = map_get(&c->nodes, orig);
        if (e && map_put(&c->nodes, id, e->op, e->cat)) c->oom = 1;
    }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = malloc(BUF_SIZE); /* malloc's alignment (16) satisfies CUPTI's 8 */
    *size = *buffer ? BUF_SIZE : 0;
    *max_records = 0;
}

static char *demangle(const char *name) {
    int status = 0;
    char *d = name ? __cxa_demangle(name, NULL, NULL, &status) : NULL;
    if (d && status == 0) return d;
    free(d);
    return strdup(name ? name : "?");
}

static void push_raw(tp_cupti *c, const raw_record *r) {
    if (c->n_raw == c->cap_raw) {
        size_t nc = c->cap_raw ? 2 * c->cap_raw : 4096;
        raw_record *nr = realloc(c->raw, nc * sizeof *nr);
        if (!nr) {
            c->oom = 1;
            free(r->name);
            return;
        }
        c->raw = nr;
        c->cap_raw = nc;
    }
    c->raw[c->n_raw++] = *r;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    tp_cupti *c = g_session;
    CUpti_Activity *rec = NULL;
    while (c && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        raw_record r;
        memset(&r, 0, sizeof r);
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            if (c->device >= 0 && (int)k->deviceId != c->device) break;
            r.kind = TP_REC_KERNEL;
            r.name = demangle(k->name);
            r.start = k->start, r.end = k->end, r.corr = k->correlationId, r.stream = k->streamId;
            r.node = k->graphNodeId;
            r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
            r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
            r.regs = k->registersPerThread, r.smem_s = k->staticSharedMemory, r.smem_d = k->dynamicSharedMemory;
            push_raw(c, &r);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            if (c->device >= 0 && (int)m->deviceId != c->device) break;
            static const char *kinds[] = {"?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH"};
            char nm[32];
            snprintf(nm, sizeof nm, "[CUDA memcpy %s]", m->copyKind < 10 ? kinds[m->copyKind] : "?");
            r.kind = TP_REC_MEMCPY;
            r.name = strdup(nm);
            r.start = m->start, r.end = m->end, r.corr = m->correlationId, r.stream = m->streamId;
            r.node = m->graphNodeId, r.bytes = m->bytes;
            push_raw(c, &r);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            if (c->device >= 0 && (int)m->deviceId != c->device) break;
            r.kind = TP_REC_MEMSET;
            r.name = strdup("[CUDA memset]");
            r.start = m->start, r.end = m->end, r.corr = m->correlationId, r.stream = m->streamId;
            r.node = m->graphNodeId, r.bytes = m->bytes;
            push_raw(c, &r);
            break;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
            const CUpti_ActivityExternalCorrelation *x = (const CUpti_ActivityExternalCorrelation *)rec;
            if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 && x->externalId) {
                int op = (int)(x->externalId >> 8) - 1, cat = (int)(x->externalId & 0xFF);
                if (map_put(&c->external, x->correlationId, op, cat)) c->oom = 1;
            }
            break;
        }
        default: break;
        }
    }
    size_t dropped = 0;
    if (c && cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped) == CUPTI_SUCCESS) c->dropped += dropped;
    free(buffer);
}

tp_status tp_cupti_create(tp_cupti **out, tp_error *err) {
    *out = NULL;
    if (g_session) return tp_fail(err, TP_ERR_UNSUPPORTED, "a CUPTI session is already open in this process");
    tp_cupti *c = calloc(1, sizeof *c);
    if (!c) return tp_fail(err, TP_ERR_OOM, "out of host memory");
    c->op = -1;
    c->device = -1;
    CUptiResult r = cuptiSubscribe(&c->sub, (CUpti_CallbackFunc)on_resource, c);
    if (r != CUPTI_SUCCESS) {
        const char *s = NULL;
        cuptiGetResultString(r, &s);
        free(c);
        return tp_fail(err, TP_ERR_UNSUPPORTED, "CUPTI subscribe failed (is another profiler attached?): %s",
                       s ? s : "unknown error");
    }
    g_session = c;
    CUPTI_TRY(cuptiEnableCallback(1, c->sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED),
              "enable graph-node callbacks");
    CUPTI_TRY(cuptiEnableCallback(1, c->sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED),
              "enable graph-node clone callbacks");
    CUPTI_TRY(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register activity buffers");
    *out = c;
    return TP_OK;
}

void tp_cupti_destroy(tp_cupti *c) {
    if (!c) return;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    cuptiUnsubscribe(c->sub);
    for (size_t i = 0; i < c->n_raw; i++) free(c->raw[i].name);
    free(c->raw);
    free(c->nodes.e);
    free(c->external.e);
    if (g_session == c) g_session = NULL;
    free(c);
}

void tp_cupti_set_device(tp_cupti *c, int device) {
    if (c) c->device = device;
}

void tp_cupti_set_launch(tp_cupti *c, int op, tp_category cat) {
    if (!c) return;
    uint64_t dummy;
    if (c->ext_pushed) {
        cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &dummy);
        c->ext_pushed = 0;
    }
    c->op = op;
    c->cat = (int)cat;
    if (op >= 0 &&
        cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                               ((uint64_t)(op + 1) << 8) | (uint64_t)cat) == CUPTI_SUCCESS)
        c->ext_pushed = 1;
}

/* External correlation records are emitted against API records, so the runtime and driver API kinds are on
 * too (their records are dropped): without them eager launches would carry no op. */
static const CUpti_ActivityKind KINDS[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                           CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

tp_status tp_cupti_start(tp_cupti *c, tp_error *err) {
    for (size_t i = 0; i < c->n_raw; i++) free(c->raw[i].name);
    c->n_raw = 0;
    c->dropped = 0;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++)
        CUPTI_TRY(cuptiActivityEnable(KINDS[i]), "activity enable");
    return TP_OK;
}

static int by_start(const void *a, const void *b) {
    const raw_record *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

tp_status tp_cupti_stop(tp_cupti *c, tp_trace *t, tp_error *err) {
    CUPTI_TRY(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush");
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++)
        CUPTI_TRY(cuptiActivityDisable(KINDS[i]), "activity disable");
    if (c->oom) return tp_fail(err, TP_ERR_OOM, "out of host memory while tracing");
    if (c->dropped)
        return tp_fail(err, TP_ERR_UNSUPPORTED, "CUPTI dropped %llu activity records: profile fewer iterations",
                       (unsigned long long)c->dropped);
    qsort(c->raw, c->n_raw, sizeof *c->raw, by_start);
    int iter = -1, prev_op = -1;
    tp_status st = TP_OK;
    for (size_t i = 0; i < c->n_raw; i++) {
        raw_record *r = &c->raw[i];
        const id_entry *e = r->node ? map_get(&c->nodes, r->node) : map_get(&c->external, r->corr);
        int op = e ? e->op : -1;
        tp_category cat = e ? (tp_category)e->cat : r->kind == TP_REC_KERNEL ? TP_CAT_OTHER : TP_CAT_MEMORY;
        if (r->kind != TP_REC_KERNEL) cat = TP_CAT_MEMORY;
        if (op >= 0 && (iter < 0 || op < prev_op)) iter++;
        if (op >= 0) prev_op = op;
        if (iter < 0) {
            free(r->name);
            continue;
        }
        tp_trace_record tr;
        memset(&tr, 0, sizeof tr);
        tr.kind = r->kind;
        tr.name = r->name;
        tr.start_ns = r->start, tr.end_ns = r->end;
        tr.iteration = iter;
        tr.op = op;
        tr.category = cat;
        memcpy(tr.grid, r->grid, sizeof tr.grid);
        memcpy(tr.block, r->block, sizeof tr.block);
        tr.registers = r->regs, tr.smem_static = r->smem_s, tr.smem_dynamic = r->smem_d;
        tr.bytes = r->bytes, tr.stream = r->stream, tr.graph_node = r->node;
        if (!st) st = tp_trace_add(t, &tr, err);
        free(r->name);
    }
    t->iterations = iter + 1;
    c->n_raw = 0;
    return st;
}
