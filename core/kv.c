/* kv.c: see kv.h. */
#include "kv.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "util.h"

/* ---- free queue ---- */

static void fq_remove(kv_manager *kv, int32_t b)
{
    int32_t p = kv->free_prev[b], n = kv->free_next[b];
    if (p >= 0) kv->free_next[p] = n;
    else kv->free_head = n;
    if (n >= 0) kv->free_prev[n] = p;
    else kv->free_tail = p;
    kv->free_prev[b] = kv->free_next[b] = -1;
    kv->num_free--;
}

static void fq_append(kv_manager *kv, int32_t b)
{
    kv->free_prev[b] = kv->free_tail;
    kv->free_next[b] = -1;
    if (kv->free_tail >= 0) kv->free_next[kv->free_tail] = b;
    else kv->free_head = b;
    kv->free_tail = b;
    kv->num_free++;
}

/* ---- hash -> block index (open addressing, linear probing, backward-shift deletion) ---- */

static uint32_t map_slot(const kv_manager *kv, uint64_t h) { return (uint32_t)(h * 0x9E3779B97F4A7C15ULL >> 32) & (kv->map_cap - 1); }

static int32_t map_get(const kv_manager *kv, uint64_t h)
{
    for (uint32_t i = map_slot(kv, h);; i = (i + 1) & (kv->map_cap - 1)) {
        if (kv->map_block[i] < 0) return -1;
        if (kv->map_key[i] == h) return kv->map_block[i];
    }
}

static void map_put(kv_manager *kv, uint64_t h, int32_t b)
{
    uint32_t i = map_slot(kv, h);
    while (kv->map_block[i] >= 0) {
        if (kv->map_key[i] == h) return; /* an equal block is cached already: keep that one */
        i = (i + 1) & (kv->map_cap - 1);
    }
    kv->map_key[i] = h;
    kv->map_block[i] = b;
}

static void map_del(kv_manager *kv, uint64_t h, int32_t b)
{
    uint32_t mask = kv->map_cap - 1, i = map_slot(kv, h);
    while (kv->map_block[i] >= 0 && kv->map_key[i] != h) i = (i + 1) & mask;
    if (kv->map_block[i] != b) return; /* not indexed under this block (a duplicate) */
    kv->map_block[i] = -1;
    for (uint32_t j = (i + 1) & mask; kv->map_block[j] >= 0; j = (j + 1) & mask) {
        uint32_t home = map_slot(kv, kv->map_key[j]);
        /* move j back into the hole at i if its home is not in (i, j] cyclically */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            kv->map_key[i] = kv->map_key[j];
            kv->map_block[i] = kv->map_block[j];
            kv->map_block[j] = -1;
            i = j;
        }
    }
}

/* ---- lifecycle ---- */

int kv_init(kv_manager *kv, int32_t num_blocks, int32_t block_size, bool enable_caching)
{
    assert(num_blocks > 0 && block_size > 0);
    *kv = (kv_manager){0};
    kv->num_blocks = num_blocks;
    kv->block_size = block_size;
    kv->ref_count = xcalloc((size_t)num_blocks, sizeof(int32_t));
    kv->free_prev = xmalloc((size_t)num_blocks * sizeof(int32_t));
    kv->free_next = xmalloc((size_t)num_blocks * sizeof(int32_t));
    kv->free_head = kv->free_tail = -1;
    for (int32_t b = 0; b < num_blocks; b++) fq_append(kv, b);
    kv->enable_caching = enable_caching;
    if (enable_caching) {
        kv->block_hash = xcalloc((size_t)num_blocks, sizeof(uint64_t));
        kv->map_cap = 16;
        while (kv->map_cap < 2u * (uint32_t)num_blocks) kv->map_cap *= 2;
        kv->map_key = xmalloc(kv->map_cap * sizeof(uint64_t));
        kv->map_block = xmalloc(kv->map_cap * sizeof(int32_t));
        memset(kv->map_block, 0xff, kv->map_cap * sizeof(int32_t));
    }
    return 0;
}

void kv_destroy(kv_manager *kv)
{
    free(kv->ref_count);
    free(kv->free_prev);
    free(kv->free_next);
    free(kv->block_hash);
    free(kv->map_key);
    free(kv->map_block);
    *kv = (kv_manager){0};
}

static void table_push(kv_block_table *t, int32_t b)
{
    if (t->len == t->cap) {
        size_t cap = (size_t)t->cap;
        grow_array((void **)&t->ids, sizeof *t->ids, &cap, cap + 1);
        t->cap = (int32_t)cap;
    }
    t->ids[t->len++] = b;
}

/* Takes the least recently freed block, evicting its cached content. */
static int32_t take_free_block(kv_manager *kv)
{
    int32_t b = kv->free_head;
    assert(b >= 0 && kv->ref_count[b] == 0);
    fq_remove(kv, b);
    if (kv->enable_caching && kv->block_hash[b]) {
        map_del(kv, kv->block_hash[b], b);
        kv->block_hash[b] = 0;
        kv->num_evictions++;
    }
    kv->ref_count[b] = 1;
    return b;
}

bool kv_allocate_table(kv_manager *kv, kv_block_table *t, int32_t num_blocks_total)
{
    int32_t need = num_blocks_total - t->len;
    if (need <= 0) return true;
    if (need > kv->num_free) return false;
    for (int32_t i = 0; i < need; i++) table_push(t, take_free_block(kv));
    return true;
}

void kv_free_table(kv_manager *kv, kv_block_table *t)
{
    for (int32_t i = t->len - 1; i >= 0; i--) {
        int32_t b = t->ids[i];
        assert(kv->ref_count[b] > 0);
        if (--kv->ref_count[b] == 0) fq_append(kv, b);
    }
    t->len = 0;
}

