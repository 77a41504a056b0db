/*
 * roofline_probe.cu: measures, on the GPU at hand, the few rates the roofline cost model's
 * constants stand on (docs/costmodel.md, "Calibration"):
 *   1. cuBLAS bf16 GEMM time over M = 1..8192 tokens for Llama-2-7B's four linear shapes and
 *      its LM head, weights rotated through > 1 GB of copies so that no call finds them in L2
 *      (a forward pass reads each weight once per step);
 *   2. the time one tiny kernel occupies the GPU, launched back to back and replayed from a
 *      CUDA graph (kernel_min_ns);
 *   3. pinned host <-> device copies of 8 MiB blocks (swap bandwidth).
 * Not part of `all` (the simulator needs no GPU): `make calib` builds build/roofline_probe; run it
 * on the GPU machine. Its output on this project's H200 is in sim/calib/h200-probe.txt;
 * docs/costmodel.md reads it.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_check.h"

/* Uniform random values in [-scale/2, scale/2) from a splitmix64 hash of the index: tensor-core
 * power, hence clocks and GEMM rate, depend on the data (zeros run ~13% faster than random). */
__global__ void fill_kernel(__nv_bfloat16 *p, size_t n, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long z = i + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        p[i] = __float2bfloat16(scale * ((float)(z >> 40) / 16777216.0f - 0.5f));
    }
}

__global__ void empty_kernel(void) {}

/* SiLU-and-mul over one token of an 11008-wide MLP (gate and up side by side). */
__global__ void tiny_silu_mul(const __nv_bfloat16 *gu, __nv_bfloat16 *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = __bfloat162float(gu[i]), u = __bfloat162float(gu[n + i]);
        out[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
    }
}

/* A tiny RMSNorm over one 4096-wide row: the shape of a batch-1 decode's elementwise work. */
__global__ void tiny_rmsnorm(__nv_bfloat16 *x, int n)
{
    __shared__ float part[32];
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = __bfloat162float(x[i]);
        s += v * v;
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0;
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
        if (threadIdx.x == 0) part[0] = rsqrtf(s / n + 1e-5f);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        x[i] = __float2bfloat16(__bfloat162float(x[i]) * part[0]);
}

static void fill(__nv_bfloat16 *p, size_t n)
{
    fill_kernel<<<1024, 256>>>(p, n, 0.1f);
    CUDA_CHECK(cudaGetLastError());
}

