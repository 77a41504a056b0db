/*
 * testutil_gpu.h: what the GPU tests share (tests/test_kernels_gpu.c: each kernel against its
 * plain-C twin; tests/test_engine_gpu.c: the CUDA engine against the CPU engine).
 *
 * Accuracy is judged as METHOD.md suggests for bf16 operands: ||gpu - cpu|| / ||cpu|| under
 * TOL_NORM, and each element within TOL_ELEM * (|cpu| + rms(cpu)).
 */
#ifndef TANDEM_TESTUTIL_GPU_H
#define TANDEM_TESTUTIL_GPU_H

#include <check.h>
#include <gsl/gsl_rng.h>
#include <stdint.h>

#define TOL_NORM 1e-2
#define TOL_ELEM 2e-2

/* A generator seeded from the test's name (so every test draws its own fresh inputs, the same
 * ones on every run). */
gsl_rng *rng_for(const char *test);

/* ids = a random permutation of 0..n-1 (shuffled block tables). */
void shuffle_ids(gsl_rng *r, int32_t *ids, int32_t n);

/* Compares gpu with cpu (n values), prints one line, and fails the test on NaN (an element the
 * GPU never wrote), on ||gpu-cpu||/||cpu|| > tol_norm, or on an element off by more than
 * tol_elem * (|cpu| + rms(cpu)). */
void expect_close(const char *what, const float *gpu, const float *cpu, int64_t n, double tol_norm,
                  double tol_elem);
/* The same with rms(cpu) raised to at least `floor`: attention outputs are convex combinations
 * of V rows, so their error scales with |V|, not with the rms of the outputs (a row that averages
 * 3 keys has far larger values than one averaging 3000). */
void expect_close_floor(const char *what, const float *gpu, const float *cpu, int64_t n,
                        double tol_norm, double tol_elem, double floor);

/* Runs the test case that tests() makes, in this process (one CUDA context for all tests), when
 * there is a CUDA device; otherwise prints why `prog` is skipped and passes, unless
 * TANDEM_REQUIRE_GPU=1 (`make test-gpu`), when that is a failure. tests is NULL in a build
 * without CUDA. Returns the exit status. */
int gpu_run_tests(const char *prog, TCase *(*tests)(void));

#endif
