// decode_phases.cu: where a small batch's decode attention spends its time, phase by phase. The
// question: at 4 sequences of context 1,024 (MHA, Llama-2-7B's heads) the shipped kernel
// (kernels/attention.cu decode_attn_kernel, multi-pass path) takes ~38 us a layer against ~22 us
// for its K/V bytes at the copy rate, and issuing each pass's loads a pass ahead changed nothing
// (docs/engine.md, the decode-step breakdown). So the time is not the loads' round trips within a
// block; this program cuts the kernel short after each phase, the same grid and partition, to
// see which part costs what:
//
//   stage 0  the grid alone: each block reads its sequence's length and returns
//   stage 1  + phase 1: K rows loaded, scores into shared memory
//   stage 2  + phase 2: the softmax's max and exp-sum
//   stage 3  + phase 3: V rows loaded and accumulated; each block stores its partial output
//   shipped  + the combine: the last block of a head group to finish (an atomic counter) merges
//            the partitions, as the engine runs it (k_decode_attention)
//
// Each stage writes something its work feeds, so none is compiled away. The differences between
// consecutive stages are each phase's cost at that grid. A lab tool: `make dev-kernels`, then on
// the GPU machine
//
//   build/dev/decode_phases
//
// Check first: the shipped kernel against the double-precision CPU reference (decode_shapes.cuh)
// at the partitions the table uses. Then, for 1-16 sequences at contexts 1,024 and 2,049, MHA,
// at the engine's partition rule applied as a CUDA graph applies it (the graph's rows, the
// context's power-of-two bucket), the median of 9 samples of 10 launches after 10 warm-up
// launches (lab.cuh), K/V rotating over copies so that no launch reads from L2.
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

