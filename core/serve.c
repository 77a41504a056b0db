/* serve.c: see serve.h. */
#include "serve.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "req_queue.h"
#include "work.h"

/* Requests are recycled through a free list so a long trace reuses the same few structs (and
 * their block tables) instead of allocating per request. */
typedef struct loop_state {
    const serve_config *cfg;
    sched_env env;
    kv_manager kv, swap;
    void *policy;
    executor ex;
    metrics *m;
    request *free_list;
    request *live_head;   /* doubly linked through live_prev/live_next */
    int32_t num_live;
    int32_t peak_live;
    int64_t num_requests, num_finished, num_rejected;
    int64_t now_ns;
} loop_state;

static request *req_alloc(loop_state *L)
{
    request *r = L->free_list;
    if (r) L->free_list = r->next;
    else r = xcalloc(1, sizeof *r);
    request_reset(r);
    return r;
}

static void live_add(loop_state *L, request *r)
{
    r->live_prev = NULL;
    r->live_next = L->live_head;
    if (L->live_head) L->live_head->live_prev = r;
    L->live_head = r;
    if (++L->num_live > L->peak_live) L->peak_live = L->num_live;
}

static void live_remove(loop_state *L, request *r)
{
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else L->live_head = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    L->num_live--;
}

/* The request left the system: record it and recycle its struct. */
static void retire(loop_state *L, request *r)
{
    if (L->m) metrics_request_done(L->m, r);
    if (L->ex.ops->release) L->ex.ops->release(L->ex.self, r);
    r->next = L->free_list;
    L->free_list = r;
}

static void reject_live(sched_env *env, request *r, reject_reason why)
{
    loop_state *L = env->loop;
    if (r->blocks.len) L->env.kv_tokens -= r->num_computed_tokens;
    kv_free_request(&L->kv, r);
    if (L->swap.num_blocks) kv_free_table(&L->swap, &r->host_blocks);
    r->state = REQ_REJECTED;
    r->reject_reason = why;
    r->finish_ns = L->now_ns;
    live_remove(L, r);
    L->num_rejected++;
    retire(L, r);
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

static void admit(loop_state *L, const arrival *a, int64_t id)
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

    reject_reason why = serve_admission_check(&L->cfg->sched, L->kv.num_blocks, r->prompt_tokens,
                                              r->max_output_tokens);
    if (why == REJECT_NONE) why = L->cfg->policy->add_request(L->policy, r);
    if (why != REJECT_NONE) {
        r->state = REQ_REJECTED;
        r->reject_reason = why;
        r->finish_ns = r->arrival_ns;
        L->num_rejected++;
        retire(L, r);
        return;
    }
    live_add(L, r);
}

