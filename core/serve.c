/* serve.c: see serve.h. */
#include "serve.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heat.h"
#include "req_queue.h"
#include "work.h"

typedef struct loop_state loop_state;

/* A step applied to its requests (computed tokens, output tokens counted, finished requests out
 * of the policy with their blocks freed) and waiting for its results: when its tokens came and
 * how long it took (complete_step). The state it was applied in is kept for its row. */
typedef struct step_flight {
    request **done;     /* (max_num_seqs) requests it finished: still live, for complete_step (a
                           request that finishes in the step after is also REQ_FINISHED by then) */
    int32_t *out_index; /* (max_num_seqs) per batch item: the output token it emits, or -1 */
    int32_t num_done;
    int32_t num_running, num_waiting, kv_blocks_used;
    int64_t kv_tokens;
    int64_t sched_ns;   /* the loop's host time scheduling it (measures_host) */
    bool behind;        /* submitted while another step ran (asynchronous scheduling) */
} step_flight;

/* One replica: its own block managers, policy instance, random stream and live requests. */
typedef struct replica {
    loop_state *L;
    int32_t index;
    sched_env env;
    kv_manager kv, swap;
    void *policy;
    gsl_rng *rng;
    batch b;
    request *live_head;   /* doubly linked through live_prev/live_next */
    int32_t num_live;
    int64_t step;         /* steps this replica has run */
    heat heat;            /* its GPU's recent load */
    /* cluster loop */
    request *inbox_head, *inbox_tail; /* routed here, not yet given to the policy (via next) */
    step_result out;      /* the step in flight */
    int64_t start_ns, end_ns;
    /* applied steps waiting for their results: fl[0] (with b), and under asynchronous
     * scheduling fl[1] (with b_next), the step submitted behind the running one */
    step_flight fl[2];
    batch b_next;
    int32_t heap_pos;     /* in the heap of busy replicas, -1 when idle */
    bool dirty;           /* schedule at the current instant */
} replica;

/* Requests are recycled through a free list so a long trace reuses the same few structs (and
 * their block tables) instead of allocating per request. */
struct loop_state {
    const serve_config *cfg;
    executor ex;
    metrics *m;
    const serve_hooks *hooks;
    request *free_list;
    replica *reps;        /* (num_replicas) */
    int32_t num_replicas;
    replica_load *load;   /* (num_replicas) what routers see */
    int32_t num_live, peak_live;
    int64_t num_requests, num_finished, num_rejected, num_steps;
    int64_t outstanding;  /* routed and not ended, all replicas */
    int64_t now_ns;
    void *default_knobs;
    /* Asynchronous scheduling: a request that leaves the system while a step that may hold it
     * is in flight waits here (limbo) instead of the free list, until that step completes. */
    bool hold_retired;
    request *limbo;
};

static request *req_alloc(loop_state *L)
{
    request *r = L->free_list;
    if (r) L->free_list = r->next;
    else r = xcalloc(1, sizeof *r);
    request_reset(r);
    return r;
}

static void live_add(replica *R, request *r)
{
    loop_state *L = R->L;
    r->live_prev = NULL;
    r->live_next = R->live_head;
    if (R->live_head) R->live_head->live_prev = r;
    R->live_head = r;
    R->num_live++;
    if (++L->num_live > L->peak_live) L->peak_live = L->num_live;
}

static void live_remove(replica *R, request *r)
{
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else R->live_head = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    R->num_live--;
    R->L->num_live--;
}

/* The request left the system: record it and recycle its struct. */
static void retire(loop_state *L, request *r)
{
    if (L->load) {
        replica_load *ld = &L->load[r->replica];
        ld->outstanding--;
        if (r->first_token_ns < 0) ld->pending_prefill_tokens -= r->prompt_tokens;
    }
    L->outstanding--;
    if (L->m) metrics_request_done(L->m, r);
    if (L->ex.ops->release) L->ex.ops->release(L->ex.self, r);
    request **list = L->hold_retired ? &L->limbo : &L->free_list;
    r->next = *list;
    *list = r;
}

/* The retired requests that no step in flight can hold any more go to the free list. */
static void release_limbo(loop_state *L)
{
    while (L->limbo) {
        request *r = L->limbo;
        L->limbo = r->next;
        r->next = L->free_list;
        L->free_list = r;
    }
}

static void reject_live(sched_env *env, request *r, reject_reason why)
{
    replica *R = env->loop;
    loop_state *L = R->L;
    if (r->blocks.len) R->env.kv_tokens -= r->num_computed_tokens;
    kv_free_request(&R->kv, r);
    if (R->swap.num_blocks) kv_free_table(&R->swap, &r->host_blocks);
    r->state = REQ_REJECTED;
    r->reject_reason = why;
    r->finish_ns = L->now_ns;
    live_remove(R, r);
    L->num_rejected++;
    retire(L, r);
}

