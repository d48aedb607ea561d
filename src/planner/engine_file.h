/* engine_file.h: the tprof engine file (.tpe): a built engine's plan and its weights, already in their storage
 * formats (FP16/BF16 plain, FP8 / MXFP8 / NVFP4 packed with their scales), so that `tprof bench --engine` loads
 * and runs an engine without the checkpoint and without quantizing again.
 *
 * Layout (every integer little-endian; offsets in bytes):
 *
 *   0   8 bytes   magic "TPRFENG\0"
 *   8   u32       format version (TP_ENGINE_VERSION = 4); a reader takes 1 (no "gemm_selection"), 2 (a ViT
 *                 "model" without "family"), 3 (no program in "ops") and 4
 *   12  u32       reserved, 0
 *   16  u64       H, the length of the JSON header (2 .. TP_ENGINE_MAX_HEADER)
 *   24  H bytes   JSON header (UTF-8, jansson; schema below)
 *   24+H u32      CRC-32 of the H JSON bytes (tp_crc32)
 *   ...           zero padding up to D = the next multiple of 64 (the start of the data section)
 *   D   ...       data section: each tensor's element bytes and then (quantized tensors) its scale bytes, each
 *                 region starting at a multiple of 64 from D (so at a 64-byte aligned file offset too: a reader
 *                 may map the file and hand the regions to a GPU copy as they are), zero padding between
 *                 regions. The file ends where the last region ends.
 *
 * JSON header (written with keys in this order; read in any order; every key required, no others):
 *   "tprof": the writer's TPROF_VERSION, "commit": its git commit (informative; the format version decides),
 *   "model": {"family": the model family's name (models/model.h: "vit"), then that family's configuration as its
 *            to_json writes it (tp_model_to_json); the ViT's: "name", "img_size", "patch_size", "in_chans",
 *            "embed_dim", "depth", "num_heads", "mlp_ratio", "class_token" (bool), "global_pool" ("token" | "avg"),
 *            "num_classes", "ln_eps", "preprocess": {"img_size", "crop_pct", "mean": [3], "std": [3],
 *            "interpolation", "crop_mode"}}. Versions 1 and 2 have no "family" (a ViT) and no "interpolation" or
 *            "crop_mode" (bicubic, center),
 *   "precision": the engine's precision name ("fp16", "nvfp4", ...; equal to policy.default),
 *   "policy": {"default": prec, "overrides": [{"layers": glob, "precision": prec, "_builtin": bool}, ...]}: the
 *            schema tp_policy_load_json reads (it ignores '_' keys); builtin rules are listed too, flagged
 *            "_builtin", so that the policy reads back identical (tp_policy_load_json would re-add them in front,
 *            which resolves every layer the same way),
 *   "target_sm": the compute capability x 10 the plan was made for (0: the CPU executor),
 *   "calibration": {"graph value name": amax, ...}: max |x| of activations for static scales (may be {}),
 *   "ops": [{"layer", "op" (tp_op_kind_name), "precision", "how" (the plan's note), "emulated" (bool), "kernel",
 *            "fused_into"}, ...]: informative, so that tprof can print the plan without rebuilding it. "kernel"
 *            and "fused_into" (version 4) are the program the plan lowered to (program.h): the kernel of the op's
 *            call (tp_call_kind_get's name), and null or the layer of the op whose call computes it (a fusion),
 *   "tensors": [{"name", "storage", "shape": [dims], "offset", "bytes", "crc32"}, ...] in the model's
 *            parameter order; offsets are relative to D. "storage" is "f32", "f16" or "bf16" (plain, numel
 *            little-endian values), or a quantized format name of qformat.h ("fp8", "fp8-block128", "mxfp8",
 *            "nvfp4", "mxfp4"), whose entries also have "scales_offset", "scales_bytes", "scales_crc32" and
 *            "global_scale" (NVFP4's per-tensor s2; 1 otherwise). A quantized tensor is the tp_qtensor of
 *            tp_quantize(format, data, rows = numel / K, K = last dim, is_weight = 1): "offset"/"bytes" hold its
 *            elems, "scales_*" its scales (FP8 per-tensor: one little-endian f32, the scale amax / 448).
 *            The tensors are exactly the model's parameters (names and shapes of tp_model_params_shapes).
 *   "weight_bytes": the sum of every tensor's bytes and scales_bytes: the engine's weight size in its format.
 *   "gemm_selection" (version 2): null, or the GEMM algorithms `tprof build` timed on the target GPU (GEMM
 *            selection, gemm_cublaslt.h): {"gpu": its name, "cublaslt": cublasLtGetVersion(), "batch": the batch
 *            size timed (the GEMMs' M), "algos": [per op of "ops", the cuBLASLt heuristic candidate index run,
 *            1000 where tprof's Hopper GEMM runs the op with the GELU after it in its epilogue
 *            (TP_GEMM_CHOICE_SM90_GELU, cuda_engine.h), 1001 where it runs an FP8 op without one
 *            (TP_GEMM_CHOICE_SM90), -1 for ops without a GEMM], "fp8_accum": "fast" or "promote" (the
 *            accumulation of FP8 GEMMs they were timed with, `--fp8-accum`; optional: files written before it
 *            have none, and their algorithms are timed again)}. `tprof bench --engine`
 *            reuses them when the GPU, the cuBLASLt version, the batch size and (for engines with FP8 GEMMs)
 *            the FP8 accumulation are the same, and neither --gelu tanh nor (for a selection with tprof's GEMMs)
 *            --gemm cublaslt is given (a timing cache); it times again otherwise.
 *
 * Integers in the JSON are JSON integers; floats are written with 17 significant digits, so every f32 (amax,
 * global scale, ln_eps, mean, std) and every double (mlp_ratio, crop_pct) reads back bit for bit.
 *
 * Errors of this module are one line that starts with the file path and names the field or tensor at fault. */
