/* roofline.h: how far an op, a layer kind or a whole forward pass is from the roofline of this GPU.
 *
 * The roofline model (S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful visual performance model
 * for multicore architectures", CACM 52(4), 2009): an op that does F FLOP of matrix products and moves B bytes
 * cannot finish in less than max(F / P, B / W), P the tensor-core rate of its precision and W the memory rate.
 * tprof measures both on the GPU it runs on instead of taking datasheet figures: P is the dense cuBLASLt GEMM rate
 * of the precision at 8192^3 (exec/cuda/gemm/gemm_peak.h), W the rate of a device-to-device copy of 2 x 256 MiB
 * (bytes read plus bytes written per second). B is the op's fewest bytes at its planned storage types (every
 * input read once, the output written once: planner/program.h, tp_program_call_bytes), F its matmul FLOPs (ir/graph.h).
 * FLOPs outside matrix products (LayerNorm's, the softmax's) are not counted: the CUDA-core rate is not measured,
 * and the ops that have them are memory-bound by a wide margin at these shapes.
 *
 * The floor is the model's, not a law: an op whose input is still in the 50 MB L2 of an H100/H200 (a LayerNorm
 * reading what the previous GEMM just wrote) can beat its memory floor, and a GEMM can beat its compute floor by
 * running at higher clocks than the peak measurement did (these GPUs run at their power cap under sustained
 * GEMMs). The report prints attainment (floor / measured time) as measured, above 100% when that happens.
 * Arithmetic and JSON only, no CUDA: profiles recorded on a GPU are analyzed the same on any machine. */
#ifndef TP_ROOFLINE_H
#define TP_ROOFLINE_H

#include <jansson.h>

#include "ir/graph.h"
#include "tprof.h"

/* The measured rates of one GPU (0 where not measured). */
typedef struct {
    double peak_tflops[TP_PREC_COUNT]; /* dense GEMM rate per precision, TFLOP/s (gemm_peak.h) */
    double copy_gbps;                  /* device-to-device copy, (bytes read + bytes written) / s / 1e9 */
} tp_roofline_rates;

/* The floor of one op, or the sum over many, in ns. */
typedef struct {
    double ns;         /* the floor: per op max(compute_ns, memory_ns), summed over ops */
    double compute_ns; /* the part of ns from ops whose compute term is the larger */
    double memory_ns;  /* the part from ops whose memory term is the larger (or equal) */
    int known;         /* 0 when a rate an op needs was not measured (ns is then a partial sum) */
} tp_roofline_floor;

/* The floor of an op of precision prec with matmul_flop FLOP of matrix products (>= 0) moving bytes bytes (>= 0)
 * under the rates r: compute term matmul_flop / (peak_tflops[prec] 1e12) s, memory term bytes / (copy_gbps 1e9) s.
 * A term with a zero numerator needs no rate; a needed rate that is 0 leaves f->known 0 (the other term still
 * counts). An op with no FLOP and no bytes (one fused into another: its bytes are that op's) has floor 0, known. */
void tp_roofline_op(const tp_roofline_rates *r, tp_precision prec, double matmul_flop, double bytes,
                    tp_roofline_floor *f);

/* acc += f (ns, compute_ns, memory_ns summed; known only while both are known). acc starts as {0, 0, 0, 1}. */
void tp_roofline_add(tp_roofline_floor *acc, const tp_roofline_floor *f);

/* The measured GEMM peaks as a JSON object {precision: TFLOP/s}, those > 0 only (new reference; the form traces,
 * profile summaries and the bench JSON share). NULL only when out of memory. */
json_t *tp_roofline_peaks_json(const tp_roofline_rates *r);

#endif
