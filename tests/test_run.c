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
#include <gsl/gsl_rng.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "core/serve.h"
#include "engine/engine.h"
#include "engine/engine_executor.h"
#include "policies/policies.h"
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

/* `run` on the CPU engine and `sim` under the same flags give the same schedule (value NULL: a
 * flag without one). */
static void same_schedule(const char *name, const char *flag, const char *value, const char *must_have)
{
    char run_out[4300], sim_out[4300];
    snprintf(run_out, sizeof run_out, "%s/run-%s", dir, name);
    snprintf(sim_out, sizeof sim_out, "%s/sim-%s", dir, name);
    cli_result r = run_cli("run", COMMON, "--backend", "cpu", "--max-num-batched-tokens", "64",
                           "--num-gpu-blocks-override", "40", "--out", run_out, flag, value, NULL);
    ck_assert_msg(r.exit_code == 0, "run %s: %s", name, r.err);
    cli_result_free(&r);
    r = run_cli("sim", COMMON, "--max-num-batched-tokens", "64", "--num-gpu-blocks-override", "40", "--out", sim_out,
                flag, value, NULL);
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
    /* kernel time is the CUDA engine's: the CPU reference has no kernels, so no columns, no keys */
    snprintf(path, sizeof path, "%s/summary.json", run_out);
    js = slurp(path, NULL);
    ck_assert_msg(!strstr(js, "kernel_us") && !strstr(js, "kernel_busy") && strstr(js, "\"kernel_trace\": false"),
                  "a CPU run's summary.json claims a kernel trace:\n%s", js);
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
    /* the closed loop (vllm bench serve --max-concurrency): 2 outstanding, the rest let in as
     * requests end, the same on the engine as in the simulator */
    same_schedule("closed", "--max-concurrency", "2", "decode_tokens");
    /* scheduling ahead: the engine applies a step before it runs and feeds the next its sampled
     * tokens on the device; the simulator prices each step when the loop collects it */
    same_schedule("async", "--async-scheduling", NULL, "num_preemptions");
    /* prefix caching indexes a block by its token ids only once the step that sampled them ended */
    same_schedule("async-prefix", "--async-scheduling", "--enable-prefix-caching", "num_preemptions");
    char path[4400];
    snprintf(path, sizeof path, "%s/run-closed/requests.csv", dir);
    char *csv = slurp(path, NULL);
    ck_assert_msg(csv, "no %s", path);
    double arr[64], fin[64];
    int n = 0, held = 0;
    for (char *line = strchr(csv, '\n') + 1; *line && n < 64; n++) {
        arr[n] = strtod(strchr(line, ',') + 1, NULL);
        char *p = line;
        for (int k = 0; k < 4; k++) p = strchr(p, ',') + 1;
        fin[n] = strtod(p, NULL);
        held += arr[n] > 0;
        line = strchr(line, '\n') + 1;
    }
    ck_assert_int_eq(n, 12);
    ck_assert_msg(held >= 9, "only %d of 12 requests were held by --max-concurrency 2", held);
    for (int i = 0; i < n; i++) {
        int live = 0;
        for (int j = 0; j < n; j++) live += j != i && arr[j] <= arr[i] && fin[j] > arr[i];
        ck_assert_msg(live <= 1, "a request arrived with %d others outstanding (--max-concurrency 2)", live);
    }
    free(csv);
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

/* Greedy tokens of a CPU engine run with extra flags (value NULL: a flag without one; flag2 too). */
static char *tokens_of(const char *name, const char *batched, const char *blocks, const char *flag, const char *value,
                       const char *flag2)
{
    char out[4300];
    snprintf(out, sizeof out, "%s/tok-%s", dir, name);
    cli_result r = run_cli("run", COMMON, "--backend", "cpu", "--tokens", "--max-num-batched-tokens", batched,
                           "--num-gpu-blocks-override", blocks, "--out", out, flag, value, flag2, NULL);
    ck_assert_msg(r.exit_code == 0, "%s: %s", name, r.err);
    cli_result_free(&r);
    return sorted_tokens(out);
}

START_TEST(preemption_chunking_and_padding_keep_greedy_tokens)
{
    /* roomy: every request runs start to end; tight: 40 blocks of 4 tokens and 64-token steps,
     * so chunked prefills and preemptions, by recompute or by swapping through host memory;
     * static batching adds padding rows beside the real ones; scheduling ahead feeds tokens
     * not yet read back */
    char *roomy = tokens_of("roomy", "512", "400", "--preemption-mode", "recompute", NULL);
    int lines = 0;
    for (char *c = roomy; *c; c++) lines += *c == '\n';
    ck_assert_int_eq(lines, 13); /* the header and 12 requests */
    const char *variants[][4] = {
        {"recompute", "--preemption-mode", "recompute", NULL},
        {"swap", "--preemption-mode", "swap", NULL},
        {"static", "--scheduling-policy", "static", NULL},
        /* scheduling ahead: each decode's last token reaches it on the device */
        {"async-recompute", "--preemption-mode", "recompute", "--async-scheduling"},
        {"async-swap", "--preemption-mode", "swap", "--async-scheduling"},
    };
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        char *t = tokens_of(variants[i][0], "64", "40", variants[i][1], variants[i][2], variants[i][3]);
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

/* The property test of test_policies.c (random traces x configurations x policies, the
 * invariants checked after every step by this TANDEM_CHECKS build: KV conserved, every request
 * ends once, no livelock) with the CPU engine as the executor: real forward passes, measured
 * step times, sampled tokens. Every continuous policy, recompute preemption, prefix caching on
 * and off, scheduling ahead or not (swap and static batching have their own checks above). */
START_TEST(invariants_hold_on_the_cpu_engine)
{
    const policy_ops *all[] = {&policy_vllm, &policy_vllm_v0, &policy_priority, &policy_sarathi,
                               &policy_sjf,  &policy_srpt,    &policy_fair,     &policy_orca};
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 77);
    int64_t total_preemptions = 0;
    for (int trial = 0; trial < 120; trial++) {
        const policy_ops *pol = all[trial % (int)(sizeof all / sizeof all[0])];
        sched_config cfg = {
            .max_num_seqs = 1 + (int32_t)gsl_rng_uniform_int(rng, 6),
            .max_model_len = 32 + 16 * (int32_t)gsl_rng_uniform_int(rng, 3),
            .block_size = 1 << gsl_rng_uniform_int(rng, 4),
            .enable_chunked_prefill = gsl_rng_uniform(rng) < 0.7,
            .long_prefill_token_threshold = gsl_rng_uniform(rng) < 0.3 ? 1 + (int32_t)gsl_rng_uniform_int(rng, 16) : 0,
            .reserve_full_isl = gsl_rng_uniform(rng) < 0.5,
            .preemption_mode = PREEMPT_RECOMPUTE,
            .enable_prefix_caching = gsl_rng_uniform(rng) < 0.4,
        };
        cfg.max_num_batched_tokens = cfg.max_num_seqs + (int32_t)gsl_rng_uniform_int(rng, 48);
        if (!cfg.enable_chunked_prefill && cfg.max_num_batched_tokens < cfg.max_model_len)
            cfg.max_num_batched_tokens = cfg.max_model_len;
        policy_knobs knobs = {0};
        opts_defaults(policy_knob_specs(), &knobs);
        terr e = {{0}};
        ck_assert(opts_set(policy_knob_specs(), &knobs, "chunk-size", "8", &e) == 0 &&
                  opts_set(policy_knob_specs(), &knobs, "length-predictor-error", trial % 2 ? "0.5" : "0", &e) == 0);
        int32_t min_blocks = (cfg.max_model_len + cfg.block_size - 1) / cfg.block_size;
        serve_config sc = {.sched = cfg, .policy = pol, .policy_knobs = policy_knobs_of(pol, &knobs),
                           .num_gpu_blocks = min_blocks + (int32_t)gsl_rng_uniform_int(rng, (uint32_t)min_blocks * 2),
                           .seed = (uint64_t)trial, .max_steps = 100000,
                           /* every other round of the policies schedules ahead: pending ids */
                           .async_scheduling = trial / (int)(sizeof all / sizeof all[0]) % 2};
        engine_opts eo;
        engine_opts_default(&eo);
        eo.model = "synthetic:tiny-llama2";
        eo.backend = "cpu";
        eo.block_size = cfg.block_size;
        eo.num_blocks = sc.num_gpu_blocks;
        eo.max_tokens = cfg.max_num_batched_tokens;
        eo.max_seqs = cfg.max_num_seqs;
        eo.max_model_len = cfg.max_model_len;
        engine eng;
        ck_assert_msg(engine_open(&eng, &eo, &e) == 0, "trial %d: %s", trial, e.msg);
        sc.model = &eng.mc;
        executor ex;
        ck_assert_msg(engine_executor_create(&ex, &eng, 0, 1, (uint64_t)trial, &e) == 0, "%s", e.msg);
        int n = 1 + (int)gsl_rng_uniform_int(rng, 12);
        arrival arr[12];
        uint64_t hashes[12][2];
        int64_t t = 0;
        for (int i = 0; i < n; i++) {
            t += (int64_t)(gsl_rng_uniform(rng) * 2e6);
            int32_t prompt = 1 + (int32_t)gsl_rng_uniform_int(rng, (uint32_t)cfg.max_model_len + 8);
            arr[i] = (arrival){.arrival_ns = t, .prompt_tokens = prompt,
                               .output_tokens = 1 + (int32_t)gsl_rng_uniform_int(rng, 24),
                               .priority = (int32_t)gsl_rng_uniform_int(rng, 3),
                               .client_id = (int32_t)gsl_rng_uniform_int(rng, 3)};
            if (gsl_rng_uniform(rng) < 0.5) { /* shared prefixes */
                hashes[i][0] = gsl_rng_uniform_int(rng, 2);
                hashes[i][1] = 10 + gsl_rng_uniform_int(rng, 2);
                arr[i].hashes = hashes[i];
                arr[i].num_hashes = 1 + (prompt > 512);
            }
        }
        array_source as;
        tclock clock;
        tclock_init_sim(&clock);
        metrics *m;
        metrics_options mo = {0};
        ck_assert(metrics_open(&m, &mo, &e) == 0);
        serve_result res;
        int rc = serve_run(&sc, array_source_make(&as, arr, n), ex, &clock, m, NULL, &res, &e);
        ck_assert_msg(rc == 0, "trial %d (%s): %s", trial, pol->name, e.msg);
        metrics_summary sum;
        ck_assert(metrics_finish(m, NULL, &sum, &e) == 0);
        metrics_free(m);
        ck_assert_msg(res.num_finished + res.num_rejected == n, "trial %d (%s): %d requests, %lld finished + %lld rejected",
                      trial, pol->name, n, (long long)res.num_finished, (long long)res.num_rejected);
        ck_assert_msg(res.kv_blocks_leaked == 0, "trial %d (%s): %d blocks leaked", trial, pol->name, res.kv_blocks_leaked);
        ck_assert_msg(sum.rejected_by_reason[REJECT_UNSCHEDULABLE] == 0, "trial %d (%s): requests stranded", trial,
                      pol->name);
        total_preemptions += sum.num_preemptions;
        ex.ops->destroy(ex.self);
        engine_close(&eng);
        opts_free(policy_knob_specs(), &knobs);
    }
    ck_assert_msg(total_preemptions > 20, "only %lld preemptions in the engine trials", (long long)total_preemptions);
    gsl_rng_free(rng);
}
END_TEST

/* The engine's executor fills every field of a step's result, whatever the caller's struct held:
 * without the kernel trace it reports no kernel times (`tandem profile` once read a stack
 * struct's garbage count as kernel records and crashed on the GPU). */
START_TEST(engine_executor_fills_the_whole_result)
{
    engine_opts eo;
    engine_opts_default(&eo);
    eo.model = "synthetic:tiny-llama2";
    eo.backend = "cpu";
    eo.num_blocks = 64;
    eo.max_tokens = 64, eo.max_seqs = 4, eo.max_model_len = 128;
    engine eng;
    terr e = {{0}};
    ck_assert_msg(engine_open(&eng, &eo, &e) == 0, "%s", e.msg);
    executor ex;
    ck_assert_msg(engine_executor_create(&ex, &eng, 0, 1, 7, &e) == 0, "%s", e.msg);
    kv_manager kv;
    ck_assert(kv_init(&kv, 64, eng.opts.block_size, false) == 0);
    request r[2] = {0};
    batch b;
    batch_init(&b, 2);
    for (int i = 0; i < 2; i++) { /* a prefill of 20 tokens, then a decode at 20 */
        request_reset(&r[i]);
        r[i].id = i, r[i].prompt_tokens = 20, r[i].max_output_tokens = 8;
        r[i].num_computed_tokens = i ? 20 : 0, r[i].num_output_tokens = i;
        ck_assert(kv_allocate_slots(&kv, &r[i], 21));
        batch_add(&b, &r[i], i ? 1 : 20);
    }
    for (int pass = 0; pass < 2; pass++) {
        step_result out;
        memset(&out, 0xa5, sizeof out);
        ck_assert_msg(ex.ops->execute(ex.self, &b, &out, &e) == 0, "%s", e.msg);
        ck_assert_msg(out.kernel_times == NULL && out.num_kernel_times == 0, "untraced step: %d kernel times",
                      out.num_kernel_times);
        ck_assert_msg(out.duration_ns > 0 && out.host_ns > 0 && out.host_ns <= out.duration_ns,
                      "step %lld ns, host %lld ns", (long long)out.duration_ns, (long long)out.host_ns);
        ck_assert_msg(out.sampled != NULL, "the engine sampled no tokens");
        batch_clear(&b);
        if (pass == 0) batch_add(&b, &r[1], 1); /* then a decode alone */
    }
    for (int i = 0; i < 2; i++) kv_free_request(&kv, &r[i]), request_free_buffers(&r[i]);
    batch_free(&b);
    kv_destroy(&kv);
    ex.ops->destroy(ex.self);
    engine_close(&eng);
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
    tcase_add_test(tc, preemption_chunking_and_padding_keep_greedy_tokens);
    tcase_add_test(tc, engine_refuses_what_it_cannot_run);
    tcase_add_test(tc, invariants_hold_on_the_cpu_engine);
    tcase_add_test(tc, engine_executor_fills_the_whole_result);
    tcase_add_test(tc, run_shows_header_progress_and_goodput);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
