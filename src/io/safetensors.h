/* safetensors.h: reader and writer for the safetensors format (https://github.com/huggingface/safetensors,
 * README "Format"): an 8-byte little-endian unsigned header length N, N bytes of UTF-8 JSON mapping each
 * tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte after the
 * header; an optional "__metadata__" object of string values), then the raw little-endian data.
 * Supported element types for loading: F32, F16, BF16 (others are named and rejected).
 *
 * Every error message starts with the file path and names the tensor or field at fault. */
#ifndef TP_SAFETENSORS_H
#define TP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "tprof.h"

#define TP_ST_MAX_DIMS 8

/* One header entry. Any dtype the table in formats/dtype.c knows is accepted here (F8_E4M3, I64, ...); only
 * tp_st_load_params restricts it. shape[ndim..] are 0; ndim 0 is a scalar (one element). */
typedef struct {
    char *name;
    tp_dtype dtype;
    int ndim;
    int64_t shape[TP_ST_MAX_DIMS];
    uint64_t begin, end; /* byte range inside the data section; end - begin = numel * element bytes */
} tp_st_tensor;

typedef struct {
    char *path;
    uint8_t *data;      /* the whole data section (read into memory) */
    uint64_t data_size;
    tp_st_tensor *tensors; /* in header order; "__metadata__" is skipped */
    int n_tensors;
} tp_safetensors;

/* Reads and validates the file: header length within the file (and at most 100,000,000 bytes, the reference
 * limit), JSON well-formed, every entry an object with exactly dtype (a known string), shape (at most
 * TP_ST_MAX_DIMS non-negative integers) and data_offsets (two integers, begin <= end <= data size, end - begin
 * equal to numel * element size), no key twice, no two tensors sharing a byte of the data section (both named);
 * "__metadata__", if present, must be an object. Reads the whole data section
 * into memory. Assumes a little-endian host (checked at compile time).
 * Errors: TP_ERR_IO (missing, unreadable, not a regular file), TP_ERR_FORMAT (anything malformed), TP_ERR_OOM.
 * On error *st is left empty (nothing to close). */
tp_status tp_st_open(const char *path, tp_safetensors *st, tp_error *err);
/* Frees everything and zeroes *st; safe on an empty or already closed st. */
void tp_st_close(tp_safetensors *st);
/* The entry named name, or NULL. Linear in the number of tensors. */
const tp_st_tensor *tp_st_find(const tp_safetensors *st, const char *name);

/* What a model expects: a name, a shape, and where its fp32 values go. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[TP_ST_MAX_DIMS];
    float *dst; /* numel fp32 values */
} tp_param_spec;

/* Loads every expected parameter from path, converting F32/F16/BF16 to fp32 (exactly). Rejects, with one line
 * naming the tensor: a missing tensor, an extra tensor not in specs, a shape mismatch (both shapes printed), a
 * dtype other than F32/F16/BF16. Problems are looked for in that order and the first kind found is reported,
 * with how many more of that kind there are. No dst is written unless every check passes. specs must have
 * distinct names and ndim in 0..TP_ST_MAX_DIMS (a programming error otherwise: CHECK).
 * Errors: TP_ERR_IO, TP_ERR_FORMAT (as tp_st_open), TP_ERR_SHAPE (name, shape or dtype), TP_ERR_OOM. */
tp_status tp_st_load_params(const char *path, const tp_param_spec *specs, int n_specs, tp_error *err);

/* Writes a safetensors file. data[i] points to numel(shape[i]) values of dtypes[i], already in that type
 * (little-endian). Tensors are laid out contiguously in the given order, 8-byte aligned header (padded with
 * spaces as the reference implementation does). Names must be distinct, valid UTF-8 and not "__metadata__".
 * Errors: TP_ERR_ARG (bad entry: name, dtype, ndim, negative dim, NULL data), TP_ERR_IO (the partial file is
 * removed), TP_ERR_OOM. */
typedef struct {
    const char *name;
    tp_dtype dtype;
    int ndim;
    int64_t shape[TP_ST_MAX_DIMS];
    const void *data;
} tp_st_write_entry;
tp_status tp_st_write(const char *path, const tp_st_write_entry *entries, int n, tp_error *err);

#endif
