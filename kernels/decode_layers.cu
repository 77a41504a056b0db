// decode_layers.cu: every layer of a pure-decode step (M <= 8 sequences, one row each) in one
// persistent kernel.
//
// Why. At batch 1 a decode step streams 13 GB of weights through some 160 kernels, and each
// kernel boundary drains the memory pipeline: the last loads of one kernel land, its blocks
// exit, the next kernel's blocks start and only then issue their first loads. Measured on the
// five-kernel fused path, this costs about 4 us per GEMM (o_proj at 65% of the copy ceiling,
// gate_up at 88%), and batch-1 attention, a chain of dependent round trips, 15 us against a
// 4 us roofline. Here the grid stays resident for the whole step; phases are separated by grid
// barriers, and each GEMM phase issues its first two batches of weight loads (8 KB a warp,
// 17 MB over the grid) before its barrier, so memory is busy while the slowest warps finish the
// previous phase.
//
// Phases of a layer (the fused path's operations; skinny.cuh runs the GEMMs):
//   1. RMSNorm + QKV + RoPE + KV write                    (grid barrier before: x is complete)
//   2. attention partials: warp items of (sequence, KV head, P context tokens); K and V rows
//      loaded together, scores, max, exp-sum and P.V for each query head of the group, stored
//      as (o[hd], m, l) in rows of hd + 4 floats
//   3. combine: a warp per (sequence, query head) merges its partials into the bf16 output
//   4. O + residual add            (its weight loads are issued before the combine's barrier)
//   5. RMSNorm + gate/up + SiLU * up
//   6. down + residual add
// Six barriers a layer. A barrier is a counter in global memory that every block increments
// once and waits on (acquire) until it reaches the number of blocks times the barriers passed.
//
// Coherence: everything written during the kernel is read with ld.global.cg (L2), never through
// L1 (see skinny.cuh); K/V rows included, since the newest row of each sequence is written by
// phase 1 of the same layer.
#include <math.h>

#include "kernels/skinny.cuh"

#define LOG2E 1.4426950408889634f
#define DL_ROWS 8 // K (and V) rows per lane per attention warp item
#define DL_PSTRIDE(hd) ((hd) + 4) // floats per partial: o[hd], m, l, 2 unused (16-byte rows)

// Context tokens per attention block item (one partial per query head): each of the block's
// warps copies DL_ROWS rows per lane, 32 / (hd / 8) rows at once (hd 128: 8 x 16 = 128 tokens).
__host__ __device__ constexpr int dl_partition(int hd) { return SK_WARPS * DL_ROWS * (32 / (hd / 8)); }
// Shared memory of the attention phase: K and V rows of every warp.
__host__ __device__ constexpr int dl_attn_smem(int hd) { return 2 * dl_partition(hd) * hd * 2; }

__device__ __forceinline__ uint4 ld_cg16(const void *p)
{
    return __ldcg(reinterpret_cast<const uint4 *>(p));
}

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Waits until every block of the grid has called it as often as this one (target counts the
// arrivals expected so far). Writes before it are visible to reads (cg) after it. With a trace
// buffer (k_set_decode_trace), block thread 0 records for each of the first trace_n barriers
// its SM clock at arrival and at exit, and the global timer at exit.
__device__ __forceinline__ void grid_sync(const k_decode_args &a, unsigned &target)
{
    target += gridDim.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        const long long c0 = clock64();
        __threadfence();
        atomicAdd(a.barrier, 1u);
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(a.barrier) : "memory");
        } while (v < target);
        __threadfence();
        const unsigned k = target / gridDim.x - 1;
        if (a.trace && k < (unsigned)a.trace_n) {
            unsigned long long *t = a.trace + ((size_t)k * gridDim.x + blockIdx.x) * 3;
            t[0] = c0, t[1] = clock64(), t[2] = globaltimer();
        }
    }
    __syncthreads();
}

