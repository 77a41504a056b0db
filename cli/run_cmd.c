/*
 * run_cmd.c: `tandem run`, a trace served by the real engine under the same serving loop and
 * policy `tandem sim` uses: the executor is the engine (engine/engine_executor.h) and time is
 * the wall clock. It takes every sim option (the ones that make no sense for a real engine,
 * like --cost-model, are left out) plus the engine's, and writes the same outputs, so a
 * simulated and a measured run of one configuration compare file for file.
 *
 * KV blocks: on the GPU, as many as the memory accounting of `sim` gives (or
 * --num-gpu-blocks-override); on the CPU backend, enough for max_num_seqs sequences of
 * max_model_len unless overridden. Swap preemption copies blocks to a host pool of
 * --swap-space; the static policy's padding rows run as real work (engine_executor.c).
 */
#include <float.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/serving.h"
#include "engine/engine_executor.h"

typedef struct run_options {
    serving_options serving;
    engine_flags engine;
    int64_t repeat;
} run_options;

#define O(f) offsetof(run_options, f)
static const opt_spec run_own_specs[] = {
    {"repeat", OPT_I64, O(repeat), "1", "serve the trace N times (outputs in --out/1 .. N), for the run-to-run spread"},
    OPT_END,
};
#undef O

/* The serving table minus what only a cost model uses, plus the engine's options. */
static const opt_spec *run_option_specs(void)
{
    static opt_spec *table;
    static size_t n;
    /* the engine is one replica on one GPU: the cluster options are the simulator's */
    static const char *const skip[] = {"cost-model", "gpu", "num-replicas", "router", "router-load-cap",
                                       "tensor-parallel-size", NULL};
    if (!table) {
        opts_join(&table, &n, serving_option_specs(), offsetof(run_options, serving), skip);
        opts_join(&table, &n, engine_gpu_specs, offsetof(run_options, serving), NULL);
        opts_join(&table, &n, run_own_specs, 0, NULL);
        opts_join(&table, &n, engine_flag_specs, offsetof(run_options, engine), NULL);
    }
    return table;
}

/* The metrics a repeat's spread is reported for: name in spread.json, and where it is. */
#define SPREAD_METRICS(X)                                                                        \
    X("output_throughput", output_throughput) X("mean_ttft_ms", ttft.mean)                      \
        X("median_ttft_ms", ttft.median) X("p99_ttft_ms", ttft.p99) X("mean_tpot_ms", tpot.mean) \
            X("median_tpot_ms", tpot.median) X("p99_tpot_ms", tpot.p99) X("mean_itl_ms", itl.mean) \
                X("median_e2el_ms", e2el.median) X("p99_e2el_ms", e2el.p99)

/* OUT/spread.json: each metric's mean, min, max and (max - min) / mean over the repeats; and a
 * line each on stdout unless quiet. */
static int write_spread(const char *out, const metrics_summary *runs, int64_t n, bool quiet, terr *e)
{
    json_t *root = json_object(), *by_metric = json_object();
    json_object_set_new(root, "repeats", json_integer(n));
    if (!quiet) printf("run-to-run spread over %lld repeats: (max - min) / mean\n", (long long)n);
#define SPREAD(NAME, FIELD)                                                                         \
    {                                                                                               \
        double lo = runs[0].FIELD, hi = lo, sum = 0;                                                \
        for (int64_t i = 0; i < n; i++) {                                                           \
            double v = runs[i].FIELD;                                                               \
            lo = v < lo ? v : lo, hi = v > hi ? v : hi, sum += v;                                   \
        }                                                                                           \
        double mean = sum / (double)n, rel = mean != 0 ? (hi - lo) / mean : 0;                      \
        json_object_set_new(by_metric, NAME,                                                        \
                            json_pack("{s:f, s:f, s:f, s:f}", "mean", mean, "min", lo, "max", hi,  \
                                      "relative_spread", rel));                                     \
        if (!quiet) printf("  %-20s %12.3f .. %-12.3f %6.2f%%\n", NAME, lo, hi, 100 * rel);          \
    }
    SPREAD_METRICS(SPREAD)
#undef SPREAD
    json_object_set_new(root, "metrics", by_metric);
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/spread.json", out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_dump_file(root, tmp, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(root);
    if (rc || rename(tmp, path)) return terr_set(e, "%s: cannot write", path);
    return 0;
}

