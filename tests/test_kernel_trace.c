/*
 * test_kernel_trace.c: the kernel trace's arithmetic and its failures without a GPU
 * (engine/kernel_trace.h). A step's kernel time is the durations summed; its busy time the union
 * of their intervals, so that kernels overlapping under programmatic dependent launch count once.
 * Kernels go to the step whose host-side window holds their start, whenever their records
 * arrive; the ledger that does it is driven here with synthetic records, and each kernel's time
 * also goes to its kind, told by its name. The trace itself needs
 * a GPU: `make test-gpu` and docs/engine.md say how it is checked there.
 */
#include <check.h>
#include <string.h>

#include "engine/cuda_libs.h"
#include "engine/kernel_trace.h"
#include "testutil.h"

/* Spans written {start, end} are of kind 0 (GEMM): only the kind tests name one. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

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
    /* nearly in order (pairs swapped) and far from it (reversed): both end sorted, none lost */
    enum { N = 2000 };
    static ktrace_span near[N], far[N];
    for (int i = 0; i < N; i++) {
        near[i] = (ktrace_span){(uint64_t)(10 * (i ^ 1)), (uint64_t)(10 * (i ^ 1) + 5)};
        far[i] = (ktrace_span){(uint64_t)(10 * (N - 1 - i)), (uint64_t)(10 * (N - 1 - i) + 5)};
    }
    ktrace_span *cases[] = {near, far};
    for (int c = 0; c < 2; c++) {
        ktrace_sort_spans(cases[c], N);
        for (int i = 0; i < N; i++)
            ck_assert_msg(cases[c][i].start_ns == (uint64_t)(10 * i) && cases[c][i].end_ns == (uint64_t)(10 * i + 5),
                          "%s: span %d starts at %llu", c ? "reversed" : "pairs swapped", i,
                          (unsigned long long)cases[c][i].start_ns);
    }
}
END_TEST

/* ---- attribution by time ---- */

static void expect_step(const ktrace_step *s, int64_t step, int32_t kernels, int64_t sum, int64_t busy)
{
    ck_assert_msg(s->step == step && s->kernels == kernels && s->kernel_ns == sum && s->busy_ns == busy,
                  "step %lld: %d kernels, sum %lld, busy %lld; expected step %lld: %d, %lld, %lld",
                  (long long)s->step, s->kernels, (long long)s->kernel_ns, (long long)s->busy_ns,
                  (long long)step, kernels, (long long)sum, (long long)busy);
}

START_TEST(kernels_go_to_the_window_holding_their_start)
{
    /* windows [100, 200], [300, 400], [500, 600]; a kernel that starts at a window's very end
     * is its own (the sync returned after it began), one that ends past it too */
    const ktrace_window w[] = {{100, 200}, {300, 400}, {500, 600}};
    const ktrace_span s[] = {{50, 60},   /* before the first: outside */
                             {100, 150}, {150, 170}, {200, 210},
                             {250, 260}, /* between: outside */
                             {310, 330}, {320, 340},
                             {700, 710}}; /* after the last: outside */
    ktrace_step out[3];
    size_t outside = ktrace_attribute(w, 3, 40, s, 8, out);
    ck_assert_int_eq(outside, 3);
    expect_step(&out[0], 40, 3, 50 + 20 + 10, 50 + 20 + 10);
    expect_step(&out[1], 41, 2, 40, 30);
    expect_step(&out[2], 42, 0, 0, 0);
}
END_TEST

/* Under programmatic dependent launch a step's kernels overlap; its last one may run past the
 * window's end as CUPTI's clock sees it, and still counts in full. */
START_TEST(overlapping_kernels_under_pdl_count_once_in_their_step)
{
    const ktrace_window w[] = {{1000, 2000}, {3000, 4000}};
    const ktrace_span s[] = {{1010, 1500}, {1490, 1800}, {1790, 2005}, {3005, 3100}, {3050, 3080}};
    ktrace_step out[2];
    ck_assert_int_eq(ktrace_attribute(w, 2, 0, s, 5, out), 0);
    expect_step(&out[0], 0, 3, 490 + 310 + 215, 2005 - 1010);
    expect_step(&out[1], 1, 2, 95 + 30, 95);
}
END_TEST

