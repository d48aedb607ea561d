/* model_arg.h: what `--model X` names, taken as users have their models (as vLLM, llama-bench and trtexec take
 * the model's path as the model). In this order:
 *   1. a preset name or alias (`tprof models`): presets win over a same-named file or folder in the current folder,
 *      so that `--model vit-b16` always means the listed model; write ./vit-b16 for the path;
 *   2. an existing path, told by its content, never by its name alone:
 *        a folder                  a checkpoint: its config.json (transformers' or timm's) tells the model;
 *        an engine file            the 8 magic bytes "TPRFENG\0" (or a .tpe name: the reader says what is wrong);
 *        an ONNX file              a .onnx name (protobuf carries no magic);
 *        a safetensors file        a .safetensors name or its layout (a little-endian header length, then '{'):
 *                                  a checkpoint with config.json beside it;
 *        a JSON object             with "family": a model description (tp_model_from_file), any file name; with
 *                                  "weight_map" (a *.safetensors.index.json) or a config.json's keys: the
 *                                  checkpoint of its folder;
 *   3. a Hugging Face hub id (ORG/NAME, or NAME) in the local hub cache (io/hf_hub.h), never downloaded.
 * A name that is none of these: a preset-like name (no '/') is an unknown model (the presets listed); otherwise
 * the path or id is not found. */
#ifndef TP_CLI_MODEL_ARG_H
#define TP_CLI_MODEL_ARG_H

#include "models/model.h"
#include "tprof.h"

typedef enum {
    TP_MARG_PRESET = 0,
    TP_MARG_CHECKPOINT,  /* path: a folder, a .safetensors file or an index; config.json beside it */
    TP_MARG_ONNX,        /* path: the .onnx file (what --onnx takes) */
    TP_MARG_ENGINE,      /* path: the engine file (what --engine takes) */
    TP_MARG_DESCRIPTION  /* path: a JSON model description */
} tp_marg_kind;

typedef struct {
    tp_marg_kind kind;
    char path[4096];  /* the preset's name, or the file or folder (a hub id: its snapshot folder) */
    char hub_id[128]; /* the hub id it was resolved from, else "" */
} tp_model_arg;

/* Classifies arg into *out. Errors, one line naming arg: TP_ERR_ARG (an unknown name without '/': the presets
 * listed), TP_ERR_IO (a path or hub id not found: the cache folders looked in and how to download; a path that is
 * not a regular file or folder), TP_ERR_FORMAT (a file of no kind above). */
tp_status tp_cli_model_arg(const char *arg, tp_model_arg *out, tp_error *err);

/* The model a names, configuration only (for tprof lint): the preset; a checkpoint's config.json
 * (tp_model_from_checkpoint); a description's file; an engine file's stored model; an ONNX file's import.
 * Errors: the readers'. */
tp_status tp_cli_model_load(const tp_model_arg *a, tp_model *m, tp_error *err);

/* The kind in words, for messages ("a checkpoint folder or file", "an ONNX file", ...). */
const char *tp_cli_model_arg_kind(tp_marg_kind k);

#endif
