/*
 * test_run.c: the same serving loop and policy drive the real engine (`tandem run`, CPU
 * reference backend here; the CUDA backend is the same code path above the engine) and the
 * simulator (`tandem sim`). With every request arriving at once, the schedule does not depend
 * on step times, so the two must produce the very same sequence of batches, preemptions (by
 * recompute or swap) and padding included. And on the engine, preemption, swapping, chunking
 * and padding rows must not change a single greedy token: they only change when and where the
 * KV is computed, never what it is.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static char *dir;
static char trace[4200];

static void setup(void)
{
    dir = make_temp_dir("run");
    snprintf(trace, sizeof trace, "%s/t.csv", dir);
    cli_result r = run_cli("trace", "gen", "--num-requests", "12", "--rate", "inf", "--length-dist", "uniform",
                           "--input-len", "40", "--output-len", "12", "--range-ratio", "0.5", "--seed", "3", "--out",
                           trace, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
}

static void teardown(void) { free(dir); }

#define COMMON "--trace", trace, "--model", "synthetic:tiny-llama2", "--max-num-seqs", "4", "--max-model-len", "128", \
               "--block-size", "4", "--quiet"

/* steps.csv without the columns that measure time (step index, start, duration and the
 * utilisations derived from it, and the host time only a real engine measures): what remains
 * describes the schedule. */
static char *steps_schedule(const char *out)
{
    static const char *const timing[] = {"step", "start_s", "duration_ms", "mfu", "mbu", "host_us", "sched_us"};
    char path[4300];
    snprintf(path, sizeof path, "%s/steps.csv", out);
    char *csv = slurp(path, NULL);
    ck_assert_msg(csv, "no %s", path);
    bool drop[64] = {0};
    char *sched = calloc(strlen(csv) + 1, 1), *w = sched;
    for (char *line = csv, first = 1; *line; first = 0) {
        char *nl = strchr(line, '\n');
        if (!nl) nl = line + strlen(line);
        int col = 0;
        for (char *c = line; c <= nl && col < 64; c++) {
            if (c < nl && *c != ',') continue;
            char *start = c;
            while (start > line && start[-1] != ',') start--;
            if (first)
                for (size_t k = 0; k < sizeof timing / sizeof timing[0]; k++)
                    drop[col] |= (size_t)(c - start) == strlen(timing[k]) && !strncmp(start, timing[k], (size_t)(c - start));
            if (!drop[col]) {
                memcpy(w, start, (size_t)(c - start));
                w += c - start;
                *w++ = ',';
            }
            col++;
        }
        *w++ = '\n';
        line = *nl ? nl + 1 : nl;
    }
    free(csv);
    return sched;
}

/* Sum of a steps.csv column over a run. */
static long long column_sum(const char *out, const char *name)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/steps.csv", out);
    char *csv = slurp(path, NULL), *nl = strchr(csv, '\n');
    int col = -1, i = 0;
    for (char *c = csv, *f = csv; c <= nl; c++)
        if (*c == ',' || *c == '\n') {
            if ((size_t)(c - f) == strlen(name) && strncmp(f, name, strlen(name)) == 0) col = i;
            i++, f = c + 1;
        }
    ck_assert_msg(col >= 0, "steps.csv has no column %s", name);
    long long sum = 0;
    for (char *line = nl + 1; *line;) {
        char *f = line;
        for (int k = 0; k < col; k++) f = strchr(f, ',') + 1;
        sum += atoll(f);
        line = strchr(line, '\n') + 1;
    }
    free(csv);
    return sum;
}