/* Ends every live request of R: the policy will never run them and nothing can change that. */
static void reject_all_unschedulable(replica *R)
{
    while (R->live_head) {
        request *r = R->live_head;
        R->L->cfg->policy->remove_request(R->policy, r);
        reject_live(&R->env, r, REJECT_UNSCHEDULABLE);
    }
}

reject_reason serve_admission_check(const sched_config *cfg, int32_t num_gpu_blocks,
                                    int32_t prompt_tokens, int32_t output_tokens)
{
    /* a prompt must leave room for at least one generated token */
    if (prompt_tokens >= cfg->max_model_len) return REJECT_PROMPT_TOO_LONG;
    /* the most KV slots it will ever hold: its whole sequence but the last token */
    int64_t seq = (int64_t)prompt_tokens + output_tokens;
    if (seq > cfg->max_model_len) seq = cfg->max_model_len;
    int64_t blocks = (seq - 1 + cfg->block_size - 1) / cfg->block_size;
    if (blocks > num_gpu_blocks) return REJECT_KV_CAPACITY;
    return REJECT_NONE;
}

/* A request struct for arrival a (not yet in any replica). */
static request *make_request(loop_state *L, const arrival *a, int64_t id)
{
    request *r = req_alloc(L);
    r->id = id;
    r->arrival_ns = a->arrival_ns;
    r->prompt_tokens = a->prompt_tokens;
    r->max_output_tokens = a->output_tokens;
    r->priority = a->priority;
    r->client_id = a->client_id;
    if (a->num_hashes > 0) {
        if (a->num_hashes > r->prefix_hashes_cap) {
            size_t cap = (size_t)r->prefix_hashes_cap;
            grow_array((void **)&r->prefix_hashes, sizeof *r->prefix_hashes, &cap, (size_t)a->num_hashes);
            r->prefix_hashes_cap = (int32_t)cap;
        }
        memcpy(r->prefix_hashes, a->hashes, (size_t)a->num_hashes * sizeof *a->hashes);
        r->num_prefix_hashes = a->num_hashes;
    }
    r->state = REQ_WAITING;
    L->num_requests++;
    L->outstanding++;
    return r;
}

/* Gives r to R's policy, or rejects it on arrival if it can never run there. */
static void reject_request(loop_state *L, request *r, reject_reason why)
{
    r->state = REQ_REJECTED;
    r->reject_reason = why;
    r->finish_ns = r->arrival_ns;
    L->num_rejected++;
    retire(L, r);
}

/* Rejects r at once if it can never run on R (too long for the model or the KV cache): it
 * leaves the system when it arrives, busy replica or not. */
static bool rejected_on_arrival(replica *R, request *r)
{
    loop_state *L = R->L;
    reject_reason why = serve_admission_check(&L->cfg->sched, R->kv.num_blocks, r->prompt_tokens,
                                              r->max_output_tokens);
    if (why == REJECT_NONE) return false;
    reject_request(L, r, why);
    return true;
}

static void admit(replica *R, request *r)
{
    if (rejected_on_arrival(R, r)) return;
    reject_reason why = R->L->cfg->policy->add_request(R->policy, r);
    if (why != REJECT_NONE) reject_request(R->L, r, why);
    else live_add(R, r);
}

/* r emitted its last token in a step being applied: out of the policy, its blocks free for the
 * next schedule; it leaves the system when the step's results come (finish_end). */
static void finish_begin(replica *R, request *r)
{
    R->L->cfg->policy->remove_request(R->policy, r);
    R->env.kv_tokens -= r->num_computed_tokens;
    kv_free_request(&R->kv, r);
    r->state = REQ_FINISHED;
}

static void finish_end(replica *R, request *r)
{
    loop_state *L = R->L;
    r->finish_ns = L->now_ns;
    live_remove(R, r);
    L->num_finished++;
    retire(L, r);
}

/* Idles until t; returns the host time that took when timed (else 0). */
static int64_t wait_for(tclock *clock, int64_t t_ns, bool timed)
{
    int64_t t0 = timed ? clock_mono_ns() : 0;
    clock->wait_until(clock, t_ns);
    return timed ? clock_mono_ns() - t0 : 0;
}

#ifdef TANDEM_CHECKS
/* After every step in test builds: blocks are conserved, every block reference belongs to a
 * live request's table, and no request holds more blocks than its computed tokens need. */
