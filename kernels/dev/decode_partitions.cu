// decode_partitions.cu: the decode attention kernel (kernels/attention.cu, compiled in here as the
// product builds it) at every partition size it accepts, against the engine's rule for picking
// one (kernels/decode_layout.h k_decode_partition, which engine/cuda_backend.c calls). The
// question: which partition is fastest for a batch of B sequences at context L, MHA and GQA 4:1
// (Llama-2-7B's and Llama-3-8B's heads), and how far the rule's pick is from it: applied to the
// context (as an eager step does), and as a CUDA graph applies it, to the graph's rows and the
// context's power-of-two bucket, whose grid covers the whole bucket (a context just past a power
// of two is its worst case: half the grid's blocks exit at once; one at a power of two its best).
// A lab tool: `make dev-kernels`, then on the GPU machine
//
//   build/dev/decode_partitions
//
// Checks first: for two shapes (MHA and GQA, 3 sequences of uneven length) every partition's
// output against a CPU reference in double precision over the same bf16 K/V. Then times each
// (heads, B, L, P): the median of 9 samples of 10 launches after 10 warm-up launches. The K/V
// are spread over enough copies (each launch reads the next) that no launch finds its bytes in
// L2, as a serving step's layer never does. Rate: K + V bytes read / time, beside a
// device-to-device copy of 1 GiB (read + written).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.cu"
#include "kernels/elementwise.cu"
#include "kernels/prefill_wgmma.cu"
#include "kernels/cuda_check.h"
#include "kernels/numerics.h"
#include "kernels/dev/lab.cuh"

#define HD 128
#define NH 32
#define BS 16
#define POOL_BYTES (512ll << 20) // K/V copies rotate over at least this much

static cudaStream_t st;
static int failures;

