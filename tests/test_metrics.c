/*
 * test_metrics.c: the metrics formulas against values computed by hand, the weighted
 * percentiles against GSL on the expanded samples, and the CSV rows.
 */
#include <check.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/serve.h"
#include "core/stats.h"
#include "policies/policies.h"
#include "testutil.h"


/* Percentiles of both sample sets equal GSL's (numpy's linear method); the histogram's on the
 * microsecond-rounded values, its mean and std on the exact ones. */
START_TEST(percentiles_match_gsl)
{
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 42);
    for (int trial = 0; trial < 20; trial++) {
        samples sm = {0};
        qhist qh;
        qhist_init(&qh, 1e-3);
        double *flat = malloc(4000 * sizeof *flat), *rounded = malloc(4000 * sizeof *rounded);
        size_t n = 0;
        int k = 1 + (int)gsl_rng_uniform_int(rng, 60);
        for (int i = 0; i < k; i++) {
            double v = floor(gsl_rng_uniform(rng) * 50) / 4 + gsl_rng_uniform(rng) * 1e-4; /* near-repeats */
            uint64_t wt = 1 + gsl_rng_uniform_int(rng, 5);
            qhist_add(&qh, v, wt);
            for (uint64_t j = 0; j < wt; j++) {
                samples_add(&sm, v);
                rounded[n] = round(v * 1e3) / 1e3;
                flat[n++] = v;
            }
        }
        double mean = gsl_stats_mean(flat, 1, n);
        double pstd = n > 1 ? sqrt(gsl_stats_variance(flat, 1, n) * (n - 1) / n) : 0;
        gsl_sort(flat, 1, n);
        gsl_sort(rounded, 1, n);
        double qs[] = {0, 1, 25, 50, 90, 95, 99, 99.9, 100};
        for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
            double want = gsl_stats_quantile_from_sorted_data(flat, 1, n, qs[i] / 100);
            double got = samples_percentile(&sm, qs[i]);
            ck_assert_msg(fabs(got - want) < 1e-9, "trial %d q=%g: samples %.12g, GSL %.12g", trial, qs[i], got, want);
            want = gsl_stats_quantile_from_sorted_data(rounded, 1, n, qs[i] / 100);
            got = qhist_percentile(&qh, qs[i]);
            ck_assert_msg(fabs(got - want) < 1e-9, "trial %d q=%g: qhist %.12g, GSL %.12g", trial, qs[i], got, want);
        }
        ck_assert_double_eq_tol(samples_mean(&sm), mean, 1e-9);
        ck_assert_double_eq_tol(qhist_mean(&qh), mean, 1e-9);
        ck_assert_double_eq_tol(samples_std(&sm), pstd, 1e-9);
        ck_assert_double_eq_tol(qhist_std(&qh), pstd, 1e-7);
        samples_free(&sm);
        qhist_free(&qh);
        free(flat);
        free(rounded);
    }
    gsl_rng_free(rng);
}
END_TEST

/* Above 16,384 units the histogram keys by log buckets of relative width 1/16,384: its
 * percentiles stay within 0.004% of GSL's on the exact values, across twelve decades, and
 * min and max are exact. */
START_TEST(histogram_percentiles_are_close_on_a_log_scale)
{
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 7);
    for (int trial = 0; trial < 10; trial++) {
        qhist qh;
        qhist_init(&qh, 1e-3);
        size_t n = 1 + gsl_rng_uniform_int(rng, 5000);
        double *v = malloc(n * sizeof *v);
        for (size_t i = 0; i < n; i++) {
            v[i] = 16.5 * pow(10, gsl_rng_uniform(rng) * (trial + 2)); /* 16.5 ms .. 1.6e11 ms */
            qhist_add(&qh, v[i], 1);
        }
        gsl_sort(v, 1, n);
        double qs[] = {0, 1, 50, 90, 99, 99.9, 100};
        for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
            double want = gsl_stats_quantile_from_sorted_data(v, 1, n, qs[i] / 100), got = qhist_percentile(&qh, qs[i]);
            ck_assert_msg(fabs(got - want) <= 4e-5 * want, "trial %d q=%g: qhist %.12g, GSL %.12g (rel %.2g)", trial,
                          qs[i], got, want, fabs(got - want) / want);
        }
        ck_assert_msg(qhist_percentile(&qh, 100) == v[n - 1] && qhist_percentile(&qh, 0) == v[0],
                      "min/max not exact: %.17g %.17g vs %.17g %.17g", qhist_percentile(&qh, 0),
                      qhist_percentile(&qh, 100), v[0], v[n - 1]);
        qhist_free(&qh);
        free(v);
    }
    gsl_rng_free(rng);
}
END_TEST

