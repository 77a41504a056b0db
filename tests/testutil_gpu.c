/* testutil_gpu.c: see testutil_gpu.h. */
#include "testutil_gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>

#if TANDEM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

gsl_rng *rng_for(const char *test)
{
    unsigned long seed = 0;
    for (const char *p = test; *p; p++) seed = seed * 131 + (unsigned char)*p;
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, seed);
    return r;
}

void shuffle_ids(gsl_rng *r, int32_t *ids, int32_t n)
{
    for (int32_t i = 0; i < n; i++) ids[i] = i;
    gsl_ran_shuffle(r, ids, (size_t)n, sizeof *ids);
}

void expect_close(const char *what, const float *gpu, const float *cpu, int64_t n, double tol_norm,
                  double tol_elem)
{
    expect_close_floor(what, gpu, cpu, n, tol_norm, tol_elem, 0);
}

void expect_close_floor(const char *what, const float *gpu, const float *cpu, int64_t n,
                        double tol_norm, double tol_elem, double floor)
{
    double d2 = 0, r2 = 0, worst = 0;
    int64_t bad = 0, nan = 0, worst_i = 0;
    for (int64_t i = 0; i < n; i++) r2 += (double)cpu[i] * cpu[i];
    double rms = fmax(sqrt(r2 / (double)(n ? n : 1)), floor);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) {
            nan++;
            continue;
        }
        double d = fabs((double)gpu[i] - cpu[i]);
        d2 += d * d;
        double lim = tol_elem * (fabs(cpu[i]) + rms);
        if (d > lim) bad++;
        if (d / (fabs(cpu[i]) + rms) > worst) worst = d / (fabs(cpu[i]) + rms), worst_i = i;
    }
    double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
    printf("  %-58s n=%-9lld rel_l2=%.2e worst=%.2e%s\n", what, (long long)n, rel, worst,
           nan ? " NaN/unwritten!" : "");
    ck_assert_msg(nan == 0, "%s: %lld elements NaN or never written", what, (long long)nan);
    ck_assert_msg(rel <= tol_norm, "%s: ||gpu-cpu||/||cpu|| = %.3e > %.1e", what, rel, tol_norm);
    ck_assert_msg(bad == 0, "%s: %lld elements off by more than %.1e*(|ref|+rms); worst at %lld: "
                            "gpu %g cpu %g", what, (long long)bad, tol_elem, (long long)worst_i,
                  gpu[worst_i], cpu[worst_i]);
}

int gpu_run_tests(const char *prog, TCase *(*tests)(void))
{
    const char *require = getenv("TANDEM_REQUIRE_GPU");
    const int skip_status = require && !strcmp(require, "1") ? 1 : 0;
#if TANDEM_HAVE_CUDA
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        printf("%s: skipped: no CUDA device (%s)\n", prog, err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return skip_status;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("%s: %s, %d SMs, %.0f GB\n", prog, prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1e9);
    Suite *s = suite_create(prog);
    suite_add_tcase(s, tests());
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* one CUDA context for all tests */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
#else
    (void)tests;
    printf("%s: skipped: built without CUDA\n", prog);
    return skip_status;
#endif
}
