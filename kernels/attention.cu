// attention.cu: attention over the paged KV cache (k_cache/v_cache: (slots, nkv, hd) bf16,
// slot = block_table[pos / block_size] * block_size + pos % block_size).
//
// decode_attn_kernel: one query row per sequence. The context is split into partitions of
// K_DECODE_PARTITION tokens, one thread block each per group of G query heads that share a KV
// head (so GQA loads each K/V row once for G heads). A block computes its partition's scores
// into shared memory, their max and exp-sum, and the unnormalised output; the last block of a
// (sequence, head group) to finish (atomic counter) combines the partitions, so decode needs one
// launch. Memory bound: every K and V byte of the context is read once.
//
// prefill_attn_kernel: (on the H200 at hd 128, prefill_wgmma.cu's kernel runs instead; this one
// serves other GPUs, head dims and block sizes) 128 query rows of one sequence and one head per
// block (8 warps x 16 rows);
// keys in tiles of 64 gathered from the pages with cp.async, double buffered; S = QK^T and
// O += PV on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulators, fragments by ldmatrix),
// online softmax in registers (FlashAttention-2), 64 keys per softmax update. Key tiles wholly
// past a warp's rows are skipped, and only tiles that reach past an m16 tile's first row are
// masked. Row i of the sequence is position ctx + i and sees keys 0..ctx+i: with the chunk's K/V
// already written to the cache this is prefill, chunked prefill (a chunk after a cached prefix)
// and the causal mask in one.
//
// Scores are scaled by log2(e)/sqrt(hd) up front so softmax uses exp2.
#include <math.h>

#include "kernels/common.cuh"

#define LOG2E 1.4426950408889634f

// ---- decode ---------------------------------------------------------------------------------

#define DEC_THREADS 128
#define DEC_WARPS (DEC_THREADS / 32)
#define DEC_UNROLL 4

// Tokens a decode block covers in one pass of its loops.
template <int HD> constexpr int dec_pass_rows() { return DEC_UNROLL * DEC_WARPS * (32 / (HD / 8)); }

// ONE_PASS: the partition fits one pass (P <= dec_pass_rows: 32 tokens at head dim 128, 64 at
// 64, 128 at 32); then the V rows are loaded together with the K rows. The one-pass single-head
// variant is held to 64 registers, 8 blocks an SM (at 72 registers a grid of 32 heads x 32
// partitions took two waves: 13 -> 20 us).
template <int HD, int G, bool ONE_PASS>
__global__ void __launch_bounds__(DEC_THREADS, ONE_PASS ? (G == 1 ? 8 : 1) : (G == 1 ? 1 : 6))
decode_attn_kernel(k_attn_args a, const int32_t *decode_seqs, int32_t P, int32_t max_parts,
                   float *partials, int32_t *counters)
{
    constexpr int LPT = HD / 8;  // lanes per K/V row (16 bytes each)
    constexpr int TPW = 32 / LPT; // rows per warp per step
    constexpr int STEP = DEC_WARPS * TPW;
    __shared__ float s_p[G][K_DECODE_PARTITION]; // scores, then probabilities
    __shared__ float s_red[DEC_WARPS][G][HD]; // per-warp output partials
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
                                                            (int64_t)(qh0 + g) * HD + dl * 8);
        float4 x0 = qp[0], x1 = qp[1];
        q[g][0] = x0.x * qscale, q[g][1] = x0.y * qscale, q[g][2] = x0.z * qscale, q[g][3] = x0.w * qscale;
        q[g][4] = x1.x * qscale, q[g][5] = x1.y * qscale, q[g][6] = x1.z * qscale, q[g][7] = x1.w * qscale;
    }

    // One pass: the V rows are loaded together with the K rows (they do not depend on the
    // scores), so the K pass, softmax and V pass are not three serial round trips to memory.
    // (With several passes the extra registers cost more than they save: measured at batch 64.)
    uint4 v_first[DEC_UNROLL];