#ifndef TP_ENGINE_FILE_H
#define TP_ENGINE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/qformat.h"
#include "ir/graph.h"
#include "models/model.h"
#include "planner/plan.h"
#include "planner/policy.h"
#include "tprof.h"

#define TP_ENGINE_MAGIC "TPRFENG" /* 7 characters and the terminating NUL: the 8 magic bytes */
#define TP_ENGINE_VERSION 4u     /* written */
#define TP_ENGINE_MIN_VERSION 1u /* oldest read: version 1 has no "gemm_selection" */
#define TP_ENGINE_ALIGN 64
#define TP_ENGINE_PREFIX_BYTES 24 /* magic, version, reserved, H */
/* A larger header is a broken or hostile file: a ViT-H header is about 100 KB. */
#define TP_ENGINE_MAX_HEADER ((uint64_t)100000000)

/* CRC-32 as zlib's crc32() and IEEE 802.3 compute it (reflected polynomial 0xEDB88320, initial value 0xFFFFFFFF,
 * final XOR 0xFFFFFFFF). Chains like zlib's: start with crc = 0, pass the previous result to continue over
 * more bytes. tp_crc32(0, "123456789", 9) == 0xCBF43926. */
uint32_t tp_crc32(uint32_t crc, const void *data, size_t n);

/* One stored tensor. */
typedef struct {
    char name[TP_NAME_LEN];
    int ndim;
    int64_t shape[TP_MAX_DIMS];
    int64_t numel;
    tp_qformat qf; /* TP_QF_NONE: plain storage in dtype; otherwise the packed tensor q */
    tp_dtype dtype; /* plain: TP_F32, TP_F16 or TP_BF16; quantized: the format's element type (informative) */
    void *data;     /* plain: numel values of dtype, little-endian (bytes bytes); NULL when quantized */
    size_t bytes;   /* plain: data bytes; quantized: q.elem_bytes */
    tp_qtensor q;   /* quantized: rows = numel / K, K = shape[ndim - 1]; owned by the engine file (do not call
                       tp_qtensor_free on it; tp_engine_file_free does) */
} tp_engine_tensor;

