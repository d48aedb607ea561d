/* model.h: a model's parameters, independent of the family: a table of named fp32 master tensors from which
 * every engine derives its own storage (FP16, BF16, FP8 with scales). Names and shapes follow the reference
 * implementation of the family (timm for ViT), so checkpoints load as they are. */
#ifndef TP_MODEL_H
#define TP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"

typedef struct {
    char name[TP_NAME_LEN];
    int ndim;
    int64_t shape[TP_MAX_DIMS];
    int64_t numel;
    float *data; /* numel fp32 values, row-major */
} tp_param;

typedef struct {
    tp_param *params;
    int n_params;
} tp_params;

void tp_params_free(tp_params *p);
int tp_params_find(const tp_params *p, const char *name); /* index or -1 */
size_t tp_params_count(const tp_params *p);                /* total number of values */

#endif
