/*
 * test_tracegen.c: `tandem trace gen` and the generator behind it (determinism, rates,
 * burstiness, length distributions, the source against a CSV replay, CLI errors).
 *
 * Statistical checks use N = 20000 and tolerances several standard errors wide, with fixed
 * seeds, so they cannot flake, yet a wrong formula (rate instead of 1/rate, shape instead of
 * 1/shape) lands far outside them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"
#include "traces/trace.h"
#include "traces/tracegen.h"

/* Runs `tandem trace gen ARGS... --out DIR/NAME` and reads the result back. */
static trace_rows gen_rows(const char *dir, const char *name, const char *const *args)
{
    char out[4200];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    char *argv[40];
    int n = 0;
    argv[n++] = "tandem";
    argv[n++] = "trace";
    argv[n++] = "gen";
    for (int i = 0; args[i]; i++) argv[n++] = (char *)args[i];
    argv[n++] = "--out";
    argv[n++] = out;
    argv[n] = NULL;
    cli_result c = run_cliv(argv);
    ck_assert_msg(c.exit_code == 0, "trace gen %s exited %d: %s", name, c.exit_code, c.err);
    cli_result_free(&c);
    trace_rows r = read_all(out);
    ck_assert_msg(r.rc == 0, "reading back %s: %s", name, r.err.msg);
    return r;
}

/* Mean and coefficient of variation of the inter-arrival gaps (in seconds). */
static void gap_stats(const trace_rows *r, double *mean, double *cv)
{
    double s = 0, s2 = 0;
    int64_t n = r->n - 1;
    for (int64_t i = 1; i < r->n; i++) {
        double g = (double)(r->a[i].arrival_ns - r->a[i - 1].arrival_ns) / 1e9;
        s += g;
        s2 += g * g;
    }
    *mean = s / (double)n;
    *cv = sqrt(s2 / (double)n - *mean * *mean) / *mean;
}

START_TEST(test_gen_same_seed_is_byte_identical)
{
    cli_result a = run_cli("trace", "gen", "--num-requests", "500", "--rate", "3", "--burstiness",
                           "0.5", "--length-dist", "lognormal", "--priority-classes", "0.5,0.5",
                           "--num-clients", "3", "--seed", "42", NULL);
    cli_result b = run_cli("trace", "gen", "--num-requests", "500", "--rate", "3", "--burstiness",
                           "0.5", "--length-dist", "lognormal", "--priority-classes", "0.5,0.5",
                           "--num-clients", "3", "--seed", "42", NULL);
    cli_result c = run_cli("trace", "gen", "--num-requests", "500", "--rate", "3", "--burstiness",
                           "0.5", "--length-dist", "lognormal", "--priority-classes", "0.5,0.5",
                           "--num-clients", "3", "--seed", "43", NULL);
    ck_assert_msg(a.exit_code == 0, "exit %d: %s", a.exit_code, a.err);
    ck_assert_msg(!strncmp(a.out, "arrival_s,prompt_tokens,output_tokens,priority,client\n", 54),
                  "header: %.80s", a.out);
    ck_assert_msg(!strcmp(a.out, b.out), "same seed, different output");
    ck_assert_msg(strcmp(a.out, c.out) != 0, "seeds 42 and 43 gave the same output");
    /* 6-decimal arrivals: line 2 is "0.000000,..." (the first request is at t = 0). */
    ck_assert_msg(!strncmp(strchr(a.out, '\n') + 1, "0.000000,", 9), "first row: %.40s",
                  strchr(a.out, '\n') + 1);
    cli_result_free(&a);
    cli_result_free(&b);
    cli_result_free(&c);
}
END_TEST

