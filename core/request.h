/*
 * request.h: one inference request as the serving core sees it.
 *
 * A request is a prompt of `prompt_tokens` tokens that may generate up to `max_output_tokens`
 * tokens. As in vLLM V1 there are no "prefill" and "decode" phases in the core: a request has a
 * sequence (prompt + outputs so far) and `num_computed_tokens`, the prefix of that sequence whose
 * KV entries are in the cache. Each step the policy gives it some tokens to compute; when the
 * computed prefix reaches the end of the sequence the step samples one new token.
 *
 * Lifecycle:  WAITING -> RUNNING -> FINISHED
 *                 ^         |
 *                 +---------+  PREEMPTED (recompute: KV freed) or SWAPPED (KV in host memory)
 *             any live state -> REJECTED (with a reason; never silently dropped)
 *
 * Requests are pooled and recycled by the serving loop: only live requests are in memory.
 */
#ifndef TANDEM_REQUEST_H
#define TANDEM_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

typedef enum req_state {
    REQ_WAITING,   /* arrived, not yet admitted */
    REQ_RUNNING,   /* admitted: holds KV blocks, scheduled each step it gets tokens */
    REQ_PREEMPTED, /* preempted by recompute: KV freed, back in the waiting queue */
    REQ_SWAPPED,   /* preempted by swap: KV blocks copied to host swap space */
    REQ_FINISHED,
    REQ_REJECTED,
} req_state;

typedef enum reject_reason {
    REJECT_NONE = 0,
    REJECT_PROMPT_TOO_LONG,   /* prompt longer than max_model_len */
    REJECT_KV_CAPACITY,       /* prompt + output can never fit in the whole KV cache */
    REJECT_BATCH_TOKENS,      /* prompt over the policy's per-step token limit (no chunking) */
    REJECT_SWAP_CAPACITY,     /* swapped out and can never be swapped back in */
    REJECT_UNSCHEDULABLE,     /* the policy can never schedule it (the loop's last resort) */
    REJECT_NUM_REASONS
} reject_reason;

const char *req_state_name(req_state s);
/* Stable snake_case names, used in requests.csv and summary.json. */
const char *reject_reason_name(reject_reason r);

/* Tokens per Mooncake prefix hash block (`hash_ids` entries cover 512 prompt tokens each). */
#define PREFIX_HASH_BLOCK_TOKENS 512

typedef struct kv_block_table {
    int32_t *ids; /* (len) physical block ids, in sequence order; ids[i] holds tokens
                     [i*block_size, (i+1)*block_size) */
    int32_t len;
    int32_t cap;
} kv_block_table;

typedef struct request {
    /* ---- from the trace ---- */
    int64_t id;                /* 0-based index among the trace's accepted rows */
    int64_t arrival_ns;        /* simulated (or wall) time of arrival */
    int32_t prompt_tokens;
    int32_t max_output_tokens; /* generation stops here (or at max_model_len) */
    int32_t priority;          /* lower value = more important (vLLM's convention) */
    int32_t client_id;
    int32_t replica;           /* the replica the router sent it to (0 with one replica) */
    int32_t num_prefix_hashes; /* Mooncake: entries of prefix_hashes */
    uint64_t *prefix_hashes;   /* (num_prefix_hashes) id of each 512-token prompt block, or NULL */
    int32_t prefix_hashes_cap;
    const int32_t *prompt_ids; /* (prompt_tokens) real token ids, or NULL: derived, see below */

    /* ---- scheduling state ---- */
    req_state state;
    reject_reason reject_reason;
    int32_t num_computed_tokens; /* prefix of the sequence whose KV is cached */
    int32_t num_output_tokens;   /* tokens generated so far */
    int32_t num_output_known;    /* of them, those whose step has ended (under asynchronous
                                    scheduling the last one or two may still be running) */
    int32_t num_cached_tokens;   /* prompt tokens found in the prefix cache at first admission, -1 before */
    int32_t num_preemptions;
    kv_block_table blocks;       /* GPU KV blocks */
    kv_block_table host_blocks;  /* host swap blocks while SWAPPED */
    uint64_t *block_hashes;      /* (num_hashed_blocks) prefix caching: chained hash of each
                                    leading full block, computed once (memo) */
    int32_t num_hashed_blocks;
    int32_t block_hashes_cap;

    /* ---- timestamps (ns; -1 until the event happens) ---- */
    int64_t first_scheduled_ns;
    int64_t first_token_ns;
    int64_t last_token_ns;
    int64_t finish_ns;

    /* ---- owned by whoever holds the request ---- */
    struct request *prev, *next;           /* link in the policy's queue (req_queue) */
    struct request *live_prev, *live_next; /* link in the serving loop's list of live requests */
    int32_t heap_index;                    /* position in a req_heap, -1 when in none */
    double policy_key;                     /* a policy's sort key (e.g. predicted length) */
    int64_t policy_aux;                    /* a policy's spare integer */
    int32_t *output_ids;                   /* (output_cap) sampled ids, real engines only; under
                                              asynchronous scheduling the last is -1 - k while
                                              its step runs: what the step samples for its k-th
                                              emitting item (executor.h's submit) */
    int32_t output_cap;
} request;

/* Length of the sequence the request must have computed before it can sample again. */
static inline int32_t request_num_tokens(const request *r)
{
    return r->prompt_tokens + r->num_output_tokens;
}

/* True once a request is done generating: it reached its output limit or max_model_len. */
static inline bool request_is_done(const request *r, int32_t max_model_len)
{
    return r->num_output_tokens >= r->max_output_tokens ||
           request_num_tokens(r) >= max_model_len;
}

/* Token id at position `pos` of the request's sequence. Real ids when the request has them
 * (prompt_ids, output_ids); otherwise a deterministic id derived from (request id, position),
 * or, for prompt positions covered by a Mooncake prefix hash, from (hash id, offset) so that
 * equal hashes give equal tokens and prefix caching sees the sharing. The value is < 2^31; a
 * model reduces it modulo its vocabulary. */
uint32_t request_token_id(const request *r, int32_t pos);

/* Clears every field to the state of a freshly arrived request, keeping allocated buffers. */
void request_reset(request *r);
void request_free_buffers(request *r);

#endif
