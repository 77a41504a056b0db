/*
 * run_cmd.c: `tandem run`, a trace served by the real engine under the same serving loop and
 * policy `tandem sim` uses: the executor is the engine (engine/engine_executor.h) and time is
 * the wall clock. It takes every sim option (the ones that make no sense for a real engine,
 * like --cost-model, are left out) plus the engine's, and writes the same outputs, so a
 * simulated and a measured run of one configuration compare file for file.
 *
 * KV blocks: on the GPU, as many as the memory accounting of `sim` gives (or
 * --num-gpu-blocks-override); on the CPU backend, enough for max_num_seqs sequences of
 * max_model_len unless overridden. Not supported on the engine (yet): swap preemption and the
 * static policy's padding rows; both are refused before anything runs.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/serving.h"
#include "engine/engine_executor.h"

typedef struct run_options {
    serving_options serving;
    char *backend;
    int64_t weight_seed;
    double temperature, top_p;
    bool cuda_graphs;
} run_options;

#define O(f) offsetof(run_options, f)
static const opt_spec engine_specs[] = {
    {"gpu", OPT_STR, O(serving.gpu), "h200", "GPU whose memory sizes the KV cache (cuda backend; listed above)"},
    {"backend", OPT_STR, O(backend), "cuda", "engine backend: cuda or cpu"},
    {"weight-seed", OPT_I64, O(weight_seed), "0", "seed of synthetic weights (--model synthetic:NAME)"},
    {"temperature", OPT_F64, O(temperature), "0", "sampling temperature (0: greedy)"},
    {"top-p", OPT_F64, O(top_p), "1", "nucleus sampling"},
    {"cuda-graphs", OPT_BOOL, O(cuda_graphs), "true", "replay decode steps from CUDA graphs"},
    OPT_END,
};
#undef O

/* The serving table minus what only a cost model uses, plus the engine's options. */
static const opt_spec *run_option_specs(void)
{
    static opt_spec *table;
    static size_t n;
    static const char *const skip[] = {"cost-model", "gpu", NULL};
    if (!table) {
        opts_join(&table, &n, serving_option_specs(), offsetof(run_options, serving), skip);
        opts_join(&table, &n, engine_specs, 0, NULL);
    }
    return table;
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
    executor ex = {0};
    if (rc == 1) {
        code = 0;
        goto done;
    }
    serving_setup su;
    if (rc || serving_resolve(&o.serving, &su, &e)) goto fail;
    if (su.sched.preemption_mode == PREEMPT_SWAP) {
        terr_set(&e, "--preemption-mode swap: the engine cannot swap KV blocks to host memory yet");
        goto fail;
    }
    if (strcmp(su.policy->name, "static") == 0) {
        terr_set(&e, "--scheduling-policy static pads batches, which the engine does not run; simulate it");
        goto fail;
    }
    engine_opts eo;
    engine_opts_default(&eo);
    eo.model = o.serving.model;
    eo.backend = o.backend;
    eo.weight_seed = (uint64_t)o.weight_seed;
    eo.block_size = su.sched.block_size;
    eo.max_tokens = su.sched.max_num_batched_tokens;
    eo.max_seqs = su.sched.max_num_seqs;
    eo.max_model_len = su.sched.max_model_len;
    eo.cuda_graphs = o.cuda_graphs;
    /* the GPU gets what vLLM's memory accounting gives; the CPU reference what the batch needs */
    bool cpu = strcmp(o.backend, "cpu") == 0;
    eo.num_blocks = o.serving.num_gpu_blocks_override ? (int32_t)o.serving.num_gpu_blocks_override
                    : cpu                         ? 0
                                                  : (int32_t)su.kv.num_blocks;
    int erc = engine_open(&eng, &eo, &e);
    if (erc) {
        code = erc == ENGINE_ERR_DEVICE ? 1 : 2;
        goto fail;
    }
    opened = true;
    su.kv.num_blocks = eng.opts.num_blocks;
    if (engine_executor_create(&ex, &eng, o.temperature, o.top_p, (uint64_t)o.serving.seed, &e)) goto fail;
    tclock clock;
    tclock_init_wall(&clock);
    metrics_summary sum;
    code = serving_replay(&o.serving, &su, ex, &clock, &sum, &e);
    if (code) goto fail;
    if (!o.serving.quiet) {
        char what[96];
        snprintf(what, sizeof what, "measured, %s engine", eng.ops->name);
        metrics_print_summary(&sum, what, stdout);
    }
    goto done;
fail:
    fprintf(stderr, "tandem run: %s\n", e.msg);
done:
    if (ex.ops) ex.ops->destroy(ex.self);
    if (opened) engine_close(&eng);
    opts_free(specs, &o);
    serving_options_free(&o.serving);
    return code;
}
