/*
 * gpu.c: the GPUs the cost model knows, by name.
 *
 * The rates are achievable ones, not datasheet peaks: the roofline divides by them directly.
 * The H200 row holds what was measured on this project's H200:
 *   - device-to-device cudaMemcpy: 4.28 TB/s counting bytes read + written  (mem_bw_bytes_s)
 *   - cuBLAS bf16 GEMM, large square shapes: ~780 TFLOP/s                   (bf16_flops)
 *   - a batch-1 (M = 1) 4096 x 11008 bf16 GEMM read its weights at ~3.46 TB/s
 *                                                                           (weight_stream_bytes_s)
 *   - memory.total as nvidia-smi reports it: 143771 MiB                     (mem_bytes)
 * The H100 SXM and A100 rows were not measured: they are datasheet peaks scaled by the ratios
 * achieved/peak seen on the H200 (copy 4.28/4.8, weight streaming 3.46/4.8, GEMM 780/989.4).
 *
 * Host link (swap): pinned-memory copies over PCIe, one direction at a time. Gen5 x16 is 64 GB/s
 * raw per direction; the engine's batched swap copies measured 43.7-50.2 GB/s on the H200
 * (`bench_engine_gpu swap`: 45.9 GB/s at 128 blocks of 8.4 MB, out and in alike), ~55 GB/s is
 * reported for H100 hosts; Gen4 x16 is 32 GB/s raw and ~25 GB/s achieved on A100 hosts. Swap-in and swap-out of one step are costed back to
 * back, not overlapped (full duplex would allow it; vLLM does not).
 */
#include <string.h>

#include "core/util.h"
#include "sim/gpu.h"

#define MIB (1024LL * 1024LL)

/* Achieved/peak ratios measured on the H200 (peaks: 4.8 TB/s HBM3e, 989.4 TFLOP/s dense bf16). */
#define H200_PEAK_BW 4.8e12
#define H200_PEAK_FLOPS 989.4e12
#define COPY_RATIO (4.28e12 / H200_PEAK_BW)
#define WEIGHT_STREAM_RATIO (3.46e12 / H200_PEAK_BW)
#define GEMM_RATIO (780e12 / H200_PEAK_FLOPS)

/* The roofline model's constants, fitted on the H200 (docs/costmodel.md, "Calibration"; the
 * probe is sim/calib/roofline_probe.cu). The other GPUs were not measured: they take the
 * H200's until a probe run on them gives their own. */
#define H200_ROOFLINE                                                                          \
    {                                                                                          \
        .gemm_eff_max = 1.00,           /* fitted to cuBLAS on Llama-2-7B's shapes: within */  \
        .gemm_half_tokens = 64.0,       /*   8% for 256 <= T <= 4096 */                         \
        .attn_prefill_flops_eff = 0.50, /* FlashAttention-2 class: ~390 TFLOP/s */              \
        .attn_mem_eff = 0.80,           /* paged/flash decode kernels: ~3.4 TB/s */             \
        .elementwise_mem_eff = 0.90,    /* simple streaming kernels: close to a copy */         \
        .kernel_min_ns = 2000,          /* in a graph: empty 0.7, SiLU 1.2, 1-row norm 4.6 us */ \
        .launch_ns = 5400,              /* back-to-back launches without a graph */             \
        .step_overhead_ns = 300000,     /* scheduling, input prep, sync: assumed */             \
        .item_overhead_ns = 1000,       /* block-table rows, positions, slot mapping */         \
    }

