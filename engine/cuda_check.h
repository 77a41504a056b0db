/*
 * cuda_check.h: checking every CUDA and cuBLAS call (host C code). A failed call sets the terr
 * to "file:line: call failed: reason" and returns ENGINE_ERR_DEVICE from the enclosing function,
 * so a device failure reaches the CLI as a message (exit 1) rather than an abort. Kernel
 * launchers return their launch error, so `CU_TRY(k_embed(...))` is the launch check.
 */
#ifndef TANDEM_CUDA_CHECK_H
#define TANDEM_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/util.h"
#include "engine/engine.h"

static inline int cu_fail(terr *e, const char *file, int line, const char *call, const char *why)
{
    terr_set(e, "%s:%d: %s failed: %s", file, line, call, why);
    return ENGINE_ERR_DEVICE;
}

#define CU_TRY(call)                                                                              \
    do {                                                                                          \
        cudaError_t cu_err_ = (call);                                                             \
        if (cu_err_ != cudaSuccess)                                                               \
            return cu_fail(e, __FILE__, __LINE__, #call, cudaGetErrorString(cu_err_));            \
    } while (0)

#define BLAS_TRY(call)                                                                            \
    do {                                                                                          \
        cublasStatus_t blas_st_ = (call);                                                         \
        if (blas_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return cu_fail(e, __FILE__, __LINE__, #call, cublasGetStatusString(blas_st_));        \
    } while (0)

#endif