START_TEST(test_gen_mean_rate_and_poisson_cv)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "20000", "--rate", "10", "--seed", "1", NULL};
    trace_rows r = gen_rows(d, "poisson.csv", args);
    ck_assert_int_eq(r.n, 20000);
    double span_s = (double)r.a[r.n - 1].arrival_ns / 1e9;
    double rate = (double)(r.n - 1) / span_s;
    ck_assert_msg(fabs(rate - 10) < 0.3, "mean rate %.3f req/s, want 10 +- 3%%", rate);
    double mean, cv;
    gap_stats(&r, &mean, &cv);
    ck_assert_msg(fabs(cv - 1) < 0.05, "Poisson gap CV %.3f, want 1", cv);
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_int_eq(r.a[i].prompt_tokens, 1024); /* fixed default lengths, exact */
        ck_assert_int_eq(r.a[i].output_tokens, 128);
        ck_assert_int_eq(r.a[i].arrival_ns % 1000, 0); /* microsecond resolution */
    }
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_burstiness_sets_gap_cv)
{
    char *d = make_temp_dir("gen");
    static const struct { const char *b; double cv; } cases[] = {{"0.25", 2.0}, {"4", 0.5}};
    for (size_t k = 0; k < 2; k++) {
        const char *args[] = {"--num-requests", "20000", "--rate", "5", "--burstiness",
                              cases[k].b, "--seed", "7", NULL};
        trace_rows r = gen_rows(d, "b.csv", args);
        double mean, cv;
        gap_stats(&r, &mean, &cv);
        ck_assert_msg(fabs(mean - 0.2) < 0.2 * 0.05, "B=%s: mean gap %.4f s, want 0.2", cases[k].b,
                      mean);
        ck_assert_msg(fabs(cv - cases[k].cv) < 0.08 * cases[k].cv, "B=%s: gap CV %.3f, want %.2f",
                      cases[k].b, cv, cases[k].cv);
        rows_free(&r);
    }
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_fixed_and_infinite_rate)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "50", "--rate", "inf", "--input-len", "77",
                          "--output-len", "5", NULL};
    trace_rows r = gen_rows(d, "inf.csv", args);
    ck_assert_int_eq(r.n, 50);
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_int_eq(r.a[i].arrival_ns, 0);
        ck_assert_int_eq(r.a[i].prompt_tokens, 77);
        ck_assert_int_eq(r.a[i].output_tokens, 5);
    }
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_uniform_lengths_within_range)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "20000", "--length-dist", "uniform", "--input-len",
                          "100", "--output-len", "10", "--range-ratio", "0.5", NULL};
    trace_rows r = gen_rows(d, "u.csv", args);
    int lo = 1 << 30, hi = 0, olo = 1 << 30, ohi = 0;
    double sum = 0;
    for (int64_t i = 0; i < r.n; i++) {
        lo = r.a[i].prompt_tokens < lo ? r.a[i].prompt_tokens : lo;
        hi = r.a[i].prompt_tokens > hi ? r.a[i].prompt_tokens : hi;
        olo = r.a[i].output_tokens < olo ? r.a[i].output_tokens : olo;
        ohi = r.a[i].output_tokens > ohi ? r.a[i].output_tokens : ohi;
        sum += r.a[i].prompt_tokens;
    }
    /* vLLM's rule: [int(100*0.5), int(100*1.5)] = [50, 150]; [5, 15] for the outputs. */
    ck_assert_msg(lo == 50 && hi == 150, "prompt range [%d, %d], want [50, 150]", lo, hi);
    ck_assert_msg(olo == 5 && ohi == 15, "output range [%d, %d], want [5, 15]", olo, ohi);
    ck_assert_msg(fabs(sum / (double)r.n - 100) < 1, "prompt mean %.2f, want 100", sum / (double)r.n);
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_lognormal_mean_and_max_len_clamp)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "20000", "--length-dist", "lognormal", "--input-len",
                          "1000", "--lognormal-sigma", "0.5", NULL};
    trace_rows r = gen_rows(d, "ln.csv", args);
    double sum = 0;
    for (int64_t i = 0; i < r.n; i++) sum += r.a[i].prompt_tokens;
    ck_assert_msg(fabs(sum / (double)r.n - 1000) < 15, "lognormal prompt mean %.1f, want 1000",
                  sum / (double)r.n);
    rows_free(&r);

    const char *args2[] = {"--num-requests", "5000", "--length-dist", "lognormal", "--input-len",
                           "1000", "--lognormal-sigma", "2", "--max-len", "2000", NULL};
    r = gen_rows(d, "clamp.csv", args2);
    int at_max = 0;
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_msg(r.a[i].prompt_tokens >= 1 && r.a[i].prompt_tokens <= 2000,
                      "row %lld: prompt %d outside [1, 2000]", (long long)i, r.a[i].prompt_tokens);
        at_max += r.a[i].prompt_tokens == 2000;
    }
    ck_assert_msg(at_max > 100, "only %d of 5000 prompts hit --max-len 2000", at_max);
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_priority_fractions_and_clients)
{
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "20000", "--priority-classes", "0.2,0.3,0.5",
                          "--num-clients", "4", "--seed", "3", NULL};
    trace_rows r = gen_rows(d, "p.csv", args);
    int64_t cls[3] = {0}, cli[4] = {0};
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_msg(r.a[i].priority >= 0 && r.a[i].priority < 3, "priority %d", r.a[i].priority);
        ck_assert_msg(r.a[i].client_id >= 0 && r.a[i].client_id < 4, "client %d", r.a[i].client_id);
        cls[r.a[i].priority]++;
        cli[r.a[i].client_id]++;
    }
    static const double want[3] = {0.2, 0.3, 0.5};
    for (int k = 0; k < 3; k++)
        ck_assert_msg(fabs((double)cls[k] / (double)r.n - want[k]) < 0.015,
                      "class %d fraction %.4f, want %.2f", k, (double)cls[k] / (double)r.n, want[k]);
    for (int k = 0; k < 4; k++)
        ck_assert_msg(fabs((double)cli[k] / (double)r.n - 0.25) < 0.015, "client %d fraction %.4f",
                      k, (double)cli[k] / (double)r.n);
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_lengths_file_draws_only_its_rows)
{
    const char *lf = "traces/samples/sharegpt_lengths_5k.csv";
    /* The set of (prefill, decode) pairs in the file. */
    char *text = slurp(lf, NULL);
    ck_assert_msg(text != NULL, "cannot read %s", lf);
    int32_t (*pairs)[2] = malloc(6000 * sizeof *pairs);
    int np = 0;
    for (char *line = strchr(text, '\n'); line && line[1] && np < 6000; line = strchr(line, '\n')) {
        line++;
        ck_assert_int_eq(sscanf(line, "%d,%d", &pairs[np][0], &pairs[np][1]), 2);
        np++;
    }
    ck_assert_int_eq(np, 5000);
    free(text);
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "3000", "--length-dist", "file", "--lengths-file", lf,
                          "--seed", "9", NULL};
    trace_rows r = gen_rows(d, "lf.csv", args);
    int distinct_prompts = 0;
    for (int64_t i = 0; i < r.n; i++) {
        bool found = false;
        for (int k = 0; k < np && !found; k++)
            found = pairs[k][0] == r.a[i].prompt_tokens && pairs[k][1] == r.a[i].output_tokens;
        ck_assert_msg(found, "row %lld: (%d, %d) is not a row of %s", (long long)i,
                      r.a[i].prompt_tokens, r.a[i].output_tokens, lf);
        distinct_prompts += i > 0 && r.a[i].prompt_tokens != r.a[i - 1].prompt_tokens;
    }
    ck_assert_msg(distinct_prompts > 2500, "draws look stuck: %d changes in 3000", distinct_prompts);
    rows_free(&r);
    free(pairs);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_source_equals_csv_replay)
{
    /* The in-memory source and a replay of the CSV it writes give identical arrivals. */
    char *d = make_temp_dir("gen");
    const char *args[] = {"--num-requests", "2000", "--rate", "123.4", "--burstiness", "0.7",
                          "--length-dist", "uniform", "--range-ratio", "0.9", "--seed", "11", NULL};
    trace_rows r = gen_rows(d, "s.csv", args);
    tracegen_options o = tracegen_options_default();
    o.num_requests = 2000;
    o.rate_per_s = 123.4;
    o.burstiness = 0.7;
    o.length_dist = TRACEGEN_LEN_UNIFORM;
    o.range_ratio = 0.9;
    o.seed = 11;
    tracegen *g;
    terr e;
    ck_assert_msg(tracegen_open(&g, &o, &e) == 0, "%s", e.msg);
    arrival_source s = tracegen_source(g);
    arrival a;
    for (int64_t i = 0; i < r.n; i++) {
        ck_assert_int_eq(s.next(s.self, &a, &e), 1);
        ck_assert_msg(a.arrival_ns == r.a[i].arrival_ns && a.prompt_tokens == r.a[i].prompt_tokens &&
                          a.output_tokens == r.a[i].output_tokens,
                      "row %lld: source (%lld, %d, %d) vs csv (%lld, %d, %d)", (long long)i,
                      (long long)a.arrival_ns, a.prompt_tokens, a.output_tokens,
                      (long long)r.a[i].arrival_ns, r.a[i].prompt_tokens, r.a[i].output_tokens);
    }
    ck_assert_int_eq(s.next(s.self, &a, &e), 0);
    tracegen_close(g);
    rows_free(&r);
    rm_tree(d);
}
END_TEST

