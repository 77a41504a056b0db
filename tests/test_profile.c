/*
 * test_profile.c: the simulated-vs-measured loop on the CPU engine, as CI can run it: `tandem
 * profile` measures the engine, `tandem sim --cost-model profile:FILE` predicts from it, `tandem
 * run` measures a trace, `tandem compare` holds them together, and they agree within bounds a
 * noisy 2-core machine keeps. Also the
 * profile file's contract (provenance, malformed files named by FILE:LINE, another model's
 * profile refused unless forced and then flagged) and `run --repeat`.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "testutil.h"

/* A fast configuration of the tiny model: short contexts, small batches. */
#define BUDGETS "--max-num-seqs", "8", "--max-model-len", "512", "--max-num-batched-tokens", "512"

static char *dir;
static char profile[4200], trace[4200];

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "no number \"%s\"", key);
    return json_number_value(v);
}

static void setup(void)
{
    dir = make_temp_dir("profile");
    snprintf(profile, sizeof profile, "%s/tiny.csv", dir);
    snprintf(trace, sizeof trace, "%s/t.csv", dir);
    cli_result r = run_cli("profile", "--model", "synthetic:tiny-llama2", "--backend", "cpu", BUDGETS, "--repeats", "3",
                           "--out", profile, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "profile: %s", r.err);
    cli_result_free(&r);
    r = run_cli("trace", "gen", "--num-requests", "40", "--rate", "40", "--length-dist", "uniform", "--input-len", "96",
                "--output-len", "48", "--range-ratio", "0.5", "--seed", "5", "--out", trace, NULL);
    ck_assert_msg(r.exit_code == 0, "%s", r.err);
    cli_result_free(&r);
}

static void teardown(void) { rm_tree(dir); }

START_TEST(profile_file_has_provenance_and_every_kind_of_step)
{
    char *text = slurp(profile, NULL);
    ck_assert_msg(text, "no profile written");
    const char *want[] = {"# tandem profile 1\n", "# model: tiny-llama2\n", "# gpu: h200\n", "# backend: cpu\n",
                          "# block_size: 16\n", "# tandem: ", "# date: ", "# command: tandem profile",
                          "\nkind,num_prefill_seqs,", "\nprefill,", "\ndecode,", "\nmixed,"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(text, want[i]), "the profile lacks \"%s\":\n%.600s", want[i], text);
    int rows = 0;
    for (char *p = strchr(text, '\n'); p; p = strchr(p + 1, '\n')) rows += p[1] && p[1] != '#';
    ck_assert_msg(rows >= 20, "only %d rows", rows);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", profile);
    ck_assert_msg(!fopen(tmp, "r"), "the temporary %s was left behind", tmp);
    free(text);
}
END_TEST