static int cmp_i64_asc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A batch of gaps given to a qhist as runs leaves it bit for bit as sorting the batch and adding
 * each distinct value with its count does (the reference): the same keys, counts, extremes and
 * long double sums, so every percentile, mean and std of a run is unchanged. Batches have the
 * shapes a step's gaps take: one value, a few values in blocks, values that come back after
 * others, and all distinct. */
START_TEST(itl_runs_equal_sorted_batches)
{
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 5);
    qhist got, want;
    qhist_init(&got, 1e-3);
    qhist_init(&want, 1e-3);
    qruns runs = {0};
    int64_t gaps[600];
    for (int round = 0; round < 400; round++) {
        size_t n = gsl_rng_uniform_int(rng, 600);
        bool scattered = round % 4 == 3; /* a new draw for every gap */
        unsigned long choices = 1 + gsl_rng_uniform_int(rng, scattered ? 100000 : 4);
        int64_t gap = 0;
        for (size_t i = 0; i < n; i++) {
            /* blocks of equal gaps, each block's gap one of `choices` values in 1 us .. 100 ms */
            if (i == 0 || scattered || gsl_rng_uniform(rng) < 0.1)
                gap = 1000 + (int64_t)gsl_rng_uniform_int(rng, choices) * 999;
            gaps[i] = gap;
            qruns_add(&runs, gap);
        }
        qruns_flush(&runs, &got, 1e6);
        ck_assert_uint_eq(runs.n, 0);
        qsort(gaps, n, sizeof *gaps, cmp_i64_asc);
        for (size_t i = 0, j; i < n; i = j) {
            for (j = i; j < n && gaps[j] == gaps[i]; j++) {
            }
            qhist_add(&want, (double)gaps[i] / 1e6, j - i);
        }
        ck_assert_msg(got.n == want.n && got.cap == want.cap && got.min == want.min && got.max == want.max,
                      "round %d: n %llu/%llu, cap %zu/%zu, min %.17g/%.17g, max %.17g/%.17g", round,
                      (unsigned long long)got.n, (unsigned long long)want.n, got.cap, want.cap, got.min, want.min,
                      got.max, want.max);
        ck_assert_msg(got.sum == want.sum && got.sum_sq == want.sum_sq,
                      "round %d: sums differ from the sorted reference: %.21Lg/%.21Lg, %.21Lg/%.21Lg", round,
                      got.sum, want.sum, got.sum_sq, want.sum_sq);
        ck_assert_msg(memcmp(got.count, want.count, got.cap * sizeof *got.count) == 0,
                      "round %d: bucket counts differ from the sorted reference", round);
    }
    const double qs[] = {0, 1, 50, 90, 99, 99.9, 100};
    for (size_t i = 0; i < ARRAY_LEN(qs); i++)
        ck_assert_msg(qhist_percentile(&got, qs[i]) == qhist_percentile(&want, qs[i]), "p%g differs", qs[i]);
    ck_assert(qhist_mean(&got) == qhist_mean(&want) && qhist_std(&got) == qhist_std(&want));
    qruns_free(&runs);
    qhist_free(&got);
    qhist_free(&want);
    gsl_rng_free(rng);
}
END_TEST

