/*
 * costmodel.h: how long a step takes on a GPU, predicted from the batch's shape.
 *
 * Cost models are pluggable (a table of function pointers with opaque state, chosen by name
 * from a registry, `--cost-model NAME`); the default is `roofline`: per step, for each part of
 * the forward pass (QKV / O / MLP GEMMs over the batch's tokens, attention over each request's
 * own context, the LM head over the tokens that sample), the larger of its compute time and its
 * memory time, with efficiency factors, plus a fixed per-step overhead. docs/costmodel.md has
 * the formulas and the source of every constant. The GPU a model is created for (sim/gpu.h)
 * brings its rates and fitted constants.
 *
 * Everything here is deterministic: the same batch on the same model and GPU always costs the
 * same integer number of nanoseconds.
 */
#ifndef TANDEM_COSTMODEL_H
#define TANDEM_COSTMODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/batch.h"
#include "core/kv.h"
#include "core/model_config.h"
#include "core/util.h"
#include "sim/gpu.h"

/* What a cost model needs beyond the model and the GPU: the KV cache's layout, which sets the
 * size of a swapped block. */
typedef struct cost_model_opts {
    int32_t block_size;     /* tokens per KV block */
    int32_t kv_dtype_bytes; /* bytes per KV element */
    const char *arg;        /* what follows NAME: in --cost-model NAME:ARG (profile: its file) */
    bool force;             /* accept a profile measured for another model, GPU or block size */
} cost_model_opts;

/* vLLM's defaults: KV_DEFAULT_BLOCK_SIZE-token blocks, 2-byte KV. */
cost_model_opts cost_model_opts_default(void);

/* One part of a step's predicted time (all layers together), for reports and calibration. */
typedef struct cost_part {
    const char *name;  /* "qkv", "attn_decode", "overhead", ... (static string) */
    double compute_s;  /* FLOPs / achievable rate */
    double memory_s;   /* bytes / achievable bandwidth */
    double time_s;     /* what the part adds to the step */
} cost_part;

#define COST_MAX_PARTS 16
typedef struct cost_breakdown {
    int32_t num_parts;
    cost_part parts[COST_MAX_PARTS];
    double total_s;    /* sum of parts' time_s, before rounding to ns */
} cost_breakdown;

/* Prints one line per part and the total, in microseconds. */
void cost_breakdown_print(const cost_breakdown *bd, FILE *f);

typedef struct cost_model_ops {
    const char *name;
    const char *summary;
    /* Creates the model's state for (model, gpu, opts); opts NULL means
     * cost_model_opts_default(). Returns NULL with e set on error. */
    void *(*create)(const model_config *mc, const gpu_spec *gpu, const cost_model_opts *opts,
                    terr *e);
    /* Predicted duration in ns of a step of this shape (core/batch.h: batch_shape), swaps
     * included. Must be > 0 for a non-empty step; an empty one with no swaps costs 0. A step is
     * predicted from its shape alone, so steps.csv's shape columns re-predict a measured step. */
    int64_t (*step_ns)(void *self, const step_shape *s);
    void (*destroy)(void *self);
    /* Like step_ns, and fills bd with the parts that make up the time. May be NULL. */
    int64_t (*explain)(void *self, const step_shape *s, cost_breakdown *bd);
    /* What summary.json should say about this model's run (e.g. a profile's file and how many
     * steps it extrapolated), a new JSON object. May be NULL. */
    json_t *(*report)(void *self);
    bool takes_arg;         /* named as NAME:ARG */
} cost_model_ops;

/* The model `spec` names: "NAME" or "NAME:ARG" for a model that takes an argument. NULL if
 * unknown. */
const cost_model_ops *cost_model_find(const char *spec);
/* ARG of "NAME:ARG", or NULL. */
const char *cost_model_arg(const char *spec);
void cost_model_list(FILE *f);                          /* valid names with summaries */

#endif
