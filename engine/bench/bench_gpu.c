/*
 * bench_gpu.c: `make bench-gpu`: what the engine's kernels and whole steps achieve on the GPU,
 * against ceilings measured in the same run (device-to-device copy bandwidth, counting bytes
 * read + written; cuBLAS bf16 GEMM rate at 8192^3). Benchmarks are not tests: nothing here
 * fails on a slow number; docs/engine.md records the figures with this command.
 *
 * Method (.library METHOD.md): CUDA events on the stream, warm-up first, the median of repeats;
 * random data (never zeros); inputs rotated over copies that together exceed the 60 MB L2, so
 * bandwidth figures are device memory's. Shapes are Llama-2-7B's unless said otherwise.
 *
 * Output: a markdown table on stdout (kernel, shape, time, achieved rate, ceiling fraction,
 * roofline prediction).
 *
 * usage: bench_engine_gpu [all|kernels|steps|prefill|profile]. `profile` times no ceilings: it
 * traces whole steps kernel by kernel (CUPTI) and reads the GPU's clocks (NVML); see
 * profile_gpu.c for how to read it.
 */
#include <assert.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/bench/profile_gpu.h"
#include "engine/engine.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"

static cudaStream_t stream;
static cublasHandle_t blas;
static double copy_bw, gemm_rate; /* measured ceilings: bytes/s, FLOP/s */

