/*
 * vllm_v0.c: vLLM V0's default scheduler (Scheduler._schedule_default), policy `vllm-v0`.
 *
 * V0 separates prefill steps from decode steps:
 *   1. If no request is swapped out, prefills: waiting requests in FCFS order, each with its
 *      whole prompt (its whole sequence after a recompute preemption; no chunking), while the
 *      token budget (max_num_batched_tokens) and max_num_seqs allow. Admission asks the block
 *      manager whether the whole sequence can be allocated, keeping a watermark of 1% of the
 *      blocks free: NEVER (more than the cache minus the watermark) rejects the request,
 *      LATER (not enough free now) stops admission, OK allocates it all. A sequence longer than
 *      min(max_model_len, max_num_batched_tokens) is rejected with a reason (as V0 aborts it:
 *      this includes a preempted request whose prompt + outputs grew past the limit).
 *   2. If no prefill was scheduled, a decode step: every running request, in order, gets one
 *      token; when a block cannot be appended the newest running request is preempted
 *      (recompute: back to the front of the waiting queue; swap: to the swapped queue), the
 *      request itself if it is the newest. If nothing was preempted, swapped requests come
 *      back in FIFO order while their blocks (plus the watermark) are free.
 * So a step is all prefills or all decodes, and new prompts pause running generations.
 *
 * Where it differs from V0: no multi-sequence groups (beam search, n > 1), so recompute is
 * the default preemption for every request, and --preemption-mode swap swaps all of them.
 */
#include <assert.h>
#include <stdlib.h>

#include "core/req_queue.h"
#include "core/sched.h"
#include "core/util.h"
#include "policies.h"

typedef struct v0_state {
    sched_env *env;
    req_queue waiting, running, swapped;
    int32_t watermark_blocks;
} v0_state;

static void *v0_create(sched_env *env)
{
    v0_state *s = xcalloc(1, sizeof *s);
    s->env = env;
    s->watermark_blocks = (int32_t)(0.01 * env->kv->num_blocks);
    return s;
}

static void v0_destroy(void *self) { free(self); }

static reject_reason v0_add(void *self, request *r)
{
    v0_state *s = self;
    const sched_config *cfg = s->env->cfg;
    int32_t limit = min_i32(cfg->max_model_len, cfg->max_num_batched_tokens);
    if (r->prompt_tokens > limit) return REJECT_BATCH_TOKENS;
    rq_push_back(&s->waiting, r);
    return REJECT_NONE;
}

static req_queue *queue_of(v0_state *s, const request *r)
{
    if (r->state == REQ_RUNNING) return &s->running;
    if (r->state == REQ_SWAPPED) return &s->swapped;
    return &s->waiting;
}

static void v0_remove(void *self, request *r)
{
    v0_state *s = self;
    rq_remove(queue_of(s, r), r);
}

static int32_t schedule_prefills(v0_state *s, batch *b)
{
    sched_env *env = s->env;
    const sched_config *cfg = env->cfg;
    int64_t budget = cfg->max_num_batched_tokens;
    int32_t admitted = 0;
    request *r;
    while ((r = s->waiting.head)) {
        sched_admission a = sched_admission_probe(env, r);
        int64_t seq = request_num_tokens(r);
        int64_t n = seq - a.cached_tokens;
        if (n > min_i32(cfg->max_model_len, cfg->max_num_batched_tokens)) {
            /* V0 aborts what it can never prefill in one step, preempted sequences too */
            rq_pop_front(&s->waiting);
            env->reject(env, r, REJECT_BATCH_TOKENS);
            continue;
        }
        int32_t need = kv_blocks_for_tokens(env->kv, seq) - a.cached_tokens / env->kv->block_size;
        if (env->kv->num_blocks - need < s->watermark_blocks) { /* AllocStatus.NEVER */
            rq_pop_front(&s->waiting);
            env->reject(env, r, REJECT_KV_CAPACITY);
            continue;
        }
        if (a.blocks_available - need < s->watermark_blocks) break; /* AllocStatus.LATER */
        if (n > budget || s->running.len + 1 > cfg->max_num_seqs) break;
        bool ok = sched_admit_allocate(env, r, &a, (int32_t)n);
        if (!ok) break;
        rq_pop_front(&s->waiting);
        rq_push_back(&s->running, r);
        sched_mark_running(env, r);
        batch_add(b, r, (int32_t)n);
        budget -= n;
        admitted++;
    }
    return admitted;
}

static void schedule_decodes(v0_state *s, batch *b)
{
    sched_env *env = s->env;
    bool preempted = false;
    for (request *r = s->running.head; r;) {
        int64_t n = request_num_tokens(r) - r->num_computed_tokens;
        bool self_preempted = false;
        while (!kv_allocate_slots(env->kv, r, r->num_computed_tokens + n)) {
            request *victim = rq_pop_back(&s->running);
            sched_preempt(env, victim, b);
            if (victim->state == REQ_SWAPPED) rq_push_back(&s->swapped, victim);
            else rq_push_front(&s->waiting, victim);
            preempted = true;
            if (victim == r) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted) break;
        batch_add(b, r, (int32_t)n);
        r = r->next;
    }
    if (preempted) return;
    /* swap in, FIFO, while blocks beyond the watermark are free */
    request *r;
    while ((r = s->swapped.head) && s->running.len < env->cfg->max_num_seqs) {
        int64_t n = request_num_tokens(r) - r->num_computed_tokens;
        int32_t need = kv_blocks_for_tokens(env->kv, r->num_computed_tokens + n);
        if (need > env->kv->num_blocks) { /* can never come back */
            rq_pop_front(&s->swapped);
            env->reject(env, r, REJECT_SWAP_CAPACITY);
            continue;
        }
        if (env->kv->num_free - need < s->watermark_blocks) break;
        rq_pop_front(&s->swapped);
        bool ok = sched_swap_in(env, r, b) && kv_allocate_slots(env->kv, r, r->num_computed_tokens + n);
        assert(ok); /* need <= free blocks was checked */
        (void)ok;
        rq_push_back(&s->running, r);
        batch_add(b, r, (int32_t)n);
    }
}

static void v0_schedule(void *self, batch *b)
{
    v0_state *s = self;
    if (rq_empty(&s->swapped) && schedule_prefills(s, b) > 0) return;
    schedule_decodes(s, b);
}

static int32_t v0_num_running(const void *self) { return ((const v0_state *)self)->running.len; }
static int32_t v0_num_waiting(const void *self)
{
    const v0_state *s = self;
    return s->waiting.len + s->swapped.len;
}

const policy_ops policy_vllm_v0 = {
    .name = "vllm-v0",
    .summary = "vLLM V0 default: prefill-first steps or decode steps, whole prompts, 1% block watermark",
    .create = v0_create,
    .destroy = v0_destroy,
    .add_request = v0_add,
    .schedule = v0_schedule,
    .remove_request = v0_remove,
    .num_running = v0_num_running,
    .num_waiting = v0_num_waiting,
};