// One shape: B sequences (lengths lens), nkv KV heads, the K/V of one copy laid out as the
// engine's paged cache with scattered blocks, `copies` copies of it back to back in kv.
typedef struct shape {
    int B, nkv, max_len, blocks, copies, next, P, max_parts;
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

static void do_decode(void *ctx)
{
    shape *s = (shape *)ctx;
    const bf16_t *k = s->kv + 2 * s->copy_elems * s->next;
    s->next = (s->next + 1) % s->copies;
    k_attn_args a = {.qkv = s->qkv, .qkv_stride = (NH + 2 * s->nkv) * HD, .k_cache = k, .v_cache = k + s->copy_elems,
                     .out = s->out, .out_stride = NH * HD, .query_start_loc = s->d_qsl, .seq_lens = s->d_lens,
                     .block_tables = s->d_bt, .bt_stride = (s->max_len + BS - 1) / BS, .nh = NH, .nkv = s->nkv,
                     .hd = HD, .block_size = BS, .scale = 1.0f / sqrtf((float)HD)};
    CUDA_CHECK(k_decode_attention(&a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st));
}

// Every partition's output for lens against attention in double precision on the host.
static void check(int B, const int *lens, int nkv)
{
    shape s;
    shape_open(&s, B, lens, nkv, 0);
    const int stride = (NH + 2 * nkv) * HD, S = (s.max_len + BS - 1) / BS;
    int64_t n2 = 2 * s.copy_elems;
    bf16_t *kv = (bf16_t *)malloc(sizeof(bf16_t) * (size_t)n2);
    for (int64_t i = 0; i < n2; i++) kv[i] = synth_weight_bf16(5, 2, (uint64_t)i, 0, 0.5f);
    float *q = (float *)malloc(sizeof(float) * (size_t)B * stride);
    CUDA_CHECK(cudaMemcpyAsync(q, s.qkv, sizeof(float) * (size_t)B * stride, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    double *ref = (double *)calloc((size_t)B * NH * HD, sizeof(double)), *w = (double *)malloc(sizeof(double) * (size_t)s.max_len);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kvh = h / (NH / nkv);
            double m = -INFINITY, l = 0;
            for (int t = 0; t < lens[b]; t++) {
                int64_t slot = (int64_t)((b * S + t / BS) * 7919LL % s.blocks) * BS + t % BS;
                const bf16_t *kr = kv + (slot * nkv + kvh) * HD;
                double dot = 0;
                for (int d = 0; d < HD; d++) dot += (double)q[(int64_t)b * stride + h * HD + d] * bf16_to_f32(kr[d]);
                w[t] = dot / sqrt((double)HD);
                m = w[t] > m ? w[t] : m;
            }
            for (int t = 0; t < lens[b]; t++) l += (w[t] = exp(w[t] - m));
            for (int t = 0; t < lens[b]; t++) {
                int64_t slot = (int64_t)((b * S + t / BS) * 7919LL % s.blocks) * BS + t % BS;
                const bf16_t *vr = kv + s.copy_elems + (slot * nkv + kvh) * HD;
                for (int d = 0; d < HD; d++) ref[((int64_t)b * NH + h) * HD + d] += w[t] / l * bf16_to_f32(vr[d]);
            }
        }
    bf16_t *out = (bf16_t *)malloc(sizeof(bf16_t) * (size_t)B * NH * HD);
    for (int P = 32; P <= K_DECODE_PARTITION; P *= 2) {
        s.P = P, s.max_parts = (s.max_len + P - 1) / P, s.next = 0;
        do_decode(&s);
        CUDA_CHECK(cudaMemcpyAsync(out, s.out, sizeof(bf16_t) * (size_t)B * NH * HD, cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        double num = 0, den = 0;
        for (int64_t i = 0; i < (int64_t)B * NH * HD; i++) {
            double d = bf16_to_f32(out[i]) - ref[i];
            num += d * d, den += ref[i] * ref[i];
        }
        double rel = sqrt(num / den);
        bool ok = rel < 1e-2;
        failures += !ok;
        printf("check: heads %d/%d, lengths", NH, nkv);
        for (int b = 0; b < B; b++) printf(" %d", lens[b]);
        printf(", P=%d: rel L2 %.2e %s\n", P, rel, ok ? "ok" : "FAILED");
    }
    free(kv), free(q), free(ref), free(w), free(out);
    shape_close(&s);
}

int main(void)
{
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int uneven[3] = {37, 700, 1203};
    check(3, uneven, 32);
    check(3, uneven, 8);

    const double copy_gbs = lab_copy_gbs(st);
    printf("\ncopy ceiling: %.0f GB/s (1 GiB device to device, read + written)\n\n", copy_gbs);
    printf("| heads | B   | context | P=32 ms (%% of copy) | P=64            | P=128           | P=256           | rule | best | rule / best | graph P | graph ms | graph / best |\n");
    printf("|-------|-----|---------|-----------------|-----------------|-----------------|-----------------|------|------|-------------|---------|----------|--------------|\n");
    // each bucket's two ends: just past a power of two, where a graph's grid is half idle, and at one
    static const int nkvs[] = {32, 8}, batches[] = {1, 2, 4, 8, 16, 32, 64, 128};
    static const int ctxs[] = {513, 1024, 2049, 4096, 8193};
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 5; c++)
            for (int bi = 0; bi < 8; bi++) {
                int B = batches[bi], len = ctxs[c], lens[128];
                if ((int64_t)B * len > 256 * 2049) continue; // beyond what a serving batch holds
                for (int b = 0; b < B; b++) lens[b] = len;
                shape s;
                shape_open(&s, B, lens, nkvs[h], POOL_BYTES);
                double bytes = 2.0 * B * len * nkvs[h] * HD * 2, best = 1e30, t[4];
                int best_p = 0, rule = k_decode_partition(NH, nkvs[h], B, len, sms, INT64_MAX);
                printf("| %d/%-2d | %-3d | %-7d |", NH, nkvs[h], B, len);
                for (int i = 0, P = 32; P <= K_DECODE_PARTITION; P *= 2, i++) {
                    s.P = P, s.max_parts = (len + P - 1) / P;
                    t[i] = time_ms(do_decode, &s, st);
                    if (t[i] < best) best = t[i], best_p = P;
                    printf(" %.4f (%5.1f%%) |", t[i], 100.0 * bytes / (t[i] * 1e-3) / (copy_gbs * 1e9));
                }
                int ri = 0;
                for (int P = 32; P < rule; P *= 2) ri++;
                printf(" %4d | %4d | %.2f |", rule, best_p, t[ri] / best);
                // as a CUDA graph runs it: the rule applied to the graph's rows and the context's
                // bucket (a power of two), a grid over the whole bucket whose blocks past the end exit
                int64_t bucket = k_decode_bucket(len);
                s.P = k_decode_partition(NH, nkvs[h], k_decode_graph_rows(B, INT32_MAX), (int32_t)bucket, sms, INT64_MAX);
                s.max_parts = (int)(bucket / s.P);
                double tg = time_ms(do_decode, &s, st);
                printf(" %7d | %8.4f | %.2f |\n", s.P, tg, tg / best);
                shape_close(&s);
            }
    printf("\ndecode_partitions: %s\n", failures ? "CHECKS FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
