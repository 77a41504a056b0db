// decode_pipe.cu: the decode attention kernel with each pass's loads issued a pass ahead, against
// the product's (kernels/attention.cu decode_attn_kernel, compiled in here as the product builds
// it). The question: decode steps of 4-8 sequences run at 79-82% of the copy roofline on an H100
// (docs/engine.md), and their attention streams the K/V at ~60% of the copy rate (1.18 ms of a
// 6.4 ms step at 4 sequences, context 1,025). At a few sequences the grid holds a handful of blocks
// an SM, so a block's time is its chain of round trips to memory: the product's kernel waits once
// a pass of 32 rows, for K and again for V. Here two register batches let it wait about once per
// two passes, and the first V batch rides through the softmax. For one or two query heads a block
// (MHA, GQA 2:1): with four or more, the queries and accumulators leave no registers for a second
// batch (it spills under the product's bound of 80). 72 registers at one head (the product's 55),
// 79 at two (72).
//
// A lab tool: `make dev-kernels`, then on the GPU machine
//
//   build/dev/decode_pipe
//
// Checks first: both kernels against a CPU reference in double precision over the same bf16 K/V
// (uneven lengths, partitions of 64-256 tokens). Then times both as a CUDA graph's step runs
// them (the graph's rows, the context's power-of-two bucket, the engine's partition rule
// k_decode_partition) at 1-128 sequences and contexts 513-4096, the K/V rotating over copies so
// that no launch reads from L2 (lab.cuh's time_ms). Where the new kernel wins at every batch, it
// replaces the product's multi-pass path for one and two heads a block; where it loses at large
// batches, the engine picks it by grid size.
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

// ---- the kernel ---------------------------------------------------------------------------------