/* Peak resident memory of this process, in KiB. */
static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Two million requests with latencies spread over eleven decades (1 us .. 1e5 s) cost the
 * metrics no more memory than the first million: once the histograms' buckets are in use
 * (a few MB each at most, core/stats.h), more requests add nothing, so a billion-request replay
 * runs in the same memory as a short one. */
START_TEST(metrics_memory_does_not_grow_with_requests)
{
    metrics_options mo = {0};
    metrics *m;
    terr e;
    ck_assert(metrics_open(&m, &mo, &e) == 0);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 11);
    request r;
    memset(&r, 0, sizeof r);
    long rss_at_1m = 0;
    for (int64_t i = 0; i < 2000000; i++) {
        r.id = i;
        r.state = REQ_FINISHED;
        r.arrival_ns = i * 1000;
        r.first_scheduled_ns = r.arrival_ns + (int64_t)pow(10, 3 + gsl_rng_uniform(rng) * 11);
        r.first_token_ns = r.first_scheduled_ns + (int64_t)pow(10, 3 + gsl_rng_uniform(rng) * 11);
        r.finish_ns = r.first_token_ns + (int64_t)pow(10, 3 + gsl_rng_uniform(rng) * 11);
        r.prompt_tokens = 100;
        r.num_output_tokens = r.max_output_tokens = 1 + (int32_t)gsl_rng_uniform_int(rng, 1000);
        r.num_cached_tokens = -1;
        metrics_request_done(m, &r);
        if (i == 1000000) rss_at_1m = max_rss_kib();
    }
    long growth = max_rss_kib() - rss_at_1m;
    metrics_summary s;
    ck_assert(metrics_finish(m, NULL, &s, &e) == 0);
    metrics_free(m);
    gsl_rng_free(rng);
    ck_assert_int_eq(s.completed, 2000000);
    /* a per-request array of four doubles alone would add 32 MB */
    ck_assert_msg(growth < 4 * 1024, "peak RSS grew by %ld KiB from 1 M to 2 M requests", growth);
}
END_TEST

/*
 * Three requests, a step costing 1 ms + 0.25 ms per token, budget 8:
 *   A (t=0, prompt 4, 3 outputs), B (t=0, prompt 4, 1 output), C (t=10 ms, prompt 2, 2 outputs)
 *   step 1  [0,3)      A:4 B:4   -> A tok1 @3, B tok1 @3 (B done)
 *   step 2  [3,4.25)   A:1       -> A tok2 @4.25
 *   step 3  [4.25,5.5) A:1       -> A tok3 @5.5 (done)
 *   idle until 10
 *   step 4  [10,11.5)  C:2       -> C tok1 @11.5
 *   step 5  [11.5,12.75) C:1     -> C tok2 @12.75 (done)
 * TTFT: A 3, B 3, C 1.5        E2EL: A 5.5, B 3, C 2.75
 * TPOT: A (5.5-3)/2 = 1.25, C 1.25 (B has one token: none)
 * ITL: 1.25 x 3               duration 12.75 ms
 */
