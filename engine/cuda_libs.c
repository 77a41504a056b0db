/* cuda_libs.c: see cuda_libs.h. */
#include "engine/cuda_libs.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int cuda_lib_open(const cuda_lib_spec *spec, void *table, terr *e)
{
    char tried[1024] = "";
    size_t used = 0;
    for (const char *const *f = spec->files; *f; f++) {
        void *h = dlopen(*f, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *why = dlerror();
            int n = snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", why ? why : *f);
            if (n > 0) used = used + (size_t)n < sizeof tried ? used + (size_t)n : sizeof tried - 1;
            continue;
        }
        for (size_t i = 0; i < spec->num_syms; i++) {
            dlerror();
            void *p = dlsym(h, spec->syms[i].name);
            if (!p) {
                const char *why = dlerror();
                terr_set(e, "%s: %s has no %s (%s): a CUDA toolkit older than the one tandem was built with?",
                         spec->what, *f, spec->syms[i].name, why ? why : "NULL");
                dlclose(h);
                return -1;
            }
            memcpy((char *)table + spec->syms[i].offset, &p, sizeof p); /* POSIX: a function's address */
        }
        return 0; /* kept open for the process's life */
    }
    return terr_set(e, "%s: cannot load it: %s%s", spec->what, tried, spec->hint ? spec->hint : "");
}

#if TANDEM_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda_check.h"

#define CUDA_LIBS_SYM(T, f) {#f, offsetof(T, f)},

/* The toolkit's sonames carry its major version (libcublas.so.13 for CUDA 13). */
#define STR_(x) #x
#define STR(x) STR_(x)

const cuda_blas *cuda_blas_get(terr *e)
{
    static cuda_blas blas;
    static bool loaded;
    if (loaded) return &blas;
#define BLAS_SYM(f) CUDA_LIBS_SYM(cuda_blas, f)
    static const cuda_lib_sym syms[] = {CUDA_BLAS_FUNCS(BLAS_SYM)};
#undef BLAS_SYM
    static const char *const files[] = {"libcublas.so." STR(CUBLAS_VER_MAJOR), "libcublas.so", NULL};
    const cuda_lib_spec spec = {"cuBLAS", files, syms, ARRAY_LEN(syms),
                                " (--backend cuda needs the CUDA toolkit's cuBLAS: install it, or put its "
                                "directory on LD_LIBRARY_PATH)"};
    if (cuda_lib_open(&spec, &blas, e)) return NULL;
    loaded = true;
    return &blas;
}

int cuda_lib_blas_status(terr *e, const cuda_blas *blas, cublasStatus_t st, const char *file, int line,
                         const char *call)
{
    return st == CUBLAS_STATUS_SUCCESS ? 0 : cu_fail(e, file, line, call, blas->cublasGetStatusString(st));
}
#endif

#if TANDEM_HAVE_CUPTI
const cuda_cupti *cuda_cupti_get(terr *e)
{
    static cuda_cupti cupti;
    static bool loaded;
    if (loaded) return &cupti;
#define CUPTI_SYM(f) CUDA_LIBS_SYM(cuda_cupti, f)
    static const cuda_lib_sym syms[] = {CUDA_CUPTI_FUNCS(CUPTI_SYM)};
#undef CUPTI_SYM
    /* CUPTI's soname follows the CUDA major version (libcupti.so.13), which the runtime's
     * header gives as CUDART_VERSION = 1000 x major + 10 x minor. */
    static char versioned[32];
    snprintf(versioned, sizeof versioned, "libcupti.so.%d", CUDART_VERSION / 1000);
    const char *const files[] = {versioned, "libcupti.so", NULL};
    const cuda_lib_spec spec = {"CUPTI", files, syms, ARRAY_LEN(syms),
                                " (the kernel trace needs the CUDA toolkit's CUPTI: install it or put its "
                                "directory on LD_LIBRARY_PATH; `tandem run --no-kernel-trace` runs without it)"};
    if (cuda_lib_open(&spec, &cupti, e)) return NULL;
    loaded = true;
    return &cupti;
}
#endif
