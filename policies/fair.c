/*
 * fair.c: fair share across clients with the Virtual Token Counter, policy `fair`.
 *
 * VTC (Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024): every client
 * (the trace's `client` column) has a counter of the service it has received, in weighted
 * tokens: each prompt token computed counts w_p = 1 and each generated token w_q = 2 (the
 * paper's weights, reflecting that decode tokens cost more per token). Admission always
 * serves the backlogged client with the smallest counter, FIFO within a client. A client that
 * becomes backlogged again has its counter lifted to the smallest counter among backlogged
 * clients (or, if none, to the counter of the last client served), so idle time is not
 * banked as credit. Otherwise the step is vLLM V1's (policies/cb.c): running requests first,
 * the newest is the victim when KV runs out, preempted requests return to the front of their
 * client's queue.
 *
 * Where it differs from the paper's VTC: counters are charged once a step, for the tokens the
 * step computed (the paper charges as tokens are produced; the same totals, a step later), and
 * a preempted request's recomputed prompt tokens are charged again (its client pays for the
 * prefill the server redoes). Clients are not weighted: every client's share is equal.
 */
#include <math.h>
#include <stdlib.h>

#include "cb.h"
#include "core/util.h"
#include "policies.h"

#define W_PROMPT 1.0
#define W_OUTPUT 2.0

typedef struct client_state {
    int32_t id;
    double counter;   /* weighted tokens served */
    req_queue queue;  /* this client's waiting requests, FIFO */
} client_state;

typedef struct fair_state {
    client_state *clients; /* (num_clients) in order of first appearance */
    size_t num_clients, cap;
    int32_t *slot_client;  /* (slot_cap) open addressing: client id -> index, -1 empty */
    int32_t *slot_id;
    size_t slot_cap;
    double last_served;    /* counter of the client served most recently */
} fair_state;

static size_t slot_of(const fair_state *f, int32_t id)
{
    size_t i = ((uint32_t)id * 2654435761u) & (f->slot_cap - 1);
    while (f->slot_client[i] >= 0 && f->slot_id[i] != id) i = (i + 1) & (f->slot_cap - 1);
    return i;
}

/* The state of client `id` (any int32: ids need not be dense), created on first sight. */
static client_state *client(cb_state *s, int32_t id)
{
    fair_state *f = s->ext;
    if (2 * (f->num_clients + 1) > f->slot_cap) { /* rehash at half full */
        size_t cap = f->slot_cap ? 2 * f->slot_cap : 64;
        free(f->slot_client);
        free(f->slot_id);
        f->slot_cap = cap;
        f->slot_client = xmalloc(cap * sizeof *f->slot_client);
        f->slot_id = xmalloc(cap * sizeof *f->slot_id);
        for (size_t i = 0; i < cap; i++) f->slot_client[i] = -1;
        for (size_t c = 0; c < f->num_clients; c++) {
            size_t i = slot_of(f, f->clients[c].id);
            f->slot_client[i] = (int32_t)c;
            f->slot_id[i] = f->clients[c].id;
        }
    }
    size_t i = slot_of(f, id);
    if (f->slot_client[i] < 0) {
        grow_array((void **)&f->clients, sizeof *f->clients, &f->cap, f->num_clients + 1);
        f->clients[f->num_clients] = (client_state){.id = id};
        f->slot_client[i] = (int32_t)f->num_clients++;
        f->slot_id[i] = id;
    }
    return &f->clients[f->slot_client[i]];
}

/* Smallest counter among backlogged clients; NAN if none. */
static double min_backlogged(cb_state *s)
{
    fair_state *f = s->ext;
    double m = NAN;
    for (size_t i = 0; i < f->num_clients; i++)
        if (f->clients[i].queue.len && (isnan(m) || f->clients[i].counter < m)) m = f->clients[i].counter;
    return m;
}

static void lift(cb_state *s, client_state *c)
{
    if (c->queue.len) return; /* already backlogged */
    fair_state *f = s->ext;
    double floor_ = min_backlogged(s);
    if (isnan(floor_)) floor_ = f->last_served;
    if (c->counter < floor_) c->counter = floor_;
}

static void fair_push(cb_state *s, request *r)
{
    client_state *c = client(s, r->client_id);
    lift(s, c);
    rq_push_back(&c->queue, r);
}

static void fair_requeue(cb_state *s, request *r)
{
    client_state *c = client(s, r->client_id);
    lift(s, c);
    rq_push_front(&c->queue, r);
}

static request *fair_peek(cb_state *s)
{
    fair_state *f = s->ext;
    client_state *best = NULL;
    for (size_t i = 0; i < f->num_clients; i++) {
        client_state *c = &f->clients[i];
        if (!c->queue.len) continue;
        if (!best || c->counter < best->counter ||
            (c->counter == best->counter && req_cmp_fcfs(c->queue.head, best->queue.head) < 0))
            best = c;
    }
    return best ? best->queue.head : NULL;
}

static void fair_remove(cb_state *s, request *r) { rq_remove(&client(s, r->client_id)->queue, r); }

static void fair_step_done(cb_state *s, const batch *b)
{
    fair_state *f = s->ext;
    for (int32_t i = 0; i < b->num_items; i++) {
        const sched_item *it = &b->items[i];
        client_state *c = client(s, it->req->client_id);
        /* prompt tokens computed this step, and the generated token if one was sampled */
        int32_t prompt_part = 0;
        if (it->context_tokens < it->req->prompt_tokens)
            prompt_part = min_i32(it->num_tokens, it->req->prompt_tokens - it->context_tokens);
        c->counter += W_PROMPT * prompt_part + (it->emits_token ? W_OUTPUT : 0);
        f->last_served = c->counter;
    }
}

static const cb_variant fair_variant = {
    .wait_push = fair_push,
    .wait_requeue = fair_requeue,
    .wait_peek = fair_peek,
    .wait_remove = fair_remove,
    .on_step_done = fair_step_done,
};

static void *fair_create(sched_env *env)
{
    cb_state *s = cb_create(env, &fair_variant, NULL);
    s->ext = xcalloc(1, sizeof(fair_state));
    return s;
}

static void fair_destroy(void *self)
{
    cb_state *s = self;
    fair_state *f = s->ext;
    free(f->clients);
    free(f->slot_client);
    free(f->slot_id);
    cb_destroy(self); /* frees ext */
}

const policy_ops policy_fair =
    CB_POLICY_OPS("fair",
                  "Virtual Token Counter fair share across the trace's clients (VTC, OSDI 2024)",
                  fair_create, fair_destroy);
