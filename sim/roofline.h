/*
 * roofline.h: the `roofline` cost model's tunable constants, for calibration.
 *
 * The model itself is reached through the registry (cost_model_find("roofline")); this header
 * exists so a calibration tool can build one with other constants (roofline_create_with) and
 * compare its predictions with the real engine's step times. Every constant is described, with
 * its source, in docs/costmodel.md; the defaults are in roofline_params_default().
 */
#ifndef TANDEM_ROOFLINE_H
#define TANDEM_ROOFLINE_H

#include "sim/costmodel.h"

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

roofline_params roofline_params_default(void);

/* Creates a roofline model with the given constants (p NULL: the defaults); destroy it with
 * roofline_cost_model.destroy. Returns NULL with e set on error. */
void *roofline_create_with(const model_config *mc, const gpu_spec *gpu,
                           const cost_model_opts *opts, const roofline_params *p, terr *e);

extern const cost_model_ops roofline_cost_model;

#endif
