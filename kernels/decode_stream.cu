// decode_stream.cu: every layer of a pure-decode step of one or two sequences in one persistent
// kernel whose weight and KV reads never stop at a phase boundary.
//
// Why. At batch 1 a decode step is 13 GB of weights streamed through ~160 kernels, and each
// boundary drains the memory pipeline: the last loads of one kernel land, its blocks exit, and
// the next kernel's blocks only then issue theirs (~4 us lost per GEMM); batch-1 attention, a
// chain of short dependent round trips, takes 15 us for a 4 us roofline. Keeping the grid
// resident is not enough if each phase still loads its weights after a grid barrier: every phase
// would ramp up and drain as before. But nothing that the loads need depends on the barriers:
// weights never change, and the KV rows of every context token but the newest were written by
// earlier steps. So one producer warp per block walks the block's share of the whole step (every
// layer's QKV, KV, O, gate/up and down bytes, in the order the consumers use them) and streams it
// with bulk copies (TMA, cp.async.bulk) into a ring of shared-memory slots (decode_ring.cuh), as
// far ahead as the ring allows (~190 KB a block, ~6 us of the block's share of bandwidth).
// Barriers, prologues and the attention merge stall only the consumers; memory stays busy. Two
// slots' copies pending at a time are enough for the copy rate (DS_INFLIGHT); more only queue in
// front of the consumers' own L2 accesses, whose round trips (~2 us while the stream runs) are
// what the phases' tails are made of. So the consumers avoid waiting on L2 where they can:
// residual adds are reductions (red), and the merge issues all its loads at once. And where they
// cannot (grid barriers, the staging of a phase's input, the attention merge's counter and loads,
// the wait for every block's Q rows), their block's producer goes quiet: at most one unit pending
// until they are through (3.5% faster at batch 1 than never quiet; holding every copy was slower:
// the next phase started dry). After a barrier the phase runs at the consumers' pace until the
// ring has drained, and they multiply only 1.4-1.6 times as fast as the stream refills it
// (kernels/dev/decode_stream_probes.cu), so their instructions count: bf16 unpacked with one
// integer op a value, two FMA chains, rows two a task where a unit allows, no division for the
// ring's slot.
//
// The engine runs it at batch 1 and 2, where it beats the five fused kernels a layer (on an H100,
// Llama-2-7B at context 1024: 4.57 ms against 100% of the copy roofline's 4.56 at one sequence,
// 5.26 against 6.50 at two; bench_engine_gpu steps): the device code is written for M rows and
// built for M = 1 and 2 (K_DECODE_STREAM_MAX_SEQS).
//
// Length: one kernel whose five phases, producer, signal warp and merge share one ring and one
// set of barriers; split across files they would only trade locality for includes (the ring and
// the GEMM consumers, which the dev probes also run, are already decode_ring.cuh).
//
// A block = 8 consumer warps + 1 producer warp + 1 signal warp, one block per SM, launched
// cooperatively.
//
// Phases of a layer, each after a grid barrier (consumers only) but the second:
//   1. QKV: RMSNorm of the residual rows into shared memory; units of upr weight rows; the
//      epilogue is the fused path's RoPE + KV write (skinny_rows.cuh). The Q rows are the first
//      units claimed, so every block's are stored long before the phase ends: the signal warp
//      counts its block's in, waits for all blocks', stages the block's first query heads and
//      lets the consumers into attention as soon as they finish their QKV units; it counts the
//      block's QKV rows in for the merges (3.0% faster at batch 1 than a grid barrier here).
//   2. attention: the block's contiguous share of all context tokens but the newest (all
//      sequences laid end to end, once per KV-head group); the ring brings TPS tokens' K and V
//      rows per slot; warp w owns query heads w, w + 8, ..; online softmax; one partial (o, m, l)
//      per (sequence, head, block). The last blocks of each (sequence, group) to finish merge
//      its heads' partials with the newest token, whose K/V phase 1 wrote, into the bf16 output
//      (finish_group: a counter, not a grid barrier).
//   3. O + residual add; 4. RMSNorm + gate/up + SiLU * up; 5. down + residual add.
// GEMM units (up to 8 weight rows, one ring slot) are claimed by the producers from a counter
// per phase as their rings have room, so blocks whose bytes arrive sooner take more; the producer
// tells its consumers which unit a slot holds, and ends each phase with a marker slot.
//
// Coherence: everything written during the kernel is read with ld.global.cg (L2): an SM's L1 is
// not coherent with other SMs' stores. The ring is only written by bulk copies of data the
// kernel never writes (weights, old KV rows).
//
// More bytes in flight lengthen the consumers' L2 round trips (barriers, norms, merges); those and
// the consumers' own pace, not the stream, set the step's time.
#include <math.h>

#include "kernels/decode_ring.cuh"

#define DS_INFLIGHT 2  // ring units' copies pending per block, at most (64 KB a block, ~8 MB chip-wide)
#define DS_TPS_MAX 8   // context tokens per ring slot, at most
#define DS_HPW_MAX 4   // query heads per consumer warp, at most (nh <= 32)
#define DS_MAX_GRID 256
#define DS_PSTRIDE(hd) ((hd) + 4) // floats per partial: o[hd], m, l, 2 unused (16-byte rows)
#define DS_LOG2E 1.4426950408889634f

enum { PH_QKV, PH_ATTN, PH_O, PH_GU, PH_DOWN };

// ---- grid-wide counters ----------------------------------------------------------------------
// A block publishes its writes with a release add by one thread after a CTA barrier (cumulative:
// it covers the writes the barrier ordered before it), and learns of others' with relaxed polls
// and one acquire fence, CUTLASS's pattern (a __threadfence, fence.sc, before the add and after
// the poll measured slightly slower).

