/* bench_report.h: writing what a benchmark run collected (bench/bench.h): the text summary in trtexec's
 * vocabulary (per engine as it finishes, then the comparison and the roofline floors), the JSON (every sample,
 * the configuration, the system), the comparison report of `tprof compare` (report/compare.h), and the batch
 * sweep's table. */
#ifndef TP_BENCH_REPORT_H
#define TP_BENCH_REPORT_H

#include "bench/bench.h"

/* The writer tprof's commands use: prints to stdout; its end hook also writes o->json_path (when set) and, for
 * `tprof compare` (o->compare), the comparison report in o->out_dir. Errors of the end hook: TP_ERR_IO (a file
 * that cannot be written), TP_ERR_OOM, and the GEMM peak's on a GPU. */
const tp_bench_writer *tp_bench_text_writer(void);

/* The batch sweep's table: rows (n_batches x o->n_precs, batch-major, from tp_bench_sweep) with median, samples/s,
 * TFLOP/s, MFU and roofline floor per batch and precision; for decoders also the decode steps' table (tokens/s,
 * ms per step, floor, attainment) and, with o->json_path, its chart (the decode step's attainment of its floor
 * against the batch, one line per precision) as SVG beside the JSON: "<json path without .json>_decode_sweep.svg".
 * Errors: TP_ERR_IO naming the SVG file. */
tp_status tp_bench_print_sweep(const tp_bench_options *o, const int *batches, int n_batches, const tp_bench_row *rows,
                               tp_error *err);

#endif
