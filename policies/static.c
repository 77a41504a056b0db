/*
 * static.c: request-level (static) batching as in FasterTransformer, policy `static`.
 *
 * When the GPU is idle, form a batch of up to max_num_seqs waiting requests (FCFS, each
 * reserving KV for its whole prompt + max output up front, until the next one does not fit)
 * and run it until every member finishes; new arrivals wait for the next batch. The first step
 * computes every member's whole prompt, padded to the longest one (FasterTransformer pads the
 * batch to one length); then each step decodes one token for every member, and members that
 * have finished keep their slot as padding until the last one is done. Padding rows cost GEMM
 * time (batch.num_padding_tokens) and produce nothing.
 *
 * Members stream their tokens: a member's latency ends with its last token, not with the
 * batch (which favours static batching over servers that return whole batches). There is no
 * token budget (a batch's prefill is one step) and no preemption (the reservation is exact).
 */
#include <stdlib.h>

#include "core/req_queue.h"
#include "core/sched.h"
#include "core/util.h"
#include "policies.h"

typedef struct static_state {
    sched_env *env;
    req_queue waiting, running;
    int32_t batch_members; /* members of the batch in flight, finished ones included */
} static_state;

static void *static_create(sched_env *env)
{
    static_state *s = xcalloc(1, sizeof *s);
    s->env = env;
    return s;
}

static void static_destroy(void *self) { free(self); }

static reject_reason static_add(void *self, request *r)
{
    static_state *s = self;
    rq_push_back(&s->waiting, r);
    return REJECT_NONE;
}

static void static_remove(void *self, request *r)
{
    static_state *s = self;
    rq_remove(r->state == REQ_RUNNING ? &s->running : &s->waiting, r);
}

/* KV slots a request can ever need: its whole sequence but the last token. */
static int64_t reservation(const sched_config *cfg, const request *r)
{
    int64_t seq = min_i64((int64_t)r->prompt_tokens + r->max_output_tokens, cfg->max_model_len);
    return seq - 1;
}

static void static_schedule(void *self, batch *b)
{
    static_state *s = self;
    sched_env *env = s->env;
    if (s->running.len == 0) { /* the GPU is idle: form the next batch */
        s->batch_members = 0;
        int32_t longest = 0;
        request *r;
        while ((r = s->waiting.head) && s->running.len < env->cfg->max_num_seqs) {
            if (!kv_allocate_slots(env->kv, r, reservation(env->cfg, r))) break;
            rq_pop_front(&s->waiting);
            rq_push_back(&s->running, r);
            sched_mark_running(env, r);
            batch_add(b, r, r->prompt_tokens);
            longest = max_i32(longest, r->prompt_tokens);
        }
        s->batch_members = s->running.len;
        for (int32_t i = 0; i < b->num_items; i++) b->num_padding_tokens += longest - b->items[i].num_tokens;
        return;
    }
    for (request *r = s->running.head; r; r = r->next) batch_add(b, r, 1);
    b->num_padding_tokens += s->batch_members - s->running.len; /* finished members' rows */
}

static int32_t static_num_running(const void *self) { return ((const static_state *)self)->running.len; }
static int32_t static_num_waiting(const void *self) { return ((const static_state *)self)->waiting.len; }

const policy_ops policy_static = {
    .name = "static",
    .summary = "request-level batching (FasterTransformer): a batch runs until all its members finish",
    .create = static_create,
    .destroy = static_destroy,
    .add_request = static_add,
    .schedule = static_schedule,
    .remove_request = static_remove,
    .num_running = static_num_running,
    .num_waiting = static_num_waiting,
};