__device__ __forceinline__ void red_release(unsigned *p, unsigned v)
{
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned atom_add_release(unsigned *p, unsigned v)
{
    unsigned old;
    asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}

__device__ __forceinline__ unsigned ld_relaxed(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void fence_acq_rel() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// Until *p >= v, then acquire.
__device__ __forceinline__ void wait_geq(const unsigned *p, unsigned v)
{
    while (ld_relaxed(p) < v) {
    }
    fence_acq_rel();
}

// ---- geometry both sides agree on ---------------------------------------------------------------

// Token range of block g in the concatenation of all sequences' context tokens.
__device__ __forceinline__ int64_t tok_bound(int g, int64_t total, int G) { return (int64_t)g * total / G; }

// Flat row f of a GEMM phase (rows f = 2t, 2t + 1 are task t's pair).
template <int EPI> __device__ __forceinline__ int flat_row(const k_skinny_args &sa, int f)
{
    int r0, r1;
    task_rows<EPI>(sa, f >> 1, r0, r1);
    return f & 1 ? r1 : r0;
}

// The four GEMMs of layer li as the skinny epilogues see them.
__device__ __forceinline__ k_skinny_args gemm_args(const k_decode_args &a, const k_layer_w &L, int ph)
{
    k_skinny_args s = {};
    s.M = a.M, s.eps = a.eps, s.nh = a.nh, s.nkv = a.nkv, s.hd = a.hd;
    if (ph == PH_QKV) {
        s.w = L.wqkv, s.y = a.qkv, s.N = (a.nh + 2 * a.nkv) * a.hd, s.K = a.h;
        s.positions = a.positions, s.slot_mapping = a.slot_mapping, s.inv_freq = a.inv_freq;
        s.k_cache = L.k_cache, s.v_cache = L.v_cache;
    } else if (ph == PH_O) {
        s.w = L.wo, s.y = a.x, s.N = a.h, s.K = a.nh * a.hd;
    } else if (ph == PH_GU) {
        s.w = L.wgu, s.y = a.act, s.N = 2 * a.I, s.K = a.h;
    } else {
        s.w = L.wdown, s.y = a.x, s.N = a.h, s.K = a.I;
    }
    return s;
}

__device__ __forceinline__ int upr_of(const k_decode_args &a, int ph)
{
    return ph == PH_QKV ? a.upr[0] : ph == PH_O ? a.upr[1] : ph == PH_GU ? a.upr[2] : a.upr[3];
}

// ---- producer --------------------------------------------------------------------------------

// The block's units of one GEMM phase, claimed one at a time from the phase's global counter, so
// that blocks whose bytes arrive sooner take more; then an end-of-phase marker. Two claims are in
// flight while a unit's copies are issued: a claim is an L2 round trip (~1 us while the stream
// runs), which with one in flight could hold the next unit's copies back.
template <int EPI>
__device__ __forceinline__ void produce_gemm(const k_skinny_args &sa, int upr, unsigned *claim, ds_ring &ring,
                                             uint64_t pol)
{
    const int lane = threadIdx.x & 31;
    const unsigned row_bytes = (unsigned)sa.K * 2;
    const int U = (sa.N + upr - 1) / upr;
    // the unit to issue, and the one after it (lane 0's)
    const int c = __shfl_sync(0xffffffffu, lane == 0 ? (int)atomicAdd(claim, 2u) : 0, 0);
    int u = c, next = c + 1;
    for (;; ring.k++) {
        const int after = lane == 0 ? (int)atomicAdd(claim, 1u) : 0; // waited for two units on
        const bool end = u >= U;
        const unsigned s = ring.idx(ring.k);
        ring.acquire();
        if (end) {
            if (lane == 0) ring.unit[s] = -1, mbar_arrive(&ring.full[s]);
            ring.k++;
            return;
        }
        const int f0 = u * upr, rows = min(upr, sa.N - f0);
        if (lane == 0) ring.unit[s] = u, mbar_expect_tx(&ring.full[s], row_bytes * rows);
        __syncwarp();
        if (lane < rows)
            bulk_copy(ring.slot(ring.k) + lane * row_bytes, sa.w + (int64_t)flat_row<EPI>(sa, f0 + lane) * sa.K,
                      row_bytes, &ring.full[s], pol);
        u = __shfl_sync(0xffffffffu, next, 0);
        next = after;
    }
}

// Attention work is the context tokens of all sequences laid end to end, once per KV-head group
// (a.hg groups of nkv / hg KV heads): index e in [0, hg * total) is group e / total, token
// e % total; block g takes [tok_bound(g), tok_bound(g + 1)). f(gi, b, e_lo, e_hi, base) gets each
// (group, sequence) segment [e_lo, e_hi) the block's range [lo, hi) meets; position t of the
// sequence is e - base.
template <typename F>
__device__ __forceinline__ void for_segments(const k_decode_args &a, const int *lens, int64_t total, int64_t lo,
                                             int64_t hi, F f)
{
    for (int gi = (int)(lo / total); gi < a.hg && (int64_t)gi * total < hi; gi++) {
        int64_t base = (int64_t)gi * total;
        for (int b = 0; b < a.M; b++) {
            const int64_t e_lo = max(lo, base), e_hi = min(hi, base + lens[b]);
            if (e_lo < e_hi) f(gi, b, e_lo, e_hi, base);
            base += lens[b];
        }
    }
}

__device__ void produce(const k_decode_args &a, const int *lens, int64_t total, int64_t lo, int64_t hi,
                        const int32_t *toks, ds_ring &ring)
{
    const int lane = threadIdx.x & 31;
    const uint64_t pol = evict_first_policy();
    const int kvg = a.nkv / a.hg;                        // KV heads per group
    const unsigned kv_row = (unsigned)kvg * a.hd * 2;    // bytes of one token's K (or V), one group
    for (int li = 0; li < a.num_layers; li++) {
        const k_layer_w L = a.layers[li];
        for (int ph = PH_QKV; ph <= PH_DOWN; ph++) {
            if (ph == PH_ATTN) {
                for_segments(a, lens, total, lo, hi, [&](int gi, int b, int64_t e_lo, int64_t e_hi, int64_t base) {
                    if (e_hi == base + lens[b]) e_hi--; // the newest token is read after phase 1 writes it
                    for (int64_t e = e_lo; e < e_hi; e += a.tps, ring.k++) {
                        const int n = (int)min((int64_t)a.tps, e_hi - e);
                        const unsigned s = ring.idx(ring.k);
                        ring.acquire();
                        if (lane == 0) mbar_expect_tx(&ring.full[s], 2 * kv_row * n);
                        __syncwarp();
                        const int j = lane & 15;
                        if (j < n) {
                            const bf16_t *src = (lane < 16 ? L.k_cache : L.v_cache) +
                                                ((int64_t)toks[e - lo + j] * a.nkv + gi * kvg) * a.hd;
                            unsigned char *dst = ring.slot(ring.k) + (lane < 16 ? 0 : a.tps * kv_row) + j * kv_row;
                            bulk_copy(dst, src, kv_row, &ring.full[s], pol);
                        }
                    }
                });
                continue;
            }
            const k_skinny_args sa = gemm_args(a, L, ph);
            const int upr = upr_of(a, ph);
            // Each counter on a 128-byte line of its own, away from the barrier's: the consumers
            // spinning on the barrier slowed the claims (and the barrier) when they shared one.
            unsigned *claim = a.barrier + 32 * (1 + li * 4 + (ph == PH_QKV ? 0 : ph - 1));
            if (ph == PH_QKV) produce_gemm<K_EPI_ROPE_KV>(sa, upr, claim, ring, pol);
            else if (ph == PH_GU) produce_gemm<K_EPI_SILU>(sa, upr, claim, ring, pol);
            else produce_gemm<K_EPI_RESIDUAL>(sa, upr, claim, ring, pol);
        }
    }
}

// ---- consumers -------------------------------------------------------------------------------

// The counters of k_decode_args.barrier past the grid barrier's and the unit claims (see
// K_DECODE_SYNC_WORDS): the attention merge's per (layer, sequence, group), then per layer the
// blocks whose Q rows, and whose QKV rows, are stored, each on a 128-byte line.
__device__ __forceinline__ unsigned *merge_counter(const k_decode_args &a, int li, int b, int gi)
{
    return a.barrier + 32 * (1 + 4 * a.num_layers) + li * 16 + b * 4 + gi;
}
__device__ __forceinline__ unsigned *q_counter(const k_decode_args &a, int li)
{
    return a.barrier + 32 * (1 + 4 * a.num_layers) + 16 * a.num_layers + 64 * li;
}
__device__ __forceinline__ unsigned *qkv_counter(const k_decode_args &a, int li) { return q_counter(a, li) + 32; }

// Waits until every block's consumers have called it as often as this one's. Writes before it
// are visible to ld.global.cg after it. The block's producer is quiet meanwhile, and on until the
// consumers next wait for ring data (ds_ring::wait_full), past the next phase's staging.
__device__ __forceinline__ void grid_sync(const k_decode_args &a, unsigned &target)
{
    target += gridDim.x;
    consumer_sync();
    if (threadIdx.x == 0) {
        set_quiet(1);
        red_release(a.barrier, 1u);
        wait_geq(a.barrier, target);
    }
    consumer_sync();
}

// xs (M, K/8 chunks) = bf16(RMSNorm(x rows) * w). At M = 1 the first NR chunks a thread
// handles stay in registers between the sum of squares and the scaling, loaded at once with
// their weights: one L2 round trip (~1-2 us while the stream runs, on the critical path of every
// norm) instead of two, for K <= 8 * DS_CTHREADS * NR; chunks past them are loaded again. (At
// M >= 2 the kept rows pushed the kernel past its 168 registers a thread: spills.)
template <int M>
__device__ __forceinline__ void stage_norm(const float *x, const bf16_t *w, int K, float eps, uint4 *xs,
                                           float (*red)[M])
{
    constexpr int NR = M == 1 ? 2 : 0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, C = K / 8;
    const uint4 *nw = reinterpret_cast<const uint4 *>(w);
    float4 keep[M][NR > 0 ? NR : 1][2];
    uint4 wk[NR > 0 ? NR : 1];
#pragma unroll
    for (int i = 0; i < NR; i++) {
        const int c = threadIdx.x + i * DS_CTHREADS;
        if (c >= C) break;
        wk[i] = __ldg(nw + c);
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float4 *xr = reinterpret_cast<const float4 *>(x + (int64_t)m * K);
            keep[m][i][0] = __ldcg(xr + 2 * c), keep[m][i][1] = __ldcg(xr + 2 * c + 1);
        }
    }
    auto sq = [](float4 p, float4 q) {
        return p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w + q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w;
    };
    auto put = [&](int m, int c, float4 p, float4 q, uint4 wv, float inv) {
        float y[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w}, wf[8], o[8];
        bf16x8_to_f32(wv, wf);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = y[j] * inv * wf[j];
        xs[m * C + c] = f32_to_bf16x8(o);
    };
#pragma unroll
    for (int m = 0; m < M; m++) {
        const float4 *xr = reinterpret_cast<const float4 *>(x + (int64_t)m * K);
        float ss = 0;
#pragma unroll
        for (int i = 0; i < NR; i++)
            if (threadIdx.x + i * DS_CTHREADS < C) ss += sq(keep[m][i][0], keep[m][i][1]);
        for (int c = threadIdx.x + NR * DS_CTHREADS; c < C; c += DS_CTHREADS)
            ss += sq(__ldcg(xr + 2 * c), __ldcg(xr + 2 * c + 1));
        ss = warp_sum(ss);
        if (lane == 0) red[warp][m] = ss;
    }
    consumer_sync();
#pragma unroll
    for (int m = 0; m < M; m++) {
        float tot = 0;
#pragma unroll
        for (int k = 0; k < DS_CWARPS; k++) tot += red[k][m];
        const float inv = rsqrtf(tot / (float)K + eps);
        const float4 *xr = reinterpret_cast<const float4 *>(x + (int64_t)m * K);
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const int c = threadIdx.x + i * DS_CTHREADS;
            if (c < C) put(m, c, keep[m][i][0], keep[m][i][1], wk[i], inv);
        }
        for (int c = threadIdx.x + NR * DS_CTHREADS; c < C; c += DS_CTHREADS)
            put(m, c, __ldcg(xr + 2 * c), __ldcg(xr + 2 * c + 1), __ldg(nw + c), inv);
    }
    consumer_sync();
}