static void check_invariants(replica *R)
{
    kv_check(&R->kv);
    if (R->swap.num_blocks) kv_check(&R->swap);
    int64_t refs = 0, host = 0;
    for (int32_t b = 0; b < R->kv.num_blocks; b++) refs += R->kv.ref_count[b];
    int64_t held = 0, tokens = 0;
    int32_t n = 0;
    for (request *r = R->live_head; r; r = r->live_next, n++) {
        held += r->blocks.len;
        if (r->blocks.len) tokens += r->num_computed_tokens;
        host += r->host_blocks.len;
        if (r->replica != R->index) {
            fprintf(stderr, "invariant: request %lld of replica %d is live on replica %d\n", (long long)r->id,
                    r->replica, R->index);
            abort();
        }
        if (r->state == REQ_SWAPPED ? r->host_blocks.len == 0 || r->blocks.len
                                    : r->host_blocks.len != 0) {
            fprintf(stderr, "invariant: request %lld in state %s holds %d GPU / %d host blocks\n",
                    (long long)r->id, req_state_name(r->state), r->blocks.len, r->host_blocks.len);
            abort();
        }
        if (r->num_computed_tokens > request_num_tokens(r)) {
            fprintf(stderr, "invariant: request %lld computed %d of %d tokens\n", (long long)r->id,
                    r->num_computed_tokens, request_num_tokens(r));
            abort();
        }
    }
    if (tokens != R->env.kv_tokens) {
        fprintf(stderr, "invariant: live requests hold %lld KV tokens, the count says %lld\n", (long long)tokens,
                (long long)R->env.kv_tokens);
        abort();
    }
    if (held != refs || n != R->num_live ||
        (R->swap.num_blocks && host != R->swap.num_blocks - R->swap.num_free)) {
        fprintf(stderr, "invariant: live tables hold %lld GPU refs, blocks have %lld (live %d/%d)\n",
                (long long)held, (long long)refs, n, R->num_live);
        abort();
    }
}
#endif

/* Room for n output ids in r->output_ids. */
static void output_reserve(request *r, int32_t n)
{
    if (n <= r->output_cap) return;
    size_t cap = (size_t)r->output_cap;
    grow_array((void **)&r->output_ids, sizeof *r->output_ids, &cap, (size_t)n);
    r->output_cap = (int32_t)cap;
}

/* Applies step b to its requests (fl records what complete_step needs): computed tokens, the
 * emitted tokens counted (each a pending id -1 - k in output_ids when pending_ids: the executor
 * feeds it to the next step before the host has it), finished requests out of the policy. */
static void advance_step(replica *R, const batch *b, step_flight *fl, bool pending_ids)
{
    loop_state *L = R->L;
    const serve_config *cfg = L->cfg;
    for (int32_t i = 0, k = 0; i < b->num_items; i++) {
        const sched_item *it = &b->items[i];
        request *r = it->req;
        r->num_computed_tokens += it->num_tokens;
        R->env.kv_tokens += it->num_tokens;
        /* prefix caching indexes blocks by their token ids: only those of ended steps are known */
        kv_cache_blocks(&R->kv, r, min_i32(r->num_computed_tokens, r->prompt_tokens + r->num_output_known));
        fl->out_index[i] = -1;
        if (!it->emits_token) continue;
        if (pending_ids) {
            output_reserve(r, r->num_output_tokens + 1);
            r->output_ids[r->num_output_tokens] = -1 - k++;
        }
        fl->out_index[i] = r->num_output_tokens++;
    }
    fl->num_running = cfg->policy->num_running(R->policy);
    fl->num_waiting = cfg->policy->num_waiting(R->policy);
    /* KV usage at its peak in the step, before finished requests release their blocks */
    fl->kv_blocks_used = kv_num_used(&R->kv);
    fl->kv_tokens = R->env.kv_tokens;
    fl->num_done = 0;
    for (int32_t i = 0; i < b->num_items; i++) {
        request *r = b->items[i].req;
        if (b->items[i].emits_token && request_is_done(r, cfg->sched.max_model_len)) {
            finish_begin(R, r);
            fl->done[fl->num_done++] = r;
        }
    }
    if (cfg->policy->step_done) cfg->policy->step_done(R->policy, b);
}

/* Step b (applied by advance_step into fl) ran from start to L->now_ns with result out: its
 * tokens' times (TTFT, ITL) and ids, its finished requests leave, its row is recorded. host_ns:
 * the host time serial with the device. */
