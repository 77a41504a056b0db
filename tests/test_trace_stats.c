/*
 * test_trace_stats.c: `tandem trace stats` as a user runs it, its numbers read back from --json.
 *
 * - A seven-request tandem CSV whose every statistic is worked out by hand in the comment
 *   above TINY (count, span, rate, inter-arrival CV, index of dispersion, percentiles,
 *   histogram bins, rejections, the suggestion's inputs).
 * - The KV capacity and the rejections agree with `tandem sim` on the same flags.
 * - The bundled Azure samples land on the figures published for them (SOURCES.md), the Mooncake
 *   sample on its prefix-sharing fraction (counted independently: 1 - 38788/54559).
 * - The estimators recover the parameters of `trace gen` (Poisson: CV 1, dispersion 1; Gamma
 *   shape 0.25: CV 2).
 * - Bad input exits 2 with FILE:LINE, bad flags exit 2 naming the flag, --help lists defaults.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define CONV "traces/samples/azure_conv_2023.csv"
#define CODE "traces/samples/azure_code_2023.csv"
#define MOONCAKE "traces/samples/mooncake_conversation_2k.jsonl"

/*
 * Arrivals t = 0, 1, 2, 4, 8, 8.5, 10 s: n = 7, span 10 s, rate 0.7 req/s.
 * Gaps 1, 1, 2, 4, 0.5, 1.5: mean 10/6; sum of squared deviations 282/36, sample variance
 * (N - 1 = 5) 282/180, sd 1.2516656, CV 0.7509993.
 * Bins of 2 s: [0,2) 2, [2,4) 1, [4,6) 1, [6,8) 0, [8,10) 2, [10,12) 1 (partial: the trace ends
 * at 10). Complete bins 2, 1, 1, 0, 2: mean 1.2, sample variance 2.8/4 = 0.7, dispersion 7/12.
 * Whole seconds: [8,9) holds 8 and 8.5, the only second with 2.
 * Prompts sorted 100 200 300 400 500 600 1000: mean 3100/7, p50 400, p90 at rank 5.4:
 * 600 + 0.4 x 400 = 760, p99 at rank 5.94: 976. log2 bins [64,128) 1, [128,256) 1, [256,512) 3,
 * [512,1024) 2. Totals 170 210 360 420 550 630 1040: mean 3380/7, p50 420, p90 630 + 0.4 x 410
 * = 794, p99 630 + 0.94 x 410 = 1015.4.
 * With --max-model-len 512: prompts >= 512 (600, 1000) are rejected: 2; totals > 512: 3.
 * The five admitted end at 170, 210, 360, 420 and 512 (550 capped) tokens: mean 334.4; in
 * 16-token blocks 11, 14, 23, 27, 32: mean 21.4.
 */
static const char *TINY = "arrival_s,prompt_tokens,output_tokens\n"
                          "0,100,70\n1,200,10\n2,300,60\n4,400,20\n8,500,50\n8.5,600,30\n10,1000,40\n";

/* ---- helpers -------------------------------------------------------------------------------- */

/* The value at a dotted path ("lengths.prompt.histogram.2.count"; numbers index arrays). */
static json_t *jat(json_t *root, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = root;
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); v && k; k = strtok_r(NULL, ".", &save))
        v = json_is_array(v) ? json_array_get(v, strtoul(k, NULL, 10)) : json_object_get(v, k);
    return v;
}

static double jnum(json_t *root, const char *path)
{
    json_t *v = jat(root, path);
    ck_assert_msg(v && json_is_number(v), "JSON: %s is missing or not a number", path);
    return json_number_value(v);
}

static void expect_near(json_t *root, const char *path, double want, double tol)
{
    double got = jnum(root, path);
    ck_assert_msg(fabs(got - want) <= tol, "%s = %.10g, want %.10g +- %g", path, got, want, tol);
}

static void expect_int(json_t *root, const char *path, long long want)
{
    double got = jnum(root, path);
    ck_assert_msg(got == (double)want, "%s = %.10g, want %lld", path, got, want);
}

