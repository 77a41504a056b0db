/*
 * sim_options.h: everything `tandem sim` can be told, and how a set of options becomes a run.
 *
 * The option table (sim_option_specs) is the single list of sim flags: the CLI parses it, --help
 * prints it with defaults, summary.json records it, and `tandem sweep` sets its entries by name.
 * sim_resolve() turns options into a checked setup (model, GPU, KV blocks, policy), with vLLM's
 * validation rules; sim_run() replays the trace. Both are reusable in-process (sweeps).
 */
#ifndef TANDEM_SIM_OPTIONS_H
#define TANDEM_SIM_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/options.h"
#include "core/clock.h"
#include "core/executor.h"
#include "core/metrics.h"
#include "core/model_config.h"
#include "core/policy.h"
#include "sim/costmodel.h"

typedef struct sim_options {
    char *trace, *out, *model, *gpu, *cost_model, *scheduling_policy, *preemption_mode,
        *orca_reserve, *goodput, *priority_classes;
    int64_t num_clients, max_num_seqs, max_num_batched_tokens, max_model_len, block_size, num_gpu_blocks_override,
        long_prefill_token_threshold, chunk_size, seed, max_requests, max_steps;
    double gpu_memory_utilization, swap_space, length_predictor_error, time_scale;
    bool enable_chunked_prefill, scheduler_reserve_full_isl, enable_prefix_caching, skip_bad_rows,
        requests, steps, tokens, quiet;
} sim_options;

extern const opt_spec sim_option_specs[];

void sim_options_defaults(sim_options *o);
void sim_options_free(sim_options *o);
/* Accepts vLLM-style `--goodput ttft:500 tpot:50` (values after the flag). */
int sim_positional(void *dst, const char *arg, terr *e);

typedef struct sim_setup {
    model_config model;
    const gpu_spec *gpu;
    const cost_model_ops *cost_model;
    const policy_ops *policy;
    sched_config sched;
    kv_capacity kv;           /* num_blocks: what the run uses (override applied) */
    int32_t num_host_blocks;  /* swap space */
    double goodput_ttft_ms, goodput_tpot_ms, goodput_e2el_ms;
    int num_priority_classes;     /* > 0: priorities drawn on replay (--priority-classes) */
    double priority_cdf[8];       /* (num_priority_classes) cumulative fractions */
} sim_setup;

/* Checks the options and resolves model, GPU, KV capacity, policy. Errors name the flag. */
int sim_resolve(const sim_options *o, sim_setup *su, terr *e);
void sim_setup_free(sim_setup *su);
/* Replays the trace on the cost model in simulated time. Returns 0, 2 on bad input (e says
 * FILE:LINE: ...), 1 on output failure. */
int sim_run(const sim_options *o, const sim_setup *su, metrics_summary *out, terr *e);
/* Replays the trace through any executor and clock (`tandem run`: the engine, the wall clock).
 * Writes the outputs as sim does. */
int sim_replay(const sim_options *o, const sim_setup *su, executor ex, tclock *clock, metrics_summary *out,
               terr *e);

#endif