static void complete_step(replica *R, const batch *b, const step_flight *fl, const step_result *out,
                          int64_t start, int64_t host_ns)
{
    loop_state *L = R->L;
    const serve_config *cfg = L->cfg;
    metrics *m = L->m;
    for (int32_t i = 0; i < b->num_items; i++) {
        request *r = b->items[i].req;
        int32_t o = fl->out_index[i];
        if (o < 0 || r->state == REQ_REJECTED) continue; /* rejected since: it left already */
        if (out->sampled) {
            output_reserve(r, o + 1);
            r->output_ids[o] = out->sampled[i];
        }
        r->num_output_known = o + 1;
        if (r->first_token_ns < 0) {
            r->first_token_ns = L->now_ns;
            if (L->load) L->load[R->index].pending_prefill_tokens -= r->prompt_tokens;
        } else if (m) metrics_itl(m, L->now_ns - r->last_token_ns);
        r->last_token_ns = L->now_ns;
    }
    step_stats st = {
        .step = R->step,
        .replica = R->index,
        .start_ns = start,
        .duration_ns = out->duration_ns,
        .num_running = fl->num_running,
        .num_waiting = fl->num_waiting,
        .batch_size = b->num_items,
        .prefill_tokens = b->num_prefill_tokens,
        .decode_tokens = b->num_decode_tokens,
        .num_preemptions = b->num_preempted,
        .num_swap_blocks = b->num_swap_in + b->num_swap_out,
        .kv_blocks_total = R->kv.num_blocks,
        .kv_blocks_used = fl->kv_blocks_used,
        .kv_tokens = fl->kv_tokens,
        .block_size = cfg->sched.block_size,
        .shape = batch_shape(b),
        .host_ns = host_ns,
        .sched_ns = fl->sched_ns,
        .batch = b,
    };
    if (cfg->model) {
        step_work w = step_work_of(cfg->model, &st.shape);
        st.flops = w.flops;
        st.bytes = w.bytes;
        double busy = st.shape.padding_tokens ? heat_flops(cfg->model, &st.shape) : w.flops;
        heat_add(&R->heat, start, out->duration_ns, heat_load(busy, out->duration_ns, cfg->peak_flops));
    }
    for (int32_t i = 0; i < fl->num_done; i++) finish_end(R, fl->done[i]);
    if (L->hooks && L->hooks->on_step) L->hooks->on_step(L->hooks->ud, R->step, b, start, out->duration_ns);
    if (m) metrics_step(m, &st);
    if (L->load) L->load[R->index].kv_blocks_used = kv_num_used(&R->kv);
#ifdef TANDEM_CHECKS
    check_invariants(R);
#endif
    R->step++;
    L->num_steps++;
}

/* Applies R's step (batch R->b, result out) that ran from start to L->now_ns. */
static void apply_step(replica *R, const step_result *out, int64_t start, int64_t sched_ns)
{
    step_flight *fl = &R->fl[0];
    advance_step(R, &R->b, fl, false);
    fl->sched_ns = sched_ns;
    complete_step(R, &R->b, fl, out, start, sched_ns + out->host_ns);
}

static int max_steps_reached(loop_state *L, terr *e)
{
    if (L->cfg->max_steps > 0 && L->num_steps >= L->cfg->max_steps)
        return terr_set(e, "stopped after --max-steps %lld steps with %d requests live",
                        (long long)L->cfg->max_steps, L->num_live);
    return 0;
}

/* r arrived for R while R is busy: it waits in R's inbox, in arrival order. */
static void inbox_push(replica *R, request *r)
{
    r->next = NULL;
    if (R->inbox_tail) R->inbox_tail->next = r;
    else R->inbox_head = r;
    R->inbox_tail = r;
}

/* R is about to schedule: its inbox goes to its policy. */
static void admit_inbox(replica *R)
{
    while (R->inbox_head) {
        request *r = R->inbox_head;
        R->inbox_head = r->next;
        admit(R, r);
    }
    R->inbox_tail = NULL;
}

/* ---- one replica: the loop both backends run ---- */

/* Whether the closed loop (--max-concurrency) holds arrivals now. */
static bool held(const loop_state *L)
{
    return L->cfg->max_concurrency > 0 && L->outstanding >= L->cfg->max_concurrency;
}

/* Takes the arrivals before `until` that the closed loop lets in: straight to R's policy (R), or,
 * R NULL, into replica 0's inbox (they arrived during a step; one that can never run is rejected
 * at once, as the cluster loop does). A request held by the closed loop arrives when it is let
 * in (*next_held), the others at their trace time. Returns -1 with e set if the trace fails. */
static int take_arrivals(loop_state *L, arrival_source src, arrival *next, int *have, int64_t *next_id,
                         int64_t until, replica *R, bool *next_held, terr *e)
{
    while (*have == 1 && next->arrival_ns < until) {
        if (held(L)) { /* it has arrived and waits for a request to end */
            *next_held = true;
            break;
        }
        request *r = make_request(L, next, (*next_id)++);
        const bool was_held = *next_held;
        if (was_held) r->arrival_ns = L->now_ns; /* sent now */
        if (R) {
            admit(R, r);
        } else if (!rejected_on_arrival(&L->reps[0], r)) {
            inbox_push(&L->reps[0], r);
        }
        *have = src.next(src.self, next, e);
        if (*have < 0) return -1;
        /* behind a held request, what has arrived by now waited too */
        *next_held = was_held && *have == 1 && next->arrival_ns < L->now_ns;
    }
    return 0;
}

