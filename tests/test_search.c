/*
 * test_search.c: `tandem search`. The capacity search: its answer meets the SLO and the next
 * probe up does not, within the tolerance; a direct `sim` at the answer agrees; a SPEC's points
 * are priced and the cost-capacity Pareto front is the right one. The cost search: its answer is
 * the cheapest point that meets the SLO (in a case where monotonicity says which), pruning
 * changes nothing but what runs, a price changes the answer, and ties go to headroom, then to
 * spec order. Bad flags are refused naming the flag.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/csv_rows.h"
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
        {"--gpu-cost", "h300=2", "--gpu-cost: unknown GPU \"h300\""},
        {"--gpu-cost", "h200=0", "--gpu-cost: h200=0: the price must be"},
        {"--gpu-cost", "h200", "--gpu-cost: \"h200\" is not GPU=USD"},
        {"--request-rate", "-1", "--request-rate: -1 is not a finite rate > 0"},
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
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--request-rate: a cost search needs a SPEC"),
                  "the search's own rate was accepted: %s", r.err);
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
    const char *head = "point,id,trace,max-requests,model,max-num-seqs,max-num-batched-tokens,capacity_request_rate,"
                       "probes,gpu_kind,num_gpus,usd_per_hour,usd_per_million_requests,pareto\n";
    ck_assert_msg(csv && !strncmp(csv, head, strlen(head)), "%s", csv ? csv : "(none)");
    const char *budgets[] = {"512", "8192"};
    double caps[2];
    int on_front[2];
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
        char *p = line;
        for (int k = 0; k < 7; k++) p = strchr(p, ',') + 1; /* point,id and the spec's five keys */
        double got = strtod(p, NULL);
        ck_assert_msg(got == want, "point %d (budget %s): %g in capacity.csv, %g searched alone", i, budgets[i], got, want);
        caps[i] = got;
        /* ...,probes,gpu_kind,num_gpus,usd_per_hour,usd_per_million_requests,pareto */
        char kind[32];
        int probes, num_gpus, pareto;
        double usd, per_million;
        ck_assert_msg(sscanf(strchr(p, ',') + 1, "%d,%31[^,],%d,%lf,%lf,%d", &probes, kind, &num_gpus, &usd, &per_million,
                             &pareto) == 6, "row %d: %s", i, line);
        ck_assert_msg(!strcmp(kind, "h200") && num_gpus == 1 && fabs(usd - 4.464) < 1e-9,
                      "point %d priced as %d x %s at $%g/h, not 1 x h200 at the default $4.464/h", i, num_gpus, kind, usd);
        ck_assert_msg(fabs(per_million - usd / (got * 3600) * 1e6) < 1e-6 * per_million,
                      "point %d: $%g per 1M requests, not $%g/h over %g req/s", i, per_million, usd, got);
        on_front[i] = pareto;
        line = nl + 1;
    }
    free(csv);
    /* one price, so the front is the higher capacity alone */
    ck_assert_msg(caps[1] > caps[0], "the case needs budget 8192 to serve more than 512: %g <= %g", caps[1], caps[0]);
    ck_assert_msg(!on_front[0] && on_front[1], "Pareto front: budget 512 %s, 8192 %s; at one price only the higher "
                  "capacity (8192) is on it", on_front[0] ? "on" : "off", on_front[1] ? "on" : "off");
    char *bad = write_temp_file(dir, "bad.spec", "trace = " LENGTHS "\nrequest-rate = 1, 2\n");
    r = run_cli("search", bad, "--goodput", "ttft:500", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "bad.spec:2: request-rate is what the search varies"), "%s", r.err);
    cli_result_free(&r);
    free(bad);
    free(spec);
    free(dir);
}
END_TEST

/* ---- the cost search ---- */

#define MAX_COST_ROWS 8

/* One row of cost.csv: the spec column `key`, and what the search made of the point. */
typedef struct cost_row {
    char key[64], id[17], status[16];
    int num_gpus, cheapest;
    double usd_per_hour, attainment;
} cost_row;

