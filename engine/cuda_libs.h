/*
 * cuda_libs.h: the CUDA libraries the engine calls besides the runtime, loaded with dlopen when
 * the CUDA engine opens: cuBLAS (its GEMMs) and CUPTI (the kernel time per step of `tandem
 * run`). Linked, cuBLAS alone maps ~215 MB into every command at start, `tandem sim` and
 * `--help` included (issue 22); loaded here, a command that never opens the CUDA engine maps
 * neither. The runtime stays linked statically: it already loads the driver lazily.
 *
 * A library is a table of function pointers, each named and typed after the function it points
 * to (blas->cublasGemmEx(...)), resolved all at once: a table is either complete or an error
 * that names the library, the files tried and dlerror()'s reason. Tables are loaded once per
 * process and never unloaded (both libraries keep threads and state that dlclose would pull
 * from under them), by the thread that opens the engine.
 *
 * Where: first the soname of the toolkit tandem was compiled against (libcublas.so.13 and
 * libcupti.so.13 for CUDA 13, from its headers' version), then the unversioned name (which may
 * be another toolkit's), each searched as the dynamic linker does: LD_LIBRARY_PATH, the binary's
 * run path ($(CUDA_HOME)/lib64, set by the Makefile), the system's directories.
 */
#ifndef TANDEM_CUDA_LIBS_H
#define TANDEM_CUDA_LIBS_H

#include <stddef.h>

#include "core/util.h"

/* The loader both tables use (exported for the tests). */
typedef struct cuda_lib_sym {
    const char *name; /* the exported symbol */
    size_t offset;    /* where its pointer goes in the table */
} cuda_lib_sym;

typedef struct cuda_lib_spec {
    const char *what;              /* "cuBLAS", for messages */
    const char *const *files;      /* (NULL-terminated) names tried in order */
    const cuda_lib_sym *syms;      /* (num_syms) */
    size_t num_syms;
    const char *hint;              /* appended to the message when no file loads */
} cuda_lib_spec;

/* Opens the first of spec->files that loads and fills every symbol's slot of `table`. Returns 0,
 * or -1 with e saying which files were tried and why each failed (or which symbol is missing). */
int cuda_lib_open(const cuda_lib_spec *spec, void *table, terr *e);

/* A table's field: a pointer of the function's own type, under its name. */
#define CUDA_LIBS_FIELD(f) __typeof__(f) *f;

#if TANDEM_HAVE_CUDA
#include <cublas_v2.h>

/* The cuBLAS functions engine/cuda_backend.c calls. */
#define CUDA_BLAS_FUNCS(X)                                                                        \
    X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSetWorkspace_v2)         \
    X(cublasGemmEx) X(cublasGetStatusString)

typedef struct cuda_blas {
    CUDA_BLAS_FUNCS(CUDA_LIBS_FIELD)
} cuda_blas;

/* cuBLAS, loaded on the first call. NULL with e set when it cannot be. */
const cuda_blas *cuda_blas_get(terr *e);

/* kernels/cuda_check.h's BLAS_CALL for a call through the table: 0, or CU_ERR_DEVICE with e set
 * to "file:line: call failed: cuBLAS's reason". */
int cuda_lib_blas_status(terr *e, const cuda_blas *blas, cublasStatus_t st, const char *file, int line,
                         const char *call);
#endif

#if TANDEM_HAVE_CUPTI
#include <cupti.h>

/* The CUPTI functions engine/kernel_trace.c calls. */
#define CUDA_CUPTI_FUNCS(X)                                                                       \
    X(cuptiActivityRegisterCallbacks) X(cuptiActivityEnable) X(cuptiActivityDisable)              \
    X(cuptiActivityFlushAll) X(cuptiActivityGetNextRecord) X(cuptiActivityGetNumDroppedRecords)   \
    X(cuptiGetResultString) X(cuptiGetTimestamp)

typedef struct cuda_cupti {
    CUDA_CUPTI_FUNCS(CUDA_LIBS_FIELD)
} cuda_cupti;

/* CUPTI, loaded on the first call. NULL with e set when it cannot be. */
const cuda_cupti *cuda_cupti_get(terr *e);
#endif

#endif