#pragma unroll
    for (int u = 0; u < DEC_UNROLL; u++) {
        int j = warp * TPW + u * STEP + sub;
        v_first[u] = make_uint4(0, 0, 0, 0);
        if (ONE_PASS && j < n) {
            int t = t0 + j;
            int64_t slot = (int64_t)bt[t / bs] * bs + t % bs;
            v_first[u] = ld_stream(a.v_cache + (slot * a.nkv + kvh) * HD + dl * 8);
        }
    }

    // Phase 1: scores. The loop bound is uniform per warp (shuffles need every lane).
    for (int wb = warp * TPW; wb < n; wb += DEC_UNROLL * STEP) {
        uint4 kv[DEC_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            int j = wb + u * STEP + sub;
            kv[u] = make_uint4(0, 0, 0, 0);
            if (j < n) {
                int t = t0 + j;
                int64_t slot = (int64_t)bt[t / bs] * bs + t % bs;
                kv[u] = ld_stream(a.k_cache + (slot * a.nkv + kvh) * HD + dl * 8);
            }
        }
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            float kf[8];
            bf16x8_to_f32(kv[u], kf);
            int j = wb + u * STEP + sub;
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
    }
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
    for (int wb = warp * TPW; wb < n; wb += DEC_UNROLL * STEP) {
        uint4 vv[DEC_UNROLL];
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            int j = wb + u * STEP + sub;
            vv[u] = v_first[u];
            if (!ONE_PASS && j < n) {
                int t = t0 + j;
                int64_t slot = (int64_t)bt[t / bs] * bs + t % bs;
                vv[u] = ld_stream(a.v_cache + (slot * a.nkv + kvh) * HD + dl * 8);
            }
        }
#pragma unroll
        for (int u = 0; u < DEC_UNROLL; u++) {
            int j = wb + u * STEP + sub;
            if (j < n) {
                float vf[8];
                bf16x8_to_f32(vv[u], vf);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    float p = s_p[g][j];
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[g][i] = fmaf(p, vf[i], acc[g][i]);
                }
            }
        }
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
        for (int k = threadIdx.x; k < G * HD; k += DEC_THREADS) {
            int g = k / HD, d = k % HD;
            float o = 0;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) o += s_red[w][g][d];
            out[(qh0 + g) * HD + d] = __bfloat16_as_ushort(__float2bfloat16_rn(o / s_stat[1][g]));
        }
        return;
    }
    // Several partitions: store (o, m, l), then the last block to arrive combines them.
    for (int k = threadIdx.x; k < G * (HD + 2); k += DEC_THREADS) {
        int g = k / (HD + 2), d = k % (HD + 2);
        float v;
        if (d < HD) {
            v = 0;
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) v += s_red[w][g][d];
        } else {
            v = s_stat[d - HD][g];
        }
        partials[(((int64_t)di * a.nh + qh0 + g) * max_parts + part) * (HD + 2) + d] = v;
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
    for (int k = threadIdx.x; k < G * HD; k += DEC_THREADS) {
        int g = k / HD, d = k % HD;
        const float *pp = partials + (((int64_t)di * a.nh + qh0 + g) * max_parts) * (HD + 2);
        float m = -INFINITY;
        for (int p = 0; p < nparts; p++) m = fmaxf(m, __ldcg(pp + p * (HD + 2) + HD));
        float num = 0, den = 0;
        for (int p = 0; p < nparts; p++) {
            float w = exp2f(__ldcg(pp + p * (HD + 2) + HD) - m);
            num += w * __ldcg(pp + p * (HD + 2) + d);
            den += w * __ldcg(pp + p * (HD + 2) + HD + 1);
        }
        out[(qh0 + g) * HD + d] = __bfloat16_as_ushort(__float2bfloat16_rn(num / den));
    }
}

template <int HD, int G>
static cudaError_t launch_decode(const k_attn_args *a, const int32_t *decode_seqs, int32_t num_decode,
                                 int32_t P, int32_t max_parts, float *partials, int32_t *counters,
                                 cudaStream_t stream)
{
    dim3 grid(a->nh / G, num_decode, max_parts);
    if (P <= dec_pass_rows<HD>())
        return k_launch(decode_attn_kernel<HD, G, true>, grid, dim3(DEC_THREADS), 0, stream, *a,
                        decode_seqs, P, max_parts, partials, counters);
    return k_launch(decode_attn_kernel<HD, G, false>, grid, dim3(DEC_THREADS), 0, stream, *a,
                    decode_seqs, P, max_parts, partials, counters);
}

