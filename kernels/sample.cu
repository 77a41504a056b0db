// sample.cu: one token per logits row, the same algorithm as engine/sampler.c (see sampler.h):
// greedy argmax (lowest id on ties), or temperature + top-p where the nucleus threshold is found
// by binary search over float bit patterns (about 30 block-wide sums over the vocabulary, no
// sort) and the token is the first id, in id order, where the running nucleus mass passes
// u * mass. One block of 1024 threads per row; probabilities are recomputed in each pass
// rather than stored (the vocabulary need not fit in shared memory).
#include "kernels/common.cuh"

#define SAMPLE_THREADS 1024

__device__ __forceinline__ void argmax_merge(float &v, int &i, float v2, int i2)
{
    if (v2 > v || (v2 == v && i2 < i)) v = v2, i = i2;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(const float *logits, int32_t V, const float *temperature, const float *top_p,
              const float *uniform, int32_t *out)
{
    __shared__ float red[32];
    __shared__ int redi[32];
    __shared__ float s_chunk[SAMPLE_THREADS];
    griddep_wait();
    const int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float *l = logits + (int64_t)row * V;
    const float temp = temperature[row];

    // Max (with its lowest index, for greedy). A NaN or +inf logit leaves no distribution: the
    // row's token is -1 (SAMPLE_NOT_FINITE in engine/sampler.h) and the host stops.
    float best = -INFINITY;
    int bi = V, bad = 0;
    for (int i = tid; i < V; i += SAMPLE_THREADS) {
        argmax_merge(best, bi, l[i], i);
        bad |= !(l[i] < INFINITY);
    }
    if (__syncthreads_or(bad)) {
        if (tid == 0) out[row] = -1;
        return;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        argmax_merge(best, bi, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, bi, o));
    if (lane == 0) red[warp] = best, redi[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        best = red[lane], bi = redi[lane];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            argmax_merge(best, bi, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, bi, o));
        if (lane == 0) red[0] = best, redi[0] = bi;
    }
    __syncthreads();
    const float mx = red[0];
    if (temp <= 0) {
        if (tid == 0) out[row] = redi[0];
        return;
    }
    __syncthreads();

    // p_i = exp((l_i - max) / T); Z; then the largest tau whose mass reaches top_p * Z.
    float z = 0;
    for (int i = tid; i < V; i += SAMPLE_THREADS) z += expf((l[i] - mx) / temp);
    const float target = top_p[row] * block_sum(z, red);
    uint32_t lo = 0, hi = 0x3f800000u;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        float tau = __uint_as_float(mid), m = 0;
        for (int i = tid; i < V; i += SAMPLE_THREADS) {
            float p = expf((l[i] - mx) / temp);
            if (p >= tau) m += p;
        }
        if (block_sum(m, red) >= target) lo = mid;
        else hi = mid - 1;
    }
    const float tau = __uint_as_float(lo);

    // Each thread owns a contiguous range of ids; an exclusive scan of the ranges' nucleus mass
    // tells which range holds u * mass, and its thread walks it.
    const int per = (V + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
    const int b0 = min(V, tid * per), b1 = min(V, b0 + per);
    float mine = 0;
    for (int i = b0; i < b1; i++) {
        float p = expf((l[i] - mx) / temp);
        if (p >= tau) mine += p;
    }
    s_chunk[tid] = mine;
    __syncthreads();
    if (tid == 0) {
        float total = 0;
        for (int k = 0; k < SAMPLE_THREADS; k++) {
            float c = s_chunk[k];
            s_chunk[k] = total;
            total += c;
        }
        red[0] = uniform[row] * total;
        redi[0] = -1;
    }
    __syncthreads();
    const float pick = red[0];
    float cum = s_chunk[tid];
    if (b0 < b1 && cum <= pick && cum + mine > pick) {
        for (int i = b0; i < b1; i++) {
            float p = expf((l[i] - mx) / temp);
            if (p < tau) continue;
            cum += p;
            if (cum > pick) {
                redi[0] = i;
                break;
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
        int tok = redi[0];
        if (tok < 0) { // rounding put pick at the very end: the last id of the nucleus
            for (int i = V - 1; i >= 0; i--)
                if (expf((l[i] - mx) / temp) >= tau) {
                    tok = i;
                    break;
                }
        }
        out[row] = tok;
    }
}

extern "C" cudaError_t k_sample(const float *logits, int32_t n, int32_t V, const float *temperature,
                                const float *top_p, const float *uniform, int32_t *out,
                                cudaStream_t stream)
{
    if (n == 0) return cudaSuccess;
    return k_launch(sample_kernel, dim3(n), dim3(SAMPLE_THREADS), 0, stream, logits, V, temperature,
                    top_p, uniform, out);
}
