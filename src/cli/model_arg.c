/* model_arg.c: `--model X` as users have their models (model_arg.h). */
#include "cli/model_arg.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "io/hf_hub.h"
#include "io/onnx.h"
#include "models/onnx_import.h"
#include "planner/engine_file.h"

const char *tp_cli_model_arg_kind(tp_marg_kind k) {
    static const char *const K[] = {"a preset", "a checkpoint", "an ONNX file", "an engine file",
                                    "a model description"};
    return (unsigned)k < sizeof K / sizeof K[0] ? K[k] : "?";
}

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcasecmp(s + n - t, tail) == 0;
}

/* A JSON file's kind by its keys: a description ("family"), a safetensors index ("weight_map"), a checkpoint's
 * config.json (transformers' or timm's keys). */
static tp_status json_kind(const char *path, tp_model_arg *out, tp_error *err) {
    json_t *j = NULL;
    tp_status st = tp_json_read_file(path, "the model file", &j, err);
    if (st) return st;
    const int obj = json_is_object(j);
    const int family = obj && json_object_get(j, "family"), index = obj && json_object_get(j, "weight_map");
    const int config = obj && (json_object_get(j, "architectures") || json_object_get(j, "architecture") ||
                               json_object_get(j, "model_type"));
    json_decref(j);
    if (family) {
        out->kind = TP_MARG_DESCRIPTION;
    } else if (index && ends_with(path, ".safetensors.index.json")) { /* the loader knows an index by that name */
        out->kind = TP_MARG_CHECKPOINT;
    } else if (config || index) { /* a config.json, or an index by another name: the checkpoint of its folder */
        out->kind = TP_MARG_CHECKPOINT;
        char *slash = strrchr(out->path, '/');
        if (slash) *slash = 0;
        else snprintf(out->path, sizeof out->path, ".");
    } else {
        return tp_fail_path(err, TP_ERR_FORMAT, path, "a JSON file that is neither a model description (no "
                            "\"family\" key) nor a checkpoint's config.json or safetensors index");
    }
    return TP_OK;
}

/* A regular file's kind by its first bytes (read without blocking: the caller saw a regular file) and name. */
static tp_status file_kind(const char *path, const struct stat *sb, tp_model_arg *out, tp_error *err) {
    unsigned char head[16] = {0};
    ssize_t got = -1;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd >= 0) {
        got = read(fd, head, sizeof head);
        close(fd);
    }
    if (got < 0) return tp_fail_path(err, TP_ERR_IO, path, "cannot read: %s", strerror(errno));
    if (got >= 8 && memcmp(head, TP_ENGINE_MAGIC, 8) == 0) return out->kind = TP_MARG_ENGINE, TP_OK;
    if (ends_with(path, ".tpe")) return out->kind = TP_MARG_ENGINE, TP_OK; /* its reader names what is wrong */
    if (ends_with(path, ".onnx")) return out->kind = TP_MARG_ONNX, TP_OK;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0 && got >= 9; i--) hlen = hlen << 8 | head[i];
    if (ends_with(path, ".safetensors") || (got >= 9 && head[8] == '{' && hlen >= 2 && hlen <= (uint64_t)sb->st_size - 8))
        return out->kind = TP_MARG_CHECKPOINT, TP_OK;
    ssize_t i = 0;
    if (got >= 3 && head[0] == 0xEF && head[1] == 0xBB && head[2] == 0xBF) i = 3; /* a UTF-8 byte order mark */
    while (i < got && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r')) i++;
    if (i < got && head[i] == '{') return json_kind(path, out, err);
    return tp_fail_path(err, TP_ERR_FORMAT, path, "not a model tprof reads: a checkpoint folder, a .safetensors "
                        "file, an .onnx file, an engine file or a JSON model description");
}

/* A checkpoint folder; timm's is named by its model.safetensors, beside which the ViT family looks for config.json
 * (transformers' folders load as folders, sharded ones too) */
