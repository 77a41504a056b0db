// gqa_decode_mma.cu: grouped-query decode attention on tensor cores, against the product's
// kernel (kernels/attention.cu decode_attn_kernel, compiled in here as the product builds it).
//
// The question: Llama-3-8B's decode steps of 33 sequences and up run 1.75x their roofline on the
// H200 (docs/engine.md, "Serving steps against the roofline"), and its decode attention streams
// the KV at ~60% of the copy ceiling there: a block of four heads keeps four queries and their
// accumulators in registers, so few blocks run an SM, with few loads in flight. Here the G query
// heads that share a KV head are the rows of one m16 tile (FlashInfer's way for GQA decode):
// each warp streams 16-token chunks of K and V through a two-stage shared-memory ring of
// cp.async copies, S = Q K^T and O += P V on mma.sync (m16n8k16, bf16, fp32 accumulators), an
// online softmax per warp, then the block's four warps are merged and the partitions combined
// as the product's kernel does (the last block to finish). The tensor cores idle at 4 rows of
// 16; the point is that the loads no longer wait on the arithmetic.
//
// A lab tool: `make dev-kernels`, then on the GPU machine
//
//   build/dev/gqa_decode_mma
//
// The new kernel comes in variants (`variants`: warps a block x stages of each warp's ring: more
// warps share the queries' staging and the merge, more stages keep more chunks in flight a warp,
// both cost shared memory and so blocks an SM). Checks first: the shipped kernel and every
// variant against a CPU reference in double precision over the same bf16 K/V (8, 4, 2 and 1
// query heads a KV head, uneven lengths, every partition size). Then times them (lab.cuh's
// time_ms) at 1-128 sequences and contexts 1024, 2049 and 4096, GQA 4:1 (Llama-3-8B's heads) and
// MHA (Llama-2-7B's: a block's one head fills one row of the 16, so the question there is the
// cp.async ring, not the tensor cores): the shipped kernel at the partition the engine's rule
// picks (k_decode_partition), each variant at that partition and at its best; the K/V rotate over
// copies so that no launch reads from L2.
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

// ---- the kernel ---------------------------------------------------------------------------------

#define GM_CHUNK 16 // tokens a warp multiplies at a time: one k16 step of P V

template <int D> __host__ __device__ constexpr int gm_lds() { return D + 8; } // padded rows: ldmatrix without bank conflicts
// W warps a block, each with a ring of NS stages of a chunk's K and V
template <int D, int W, int NS> constexpr int gm_smem_bytes() { return (16 + W * NS * 2 * GM_CHUNK) * gm_lds<D>() * 2; }