START_TEST(simulation_from_the_profile_matches_the_engine)
{
    char run_out[4300], sim_out[4300], spec[4300];
    snprintf(run_out, sizeof run_out, "%s/run", dir);
    snprintf(sim_out, sizeof sim_out, "%s/sim", dir);
    snprintf(spec, sizeof spec, "profile:%s", profile);
    cli_result r = run_cli("run", "--trace", trace, "--model", "synthetic:tiny-llama2", "--backend", "cpu", BUDGETS,
                           "--out", run_out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "run: %s", r.err);
    cli_result_free(&r);
    r = run_cli("sim", "--trace", trace, "--model", "tiny-llama2", "--cost-model", spec, BUDGETS, "--out", sim_out,
                "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "sim: %s", r.err);
    cli_result_free(&r);
    json_t *m = load_json(run_out, "summary.json"), *s = load_json(sim_out, "summary.json");
    json_t *x = json_object_get(json_object_get(s, "config"), "executor");
    ck_assert_msg(x && !strcmp(json_string_value(json_object_get(x, "cost_model")), "profile"),
                  "summary.json does not say the profile timed the steps");
    ck_assert_msg(json_is_false(json_object_get(x, "forced")), "a matching profile flagged as forced");
    /* the fit reproduces its own points (a wrong form misses by far more than the CPU's noise) */
    ck_assert_msg(num(x, "fit_median_abs_error") < 0.15, "profile fit: median error %.3f on its own points",
                  num(x, "fit_median_abs_error"));
    /* Bounds a loaded 2-core machine keeps (its step times wander by 10-20% under other jobs);
     * the roofline, which knows nothing of this CPU, is off by orders of magnitude. */
    const char *keys[] = {"duration", "output_throughput", "median_tpot_ms", "median_e2el_ms"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        double a = num(m, keys[i]), b = num(s, keys[i]), rel = (b - a) / a;
        ck_assert_msg(rel > -0.35 && rel < 0.35, "%s: measured %.3f, simulated from the profile %.3f (%+.0f%%)",
                      keys[i], a, b, 100 * rel);
    }
    json_decref(m);
    json_decref(s);

    /* and tandem compare closes the loop: every step re-predicted from its shape by the profile */
    char cmp_out[4300];
    snprintf(cmp_out, sizeof cmp_out, "%s/cmp", dir);
    r = run_cli("compare", run_out, sim_out, "--out", cmp_out, "--no-figures", "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "compare: %s", r.err);
    cli_result_free(&r);
    json_t *c = load_json(cmp_out, "compare.json");
    json_t *all = json_object_get(json_object_get(json_object_get(c, "steps"), "classes"), "all");
    ck_assert_msg(all && num(all, "count") > 100, "compare re-predicted too few steps");
    ck_assert_msg(num(all, "median_abs_rel_error") < 0.35, "steps re-predicted from the profile: median error %.2f",
                  num(all, "median_abs_rel_error"));
    json_decref(c);
}
END_TEST

START_TEST(bad_profiles_are_named_by_file_and_line)
{
    const struct {
        const char *text, *want;
    } cases[] = {
        {"# model: tiny-llama2\n# gpu: h200\n# block_size: 16\nkind,oops\n", ":4: 2 fields"},
        {"# model: tiny-llama2\n# gpu: h200\n# block_size: 16\n"
         "kind,num_prefill_seqs,num_decode_seqs,num_emitting,prefill_tokens,decode_tokens,prefill_pairs2,"
         "prefill_keys,decode_keys,decode_keys_sq,max_keys,repeats,median_ms,p10_ms,p90_ms,min_ms,max_ms\n"
         "decode,0,1,1,0,1,0,0,129,16641,129,5,-3,1,1,1,1\n",
         ":5: median_ms \"-3\" is not a positive number"},
        {"kind,x\n", ":1: 2 fields"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32], spec[4400];
        snprintf(name, sizeof name, "bad%zu.csv", i);
        char *path = write_temp_file(dir, name, cases[i].text);
        snprintf(spec, sizeof spec, "profile:%s", path);
        cli_result r = run_cli("sim", "--trace", trace, "--model", "tiny-llama2", "--cost-model", spec, BUDGETS,
                               "--quiet", NULL);
        char want[4500];
        snprintf(want, sizeof want, "%s%s", path, cases[i].want);
        ck_assert_msg(r.exit_code == 2 && strstr(r.err, want), "case %zu: exit %d, stderr \"%s\", want \"%s\"", i,
                      r.exit_code, r.err, want);
        cli_result_free(&r);
        free(path);
    }
}
END_TEST

START_TEST(another_models_profile_is_refused_unless_forced)
{
    char spec[4300], out[4300];
    snprintf(spec, sizeof spec, "profile:%s", profile);
    snprintf(out, sizeof out, "%s/forced", dir);
    cli_result r = run_cli("sim", "--trace", trace, "--model", "tiny-llama3", "--cost-model", spec, BUDGETS, "--quiet",
                           NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "a profile of model tiny-llama2, the run's is tiny-llama3"),
                  "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    r = run_cli("sim", "--trace", trace, "--model", "tiny-llama3", "--cost-model", spec, "--force-profile", BUDGETS,
                "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "forced: %s", r.err);
    cli_result_free(&r);
    json_t *s = load_json(out, "summary.json");
    json_t *x = json_object_get(json_object_get(s, "config"), "executor");
    ck_assert_msg(json_is_true(json_object_get(x, "forced")) && json_object_get(x, "mismatch"),
                  "a forced profile is not flagged in summary.json");
    json_decref(s);
}
END_TEST

START_TEST(run_repeat_writes_each_run_and_the_spread)
{
    char out[4300], path[4400];
    snprintf(out, sizeof out, "%s/rep", dir);
    cli_result r = run_cli("run", "--trace", trace, "--model", "synthetic:tiny-llama2", "--backend", "cpu", BUDGETS,
                           "--max-requests", "10", "--repeat", "2", "--out", out, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "run --repeat: %s", r.err);
    cli_result_free(&r);
    for (int k = 1; k <= 2; k++) {
        snprintf(path, sizeof path, "%s/%d/summary.json", out, k);
        ck_assert_msg(fopen(path, "r"), "no %s", path);
    }
    json_t *sp = load_json(out, "spread.json");
    ck_assert_int_eq(num(sp, "repeats"), 2);
    json_t *ttft = json_object_get(json_object_get(sp, "metrics"), "mean_ttft_ms");
    ck_assert_msg(ttft && num(ttft, "min") <= num(ttft, "max") && num(ttft, "relative_spread") >= 0,
                  "spread.json lacks a sane mean_ttft_ms");
    json_decref(sp);
    r = run_cli("run", "--trace", trace, "--model", "synthetic:tiny-llama2", "--backend", "cpu", "--repeat", "2", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--repeat 2 needs --out"), "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("profile");
    tcase_add_unchecked_fixture(tc, setup, teardown); /* one profile for every test */
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, profile_file_has_provenance_and_every_kind_of_step);
    tcase_add_test(tc, simulation_from_the_profile_matches_the_engine);
    tcase_add_test(tc, bad_profiles_are_named_by_file_and_line);
    tcase_add_test(tc, another_models_profile_is_refused_unless_forced);
    tcase_add_test(tc, run_repeat_writes_each_run_and_the_spread);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
