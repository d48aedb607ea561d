/* cupti_trace.h: in-process kernel tracing with CUPTI's Activity API (concurrent kernels, memcpy, memset),
 * with every record attributed to the IR op that launched it.
 *
 * Attribution, from the tracing data alone (no kernel-name guessing):
 *   - launches captured into a CUDA graph: CUPTI's resource callbacks report each graph node as it is created
 *     (during stream capture, while tprof has declared which op and category it is launching) and each clone of
 *     it made when the graph is instantiated; kernel records carry the executed node's id (graphNodeId), which
 *     maps back to the op;
 *   - eager launches: an external correlation id (CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) pushed per launch
 *     carries the op, and CUPTI links it to the kernel through the correlation id.
 * The session subscribes its callbacks when created (before any engine is built, so graph capture is seen)
 * but enables activity recording only between start and stop: the timed benchmark runs untraced. */
#ifndef TP_CUPTI_TRACE_H
#define TP_CUPTI_TRACE_H

#include "profile/trace.h"
#include "tprof.h"

typedef struct tp_cupti tp_cupti;

/* Subscribes to CUPTI (one session per process: CUPTI allows one subscriber). TP_ERR_UNSUPPORTED with
 * CUPTI's reason when it cannot (e.g. another profiler attached). */
tp_status tp_cupti_create(tp_cupti **out, tp_error *err);
void tp_cupti_destroy(tp_cupti *c);

/* Keeps the records (kernels, copies, memsets) of CUDA device `device` only (-1, the default: every device): a
 * tensor-parallel engine's profile is rank 0's GPU, whose launches the engine declares (cuda_engine.h
 * tp_engine_build_tp). */
void tp_cupti_set_device(tp_cupti *c, int device);

/* Declares that the launches that follow belong to op `op` (graph op index, -1 for none) with category cat.
 * Called by the CUDA engine before each kernel or GEMM it enqueues, also while capturing. */
void tp_cupti_set_launch(tp_cupti *c, int op, tp_category cat);

/* Starts recording activity (kernels, memcpy, memset). */
tp_status tp_cupti_start(tp_cupti *c, tp_error *err);
/* Stops recording, flushes, and appends the records to t (attributed; iterations numbered by the op order
 * wrapping around: ops run in graph order, so a record whose op index falls below its predecessor's starts a
 * new forward pass). Records outside any op (op -1) before the first op are dropped. Sets t->iterations. */
tp_status tp_cupti_stop(tp_cupti *c, tp_trace *t, tp_error *err);

#endif
