/*
 * kv.h: the paged KV block manager, shared by the simulator and the real engine.
 *
 * The KV cache is `num_blocks` physical blocks of `block_size` token slots. A request owns a
 * block table (request.blocks) of real block ids; the engine writes token t of the request into
 * slot blocks.ids[t / block_size] * block_size + t % block_size, so the ids handed out here are
 * the ones the GPU uses.
 *
 * Every block has a reference count. Free blocks (ref 0) sit in one doubly linked free queue in
 * LRU order, as in vLLM V1's FreeKVCacheBlockQueue: allocation takes from the head, freed blocks
 * are appended at the tail (a request's blocks in reverse order, so its last blocks are reused
 * first). With prefix caching, a full block keeps its content hash while free, so it can be
 * found again until it is evicted from the head of the queue; a hit takes it out of the queue
 * and shares it (ref > 1).
 *
 * Invariants (checked by kv_check): free-queue length == num_free; a block is in the queue iff
 * its ref count is 0; num_free + (blocks with ref > 0) == num_blocks.
 */
#ifndef TANDEM_KV_H
#define TANDEM_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "request.h"

/* Tokens per KV block unless a flag says otherwise (vLLM's default), as a number and as the
 * text an option table's default needs. */
#define KV_DEFAULT_BLOCK_SIZE 16
#define KV_DEFAULT_BLOCK_SIZE_STR "16"
_Static_assert(KV_DEFAULT_BLOCK_SIZE == 16, "KV_DEFAULT_BLOCK_SIZE_STR must spell KV_DEFAULT_BLOCK_SIZE");

typedef struct kv_manager {
    int32_t num_blocks;
    int32_t block_size;      /* tokens per block */
    int32_t num_free;        /* blocks with ref_count 0 (including evictable cached ones) */
    int32_t *ref_count;      /* (num_blocks) */
    int32_t *free_prev;      /* (num_blocks) free-queue links, -1 at the ends */
    int32_t *free_next;      /* (num_blocks) */
    int32_t free_head, free_tail;

    /* prefix caching */
    bool enable_caching;
    uint64_t *block_hash;    /* (num_blocks) chained content hash of a full cached block, 0 = none */
    int32_t *map_block;      /* (map_cap) open-addressing table hash -> block id, -1 empty */
    uint64_t *map_key;       /* (map_cap) */
    uint32_t map_cap;        /* power of two >= 2 x num_blocks */
    int64_t num_evictions;   /* cached blocks reused for other content */
} kv_manager;

int kv_init(kv_manager *kv, int32_t num_blocks, int32_t block_size, bool enable_caching);
void kv_destroy(kv_manager *kv);

static inline int32_t kv_blocks_for_tokens(const kv_manager *kv, int64_t num_tokens)
{
    return (int32_t)((num_tokens + kv->block_size - 1) / kv->block_size);
}

/* New blocks r needs so that its table covers `num_tokens` token slots (0 if it already does). */
static inline int32_t kv_blocks_needed(const kv_manager *kv, const request *r, int64_t num_tokens)
{
    int32_t need = kv_blocks_for_tokens(kv, num_tokens) - r->blocks.len;
    return need > 0 ? need : 0;
}

static inline int32_t kv_num_used(const kv_manager *kv) { return kv->num_blocks - kv->num_free; }

/* Grows r's block table to cover `num_tokens` slots. All or nothing: returns false and changes
 * nothing when fewer than the needed blocks are free. */
bool kv_allocate_slots(kv_manager *kv, request *r, int64_t num_tokens);

/* The same on a bare block table (the host swap pool uses these for request.host_blocks). */
bool kv_allocate_table(kv_manager *kv, kv_block_table *t, int32_t num_blocks_total);
void kv_free_table(kv_manager *kv, kv_block_table *t);

/* Releases all of r's blocks (table emptied). With prefix caching, r's full blocks keep their
 * hashes (see kv_cache_blocks) and stay findable until evicted. */
void kv_free_request(kv_manager *kv, request *r);

/* ---- prefix caching (no-ops when disabled) ---- */

/* Number of leading prompt tokens of r whose blocks are cached, a multiple of block_size,
 * never the whole prompt: the last prompt token is always computed, so a step samples. */
int32_t kv_cached_prefix_tokens(const kv_manager *kv, request *r);
/* Takes the cached blocks covering r's first `num_tokens` tokens (from
 * kv_cached_prefix_tokens) into r's empty table, sharing them. */
void kv_take_cached_prefix(kv_manager *kv, request *r, int32_t num_tokens);
/* Free blocks that taking r's cached prefix of `num_tokens` would remove from the free queue
 * (cached blocks nobody holds): they stop counting as free once taken. */
int32_t kv_cached_prefix_free_blocks(const kv_manager *kv, request *r, int32_t num_tokens);
/* Registers r's full blocks among its first `num_computed` tokens in the cache index. */
void kv_cache_blocks(kv_manager *kv, request *r, int32_t num_computed);

/* Aborts with a message if an invariant is broken (used after every step in test builds). */
void kv_check(const kv_manager *kv);

#endif
