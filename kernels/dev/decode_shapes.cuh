// decode_shapes.cuh: what the decode attention labs (decode_partitions.cu, gqa_decode_mma.cu,
// decode_phases.cu) share: their heads, block size and stream; a batch of decode rows laid out as
// the engine's paged cache (scattered blocks, K/V copies that rotate so that no launch reads from
// L2, the synthetic values of kernels/numerics.h); and attention over it in double precision on
// the host, the reference every kernel is checked against. Include after kernels/attention.cu
// (whose templates name a parameter HD).
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_check.h"
#include "kernels/numerics.h"

#define HD 128                   // head dim: Llama-2-7B's and Llama-3-8B's
#define NH 32                    // query heads
#define BS 16                    // tokens a KV block
#define POOL_BYTES (512ll << 20) // K/V copies rotate over at least this much

static cudaStream_t st; // every launch and copy of a lab
static int failures;    // checks that failed

// One shape: B sequences (lengths lens), nkv KV heads, the K/V of one copy laid out as the
// engine's paged cache with scattered blocks, `copies` copies of it back to back in kv.
typedef struct shape {
    int B, nkv, max_len, blocks, copies, next, P, max_parts;
    int kernel; // which kernel a program's launcher runs (0: the shipped one)
    int32_t *d_dec, *d_qsl, *d_lens, *d_bt, *counters;
    float *qkv, *partials;
    bf16_t *kv, *out;
    int64_t copy_elems; // bf16 elements of one copy's K (V follows it)
} shape;

static void shape_open(shape *s, int B, const int *lens, int nkv, int64_t pool_bytes)
{
    memset(s, 0, sizeof *s);
    s->B = B, s->nkv = nkv;
    int S = 0;
    for (int b = 0; b < B; b++) s->max_len = lens[b] > s->max_len ? lens[b] : s->max_len;
    S = (s->max_len + BS - 1) / BS;
    s->blocks = B * S;
    s->copy_elems = (int64_t)s->blocks * BS * nkv * HD;
    int64_t copy_bytes = 2 * s->copy_elems * 2;
    s->copies = (int)((pool_bytes + copy_bytes - 1) / copy_bytes);
    if (s->copies < 1) s->copies = 1;
    int32_t *bt = (int32_t *)malloc(sizeof(int32_t) * (size_t)s->blocks), dec[256], qsl[257];
    for (int i = 0; i < s->blocks; i++) bt[i] = (int32_t)((i * 7919LL) % s->blocks); // scattered pages
    for (int b = 0; b < B; b++) dec[b] = b, qsl[b] = b;
    qsl[B] = B;
    CUDA_CHECK(cudaMalloc((void **)&s->d_bt, sizeof(int32_t) * (size_t)s->blocks));
    CUDA_CHECK(cudaMalloc((void **)&s->d_dec, sizeof(int32_t) * (size_t)B));
    CUDA_CHECK(cudaMalloc((void **)&s->d_qsl, sizeof(int32_t) * (size_t)(B + 1)));
    CUDA_CHECK(cudaMalloc((void **)&s->d_lens, sizeof(int32_t) * (size_t)B));
    CUDA_CHECK(cudaMemcpy(s->d_bt, bt, sizeof(int32_t) * (size_t)s->blocks, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s->d_dec, dec, sizeof(int32_t) * (size_t)B, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s->d_qsl, qsl, sizeof(int32_t) * (size_t)(B + 1), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s->d_lens, lens, sizeof(int32_t) * (size_t)B, cudaMemcpyHostToDevice));
    free(bt);
    const int stride = (NH + 2 * nkv) * HD;
    CUDA_CHECK(cudaMalloc((void **)&s->qkv, sizeof(float) * (size_t)B * stride));
    float *q = (float *)malloc(sizeof(float) * (size_t)B * stride);
    for (int64_t i = 0; i < (int64_t)B * stride; i++) q[i] = bf16_to_f32(synth_weight_bf16(5, 1, (uint64_t)i, 0, 0.5f));
    CUDA_CHECK(cudaMemcpy(s->qkv, q, sizeof(float) * (size_t)B * stride, cudaMemcpyHostToDevice));
    free(q);
    CUDA_CHECK(cudaMalloc((void **)&s->kv, (size_t)(2 * s->copy_elems * s->copies) * 2));
    // every copy holds the same values (the synthetic hash of the index within the copy)
    for (int c = 0; c < s->copies; c++)
        CUDA_CHECK(k_synth_bf16(s->kv + 2 * s->copy_elems * c, 2 * s->copy_elems, 5, 2, 0, 0.5f, st));
    CUDA_CHECK(cudaMalloc((void **)&s->out, sizeof(bf16_t) * (size_t)B * NH * HD));
    CUDA_CHECK(cudaMalloc((void **)&s->partials, sizeof(float) * (size_t)B * NH * ((s->max_len + 31) / 32) * (HD + 2)));
    CUDA_CHECK(cudaMalloc((void **)&s->counters, sizeof(int32_t) * (size_t)B * NH));
    CUDA_CHECK(cudaMemset(s->counters, 0, sizeof(int32_t) * (size_t)B * NH));
    CUDA_CHECK(cudaStreamSynchronize(st));
}