template <int M> __device__ __forceinline__ void stage_copy(const bf16_t *src, int K, uint4 *xs)
{
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    for (int i = threadIdx.x; i < M * K / 8; i += DS_CTHREADS) xs[i] = __ldcg(s + i);
    consumer_sync();
}
// dims lane*DPL .. +DPL of a bf16 row, as floats
template <int DPL> __device__ __forceinline__ void load_bf16(const bf16_t *p, float *f, bool cg)
{
    if (DPL == 4) {
        const uint2 v = cg ? __ldcg(reinterpret_cast<const uint2 *>(p)) : *reinterpret_cast<const uint2 *>(p);
        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v.x));
        const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v.y));
        f[0] = x.x, f[1] = x.y, f[2] = y.x, f[3] = y.y;
    } else {
        const unsigned v = cg ? __ldcg(reinterpret_cast<const unsigned *>(p)) : *reinterpret_cast<const unsigned *>(p);
        const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&v));
        f[0] = x.x, f[1] = x.y;
    }
}

// Online-softmax update of one warp's heads with n (1..TPS) tokens whose K rows start at
// k (token j at k + j * kstride, KV head kv0 + h at + h * HD) and V rows at v; the warp's heads
// are h0 + warp + 8 i. Every token slot is
// computed (rows past n re-read row n - 1 and are masked), so the loads and shuffles of all
// tokens are independent.
template <int HD, int TPS>
__device__ __forceinline__ void attend(const k_decode_args &a, int hpw, const float (&q)[DS_HPW_MAX][HD / 32],
                                       float (&o)[DS_HPW_MAX][HD / 32], float (&mx)[DS_HPW_MAX],
                                       float (&l)[DS_HPW_MAX], const bf16_t *k, const bf16_t *v, int kstride,
                                       int n, bool cg, int h0, int kv0)
{
    constexpr int DPL = HD / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, grp = a.nh / a.nkv;
#pragma unroll
    for (int i = 0; i < DS_HPW_MAX; i++) {
        if (i >= hpw) break;
        const int off = ((h0 + warp + DS_CWARPS * i) / grp - kv0) * HD + lane * DPL;
        float s[TPS], mnew = mx[i];
#pragma unroll
        for (int j = 0; j < TPS; j++) {
            float kf[DPL], d = 0;
            load_bf16<DPL>(k + (int64_t)min(j, n - 1) * kstride + off, kf, cg);
#pragma unroll
            for (int e = 0; e < DPL; e++) d = fmaf(q[i][e], kf[e], d);
            s[j] = d;
        }
        // Every token's sum, then the mask: under `j < n ? warp_sum : -inf` the compiler built
        // one branch region per token and ran the eight shuffle chains one after another (SASS).
#pragma unroll
        for (int j = 0; j < TPS; j++) s[j] = warp_sum(s[j]);
#pragma unroll
        for (int j = 0; j < TPS; j++) {
            s[j] = j < n ? s[j] : -INFINITY;
            mnew = fmaxf(mnew, s[j]);
        }
        const float corr = exp2f(mx[i] - mnew); // 0 on the first tokens (mx = -inf)
        l[i] *= corr;
#pragma unroll
        for (int e = 0; e < DPL; e++) o[i][e] *= corr;
#pragma unroll
        for (int j = 0; j < TPS; j++) {
            const float p = exp2f(s[j] - mnew); // 0 past n
            float vf[DPL];
            load_bf16<DPL>(v + (int64_t)min(j, n - 1) * kstride + off, vf, cg);
            l[i] += p;
#pragma unroll
            for (int e = 0; e < DPL; e++) o[i][e] = fmaf(p, vf[e], o[i][e]);
        }
        mx[i] = mnew;
    }
}

