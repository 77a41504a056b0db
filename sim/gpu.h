/*
 * gpu.h: the GPUs the simulator knows, by name (`--gpu h200|h100-sxm|a100-80gb`).
 *
 * A row holds everything the simulator needs of one GPU: its memory size, achievable
 * bandwidths and rates (what the roofline divides by), datasheet peaks (for utilisation), and
 * the roofline cost model's fitted constants for that GPU. gpu.c says where every number comes
 * from; docs/costmodel.md has the formulas. Adding a GPU is adding a row.
 */
#ifndef TANDEM_GPU_H
#define TANDEM_GPU_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The roofline model's constants fitted to (or assumed for) one GPU. sim/roofline.c uses them;
 * docs/costmodel.md describes each. */
typedef struct roofline_params {
    /* Linear layers (GEMMs). A GEMM over T tokens computes at
     *   gpu->bf16_flops x gemm_eff_max x T / (T + gemm_half_tokens),
     * i.e. it pays for gemm_half_tokens extra tokens of compute (tile and wave quantisation,
     * pipeline fill), and reads its weights at gpu->weight_stream_bytes_s. */
    double gemm_eff_max;           /* fraction of bf16_flops reached by large-T model GEMMs */
    double gemm_half_tokens;       /* T at which a GEMM reaches half of gemm_eff_max */
    /* Attention (FlashAttention-style kernels, prefill and decode launched separately). */
    double attn_prefill_flops_eff; /* fraction of bf16_flops reached by prefill attention */
    double attn_mem_eff;           /* fraction of mem_bw_bytes_s reached reading the KV cache */
    /* Norms, RoPE, SiLU-and-mul, KV-cache writes, embedding, sampler. */
    double elementwise_mem_eff;    /* fraction of mem_bw_bytes_s they reach */
    /* Fixed costs. */
    int64_t kernel_min_ns;         /* least time one small kernel occupies the GPU */
    int64_t launch_ns;             /* host time to launch one kernel: the forward pass takes at
                                      least kernels x launch_ns (0 when replayed from a graph) */
    int64_t step_overhead_ns;      /* per step: scheduling, input preparation, sync */
    int64_t item_overhead_ns;      /* per scheduled request per step (host-side bookkeeping) */
} roofline_params;

typedef struct gpu_spec {
    const char *name;
    const char *description;      /* e.g. "NVIDIA H200 SXM 141 GB" */
    int64_t mem_bytes;            /* device memory as the driver reports it */
    int32_t num_sms;              /* streaming multiprocessors (the engine's decode partition) */
    double mem_bw_bytes_s;        /* achievable device-memory bandwidth (read + write) */
    double bf16_flops;            /* achievable dense bf16 tensor-core rate */
    double host_link_bytes_s;     /* host <-> device copy bandwidth (swap) */
    double weight_stream_bytes_s; /* bandwidth at which a small-batch GEMM reads its weights */
    double peak_mem_bw_bytes_s;   /* datasheet HBM bandwidth */
    double peak_bf16_flops;       /* datasheet dense bf16 rate */
    roofline_params roofline;     /* the roofline model's constants on this GPU */
    const char *source;           /* where the numbers come from */
} gpu_spec;

const gpu_spec *gpu_find(const char *name); /* NULL if unknown */
/* Whether device, a CUDA device's name as the driver reports it ("NVIDIA H100 80GB HBM3"), is
 * g's chip: it holds the chip's name, the second word of g's description ("H100"). */
bool gpu_names_device(const gpu_spec *g, const char *device);
/* The first row whose chip device is (gpu_names_device), or NULL. */
const gpu_spec *gpu_for_device(const char *device);
void gpu_list(FILE *f);                     /* valid names with descriptions */

#endif
