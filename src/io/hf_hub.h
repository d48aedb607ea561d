/* hf_hub.h: Hugging Face hub ids (meta-llama/Llama-3.2-1B) resolved in the local hub cache, never over the
 * network: tprof runs where the weights already are, as vLLM does with HF_HUB_OFFLINE=1.
 *
 * The cache is huggingface_hub's (docs: huggingface.co/docs/hub/local-cache, "Understand caching"):
 *   <CACHE>/models--<ORG>--<NAME>/refs/main            the commit hash that "main" points at (no newline)
 *   <CACHE>/models--<ORG>--<NAME>/snapshots/<hash>/     config.json, model.safetensors, ... (usually symlinks
 *                                                       into ../../blobs/<sha256>)
 * <CACHE> is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub; tprof looks in each of those that is set, in that order, and takes the first holding
 * the model (a cache moved with HF_HUB_CACHE still finds a model in the default one). */
#ifndef TP_HF_HUB_H
#define TP_HF_HUB_H

#include <stddef.h>

#include "tprof.h"

/* 1 when s has the form of a hub model id: NAME or ORG/NAME, each part of letters, digits, '-', '_' and '.', not
 * starting with '-' or '.', without "--" or "..", at most 96 characters in all (the hub's own rules); else 0. */
int tp_hf_hub_is_id(const char *s);

/* The snapshot folder of id (tp_hf_hub_is_id) that refs/main names, into dir (n bytes).
 * Errors, one line naming the id:
 *   TP_ERR_ARG  not a hub id;
 *   TP_ERR_IO   not in any cache: the folders looked in, and how to download it (`hf download ID`, or
 *               `huggingface-cli download ID` with older huggingface_hub); or in a cache but incomplete (no
 *               refs/main, a malformed hash, its snapshot folder or the snapshot's config.json missing), naming
 *               the path. */
tp_status tp_hf_hub_resolve(const char *id, char *dir, size_t n, tp_error *err);

/* The hub id of a path inside a snapshot folder (".../models--ORG--NAME/snapshots/HASH" or a file in it) into id
 * (n bytes): 1 when path has that layout (and id fits), else 0 (id ""). Names a model by its id, not its hash. */
int tp_hf_hub_id_of(const char *path, char *id, size_t n);

#endif