template <int HD>
static cudaError_t decode_hd(const k_attn_args *a, const int32_t *ds, int32_t nd, int32_t P,
                             int32_t mp, float *partials, int32_t *counters, cudaStream_t stream)
{
    switch (k_decode_heads_per_block(a->nh, a->nkv)) { // the heads of a GQA group, kernels.h
    case 8: return launch_decode<HD, 8>(a, ds, nd, P, mp, partials, counters, stream);
    case 4: return launch_decode<HD, 4>(a, ds, nd, P, mp, partials, counters, stream);
    case 2: return launch_decode<HD, 2>(a, ds, nd, P, mp, partials, counters, stream);
    default: return launch_decode<HD, 1>(a, ds, nd, P, mp, partials, counters, stream);
    }
}

extern "C" cudaError_t k_decode_attention(const k_attn_args *a, const int32_t *decode_seqs,
                                          int32_t num_decode, int32_t partition,
                                          int32_t max_partitions, float *partials,
                                          int32_t *counters, cudaStream_t stream)
{
    if (num_decode == 0) return cudaSuccess;
    if (partition < 32 || partition > K_DECODE_PARTITION || (partition & (partition - 1)))
        return cudaErrorInvalidValue;
    switch (a->hd) {
    case 32: return decode_hd<32>(a, decode_seqs, num_decode, partition, max_partitions, partials, counters, stream);
    case 64: return decode_hd<64>(a, decode_seqs, num_decode, partition, max_partitions, partials, counters, stream);
    case 128: return decode_hd<128>(a, decode_seqs, num_decode, partition, max_partitions, partials, counters, stream);
    default: return cudaErrorInvalidValue;
    }
}

// ---- prefill ----------------------------------------------------------------------------------

// 128 query rows per block, key tiles of 64 double buffered.
#define PF_BQ K_PREFILL_TILE
#define PF_BK 64