// decode_attn_kernel's multi-pass path for one head a block (MHA), cut short after phase STAGE.
template <int D, int STAGE>
__global__ void __launch_bounds__(DEC_THREADS, 1)
decode_stage_kernel(k_attn_args a, const int32_t *decode_seqs, int32_t P, int32_t max_parts, float *partials)
{
    constexpr int LPT = D / 8;  // lanes per K/V row (16 bytes each)
    constexpr int TPW = 32 / LPT; // rows per warp per step
    constexpr int STEP = DEC_WARPS * TPW;
    constexpr int W = DEC_UNROLL * STEP; // rows of the block's one pass
    __shared__ float s_p[K_DECODE_PARTITION]; // scores, then probabilities
    __shared__ float s_red[DEC_WARPS][D];     // per-warp output partials
    __shared__ float s_stat[2];               // max, sum

    griddep_wait();
    griddep_launch_next();
    const int head = blockIdx.x, di = blockIdx.y, part = blockIdx.z;
    const int b = decode_seqs[di];
    const int len = a.seq_lens[b];
    const int nparts = (len + P - 1) / P;
    if (part >= nparts) return;
    float *out = partials + (((int64_t)di * a.nh + head) * max_parts + part) * (D + 2);
    if (STAGE == 0) {
        if (threadIdx.x == 0) out[D] = (float)len;
        return;
    }
    const int t0 = part * P, t1 = min(t0 + P, len), n = t1 - t0;
    const int kvh = head / (a.nh / a.nkv);
    const int row = a.query_start_loc[b];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane / LPT, dl = lane % LPT;
    const int32_t *bt = a.block_tables + (int64_t)b * a.bt_stride;
    const int bs = a.block_size;
    const int wb0 = warp * TPW;

    float q[8];
    const float qscale = a.scale * LOG2E;
    {
        const float4 *qp = reinterpret_cast<const float4 *>(a.qkv + (int64_t)row * a.qkv_stride +
                                                            (int64_t)head * D + dl * 8);
        float4 x0 = qp[0], x1 = qp[1];
        q[0] = x0.x * qscale, q[1] = x0.y * qscale, q[2] = x0.z * qscale, q[3] = x0.w * qscale;
        q[4] = x1.x * qscale, q[5] = x1.y * qscale, q[6] = x1.z * qscale, q[7] = x1.w * qscale;
    }
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

    // Phase 1: scores.
    for (int wb = wb0; wb < n; wb += W) {
        uint4 kv[DEC_UNROLL];
        load_rows(a.k_cache, wb, kv);
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            float kf[8];
            bf16x8_to_f32(kv[u], kf);
            const int j = wb + u * STEP + sub;
            float s = 0;
#pragma unroll
            for (int i = 0; i < 8; i++) s = fmaf(q[i], kf[i], s);
#pragma unroll
            for (int o = LPT / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (dl == 0 && j < n) s_p[j] = s;
        }
    }
    __syncthreads();
    if (STAGE == 1) {
        if (threadIdx.x < 32) {
            float m = -INFINITY;
            for (int j = lane; j < n; j += 32) m = fmaxf(m, s_p[j]);
            m = warp_max(m);
            if (lane == 0) out[D] = m;
        }
        return;
    }

    // Phase 2: max and exp-sum (warp 0).
    if (warp == 0) {
        float m = -INFINITY;
        for (int j = lane; j < n; j += 32) m = fmaxf(m, s_p[j]);
        m = warp_max(m);
        float l = 0;
        for (int j = lane; j < n; j += 32) {
            float p = exp2f(s_p[j] - m);
            s_p[j] = p;
            l += p;
        }
        l = warp_sum(l);
        if (lane == 0) s_stat[0] = m, s_stat[1] = l;
    }
    __syncthreads();
    if (STAGE == 2) {
        if (threadIdx.x == 0) out[D] = s_stat[0], out[D + 1] = s_stat[1];
        return;
    }

    // Phase 3: o = sum_j p_j v_j, then the block's partial output (no combine).
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int wb = wb0; wb < n; wb += W) {
        uint4 vv[DEC_UNROLL];
        load_rows(a.v_cache, wb, vv);
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            const int j = wb + u * STEP + sub;
            if (j < n) {
                float vf[8];
                bf16x8_to_f32(vv[u], vf);
                const float p = s_p[j];
#pragma unroll
                for (int i = 0; i < 8; i++) acc[i] = fmaf(p, vf[i], acc[i]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int o = LPT; o < 32; o <<= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
    if (sub == 0) {
#pragma unroll
        for (int i = 0; i < 8; i++) s_red[warp][dl * 8 + i] = acc[i];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < D + 2; d += DEC_THREADS) {
        float v = 0;
        if (d < D) {
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) v += s_red[w][d];
        } else {
            v = s_stat[d - D];
        }
        out[d] = v;
    }
}

// ---- the harness --------------------------------------------------------------------------------

#include "kernels/dev/decode_shapes.cuh"

static void do_decode(void *ctx) // s->kernel: 0..3 the stage, 4 the shipped kernel
{
    shape *s = (shape *)ctx;
    k_attn_args a = shape_next_args(s);
    static void (*const stages[4])(k_attn_args, const int32_t *, int32_t, int32_t, float *) = {
        decode_stage_kernel<HD, 0>, decode_stage_kernel<HD, 1>, decode_stage_kernel<HD, 2>,
        decode_stage_kernel<HD, 3>};
    if (s->kernel == 4) {
        CUDA_CHECK(k_decode_attention(&a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st));
        return;
    }
    const dim3 grid(NH, s->B, s->max_parts);
    CUDA_CHECK(k_launch(stages[s->kernel], grid, dim3(DEC_THREADS), 0, st, a, s->d_dec, s->P, s->max_parts,
                        s->partials));
}

int main(void)
{
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int uneven[3] = {37, 700, 1203};
    {
        shape s;
        shape_open(&s, 3, uneven, NH, 0);
        double *ref = shape_reference(&s, uneven);
        for (int P = 64; P <= K_DECODE_PARTITION; P *= 2) {
            s.P = P, s.kernel = 4;
            shape_check(&s, ref, uneven, do_decode, "shipped", &failures);
        }
        free(ref);
        shape_close(&s);
    }
    if (failures) {
        printf("decode_phases: CHECKS FAILED\n");
        return 1;
    }

    const double copy_gbs = lab_copy_gbs(st);
    printf("\ncopy ceiling: %.0f GB/s (1 GiB device to device, read + written); MHA %d heads, "
           "ms a launch\n\n", copy_gbs, NH);
    printf("| B | context | P | blocks | grid alone | + K, scores | + softmax | + V, partials "
           "| shipped (+ combine) | K+V bytes at the copy rate |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    static const int batches[] = {1, 2, 4, 8, 16}, ctxs[] = {1024, 2049};
    for (int c = 0; c < 2; c++)
        for (int bi = 0; bi < 5; bi++) {
            const int B = batches[bi], len = ctxs[c];
            int lens[16];
            for (int b = 0; b < B; b++) lens[b] = len;
            shape s;
            shape_open(&s, B, lens, NH, POOL_BYTES);
            const int64_t bucket = k_decode_bucket(len);
            const int32_t rows = k_decode_graph_rows(B, INT32_MAX);
            s.P = k_decode_partition(NH, NH, rows, (int32_t)bucket, sms, INT64_MAX);
            s.max_parts = (int)(bucket / s.P);
            double t[5];
            for (int k = 0; k < 5; k++) {
                s.kernel = k;
                t[k] = time_ms(do_decode, &s, st);
            }
            const double bytes = 2.0 * B * len * NH * HD * 2;
            printf("| %d | %d | %d | %d | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |\n", B, len, s.P,
                   NH * B * s.max_parts, t[0], t[1], t[2], t[3], t[4], bytes / (copy_gbs * 1e9) * 1e3);
            shape_close(&s);
        }
    printf("\ndecode_phases: all checks passed\n");
    return 0;
}
