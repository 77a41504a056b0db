// lab.cuh: what the kernels' lab programs (kernels/dev/*.cu) share: the timing rule and the copy
// ceiling their rates are held against.
#pragma once

#include <stdlib.h>

#include "kernels/cuda_check.h"

static int lab_cmp_f(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

// Median ms of one launch(ctx) on st: 9 samples of 10 launches after 10 warm-up launches.
static double time_ms(void (*launch)(void *), void *ctx, cudaStream_t st)
{
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 10; i++) launch(ctx);
    float t[9];
    for (int r = 0; r < 9; r++) {
        CUDA_CHECK(cudaEventRecord(a, st));
        for (int i = 0; i < 10; i++) launch(ctx);
        CUDA_CHECK(cudaEventRecord(b, st));
        CUDA_CHECK(cudaEventSynchronize(b));
        CUDA_CHECK(cudaEventElapsedTime(&t[r], a, b));
        t[r] /= 10;
    }
    qsort(t, 9, sizeof *t, lab_cmp_f);
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    return t[4];
}

static void lab_copy(void *ctx)
{
    void **p = (void **)ctx; // {dst, src, stream}
    CUDA_CHECK(cudaMemcpyAsync(p[0], p[1], 1ull << 30, cudaMemcpyDeviceToDevice, (cudaStream_t)p[2]));
}

// The device-to-device copy rate of 1 GiB on st, GB/s (bytes read + written), timed as time_ms.
static double lab_copy_gbs(cudaStream_t st)
{
    void *p[3] = {NULL, NULL, (void *)st};
    CUDA_CHECK(cudaMalloc(&p[0], 1ull << 30));
    CUDA_CHECK(cudaMalloc(&p[1], 1ull << 30));
    CUDA_CHECK(cudaMemsetAsync(p[1], 1, 1ull << 30, st));
    const double gbs = 2.0 * (1ull << 30) / time_ms(lab_copy, p, st) / 1e6;
    CUDA_CHECK(cudaFree(p[0]));
    CUDA_CHECK(cudaFree(p[1]));
    return gbs;
}