// W warps of NS stages: registers bounded for 12 warps an SM (~170 each)
template <int D, int G, int W, int NS>
__global__ void __launch_bounds__(W * 32, 12 / W)
gqa_decode_mma_kernel(k_attn_args a, const int32_t *decode_seqs, int32_t P, int32_t max_parts, float *partials,
                      int32_t *counters)
{
    constexpr int GM_WARPS = W;
    static_assert(G >= 1 && G <= 8, "the G heads are rows 0..G-1 of one m16 tile (its upper half)");
    constexpr int LDS = gm_lds<D>(), KSTEPS = D / 16, NT = D / 8, THREADS = GM_WARPS * 32;
    constexpr int PIECES = GM_CHUNK * D / 8 / 32; // 16-byte pieces of K (and of V) a lane copies a chunk
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *sQ = smem; // (16, LDS): the G heads' queries, then zero rows

    griddep_wait();
    griddep_launch_next();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
    const int mi = lane >> 3, r8 = lane & 7;
    const int group = blockIdx.x, di = blockIdx.y, part = blockIdx.z;
    const int b = decode_seqs[di];
    const int len = a.seq_lens[b];
    const int nparts = (len + P - 1) / P;
    if (part >= nparts) return;
    const int t0 = part * P, n = min(P, len - t0);
    const int qh0 = group * G, kvh = qh0 / (a.nh / a.nkv);
    const int row = a.query_start_loc[b];
    const int32_t *bt = a.block_tables + (int64_t)b * a.bt_stride;
    const int bs = a.block_size;
    const uint4 *kc16 = reinterpret_cast<const uint4 *>(a.k_cache);
    const uint4 *vc16 = reinterpret_cast<const uint4 *>(a.v_cache);
    uint16_t *sK0 = smem + 16 * LDS + warp * NS * 2 * GM_CHUNK * LDS; // this warp's ring

    // chunk c of the partition into stage st of this warp's ring (rows past n: zeros)
    auto load = [&](int c, int st) {
        uint16_t *K = sK0 + st * 2 * GM_CHUNK * LDS, *V = K + GM_CHUNK * LDS;
#pragma unroll
        for (int i = 0; i < PIECES; i++) {
            const int idx = lane + 32 * i, j = idx / (D / 8), cc = idx % (D / 8), tok = c * GM_CHUNK + j;
            const bool ok = tok < n;
            const int t = t0 + tok;
            const int64_t off = ok ? (((int64_t)bt[t / bs] * bs + t % bs) * a.nkv + kvh) * (D / 8) + cc : 0;
            cp_async16(K + j * LDS + cc * 8, kc16 + off, ok ? 16 : 0);
            cp_async16(V + j * LDS + cc * 8, vc16 + off, ok ? 16 : 0);
        }
        cp_async_commit();
    };
    // this warp's chunks: warp, warp + W, ...; the first NS - 1 in flight while the queries are
    // staged (empty groups keep the count uniform, so the wait below is one constant)
    const int nch = (n + GM_CHUNK - 1) / GM_CHUNK, mine = warp < nch ? (nch - warp + W - 1) / W : 0;
#pragma unroll
    for (int k = 0; k < NS - 1; k++) {
        if (k < mine) load(warp + k * W, k);
        else cp_async_commit();
    }

    const float qscale = a.scale * LOG2E;
    for (int idx = tid; idx < 16 * (D / 4); idx += THREADS) {
        const int r = idx / (D / 4), c = (idx % (D / 4)) * 4;
        float4 v = make_float4(0, 0, 0, 0);
        if (r < G)
            v = *reinterpret_cast<const float4 *>(a.qkv + (int64_t)row * a.qkv_stride + (int64_t)(qh0 + r) * D + c);
        uint32_t *dst = reinterpret_cast<uint32_t *>(sQ + r * LDS + c);
        dst[0] = pack_bf16x2(v.x * qscale, v.y * qscale);
        dst[1] = pack_bf16x2(v.z * qscale, v.w * qscale);
    }
    __syncthreads();
    uint32_t qa[KSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) ldmatrix_x4(qa[kk], sQ + ((mi & 1) * 8 + r8) * LDS + kk * 16 + (mi >> 1) * 8);

    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
    float m = -INFINITY, l = 0; // row g's (each lane of its quad holds the same m, a part of l)
    for (int k = 0; k < mine; k++) {
        if (k + NS - 1 < mine) load(warp + (k + NS - 1) * W, (k + NS - 1) % NS);
        else cp_async_commit();
        cp_async_wait<NS - 1>(); // chunk k's group is done
        __syncwarp();
        const int c = warp + k * W;
        const uint16_t *K = sK0 + (k % NS) * 2 * GM_CHUNK * LDS, *V = K + GM_CHUNK * LDS;
        float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, K + ((mi >> 1) * 8 + r8) * LDS + kk * 16 + (mi & 1) * 8);
            mma_bf16(s[0], qa[kk], kb[0], kb[1]);
            mma_bf16(s[1], qa[kk], kb[2], kb[3]);
        }
        const int base = c * GM_CHUNK;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int key = base + j * 8 + tq * 2;
            if (key >= n) s[j][0] = -INFINITY;
            if (key + 1 >= n) s[j][1] = -INFINITY;
        }
        float mx = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(m, mx); // finite: a chunk holds at least one key
        const float alpha = exp2f(m - mnew);
        const float p00 = ex2_approx(s[0][0] - mnew), p01 = ex2_approx(s[0][1] - mnew);
        const float p10 = ex2_approx(s[1][0] - mnew), p11 = ex2_approx(s[1][1] - mnew);
        l = l * alpha + (p00 + p01 + p10 + p11);
        m = mnew;
#pragma unroll
        for (int j = 0; j < NT; j++) o[j][0] *= alpha, o[j][1] *= alpha;
        const uint32_t pa[4] = {pack_bf16x2(p00, p01), 0u, pack_bf16x2(p10, p11), 0u};
#pragma unroll
        for (int j2 = 0; j2 < NT / 2; j2++) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, V + ((mi & 1) * 8 + r8) * LDS + (2 * j2 + (mi >> 1)) * 8);
            mma_bf16(o[2 * j2], pa, vb[0], vb[1]);
            mma_bf16(o[2 * j2 + 1], pa, vb[2], vb[3]);
        }
        __syncwarp(); // every lane is done with this stage before it is refilled
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);

    // the warps' (m, l, o) of each head, merged
    __syncthreads(); // the rings are free: reuse them
    float *sm = reinterpret_cast<float *>(smem + 16 * LDS);
    float *s_m = sm, *s_l = s_m + GM_WARPS * G, *s_o = s_l + GM_WARPS * G; // (W, G), (W, G), (W, G, D)
    if (g < G) {
        if (tq == 0) s_m[warp * G + g] = m, s_l[warp * G + g] = l;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            s_o[(warp * G + g) * D + j * 8 + tq * 2] = o[j][0];
            s_o[(warp * G + g) * D + j * 8 + tq * 2 + 1] = o[j][1];
        }
    }
    __syncthreads();
    __shared__ float s_stat[2][G];
    __shared__ int s_last;
    if (tid < G) {
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < GM_WARPS; w++) M = fmaxf(M, s_m[w * G + tid]);
        float L = 0;