static int run_single(loop_state *L, arrival_source src, tclock *clock, terr *e)
{
    const serve_config *cfg = L->cfg;
    replica *R = &L->reps[0];
    executor ex = L->ex;
    batch *b = &R->b;
    int rc = 0;
    arrival next;
    int have = src.next(src.self, &next, e);
    int64_t next_id = 0;
    bool next_held = false; /* the next arrival came while the closed loop was full */
    if (have < 0) rc = -1;
    /* Host time of the loop itself, for an executor that measures real work: from the previous
     * step's return to this step's call, less the time spent idle waiting for arrivals. */
    const bool timed = ex.ops->measures_host;
    int64_t host_mark = 0, idle_ns = 0;

    while (rc == 0) {
        L->now_ns = clock->now(clock);
        /* what arrived during the last step (R's inbox), then what arrives now: a request held by
         * the closed loop arrives when it is let in */
        admit_inbox(R);
        if (take_arrivals(L, src, &next, &have, &next_id, L->now_ns + 1, R, &next_held, e)) {
            rc = -1;
            break;
        }
        /* an arrival that can come in without a request ending first */
        const bool can_arrive = have == 1 && !held(L);
        if (R->num_live == 0) {
            if (have == 0) break;
            idle_ns += wait_for(clock, next.arrival_ns, timed);
            continue;
        }

        batch_clear(b);
        R->env.now_ns = L->now_ns;
        cfg->policy->schedule(R->policy, b);
        if (b->num_items == 0 && b->num_swap_out == 0) {
            /* a pass that only preempted (its victim was the request it served first) changed
             * the state: schedule again at the same instant, as vLLM's next step would */
            if (b->num_preempted > 0) {
                if (L->m) metrics_preempted(L->m, R->step, L->now_ns, b);
                continue;
            }
            if (can_arrive) { /* nothing runnable now; something may change when the next request comes */
                idle_ns += wait_for(clock, next.arrival_ns, timed);
                continue;
            }
            /* no arrivals left and the policy will not run what it holds: end them, don't hang */
            reject_all_unschedulable(R);
            continue;
        }

        step_result out = {0};
        b->heat = heat_at(&R->heat, L->now_ns);
        int64_t sched_ns = timed && host_mark ? clock_mono_ns() - host_mark - idle_ns : 0;
        if (ex.ops->execute(ex.self, b, &out, e)) {
            rc = -1;
            break;
        }
        if (timed) host_mark = clock_mono_ns(), idle_ns = 0;
        assert(out.duration_ns > 0);
        int64_t start = L->now_ns;
        clock->advance(clock, out.duration_ns);
        L->now_ns = clock->now(clock);
        /* requests that arrived during the step are in the system before its finishes leave it
         * (the closed loop counts them so); the policy gets them at the step's end */
        if (take_arrivals(L, src, &next, &have, &next_id, L->now_ns, NULL, &next_held, e)) {
            rc = -1;
            break;
        }
        apply_step(R, &out, start, sched_ns);
        /* kernel times come later than their steps: those of earlier steps (this one's, maybe) */
        if (L->m && out.num_kernel_times) metrics_step_kernels(L->m, out.kernel_times, (size_t)out.num_kernel_times);
        rc = max_steps_reached(L, e);
    }
    return rc;
}

/* ---- one replica, scheduling ahead (async_scheduling) ---- */

/* Where the loop reads the trace: the source, the next arrival and the state take_arrivals keeps. */
typedef struct arrivals {
    arrival_source src;
    arrival next;
    int have;
    int64_t next_id;
    bool next_held;
} arrivals;

/* The step in flight at R->fl[f] ends: its result from the executor (one that runs in place runs
 * it now, at the step's start: the loop's clock stands there), the clock at its end, what arrived
 * meanwhile into R's inbox, then its completion. */
static int collect_step(loop_state *L, replica *R, int f, tclock *clock, arrivals *A, terr *e)
{
    batch *b = f ? &R->b_next : &R->b;
    step_flight *fl = &R->fl[f];
    executor ex = L->ex;
    step_result out = {0};
    if (ex.ops->collect) {
        if (ex.ops->collect(ex.self, b, &out, e)) return -1;
    } else {
        b->heat = heat_at(&R->heat, L->now_ns);
        if (ex.ops->execute(ex.self, b, &out, e)) return -1;
    }
    assert(out.duration_ns > 0);
    clock->advance(clock, out.duration_ns);
    L->now_ns = clock->now(clock);
    if (take_arrivals(L, A->src, &A->next, &A->have, &A->next_id, L->now_ns, NULL, &A->next_held, e)) return -1;
    /* queued behind a running step, its scheduling overlapped that step (what did not is in the
     * executor's host time) */
    complete_step(R, b, fl, &out, L->now_ns - out.duration_ns, out.host_ns + (fl->behind ? 0 : fl->sched_ns));
    release_limbo(L);
    return 0;
}