/* One op of the plan, as the writer planned it (informative). */
typedef struct {
    char layer[TP_NAME_LEN];
    tp_op_kind kind;
    tp_precision prec; /* the precision its main math runs in (plan->op_prec) */
    int emulated;      /* plan->op_emulated */
    char how[256];     /* plan->op_note */
    tp_call_kind kernel;          /* version 4: the kernel of its call in the plan's program; TP_CALL_NONE before */
    char fused_into[TP_NAME_LEN]; /* version 4: the layer whose call computes it, "" when its own call does */
} tp_engine_op;

/* The GEMM algorithms an engine was tuned with (the header's "gemm_selection"). */
enum { TP_FP8_ACCUM_UNKNOWN = -1, TP_FP8_ACCUM_FAST = 0, TP_FP8_ACCUM_PROMOTE = 1 };
typedef struct {
    char gpu[256]; /* the GPU's name (cudaDeviceProp.name) */
    int cublaslt;  /* cublasLtGetVersion() of the run that timed them */
    int batch;     /* the batch size they were timed at */
    int n_ops;     /* the number of ops of the plan (entries of algo) */
    int *algo;     /* per op: the cuBLASLt candidate index (tp_engine_options.gemm_choice), -1: no cuBLASLt GEMM */
    int fp8_accum; /* the FP8 accumulation they were timed with ("fp8_accum": TP_FP8_ACCUM_FAST or _PROMOTE,
                      tp_engine_options.fp8_promote); TP_FP8_ACCUM_UNKNOWN in files written before it existed */
} tp_engine_gemm_sel;

typedef struct {
    char tprof_version[32]; /* the writer's TPROF_VERSION (cut to 31 bytes) */
    char commit[64];        /* the writer's git commit (cut to 63 bytes) */
    tp_model model;         /* the model: its family and configuration */
    tp_precision precision; /* == policy.def */
    tp_policy policy;
    int target_sm;
    int n_calib;
    char (*calib_names)[TP_NAME_LEN]; /* n_calib graph value names */
    float *calib_amax;                /* n_calib amax values, finite and >= 0 */
    int n_ops;
    tp_engine_op *ops;
    int n_tensors;
    tp_engine_tensor *tensors; /* in the file's (the model's parameter) order */
    uint64_t weight_bytes;     /* sum of element and scale bytes of every tensor: the engine size per format */
    uint64_t file_bytes;       /* size of the file */
    uint32_t version;          /* the file's format version */
    int has_gemm;              /* 1: gemm holds the file's GEMM selection (owned: algo is freed with the file) */
    int has_program;           /* 1 (version 4): ops[].kernel and fused_into hold the program the writer lowered */
    tp_engine_gemm_sel gemm;
} tp_engine_file;

/* Writes an engine file for a plan.
 *   cfg     the model (validated with tp_model_validate);
 *   prec    the engine precision: must equal plan->requested;
 *   pol     the policy the plan was built with (its default must be prec), or NULL for tp_policy_default(prec);
 *   sm      the target the plan was made for: must equal plan->sm;
 *   params  the fp32 master weights; g the graph built from them (each of its TP_VAL_PARAM values names a
 *           parameter through param_index, with the same shape; every parameter appears exactly once);
 *   plan    the plan of g: a parameter with plan->value_qf != TP_QF_NONE is quantized with tp_quantize to that
 *           format (rows = numel / K, K = last dim, is_weight = 1: what the CUDA engine uploads); one the plan
 *           stores as E4M3 (value_dt TP_E4M3: fp8's per-tensor weights) is stored as format "fp8" (per-tensor
 *           scale amax / 448, as the CUDA engine computes it); any other is converted to plan->value_dt
 *           (f32, f16 or bf16, RNE);
 *   act_amax per graph value (g->n_values floats) the calibrated max |x|, or NULL for none: every value that is
 *           not a parameter and whose entry is not NaN is recorded under its name (NaN: not calibrated).
 *   gemm    the GEMM algorithms to record (gemm->n_ops == g->n_ops, every algo >= -1), or NULL for none.
 * The file is written to "<path>.tmp.<pid>.<n>" in the same directory and renamed over path once complete
 * and flushed to disk, so a failed or interrupted write never leaves a partial file at path.
 * Errors: TP_ERR_ARG (inconsistent arguments, a negative or infinite amax, non-finite weights that give a
 * non-finite NVFP4 global scale, a storage type the format cannot hold), TP_ERR_SHAPE (graph and parameters
 * disagree), TP_ERR_IO (cannot create, write or rename; the temporary file is removed), TP_ERR_OOM. */