static void *dmalloc_random(size_t bytes, uint32_t id)
{
    void *p;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    CUDA_CHECK(k_synth_bf16(p, (int64_t)(bytes / 2), 7, id, 0.0f, 0.5f, stream)); /* random bf16 bits */
    return p;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds per call of fn(i) (i counts calls, for rotating buffers): `reps` samples of
 * `inner` calls each, after `inner` warm-up calls. */
typedef void (*bench_fn)(void *ctx, int i);
static double time_it(bench_fn fn, void *ctx, int inner, int reps)
{
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    int calls = 0;
    for (int i = 0; i < inner; i++) fn(ctx, calls++);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    double t[64];
    for (int r = 0; r < reps; r++) {
        CUDA_CHECK(cudaEventRecord(a, stream));
        for (int i = 0; i < inner; i++) fn(ctx, calls++);
        CUDA_CHECK(cudaEventRecord(b, stream));
        CUDA_CHECK(cudaEventSynchronize(b));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t[r] = ms / 1e3 / inner;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    cudaEventDestroy(a), cudaEventDestroy(b);
    return t[reps / 2];
}

static void row(const char *name, const char *shape, double sec, double amount, const char *unit,
                double ceiling, double predicted_sec)
{
    double rate = amount / sec;
    char pred[32] = "";
    if (predicted_sec > 0) snprintf(pred, sizeof pred, "%.3f", predicted_sec * 1e3);
    if (ceiling > 0)
        printf("| %-30s | %-34s | %9.3f | %8.1f %-7s | %5.1f%% | %9s |\n", name, shape, sec * 1e3,
               rate / (unit[0] == 'T' ? 1e12 : 1e9), unit, 100 * rate / ceiling, pred);
    else
        printf("| %-30s | %-34s | %9.3f | %8s %-7s | %6s | %9s |\n", name, shape, sec * 1e3, "", "",
               "", pred);
    fflush(stdout);
}

/* ---- ceilings ------------------------------------------------------------------------------ */

typedef struct copy_ctx { void *a, *b; size_t bytes; } copy_ctx;
static void do_copy(void *c, int i)
{
    copy_ctx *x = c;
    CUDA_CHECK(cudaMemcpyAsync(i & 1 ? x->a : x->b, i & 1 ? x->b : x->a, x->bytes, cudaMemcpyDeviceToDevice, stream));
}

typedef struct gemm_ctx { const void *w[16], *x[16]; void *y; int M, N, K, nw, f32; } gemm_ctx;
static void do_cublas(void *c, int i)
{
    gemm_ctx *g = c;
    const float alpha = 1, beta = 0;
    CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, g->N, g->M, g->K, &alpha, g->w[i % g->nw],
                     CUDA_R_16BF, g->K, g->x[i % g->nw], CUDA_R_16BF, g->K, &beta, g->y,
                     g->f32 ? CUDA_R_32F : CUDA_R_16BF, g->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
static void do_skinny(void *c, int i)
{
    gemm_ctx *g = c;
    CUDA_CHECK(k_gemm_skinny(g->x[i % g->nw], g->w[i % g->nw], g->y, g->f32, g->M, g->N, g->K, stream));
}

static int32_t *dupload(const void *h, size_t bytes);

/* The fused decode GEMMs (k_gemm_skinny_fused) at M = 1, as the engine runs them. */
typedef struct fused_ctx { gemm_ctx *g; k_skinny_args a; } fused_ctx;
static void do_fused(void *c, int i)
{
    fused_ctx *f = c;
    f->a.w = f->g->w[i % f->g->nw];
    CUDA_CHECK(k_gemm_skinny_fused(&f->a, stream));
}

static void ceilings(void)
{
    copy_ctx c = {.bytes = (size_t)2 << 30};
    c.a = dmalloc_random(c.bytes, 1);
    c.b = dmalloc_random(c.bytes, 2);
    double t = time_it(do_copy, &c, 4, 9);
    copy_bw = 2.0 * c.bytes / t;
    row("device copy (ceiling)", "2 GiB D2D, read+write", t, 2.0 * c.bytes, "GB/s", 0, 0);
    cudaFree(c.a), cudaFree(c.b);

    gemm_ctx g = {.M = 8192, .N = 8192, .K = 8192, .nw = 1};
    g.w[0] = dmalloc_random((size_t)8192 * 8192 * 2, 3);
    g.x[0] = dmalloc_random((size_t)8192 * 8192 * 2, 4);
    CUDA_CHECK(cudaMalloc(&g.y, (size_t)8192 * 8192 * 2));
    t = time_it(do_cublas, &g, 3, 9);
    gemm_rate = 2.0 * 8192 * 8192 * 8192 / t;
    row("cuBLAS bf16 GEMM (ceiling)", "8192^3, bf16 out", t, 2.0 * 8192 * 8192 * 8192, "TFLOP/s", 0, 0);
    /* The same product back to back for ~50 ms, as long as a prefill step: the rate a sustained
     * tensor load gets once the power cap lowers the SM clock (not used as the ceiling). */
    double ts = time_it(do_cublas, &g, 36, 3);
    row("cuBLAS bf16 GEMM, sustained", "8192^3, 36 in a row (~50 ms)", ts, 2.0 * 8192 * 8192 * 8192,
        "TFLOP/s", 0, 0);
    printf("|   (sustained / burst)          | %.1f%%                              |           |                  |        |           |\n",
           100 * t / ts);
    cudaFree((void *)g.w[0]), cudaFree((void *)g.x[0]), cudaFree(g.y);
    printf("| ceilings used below          | copy %.0f GB/s, GEMM %.0f TFLOP/s  |           |                  |        |           |\n",
           copy_bw / 1e9, gemm_rate / 1e12);
}

/* ---- GEMMs ----------------------------------------------------------------------------------- */

static void gemms(void)
{
    struct { const char *name; int N, K; } shapes[] = {
        {"qkv", 12288, 4096}, {"o", 4096, 4096}, {"gate_up", 22016, 4096},
        {"down", 4096, 11008}, {"lm_head", 32000, 4096},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        gemm_ctx g = {.N = shapes[s].N, .K = shapes[s].K, .f32 = 1};
        size_t wbytes = (size_t)g.N * g.K * 2;
        g.nw = (int)((512u << 20) / wbytes) + 1; /* > 512 MB of weights in rotation */
        if (g.nw > 16) g.nw = 16;
        for (int i = 0; i < g.nw; i++) {
            g.w[i] = dmalloc_random(wbytes, 100 + (uint32_t)i);
            g.x[i] = dmalloc_random((size_t)2048 * g.K * 2, 200 + (uint32_t)i);
        }
        CUDA_CHECK(cudaMalloc(&g.y, (size_t)2048 * g.N * 4));
        char shape[64];
        int Ms[] = {1, 4, 8};
        for (int mi = 0; mi < 3; mi++) {
            g.M = Ms[mi];
            snprintf(shape, sizeof shape, "M=%d N=%d K=%d", g.M, g.N, g.K);
            double t = time_it(do_skinny, &g, 20, 15);
            char name[64];
            snprintf(name, sizeof name, "skinny GEMM %s", shapes[s].name);
            row(name, shape, t, (double)wbytes, "GB/s", copy_bw, wbytes / copy_bw);
            if (g.M == 1) {
                t = time_it(do_cublas, &g, 20, 15);
                snprintf(name, sizeof name, "cuBLAS GEMM %s", shapes[s].name);
                row(name, shape, t, (double)wbytes, "GB/s", copy_bw, wbytes / copy_bw);
            }
        }
        {
            /* fused: qkv = norm + GEMM + RoPE + KV write, o/down += residual, gate_up = norm +
             * GEMM + SiLU*up, lm_head = final norm + GEMM */
            static const int pro[] = {K_PRO_NORM, K_PRO_NONE, K_PRO_NORM, K_PRO_NONE, K_PRO_NORM};
            static const int epi[] = {K_EPI_ROPE_KV, K_EPI_RESIDUAL, K_EPI_SILU, K_EPI_RESIDUAL, K_EPI_F32};
            static const char *what[] = {"norm+qkv+rope+kv", "o + residual", "norm+gate_up+silu",
                                         "down + residual", "norm+lm_head"};
            float *xf, inv[64], ones[16384];
            int32_t zero = 0;
            for (int i = 0; i < g.K; i++) ones[i] = 1.0f + 0.001f * (float)(i % 7);
            for (int i = 0; i < 64; i++) inv[i] = powf(10000.0f, -2.0f * i / 128);
            CUDA_CHECK(cudaMalloc((void **)&xf, (size_t)g.K * 4));
            CUDA_CHECK(cudaMemcpy(xf, ones, (size_t)g.K * 4, cudaMemcpyHostToDevice));
            int32_t *dzero = dupload(&zero, sizeof zero);
            float *dinv = (float *)dupload(inv, sizeof inv);
            void *kc = dmalloc_random(4096 * 2, 900), *vc = dmalloc_random(4096 * 2, 901);
            fused_ctx f = {.g = &g};
            f.a = (k_skinny_args){.x = pro[s] == K_PRO_NORM ? (const void *)xf : g.x[0],
                                  .norm_w = g.x[1 % g.nw], .eps = 1e-5f, .y = g.y, .M = 1,
                                  .N = g.N, .K = g.K, .pro = pro[s], .epi = epi[s],
                                  .positions = dzero, .slot_mapping = dzero, .inv_freq = dinv,
                                  .k_cache = kc, .v_cache = vc, .nh = 32, .nkv = 32, .hd = 128};
            snprintf(shape, sizeof shape, "M=1 N=%d K=%d", g.N, g.K);
            double t = time_it(do_fused, &f, 20, 15);
            char name[64];
            snprintf(name, sizeof name, "fused %s", what[s]);
            row(name, shape, t, (double)wbytes, "GB/s", copy_bw, wbytes / copy_bw);
            cudaFree(xf), cudaFree(dzero), cudaFree(dinv), cudaFree(kc), cudaFree(vc);
        }
        g.M = 2048;
        g.f32 = s == 2 ? 0 : 1; /* gate_up is stored bf16 */
        snprintf(shape, sizeof shape, "M=2048 N=%d K=%d", g.N, g.K);
        double t = time_it(do_cublas, &g, 5, 9);
        double flops = 2.0 * 2048 * g.N * g.K;
        char name[64];
        snprintf(name, sizeof name, "cuBLAS GEMM %s", shapes[s].name);
        row(name, shape, t, flops, "TFLOP/s", gemm_rate, flops / gemm_rate);
        for (int i = 0; i < g.nw; i++) cudaFree((void *)g.w[i]), cudaFree((void *)g.x[i]);
        cudaFree(g.y);
    }
}

/* ---- attention ------------------------------------------------------------------------------ */

typedef struct attn_ctx {
    k_attn_args a[4]; /* rotated: each its own KV and block tables */
    int32_t *dec, *items, nd, np, partition, max_parts;
    float *partials;
    int32_t *counters;
} attn_ctx;
static void do_decode(void *c, int i)
{
    attn_ctx *x = c;
    CUDA_CHECK(k_decode_attention(&x->a[i % 4], x->dec, x->nd, x->partition, x->max_parts, x->partials,
                          x->counters, stream));
}
static void do_prefill(void *c, int i)
{
    attn_ctx *x = c;
    CUDA_CHECK(k_prefill_attention(&x->a[i % 4], x->items, x->np, stream));
}

static int32_t *dupload(const void *h, size_t bytes)
{
    int32_t *d;
    CUDA_CHECK(cudaMalloc((void **)&d, bytes));
    CUDA_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* B sequences of ctx cached tokens each, n new rows each (n == 1: decode). */
static void attention(int B, int ctx, int n, int nh, int nkv, const char *label)
{
    int hd = 128, bs = 16, len = ctx + n, S = (len + bs - 1) / bs, T = B * n;
    int stride = (nh + 2 * nkv) * hd;
    attn_ctx x = {0};
    int32_t *qsl = malloc(sizeof(int32_t) * (size_t)(B + 1)), *lens = malloc(sizeof(int32_t) * (size_t)B);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)B * S), *dec = malloc(sizeof(int32_t) * (size_t)B);
    const int tile = K_PREFILL_TILE;
    int32_t *items = malloc(sizeof(int32_t) * 2 * (size_t)(B * ((n + tile - 1) / tile) + 1));
    for (int b = 0; b <= B; b++) qsl[b] = b * n;
    for (int b = 0; b < B; b++) lens[b] = len, dec[b] = b;
    for (int i = 0; i < B * S; i++) bt[i] = (int32_t)((i * 7919LL) % (B * S)); /* scattered pages */
    for (int b = 0; b < B && n > 1; b++)
        for (int i = (n - 1) / tile * tile; i >= 0; i -= tile) items[2 * x.np] = b, items[2 * x.np + 1] = i, x.np++;
    x.nd = n == 1 ? B : 0;
    /* the engine's rule: halve the partition from 256 while the grid has under 4096 blocks */
    int groups = nh / (nh / nkv >= 8 ? 8 : nh / nkv >= 4 ? 4 : nh / nkv >= 2 ? 2 : 1);
    x.partition = K_DECODE_PARTITION;
    while (x.partition > 32 && (long)groups * B * ((len + x.partition - 1) / x.partition) < 4096) x.partition /= 2;
    x.max_parts = (len + x.partition - 1) / x.partition;
    x.dec = dupload(dec, sizeof(int32_t) * (size_t)B);
    x.items = dupload(items, sizeof(int32_t) * 2 * (size_t)(x.np + 1));
    int32_t *dqsl = dupload(qsl, sizeof(int32_t) * (size_t)(B + 1)), *dlens = dupload(lens, sizeof(int32_t) * (size_t)B);
    int32_t *dbt = dupload(bt, sizeof(int32_t) * (size_t)B * S);
    CUDA_CHECK(cudaMalloc((void **)&x.partials, (size_t)B * nh * x.max_parts * (hd + 2) * 4 + 16));
    CUDA_CHECK(cudaMalloc((void **)&x.counters, (size_t)B * nh * 4));
    CUDA_CHECK(cudaMemset(x.counters, 0, (size_t)B * nh * 4));
    size_t cache = (size_t)B * S * bs * nkv * hd * 2;
    int copies = cache * 2 >= (256u << 20) ? 2 : 4;
    void *qkv, *out, *kc[4], *vc[4];
    CUDA_CHECK(cudaMalloc(&qkv, (size_t)T * stride * 4));
    CUDA_CHECK(k_synth_bf16(qkv, (int64_t)T * stride * 2, 9, 9, 0.0f, 0.02f, stream)); /* small floats */
    CUDA_CHECK(cudaMalloc(&out, (size_t)T * nh * hd * 2));
    for (int i = 0; i < 4; i++) {
        if (i < copies) {
            kc[i] = dmalloc_random(cache, 300 + (uint32_t)i);
            vc[i] = dmalloc_random(cache, 400 + (uint32_t)i);
        } else {
            kc[i] = kc[i % copies], vc[i] = vc[i % copies];
        }
        x.a[i] = (k_attn_args){.qkv = qkv, .qkv_stride = stride, .k_cache = kc[i], .v_cache = vc[i],
                               .out = out, .out_stride = nh * hd, .query_start_loc = dqsl,
                               .seq_lens = dlens, .block_tables = dbt, .bt_stride = S, .nh = nh,
                               .nkv = nkv, .hd = hd, .block_size = bs, .scale = 1.0f / sqrtf(hd)};
    }
    char shape[80];
    snprintf(shape, sizeof shape, "B=%d ctx=%d n=%d heads %d/%d hd 128%s", B, ctx, n, nh, nkv,
             n == 1 ? (x.partition == 256 ? " P=256" : x.partition == 128 ? " P=128" : x.partition == 64 ? " P=64" : " P=32") : "");
    if (n == 1) {
        double bytes = 2.0 * B * len * nkv * hd * 2;
        double t = time_it(do_decode, &x, 10, 15);
        row(label, shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    } else {
        /* causal pairs: row i sees ctx + i + 1 keys; 2 matmuls of 2*hd FLOPs per pair */
        double pairs = (double)B * ((double)n * ctx + (double)n * (n + 1) / 2);
        double flops = 4.0 * hd * nh * pairs;
        /* the default (wgmma at hd 128 on the H200), then the mma.sync kernel's schedules */
        static const char *const variant[K_PREFILL_VARIANTS + 1] = {"", ", mma 4x32", ", mma 8x16/32", ", mma 8x16/64", ", wgmma serial", ", wgmma 16 thr/row", ", wgmma 2 thr/row"};
        for (int v = 0; v <= K_PREFILL_VARIANTS; v++) {
            k_set_prefill_variant(v);
            double t = time_it(do_prefill, &x, 3, 9);
            char lab[64];
            snprintf(lab, sizeof lab, "%s%s", label, variant[v]);
            row(lab, shape, t, flops, "TFLOP/s", gemm_rate, flops / gemm_rate);
        }
        k_set_prefill_variant(0);
    }
    for (int i = 0; i < copies; i++) cudaFree(kc[i]), cudaFree(vc[i]);
    cudaFree(qkv), cudaFree(out), cudaFree(x.dec), cudaFree(x.items), cudaFree(dqsl), cudaFree(dlens);
    cudaFree(dbt), cudaFree(x.partials), cudaFree(x.counters);
    free(qsl), free(lens), free(bt), free(dec), free(items);
}

/* ---- elementwise ------------------------------------------------------------------------------ */

typedef struct ew_ctx { void *x[4], *d[4], *w, *out[4]; int32_t *tok, *pos, *slot; float *inv; int T, h, I; } ew_ctx;
static void do_norm(void *c, int i)
{
    ew_ctx *e = c;
    CUDA_CHECK(k_add_rmsnorm(e->x[i % 4], e->d[i % 4], e->w, NULL, e->T, e->h, 1e-5f, e->out[i % 4], stream));
}
static void do_silu(void *c, int i)
{
    ew_ctx *e = c;
    CUDA_CHECK(k_silu_mul(e->x[i % 4], e->T, e->I, e->out[i % 4], stream));
}
static void do_rope(void *c, int i)
{
    ew_ctx *e = c;
    /* d holds the k and v caches (T, 4096) bf16 each, then q (T, 4096) float */
    bf16_t *kc = e->d[i % 4], *vc = kc + (size_t)e->T * 4096;
    float *q = (float *)(vc + (size_t)e->T * 4096);
    CUDA_CHECK(k_rope_kv_write(e->x[i % 4], e->pos, e->slot, e->T, 32, 32, 128, e->inv, q, 4096, kc, vc,
                       stream));
}
static void do_embed(void *c, int i)
{
    ew_ctx *e = c;
    CUDA_CHECK(k_embed(e->w, e->tok, e->T, e->h, e->x[i % 4], stream));
}

static void elementwise(void)
{
    int T = 2048, h = 4096, I = 11008;
    ew_ctx e = {.T = T, .h = h, .I = I};
    size_t big = (size_t)T * 2 * I * 2; /* largest input: gate/up */
    for (int i = 0; i < 4; i++) {
        e.x[i] = dmalloc_random(big > (size_t)T * 12288 * 4 ? big : (size_t)T * 12288 * 4, 500 + (uint32_t)i);
        e.d[i] = dmalloc_random((size_t)T * h * 4 * 2, 600 + (uint32_t)i);
        e.out[i] = dmalloc_random((size_t)T * I * 2, 700 + (uint32_t)i);
    }
    e.w = dmalloc_random((size_t)32000 * h * 2, 800);
    int32_t *tmp = malloc(sizeof(int32_t) * (size_t)T);
    for (int i = 0; i < T; i++) tmp[i] = (i * 7717) % 32000;
    e.tok = dupload(tmp, sizeof(int32_t) * (size_t)T);
    for (int i = 0; i < T; i++) tmp[i] = i;
    e.pos = dupload(tmp, sizeof(int32_t) * (size_t)T);
    e.slot = dupload(tmp, sizeof(int32_t) * (size_t)T);
    float inv[64];
    for (int i = 0; i < 64; i++) inv[i] = powf(10000.0f, -2.0f * i / 128);
    e.inv = (float *)dupload(inv, sizeof inv);
    /* norm inputs must be finite floats: make them from bf16 noise */
    for (int i = 0; i < 4; i++) {
        CUDA_CHECK(k_embed(e.w, e.tok, T, h, e.x[i], stream));
        CUDA_CHECK(k_embed(e.w, e.tok, T, h, e.d[i], stream));
    }
    double t = time_it(do_norm, &e, 10, 15), bytes = (double)T * h * (4 + 4 + 4 + 2);
    row("add + RMSNorm", "T=2048 h=4096", t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    t = time_it(do_silu, &e, 10, 15), bytes = (double)T * I * (4 + 2);
    row("SiLU * up", "T=2048 I=11008", t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    t = time_it(do_embed, &e, 10, 15), bytes = (double)T * h * (2 + 4);
    row("embedding gather", "T=2048 h=4096", t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    /* RoPE reads the QKV GEMM's bf16 rows and writes float q and bf16 k and v */
    for (int i = 0; i < 4; i++) CUDA_CHECK(k_synth_bf16(e.x[i], (int64_t)T * 12288, 5, 5, 0.0f, 1.0f, stream));
    t = time_it(do_rope, &e, 10, 15), bytes = (double)T * 12288 * 2 + (double)T * 4096 * 4 + (double)T * 8192 * 2;
    row("RoPE + KV write", "T=2048 heads 32/32 hd 128", t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    for (int i = 0; i < 4; i++) cudaFree(e.x[i]), cudaFree(e.d[i]), cudaFree(e.out[i]);
    cudaFree(e.w), cudaFree(e.tok), cudaFree(e.pos), cudaFree(e.slot), cudaFree(e.inv);
    free(tmp);
}

/* ---- whole steps ---------------------------------------------------------------------------- */

typedef struct step_ctx {
    engine *eng;
    eng_step s;
} step_ctx;
static void do_step(void *c, int i)
{
    step_ctx *x = c;
    terr e = {{0}};
    if (engine_forward(x->eng, &x->s, &e)) {
        fprintf(stderr, "bench: %s\n", e.msg);
        exit(1);
    }
}

/* Step arrays for B sequences each computing n rows after ctx cached ones; sequence b owns
 * blocks [b*S, (b+1)*S). */
typedef struct step_buf { int32_t *tok, *pos, *slot, qsl[257], lens[256], *bt, rows[256]; } step_buf;
static eng_step make_step(step_buf *sb, int B, int ctx, int n, int S, int bs, int32_t first_block)
{
    int T = B * n;
    sb->tok = realloc(sb->tok, sizeof(int32_t) * (size_t)T);
    sb->pos = realloc(sb->pos, sizeof(int32_t) * (size_t)T);
    sb->slot = realloc(sb->slot, sizeof(int32_t) * (size_t)T);
    sb->bt = realloc(sb->bt, sizeof(int32_t) * (size_t)B * S);
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < S; k++) sb->bt[b * S + k] = first_block + b * S + k;
        for (int i = 0; i < n; i++) {
            int t = b * n + i, p = ctx + i;
            sb->tok[t] = (int32_t)((p * 2654435761u + (unsigned)b * 40503u) % 32000u);
            sb->pos[t] = p;
            sb->slot[t] = sb->bt[b * S + p / bs] * bs + p % bs;
        }
        sb->qsl[b] = b * n;
        sb->lens[b] = ctx + n;
        sb->rows[b] = b * n + n - 1;
    }
    sb->qsl[B] = T;
    return (eng_step){.num_tokens = T, .num_seqs = B, .token_ids = sb->tok, .positions = sb->pos,
                      .slot_mapping = sb->slot, .query_start_loc = sb->qsl, .seq_lens = sb->lens,
                      .block_tables = sb->bt, .block_table_stride = S, .num_logits = B,
                      .logits_rows = sb->rows};
}

/* Fills the KV of sequences 0..nseqs-1 (blocks [b*S, (b+1)*S)) with 1024 tokens, per_step
 * sequences a step. */
static void fill_kv(engine *eng, step_buf *sb, int nseqs, int per_step, int S, int bs)
{
    for (int b = 0; b < nseqs; b += per_step)
        do_step(&(step_ctx){eng, make_step(sb, per_step, 0, 1024, S, bs, b * S)}, 0);
}

static double time_step(engine *eng, eng_step s, int inner, int reps)
{
    step_ctx c = {eng, s};
    stream = engine_cuda_stream(eng);
    double t = time_it(do_step, &c, inner, reps);
    return t;
}

/* A prefill step timed after ~1 s of the same steps. The board's power cap sets the SM clock of
 * a prefill (1545-1650 MHz against 1980 in the profiles), and the clock lags the load by a few
 * hundred ms: in the 64-sequence engine the step came right after filling 72 GB of KV, and the
 * profile caught it at 1410-1545 MHz (mean 1491) against 1545-1560 in the 1-sequence engine, about
 * 1.5 ms of the difference between the two. Settling first times both in the state a stream of
 * prefills runs in. */
static double time_prefill(engine *eng, eng_step s)
{
    step_ctx c = {eng, s};
    stream = engine_cuda_stream(eng);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0;; i++) {
        do_step(&c, i);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9 > 1.0) break;
    }
    return time_step(eng, s, 2, 5);
}

/* Llama-2-7B: bytes of weights a decode step reads (32 layers' QKV, O, gate/up, down, and the
 * LM head; bf16), and K+V bytes per context token over all layers. */
#define WBYTES_7B (2.0 * (32.0 * (4096.0 * 12288 + 4096.0 * 4096 + 4096.0 * 22016 + 11008.0 * 4096) + 32000.0 * 4096))
#define KV_TOK_7B (2.0 * 32 * 32 * 128 * 2)

static bool persistent = true; /* engine_opts.cuda_persistent for open_7b */

static int open_7b(engine *eng, int max_tokens, int max_seqs, int num_blocks, bool graphs, bool pdl,
                   int skinny, bool fuse)
{
    engine_opts o;
    engine_opts_default(&o);
    o.cuda_persistent = persistent;
    o.cuda_persistent_seqs = 4;
    o.model = "synthetic:llama-2-7b";
    o.backend = "cuda";
    o.weight_seed = 1;
    o.max_tokens = max_tokens;
    o.max_seqs = max_seqs;
    o.max_model_len = 2112;
    o.num_blocks = num_blocks;
    o.cuda_graphs = graphs;
    o.cuda_pdl = pdl;
    o.skinny_max_tokens = skinny;
    o.cuda_fuse = fuse;
    terr e = {{0}};
    int rc = engine_open(eng, &o, &e);
    if (rc) fprintf(stderr, "bench: %s\n", e.msg);
    return rc;
}

static void whole_steps(void)
{
    const int bs = 16, S = 2112 / 16;
    const double wbytes = WBYTES_7B, kv_tok = KV_TOK_7B;
    engine eng;
    /* 64 decode sequences of S blocks, then a 2048-token prefill sequence. */
    if (open_7b(&eng, 2048, 64, 65 * S, true, true, 8, true)) exit(1);
    step_buf sb = {0};
    fill_kv(&eng, &sb, 64, 2, S, bs);
    char shape[96];
    eng_step s = make_step(&sb, 1, 0, 2048, S, bs, 64 * S);
    double t = time_prefill(&eng, s);
    double flops = 2.0 * 2048 * (wbytes / 2 - 32000.0 * 4096) + 4.0 * 128 * 32 * 32 * (2048.0 * 2049 / 2);
    row("STEP prefill 2048 (1 seq)", "llama-2-7b synthetic, T=2048", t, flops, "TFLOP/s", gemm_rate,
        flops / gemm_rate);
    int ctxs[2] = {128, 1024};
    for (int k = 0; k < 2; k++) {
        s = make_step(&sb, 1, ctxs[k], 1, S, bs, 0);
        t = time_step(&eng, s, 20, 9);
        double bytes = wbytes + kv_tok * (ctxs[k] + 1);
        snprintf(shape, sizeof shape, "B=1 ctx=%d graphs, persistent", ctxs[k]);
        row("STEP decode batch 1", shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    }
    for (int B = 4; B <= 8; B += 4) {
        s = make_step(&sb, B, 1024, 1, S, bs, 0);
        t = time_step(&eng, s, 10, 9);
        double bytes = wbytes + B * kv_tok * 1025;
        snprintf(shape, sizeof shape, "B=%d ctx=1024 graphs+PDL, %s", B, B <= 4 ? "persistent" : "fused");
        row(B == 4 ? "STEP decode batch 4" : "STEP decode batch 8", shape, t, bytes, "GB/s", copy_bw,
            bytes / copy_bw);
    }
    s = make_step(&sb, 64, 1024, 1, S, bs, 0);
    t = time_step(&eng, s, 5, 9);
    double bytes = wbytes + 64 * kv_tok * 1025;
    row("STEP decode batch 64", "B=64 ctx=1024 graphs+PDL", t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    engine_close(&eng);

    /* Variants of the batch-1 decode step (small KV: one sequence). */
    struct { const char *name; bool graphs, pdl; int skinny; bool fuse, persistent; } v[] = {
        {"graphs, persistent", true, true, 8, true, true},
        {"no graphs, persistent", false, true, 8, true, true},
        {"graphs+PDL, fused, 5 kernels a layer", true, true, 8, true, false},
        {"graphs+PDL, unfused", true, true, 8, false, false},
        {"graphs, no PDL, fused", true, false, 8, true, false},
        {"no graphs, PDL, fused", false, true, 8, true, false},
        {"graphs+PDL, cuBLAS only", true, true, 0, false, false},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        persistent = v[i].persistent;
        if (open_7b(&eng, 1024, 1, S, v[i].graphs, v[i].pdl, v[i].skinny, v[i].fuse)) exit(1);
        fill_kv(&eng, &sb, 1, 1, S, bs);
        s = make_step(&sb, 1, 1024, 1, S, bs, 0);
        t = time_step(&eng, s, 20, 9);
        snprintf(shape, sizeof shape, "B=1 ctx=1024 %s", v[i].name);
        bytes = wbytes + kv_tok * 1025;
        row("STEP decode batch 1", shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
        engine_close(&eng);
    }
    persistent = true;
    /* The persistent kernel with other numbers of ring units' copies pending per block (0: the
     * whole ring; graphs capture it). */
    static const int pend[] = {0, 3, 4};
    for (size_t i = 0; i < sizeof pend / sizeof *pend; i++) {
        const int f = pend[i];
        k_set_decode_inflight(f);
        if (open_7b(&eng, 1024, 1, S, true, true, 8, true)) exit(1);
        fill_kv(&eng, &sb, 1, 1, S, bs);
        s = make_step(&sb, 1, 1024, 1, S, bs, 0);
        t = time_step(&eng, s, 20, 9);
        if (f) snprintf(shape, sizeof shape, "B=1 ctx=1024 graphs, persistent, %d units in flight", f);
        else snprintf(shape, sizeof shape, "B=1 ctx=1024 graphs, persistent, whole ring in flight");
        bytes = wbytes + kv_tok * 1025;
        row("STEP decode batch 1", shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
        engine_close(&eng);
    }
    k_set_decode_inflight(K_DECODE_INFLIGHT_DEFAULT);
    /* Batches of 2 and 4 at context 1024, persistent kernel against five kernels a layer. */
    for (int per = 1; per >= 0; per--) {
        persistent = per;
        if (open_7b(&eng, 1024, 4, 4 * S, true, true, 8, true)) exit(1);
        fill_kv(&eng, &sb, 4, 1, S, bs);
        for (int B = 2; B <= 4; B += 2) {
            s = make_step(&sb, B, 1024, 1, S, bs, 0);
            t = time_step(&eng, s, 10, 9);
            bytes = wbytes + B * kv_tok * 1025;
            snprintf(shape, sizeof shape, "B=%d ctx=1024 graphs, %s", B, per ? "persistent" : "5 kernels a layer");
            row(B == 2 ? "STEP decode batch 2" : "STEP decode batch 4", shape, t, bytes, "GB/s", copy_bw,
                bytes / copy_bw);
        }
        engine_close(&eng);
    }
    persistent = true;
    /* The prefill step in an engine sized for one sequence (1 GB of KV instead of 72), with and
     * without PDL, and with the mma.sync attention kernel. */
    for (int pdl = 1; pdl >= 0; pdl--) {
        if (open_7b(&eng, 2048, 1, S, false, pdl, 8, true)) exit(1);
        s = make_step(&sb, 1, 0, 2048, S, bs, 0);
        t = time_prefill(&eng, s);
        row("STEP prefill 2048 (1 seq)", pdl ? "T=2048, 1-seq engine, PDL" : "T=2048, 1-seq engine, no PDL",
            t, flops, "TFLOP/s", gemm_rate, flops / gemm_rate);
        if (pdl) { /* with the mma.sync attention kernel (variant 3) in place of wgmma */
            k_set_prefill_variant(3);
            t = time_prefill(&eng, s);
            row("STEP prefill 2048 (1 seq)", "T=2048, 1-seq engine, PDL, mma.sync attention", t, flops,
                "TFLOP/s", gemm_rate, flops / gemm_rate);
            k_set_prefill_variant(0);
        }
        engine_close(&eng);
    }
    free(sb.tok), free(sb.pos), free(sb.slot), free(sb.bt);
}

/* The batch-1 decode step (context 1024, graphs) under the streamed kernel's current experiments
 * (now: ring slots that hold two rows of the down projection, and producers that never go quiet),
 * alternated three times so that drifts of the machine fall on all of them. */
static void decode_ab(void)
{
    static const struct { int quiet, slot; const char *name; } cfg[] = {
        {K_DECODE_QUIET_DEFAULT, 0, "default"},
        {K_DECODE_QUIET_DEFAULT, 44032, "44 KB slots: down rows two a task"},
        {0, 0, "producers never quiet"},
    };
    const int bs = 16, S = 2112 / 16;
    const double bytes = WBYTES_7B + KV_TOK_7B * 1025;
    step_buf sb = {0};
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++) {
            engine eng;
            /* read when the graph is captured */
            k_set_decode_quiet(cfg[i].quiet), k_set_decode_slot(cfg[i].slot);
            if (open_7b(&eng, 1024, 1, S, true, true, 8, true)) exit(1);
            fill_kv(&eng, &sb, 1, 1, S, bs);
            eng_step s = make_step(&sb, 1, 1024, 1, S, bs, 0);
            double t = time_step(&eng, s, 20, 9);
            char shape[96];
            snprintf(shape, sizeof shape, "B=1 ctx=1024, %s", cfg[i].name);
            row("STEP decode batch 1", shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
            engine_close(&eng);
        }
    k_set_decode_quiet(K_DECODE_QUIET_DEFAULT), k_set_decode_slot(0);
    free(sb.tok), free(sb.pos), free(sb.slot), free(sb.bt);
}

/* ---- the memory stream alone ------------------------------------------------------------------ */

typedef struct {
    void *src;
    int64_t bytes;
    int row, rows, inflight;
    unsigned *sink;
} probe_ctx;

static void do_stream_probe(void *ctx, int i)
{
    probe_ctx *c = ctx;
    CUDA_CHECK(k_stream_probe(c->src, c->bytes, c->row, c->rows, c->inflight, stream));
}

static void do_read_probe(void *ctx, int i)
{
    probe_ctx *c = ctx;
    CUDA_CHECK(k_read_probe(c->src, c->bytes, c->sink, stream));
}

/* The rate 1 GiB streams at through the persistent decode kernel's ring (bulk copies of weight-row
 * units, some pending a block, nothing else running) and with plain loads: what the kernel's
 * phases could reach if they cost nothing but their bytes. */
static void stream_probe(void)
{
    probe_ctx c = {.bytes = (int64_t)1 << 30};
    c.src = dmalloc_random((size_t)c.bytes, 9);
    CUDA_CHECK(cudaMalloc((void **)&c.sink, sizeof(unsigned)));
    double t = time_it(do_read_probe, &c, 10, 9);
    row("read, 16-byte loads", "1 GiB, 4 loads a thread in flight", t, (double)c.bytes, "GB/s", copy_bw,
        c.bytes / copy_bw);
    static const struct { int row, rows, inflight; } v[] = {
        {8192, 4, 1}, {8192, 4, 2}, {8192, 4, 3}, {8192, 4, 4}, {8192, 4, 0},
        {22016, 1, 2}, {22016, 1, 3}, {22016, 1, 0}, {16384, 2, 2}, {4096, 8, 2},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        c.row = v[i].row, c.rows = v[i].rows, c.inflight = v[i].inflight;
        const int64_t unit = (int64_t)c.row * c.rows;
        const double amount = (double)(c.bytes / unit * unit);
        t = time_it(do_stream_probe, &c, 10, 9);
        char shape[64], fl[16] = "ring";
        if (c.inflight) snprintf(fl, sizeof fl, "%d", c.inflight);
        snprintf(shape, sizeof shape, "%d x %d B a unit, %s in flight", c.rows, c.row, fl);
        row("ring stream (decode kernel)", shape, t, amount, "GB/s", copy_bw, amount / copy_bw);
    }
    cudaFree(c.src), cudaFree(c.sink);
}

typedef struct {
    int K, rows, paired, units;
    float *y;
} consume_ctx;

static void do_consume_probe(void *ctx, int i)
{
    consume_ctx *c = ctx;
    CUDA_CHECK(k_consume_probe(c->K, c->rows, c->paired, c->units, c->y, stream));
}

/* The rate the persistent decode kernel's consumers reach at batch 1 with their bytes already in
 * the ring (nothing copied), per phase shape: what the phases could reach if the stream cost
 * nothing. The copy ceiling, per SM, is what they have to beat. */
static void consume_probe(void)
{
    static const struct { int K, rows, paired; const char *name; } v[] = {
        {4096, 4, 0, "O (4 rows of K=4096 a unit)"},
        {4096, 2, 1, "QKV, gate/up (2 pairs of K=4096)"},
        {11008, 1, 0, "down (1 row of K=11008)"},
    };
    const int G = k_decode_stream_grid();
    consume_ctx c = {.units = 512};
    CUDA_CHECK(cudaMalloc((void **)&c.y, (size_t)G * c.units * 8 * sizeof(float)));
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        c.K = v[i].K, c.rows = v[i].rows, c.paired = v[i].paired;
        const double bytes = (double)G * c.units * (c.paired ? 2 : 1) * c.rows * c.K * 2;
        double t = time_it(do_consume_probe, &c, 10, 9);
        char shape[64];
        snprintf(shape, sizeof shape, "%s, %.1f GB/s an SM", v[i].name, bytes / G / t / 1e9);
        row("consumers alone (decode kernel)", shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    }
    cudaFree(c.y);
}

/* ---- inside the persistent decode kernel ----------------------------------------------------- */

/* Runs the decode step of B sequences at context 1024 without a graph, with the persistent
 * kernel's barrier trace on, and prints per phase of a layer (averaged over layers 1..30): the
 * time between consecutive barrier exits, the slowest and the mean block's work before the
 * barrier, the barrier's own cost (the wait of the last block to arrive) and the mean wait. */
static void decode_trace(int B, int slot, int groups, int dynamic, int inflight)
{
    k_set_decode_inflight(inflight);
    k_set_decode_slot(slot);
    k_set_decode_groups(groups);
    k_set_decode_dynamic(dynamic);
    const int bs = 16, S = 2112 / 16, L = 32, NB = 4 + 5 * (L - 1);
    engine eng;
    if (open_7b(&eng, 1024, 4, 4 * S, false, true, 8, true)) exit(1);
    step_buf sb = {0};
    fill_kv(&eng, &sb, B, 1, S, bs);
    eng_step s = make_step(&sb, B, 1024, 1, S, bs, 0);
    int grid = k_decode_stream_grid();
    const int NT = K_DECODE_TRACE_RECORDS(L);
    size_t n = (size_t)NT * grid * 4;
    unsigned long long *d, *h = malloc(n * 8);
    CUDA_CHECK(cudaMalloc((void **)&d, n * 8));
    for (int rep = 0; rep < 3; rep++) { /* the last repetition is the one read */
        do_step(&(step_ctx){&eng, s}, 0);
        CUDA_CHECK(cudaStreamSynchronize(engine_cuda_stream(&eng)));
        CUDA_CHECK(cudaMemset(d, 0, n * 8));
        k_set_decode_trace(d, NT);
        do_step(&(step_ctx){&eng, s}, 0);
        CUDA_CHECK(cudaStreamSynchronize(engine_cuda_stream(&eng)));
        k_set_decode_trace(NULL, 0);
    }
    CUDA_CHECK(cudaMemcpy(h, d, n * 8, cudaMemcpyDeviceToHost));
#define T(k, b, i) ((double)h[((size_t)(k) * grid + (b)) * 4 + (i)])
    if (!T(NB - 1, 0, 2)) {
        printf("\npersistent decode kernel, batch %d: no trace (kernel not used?)\n", B);
    } else {
        /* SM clock from block 0: cycles / ns between the first and last barrier exits */
        double ghz = (T(NB - 1, 0, 1) - T(0, 0, 1)) / (T(NB - 1, 0, 2) - T(0, 0, 2));
        static const char *names[5] = {"down + residual (prev layer)", "norm + qkv + rope + kv",
                                       "attention partials + merge", "o + residual", "norm + gate/up + silu"};
        double wall[5] = {0}, wmax[5] = {0}, wmean[5] = {0}, bar[5] = {0}, wait[5] = {0}, data[5] = {0};
        int cnt[5] = {0};
        for (int k = 5; k < NB; k++) { /* barrier k ends the phase named names[(k - 4) % 5] */
            int ph = (k - 4) % 5;
            double mx = 0, sum = 0, mn = 1e30, ws = 0, dw = 0;
            for (int b = 0; b < grid; b++) {
                double work = T(k, b, 0) - T(k - 1, b, 1), w = T(k, b, 1) - T(k, b, 0);
                mx = work > mx ? work : mx, sum += work, mn = w < mn ? w : mn, ws += w, dw += T(k, b, 3);
            }
            data[ph] += dw / grid / ghz;
            wall[ph] += T(k, 0, 2) - T(k - 1, 0, 2);
            wmax[ph] += mx / ghz, wmean[ph] += sum / grid / ghz, bar[ph] += mn / ghz, wait[ph] += ws / grid / ghz;
            cnt[ph]++;
        }
        char fl[16] = "all";
        if (inflight) snprintf(fl, sizeof fl, "%d", inflight);
        printf("\npersistent decode kernel, batch %d, ctx 1024, ring slots of %s, attention split %s, GEMM units "
               "%s, %s units in flight: grid %d blocks, SM clock %.2f GHz; per layer, mean over layers 1..30 (us); "
               "first to last barrier %.1f us\n", B, slot ? "44 KB" : "32 KB (default)",
               groups == 1 ? "by tokens only" : "by KV-head groups (default)",
               dynamic ? "claimed (default)" : "fixed shares", fl, grid, ghz, (T(NB - 1, 0, 2) - T(0, 0, 2)) / 1e3);
        printf("| phase (before the barrier)     | barrier to barrier | slowest block's work | mean block's work | of which waiting for data (warp 0) | barrier (last arriver's wait) | mean wait |\n");
        printf("|---|---|---|---|---|---|---|\n");
        double tot = 0;
        for (int p = 0; p < 5; p++) {
            int q = (p + 1) % 5; /* print in layer order, starting with qkv */
            printf("| %-30s | %8.2f | %8.2f | %8.2f | %8.2f | %8.2f | %8.2f |\n", names[q], wall[q] / cnt[q] / 1e3,
                   wmax[q] / cnt[q] / 1e3, wmean[q] / cnt[q] / 1e3, data[q] / cnt[q] / 1e3, bar[q] / cnt[q] / 1e3,
                   wait[q] / cnt[q] / 1e3);
            tot += wall[q] / cnt[q] / 1e3;
        }
        printf("| total a layer                  | %8.2f | | | | | |\n", tot);
        /* Inside attention (layers 1..30), from the exit of the barrier (or signal) before it. */
        static const char *pn[5] = {"first KV slot in", "attend + partials (1st segment)",
                                    "counter (+ wait, mergers)", "merge, later segments", "to the barrier"};
        double sum[2][5] = {{0}}, mxs[2][5] = {{0}};
        int nb[2] = {0};
        for (int li = 1; li < L - 1; li++)
            for (int b = 0; b < grid; b++) {
                double p[6];
                p[0] = T(5 * li, b, 1);
                for (int j = 0; j < 4; j++) p[j + 1] = T(K_DECODE_TRACE_ATTN(L, li, j), b, 0);
                p[5] = T(5 * li + 1, b, 0);
                if (!p[1] || !p[2] || !p[3] || !p[4]) continue; /* a block without old tokens */
                const int mg = (long long)h[((size_t)K_DECODE_TRACE_ATTN(L, li, 2) * grid + b) * 4 + 1] >= 0;
                nb[mg]++;
                for (int j = 0; j < 5; j++) {
                    const double dt = (p[j + 1] - p[j]) / ghz / 1e3;
                    sum[mg][j] += dt, mxs[mg][j] = dt > mxs[mg][j] ? dt : mxs[mg][j];
                }
            }
        /* The producers: what held each phase's copies back (mean block, layers 1..30). While a
         * ring is full its block's share of memory has nothing to do. */
        static const char *pp[5] = {"qkv", "attention KV", "o", "gate/up", "down"};
        printf("producers, per phase issued (us, mean block, layers 1..%d)\n", L - 2);
        printf("| phase        | waiting: ring full | waiting: in-flight limit | units |\n|---|---|---|---|\n");
        for (int p = 0; p < 5; p++) {
            double full = 0, fly = 0, units = 0;
            for (int li = 1; li < L - 1; li++)
                for (int b = 0; b < grid; b++) {
                    const size_t r = ((size_t)K_DECODE_TRACE_PRODUCER(L, li, p) * grid + b) * 4;
                    full += h[r + 1], fly += h[r + 2], units += h[r + 3];
                }
            const double nbl = (double)(L - 2) * grid;
            printf("| %-12s | %8.2f | %8.2f | %6.2f |\n", pp[p], full / nbl / ghz / 1e3, fly / nbl / ghz / 1e3,
                   units / nbl);
        }
        /* The consumers inside each GEMM phase (mean block): from the exit of the barrier (or
         * signal) before it to the staged input, to the first unit's data, to the end marker, to
         * the arrival at the barrier after it. */
        static const char *gn[4] = {"qkv", "o", "gate/up", "down"};
        static const int g_start[4] = {-1, 1, 2, 3}; /* barrier records 5 li + these */
        printf("consumers, per GEMM phase (us, mean block, layers 1..%d)\n", L - 2);
        printf("| phase    | barrier to input staged | to first data | units | to the next barrier | tasks of warp 0 |\n"
               "|---|---|---|---|---|---|\n");
        for (int g = 0; g < 4; g++) {
            double dt[4] = {0}, tasks = 0;
            for (int li = 1; li < L - 1; li++)
                for (int b = 0; b < grid; b++) {
                    const int r = K_DECODE_TRACE_GEMM(L, li, g);
                    const double p0 = T(5 * li + g_start[g], b, 1), p4 = T(5 * li + g_start[g] + 1, b, 0);
                    dt[0] += T(r, b, 0) - p0, dt[1] += T(r, b, 1) - T(r, b, 0), dt[2] += T(r, b, 2) - T(r, b, 1);
                    dt[3] += p4 - T(r, b, 2), tasks += T(r, b, 3);
                }
            const double nbl = (double)(L - 2) * grid;
            printf("| %-8s | %8.2f | %8.2f | %8.2f | %8.2f | %6.2f |\n", gn[g], dt[0] / nbl / ghz / 1e3,
                   dt[1] / nbl / ghz / 1e3, dt[2] / nbl / ghz / 1e3, dt[3] / nbl / ghz / 1e3, tasks / nbl);
        }
        printf("attention phase inside (us, layers 1..%d): mean (max) over %d merging and %d other block-layers\n",
               L - 2, nb[1], nb[0]);
        printf("| step                              | mergers        | others         |\n|---|---|---|\n");
        for (int j = 0; j < 5; j++)
            printf("| %-33s | %6.2f (%6.2f) | %6.2f (%6.2f) |\n", pn[j], nb[1] ? sum[1][j] / nb[1] : 0, mxs[1][j],
                   nb[0] ? sum[0][j] / nb[0] : 0, mxs[0][j]);
    }
#undef T
    cudaFree(d);
    free(h);
    free(sb.tok), free(sb.pos), free(sb.slot), free(sb.bt);
    engine_close(&eng);
    k_set_decode_slot(0);
    k_set_decode_groups(0);
    k_set_decode_dynamic(1);
    k_set_decode_inflight(K_DECODE_INFLIGHT_DEFAULT);
}

/* ---- profile: whole steps, kernel by kernel --------------------------------------------------- */

/* Runs `warm` steps, then `steps` more back to back under the trace, with a CUDA event before each
 * and after the last; prints the clocks around and through them, then the trace. */
static void profile_region(engine *eng, eng_step s, int warm, int steps, const char *title,
                           bool by_shape)
{
    assert(steps >= 1 && steps <= PROF_MAX_STEPS);
    cudaStream_t st = engine_cuda_stream(eng);
    cudaEvent_t ev[PROF_MAX_STEPS + 1];
    float wall_ms[PROF_MAX_STEPS];
    step_ctx c = {eng, s};
    for (int i = 0; i <= steps; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < warm; i++) do_step(&c, i);
    CUDA_CHECK(cudaStreamSynchronize(st));
    char when[96];
    snprintf(when, sizeof when, "before %s", title);
    prof_clocks(when);
    prof_watch_start();
    if (prof_begin()) exit(1);
    for (int i = 0; i < steps; i++) {
        CUDA_CHECK(cudaEventRecord(ev[i], st));
        do_step(&c, i);
    }
    CUDA_CHECK(cudaEventRecord(ev[steps], st));
    CUDA_CHECK(cudaEventSynchronize(ev[steps]));
    if (prof_end()) exit(1);
    snprintf(when, sizeof when, "during %s", title);
    prof_watch_stop(when);
    snprintf(when, sizeof when, "after %s", title);
    prof_clocks(when);
    for (int i = 0; i < steps; i++) CUDA_CHECK(cudaEventElapsedTime(&wall_ms[i], ev[i], ev[i + 1]));
    for (int i = 0; i <= steps; i++) CUDA_CHECK(cudaEventDestroy(ev[i]));
    prof_report(title, steps, wall_ms, eng->mc.num_layers, by_shape);
}

/* The 2048-token prefill step and the batch-1 decode step at context 1024 (fused and not), in
 * engines for one sequence as whole_steps runs them. Tracing starts before the first engine so
 * that the decode graphs are captured while it is on. */
static int profile(void)
{
    if (prof_init()) return 1;
    prof_clocks("at start");
    const int bs = 16, S = 2112 / 16;
    engine eng;
    step_buf sb = {0};
    if (open_7b(&eng, 2048, 1, S, false, true, 8, true)) return 1;
    profile_region(&eng, make_step(&sb, 1, 0, 2048, S, bs, 0), 2, 3, "prefill 2048 (1 seq, PDL)", true);
    engine_close(&eng);
    /* The same step in the 64-sequence engine of whole_steps, after filling its KV as there. */
    if (open_7b(&eng, 2048, 64, 65 * S, true, true, 8, true)) return 1;
    fill_kv(&eng, &sb, 64, 2, S, bs);
    profile_region(&eng, make_step(&sb, 1, 0, 2048, S, bs, 64 * S), 2, 3,
                   "prefill 2048 (64-seq engine, 72 GB of KV, PDL)", true);
    engine_close(&eng);
    static const struct { const char *title; bool fuse; } dv[] = {
        {"decode B=1 ctx=1024 (graphs+PDL+fused)", true},
        {"decode B=1 ctx=1024 (graphs+PDL, unfused)", false},
    };
    for (size_t i = 0; i < sizeof dv / sizeof *dv; i++) {
        if (open_7b(&eng, 1024, 1, S, true, true, 8, dv[i].fuse)) return 1;
        fill_kv(&eng, &sb, 1, 1, S, bs);
        profile_region(&eng, make_step(&sb, 1, 1024, 1, S, bs, 0), 20, 20, dv[i].title, false);
        engine_close(&eng);
    }
    free(sb.tok), free(sb.pos), free(sb.slot), free(sb.bt);
    prof_shutdown();
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "bench_engine_gpu: no CUDA device\n");
        return 1;
    }
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    printf("bench_engine_gpu: %s, %d SMs, L2 %d MB, %.0f GB\n\n", p.name, p.multiProcessorCount,
           p.l2CacheSize >> 20, p.totalGlobalMem / 1e9);
    if (!strcmp(what, "profile")) return profile();
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&blas));
    CUBLAS_CHECK(cublasSetStream(blas, stream));
    printf("| kernel / step                  | shape                              | time (ms) | achieved         | of ceil | roofline (ms) |\n");
    printf("|--------------------------------|------------------------------------|-----------|------------------|---------|-----------|\n");
    ceilings();
    if (!strcmp(what, "prefill")) /* one kernel, e.g. for ncu */
        attention(1, 0, 2048, 32, 32, "prefill attention causal");
    if (!strcmp(what, "all") || !strcmp(what, "kernels")) {
        gemms();
        attention(64, 1023, 1, 32, 32, "decode attention (MHA)");
        attention(64, 1023, 1, 32, 8, "decode attention (GQA 4:1)");
        attention(1, 1023, 1, 32, 32, "decode attention (MHA)");
        attention(1, 0, 2048, 32, 32, "prefill attention causal");
        attention(4, 1024, 512, 32, 8, "chunked prefill attention GQA");
        elementwise();
    }
    cudaStream_t own = stream;
    if (!strcmp(what, "all") || !strcmp(what, "steps")) whole_steps();
    if (!strcmp(what, "ab")) decode_ab();
    if (!strcmp(what, "all") || !strcmp(what, "stream")) stream_probe();
    if (!strcmp(what, "all") || !strcmp(what, "consume")) consume_probe();
    if (!strcmp(what, "all") || !strcmp(what, "trace")) {
        const int f0 = K_DECODE_INFLIGHT_DEFAULT;
        decode_trace(1, 0, 0, 1, f0);
        printf("\n(the next: producers never quiet)");
        k_set_decode_quiet(0);
        decode_trace(1, 0, 0, 1, f0);
        k_set_decode_quiet(K_DECODE_QUIET_DEFAULT);
        printf("\n(the next: a grid barrier between the QKV phase and attention, no early q)");
        k_set_decode_early_q(0);
        decode_trace(1, 0, 0, 1, f0);
        k_set_decode_early_q(1);
        decode_trace(1, 0, 0, 0, f0);
        static const int pend[] = {0, 3, 4}; /* other numbers of copies pending per block */
        for (size_t i = 0; i < sizeof pend / sizeof *pend; i++) decode_trace(1, 0, 0, 1, pend[i]);
        decode_trace(1, 44032, 1, 1, f0); /* two rows of the down projection (K = 11008) a slot */
        decode_trace(4, 0, 0, 1, f0);
    }
    stream = own;
    cublasDestroy(blas);
    return 0;
}