/* Runs `tandem trace stats FILE --json TMP [extra...]` (extra ends with NULL); returns the
 * parsed JSON and, if out is not NULL, the captured run. */
static json_t *stats_json(const char *trace, const char *const *extra, cli_result *out)
{
    char *dir = make_temp_dir("stats");
    char jpath[4200];
    snprintf(jpath, sizeof jpath, "%s/stats.json", dir);
    char *argv[40] = {"tandem", "trace", "stats", (char *)trace, "--json", jpath};
    int n = 6;
    for (int i = 0; extra && extra[i] && n < 39; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    cli_result r = run_cliv(argv);
    ck_assert_msg(r.exit_code == 0, "trace stats %s: exit %d, stderr: %s", trace, r.exit_code, r.err);
    json_error_t je;
    json_t *j = json_load_file(jpath, 0, &je);
    ck_assert_msg(j, "%s: not JSON: %s (line %d)", jpath, je.text, je.line);
    if (out) *out = r;
    else cli_result_free(&r);
    free(dir);
    return j;
}

static char *tiny_trace(void)
{
    char *dir = make_temp_dir("tiny");
    char *path = write_temp_file(dir, "tiny.csv", TINY);
    free(dir);
    return path;
}

/* ---- tests ---------------------------------------------------------------------------------- */

START_TEST(tiny_trace_numbers_match_hand_computation)
{
    char *trace = tiny_trace();
    const char *extra[] = {"--bin-seconds", "2", "--max-model-len", "512", NULL};
    json_t *j = stats_json(trace, extra, NULL);
    expect_int(j, "requests", 7);
    expect_near(j, "span_s", 10.0, 1e-12);
    expect_near(j, "mean_rate_per_s", 0.7, 1e-12);
    expect_near(j, "peak_bin_rate_per_s", 1.0, 1e-12);
    expect_near(j, "peak_bin_start_s", 0.0, 0);
    const long long bins[] = {2, 1, 1, 0, 2, 1};
    ck_assert_msg(json_array_size(jat(j, "bin_counts")) == 6, "bin_counts has %zu bins, want 6",
                  json_array_size(jat(j, "bin_counts")));
    for (int i = 0; i < 6; i++) {
        char p[32];
        snprintf(p, sizeof p, "bin_counts.%d", i);
        expect_int(j, p, bins[i]);
    }
    expect_near(j, "burstiness.interarrival_mean_s", 10.0 / 6.0, 1e-12);
    expect_near(j, "burstiness.interarrival_sd_s", sqrt(282.0 / 180.0), 1e-12);
    expect_near(j, "burstiness.interarrival_cv", sqrt(282.0 / 180.0) / (10.0 / 6.0), 1e-12);
    expect_near(j, "burstiness.gamma_shape", (10.0 / 6.0) * (10.0 / 6.0) / (282.0 / 180.0), 1e-9);
    expect_int(j, "burstiness.complete_bins", 5);
    expect_near(j, "burstiness.index_of_dispersion", 7.0 / 12.0, 1e-12);
    expect_int(j, "burstiness.max_requests_in_one_second", 2);
    expect_near(j, "burstiness.max_second_start_s", 8.0, 0);

    expect_near(j, "lengths.prompt.mean", 3100.0 / 7.0, 1e-9);
    expect_near(j, "lengths.prompt.p50", 400, 1e-9);
    expect_near(j, "lengths.prompt.p90", 760, 1e-9);
    expect_near(j, "lengths.prompt.p99", 976, 1e-9);
    expect_int(j, "lengths.prompt.min", 100);
    expect_int(j, "lengths.prompt.max", 1000);
    expect_near(j, "lengths.output.mean", 40, 1e-9);
    expect_near(j, "lengths.output.p90", 64, 1e-9);
    expect_near(j, "lengths.output.p99", 69.4, 1e-9);
    expect_near(j, "lengths.total.mean", 3380.0 / 7.0, 1e-9);
    expect_near(j, "lengths.total.p50", 420, 1e-9);
    expect_near(j, "lengths.total.p90", 794, 1e-9);
    expect_near(j, "lengths.total.p99", 1015.4, 1e-9);
    const long long lo[] = {64, 128, 256, 512}, count[] = {1, 1, 3, 2};
    ck_assert_msg(json_array_size(jat(j, "lengths.prompt.histogram")) == 4, "prompt histogram has %zu bins, want 4",
                  json_array_size(jat(j, "lengths.prompt.histogram")));
    for (int i = 0; i < 4; i++) {
        char p[64];
        snprintf(p, sizeof p, "lengths.prompt.histogram.%d.lo", i);
        expect_int(j, p, lo[i]);
        snprintf(p, sizeof p, "lengths.prompt.histogram.%d.hi", i);
        expect_int(j, p, 2 * lo[i]);
        snprintf(p, sizeof p, "lengths.prompt.histogram.%d.count", i);
        expect_int(j, p, count[i]);
    }
    ck_assert_msg(json_is_null(jat(j, "prefix_sharing")), "a CSV without hash_ids has no prefix_sharing");

    expect_int(j, "capacity.max_model_len", 512);
    expect_int(j, "capacity.prompt_too_long", 2);
    expect_near(j, "capacity.prompt_too_long_fraction", 2.0 / 7.0, 1e-12);
    expect_int(j, "capacity.over_max_model_len", 3);
    expect_int(j, "suggestions.admitted_requests", 5);
    expect_near(j, "suggestions.admitted_mean_tokens", 334.4, 1e-9);
    expect_near(j, "suggestions.admitted_mean_blocks", 21.4, 1e-9);
    long long kv = (long long)jnum(j, "capacity.kv_blocks");
    long long fit = (long long)floor((double)kv / 21.4);
    expect_int(j, "suggestions.kv_fit_requests", fit);
    /* above 256 the suggestion is a multiple of 16, and at most vLLM's 1024 on the H200 */
    long long seqs = fit > 1024 ? 1024 : fit >= 256 ? fit / 16 * 16 : fit / 8 * 8;
    expect_int(j, "suggestions.max_num_seqs", seqs);
    /* p90 prompt 760: the next power of two, 1024, is below vLLM's floor of 2048 */
    expect_int(j, "suggestions.max_num_batched_tokens", 2048);
    expect_int(j, "suggestions.max_num_batched_tokens_without_chunked_prefill", 2048);
    json_decref(j);
    free(trace);
}
END_TEST

static json_t *sim_summary(const char *trace, const char *const *extra)
{
    char *dir = make_temp_dir("simcmp");
    char *argv[40] = {"tandem", "sim", "--trace", (char *)trace, "--out", dir, "--quiet"};
    int n = 7;
    for (int i = 0; extra && extra[i] && n < 39; i++) argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    cli_result r = run_cliv(argv);
    ck_assert_msg(r.exit_code == 0, "sim: exit %d, stderr: %s", r.exit_code, r.err);
    cli_result_free(&r);
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j, "%s: %s", path, je.text);
    free(dir);
    return j;
}

