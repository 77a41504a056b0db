/*
 * test_cluster.c: replicas behind a router (--num-replicas, --router), closed-loop clients
 * (--max-concurrency) and tensor parallelism (--tensor-parallel-size).
 *
 * The claims:
 *   - one replica run through the cluster's event loop writes byte for byte what the
 *     one-replica loop writes (requests.csv, steps.csv, summary.json), across policies,
 *     preemption modes and prefix caching: the cluster loop adds routing, not behaviour;
 *   - conservation: under every router and several replica counts, every request of the trace
 *     ends exactly once, on exactly one replica, and the per-replica table adds up;
 *   - a 70B model split over more GPUs has more KV blocks per replica and shorter steps;
 *   - bad cluster flags are refused naming the flag.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/serving.h"
#include "core/batch.h"
#include "sim/roofline.h"
#include "sim/sim_executor.h"
#include "testutil.h"

static char *dir;

static void setup(void) { dir = make_temp_dir("cluster"); }
static void teardown(void) { rm_tree(dir); }

/* Runs `tandem sim` in-process on options `args` (NULL-terminated name, value pairs) into
 * dir/NAME; cluster_loop forces the cluster loop. */
static void simulate(const char *name, bool cluster_loop, const char *const *args)
{
    serving_options o = {0};
    serving_options_defaults(&o);
    terr e = {{0}};
    /* every run writes dir/run (summary.json records --out), then is renamed to dir/NAME */
    char out[4300], final[4300];
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(final, sizeof final, "%s/%s", dir, name);
    ck_assert(opts_set(serving_option_specs(), &o, "out", out, &e) == 0);
    ck_assert(opts_set(serving_option_specs(), &o, "quiet", "true", &e) == 0);
    for (int i = 0; args[i]; i += 2)
        ck_assert_msg(opts_set(serving_option_specs(), &o, args[i], args[i + 1], &e) == 0, "--%s: %s", args[i], e.msg);
    o.cluster_loop = cluster_loop;
    serving_setup su;
    ck_assert_msg(serving_resolve(&o, &su, &e) == 0, "%s: %s", name, e.msg);
    metrics_summary sum;
    ck_assert_msg(serving_simulate(&o, &su, &sum, &e) == 0, "%s: %s", name, e.msg);
    serving_options_free(&o);
    remove_tree(final);
    ck_assert_msg(rename(out, final) == 0, "cannot rename %s", out);
}

static void expect_same_file(const char *a, const char *b, const char *file, const char *what)
{
    char pa[4400], pb[4400];
    snprintf(pa, sizeof pa, "%s/%s/%s", dir, a, file);
    snprintf(pb, sizeof pb, "%s/%s/%s", dir, b, file);
    size_t na, nb;
    char *x = slurp(pa, &na), *y = slurp(pb, &nb);
    ck_assert_msg(x && y, "%s: missing %s", what, file);
    /* summary.json's provenance says when each ran: the one field allowed to differ */
    char *bufs[] = {x, y};
    for (int k = 0; k < 2; k++)
        for (char *d = strstr(bufs[k], "\"date\": \""); d; d = strstr(d + 1, "\"date\": \""))
            for (char *c = d + 9; *c && *c != '"'; c++) *c = '-';
    size_t i = 0;
    while (i < na && i < nb && x[i] == y[i]) i++;
    if (i < na || i < nb) {
        size_t line = 1;
        for (size_t k = 0; k < i; k++) line += x[k] == '\n';
        ck_abort_msg("%s: %s differs at line %zu between the one-replica loop and the cluster loop", what, file, line);
    }
    free(x);
    free(y);
}

