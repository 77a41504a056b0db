/*
 * test_compare.c: `tandem compare` on real outputs. The CPU engine serves a small trace with a
 * tiny model (`tandem run`, twice more as repeats) and `tandem sim` replays it; compare must
 * join them, report every metric, re-predict the simulated run's own steps with exactly zero
 * error, refuse runs of other requests naming the difference, read a `vllm bench serve` result
 * (tests/data/vllm_bench_serve.json, whose numbers were worked out by hand: see below) and give
 * the spread of a directory of repeats. Nothing here depends on how fast the machine is: the
 * measured runs are only checked for structure, never for their times.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

static char *dir;
static char trace[4200], run_out[4300], sim_out[4300], reps[4300];

#define COMMON "--trace", trace, "--model", "synthetic:tiny-llama2", "--max-num-seqs", "4", "--max-model-len", "128", \
               "--block-size", "4", "--max-num-batched-tokens", "64", "--num-gpu-blocks-override", "40", "--quiet"
#define VLLM_TRACE "tests/data/vllm_bench_trace.csv"
#define VLLM_RESULT "tests/data/vllm_bench_serve.json"
#define TINY "--model", "synthetic:tiny-llama2", "--max-model-len", "128", "--block-size", "4", "--quiet"

static void expect_ok(cli_result r, const char *what)
{
    ck_assert_msg(r.exit_code == 0, "%s: exit %d: %s", what, r.exit_code, r.err);
    cli_result_free(&r);
}

/* Once for the suite: the measured runs (CPU engine) and the simulated one. */
static void setup_runs(void)
{
    dir = make_temp_dir("compare");
    snprintf(trace, sizeof trace, "%s/t.csv", dir);
    snprintf(run_out, sizeof run_out, "%s/run", dir);
    snprintf(sim_out, sizeof sim_out, "%s/sim", dir);
    snprintf(reps, sizeof reps, "%s/reps", dir);
    expect_ok(run_cli("trace", "gen", "--num-requests", "12", "--rate", "200", "--length-dist", "uniform", "--input-len",
                      "40", "--output-len", "12", "--range-ratio", "0.5", "--seed", "3", "--out", trace, NULL),
              "trace gen");
    expect_ok(run_cli("run", COMMON, "--backend", "cpu", "--out", run_out, NULL), "run");
    expect_ok(run_cli("sim", COMMON, "--out", sim_out, NULL), "sim");
    /* repeats as `tandem run --repeat 2` lays them out: reps/1, reps/2 */
    for (int k = 1; k <= 2; k++) {
        char rep[4400];
        snprintf(rep, sizeof rep, "%s/%d", reps, k);
        expect_ok(run_cli("run", COMMON, "--backend", "cpu", "--out", rep, NULL), "run (repeat)");
    }
}

static void teardown_runs(void) { rm_tree(dir); }

/* compare.json's metrics[key][field] (NAN for null) */
static double metric(json_t *cmp, const char *key, const char *field)
{
    json_t *m = json_object_get(json_object_get(cmp, "metrics"), key);
    ck_assert_msg(m, "compare.json has no metric %s", key);
    json_t *v = json_object_get(m, field);
    ck_assert_msg(v, "compare.json: metrics.%s has no %s", key, field);
    return json_is_null(v) ? NAN : json_number_value(v);
}

static const char *const every_metric[] = {
    "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
    "median_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p90_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "median_e2el_ms", "p90_e2el_ms", "p99_e2el_ms", "mean_queue_ms", "median_queue_ms",
    "p90_queue_ms", "p99_queue_ms", "num_preemptions", "mean_batch_size"};

static char *out_dir(const char *name)
{
    char *p = malloc(4400);
    snprintf(p, 4400, "%s/%s", dir, name);
    return p;
}

static int count_lines(const char *path)
{
    char *text = slurp(path, NULL);
    ck_assert_msg(text, "cannot read %s", path);
    int n = 0;
    for (char *c = text; *c; c++) n += *c == '\n';
    free(text);
    return n;
}