START_TEST(summary_matches_hand_computation)
{
    sched_config cfg = {.max_num_seqs = 8, .max_num_batched_tokens = 8, .max_model_len = 64,
                        .block_size = 4, .enable_chunked_prefill = true, .reserve_full_isl = true};
    serve_config sc = {.sched = cfg, .policy = &policy_vllm, .num_gpu_blocks = 32};
    arrival a[] = {{.arrival_ns = 0, .prompt_tokens = 4, .output_tokens = 3},
                   {.arrival_ns = 0, .prompt_tokens = 4, .output_tokens = 1},
                   {.arrival_ns = 10 * MS, .prompt_tokens = 2, .output_tokens = 2}};
    array_source as;
    linear_exec lx = {.base_ns = MS, .per_token_ns = MS / 4};
    tclock clock;
    tclock_init_sim(&clock);
    char *dir = make_temp_dir("metrics");
    metrics_options mo = {.out_dir = dir, .goodput_ttft_ms = 2.0, .write_requests = true, .write_steps = true};
    metrics *m;
    terr e;
    ck_assert(metrics_open(&m, &mo, &e) == 0);
    serve_result res;
    ck_assert(serve_run(&sc, array_source_make(&as, a, 3), linear_exec_make(&lx), &clock, m, NULL, &res, &e) == 0);
    metrics_summary s;
    ck_assert(metrics_finish(m, NULL, &s, &e) == 0);
    metrics_free(m);

    const double tol = 1e-9;
    ck_assert_int_eq(s.completed, 3);
    ck_assert_int_eq(s.num_steps, 5);
    ck_assert_double_eq_tol(s.duration_s, 0.01275, 1e-12);
    ck_assert_int_eq(s.total_input_tokens, 10);
    ck_assert_int_eq(s.total_output_tokens, 6);
    ck_assert_double_eq_tol(s.request_throughput, 3 / 0.01275, 1e-6);
    ck_assert_double_eq_tol(s.output_throughput, 6 / 0.01275, 1e-6);
    ck_assert_double_eq_tol(s.total_token_throughput, 16 / 0.01275, 1e-6);
    ck_assert_double_eq_tol(s.request_goodput, 1 / 0.01275, 1e-6); /* only C has TTFT <= 2 ms */
    ck_assert_double_eq_tol(s.ttft.mean, 2.5, tol);
    ck_assert_double_eq_tol(s.ttft.median, 3.0, tol);
    ck_assert_double_eq_tol(s.ttft.std, sqrt(0.5), tol);
    ck_assert_double_eq_tol(s.ttft.p99, 3.0, tol);
    ck_assert_double_eq_tol(s.e2el.mean, 3.75, tol);
    ck_assert_double_eq_tol(s.e2el.median, 3.0, tol);
    ck_assert_double_eq_tol(s.e2el.p99, 3.0 + 0.98 * 2.5, tol);
    ck_assert_double_eq_tol(s.tpot.mean, 1.25, tol);
    ck_assert_double_eq_tol(s.tpot.std, 0, tol);
    ck_assert_double_eq_tol(s.itl.mean, 1.25, tol);
    ck_assert_double_eq_tol(s.itl.p99, 1.25, tol);
    ck_assert_double_eq_tol(s.ttft.max, 3.0, tol);
    ck_assert_double_eq_tol(s.e2el.max, 5.5, tol);
    ck_assert_double_eq_tol(s.e2el.p999, 3.0 + 0.998 * 2.5, tol);
    /* KV tokens held: step 1 ends with A and B at 4 computed tokens each (8 of 32 x 4 slots) */
    ck_assert_double_eq_tol(s.peak_kv_token_usage, 8.0 / 128, tol);
    ck_assert_double_eq_tol(s.busy_s, (3 + 1.25 + 1.25 + 1.5 + 1.25) / 1e3, 1e-12);
    ck_assert_double_eq_tol(s.mean_batch_size, 6.0 / 5, tol);

    /* the rows */
    char path[4200];
    snprintf(path, sizeof path, "%s/requests.csv", dir);
    char *csv = slurp(path, NULL);
    ck_assert_ptr_nonnull(csv);
    ck_assert_msg(strstr(csv, "\n1,0.000000,0.000000,0.003000,0.003000,4,1,0,3.000,,3.000,0.000,finished,,0,0,0,1\n"),
                  "row of B not found in:\n%s", csv);
    ck_assert_msg(strstr(csv, "\n0,0.000000,0.000000,0.003000,0.005500,4,3,0,3.000,1.250,5.500,0.000,finished,,0,0,0,3\n"),
                  "row of A not found in:\n%s", csv);
    free(csv);
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    csv = slurp(path, NULL);
    ck_assert_msg(strstr(csv, "\n3,0.010000,1.500,1,0,1,2,0,"), "step 4 row not found in:\n%s", csv);
    free(csv);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    csv = slurp(path, NULL);
    ck_assert_msg(strstr(csv, "\"completed\": 3") && strstr(csv, "\"request_goodput\":") &&
                      strstr(csv, "\"p99_ttft_ms\":") && strstr(csv, "\"median_itl_ms\":"),
                  "summary.json lacks vLLM keys:\n%s", csv);
    free(csv);
    free(dir);
}
END_TEST