tp_status tp_engine_file_write(const char *path, const tp_model *cfg, tp_precision prec, const tp_policy *pol,
                               int sm, const tp_params *params, const tp_graph *g, const tp_plan *plan,
                               const float *act_amax, const tp_engine_gemm_sel *gemm, tp_error *err);

/* Reads and validates an engine file into *out (which it owns; free with tp_engine_file_free). Checks, in file
 * order: the magic ("not a tprof engine file"), the version ("engine file version 7, this tprof reads versions
 * 1 to 3"), the reserved word, the header length (within the limit and the file), the header CRC ("header checksum
 * mismatch (file corrupted)"), the JSON and its schema (every field present, of its type and range, no
 * unknown key; the model validated by its family; precision == policy.default), the tensors
 * against the model's parameter table (names, order-independent, and shapes), each tensor's sizes against its
 * storage and shape, its regions 64-byte aligned, in order, not overlapping and inside the file ("tensor 'x':
 * truncated: ends at byte N, file has M bytes"; checked for all tensors before any data is read), no bytes
 * after the last region, weight_bytes equal to the sum; then each region's CRC ("tensor
 * 'blocks.3.mlp.fc1.weight': checksum mismatch (file corrupted)").
 * Errors: TP_ERR_IO (missing, unreadable, not a regular file), TP_ERR_FORMAT (anything above), TP_ERR_OOM.
 * On error *out is left empty (tp_engine_file_free on it is a no-op). */
tp_status tp_engine_file_read(const char *path, tp_engine_file *out, tp_error *err);

/* Frees everything *f owns and zeroes it; safe on a zeroed or already freed f. */
void tp_engine_file_free(tp_engine_file *f);

/* The tensor named name, or NULL. Linear in the number of tensors. */
const tp_engine_tensor *tp_engine_file_find(const tp_engine_file *f, const char *name);

/* Rebuilds the fp32 parameter table of the engine's model (names, shapes and order of tp_model_params_shapes)
 * with each tensor decoded: plain ones exactly through tp_convert_to_f32, quantized ones through
 * tp_dequantize (NVFP4: including the global scale). So a graph and a plan can be made again from the file
 * alone (tp_model_build_graph, tp_plan_build_policy with f->policy and f->target_sm).
 * The decoded values are what the engine computes with, but re-quantizing them is not always idempotent: for
 * MX formats a block whose amax rounded up across a power of two when quantized moves its shared exponent the
 * second time (and NVFP4's s2 and block scales depend on the decoded amax). An engine built from the file must
 * upload the stored tp_qtensor (f->tensors[i].q) as it is to be bit exact with the one that wrote it.
 * Errors: TP_ERR_OOM; TP_ERR_FORMAT if f does not hold the model's parameters (not possible after a successful
 * tp_engine_file_read). On error *out is empty. */
tp_status tp_engine_file_params(const tp_engine_file *f, tp_params *out, tp_error *err);

/* The program plan lowers to for graph g (the run's, from this file) against the one the file records: 0 the same
 * kernels and fusions, 1 different (msg receives one line: the first op that differs and both calls, and the call
 * counts), -1 not recorded (a file before version 4) or recorded for another graph (its op count). A new fusion
 * rule, or the run's --fusion / --gelu, changes the program; the weights the file holds serve either. */
int tp_engine_file_program_diff(const tp_engine_file *f, const tp_graph *g, const tp_plan *plan, char *msg, size_t n);

/* Fills act_amax (g->n_values floats) from the file's calibration: the amax of each value whose name the file
 * lists, NaN for the others (the convention tp_engine_file_write reads). Returns how many values were found. */
int tp_engine_file_calibration(const tp_engine_file *f, const tp_graph *g, float *act_amax);

#endif
