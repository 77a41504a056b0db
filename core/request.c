/* request.c: see request.h. */
#include "request.h"

#include <assert.h>

#include <stdlib.h>

const char *req_state_name(req_state s)
{
    switch (s) {
    case REQ_WAITING: return "waiting";
    case REQ_RUNNING: return "running";
    case REQ_PREEMPTED: return "preempted";
    case REQ_SWAPPED: return "swapped";
    case REQ_FINISHED: return "finished";
    case REQ_REJECTED: return "rejected";
    }
    return "?";
}

const char *reject_reason_name(reject_reason r)
{
    switch (r) {
    case REJECT_NONE: return "";
    case REJECT_PROMPT_TOO_LONG: return "prompt_too_long";
    case REJECT_KV_CAPACITY: return "kv_capacity";
    case REJECT_BATCH_TOKENS: return "prompt_over_batch_tokens";
    case REJECT_SWAP_CAPACITY: return "swap_capacity";
    case REJECT_UNSCHEDULABLE: return "unschedulable";
    case REJECT_NUM_REASONS: break;
    }
    return "?";
}

/* splitmix64's finaliser: a cheap, well-mixed 64-bit hash of one word. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint32_t request_token_id(const request *r, int32_t pos)
{
    if (pos < r->prompt_tokens) {
        if (r->prompt_ids) return (uint32_t)r->prompt_ids[pos];
        int32_t hb = pos / PREFIX_HASH_BLOCK_TOKENS;
        if (hb < r->num_prefix_hashes)
            return (uint32_t)(mix64(mix64(r->prefix_hashes[hb] ^ 0x70726566ULL) +
                                    (uint64_t)(pos % PREFIX_HASH_BLOCK_TOKENS)) >> 33);
    } else if (r->output_ids && pos - r->prompt_tokens < r->num_output_tokens) {
        /* not one still being sampled (-1 - k): no id to hash or feed yet */
        assert(r->output_ids[pos - r->prompt_tokens] >= 0);
        return (uint32_t)r->output_ids[pos - r->prompt_tokens];
    }
    return (uint32_t)(mix64(mix64((uint64_t)r->id) + (uint64_t)pos) >> 33);
}

void request_reset(request *r)
{
    uint64_t *hashes = r->prefix_hashes;
    int32_t hashes_cap = r->prefix_hashes_cap;
    kv_block_table blocks = r->blocks, host = r->host_blocks;
    uint64_t *bh = r->block_hashes;
    int32_t bh_cap = r->block_hashes_cap;
    int32_t *out = r->output_ids;
    int32_t out_cap = r->output_cap;
    *r = (request){0};
    r->prefix_hashes = hashes;
    r->prefix_hashes_cap = hashes_cap;
    r->blocks = (kv_block_table){.ids = blocks.ids, .cap = blocks.cap};
    r->host_blocks = (kv_block_table){.ids = host.ids, .cap = host.cap};
    r->output_ids = out;
    r->output_cap = out_cap;
    r->block_hashes = bh;
    r->block_hashes_cap = bh_cap;
    r->num_cached_tokens = -1;
    r->first_scheduled_ns = r->first_token_ns = r->last_token_ns = r->finish_ns = -1;
    r->heap_index = -1;
}

void request_free_buffers(request *r)
{
    free(r->prefix_hashes);
    free(r->blocks.ids);
    free(r->host_blocks.ids);
    free(r->output_ids);
    free(r->block_hashes);
    r->block_hashes = NULL;
    r->prefix_hashes = NULL;
    r->blocks.ids = r->host_blocks.ids = NULL;
    r->output_ids = NULL;
}
