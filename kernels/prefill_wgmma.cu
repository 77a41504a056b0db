// prefill_wgmma.cu: the prefill attention kernel on Hopper's warpgroup MMA (wgmma), hd 128.
//
// The same computation as prefill_attn_kernel in attention.cu (its header says what a block
// does: 128 query rows of one sequence and one head, keys gathered from the pages, online
// softmax, the causal mask that also serves chunked prefill), arranged for the tensor-core
// instructions of sm_90a; mma.sync, which attention.cu uses, peaks at ~210 TFLOP/s here.
// H200, causal n = 2048, 32 heads: 0.111 ms (309 TFLOP/s) against 0.160 for the mma.sync kernel.
//  - Two warpgroups of 64 query rows each, one block an SM (160 KB of shared memory); 128 keys
//    a tile gathered from the pages by cp.async (every thread copies; no producer warps), K and
//    V double buffered.
//  - S = Q K^T: wgmma m64n128k16 with both operands in shared memory (Q and K rows are
//    K-major: hd is the reduction dimension); O += P V: m64n128k16 with P in registers (an S
//    accumulator's fragment of 16 key columns is exactly the A fragment of one k16 step, so
//    P never touches shared memory) and V read N-major (transposed) from shared memory.
//  - Shared memory in the 128-byte-swizzled layout (wg_layout below), so that the eight rows of
//    a core matrix fall on different banks.
//  - Pipelined schedule: a warpgroup issues S of tile t and P V of tile t - 1 back to back,
//    waits for S, computes the new row maxima and P(t) (into the other of two P register
//    arrays) while P V runs, then waits for it and rescales O. One block barrier a tile hands
//    the buffers over; V is loaded a tile after K, so P V of the previous tile keeps its V while
//    the next K arrives. Every warpgroup runs every step, even past its rows: a wgmma under a
//    condition ptxas cannot prove uniform makes it serialize all of them (C7520).
//  - WG_TPR = 8 threads copy a key row (wg_copy): fewer mean fewer page lookups and addresses
//    to compute but more cache lines a warp's copy instruction touches (2 threads a row: 0.130
//    ms), more cost registers (16: spills at 255 registers).
//  - Softmax as in attention.cu: log2-scaled scores, ex2.approx, the max raised only past a
//    slack so O is rescaled only when it moves.
//  - A key tile's pages are loaded a tile ahead and turned into slots with a shift and a mask
//    (power-of-two block sizes only): integer divisions by a general block size, and the
//    block table's round trip in front of every tile's copies, cost a third of the issue slots.
//
// Built for sm_90a only (Makefile: CUDA_ARCH_WGMMA); elsewhere the body compiles to a trap and
// k_prefill_wgmma_runs() says no, so attention.cu keeps its mma.sync kernel for other GPUs,
// head dims and block sizes.
#include <math.h>

#include "kernels/common.cuh"

#define WG_HD 128
#define WG_BQ K_PREFILL_TILE               // query rows a block: two warpgroups of 64
#define WG_BK 128                          // keys a tile
#define WG_THREADS 256
#define WG_TPR 8                           // threads copying a key row (wg_copy)
#define WG_TILE_BYTES (128 * WG_HD * 2)    // one 128 x 128 bf16 operand: 32 KB
#define WG_SMEM (5 * WG_TILE_BYTES + 1024) // Q, K and V double buffered, 1 KB aligned: one block an SM
#define WG_SLACK 8.0f                      // the running max moves only past this (log2 units)
#define WG_LOG2E 1.4426950408889634f

static_assert(WG_BQ == 128, "two warpgroups of 64 rows");

