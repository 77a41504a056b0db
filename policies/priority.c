/*
 * priority.c: priority scheduling with preemption, policy `priority`.
 *
 * Requests carry a priority (lower value = more important, vLLM's convention; ties by
 * arrival). The step is vLLM V1's (policies/cb.c) with:
 *   - the waiting queue ordered by (priority, arrival), preempted requests included;
 *   - when a running request cannot get KV blocks, the victim is the least important running
 *     request (largest (priority, arrival)), as vLLM V1 does with --scheduling-policy priority;
 *   - and, unlike vLLM, an admission that cannot get KV blocks or finds max_num_seqs running
 *     preempts running requests of strictly lower importance, least important first, until it
 *     fits. vLLM V1 never lets a waiting request displace a running one (vLLM issue #40004),
 *     so an important request arriving at a full server waits for others to finish; here it
 *     does not. A displacement happens only if preempting every less important request would
 *     free enough blocks, so no work is thrown away for nothing. It works with chunked prefill
 *     on or off, and with either preemption mode.
 * Victims go back to the waiting queue in priority order, so they resume before less
 * important requests and after more important ones.
 */
#include "cb.h"
#include "policies.h"

static bool less_important(const request *r, const request *cand) { return r->priority > cand->priority; }

static request *least_important(cb_state *s, request *r)
{
    (void)r;
    return cb_running_max(s, req_cmp_priority);
}

static request *displace(cb_state *s, const request *cand, int32_t need_blocks)
{
    return cb_displace_least_important(s, cand, need_blocks, req_cmp_priority, less_important);
}

static const cb_variant priority_variant = {
    .wait_push = cb_heap_push,
    .wait_requeue = cb_heap_requeue,
    .wait_peek = cb_heap_peek,
    .wait_remove = cb_heap_remove,
    .victim = least_important,
    .displace = displace,
};

static void *priority_create(sched_env *env) { return cb_create(env, &priority_variant, req_cmp_priority); }

const policy_ops policy_priority =
    CB_POLICY_OPS("priority",
                  "priority order (lower = more important); important arrivals preempt less important running requests",
                  priority_create, cb_destroy);