START_TEST(run_against_sim_reports_every_metric_and_step)
{
    char *out = out_dir("cmp");
    cli_result r = run_cli("compare", run_out, sim_out, "--out", out, NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    ck_assert_msg(strstr(r.out, "TTFT p99") && strstr(r.out, "step re-prediction"), "table: %s", r.out);
    cli_result_free(&r);
    json_t *cmp = load_json(out, "compare.json");
    for (size_t i = 0; i < sizeof every_metric / sizeof *every_metric; i++) {
        ck_assert_msg(!isnan(metric(cmp, every_metric[i], "measured")), "%s: measured is null", every_metric[i]);
        ck_assert_msg(!isnan(metric(cmp, every_metric[i], "simulated")), "%s: simulated is null", every_metric[i]);
    }
    /* every measured step is re-predicted, and classified once */
    char path[4500];
    snprintf(path, sizeof path, "%s/steps.csv", run_out);
    int steps = count_lines(path) - 1;
    json_t *all = json_object_get(json_object_get(json_object_get(cmp, "steps"), "classes"), "all");
    ck_assert_msg(all, "compare.json has no steps.classes.all");
    ck_assert_int_eq(json_integer_value(json_object_get(all, "count")), steps);
    ck_assert_msg(!json_object_get(json_object_get(cmp, "steps"), "kernel_kinds"),
                  "kernel_kinds in compare.json of a run without the kernel trace");
    snprintf(path, sizeof path, "%s/step_errors.csv", out);
    ck_assert_int_eq(count_lines(path) - 1, steps);
    const char *files[] = {"cdf_ttft.dat", "cdf_e2el.dat", "compare_steps.png", "compare_steps.svg",
                           "compare_cdf.png", "compare_cdf.svg"};
    bool gnuplot = system("command -v gnuplot >/dev/null") == 0;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (!gnuplot && strstr(files[i], ".png")) continue;
        if (!gnuplot && strstr(files[i], ".svg")) continue;
        snprintf(path, sizeof path, "%s/%s", out, files[i]);
        struct stat st;
        ck_assert_msg(stat(path, &st) == 0 && st.st_size > 0, "%s missing or empty", path);
    }
    /* outputs are complete or absent: no temporary file is left behind */
    char cmd[4600];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -q tmp", out);
    ck_assert_msg(system(cmd) != 0, "a temporary file is left in %s", out);
    json_decref(cmp);
    free(out);
}
END_TEST

START_TEST(sim_against_itself_has_exactly_zero_error)
{
    char *out = out_dir("self");
    expect_ok(run_cli("compare", sim_out, sim_out, "--out", out, "--no-figures", "--quiet", NULL), "compare");
    json_t *cmp = load_json(out, "compare.json");
    for (size_t i = 0; i < sizeof every_metric / sizeof *every_metric; i++)
        ck_assert_msg(metric(cmp, every_metric[i], "rel_error") == 0, "%s: error %g, not 0", every_metric[i],
                      metric(cmp, every_metric[i], "rel_error"));
    json_t *classes = json_object_get(json_object_get(cmp, "steps"), "classes");
    const char *name;
    json_t *c;
    json_object_foreach(classes, name, c) {
        if (!json_integer_value(json_object_get(c, "count"))) continue;
        const char *stats[] = {"median_abs_rel_error", "p90_abs_rel_error", "median_rel_error", "total_rel_error"};
        for (size_t k = 0; k < 4; k++)
            ck_assert_msg(json_number_value(json_object_get(c, stats[k])) == 0, "steps %s: %s = %g, not 0", name,
                          stats[k], json_number_value(json_object_get(c, stats[k])));
    }
    /* and so is every row of step_errors.csv */
    char path[4500];
    snprintf(path, sizeof path, "%s/step_errors.csv", out);
    char *csv = slurp(path, NULL);
    for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        char *nl = strchr(line, '\n'), *last = nl;
        while (last[-1] != ',') last--;
        ck_assert_msg(nl - last == 1 && *last == '0', "step error not 0: %.*s", (int)(nl - line), line);
    }
    free(csv);
    json_decref(cmp);
    free(out);
}
END_TEST

/* Runs compare and expects exit 2 with `want` in the message. */
static void expect_refused(const char *measured, const char *simulated, const char *want)
{
    cli_result r = run_cli("compare", measured, simulated, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, want), "compare %s %s: exit %d, message \"%s\"; want exit 2 and \"%s\"",
                  measured, simulated, r.exit_code, r.err, want);
    cli_result_free(&r);
}

/* Copies a run directory to dir/name and adds 1 to request `id`'s prompt_tokens in its
 * requests.csv. */
static char *doctored_copy(const char *src, const char *name, int id)
{
    char *dst = out_dir(name), cmd[9000];
    snprintf(cmd, sizeof cmd,
             "cp -r %s %s && awk -F, -v OFS=, 'NR > 1 && $1 == %d { $6 = $6 + 1 } { print }' %s/requests.csv > "
             "%s/r.tmp && mv %s/r.tmp %s/requests.csv",
             src, dst, id, src, dst, dst, dst);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    return dst;
}