// Where the operands live in shared memory. Q, K and V tiles are 128 rows (query rows or keys)
// x 128 hd values, each stored as two halves of 64 hd values (16 KB): a row's 128 bytes are
// contiguous, and its 16-byte chunk c sits at position c ^ (row % 8), so the eight rows of an
// 8 x 16-byte core matrix fall on different banks (wgmma's 128-byte swizzle). Q and K are read
// K-major (hd is the reduction dimension of Q K^T): 8-row groups 1 KB apart (SBO), a k16 step
// 32 bytes along the row, the second half 16 KB on. V is read N-major (keys are the reduction
// dimension of P V): 8-key groups 1 KB apart (SBO), the hd halves 16 KB apart (LBO).
// WG_TPR threads copy a key row: thread tid copies chunks chunk(tid, j), j < CHUNKS, of its ROWS
// rows row(tid, i).
struct wg_copy {
    static constexpr int ROWS = WG_TPR / 2, CHUNKS = 16 / WG_TPR;
    __device__ static int row(int tid, int i) { return tid / WG_TPR + (WG_THREADS / WG_TPR) * i; }
    __device__ static int chunk(int tid, int j) { return tid % WG_TPR + WG_TPR * j; }
};
struct wg_layout {
    __device__ static uint32_t off(int r, int c) { return (c >> 3) * 16384 + r * 128 + (((c & 7) ^ (r & 7)) << 4); }
    // k16 step ks of query rows [64 wg, 64 wg + 64), of all 128 keys (K), of keys 16 ks.. (V)
    __device__ static uint32_t q_step(int wg, int ks) { return (ks >> 2) * 16384 + wg * 8192 + (ks & 3) * 32; }
    __device__ static uint32_t k_step(int ks) { return (ks >> 2) * 16384 + (ks & 3) * 32; }
    __device__ static uint32_t v_step(int ks) { return ks * 2048; }
    static constexpr uint32_t qk_lbo = 16 /* unused when swizzled */, qk_sbo = 1024, v_lbo = 16384, v_sbo = 1024;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Shared-memory matrix descriptor: start address, LBO and SBO in 16-byte units, layout kind 1
// (128-byte swizzle) in bits 62-63.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMAs.
__device__ __forceinline__ void fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

#define WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_D64                                                                                     \
    WG_D4(0), WG_D4(4), WG_D4(8), WG_D4(12), WG_D4(16), WG_D4(20), WG_D4(24), WG_D4(28), WG_D4(32), \
        WG_D4(36), WG_D4(40), WG_D4(44), WG_D4(48), WG_D4(52), WG_D4(56), WG_D4(60)
#define WG_REGS64                                                                                  \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
    "%56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x 128, fp32 fragment) = or += A (64 x 16, K-major in shared memory) B (16 x 128,
// K-major in shared memory).
__device__ __forceinline__ void wgmma_ss(float *d, uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_D64
                 : "l"(da), "l"(db), "r"(accumulate));
}

