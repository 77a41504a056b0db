/*
 * vllm.c: vLLM V1's default scheduler (FCFS, one token budget per step), policy `vllm`.
 *
 * What it does each step, as vLLM V1's Scheduler.schedule() does with the FCFS policy:
 *
 * 1. Running requests first, in the order they were admitted. Each takes
 *      n = min(tokens left to compute, long_prefill_token_threshold if > 0,
 *              remaining budget, max_model_len - 1 - computed)
 *    and a request with n == 0 is skipped (not a stop). Its KV slots are allocated; when the
 *    blocks are not free, the request at the *tail* of the running list is preempted and the
 *    allocation retried. If the victim is the request itself, the running pass stops.
 *    Preemption (recompute by default, or swap with --preemption-mode swap) frees the victim's
 *    blocks and puts it at the *front* of the waiting queue, so it is readmitted first.
 * 2. Waiting requests are admitted only if nothing was preempted in this step, in FCFS order,
 *    while running < max_num_seqs and budget remains:
 *      - a request's tokens are its whole current sequence (its prompt, plus its output so far
 *        if it was preempted by recompute) minus any prefix-cache hit, capped by
 *        long_prefill_token_threshold;
 *      - chunked prefill on: cut to the remaining budget; off: a request that does not fit the
 *        remaining budget stops admission;
 *      - with reserve_full_isl (vLLM >= 0.19's default), blocks for the request's whole current
 *        sequence must be free even when only a chunk is scheduled; otherwise only the chunk's;
 *      - a request whose blocks cannot be allocated stops admission (head-of-line blocking).
 *    A swapped-out request is swapped back in, whole, before any new request is admitted (it is
 *    at the front of the queue), and it needs all its blocks back.
 * 3. The serving loop rejects on arrival what can never run (prompt >= max_model_len, or more KV
 *    than the whole cache); vLLM refuses such prompts at the API.
 *
 * Where it deliberately differs from vLLM: scheduling is synchronous (no async scheduling or
 * speculative decoding), and structured output, LoRA, encoder inputs and KV connectors do not
 * exist here.
 */
#include <stdlib.h>

#include "core/req_queue.h"
#include "core/sched.h"
#include "core/util.h"
#include "policies.h"

typedef struct vllm_state {
    sched_env *env;
    req_queue running; /* in admission order */
    req_queue waiting; /* FCFS; preempted requests go back to the front */
} vllm_state;

static void *vllm_create(sched_env *env)
{
    vllm_state *s = xcalloc(1, sizeof *s);
    s->env = env;
    return s;
}

static void vllm_destroy(void *self) { free(self); }

static reject_reason vllm_add(void *self, request *r)
{
    vllm_state *s = self;
    rq_push_back(&s->waiting, r);
    return REJECT_NONE;
}

static void vllm_remove(void *self, request *r)
{
    vllm_state *s = self;
    rq_remove(r->state == REQ_RUNNING ? &s->running : &s->waiting, r);
}

/* Schedules the running requests; returns the budget left, sets *preempted. */
static int64_t schedule_running(vllm_state *s, batch *b, int64_t budget, bool *preempted)
{
    const sched_config *cfg = s->env->cfg;
    request *r = s->running.head;
    while (r && budget > 0) {
        int64_t n = request_num_tokens(r) - r->num_computed_tokens;
        if (cfg->long_prefill_token_threshold > 0 && n > cfg->long_prefill_token_threshold)
            n = cfg->long_prefill_token_threshold;
        n = min_i64(n, budget);
        n = min_i64(n, cfg->max_model_len - 1 - r->num_computed_tokens);
        if (n <= 0) {
            r = r->next;
            continue;
        }
        bool victim_is_self = false;
        while (!kv_allocate_slots(s->env->kv, r, r->num_computed_tokens + n)) {
            request *victim = rq_pop_back(&s->running);
            budget += sched_preempt(s->env, victim, b);
            rq_push_front(&s->waiting, victim);
            *preempted = true;
            if (victim == r) {
                victim_is_self = true;
                break;
            }
        }
        if (victim_is_self) break;
        batch_add(b, r, (int32_t)n);
        budget -= n;
        r = r->next;
    }
    return budget;
}

static void schedule_waiting(vllm_state *s, batch *b, int64_t budget)
{
    sched_env *env = s->env;
    const sched_config *cfg = env->cfg;
    while (!rq_empty(&s->waiting) && budget > 0 && s->running.len < cfg->max_num_seqs) {
        request *r = s->waiting.head;
        if (r->state == REQ_SWAPPED) {
            /* a swapped request comes back whole: all its blocks, and the tokens it still has
             * to compute (its last sampled token) */
            int64_t n = request_num_tokens(r) - r->num_computed_tokens;
            if (n > budget || !sched_swap_in(env, r, b)) break;
            rq_pop_front(&s->waiting);
            rq_push_back(&s->running, r);
            sched_mark_running(env, r);
            if (!kv_allocate_slots(env->kv, r, r->num_computed_tokens + n)) {
                /* not even one more block: it stays running and is retried next step */
                continue;
            }
            batch_add(b, r, (int32_t)n);
            budget -= n;
            continue;
        }
        sched_admission a = sched_admission_probe(env, r);
        int64_t seq = request_num_tokens(r);
        int64_t n = seq - a.cached_tokens;
        if (cfg->long_prefill_token_threshold > 0 && n > cfg->long_prefill_token_threshold)
            n = cfg->long_prefill_token_threshold;
        if (!cfg->enable_chunked_prefill && n > budget) break;
        n = min_i64(n, budget);
        if (cfg->reserve_full_isl &&
            kv_blocks_for_tokens(env->kv, seq) - a.cached_tokens / env->kv->block_size > a.blocks_available)
            break;
        if (!sched_admit_allocate(env, r, &a, (int32_t)n)) break;
        rq_pop_front(&s->waiting);
        rq_push_back(&s->running, r);
        sched_mark_running(env, r);
        batch_add(b, r, (int32_t)n);
        budget -= n;
    }
}

static void vllm_schedule(void *self, batch *b)
{
    vllm_state *s = self;
    bool preempted = false;
    int64_t budget = schedule_running(s, b, s->env->cfg->max_num_batched_tokens, &preempted);
    if (!preempted) schedule_waiting(s, b, budget);
}

static int32_t vllm_num_running(const void *self) { return ((const vllm_state *)self)->running.len; }
static int32_t vllm_num_waiting(const void *self) { return ((const vllm_state *)self)->waiting.len; }

const policy_ops policy_vllm = {
    .name = "vllm",
    .summary = "vLLM V1 default: FCFS, one token budget, running first, preempt the newest",
    .create = vllm_create,
    .destroy = vllm_destroy,
    .add_request = vllm_add,
    .schedule = vllm_schedule,
    .remove_request = vllm_remove,
    .num_running = vllm_num_running,
    .num_waiting = vllm_num_waiting,
};