START_TEST(mismatched_runs_are_refused_naming_what_differs)
{
    char *fewer = out_dir("fewer"), *other_model = out_dir("other_model");
    expect_ok(run_cli("sim", COMMON, "--max-requests", "8", "--out", fewer, NULL), "sim --max-requests 8");
    expect_refused(run_out, fewer, "max-requests: 0 in MEASURED, 8 in SIMULATED");
    expect_ok(run_cli("sim", COMMON, "--model", "llama-2-7b", "--out", other_model, NULL), "sim --model llama-2-7b");
    expect_refused(run_out, other_model, "model: \"synthetic:tiny-llama2\" in MEASURED, \"llama-2-7b\" in SIMULATED");

    char *doctored = doctored_copy(sim_out, "doctored", 5), path[4500];
    snprintf(path, sizeof path, "%s/requests.csv", sim_out);
    char *csv = slurp(path, NULL), *row = strstr(csv, "\n5,"), want[96];
    ck_assert_msg(row, "no request 5 in %s", path);
    int prompt = 0;
    ck_assert(sscanf(row + 1, "%*[^,],%*[^,],%*[^,],%*[^,],%*[^,],%d", &prompt) == 1);
    snprintf(want, sizeof want, "request 5: prompt %d in MEASURED, %d in SIMULATED", prompt, prompt + 1);
    expect_refused(run_out, doctored, want);
    free(csv);
    free(doctored);
    free(fewer);
    free(other_model);
}
END_TEST

/* `compare MEASURED SIMULATED --out out`, and its notes as JSON text (the caller frees). */
static char *compare_notes(const char *measured, const char *simulated, const char *out)
{
    expect_ok(run_cli("compare", measured, simulated, "--out", out, "--no-figures", "--quiet", NULL), "compare");
    json_t *cmp = load_json(out, "compare.json");
    char *notes = json_dumps(json_object_get(cmp, "notes"), 0);
    json_decref(cmp);
    return notes;
}

/* A copy of run_out at dir/name as an older tandem wrote it: without key in the config's
 * section (NULL: the config itself, else one of its objects). Returns its path (the caller frees). */
static char *older_run(const char *name, const char *section, const char *key)
{
    char *old = out_dir(name), cmd[18000], path[4500];
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", old, run_out, old);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    json_t *summary = load_json(old, "summary.json"), *config = json_object_get(summary, "config");
    json_t *in = section ? json_object_get(config, section) : config;
    ck_assert_msg(json_object_del(in, key) == 0, "the run recorded no %s to take out", key);
    snprintf(path, sizeof path, "%s/summary.json", old);
    ck_assert_msg(json_dump_file(summary, path, JSON_INDENT(2)) == 0, "cannot rewrite %s", path);
    json_decref(summary);
    return old;
}

/* Runs that differ in how they schedule are compared, with a note that says so; a run that
 * predates --async-scheduling waited for every step, so it agrees with a sim that does too. */
START_TEST(async_scheduling_is_noted_when_the_runs_differ)
{
    char *ahead = out_dir("ahead_sim"), *out = out_dir("ahead_cmp"), *old_out = out_dir("old_cmp2");
    expect_ok(run_cli("sim", COMMON, "--async-scheduling", "--out", ahead, NULL), "sim --async-scheduling");
    char *notes = compare_notes(run_out, ahead, out);
    ck_assert_msg(notes && strstr(notes, "async-scheduling: false in MEASURED, true in SIMULATED"),
                  "no note of the scheduling that differs: %s", notes ? notes : "(none)");
    free(notes);
    /* MEASURED without the key, against the waiting sim */
    char *old_run = older_run("pre_async_run", NULL, "async-scheduling");
    notes = compare_notes(old_run, sim_out, old_out);
    ck_assert_msg(!notes || !strstr(notes, "async-scheduling"), "a note of a difference there is not: %s", notes);
    free(notes);
    free(ahead), free(out), free(old_out), free(old_run);
}
END_TEST

/* With the kernel trace's columns in MEASURED's steps.csv (written here as `run --kernel-trace`
 * writes them: 60 us of GEMMs, 20 of attention, 10 element-wise, 5 sampling, 5 other and a gap of
 * 50 a step, and one step that ran the fused batch-1 kernel), compare sums them by kind against
 * the roofline's parts: every part lands in a kind or the gap, so the predicted kinds sum to the
 * steps' predicted times. */
