/*
 * static.c: request-level (static) batching as in FasterTransformer, policy `static`.
 *
 * When the GPU is idle, form a batch of up to max_num_seqs waiting requests (FCFS, each
 * reserving KV for its whole prompt + max output up front, until the next one does not fit)
 * and run it until every member finishes; new arrivals wait for the next batch.
 *
 * Context phase: every member's whole prompt, padded to the batch's longest prompt
 * (FasterTransformer pads the batch to one length). A forward pass holds at most
 * max_num_batched_tokens rows (the activation memory every policy gets), so the context phase
 * runs in as many passes as it needs, whole members at a time (at least one a pass); a member
 * samples its first token when its pass completes. Generation phase, once every member has
 * its first token: each step decodes one token for every member, and members that have
 * finished keep their slot as a padding row until the last one is done. Padding rows cost GEMM
 * time (batch.num_padding_tokens) and produce nothing.
 *
 * Members stream their tokens: a member's latency ends with its last token, not with the
 * batch (which favours static batching over servers that return whole batches). The KV
 * reservation is each member's exact prompt + max output, not padded (which favours it too).
 * There is no preemption.
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
    int32_t longest;       /* the batch's longest prompt: every member is padded to it */
    request *next_prefill; /* first running member still in the context phase, or NULL */
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
        s->longest = 0;
        request *r;
        while ((r = s->waiting.head) && s->running.len < env->cfg->max_num_seqs) {
            if (!kv_allocate_slots(env->kv, r, reservation(env->cfg, r))) break;
            rq_pop_front(&s->waiting);
            rq_push_back(&s->running, r);
            sched_mark_running(env, r);
            s->longest = max_i32(s->longest, r->prompt_tokens);
        }
        s->batch_members = s->running.len;
        s->next_prefill = s->running.head;
    }
    if (s->next_prefill) { /* context phase: whole padded prompts, up to the budget a pass */
        int64_t rows = 0;
        while (s->next_prefill && (rows == 0 || rows + s->longest <= env->cfg->max_num_batched_tokens)) {
            request *r = s->next_prefill;
            batch_add(b, r, r->prompt_tokens);
            b->num_padding_tokens += s->longest - r->prompt_tokens;
            rows += s->longest;
            s->next_prefill = r->next;
        }
        return;
    }
    for (request *r = s->running.head; r; r = r->next) batch_add(b, r, 1);
    b->num_padding_tokens += s->batch_members - s->running.len; /* finished members' rows */
}

static void static_remove(void *self, request *r)
{
    static_state *s = self;
    if (r->state == REQ_RUNNING) {
        if (s->next_prefill == r) s->next_prefill = r->next;
        rq_remove(&s->running, r);
    } else {
        rq_remove(&s->waiting, r);
    }
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
