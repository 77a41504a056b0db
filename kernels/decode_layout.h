/*
 * decode_layout.h: how the engine lays a decode step out on the GPU, in plain C, for the CUDA
 * backend that launches it and for the simulator's profile model that prices it: the CUDA
 * graph's rows, the context bucket its attention grid covers, and the partition each context
 * is split into.
 */
#ifndef TANDEM_DECODE_LAYOUT_H
#define TANDEM_DECODE_LAYOUT_H

#include <stdint.h>

/* Tokens per partition of the decode kernel, at most: a context of L tokens is split over
 * ceil(L / partition) thread blocks per head group (partition a power of two in [32, 256],
 * chosen by the caller, k_decode_partition), combined by the last block to finish. */
#define K_DECODE_PARTITION 256

/* Query heads a decode block serves: the whole group that shares a KV head when it is 1, 2, 4
 * or 8 heads, else one (kernels/attention.cu dispatches on it). */
static inline int32_t k_decode_heads_per_block(int32_t nh, int32_t nkv)
{
    int32_t g = nh / nkv;
    return g % 8 == 0 ? 8 : g % 4 == 0 ? 4 : g % 2 == 0 ? 2 : 1;
}

/* The decode partition for nd sequences whose longest context is len tokens, on a GPU of
 * num_sms SMs, where the partials hold max_partials (sequence, partition) pairs: halve from
 * K_DECODE_PARTITION while the grid has fewer than three blocks an SM, down to 64 tokens.
 * Shorter partitions fill the GPU with more blocks, but each block pays a fixed chain of
 * latencies (its loads, the softmax between barriers, the last block's combine) for fewer
 * bytes: on an H100 (kernels/dev/decode_partitions) 32-token partitions ran 1.1-3.4x slower
 * than the best size at 1-8 sequences, and aiming at 4096 blocks cost 1.25x the best on
 * (geometric) average over MHA and GQA 4:1 at 1-128 sequences and contexts 513-8193; this
 * rule, 1.03x. */
static inline int32_t k_decode_partition(int32_t nh, int32_t nkv, int32_t nd, int32_t len, int32_t num_sms,
                                         int64_t max_partials)
{
    int64_t groups = nh / k_decode_heads_per_block(nh, nkv);
    int32_t P = K_DECODE_PARTITION;
    while (P > 64 && groups * nd * ((len + P - 1) / P) < 3 * (int64_t)num_sms &&
           (int64_t)nd * ((len + P / 2 - 1) / (P / 2)) <= max_partials)
        P /= 2;
    return P;
}

/* The context bucket of a decode step whose longest context is len: the power of two, at least
 * K_DECODE_PARTITION, that its attention grid (and its CUDA graph) covers. */
static inline int64_t k_decode_bucket(int64_t len)
{
    int64_t bucket = K_DECODE_PARTITION;
    while (bucket < len) bucket *= 2;
    return bucket;
}

/* The rows of the CUDA graph a pure-decode step of b sequences replays, with graphs up to cap
 * rows: vLLM's capture sizes 1, 2, 4, then every multiple of 8; the extra rows are padding. */
static inline int32_t k_decode_graph_rows(int32_t b, int32_t cap)
{
    int64_t g = b <= 2 ? b : b <= 4 ? 4 : ((int64_t)b + 7) / 8 * 8;
    return (int32_t)(g < cap ? g : cap);
}

#endif