static int run_single_async(loop_state *L, arrival_source src, tclock *clock, terr *e)
{
    const serve_config *cfg = L->cfg;
    replica *R = &L->reps[0];
    executor ex = L->ex;
    arrivals A = {.src = src};
    int rc = 0;
    A.have = src.next(src.self, &A.next, e);
    if (A.have < 0) rc = -1;
    const bool timed = ex.ops->measures_host;
    int64_t host_mark = 0, idle_ns = 0;
    int running = -1; /* R->fl[running] is the step in flight, -1: none */
    L->hold_retired = true;

    while (rc == 0) {
        L->now_ns = clock->now(clock);
        admit_inbox(R);
        if (take_arrivals(L, src, &A.next, &A.have, &A.next_id, L->now_ns + 1, R, &A.next_held, e)) {
            rc = -1;
            break;
        }
        const bool can_arrive = A.have == 1 && !held(L);
        if (running < 0 && R->num_live == 0) {
            if (A.have == 0) break;
            idle_ns += wait_for(clock, A.next.arrival_ns, timed);
            continue;
        }
        /* the next step, scheduled while the running one runs (its finished requests are still
         * live, but out of the policy) */
        int f = running < 0 ? 0 : running ^ 1;
        batch *b = f ? &R->b_next : &R->b;
        batch_clear(b);
        if (R->num_live > (running < 0 ? 0 : R->fl[running].num_done)) {
            R->env.now_ns = L->now_ns;
            cfg->policy->schedule(R->policy, b);
        }
        if (b->num_items == 0 && b->num_swap_out == 0) {
            if (b->num_preempted > 0) { /* as in run_single */
                if (L->m) metrics_preempted(L->m, R->step, L->now_ns, b);
                continue;
            }
            if (running >= 0) { /* nothing to queue behind the running step: wait for it */
                rc = collect_step(L, R, running, clock, &A, e);
                if (timed) host_mark = clock_mono_ns(), idle_ns = 0;
                running = -1;
                if (rc == 0) rc = max_steps_reached(L, e);
                continue;
            }
            if (can_arrive) {
                idle_ns += wait_for(clock, A.next.arrival_ns, timed);
                continue;
            }
            reject_all_unschedulable(R);
            continue;
        }
        step_flight *fl = &R->fl[f];
        fl->sched_ns = timed && host_mark ? clock_mono_ns() - host_mark - idle_ns : 0;
        fl->behind = running >= 0;
        if (ex.ops->submit && ex.ops->submit(ex.self, b, e)) {
            rc = -1;
            break;
        }
        advance_step(R, b, fl, ex.ops->submit != NULL);
#ifdef TANDEM_CHECKS
        check_invariants(R);
#endif
        if (running >= 0) rc = collect_step(L, R, running, clock, &A, e);
        if (timed) host_mark = clock_mono_ns(), idle_ns = 0;
        running = f;
        if (rc == 0) rc = max_steps_reached(L, e);
    }
    L->hold_retired = false;
    release_limbo(L);
    return rc;
}

/* ---- a cluster: replicas in one event loop ---- */

/* Busy replicas, a binary heap by (end_ns, index): the earliest step end first, ties by index. */
typedef struct rep_heap {
    replica **items; /* (n) */
    int32_t n;
} rep_heap;

static inline bool rep_before(const replica *a, const replica *b)
{
    return a->end_ns < b->end_ns || (a->end_ns == b->end_ns && a->index < b->index);
}

static void heap_set(rep_heap *h, int32_t i, replica *R)
{
    h->items[i] = R;
    R->heap_pos = i;
}

static void heap_push(rep_heap *h, replica *R)
{
    int32_t i = h->n++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!rep_before(R, h->items[p])) break;
        heap_set(h, i, h->items[p]);
        i = p;
    }
    heap_set(h, i, R);
}

static replica *heap_pop(rep_heap *h)
{
    replica *top = h->items[0], *last = h->items[--h->n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && rep_before(h->items[c + 1], h->items[c])) c++;
        if (!rep_before(h->items[c], last)) break;
        heap_set(h, i, h->items[c]);
        i = c;
    }
    if (h->n > 0) heap_set(h, i, last);
    top->heap_pos = -1;
    return top;
}

/* R is idle at L->now_ns: takes its inbox into its policy and starts a step if it has one.
 * Returns -1 with e set if the executor fails. */
static int schedule_replica(loop_state *L, replica *R, rep_heap *busy, bool arrivals_left, terr *e)
{
    const serve_config *cfg = L->cfg;
    admit_inbox(R);
    R->dirty = false;
    batch *b = &R->b;
    while (R->num_live > 0) {
        batch_clear(b);
        R->env.now_ns = L->now_ns;
        cfg->policy->schedule(R->policy, b);
        if (L->load) L->load[R->index].kv_blocks_used = kv_num_used(&R->kv);
        if (b->num_items == 0 && b->num_swap_out == 0) {
            if (b->num_preempted > 0) { /* as in run_single */
                if (L->m) metrics_preempted(L->m, R->step, L->now_ns, b);
                continue;
            }
            /* stalled until a request is routed here; if none can come, never */
            if (!arrivals_left) reject_all_unschedulable(R);
            return 0;
        }
        R->out = (step_result){0};
        b->heat = heat_at(&R->heat, L->now_ns);
        if (L->ex.ops->execute(L->ex.self, b, &R->out, e)) return -1;
        assert(R->out.duration_ns > 0);
        assert(R->out.num_kernel_times == 0); /* a timed engine is one replica: run_single */
        R->start_ns = L->now_ns;
        R->end_ns = L->now_ns + R->out.duration_ns;
        heap_push(busy, R);
        return 0;
    }
    return 0;
}