// Merges head h of sequence b: the partials of blocks g_lo..g_hi (those with no tokens wrote
// nothing) and the newest token, whose K/V phase 1 wrote to the cache; writes the bf16 output.
// Warp w takes partials w, w + 8, .. (eight partials' loads in flight), warp 0 also the newest
// token; then the block merges its warps through shared memory.
template <int HD>
__device__ __forceinline__ void merge_head(const k_decode_args &a, const k_layer_w &L, int b, int h, int g_lo,
                                           int g_hi, int64_t work, float *scratch)
{
    constexpr int DPL = HD / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, G = gridDim.x;
    float *s_o = scratch, *s_m = scratch + DS_CWARPS * HD, *s_l = s_m + DS_CWARPS;
    const int P = g_hi - g_lo + 1, nw = P > warp ? (P - warp + DS_CWARPS - 1) / DS_CWARPS : 0;
    const float *base = a.partials + ((int64_t)b * a.nh + h) * G * DS_PSTRIDE(HD);
    float qn[DPL], kn[DPL], vn[DPL]; // warp 0: the newest token, loaded with the partials' m and l
    if (warp == 0) {
        const int qkv_stride = (a.nh + 2 * a.nkv) * HD;
        const int64_t off = ((int64_t)a.slot_mapping[b] * a.nkv + h / (a.nh / a.nkv)) * HD + lane * DPL;
        const float *qp = a.qkv + (int64_t)b * qkv_stride + h * HD + lane * DPL;
#pragma unroll
        for (int e = 0; e < DPL; e++) qn[e] = __ldcg(qp + e);
        load_bf16<DPL>(L.k_cache + off, kn, true);
        load_bf16<DPL>(L.v_cache + off, vn, true);
    }
    // Which of this warp's partials were written (blocks with no tokens wrote nothing) is known
    // here, so every load (m and l, the first eight outputs, warp 0's newest token) goes out
    // at once: one L2 round trip, not one for m and l and another for the outputs.
    bool wrote = false;
    if (lane < nw) {
        const int g = g_lo + warp + DS_CWARPS * lane;
        wrote = tok_bound(g, work, G) < tok_bound(g + 1, work, G);
    }
    const unsigned wmask = __ballot_sync(0xffffffffu, wrote);
    float m = -INFINITY, lsum = 0;
    if (wrote) {
        const float *p = base + (int64_t)(g_lo + warp + DS_CWARPS * lane) * DS_PSTRIDE(HD);
        m = __ldcg(p + HD), lsum = __ldcg(p + HD + 1);
    }
    float acc[DPL];
#pragma unroll
    for (int d = 0; d < DPL; d++) acc[d] = 0;
    float mw = -INFINITY, lw = 0, e = 0;
    unsigned valid = 0;
    for (int i0 = 0; i0 < nw; i0 += 8) { // eight partials' outputs in flight at once
        float v[8][DPL];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const bool w = i0 + k < nw && (wmask >> (i0 + k) & 1);
            const float *p = base + (int64_t)(g_lo + warp + DS_CWARPS * (i0 + k)) * DS_PSTRIDE(HD) + lane * DPL;
#pragma unroll
            for (int d = 0; d < DPL; d++) v[k][d] = w ? __ldcg(p + d) : 0.0f;
        }
        if (i0 == 0) { // the weights, once m and l are in
            const bool ok = m > -INFINITY; // a block whose only token was the newest wrote m = -inf
            valid = __ballot_sync(0xffffffffu, ok);
            mw = warp_max(m);
            e = ok ? exp2f(m - mw) : 0.0f;
            lw = warp_sum(e * lsum);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float w = __shfl_sync(0xffffffffu, e, (i0 + k) & 31); // 0 for unwritten ones
#pragma unroll
            for (int d = 0; d < DPL; d++) acc[d] = fmaf(w, v[k][d], acc[d]);
        }
    }
    bool any = valid != 0;
    if (warp == 0) { // the newest token as one more partial: m = its score, l = 1, o = its V row
        float sd = 0;
#pragma unroll
        for (int d = 0; d < DPL; d++) sd = fmaf(qn[d], kn[d], sd);
        const float sn = warp_sum(sd) * (a.scale * DS_LOG2E);
        const float mn = any ? fmaxf(mw, sn) : sn, f = any ? exp2f(mw - mn) : 0.0f, en = exp2f(sn - mn);
        lw = lw * f + en;
#pragma unroll
        for (int d = 0; d < DPL; d++) acc[d] = fmaf(en, vn[d], acc[d] * f);
        mw = mn, any = true;
    }
