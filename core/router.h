/*
 * router.h: the router interface: which replica of a cluster serves an arriving request.
 *
 * With --num-replicas N the serving loop (serve.c) runs N replicas, each with its own block
 * manager, queues and policy instance. Each arrival is routed once, at its arrival time, to one
 * replica; it then lives and ends there (no migration). A router sees what a real front end can
 * see: per replica, the requests it has outstanding, its KV usage and the prompt tokens it has
 * not yet prefilled, kept current by the loop; and the request itself (length, prefix hashes).
 *
 * Routers are tables of function pointers with opaque state, registered by name in
 * policies/routers/registry.c (`--router NAME`). Every random draw comes from env->rng (seeded
 * from --seed), so a run is deterministic.
 */
#ifndef TANDEM_ROUTER_H
#define TANDEM_ROUTER_H

#include <gsl/gsl_rng.h>
#include <stdint.h>

#include "request.h"

/* What the loop keeps current about one replica, for routers. */
typedef struct replica_load {
    int32_t outstanding;        /* routed here and not yet ended (queued, running, preempted) */
    int32_t kv_blocks_used;     /* GPU KV blocks held (or cached and pinned) now */
    int32_t kv_blocks_total;
    int64_t pending_prefill_tokens; /* prompt tokens routed here whose first token has not come */
} replica_load;

typedef struct router_env {
    int32_t num_replicas;
    const replica_load *load;   /* (num_replicas) current at every route() call */
    int32_t block_size;         /* tokens per KV block */
    gsl_rng *rng;               /* seeded; a router's only source of randomness */
    double load_cap;            /* --router-load-cap: prefix affinity's cap (router.c's use) */
} router_env;

typedef struct router_ops {
    const char *name;
    const char *summary;        /* one line, for --help and the list of valid names */
    void *(*create)(const router_env *env);
    void (*destroy)(void *self);
    /* The replica (0 .. num_replicas-1) that serves r, which has arrived at now_ns. */
    int32_t (*route)(void *self, const request *r, int64_t now_ns);
} router_ops;

/* The replica with the fewest outstanding requests, lowest index on ties: the fallback of the
 * load-aware routers. */
static inline int32_t router_fewest_outstanding(const router_env *env)
{
    int32_t best = 0;
    for (int32_t i = 1; i < env->num_replicas; i++)
        if (env->load[i].outstanding < env->load[best].outstanding) best = i;
    return best;
}

#endif
