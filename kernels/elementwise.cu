// elementwise.cu: the memory-bound kernels of a layer: synthetic weights, embedding gather,
// fused residual add + RMSNorm, RoPE + KV write, SiLU-and-multiply. Each is one pass over its
// data with 16-byte accesses; the twins are in engine/cpu_ops.c.
#include "kernels/common.cuh"
#include "kernels/numerics.h"

// ---- synthetic weights ------------------------------------------------------------------------

__global__ void synth_kernel(bf16_t *dst, int64_t n, uint64_t seed, uint32_t id, float mean, float std)
{
    griddep_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = synth_weight_bf16(seed, id, (uint64_t)i, mean, std);
}

extern "C" cudaError_t k_synth_bf16(bf16_t *dst, int64_t n, uint64_t seed, uint32_t tensor_id,
                                    float mean, float std, cudaStream_t stream)
{
    int64_t blocks = (n + 255) / 256;
    if (blocks > 132 * 64) blocks = 132 * 64;
    if (blocks < 1) blocks = 1;
    return k_launch(synth_kernel, dim3((unsigned)blocks), dim3(256), 0, stream, dst, n, seed,
                    tensor_id, mean, std);
}

// ---- embedding ----------------------------------------------------------------------------------

// grid (T), block 128: row t of x from row tokens[t] of the table, 8 values per access.
__global__ void embed_kernel(const bf16_t *embed, const int32_t *tokens, const int32_t *prev, int32_t h,
                             float *x)
{
    griddep_wait();
    griddep_launch_next();
    int t = blockIdx.x;
    int32_t id = tokens[t];
    if (id < 0) id = prev[-1 - id]; // the previous step's sample, not yet on the host
    const uint4 *src = reinterpret_cast<const uint4 *>(embed + (int64_t)id * h);
    float4 *dst = reinterpret_cast<float4 *>(x + (int64_t)t * h);
    for (int c = threadIdx.x; c < h / 8; c += blockDim.x) {
        float f[8];
        bf16x8_to_f32(src[c], f);
        dst[2 * c] = make_float4(f[0], f[1], f[2], f[3]);
        dst[2 * c + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
}

extern "C" cudaError_t k_embed(const bf16_t *embed, const int32_t *tokens, const int32_t *prev, int32_t T,
                               int32_t h, float *x, cudaStream_t stream)
{
    return k_launch(embed_kernel, dim3(T), dim3(128), 0, stream, embed, tokens, prev, h, x);
}

// ---- residual add + RMSNorm -------------------------------------------------------------------

// grid (n), block ceil(h / (8 * NORM_CHUNKS)) rounded up to a warp: each thread keeps its (at
// most NORM_CHUNKS) chunks of 8 values in registers between the sum of squares and the scaling,
// so x and delta are read once. At h = 4096 that is 128 threads with 4 chunks (128 bytes of x)
// each in flight, 58 registers, 8 rows resident per SM; 256 threads sized for 8 chunks took 80
// registers and left 3 rows per SM, which read at ~3.1 TB/s in the prefill step.
#define NORM_THREADS 512
#define NORM_CHUNKS 4 /* h <= 512 * 4 * 8 = 16384 */

__global__ void __launch_bounds__(NORM_THREADS)
add_rmsnorm_kernel(float *x, const float *delta, const bf16_t *w, const int32_t *rows, int32_t h,
                   float eps, bf16_t *out)
{
    __shared__ float red[32];
    griddep_wait();
    griddep_launch_next();
    int i = blockIdx.x;
    int64_t r = rows ? rows[i] : i;
    float *xr = x + r * h;
    const float *dr = delta ? delta + r * h : nullptr;
    float y[NORM_CHUNKS][8];
    float ss = 0;
#pragma unroll
    for (int k = 0; k < NORM_CHUNKS; k++) {
        int c = threadIdx.x + k * blockDim.x;
        if (c < h / 8) {
            float4 a = reinterpret_cast<const float4 *>(xr)[2 * c];
            float4 b = reinterpret_cast<const float4 *>(xr)[2 * c + 1];
            y[k][0] = a.x, y[k][1] = a.y, y[k][2] = a.z, y[k][3] = a.w;
            y[k][4] = b.x, y[k][5] = b.y, y[k][6] = b.z, y[k][7] = b.w;
            if (dr) {
                float4 da = reinterpret_cast<const float4 *>(dr)[2 * c];
                float4 db = reinterpret_cast<const float4 *>(dr)[2 * c + 1];
                y[k][0] += da.x, y[k][1] += da.y, y[k][2] += da.z, y[k][3] += da.w;
                y[k][4] += db.x, y[k][5] += db.y, y[k][6] += db.z, y[k][7] += db.w;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) ss += y[k][j] * y[k][j];
        }
    }
    float inv = rsqrtf(block_sum(ss, red) / (float)h + eps);
#pragma unroll
    for (int k = 0; k < NORM_CHUNKS; k++) {
        int c = threadIdx.x + k * blockDim.x;
        if (c < h / 8) {
            if (!rows && dr) { // without delta y == x: nothing to store
                reinterpret_cast<float4 *>(xr)[2 * c] = make_float4(y[k][0], y[k][1], y[k][2], y[k][3]);
                reinterpret_cast<float4 *>(xr)[2 * c + 1] = make_float4(y[k][4], y[k][5], y[k][6], y[k][7]);
            }
            float wf[8], o[8];
            bf16x8_to_f32(reinterpret_cast<const uint4 *>(w)[c], wf);
#pragma unroll
            for (int j = 0; j < 8; j++) o[j] = y[k][j] * inv * wf[j];
            reinterpret_cast<uint4 *>(out + (int64_t)i * h)[c] = f32_to_bf16x8(o);
        }
    }
}

extern "C" cudaError_t k_add_rmsnorm(float *x, const float *delta, const bf16_t *w,
                                     const int32_t *rows, int32_t n, int32_t h, float eps,
                                     bf16_t *out, cudaStream_t stream)
{
    if (h % 8 || h > NORM_THREADS * NORM_CHUNKS * 8) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    int threads = (h / 8 + NORM_CHUNKS - 1) / NORM_CHUNKS;
    threads = (threads + 31) / 32 * 32;
    return k_launch(add_rmsnorm_kernel, dim3(n), dim3(threads), 0, stream, x, delta, w, rows, h,
                    eps, out);
}

// ---- RoPE + KV write ----------------------------------------------------------------------------

// The unfused path's QKV GEMM writes bf16 (half the bytes of float32, to write and to read here);
// this kernel reads those rows and writes rotated q as float32 for the attention kernels, rotated
// k and v as bf16 into the caches.
//
// grid (T), block a multiple of 32 (<= ROPE_THREADS). A unit is one head's group of W rotation
// pairs, x[i..i+W) with x[i+hd/2..i+hd/2+W): two W-wide bf16 loads (16 bytes at W = 8). A thread
// issues the loads of up to ROPE_UNITS units, then the block computes the row's hd/2 (cos, sin)
// pairs once into shared memory while they are in flight (sincosf in every thread for every head
// would be most of the kernel's time). Angles are float32 pos * inv_freq, as transformers
// computes them. Units run over the q heads, then (only when the row has a slot) the k and v
// heads; v units are copied as they are.
#define ROPE_THREADS 256
#define ROPE_UNITS 4
#define ROPE_MAX_HD 256

// W bf16 values (W = 4 or 8) as W/2 packed pairs, in one access.
template <int W> __device__ __forceinline__ void ld_bf16(const bf16_t *p, uint32_t *w)
{
    if constexpr (W == 8) {
        uint4 v = *reinterpret_cast<const uint4 *>(p);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else {
        uint2 v = *reinterpret_cast<const uint2 *>(p);
        w[0] = v.x, w[1] = v.y;
    }
}
template <int W> __device__ __forceinline__ void st_bf16(bf16_t *p, const uint32_t *w)
{
    if constexpr (W == 8)
        *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    else
        *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
}

template <int W>
__global__ void __launch_bounds__(ROPE_THREADS)
rope_kv_kernel(const bf16_t *qkv, const int32_t *positions, const int32_t *slots,
               int32_t nh, int32_t nkv, int32_t hd, const float *inv_freq, float *q,
               int32_t q_stride, bf16_t *k_cache, bf16_t *v_cache)
{
    // (cos, sin) of pair g*W + k at [k * groups + g]: the threads of a warp read consecutive
    // entries (one per group g), not entries W apart, which would conflict on banks.
    __shared__ float2 cs[ROPE_MAX_HD / 2];
    griddep_wait();
    griddep_launch_next();
    const int t = blockIdx.x, half = hd / 2, groups = half / W;
    const int64_t slot = slots[t];
    const int units = (slot >= 0 ? nh + 2 * nkv : nh) * groups; // no slot: q only
    const bf16_t *row = qkv + (int64_t)t * (nh + 2 * nkv) * hd;
    float *qrow = q + (int64_t)t * q_stride;
    for (int base = 0; base < units; base += blockDim.x * ROPE_UNITS) { // uniform over the block
        uint32_t x[ROPE_UNITS][2][W / 2];
#pragma unroll
        for (int r = 0; r < ROPE_UNITS; r++) {
            int u = base + r * blockDim.x + threadIdx.x;
            if (u < units) {
                const bf16_t *p = row + (u / groups) * hd + (u % groups) * W;
                ld_bf16<W>(p, x[r][0]);
                ld_bf16<W>(p + half, x[r][1]);
            }
        }
        if (base == 0) {
            float pos = (float)positions[t];
            for (int i = threadIdx.x; i < half; i += blockDim.x) {
                float s, c;
                sincosf(__fmul_rn(pos, inv_freq[i]), &s, &c);
                cs[(i % W) * groups + i / W] = make_float2(c, s);
            }
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < ROPE_UNITS; r++) {
            int u = base + r * blockDim.x + threadIdx.x;
            if (u >= units) continue;
            int head = u / groups, g = u % groups, i = g * W;
            if (head >= nh + nkv) {
                bf16_t *vc = v_cache + (slot * nkv + (head - nh - nkv)) * hd + i;
                st_bf16<W>(vc, x[r][0]);
                st_bf16<W>(vc + half, x[r][1]);
                continue;
            }
            float r1[W], r2[W];
#pragma unroll
            for (int k = 0; k < W; k++) {
                // bf16 -> float is the high half of the float's bits
                uint32_t a = x[r][0][k / 2], b = x[r][1][k / 2];
                float x1 = __uint_as_float(k % 2 ? a & 0xffff0000u : a << 16);
                float x2 = __uint_as_float(k % 2 ? b & 0xffff0000u : b << 16);
                float2 c = cs[k * groups + g];
                r1[k] = x1 * c.x - x2 * c.y;
                r2[k] = x2 * c.x + x1 * c.y;
            }
            if (head < nh) {
                float4 *qo = reinterpret_cast<float4 *>(qrow + head * hd + i);
                float4 *qo2 = reinterpret_cast<float4 *>(qrow + head * hd + half + i);
#pragma unroll
                for (int k = 0; k < W / 4; k++) {
                    qo[k] = make_float4(r1[4 * k], r1[4 * k + 1], r1[4 * k + 2], r1[4 * k + 3]);
                    qo2[k] = make_float4(r2[4 * k], r2[4 * k + 1], r2[4 * k + 2], r2[4 * k + 3]);
                }
            } else {
                uint32_t p1[W / 2], p2[W / 2];
#pragma unroll
                for (int k = 0; k < W / 2; k++) {
                    p1[k] = pack_bf16x2(r1[2 * k], r1[2 * k + 1]);
                    p2[k] = pack_bf16x2(r2[2 * k], r2[2 * k + 1]);
                }
                bf16_t *kc = k_cache + (slot * nkv + (head - nh)) * hd + i;
                st_bf16<W>(kc, p1);
                st_bf16<W>(kc + half, p2);
            }
        }
    }
}

extern "C" cudaError_t k_rope_kv_write(const bf16_t *qkv, const int32_t *positions,
                                       const int32_t *slot_mapping, int32_t T, int32_t nh,
                                       int32_t nkv, int32_t hd, const float *inv_freq, float *q,
                                       int32_t q_stride, bf16_t *k_cache, bf16_t *v_cache,
                                       cudaStream_t stream)
{
    if (hd <= 0 || hd % 8 || hd > ROPE_MAX_HD || nh < 1 || nkv < 1 || q_stride % 4 ||
        q_stride < nh * hd)
        return cudaErrorInvalidValue;
    if (T == 0) return cudaSuccess;
    // 8-wide groups where hd/2 allows them (hd 32, 64, 128), else 4-wide
    int W = hd % 16 == 0 ? 8 : 4, units = (nh + 2 * nkv) * (hd / 2 / W);
    int threads = (units + ROPE_UNITS - 1) / ROPE_UNITS;
    threads = threads < 32 ? 32 : threads > ROPE_THREADS ? ROPE_THREADS : (threads + 31) / 32 * 32;
    if (W == 8)
        return k_launch(rope_kv_kernel<8>, dim3(T), dim3(threads), 0, stream, qkv, positions,
                        slot_mapping, nh, nkv, hd, inv_freq, q, q_stride, k_cache, v_cache);
    return k_launch(rope_kv_kernel<4>, dim3(T), dim3(threads), 0, stream, qkv, positions,
                    slot_mapping, nh, nkv, hd, inv_freq, q, q_stride, k_cache, v_cache);
}

// ---- SiLU and multiply ---------------------------------------------------------------------------

// grid (T, blocks per row), block SILU_THREADS: block (t, b) takes the 8-value chunks
// b * SILU_THREADS * SILU_UNITS + r * SILU_THREADS + threadIdx.x (r < SILU_UNITS) of row t's
// gate and up halves, all loaded before any is used. The 2-D grid finds the row without a
// division, and __expf / __fdividef leave a few instructions a value: a grid-stride loop with a
// 64-bit division per chunk, expf and an IEEE division is bound by instruction issue (75% of
// copy bandwidth), not by memory.
#define SILU_THREADS 128
#define SILU_UNITS 2

// silu(g) = g / (1 + exp(-g)), as cpu_silu_mul. The exponent is clamped at 80 so that the
// divisor stays finite and below 2^126, where __fdividef is accurate (for a very negative g,
// expf(-g) is inf); past g = -80, |silu(g)| < 1e-33 with or without the clamp.
__device__ __forceinline__ float silu_fast(float g)
{
    return __fdividef(g, 1.0f + __expf(fminf(-g, 80.0f)));
}

__global__ void __launch_bounds__(SILU_THREADS)
silu_mul_kernel(const bf16_t *gu, int32_t I, bf16_t *out)
{
    griddep_wait();
    griddep_launch_next();
    const int t = blockIdx.x, n = I / 8, c0 = blockIdx.y * SILU_THREADS * SILU_UNITS + threadIdx.x;
    const uint4 *gate = reinterpret_cast<const uint4 *>(gu + (int64_t)t * 2 * I), *up = gate + n;
    uint4 *o = reinterpret_cast<uint4 *>(out + (int64_t)t * I);
    uint4 gv[SILU_UNITS], uv[SILU_UNITS];
#pragma unroll
    for (int r = 0; r < SILU_UNITS; r++) {
        int c = c0 + r * SILU_THREADS;
        if (c < n) gv[r] = gate[c], uv[r] = up[c];
    }
#pragma unroll
    for (int r = 0; r < SILU_UNITS; r++) {
        int c = c0 + r * SILU_THREADS;
        if (c >= n) continue;
        float g[8], u[8], y[8];
        bf16x8_to_f32(gv[r], g);
        bf16x8_to_f32(uv[r], u);
#pragma unroll
        for (int j = 0; j < 8; j++) y[j] = silu_fast(g[j]) * u[j];
        o[c] = f32_to_bf16x8(y);
    }
}

extern "C" cudaError_t k_silu_mul(const bf16_t *gu, int32_t T, int32_t I, bf16_t *out,
                                  cudaStream_t stream)
{
    if (I % 8 || I <= 0) return cudaErrorInvalidValue;
    if (T == 0) return cudaSuccess;
    int per_row = (I / 8 + SILU_THREADS * SILU_UNITS - 1) / (SILU_THREADS * SILU_UNITS);
    return k_launch(silu_mul_kernel, dim3(T, per_row), dim3(SILU_THREADS), 0, stream, gu, I, out);
}
