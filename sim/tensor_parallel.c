/*
 * tensor_parallel.c: see tensor_parallel.h.
 *
 * The interconnect table. NCCL's all_reduce_perf (nvidia/nccl-tests) reports a "bus
 * bandwidth" busbw = algbw x 2 (n-1)/n, the rate each link moves for a ring all-reduce of n
 * GPUs, so an all-reduce of S bytes takes S x 2 (n-1)/n / busbw once large, and a floor of a
 * few microseconds when small (nccl-tests doc/PERFORMANCE.md). Published figures, rounded:
 *   - H100 SXM and H200 (NVLink 4, 450 GB/s per direction per GPU through NVSwitch):
 *     all_reduce_perf on 8 GPUs reaches a busbw of ~360 GB/s with the ring algorithm and
 *     460-480 GB/s with NVLink SHARP (NVLS, NCCL >= 2.17); we take 360 GB/s, the ring, as vLLM's
 *     TP groups of 2-4 GPUs cannot use NVLS. H200 has the H100's NVLink.
 *   - A100 SXM (NVLink 3, 300 GB/s per direction): busbw 230-240 GB/s on 8 GPUs; we take 230.
 *   - Latency: a small all-reduce within one NVSwitch node takes ~8-10 us with NCCL's LL
 *     protocol; vLLM's custom all-reduce (one-shot, for messages under a few MB) gets it near
 *     5 us on H100. Decode steps move small messages (batch x hidden x 2 bytes), so this term
 *     dominates them: we take 8 us on Hopper and 10 us on A100.
 * None of this was measured here (no multi-GPU machine); a measured table replaces this one.
 */
#include "sim/tensor_parallel.h"

#include <string.h>

static const tp_interconnect interconnects[] = {
    {"h200", "NVLink 4 + NVSwitch (450 GB/s per direction)", 360e9, 8000,
     "nccl-tests all_reduce_perf busbw ~360 GB/s (ring, 8 GPUs); small all-reduce ~8 us (assumed, not measured)"},
    {"h100-sxm", "NVLink 4 + NVSwitch (450 GB/s per direction)", 360e9, 8000,
     "nccl-tests all_reduce_perf busbw ~360 GB/s (ring, 8 GPUs); small all-reduce ~8 us (assumed, not measured)"},
    {"a100-80gb", "NVLink 3 + NVSwitch (300 GB/s per direction)", 230e9, 10000,
     "nccl-tests all_reduce_perf busbw ~230 GB/s (8 GPUs); small all-reduce ~10 us (assumed, not measured)"},
};

const tp_interconnect *tp_interconnect_for(const gpu_spec *gpu)
{
    for (size_t i = 0; i < ARRAY_LEN(interconnects); i++)
        if (!strcmp(interconnects[i].gpu, gpu->name)) return &interconnects[i];
    return NULL;
}

void tp_interconnect_list(FILE *f)
{
    for (size_t i = 0; i < ARRAY_LEN(interconnects); i++)
        fprintf(f, "  %-10s %s: all-reduce bus bandwidth %.0f GB/s, latency %.0f us\n", interconnects[i].gpu,
                interconnects[i].link, interconnects[i].allreduce_busbw_bytes_s / 1e9,
                interconnects[i].allreduce_latency_ns / 1e3);
}

int tp_shard_model(const model_config *full, int32_t tp, model_config *shard, terr *e)
{
    if (tp != 1 && tp != 2 && tp != 4 && tp != 8)
        return terr_set(e, "--tensor-parallel-size: %d is not 1, 2, 4 or 8", tp);
    if (full->num_heads % tp)
        return terr_set(e, "--tensor-parallel-size: %d does not divide %s's %d attention heads", tp, full->name,
                        full->num_heads);
    *shard = *full;
    if (tp == 1) return 0;
    if (full->intermediate_size % tp)
        return terr_set(e, "--tensor-parallel-size: %d does not divide %s's MLP width %d", tp, full->name,
                        full->intermediate_size);
    snprintf(shard->name, sizeof shard->name, "%.100s/tp%d", full->name, tp);
    shard->num_heads = full->num_heads / tp;
    /* fewer KV heads than GPUs: each GPU keeps a copy of one (vLLM replicates them) */
    shard->num_kv_heads = full->num_kv_heads >= tp ? full->num_kv_heads / tp : 1;
    shard->intermediate_size = full->intermediate_size / tp;
    shard->vocab_size = (int32_t)div_ceil_i64(full->vocab_size, tp); /* vocab-parallel embedding and head */
    return 0;
}

int64_t tp_allreduce_ns(const tp_comm *c, double bytes)
{
    if (c->tp <= 1 || bytes <= 0) return 0;
    double ring = 2.0 * (c->tp - 1) / c->tp * bytes / c->link->allreduce_busbw_bytes_s;
    return c->link->allreduce_latency_ns + (int64_t)(ring * 1e9 + 0.5);
}

int64_t tp_step_comm_ns(const tp_comm *c, const step_shape *s)
{
    if (c->tp <= 1 || s->num_items == 0) return 0;
    double tokens = (double)(s->prefill_tokens + s->decode_tokens + s->padding_tokens);
    return 2LL * c->num_layers * tp_allreduce_ns(c, tokens * c->hidden_size * WEIGHT_DTYPE_BYTES);
}