static const gpu_spec gpus[] = {
    {
        .name = "h200",
        .description = "NVIDIA H200 SXM 141 GB (HBM3e 4.8 TB/s, 989 TFLOP/s bf16 dense)",
        .mem_bytes = 143771 * MIB,
        .num_sms = 132,
        .mem_bw_bytes_s = 4.28e12,
        .bf16_flops = 780e12,
        .host_link_bytes_s = 46e9,
        .weight_stream_bytes_s = 3.46e12,
        .peak_mem_bw_bytes_s = H200_PEAK_BW,
        .peak_bf16_flops = H200_PEAK_FLOPS,
        .roofline = H200_ROOFLINE,
        .source = "measured on this project's H200: D2D copy 4.28 TB/s (read+write), cuBLAS "
                  "bf16 GEMM ~780 TFLOP/s, batch-1 4096x11008 GEMM weights at 3.46 TB/s, "
                  "nvidia-smi 143771 MiB; swap copies over PCIe Gen5 x16 46 GB/s",
    },
    {
        .name = "h100-sxm",
        .description = "NVIDIA H100 SXM 80 GB (HBM3 3.35 TB/s, 989 TFLOP/s bf16 dense)",
        .mem_bytes = 81559 * MIB,
        .num_sms = 132,
        .mem_bw_bytes_s = 3.35e12 * COPY_RATIO,
        .bf16_flops = 989.4e12 * GEMM_RATIO,
        .host_link_bytes_s = 55e9,
        .weight_stream_bytes_s = 3.35e12 * WEIGHT_STREAM_RATIO,
        .peak_mem_bw_bytes_s = 3.35e12,
        .peak_bf16_flops = 989.4e12,
        .roofline = H200_ROOFLINE,
        .source = "datasheet (3.35 TB/s, 989.4 TFLOP/s) scaled by the H200's measured "
                  "achieved/peak ratios (copy 0.892, weight streaming 0.721, GEMM 0.788); "
                  "81559 MiB as nvidia-smi reports; PCIe Gen5 x16 ~55 GB/s (assumed)",
    },
    {
        .name = "a100-80gb",
        .description = "NVIDIA A100 SXM 80 GB (HBM2e 2.04 TB/s, 312 TFLOP/s bf16 dense)",
        .mem_bytes = 81920 * MIB,
        .num_sms = 108,
        .mem_bw_bytes_s = 2.039e12 * COPY_RATIO,
        .bf16_flops = 312e12 * GEMM_RATIO,
        .host_link_bytes_s = 25e9,
        .weight_stream_bytes_s = 2.039e12 * WEIGHT_STREAM_RATIO,
        .peak_mem_bw_bytes_s = 2.039e12,
        .peak_bf16_flops = 312e12,
        .roofline = H200_ROOFLINE,
        .source = "datasheet (2.039 TB/s, 312 TFLOP/s) scaled by the H200's measured "
                  "achieved/peak ratios (copy 0.892, weight streaming 0.721, GEMM 0.788); "
                  "81920 MiB as nvidia-smi reports; PCIe Gen4 x16 ~25 GB/s (assumed)",
    },
};

bool gpu_names_device(const gpu_spec *g, const char *device)
{
    const char *word = strchr(g->description, ' ');
    char chip[32];
    size_t n = word ? strcspn(word + 1, " ") : 0;
    if (n == 0 || n >= sizeof chip) return false;
    memcpy(chip, word + 1, n);
    chip[n] = 0;
    return strstr(device, chip) != NULL;
}

const gpu_spec *gpu_for_device(const char *device)
{
    for (size_t i = 0; i < ARRAY_LEN(gpus); i++)
        if (gpu_names_device(&gpus[i], device)) return &gpus[i];
    return NULL;
}

const gpu_spec *gpu_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(gpus); i++)
        if (strcmp(gpus[i].name, name) == 0) return &gpus[i];
    return NULL;
}

void gpu_list(FILE *f)
{
    for (size_t i = 0; i < ARRAY_LEN(gpus); i++) {
        const gpu_spec *g = &gpus[i];
        fprintf(f, "  %-10s %s\n", g->name, g->description);
        fprintf(f, "  %-10s   %lld MiB, copy %.2f TB/s, weight streaming %.2f TB/s, "
                   "bf16 GEMM %.0f TFLOP/s, host link %.0f GB/s\n",
                "", (long long)(g->mem_bytes / MIB), g->mem_bw_bytes_s / 1e12,
                g->weight_stream_bytes_s / 1e12, g->bf16_flops / 1e12,
                g->host_link_bytes_s / 1e9);
    }
}