int main(void)
{
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20);

    /* ---- 1. GEMM sweep ---- */
    struct { const char *name; int in, out; } shapes[] = {
        {"qkv", 4096, 12288}, {"o_proj", 4096, 4096}, {"gate_up", 4096, 22016},
        {"down", 11008, 4096}, {"lm_head", 4096, 32000},
    };
    int Ms[] = {1,   8,   16,  32,  64,   96,   128,  160,  192,
                256, 320, 384, 512, 768, 1024, 2048, 4096, 8192};
    const size_t pool_bytes = 1536ull << 20;
    __nv_bfloat16 *pool, *X, *Y;
    CUDA_CHECK(cudaMalloc(&pool, pool_bytes));
    CUDA_CHECK(cudaMalloc(&X, 8192ull * 22016 * 2));
    CUDA_CHECK(cudaMalloc(&Y, 8192ull * 32000 * 2));
    fill(pool, pool_bytes / 2);
    fill(X, 8192ull * 22016);
    printf("\n# gemm: M tokens x (in -> out), bf16 in/out, fp32 accumulate, weights rotated\n");
    printf("%-8s %6s %10s %10s %10s\n", "shape", "M", "us", "TFLOP/s", "weight_TB/s");
    const float alpha = 1.0f, beta = 0.0f;
    for (auto &s : shapes) {
        size_t wbytes = (size_t)s.in * s.out * 2;
        int copies = (int)(pool_bytes / wbytes);
        for (int M : Ms) {
            const int warm = 3, reps = 40;
            for (int r = 0; r < warm + reps; r++) {
                if (r == warm) CUDA_CHECK(cudaEventRecord(e0));
                const __nv_bfloat16 *W = pool + (size_t)(r % copies) * s.in * s.out;
                /* Row-major Y[M,out] = X[M,in] W[out,in]^T, i.e. col-major Y^T = W^T' X^T. */
                CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.out, M, s.in, &alpha, W,
                                          CUDA_R_16BF, s.in, X, CUDA_R_16BF, s.in, &beta, Y,
                                          CUDA_R_16BF, s.out, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
            }
            CUDA_CHECK(cudaEventRecord(e1));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float ms;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            double us = ms * 1e3 / reps;
            double flops = 2.0 * M * (double)s.in * s.out;
            printf("%-8s %6d %10.2f %10.1f %10.3f\n", s.name, M, us, flops / us / 1e6,
                   wbytes / us / 1e6);
        }
    }

    /* ---- 2. tiny kernels ---- */
    const int nk = 2000;
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    printf("\n# tiny kernels, %d back to back: us per kernel\n%-28s %8s %8s\n", nk, "kernel",
           "stream", "graph");
    for (int which = 0; which < 3; which++) {
        const char *names[] = {"empty", "rmsnorm 1x4096 (1 block)", "silu_mul 1x11008 (43 blocks)"};
        auto launch = [&](void) {
            if (which == 0) empty_kernel<<<1, 32, 0, st>>>();
            else if (which == 1) tiny_rmsnorm<<<1, 256, 0, st>>>(X, 4096);
            else tiny_silu_mul<<<43, 256, 0, st>>>(X, Y, 11008);
        };
        for (int r = 0; r < 100; r++) launch();
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaEventRecord(e0, st));
        for (int r = 0; r < nk; r++) launch();
        CUDA_CHECK(cudaEventRecord(e1, st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms_stream;
        CUDA_CHECK(cudaEventElapsedTime(&ms_stream, e0, e1));
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int r = 0; r < nk; r++) launch();
        CUDA_CHECK(cudaStreamEndCapture(st, &g));
        CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
        CUDA_CHECK(cudaGraphLaunch(ge, st));
        CUDA_CHECK(cudaEventRecord(e0, st));
        for (int r = 0; r < 5; r++) CUDA_CHECK(cudaGraphLaunch(ge, st));
        CUDA_CHECK(cudaEventRecord(e1, st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms_graph;
        CUDA_CHECK(cudaEventElapsedTime(&ms_graph, e0, e1));
        printf("%-28s %8.2f %8.2f\n", names[which], ms_stream * 1e3 / nk,
               ms_graph * 1e3 / (5.0 * nk));
        CUDA_CHECK(cudaGraphExecDestroy(ge));
        CUDA_CHECK(cudaGraphDestroy(g));
    }

    /* ---- 3. host link ---- */
    const size_t blk = 8ull << 20, nblk = 64;
    void *hbuf, *dbuf;
    CUDA_CHECK(cudaMallocHost(&hbuf, blk * nblk));
    CUDA_CHECK(cudaMalloc(&dbuf, blk * nblk));
    for (int dir = 0; dir < 2; dir++) {
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1) CUDA_CHECK(cudaEventRecord(e0, st));
            for (size_t b = 0; b < nblk; b++) {
                char *d = (char *)dbuf + b * blk, *hh = (char *)hbuf + b * blk;
                CUDA_CHECK(cudaMemcpyAsync(dir ? hh : d, dir ? d : hh, blk,
                                           dir ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                           st));
            }
        }
        CUDA_CHECK(cudaEventRecord(e1, st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        printf("%s 8 MiB blocks: %.1f GB/s\n", dir ? "D2H" : "H2D", blk * nblk / (ms * 1e6));
    }
    printf("done\n");
    return 0;
}