int run_main(int argc, char **argv)
{
    const opt_spec *specs = run_option_specs();
    run_options o = {0};
    serving_options_defaults(&o.serving); /* the options run leaves out keep their defaults */
    opts_defaults(specs, &o);
    terr e = {{0}};
    char *usage = serving_usage(
        "usage: tandem run --trace FILE --model DIR|synthetic:NAME [--backend cuda|cpu] [--out DIR] [options]\n\n"
        "Serves a trace on the real engine with the same serving loop and scheduling policy as\n"
        "`tandem sim`, in real time, and writes the same outputs (requests.csv, steps.csv,\n"
        "summary.json) with measured step times.");
    int code = 2, rc = opts_parse(specs, &o, argc, argv, serving_positional, usage, &e);
    free(usage);
    engine eng = {0};
    bool opened = false;
    metrics_summary *runs = NULL;
    char *out = o.serving.out ? xstrdup(o.serving.out) : NULL;
    if (rc == 1) {
        code = 0;
        goto done;
    }
    serving_setup su;
    char device[256];
    if (!rc) engine_flags_device(o.engine.backend, device, sizeof device);
    if (rc || engine_flags_pick_gpu(&o.engine, device, &o.serving, &e) || serving_resolve(&o.serving, &su, &e))
        goto fail;
    if (o.repeat < 1 || o.repeat > 1000) {
        terr_set(&e, "--repeat: %lld is not in [1, 1000]", (long long)o.repeat);
        goto fail;
    }
    if (o.repeat > 1 && !out) {
        terr_set(&e, "--repeat %lld needs --out DIR (each repeat writes DIR/1, DIR/2, ...)", (long long)o.repeat);
        goto fail;
    }
    /* before the engine opens (loading weights can take a while) */
    if (!(o.engine.temperature >= 0 && o.engine.temperature <= FLT_MAX)) {
        terr_set(&e, "--temperature: %g must be a finite number >= 0", o.engine.temperature);
        goto fail;
    }
    if (!(o.engine.top_p > 0 && o.engine.top_p <= 1)) {
        terr_set(&e, "--top-p: %g is not in (0, 1]", o.engine.top_p);
        goto fail;
    }
    if (o.serving.async_scheduling && o.engine.kernel_trace) {
        /* the trace attributes kernels to a step by windows from its submit to its end, which
         * overlap when a step is submitted before the last one ends */
        terr_set(&e, "--kernel-trace: not with --async-scheduling (a step's kernels are told apart by its "
                     "window on the host, and scheduling ahead overlaps them)");
        goto fail;
    }
    serving_warnings warn;
    if (serving_collect_warnings(&o.serving, &su, true, &warn, &e)) goto fail;
    if ((code = engine_flags_open(&o.engine, &o.serving, &su, &eng, &e))) goto fail;
    opened = true;
    if (!o.serving.quiet) serving_print_warnings(&warn, "run");
    if (!o.serving.quiet) serving_print_header(&o.serving, &su, eng.ops->name, stdout), fflush(stdout);
    o.serving.progress = !o.serving.quiet && isatty(2);
    code = 2;
    runs = xcalloc((size_t)o.repeat, sizeof *runs);
    for (int64_t k = 0; k < o.repeat; k++) {
        executor ex;
        if (engine_executor_create(&ex, &eng, o.engine.temperature, o.engine.top_p, (uint64_t)o.serving.seed, &e))
            goto fail;
        if (o.repeat > 1) {
            char dir[4200];
            snprintf(dir, sizeof dir, "%s/%lld", out, (long long)k + 1);
            free(o.serving.out);
            o.serving.out = xstrdup(dir);
        }
        tclock clock;
        tclock_init_wall(&clock);
        code = serving_replay(&o.serving, &su, ex, &clock, &runs[k], &e);
        ex.ops->destroy(ex.self);
        if (code) goto fail;
    }
    if (!o.serving.quiet) {
        char what[96];
        snprintf(what, sizeof what, "measured, %s engine", eng.ops->name);
        metrics_print_summary(&runs[o.repeat - 1], what, stdout);
        serving_print_goodput(&su, &runs[o.repeat - 1], stdout);
    }
    if (o.repeat > 1 && write_spread(out, runs, o.repeat, o.serving.quiet, &e)) {
        code = 1;
        goto fail;
    }
    goto done;
fail:
    fprintf(stderr, "tandem run: %s\n", e.msg);
done:
    free(runs);
    free(out);
    if (opened) engine_close(&eng);
    opts_free(specs, &o);
    serving_options_free(&o.serving);
    return code;
}
