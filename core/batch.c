/* batch.c: see batch.h.
 *
 * The shape's sums are kept as items are added and removed (integers: exact in any order), so
 * batch_shape does not walk the items. Only a removal of the item with the longest context
 * walks them again, for the new max_keys. Test builds recompute the shape on every call and
 * abort if the kept sums differ. */
#include "batch.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

void batch_init(batch *b, int32_t cap_items)
{
    *b = (batch){0};
    b->cap_items = cap_items > 0 ? cap_items : 1;
    b->items = xcalloc((size_t)b->cap_items, sizeof *b->items);
}

void batch_free(batch *b)
{
    free(b->items);
    free(b->swap_out);
    free(b->swap_in);
    free(b->preempted);
    *b = (batch){0};
}

void batch_clear(batch *b)
{
    b->num_items = 0;
    b->num_tokens = b->num_prefill_tokens = b->num_decode_tokens = b->num_padding_tokens = 0;
    b->num_emitting = b->num_preempted = 0;
    b->heat = 0;
    b->sums = (step_shape){0};
    b->num_swap_out = b->num_swap_in = 0;
}

/* Adds (sign 1) or takes away (sign -1) item it's terms of the shape's sums, max_keys aside. */
static void sums_update(step_shape *s, const sched_item *it, int32_t sign)
{
    int64_t n = it->num_tokens, c = it->context_tokens;
    if (it->is_decode) {
        s->num_decode_seqs += sign;
        s->decode_tokens += sign * n;
        s->decode_keys += sign * (c + 1);
        s->decode_keys_sq += sign * (c + 1) * (c + 1);
    } else {
        s->num_prefill_seqs += sign;
        s->prefill_tokens += sign * n;
        s->prefill_pairs2 += sign * n * (2 * c + n + 1);
        s->prefill_keys += sign * (c + n);
    }
}

static int32_t item_keys(const sched_item *it) { return it->context_tokens + it->num_tokens; }

sched_item *batch_add(batch *b, request *r, int32_t num_tokens)
{
    assert(num_tokens > 0);
    assert(r->num_computed_tokens + num_tokens <= request_num_tokens(r));
    if (b->num_items == b->cap_items) {
        size_t cap = (size_t)b->cap_items;
        grow_array((void **)&b->items, sizeof *b->items, &cap, cap + 1);
        b->cap_items = (int32_t)cap;
    }
    sched_item *it = &b->items[b->num_items++];
    it->req = r;
    it->num_tokens = num_tokens;
    it->context_tokens = r->num_computed_tokens;
    it->emits_token = r->num_computed_tokens + num_tokens == request_num_tokens(r);
    it->is_decode = num_tokens == 1 && it->emits_token && r->num_output_tokens > 0 &&
                    r->num_computed_tokens >= r->prompt_tokens;
    b->num_tokens += num_tokens;
    if (it->is_decode) b->num_decode_tokens += num_tokens;
    else b->num_prefill_tokens += num_tokens;
    b->num_emitting += it->emits_token;
    sums_update(&b->sums, it, 1);
    if (item_keys(it) > b->sums.max_keys) b->sums.max_keys = item_keys(it);
    return it;
}

int32_t batch_remove(batch *b, const request *r)
{
    for (int32_t i = 0; i < b->num_items; i++) {
        if (b->items[i].req != r) continue;
        sched_item it = b->items[i];
        memmove(&b->items[i], &b->items[i + 1], (size_t)(b->num_items - i - 1) * sizeof *b->items);
        b->num_items--;
        b->num_tokens -= it.num_tokens;
        if (it.is_decode) b->num_decode_tokens -= it.num_tokens;
        else b->num_prefill_tokens -= it.num_tokens;
        b->num_emitting -= it.emits_token;
        sums_update(&b->sums, &it, -1);
        if (item_keys(&it) == b->sums.max_keys) { /* it may have been the only one that long */
            b->sums.max_keys = 0;
            for (int32_t k = 0; k < b->num_items; k++)
                b->sums.max_keys = max_i32(b->sums.max_keys, item_keys(&b->items[k]));
        }
        return it.num_tokens;
    }
    return 0;
}

static void push_swap(kv_swap **arr, int32_t *n, int32_t *cap, int32_t gpu, int32_t host, int32_t order)
{
    if (*n == *cap) {
        size_t c = (size_t)*cap;
        grow_array((void **)arr, sizeof **arr, &c, c + 1);
        *cap = (int32_t)c;
    }
    (*arr)[(*n)++] = (kv_swap){gpu, host, order};
}

void batch_add_swap_out(batch *b, int32_t gpu_block, int32_t host_block)
{
    push_swap(&b->swap_out, &b->num_swap_out, &b->cap_swap_out, gpu_block, host_block,
              b->num_swap_out + b->num_swap_in);
}

void batch_add_swap_in(batch *b, int32_t gpu_block, int32_t host_block)
{
    push_swap(&b->swap_in, &b->num_swap_in, &b->cap_swap_in, gpu_block, host_block,
              b->num_swap_out + b->num_swap_in);
}

void batch_note_preempted(batch *b, request *r)
{
    if (b->num_preempted == b->cap_preempted) {
        size_t cap = (size_t)b->cap_preempted;
        grow_array((void **)&b->preempted, sizeof *b->preempted, &cap, cap + 1);
        b->cap_preempted = (int32_t)cap;
    }
    b->preempted[b->num_preempted++] = r;
}

#ifdef TANDEM_CHECKS
/* The shape's sums the slow way, for the check in batch_shape. */
static step_shape sums_recomputed(const batch *b)
{
    step_shape s = {0};
    for (int32_t i = 0; i < b->num_items; i++) {
        sums_update(&s, &b->items[i], 1);
        s.max_keys = max_i32(s.max_keys, item_keys(&b->items[i]));
    }
    return s;
}
#endif

step_shape batch_shape(const batch *b)
{
    step_shape s = b->sums;
    s.num_items = b->num_items;
    s.num_emitting = b->num_emitting;
    s.padding_tokens = b->num_padding_tokens;
    s.swap_blocks = b->num_swap_in + b->num_swap_out;
    s.heat = b->heat;
#ifdef TANDEM_CHECKS
    step_shape r = sums_recomputed(b);
    if (r.num_prefill_seqs != s.num_prefill_seqs || r.num_decode_seqs != s.num_decode_seqs ||
        r.prefill_tokens != s.prefill_tokens || r.decode_tokens != s.decode_tokens ||
        r.prefill_pairs2 != s.prefill_pairs2 || r.prefill_keys != s.prefill_keys || r.decode_keys != s.decode_keys ||
        r.decode_keys_sq != s.decode_keys_sq || r.max_keys != s.max_keys) {
        fprintf(stderr, "batch_shape: kept sums differ from the items': prefill seqs %d/%d, decode seqs %d/%d, "
                        "prefill pairs2 %lld/%lld, decode keys %lld/%lld, max keys %d/%d (kept/items)\n",
                s.num_prefill_seqs, r.num_prefill_seqs, s.num_decode_seqs, r.num_decode_seqs,
                (long long)s.prefill_pairs2, (long long)r.prefill_pairs2, (long long)s.decode_keys,
                (long long)r.decode_keys, s.max_keys, r.max_keys);
        abort();
    }
#endif
    return s;
}