// 16-byte global -> shared copy; src_bytes 0 fills zeros.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
    cp_async16_shared((uint32_t)__cvta_generic_to_shared(dst), src, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Q tile, then K and V double buffers: 102 KB at hd 128, two blocks per SM.
template <int HD> constexpr int pf_smem_bytes() { return (PF_BQ + 4 * PF_BK) * (HD + 8) * 2; }

// Why the kernel is arranged as it is: with two blocks per SM (two warps per scheduler) a
// FlashAttention-2 loop on mma.sync is latency bound, not throughput bound, so every choice here
// keeps more independent work in flight per warp:
//  - the head-dim (kk) loop and the sub-tile loop are unrolled, so the ldmatrix loads of step
//    kk + 1 are issued while the MMAs of step kk run;
//  - exp2 is ex2.approx.ftz (one MUFU op; exp2f without --use_fast_math wraps it in extra
//    instructions for denormals): inputs are s - m <= PF_SLACK and results are rounded to bf16, so the
//    approximation (2 ulp) and flushing results below 2^-126 to zero cannot be seen;
//  - the running max is raised only when a score exceeds it by more than PF_SLACK (log2 units),
//    and O and l are rescaled only when some row of the warp raised it (a warp-uniform branch).
//    The result is the same: exp2(s - m) and the final 1/l use the same stale m, which only
//    lets p reach 2^PF_SLACK (bf16 and fp32 keep their relative precision). In a causal
//    prefill the max settles after the first tiles, so the 128 multiplies of O per sub-tile
//    (as many FP32 ops as the PV MMAs take issue slots) mostly disappear;
//  - PF_NW = 8 warps of 16 rows (128 registers, so two blocks of 8 warps per SM fit): twice the
//    warps of a 4 x 32-row arrangement hide latency, at more shared-memory reads per MMA (each
//    K/V fragment feeds one m16 tile's MMAs instead of two); PF_SUB = 64 keys per softmax update
//    halve the Q fragment reloads and softmax bookkeeping per key against 32, for 16 more
//    registers of S (no spills at hd 128). H200, causal n = 2048, hd 128: 0.16 ms.
#define PF_SLACK 8.0f
#define PF_NW 8   // warps a block, 128 / PF_NW query rows each
#define PF_SUB 64 // keys per softmax update

template <int HD>
__global__ void __launch_bounds__(PF_NW * 32, 2) // two blocks per SM (pf_smem_bytes)
prefill_attn_kernel(k_attn_args a, const int32_t *items)
{
    constexpr int NW = PF_NW, SUB = PF_SUB;
    constexpr int THREADS = NW * 32, MT = PF_BQ / (16 * NW); // m16 tiles per warp
    constexpr int LDS = HD + 8, KSTEPS = HD / 16, NT = HD / 8;
    constexpr int KV_ITERS = PF_BK * (HD / 8) / THREADS;
    static_assert(MT >= 1 && MT * 16 * NW == PF_BQ, "whole m16 tiles per warp");
    static_assert(KV_ITERS >= 1 && PF_BK * (HD / 8) % THREADS == 0, "whole chunks per thread");
    static_assert(PF_BK % SUB == 0 && SUB % 16 == 0, "whole sub-tiles of k16 steps");
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *sQ = smem;                 // (BQ, LDS)
    uint16_t *sK = sQ + PF_BQ * LDS;     // (2, BK, LDS)
    uint16_t *sV = sK + 2 * PF_BK * LDS; // (2, BK, LDS)

    griddep_wait();
    griddep_launch_next();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
    const int mi = lane >> 3, r8 = lane & 7;
    const int b = items[2 * blockIdx.y], i0 = items[2 * blockIdx.y + 1], head = blockIdx.x;
    const int q0 = a.query_start_loc[b], n = a.query_start_loc[b + 1] - q0;
    const int len = a.seq_lens[b], ctx = len - n;
    const int kvh = head / (a.nh / a.nkv), nq = min(PF_BQ, n - i0);
    const int last_pos = ctx + i0 + nq - 1;
    const int ntiles = last_pos / PF_BK + 1;
    const int32_t *bt = a.block_tables + (int64_t)b * a.bt_stride;
    const int bs = a.block_size;

    const uint4 *kc16 = reinterpret_cast<const uint4 *>(a.k_cache);
    const uint4 *vc16 = reinterpret_cast<const uint4 *>(a.v_cache);
    auto load_kv = [&](int kt, int buf) {
        uint32_t off[KV_ITERS];
#pragma unroll
        for (int it = 0; it < KV_ITERS; it++) {
            int idx = tid + it * THREADS, j = idx / (HD / 8), c = idx % (HD / 8);
            int key = kt * PF_BK + j;
            off[it] = key <= last_pos
                          ? (uint32_t)((((int64_t)bt[key / bs] * bs + key % bs) * a.nkv + kvh) * (HD / 8) + c)
                          : 0xffffffffu;
        }
#pragma unroll
        for (int it = 0; it < KV_ITERS; it++) {
            int idx = tid + it * THREADS, j = idx / (HD / 8), c = (idx % (HD / 8)) * 8;
            bool ok = off[it] != 0xffffffffu;
            cp_async16(sK + (buf * PF_BK + j) * LDS + c, kc16 + (ok ? off[it] : 0), ok ? 16 : 0);
            cp_async16(sV + (buf * PF_BK + j) * LDS + c, vc16 + (ok ? off[it] : 0), ok ? 16 : 0);
        }
        cp_async_commit();
    };
    load_kv(0, 0);

    const float qscale = a.scale * LOG2E;
    for (int idx = tid; idx < PF_BQ * (HD / 4); idx += THREADS) {
        int r = idx / (HD / 4), c = (idx % (HD / 4)) * 4;
        float4 v = make_float4(0, 0, 0, 0);
        if (r < nq)
            v = *reinterpret_cast<const float4 *>(a.qkv + (int64_t)(q0 + i0 + r) * a.qkv_stride +
                                                  (int64_t)head * HD + c);
        uint32_t *dst = reinterpret_cast<uint32_t *>(sQ + r * LDS + c);
        dst[0] = pack_bf16x2(v.x * qscale, v.y * qscale);
        dst[1] = pack_bf16x2(v.z * qscale, v.w * qscale);
    }

    const int wrow0 = warp * 16 * MT;
    const bool warp_rows = wrow0 < nq;
    const int warp_last = ctx + i0 + min(wrow0 + 16 * MT - 1, nq - 1);

    float o[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NT; j++) o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0;
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) mrow[mt][0] = mrow[mt][1] = -INFINITY, lrow[mt][0] = lrow[mt][1] = 0;

    for (int kt = 0; kt < ntiles; kt++) {
        const int buf = kt & 1;
        if (kt + 1 < ntiles) {
            load_kv(kt + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int sub = 0; sub < PF_BK / SUB; sub++) {
            const int kbase = kt * PF_BK + sub * SUB;
            if (!warp_rows || kbase > warp_last) continue;
            const uint16_t *K = sK + (buf * PF_BK + sub * SUB) * LDS;
            const uint16_t *Vs = sV + (buf * PF_BK + sub * SUB) * LDS;
            float s[MT][SUB / 8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < SUB / 8; j++) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    ldmatrix_x4(qa[mt], sQ + (wrow0 + mt * 16 + (mi & 1) * 8 + r8) * LDS + kk * 16 + (mi >> 1) * 8);
#pragma unroll
                for (int jp = 0; jp < SUB / 16; jp++) {
                    uint32_t kb[4]; // b0, b1 of key columns 16jp..16jp+7, then of 16jp+8..16jp+15
                    ldmatrix_x4(kb, K + ((2 * jp + (mi >> 1)) * 8 + r8) * LDS + kk * 16 + (mi & 1) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_bf16(s[mt][2 * jp], qa[mt], kb[0], kb[1]);
                        mma_bf16(s[mt][2 * jp + 1], qa[mt], kb[2], kb[3]);
                    }
                }
            }
            uint32_t pa[MT][SUB / 16][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int rfirst = ctx + i0 + wrow0 + mt * 16;
                const int qp0 = ctx + i0 + min(wrow0 + mt * 16 + g, nq - 1);
                const int qp1 = ctx + i0 + min(wrow0 + mt * 16 + g + 8, nq - 1);
                if (kbase + SUB - 1 > rfirst) {
#pragma unroll
                    for (int j = 0; j < SUB / 8; j++) {
                        int key = kbase + j * 8 + tq * 2;
                        if (key > qp0) s[mt][j][0] = -INFINITY;
                        if (key + 1 > qp0) s[mt][j][1] = -INFINITY;
                        if (key > qp1) s[mt][j][2] = -INFINITY;
                        if (key + 1 > qp1) s[mt][j][3] = -INFINITY;
                    }
                }
                float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
                for (int j = 0; j < SUB / 8; j++) {
                    mx0 = fmaxf(mx0, fmaxf(s[mt][j][0], s[mt][j][1]));
                    mx1 = fmaxf(mx1, fmaxf(s[mt][j][2], s[mt][j][3]));
                }
#pragma unroll
                for (int off = 1; off < 4; off <<= 1) {
                    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
                    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
                }
                // Raise a row's max only past the slack (the first sub-tile always raises it:
                // it holds key 0, which every row sees, and -inf + slack is -inf); the quad of
                // a row agrees, so each row keeps one max.
                const bool up0 = mx0 > mrow[mt][0] + PF_SLACK, up1 = mx1 > mrow[mt][1] + PF_SLACK;
                if (__any_sync(0xffffffffu, up0 || up1)) {
                    const float al0 = up0 ? ex2_approx(mrow[mt][0] - mx0) : 1.0f;
                    const float al1 = up1 ? ex2_approx(mrow[mt][1] - mx1) : 1.0f;
                    if (up0) mrow[mt][0] = mx0;
                    if (up1) mrow[mt][1] = mx1;
                    lrow[mt][0] *= al0, lrow[mt][1] *= al1;
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        o[mt][j][0] *= al0, o[mt][j][1] *= al0;
                        o[mt][j][2] *= al1, o[mt][j][3] *= al1;
                    }
                }
                const float m0 = mrow[mt][0], m1 = mrow[mt][1];
                float ps0 = 0, ps1 = 0;
#pragma unroll
                for (int j = 0; j < SUB / 8; j++) {
                    s[mt][j][0] = ex2_approx(s[mt][j][0] - m0), s[mt][j][1] = ex2_approx(s[mt][j][1] - m0);
                    s[mt][j][2] = ex2_approx(s[mt][j][2] - m1), s[mt][j][3] = ex2_approx(s[mt][j][3] - m1);
                    ps0 += s[mt][j][0] + s[mt][j][1];
                    ps1 += s[mt][j][2] + s[mt][j][3];
                }
                lrow[mt][0] += ps0;
                lrow[mt][1] += ps1;
#pragma unroll
                for (int kk = 0; kk < SUB / 16; kk++) {
                    pa[mt][kk][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][kk][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][kk][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][kk][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
            }
#pragma unroll
            for (int kk = 0; kk < SUB / 16; kk++) {
#pragma unroll
                for (int j2 = 0; j2 < NT / 2; j2++) {
                    uint32_t vb[4];
                    ldmatrix_x4_trans(vb, Vs + (kk * 16 + (mi & 1) * 8 + r8) * LDS + (2 * j2 + (mi >> 1)) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_bf16(o[mt][2 * j2], pa[mt][kk], vb[0], vb[1]);
                        mma_bf16(o[mt][2 * j2 + 1], pa[mt][kk], vb[2], vb[3]);
                    }
                }
            }
        }
        __syncthreads();
    }

    if (!warp_rows) return;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float l0 = lrow[mt][0], l1 = lrow[mt][1];
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            l0 += __shfl_xor_sync(0xffffffffu, l0, off);
            l1 += __shfl_xor_sync(0xffffffffu, l1, off);
        }
        const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
        const int r0 = wrow0 + mt * 16 + g, r1 = r0 + 8;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            int col = head * HD + j * 8 + tq * 2;
            if (r0 < nq)
                *reinterpret_cast<uint32_t *>(a.out + (int64_t)(q0 + i0 + r0) * a.out_stride + col) =
                    pack_bf16x2(o[mt][j][0] * inv0, o[mt][j][1] * inv0);
            if (r1 < nq)
                *reinterpret_cast<uint32_t *>(a.out + (int64_t)(q0 + i0 + r1) * a.out_stride + col) =
                    pack_bf16x2(o[mt][j][2] * inv1, o[mt][j][3] * inv1);
        }
    }
}