/* Reads OUT/cost.csv into rows (spec order); returns the row count. */
static int read_cost(const char *out, const char *key, cost_row *rows)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/cost.csv", out);
    csv_rows t;
    terr e;
    ck_assert_msg(csv_rows_open(&t, path, &e) == 0, "%s", e.msg);
    int k = csv_rows_need(&t, key, &e), id = csv_rows_need(&t, "id", &e), st = csv_rows_need(&t, "status", &e),
        ng = csv_rows_need(&t, "num_gpus", &e), ch = csv_rows_need(&t, "cheapest", &e),
        usd = csv_rows_need(&t, "usd_per_hour", &e), at = csv_rows_need(&t, "attainment", &e);
    ck_assert_msg(k >= 0 && id >= 0 && st >= 0 && ng >= 0 && ch >= 0 && usd >= 0 && at >= 0, "%s", e.msg);
    int n = 0;
    while (csv_rows_next(&t, &e) == 1) {
        ck_assert_msg(n < MAX_COST_ROWS, "%s: more rows than points", path);
        cost_row *r = &rows[n++];
        snprintf(r->key, sizeof r->key, "%s", csv_rows_at(&t, k));
        snprintf(r->id, sizeof r->id, "%s", csv_rows_at(&t, id));
        snprintf(r->status, sizeof r->status, "%s", csv_rows_at(&t, st));
        r->num_gpus = atoi(csv_rows_at(&t, ng));
        r->cheapest = atoi(csv_rows_at(&t, ch));
        r->usd_per_hour = strtod(csv_rows_at(&t, usd), NULL);
        r->attainment = *csv_rows_at(&t, at) ? strtod(csv_rows_at(&t, at), NULL) : -1;
    }
    csv_rows_close(&t);
    return n;
}

/* The row marked cheapest (failing the test unless exactly one is), or -1 when none is. */
static int cheapest_row(const cost_row *rows, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (rows[i].cheapest) {
            ck_assert_msg(best < 0, "rows %d and %d are both marked cheapest", best, i);
            best = i;
        }
    return best;
}

#define REPLICAS_SPEC "trace = " LENGTHS "\nmax-requests = 300\nmodel = llama-3-8b\nnum-replicas = 4, 3, 2, 1\n"

/* More replicas of one GPU serve a fixed load at least as well here (checked on the full table),
 * so the answer is known: the fewest replicas that meet the SLO. The spec lists them in falling
 * order, so spec order alone would give the wrong one. */
