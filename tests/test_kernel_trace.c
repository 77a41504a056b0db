/*
 * test_kernel_trace.c: the kernel trace's arithmetic and its failures without a GPU
 * (engine/kernel_trace.h). A step's kernel time is the durations summed; its busy time the union
 * of their intervals, so that kernels overlapping under programmatic dependent launch count once.
 * The trace itself needs a GPU: `make test-gpu` and docs/engine.md say how it is checked there.
 */
#include <check.h>
#include <string.h>

#include "engine/cuda_libs.h"
#include "engine/kernel_trace.h"
#include "testutil.h"

static void expect(ktrace_span *s, size_t n, int64_t sum, int64_t busy)
{
    int64_t b = -1, got = ktrace_spans_measure(s, n, &b);
    ck_assert_msg(got == sum && b == busy, "%zu spans: sum %lld busy %lld, expected %lld and %lld", n,
                  (long long)got, (long long)b, (long long)sum, (long long)busy);
}

START_TEST(overlapping_kernels_count_once_in_busy_time)
{
    /* a PDL tail: the second starts 2 ns before the first ends; then a gap of 5 */
    ktrace_span s[] = {{100, 110}, {108, 120}, {125, 130}};
    expect(s, 3, 10 + 12 + 5, 10 + 10 + 5);
    ktrace_span touching[] = {{0, 10}, {10, 20}};
    expect(touching, 2, 20, 20);
    ktrace_span none[1];
    expect(none, 0, 0, 0);
}
END_TEST

START_TEST(a_kernel_inside_another_adds_nothing_to_busy_time)
{
    ktrace_span s[] = {{0, 100}, {10, 20}, {30, 40}, {90, 150}};
    expect(s, 4, 100 + 10 + 10 + 60, 150);
}
END_TEST

START_TEST(spans_out_of_start_order_are_sorted_first)
{
    ktrace_span s[] = {{125, 130}, {100, 110}, {108, 120}};
    expect(s, 3, 27, 25);
    ck_assert(s[0].start_ns == 100 && s[1].start_ns == 108 && s[2].start_ns == 125);
}
END_TEST

#if TANDEM_HAVE_CUPTI
START_TEST(cupti_loads_from_the_toolkit_complete)
{
    terr e = {{0}};
    const cuda_cupti *c = cuda_cupti_get(&e);
    ck_assert_msg(c, "%s", e.msg);
#define NON_NULL(f) ck_assert_msg(c->f != NULL, "CUPTI table: %s is NULL", #f);
    CUDA_CUPTI_FUNCS(NON_NULL)
#undef NON_NULL
    const char *why = NULL;
    ck_assert(c->cuptiGetResultString(CUPTI_ERROR_INVALID_PARAMETER, &why) == CUPTI_SUCCESS && why && why[0]);
}
END_TEST

/* Without a GPU (CI) opening the trace is an error with CUPTI's reason, not a crash; with one,
 * the meter opens, measures nothing yet, and lets go of the trace for the next user. */
START_TEST(the_meter_opens_or_says_why_not)
{
    terr e = {{0}};
    ktrace_meter *m = NULL;
    if (ktrace_meter_open(&m, &e)) {
        ck_assert_msg(strstr(e.msg, "failed: CUPTI_ERROR"), "%s", e.msg);
        return;
    }
    ktrace_step s;
    ck_assert_msg(ktrace_meter_take(m, &s, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(s.kernels, 0);
    ck_assert_msg(ktrace_meter_open(&(ktrace_meter *){0}, &e) != 0 && strstr(e.msg, "already in use"),
                  "a second meter opened beside the first: %s", e.msg);
    ktrace_meter_close(m);
    ck_assert_msg(ktrace_meter_open(&m, &e) == 0, "the trace was not let go: %s", e.msg);
    ktrace_meter_close(m);
}
END_TEST
#else
START_TEST(without_cupti_the_meter_says_to_turn_it_off)
{
    terr e = {{0}};
    ktrace_meter *m;
    ck_assert_int_eq(ktrace_meter_open(&m, &e), -1);
    ck_assert_msg(strstr(e.msg, "without CUPTI") && strstr(e.msg, "--no-kernel-trace"), "%s", e.msg);
}
END_TEST
#endif

int main(void)
{
    Suite *s = suite_create("kernel_trace");
    TCase *tc = tcase_create("kernel_trace");
    tcase_add_test(tc, overlapping_kernels_count_once_in_busy_time);
    tcase_add_test(tc, a_kernel_inside_another_adds_nothing_to_busy_time);
    tcase_add_test(tc, spans_out_of_start_order_are_sorted_first);
#if TANDEM_HAVE_CUPTI
    tcase_add_test(tc, cupti_loads_from_the_toolkit_complete);
    tcase_add_test(tc, the_meter_opens_or_says_why_not);
#else
    tcase_add_test(tc, without_cupti_the_meter_says_to_turn_it_off);
#endif
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
