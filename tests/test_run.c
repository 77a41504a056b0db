/*
 * test_run.c: the same serving loop and policy drive the real engine (`tandem run`, CPU
 * reference backend here; the CUDA backend is the same code path above the engine) and the
 * simulator (`tandem sim`). With every request arriving at once, the schedule does not depend
 * on step times, so the two must produce the very same sequence of batches, preemptions
 * included. And on the engine, preemption (recompute) and chunking must not change a single
 * greedy token: they only change when the KV is computed, never what it is.
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

START_TEST(engine_and_simulator_run_the_same_schedule)
{
    char run_out[4300], sim_out[4300];
    snprintf(run_out, sizeof run_out, "%s/run", dir);
    snprintf(sim_out, sizeof sim_out, "%s/sim", dir);
    cli_result r = run_cli("run", COMMON, "--backend", "cpu", "--max-num-batched-tokens", "64",
                           "--num-gpu-blocks-override", "40", "--out", run_out, NULL);
    ck_assert_msg(r.exit_code == 0, "run: %s", r.err);
    cli_result_free(&r);
    r = run_cli("sim", COMMON, "--max-num-batched-tokens", "64", "--num-gpu-blocks-override", "40", "--out", sim_out,
                NULL);
    ck_assert_msg(r.exit_code == 0, "sim: %s", r.err);
    cli_result_free(&r);
    char *a = steps_schedule(run_out), *b = steps_schedule(sim_out);
    ck_assert_msg(strcmp(a, b) == 0, "schedules differ:\nengine:\n%s\nsimulator:\n%s", a, b);
    /* the scenario must exercise preemption on the engine, or it proves less than it claims */
    char path[4400];
    snprintf(path, sizeof path, "%s/summary.json", run_out);
    char *js = slurp(path, NULL);
    char *p = strstr(js, "\"num_preemptions\": ");
    ck_assert_msg(p && atoi(p + 19) > 0, "no preemption in the engine run");
    ck_assert_msg(strstr(js, "\"completed\": 12"), "%s", js);
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
    free(a);
    free(b);
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

START_TEST(preemption_and_chunking_keep_greedy_tokens)
{
    char tight[4300], roomy[4300];
    snprintf(tight, sizeof tight, "%s/tight", dir);
    snprintf(roomy, sizeof roomy, "%s/roomy", dir);
    /* tight: 40 blocks of 4 tokens and 64-token steps: chunked prefills and preemptions */
    cli_result r = run_cli("run", COMMON, "--backend", "cpu", "--tokens", "--max-num-batched-tokens", "64",
                           "--num-gpu-blocks-override", "40", "--out", tight, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    r = run_cli("run", COMMON, "--backend", "cpu", "--tokens", "--max-num-batched-tokens", "512",
                "--num-gpu-blocks-override", "400", "--out", roomy, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    char *a = sorted_tokens(tight), *b = sorted_tokens(roomy);
    int lines = 0;
    for (char *c = a; *c; c++) lines += *c == '\n';
    ck_assert_int_eq(lines, 13); /* the header and 12 requests */
    ck_assert_msg(strcmp(a, b) == 0, "greedy tokens differ:\ntight:\n%s\nroomy:\n%s", a, b);
    free(a);
    free(b);
}
END_TEST

START_TEST(engine_refuses_what_it_cannot_run)
{
    cli_result r = run_cli("run", COMMON, "--backend", "cpu", "--preemption-mode", "swap", NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(strstr(r.err, "cannot swap"), "%s", r.err);
    cli_result_free(&r);
    r = run_cli("run", COMMON, "--backend", "cpu", "--scheduling-policy", "static", NULL);
    ck_assert_int_eq(r.exit_code, 2);
    ck_assert_msg(strstr(r.err, "static"), "%s", r.err);
    cli_result_free(&r);
    r = run_cli("run", COMMON, "--backend", "tpu", NULL);
    ck_assert_int_eq(r.exit_code, 2);
    cli_result_free(&r);
}
END_TEST

/* On a terminal (a pty made by script(1)) a run shows its header, a progress line that reaches
 * every request, and the goodput; piped, no progress line. */
START_TEST(run_shows_header_progress_and_goodput)
{
    if (system("command -v script >/dev/null 2>&1") != 0) {
        printf("run_shows_header_progress_and_goodput: SKIPPED (no script(1))\n");
        return;
    }
    const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
    char cmd[16384], log[4300];
    snprintf(log, sizeof log, "%s/tty.log", dir);
    snprintf(cmd, sizeof cmd,
             "script -qec \"%s run --trace %s --model synthetic:tiny-llama2 --backend cpu --max-num-seqs 4 "
             "--max-model-len 128 --block-size 4 --goodput ttft:100000\" /dev/null > %s 2>&1", bin, trace, log);
    ck_assert_int_eq(system(cmd), 0);
    char *out = slurp(log, NULL);
    ck_assert_msg(strstr(out, "synthetic:tiny-llama2 on the CPU, policy vllm, trace ") && strstr(out, "cpu engine"),
                  "no header:\n%s", out);
    ck_assert_msg(strstr(out, "run: 12/12 requests done") && strstr(out, "req/s") && strstr(out, "left"),
                  "no progress line:\n%s", out);
    ck_assert_msg(strstr(out, "Request goodput (req/s):") && strstr(out, "100.0% of 12 requests meet TTFT <= 100000 ms"),
                  "no goodput line:\n%s", out);
    free(out);
    cli_result r = run_cli("run", "--trace", trace, "--model", "synthetic:tiny-llama2", "--backend", "cpu",
                           "--max-num-seqs", "4", "--max-model-len", "128", "--block-size", "4", NULL);
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert_msg(!strstr(r.err, "requests done"), "progress line when not a terminal:\n%s", r.err);
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
    tcase_add_test(tc, preemption_and_chunking_keep_greedy_tokens);
    tcase_add_test(tc, engine_refuses_what_it_cannot_run);
    tcase_add_test(tc, run_shows_header_progress_and_goodput);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
