/* pi0.h: the pi0 vision-language-action pipeline family (issue 21): Physical Intelligence's pi0 as openpi runs it
 * at inference (docs/pipelines.md gives the math with openpi's line references): each camera's image through a
 * SigLIP-shaped ViT (no pooling, the projector as a per-token head), the prefix (image tokens, then language
 * tokens scaled by sqrt(width)) through a Gemma whose attention is bidirectional over the valid prefix, and N Euler
 * steps of the action expert (a smaller Gemma over [the prefix's K/V ; its state and action tokens]) from the
 * noise at t = 1 down to the actions at t = 0. One graph, every op named by its stage (`vision.`, `prefix.`,
 * `expert.`); the loop unrolled (the expert's ops once per step, `expert.stepN.`, reading one set of weights).
 *
 * The input is packed per sample (graph.h tp_graph.inputs): the images (cameras x 3 x S x S, normalized to
 * [-1, 1] as openpi feeds SigLIP), the language token ids, their valid count (the rest padding), the state, the
 * initial noise (horizon x action dim). The output: the actions (horizon x action dim), fp32.
 *
 * Parameter names: `vision.*` timm's ViT (`vision.head` is openpi's multi_modal_projector), `prefix.model.*` and
 * `expert.model.*` HF Gemma's, `expert.state_proj`, `expert.action_in_proj`, `expert.action_time_mlp_in`,
 * `expert.action_time_mlp_out`, `expert.action_out_proj` (bench/pi0_reference.py writes the same). */
#ifndef TP_MODELS_PI0_H
#define TP_MODELS_PI0_H

#include "models/model.h"

typedef struct {
    char name[64];
    int cams, img, patch, v_width, v_depth, v_heads, v_mlp;       /* the vision tower, per camera */
    int width, depth, heads, kv_heads, head_dim, mlp, vocab, lang; /* the prefix's Gemma; language tokens */
    int e_width, e_mlp;                                            /* the expert (depth, heads: the prefix's) */
    int horizon, action_dim, state_dim, steps;                     /* actions, state, Euler steps */
} tp_pi0_config;

extern const tp_family tp_pi0_family;

#endif