START_TEST(one_replica_in_the_cluster_loop_matches_the_single_loop)
{
    static const char *const azure[] = {"trace", "traces/samples/azure_conv_2023.csv", "max-requests", "600",
                                        "time-scale", "0.05", NULL};
    /* each config: extra options after the trace's; KV squeezed so that requests preempt */
    static const char *const configs[][16] = {
        {"scheduling-policy", "vllm", "num-gpu-blocks-override", "600", NULL},
        {"scheduling-policy", "vllm", "num-gpu-blocks-override", "600", "preemption-mode", "swap", "swap-space", "0.05", NULL},
        {"scheduling-policy", "sarathi", "num-gpu-blocks-override", "800", NULL},
        {"scheduling-policy", "priority", "priority-classes", "0.3,0.7", "num-gpu-blocks-override", "600", NULL},
        {"scheduling-policy", "fair", "num-clients", "4", "max-num-seqs", "16", NULL},
        {"scheduling-policy", "vllm-v0", "num-gpu-blocks-override", "700", NULL},
        {"scheduling-policy", "srpt", "length-predictor-error", "0.5", NULL},
        {"scheduling-policy", "static", "max-num-seqs", "8", NULL},
        {"scheduling-policy", "orca", "max-num-seqs", "16", "max-model-len", "2048", NULL},
        /* the closed loop: one replica runs it in the single loop too */
        {"scheduling-policy", "vllm", "num-gpu-blocks-override", "600", "max-concurrency", "8", NULL},
        {"scheduling-policy", "sarathi", "max-concurrency", "3", NULL},
    };
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        const char *args[40];
        int n = 0;
        for (int i = 0; azure[i]; i++) args[n++] = azure[i];
        for (int i = 0; configs[c][i]; i++) args[n++] = configs[c][i];
        args[n] = NULL;
        char what[256];
        snprintf(what, sizeof what, "--scheduling-policy %s (config %zu)", configs[c][1], c);
        simulate("single", false, args);
        simulate("cluster", true, args);
        expect_same_file("single", "cluster", "requests.csv", what);
        expect_same_file("single", "cluster", "steps.csv", what);
        expect_same_file("single", "cluster", "summary.json", what);
    }
    /* Mooncake with prefix caching: shared prefixes hit the cache the same way */
    static const char *const mooncake[] = {"trace", "traces/samples/mooncake_conversation_2k.jsonl", "max-requests", "400",
                                           "model", "llama-3.1-8b", "max-model-len", "32768",
                                           "enable-prefix-caching", "true", "num-gpu-blocks-override", "6000", NULL};
    simulate("single", false, mooncake);
    simulate("cluster", true, mooncake);
    expect_same_file("single", "cluster", "requests.csv", "mooncake, prefix caching");
    expect_same_file("single", "cluster", "steps.csv", "mooncake, prefix caching");
    expect_same_file("single", "cluster", "summary.json", "mooncake, prefix caching");
}
END_TEST

/* requests.csv's rows: every id 0..n-1 exactly once, each on a replica in [0, N). Returns the
 * number of rows; fills per_replica (N entries) with the rows of each. */
static int64_t check_rows_once(const char *name, int n_replicas, int64_t *per_replica)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s/requests.csv", dir, name);
    char *csv = slurp(path, NULL);
    ck_assert_msg(csv, "no %s", path);
    char *line = strchr(csv, '\n') + 1;
    int64_t rows = 0, cap = 1 << 16;
    unsigned char *seen = calloc((size_t)cap, 1);
    for (; *line; rows++) {
        char *nl = strchr(line, '\n');
        *nl = 0;
        int64_t id = strtoll(line, NULL, 10);
        const char *last = strrchr(line, ',') + 1;
        int rep = atoi(last);
        ck_assert_msg(id >= 0 && id < cap, "%s: id %lld out of range", name, (long long)id);
        ck_assert_msg(!seen[id], "%s: request %lld ended twice", name, (long long)id);
        seen[id] = 1;
        ck_assert_msg(rep >= 0 && rep < n_replicas, "%s: request %lld on replica %d of %d", name, (long long)id, rep,
                      n_replicas);
        per_replica[rep]++;
        line = nl + 1;
    }
    for (int64_t i = 0; i < rows; i++) ck_assert_msg(seen[i], "%s: request %lld never ended", name, (long long)i);
    free(seen);
    free(csv);
    return rows;
}