#pragma unroll
    for (int d = 0; d < DPL; d++) s_o[warp * HD + lane * DPL + d] = acc[d];
    if (lane == 0) s_m[warp] = any ? mw : -INFINITY, s_l[warp] = lw;
    consumer_sync();
    if (threadIdx.x < HD) {
        float mt = -INFINITY;
#pragma unroll
        for (int w = 0; w < DS_CWARPS; w++) mt = fmaxf(mt, s_m[w]);
        float num = 0, den = 0;
#pragma unroll
        for (int w = 0; w < DS_CWARPS; w++) {
            const float f = s_l[w] > 0 ? exp2f(s_m[w] - mt) : 0.0f;
            num = fmaf(f, s_o[w * HD + threadIdx.x], num);
            den = fmaf(f, s_l[w], den);
        }
        a.attn[(int64_t)b * a.nh * HD + h * HD + threadIdx.x] = bf16_bits(num / den);
    }
    consumer_sync();
}

// After the block stored its partials of (sequence b, KV-head group gi), whose tokens are
// [start, end) of the work: the P blocks that met them count themselves in, and the last
// min(P, heads of the group) to arrive each merge some of the group's heads once all P are in.
// So the merge follows the partials without a grid barrier between them, and the blocks that
// finish early go on. The block's producer is quiet from the arrival, through the merge for the
// mergers.
template <int HD>
__device__ __forceinline__ void finish_group(const k_decode_args &a, const k_layer_w &L, int li, int b, int gi,
                                             int64_t start, int64_t end, int64_t work, float *scratch,
                                             int *s_merge)
{
    const int G = gridDim.x, hpg = a.nh / a.hg;
    // Blocks g with range [g W / G, (g+1) W / G) meeting [start, end): g in [g_lo, g_hi]; when
    // W < G some of them are empty, and each non-empty one holds a single token.
    const int g_lo = (int)(((start + 1) * G + work - 1) / work) - 1;
    const int g_hi = (int)((end * G + work - 1) / work) - 1;
    const int P = (int)min((int64_t)(g_hi - g_lo + 1), end - start), nm = min(P, hpg);
    consumer_sync(); // every warp's partials stored
    if (threadIdx.x == 0) {
        unsigned *ctr = merge_counter(a, li, b, gi);
        set_quiet(1);
        const unsigned old = atom_add_release(ctr, 1u);
        // No grid barrier follows the QKV phase: the merge also waits for every block's QKV rows
        // (the newest token's K/V), read in the same round trip as the arrival.
        unsigned kv = ld_relaxed(qkv_counter(a, li));
        const int k = (int)old - (P - nm); // this block's place among the mergers
        if (k >= 0) {
            if (old + 1 < (unsigned)P) { // not the last to arrive
                while (ld_relaxed(ctr) < (unsigned)P) {
                }
            }
            while (kv < (unsigned)G) kv = ld_relaxed(qkv_counter(a, li));
            fence_acq_rel();
        }
        if (k < 0) set_quiet(0);
        s_merge[0] = k;
    }
    consumer_sync();
    const int k = s_merge[0];
    if (k < 0) return;
    for (int j = k; j < hpg; j += nm) merge_head<HD>(a, L, b, gi * hpg + j, g_lo, g_hi, work, scratch);
}

