/* cb.c: see cb.h. The step follows vLLM V1's Scheduler.schedule(); see policies/vllm.c. */
#include "cb.h"

#include <assert.h>
#include <stdlib.h>

#include "core/util.h"

cb_state *cb_create(sched_env *env, const cb_variant *v, req_cmp_fn heap_order)
{
    cb_state *s = xcalloc(1, sizeof *s);
    s->env = env;
    s->v = v;
    rh_init(&s->heap, heap_order ? heap_order : req_cmp_fcfs);
    return s;
}

void cb_destroy(void *self)
{
    cb_state *s = self;
    rh_free(&s->heap);
    free(s->ext);
    free(s);
}

/* ---- stock waiting containers ---- */

void cb_fifo_push(cb_state *s, request *r) { rq_push_back(&s->fifo, r); }
void cb_fifo_requeue(cb_state *s, request *r) { rq_push_front(&s->fifo, r); }
request *cb_fifo_peek(cb_state *s) { return s->fifo.head; }
void cb_fifo_remove(cb_state *s, request *r) { rq_remove(&s->fifo, r); }
void cb_heap_push(cb_state *s, request *r) { rh_push(&s->heap, r); }
void cb_heap_requeue(cb_state *s, request *r) { rh_push(&s->heap, r); }
request *cb_heap_peek(cb_state *s) { return rh_peek(&s->heap); }
void cb_heap_remove(cb_state *s, request *r) { rh_remove(&s->heap, r); }

static void wait_push(cb_state *s, request *r)
{
    s->v->wait_push(s, r);
    s->num_waiting++;
}

static void wait_requeue(cb_state *s, request *r)
{
    s->v->wait_requeue(s, r);
    s->num_waiting++;
}

static void wait_remove(cb_state *s, request *r)
{
    s->v->wait_remove(s, r);
    s->num_waiting--;
}

request *cb_running_max(cb_state *s, req_cmp_fn cmp)
{
    request *worst = NULL;
    for (request *r = s->running.head; r; r = r->next)
        if (!worst || cmp(r, worst) > 0) worst = r;
    return worst;
}

request *cb_displace_least_important(cb_state *s, const request *cand, int32_t need_blocks, req_cmp_fn order,
                                     bool (*less_important)(const request *r, const request *cand))
{
    request *victim = cb_running_max(s, order);
    if (!victim || !less_important(victim, cand)) return NULL;
    if (need_blocks > 0) {
        int64_t held = 0;
        for (request *r = s->running.head; r; r = r->next)
            if (less_important(r, cand)) held += r->blocks.len;
        if (held < need_blocks) return NULL;
    }
    return victim;
}

/* ---- policy_ops ---- */

static int64_t step_budget(const cb_state *s)
{
    const sched_config *cfg = s->env->cfg;
    int64_t budget = cfg->max_num_batched_tokens;
    if (s->chunk_size > 0 && s->chunk_size < budget) budget = s->chunk_size;
    return budget;
}

static bool chunking(const cb_state *s) { return s->v->always_chunk || s->env->cfg->enable_chunked_prefill; }

reject_reason cb_add_request(void *self, request *r)
{
    cb_state *s = self;
    /* without chunking a prompt over the step budget could never be scheduled */
    if (!chunking(s) && r->prompt_tokens > step_budget(s)) return REJECT_BATCH_TOKENS;
    if (s->v->on_arrival) {
        reject_reason why = s->v->on_arrival(s, r);
        if (why != REJECT_NONE) return why;
    }
    wait_push(s, r);
    return REJECT_NONE;
}

void cb_remove_request(void *self, request *r)
{
    cb_state *s = self;
    if (r->state == REQ_RUNNING) rq_remove(&s->running, r);
    else wait_remove(s, r);
    if (s->v->on_remove) s->v->on_remove(s, r);
}

void cb_step_done(void *self, const batch *b)
{
    cb_state *s = self;
    if (s->v->on_step_done) s->v->on_step_done(s, b);
}

int32_t cb_num_running(const void *self) { return ((const cb_state *)self)->running.len; }
int32_t cb_num_waiting(const void *self) { return ((const cb_state *)self)->num_waiting; }

/* Preempts running request `victim`; returns the budget its scheduled tokens give back. */
static int64_t preempt(cb_state *s, request *victim, batch *b)
{
    rq_remove(&s->running, victim);
    int64_t refund = sched_preempt(s->env, victim, b);
    wait_requeue(s, victim);
    return refund;
}

static bool is_decode(const request *r)
{
    return r->num_output_tokens > 0 && request_num_tokens(r) - r->num_computed_tokens == 1;
}

/* One running request: its tokens under the budget, preempting until its blocks fit.
 * Returns false if r itself was preempted (the running pass stops, as in vLLM). */