START_TEST(every_request_ends_once_on_one_replica)
{
    static const char *const routers[] = {"round-robin", "random", "least-outstanding", "least-kv", "power-of-two",
                                          "prefix-affinity"};
    static const char *const counts[] = {"2", "3", "8"};
    for (size_t ri = 0; ri < sizeof routers / sizeof routers[0]; ri++)
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            int n = atoi(counts[ci]);
            /* a burst on squeezed replicas: queues, preemptions, rejections; closed loop on one */
            const char *args[] = {"trace", "traces/samples/mooncake_conversation_2k.jsonl", "max-requests", "300",
                                  "time-scale", "0.02", "model", "llama-3.1-8b", "max-model-len", "16384",
                                  "enable-prefix-caching", "true", "num-gpu-blocks-override", "1500",
                                  "num-replicas", counts[ci], "router", routers[ri], "seed", "7",
                                  "max-concurrency", ci == 1 ? "40" : "0", NULL};
            char name[64];
            snprintf(name, sizeof name, "%s-%d", routers[ri], n);
            simulate(name, false, args);
            int64_t per[8] = {0};
            int64_t rows = check_rows_once(name, n, per);
            ck_assert_msg(rows == 300, "%s: %lld rows for 300 requests", name, (long long)rows);
            char run_dir[4300];
            snprintf(run_dir, sizeof run_dir, "%s/%s", dir, name);
            json_t *s = load_json(run_dir, "summary.json");
            ck_assert_int_eq(json_integer_value(json_object_get(s, "num_replicas")), n);
            json_t *reps = json_object_get(s, "replicas");
            ck_assert_int_eq((int)json_array_size(reps), n);
            int64_t done = 0;
            for (int k = 0; k < n; k++) {
                json_t *r = json_array_get(reps, (size_t)k);
                int64_t req = json_integer_value(json_object_get(r, "requests"));
                ck_assert_msg(req == per[k], "%s: replica %d's table says %lld requests, requests.csv %lld", name, k,
                              (long long)req, (long long)per[k]);
                done += json_integer_value(json_object_get(r, "completed")) +
                        json_integer_value(json_object_get(r, "rejected"));
            }
            ck_assert_msg(done == 300, "%s: replicas ended %lld of 300", name, (long long)done);
            ck_assert_msg(json_real_value(json_object_get(s, "load_imbalance")) >= 1.0, "%s: imbalance below 1", name);
            json_decref(s);
        }
}
END_TEST

START_TEST(closed_loop_holds_arrivals_until_a_request_ends)
{
    const char *args[] = {"trace", "traces/samples/azure_conv_2023.csv", "max-requests", "200", "time-scale", "0.001",
                          "max-concurrency", "4", NULL};
    simulate("closed", false, args);
    /* with at most 4 outstanding, at any arrival at most 3 others are still in the system */
    char path[4400];
    snprintf(path, sizeof path, "%s/closed/requests.csv", dir);
    char *csv = slurp(path, NULL);
    double arr[200], fin[200];
    long id[200];
    int n = 0;
    for (char *line = strchr(csv, '\n') + 1; *line && n < 200; n++) {
        id[n] = strtol(line, NULL, 10);
        arr[n] = strtod(strchr(line, ',') + 1, NULL);
        char *p = line;
        for (int k = 0; k < 4; k++) p = strchr(p, ',') + 1;
        fin[n] = strtod(p, NULL);
        line = strchr(line, '\n') + 1;
    }
    ck_assert_int_eq(n, 200);
    for (int i = 0; i < n; i++) {
        int live = 0;
        for (int j = 0; j < n; j++) live += id[j] < id[i] && fin[j] > arr[i];
        ck_assert_msg(live <= 3, "request row %d arrived with %d others outstanding (--max-concurrency 4)", i, live);
    }
    free(csv);
}
END_TEST