// qs: the first segment's Q rows, staged by the signal warp; later segments read theirs from qkv.
template <int HD>
__device__ __forceinline__ void consume_attn(const k_decode_args &a, const k_layer_w &L, int li, const int *lens,
                                             int64_t total, int64_t lo, int64_t hi, ds_ring &ring, float *scratch,
                                             int *s_merge, const float *qs)
{
    constexpr int DPL = HD / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, hpg = a.nh / a.hg, hpw = hpg / DS_CWARPS;
    const int kvg = a.nkv / a.hg, kstride = kvg * HD, qkv_stride = (a.nh + 2 * a.nkv) * HD;
    const float qscale = a.scale * DS_LOG2E;
    for_segments(a, lens, total, lo, hi, [&](int gi, int b, int64_t e_lo, int64_t e_hi, int64_t base) {
        const bool has_new = e_hi == base + lens[b];
        const int h0 = gi * hpg, kv0 = gi * kvg;
        float q[DS_HPW_MAX][DPL], o[DS_HPW_MAX][DPL], mx[DS_HPW_MAX], l[DS_HPW_MAX];
#pragma unroll
        for (int i = 0; i < DS_HPW_MAX; i++) {
            mx[i] = -INFINITY, l[i] = 0;
#pragma unroll
            for (int e = 0; e < DPL; e++) q[i][e] = o[i][e] = 0;
            if (i < hpw) {
                const int hl = warp + DS_CWARPS * i; // head of the group
                if (qs) {
#pragma unroll
                    for (int e = 0; e < DPL; e++) q[i][e] = qs[hl * HD + lane * DPL + e] * qscale;
                } else {
                    const float *qp = a.qkv + (int64_t)b * qkv_stride + (h0 + hl) * HD + lane * DPL;
#pragma unroll
                    for (int e = 0; e < DPL; e++) q[i][e] = __ldcg(qp + e) * qscale;
                }
            }
        }
        qs = nullptr; // staged for the first segment only
        const int64_t old_hi = has_new ? e_hi - 1 : e_hi;
        for (int64_t e = e_lo; e < old_hi; e += a.tps, ring.k++) {
            const int n = (int)min((int64_t)a.tps, old_hi - e);
            ring.wait_full();
            const bf16_t *ks = reinterpret_cast<const bf16_t *>(ring.slot(ring.k));
            const bf16_t *vs = ks + a.tps * kstride;
            if (a.tps <= 2) attend<HD, 2>(a, hpw, q, o, mx, l, ks, vs, kstride, n, false, h0, kv0);
            else if (a.tps <= 4) attend<HD, 4>(a, hpw, q, o, mx, l, ks, vs, kstride, n, false, h0, kv0);
            else attend<HD, DS_TPS_MAX>(a, hpw, q, o, mx, l, ks, vs, kstride, n, false, h0, kv0);
            ring.release();
        }
#pragma unroll
        for (int i = 0; i < DS_HPW_MAX; i++) {
            if (i >= hpw) break;
            const int h = h0 + warp + DS_CWARPS * i;
            float *dst = a.partials + (((int64_t)b * a.nh + h) * gridDim.x + blockIdx.x) * DS_PSTRIDE(HD);
#pragma unroll
            for (int e = 0; e < DPL; e++) __stcg(dst + lane * DPL + e, o[i][e]);
            if (lane == 0) __stcg(dst + HD, mx[i]), __stcg(dst + HD + 1, l[i]);
        }
        finish_group<HD>(a, L, li, b, gi, base, base + lens[b], total * a.hg, scratch, s_merge);
    });
}

// The signal warp, each layer: once every consumer warp is past the block's Q units, counts the
// block in (release) and waits for all blocks; stages the Q rows of the block's first attention
// segment (sequence, KV-head group) in qs and lets the consumers into attention. Once they are
// past all the QKV units, counts the block in again for the merges (the newest token's K/V). So
// the consumers go from QKV to attention without a grid barrier: Q rows are claimed first, so
// every block's are in long before the QKV phase ends.
__device__ void signal_layers(const k_decode_args &a, const int *lens, int64_t total, int64_t lo, int64_t hi,
                              float *qs)
{
    const int lane = threadIdx.x & 31, hpg = a.nh / a.hg, n4 = hpg * a.hd / 4;
    int gi0 = -1, b0 = 0;
    for_segments(a, lens, total, lo, hi, [&](int gi, int b, int64_t, int64_t, int64_t) {
        if (gi0 < 0) gi0 = gi, b0 = b;
    });
    const float4 *src = nullptr;
    if (gi0 >= 0)
        src = reinterpret_cast<const float4 *>(a.qkv + (int64_t)b0 * (a.nh + 2 * a.nkv) * a.hd +
                                               (int64_t)gi0 * hpg * a.hd);
    float4 *dst = reinterpret_cast<float4 *>(qs);
    for (int li = 0; li < a.num_layers; li++) {
        signal_sync<DS_BAR_Q_PASSED>();
        if (lane == 0) {
            red_release(q_counter(a, li), 1u);
            wait_geq(q_counter(a, li), gridDim.x);
        }
        __syncwarp();
        for (int i0 = 0; src && i0 < n4; i0 += 8 * 32) { // eight loads a lane in flight
            float4 v[8];
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (i0 + j * 32 + lane < n4) v[j] = __ldcg(src + i0 + j * 32 + lane);
#pragma unroll
            for (int j = 0; j < 8; j++)
                if (i0 + j * 32 + lane < n4) dst[i0 + j * 32 + lane] = v[j];
        }
        signal_arrive<DS_BAR_Q_READY>();
        signal_sync<DS_BAR_QKV_DONE>();
        if (lane == 0) red_release(qkv_counter(a, li), 1u);
    }
}