static void mark_dirty(replica *R, replica **dirty, int32_t *num_dirty)
{
    if (R->dirty || R->heap_pos >= 0) return;
    R->dirty = true;
    dirty[(*num_dirty)++] = R;
}

static int run_cluster(loop_state *L, arrival_source src, tclock *clock, const router_ops *router, void *rt, terr *e)
{
    const int32_t N = L->num_replicas;
    rep_heap busy = {.items = xcalloc((size_t)N, sizeof *busy.items)};
    replica **dirty = xcalloc((size_t)N, sizeof *dirty);
    int32_t num_dirty = 0;
    int rc = 0;
    arrival next;
    int have = src.next(src.self, &next, e);
    int64_t next_id = 0;
    if (have < 0) rc = -1;
    L->now_ns = clock->now(clock);

    while (rc == 0) {
        /* the next event: an arrival (unless the closed loop holds it) or the earliest step end */
        int64_t t_arr = have == 1 && !held(L) ? max_i64(next.arrival_ns, L->now_ns) : INT64_MAX;
        int64_t t_step = busy.n ? busy.items[0]->end_ns : INT64_MAX;
        if (t_arr == INT64_MAX && t_step == INT64_MAX && num_dirty == 0) {
            /* nothing can happen: whatever idle replicas hold, their policies will never run */
            bool any = false;
            for (int32_t i = 0; i < N; i++)
                if (L->reps[i].num_live) reject_all_unschedulable(&L->reps[i]), any = true;
            if (!any) break;
            continue;
        }
        if (num_dirty == 0 || min_i64(t_arr, t_step) == L->now_ns) {
            if (t_step <= t_arr) {
                replica *R = heap_pop(&busy);
                L->now_ns = t_step;
                clock->wait_until(clock, L->now_ns);
                apply_step(R, &R->out, R->start_ns, 0);
                mark_dirty(R, dirty, &num_dirty);
                if ((rc = max_steps_reached(L, e))) break;
            } else {
                L->now_ns = t_arr;
                clock->wait_until(clock, L->now_ns);
                request *r = make_request(L, &next, next_id++);
                r->arrival_ns = L->now_ns; /* later than the trace's when the closed loop held it */
                int32_t k = N == 1 ? 0 : router->route(rt, r, L->now_ns);
                assert(k >= 0 && k < N);
                r->replica = k;
                L->load[k].outstanding++;
                L->load[k].pending_prefill_tokens += r->prompt_tokens;
                replica *R = &L->reps[k];
                if (!rejected_on_arrival(R, r)) {
                    inbox_push(R, r);
                    mark_dirty(R, dirty, &num_dirty);
                }
                have = src.next(src.self, &next, e);
                if (have < 0) rc = -1;
                if (have == 0) /* replicas waiting for an arrival wait for nothing now */
                    for (int32_t i = 0; i < N; i++)
                        if (L->reps[i].num_live) mark_dirty(&L->reps[i], dirty, &num_dirty);
            }
            continue;
        }
        /* every event at this instant is in: idle replicas with news schedule, in index order */
        for (int32_t i = 0; i < num_dirty && rc == 0; i++) {
            int32_t j = i;
            for (int32_t k = i + 1; k < num_dirty; k++)
                if (dirty[k]->index < dirty[j]->index) j = k;
            replica *R = dirty[j];
            dirty[j] = dirty[i];
            rc = schedule_replica(L, R, &busy, have == 1, e);
        }
        num_dirty = 0;
    }
    free(busy.items);
    free(dirty);
    return rc;
}

/* ---- set-up and tear-down ---- */

static void replica_init(loop_state *L, replica *R, int32_t index, const void *knobs)
{
    const serve_config *cfg = L->cfg;
    R->L = L;
    R->index = index;
    R->heap_pos = -1;
    kv_init(&R->kv, cfg->num_gpu_blocks, cfg->sched.block_size, cfg->sched.enable_prefix_caching);
    if (cfg->num_host_blocks > 0) kv_init(&R->swap, cfg->num_host_blocks, cfg->sched.block_size, false);
    R->rng = gsl_rng_alloc(gsl_rng_mt19937);
    /* replica 0 draws what a lone server draws; the others their own streams */
    gsl_rng_set(R->rng, cfg->seed + (uint64_t)index * 0x9e3779b97f4a7c15ULL);
    R->env = (sched_env){
        .cfg = &cfg->sched,
        .kv = &R->kv,
        .swap = cfg->num_host_blocks > 0 ? &R->swap : NULL,
        .rng = R->rng,
        .knobs = knobs,
        .reject = reject_live,
        .loop = R,
    };
    R->policy = cfg->policy->create(&R->env);
    batch_init(&R->b, cfg->sched.max_num_seqs);
    if (cfg->async_scheduling) batch_init(&R->b_next, cfg->sched.max_num_seqs);
    for (int32_t i = 0; i < (cfg->async_scheduling ? 2 : 1); i++) {
        R->fl[i].done = xmalloc(sizeof *R->fl[i].done * (size_t)cfg->sched.max_num_seqs);
        R->fl[i].out_index = xmalloc(sizeof *R->fl[i].out_index * (size_t)cfg->sched.max_num_seqs);
    }
}

