/*
 * cuda_check.h: the one way CUDA and cuBLAS calls are checked, from C or CUDA host code. Kernel
 * launchers return their launch error, so checking a launcher's result is the launch check.
 *
 * Two flavours, one message ("file:line: call failed: reason"):
 *   CU_TRY / BLAS_TRY      for code that reports errors (the engine): the message goes into the
 *                          terr *e in scope and the enclosing function returns CU_ERR_DEVICE,
 *                          which the engine reports as ENGINE_ERR_DEVICE, so a device failure
 *                          reaches the CLI as a message rather than an abort. CU_CALL / BLAS_CALL
 *                          are the same check as an expression (0 or CU_ERR_DEVICE), for code
 *                          that unwinds with a goto.
 *   CUDA_CHECK / CUBLAS_CHECK  for benchmarks, probes and kernels/dev harnesses: the message goes
 *                          to stderr and the process exits with status 1.
 */
#ifndef TANDEM_CUDA_CHECK_H
#define TANDEM_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "core/util.h"
#ifdef __cplusplus
}
#endif

/* What a failed CU_TRY / BLAS_TRY returns (engine/engine.h's ENGINE_ERR_DEVICE has this value). */
#define CU_ERR_DEVICE (-2)

static inline int cu_fail(terr *e, const char *file, int line, const char *call, const char *why)
{
    terr_set(e, "%s:%d: %s failed: %s", file, line, call, why);
    return CU_ERR_DEVICE;
}

static inline void cu_die(const char *file, int line, const char *call, const char *why)
{
    fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, why);
    exit(1);
}

static inline int cu_status(terr *e, cudaError_t err, const char *file, int line, const char *call)
{
    return err == cudaSuccess ? 0 : cu_fail(e, file, line, call, cudaGetErrorString(err));
}

static inline int blas_status(terr *e, cublasStatus_t st, const char *file, int line, const char *call)
{
    return st == CUBLAS_STATUS_SUCCESS ? 0 : cu_fail(e, file, line, call, cublasGetStatusString(st));
}

#define CU_CALL(call) cu_status(e, (call), __FILE__, __LINE__, #call)
#define BLAS_CALL(call) blas_status(e, (call), __FILE__, __LINE__, #call)

#define CU_TRY(call)                                                                              \
    do {                                                                                          \
        if (CU_CALL(call)) return CU_ERR_DEVICE;                                                  \
    } while (0)

#define BLAS_TRY(call)                                                                            \
    do {                                                                                          \
        if (BLAS_CALL(call)) return CU_ERR_DEVICE;                                                \
    } while (0)

#define CUDA_CHECK(call)                                                                          \
    do {                                                                                          \
        cudaError_t cu_err_ = (call);                                                             \
        if (cu_err_ != cudaSuccess) cu_die(__FILE__, __LINE__, #call, cudaGetErrorString(cu_err_)); \
    } while (0)

#define CUBLAS_CHECK(call)                                                                        \
    do {                                                                                          \
        cublasStatus_t blas_st_ = (call);                                                         \
        if (blas_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
            cu_die(__FILE__, __LINE__, #call, cublasGetStatusString(blas_st_));                   \
    } while (0)

#endif