template <int M, int HD>
__global__ void __launch_bounds__(DS_THREADS, 1) decode_stream_kernel(const k_decode_args a)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ float s_nred[DS_CWARPS][M];
    __shared__ int s_lens[4];
    __shared__ int s_unit[DS_MAX_SLOTS];
    __shared__ int s_merge[1];
    ds_ring ring;
    ring.setup(smem, a.ring_off, a.nslots, a.slot_bytes, DS_INFLIGHT, s_unit);
    unsigned char *scratch = smem + a.scratch_off;
    int32_t *toks = reinterpret_cast<int32_t *>(smem + a.toks_off);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    if (threadIdx.x < M) s_lens[threadIdx.x] = a.seq_lens[threadIdx.x];
    __syncthreads();
    int lens[4] = {0, 0, 0, 0};
    int64_t total = 0;
#pragma unroll
    for (int b = 0; b < M; b++) lens[b] = s_lens[b], total += lens[b];
    const int64_t lo = tok_bound(blockIdx.x, total * a.hg, gridDim.x);
    const int64_t hi = tok_bound(blockIdx.x + 1, total * a.hg, gridDim.x);

    if (warp == DS_CWARPS) { // producer: physical slots of the block's tokens, then the stream
        if (hi - lo > (a.smem - a.toks_off) / 4) __trap(); // more tokens than max_tokens promised
        for_segments(a, lens, total, lo, hi, [&](int, int b, int64_t e_lo, int64_t e_hi, int64_t base) {
            const int32_t *bt = a.block_tables + (int64_t)b * a.bt_stride;
            for (int64_t e = e_lo + lane; e < e_hi; e += 32) {
                const int t = (int)(e - base);
                toks[e - lo] = __ldg(bt + t / a.block_size) * a.block_size + t % a.block_size;
            }
        });
        __syncwarp();
        produce(a, lens, total, lo, hi, toks, ring);
        return;
    }
    float *qs = reinterpret_cast<float *>(scratch + a.q_off);
    if (warp == DS_CWARPS + 1) { // signal warp: the QKV phase's two grid-wide counts
        signal_layers(a, lens, total, lo, hi, qs);
        return;
    }

    uint4 *xs = reinterpret_cast<uint4 *>(scratch);
    unsigned target = 0; // grid barrier count (times the grid)
    const int qunits = (a.nh * a.hd + a.upr[0] - 1) / a.upr[0];
    for (int li = 0; li < a.num_layers; li++) {
        const k_layer_w L = a.layers[li];
        if (li > 0) grid_sync(a, target); // layer 0 reads the embeddings of the previous kernel
        {
            const k_skinny_args sa = gemm_args(a, L, PH_QKV);
            stage_norm<M>(a.x, L.attn_norm, a.h, a.eps, xs, s_nred);
            consume_gemm<M, K_EPI_ROPE_KV>(sa, a.upr[0], xs, ring, qunits);
        }
        // no grid barrier: the signal warp says when every block's Q rows are in
        if (threadIdx.x == 0) set_quiet(1);
        signal_sync<DS_BAR_Q_READY>();
        if (threadIdx.x == 0) set_quiet(0);
        consume_attn<HD>(a, L, li, lens, total, lo, hi, ring, reinterpret_cast<float *>(scratch), s_merge, qs);
        grid_sync(a, target);
        {
            const k_skinny_args sa = gemm_args(a, L, PH_O);
            stage_copy<M>(a.attn, sa.K, xs);
            consume_gemm<M, K_EPI_RESIDUAL, 2>(sa, a.upr[1], xs, ring);
        }
        grid_sync(a, target);
        {
            const k_skinny_args sa = gemm_args(a, L, PH_GU);
            stage_norm<M>(a.x, L.mlp_norm, a.h, a.eps, xs, s_nred);
            consume_gemm<M, K_EPI_SILU>(sa, a.upr[2], xs, ring);
        }
        grid_sync(a, target);
        {
            const k_skinny_args sa = gemm_args(a, L, PH_DOWN);
            stage_copy<M>(a.act, sa.K, xs);
            if (a.upr[3] % 2) consume_gemm<M, K_EPI_RESIDUAL, 1>(sa, a.upr[3], xs, ring);
            else consume_gemm<M, K_EPI_RESIDUAL, 2>(sa, a.upr[3], xs, ring);
        }
    }
}

// ---- host ------------------------------------------------------------------------------------

static int ds_sms(void)
{
    static const int n = k_device_attr(cudaDevAttrMultiProcessorCount, 132);
    return n;
}

static int ds_smem_optin(void)
{
    static const int n = k_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, 227 * 1024);
    return n;
}

static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Rows per ring unit for rows of K elements: as many as fit a slot, at most 8, even where the
// epilogue pairs rows.
static int32_t ds_upr(int32_t slot_bytes, int32_t K, bool paired)
{
    int64_t u = slot_bytes / ((int64_t)K * 2);
    u = u > 8 ? 8 : u;
    return (int32_t)(paired ? u & ~1 : u);
}