START_TEST(cost_search_answer_is_the_fewest_replicas_that_meet_the_slo)
{
    char *dir = make_temp_dir("searchcost");
    char *spec = write_temp_file(dir, "replicas.spec", REPLICAS_SPEC);
    char all[4200], pruned[4200];
    snprintf(all, sizeof all, "%s/all", dir);
    snprintf(pruned, sizeof pruned, "%s/pruned", dir);
    cli_result r = run_cli("search", spec, "--request-rate", "16", "--goodput", "ttft:500", "tpot:50", "--no-prune",
                           "--out", all, "--quiet", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    cli_result_free(&r);
    cost_row full[MAX_COST_ROWS];
    int n = read_cost(all, "num-replicas", full);
    ck_assert_int_eq(n, 4);
    int fewest = 0; /* replicas */
    for (int replicas = 1; replicas <= 4; replicas++) {
        const cost_row *row = &full[4 - replicas];
        ck_assert_msg(atoi(row->key) == replicas && row->num_gpus == replicas, "row %d: %s replicas, %d GPUs",
                      4 - replicas, row->key, row->num_gpus);
        ck_assert_msg(!strcmp(row->status, "meets") || !strcmp(row->status, "fails"), "--no-prune left %s %s",
                      row->key, row->status);
        bool meets = !strcmp(row->status, "meets");
        ck_assert_msg(meets || !fewest, "the case is not monotone: %d replicas fail where %d meet the SLO", replicas,
                      fewest);
        if (meets && !fewest) fewest = replicas;
    }
    ck_assert_msg(fewest == 2, "the case needs 1 replica to fail and 2 to meet the SLO at 16 req/s; %d is the fewest "
                  "that meet it", fewest);
    int best = cheapest_row(full, n);
    ck_assert_msg(best >= 0 && atoi(full[best].key) == fewest, "the answer is %s replicas, not the fewest meeting the "
                  "SLO (%d)", best >= 0 ? full[best].key : "none", fewest);

    /* pruned: the same answer; the dearer points never run; the cheaper ones ran as before */
    r = run_cli("search", spec, "--request-rate", "16", "--goodput", "ttft:500", "tpot:50", "--out", pruned, NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    ck_assert_msg(strstr(r.out, "cheapest: point 2 (num-replicas=2): 2 x h200") && strstr(r.out, "2 points pruned"),
                  "%s", r.out);
    cli_result_free(&r);
    cost_row some[MAX_COST_ROWS];
    ck_assert_int_eq(read_cost(pruned, "num-replicas", some), 4);
    ck_assert_msg(cheapest_row(some, 4) == best && !strcmp(some[best].id, full[best].id), "pruning changed the answer");
    for (int i = 0; i < 4; i++) {
        if (atoi(some[i].key) > fewest)
            ck_assert_msg(!strcmp(some[i].status, "pruned") && some[i].attainment < 0,
                          "%s replicas cost more than the answer but were %s", some[i].key, some[i].status);
        else
            ck_assert_msg(!strcmp(some[i].status, full[i].status) && some[i].attainment == full[i].attainment,
                          "%s replicas: %s %g pruned, %s %g in full", some[i].key, some[i].status, some[i].attainment,
                          full[i].status, full[i].attainment);
    }
    json_t *js = load_json(pruned, "cost.json");
    json_t *ch = json_object_get(js, "cheapest");
    ck_assert_msg(json_integer_value(json_object_get(ch, "point")) == best &&
                      json_integer_value(json_object_get(ch, "num_gpus")) == 2 &&
                      fabs(json_real_value(json_object_get(ch, "usd_per_hour")) - 2 * 4.464) < 1e-9 &&
                      json_integer_value(json_object_get(json_object_get(ch, "config"), "num-replicas")) == 2 &&
                      json_integer_value(json_object_get(js, "sim_runs")) == 2,
                  "cost.json's answer is not 2 x h200 at $8.928/h after 2 runs");
    json_decref(js);
    /* the outputs are complete files, nothing else */
    DIR *d = opendir(pruned);
    int files = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.') {
            ck_assert_msg(!strcmp(de->d_name, "cost.csv") || !strcmp(de->d_name, "cost.json"), "left behind: %s",
                          de->d_name);
            files++;
        }
    closedir(d);
    ck_assert_int_eq(files, 2);
    free(spec);
    free(dir);
}
END_TEST

/* At 1 req/s one A100 meets the SLO with less headroom than one H200 (93% against 100% of
 * requests). Listed A100 first: the default prices pick the A100; priced above the H200, the
 * H200; priced the same, the H200 again (more headroom beats spec order). Two identical runs at
 * one price go to the first in the spec. */
START_TEST(cost_search_follows_the_prices_and_breaks_ties_by_headroom_then_spec_order)
{
    char *dir = make_temp_dir("searchprice");
    char *spec = write_temp_file(dir, "gpus.spec", "trace = " LENGTHS "\nmax-requests = 300\nmodel = llama-3-8b\n"
                                                   "gpu = a100-80gb, h200\n");
    struct {
        const char *price, *want;
        bool both_run;
    } cases[] = {
        {"", "a100-80gb", false},               /* default: $2.16 against $4.464 */
        {"a100-80gb=5", "h200", false},         /* dearer than the H200 now */
        {"a100-80gb=4.464", "h200", true},      /* the same: headroom decides */
        {"h200=2.16,a100-80gb=2.16", "h200", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[4300];
        snprintf(out, sizeof out, "%s/p%zu", dir, i);
        cli_result r = run_cli("search", spec, "--request-rate", "1", "--goodput", "ttft:500", "tpot:50", "--gpu-cost",
                               cases[i].price, "--out", out, "--quiet", NULL);
        ck_assert_msg(r.exit_code == 0, "--gpu-cost %s: exit %d: %s", cases[i].price, r.exit_code, r.err);
        cli_result_free(&r);
        cost_row rows[MAX_COST_ROWS];
        ck_assert_int_eq(read_cost(out, "gpu", rows), 2);
        int best = cheapest_row(rows, 2);
        ck_assert_msg(best >= 0 && !strcmp(rows[best].key, cases[i].want), "--gpu-cost '%s': the answer is %s, not %s",
                      cases[i].price, best >= 0 ? rows[best].key : "none", cases[i].want);
        bool both = strcmp(rows[0].status, "pruned") && strcmp(rows[1].status, "pruned");
        ck_assert_msg(both == cases[i].both_run, "--gpu-cost '%s': statuses %s, %s", cases[i].price, rows[0].status,
                      rows[1].status);
        if (both)
            ck_assert_msg(rows[1].attainment > rows[0].attainment && rows[0].attainment >= 0.9,
                          "the case needs both to meet the SLO, the H200 with more headroom: %g, %g",
                          rows[0].attainment, rows[1].attainment);
    }
    /* identical runs (a light load never reaches either sequence cap) at one price: spec order */
    const char *orders[] = {"512, 1024", "1024, 512"};
    for (int i = 0; i < 2; i++) {
        char text[512], name[32], out[4300];
        snprintf(text, sizeof text, "trace = %s\nmax-requests = 300\nmodel = llama-3-8b\nmax-num-seqs = %s\n", LENGTHS,
                 orders[i]);
        snprintf(name, sizeof name, "seqs%d.spec", i);
        char *s = write_temp_file(dir, name, text);
        snprintf(out, sizeof out, "%s/seqs%d", dir, i);
        cli_result r = run_cli("search", s, "--request-rate", "2", "--goodput", "ttft:500", "tpot:50", "--out", out,
                               "--quiet", NULL);
        ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
        cli_result_free(&r);
        cost_row rows[MAX_COST_ROWS];
        ck_assert_int_eq(read_cost(out, "max-num-seqs", rows), 2);
        ck_assert_msg(!strcmp(rows[0].status, "meets") && rows[0].attainment == rows[1].attainment,
                      "the case needs two identical runs that meet the SLO: %s %g, %s %g", rows[0].status,
                      rows[0].attainment, rows[1].status, rows[1].attainment);
        ck_assert_msg(cheapest_row(rows, 2) == 0, "max-num-seqs = %s: the tie went to point %d, not the first",
                      orders[i], cheapest_row(rows, 2));
        free(s);
    }
    free(spec);
    free(dir);
}
END_TEST

START_TEST(cost_search_without_an_answer_says_so)
{
    char *dir = make_temp_dir("searchnone");
    char *spec = write_temp_file(dir, "r.spec", "trace = " LENGTHS "\nmax-requests = 300\nmodel = llama-3-8b\n"
                                                "num-replicas = 1, 2\n");
    char out[4300];
    snprintf(out, sizeof out, "%s/o", dir);
    cli_result r = run_cli("search", spec, "--request-rate", "200", "--goodput", "ttft:500", "tpot:50", "--out", out, NULL);
    ck_assert_msg(r.exit_code == 0 && strstr(r.out, "no configuration meets the SLO at 200 req/s (2 sim runs)"),
                  "exit %d: %s%s", r.exit_code, r.out, r.err);
    cli_result_free(&r);
    json_t *js = load_json(out, "cost.json");
    ck_assert_msg(json_is_null(json_object_get(js, "cheapest")), "cost.json names a cheapest point");
    json_decref(js);
    free(spec);
    free(dir);
}
END_TEST

START_TEST(search_names_the_cost_flags_that_cannot_change_its_result)
{
    cli_result r = run_cli("search", "--trace", LENGTHS, "--max-requests", "100", "--model", "llama-3-8b", "--goodput",
                           "ttft:500", "--no-prune", "--gpu-cost", "h200=3", NULL);
    ck_assert_msg(r.exit_code == 0, "exit %d: %s", r.exit_code, r.err);
    ck_assert_msg(strstr(r.err, "warning: --no-prune: only a cost search (--request-rate) prunes") &&
                      strstr(r.err, "warning: --gpu-cost: only a SPEC's points are priced"),
                  "a capacity search of one configuration took --no-prune and --gpu-cost silently:\n%s", r.err);
    cli_result_free(&r);
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
    tcase_add_test(tc, cost_search_answer_is_the_fewest_replicas_that_meet_the_slo);
    tcase_add_test(tc, cost_search_follows_the_prices_and_breaks_ties_by_headroom_then_spec_order);
    tcase_add_test(tc, cost_search_without_an_answer_says_so);
    tcase_add_test(tc, search_names_the_cost_flags_that_cannot_change_its_result);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
