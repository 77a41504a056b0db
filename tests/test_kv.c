/*
 * test_kv.c: the paged KV block manager: allocation, growth, freeing, exhaustion, LRU reuse
 * order, invariants, and the prefix cache (hits, sharing, eviction).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/kv.h"
#include "core/req_queue.h"
#include "testutil.h"

static request *mkreq(int64_t id, int32_t prompt)
{
    request *r = calloc(1, sizeof *r);
    request_reset(r);
    r->id = id;
    r->prompt_tokens = prompt;
    r->max_output_tokens = 8;
    return r;
}

static void drop(request *r)
{
    request_free_buffers(r);
    free(r);
}

START_TEST(allocate_grows_table_with_real_block_ids)
{
    kv_manager kv;
    kv_init(&kv, 8, 16, false);
    request *r = mkreq(0, 40);
    ck_assert(kv_allocate_slots(&kv, r, 40));      /* 40 tokens -> 3 blocks */
    ck_assert_int_eq(r->blocks.len, 3);
    ck_assert_int_eq(kv.num_free, 5);
    ck_assert(kv_allocate_slots(&kv, r, 48));      /* still 3 blocks */
    ck_assert_int_eq(r->blocks.len, 3);
    ck_assert(kv_allocate_slots(&kv, r, 49));      /* a 4th */
    ck_assert_int_eq(r->blocks.len, 4);
    /* distinct ids in range: they are slots on the GPU */
    for (int i = 0; i < 4; i++) {
        ck_assert(r->blocks.ids[i] >= 0 && r->blocks.ids[i] < 8);
        for (int j = 0; j < i; j++) ck_assert_int_ne(r->blocks.ids[i], r->blocks.ids[j]);
        ck_assert_int_eq(kv.ref_count[r->blocks.ids[i]], 1);
    }
    kv_check(&kv);
    kv_free_request(&kv, r);
    ck_assert_int_eq(r->blocks.len, 0);
    ck_assert_int_eq(kv.num_free, 8);
    kv_check(&kv);
    drop(r);
    kv_destroy(&kv);
}
END_TEST

START_TEST(exhaustion_is_all_or_nothing)
{
    kv_manager kv;
    kv_init(&kv, 4, 4, false);
    request *a = mkreq(0, 12), *b = mkreq(1, 12);
    ck_assert(kv_allocate_slots(&kv, a, 12)); /* 3 blocks */
    ck_assert(!kv_allocate_slots(&kv, b, 8)); /* needs 2, 1 free */
    ck_assert_int_eq(b->blocks.len, 0);
    ck_assert_int_eq(kv.num_free, 1);
    ck_assert(kv_allocate_slots(&kv, b, 4));
    ck_assert_int_eq(kv.num_free, 0);
    ck_assert(!kv_allocate_slots(&kv, a, 13));
    ck_assert_int_eq(a->blocks.len, 3);
    /* slots its table already covers need no free block: up to the last block's end */
    ck_assert(kv_allocate_slots(&kv, a, 12));
    ck_assert(kv_allocate_slots(&kv, a, 9));
    ck_assert_int_eq(a->blocks.len, 3);
    kv_check(&kv);
    kv_free_request(&kv, a);
    kv_free_request(&kv, b);
    kv_check(&kv);
    drop(a);
    drop(b);
    kv_destroy(&kv);
}
END_TEST

/* Freed blocks go to the tail of the free queue in reverse table order; allocation takes from
 * the head: so the least recently freed block is reused first. */
START_TEST(free_queue_is_lru)
{
    kv_manager kv;
    kv_init(&kv, 4, 1, false);
    request *a = mkreq(0, 2), *b = mkreq(1, 2);
    ck_assert(kv_allocate_slots(&kv, a, 2)); /* blocks 0, 1 */
    ck_assert(kv_allocate_slots(&kv, b, 2)); /* blocks 2, 3 */
    ck_assert_int_eq(a->blocks.ids[0], 0);
    ck_assert_int_eq(b->blocks.ids[1], 3);
    kv_free_request(&kv, b); /* queue: 3, 2 */
    kv_free_request(&kv, a); /* queue: 3, 2, 1, 0 */
    request *c = mkreq(2, 4);
    ck_assert(kv_allocate_slots(&kv, c, 4));
    int want[] = {3, 2, 1, 0};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(c->blocks.ids[i], want[i]);
    kv_free_request(&kv, c);
    drop(a), drop(b), drop(c);
    kv_destroy(&kv);
}
END_TEST

/* Prefix caching: a second request with the same leading tokens shares the first one's full
 * blocks (ref 2), never the block holding its last prompt token. */
