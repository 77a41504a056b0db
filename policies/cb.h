/*
 * cb.h: the continuous-batching skeleton that vllm, priority, sarathi, sjf, srpt and fair share.
 *
 * Every one of these policies runs vLLM V1's step: a pass over the running requests (each
 * takes the tokens it needs under one token budget, preempting when KV blocks run out), then,
 * if nothing was preempted, an admission pass over the waiting requests. They differ only in
 * a few decisions, which a variant supplies:
 *   - the waiting order (FIFO with preempted requests at the front, or a heap on a key),
 *   - which running request is the victim when blocks run out (the newest, or the least
 *     important),
 *   - whether an admission may displace running requests less important than the candidate,
 *   - whether decodes go before prefill chunks in the running pass, and the per-step budget,
 *   - bookkeeping on arrival and after each step (predicted lengths, fairness counters).
 * The mechanisms (preemption by recompute or swap, prefix-cache hits, swap-in) come from
 * core/sched.h and are the same for all.
 */
#ifndef TANDEM_CB_H
#define TANDEM_CB_H

#include <stdbool.h>

#include "core/req_queue.h"
#include "core/sched.h"

typedef struct cb_state cb_state;

typedef struct cb_variant {
    /* waiting container: arrival, return after preemption, head, removal */
    void (*wait_push)(cb_state *s, request *r);
    void (*wait_requeue)(cb_state *s, request *r);
    request *(*wait_peek)(cb_state *s);
    void (*wait_remove)(cb_state *s, request *r);
    /* victim when running request r cannot get KV blocks; NULL: the tail of the running list */
    request *(*victim)(cb_state *s, request *r);
    /* a running request strictly less important than `cand` to preempt so cand can be
     * admitted, or NULL (NULL hook: admissions never displace). `need_blocks` is how many more
     * KV blocks cand needs (0 when the limit is max_num_seqs): a variant should refuse when
     * preempting every less important request would not free them. */
    request *(*displace)(cb_state *s, const request *cand, int32_t need_blocks);
    bool decodes_first;       /* running pass: decodes, then prefill chunks (sarathi) */
    bool always_chunk;        /* prompts are chunked whatever --enable-chunked-prefill says */
    reject_reason (*on_arrival)(cb_state *s, request *r); /* optional; before wait_push */
    void (*on_step_done)(cb_state *s, const batch *b);    /* optional */
    void (*on_remove)(cb_state *s, request *r);           /* optional; r leaves the system */
} cb_variant;

struct cb_state {
    sched_env *env;
    const cb_variant *v;
    req_queue running;  /* admission order */
    req_queue fifo;     /* stock FIFO waiting queue */
    req_heap heap;      /* stock ordered waiting queue */
    int32_t num_waiting;
    int64_t chunk_size; /* > 0: the per-step token budget is min(chunk_size, max_num_batched_tokens) */
    void *ext;          /* the variant's own state */
};

/* Creates the state; `heap_order` is the heap's order when the variant uses the stock heap. */
cb_state *cb_create(sched_env *env, const cb_variant *v, req_cmp_fn heap_order);

/* The policy_ops functions, shared by every variant (a variant's policy_ops points here). */
void cb_destroy(void *self);
reject_reason cb_add_request(void *self, request *r);
void cb_schedule(void *self, batch *b);
void cb_remove_request(void *self, request *r);
void cb_step_done(void *self, const batch *b);
int32_t cb_num_running(const void *self);
int32_t cb_num_waiting(const void *self);

/* Stock waiting containers. FIFO: arrivals at the back, preempted requests at the front (vLLM).
 * Heap: both pushed into the heap (order decides). */
void cb_fifo_push(cb_state *s, request *r);
void cb_fifo_requeue(cb_state *s, request *r);
request *cb_fifo_peek(cb_state *s);
void cb_fifo_remove(cb_state *s, request *r);
void cb_heap_push(cb_state *s, request *r);
void cb_heap_requeue(cb_state *s, request *r);
request *cb_heap_peek(cb_state *s);
void cb_heap_remove(cb_state *s, request *r);

/* The running request that `cmp` orders last (least important), or NULL if none. */
request *cb_running_max(cb_state *s, req_cmp_fn cmp);
/* The displacement rule priority and srpt share: the running request `order` puts last, if
 * less_important(it, cand), and only if preempting every running request less important than
 * cand would free need_blocks. NULL otherwise. */
request *cb_displace_least_important(cb_state *s, const request *cand, int32_t need_blocks, req_cmp_fn order,
                                     bool (*less_important)(const request *r, const request *cand));

/* The policy_ops of a cb variant: only the name, summary and create function differ, and the
 * knobs, given as further designated initializers (`.knobs = ..., .knobs_size = ...`). */
#define CB_POLICY_OPS(NAME, SUMMARY, CREATE, DESTROY, ...)                                       \
    {                                                                                            \
        .name = NAME, .summary = SUMMARY, .create = CREATE, .destroy = DESTROY,                  \
        .add_request = cb_add_request, .schedule = cb_schedule, .remove_request = cb_remove_request, \
        .step_done = cb_step_done, .num_running = cb_num_running, .num_waiting = cb_num_waiting, \
        __VA_ARGS__                                                                              \
    }

#endif