static bool schedule_one_running(cb_state *s, request *r, batch *b, int64_t *budget, bool *preempted)
{
    const sched_config *cfg = s->env->cfg;
    int64_t n = request_num_tokens(r) - r->num_computed_tokens;
    if (cfg->long_prefill_token_threshold > 0 && n > cfg->long_prefill_token_threshold)
        n = cfg->long_prefill_token_threshold;
    n = min_i64(n, *budget);
    n = min_i64(n, cfg->max_model_len - 1 - r->num_computed_tokens);
    if (n <= 0) return true; /* nothing to do this step: skipped, not a stop */
    while (!kv_allocate_slots(s->env->kv, r, r->num_computed_tokens + n)) {
        request *victim = s->v->victim ? s->v->victim(s, r) : s->running.tail;
        *budget += preempt(s, victim, b);
        *preempted = true;
        if (victim == r) return false;
        /* the refund may allow more tokens than computed above: keep n, as vLLM does */
    }
    batch_add(b, r, (int32_t)n);
    *budget -= n;
    return true;
}

static void schedule_running(cb_state *s, batch *b, int64_t *budget, bool *preempted)
{
    /* with decodes_first, pass 0 takes the decodes and pass 1 the rest */
    int passes = s->v->decodes_first ? 2 : 1;
    for (int pass = 0; pass < passes; pass++) {
        for (request *r = s->running.head; r && *budget > 0;) {
            if (passes == 2 && is_decode(r) != (pass == 0)) {
                r = r->next;
                continue;
            }
            if (!schedule_one_running(s, r, b, budget, preempted)) return;
            r = r->next;
        }
    }
}

/* A swapped request at the head of the waiting queue: back in, whole, or stop admission. */
static bool admit_swapped(cb_state *s, request *r, batch *b, int64_t *budget)
{
    sched_env *env = s->env;
    const sched_config *cfg = env->cfg;
    /* it may have been swapped out mid-prefill: the rest comes in chunks like any prefill */
    int64_t n = request_num_tokens(r) - r->num_computed_tokens;
    if (cfg->long_prefill_token_threshold > 0 && n > cfg->long_prefill_token_threshold)
        n = cfg->long_prefill_token_threshold;
    if (chunking(s)) n = min_i64(n, *budget);
    int32_t need = kv_blocks_for_tokens(env->kv, r->num_computed_tokens + n);
    if (need > env->kv->num_blocks) { /* can never come back: reject, don't hang */
        wait_remove(s, r);
        env->reject(env, r, REJECT_SWAP_CAPACITY);
        return true;
    }
    if (n > *budget || need > env->kv->num_free) return false;
    bool ok = sched_swap_in(env, r, b) && kv_allocate_slots(env->kv, r, r->num_computed_tokens + n);
    assert(ok);
    (void)ok;
    wait_remove(s, r);
    rq_push_back(&s->running, r);
    sched_mark_running(env, r);
    batch_add(b, r, (int32_t)n);
    *budget -= n;
    return true;
}

static void schedule_waiting(cb_state *s, batch *b, int64_t *budget)
{
    sched_env *env = s->env;
    const sched_config *cfg = env->cfg;
    request *r;
    while ((r = s->v->wait_peek(s)) && *budget > 0) {
        if (s->running.len >= cfg->max_num_seqs) {
            request *victim = s->v->displace ? s->v->displace(s, r, 0) : NULL;
            if (!victim) break;
            *budget += preempt(s, victim, b);
            continue;
        }
        if (r->state == REQ_SWAPPED) {
            if (admit_swapped(s, r, b, budget)) continue;
            int32_t need = r->host_blocks.len + 1 - env->kv->num_free;
            request *victim = s->v->displace ? s->v->displace(s, r, need > 0 ? need : 1) : NULL;
            if (!victim) break;
            *budget += preempt(s, victim, b);
            continue;
        }
        sched_admission a = sched_admission_probe(env, r);
        int64_t seq = request_num_tokens(r);
        int64_t n = seq - a.cached_tokens;
        if (cfg->long_prefill_token_threshold > 0 && n > cfg->long_prefill_token_threshold)
            n = cfg->long_prefill_token_threshold;
        if (!chunking(s) && n > *budget) break;
        n = min_i64(n, *budget);
        int32_t cached_blocks = a.cached_tokens / env->kv->block_size;
        int32_t need = kv_blocks_for_tokens(env->kv, cfg->reserve_full_isl ? seq : a.cached_tokens + n) -
                       cached_blocks - a.blocks_available;
        if (need > 0 || !sched_admit_allocate(env, r, &a, (int32_t)n)) {
            request *victim = s->v->displace ? s->v->displace(s, r, need > 0 ? need : 1) : NULL;
            if (!victim) break; /* head-of-line: admission stops here */
            *budget += preempt(s, victim, b);
            continue;
        }
        wait_remove(s, r);
        rq_push_back(&s->running, r);
        sched_mark_running(env, r);
        batch_add(b, r, (int32_t)n);
        *budget -= n;
    }
}

void cb_schedule(void *self, batch *b)
{
    cb_state *s = self;
    int64_t budget = step_budget(s);
    bool preempted = false;
    schedule_running(s, b, &budget, &preempted);
    if (!preempted) schedule_waiting(s, b, &budget);
}
