// elementwise.cu: the memory-bound kernels of a layer: synthetic weights, embedding gather,
// fused residual add + RMSNorm, RoPE + KV write, SiLU-and-multiply. Each is one pass over its
// data with 16-byte accesses; the twins are in engine/cpu_ops.c.
#include "engine/numerics.h"
#include "kernels/common.cuh"

int k_pdl_enabled = 1;

extern "C" void k_set_pdl(int on) { k_pdl_enabled = on; }

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
__global__ void embed_kernel(const bf16_t *embed, const int32_t *tokens, int32_t h, float *x)
{
    griddep_wait();
    griddep_launch_next();
    int t = blockIdx.x;
    const uint4 *src = reinterpret_cast<const uint4 *>(embed + (int64_t)tokens[t] * h);
    float4 *dst = reinterpret_cast<float4 *>(x + (int64_t)t * h);
    for (int c = threadIdx.x; c < h / 8; c += blockDim.x) {
        float f[8];
        bf16x8_to_f32(src[c], f);
        dst[2 * c] = make_float4(f[0], f[1], f[2], f[3]);
        dst[2 * c + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
}

extern "C" cudaError_t k_embed(const bf16_t *embed, const int32_t *tokens, int32_t T, int32_t h,
                               float *x, cudaStream_t stream)
{
    return k_launch(embed_kernel, dim3(T), dim3(128), 0, stream, embed, tokens, h, x);
}

// ---- residual add + RMSNorm -------------------------------------------------------------------

// grid (n), block 256. Each thread keeps its (at most 8) chunks of 8 values in registers
// between the sum of squares and the scaling, so x and delta are read once.
#define NORM_THREADS 256
#define NORM_MAX_CHUNKS 8 /* h <= 256 * 8 * 8 = 16384 */

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
    float y[NORM_MAX_CHUNKS][8];
    float ss = 0;
#pragma unroll
    for (int k = 0; k < NORM_MAX_CHUNKS; k++) {
        int c = threadIdx.x + k * NORM_THREADS;
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
    for (int k = 0; k < NORM_MAX_CHUNKS; k++) {
        int c = threadIdx.x + k * NORM_THREADS;
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
    if (h % 8 || h > NORM_THREADS * NORM_MAX_CHUNKS * 8) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    return k_launch(add_rmsnorm_kernel, dim3(n), dim3(NORM_THREADS), 0, stream, x, delta, w, rows,
                    h, eps, out);
}

// ---- RoPE + KV write ----------------------------------------------------------------------------

// grid (T), block 256. A thread rotates 4 consecutive pairs with 16-byte accesses (x[i..i+3]
// with x[i+hd/2..i+hd/2+3]), writing q back and k to the cache, then v is copied 8 values at a
// time. Angles are float32 pos * inv_freq, as transformers computes them. hd % 8 == 0.
__global__ void rope_kv_kernel(float *qkv, const int32_t *positions, const int32_t *slots,
                               int32_t nh, int32_t nkv, int32_t hd, const float *inv_freq,
                               bf16_t *k_cache, bf16_t *v_cache)
{
    griddep_wait();
    griddep_launch_next();
    int t = blockIdx.x, half = hd / 2, q4 = half / 4;
    int64_t stride = (int64_t)(nh + 2 * nkv) * hd;
    float *row = qkv + t * stride;
    float pos = (float)positions[t];
    int64_t slot = slots[t];
    int groups = (nh + nkv) * q4;
    for (int p = threadIdx.x; p < groups; p += blockDim.x) {
        int head = p / q4, i = (p % q4) * 4;
        float *v = row + (int64_t)head * hd;
        float4 a = *reinterpret_cast<const float4 *>(v + i), b = *reinterpret_cast<const float4 *>(v + i + half);
        float x1[4] = {a.x, a.y, a.z, a.w}, x2[4] = {b.x, b.y, b.z, b.w}, r1[4], r2[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float s, c;
            sincosf(__fmul_rn(pos, inv_freq[i + k]), &s, &c);
            r1[k] = x1[k] * c - x2[k] * s;
            r2[k] = x2[k] * c + x1[k] * s;
        }
        if (head < nh) {
            *reinterpret_cast<float4 *>(v + i) = make_float4(r1[0], r1[1], r1[2], r1[3]);
            *reinterpret_cast<float4 *>(v + i + half) = make_float4(r2[0], r2[1], r2[2], r2[3]);
        } else if (slot >= 0) {
            bf16_t *kc = k_cache + (slot * nkv + (head - nh)) * hd;
            *reinterpret_cast<uint2 *>(kc + i) = make_uint2(pack_bf16x2(r1[0], r1[1]), pack_bf16x2(r1[2], r1[3]));
            *reinterpret_cast<uint2 *>(kc + i + half) = make_uint2(pack_bf16x2(r2[0], r2[1]), pack_bf16x2(r2[2], r2[3]));
        }
    }
    if (slot < 0) return;
    const float4 *vsrc = reinterpret_cast<const float4 *>(row + (int64_t)(nh + nkv) * hd);
    uint4 *vc = reinterpret_cast<uint4 *>(v_cache + slot * nkv * hd);
    for (int j = threadIdx.x; j < nkv * hd / 8; j += blockDim.x) {
        float4 a = vsrc[2 * j], b = vsrc[2 * j + 1];
        float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        vc[j] = f32_to_bf16x8(f);
    }
}

extern "C" cudaError_t k_rope_kv_write(float *qkv, const int32_t *positions,
                                       const int32_t *slot_mapping, int32_t T, int32_t nh,
                                       int32_t nkv, int32_t hd, const float *inv_freq,
                                       bf16_t *k_cache, bf16_t *v_cache, cudaStream_t stream)
{
    if (hd % 8) return cudaErrorInvalidValue;
    return k_launch(rope_kv_kernel, dim3(T), dim3(256), 0, stream, qkv, positions, slot_mapping, nh,
                    nkv, hd, inv_freq, k_cache, v_cache);
}

// ---- SiLU and multiply ---------------------------------------------------------------------------

__global__ void silu_mul_kernel(const bf16_t *gu, int32_t T, int32_t I, bf16_t *out)
{
    griddep_wait();
    griddep_launch_next();
    int64_t chunks = (int64_t)T * (I / 8);
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < chunks;
         k += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = k / (I / 8), c = k % (I / 8);
        const uint4 *row = reinterpret_cast<const uint4 *>(gu + t * 2 * I);
        float g[8], u[8], o[8];
        bf16x8_to_f32(row[c], g);
        bf16x8_to_f32(row[I / 8 + c], u);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
        reinterpret_cast<uint4 *>(out + t * I)[c] = f32_to_bf16x8(o);
    }
}

extern "C" cudaError_t k_silu_mul(const bf16_t *gu, int32_t T, int32_t I, bf16_t *out,
                                  cudaStream_t stream)
{
    if (I % 8) return cudaErrorInvalidValue;
    int64_t chunks = (int64_t)T * (I / 8), blocks = (chunks + 255) / 256;
    if (blocks > 132 * 16) blocks = 132 * 16;
    return k_launch(silu_mul_kernel, dim3((unsigned)blocks), dim3(256), 0, stream, gu, T, I, out);
}