/* The CUDA engine's kernel trace, as the metrics write it: per step, the kernel time summed, the
 * busy fraction (busy time / step time), the kernel time by kind and the gap (step time no
 * kernel ran); in the summary, their statistics, the busy fraction over the whole run, weighted
 * by step time, and the kinds and the gap summed. */
START_TEST(kernel_time_columns_and_summary)
{
    char *dir = make_temp_dir("kmetrics");
    metrics_options mo = {.out_dir = dir, .write_steps = true, .write_host_time = true, .write_kernel_time = true};
    metrics *m;
    terr e;
    ck_assert(metrics_open(&m, &mo, &e) == 0);
    /* steps of 1, 1, 2 and 4 ms, busy 0.9, 0.8, 1.0 and 4.0 ms: fractions 0.9, 0.8, 0.5, 1 */
    const int64_t dur_us[] = {1000, 1000, 2000, 4000}, busy_us[] = {900, 800, 1000, 4000},
                  kern_ns[] = {950000, 850000, 1200000, 4100123};
    /* the kernel times come later than their steps, as the kernel trace settles them: the
     * first two after the third step, the rest at the end; rows stay in step order */
    step_kernel_time k[4];
    for (int i = 0; i < 4; i++) {
        metrics_step(m, &(step_stats){.step = i, .start_ns = i * 4 * MS, .duration_ns = dur_us[i] * 1000,
                                      .block_size = 16});
        /* 0.5 ms of GEMMs, 0.3 of attention, the rest element-wise */
        k[i] = (step_kernel_time){kern_ns[i], busy_us[i] * 1000, {0}};
        k[i].kind_ns[KERNEL_GEMM] = 500000, k[i].kind_ns[KERNEL_ATTENTION] = 300000;
        k[i].kind_ns[KERNEL_ELEMENTWISE] = kern_ns[i] - 800000;
        if (i == 2) metrics_step_kernels(m, k, 2);
    }
    metrics_summary s;
    ck_assert_msg(metrics_finish(m, NULL, &s, &e) != 0 && strstr(e.msg, "2 steps never got their kernel time"),
                  "finished with steps waiting for their kernel time: %s", e.msg);
    metrics_step_kernels(m, k + 2, 2);
    ck_assert(metrics_finish(m, NULL, &s, &e) == 0);
    metrics_free(m);
    const double tol = 1e-9;
    ck_assert_double_eq_tol(s.kernel_us.mean, (950 + 850 + 1200 + 4100.123) / 4, 1e-6);
    ck_assert_double_eq_tol(s.kernel_busy.mean, 0.8, tol);
    ck_assert_double_eq_tol(s.kernel_busy.median, 0.85, tol);
    ck_assert_double_eq_tol(s.kernel_busy.min, 0.5, tol);
    ck_assert_double_eq_tol(s.kernel_busy.p1, 0.5 + 0.03 * 0.3, tol); /* numpy: rank 0.03 of 3 */
    ck_assert_double_eq_tol(s.kernel_busy.overall, 6.7 / 8, tol);
    ck_assert_double_eq_tol(s.kernel_kind_s[KERNEL_GEMM], 4 * 0.5e-3, tol);
    ck_assert_double_eq_tol(s.kernel_kind_s[KERNEL_ELEMENTWISE], (0.15 + 0.05 + 0.4 + 3.300123) * 1e-3, tol);
    ck_assert_double_eq_tol(s.kernel_kind_s[KERNEL_SAMPLING], 0, tol);
    ck_assert_double_eq_tol(s.kernel_gap_s, (0.1 + 0.2 + 1.0 + 0) * 1e-3, tol);
    char path[4200];
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    char *csv = slurp(path, NULL);
    ck_assert_msg(strstr(csv, ",host_us,sched_us,kernel_us,kernel_busy,kernel_gemm_us,kernel_attention_us,"
                              "kernel_fused_us,kernel_elementwise_us,kernel_sampling_us,kernel_other_us,"
                              "kernel_gap_us\n"),
                  "steps.csv header:\n%s", csv);
    ck_assert_msg(strstr(csv, ",4100.12,1.0000,500.00,300.00,0.00,3300.12,0.00,0.00,0.00\n") &&
                      strstr(csv, ",1200.00,0.5000,500.00,300.00,0.00,400.00,0.00,0.00,1000.00\n"),
                  "steps.csv rows:\n%s", csv);
    const char *r0 = strstr(csv, "\n0,"), *r1 = strstr(csv, "\n1,"), *r2 = strstr(csv, "\n2,"), *r3 = strstr(csv, "\n3,");
    ck_assert_msg(r0 && r0 < r1 && r1 < r2 && r2 < r3 &&
                      strstr(r0, ",950.00,0.9000,500.00,300.00,0.00,150.00,0.00,0.00,100.00\n") < r1,
                  "steps.csv rows out of order or mismatched:\n%s", csv);
    free(csv);
    json_t *j = load_json(dir, "summary.json");
    json_t *kb = json_object_get(j, "kernel_busy"), *ku = json_object_get(j, "kernel_us");
    ck_assert_msg(kb && ku && json_object_get(kb, "overall") && json_object_get(kb, "p1") &&
                      json_object_get(ku, "p99") && json_object_get(ku, "max"),
                  "summary.json lacks kernel_us / kernel_busy");
    json_t *kinds = json_object_get(j, "kernel_ms_by_kind");
    ck_assert_msg(kinds && json_object_size(kinds) == KERNEL_NUM_KINDS &&
                      fabs(json_number_value(json_object_get(kinds, "attention")) - 1.2) < 1e-9 &&
                      fabs(json_number_value(json_object_get(j, "kernel_gap_ms")) - 1.3) < 1e-9,
                  "summary.json's kernel_ms_by_kind / kernel_gap_ms are not the sums");
    json_decref(j);
    rm_tree(dir);
}
END_TEST