#pragma unroll
        for (int w = 0; w < GM_WARPS; w++) L += s_l[w * G + tid] * exp2f(s_m[w * G + tid] - M);
        s_stat[0][tid] = M, s_stat[1][tid] = L;
    }
    __syncthreads();
    bf16_t *out = a.out + (int64_t)row * a.out_stride;
    auto merged = [&](int gg, int d) {
        float v = 0;
#pragma unroll
        for (int w = 0; w < GM_WARPS; w++) v += s_o[(w * G + gg) * D + d] * exp2f(s_m[w * G + gg] - s_stat[0][gg]);
        return v;
    };
    if (nparts == 1) {
        for (int k = tid; k < G * D; k += THREADS) {
            const int gg = k / D, d = k % D;
            out[(qh0 + gg) * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(merged(gg, d) / s_stat[1][gg]));
        }
        return;
    }
    for (int k = tid; k < G * (D + 2); k += THREADS) {
        const int gg = k / (D + 2), d = k % (D + 2);
        const float v = d < D ? merged(gg, d) : s_stat[d - D][gg];
        partials[(((int64_t)di * a.nh + qh0 + gg) * max_parts + part) * (D + 2) + d] = v;
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        int *ctr = counters + (int64_t)di * a.nh + qh0;
        s_last = atomicAdd(ctr, 1) == nparts - 1;
        if (s_last) *ctr = 0;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int k = tid; k < G * D; k += THREADS) {
        const int gg = k / D, d = k % D;
        const float *pp = partials + (((int64_t)di * a.nh + qh0 + gg) * max_parts) * (D + 2);
        float M = -INFINITY;
        for (int p = 0; p < nparts; p++) M = fmaxf(M, __ldcg(pp + p * (D + 2) + D));
        float num = 0, den = 0;
        for (int p = 0; p < nparts; p++) {
            const float w = exp2f(__ldcg(pp + p * (D + 2) + D) - M);
            num += w * __ldcg(pp + p * (D + 2) + d);
            den += w * __ldcg(pp + p * (D + 2) + D + 1);
        }
        out[(qh0 + gg) * D + d] = __bfloat16_as_ushort(__float2bfloat16_rn(num / den));
    }
}

template <int G, int W, int NS>
static cudaError_t launch_gm(const k_attn_args *a, const int32_t *ds, int32_t nd, int32_t P, int32_t mp,
                             float *partials, int32_t *counters, cudaStream_t stream)
{
    static bool attr = false;
    if (!attr) {
        CUDA_CHECK(cudaFuncSetAttribute(gqa_decode_mma_kernel<HD, G, W, NS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, gm_smem_bytes<HD, W, NS>()));
        attr = true;
    }
    return k_launch(gqa_decode_mma_kernel<HD, G, W, NS>, dim3(a->nh / G, nd, mp), dim3(W * 32),
                    gm_smem_bytes<HD, W, NS>(), stream, *a, ds, P, mp, partials, counters);
}

// The variants timed: warps a block x stages a warp.
static const struct { int W, NS; } variants[] = {{4, 2}, {4, 3}, {2, 2}, {2, 4}};
#define NUM_VARIANTS 4

template <int G>
static cudaError_t launch_variant(int v, const k_attn_args *a, const int32_t *ds, int32_t nd, int32_t P, int32_t mp,
                                  float *partials, int32_t *counters, cudaStream_t stream)
{
    switch (v) {
    case 0: return launch_gm<G, 4, 2>(a, ds, nd, P, mp, partials, counters, stream);
    case 1: return launch_gm<G, 4, 3>(a, ds, nd, P, mp, partials, counters, stream);
    case 2: return launch_gm<G, 2, 2>(a, ds, nd, P, mp, partials, counters, stream);
    default: return launch_gm<G, 2, 4>(a, ds, nd, P, mp, partials, counters, stream);
    }
}

// ---- the harness ---------------------------------------------------------------------------------

