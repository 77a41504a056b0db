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

#include "kernels/dev/decode_shapes.cuh"

static void do_decode(void *ctx)
{
    shape *s = (shape *)ctx;
    k_attn_args a = shape_next_args(s);
    CUDA_CHECK(k_decode_attention(&a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st));
}

// Every partition's output for lens against attention in double precision on the host.
static void check(int B, const int *lens, int nkv)
{
    shape s;
    shape_open(&s, B, lens, nkv, 0);
    double *ref = shape_reference(&s, lens);
    for (int P = 32; P <= K_DECODE_PARTITION; P *= 2) {
        s.P = P;
        shape_check(&s, ref, lens, do_decode, "shipped", &failures);
    }
    free(ref);
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