START_TEST(kernel_time_by_kind_against_the_roofline)
{
    char *traced = out_dir("traced"), *out = out_dir("traced_cmp"), cmd[18000], path[4500];
    snprintf(cmd, sizeof cmd,
             "cp -r %s/. %s && awk -F, -v OFS=, 'NR == 1 { print $0, \"kernel_us,kernel_busy,kernel_gemm_us,"
             "kernel_attention_us,kernel_fused_us,kernel_elementwise_us,kernel_sampling_us,kernel_other_us,"
             "kernel_gap_us\"; next } { print $0, 100, 0.5, 60, 20, (NR == 3 ? 7 : 0), 10, 5, 5, 50 }' "
             "%s/steps.csv > %s/steps.tmp && mv %s/steps.tmp %s/steps.csv",
             run_out, traced, run_out, traced, traced, traced);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    expect_ok(run_cli("compare", traced, sim_out, "--out", out, "--no-figures", "--quiet", NULL), "compare");
    snprintf(path, sizeof path, "%s/steps.csv", run_out);
    int steps = count_lines(path) - 1;
    json_t *cmp = load_json(out, "compare.json");
    json_t *kk = json_object_get(json_object_get(cmp, "steps"), "kernel_kinds");
    ck_assert_msg(kk, "compare.json has no steps.kernel_kinds");
    ck_assert_int_eq(json_integer_value(json_object_get(kk, "steps")), steps - 1);
    ck_assert_int_eq(json_integer_value(json_object_get(kk, "fused_steps_left_out")), 1);
    json_t *kinds = json_object_get(kk, "kinds");
    const char *names[] = {"gemm", "attention", "elementwise", "sampling", "other", "gap"};
    const double per_step_us[] = {60, 20, 10, 5, 5, 50};
    double predicted = 0;
    for (int i = 0; i < 6; i++) {
        json_t *k = json_object_get(kinds, names[i]);
        ck_assert_msg(k, "kernel_kinds has no %s", names[i]);
        double m = json_number_value(json_object_get(k, "measured_ms"));
        ck_assert_msg(fabs(m - per_step_us[i] * (steps - 1) / 1e3) < 1e-9, "%s: measured %g ms", names[i], m);
        predicted += json_number_value(json_object_get(k, "predicted_ms"));
    }
    ck_assert_msg(!json_object_get(kinds, "fused"), "the fused kind has no part to hold it to");
    ck_assert_msg(json_number_value(json_object_get(json_object_get(kinds, "gemm"), "predicted_ms")) > 0 &&
                      json_number_value(json_object_get(json_object_get(kinds, "attention"), "predicted_ms")) > 0,
                  "the roofline predicts no GEMM or attention time");
    /* the steps' own predictions, the fused step's (the second row) left out */
    snprintf(path, sizeof path, "%s/step_errors.csv", out);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "no %s", path);
    char line[512];
    double total = 0;
    for (int row = 0; fgets(line, sizeof line, f); row++) {
        double ms;
        if (row >= 1 && row != 2 && sscanf(line, "%*[^,],%*[^,],%*[^,],%lf", &ms) == 1) total += ms;
    }
    fclose(f);
    ck_assert_msg(fabs(predicted - total) < 1e-3 * steps, "the kinds sum to %.4f ms, the steps' predictions to %.4f",
                  predicted, total);
    json_decref(cmp);
    free(traced);
    free(out);
}
END_TEST

/* A run is held to a trace by the file's contents: the same trace found under another path (as
 * on the GPU machine that measured the run) is the same trace; a file that differs is refused,
 * with both hashes. A run that recorded no hash is held to the trace request by request. */