START_TEST(capacity_and_rejections_agree_with_sim)
{
    char *trace = tiny_trace();
    const char *extra[] = {"--max-model-len", "512", "--model", "llama-3-8b", "--gpu", "h100-sxm", NULL};
    json_t *st = stats_json(trace, extra, NULL);
    json_t *sim = sim_summary(trace, extra);
    double stats_blocks = jnum(st, "capacity.kv_blocks"), sim_blocks = jnum(sim, "config.resolved.num_gpu_blocks");
    ck_assert_msg(stats_blocks == sim_blocks, "KV blocks: trace stats %g, sim %g (same flags, sim's default budgets)",
                  stats_blocks, sim_blocks);
    ck_assert_msg(jnum(st, "capacity.prompt_too_long") == jnum(sim, "num_rejected"),
                  "rejected: trace stats %g, sim %g", jnum(st, "capacity.prompt_too_long"), jnum(sim, "num_rejected"));
    /* with the suggested budgets, the KV blocks the report quotes are what sim finds */
    char seqs[32], tokens[32];
    snprintf(seqs, sizeof seqs, "%lld", (long long)jnum(st, "suggestions.max_num_seqs"));
    snprintf(tokens, sizeof tokens, "%lld", (long long)jnum(st, "suggestions.max_num_batched_tokens"));
    const char *extra2[] = {"--max-model-len", "512", "--model", "llama-3-8b", "--gpu", "h100-sxm",
                            "--max-num-seqs", seqs, "--max-num-batched-tokens", tokens, NULL};
    json_t *sim2 = sim_summary(trace, extra2);
    ck_assert_msg(jnum(st, "suggestions.kv_blocks_with_suggestions") == jnum(sim2, "config.resolved.num_gpu_blocks"),
                  "KV blocks with the suggested budgets: trace stats %g, sim %g",
                  jnum(st, "suggestions.kv_blocks_with_suggestions"), jnum(sim2, "config.resolved.num_gpu_blocks"));
    json_decref(st);
    json_decref(sim);
    json_decref(sim2);
    free(trace);
}
END_TEST