/* `run` on the CPU engine and `sim` under the same flags give the same schedule. */
static void same_schedule(const char *name, const char *flag, const char *value, const char *must_have)
{
    char run_out[4300], sim_out[4300];
    snprintf(run_out, sizeof run_out, "%s/run-%s", dir, name);
    snprintf(sim_out, sizeof sim_out, "%s/sim-%s", dir, name);
    cli_result r = run_cli("run", COMMON, "--backend", "cpu", "--max-num-batched-tokens", "64",
                           "--num-gpu-blocks-override", "40", flag, value, "--out", run_out, NULL);
    ck_assert_msg(r.exit_code == 0, "run %s: %s", name, r.err);
    cli_result_free(&r);
    r = run_cli("sim", COMMON, "--max-num-batched-tokens", "64", "--num-gpu-blocks-override", "40", flag, value,
                "--out", sim_out, NULL);
    ck_assert_msg(r.exit_code == 0, "sim %s: %s", name, r.err);
    cli_result_free(&r);
    char *a = steps_schedule(run_out), *b = steps_schedule(sim_out);
    ck_assert_msg(strcmp(a, b) == 0, "%s: schedules differ:\nengine:\n%s\nsimulator:\n%s", name, a, b);
    free(a);
    free(b);
    /* the scenario must exercise what it names on the engine, or it proves less than it claims */
    ck_assert_msg(column_sum(run_out, must_have) > 0, "%s: no %s in the engine run", name, must_have);
    char path[4400];
    snprintf(path, sizeof path, "%s/summary.json", run_out);
    char *js = slurp(path, NULL);
    ck_assert_msg(strstr(js, "\"completed\": 12"), "%s: %s", name, js);
    ck_assert_msg(strstr(js, "\"host_us\""), "summary.json of a run lacks the executor's host time");
    free(js);
    /* host time is a measurement of the engine's: run's steps.csv has it, sim's does not */
    snprintf(path, sizeof path, "%s/steps.csv", run_out);
    js = slurp(path, NULL);
    ck_assert_msg(strstr(js, ",host_us,sched_us\n"), "run's steps.csv has no host_us, sched_us columns");
    free(js);
    snprintf(path, sizeof path, "%s/steps.csv", sim_out);
    js = slurp(path, NULL);
    ck_assert_msg(!strstr(js, "host_us"), "sim's steps.csv claims a measured host time");
    free(js);
}

START_TEST(engine_and_simulator_run_the_same_schedule)
{
    same_schedule("recompute", "--preemption-mode", "recompute", "num_preemptions");
    same_schedule("swap", "--preemption-mode", "swap", "swap_blocks");
    same_schedule("static", "--scheduling-policy", "static", "padding_tokens");
}
END_TEST

static char *sorted_tokens(const char *out)
{
    char cmd[8800], path[4400];
    snprintf(path, sizeof path, "%s/tokens.sorted", out);
    snprintf(cmd, sizeof cmd, "sort %s/tokens.csv > %s", out, path);
    ck_assert_int_eq(system(cmd), 0);
    return slurp(path, NULL);
}

/* Greedy tokens of a CPU engine run with extra flags. */
static char *tokens_of(const char *name, const char *batched, const char *blocks, const char *flag, const char *value)
{
    char out[4300];
    snprintf(out, sizeof out, "%s/tok-%s", dir, name);
    cli_result r = run_cli("run", COMMON, "--backend", "cpu", "--tokens", "--max-num-batched-tokens", batched,
                           "--num-gpu-blocks-override", blocks, flag, value, "--out", out, NULL);
    ck_assert_msg(r.exit_code == 0, "%s: %s", name, r.err);
    cli_result_free(&r);
    return sorted_tokens(out);
}

START_TEST(preemption_chunking_and_padding_keep_greedy_tokens)
{
    /* roomy: every request runs start to end; tight: 40 blocks of 4 tokens and 64-token steps,
     * so chunked prefills and preemptions, by recompute or by swapping through host memory;
     * static batching adds padding rows beside the real ones */
    char *roomy = tokens_of("roomy", "512", "400", "--preemption-mode", "recompute");
    int lines = 0;
    for (char *c = roomy; *c; c++) lines += *c == '\n';
    ck_assert_int_eq(lines, 13); /* the header and 12 requests */
    const char *variants[][3] = {
        {"recompute", "--preemption-mode", "recompute"},
        {"swap", "--preemption-mode", "swap"},
        {"static", "--scheduling-policy", "static"},
    };
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        char *t = tokens_of(variants[i][0], "64", "40", variants[i][1], variants[i][2]);
        ck_assert_msg(strcmp(t, roomy) == 0, "greedy tokens differ:\n%s:\n%s\nroomy:\n%s", variants[i][0], t, roomy);
        free(t);
    }
    free(roomy);
}
END_TEST

START_TEST(engine_refuses_what_it_cannot_run)
{
    cli_result r = run_cli("run", COMMON, "--backend", "tpu", NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(strstr(r.err, "--backend"), "%s", r.err);
    cli_result_free(&r);
}
END_TEST
int main(void)
{
    Suite *s = suite_create("run");
    TCase *tc = tcase_create("run");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, engine_and_simulator_run_the_same_schedule);
    tcase_add_test(tc, preemption_chunking_and_padding_keep_greedy_tokens);
    tcase_add_test(tc, engine_refuses_what_it_cannot_run);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
