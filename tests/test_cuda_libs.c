/*
 * test_cuda_libs.c: the loader of the CUDA libraries the engine opens at run time
 * (engine/cuda_libs.h). A library that is not there, or lacks a function, is an error naming the
 * files tried and why; a table that loads is complete. Built with CUDA, the toolkit's cuBLAS (and
 * CUPTI, with its headers) load from the run path the Makefile sets: no GPU is needed for that.
 */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/cuda_libs.h"
#include "testutil.h"

typedef struct libm_table {
    double (*cos)(double);
    double (*sqrt)(double);
} libm_table;

START_TEST(a_missing_library_is_an_error_naming_every_file_tried)
{
    static const char *const files[] = {"libtandem-no-such.so.13", "libtandem-no-such.so", NULL};
    static const cuda_lib_sym syms[] = {{"cos", offsetof(libm_table, cos)}};
    cuda_lib_spec spec = {"NoSuchLib", files, syms, 1, " (install it)"};
    libm_table t = {0};
    terr e = {{0}};
    ck_assert_int_eq(cuda_lib_open(&spec, &t, &e), -1);
    const char *want[] = {"NoSuchLib: cannot load it", "libtandem-no-such.so.13", "libtandem-no-such.so:",
                          "cannot open shared object file", "(install it)"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        ck_assert_msg(strstr(e.msg, want[i]), "the message lacks \"%s\": %s", want[i], e.msg);
}
END_TEST

START_TEST(a_library_without_a_function_is_an_error_naming_it)
{
    static const char *const files[] = {"libm.so.6", NULL};
    static const cuda_lib_sym syms[] = {{"cos", offsetof(libm_table, cos)},
                                        {"tandem_no_such_function", offsetof(libm_table, sqrt)}};
    cuda_lib_spec spec = {"libm", files, syms, 2, NULL};
    libm_table t = {0};
    terr e = {{0}};
    ck_assert_int_eq(cuda_lib_open(&spec, &t, &e), -1);
    ck_assert_msg(strstr(e.msg, "libm: libm.so.6 has no tandem_no_such_function"), "%s", e.msg);
}
END_TEST

START_TEST(a_loaded_table_calls_the_library)
{
    static const char *const files[] = {"libtandem-no-such.so.1", "libm.so.6", NULL};
    static const cuda_lib_sym syms[] = {{"cos", offsetof(libm_table, cos)}, {"sqrt", offsetof(libm_table, sqrt)}};
    cuda_lib_spec spec = {"libm", files, syms, 2, NULL};
    libm_table t = {0};
    terr e = {{0}};
    ck_assert_msg(cuda_lib_open(&spec, &t, &e) == 0, "%s", e.msg);
    ck_assert(t.cos(0.0) == 1.0 && t.sqrt(16.0) == 4.0);
}
END_TEST

#if TANDEM_HAVE_CUDA
START_TEST(cublas_loads_from_the_toolkit_complete)
{
    terr e = {{0}};
    const cuda_blas *b = cuda_blas_get(&e);
    ck_assert_msg(b, "%s", e.msg);
#define NON_NULL(f) ck_assert_msg(b->f != NULL, "cuBLAS table: %s is NULL", #f);
    CUDA_BLAS_FUNCS(NON_NULL)
#undef NON_NULL
    const char *ok = b->cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
    ck_assert_msg(ok && ok[0], "cublasGetStatusString(CUBLAS_STATUS_SUCCESS) gives no text");
    ck_assert(cuda_blas_get(&e) == b); /* loaded once */
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("cuda_libs");
    TCase *tc = tcase_create("cuda_libs");
    tcase_add_test(tc, a_missing_library_is_an_error_naming_every_file_tried);
    tcase_add_test(tc, a_library_without_a_function_is_an_error_naming_it);
    tcase_add_test(tc, a_loaded_table_calls_the_library);
#if TANDEM_HAVE_CUDA
    tcase_add_test(tc, cublas_loads_from_the_toolkit_complete);
#endif
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