// decode_attn_kernel's multi-pass path (P > 32 at head dim 128), its loads a pass ahead.
template <int D, int G>
__global__ void __launch_bounds__(DEC_THREADS, G == 1 ? 1 : 6)
decode_pipe_kernel(k_attn_args a, const int32_t *decode_seqs, int32_t P, int32_t max_parts,
                   float *partials, int32_t *counters)
{
    constexpr int LPT = D / 8;  // lanes per K/V row (16 bytes each)
    constexpr int TPW = 32 / LPT; // rows per warp per step
    constexpr int STEP = DEC_WARPS * TPW;
    __shared__ float s_p[G][K_DECODE_PARTITION]; // scores, then probabilities
    __shared__ float s_red[DEC_WARPS][G][D]; // per-warp output partials
    __shared__ float s_stat[2][G];           // max, sum
    __shared__ int s_last;

    griddep_wait();
    griddep_launch_next();
    const int group = blockIdx.x, di = blockIdx.y, part = blockIdx.z;
    const int b = decode_seqs[di];
    const int len = a.seq_lens[b];
    const int nparts = (len + P - 1) / P;
    if (part >= nparts) return;
    const int t0 = part * P, t1 = min(t0 + P, len), n = t1 - t0;
    const int qh0 = group * G, kvh = qh0 / (a.nh / a.nkv);
    const int row = a.query_start_loc[b];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane / LPT, dl = lane % LPT;
    const int32_t *bt = a.block_tables + (int64_t)b * a.bt_stride;
    const int bs = a.block_size;

    float q[G][8];
    const float qscale = a.scale * LOG2E;
#pragma unroll
    for (int g = 0; g < G; g++) {
        const float4 *qp = reinterpret_cast<const float4 *>(a.qkv + (int64_t)row * a.qkv_stride +
                                                            (int64_t)(qh0 + g) * D + dl * 8);
        float4 x0 = qp[0], x1 = qp[1];
        q[g][0] = x0.x * qscale, q[g][1] = x0.y * qscale, q[g][2] = x0.z * qscale, q[g][3] = x0.w * qscale;
        q[g][4] = x1.x * qscale, q[g][5] = x1.y * qscale, q[g][6] = x1.z * qscale, q[g][7] = x1.w * qscale;
    }

    constexpr int W = DEC_UNROLL * STEP; // rows of the block's one pass
    const int wb0 = warp * TPW;         // this warp's first row of a pass (loop bounds per warp:
                                        // shuffles need every lane)
    // Rows wb + u * STEP + sub of the partition, from cache (zeros past its end).
    auto load_rows = [&](const bf16_t *cache, int wb, uint4 (&v)[DEC_UNROLL]) {
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int j = wb + u * STEP + sub;
            v[u] = make_uint4(0, 0, 0, 0);
            if (j < n) {
                const int t = t0 + j;
                const int64_t slot = (int64_t)bt[t / bs] * bs + t % bs;
                v[u] = ld_stream(cache + (slot * a.nkv + kvh) * D + dl * 8);
            }
        }
    };
    auto scores = [&](int wb, const uint4 (&kv)[DEC_UNROLL]) {
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            float kf[8];
            bf16x8_to_f32(kv[u], kf);
            const int j = wb + u * STEP + sub;
#pragma unroll
            for (int g = 0; g < G; g++) {
                float s = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) s = fmaf(q[g][i], kf[i], s);
#pragma unroll
                for (int o = LPT / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (dl == 0 && j < n) s_p[g][j] = s;
            }
        }
    };
    // Each pass's loads are issued a pass ahead, in two register batches, so that a block waits
    // on memory about once per two passes; the first V batch is in flight through the softmax.
    uint4 va[DEC_UNROLL], vb[DEC_UNROLL];

    // Phase 1: scores.
    {
        uint4 ka[DEC_UNROLL], kb[DEC_UNROLL];
        load_rows(a.k_cache, wb0, ka);
        for (int wb = wb0; wb < n; wb += 2 * W) {
            load_rows(a.k_cache, wb + W, kb);
            scores(wb, ka);
            if (wb + W >= n) break;
            load_rows(a.k_cache, wb + 2 * W, ka);
            scores(wb + W, kb);
        }
    }
    load_rows(a.v_cache, wb0, va); // in flight through the softmax
    __syncthreads();

    // Phase 2: max and exp-sum per head (warp g handles heads g, g + 4, ...).
    for (int g = warp; g < G; g += DEC_WARPS) {
        float m = -INFINITY;
        for (int j = lane; j < n; j += 32) m = fmaxf(m, s_p[g][j]);
        m = warp_max(m);
        float l = 0;
        for (int j = lane; j < n; j += 32) {
            float p = exp2f(s_p[g][j] - m);
            s_p[g][j] = p;
            l += p;
        }
        l = warp_sum(l);
        if (lane == 0) s_stat[0][g] = m, s_stat[1][g] = l;
    }
    __syncthreads();

    // Phase 3: o = sum_j p_j v_j; lane holds 8 dims of G heads for its rows.
    float acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < 8; i++) acc[g][i] = 0;
    auto accumulate = [&](int wb, const uint4 (&vv)[DEC_UNROLL]) {
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int j = wb + u * STEP + sub;
            if (j < n) {
                float vf[8];
                bf16x8_to_f32(vv[u], vf);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float p = s_p[g][j];
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[g][i] = fmaf(p, vf[i], acc[g][i]);
                }
            }
        }
    };

    for (int wb = wb0; wb < n; wb += 2 * W) {
        load_rows(a.v_cache, wb + W, vb);
        accumulate(wb, va);
        if (wb + W >= n) break;
        load_rows(a.v_cache, wb + 2 * W, va);
        accumulate(wb + W, vb);
    }
    // Sum the TPW row-lanes of each dim chunk within the warp, then across warps.
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int o = LPT; o < 32; o <<= 1) acc[g][i] += __shfl_xor_sync(0xffffffffu, acc[g][i], o);
    if (sub == 0) {
#pragma unroll
        for (int g = 0; g < G; g++)
#pragma unroll
            for (int i = 0; i < 8; i++) s_red[warp][g][dl * 8 + i] = acc[g][i];
    }
    __syncthreads();

    bf16_t *out = a.out + (int64_t)row * a.out_stride;
    if (nparts == 1) { // the whole context in this block: normalise and write
        for (int k = threadIdx.x; k < G * D; k += DEC_THREADS) {
            int g = k / D, d = k % D;
            float o = 0;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) o += s_red[w][g][d];
            out[(qh0 + g) * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(o / s_stat[1][g]));
        }
        return;
    }
    // Several partitions: store (o, m, l), then the last block to arrive combines them.
    for (int k = threadIdx.x; k < G * (D + 2); k += DEC_THREADS) {
        int g = k / (D + 2), d = k % (D + 2);
        float v;
        if (d < D) {
            v = 0;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) v += s_red[w][g][d];
        } else {
            v = s_stat[d - D][g];
        }
        partials[(((int64_t)di * a.nh + qh0 + g) * max_parts + part) * (D + 2) + d] = v;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *ctr = counters + (int64_t)di * a.nh + qh0;
        s_last = atomicAdd(ctr, 1) == nparts - 1;
        if (s_last) *ctr = 0; // ready for the next launch
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int k = threadIdx.x; k < G * D; k += DEC_THREADS) {
        int g = k / D, d = k % D;
        const float *pp = partials + (((int64_t)di * a.nh + qh0 + g) * max_parts) * (D + 2);
        float m = -INFINITY;
        for (int p = 0; p < nparts; p++) m = fmaxf(m, __ldcg(pp + p * (D + 2) + D));
        float num = 0, den = 0;
        for (int p = 0; p < nparts; p++) {
            float w = exp2f(__ldcg(pp + p * (D + 2) + D) - m);
            num += w * __ldcg(pp + p * (D + 2) + d);
            den += w * __ldcg(pp + p * (D + 2) + D + 1);
        }
        out[(qh0 + g) * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(num / den));
    }
}


