/*
 * costmodel.h: how long a step takes on a GPU, predicted from the batch's shape.
 *
 * Cost models are pluggable (a table of function pointers with opaque state, chosen by name
 * from a registry, `--cost-model NAME`); the default is `roofline`: per step, for each part of
 * the forward pass (QKV / O / MLP GEMMs over the batch's tokens, attention over each request's
 * own context, the LM head over the tokens that sample), the larger of its compute time and its
 * memory time, with efficiency factors, plus a fixed per-step overhead. docs/costmodel.md has
 * the formulas and the source of every constant.
 *
 * GPUs are named (`--gpu h200|h100-sxm|a100-80gb`); their memory size, measured (or datasheet)
 * bandwidths and peak rates live in a static table in gpu.c.
 *
 * Everything here is deterministic: the same batch on the same model and GPU always costs the
 * same integer number of nanoseconds.
 */
#ifndef TANDEM_COSTMODEL_H
#define TANDEM_COSTMODEL_H

#include <stdint.h>
#include <stdio.h>

#include "core/batch.h"
#include "core/executor.h"
#include "core/model_config.h"
#include "core/util.h"

typedef struct gpu_spec {
    const char *name;
    const char *description;    /* e.g. "NVIDIA H200 SXM 141 GB" */
    int64_t mem_bytes;          /* device memory as the driver reports it */
    double mem_bw_bytes_s;      /* achievable device-memory bandwidth (read + write) */
    double bf16_flops;          /* achievable dense bf16 tensor-core rate */
    double host_link_bytes_s;   /* host <-> device copy bandwidth (swap) */
    const char *source;         /* where the numbers come from */
    /* ---- added by sim/ (see docs/costmodel.md) ---- */
    double weight_stream_bytes_s; /* bandwidth at which a small-batch GEMM reads its weights */
    double peak_mem_bw_bytes_s;   /* datasheet HBM bandwidth */
    double peak_bf16_flops;       /* datasheet dense bf16 rate */
} gpu_spec;

const gpu_spec *gpu_find(const char *name); /* NULL if unknown */
void gpu_list(FILE *f);                     /* valid names with descriptions */

/* Memory accounting for the KV cache, as vLLM does it at start-up. */
typedef struct kv_capacity {
    int64_t usable_bytes;      /* mem x gpu_memory_utilization */
    int64_t weight_bytes;
    int64_t activation_bytes;  /* reserve for activations, logits and non-torch memory */
    int64_t bytes_per_block;   /* 2 x layers x block_size x kv_heads x head_dim x dtype bytes */
    int64_t num_blocks;        /* floor((usable - weights - activations) / bytes_per_block) */
} kv_capacity;

/* Bytes per element of the KV cache (bf16/fp16) and of the weights (bf16). */
#define KV_DTYPE_BYTES 2
#define WEIGHT_DTYPE_BYTES 2

/* Fills cap for (model, gpu, budgets). Fails with a message that says what to change when the
 * KV cache cannot hold one max_model_len request (or has no room at all), or when a budget is
 * out of range (the message names its flag). */
int kv_capacity_compute(kv_capacity *cap, const model_config *mc, const gpu_spec *gpu,
                        double gpu_memory_utilization, int32_t block_size,
                        int32_t max_num_batched_tokens, int32_t max_num_seqs,
                        int32_t max_model_len, terr *e);

/* What a cost model needs beyond the model and the GPU: the KV cache's layout, which sets the
 * size of a swapped block. */
typedef struct cost_model_opts {
    int32_t block_size;     /* tokens per KV block */
    int32_t kv_dtype_bytes; /* bytes per KV element */
} cost_model_opts;

/* vLLM's defaults: 16-token blocks, 2-byte KV. */
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
    /* Predicted duration of b in ns, swaps included. Must be > 0 for a non-empty batch; an
     * empty batch with no swaps costs 0. */
    int64_t (*step_ns)(void *self, const batch *b);
    void (*destroy)(void *self);
    /* Like step_ns, and fills bd with the parts that make up the time. May be NULL. */
    int64_t (*explain)(void *self, const batch *b, cost_breakdown *bd);
} cost_model_ops;

const cost_model_ops *cost_model_find(const char *name); /* NULL if unknown */
void cost_model_list(FILE *f);                          /* valid names with summaries */

/* An executor (core/executor.h) that asks a cost model for each step's duration; sampled is
 * NULL (the simulator produces no tokens). opts NULL means cost_model_opts_default(). */
int sim_executor_create(executor *ex, const cost_model_ops *cm, const model_config *mc,
                        const gpu_spec *gpu, const cost_model_opts *opts, terr *e);

#endif
