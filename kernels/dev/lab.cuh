// lab.cuh: what the kernels' lab programs (kernels/dev/*.cu) share: the timing rule.
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
