/*
 * engine.h: the real engine's contract. A Llama-family forward pass over a paged KV cache,
 * run by one of two backends chosen once at open: "cuda" (kernels/ + cuBLAS, bf16 weights and
 * KV, fp32 accumulation) or "cpu" (plain C, float32: the oracle the GPU is tested against).
 *
 * The model runner sees only flat arrays, as in vLLM / nano-vllm: a serving step is a list of
 * T token rows (the new tokens of B sequences, flattened, sequence after sequence), each with
 * its position and the KV slot it writes, plus each sequence's block table and length. A step
 * may mix sequences that prefill a chunk of their prompt with sequences that decode one token;
 * it runs as one forward pass. Logits are computed only for the rows the caller names.
 *
 * KV cache layout (both backends), one K and one V array per layer:
 *     k_cache[layer]: (num_blocks, block_size, num_kv_heads, head_dim)   (vLLM's flash layout)
 *     v_cache[layer]: same
 * bf16 on the GPU, float32 on the CPU. Token position p of a sequence with block table bt lives
 * in slot bt[p / block_size] * block_size + p % block_size. Block ids are the scheduler's; the
 * engine never allocates them.
 *
 * One block more than num_blocks is allocated: the pad block, id num_blocks (engine_pad_block),
 * which no request owns. Rows that are computed for nothing (static batching's padding) write
 * their KV there; its contents are never meaningful.
 *
 * Swap (preemption by swapping, vLLM's swap_blocks): a pool of num_host_blocks blocks in host
 * memory (pinned on the GPU), each holding one block's K and V of every layer. engine_swap copies
 * a set of blocks out (device -> host) or in (host -> device); copies run in call order, and the
 * next forward pass sees them.
 *
 * Step invariants (checked by engine_forward, an error otherwise):
 *   - the rows of sequence b are query_start_loc[b] .. query_start_loc[b+1]-1 (at least one);
 *   - they are the last positions of the sequence: positions[query_start_loc[b] + i] ==
 *     seq_lens[b] - n_b + i, where n_b is the row count; earlier positions are in the cache;
 *   - slot_mapping agrees with the block table;
 *   - T <= max_tokens, B <= max_seqs, seq_lens[b] <= max_model_len, ids < vocab, blocks <= num_blocks
 *     (the pad block may repeat in a table: a padding sequence's every block is the pad block).
 */
#ifndef TANDEM_ENGINE_H
#define TANDEM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model_config.h"
#include "core/util.h"
#include "engine/kernel_trace.h"

struct wt_source; /* engine/weights.h */

/* One serving step, as flat arrays (host memory). */
typedef struct eng_step {
    int32_t num_tokens;             /* T: rows of the flattened token list */
    int32_t num_seqs;               /* B */
    const int32_t *token_ids;       /* (T) a vocabulary id, or -1 - k: the id sampled for row k by
                                       the last engine_sample_start, which the host may not have
                                       yet (asynchronous scheduling feeds a decode its last token
                                       so); the device reads it where the sampling left it */
    const int32_t *positions;       /* (T) position of each row in its sequence */
    const int32_t *slot_mapping;    /* (T) KV slot each row writes: block_id*block_size + offset */
    const int32_t *query_start_loc; /* (B+1) sequence b owns rows [qsl[b], qsl[b+1]); qsl[B] == T */
    const int32_t *seq_lens;        /* (B) tokens in b's KV once this step is done */
    const int32_t *block_tables;    /* (B, block_table_stride) physical block ids, row-major */
    int32_t block_table_stride;     /* entries per row of block_tables */
    int32_t num_logits;             /* N: rows whose logits are computed */
    const int32_t *logits_rows;     /* (N) token rows, e.g. the last row of each sampling sequence */
} eng_step;

/* How to pick a token from each of the N logits rows of the last step. */
typedef struct eng_sampling {
    const float *temperature; /* (N) 0 = greedy (argmax, lowest id on ties) */
    const float *top_p;       /* (N) in (0, 1]: sample from the smallest set of most likely
                                 tokens whose probability reaches top_p */
    const float *uniform;     /* (N) draws in [0, 1) from the caller's seeded generator */
} eng_sampling;

typedef struct engine_opts {
    const char *model;         /* checkpoint directory, or "synthetic:CONFIG" (a shipped name or
                                  a config.json path) */
    const char *backend;       /* "cuda" or "cpu" */
    uint64_t weight_seed;      /* synthetic weights */
    int32_t block_size;        /* tokens per KV block (default KV_DEFAULT_BLOCK_SIZE) */
    int32_t num_blocks;        /* KV blocks per layer (0: enough for max_seqs x max_model_len) */
    int32_t num_host_blocks;   /* swap pool, in blocks (0: no swapping) */
    int32_t max_tokens;        /* T per step: the workspace is sized for it (default 2048) */
    int32_t max_seqs;          /* B per step (default 256) */
    int32_t max_model_len;     /* tokens per sequence (0: the config's max_position_embeddings) */
    bool cpu_round_bf16;       /* cpu: round weights, KV and GEMM inputs to bf16 where the GPU
                                  does, so GPU and CPU logits agree to bf16 accumulation error */
    bool cuda_graphs;          /* cuda: replay pure-decode steps from a captured CUDA graph */
    int32_t stream_seqs;       /* cuda: pure-decode steps of up to this many sequences run in the
                                  persistent decode kernel where it supports the model (-1: as
                                  many as it is built for; 0: never, as the tests' reference) */
    bool kernel_trace;         /* cuda: time the GPU's kernels with CUPTI (engine_kernel_meter);
                                  other backends ignore it (opts as resolved: false) */
} engine_opts;