START_TEST(rate_csv_lists_every_bin)
{
    char *trace = tiny_trace();
    char *dir = make_temp_dir("rate");
    char csv[4200];
    snprintf(csv, sizeof csv, "%s/rate.csv", dir);
    cli_result r = run_cli("trace", "stats", trace, "--bin-seconds", "2", "--rate-csv", csv, NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    char *got = slurp(csv, NULL);
    const char *want = "t_s,requests,rate_per_s\n0,2,1\n2,1,0.5\n4,1,0.5\n6,0,0\n8,2,1\n10,1,0.5\n";
    ck_assert_msg(got && !strcmp(got, want), "rate.csv:\n%s\nwant:\n%s", got ? got : "(missing)", want);
    free(got);
    cli_result_free(&r);
    free(dir);
    free(trace);
}
END_TEST

START_TEST(time_scale_and_max_requests)
{
    char *trace = tiny_trace();
    const char *half[] = {"--time-scale", "0.5", NULL};
    json_t *j = stats_json(trace, half, NULL);
    expect_near(j, "span_s", 5.0, 1e-12);
    expect_near(j, "mean_rate_per_s", 1.4, 1e-12);
    expect_near(j, "burstiness.interarrival_cv", sqrt(282.0 / 180.0) / (10.0 / 6.0), 1e-12);
    json_decref(j);
    const char *three[] = {"--max-requests", "3", NULL};
    j = stats_json(trace, three, NULL);
    expect_int(j, "requests", 3);
    expect_near(j, "span_s", 2.0, 1e-12);
    json_decref(j);
    free(trace);
}
END_TEST

START_TEST(azure_code_matches_published_figures)
{
    json_t *j = stats_json(CODE, NULL, NULL);
    /* SOURCES.md: 8,819 requests over 3,435.9 s, 2.6 req/s, inter-arrival CV 13.2, up to 67
     * requests in one second, prompt mean 2,048, output mean 28 */
    expect_int(j, "requests", 8819);
    expect_near(j, "span_s", 3435.9, 0.05);
    expect_near(j, "mean_rate_per_s", 2.6, 0.05);
    expect_near(j, "burstiness.interarrival_cv", 13.2, 0.05);
    expect_int(j, "burstiness.max_requests_in_one_second", 67);
    expect_near(j, "lengths.prompt.mean", 2048, 0.5);
    expect_near(j, "lengths.output.mean", 28, 0.5);
    ck_assert_msg(jnum(j, "burstiness.index_of_dispersion") > 10, "code trace dispersion %g, want >> 1",
                  jnum(j, "burstiness.index_of_dispersion"));
    json_decref(j);
}
END_TEST

START_TEST(azure_conv_matches_published_figures)
{
    cli_result r;
    json_t *j = stats_json(CONV, NULL, &r);
    /* SOURCES.md: 19,366 requests over 3,501.7 s, 5.5 req/s, CV 1.09; input mean 1,155, p99
     * 4,142, max 14,050; output mean 211, max 1,000 */
    expect_int(j, "requests", 19366);
    expect_near(j, "span_s", 3501.7, 0.05);
    expect_near(j, "mean_rate_per_s", 5.5, 0.05);
    expect_near(j, "burstiness.interarrival_cv", 1.09, 0.005);
    expect_near(j, "lengths.prompt.mean", 1155, 0.5);
    expect_near(j, "lengths.prompt.p99", 4142, 0);
    expect_int(j, "lengths.prompt.max", 14050);
    expect_near(j, "lengths.output.mean", 211, 0.5);
    expect_int(j, "lengths.output.max", 1000);
    ck_assert_msg(strstr(r.out, "close to Poisson"), "conv verdict should say close to Poisson:\n%.2000s", r.out);
    cli_result_free(&r);
    json_decref(j);
}
END_TEST

START_TEST(mooncake_prefix_sharing_fraction)
{
    json_t *j = stats_json(MOONCAKE, NULL, NULL);
    expect_int(j, "requests", 2000);
    expect_int(j, "prefix_sharing.hash_blocks", 54559);
    expect_int(j, "prefix_sharing.distinct_blocks", 38788);
    expect_near(j, "prefix_sharing.repeat_fraction", 1.0 - 38788.0 / 54559.0, 1e-12);
    json_decref(j);
}
END_TEST

START_TEST(estimators_recover_generator_parameters)
{
    char *dir = make_temp_dir("gen");
    char poisson[4200], gamma[4200];
    snprintf(poisson, sizeof poisson, "%s/poisson.csv", dir);
    snprintf(gamma, sizeof gamma, "%s/gamma.csv", dir);
    cli_result r = run_cli("trace", "gen", "--num-requests", "20000", "--rate", "50", "--seed", "7", "--out", poisson, NULL);
    ck_assert_msg(r.exit_code == 0, "gen: %s", r.err);
    cli_result_free(&r);
    r = run_cli("trace", "gen", "--num-requests", "20000", "--rate", "50", "--burstiness", "0.25", "--seed", "7",
                "--out", gamma, NULL);
    ck_assert_msg(r.exit_code == 0, "gen: %s", r.err);
    cli_result_free(&r);
    /* 1 s bins: ~400 of them, so the dispersion's standard error is about sqrt(2/400) = 0.07 */
    const char *bins[] = {"--bin-seconds", "1", NULL};
    json_t *j = stats_json(poisson, bins, NULL);
    expect_near(j, "mean_rate_per_s", 50, 1.5);
    expect_near(j, "burstiness.interarrival_cv", 1.0, 0.03);
    expect_near(j, "burstiness.index_of_dispersion", 1.0, 0.25);
    json_decref(j);
    j = stats_json(gamma, bins, NULL);
    expect_near(j, "burstiness.interarrival_cv", 2.0, 0.1);
    expect_near(j, "burstiness.gamma_shape", 0.25, 0.03);
    json_decref(j);
    free(dir);
}
END_TEST

START_TEST(suggestions_name_their_inputs)
{
    cli_result r;
    json_t *j = stats_json(CONV, NULL, &r);
    char want[8][160];
    snprintf(want[0], sizeof want[0], "--max-num-seqs %lld:", (long long)jnum(j, "suggestions.max_num_seqs"));
    snprintf(want[1], sizeof want[1], "--max-num-batched-tokens %lld ",
             (long long)jnum(j, "suggestions.max_num_batched_tokens"));
    snprintf(want[2], sizeof want[2], "holds %lld blocks of 16 tokens", (long long)jnum(j, "capacity.kv_blocks"));
    snprintf(want[3], sizeof want[3], "on average %.0f tokens", jnum(j, "suggestions.admitted_mean_tokens"));
    snprintf(want[4], sizeof want[4], "90%% of prompts are at most %.0f tokens", jnum(j, "lengths.prompt.p90"));
    snprintf(want[5], sizeof want[5], "at least max_model_len, 4096");
    snprintf(want[6], sizeof want[6], "inter-token latency");
    snprintf(want[7], sizeof want[7], "try: tandem sim --trace %s", CONV);
    /* the report wraps its sentences: compare with newlines and indents folded into spaces */
    char *flat = malloc(strlen(r.out) + 1), *q = flat;
    for (const char *p = r.out; *p; p++) {
        if (*p == '\n') {
            while (p[1] == ' ') p++;
            *q++ = ' ';
        } else {
            *q++ = *p;
        }
    }
    *q = 0;
    ck_assert_msg(strstr(r.out, "\nsuggestions\n"), "no suggestions section:\n%s", r.out);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(strstr(flat, want[i]), "suggestions lack \"%s\":\n%s", want[i], strstr(r.out, "suggestions"));
    ck_assert_msg(json_array_size(jat(j, "suggestions.reasoning")) >= 2, "reasoning missing from the JSON");
    free(flat);
    cli_result_free(&r);
    json_decref(j);
}
END_TEST

START_TEST(bad_trace_exits_2_with_file_line)
{
    char *dir = make_temp_dir("bad");
    char *trace = write_temp_file(dir, "bad.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,abc,5\n2,10,5\n");
    cli_result r = run_cli("trace", "stats", trace, NULL);
    char want[4200];
    snprintf(want, sizeof want, "%s:3:", trace);
    ck_assert_msg(r.exit_code == 2, "exit %d, want 2; stderr: %s", r.exit_code, r.err);
    ck_assert_msg(strstr(r.err, want), "stderr lacks \"%s\": %s", want, r.err);
    cli_result_free(&r);

    char jpath[4200];
    snprintf(jpath, sizeof jpath, "%s/s.json", dir);
    r = run_cli("trace", "stats", trace, "--skip-bad-rows", "--json", jpath, NULL);
    ck_assert_msg(r.exit_code == 0, "--skip-bad-rows: exit %d: %s", r.exit_code, r.err);
    json_t *j = json_load_file(jpath, 0, NULL);
    ck_assert_msg(j, "no JSON written");
    expect_int(j, "requests", 2);
    expect_int(j, "bad_rows", 1);
    json_decref(j);
    cli_result_free(&r);

    r = run_cli("trace", "stats", "no/such/trace.csv", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "no/such/trace.csv"), "missing file: exit %d, stderr %s",
                  r.exit_code, r.err);
    cli_result_free(&r);
    free(trace);
    free(dir);
}
END_TEST