START_TEST(prefix_cache_shares_full_blocks)
{
    kv_manager kv;
    kv_init(&kv, 16, 4, true);
    uint64_t hashes[] = {7, 9};
    request *a = mkreq(0, 10), *b = mkreq(1, 10);
    a->prefix_hashes = malloc(sizeof hashes), b->prefix_hashes = malloc(sizeof hashes);
    memcpy(a->prefix_hashes, hashes, sizeof hashes);
    memcpy(b->prefix_hashes, hashes, sizeof hashes);
    a->num_prefix_hashes = b->num_prefix_hashes = 1; /* both prompts lie in hash block 7 */
    ck_assert_int_eq(kv_cached_prefix_tokens(&kv, a), 0);
    ck_assert(kv_allocate_slots(&kv, a, 10));
    kv_cache_blocks(&kv, a, 10); /* blocks 0 and 1 of a are full */
    /* b: 10 tokens; at most (10 - 1) / 4 = 2 blocks can hit */
    ck_assert_int_eq(kv_cached_prefix_tokens(&kv, b), 8);
    ck_assert_int_eq(kv_cached_prefix_free_blocks(&kv, b, 8), 0); /* a still holds them */
    kv_take_cached_prefix(&kv, b, 8);
    ck_assert_int_eq(b->blocks.ids[0], a->blocks.ids[0]);
    ck_assert_int_eq(b->blocks.ids[1], a->blocks.ids[1]);
    ck_assert_int_eq(kv.ref_count[a->blocks.ids[0]], 2);
    ck_assert(kv_allocate_slots(&kv, b, 10));
    ck_assert_int_ne(b->blocks.ids[2], a->blocks.ids[2]);
    kv_check(&kv);
    /* a different prompt (another hash block) does not hit */
    request *c = mkreq(2, 10);
    c->prefix_hashes = malloc(sizeof hashes);
    c->prefix_hashes[0] = 8;
    c->num_prefix_hashes = 1;
    ck_assert_int_eq(kv_cached_prefix_tokens(&kv, c), 0);
    kv_free_request(&kv, a);
    kv_free_request(&kv, b);
    kv_check(&kv);
    /* freed but not evicted: still a hit, and the blocks count as free until taken */
    request *d = mkreq(3, 10);
    d->prefix_hashes = malloc(sizeof hashes);
    d->prefix_hashes[0] = 7;
    d->num_prefix_hashes = 1;
    ck_assert_int_eq(kv_cached_prefix_tokens(&kv, d), 8);
    ck_assert_int_eq(kv_cached_prefix_free_blocks(&kv, d, 8), 2);
    drop(a), drop(b), drop(c), drop(d);
    kv_destroy(&kv);
}
END_TEST

/* Cached free blocks are evicted (and unindexed) when the queue reaches them. */
START_TEST(prefix_cache_evicts_from_lru_head)
{
    kv_manager kv;
    kv_init(&kv, 3, 4, true);
    request *a = mkreq(0, 9);
    ck_assert(kv_allocate_slots(&kv, a, 9));
    kv_cache_blocks(&kv, a, 9); /* 2 full blocks cached */
    kv_free_request(&kv, a);
    request *a2 = mkreq(0, 9); /* same id, same tokens */
    ck_assert_int_eq(kv_cached_prefix_tokens(&kv, a2), 8);
    request *x = mkreq(5, 12); /* takes all 3 blocks: evicts both cached ones */
    ck_assert(kv_allocate_slots(&kv, x, 12));
    ck_assert_int_eq(kv.num_evictions, 2);
    ck_assert_int_eq(kv_cached_prefix_tokens(&kv, a2), 0);
    kv_free_request(&kv, x);
    kv_check(&kv);
    drop(a), drop(a2), drop(x);
    kv_destroy(&kv);
}
END_TEST

START_TEST(req_heap_orders_by_priority_then_arrival)
{
    req_heap h;
    rh_init(&h, req_cmp_priority);
    request rs[6];
    int prio[] = {2, 0, 1, 0, 2, 1};
    for (int i = 0; i < 6; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        rs[i].id = i;
        rs[i].arrival_ns = 10 - i; /* later ids arrive earlier */
        rs[i].priority = prio[i];
        rh_push(&h, &rs[i]);
    }
    rh_remove(&h, &rs[5]);
    int want[] = {3, 1, 2, 4, 0};
    for (int i = 0; i < 5; i++) {
        request *r = rh_pop(&h);
        ck_assert_msg(r->id == want[i], "pop %d: got %lld want %d", i, (long long)r->id, want[i]);
    }
    ck_assert_ptr_null(rh_pop(&h));
    rh_free(&h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv");
    TCase *tc = tcase_create("blocks");
    tcase_add_test(tc, allocate_grows_table_with_real_block_ids);
    tcase_add_test(tc, exhaustion_is_all_or_nothing);
    tcase_add_test(tc, free_queue_is_lru);
    tcase_add_test(tc, prefix_cache_shares_full_blocks);
    tcase_add_test(tc, prefix_cache_evicts_from_lru_head);
    tcase_add_test(tc, req_heap_orders_by_priority_then_arrival);
    suite_add_tcase(s, tc);
    return run_suite(s) ? 1 : 0;
}