static int32_t kv_blocks_for(const char *model, const char *tp, terr *e)
{
    serving_options o = {0};
    serving_options_defaults(&o);
    opts_set(serving_option_specs(), &o, "trace", "traces/samples/azure_conv_2023.csv", e);
    opts_set(serving_option_specs(), &o, "model", model, e);
    opts_set(serving_option_specs(), &o, "tensor-parallel-size", tp, e);
    serving_setup su;
    int rc = serving_resolve(&o, &su, e);
    serving_options_free(&o);
    return rc ? -1 : (int32_t)su.kv.num_blocks;
}

/* A step's time on a TP replica: the shard's roofline plus the all-reduces, as sim runs it. */
static int64_t step_ns_at(const char *model, int32_t tp, int32_t prefill, int32_t decodes)
{
    model_config full, shard;
    terr e = {{0}};
    ck_assert(model_config_load(&full, model, &e) == 0);
    ck_assert_msg(tp_shard_model(&full, tp, &shard, &e) == 0, "%s", e.msg);
    executor ex;
    ck_assert(sim_executor_create(&ex, &roofline_cost_model, &shard, gpu_find("h200"), NULL, &e) == 0);
    tp_comm c = {.tp = tp, .num_layers = full.num_layers, .hidden_size = full.hidden_size,
                 .link = tp_interconnect_for(gpu_find("h200"))};
    sim_executor_set_tp(&ex, &c);
    request reqs[65];
    batch b;
    batch_init(&b, 65);
    for (int i = 0; i <= decodes; i++) {
        memset(&reqs[i], 0, sizeof reqs[i]);
        request_reset(&reqs[i]);
        reqs[i].prompt_tokens = i == 0 ? prefill : 1000;
        reqs[i].num_computed_tokens = i == 0 ? 0 : 1000;
        reqs[i].num_output_tokens = i == 0 ? 0 : 1;
        if (i == 0 && prefill == 0) continue;
        batch_add(&b, &reqs[i], i == 0 ? prefill : 1);
    }
    step_result out;
    ck_assert(ex.ops->execute(ex.self, &b, &out, &e) == 0);
    ex.ops->destroy(ex.self);
    batch_free(&b);
    for (int i = 0; i <= decodes; i++) request_free_buffers(&reqs[i]);
    return out.duration_ns;
}

START_TEST(tensor_parallel_gives_more_kv_and_shorter_steps)
{
    static const char *const models[] = {"llama-2-70b", "llama-3-70b", "llama-3.1-70b"};
    for (size_t m = 0; m < 3; m++) {
        terr e = {{0}};
        /* 70B of bf16 weights (~140 GB) leave no KV room on one H200 at 0.9 */
        ck_assert_msg(kv_blocks_for(models[m], "1", &e) < 0, "%s fits on one H200", models[m]);
        ck_assert_msg(strstr(e.msg, "KV cache") && strstr(e.msg, "weights"), "%s: TP 1's error: %s", models[m], e.msg);
        int32_t b2 = kv_blocks_for(models[m], "2", &e);
        ck_assert_msg(b2 > 0, "%s TP 2: %s", models[m], e.msg);
        int32_t b4 = kv_blocks_for(models[m], "4", &e), b8 = kv_blocks_for(models[m], "8", &e);
        ck_assert_msg(b4 > 2 * b2 && b8 > b4, "%s KV blocks per replica: TP 2 %d, TP 4 %d, TP 8 %d", models[m], b2, b4, b8);
        for (int shape = 0; shape < 3; shape++) {
            int32_t prefill = shape == 1 ? 0 : 2048, decodes = shape == 0 ? 0 : 64;
            int64_t t1 = step_ns_at(models[m], 1, prefill, decodes), t2 = step_ns_at(models[m], 2, prefill, decodes);
            int64_t t4 = step_ns_at(models[m], 4, prefill, decodes);
            ck_assert_msg(t2 < t1 && t4 < t2, "%s step (%d prefill, %d decodes): TP 1 %lld ns, TP 2 %lld, TP 4 %lld",
                          models[m], prefill, decodes, (long long)t1, (long long)t2, (long long)t4);
        }
    }
}
END_TEST