template <int D, int G>
static cudaError_t launch_pipe(const k_attn_args *a, const int32_t *decode_seqs, int32_t nd, int32_t P,
                               int32_t max_parts, float *partials, int32_t *counters, cudaStream_t st)
{
    if (P <= dec_pass_rows<D>()) return cudaErrorInvalidValue; // one pass: nothing to run ahead
    return k_launch(decode_pipe_kernel<D, G>, dim3(a->nh / G, nd, max_parts), dim3(DEC_THREADS), 0, st,
                    *a, decode_seqs, P, max_parts, partials, counters);
}

// ---- the harness --------------------------------------------------------------------------------

#include "kernels/dev/decode_shapes.cuh"

// s->kernel: 0 the product's kernel, 1 this one
static void do_decode(void *ctx)
{
    shape *s = (shape *)ctx;
    k_attn_args a = shape_next_args(s);
    cudaError_t (*run)(const k_attn_args *, const int32_t *, int32_t, int32_t, int32_t, float *, int32_t *,
                       cudaStream_t) = !s->kernel ? k_decode_attention
                                       : s->nkv == NH ? launch_pipe<HD, 1>
                                                      : launch_pipe<HD, 2>;
    CUDA_CHECK(run(&a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st));
}

int main(void)
{
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    static const int nkvs[] = {NH, NH / 2}; // one head a block, two
    const int uneven[3] = {37, 700, 1203};
    for (int h = 0; h < 2; h++) {
        shape s;
        shape_open(&s, 3, uneven, nkvs[h], 0);
        double *ref = shape_reference(&s, uneven);
        for (int P = 64; P <= K_DECODE_PARTITION; P *= 2)
            for (int kernel = 0; kernel < 2; kernel++) {
                s.P = P, s.kernel = kernel;
                shape_check(&s, ref, uneven, do_decode, kernel ? "ahead" : "product", &failures);
            }
        free(ref);
        shape_close(&s);
    }
    if (failures) {
        printf("decode_pipe: CHECKS FAILED\n");
        return 1;
    }

    const double copy_gbs = lab_copy_gbs(st);
    printf("\ncopy ceiling: %.0f GB/s (1 GiB device to device, read + written); as a graph runs the step\n\n",
           copy_gbs);
    printf("| heads | B | context | P | product ms (%% of copy) | ahead ms (%% of copy) | ahead / product |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n");
    static const int batches[] = {1, 2, 4, 8, 16, 32, 64, 128}, ctxs[] = {513, 1024, 2049, 4096};
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 4; c++)
            for (int bi = 0; bi < 8; bi++) {
                const int B = batches[bi], len = ctxs[c];
                if ((int64_t)B * len > 256 * 2049) continue; // beyond what a serving batch holds
                int lens[128];
                for (int b = 0; b < B; b++) lens[b] = len;
                shape s;
                shape_open(&s, B, lens, nkvs[h], POOL_BYTES);
                const int64_t bucket = k_decode_bucket(len);
                s.P = k_decode_partition(NH, nkvs[h], k_decode_graph_rows(B, INT32_MAX), (int32_t)bucket, sms,
                                         INT64_MAX);
                s.max_parts = (int)(bucket / s.P);
                const double bytes = 2.0 * B * len * nkvs[h] * HD * 2;
                double t[2];
                for (int kernel = 0; kernel < 2; kernel++) {
                    s.kernel = kernel;
                    t[kernel] = time_ms(do_decode, &s, st);
                }
                printf("| %d/%d | %d | %d | %d | %.4f (%5.1f%%) | %.4f (%5.1f%%) | %.3f |\n", NH, nkvs[h],
                       B, len, s.P, t[0], 100.0 * bytes / (t[0] * 1e-3) / (copy_gbs * 1e9), t[1],
                       100.0 * bytes / (t[1] * 1e-3) / (copy_gbs * 1e9), t[1] / t[0]);
                shape_close(&s);
            }
    printf("\ndecode_pipe: all checks passed\n");
    return 0;
}
