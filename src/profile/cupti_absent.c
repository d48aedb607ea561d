/* cupti_absent.c: CUPTI's side of the profiled run (cupti_trace.h, profile_run.h) in a build without CUDA, in place
 * of cupti_trace.c and profile_run.c: compiled only when CMake's TPROF_HAVE_CUDA is off, as exec/cuda_absent.c is
 * for the engine (exec/executor.h). No session opens (TP_ERR_NO_GPU, TP_EXEC_NO_CUDA), so the functions that take
 * one are never reached with one; tp_cupti_destroy takes NULL. Parameters go unused by design (CMakeLists.txt:
 * -Wno-unused-parameter for this file alone). */
#include <string.h>

#include "exec/executor.h"
#include "profile/cupti_trace.h"
#include "profile/profile_run.h"

tp_status tp_cupti_create(tp_cupti **out, tp_error *err) {
    *out = NULL;
    return tp_fail(err, TP_ERR_NO_GPU, "%s", TP_EXEC_NO_CUDA);
}

void tp_cupti_destroy(tp_cupti *c) {}

void tp_cupti_set_device(tp_cupti *c, int device) {}

void tp_cupti_set_launch(tp_cupti *c, int op, tp_category cat) {}

tp_status tp_cupti_start(tp_cupti *c, tp_error *err) { return tp_fail(err, TP_ERR_NO_GPU, "%s", TP_EXEC_NO_CUDA); }

tp_status tp_cupti_stop(tp_cupti *c, tp_trace *t, tp_error *err) {
    return tp_fail(err, TP_ERR_NO_GPU, "%s", TP_EXEC_NO_CUDA);
}

void tp_cupti_hook(void *session, int op, int category) {}

tp_status tp_profile_engine(tp_cupti *c, tp_engine *e, const tp_graph *g, const tp_plan *p,
                            const tp_profile_request *req, tp_trace *t, tp_profile_summary *s, json_t **summary,
                            tp_error *err) {
    tp_trace_init(t); /* the caller frees what it gets back, also after an error */
    memset(s, 0, sizeof *s);
    *summary = NULL;
    return tp_fail(err, TP_ERR_NO_GPU, "%s", TP_EXEC_NO_CUDA);
}
