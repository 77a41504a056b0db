/*
 * serve.h: the serving loop, the one piece of control flow both backends share.
 *
 *   loop:
 *     admit every arrival whose time has come (reject on arrival what can never run);
 *     if nothing is live: wait for the next arrival (or stop at the end of the trace);
 *     ask the policy for a batch; if it is empty, wait for the next arrival;
 *     hand the batch to the executor, which says how long the step took; advance the clock;
 *     apply the results: computed tokens, sampled tokens (TTFT, ITL), finished requests
 *     (KV freed, row written), prefix-cache blocks registered;
 *     record the step.
 *
 * Time comes from the clock the loop is given (clock.h), so the same loop replays a trace in
 * simulated time over the cost model or in real time on the GPU. For a given input, config and
 * seed the run is deterministic.
 *
 * A cluster (num_replicas > 1) runs the same loop per replica, each
 * with its own block manager, queues, policy instance and random stream, all on one executor
 * kind, in one discrete-event loop: the next event is the earliest of the next arrival and the
 * replicas' step ends (a heap of busy replicas by (end time, index), so ties break the same way
 * every run). An arrival is routed at its arrival time (core/router.h) into its replica's inbox;
 * a replica takes its inbox into its policy when it next schedules, after its running step's
 * results are applied and every arrival up to that instant is routed, exactly as the one-replica
 * loop admits arrivals between steps. So one replica run through the cluster loop produces the
 * same steps, rows and summary as the one-replica loop (tests/test_cluster.c checks it), which
 * stays the path a single replica takes, since it is the faster one. The cluster loop runs in
 * simulated time only: a real engine is one replica.
 *
 * max_concurrency > 0 replays a closed loop, as `vllm bench serve --max-concurrency`: at most
 * that many requests are outstanding; an arrival that finds them all taken waits until one
 * ends, and its arrival time (the start of its TTFT) is when it is sent. Both loops run it (a
 * request that arrives during a step is outstanding from its arrival, before the step's
 * finishes leave), so it runs on the engine too.
 *
 * Asynchronous scheduling (async_scheduling, vLLM's --async-scheduling) takes the host's
 * scheduling and the step's preparation off the device's critical path: once step N is handed
 * to the executor, the loop applies it at once (its tokens counted, its finished requests out of
 * the policy and their blocks free), schedules step N+1 and hands it over too, and only then
 * waits for N's results (its time, its tokens' ids and times). Nothing the scheduler decides
 * depends on the ids, only on how many tokens each request has; a decode's input token that N
 * samples reaches N+1 on the device (executor.h's submit); prefix caching indexes a block only
 * once the steps that sampled its tokens have ended. The cost: requests that arrive while N runs
 * are first scheduled in N+2, as in vLLM. The simulator replays the same order (its
 * executor prices a step when the loop would collect it), so sim and run stay comparable. One
 * replica only.
 *
 * Every request of the trace ends exactly once, finished or rejected with a reason, and is
 * counted: a request that can never run is rejected on arrival; if a policy ever leaves live
 * requests it will not schedule with no arrivals left, the loop rejects them as unschedulable
 * rather than hang.
 */
#ifndef TANDEM_SERVE_H
#define TANDEM_SERVE_H

#include <stdint.h>

#include "arrival.h"
#include "batch.h"
#include "clock.h"
#include "executor.h"
#include "metrics.h"
#include "model_config.h"
#include "policy.h"
#include "router.h"

typedef struct serve_config {
    sched_config sched;
    const policy_ops *policy;
    const void *policy_knobs; /* the policy's knobs struct (policy_ops.knobs); NULL: its defaults */
    int32_t num_gpu_blocks;
    int32_t num_host_blocks; /* swap space in blocks; 0 = none */
    uint64_t seed;
    int64_t max_steps;       /* 0 = no limit; a guard for tests and sweeps */
    const model_config *model; /* for each step's FLOP and byte counts (core/work.h); NULL: none */
    double peak_flops;       /* a replica's bf16 peak, for the GPU's heat (core/heat.h); 0: none */
    int32_t num_replicas;    /* replicas behind the router; 0 or 1: one */
    const router_ops *router; /* how arrivals are spread over replicas (NULL with one replica) */
    double router_load_cap;  /* router_env.load_cap */
    int64_t max_concurrency; /* > 0: at most this many requests outstanding (closed loop) */
    bool cluster_loop;       /* run one replica through the cluster loop (tests prove them equal) */
    /* Schedule step N+1 while step N runs (vLLM's --async-scheduling): see the top of the file.
     * One replica only. */
    bool async_scheduling;
} serve_config;

typedef struct serve_result {
    int64_t num_requests;
    int64_t num_finished;
    int64_t num_rejected;
    int64_t num_steps;
    int64_t end_ns;
    int32_t peak_live;       /* most requests in memory at once */
    int32_t kv_blocks_leaked; /* KV blocks in use after the run (must be 0) */
} serve_result;

/* Observes each step (tests record schedules with it). */
typedef struct serve_hooks {
    void (*on_step)(void *ud, int64_t step, const batch *b, int64_t start_ns, int64_t duration_ns);
    void *ud;
} serve_hooks;

/* Runs the trace to the end. Returns 0, or -1 with e set (a bad trace row, an executor error).
 * m may be NULL; hooks may be NULL. */
int serve_run(const serve_config *cfg, arrival_source src, executor ex, tclock *clock, metrics *m,
              const serve_hooks *hooks, serve_result *res, terr *e);

/* Why a request can never run under cfg with num_gpu_blocks, or REJECT_NONE. */
reject_reason serve_admission_check(const sched_config *cfg, int32_t num_gpu_blocks,
                                    int32_t prompt_tokens, int32_t output_tokens);

#endif
