/*
 * serving.h: a serving run's configuration, shared by `tandem sim`, `tandem run`, `tandem sweep`
 * and `trace stats`: the options, how they resolve into a checked setup (model, GPU, KV
 * capacity, policy and its knobs, budgets), and the replay of a trace through the serving loop
 * on any executor and clock.
 *
 * The option table (serving_option_specs) is the single list of serving flags: the CLI parses
 * it, --help prints it with defaults, summary.json records it, and `tandem sweep` sets its
 * entries by name. Scheduling policies bring their own knobs (policies/policies.h), joined into
 * the table. serving_resolve() applies vLLM's start-up rules and sizes the KV cache as vLLM
 * does; the simulator and the GPU engine both use its result, so a simulated and a measured run
 * of one configuration see the same cache.
 */
#ifndef TANDEM_SERVING_H
#define TANDEM_SERVING_H

#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/executor.h"
#include "core/metrics.h"
#include "core/model_config.h"
#include "core/options.h"
#include "core/policy.h"
#include "policies/policies.h"
#include "sim/costmodel.h"
#include "sim/kv_capacity.h"
#include "sim/tensor_parallel.h"
#include "policies/routers/routers.h"

typedef struct serving_options {
    char *trace, *out, *model, *gpu, *cost_model, *scheduling_policy, *preemption_mode, *goodput,
        *priority_classes, *router;
    int64_t num_replicas, tensor_parallel_size, max_concurrency;
    double router_load_cap;
    bool cluster_loop; /* not a flag: run one replica through the cluster loop (tests) */
    int64_t num_clients, max_num_seqs, max_num_batched_tokens, max_model_len, block_size, num_gpu_blocks_override,
        long_prefill_token_threshold, seed, max_requests, max_steps;
    double gpu_memory_utilization, swap_space, time_scale, request_rate, burstiness;
    bool enable_chunked_prefill, scheduler_reserve_full_isl, enable_prefix_caching, skip_bad_rows,
        requests, steps, tokens, quiet, force_profile, async_scheduling;
    bool progress; /* not a flag: a progress line on stderr (`run` sets it when stderr is a terminal) */
    policy_knobs knobs; /* every policy's own knobs (--chunk-size, ...) */
} serving_options;

/* The table: serving flags, then the policies' knobs. */
const opt_spec *serving_option_specs(void);

/* A command's usage text: head, then the policies, GPUs and cost models the flags can name
 * (malloc'd). */
char *serving_usage(const char *head);

void serving_options_defaults(serving_options *o);
void serving_options_free(serving_options *o);
/* Accepts vLLM-style `--goodput ttft:500 tpot:50` (values after the flag). */
int serving_positional(void *dst, const char *arg, terr *e);

typedef struct serving_setup {
    model_config model;
    model_config shard;           /* what one GPU of a replica holds (= model with TP 1): what the
                                     KV capacity and the cost model see (sim/tensor_parallel.h) */
    int32_t tensor_parallel;      /* GPUs per replica */
    const tp_interconnect *link;  /* the GPU row's all-reduce figures (TP > 1) */
    const router_ops *router;
    const gpu_spec *gpu;
    const cost_model_ops *cost_model;
    char cost_model_arg[4096];    /* ARG of --cost-model NAME:ARG, or what auto chose ("" for none) */
    const policy_ops *policy;
    const void *policy_knobs;     /* the policy's part of serving_options.knobs (NULL: none) */
    sched_config sched;
    kv_capacity kv;               /* num_blocks: what the run uses (override applied) */
    int32_t num_host_blocks;      /* swap space */
    double goodput_ttft_ms, goodput_tpot_ms, goodput_e2el_ms;
    int num_priority_classes;     /* > 0: priorities drawn on replay (--priority-classes) */
    double priority_cdf[8];       /* (num_priority_classes) cumulative fractions */
} serving_setup;

/* Model and GPU alone (a "synthetic:NAME" model has NAME's shape: all a cost model needs), with
 * --block-size and --max-model-len checked against them: what re-predicting a run's steps
 * needs (`tandem compare`). Errors name the flag. */
int serving_resolve_model_gpu(const serving_options *o, serving_setup *su, terr *e);
/* Model, GPU and KV capacity alone (what `trace stats` needs): checks those flags, resolves the
 * model and GPU, and sizes the KV cache for the budgets in o. Errors name the flag. */
int serving_resolve_capacity(const serving_options *o, serving_setup *su, terr *e);
/* Checks every option and resolves model, GPU, KV capacity and policy. Errors name the flag.
 * o must outlive su (su->policy_knobs points into it). */
int serving_resolve(const serving_options *o, serving_setup *su, terr *e);

/* The cost model `spec` names for su's model, GPU and block size: NAME, NAME:ARG, or auto (the
 * shipped profile of the model on the GPU when there is one, else the roofline). Sets
 * su->cost_model and su->cost_model_arg; -1 with e naming --cost-model. */
int serving_resolve_cost_model(const char *spec, serving_setup *su, terr *e);

/* Options that cannot affect this run's result (vLLM would take them silently): a priority
 * policy on a trace without priorities, fair share without clients, a seed nothing draws from,
 * another policy's knob, sarathi's token budget, ... One sentence each, naming the flag. */
#define SERVING_MAX_WARNINGS 8
typedef struct serving_warnings {
    int n;
    char msg[SERVING_MAX_WARNINGS][400];
} serving_warnings;
/* Fills w for o and su; opens the trace's header (errors as the replay's). executor_draws: the
 * executor uses the seed itself (the engine's sampling), so the seed always matters. */
int serving_collect_warnings(const serving_options *o, const serving_setup *su, bool executor_draws,
                             serving_warnings *w, terr *e);
/* "tandem CMD: warning: ..." on stderr, one line each. */
void serving_print_warnings(const serving_warnings *w, const char *cmd);
/* The trace options o asks for (time scale, limit, re-timing). */
struct trace_options;
void serving_trace_options(const serving_options *o, struct trace_options *to);
/* What a run is, in two lines: model, GPU, policy, trace and the options that shape it (for
 * `sim` and `run` before they start; `backend` NULL for the cost model). */
void serving_print_header(const serving_options *o, const serving_setup *su, const char *backend, FILE *f);
/* The goodput line, when SLOs were given: rate and share of requests meeting every SLO. */
void serving_print_goodput(const serving_setup *su, const metrics_summary *s, FILE *f);

/* Creates the setup's cost model once and drops it: a profile that cannot be read, fitted or
 * used for this model fails here (e names it), and the fit stays in the process
 * (sim/profile_model.c), so workers forked afterwards inherit it. 0 or -1. */
int serving_check_cost_model(const serving_options *o, const serving_setup *su, terr *e);
/* Replays the trace on the setup's cost model in simulated time (`tandem sim`, sweeps). Returns
 * 0, 2 on bad input (e says FILE:LINE: ...), 1 on output failure. */
int serving_simulate(const serving_options *o, const serving_setup *su, metrics_summary *out, terr *e);
/* Replays the trace through any executor and clock (`tandem run`: the engine, the wall clock),
 * writing the outputs as sim does. Returns as serving_simulate. */
int serving_replay(const serving_options *o, const serving_setup *su, executor ex, tclock *clock,
                   metrics_summary *out, terr *e);

#endif
