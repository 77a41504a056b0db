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
 * It measures the product as it runs: each kernel at its defaults, and whole engine steps as the
 * engine dispatches them. Kernel variants, probes of the streamed decode kernel's parts and A/B
 * experiments are kernels/dev's (make dev-kernels).
 *
 * usage: bench_engine_gpu [all|kernels|decode|steps|swap|host|prefill|profile]. `decode`: decode
 * attention over batch sizes and contexts, MHA (Llama-2-7B) and GQA 4:1 (Llama-3-8B), each against
 * the copy ceiling. `profile` times no ceilings: it traces whole steps kernel by kernel (CUPTI)
 * and reads the GPU's clocks (NVML); see profile_gpu.c for how to read it.
 */
#include <assert.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h> /* not pthread.h: with -Icore, its <sched.h> is core/sched.h */
#include <time.h>

#include "core/clock.h"
#include "core/util.h"
#include "engine/bench/profile_gpu.h"
#include "engine/cuda_libs.h"
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
        /* The weight-streaming kernel against cuBLAS at decode-sized M: where the engine
         * switches from one to the other (SKINNY_MAX_ROWS in cuda_backend.c). */
        int Ms[] = {1, 2, 4, 8, 16};
        for (int mi = 0; mi < 5; mi++) {
            g.M = Ms[mi];
            snprintf(shape, sizeof shape, "M=%d N=%d K=%d", g.M, g.N, g.K);
            char name[64];
            double t;
            if (g.M <= 8) {
                t = time_it(do_skinny, &g, 20, 15);
                snprintf(name, sizeof name, "skinny GEMM %s", shapes[s].name);
                row(name, shape, t, (double)wbytes, "GB/s", copy_bw, wbytes / copy_bw);
            }
            t = time_it(do_cublas, &g, 20, 15);
            snprintf(name, sizeof name, "cuBLAS GEMM %s", shapes[s].name);
            row(name, shape, t, (double)wbytes, "GB/s", copy_bw, wbytes / copy_bw);
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

/* B sequences of ctx cached tokens each, n new rows each (n == 1: decode), in KV blocks of bs
 * tokens. */
static void attention(int B, int ctx, int n, int nh, int nkv, int bs, const char *label)
{
    int hd = 128, len = ctx + n, S = (len + bs - 1) / bs, T = B * n;
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
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    x.partition = k_decode_partition(nh, nkv, B, len, sms, INT64_MAX); /* the engine's rule */
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
    char shape[80], part[16] = "", block[16] = "";
    if (n == 1) snprintf(part, sizeof part, " P=%d", x.partition);
    if (bs != 16) snprintf(block, sizeof block, " bs %d", bs);
    snprintf(shape, sizeof shape, "B=%d ctx=%d n=%d heads %d/%d hd 128%s%s", B, ctx, n, nh, nkv, part, block);
    if (n == 1) {
        double bytes = 2.0 * B * len * nkv * hd * 2;
        double t = time_it(do_decode, &x, 10, 15);
        row(label, shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    } else {
        /* causal pairs: row i sees ctx + i + 1 keys; 2 matmuls of 2*hd FLOPs per pair */
        double pairs = (double)B * ((double)n * ctx + (double)n * (n + 1) / 2);
        double flops = 4.0 * hd * nh * pairs;
        double t = time_it(do_prefill, &x, 3, 9);
        row(label, shape, t, flops, "TFLOP/s", gemm_rate, flops / gemm_rate);
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
    CUDA_CHECK(k_embed(e->w, e->tok, NULL, e->T, e->h, e->x[i % 4], stream));
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
        CUDA_CHECK(k_embed(e.w, e.tok, NULL, T, h, e.x[i], stream));
        CUDA_CHECK(k_embed(e.w, e.tok, NULL, T, h, e.d[i], stream));
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

/* Step arrays for B sequences each computing n rows after ctx cached ones. A block table row
 * is S wide (max_model_len's blocks); sequence b owns the `own` blocks from first_block + b*own,
 * and its entries past them (never read: ctx + n must fit in own blocks) repeat its first. */
typedef struct step_buf { int32_t *tok, *pos, *slot, qsl[257], lens[256], *bt, rows[256]; } step_buf;
static eng_step make_step(step_buf *sb, int B, int ctx, int n, int S, int own, int bs, int32_t first_block)
{
    int T = B * n;
    sb->tok = realloc(sb->tok, sizeof(int32_t) * (size_t)T);
    sb->pos = realloc(sb->pos, sizeof(int32_t) * (size_t)T);
    sb->slot = realloc(sb->slot, sizeof(int32_t) * (size_t)T);
    sb->bt = realloc(sb->bt, sizeof(int32_t) * (size_t)B * S);
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < S; k++) sb->bt[b * S + k] = first_block + b * own + (k < own ? k : 0);
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

/* Fills the KV of sequences 0..nseqs-1 (own blocks each, from block 0) with 1024 tokens,
 * per_step sequences a step. */
static void fill_kv(engine *eng, step_buf *sb, int nseqs, int per_step, int S, int own, int bs)
{
    for (int b = 0; b < nseqs; b += per_step)
        do_step(&(step_ctx){eng, make_step(sb, per_step, 0, 1024, S, own, bs, b * own)}, 0);
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
 * hundred ms: in the 64-sequence engine the step came right after filling its KV (tens of GB), and the
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
/* Blocks a decode sequence owns: its 1024 cached tokens and the step's own, in 16-token blocks
 * (whole_steps' 64 of them take 35 GB, so that the engine fits an 80 GB H100 too). */
#define DECODE_OWN (1040 / 16)

static int open_7b_swap(engine *eng, int max_tokens, int max_seqs, int num_blocks, bool graphs, int host_blocks)
{
    engine_opts o;
    engine_opts_default(&o);
    o.model = "synthetic:llama-2-7b";
    o.backend = "cuda";
    o.weight_seed = 1;
    o.max_tokens = max_tokens;
    o.max_seqs = max_seqs;
    o.max_model_len = 2112;
    o.num_blocks = num_blocks;
    o.num_host_blocks = host_blocks;
    o.cuda_graphs = graphs;
    terr e = {{0}};
    int rc = engine_open(eng, &o, &e);
    if (rc) fprintf(stderr, "bench: %s\n", e.msg);
    return rc;
}

static int open_7b(engine *eng, int max_tokens, int max_seqs, int num_blocks, bool graphs)
{
    return open_7b_swap(eng, max_tokens, max_seqs, num_blocks, graphs, 0);
}

/* Swap: n blocks out to the pinned pool, then back in, each timed to completion (the swap stream
 * is the engine's own, so the device is synchronised). Bandwidth against the host link the cost
 * model assumes (sim/gpu.c). */
static void swaps(void)
{
    enum { HOST = 512 };
    engine eng;
    if (open_7b_swap(&eng, 256, 16, 1024, false, HOST)) exit(1);
    const double block_bytes = KV_TOK_7B * 16;
    int32_t dev[HOST], host[HOST];
    for (int i = 0; i < HOST; i++) dev[i] = (i * 7) % 1024, host[i] = i; /* scattered device blocks */
    static const int counts[] = {1, 16, 128, 512};
    terr e = {{0}};
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
        for (int to_host = 1; to_host >= 0; to_host--) {
            const int n = counts[k], reps = 9;
            double ts[9];
            for (int r = 0; r < reps; r++) {
                CUDA_CHECK(cudaDeviceSynchronize());
                double t0 = (double)clock_mono_ns() / 1e9;
                if (engine_swap(&eng, to_host, n, dev, host, &e)) {
                    fprintf(stderr, "bench: %s\n", e.msg);
                    exit(1);
                }
                CUDA_CHECK(cudaDeviceSynchronize());
                ts[r] = (double)clock_mono_ns() / 1e9 - t0;
            }
            qsort(ts, reps, sizeof *ts, cmp_d);
            char name[48], shape[96];
            snprintf(name, sizeof name, "SWAP %s %d blocks", to_host ? "out" : "in", n);
            snprintf(shape, sizeof shape, "%.1f MB, pinned, batched copy", n * block_bytes / 1e6);
            row(name, shape, ts[reps / 2], n * block_bytes, "GB/s", 55e9, n * block_bytes / 55e9);
        }
    engine_close(&eng);
}

/* How the engine runs a pure-decode step of B sequences (cuda_backend.c). */
/* (SKINNY_MAX_ROWS there) */
static const char *decode_path(int B) { return B <= K_DECODE_STREAM_MAX_SEQS ? "persistent" : "cuBLAS"; }

static void whole_steps(void)
{
    const int bs = 16, S = 2112 / 16, D = DECODE_OWN;
    const double wbytes = WBYTES_7B, kv_tok = KV_TOK_7B;
    engine eng;
    /* 64 decode sequences of D blocks, then a 2048-token prefill sequence of S. */
    if (open_7b(&eng, 2048, 64, 64 * D + S, true)) exit(1);
    step_buf sb = {0};
    fill_kv(&eng, &sb, 64, 2, S, D, bs);
    char shape[96];
    eng_step s = make_step(&sb, 1, 0, 2048, S, S, bs, 64 * D);
    double t = time_prefill(&eng, s);
    double flops = 2.0 * 2048 * (wbytes / 2 - 32000.0 * 4096) + 4.0 * 128 * 32 * 32 * (2048.0 * 2049 / 2);
    row("STEP prefill 2048 (1 seq)", "llama-2-7b synthetic, T=2048", t, flops, "TFLOP/s", gemm_rate,
        flops / gemm_rate);
    int ctxs[2] = {128, 1024};
    for (int k = 0; k < 2; k++) {
        s = make_step(&sb, 1, ctxs[k], 1, S, D, bs, 0);
        t = time_step(&eng, s, 20, 9);
        double bytes = wbytes + kv_tok * (ctxs[k] + 1);
        snprintf(shape, sizeof shape, "B=1 ctx=%d graphs, %s", ctxs[k], decode_path(1));
        row("STEP decode batch 1", shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    }
    static const int batches[] = {2, 4, 8, 12, 16, 24, 32, 64};
    for (size_t k = 0; k < sizeof batches / sizeof *batches; k++) {
        const int B = batches[k];
        s = make_step(&sb, B, 1024, 1, S, D, bs, 0);
        t = time_step(&eng, s, B >= 32 ? 5 : 10, 9);
        double bytes = wbytes + B * kv_tok * 1025;
        char name[32];
        snprintf(name, sizeof name, "STEP decode batch %d", B);
        snprintf(shape, sizeof shape, "B=%d ctx=1024 graphs, %s", B, decode_path(B));
        row(name, shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
    }
    engine_close(&eng);

    /* The batch-1 decode step in an engine for one sequence (small KV), with and without graphs. */
    for (int graphs = 1; graphs >= 0; graphs--) {
        if (open_7b(&eng, 1024, 1, S, graphs)) exit(1);
        fill_kv(&eng, &sb, 1, 1, S, S, bs);
        s = make_step(&sb, 1, 1024, 1, S, S, bs, 0);
        t = time_step(&eng, s, 20, 9);
        snprintf(shape, sizeof shape, "B=1 ctx=1024 1-seq engine, %s, %s", graphs ? "graphs" : "no graphs",
                 decode_path(1));
        double bytes = wbytes + kv_tok * 1025;
        row("STEP decode batch 1", shape, t, bytes, "GB/s", copy_bw, bytes / copy_bw);
        engine_close(&eng);
    }
    /* The prefill step in an engine sized for one sequence (1 GB of KV instead of 35). */
    if (open_7b(&eng, 2048, 1, S, false)) exit(1);
    s = make_step(&sb, 1, 0, 2048, S, S, bs, 0);
    t = time_prefill(&eng, s);
    row("STEP prefill 2048 (1 seq)", "T=2048, 1-seq engine", t, flops, "TFLOP/s", gemm_rate, flops / gemm_rate);
    engine_close(&eng);
    free(sb.tok), free(sb.pos), free(sb.slot), free(sb.bt);
}

/* ---- host: what a decode step costs the CPU ---------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Median and p90 of n host durations, in microseconds. */
static void host_row(const char *what, int B, int64_t *ns, int n)
{
    qsort(ns, (size_t)n, sizeof *ns, cmp_i64);
    printf("| %-36s | %4d | %8.1f | %8.1f |\n", what, B, ns[n / 2] / 1e3, ns[n * 9 / 10] / 1e3);
    fflush(stdout);
}

/* One tiny kernel, the node a launch-cost graph repeats. */
static void do_tiny(void *c, int i)
{
    CUDA_CHECK(k_synth_bf16(c, 1, 7, (uint32_t)i, 0.0f, 0.5f, stream));
}

#if TANDEM_HAVE_CUPTI
/* The forward call's host time by CUDA runtime call, from CUPTI's runtime activity records
 * (each call's start and end on CUPTI's clock): the calls that begin inside a forward call's
 * window, against the window's length. */
enum { API_MAX_RECS = 1 << 16, API_MAX_KINDS = 32 };
typedef struct api_rec {
    uint64_t start_ns, end_ns;
    uint32_t cbid;
} api_rec;
typedef struct api_kind {
    uint32_t cbid;
    int64_t calls, ns; /* summed over the windows */
} api_kind;
static api_rec *api_recs; /* (API_MAX_RECS) */
static int api_n;
static mtx_t api_lock; /* records arrive on CUPTI's thread, or in a flush */

static int api_by_start(const void *pa, const void *pb)
{
    const api_rec *a = pa, *b = pb;
    return (a->start_ns > b->start_ns) - (a->start_ns < b->start_ns);
}

static void api_take(void *ud, const CUpti_Activity *r)
{
    (void)ud;
    if (r->kind != CUPTI_ACTIVITY_KIND_RUNTIME) return;
    const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
    mtx_lock(&api_lock);
    if (api_n < API_MAX_RECS && a->start) api_recs[api_n++] = (api_rec){a->start, a->end, a->cbid};
    mtx_unlock(&api_lock);
}

/* The runtime calls a forward call makes, by name; NULL for another. */
static const char *api_name(uint32_t cbid)
{
    switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000: return "cudaGraphLaunch";
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020: return "cudaMemcpyAsync";
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020: return "cudaEventRecord";
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020: return "cudaEventSynchronize";
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020: return "cudaStreamWaitEvent";
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000: return "cudaLaunchKernel";
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060: return "cudaLaunchKernelExC";
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020: return "cudaMemsetAsync";
    default: return NULL;
    }
}

/* Runs `samples` forward calls of step s, each followed (outside its window) by the sync and the
 * sampling a step pays, with the runtime records on, and prints each runtime call's part of the
 * forward call: calls and microseconds a step (means); the rest is the engine's own host code
 * (the checks, filling the step arrays). Recording costs each call a little, so the total runs
 * above the plain forward call's. */
static void host_api_split(engine *eng, const eng_step *s, const eng_sampling *sp, int32_t *picked, int samples)
{
    terr e = {{0}};
    const cuda_cupti *cupti = cuda_cupti_get(&e);
    uint64_t(*win)[2] = malloc(sizeof *win * (size_t)samples);
    api_recs = malloc(sizeof *api_recs * API_MAX_RECS);
    bool traced = false, locked = false;
    api_kind kinds[API_MAX_KINDS];
    int nk = 0, done = 0;
    int64_t window_ns = 0, api_ns = 0;
    if (!cupti || !win || !api_recs || mtx_init(&api_lock, mtx_plain) != thrd_success) goto out;
    locked = true;
    if (ktrace_open(api_take, NULL, &e)) goto out;
    traced = true;
    if (ktrace_enable(CUPTI_ACTIVITY_KIND_RUNTIME, &e) || ktrace_flush(&e)) goto out;
    mtx_lock(&api_lock);
    api_n = 0;
    mtx_unlock(&api_lock);
    for (; done < samples; done++) {
        cupti->cuptiGetTimestamp(&win[done][0]);
        if (engine_forward(eng, s, &e)) goto out;
        cupti->cuptiGetTimestamp(&win[done][1]);
        if (engine_sync(eng, &e) || engine_sample(eng, sp, picked, &e)) goto out;
    }
    if (ktrace_flush(&e)) goto out;
    for (int w = 0; w < done; w++) window_ns += (int64_t)(win[w][1] - win[w][0]);
    mtx_lock(&api_lock);
    qsort(api_recs, (size_t)api_n, sizeof *api_recs, api_by_start);
    for (int i = 0, w = 0; i < api_n; i++) {
        const api_rec *a = &api_recs[i];
        while (w < done && win[w][1] < a->start_ns) w++;
        if (w == done || a->start_ns < win[w][0]) continue; /* the sync's, the sampling's */
        int k = 0;
        while (k < nk && kinds[k].cbid != a->cbid) k++;
        if (k == nk) {
            if (nk == API_MAX_KINDS) continue;
            kinds[nk++] = (api_kind){a->cbid, 0, 0};
        }
        kinds[k].calls++, kinds[k].ns += (int64_t)(a->end_ns - a->start_ns);
        api_ns += (int64_t)(a->end_ns - a->start_ns);
    }
    mtx_unlock(&api_lock);
    printf("| forward call of %d sequences, by runtime call (CUPTI) | calls a step | us a step | share |\n", s->num_seqs);
    printf("|------------------------------------------------------|-------------|-----------|-------|\n");
    for (int k = 0; k < nk; k++) {
        char what[64];
        const char *name = api_name(kinds[k].cbid);
        if (name) snprintf(what, sizeof what, "%s", name);
        else snprintf(what, sizeof what, "runtime call, cbid %u", kinds[k].cbid);
        printf("| %-52s | %11.1f | %9.1f | %4.0f%% |\n", what, (double)kinds[k].calls / done,
               (double)kinds[k].ns / 1e3 / done, 100.0 * (double)kinds[k].ns / (double)window_ns);
    }
    printf("| %-52s | %11s | %9.1f | %4.0f%% |\n", "the engine's own host code (the rest)", "",
           (double)(window_ns - api_ns) / 1e3 / done, 100.0 * (double)(window_ns - api_ns) / (double)window_ns);
    printf("| %-52s | %11s | %9.1f |       |\n", "the forward call, traced", "", (double)window_ns / 1e3 / done);
out:
    if (e.msg[0] || !locked) printf("host split by runtime call: not measured (%s)\n", e.msg[0] ? e.msg : "no memory");
    if (traced) ktrace_close();
    if (locked) mtx_destroy(&api_lock);
    free(win), free(api_recs), api_recs = NULL;
    fflush(stdout);
}
#endif

/* The host side of a decode step, as `tandem run` pays it between the scheduler and the GPU: the
 * engine's forward call (the step arrays copied into pinned memory, one copy up, the graph
 * launched) and its sampling call once the forward pass is done (arguments up, the sampling
 * kernel, tokens down), each timed on the host with the device idle before it, at context 600 in
 * an engine of 256 sequences and Llama-2-7B's max_model_len. Beside them, what a copy up from
 * pinned memory and a launch of a captured graph of K tiny kernels cost the host alone, so the
 * forward call's time can be split into its parts; and, where CUPTI loads, the forward call at
 * 256 sequences split by runtime call (host_api_split). */
static void host_costs(void)
{
    enum { SAMPLES = 60, CTX = 600, BS = 16, OWN = (CTX + 1 + BS - 1) / BS, MAX_LEN = 4096, SHARED = 8 };
    const int max_seqs = 256, S = MAX_LEN / BS;
    engine eng;
    engine_opts o;
    engine_opts_default(&o);
    o.model = "synthetic:llama-2-7b";
    o.backend = "cuda";
    o.weight_seed = 1;
    o.max_tokens = 2048;
    o.max_seqs = max_seqs;
    o.max_model_len = MAX_LEN;
    o.num_blocks = SHARED * OWN + 1; /* sequences share blocks: the host's work is the same */
    terr oe = {{0}};
    if (engine_open(&eng, &o, &oe)) {
        fprintf(stderr, "bench: %s\n", oe.msg);
        exit(1);
    }
    stream = engine_cuda_stream(&eng);
    int32_t *tok = malloc(sizeof(int32_t) * 5 * max_seqs), *pos = tok + max_seqs, *slot = pos + max_seqs,
            *lens = slot + max_seqs, *rows = lens + max_seqs, qsl[257];
    int32_t *bt = calloc((size_t)max_seqs * S, sizeof *bt), *picked = malloc(sizeof(int32_t) * max_seqs);
    float *samp = calloc((size_t)3 * max_seqs, sizeof *samp);
    for (int b = 0; b < max_seqs; b++) {
        for (int k = 0; k < OWN; k++) bt[b * S + k] = (b % SHARED) * OWN + k;
        tok[b] = (int32_t)((b * 2654435761u) % 32000u);
        pos[b] = CTX;
        slot[b] = bt[b * S + CTX / BS] * BS + CTX % BS;
        lens[b] = CTX + 1;
        rows[b] = qsl[b] = b;
    }
    printf("| host, decode step at context %d      | B    | median us | p90 us  |\n", CTX);
    printf("|--------------------------------------|------|----------|----------|\n");
    static const int batches[] = {1, 8, 32, 64, 128, 256};
    int64_t fwd[SAMPLES], smp[SAMPLES];
    for (size_t k = 0; k < sizeof batches / sizeof *batches; k++) {
        const int B = batches[k];
        qsl[B] = B;
        eng_step s = {.num_tokens = B, .num_seqs = B, .token_ids = tok, .positions = pos, .slot_mapping = slot,
                      .query_start_loc = qsl, .seq_lens = lens, .block_tables = bt, .block_table_stride = S,
                      .num_logits = B, .logits_rows = rows};
        eng_sampling sp = {.temperature = samp, .top_p = samp + max_seqs, .uniform = samp + 2 * max_seqs};
        for (int i = 0; i < max_seqs; i++) samp[max_seqs + i] = 1.0f;
        terr e = {{0}};
        for (int r = -5; r < SAMPLES; r++) { /* 5 warm-up steps: the graph's first launch */
            int64_t t0 = clock_mono_ns();
            if (engine_forward(&eng, &s, &e)) break;
            int64_t t1 = clock_mono_ns();
            if (engine_sync(&eng, &e)) break; /* sampling waits for the forward pass: not host time */
            int64_t t2 = clock_mono_ns();
            if (engine_sample(&eng, &sp, picked, &e)) break;
            if (r >= 0) fwd[r] = t1 - t0, smp[r] = clock_mono_ns() - t2;
        }
        if (e.msg[0]) {
            fprintf(stderr, "bench: %s\n", e.msg);
            exit(1);
        }
        host_row("forward call (prepare, copy, launch)", B, fwd, SAMPLES);
        host_row("sample call (kernel, tokens down)", B, smp, SAMPLES);
#if TANDEM_HAVE_CUPTI
        if (B == max_seqs) host_api_split(&eng, &s, &sp, picked, SAMPLES);
#endif
    }
    engine_close(&eng);
    free(tok), free(bt), free(picked), free(samp);

    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    enum { COPY_MAX = 1 << 20 };
    void *pinned, *dev;
    CUDA_CHECK(cudaMallocHost(&pinned, COPY_MAX));
    CUDA_CHECK(cudaMalloc(&dev, COPY_MAX));
    memset(pinned, 1, COPY_MAX);
    for (int kb = 4; kb <= COPY_MAX >> 10; kb *= 4) {
        int64_t ns[SAMPLES];
        for (int r = -5; r < SAMPLES; r++) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            int64_t t0 = clock_mono_ns();
            CUDA_CHECK(cudaMemcpyAsync(dev, pinned, (size_t)kb << 10, cudaMemcpyHostToDevice, stream));
            if (r >= 0) ns[r] = clock_mono_ns() - t0;
        }
        char what[64];
        snprintf(what, sizeof what, "copy up from pinned, %d KiB (call)", kb);
        host_row(what, 0, ns, SAMPLES);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    /* The forward call writes its step arrays into pinned memory row by row: what that costs
     * against ordinary memory, and against one bulk copy in. */
    int32_t *plain = malloc(COPY_MAX), *src = malloc(COPY_MAX);
    memset(plain, 1, COPY_MAX), memset(src, 2, COPY_MAX);
    for (int where = 0; where < 3; where++) {
        int64_t ns[SAMPLES];
        int32_t *dst = where == 1 ? plain : pinned;
        for (int r = -5; r < SAMPLES; r++) {
            int64_t t0 = clock_mono_ns();
            if (where == 2)
                memcpy(dst, src, (size_t)max_seqs * OWN * 4 + 6 * 257 * 4);
            else
                for (int b = 0; b < max_seqs; b++) {
                    dst[b] = b, dst[max_seqs + b] = CTX, dst[2 * max_seqs + b] = b * 7;
                    memcpy(dst + 4 * max_seqs + (size_t)b * OWN, src + (size_t)b * S, OWN * 4);
                }
            if (r >= 0) ns[r] = clock_mono_ns() - t0;
            __asm__ volatile("" ::: "memory");
        }
        static const char *const what[] = {"256 rows written into pinned memory", "256 rows written into malloc'd memory",
                                           "the same bytes, one memcpy into pinned"};
        host_row(what[where], max_seqs, ns, SAMPLES);
    }
    free(plain), free(src);
    cudaFreeHost(pinned), cudaFree(dev);
    void *one;
    CUDA_CHECK(cudaMalloc(&one, 16));
    static const int nodes[] = {1, 64, 256, 512};
    for (size_t k = 0; k < sizeof nodes / sizeof *nodes; k++) {
        cudaGraph_t g;
        cudaGraphExec_t x;
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < nodes[k]; i++) do_tiny(one, i);
        CUDA_CHECK(cudaStreamEndCapture(stream, &g));
        CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
        CUDA_CHECK(cudaGraphUpload(x, stream));
        int64_t ns[SAMPLES];
        for (int r = -5; r < SAMPLES; r++) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            int64_t t0 = clock_mono_ns();
            CUDA_CHECK(cudaGraphLaunch(x, stream));
            if (r >= 0) ns[r] = clock_mono_ns() - t0;
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        char what[64];
        snprintf(what, sizeof what, "graph launch, %d tiny kernels", nodes[k]);
        host_row(what, 0, ns, SAMPLES);
        cudaGraphExecDestroy(x), cudaGraphDestroy(g);
    }
    cudaFree(one);
    cudaStreamDestroy(stream);
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

/* The 2048-token prefill step (in an engine for one sequence and in whole_steps' 64-sequence
 * engine) and decode steps at context 1024 by the persistent kernel and by the fused path.
 * Tracing starts before the first engine so that the decode graphs are captured while it is on. */
static int profile(void)
{
    if (prof_init()) return 1;
    prof_clocks("at start");
    const int bs = 16, S = 2112 / 16, D = DECODE_OWN;
    engine eng;
    step_buf sb = {0};
    if (open_7b(&eng, 2048, 1, S, false)) return 1;
    profile_region(&eng, make_step(&sb, 1, 0, 2048, S, S, bs, 0), 2, 3, "prefill 2048 (1 seq)", true);
    engine_close(&eng);
    /* The same step in the 64-sequence engine of whole_steps, after filling its KV as there. */
    if (open_7b(&eng, 2048, 64, 64 * D + S, true)) return 1;
    fill_kv(&eng, &sb, 64, 2, S, D, bs);
    profile_region(&eng, make_step(&sb, 1, 0, 2048, S, S, bs, 64 * D), 2, 3,
                   "prefill 2048 (64-seq engine, 35 GB of KV)", true);
    /* Decode steps of 1 (the persistent kernel) and 4 sequences (five fused kernels a layer). */
    profile_region(&eng, make_step(&sb, 1, 1024, 1, S, D, bs, 0), 20, 20, "decode B=1 ctx=1024 (graphs, persistent)",
                   false);
    profile_region(&eng, make_step(&sb, 4, 1024, 1, S, D, bs, 0), 20, 20, "decode B=4 ctx=1024 (graphs, fused)", false);
    engine_close(&eng);
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
        attention(1, 0, 2048, 32, 32, 16, "prefill attention causal");
    if (!strcmp(what, "all") || !strcmp(what, "kernels")) {
        gemms();
        attention(64, 1023, 1, 32, 32, 16, "decode attention (MHA)");
        attention(64, 1023, 1, 32, 8, 16, "decode attention (GQA 4:1)");
        attention(1, 1023, 1, 32, 32, 16, "decode attention (MHA)");
        attention(1, 0, 2048, 32, 32, 16, "prefill attention causal");
        /* a block size that is not a power of two: the mma.sync kernel, wgmma's fallback */
        attention(1, 0, 2048, 32, 32, 24, "prefill attention causal, mma.sync");
        attention(4, 1024, 512, 32, 8, 16, "chunked prefill attention GQA");
        elementwise();
    }
    if (!strcmp(what, "all") || !strcmp(what, "decode")) {
        static const int batches[] = {1, 2, 4, 8, 16, 32, 64, 128};
        for (size_t i = 0; i < ARRAY_LEN(batches); i++) {
            attention(batches[i], 2048, 1, 32, 32, 16, "decode attention (MHA)");
            attention(batches[i], 2048, 1, 32, 8, 16, "decode attention (GQA 4:1)");
            if (batches[i] == 4 || batches[i] == 32) {
                attention(batches[i], 512, 1, 32, 8, 16, "decode attention (GQA 4:1)");
                attention(batches[i], 8191, 1, 32, 8, 16, "decode attention (GQA 4:1)");
            }
        }
    }
    cudaStream_t own = stream;
    if (!strcmp(what, "all") || !strcmp(what, "steps")) whole_steps();
    if (!strcmp(what, "all") || !strcmp(what, "swap")) swaps();
    if (!strcmp(what, "all") || !strcmp(what, "host")) host_costs();
    stream = own;
    cublasDestroy(blas);
    return 0;
}
