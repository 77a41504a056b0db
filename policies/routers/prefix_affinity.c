/*
 * prefix_affinity.c: route a request to the replica that holds most of its prompt's prefix,
 * unless that replica is overloaded.
 *
 * What it models: cache-aware routing as SGLang's router (sgl-router, "cache_aware" policy)
 * and Mooncake's conductor (Qin et al., "Mooncake: A KVCache-centric Disaggregated
 * Architecture for LLM Serving", FAST 2025) do it. Like SGLang's router, it keeps its own
 * approximate picture of each replica's cache, built from what it routed, instead of asking
 * every replica per request: a table from prefix block id (the trace's Mooncake `hash_ids`,
 * 512 prompt tokens each, the ids prefix caching turns into token ids) to the set of replicas
 * it has sent that block to (a bitset, one bit per replica). The picture is optimistic: a
 * replica may since have evicted the block; the replica's own prefix cache decides the real hit.
 *
 * A request's match on a replica is its longest run of leading blocks all sent there (a block
 * only hits if every block before it does: the cache's hashes are chained). The candidates are
 * the replicas with the longest match; among those under the load cap the one with the fewest
 * outstanding requests wins. The cap (--router-load-cap F, SGLang's balance threshold in
 * spirit) keeps one hot prefix from melting a replica: a replica is eligible only while its
 * outstanding requests are < F x the cluster's mean + 1. With no match, or every candidate over
 * the cap, the request goes to the least-outstanding replica (SGLang falls back to the
 * shortest queue the same way). Requests without prefix ids route as least-outstanding.
 *
 * Cost per request: O(prefix blocks x replicas / 64) bit operations, plus a fallback scan of
 * the replicas' load counters; no replica's KV state is read.
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "policies/routers/routers.h"

typedef struct prefix_router {
    router_env env;
    int32_t words;       /* uint64 words per replica bitset */
    /* open addressing: slot -> entry index (-1 empty); entry e's key and bits */
    int32_t *slot_entry; /* (cap) */
    uint32_t cap;        /* power of two, kept >= 2 x entries */
    uint64_t *keys;      /* (entries_cap) prefix block ids */
    uint64_t *bits;      /* (entries_cap x words) replicas that were sent the block */
    int32_t num_entries;
    size_t entries_cap;
    uint64_t *acc, *best; /* (words) scratch */
} prefix_router;

static inline uint32_t slot_of(uint64_t key, uint32_t cap)
{
    key *= 0x9e3779b97f4a7c15ULL; /* Fibonacci hashing: ids are often consecutive */
    return (uint32_t)(key >> 32) & (cap - 1);
}

static int32_t lookup(const prefix_router *p, uint64_t key)
{
    for (uint32_t s = slot_of(key, p->cap);; s = (s + 1) & (p->cap - 1)) {
        int32_t e = p->slot_entry[s];
        if (e < 0 || p->keys[e] == key) return e;
    }
}

static void rehash(prefix_router *p, uint32_t cap)
{
    free(p->slot_entry);
    p->cap = cap;
    p->slot_entry = xmalloc(cap * sizeof *p->slot_entry);
    memset(p->slot_entry, 0xff, cap * sizeof *p->slot_entry);
    for (int32_t e = 0; e < p->num_entries; e++) {
        uint32_t s = slot_of(p->keys[e], cap);
        while (p->slot_entry[s] >= 0) s = (s + 1) & (cap - 1);
        p->slot_entry[s] = e;
    }
}

/* The entry of key, created (with no bits) if missing. */
static int32_t insert(prefix_router *p, uint64_t key)
{
    int32_t e = lookup(p, key);
    if (e >= 0) return e;
    if ((uint32_t)(p->num_entries + 1) * 2 > p->cap) rehash(p, p->cap * 2);
    size_t old = p->entries_cap;
    grow_array((void **)&p->keys, sizeof *p->keys, &p->entries_cap, (size_t)p->num_entries + 1);
    if (p->entries_cap != old) {
        size_t cap = old * (size_t)p->words;
        grow_array((void **)&p->bits, sizeof *p->bits, &cap, p->entries_cap * (size_t)p->words);
    }
    e = p->num_entries++;
    p->keys[e] = key;
    memset(p->bits + (size_t)e * p->words, 0, (size_t)p->words * sizeof *p->bits);
    uint32_t s = slot_of(key, p->cap);
    while (p->slot_entry[s] >= 0) s = (s + 1) & (p->cap - 1);
    p->slot_entry[s] = e;
    return e;
}

static void *prefix_create(const router_env *env)
{
    prefix_router *p = xcalloc(1, sizeof *p);
    p->env = *env;
    p->words = (env->num_replicas + 63) / 64;
    p->acc = xcalloc((size_t)p->words, sizeof *p->acc);
    p->best = xcalloc((size_t)p->words, sizeof *p->best);
    rehash(p, 1024);
    return p;
}

static void prefix_destroy(void *self)
{
    prefix_router *p = self;
    free(p->slot_entry);
    free(p->keys);
    free(p->bits);
    free(p->acc);
    free(p->best);
    free(p);
}

static int32_t prefix_route(void *self, const request *r, int64_t now_ns)
{
    prefix_router *p = self;
    const router_env *env = &p->env;
    const int32_t W = p->words, N = env->num_replicas;
    int32_t matched = 0;
    for (int32_t w = 0; w < W; w++) p->acc[w] = ~0ULL;
    for (int32_t i = 0; i < r->num_prefix_hashes; i++) {
        int32_t e = lookup(p, r->prefix_hashes[i]);
        if (e < 0) break;
        const uint64_t *b = p->bits + (size_t)e * W;
        uint64_t any = 0;
        for (int32_t w = 0; w < W; w++) any |= p->acc[w] & b[w];
        if (!any) break;
        for (int32_t w = 0; w < W; w++) p->acc[w] &= b[w];
        matched = i + 1;
    }

    int32_t choice = -1;
    if (matched > 0) {
        int64_t total = 0;
        for (int32_t i = 0; i < N; i++) total += env->load[i].outstanding;
        double cap = env->load_cap > 0 ? env->load_cap * (double)total / N + 1 : 1e300;
        for (int32_t w = 0; w < W; w++)
            for (uint64_t m = p->acc[w]; m; m &= m - 1) {
                int32_t i = w * 64 + __builtin_ctzll(m);
                if (i >= N || env->load[i].outstanding >= cap) continue;
                if (choice < 0 || env->load[i].outstanding < env->load[choice].outstanding) choice = i;
            }
    }
    if (choice < 0) choice = router_fewest_outstanding(env);

    for (int32_t i = 0; i < r->num_prefix_hashes; i++) {
        int32_t e = insert(p, r->prefix_hashes[i]);
        p->bits[(size_t)e * W + choice / 64] |= 1ULL << (choice % 64);
    }
    return choice;
}

const router_ops router_prefix_affinity = {
    .name = "prefix-affinity",
    .summary = "most of the prompt's prefix blocks, under a load cap (SGLang router, Mooncake)",
    .create = prefix_create,
    .destroy = prefix_destroy,
    .route = prefix_route,
};
