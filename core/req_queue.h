/*
 * req_queue.h: the two containers policies keep requests in.
 *
 * req_queue: an intrusive doubly linked FIFO through request.prev/next. O(1) push and pop at
 * both ends and O(1) removal from the middle (preempting a victim, finishing a request). A
 * request is in at most one req_queue at a time.
 *
 * req_heap: a binary min-heap of request pointers under a policy's comparison (priority,
 * predicted length, virtual time...). request.heap_index makes removal and re-keying O(log n).
 * Comparisons must be total (break ties by arrival, then id) so schedules are deterministic.
 */
#ifndef TANDEM_REQ_QUEUE_H
#define TANDEM_REQ_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "request.h"

typedef struct req_queue {
    request *head, *tail;
    int32_t len;
} req_queue;

void rq_push_back(req_queue *q, request *r);
void rq_push_front(req_queue *q, request *r);
request *rq_pop_front(req_queue *q);
request *rq_pop_back(req_queue *q);
void rq_remove(req_queue *q, request *r);
/* Inserts r before `pos` (at the back when pos is NULL). */
void rq_insert_before(req_queue *q, request *pos, request *r);
static inline bool rq_empty(const req_queue *q) { return q->len == 0; }

/* Returns < 0 when a must come before b. */
typedef int (*req_cmp_fn)(const request *a, const request *b);

typedef struct req_heap {
    request **items; /* (len) heap-ordered */
    int32_t len, cap;
    req_cmp_fn cmp;
} req_heap;

void rh_init(req_heap *h, req_cmp_fn cmp);
void rh_free(req_heap *h);
void rh_push(req_heap *h, request *r);
request *rh_peek(const req_heap *h);
request *rh_pop(req_heap *h);
void rh_remove(req_heap *h, request *r);
/* Restores heap order after r's key changed. */
void rh_update(req_heap *h, request *r);

/* Common orders: (arrival, id) and (priority, arrival, id). */
int req_cmp_fcfs(const request *a, const request *b);
int req_cmp_priority(const request *a, const request *b);

#endif