/* An executor whose kernel times come LATE steps after their steps, as the CUDA engine's kernel
 * trace settles them, and the rest at the end: step i's kernels ran (i + 1) us, busy half that. */
typedef struct late_exec {
    int64_t steps, reported;
    step_kernel_time k[64];
} late_exec;
enum { LATE = 3 };

static int late_execute(void *self, const batch *b, step_result *out, terr *e)
{
    late_exec *x = self;
    out->duration_ns = MS + MS / 4 * b->num_tokens; /* as linear_exec in summary_matches_hand_computation */
    int64_t i = x->steps++;
    x->k[i] = (step_kernel_time){(i + 1) * 1000, (i + 1) * 500, {0}};
    x->k[i].kind_ns[KERNEL_SAMPLING] = (i + 1) * 1000;
    if (i - x->reported >= LATE) { /* steps up to i - LATE settle now */
        out->kernel_times = x->k + x->reported;
        out->num_kernel_times = (int32_t)(i - LATE + 1 - x->reported);
        x->reported = i - LATE + 1;
    }
    return 0;
}

static int late_settle(void *self, const step_kernel_time **out, int32_t *n, terr *e)
{
    late_exec *x = self;
    *out = x->k + x->reported, *n = (int32_t)(x->steps - x->reported);
    x->reported = x->steps;
    return 0;
}

static bool late_measures(void *self) { return true; }

/* The serving loop hands kernel times to the metrics however late they come: each steps.csv row
 * gets its own step's, in step order, and the run is complete before summary.json is written. */