// s->kernel: 0 the shipped kernel, v + 1 variants[v]
static void do_decode(void *ctx)
{
    shape *s = (shape *)ctx;
    k_attn_args a = shape_next_args(s);
    if (!s->kernel) {
        CUDA_CHECK(k_decode_attention(&a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st));
        return;
    }
    switch (NH / s->nkv) {
    case 8: CUDA_CHECK(launch_variant<8>(s->kernel - 1, &a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st)); break;
    case 4: CUDA_CHECK(launch_variant<4>(s->kernel - 1, &a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st)); break;
    case 2: CUDA_CHECK(launch_variant<2>(s->kernel - 1, &a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st)); break;
    case 1: CUDA_CHECK(launch_variant<1>(s->kernel - 1, &a, s->d_dec, s->B, s->P, s->max_parts, s->partials, s->counters, st)); break;
    default: fprintf(stderr, "gqa_decode_mma: no variant for %d heads a KV head\n", NH / s->nkv); exit(2);
    }
}

// The shipped kernel and every variant at every partition for lens against attention in double
// precision on the host.
static void check(int B, const int *lens, int nkv)
{
    shape s;
    shape_open(&s, B, lens, nkv, 0);
    double *ref = shape_reference(&s, lens);
    for (int kernel = 0; kernel <= NUM_VARIANTS; kernel++)
        for (int P = 32; P <= K_DECODE_PARTITION; P *= 2) {
            char label[32] = "shipped";
            if (kernel) snprintf(label, sizeof label, "mma %dx%d", variants[kernel - 1].W, variants[kernel - 1].NS);
            s.P = P, s.kernel = kernel;
            shape_check(&s, ref, lens, do_decode, label, &failures);
        }
    free(ref);
    shape_close(&s);
}

int main(void)
{
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int uneven[4] = {37, 700, 1203, 16};
    for (int nkv = 4; nkv <= NH; nkv *= 2) check(4, uneven, nkv); // 8, 4, 2 and 1 heads a KV head

    const double copy_gbs = lab_copy_gbs(st);
    // GQA 4:1 (Llama-3-8B's heads), then MHA (Llama-2-7B's): one head a block, rows 1 of 16
    static const int nkvs[] = {8, NH}, batches[] = {1, 2, 4, 8, 16, 32, 64, 128}, ctxs[] = {1024, 2049, 4096};
    for (int h = 0; h < 2; h++) {
        const int nkv = nkvs[h];
        printf("\ncopy ceiling: %.0f GB/s (1 GiB device to device, read + written); %d query heads, %d KV heads; ms "
               "(share of the copy ceiling); each variant (warps x stages) at the rule's partition, then at its best "
               "one\n\n", copy_gbs, NH, nkv);
        printf("| B   | context | rule P | shipped          |");
        for (int v = 0; v < NUM_VARIANTS; v++) printf(" mma %dx%d          | best (P)          |", variants[v].W, variants[v].NS);
        printf("\n|---|---|---|---|");
        for (int v = 0; v < NUM_VARIANTS; v++) printf("---|---|");
        printf("\n");
        for (int c = 0; c < 3; c++)
            for (int bi = 0; bi < 8; bi++) {
                const int B = batches[bi], len = ctxs[c];
                int lens[128];
                if ((int64_t)B * len * nkv > 256 * 2049 * 8) continue; // 4.3 GB of K and V at most
                for (int b = 0; b < B; b++) lens[b] = len;
                shape s;
                shape_open(&s, B, lens, nkv, POOL_BYTES);
                const double bytes = 2.0 * B * len * nkv * HD * 2;
                const int rule = k_decode_partition(NH, nkv, B, len, sms, INT64_MAX);
#define PCT(t) (100.0 * bytes / ((t) * 1e-3) / (copy_gbs * 1e9))
                s.P = rule, s.max_parts = (len + rule - 1) / rule, s.kernel = 0;
                const double tp = time_ms(do_decode, &s, st);
                printf("| %-3d | %-7d | %6d | %.4f (%5.1f%%) |", B, len, rule, tp, PCT(tp));
                for (int v = 0; v < NUM_VARIANTS; v++) {
                    s.kernel = v + 1;
                    double at_rule = 0, best = 1e30;
                    int best_p = 0;
                    for (int P = 32; P <= K_DECODE_PARTITION; P *= 2) {
                        s.P = P, s.max_parts = (len + P - 1) / P;
                        const double t = time_ms(do_decode, &s, st);
                        if (P == rule) at_rule = t;
                        if (t < best) best = t, best_p = P;
                    }
                    printf(" %.4f (%5.1f%%) | %.4f (%3d) |", at_rule, PCT(at_rule), best, best_p);
                }
                printf("\n");
                shape_close(&s);
            }
    }
    printf("\ngqa_decode_mma: %s\n", failures ? "CHECKS FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