static tp_status checkpoint_folder(tp_model_arg *out) {
    out->kind = TP_MARG_CHECKPOINT;
    char file[4200];
    struct stat sb;
    snprintf(file, sizeof file, "%s/model.safetensors", out->path);
    if (tp_model_checkpoint_kind(out->path) == TP_CKPT_TIMM && stat(file, &sb) == 0 && strlen(file) < sizeof out->path)
        snprintf(out->path, sizeof out->path, "%s", file);
    return TP_OK;
}

tp_status tp_cli_model_arg(const char *arg, tp_model_arg *out, tp_error *err) {
    memset(out, 0, sizeof *out);
    tp_model m;
    tp_error pe = {0};
    if (snprintf(out->path, sizeof out->path, "%s", arg) >= (int)sizeof out->path)
        return tp_fail(err, TP_ERR_ARG, "'%.100s...': path too long", arg);
    if (tp_model_preset(arg, &m, &pe) == TP_OK) return out->kind = TP_MARG_PRESET, TP_OK;
    struct stat sb;
    if (stat(arg, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return checkpoint_folder(out);
        if (!S_ISREG(sb.st_mode))
            return tp_fail_path(err, TP_ERR_IO, arg, "not a regular file or folder (a model is read twice: once to "
                                "tell its kind, once to load it)");
        return file_kind(arg, &sb, out, err);
    }
    const int file_name = ends_with(arg, ".json") || ends_with(arg, ".onnx") || ends_with(arg, ".safetensors") ||
                          ends_with(arg, ".tpe");
    if (!strchr(arg, '/') && !file_name) {
        /* a bare name: a hub id of one part where the cache has it, else a preset misspelt */
        if (tp_hf_hub_is_id(arg) && tp_hf_hub_resolve(arg, out->path, sizeof out->path, NULL) == TP_OK) {
            snprintf(out->hub_id, sizeof out->hub_id, "%s", arg);
            return checkpoint_folder(out);
        }
        const char *known = strstr(pe.msg, "; known:");
        return tp_fail(err, TP_ERR_ARG, "%.*s (nor a file, folder or Hugging Face id in the local cache)%s",
                       known ? (int)(known - pe.msg) : (int)strlen(pe.msg), pe.msg, known ? known : "");
    }
    if (file_name || !tp_hf_hub_is_id(arg))
        return tp_fail_path(err, TP_ERR_IO, arg, "no such file or folder");
    tp_status st = tp_hf_hub_resolve(arg, out->path, sizeof out->path, err);
    if (st) return st;
    snprintf(out->hub_id, sizeof out->hub_id, "%s", arg);
    return checkpoint_folder(out);
}

tp_status tp_cli_model_load(const tp_model_arg *a, tp_model *m, tp_error *err) {
    char note[512];
    switch (a->kind) {
    case TP_MARG_PRESET: return tp_model_preset(a->path, m, err);
    case TP_MARG_CHECKPOINT: return tp_model_from_checkpoint(a->path, m, note, sizeof note, err);
    case TP_MARG_DESCRIPTION: return tp_model_from_file(a->path, m, err);
    case TP_MARG_ENGINE: {
        tp_engine_file *ef = calloc(1, sizeof *ef);
        if (!ef) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        tp_status st = tp_engine_file_read(a->path, ef, err);
        if (!st) *m = ef->model;
        tp_engine_file_free(ef);
        free(ef);
        return st;
    }
    case TP_MARG_ONNX: {
        tp_onnx_import_info *info = calloc(1, sizeof *info);
        tp_params params = {0};
        if (!info) return tp_fail(err, TP_ERR_OOM, "out of host memory");
        tp_status st = tp_onnx_import(a->path, m, &params, info, err);
        tp_params_free(&params);
        free(info);
        return st;
    }
    }
    return tp_fail(err, TP_ERR_ARG, "--model %s: unknown kind", a->path);
}