START_TEST(bad_flags_exit_2_naming_the_flag)
{
    struct {
        const char *args[4];
        const char *msg;
    } cases[] = {
        {{"--bin-seconds", "0"}, "--bin-seconds"},
        {{"--bin-seconds", "abc"}, "--bin-seconds: \"abc\" is not a number"},
        {{"--block-size", "0"}, "--block-size"},
        {{"--gpu", "tpu"}, "--gpu: unknown GPU \"tpu\""},
        {{"--model", "no-such-model"}, "--model: \"no-such-model\""},
        {{"--gpu-memory-utilization", "1.5"}, "--gpu-memory-utilization"},
        {{"--max-model-len", "9000"}, "greater than the model's max_position_embeddings (4096)"},
        {{"--time-scale", "-1"}, "--time-scale"},
        {{"--max-requests", "-3"}, "--max-requests"},
        {{"--bogus"}, "--bogus: unknown option"},
        {{"--model", "llama-2-13b", "--gpu-memory-utilization", "0.12"}, "--gpu-memory-utilization"},
        {{CONV}, "unexpected argument"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[12] = {"tandem", "trace", "stats", CONV};
        int n = 4;
        for (int k = 0; k < 4 && cases[i].args[k]; k++) argv[n++] = (char *)cases[i].args[k];
        argv[n] = NULL;
        cli_result r = run_cliv(argv);
        ck_assert_msg(r.exit_code == 2, "case %zu (%s): exit %d, stderr: %s", i, cases[i].msg, r.exit_code, r.err);
        ck_assert_msg(strstr(r.err, cases[i].msg), "case %zu: stderr lacks \"%s\":\n%s", i, cases[i].msg, r.err);
        cli_result_free(&r);
    }
    cli_result r = run_cli("trace", "stats", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "FILE is required"), "no FILE: exit %d, stderr %s", r.exit_code,
                  r.err);
    cli_result_free(&r);
}
END_TEST

