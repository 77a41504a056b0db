/*
 * batch.h: what runs in one model step. This is the data that crosses the seam between the
 * scheduling core (policy + block manager) and an executor (cost model or GPU): the policy fills
 * a batch, the executor runs it and says how long it took.
 *
 * Each item is one request with the number of tokens it computes this step. The item's tokens
 * are positions [context_tokens, context_tokens + num_tokens) of the request's sequence; their KV
 * goes into the request's block table, which the policy has already grown to cover them. A chunk
 * that reaches the end of the sequence samples one new token (emits_token).
 *
 * Swap operations (preemption by swapping) are block copies the executor performs before the
 * forward pass: GPU -> host for swap_out, host -> GPU for swap_in.
 *
 * The batch's arrays are allocated once (batch_init) and reused every step.
 */
#ifndef TANDEM_BATCH_H
#define TANDEM_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "request.h"

typedef struct sched_item {
    request *req;
    int32_t num_tokens;     /* tokens computed this step (>= 1) */
    int32_t context_tokens; /* tokens already in the KV cache before this step */
    bool emits_token;       /* context + num_tokens reaches the end of the sequence */
    bool is_decode;         /* a single-token step of a request past its prompt */
} sched_item;

/* A step's shape: the exact integer sums over its items that a step's cost depends on, and the
 * GPU's heat as it starts. Cost models predict from it, steps.csv records the sums (and the
 * timeline the heat is recomputed from), so a measured step can be re-predicted from its row.
 * For an item of n tokens after c cached ones, a prefill chunk attends n(2c + n + 1) / 2 causal
 * (query, key) pairs over c + n keys; a decode attends c + 1 keys. */
typedef struct step_shape {
    int32_t num_items;
    int32_t num_prefill_seqs;   /* items that are not decodes (prompt chunks, recomputation) */
    int32_t num_decode_seqs;
    int32_t num_emitting;       /* items that sample a token */
    int64_t prefill_tokens;     /* queries of the prefill items */
    int64_t decode_tokens;
    int64_t padding_tokens;     /* rows computed for nothing (static batching) */
    int64_t prefill_pairs2;     /* sum n (2c + n + 1): twice the causal pairs */
    int64_t prefill_keys;       /* sum c + n over prefill items */
    int64_t decode_keys;        /* sum c + 1 over decodes */
    int64_t decode_keys_sq;     /* sum (c + 1)^2 over decodes: with decode_keys, the spread */
    int32_t max_keys;           /* the longest context any item attends to */
    int32_t swap_blocks;        /* blocks swapped in + out before the forward pass */
    double heat;                /* the GPU's recent load as the step starts (core/heat.h): not a
                                   sum over items, but what the serving loop knows of the GPU */
} step_shape;

typedef struct kv_swap {
    int32_t gpu_block;
    int32_t host_block;
    int32_t order; /* place among the pass's swaps, outs and ins together: a block freed by one
                      swap may be reused by a later one, so a real copier keeps this order */
} kv_swap;

typedef struct batch {
    sched_item *items; /* (num_items) in the order the policy scheduled them */
    int32_t num_items;
    int32_t cap_items;
    int64_t num_tokens;         /* sum of items' num_tokens */
    int64_t num_prefill_tokens; /* tokens of non-decode items */
    int64_t num_decode_tokens;
    int64_t num_padding_tokens; /* rows computed for nothing (static batching pads prompts to the
                                   longest and keeps finished members' slots): they cost GEMM
                                   time and produce no token */
    int32_t num_emitting;       /* items that sample a token */
    double heat;                /* the GPU's heat as the step starts, set by the serving loop */
    step_shape sums;            /* the items' sums that batch_shape reports (seqs, tokens, pairs,
                                   keys, max_keys), kept as items come and go so a step's shape
                                   costs no pass over its items; its other fields unused */
    int32_t num_preempted;      /* requests preempted while forming this batch */
    request **preempted;        /* (num_preempted) those requests, in order */
    int32_t cap_preempted;
    kv_swap *swap_out;          /* (num_swap_out) */
    kv_swap *swap_in;           /* (num_swap_in) */
    int32_t num_swap_out, num_swap_in;
    int32_t cap_swap_out, cap_swap_in;
} batch;

void batch_init(batch *b, int32_t cap_items);
void batch_free(batch *b);
void batch_clear(batch *b);

/* Appends `num_tokens` tokens of r, starting at r->num_computed_tokens. The caller has checked
 * the budgets and allocated the KV slots. Returns the new item. */
sched_item *batch_add(batch *b, request *r, int32_t num_tokens);

/* Removes r's item (used when a request scheduled earlier in this step is preempted). Returns
 * the number of tokens it had, 0 if r was not in the batch. Keeps the other items in order. */
int32_t batch_remove(batch *b, const request *r);

/* The batch's shape (step_shape above). O(1): the item sums are kept by batch_add and
 * batch_remove. */
step_shape batch_shape(const batch *b);

void batch_add_swap_out(batch *b, int32_t gpu_block, int32_t host_block);
void batch_note_preempted(batch *b, request *r);
void batch_add_swap_in(batch *b, int32_t gpu_block, int32_t host_block);

#endif
