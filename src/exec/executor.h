/* executor.h: the executors a model runs on, as the layers above exec see them, alike in every build.
 *
 * Two executors: the CPU reference executor (exec/cpu/cpu_exec.h), always compiled; and the CUDA engine
 * (exec/cuda/engine/cuda_engine.h) with the GPU's measured GEMM peaks and copy rate (exec/cuda/gemm/gemm_peak.h),
 * declared here whether or not this tprof was built with CUDA. None of these headers names a CUDA type, so they
 * compile without the toolkit. A build without CUDA (CMake's TPROF_HAVE_CUDA off) compiles nothing of
 * src/exec/cuda/ and links src/exec/cuda_absent.c instead (src/profile/cupti_absent.c for CUPTI's side), whose
 * functions refuse: every one that returns a status fails with TP_ERR_NO_GPU and TP_EXEC_NO_CUDA, tp_gpu_query
 * first of all, so a caller that asks for the GPU before it builds an engine (as bench does) finds none, says so,
 * and runs on the CPU or stops, as it does on a machine with no GPU; no engine is ever built, so the queries on an
 * engine (tp_engine_op_bytes ...) return their value for none (0, -1, NULL) and tp_engine_destroy takes NULL. The
 * names of tp_attn_impl (tp_attn_impl_name, tp_attn_impl_parse) are the engine's own and absent without it.
 *
 * The bench (src/bench/) reaches the executors through this header alone and is compiled the same in both builds:
 * where a run may go depends on what tp_gpu_query finds at run time, not on the preprocessor
 * (scripts/check_layers.py fails on a CUDA conditional under src/bench/). */
#ifndef TP_EXECUTOR_H
#define TP_EXECUTOR_H

#include "exec/cpu/cpu_exec.h"
#include "exec/cuda/engine/cuda_engine.h"
#include "exec/cuda/gemm/gemm_peak.h"

/* The reason every GPU function gives in a build without CUDA (tp_gpu_query's, behind "No GPU found (...)"). */
#define TP_EXEC_NO_CUDA "this tprof was built without CUDA"

#endif