START_TEST(test_gen_help_lists_every_option_with_default)
{
    cli_result c = run_cli("trace", "gen", "--help", NULL);
    ck_assert_int_eq(c.exit_code, 0);
    static const char *const want[] = {
        "--num-requests N", "[1000]", "--rate S", "--burstiness X", "--input-len N", "[1024]",
        "--output-len N", "[128]", "--length-dist S", "[fixed]", "--range-ratio X",
        "--lognormal-sigma X", "--lengths-file S", "--max-len N", "--priority-classes",
        "--num-clients S", "--seed N", "[0]", "--out S", "none: stdout"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(c.out, want[i]), "--help does not mention \"%s\":\n%s", want[i], c.out);
    cli_result_free(&c);
    c = run_cli("trace", "--help", NULL);
    ck_assert_int_eq(c.exit_code, 0);
    ck_assert_msg(strstr(c.out, "gen"), "`tandem trace --help` does not list gen:\n%s", c.out);
    cli_result_free(&c);
}
END_TEST

START_TEST(test_gen_bad_flags_exit_2_naming_the_flag)
{
    char *d = make_temp_dir("gen");
    char *bad_lengths = write_temp_file(d, "bad_lengths.csv",
                                        "num_prefill_tokens,num_decode_tokens\n5,6\n7,zero\n");
    char *no_cols = write_temp_file(d, "nocols.csv", "a,b\n1,2\n");
    char bad_lengths_line[4200];
    snprintf(bad_lengths_line, sizeof bad_lengths_line, "%s:3: num_decode_tokens \"zero\"",
             bad_lengths);
    const struct {
        const char *args[8];
        const char *want; /* in stderr */
    } cases[] = {
        {{"--rate", "abc"}, "--rate"},
        {{"--rate", "0"}, "--rate"},
        {{"--rate", "-2"}, "--rate"},
        {{"--rate"}, "--rate: needs a value"},
        {{"--burstiness", "0"}, "--burstiness"},
        {{"--burstiness", "1e9"}, "--burstiness"},
        {{"--num-requests", "0"}, "--num-requests"},
        {{"--num-requests", "10x"}, "--num-requests"},
        {{"--input-len", "0"}, "--input-len"},
        {{"--output-len", "99999999999"}, "--output-len"},
        {{"--max-len", "-1"}, "--max-len"},
        {{"--length-dist", "zipf"}, "--length-dist"},
        {{"--range-ratio", "1"}, "--range-ratio"},
        {{"--lognormal-sigma", "x"}, "--lognormal-sigma"},
        {{"--priority-classes", "0.5,0.4"}, "--priority-classes"},
        {{"--priority-classes", "0.5,,0.5"}, "--priority-classes"},
        {{"--priority-classes", "1.5,-0.5"}, "--priority-classes"},
        {{"--num-clients", "0"}, "--num-clients"},
        {{"--seed", "-1"}, "--seed"},
        {{"--lengths-file", "x.csv"}, "--lengths-file"},
        {{"--length-dist", "file"}, "--lengths-file"},
        {{"--length-dist", "file", "--lengths-file", "/nonexistent/l.csv"}, "/nonexistent/l.csv"},
        {{"--length-dist", "file", "--lengths-file", bad_lengths}, bad_lengths_line},
        {{"--length-dist", "file", "--lengths-file", no_cols}, "missing column \"num_prefill_tokens\""},
        {{"--rate", "0.000001"}, "--rate"},
        {{"--bogus"}, "--bogus"},
        {{"-x"}, "-x"},
        {{"stray"}, "stray"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *argv[16] = {"tandem", "trace", "gen"};
        int n = 3;
        for (int i = 0; cases[k].args[i]; i++) argv[n++] = (char *)cases[k].args[i];
        argv[n] = NULL;
        cli_result c = run_cliv(argv);
        ck_assert_msg(c.exit_code == 2 && strstr(c.err, cases[k].want),
                      "case %zu (%s %s): exit %d, stderr \"%s\"; want exit 2 and \"%s\"", k,
                      cases[k].args[0], cases[k].args[1] ? cases[k].args[1] : "", c.exit_code,
                      c.err, cases[k].want);
        ck_assert_msg(c.out[0] == 0, "case %zu wrote to stdout: %.80s", k, c.out);
        cli_result_free(&c);
    }
    cli_result c = run_cli("trace", NULL);
    ck_assert_int_eq(c.exit_code, 2);
    cli_result_free(&c);
    c = run_cli("trace", "nope", NULL);
    ck_assert_msg(c.exit_code == 2 && strstr(c.err, "nope"), "exit %d: %s", c.exit_code, c.err);
    cli_result_free(&c);
    free(bad_lengths);
    free(no_cols);
    rm_tree(d);
}
END_TEST

static Suite *tracegen_suite(void)
{
    Suite *s = suite_create("tracegen");
    TCase *gen = tcase_create("gen");
    tcase_add_test(gen, test_gen_same_seed_is_byte_identical);
    tcase_add_test(gen, test_gen_mean_rate_and_poisson_cv);
    tcase_add_test(gen, test_gen_burstiness_sets_gap_cv);
    tcase_add_test(gen, test_gen_fixed_and_infinite_rate);
    tcase_add_test(gen, test_gen_uniform_lengths_within_range);
    tcase_add_test(gen, test_gen_lognormal_mean_and_max_len_clamp);
    tcase_add_test(gen, test_gen_priority_fractions_and_clients);
    tcase_add_test(gen, test_gen_lengths_file_draws_only_its_rows);
    tcase_add_test(gen, test_gen_source_equals_csv_replay);
    tcase_add_test(gen, test_gen_help_lists_every_option_with_default);
    tcase_add_test(gen, test_gen_bad_flags_exit_2_naming_the_flag);
    suite_add_tcase(s, gen);
    return s;
}

int main(void) { return run_suite(tracegen_suite()) ? 1 : 0; }
