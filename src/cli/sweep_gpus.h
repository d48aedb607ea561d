/* sweep_gpus.h: `tprof bench --batch LIST --gpus LIST`: a batch sweep's runs spread over GPUs, one process per
 * GPU. Each process is this tprof started again (exec of /proc/self/exe: a fresh CUDA runtime, which a fork of a
 * process that has touched CUDA would not have) with the same options, its share of the batch sizes (dealt round
 * robin in the order given), CUDA_VISIBLE_DEVICES naming its GPU (an index into the caller's own
 * CUDA_VISIBLE_DEVICES list when that is set), its output kept in a temporary file and printed GPU after GPU once
 * all have finished, and its sweep rows (bench.h tp_bench_row) sent back through a pipe (the internal option
 * --rows-fd=N), so the caller prints one sweep table and chart as if one process had run every size. Runs on
 * different GPUs overlap in time, so each is timed alone on its GPU but the host (CPU threads, PCIe) is shared. */
#ifndef TP_CLI_SWEEP_GPUS_H
#define TP_CLI_SWEEP_GPUS_H

#include "bench/bench.h"
#include "tprof.h"

/* args: the bench command's options (after "bench"), argc of them; --batch and --gpus among them are replaced.
 * rows: n_batches x n_precs, batch-major, as tp_bench_sweep fills them. Errors: TP_ERR_ARG (more GPUs than batch
 * sizes), TP_ERR_IO (a process that could not start, or whose rows did not come back), TP_ERR_CUDA (a process that
 * failed: its GPU and batch sizes named; its own error is in its output). */
tp_status tp_sweep_gpus(int argc, char **argv, const int *gpus, int n_gpus, const int *batches, int n_batches,
                        int n_precs, tp_bench_row *rows, tp_error *err);

#endif
