// gemm_skinny.cu: y = x w^T for M <= 8 rows (decode), where the cost is streaming the weights
// once. A warp owns one weight row: each lane loads 16 bytes (8 bf16) at a time, UNROLL loads in
// flight, multiplies them with the matching 8 values of each of the M activation rows (small,
// so they stay in L1/L2) and the warp sums its lanes at the end. Weights bypass L1.
//
// Bytes: N*K*2 of weights (+ M*K*2 activations from cache, + M*N outputs); FLOPs: 2*M*N*K, far
// below the tensor-core rate, so the kernel is memory bound and is judged by weight bytes / time.
//
// With programmatic dependent launch, each warp issues its first UNROLL weight loads before
// griddepcontrol.wait, overlapping the tail of the kernel before (weights are never written, so
// reading them early is safe). Optionally (k_set_l2_prefetch, off by default) it also asks the
// bulk copy engine to pull its whole row into L2 first.
#include "kernels/common.cuh"

// Two warps per block: rows spread evenly over the SMs (8-warp blocks left some SMs a third
// more rows than others on a 4096-row matrix).
#define SKINNY_WARPS 2

// Off by default: measured on the H200 (docs/engine.md) the early bulk prefetch made a batch-1
// decode step slower (5.42 ms against 4.67 ms), presumably because the loads that follow it
// duplicate its traffic rather than hit in L2.
int k_l2_prefetch_enabled = 0;
extern "C" void k_set_l2_prefetch(int on) { k_l2_prefetch_enabled = on; }
#define SKINNY_UNROLL 4

__device__ __forceinline__ float dot8(uint4 w, uint4 x)
{
    const __nv_bfloat162 *wp = reinterpret_cast<const __nv_bfloat162 *>(&w);
    const __nv_bfloat162 *xp = reinterpret_cast<const __nv_bfloat162 *>(&x);
    float acc = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 a = __bfloat1622float2(wp[i]), b = __bfloat1622float2(xp[i]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
    return acc;
}

template <int M, bool OUT_F32>
__global__ void __launch_bounds__(SKINNY_WARPS * 32)
gemm_skinny_kernel(const bf16_t *__restrict__ x, const bf16_t *__restrict__ w, void *__restrict__ y,
                   int32_t N, int32_t K, int prefetch)
{
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * SKINNY_WARPS + (threadIdx.x >> 5);
    bool active = n < N;
    int chunks = K / 8; // 16-byte chunks per row
    const uint4 *wr = reinterpret_cast<const uint4 *>(w + (int64_t)(active ? n : 0) * K);
    const uint4 *xr = reinterpret_cast<const uint4 *>(x);

    // Prefetch before waiting for the previous kernel: the row into L2, the first batch into
    // registers.
    if (prefetch && active && lane == 0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(wr), "r"(K * 2) : "memory");
    uint4 wv[SKINNY_UNROLL];
#pragma unroll
    for (int u = 0; u < SKINNY_UNROLL; u++) {
        int c = lane + 32 * u;
        wv[u] = (active && c < chunks) ? ld_stream(wr + c) : make_uint4(0, 0, 0, 0);
    }
    griddep_wait();
    griddep_launch_next();
    if (!active) return;

    float acc[M];
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = 0;
    for (int base = 0; base < chunks; base += 32 * SKINNY_UNROLL) {
        // Issue the next batch before using this one: 2 * UNROLL loads in flight per lane.
        uint4 nv[SKINNY_UNROLL];
        int next = base + 32 * SKINNY_UNROLL;
#pragma unroll
        for (int u = 0; u < SKINNY_UNROLL; u++) {
            int c = next + lane + 32 * u;
            nv[u] = c < chunks ? ld_stream(wr + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < SKINNY_UNROLL; u++) {
            int c = base + lane + 32 * u;
            if (c < chunks) {
#pragma unroll
                for (int m = 0; m < M; m++) acc[m] += dot8(wv[u], xr[(int64_t)m * chunks + c]);
            }
            wv[u] = nv[u];
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++) acc[m] = warp_sum(acc[m]);
    if (lane < M) {
        float v = acc[0];
#pragma unroll
        for (int m = 1; m < M; m++)
            if (lane == m) v = acc[m];
        if (OUT_F32) reinterpret_cast<float *>(y)[(int64_t)lane * N + n] = v;
        else reinterpret_cast<__nv_bfloat16 *>(y)[(int64_t)lane * N + n] = __float2bfloat16_rn(v);
    }
}

template <int M>
static cudaError_t launch_m(const bf16_t *x, const bf16_t *w, void *y, int f32, int32_t N, int32_t K,
                            cudaStream_t stream)
{
    dim3 grid((N + SKINNY_WARPS - 1) / SKINNY_WARPS), block(SKINNY_WARPS * 32);
    int pf = k_l2_prefetch_enabled;
    if (f32) return k_launch(gemm_skinny_kernel<M, true>, grid, block, 0, stream, x, w, y, N, K, pf);
    return k_launch(gemm_skinny_kernel<M, false>, grid, block, 0, stream, x, w, y, N, K, pf);
}

extern "C" cudaError_t k_gemm_skinny(const bf16_t *x, const bf16_t *w, void *y, int y_is_f32,
                                     int32_t M, int32_t N, int32_t K, cudaStream_t stream)
{
    if (K % 8 || N < 1) return cudaErrorInvalidValue;
    switch (M) {
    case 1: return launch_m<1>(x, w, y, y_is_f32, N, K, stream);
    case 2: return launch_m<2>(x, w, y, y_is_f32, N, K, stream);
    case 3: return launch_m<3>(x, w, y, y_is_f32, N, K, stream);
    case 4: return launch_m<4>(x, w, y, y_is_f32, N, K, stream);
    case 5: return launch_m<5>(x, w, y, y_is_f32, N, K, stream);
    case 6: return launch_m<6>(x, w, y, y_is_f32, N, K, stream);
    case 7: return launch_m<7>(x, w, y, y_is_f32, N, K, stream);
    case 8: return launch_m<8>(x, w, y, y_is_f32, N, K, stream);
    default: return cudaErrorInvalidValue;
    }
}