START_TEST(trace_is_matched_by_contents_not_path)
{
    char moved[4300], cmd[18000];
    snprintf(moved, sizeof moved, "%s/moved.csv", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", trace, moved);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    char *sim = out_dir("moved_sim");
    expect_ok(run_cli("sim", "--trace", moved, "--model", "synthetic:tiny-llama2", "--max-num-seqs", "4",
                      "--max-model-len", "128", "--block-size", "4", "--max-num-batched-tokens", "64",
                      "--num-gpu-blocks-override", "40", "--quiet", "--out", sim, NULL),
              "sim of the moved trace");
    expect_ok(run_cli("compare", run_out, sim, "--quiet", NULL), "compare against the moved trace's sim");

    /* a file that differs (its last request one second later) */
    snprintf(cmd, sizeof cmd, "awk -F, -v OFS=, 'NR == 13 { $1 = $1 + 1 } { print }' %s > %s.tmp && mv %s.tmp %s",
             moved, moved, moved, moved);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
    char *changed = out_dir("changed_sim");
    expect_ok(run_cli("sim", "--trace", moved, "--model", "synthetic:tiny-llama2", "--max-num-seqs", "4",
                      "--max-model-len", "128", "--block-size", "4", "--max-num-batched-tokens", "64",
                      "--num-gpu-blocks-override", "40", "--quiet", "--out", changed, NULL),
              "sim of the changed trace");
    expect_refused(run_out, changed, "in SIMULATED: the files differ");

    /* a run that recorded no content hash (an older one, or a trace from a pipe), moved: the
     * paths differ, so its requests decide, and the notes say so */
    char *old_run = older_run("old_run", "resolved", "trace_xxh3"), out[4400];
    snprintf(out, sizeof out, "%s/old_cmp", dir);
    char *notes = compare_notes(old_run, sim, out); /* a hashless run against the moved trace's sim */
    ck_assert_msg(notes && strstr(notes, "MEASURED recorded no content hash: the requests were matched one by one"),
                  "no note of the unmatched paths: %s", notes ? notes : "(none)");
    free(notes);
    expect_refused(old_run, changed, "request 11: arrival");
    free(sim);
    free(changed);
    free(old_run);
}
END_TEST

/* The fixture's requests, worked out by hand (seconds in the file, ms here): request 3 failed
 * (error text, output 0); TTFTs 50, 60, 70, 40; ITLs {10, 12, 11}, {20, 10}, {10 x 4}, {};
 * E2E = TTFT + the sum of the ITLs: 83, 90, 110, 40; TPOT = (E2E - TTFT) / (output - 1) for
 * outputs 4, 3, 5 (the 1-token request has none): 11, 15, 10. Percentiles as numpy's. */
START_TEST(vllm_result_is_read_and_joined)
{
    char *sim = out_dir("vllm_sim"), *out = out_dir("vllm_cmp"), *fewer = out_dir("vllm_fewer");
    expect_ok(run_cli("sim", "--trace", VLLM_TRACE, TINY, "--out", sim, NULL), "sim of the vllm trace");
    expect_ok(run_cli("compare", VLLM_RESULT, sim, "--out", out, "--no-figures", "--quiet", NULL), "compare");
    json_t *cmp = load_json(out, "compare.json");
    const struct {
        const char *key;
        double want;
    } hand[] = {{"output_throughput", 65},  {"mean_ttft_ms", 55},  {"median_ttft_ms", 55}, {"p90_ttft_ms", 67},
                {"p99_ttft_ms", 69.7},      {"mean_tpot_ms", 12},  {"median_tpot_ms", 11}, {"mean_itl_ms", 103.0 / 9},
                {"median_itl_ms", 10},      {"p99_itl_ms", 19.36}, {"mean_e2el_ms", 80.75}, {"median_e2el_ms", 86.5},
                {"p90_e2el_ms", 104}};
    for (size_t i = 0; i < sizeof hand / sizeof *hand; i++) {
        double got = metric(cmp, hand[i].key, "measured");
        ck_assert_msg(fabs(got - hand[i].want) < 1e-9 * hand[i].want, "%s: measured %.12g, by hand %.12g",
                      hand[i].key, got, hand[i].want);
    }
    /* what a vLLM result does not record stays unknown, not 0 */
    ck_assert_msg(isnan(metric(cmp, "mean_queue_ms", "measured")), "queue time invented for vLLM");
    ck_assert_msg(isnan(metric(cmp, "num_preemptions", "measured")), "preemptions invented for vLLM");
    json_t *m = json_object_get(cmp, "measured");
    ck_assert_int_eq(json_integer_value(json_object_get(m, "completed")), 4);
    ck_assert_msg(json_is_null(json_object_get(cmp, "steps")), "steps re-predicted without a steps.csv");
    json_decref(cmp);
    expect_ok(run_cli("sim", "--trace", VLLM_TRACE, TINY, "--max-requests", "3", "--out", fewer, NULL), "sim");
    expect_refused(VLLM_RESULT, fewer, "5 requests in MEASURED, 3 in SIMULATED");
    free(sim);
    free(out);
    free(fewer);
}
END_TEST

START_TEST(repeats_give_a_spread)
{
    char *out = out_dir("reps_cmp");
    cli_result r = run_cli("compare", reps, sim_out, "--out", out, "--no-figures", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    ck_assert_msg(strstr(r.out, "mean of 2 repeats") && strstr(r.out, "spread: (max-min)/mean"), "%s", r.out);
    cli_result_free(&r);
    json_t *cmp = load_json(out, "compare.json");
    /* the measured value is the repeats' mean; the spread their range over it */
    double per_run[2];
    for (int k = 0; k < 2; k++) {
        char rep[4400];
        snprintf(rep, sizeof rep, "%s/%d", reps, k + 1);
        json_t *s = load_json(rep, "summary.json");
        per_run[k] = json_number_value(json_object_get(s, "output_throughput"));
        json_decref(s);
    }
    double mean = (per_run[0] + per_run[1]) / 2, lo = fmin(per_run[0], per_run[1]), hi = fmax(per_run[0], per_run[1]);
    json_t *spread = json_object_get(json_object_get(json_object_get(cmp, "metrics"), "output_throughput"), "spread");
    ck_assert_msg(json_is_object(spread), "no spread for output_throughput");
    ck_assert_msg(fabs(metric(cmp, "output_throughput", "measured") - mean) <= 1e-9 * mean, "measured %g, mean %g",
                  metric(cmp, "output_throughput", "measured"), mean);
    ck_assert_msg(json_number_value(json_object_get(spread, "min")) == lo &&
                      json_number_value(json_object_get(spread, "max")) == hi,
                  "spread [%g, %g], repeats %g and %g", json_number_value(json_object_get(spread, "min")),
                  json_number_value(json_object_get(spread, "max")), per_run[0], per_run[1]);
    ck_assert_msg(fabs(json_number_value(json_object_get(spread, "rel")) - (hi - lo) / mean) <= 1e-9,
                  "rel spread %g, want %g", json_number_value(json_object_get(spread, "rel")), (hi - lo) / mean);
    /* metrics.csv, what experiments gather, carries the same relative spread */
    char path[4500], line[512];
    snprintf(path, sizeof path, "%s/metrics.csv", out);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "no %s", path);
    double csv_spread = NAN;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "output_throughput,", 18)) continue;
        const char *last = strrchr(line, ',');
        csv_spread = strtod(last + 1, NULL);
    }
    fclose(f);
    ck_assert_msg(fabs(csv_spread - (hi - lo) / mean) <= 1e-9, "metrics.csv spread %g, want %g", csv_spread,
                  (hi - lo) / mean);
    json_decref(cmp);
    free(out);
}
END_TEST