// d += A (64 x 16 in registers, the mma.sync A fragment) B (16 x 128, N-major in shared memory).
__device__ __forceinline__ void wgmma_rs(float *d, const uint32_t *a, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_REGS64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : WG_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

#endif

__global__ void __launch_bounds__(WG_THREADS, 1) prefill_wgmma_kernel(k_attn_args a, const int32_t *items)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = wg_layout;
    extern __shared__ __align__(128) uint8_t smem[];
    // The swizzle is a function of address bits 4-9: tiles start on 1 KB boundaries.
    const uint32_t sbase = ((uint32_t)__cvta_generic_to_shared(smem) + 1023) & ~1023u;
    const uint32_t sQ = sbase, sK = sbase + WG_TILE_BYTES, sV = sbase + 3 * WG_TILE_BYTES;

    griddep_wait();
    griddep_launch_next();
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int b = items[2 * blockIdx.y], i0 = items[2 * blockIdx.y + 1], head = blockIdx.x;
    const int q0 = a.query_start_loc[b], n = a.query_start_loc[b + 1] - q0;
    const int len = a.seq_lens[b], ctx = len - n;
    const int kvh = head / (a.nh / a.nkv), nq = min(WG_BQ, n - i0);
    const int last_pos = ctx + i0 + nq - 1, ntiles = last_pos / WG_BK + 1;
    const int32_t *bt = a.block_tables + (int64_t)b * a.bt_stride;
    const int bs = a.block_size, bs_log2 = __ffs(bs) - 1;
    using C = wg_copy;
    static_assert(WG_BK == 128 && WG_THREADS == 256, "WG_TPR / 2 key rows a thread");

    // Pages of this thread's key rows of a tile (-1 past the last key), loaded a tile before
    // the copies use them (a load consumed where it is issued would wait for it).
    auto lookup = [&](int kt, int *page) {
#pragma unroll
        for (int i = 0; i < C::ROWS; i++) {
            const int key = kt * WG_BK + C::row(tid, i);
            page[i] = key <= last_pos ? bt[key >> bs_log2] : -1;
        }
    };
    // Copies this thread's chunks of a K or V tile; rows past the last key are zero-filled.
    auto copy_tile = [&](const bf16_t *cache, uint32_t dst, int kt, const int *page) {
#pragma unroll
        for (int i = 0; i < C::ROWS; i++) {
            const int r = C::row(tid, i);
            const bool ok = page[i] >= 0;
            const uint32_t slot = ((uint32_t)page[i] << bs_log2) + ((kt * WG_BK + r) & (bs - 1));
            const uint4 *src = reinterpret_cast<const uint4 *>(cache) + kvh * 16 +
                               (ok ? (uint64_t)slot * ((uint32_t)a.nkv * 16) : 0);
#pragma unroll
            for (int j = 0; j < C::CHUNKS; j++) {
                const int c = C::chunk(tid, j);
                cp_async16_shared(dst + L::off(r, c), src + c, ok ? 16 : 0);
            }
        }
    };
    auto commit = [] { asm volatile("cp.async.commit_group;\n" ::); };
    // Waits for this thread's copies (and orders its Q stores) before the tensor cores, which
    // read through the async proxy, see them; then the block barrier.
    auto tiles_landed = [] {
        asm volatile("cp.async.wait_group 0;\n" ::);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
    };

    int page_k[C::ROWS], page_v[C::ROWS]; // the pages of the next K tile and of the next V tile
    lookup(0, page_k);
    copy_tile(a.k_cache, sK, 0, page_k);
    commit();
#pragma unroll
    for (int i = 0; i < C::ROWS; i++) page_v[i] = page_k[i];
    if (ntiles > 1) lookup(1, page_k);

    // Q: every load issued before the first is used (one round trip, not several)
    const float qscale = a.scale * WG_LOG2E;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int r = C::row(tid, k % C::ROWS), c = C::chunk(tid, k / C::ROWS);
        float4 lo = make_float4(0, 0, 0, 0), hi = lo;
        if (r < nq) {
            const float4 *src = reinterpret_cast<const float4 *>(
                a.qkv + (int64_t)(q0 + i0 + r) * a.qkv_stride + (int64_t)head * WG_HD + c * 8);
            lo = src[0], hi = src[1];
        }
        const uint4 v = make_uint4(pack_bf16x2(lo.x * qscale, lo.y * qscale), pack_bf16x2(lo.z * qscale, lo.w * qscale),
                                   pack_bf16x2(hi.x * qscale, hi.y * qscale), pack_bf16x2(hi.z * qscale, hi.w * qscale));
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(sQ + L::off(r, c)), "r"(v.x), "r"(v.y),
                     "r"(v.z), "r"(v.w));
    }

    // This thread's score rows: r0 and r0 + 8 of the block (clamped to the last real row, so
    // padding rows see real keys and stay finite; they are not written).
    const int wrow0 = wg * 64, r0 = wrow0 + warp * 16 + g;
    const bool wg_rows = wrow0 < nq;
    const int wg_first = ctx + i0 + wrow0, wg_last = ctx + i0 + min(wrow0 + 63, nq - 1);
    const int qp0 = ctx + i0 + min(r0, nq - 1), qp1 = ctx + i0 + min(r0 + 8, nq - 1);

    float o[64], s[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0, al0 = 1, al1 = 1;
    bool rescale = false;

    auto issue_s = [&](int kt) {
        const uint32_t kb = sK + (kt & 1) * WG_TILE_BYTES;
#pragma unroll
        for (int ks = 0; ks < WG_HD / 16; ks++)
            wgmma_ss(s, smem_desc(sQ + L::q_step(wg, ks), L::qk_lbo, L::qk_sbo),
                     smem_desc(kb + L::k_step(ks), L::qk_lbo, L::qk_sbo), ks > 0);
        wgmma_commit();
    };
    auto issue_pv = [&](int kt, const uint32_t (&p)[WG_BK / 16][4]) {
        const uint32_t vb = sV + (kt & 1) * WG_TILE_BYTES;
#pragma unroll
        for (int ks = 0; ks < WG_BK / 16; ks++) wgmma_rs(o, p[ks], smem_desc(vb + L::v_step(ks), L::v_lbo, L::v_sbo));
        wgmma_commit();
    };
    // Tile kt's scores (in s): mask, new row maxima and the factors that rescale O and l.
    // s[4j + 0..1]: row r0, keys kbase + 8j + 2tq + 0..1; s[4j + 2..3]: row r0 + 8.
    auto row_max = [&](int kt) {
        const int kbase = kt * WG_BK;
        if (kbase + WG_BK - 1 > wg_first) {
#pragma unroll
            for (int j = 0; j < WG_BK / 8; j++) {
                const int key = kbase + j * 8 + tq * 2;
                if (key > qp0) s[4 * j] = -INFINITY;
                if (key + 1 > qp0) s[4 * j + 1] = -INFINITY;
                if (key > qp1) s[4 * j + 2] = -INFINITY;
                if (key + 1 > qp1) s[4 * j + 3] = -INFINITY;
            }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < WG_BK / 8; j++) {
            mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
            mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
        }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        // As in attention.cu: the first tile always raises the max (key 0 is in every row's
        // view), later ones only past the slack; the rescale is a warp-uniform branch.
        const bool up0 = mx0 > m0 + WG_SLACK, up1 = mx1 > m1 + WG_SLACK;
        rescale = __any_sync(0xffffffffu, up0 || up1);
        al0 = up0 ? ex2_approx(m0 - mx0) : 1.0f, al1 = up1 ? ex2_approx(m1 - mx1) : 1.0f;
        if (up0) m0 = mx0;
        if (up1) m1 = mx1;
    };
    // P of the tile from s (into p) and the row sums; O is rescaled separately, once the
    // previous P V has landed.
    auto exps = [&](uint32_t (&p)[WG_BK / 16][4]) {
        if (rescale) l0 *= al0, l1 *= al1;
        float ps0 = 0, ps1 = 0;
#pragma unroll
        for (int j = 0; j < WG_BK / 8; j++) {
            const float e0 = ex2_approx(s[4 * j] - m0), e1 = ex2_approx(s[4 * j + 1] - m0);
            const float e2 = ex2_approx(s[4 * j + 2] - m1), e3 = ex2_approx(s[4 * j + 3] - m1);
            ps0 += e0 + e1, ps1 += e2 + e3;
            p[j / 2][(j & 1) * 2] = pack_bf16x2(e0, e1);
            p[j / 2][(j & 1) * 2 + 1] = pack_bf16x2(e2, e3);
        }
        l0 += ps0, l1 += ps1;
    };
    auto rescale_o = [&] {
        if (!rescale) return;
#pragma unroll
        for (int j = 0; j < WG_HD / 8; j++) {
            o[4 * j] *= al0, o[4 * j + 1] *= al0;
            o[4 * j + 2] *= al1, o[4 * j + 3] *= al1;
        }
    };
    uint32_t pa[WG_BK / 16][4], pb[WG_BK / 16][4];

    // Step t: S of tile t and P V of tile t - 1. Copies in flight during it: K of tile t + 1
    // (into the buffer S of t - 1 read) and V of tile t (into the buffer of t - 2). Every
    // warpgroup runs every step, rows or not (a warpgroup past its rows computes masked
    // scores it never writes): a wgmma under a condition the compiler cannot prove uniform
    // makes it serialize them all.
    auto step_copies = [&](int t) {
        tiles_landed();
        if (t + 1 < ntiles) copy_tile(a.k_cache, sK + ((t + 1) & 1) * WG_TILE_BYTES, t + 1, page_k);
        if (t < ntiles) copy_tile(a.v_cache, sV + (t & 1) * WG_TILE_BYTES, t, page_v);
        commit();
#pragma unroll
        for (int i = 0; i < C::ROWS; i++) page_v[i] = page_k[i];
        if (t + 2 < ntiles) lookup(t + 2, page_k);
    };
    // Step t: wait for S(t), its maxima and P(t) (into pout) while P V of t - 1 (from pin)
    // still runs; then wait for that and rescale O. P alternates between two register
    // arrays so that P(t) is computed while the tensor cores still read P(t - 1).
    auto step = [&](int t, const uint32_t (&pin)[WG_BK / 16][4], uint32_t (&pout)[WG_BK / 16][4]) {
        step_copies(t);
        wgmma_fence();
        fence_regs(s), fence_regs(o);
        issue_s(t);
        issue_pv(t - 1, pin);
        wgmma_wait<1>();
        fence_regs(s);
        row_max(t);
        exps(pout);
        wgmma_wait<0>();
        fence_regs(o);
        rescale_o();
    };
    auto last_pv = [&](const uint32_t (&pin)[WG_BK / 16][4]) {
        step_copies(ntiles);
        wgmma_fence();
        fence_regs(o);
        issue_pv(ntiles - 1, pin);
        wgmma_wait<0>();
        fence_regs(o);
    };
    step_copies(0);
    wgmma_fence();
    fence_regs(s);
    issue_s(0);
    wgmma_wait<0>();
    fence_regs(s);
    row_max(0);
    exps(pa);
    int t = 1;
    for (; t + 1 < ntiles; t += 2) step(t, pa, pb), step(t + 1, pb, pa);
    if (t < ntiles) step(t, pa, pb), last_pv(pb);
    else last_pv(pa);

    if (!wg_rows) return;
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
#pragma unroll
    for (int j = 0; j < WG_HD / 8; j++) {
        const int col = head * WG_HD + j * 8 + tq * 2;
        if (r0 < nq)
            *reinterpret_cast<uint32_t *>(a.out + (int64_t)(q0 + i0 + r0) * a.out_stride + col) =
                pack_bf16x2(o[4 * j] * inv0, o[4 * j + 1] * inv0);
        if (r0 + 8 < nq)
            *reinterpret_cast<uint32_t *>(a.out + (int64_t)(q0 + i0 + r0 + 8) * a.out_stride + col) =
                pack_bf16x2(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
    }
#else
    __trap(); // not built for sm_90a: k_prefill_wgmma_runs() keeps launches away
#endif
}

// True when this process's GPU runs the kernel: compute capability 9.0 (the sm_90a code) and
// its shared-memory limit raised. Decided once.
extern "C" int k_prefill_wgmma_ok(void)
{
    static int ok = -1;
    if (ok < 0) {
        int dev = 0, major = 0, minor = 0;
        ok = cudaGetDevice(&dev) == cudaSuccess &&
             cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
             cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
             major == 9 && minor == 0;
        if (ok)
            ok = cudaFuncSetAttribute(prefill_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM) ==
                 cudaSuccess;
        cudaGetLastError(); // a failed query leaves no sticky error for the next launch
    }
    return ok;
}

int k_prefill_wgmma_runs(const k_attn_args *a)
{
    return a->hd == WG_HD && a->block_size > 0 && !(a->block_size & (a->block_size - 1)) &&
           k_prefill_wgmma_ok();
}

cudaError_t k_prefill_wgmma(const k_attn_args *a, const int32_t *items, int32_t num_items, cudaStream_t stream)
{
    if (!k_prefill_wgmma_runs(a)) return cudaErrorNotSupported;
    return k_launch(prefill_wgmma_kernel, dim3(a->nh, num_items), dim3(WG_THREADS), WG_SMEM, stream, *a, items);
}