static void expect_refused(const char *flag_in_msg, const char *const *extra)
{
    const char *argv[32] = {"tandem", "sim", "--trace", "traces/samples/azure_conv_2023.csv", "--max-requests", "10", "--quiet"};
    int n = 7;
    for (int i = 0; extra[i]; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    cli_result r = run_cliv((char *const *)argv);
    ck_assert_msg(r.exit_code == 2, "%s: exit %d, stderr %s", extra[0], r.exit_code, r.err);
    ck_assert_msg(strstr(r.err, flag_in_msg), "%s: stderr does not say %s: %s", extra[0], flag_in_msg, r.err);
    cli_result_free(&r);
}

START_TEST(bad_cluster_flags_name_the_flag)
{
    expect_refused("--num-replicas", (const char *[]){"--num-replicas", "0", NULL});
    expect_refused("--router", (const char *[]){"--num-replicas", "2", "--router", "nearest", NULL});
    expect_refused("prefix-affinity", (const char *[]){"--num-replicas", "2", "--router", "nearest", NULL});
    expect_refused("--tensor-parallel-size", (const char *[]){"--tensor-parallel-size", "3", NULL});
    expect_refused("--max-concurrency", (const char *[]){"--max-concurrency", "-1", NULL});
    expect_refused("--router-load-cap", (const char *[]){"--router-load-cap", "-2", NULL});
    cli_result r = run_cli("run", "--trace", "traces/samples/azure_conv_2023.csv", "--model", "synthetic:tiny-llama2",
                           "--backend", "cpu", "--max-model-len", "128", "--num-replicas", "2", "--quiet", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--num-replicas"), "run --num-replicas 2: exit %d, %s", r.exit_code,
                  r.err);
    cli_result_free(&r);
}
END_TEST

START_TEST(trace_stats_suggests_replicas_and_tensor_parallelism)
{
    /* one H200 cannot hold a 70B model: the error says how to split it */
    cli_result r = run_cli("trace", "stats", "traces/samples/mooncake_conversation_2k.jsonl", "--model", "llama-3-70b", NULL);
    ck_assert_msg(r.exit_code == 2 && strstr(r.err, "--tensor-parallel-size 2"), "70B on one GPU: exit %d, %s",
                  r.exit_code, r.err);
    cli_result_free(&r);
    char json[4300];
    snprintf(json, sizeof json, "%s/stats.json", dir);
    r = run_cli("trace", "stats", "traces/samples/mooncake_conversation_2k.jsonl", "--model", "llama-3-70b",
                "--tensor-parallel-size", "4", "--json", json, NULL);
    ck_assert_msg(r.exit_code == 0, "TP 4: %s", r.err);
    ck_assert_msg(strstr(r.out, "--tensor-parallel-size 4") && strstr(r.out, "--num-replicas"),
                  "the suggested command lacks the TP size or the replica count:\n%s", r.out);
    cli_result_free(&r);
    json_t *j = load_json(dir, "stats.json");
    json_t *sug = json_object_get(j, "suggestions");
    int64_t lo = json_integer_value(json_object_get(sug, "num_replicas_min")),
            n = json_integer_value(json_object_get(sug, "num_replicas")),
            peak = json_integer_value(json_object_get(sug, "num_replicas_peak_bin"));
    ck_assert_msg(lo >= 1 && n >= lo && peak >= n, "replica suggestions out of order: min %lld, suggested %lld, peak %lld",
                  (long long)lo, (long long)n, (long long)peak);
    json_decref(j);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("cluster");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, one_replica_in_the_cluster_loop_matches_the_single_loop);
    tcase_add_test(tc, every_request_ends_once_on_one_replica);
    tcase_add_test(tc, closed_loop_holds_arrivals_until_a_request_ends);
    tcase_add_test(tc, tensor_parallel_gives_more_kv_and_shorter_steps);
    tcase_add_test(tc, bad_cluster_flags_name_the_flag);
    tcase_add_test(tc, trace_stats_suggests_replicas_and_tensor_parallelism);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
