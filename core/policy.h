/*
 * policy.h: the scheduling-policy interface.
 *
 * A policy decides, each step, which requests run and how many tokens each computes, under the
 * budgets in sched_config, allocating KV blocks through the block manager and preempting when it
 * must. It owns its queues (requests link into them intrusively); the serving loop owns the
 * requests' lifetimes, applies a step's results and frees the KV of finished requests.
 *
 * Policies are tables of function pointers with opaque state, registered by name in
 * policies/registry.c. The same policy code drives the simulator and the real engine: nothing
 * here knows which executor runs the batch.
 */
#ifndef TANDEM_POLICY_H
#define TANDEM_POLICY_H

#include <gsl/gsl_rng.h>
#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "kv.h"
#include "options.h"
#include "request.h"

typedef enum preemption_mode { PREEMPT_RECOMPUTE, PREEMPT_SWAP } preemption_mode;

/* The scheduler's knobs that every policy reads, with vLLM's names. A policy's own knobs (sarathi's
 * chunk size, orca's reservation, ...) are its own: policy_ops.knobs. */
typedef struct sched_config {
    int32_t max_num_seqs;           /* running requests at most */
    int32_t max_num_batched_tokens; /* tokens computed per step at most */
    int32_t max_model_len;          /* prompt + output at most */
    int32_t block_size;             /* tokens per KV block */
    bool enable_chunked_prefill;
    int32_t long_prefill_token_threshold; /* > 0: cap on one request's tokens per step */
    bool reserve_full_isl;          /* admission needs blocks for the whole current sequence */
    preemption_mode preemption_mode;
    bool enable_prefix_caching;
} sched_config;

typedef struct sched_env sched_env;

/* What a policy can reach. The loop fills it before create() and sets now_ns each step. */
struct sched_env {
    const sched_config *cfg;
    kv_manager *kv;        /* GPU KV blocks */
    kv_manager *swap;      /* host swap blocks, or NULL when there is no swap space */
    gsl_rng *rng;          /* seeded; the only source of randomness a policy may use */
    const void *knobs;     /* the policy's own knobs (policy_ops.knobs' struct), or NULL if it has none */
    int64_t now_ns;        /* start of the step being scheduled */
    int64_t kv_tokens;     /* tokens whose KV is on the GPU, summed over requests (shared prefix
                              blocks count once per request): kept by the loop and sched.c */
    /* Ends r as rejected. The policy has already taken r out of its queues. */
    void (*reject)(sched_env *env, request *r, reject_reason why);
    void *loop;
};

typedef struct policy_ops {
    const char *name;
    const char *summary; /* one line, for --help and the list of valid names */
    /* The policy's own knobs: options whose offsets point into a struct of knobs_size bytes,
     * which create() finds at env->knobs. Policies with the same knobs share one table (sjf and
     * srpt), so a flag means one thing. NULL: none. knobs_check (optional) refuses bad values,
     * naming the flag. */
    const opt_spec *knobs;
    size_t knobs_size;
    int (*knobs_check)(const void *knobs, terr *e);
    void *(*create)(sched_env *env);
    void (*destroy)(void *self);
    /* A request arrived (already checked against max_model_len and KV capacity). Returns
     * REJECT_NONE if the policy accepts it, or why it never could run it. */
    reject_reason (*add_request)(void *self, request *r);
    /* Fills `out` (cleared by the caller) for the step starting at env->now_ns. */
    void (*schedule)(void *self, batch *out);
    /* r leaves the system (finished, or aborted by the loop): take it out of the queues. The
     * loop frees its KV blocks afterwards. */
    void (*remove_request)(void *self, request *r);
    /* Optional: the step was applied to its requests (r->num_computed_tokens advanced, emitted
     * tokens counted, finished requests already removed); under asynchronous scheduling it may
     * still be running, its token times not yet known. */
    void (*step_done)(void *self, const batch *b);
    int32_t (*num_running)(const void *self);
    int32_t (*num_waiting)(const void *self); /* waiting, preempted and swapped requests */
} policy_ops;

#endif
