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
#include "cli/sim_options.h"
#include "engine/engine_executor.h"

typedef struct run_options {
    sim_options sim; /* first: the sim table's offsets apply unchanged */
    char *backend;
    int64_t weight_seed;
    double temperature, top_p;
    bool cuda_graphs;
} run_options;

#define MAX_SPECS 96
static opt_spec run_specs[MAX_SPECS];

/* sim's table minus what only a cost model uses, plus the engine's options. */
static const opt_spec *run_option_specs(void)
{
    if (run_specs[0].name) return run_specs;
    static const char *const skip[] = {"cost-model", "gpu"};
    int n = 0;
    for (const opt_spec *s = sim_option_specs; s->name && n < MAX_SPECS - 8; s++) {
        bool keep = true;
        for (size_t k = 0; k < ARRAY_LEN(skip); k++) keep &= strcmp(s->name, skip[k]) != 0;
        if (keep) run_specs[n++] = *s;
    }
    run_specs[n++] = (opt_spec){"gpu", OPT_STR, offsetof(run_options, sim.gpu), "h200",
                                "GPU whose memory sizes the KV cache (cuda backend)"};
    run_specs[n++] = (opt_spec){"backend", OPT_STR, offsetof(run_options, backend), "cuda", "engine backend: cuda or cpu"};
    run_specs[n++] = (opt_spec){"weight-seed", OPT_I64, offsetof(run_options, weight_seed), "0",
                                "seed of synthetic weights (--model synthetic:NAME)"};
    run_specs[n++] = (opt_spec){"temperature", OPT_F64, offsetof(run_options, temperature), "0",
                                "sampling temperature (0: greedy)"};
    run_specs[n++] = (opt_spec){"top-p", OPT_F64, offsetof(run_options, top_p), "1", "nucleus sampling"};
    run_specs[n++] = (opt_spec){"cuda-graphs", OPT_BOOL, offsetof(run_options, cuda_graphs), "true",
                                "replay decode steps from CUDA graphs"};
    run_specs[n] = (opt_spec)OPT_END;
    return run_specs;
}

static const char *usage =
    "usage: tandem run --trace FILE --model DIR|synthetic:NAME [--backend cuda|cpu] [--out DIR] [options]\n\n"
    "Serves a trace on the real engine with the same serving loop and scheduling policy as\n"
    "`tandem sim`, in real time, and writes the same outputs (requests.csv, steps.csv,\n"
    "summary.json) with measured step times.";

int run_main(int argc, char **argv)
{
    const opt_spec *specs = run_option_specs();
    run_options o = {0};
    sim_options_defaults(&o.sim); /* the sim options run leaves out keep their defaults */
    opts_defaults(specs, &o);
    terr e = {{0}};
    int code = 2, rc = opts_parse(specs, &o, argc, argv, sim_positional, usage, &e);
    engine eng = {0};
    bool opened = false;
    executor ex = {0};
    if (rc == 1) {
        code = 0;
        goto done;
    }
    sim_setup su;
    if (rc || sim_resolve(&o.sim, &su, &e)) goto fail;
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
    eo.model = o.sim.model;
    eo.backend = o.backend;
    eo.weight_seed = (uint64_t)o.weight_seed;
    eo.block_size = su.sched.block_size;
    eo.max_tokens = su.sched.max_num_batched_tokens;
    eo.max_seqs = su.sched.max_num_seqs;
    eo.max_model_len = su.sched.max_model_len;
    eo.cuda_graphs = o.cuda_graphs;
    /* the GPU gets what vLLM's memory accounting gives; the CPU reference what the batch needs */
    bool cpu = strcmp(o.backend, "cpu") == 0;
    eo.num_blocks = o.sim.num_gpu_blocks_override ? (int32_t)o.sim.num_gpu_blocks_override
                    : cpu                         ? 0
                                                  : (int32_t)su.kv.num_blocks;
    int erc = engine_open(&eng, &eo, &e);
    if (erc) {
        code = erc == ENGINE_ERR_DEVICE ? 1 : 2;
        goto fail;
    }
    opened = true;
    su.kv.num_blocks = eng.opts.num_blocks;
    if (engine_executor_create(&ex, &eng, o.temperature, o.top_p, (uint64_t)o.sim.seed, &e)) goto fail;
    tclock clock;
    tclock_init_wall(&clock);
    metrics_summary sum;
    code = sim_replay(&o.sim, &su, ex, &clock, &sum, &e);
    if (code) goto fail;
    if (!o.sim.quiet) {
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
    sim_options_free(&o.sim);
    return code;
}