// Phase 2: block items of (sequence, KV head, chunk of DL_CHUNK tokens); warp w of the block
// takes P tokens of the chunk. A lane copies its K and V rows to shared memory with cp.async (all
// of the warp's 8 KB in flight at once, no registers held), then, for each query head of the
// group, the warp computes scores, max, exp-sum and P.V, and the block merges its warps into one
// partial (o[hd], m, l) per chunk. Blocks with no item left prefetch the O projection's weights
// into L2 meanwhile (prefetch_o), since attention leaves memory mostly idle.
template <int HD>
__device__ __forceinline__ void attn_partials(const k_decode_args &a, const bf16_t *kc,
                                              const bf16_t *vc, const bf16_t *wo, int max_len,
                                              uint4 *smem, int li)
{
    // Instrumentation (trace on, layer 5, thread 0): SM clock at the phase's start, after the
    // copies were issued, after they landed, and at the end.
    unsigned long long *tr = a.trace && li == 5 && threadIdx.x == 0
                                 ? a.trace + (size_t)a.trace_n * gridDim.x * 3 + blockIdx.x * 4 : nullptr;
    if (tr) tr[0] = clock64();
    constexpr int LPT = HD / 8, TPW = 32 / LPT, P = dl_partition(HD) / SK_WARPS;
    constexpr int CH = dl_partition(HD);
    __shared__ float s_o[SK_WARPS][HD];
    __shared__ float s_ml[SK_WARPS][2];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane / LPT, dl = lane % LPT, G = a.nh / a.nkv, bs = a.block_size;
    const int qkv_stride = (a.nh + 2 * a.nkv) * HD;
    const int nch = (max_len + CH - 1) / CH, items = a.M * a.nkv * nch;
    const float qscale = a.scale * LOG2E;
    uint4 *sk = smem + warp * 2 * P * LPT, *sv = sk + P * LPT; // (P rows, LPT chunks) each

    if (a.prefetch_o && warp == 0) { // this block's share of wo, in 32 KB requests
        const int64_t total = (int64_t)a.h * a.nh * HD * 2;
        const int64_t share = ((total + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
        const int64_t lo = blockIdx.x * share, hi = min(lo + share, total);
        for (int64_t off = lo + lane * 32768; off < hi; off += 32 * 32768)
            prefetch_l2(reinterpret_cast<const char *>(wo) + off, (uint32_t)min((int64_t)32768, hi - off));
    }
    for (int it = blockIdx.x; it < items; it += gridDim.x) { // uniform over the block
        const int ch = it % nch, kvh = (it / nch) % a.nkv, b = it / (nch * a.nkv);
        const int len = a.seq_lens[b];
        if (ch * CH >= len) continue;
        const int t0 = ch * CH + warp * P, n = max(0, min(P, len - t0));
        const int32_t *bt = a.block_tables + (int64_t)b * a.bt_stride;
        // Block ids first, all loads in flight together (not one round trip per row).
        int blk[DL_ROWS];
#pragma unroll
        for (int r = 0; r < DL_ROWS; r++) {
            const int j = sub + TPW * r;
            blk[r] = j < n ? __ldg(bt + (t0 + j) / bs) : 0;
        }
#pragma unroll
        for (int r = 0; r < DL_ROWS; r++) {
            const int j = sub + TPW * r;
            if (j < n) {
                const int t = t0 + j;
                const int64_t off = (((int64_t)blk[r] * bs + t % bs) * a.nkv + kvh) * HD + dl * 8;
                cp_async16(sk + j * LPT + dl, kc + off, 16);
                cp_async16(sv + j * LPT + dl, vc + off, 16);
            }
        }
        cp_async_commit();
        if (tr) tr[1] = clock64();
        cp_async_wait<0>();
        __syncwarp(); // (each lane reads back only what it copied; this orders the reads)
        if (tr) tr[2] = clock64();
        for (int g = 0; g < G; g++) {
            const int qh = kvh * G + g;
            float mx = -INFINITY, l = 0, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (n > 0) { // uniform over the warp
                const float4 *qp = reinterpret_cast<const float4 *>(a.qkv + (int64_t)b * qkv_stride + qh * HD + dl * 8);
                const float4 q0 = __ldcg(qp), q1 = __ldcg(qp + 1);
                const float q[8] = {q0.x * qscale, q0.y * qscale, q0.z * qscale, q0.w * qscale,
                                    q1.x * qscale, q1.y * qscale, q1.z * qscale, q1.w * qscale};
                float s[DL_ROWS];
#pragma unroll
                for (int r = 0; r < DL_ROWS; r++) {
                    const int j = sub + TPW * r;
                    float kf[8], d = 0;
                    bf16x8_to_f32(j < n ? sk[j * LPT + dl] : make_uint4(0, 0, 0, 0), kf);
#pragma unroll
                    for (int i = 0; i < 8; i++) d = fmaf(q[i], kf[i], d);
#pragma unroll
                    for (int o = LPT / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                    s[r] = j < n ? d : -INFINITY;
                    mx = fmaxf(mx, s[r]);
                }
#pragma unroll
                for (int o = LPT; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
#pragma unroll
                for (int r = 0; r < DL_ROWS; r++) {
                    const int j = sub + TPW * r;
                    if (j < n) {
                        const float p = exp2f(s[r] - mx);
                        float vf[8];
                        bf16x8_to_f32(sv[j * LPT + dl], vf);
                        l += p;
#pragma unroll
                        for (int i = 0; i < 8; i++) acc[i] = fmaf(p, vf[i], acc[i]);
                    }
                }
#pragma unroll
                for (int o = LPT; o < 32; o <<= 1) {
                    l += __shfl_xor_sync(0xffffffffu, l, o);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
                }
            }
            if (sub == 0)
#pragma unroll
                for (int i = 0; i < 8; i++) s_o[warp][dl * 8 + i] = acc[i];
            if (lane == 0) s_ml[warp][0] = mx, s_ml[warp][1] = l;
            __syncthreads();
            if (threadIdx.x < HD) { // merge the warps' partials into the chunk's
                float m = -INFINITY;
#pragma unroll
                for (int w = 0; w < SK_WARPS; w++) m = fmaxf(m, s_ml[w][0]);
                float o = 0, lt = 0;
#pragma unroll
                for (int w = 0; w < SK_WARPS; w++) {
                    const float f = s_ml[w][1] > 0 ? exp2f(s_ml[w][0] - m) : 0.0f;
                    o = fmaf(f, s_o[w][threadIdx.x], o);
                    lt = fmaf(f, s_ml[w][1], lt);
                }
                float *dst = a.partials + (((int64_t)b * a.nh + qh) * a.max_parts + ch) * DL_PSTRIDE(HD);
                __stcg(dst + threadIdx.x, o);
                if (threadIdx.x == 0) __stcg(dst + HD, m), __stcg(dst + HD + 1, lt);
            }
            __syncthreads();
        }
    }
    if (tr) tr[3] = clock64();
}

// Phase 3: a warp per (sequence, query head) merges the chunks; lane holds HD/32 dims.
template <int HD>
__device__ __forceinline__ void attn_combine(const k_decode_args &a)
{
    constexpr int CH = dl_partition(HD), DPL = HD / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = gridDim.x * SK_WARPS, gw = warp * gridDim.x + blockIdx.x;
    for (int it = gw; it < a.M * a.nh; it += nwarps) {
        const int b = it / a.nh, qh = it % a.nh;
        const int np = (a.seq_lens[b] + CH - 1) / CH;
        const float *pp = a.partials + ((int64_t)b * a.nh + qh) * a.max_parts * DL_PSTRIDE(HD);
        float mx = -INFINITY;
        for (int p = lane; p < np; p += 32) mx = fmaxf(mx, __ldcg(pp + p * DL_PSTRIDE(HD) + HD));
        mx = warp_max(mx);
        float num[DPL], den = 0;
#pragma unroll
        for (int i = 0; i < DPL; i++) num[i] = 0;
#pragma unroll 8
        for (int p = 0; p < np; p++) {
            const float *e = pp + p * DL_PSTRIDE(HD);
            const float w = exp2f(__ldcg(e + HD) - mx);
            den = fmaf(w, __ldcg(e + HD + 1), den);
#pragma unroll
            for (int i = 0; i < DPL; i++) num[i] = fmaf(w, __ldcg(e + lane * DPL + i), num[i]);
        }
        bf16_t *out = a.attn + (int64_t)b * a.nh * HD + qh * HD + lane * DPL;
#pragma unroll
        for (int i = 0; i < DPL; i++) out[i] = bf16_bits(num[i] / den);
    }
}

template <int M, int HD>
__global__ void __launch_bounds__(SK_THREADS, 2) decode_layers_kernel(k_decode_args a)
{
    extern __shared__ __align__(16) uint4 s_x[];
    unsigned target = 0;
    auto sync = [&] { grid_sync(a, target); };
    int max_len = 0;
    for (int b = 0; b < M; b++) max_len = max(max_len, a.seq_lens[b]);
    const int qkv_dim = (a.nh + 2 * a.nkv) * HD;
    for (int li = 0; li < a.num_layers; li++) {
        // Each phase reads its layer pointers where it needs them (a barrier's memory clobber
        // keeps the loads there), so they do not hold registers through attention.
        const k_layer_w *L = a.layers + li;
        k_skinny_args q = {};
        q.x = a.x, q.norm_w = L->attn_norm, q.eps = a.eps, q.w = L->wqkv, q.y = a.qkv;
        q.M = M, q.N = qkv_dim, q.K = a.h, q.pro = K_PRO_NORM, q.epi = K_EPI_ROPE_KV;
        q.positions = a.positions, q.slot_mapping = a.slot_mapping, q.inv_freq = a.inv_freq;
        q.k_cache = L->k_cache, q.v_cache = L->v_cache, q.nh = a.nh, q.nkv = a.nkv, q.hd = HD;
        skinny_run<M, K_PRO_NORM, K_EPI_ROPE_KV>(q, 1, s_x, [&] {
            if (li > 0) sync(); // layer 0 reads the embeddings of the previous kernel
        });

        // Attention runs inside the O projection's wait: its first weight batches (half of wo at
        // batch 1) stream in while attention, a chain of short round trips, leaves memory idle.
        k_skinny_args o = {};
        o.x = a.attn, o.w = L->wo, o.y = a.x, o.M = M, o.N = a.h, o.K = a.nh * HD;
        o.pro = K_PRO_NONE, o.epi = K_EPI_RESIDUAL;
        skinny_run<M, K_PRO_NONE, K_EPI_RESIDUAL>(o, 1, s_x, [&] {
            sync();
            attn_partials<HD>(a, L->k_cache, L->v_cache, L->wo, max_len, s_x, li);
            sync();
            attn_combine<HD>(a);
            sync();
        });

        k_skinny_args g = {};
        g.x = a.x, g.norm_w = L->mlp_norm, g.eps = a.eps, g.w = L->wgu, g.y = a.act;
        g.M = M, g.N = 2 * a.I, g.K = a.h, g.pro = K_PRO_NORM, g.epi = K_EPI_SILU;
        skinny_run<M, K_PRO_NORM, K_EPI_SILU>(g, 1, s_x, sync);

        k_skinny_args d = {};
        d.x = a.act, d.w = L->wdown, d.y = a.x, d.M = M, d.N = a.h, d.K = a.I;
        d.pro = K_PRO_NONE, d.epi = K_EPI_RESIDUAL;
        skinny_run<M, K_PRO_NONE, K_EPI_RESIDUAL>(d, 1, s_x, sync);
    }
}

// Dynamic shared memory: the staged activation of the largest GEMM, or attention's K/V rows.
static size_t dl_smem(int32_t M, int32_t h, int32_t I, int32_t nh, int32_t hd)
{
    int32_t k = max(max(h, I), nh * hd);
    return max((size_t)M * k * 2, (size_t)dl_attn_smem(hd));
}

extern "C" int32_t k_decode_layers_partition(int32_t hd) { return dl_partition(hd); }

extern "C" int k_decode_layers_supported(int32_t M, int32_t h, int32_t I, int32_t nh, int32_t nkv, int32_t hd)
{
    return M >= 1 && M <= 8 && (hd == 64 || hd == 128) && nkv > 0 && nh % nkv == 0 && h % 8 == 0 &&
           I % 8 == 0 && dl_smem(M, h, I, nh, hd) <= K_SKINNY_SMEM;
}

template <int M, int HD> static cudaError_t launch_dl(const k_decode_args *a, cudaStream_t stream)
{
    auto kern = decode_layers_kernel<M, HD>;
    const size_t smem = dl_smem(M, a->h, a->I, a->nh, HD);
    static int per_sm[K_SKINNY_SMEM / 1024 + 1]; // occupancy by staged size, 0: not known yet
    int &occ = per_sm[smem / 1024];
    cudaError_t err;
    if (occ == 0) {
        if ((err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, K_SKINNY_SMEM)) ||
            (err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, SK_THREADS, smem)))
            return err;
        if (occ == 0) return cudaErrorInvalidConfiguration;
    }
    int dev = 0, sms = 0;
    if ((err = cudaGetDevice(&dev)) || (err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)))
        return err;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(sms * min(occ, 2));
    cfg.blockDim = dim3(SK_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative; // every block resident, or a launch error
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if ((err = cudaLaunchKernelEx(&cfg, kern, *a))) return err;
    return cudaGetLastError();
}

template <int HD> static cudaError_t dl_m(const k_decode_args *a, cudaStream_t stream)
{
    switch (a->M) {
    case 1: return launch_dl<1, HD>(a, stream);
    case 2: return launch_dl<2, HD>(a, stream);
    case 3: return launch_dl<3, HD>(a, stream);
    case 4: return launch_dl<4, HD>(a, stream);
    case 5: return launch_dl<5, HD>(a, stream);
    case 6: return launch_dl<6, HD>(a, stream);
    case 7: return launch_dl<7, HD>(a, stream);
    case 8: return launch_dl<8, HD>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}

static unsigned long long *trace_buf;
static int32_t trace_len;
static int prefetch_o = 0;

extern "C" void k_set_decode_prefetch(int on) { prefetch_o = on; }

extern "C" void k_set_decode_trace(unsigned long long *buf, int32_t barriers)
{
    trace_buf = buf;
    trace_len = buf ? barriers : 0;
}

extern "C" cudaError_t k_decode_layers(const k_decode_args *args, cudaStream_t stream)
{
    k_decode_args a = *args;
    if (!k_decode_layers_supported(a.M, a.h, a.I, a.nh, a.nkv, a.hd) || a.num_layers < 1)
        return cudaErrorInvalidValue;
    a.trace = trace_buf, a.trace_n = trace_len, a.prefetch_o = prefetch_o;
    return a.hd == 128 ? dl_m<128>(&a, stream) : dl_m<64>(&a, stream);
}