static void finish(loop_state *L, request *r)
{
    L->cfg->policy->remove_request(L->policy, r);
    L->env.kv_tokens -= r->num_computed_tokens;
    kv_free_request(&L->kv, r);
    r->state = REQ_FINISHED;
    r->finish_ns = L->now_ns;
    live_remove(L, r);
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
static void check_invariants(loop_state *L)
{
    kv_check(&L->kv);
    if (L->swap.num_blocks) kv_check(&L->swap);
    int64_t refs = 0, host = 0;
    for (int32_t b = 0; b < L->kv.num_blocks; b++) refs += L->kv.ref_count[b];
    int64_t held = 0, tokens = 0;
    int32_t n = 0;
    for (request *r = L->live_head; r; r = r->live_next, n++) {
        held += r->blocks.len;
        if (r->blocks.len) tokens += r->num_computed_tokens;
        host += r->host_blocks.len;
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
    if (tokens != L->env.kv_tokens) {
        fprintf(stderr, "invariant: live requests hold %lld KV tokens, the count says %lld\n", (long long)tokens,
                (long long)L->env.kv_tokens);
        abort();
    }
    if (held != refs || n != L->num_live ||
        (L->swap.num_blocks && host != L->swap.num_blocks - L->swap.num_free)) {
        fprintf(stderr, "invariant: live tables hold %lld GPU refs, blocks have %lld (live %d/%d)\n",
                (long long)held, (long long)refs, n, L->num_live);
        abort();
    }
}
#endif

int serve_run(const serve_config *cfg, arrival_source src, executor ex, tclock *clock, metrics *m,
              const serve_hooks *hooks, serve_result *res, terr *e)
{
    loop_state L = {.cfg = cfg, .ex = ex, .m = m};
    kv_init(&L.kv, cfg->num_gpu_blocks, cfg->sched.block_size, cfg->sched.enable_prefix_caching);
    if (cfg->num_host_blocks > 0) kv_init(&L.swap, cfg->num_host_blocks, cfg->sched.block_size, false);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, cfg->seed);
    void *default_knobs = NULL;
    const void *knobs = cfg->policy_knobs;
    if (!knobs && cfg->policy->knobs) {
        knobs = default_knobs = xcalloc(1, cfg->policy->knobs_size);
        opts_defaults(cfg->policy->knobs, default_knobs);
    }
    L.env = (sched_env){
        .cfg = &cfg->sched,
        .kv = &L.kv,
        .swap = cfg->num_host_blocks > 0 ? &L.swap : NULL,
        .rng = rng,
        .knobs = knobs,
        .reject = reject_live,
        .loop = &L,
    };
    L.policy = cfg->policy->create(&L.env);

    batch b;
    batch_init(&b, cfg->sched.max_num_seqs);
    int rc = 0;
    arrival next;
    int have = src.next(src.self, &next, e);
    int64_t next_id = 0, step = 0;
    if (have < 0) rc = -1;
    /* Host time of the loop itself, for an executor that measures real work: from the previous
     * step's return to this step's call, less the time spent idle waiting for arrivals. */
    const bool timed = ex.ops->measures_host;
    int64_t host_mark = 0, idle_ns = 0;

    while (rc == 0) {
        L.now_ns = clock->now(clock);
        while (have == 1 && next.arrival_ns <= L.now_ns) {
            admit(&L, &next, next_id++);
            have = src.next(src.self, &next, e);
            if (have < 0) {
                rc = -1;
                break;
            }
        }
        if (rc) break;
        if (L.num_live == 0) {
            if (have == 0) break;
            idle_ns += wait_for(clock, next.arrival_ns, timed);
            continue;
        }

        batch_clear(&b);
        L.env.now_ns = L.now_ns;
        cfg->policy->schedule(L.policy, &b);
        if (b.num_items == 0 && b.num_swap_out == 0) {
            /* a pass that only preempted (its victim was the request it served first) changed
             * the state: schedule again at the same instant, as vLLM's next step would */
            if (b.num_preempted > 0) continue;
            if (have == 1) { /* nothing runnable now; something may change when the next request comes */
                idle_ns += wait_for(clock, next.arrival_ns, timed);
                continue;
            }
            /* no arrivals left and the policy will not run what it holds: end them, don't hang */
            while (L.live_head) {
                request *r = L.live_head;
                cfg->policy->remove_request(L.policy, r);
                reject_live(&L.env, r, REJECT_UNSCHEDULABLE);
            }
            continue;
        }

        step_result out = {0};
        int64_t sched_ns = timed && host_mark ? clock_mono_ns() - host_mark - idle_ns : 0;
        if (ex.ops->execute(ex.self, &b, &out, e)) {
            rc = -1;
            break;
        }
        if (timed) host_mark = clock_mono_ns(), idle_ns = 0;
        assert(out.duration_ns > 0);
        int64_t start = L.now_ns;
        clock->advance(clock, out.duration_ns);
        L.now_ns = clock->now(clock);

        /* apply: advance computed tokens, emit tokens, finish */
        for (int32_t i = 0; i < b.num_items; i++) {
            sched_item *it = &b.items[i];
            request *r = it->req;
            r->num_computed_tokens += it->num_tokens;
            L.env.kv_tokens += it->num_tokens;
            kv_cache_blocks(&L.kv, r, r->num_computed_tokens);
            if (!it->emits_token) continue;
            if (out.sampled) {
                if (r->num_output_tokens >= r->output_cap) {
                    size_t cap = (size_t)r->output_cap;
                    grow_array((void **)&r->output_ids, sizeof *r->output_ids, &cap,
                               (size_t)r->num_output_tokens + 1);
                    r->output_cap = (int32_t)cap;
                }
                r->output_ids[r->num_output_tokens] = out.sampled[i];
            }
            r->num_output_tokens++;
            if (r->first_token_ns < 0) r->first_token_ns = L.now_ns;
            else if (m) metrics_itl(m, L.now_ns - r->last_token_ns);
            r->last_token_ns = L.now_ns;
        }
        step_stats st = {
            .step = step,
            .start_ns = start,
            .duration_ns = out.duration_ns,
            .num_running = cfg->policy->num_running(L.policy),
            .num_waiting = cfg->policy->num_waiting(L.policy),
            .batch_size = b.num_items,
            .prefill_tokens = b.num_prefill_tokens,
            .decode_tokens = b.num_decode_tokens,
            .num_preemptions = b.num_preempted,
            .num_swap_blocks = b.num_swap_in + b.num_swap_out,
            .kv_blocks_total = L.kv.num_blocks,
            .block_size = cfg->sched.block_size,
            .shape = batch_shape(&b),
            .host_ns = sched_ns + out.host_ns,
            .sched_ns = sched_ns,
            .batch = &b,
        };
        if (cfg->model) {
            step_work w = step_work_of(cfg->model, &st.shape);
            st.flops = w.flops;
            st.bytes = w.bytes;
        }
        /* KV usage at its peak in the step, before finished requests release their blocks */
        st.kv_blocks_used = kv_num_used(&L.kv);
        st.kv_tokens = L.env.kv_tokens;
        for (int32_t i = 0; i < b.num_items; i++) {
            request *r = b.items[i].req;
            if (b.items[i].emits_token && request_is_done(r, cfg->sched.max_model_len)) finish(&L, r);
        }
        if (cfg->policy->step_done) cfg->policy->step_done(L.policy, &b);
        if (hooks && hooks->on_step) hooks->on_step(hooks->ud, step, &b, start, out.duration_ns);
        if (m) metrics_step(m, &st);
#ifdef TANDEM_CHECKS
        check_invariants(&L);
#endif
        step++;
        if (cfg->max_steps > 0 && step >= cfg->max_steps) {
            rc = terr_set(e, "stopped after --max-steps %lld steps with %d requests live",
                          (long long)cfg->max_steps, L.num_live);
            break;
        }
    }

    if (res) {
        *res = (serve_result){
            .num_requests = L.num_requests,
            .num_finished = L.num_finished,
            .num_rejected = L.num_rejected,
            .num_steps = step,
            .end_ns = L.now_ns,
            .peak_live = L.peak_live,
        };
    }
    /* on an error, live requests are dropped without rows: the run failed as a whole */
    while (L.live_head) {
        request *r = L.live_head;
        cfg->policy->remove_request(L.policy, r);
        kv_free_request(&L.kv, r);
        if (L.swap.num_blocks) kv_free_table(&L.swap, &r->host_blocks);
        live_remove(&L, r);
        r->next = L.free_list;
        L.free_list = r;
    }
    if (res) res->kv_blocks_leaked = kv_num_used(&L.kv);
    cfg->policy->destroy(L.policy);
    while (L.free_list) {
        request *r = L.free_list;
        L.free_list = r->next;
        request_free_buffers(r);
        free(r);
    }
    batch_free(&b);
    kv_destroy(&L.kv);
    if (cfg->num_host_blocks > 0) kv_destroy(&L.swap);
    gsl_rng_free(rng);
    if (default_knobs) {
        opts_free(cfg->policy->knobs, default_knobs);
        free(default_knobs);
    }
    return rc;
}