START_TEST(bad_inputs_are_errors_that_name_them)
{
    expect_refused("/nonexistent/run", sim_out, "/nonexistent/run");
    expect_refused(dir, sim_out, "neither a run directory");
    /* SIMULATED brings the cost model that re-predicts the steps: a vLLM result has none */
    expect_refused(run_out, VLLM_RESULT, "SIMULATED must be a `tandem sim --out` directory");
    /* a copy of the run whose requests.csv has a word where line 3's arrival should be */
    char *bad = doctored_copy(run_out, "bad", -1), path[4500], cmd[9000];
    snprintf(cmd, sizeof cmd, "sed -i '3s/^\\([^,]*\\),[^,]*,/\\1,oops,/' %s/requests.csv", bad);
    ck_assert(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/requests.csv:3: arrival_s \"oops\" is not a number", bad);
    expect_refused(bad, sim_out, path);
    free(bad);
    cli_result r = run_cli("compare", run_out, NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "MEASURED and SIMULATED"), "%s", r.err);
    cli_result_free(&r);
    r = run_cli("compare", run_out, sim_out, "--outt", "x", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--outt: unknown option"), "%s", r.err);
    cli_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("compare");
    TCase *tc = tcase_create("compare");
    tcase_add_unchecked_fixture(tc, setup_runs, teardown_runs);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, run_against_sim_reports_every_metric_and_step);
    tcase_add_test(tc, sim_against_itself_has_exactly_zero_error);
    tcase_add_test(tc, mismatched_runs_are_refused_naming_what_differs);
    tcase_add_test(tc, async_scheduling_is_noted_when_the_runs_differ);
    tcase_add_test(tc, trace_is_matched_by_contents_not_path);
    tcase_add_test(tc, kernel_time_by_kind_against_the_roofline);
    tcase_add_test(tc, vllm_result_is_read_and_joined);
    tcase_add_test(tc, repeats_give_a_spread);
    tcase_add_test(tc, bad_inputs_are_errors_that_name_them);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
