/*
 * numerics.h: the few numeric helpers that the C host code and the CUDA kernels must compute
 * bit for bit alike: bf16 rounding and the counter-based hash that makes synthetic weights.
 *
 * Key decision: synthetic weights come from a counter-based hash (value = f(seed, tensor id,
 * element index)), not from a sequential generator, so a GPU kernel can make 13.5 GB of them in
 * parallel and the C code makes the very same bf16 values one by one. Only integer arithmetic,
 * one int->float conversion and one float multiply-add per value are used, all exact or
 * correctly rounded in IEEE single precision on both sides, so CPU and GPU weights are
 * bitwise equal. (GSL's generators stay the source of every other random draw: sampling
 * uniforms, test inputs.)
 */
#ifndef TANDEM_NUMERICS_H
#define TANDEM_NUMERICS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define NUM_HD __host__ __device__ __forceinline__
#else
#define NUM_HD static inline
#endif

/* bf16 is stored as its 16 raw bits (the high half of a float32). */
NUM_HD float bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, as __float2bfloat16_rn does; NaN stays a (quiet) NaN. */
NUM_HD uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

NUM_HD float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/* IEEE half -> float (for F16 checkpoints). */
NUM_HD float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* splitmix64's finaliser. */
NUM_HD uint64_t synth_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Synthetic weight `i` of tensor `tensor_id`: mean + std * z, z ~ approximately N(0, 1) (the sum
 * of four 16-bit uniforms, Irwin-Hall, bounded at about +-3.46), rounded to bf16. */
NUM_HD uint16_t synth_weight_bf16(uint64_t seed, uint32_t tensor_id, uint64_t i, float mean,
                                  float std)
{
    uint64_t h = synth_mix64(synth_mix64(seed ^ ((uint64_t)tensor_id << 40)) + i);
    int32_t s = (int32_t)(h & 0xffff) + (int32_t)((h >> 16) & 0xffff) +
                (int32_t)((h >> 32) & 0xffff) + (int32_t)(h >> 48) - 2 * 65535;
    /* s has mean 0 and standard deviation 65536 / sqrt(3) = 37837.23; the scale folds that in
     * and the host and the device round the product and the sum the same way. */
#ifdef __CUDA_ARCH__ /* no fused multiply-add: round exactly as the host does */
    float v = __fadd_rn(__fmul_rn((float)s, std * (1.0f / 37837.227f)), mean);
#else
    float v = (float)s * (std * (1.0f / 37837.227f)) + mean; /* ISO C: no contraction */
#endif
    return f32_to_bf16(v);
}

#endif