template <int HD> static cudaError_t prefill_attr(void)
{
    static bool done = false;
    if (done) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(prefill_attn_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           pf_smem_bytes<HD>());
    done = err == cudaSuccess;
    return err;
}

// Every head dim's shared-memory limit up front (not lazily inside a graph capture), the wgmma
// kernel's too where it runs.
cudaError_t k_prefill_init(void)
{
    cudaError_t err;
    if ((err = prefill_attr<32>()) != cudaSuccess) return err;
    if ((err = prefill_attr<64>()) != cudaSuccess) return err;
    k_prefill_wgmma_ok();
    return prefill_attr<128>();
}

// The wgmma kernel (prefill_wgmma.cu) where it runs (hd 128 with a power-of-two block size on a
// compute capability 9.0 GPU), this file's kernel elsewhere.
template <int HD>
static cudaError_t launch_prefill(const k_attn_args *a, const int32_t *items, int32_t num_items,
                                  cudaStream_t stream)
{
    if (num_items > 65535) return cudaErrorInvalidValue;
    if (k_prefill_wgmma_runs(a)) return k_prefill_wgmma(a, items, num_items, stream);
    cudaError_t err = prefill_attr<HD>();
    if (err != cudaSuccess) return err;
    return k_launch(prefill_attn_kernel<HD>, dim3(a->nh, num_items), dim3(PF_NW * 32), pf_smem_bytes<HD>(), stream,
                    *a, items);
}

extern "C" cudaError_t k_prefill_attention(const k_attn_args *a, const int32_t *items,
                                           int32_t num_items, cudaStream_t stream)
{
    if (num_items == 0) return cudaSuccess;
    switch (a->hd) {
    case 32: return launch_prefill<32>(a, items, num_items, stream);
    case 64: return launch_prefill<64>(a, items, num_items, stream);
    case 128: return launch_prefill<128>(a, items, num_items, stream);
    default: return cudaErrorInvalidValue;
    }
}