static void shape_close(shape *s)
{
    cudaFree(s->d_bt), cudaFree(s->d_dec), cudaFree(s->d_qsl), cudaFree(s->d_lens), cudaFree(s->qkv);
    cudaFree(s->kv), cudaFree(s->out), cudaFree(s->partials), cudaFree(s->counters);
}

// The attention arguments for the next K/V copy (copies rotate, so that no launch reads from L2).
static k_attn_args shape_next_args(shape *s)
{
    const bf16_t *k = s->kv + 2 * s->copy_elems * s->next;
    s->next = (s->next + 1) % s->copies;
    k_attn_args a = {.qkv = s->qkv, .qkv_stride = (NH + 2 * s->nkv) * HD, .k_cache = k, .v_cache = k + s->copy_elems,
                     .out = s->out, .out_stride = NH * HD, .query_start_loc = s->d_qsl, .seq_lens = s->d_lens,
                     .block_tables = s->d_bt, .bt_stride = (s->max_len + BS - 1) / BS, .nh = NH, .nkv = s->nkv,
                     .hd = HD, .block_size = BS, .scale = 1.0f / sqrtf((float)HD)};
    return a;
}

// Attention of shape s (lens as opened) in double precision on the host: (B, NH, HD), malloc'd.
static double *shape_reference(const shape *s, const int *lens)
{
    const int B = s->B, nkv = s->nkv, stride = (NH + 2 * nkv) * HD, S = (s->max_len + BS - 1) / BS;
    const int64_t n2 = 2 * s->copy_elems;
    bf16_t *kv = (bf16_t *)malloc(sizeof(bf16_t) * (size_t)n2);
    for (int64_t i = 0; i < n2; i++) kv[i] = synth_weight_bf16(5, 2, (uint64_t)i, 0, 0.5f);
    float *q = (float *)malloc(sizeof(float) * (size_t)B * stride);
    CUDA_CHECK(cudaMemcpyAsync(q, s->qkv, sizeof(float) * (size_t)B * stride, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    double *ref = (double *)calloc((size_t)B * NH * HD, sizeof(double)), *w = (double *)malloc(sizeof(double) * (size_t)s->max_len);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / (NH / nkv);
            double m = -INFINITY, l = 0;
            for (int t = 0; t < lens[b]; t++) {
                const int64_t slot = (int64_t)((b * S + t / BS) * 7919LL % s->blocks) * BS + t % BS;
                const bf16_t *kr = kv + (slot * nkv + kvh) * HD;
                double dot = 0;
                for (int d = 0; d < HD; d++) dot += (double)q[(int64_t)b * stride + h * HD + d] * bf16_to_f32(kr[d]);
                w[t] = dot / sqrt((double)HD);
                m = w[t] > m ? w[t] : m;
            }
            for (int t = 0; t < lens[b]; t++) l += (w[t] = exp(w[t] - m));
            for (int t = 0; t < lens[b]; t++) {
                const int64_t slot = (int64_t)((b * S + t / BS) * 7919LL % s->blocks) * BS + t % BS;
                const bf16_t *vr = kv + s->copy_elems + (slot * nkv + kvh) * HD;
                for (int d = 0; d < HD; d++) ref[((int64_t)b * NH + h) * HD + d] += w[t] / l * bf16_to_f32(vr[d]);
            }
        }
    free(kv), free(q), free(w);
    return ref;
}

// Relative L2 distance of the bf16 output of shape s (downloaded) from ref.
static double shape_rel_l2(const shape *s, const double *ref)
{
    const int64_t n = (int64_t)s->B * NH * HD;
    bf16_t *out = (bf16_t *)malloc(sizeof(bf16_t) * (size_t)n);
    CUDA_CHECK(cudaMemcpyAsync(out, s->out, sizeof(bf16_t) * (size_t)n, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = bf16_to_f32(out[i]) - ref[i];
        num += d * d, den += ref[i] * ref[i];
    }
    free(out);
    return sqrt(num / den);
}

// One check: launch(s) at s's partition against ref, printed as "check LABEL: heads, lengths, P,
// rel L2, ok"; counts a failure (rel L2 >= 1e-2) in *failures.
static void shape_check(shape *s, const double *ref, const int *lens, void (*launch)(void *), const char *label,
                        int *failures)
{
    s->max_parts = (s->max_len + s->P - 1) / s->P, s->next = 0;
    CUDA_CHECK(cudaMemsetAsync(s->out, 0, sizeof(bf16_t) * (size_t)s->B * NH * HD, st));
    launch(s);
    const double rel = shape_rel_l2(s, ref);
    const bool ok = rel < 1e-2;
    *failures += !ok;
    printf("check %s: heads %d/%d, lengths", label, NH, s->nkv);
    for (int b = 0; b < s->B; b++) printf(" %d", lens[b]);
    printf(", P=%d: rel L2 %.2e %s\n", s->P, rel, ok ? "ok" : "FAILED");
}
