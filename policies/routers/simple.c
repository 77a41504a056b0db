/*
 * simple.c: the stateless and nearly stateless routers, each a few lines.
 *
 *   round-robin         replica i mod N for the i-th arrival: what Kubernetes Services
 *                       (kube-proxy) and a plain NGINX upstream do, blind to load and content.
 *   random              a uniform draw per request (from the run's seed): the baseline of the
 *                       load-balancing literature (Mitzenmacher, "The Power of Two Choices in
 *                       Randomized Load Balancing", IEEE TPDS 2001).
 *   least-outstanding   the replica with the fewest requests routed and not yet ended:
 *                       NGINX's least_conn and Envoy's LEAST_REQUEST with full information;
 *                       vLLM's production-stack router's session-less default is of this kind.
 *   least-kv            the replica whose KV cache is least committed, counting the blocks it
 *                       holds plus the prompt tokens queued there and not yet prefilled (a
 *                       queued prompt will need its blocks): the KV-utilisation scorer of
 *                       llm-d's inference scheduler (Gateway API Inference Extension).
 *   power-of-two        two distinct replicas drawn at random, the one with fewer outstanding
 *                       requests wins (Mitzenmacher 2001): nearly least-outstanding's balance
 *                       without reading every replica's state, as Envoy's default
 *                       LEAST_REQUEST (choice_count 2) does.
 * Ties go to the lowest index, so every choice is deterministic for a given seed.
 */
#include <stdlib.h>

#include "core/util.h"
#include "policies/routers/routers.h"

typedef struct simple_router {
    router_env env;
    int64_t next; /* round-robin's counter */
} simple_router;

static void *simple_create(const router_env *env)
{
    simple_router *s = xcalloc(1, sizeof *s);
    s->env = *env;
    return s;
}

static void simple_destroy(void *self) { free(self); }

static int32_t rr_route(void *self, const request *r, int64_t now_ns)
{
    simple_router *s = self;
    return (int32_t)(s->next++ % s->env.num_replicas);
}

static int32_t random_route(void *self, const request *r, int64_t now_ns)
{
    simple_router *s = self;
    return (int32_t)gsl_rng_uniform_int(s->env.rng, (unsigned long)s->env.num_replicas);
}

static int32_t least_outstanding_route(void *self, const request *r, int64_t now_ns)
{
    simple_router *s = self;
    return router_fewest_outstanding(&s->env);
}

/* Committed KV of replica i as a fraction of its cache (may exceed 1 when a queue is long). */
static double kv_commitment(const router_env *env, int32_t i)
{
    const replica_load *l = &env->load[i];
    double slots = (double)l->kv_blocks_total * env->block_size;
    return ((double)l->kv_blocks_used * env->block_size + (double)l->pending_prefill_tokens) / slots;
}

static int32_t least_kv_route(void *self, const request *r, int64_t now_ns)
{
    simple_router *s = self;
    int32_t best = 0;
    double best_c = kv_commitment(&s->env, 0);
    for (int32_t i = 1; i < s->env.num_replicas; i++) {
        double c = kv_commitment(&s->env, i);
        if (c < best_c || (c == best_c && s->env.load[i].outstanding < s->env.load[best].outstanding))
            best = i, best_c = c;
    }
    return best;
}

static int32_t power_of_two_route(void *self, const request *r, int64_t now_ns)
{
    simple_router *s = self;
    int32_t n = s->env.num_replicas;
    if (n == 1) return 0;
    int32_t a = (int32_t)gsl_rng_uniform_int(s->env.rng, (unsigned long)n);
    int32_t b = (int32_t)gsl_rng_uniform_int(s->env.rng, (unsigned long)(n - 1));
    if (b >= a) b++; /* distinct */
    int32_t la = s->env.load[a].outstanding, lb = s->env.load[b].outstanding;
    return lb < la || (lb == la && b < a) ? b : a;
}

#define SIMPLE_ROUTER(NAME, FN, SUMMARY) \
    {.name = NAME, .summary = SUMMARY, .create = simple_create, .destroy = simple_destroy, .route = FN}

const router_ops router_round_robin = SIMPLE_ROUTER("round-robin", rr_route, "replica i mod N for the i-th arrival (kube-proxy, NGINX)");
const router_ops router_random = SIMPLE_ROUTER("random", random_route, "a uniform draw per request, seeded by --seed");
const router_ops router_least_outstanding =
    SIMPLE_ROUTER("least-outstanding", least_outstanding_route, "fewest requests outstanding (NGINX least_conn, Envoy LEAST_REQUEST)");
const router_ops router_least_kv =
    SIMPLE_ROUTER("least-kv", least_kv_route, "least KV committed: blocks held + queued prompt tokens (llm-d's KV scorer)");
const router_ops router_power_of_two =
    SIMPLE_ROUTER("power-of-two", power_of_two_route, "the less loaded of two random replicas (Mitzenmacher 2001, Envoy)");