// Fills the geometry of a launch (slot size, slot count, offsets); 0 when the shape is not run.
static int ds_geometry(k_decode_args *a)
{
    const int32_t M = a->M, h = a->h, I = a->I, nh = a->nh, nkv = a->nkv, hd = a->hd;
    if (M < 1 || M > K_DECODE_STREAM_MAX_SEQS || (hd != 64 && hd != 128) || nkv < 1 || nh % nkv || nh % DS_CWARPS ||
        nh / DS_CWARPS > DS_HPW_MAX || h % 8 || I % 8 || (nh * hd) % 8 || a->max_tokens < 1 ||
        ds_sms() > DS_MAX_GRID)
        return 0;
    const int64_t kmax = h > I ? (h > nh * hd ? h : nh * hd) : (I > nh * hd ? I : nh * hd);
    // KV-head groups of the attention split: the most that leave each consumer warp a query head
    // (fewer partials per head to merge).
    int32_t hg = 1;
    while (nkv % (2 * hg) == 0 && nh / (2 * hg) >= DS_CWARPS && nh % (2 * hg * DS_CWARPS) == 0) hg *= 2;
    if (nh / hg / DS_CWARPS > DS_HPW_MAX) return 0;
    a->hg = hg;
    const int64_t kv_row = (int64_t)nkv * hd * 2, kv_row_g = kv_row / hg;
    // 32 KB slots, or the smallest that holds two rows of the widest GEMM and a token's K and V.
    int64_t slot = 32768;
    const int64_t need[] = {4LL * h, 2LL * I, 4LL * nh * hd, 2 * kv_row};
    for (int i = 0; i < 4; i++) slot = slot > need[i] ? slot : need[i];
    slot = round_up(slot, 128);
    int64_t scratch = (int64_t)M * kmax * 2, comb = ((int64_t)DS_CWARPS * hd + 2 * DS_CWARPS) * 4;
    // The signal warp stages Q rows (one group's heads) past the QKV phase's staged activation,
    // which the consumers still read then; everything else in scratch is free at the time.
    const int64_t q_off = round_up((int64_t)M * h * 2, 128), q_end = q_off + (int64_t)nh / hg * hd * 4;
    scratch = scratch > comb ? scratch : comb;
    scratch = round_up(scratch > q_end ? scratch : q_end, 128);
    a->q_off = (int32_t)q_off;
    const int64_t toks = round_up(((int64_t)a->max_tokens * hg + ds_sms() - 1) / ds_sms() * 4 + 4, 128);
    const int64_t fixed = 2 * DS_MAX_SLOTS * 8; // mbarriers
    const int64_t stat = 4 * (3 * DS_CWARPS * 4 + 4) + 256; // static shared memory, with slack
    const int64_t avail = ds_smem_optin() - stat - fixed - scratch - toks;
    int64_t ns = avail / slot;
    if (ns > DS_MAX_SLOTS) ns = DS_MAX_SLOTS;
    if (ns < 3) return 0;
    a->slot_bytes = (int32_t)slot;
    a->nslots = (int32_t)ns;
    a->ring_off = (int32_t)fixed;
    a->scratch_off = (int32_t)(fixed + ns * slot);
    a->toks_off = (int32_t)(a->scratch_off + scratch);
    a->smem = a->toks_off + (int32_t)toks;
    a->upr[0] = ds_upr((int32_t)slot, h, true);
    a->upr[1] = ds_upr((int32_t)slot, nh * hd, true);
    a->upr[2] = ds_upr((int32_t)slot, h, true);
    a->upr[3] = ds_upr((int32_t)slot, I, false);
    a->tps = (int32_t)(slot / (2 * kv_row_g) < DS_TPS_MAX ? slot / (2 * kv_row_g) : DS_TPS_MAX);
    return a->upr[0] >= 2 && a->upr[1] >= 2 && a->upr[2] >= 2; // pairs of rows share a unit
}

extern "C" int32_t k_decode_stream_grid(void) { return ds_sms(); }

extern "C" int k_decode_stream_supported(int32_t M, int32_t h, int32_t I, int32_t nh, int32_t nkv, int32_t hd,
                                         int32_t max_tokens)
{
    k_decode_args a = {};
    a.M = M, a.h = h, a.I = I, a.nh = nh, a.nkv = nkv, a.hd = hd, a.max_tokens = max_tokens;
    return ds_geometry(&a);
}

template <int M, int HD> static cudaError_t launch_ds(const k_decode_args *a, cudaStream_t stream)
{
    auto kern = decode_stream_kernel<M, HD>;
    static bool attr = false;
    cudaError_t err;
    if (!attr) {
        if ((err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        ds_smem_optin() - 4 * (3 * DS_CWARPS * 4 + 4) - 256)))
            return err;
        attr = true;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(ds_sms());
    cfg.blockDim = dim3(DS_THREADS);
    cfg.dynamicSmemBytes = a->smem;
    cfg.stream = stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative; // every block resident, or a launch error
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    if ((err = cudaLaunchKernelEx(&cfg, kern, *a))) return err;
    return cudaGetLastError();
}

extern "C" cudaError_t k_decode_stream(const k_decode_args *args, cudaStream_t stream)
{
    k_decode_args a = *args;
    if (a.num_layers < 1 || !ds_geometry(&a)) return cudaErrorInvalidValue;
    if (a.M == 2) return a.hd == 128 ? launch_ds<2, 128>(&a, stream) : launch_ds<2, 64>(&a, stream);
    return a.hd == 128 ? launch_ds<1, 128>(&a, stream) : launch_ds<1, 64>(&a, stream);
}
