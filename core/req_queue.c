/* req_queue.c: see req_queue.h. */
#include "req_queue.h"

#include <assert.h>
#include <stdlib.h>

#include "util.h"

void rq_insert_before(req_queue *q, request *pos, request *r)
{
    if (!pos) {
        r->next = NULL;
        r->prev = q->tail;
        if (q->tail) q->tail->next = r;
        else q->head = r;
        q->tail = r;
    } else {
        r->next = pos;
        r->prev = pos->prev;
        if (pos->prev) pos->prev->next = r;
        else q->head = r;
        pos->prev = r;
    }
    q->len++;
}

void rq_push_back(req_queue *q, request *r) { rq_insert_before(q, NULL, r); }
void rq_push_front(req_queue *q, request *r) { rq_insert_before(q, q->head, r); }

void rq_remove(req_queue *q, request *r)
{
    if (r->prev) r->prev->next = r->next;
    else q->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else q->tail = r->prev;
    r->prev = r->next = NULL;
    q->len--;
    assert(q->len >= 0);
}

request *rq_pop_front(req_queue *q)
{
    request *r = q->head;
    if (r) rq_remove(q, r);
    return r;
}

request *rq_pop_back(req_queue *q)
{
    request *r = q->tail;
    if (r) rq_remove(q, r);
    return r;
}

/* ---- heap ---- */

void rh_init(req_heap *h, req_cmp_fn cmp) { *h = (req_heap){.cmp = cmp}; }
void rh_free(req_heap *h) { free(h->items); *h = (req_heap){0}; }

static void place(req_heap *h, int32_t i, request *r)
{
    h->items[i] = r;
    r->heap_index = i;
}

static void sift_up(req_heap *h, int32_t i)
{
    request *r = h->items[i];
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (h->cmp(r, h->items[p]) >= 0) break;
        place(h, i, h->items[p]);
        i = p;
    }
    place(h, i, r);
}

static void sift_down(req_heap *h, int32_t i)
{
    request *r = h->items[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= h->len) break;
        if (c + 1 < h->len && h->cmp(h->items[c + 1], h->items[c]) < 0) c++;
        if (h->cmp(h->items[c], r) >= 0) break;
        place(h, i, h->items[c]);
        i = c;
    }
    place(h, i, r);
}

void rh_push(req_heap *h, request *r)
{
    if (h->len == h->cap) {
        size_t cap = (size_t)h->cap;
        grow_array((void **)&h->items, sizeof *h->items, &cap, cap + 1);
        h->cap = (int32_t)cap;
    }
    h->items[h->len++] = r;
    sift_up(h, h->len - 1);
}

request *rh_peek(const req_heap *h) { return h->len ? h->items[0] : NULL; }

void rh_remove(req_heap *h, request *r)
{
    int32_t i = r->heap_index;
    assert(i >= 0 && i < h->len && h->items[i] == r);
    request *last = h->items[--h->len];
    r->heap_index = -1;
    if (i == h->len) return;
    place(h, i, last);
    sift_up(h, i);
    sift_down(h, last->heap_index);
}

request *rh_pop(req_heap *h)
{
    request *r = rh_peek(h);
    if (r) rh_remove(h, r);
    return r;
}

void rh_update(req_heap *h, request *r)
{
    sift_up(h, r->heap_index);
    sift_down(h, r->heap_index);
}

int req_cmp_fcfs(const request *a, const request *b)
{
    if (a->arrival_ns != b->arrival_ns) return a->arrival_ns < b->arrival_ns ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

int req_cmp_priority(const request *a, const request *b)
{
    if (a->priority != b->priority) return a->priority < b->priority ? -1 : 1;
    return req_cmp_fcfs(a, b);
}
