/*
 * kv_capacity.h: how many KV blocks fit on a GPU, the way vLLM sizes its cache at start-up
 * (kv_capacity.c has the accounting). `tandem sim`, `tandem run` on the GPU and `trace stats`
 * all size the cache with it.
 */
#ifndef TANDEM_KV_CAPACITY_H
#define TANDEM_KV_CAPACITY_H

#include <stdint.h>

#include "core/model_config.h"
#include "core/util.h"
#include "sim/gpu.h"

typedef struct kv_capacity {
    int64_t usable_bytes;      /* mem x gpu_memory_utilization */
    int64_t weight_bytes;
    int64_t activation_bytes;  /* reserve for activations, logits and non-torch memory */
    int64_t bytes_per_block;   /* 2 x layers x block_size x kv_heads x head_dim x dtype bytes */
    int64_t num_blocks;        /* floor((usable - weights - activations) / bytes_per_block) */
} kv_capacity;

/* Fills cap for (model, gpu, budgets). Fails with a message that says what to change when the
 * KV cache cannot hold one max_model_len request (or has no room at all), or when a budget is
 * out of range (the message names its flag). */
int kv_capacity_compute(kv_capacity *cap, const model_config *mc, const gpu_spec *gpu,
                        double gpu_memory_utilization, int32_t block_size,
                        int32_t max_num_batched_tokens, int32_t max_num_seqs,
                        int32_t max_model_len, terr *e);

#endif