/* A kernel's kind from its name as CUPTI reports it: the engine's kernels mangled (as nm lists
 * them in its objects), cuBLAS's as Nsight Systems shows them on Hopper. */
START_TEST(kernels_are_classified_by_name)
{
    const struct {
        const char *name;
        kernel_kind kind;
    } cases[] = {
        {"_Z18decode_attn_kernelILi128ELi4ELb0EEv11k_attn_argsPKiiiPfPi", KERNEL_ATTENTION},
        {"_Z19prefill_attn_kernel", KERNEL_ATTENTION},
        {"_Z20prefill_wgmma_kernel11k_attn_argsPKi", KERNEL_ATTENTION},
        {"_Z20decode_stream_kernel13k_decode_args", KERNEL_FUSED},
        {"_Z13skinny_kernelILi1ELi0ELi0EEv13k_skinny_argsi", KERNEL_GEMM},
        {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
         "kernel__5x_cublas",
         KERNEL_GEMM},
        {"nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNT", KERNEL_GEMM},
        {"void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, 4, false>",
         KERNEL_GEMM},
        {"void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>", KERNEL_GEMM},
        {"_Z18add_rmsnorm_kernelPfPKfPKtPKiifPt", KERNEL_ELEMENTWISE},
        {"_Z14rope_kv_kernelILi4EEvPKtPKiS3_iiiPKfPfiPtS7_", KERNEL_ELEMENTWISE},
        {"_Z15silu_mul_kernelPKtiPt", KERNEL_ELEMENTWISE},
        {"_Z12embed_kernelPKtPKiiPf", KERNEL_ELEMENTWISE},
        {"_Z13sample_kernelPKfiS0_S0_S0_Pi", KERNEL_SAMPLING},
        {"_Z12synth_kernelPtlmjff", KERNEL_OTHER},
        {NULL, KERNEL_OTHER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(ktrace_classify(cases[i].name) == cases[i].kind, "%s: kind %d, expected %d",
                      cases[i].name ? cases[i].name : "(null)", ktrace_classify(cases[i].name), cases[i].kind);
}
END_TEST

/* A step's kernel time splits by kind in full, overlaps included: the kinds sum to kernel_ns. */
START_TEST(a_steps_kernel_time_splits_by_kind)
{
    const ktrace_window w[] = {{100, 1000}};
    const ktrace_span s[] = {{100, 300, KERNEL_ELEMENTWISE}, {290, 600, KERNEL_GEMM}, {600, 700, KERNEL_ATTENTION},
                             {650, 900, KERNEL_GEMM},        {900, 910, KERNEL_SAMPLING}};
    ktrace_step out[1];
    ck_assert_int_eq(ktrace_attribute(w, 1, 0, s, 5, out), 0);
    const int64_t want[KERNEL_NUM_KINDS] = {[KERNEL_GEMM] = 310 + 250, [KERNEL_ATTENTION] = 100,
                                            [KERNEL_ELEMENTWISE] = 200, [KERNEL_SAMPLING] = 10};
    int64_t sum = 0;
    for (int k = 0; k < KERNEL_NUM_KINDS; k++) {
        ck_assert_msg(out[0].kind_ns[k] == want[k], "kind %d: %lld ns, expected %lld", k,
                      (long long)out[0].kind_ns[k], (long long)want[k]);
        sum += out[0].kind_ns[k];
    }
    ck_assert_int_eq(sum, out[0].kernel_ns);
    ck_assert_int_eq(out[0].busy_ns, 810);
}
END_TEST

/* Drives a ledger: step k's window is [1000 k + 100, 1000 k + 900]; each kernel of step k
 * starts at 1000 k + 100 + 10 i and runs 20 ns, so kernels of a step overlap by half. */
static ktrace_window window_of(int64_t k) { return (ktrace_window){1000 * k + 100, 1000 * k + 900}; }
static ktrace_span kernel_of(int64_t k, int i)
{
    uint64_t t = (uint64_t)(1000 * k + 100 + 10 * i);
    return (ktrace_span){t, t + 20};
}

START_TEST(late_records_land_in_their_step)
{
    ktrace_ledger l;
    ktrace_ledger_init(&l);
    const ktrace_step *out;
    for (int64_t k = 0; k < 4; k++) ktrace_ledger_window(&l, window_of(k));
    /* steps 1 and 3 arrive first, then step 0's second half, then its first half and step 2,
     * last-first: none is settled before all is asked, with a lag of 8 windows */
    ktrace_span a[] = {kernel_of(1, 0), kernel_of(1, 1), kernel_of(3, 0)};
    ktrace_ledger_spans(&l, a, 3);
    ck_assert_int_eq(ktrace_ledger_settle(&l, false, 8, 0, &out), 0);
    ktrace_span b[] = {kernel_of(0, 2), kernel_of(0, 3)};
    ktrace_ledger_spans(&l, b, 2);
    ktrace_span c[] = {kernel_of(2, 4), kernel_of(0, 1), kernel_of(0, 0)};
    ktrace_ledger_spans(&l, c, 3);
    ck_assert_int_eq(ktrace_ledger_settle(&l, true, 8, 0, &out), 4);
    expect_step(&out[0], 0, 4, 80, 50);
    expect_step(&out[1], 1, 2, 40, 30);
    expect_step(&out[2], 2, 1, 20, 20);
    expect_step(&out[3], 3, 1, 20, 20);
    ck_assert(l.counts.warmup == 0 && l.counts.outside == 0);
    ktrace_ledger_free(&l);
}
END_TEST

/* Without a forced flush, a step settles once a record of a step `lag` windows later has
 * arrived; the rest wait, and the next settle continues where this one stopped. */
START_TEST(steps_settle_once_records_of_a_later_step_arrived)
{
    ktrace_ledger l;
    ktrace_ledger_init(&l);
    const ktrace_step *out;
    enum { LAG = 2 };
    for (int64_t k = 0; k < 6; k++) {
        ktrace_ledger_window(&l, window_of(k));
        ktrace_span s[] = {kernel_of(k, 0), kernel_of(k, 1)};
        ktrace_ledger_spans(&l, s, 2);
    }
    /* records up to step 5: steps 0-3 are final, 4 and 5 wait; at most 3 a call */
    ck_assert_int_eq(ktrace_ledger_settle(&l, false, LAG, 3, &out), 3);
    for (int k = 0; k < 3; k++) expect_step(&out[k], k, 2, 40, 30);
    ck_assert_int_eq(ktrace_ledger_settle(&l, false, LAG, 3, &out), 1);
    expect_step(&out[0], 3, 2, 40, 30);
    ck_assert_int_eq(ktrace_ledger_settle(&l, false, LAG, 0, &out), 0);
    /* a record of step 4 arrives late: it still counts there */
    ktrace_span late = kernel_of(4, 2);
    ktrace_ledger_spans(&l, &late, 1);
    ktrace_ledger_window(&l, window_of(6));
    ck_assert_int_eq(ktrace_ledger_settle(&l, true, LAG, 0, &out), 3);
    expect_step(&out[0], 4, 3, 60, 40);
    expect_step(&out[1], 5, 2, 40, 30);
    expect_step(&out[2], 6, 0, 0, 0);
    ck_assert(l.counts.outside == 0 && l.n_win == l.win_head && l.n_spans == l.span_head);
    ktrace_ledger_free(&l);
}
END_TEST

/* The warm-up's and graph captures' kernels (before the first window) are counted apart; a
 * record between steps, or one arriving after its step was settled, is counted outside and
 * added to no step. */
START_TEST(records_outside_every_window_are_counted_not_added)
{
    ktrace_ledger l;
    ktrace_ledger_init(&l);
    const ktrace_step *out;
    ktrace_span warm[] = {{5, 10}, {20, 40}, {60, 70}};
    ktrace_ledger_spans(&l, warm, 3); /* before any step: kept until one comes */
    ck_assert_int_eq(ktrace_ledger_settle(&l, true, 1, 0, &out), 0);
    for (int64_t k = 0; k < 3; k++) ktrace_ledger_window(&l, window_of(k));
    ktrace_span s[] = {kernel_of(0, 0), {950, 960} /* between steps 0 and 1 */, kernel_of(2, 0)};
    ktrace_ledger_spans(&l, s, 3);
    ck_assert_int_eq(ktrace_ledger_settle(&l, false, 1, 0, &out), 2);
    expect_step(&out[0], 0, 1, 20, 20);
    expect_step(&out[1], 1, 0, 0, 0);
    ck_assert_msg(l.counts.warmup == 3 && l.counts.outside == 1, "warm-up %lld, outside %lld",
                  (long long)l.counts.warmup, (long long)l.counts.outside);
    /* step 1's record after step 1 was settled: outside, not added anywhere */
    ktrace_span late = kernel_of(1, 0);
    ktrace_ledger_spans(&l, &late, 1);
    ck_assert_int_eq(ktrace_ledger_settle(&l, true, 1, 0, &out), 1);
    expect_step(&out[0], 2, 1, 20, 20);
    ck_assert_int_eq(l.counts.outside, 2);
    /* after the last step, with nothing left to settle, a stray record is outside too */
    ktrace_span stray = {5000, 5010};
    ktrace_ledger_spans(&l, &stray, 1);
    ck_assert_int_eq(ktrace_ledger_settle(&l, true, 1, 0, &out), 0);
    ck_assert_int_eq(l.counts.outside, 3);
    ck_assert_int_eq(l.counts.warmup, 3);
    ktrace_ledger_free(&l);
}
END_TEST

/* Many steps, records delivered in buffers that split steps at random places, settled without
 * forcing (a few steps at a time) as they come and forced at the end: the figures equal each
 * step's own. */
START_TEST(settling_as_buffers_come_matches_each_steps_own_figures)
{
    ktrace_ledger l;
    ktrace_ledger_init(&l);
    enum { STEPS = 3000, PER = 7, BUF = 1234, LAG = 3 };
    static ktrace_span all[STEPS * PER];
    size_t n = 0, sent = 0;
    int64_t next = 0;
    unsigned r = 12345;
    for (int64_t k = 0; k < STEPS; k++) {
        ktrace_ledger_window(&l, window_of(k));
        int kernels = 1 + (int)(k % PER);
        for (int i = 0; i < kernels; i++) all[n++] = kernel_of(k, i);
        r = r * 1103515245u + 12345u;
        if (n - sent >= BUF || (r >> 16) % 5 == 0) { /* a buffer fills: up to BUF records */
            size_t m = n - sent < BUF ? n - sent : BUF;
            ktrace_ledger_spans(&l, all + sent, m);
            sent += m;
        }
        const ktrace_step *out;
        size_t got = ktrace_ledger_settle(&l, false, LAG, 2, &out); /* as the meter: a few a step */
        for (size_t j = 0; j < got; j++, next++) {
            int kk = 1 + (int)(next % PER);
            expect_step(&out[j], next, kk, 20 * kk, 10 * kk + 10);
        }
    }
    ktrace_ledger_spans(&l, all + sent, n - sent); /* the forced flush */
    const ktrace_step *out;
    size_t got = ktrace_ledger_settle(&l, true, LAG, 0, &out);
    for (size_t j = 0; j < got; j++, next++) {
        int kk = 1 + (int)(next % PER);
        expect_step(&out[j], next, kk, 20 * kk, 10 * kk + 10);
    }
    ck_assert_int_eq(next, STEPS);
    ck_assert(l.counts.outside == 0 && l.counts.warmup == 0);
    ktrace_ledger_free(&l);
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
    const ktrace_step *s;
    size_t n = 1;
    ck_assert_msg(ktrace_meter_settle(m, true, &s, &n, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(n, 0);
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
    tcase_add_test(tc, kernels_go_to_the_window_holding_their_start);
    tcase_add_test(tc, overlapping_kernels_under_pdl_count_once_in_their_step);
    tcase_add_test(tc, kernels_are_classified_by_name);
    tcase_add_test(tc, a_steps_kernel_time_splits_by_kind);
    tcase_add_test(tc, late_records_land_in_their_step);
    tcase_add_test(tc, steps_settle_once_records_of_a_later_step_arrived);
    tcase_add_test(tc, records_outside_every_window_are_counted_not_added);
    tcase_add_test(tc, settling_as_buffers_come_matches_each_steps_own_figures);
#if TANDEM_HAVE_CUPTI
    tcase_add_test(tc, cupti_loads_from_the_toolkit_complete);
    tcase_add_test(tc, the_meter_opens_or_says_why_not);
#else
    tcase_add_test(tc, without_cupti_the_meter_says_to_turn_it_off);
#endif
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
