/*
 * orca.c: iteration-level batching without paging, as in Orca (Yu et al., OSDI 2022), policy
 * `orca`.
 *
 * Requests join and leave the batch at every step (iteration-level scheduling), but KV memory
 * is not paged: each admitted request reserves, up front, KV for max_model_len tokens (Orca
 * allocates the maximum sequence length per request), or with --orca-reserve exact for its
 * prompt + max output (an oracle that knows each request's output limit). The reservation
 * makes preemption unnecessary and is exactly the waste paged attention removes: admissions
 * stop when reservations, not tokens, fill the cache.
 *
 * Each step: running requests first (one token each), then FCFS admission of whole prompts
 * (no chunking) while the token budget, max_num_seqs and reservations allow; a request that
 * does not fit stops admission.
 *
 * Where it differs from Orca: Orca's scheduler bounds a batch by its maximum batch size and
 * its KV slots; tandem also applies max_num_batched_tokens, the activation budget every policy
 * gets (a prompt longer than it is rejected with a reason, since Orca does not chunk). Orca's
 * selective batching (attention per request, GEMMs over the batch) is what the cost model and
 * the engine do for every policy.
 */
#include <stdlib.h>
#include <string.h>

#include "core/req_queue.h"
#include "core/sched.h"
#include "core/util.h"
#include "policies.h"

typedef struct orca_knobs {
    char *orca_reserve; /* "max" or "exact" */
} orca_knobs;

static const opt_spec orca_knob_specs[] = {
    {"orca-reserve", OPT_STR, offsetof(orca_knobs, orca_reserve), "max",
     "orca: reserve KV for max (max_model_len) or exact (prompt + max output)"},
    OPT_END,
};

static int orca_check(const void *knobs, terr *e)
{
    const char *v = ((const orca_knobs *)knobs)->orca_reserve;
    if (!v || (strcmp(v, "max") && strcmp(v, "exact")))
        return terr_set(e, "--orca-reserve: \"%s\" is not max or exact", v ? v : "");
    return 0;
}

typedef struct orca_state {
    sched_env *env;
    bool reserve_exact; /* prompt + max output instead of max_model_len */
    req_queue waiting, running;
} orca_state;

static int64_t reservation(const orca_state *s, const request *r)
{
    const sched_config *cfg = s->env->cfg;
    if (!s->reserve_exact) return cfg->max_model_len - 1;
    return min_i64((int64_t)r->prompt_tokens + r->max_output_tokens, cfg->max_model_len) - 1;
}

static void *orca_create(sched_env *env)
{
    orca_state *s = xcalloc(1, sizeof *s);
    s->env = env;
    s->reserve_exact = !strcmp(((const orca_knobs *)env->knobs)->orca_reserve, "exact");
    return s;
}

static void orca_destroy(void *self) { free(self); }

static reject_reason orca_add(void *self, request *r)
{
    orca_state *s = self;
    if (kv_blocks_for_tokens(s->env->kv, reservation(s, r)) > s->env->kv->num_blocks)
        return REJECT_KV_CAPACITY;
    if (r->prompt_tokens > s->env->cfg->max_num_batched_tokens) /* Orca does not chunk prompts */
        return REJECT_BATCH_TOKENS;
    rq_push_back(&s->waiting, r);
    return REJECT_NONE;
}

static void orca_remove(void *self, request *r)
{
    orca_state *s = self;
    rq_remove(r->state == REQ_RUNNING ? &s->running : &s->waiting, r);
}

static void orca_schedule(void *self, batch *b)
{
    orca_state *s = self;
    sched_env *env = s->env;
    int64_t budget = env->cfg->max_num_batched_tokens;
    for (request *r = s->running.head; r && budget > 0; r = r->next) {
        int64_t n = min_i64(request_num_tokens(r) - r->num_computed_tokens, budget);
        batch_add(b, r, (int32_t)n); /* the reservation covers it: no allocation */
        budget -= n;
    }
    request *r;
    while ((r = s->waiting.head) && budget > 0 && s->running.len < env->cfg->max_num_seqs) {
        int64_t n = r->prompt_tokens;
        if (n > budget) break;
        if (!kv_allocate_slots(env->kv, r, reservation(s, r))) break;
        rq_pop_front(&s->waiting);
        rq_push_back(&s->running, r);
        sched_mark_running(env, r);
        batch_add(b, r, (int32_t)n);
        budget -= n;
    }
}

static int32_t orca_num_running(const void *self) { return ((const orca_state *)self)->running.len; }
static int32_t orca_num_waiting(const void *self) { return ((const orca_state *)self)->waiting.len; }

const policy_ops policy_orca = {
    .name = "orca",
    .summary = "Orca iteration-level batching without paging: reserve max_model_len (or exact) KV per request",
    .create = orca_create,
    .destroy = orca_destroy,
    .add_request = orca_add,
    .schedule = orca_schedule,
    .remove_request = orca_remove,
    .num_running = orca_num_running,
    .num_waiting = orca_num_waiting,
    .knobs = orca_knob_specs,
    .knobs_size = sizeof(orca_knobs),
    .knobs_check = orca_check,
};