bool kv_allocate_slots(kv_manager *kv, request *r, int64_t num_tokens)
{
    /* a decode's slot is nearly always in its last block already: no division for that */
    if (num_tokens <= (int64_t)r->blocks.len * kv->block_size) return true;
    return kv_allocate_table(kv, &r->blocks, kv_blocks_for_tokens(kv, num_tokens));
}

/* r's hash memo stays valid after this: it describes token content, not blocks. */
void kv_free_request(kv_manager *kv, request *r) { kv_free_table(kv, &r->blocks); }

/* ---- prefix caching ---- */

/* Chained hash of block i of r: parent hash + the block's token ids. Never 0. */
static uint64_t block_hash(const kv_manager *kv, const request *r, int32_t i, uint64_t parent)
{
    uint32_t tokens[256];
    int32_t bs = kv->block_size, done = 0;
    uint64_t h = parent ^ 0x74616e64656dULL;
    while (done < bs) { /* block sizes above 256 are hashed in pieces */
        int32_t n = min_i32(bs - done, (int32_t)ARRAY_LEN(tokens));
        for (int32_t k = 0; k < n; k++) tokens[k] = request_token_id(r, i * bs + done + k);
        h = XXH3_64bits_withSeed(tokens, (size_t)n * sizeof tokens[0], h);
        done += n;
    }
    return h ? h : 1;
}

/* Makes sure r's memo holds the chained hashes of its first `nblocks` blocks. */
static void hash_blocks(const kv_manager *kv, request *r, int32_t nblocks)
{
    if (nblocks > r->block_hashes_cap) {
        size_t cap = (size_t)r->block_hashes_cap;
        grow_array((void **)&r->block_hashes, sizeof *r->block_hashes, &cap, (size_t)nblocks);
        r->block_hashes_cap = (int32_t)cap;
    }
    for (int32_t i = r->num_hashed_blocks; i < nblocks; i++)
        r->block_hashes[i] = block_hash(kv, r, i, i ? r->block_hashes[i - 1] : 0);
    if (nblocks > r->num_hashed_blocks) r->num_hashed_blocks = nblocks;
}

/* Block holding r's block i in the cache, or -1. */
static int32_t cached_block(const kv_manager *kv, const request *r, int32_t i)
{
    uint64_t h = r->block_hashes[i];
    int32_t b = map_get(kv, h);
    return b >= 0 && kv->block_hash[b] == h ? b : -1;
}

int32_t kv_cached_prefix_tokens(const kv_manager *kv, request *r)
{
    if (!kv->enable_caching) return 0;
    /* the last token of the sequence is always computed, so at most (len - 1) tokens hit */
    int32_t max_blocks = (request_num_tokens(r) - 1) / kv->block_size, i = 0;
    hash_blocks(kv, r, max_blocks);
    while (i < max_blocks && cached_block(kv, r, i) >= 0) i++;
    return i * kv->block_size;
}

int32_t kv_cached_prefix_free_blocks(const kv_manager *kv, request *r, int32_t num_tokens)
{
    if (!kv->enable_caching || num_tokens <= 0) return 0;
    int32_t n = num_tokens / kv->block_size, cnt = 0;
    hash_blocks(kv, r, n);
    for (int32_t i = 0; i < n; i++) {
        int32_t b = cached_block(kv, r, i);
        assert(b >= 0);
        cnt += kv->ref_count[b] == 0;
    }
    return cnt;
}

void kv_take_cached_prefix(kv_manager *kv, request *r, int32_t num_tokens)
{
    if (!kv->enable_caching || num_tokens <= 0) return;
    assert(r->blocks.len == 0 && num_tokens % kv->block_size == 0);
    int32_t n = num_tokens / kv->block_size;
    hash_blocks(kv, r, n);
    for (int32_t i = 0; i < n; i++) {
        int32_t b = cached_block(kv, r, i);
        assert(b >= 0);
        if (kv->ref_count[b]++ == 0) fq_remove(kv, b);
        table_push(&r->blocks, b);
    }
}

void kv_cache_blocks(kv_manager *kv, request *r, int32_t num_computed)
{
    if (!kv->enable_caching) return;
    int32_t full = min_i32(num_computed / kv->block_size, r->blocks.len);
    hash_blocks(kv, r, full);
    /* walk back from the last full block to the first one already indexed */
    for (int32_t i = full - 1; i >= 0; i--) {
        int32_t b = r->blocks.ids[i];
        if (kv->block_hash[b]) break;
        kv->block_hash[b] = r->block_hashes[i];
        map_put(kv, r->block_hashes[i], b);
    }
}

void kv_check(const kv_manager *kv)
{
    int32_t n = 0, used = 0;
    for (int32_t b = kv->free_head, prev = -1; b >= 0; prev = b, b = kv->free_next[b], n++) {
        if (kv->ref_count[b] != 0 || kv->free_prev[b] != prev || n > kv->num_blocks) {
            fprintf(stderr, "kv_check: free queue corrupt at block %d (ref %d)\n", b,
                    kv->ref_count[b]);
            abort();
        }
    }
    for (int32_t b = 0; b < kv->num_blocks; b++) {
        if (kv->ref_count[b] < 0) {
            fprintf(stderr, "kv_check: block %d has ref count %d\n", b, kv->ref_count[b]);
            abort();
        }
        used += kv->ref_count[b] > 0;
    }
    if (n != kv->num_free || kv->num_free + used != kv->num_blocks) {
        fprintf(stderr, "kv_check: free %d (queue %d) + used %d != total %d\n", kv->num_free, n,
                used, kv->num_blocks);
        abort();
    }
}