START_TEST(help_lists_options_with_defaults)
{
    cli_result r = run_cli("trace", "stats", "--help", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    const char *want[] = {"usage: tandem trace stats FILE", "--model S", "[llama-2-7b]", "--gpu S", "[h200]",
                          "--gpu-memory-utilization X", "[0.9]", "--block-size N", "[16]", "--max-model-len N",
                          "--time-scale X", "[1.0]", "--max-requests N", "--[no-]skip-bad-rows", "--bin-seconds X",
                          "[60]", "--json S", "--rate-csv S"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(r.out, want[i]), "trace stats --help lacks \"%s\":\n%s", want[i], r.out);
    cli_result_free(&r);
    r = run_cli("trace", "--help", NULL);
    ck_assert_msg(r.exit_code == 0 && strstr(r.out, "stats"), "tandem trace --help does not list stats:\n%s", r.out);
    cli_result_free(&r);
}
END_TEST

/* A lengths file has no times: stats needs the re-timing sim would use, and then reports it. */
START_TEST(lengths_file_needs_and_reports_a_request_rate)
{
    cli_result r = run_cli("trace", "stats", "traces/samples/arxiv_lengths_5k.csv", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "arxiv_lengths_5k.csv:1: a lengths-only trace") &&
                      strstr(r.err, "--request-rate"), "%s", r.err);
    cli_result_free(&r);
    r = run_cli("trace", "stats", "traces/samples/arxiv_lengths_5k.csv", "--request-rate", "5", "--seed", "2", NULL);
    ck_assert_msg(r.exit_code == 0 && strstr(r.out, "(lengths format)") && strstr(r.out, "requests               5000"),
                  "%s%s", r.out, r.err);
    const char *rate = strstr(r.out, "mean rate");
    ck_assert_msg(rate && fabs(strtod(rate + 9, NULL) - 5) < 0.3, "re-timed at 5 req/s:\n%s", r.out);
    cli_result_free(&r);
    r = run_cli("trace", "stats", "traces/samples/arxiv_lengths_5k.csv", "--request-rate", "-1", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--request-rate: -1"), "%s", r.err);
    cli_result_free(&r);
}
END_TEST


int main(void)
{
    Suite *s = suite_create("trace_stats");
    TCase *tc = tcase_create("trace_stats");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, tiny_trace_numbers_match_hand_computation);
    tcase_add_test(tc, capacity_and_rejections_agree_with_sim);
    tcase_add_test(tc, rate_csv_lists_every_bin);
    tcase_add_test(tc, time_scale_and_max_requests);
    tcase_add_test(tc, azure_code_matches_published_figures);
    tcase_add_test(tc, azure_conv_matches_published_figures);
    tcase_add_test(tc, mooncake_prefix_sharing_fraction);
    tcase_add_test(tc, estimators_recover_generator_parameters);
    tcase_add_test(tc, suggestions_name_their_inputs);
    tcase_add_test(tc, bad_trace_exits_2_with_file_line);
    tcase_add_test(tc, bad_flags_exit_2_naming_the_flag);
    tcase_add_test(tc, help_lists_options_with_defaults);
    tcase_add_test(tc, lengths_file_needs_and_reports_a_request_rate);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
