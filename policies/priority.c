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
    request *victim = cb_running_max(s, req_cmp_priority);
    if (!victim || !less_important(victim, cand)) return NULL;
    if (need_blocks > 0 && cb_blocks_held_if(s, cand, less_important) < need_blocks) return NULL;
    return victim;
}

static void heap_requeue(cb_state *s, request *r) { cb_heap_push(s, r); }

static const cb_variant priority_variant = {
    .wait_push = cb_heap_push,
    .wait_requeue = heap_requeue,
    .wait_peek = cb_heap_peek,
    .wait_remove = cb_heap_remove,
    .victim = least_important,
    .displace = displace,
};

static void *priority_create(sched_env *env) { return cb_create(env, &priority_variant, req_cmp_priority); }

const policy_ops policy_priority = {
    .name = "priority",
    .summary = "priority order (lower = more important); important arrivals preempt less important running requests",
    .create = priority_create,
    .destroy = cb_destroy,
    .add_request = cb_add_request,
    .schedule = cb_schedule,
    .remove_request = cb_remove_request,
    .step_done = cb_step_done,
    .num_running = cb_num_running,
    .num_waiting = cb_num_waiting,
};