/* Fills the defaults above (backend "cuda", CUDA graphs on, kernel trace off). */
void engine_opts_default(engine_opts *o);

typedef struct engine_backend_ops {
    const char *name;
    /* Builds the model (weights from `src`) and the KV cache; sets *self. */
    int (*open)(void **self, const model_config *mc, const engine_opts *o,
                const struct wt_source *src, terr *e);
    /* Enqueues the forward pass of a validated step; logits of its N rows are kept. */
    int (*forward)(void *self, const eng_step *s, terr *e);
    /* Enqueues picking a token from each of the last step's n logits rows, behind its forward
     * pass, without waiting; the ids stay where the next forward finds token ids -1 - k. */
    int (*sample_start)(void *self, int32_t n, const eng_sampling *sp, terr *e);
    /* Waits for the oldest sample_start not yet waited for (at most two are, in order) and
     * copies its n ids to out (host). */
    int (*sample_wait)(void *self, int32_t n, int32_t *out, terr *e);
    /* Copies the last step's logits, (n, vocab) float32, to host memory. */
    int (*logits)(void *self, int32_t n, float *out, terr *e);
    /* Copies n blocks dev[i] -> host[i] (to_host) or host[i] -> dev[i], after what was enqueued
     * before and ahead of the next forward pass (ids validated, destinations distinct). */
    int (*swap)(void *self, bool to_host, int32_t n, const int32_t *dev, const int32_t *host, terr *e);
    /* Waits until everything enqueued has run. */
    int (*sync)(void *self, terr *e);
    /* Does at open what the first steps would otherwise pay for (graph captures, first kernel
     * loads), so that every step of a run is timed warm. May be NULL. */
    int (*warmup)(void *self, terr *e);
    /* The meter of the GPU's kernels (engine/kernel_trace.h), opened before the warm-up. NULL
     * for a backend without kernels; called only when opened with kernel_trace. */
    ktrace_meter *(*kernel_meter)(void *self);
    void (*destroy)(void *self);
} engine_backend_ops;

typedef struct engine {
    const engine_backend_ops *ops;
    void *self;
    model_config mc;
    engine_opts opts;           /* as resolved: defaults filled, num_blocks computed */
    int32_t max_blocks_per_seq; /* ceil(max_model_len / block_size) */
    int32_t last_num_logits;    /* N of the last forward */
    int32_t num_sampled;        /* rows of the last sample_start (the ids -1 - k may name) */
    int32_t samp_rows[2];       /* rows of the unwaited sample_starts, oldest first */
    int32_t samp_unwaited;      /* how many (0..2) */
    int64_t warmup_ns;          /* wall time of the backend's warm-up at open */
    uint8_t *swap_seen;         /* (max(num_blocks, num_host_blocks)) engine_swap's check, when swapping */
} engine;

/* Error codes: bad input (flags, config, weights file, step) vs. a failure of the device. */
#define ENGINE_ERR_INPUT (-1)
#define ENGINE_ERR_DEVICE (-2)

/* Opens a model on a backend. Returns 0, ENGINE_ERR_INPUT or ENGINE_ERR_DEVICE (e set). */
int engine_open(engine *eng, const engine_opts *o, terr *e);
void engine_close(engine *eng);
/* Validates s (see the invariants above) and runs it. */
int engine_forward(engine *eng, const eng_step *s, terr *e);
/* Picks a token from each of the last forward's logits rows into out: engine_sample_start, then
 * engine_sample_wait. */
int engine_sample(engine *eng, const eng_sampling *sp, int32_t *out, terr *e);
/* The two halves of engine_sample, so that the next step can be enqueued in between: start
 * enqueues the sampling behind the last forward; wait waits for the oldest unwaited start (at
 * most two may be) and writes its ids to out, *n of them (n may be NULL). */
int engine_sample_start(engine *eng, const eng_sampling *sp, terr *e);
int engine_sample_wait(engine *eng, int32_t *out, int32_t *n, terr *e);
int engine_logits(engine *eng, float *out, terr *e);
int engine_sync(engine *eng, terr *e);
/* Whether the engine times its kernels (opened with kernel_trace, on a backend that can). */
static inline bool engine_traces_kernels(const engine *eng) { return eng->opts.kernel_trace; }
/* The meter that attributes the GPU's kernels, from their own timestamps, to the steps marked on
 * it (engine/kernel_trace.h): the caller marks each step's begin (before its first enqueue) and
 * end (after its sync) and settles. NULL unless engine_traces_kernels. */
ktrace_meter *engine_kernel_meter(engine *eng);
/* Swaps n blocks out (to_host) or in (see above). Ids must lie within num_blocks and
 * num_host_blocks, and no destination may appear twice. */
int engine_swap(engine *eng, bool to_host, int32_t n, const int32_t *dev, const int32_t *host, terr *e);
/* The block padding rows write (see above). */
static inline int32_t engine_pad_block(const engine *eng) { return eng->opts.num_blocks; }
/* The backend names, for --help. */
const char *engine_backend_names(void);

/* Resolves a --model spec to its config; *synthetic says whether weights are to be made. */
int engine_resolve_model(const char *spec, model_config *mc, bool *synthetic, terr *e);

/* Backends (engine/cpu_backend.c, engine/cuda_backend.c). */
extern const engine_backend_ops cpu_backend_ops;
extern const engine_backend_ops cuda_backend_ops;

/* cuda only: the stream the engine runs on (a cudaStream_t), for timing with events. */
void *engine_cuda_stream(engine *eng);

#endif