/* Frees R; returns the KV blocks still in use once its requests are dropped (must be 0). */
static int32_t replica_free(loop_state *L, replica *R)
{
    const serve_config *cfg = L->cfg;
    /* on an error, live and routed requests are dropped without rows: the run failed as a whole */
    while (R->live_head) {
        request *r = R->live_head;
        cfg->policy->remove_request(R->policy, r);
        kv_free_request(&R->kv, r);
        if (R->swap.num_blocks) kv_free_table(&R->swap, &r->host_blocks);
        live_remove(R, r);
        r->next = L->free_list;
        L->free_list = r;
    }
    while (R->inbox_head) {
        request *r = R->inbox_head;
        R->inbox_head = r->next;
        r->next = L->free_list;
        L->free_list = r;
    }
    int32_t leaked = kv_num_used(&R->kv);
    cfg->policy->destroy(R->policy);
    batch_free(&R->b);
    if (cfg->async_scheduling) batch_free(&R->b_next);
    for (int32_t i = 0; i < 2; i++) free(R->fl[i].done), free(R->fl[i].out_index);
    kv_destroy(&R->kv);
    if (cfg->num_host_blocks > 0) kv_destroy(&R->swap);
    gsl_rng_free(R->rng);
    return leaked;
}

int serve_run(const serve_config *cfg, arrival_source src, executor ex, tclock *clock, metrics *m,
              const serve_hooks *hooks, serve_result *res, terr *e)
{
    const int32_t N = cfg->num_replicas > 1 ? cfg->num_replicas : 1;
    const bool cluster = N > 1 || cfg->cluster_loop;
    if (cluster && clock->real_time)
        return terr_set(e, "--num-replicas is a simulator option: a real engine is one replica");
    if (N > 1 && !cfg->router) return terr_set(e, "--router: a cluster of %d replicas needs one", N);
    if (cfg->async_scheduling && cluster)
        return terr_set(e, "--async-scheduling: one replica only (not with --num-replicas or the cluster loop)");
    loop_state L = {.cfg = cfg, .ex = ex, .m = m, .hooks = hooks, .num_replicas = N};
    const void *knobs = cfg->policy_knobs;
    if (!knobs && cfg->policy->knobs) {
        knobs = L.default_knobs = xcalloc(1, cfg->policy->knobs_size);
        opts_defaults(cfg->policy->knobs, L.default_knobs);
    }
    L.reps = xcalloc((size_t)N, sizeof *L.reps);
    for (int32_t i = 0; i < N; i++) replica_init(&L, &L.reps[i], i, knobs);

    int rc;
    if (!cluster) rc = cfg->async_scheduling ? run_single_async(&L, src, clock, e) : run_single(&L, src, clock, e);
    else {
        L.load = xcalloc((size_t)N, sizeof *L.load);
        for (int32_t i = 0; i < N; i++) L.load[i].kv_blocks_total = L.reps[i].kv.num_blocks;
        gsl_rng *router_rng = gsl_rng_alloc(gsl_rng_mt19937);
        /* the router's own stream, so routing does not shift the policies' draws */
        gsl_rng_set(router_rng, cfg->seed ^ 0x726f75746572ULL);
        router_env renv = {.num_replicas = N, .load = L.load, .block_size = cfg->sched.block_size,
                           .rng = router_rng, .load_cap = cfg->router_load_cap};
        void *rt = N > 1 ? cfg->router->create(&renv) : NULL;
        rc = run_cluster(&L, src, clock, cfg->router, rt, e);
        if (rt) cfg->router->destroy(rt);
        gsl_rng_free(router_rng);
    }

    /* the kernel time of the steps still waiting for it, before the metrics are finished */
    if (rc == 0 && m && ex.ops->settle && ex.ops->measures_kernels && ex.ops->measures_kernels(ex.self)) {
        const step_kernel_time *k;
        int32_t n = 0;
        rc = ex.ops->settle(ex.self, &k, &n, e);
        if (rc == 0 && n) metrics_step_kernels(m, k, (size_t)n);
    }

    if (res) {
        *res = (serve_result){
            .num_requests = L.num_requests,
            .num_finished = L.num_finished,
            .num_rejected = L.num_rejected,
            .num_steps = L.num_steps,
            .end_ns = L.now_ns,
            .peak_live = L.peak_live,
        };
    }
    int32_t leaked = 0;
    for (int32_t i = 0; i < N; i++) leaked += replica_free(&L, &L.reps[i]);
    if (res) res->kv_blocks_leaked = leaked;
    while (L.free_list) {
        request *r = L.free_list;
        L.free_list = r->next;
        request_free_buffers(r);
        free(r);
    }
    free(L.reps);
    free(L.load);
    if (L.default_knobs) {
        opts_free(cfg->policy->knobs, L.default_knobs);
        free(L.default_knobs);
    }
    return rc;
}
