/*
 * test_search.c: `tandem search`, the capacity search: its answer meets the SLO and the next
 * probe up does not, within the tolerance; a direct `sim` at the answer agrees; bad flags are
 * refused naming the flag.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define LENGTHS "traces/samples/sharegpt_lengths_5k.csv"

START_TEST(capacity_meets_the_slo_and_the_next_probe_fails)
{
    char *dir = make_temp_dir("search");
    char out[4200];
    snprintf(out, sizeof out, "%s/s", dir);
    cli_result r = run_cli("search", "--trace", LENGTHS, "--max-requests", "400", "--model", "llama-3-8b", "--goodput",
                           "ttft:500", "tpot:50", "--tolerance", "0.02", "--out", out, NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    const char *cap = strstr(r.out, "capacity: ");
    ck_assert_msg(cap, "no capacity line:\n%s", r.out);
    cli_result_free(&r);
    json_t *js = load_json(out, "search.json");
    double answer = json_real_value(json_object_get(js, "capacity_request_rate"));
    json_decref(js);
    ck_assert_msg(answer > 0.5 && answer < 100, "capacity %g req/s", answer);
    /* search.csv: sorted by rate; the answer meets the target, the next rate up fails, close */
    char path[4300];
    snprintf(path, sizeof path, "%s/search.csv", out);
    char *csv = slurp(path, NULL);
    ck_assert_msg(!strncmp(csv, "request_rate,attainment,meets_target,", 37), "%s", csv);
    double prev = 0, above = 0;
    int meets_at_answer = -1;
    for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        char *p;
        double rate = strtod(line, &p);
        strtod(p + 1, &p);
        int meets = (int)strtol(p + 1, NULL, 10);
        ck_assert_msg(rate > prev, "search.csv is not sorted by rate:\n%s", csv);
        prev = rate;
        if (rate == answer) meets_at_answer = meets;
        if (rate > answer && above == 0) {
            above = rate;
            ck_assert_msg(!meets, "a rate above the answer (%g > %g) meets the SLO:\n%s", rate, answer, csv);
        }
    }
    ck_assert_msg(meets_at_answer == 1, "the answer %g is not a probe that meets the SLO:\n%s", answer, csv);
    ck_assert_msg(above > answer && (above - answer) <= 0.02 * above * 1.0001, "bracket [%g, %g] wider than 2%%", answer, above);
    free(csv);
    /* the same run by hand: at least 90% of requests meet the SLO */
    char rate[64], sim_out[4300];
    snprintf(rate, sizeof rate, "%.17g", answer);
    snprintf(sim_out, sizeof sim_out, "%s/sim", dir);
    r = run_cli("sim", "--trace", LENGTHS, "--max-requests", "400", "--model", "llama-3-8b", "--goodput", "ttft:500",
                "tpot:50", "--request-rate", rate, "--out", sim_out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
    js = load_json(sim_out, "summary.json");
    double good = json_real_value(json_object_get(js, "request_goodput")) * json_real_value(json_object_get(js, "duration"));
    ck_assert_msg(good >= 0.9 * 400 - 0.5, "sim at the capacity: %g of 400 requests meet the SLO", good);
    json_decref(js);
    free(dir);
}
END_TEST

START_TEST(search_refuses_bad_flags_naming_them)
{
    struct {
        const char *flag, *value, *want;
    } cases[] = {
        {"--target", "1.5", "--target: 1.5"},
        {"--tolerance", "0", "--tolerance: 0"},
        {"--start-rate", "-1", "--start-rate: -1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_result r = run_cli("search", "--trace", LENGTHS, "--goodput", "ttft:500", cases[i].flag, cases[i].value, NULL);
        ck_assert_msg(r.exit_code == 2 && strstr(r.err, cases[i].want), "%s %s: exit %d: %s", cases[i].flag,
                      cases[i].value, r.exit_code, r.err);
        cli_result_free(&r);
    }
    cli_result r = run_cli("search", "--trace", LENGTHS, NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--goodput is required"), "%s", r.err);
    cli_result_free(&r);
    r = run_cli("search", "--trace", LENGTHS, "--goodput", "ttft:500", "--request-rate", "3", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "request-rate"), "the search's own rate was accepted: %s", r.err);
    cli_result_free(&r);
}
END_TEST

/* A SPEC searches every point of its cross product: capacity.csv has one row per point, each
 * equal to a search run alone with that point's options. */
START_TEST(spec_searches_every_point_as_a_search_alone_would)
{
    char *dir = make_temp_dir("searchspec");
    char *spec = write_temp_file(dir, "cap.spec", "trace = " LENGTHS "\nmax-requests = 300\nmodel = llama-3-8b\n"
                                                  "max-num-seqs = 256\nmax-num-batched-tokens = 512, 8192\n");
    char out[4200];
    snprintf(out, sizeof out, "%s/cap", dir);
    cli_result r = run_cli("search", spec, "--goodput", "ttft:500", "tpot:50", "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    char path[4300];
    snprintf(path, sizeof path, "%s/capacity.csv", out);
    char *csv = slurp(path, NULL);
    ck_assert_msg(csv && !strncmp(csv, "point,id,trace,max-requests,model,max-num-seqs,max-num-batched-tokens,"
                                       "capacity_request_rate,probes\n", 99), "%s", csv ? csv : "(none)");
    const char *budgets[] = {"512", "8192"};
    char *line = strchr(csv, '\n') + 1;
    for (int i = 0; i < 2; i++) {
        char alone[4300];
        snprintf(alone, sizeof alone, "%s/alone%d", dir, i);
        r = run_cli("search", "--trace", LENGTHS, "--max-requests", "300", "--model", "llama-3-8b", "--max-num-seqs", "256",
                    "--max-num-batched-tokens", budgets[i], "--goodput", "ttft:500", "tpot:50", "--out", alone, "--quiet",
                    NULL);
        ck_assert_int_eq(r.exit_code, 0);
        cli_result_free(&r);
        json_t *js = load_json(alone, "search.json");
        double want = json_real_value(json_object_get(js, "capacity_request_rate"));
        json_decref(js);
        char *nl = strchr(line, '\n');
        *nl = 0;
        char *cap = strrchr(line, ',');
        *cap = 0;
        double got = strtod(strrchr(line, ',') + 1, NULL);
        ck_assert_msg(got == want, "point %d (budget %s): %g in capacity.csv, %g searched alone", i, budgets[i], got, want);
        line = nl + 1;
    }
    free(csv);
    char *bad = write_temp_file(dir, "bad.spec", "trace = " LENGTHS "\nrequest-rate = 1, 2\n");
    r = run_cli("search", bad, "--goodput", "ttft:500", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "bad.spec:2: request-rate is what the search varies"), "%s", r.err);
    cli_result_free(&r);
    free(bad);
    free(spec);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("search");
    TCase *tc = tcase_create("search");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, capacity_meets_the_slo_and_the_next_probe_fails);
    tcase_add_test(tc, search_refuses_bad_flags_naming_them);
    tcase_add_test(tc, spec_searches_every_point_as_a_search_alone_would);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
