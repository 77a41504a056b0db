/*
 * tensor_parallel.h: one model replica split over --tensor-parallel-size GPUs (Megatron-LM
 * style, as vLLM does it).
 *
 * Each GPU holds 1/TP of every linear layer (attention heads, KV heads, MLP columns/rows, the
 * vocabulary of the embedding and LM head) and 1/TP of the KV cache. A step runs the same
 * forward pass on each GPU over its shard, then two all-reduces per layer (after the attention
 * output projection and after the MLP down projection) sum the partial hidden states.
 *
 * So the simulator prices a TP step as the shard's step on one GPU (any cost model, given the
 * shard's shape) plus the all-reduces' time on the GPU row's interconnect; and it sizes the KV
 * cache from one GPU's memory left after the shard's weights (every GPU then holds the same
 * number of blocks, each 1/TP of a block's bytes, as vLLM's does).
 *
 * The interconnect constants (tensor_parallel.c) are published NCCL figures, not measurements:
 * no multi-GPU machine was available to measure them here. They live in one table so that a
 * measured profile can replace them.
 */
#ifndef TANDEM_TENSOR_PARALLEL_H
#define TANDEM_TENSOR_PARALLEL_H

#include <stdint.h>
#include <stdio.h>

#include "core/batch.h"
#include "core/model_config.h"
#include "core/util.h"
#include "sim/gpu.h"

/* A GPU row's intra-node link as an all-reduce sees it. */
typedef struct tp_interconnect {
    const char *gpu;            /* gpu_spec.name */
    const char *link;           /* e.g. "NVLink 4 + NVSwitch" */
    double allreduce_busbw_bytes_s; /* nccl-tests bus bandwidth of a large all-reduce */
    int64_t allreduce_latency_ns;   /* time of a small (latency-bound) all-reduce */
    const char *source;
} tp_interconnect;

/* The row for gpu, or NULL if the table has none. */
const tp_interconnect *tp_interconnect_for(const gpu_spec *gpu);
void tp_interconnect_list(FILE *f);

/* What a step of a TP replica adds to its shard's step. */
typedef struct tp_comm {
    int32_t tp;                 /* GPUs per replica; 1: no communication */
    int32_t num_layers;
    int32_t hidden_size;
    const tp_interconnect *link;
} tp_comm;

/* The model as one of tp GPUs holds it: heads, KV heads (at least 1: replicated below that),
 * MLP width and vocabulary divided by tp; hidden size and head_dim unchanged. Fails naming
 * --tensor-parallel-size when tp is not 1, 2, 4 or 8 or does not divide the attention heads. */
int tp_shard_model(const model_config *full, int32_t tp, model_config *shard, terr *e);

/* One all-reduce of `bytes` over c->tp GPUs (ring: 2 (tp-1)/tp x bytes over the bus
 * bandwidth, plus the latency), in ns; 0 when tp is 1. */
int64_t tp_allreduce_ns(const tp_comm *c, double bytes);
/* A step's communication: 2 all-reduces per layer of (tokens x hidden) bf16 values. */
int64_t tp_step_comm_ns(const tp_comm *c, const step_shape *s);

#endif