START_TEST(kernel_times_reach_their_rows_however_late)
{
    static const executor_ops late_ops = {.name = "late", .measures_kernels = late_measures,
                                          .execute = late_execute, .settle = late_settle};
    sched_config cfg = {.max_num_seqs = 8, .max_num_batched_tokens = 8, .max_model_len = 64,
                        .block_size = 4, .enable_chunked_prefill = true, .reserve_full_isl = true};
    serve_config sc = {.sched = cfg, .policy = &policy_vllm, .num_gpu_blocks = 32};
    arrival a[] = {{.arrival_ns = 0, .prompt_tokens = 4, .output_tokens = 3},
                   {.arrival_ns = 0, .prompt_tokens = 4, .output_tokens = 1},
                   {.arrival_ns = 10 * MS, .prompt_tokens = 2, .output_tokens = 2}};
    array_source as;
    late_exec x = {0};
    tclock clock;
    tclock_init_sim(&clock);
    char *dir = make_temp_dir("late_kernels");
    metrics_options mo = {.out_dir = dir, .write_steps = true, .write_kernel_time = true};
    metrics *m;
    terr e;
    ck_assert(metrics_open(&m, &mo, &e) == 0);
    ck_assert_msg(serve_run(&sc, array_source_make(&as, a, 3), (executor){&late_ops, &x}, &clock, m, NULL, NULL,
                            &e) == 0, "%s", e.msg);
    metrics_summary s;
    ck_assert_msg(metrics_finish(m, NULL, &s, &e) == 0, "%s", e.msg);
    metrics_free(m);
    ck_assert_int_eq(x.steps, 5); /* as summary_matches_hand_computation */
    char path[4200];
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    char *csv = slurp(path, NULL);
    /* durations 3, 1.25, 1.25, 1.5, 1.25 ms; busy (i + 1) * 0.5 us of them */
    static const char *rows[] = {"\n0,0.000000,3.000,", "\n1,0.003000,1.250,", "\n2,0.004250,1.250,",
                                 "\n3,0.010000,1.500,", "\n4,0.011500,1.250,"};
    /* then the kinds (all sampling) and the gap, the step less its busy time */
    static const char *ends[] = {",1.00,0.0002,0.00,0.00,0.00,0.00,1.00,0.00,2999.50\n",
                                 ",2.00,0.0008,0.00,0.00,0.00,0.00,2.00,0.00,1249.00\n",
                                 ",3.00,0.0012,0.00,0.00,0.00,0.00,3.00,0.00,1248.50\n",
                                 ",4.00,0.0013,0.00,0.00,0.00,0.00,4.00,0.00,1498.00\n",
                                 ",5.00,0.0020,0.00,0.00,0.00,0.00,5.00,0.00,1247.50\n"};
    for (int i = 0; i < 5; i++) {
        const char *r = strstr(csv, rows[i]), *end = r ? strchr(r + 1, '\n') : NULL;
        ck_assert_msg(r && end && strncmp(end - strlen(ends[i]) + 1, ends[i], strlen(ends[i])) == 0,
                      "step %d: expected a row starting %s and ending %s in\n%s", i, rows[i] + 1, ends[i], csv);
    }
    ck_assert_double_eq_tol(s.kernel_us.max, 5.0, 1e-9);
    ck_assert_double_eq_tol(s.kernel_busy.overall, 7.5 / 8250.0, 1e-12);
    free(csv);
    rm_tree(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("formulas");
    tcase_add_test(tc, percentiles_match_gsl);
    tcase_add_test(tc, itl_runs_equal_sorted_batches);
    tcase_add_test(tc, summary_matches_hand_computation);
    tcase_add_test(tc, kernel_time_columns_and_summary);
    tcase_add_test(tc, kernel_times_reach_their_rows_however_late);
    tcase_add_test(tc, histogram_percentiles_are_close_on_a_log_scale);
    tcase_add_test(tc, metrics_memory_does_not_grow_with_requests);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
