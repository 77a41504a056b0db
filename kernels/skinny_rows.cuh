// skinny_rows.cuh: what the weight-streaming GEMMs share: a task's two weight rows (chosen so
// that a fused epilogue has both values it needs in one place) and the epilogues themselves.
// Used by the skinny GEMM kernel (gemm_skinny.cu) and the streamed decode kernel
// (decode_stream.cu).
#pragma once

#include "kernels/common.cuh"

// The two bf16 values of a 32-bit word as floats (exact): the low one shifted up, the high one
// masked. One integer instruction each; __bfloat1622float2 compiled to three for the pair.
__device__ __forceinline__ float bf16_lo(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// Two chains of four products, so that a task's FMAs do not wait on one another as long.
__device__ __forceinline__ float dot8(uint4 w, uint4 x)
{
    const unsigned wv[4] = {w.x, w.y, w.z, w.w}, xv[4] = {x.x, x.y, x.z, x.w};
    float lo = 0, hi = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        lo = fmaf(bf16_lo(wv[i]), bf16_lo(xv[i]), lo);
        hi = fmaf(bf16_hi(wv[i]), bf16_hi(xv[i]), hi);
    }
    return lo + hi;
}

__host__ __device__ __forceinline__ int sk_tasks(int epi, int N)
{
    return epi == K_EPI_SILU ? N / 2 : (N + 1) / 2;
}

// The two weight rows of task t (r1 may be N when N is odd: no row).
template <int EPI>
__device__ __forceinline__ void task_rows(const k_skinny_args &a, int t, int &r0, int &r1)
{
    if (EPI == K_EPI_SILU) {
        r0 = t;
        r1 = t + a.N / 2;
    } else if (EPI == K_EPI_ROPE_KV) {
        int half = a.hd / 2, qk = (a.nh + a.nkv) * half;
        if (t < qk) {
            r0 = (t / half) * a.hd + t % half;
            r1 = r0 + half;
        } else { // v columns start at (nh + nkv) * hd = 2 * qk
            r0 = 2 * t;
            r1 = r0 + 1;
        }
    } else {
        r0 = 2 * t;
        r1 = r0 + 1;
    }
}

__device__ __forceinline__ uint16_t bf16_bits(float v)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// Row m's results v0, v1 of task t (rows r0, r1).
template <int EPI>
__device__ __forceinline__ void epilogue(const k_skinny_args &a, int t, int m, float v0, float v1)
{
    int r0, r1;
    task_rows<EPI>(a, t, r0, r1);
    const int N = a.N;
    if (EPI == K_EPI_F32 || EPI == K_EPI_RESIDUAL) {
        float *y = reinterpret_cast<float *>(a.y) + (int64_t)m * N;
        if (EPI == K_EPI_RESIDUAL) {
            y[r0] += v0;
            if (r1 < N) y[r1] += v1;
        } else {
            y[r0] = v0;
            if (r1 < N) y[r1] = v1;
        }
    } else if (EPI == K_EPI_BF16) {
        uint16_t *y = reinterpret_cast<uint16_t *>(a.y) + (int64_t)m * N;
        y[r0] = bf16_bits(v0);
        if (r1 < N) y[r1] = bf16_bits(v1);
    } else if (EPI == K_EPI_SILU) {
        // gate/up rounded to bf16 first, as the unfused path stores them
        float g = __bfloat162float(__float2bfloat16_rn(v0)), u = __bfloat162float(__float2bfloat16_rn(v1));
        reinterpret_cast<uint16_t *>(a.y)[(int64_t)m * (N / 2) + t] = bf16_bits(g / (1.0f + expf(-g)) * u);
    } else { // K_EPI_ROPE_KV, as rope_kv_kernel
        float *y = reinterpret_cast<float *>(a.y) + (int64_t)m * N;
        const int hd = a.hd, half = hd / 2, qk = (a.nh + a.nkv) * half;
        const int64_t slot = a.slot_mapping[m];
        if (t < qk) {
            const int head = t / half, i = t % half;
            float s, c;
            sincosf(__fmul_rn((float)a.positions[m], a.inv_freq[i]), &s, &c);
            const float x1 = v0, x2 = v1;
            const float o1 = x1 * c - x2 * s, o2 = x2 * c + x1 * s;
            if (head < a.nh) {
                y[r0] = o1;
                y[r1] = o2;
            } else {
                y[r0] = v0;
                y[r1] = v1;
                if (slot >= 0) {
                    bf16_t *kc = a.k_cache + (slot * a.nkv + (head - a.nh)) * hd;
                    kc[i] = bf16_bits(o1);
                    kc[i + half] = bf16_bits(o2);
                }
            }
        } else {
            y[r0] = v0;
            y[r1] = v1;
            if (slot >= 0) {
                bf16_t *vc = a.v_cache + slot * a.nkv * hd + (r0 - 2 * qk);
                vc[0] = bf16_bits(v0);
                vc[1] = bf16_bits(v1);
            }
        }
    }
}
