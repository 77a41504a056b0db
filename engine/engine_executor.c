/* engine_executor.c: see engine_executor.h. */
#include "engine/engine_executor.h"

#include "core/clock.h"

#include <gsl/gsl_rng.h>
#include <stdlib.h>
#include <string.h>

typedef struct engine_exec {
    engine *eng;
    float temperature, top_p;
    gsl_rng *rng;
    /* step arrays, sized once for the engine's limits */
    int32_t *token_ids, *positions, *slots;  /* (max_tokens) */
    int32_t *qsl;                            /* (max_seqs + 1) */
    int32_t *seq_lens;                       /* (max_seqs) */
    int32_t *tables;                         /* (max_seqs, max_blocks_per_seq) */
    int32_t *logits_rows;                    /* (max_seqs) */
    float *temp, *topp, *unif;               /* (max_seqs) */
    int32_t *picked;                         /* (max_seqs) one per emitting item */
    int32_t *sampled;                        /* (max_seqs) per batch item, for the loop */
} engine_exec;

static int exec_step(void *self, const batch *b, step_result *out, terr *e)
{
    engine_exec *x = self;
    engine *eng = x->eng;
    const engine_opts *o = &eng->opts;
    if (b->num_swap_in || b->num_swap_out)
        return terr_set(e, "the engine cannot swap KV blocks to host memory yet: use --preemption-mode recompute");
    if (b->num_padding_tokens)
        return terr_set(e, "the engine does not run padding rows (static batching): simulate that policy instead");
    if (b->num_items > o->max_seqs || b->num_tokens > o->max_tokens)
        return terr_set(e, "a step of %d requests / %lld tokens exceeds the engine's %d / %d", b->num_items,
                        (long long)b->num_tokens, o->max_seqs, o->max_tokens);
    int64_t t0 = clock_mono_ns();
    int32_t bs = o->block_size, stride = eng->max_blocks_per_seq, T = 0, N = 0;
    for (int32_t i = 0; i < b->num_items; i++) {
        const sched_item *it = &b->items[i];
        const request *r = it->req;
        int32_t end = it->context_tokens + it->num_tokens;
        if ((end + bs - 1) / bs > stride || r->blocks.len > stride)
            return terr_set(e, "request %lld needs %d blocks, the engine's tables hold %d", (long long)r->id,
                            r->blocks.len, stride);
        x->qsl[i] = T;
        for (int32_t p = it->context_tokens; p < end; p++, T++) {
            x->token_ids[T] = (int32_t)(request_token_id(r, p) % (uint32_t)eng->mc.vocab_size);
            x->positions[T] = p;
            x->slots[T] = r->blocks.ids[p / bs] * bs + p % bs;
        }
        x->seq_lens[i] = end;
        memcpy(x->tables + (size_t)i * stride, r->blocks.ids, (size_t)r->blocks.len * sizeof(int32_t));
        if (it->emits_token) x->logits_rows[N++] = T - 1;
    }
    x->qsl[b->num_items] = T;
    eng_step s = {
        .num_tokens = T,
        .num_seqs = b->num_items,
        .token_ids = x->token_ids,
        .positions = x->positions,
        .slot_mapping = x->slots,
        .query_start_loc = x->qsl,
        .seq_lens = x->seq_lens,
        .block_tables = x->tables,
        .block_table_stride = stride,
        .num_logits = N,
        .logits_rows = x->logits_rows,
    };
    if (engine_forward(eng, &s, e)) return -1;
    int64_t t_launched = clock_mono_ns();
    if (N > 0) {
        for (int32_t k = 0; k < N; k++) {
            x->temp[k] = x->temperature;
            x->topp[k] = x->top_p;
            x->unif[k] = x->rng ? (float)gsl_rng_uniform(x->rng) : 0.0f;
        }
        eng_sampling sp = {.temperature = x->temp, .top_p = x->topp, .uniform = x->unif};
        if (engine_sample(eng, &sp, x->picked, e)) return -1;
    }
    if (engine_sync(eng, e)) return -1;
    for (int32_t i = 0, k = 0; i < b->num_items; i++) x->sampled[i] = b->items[i].emits_token ? x->picked[k++] : -1;
    int64_t t_end = clock_mono_ns();
    out->duration_ns = t_end - t0;
    if (out->duration_ns <= 0) out->duration_ns = 1;
    out->sampled = x->sampled;
    /* host work serial with the device: this step's preparation and launches (on the CPU
     * backend the launch is the forward pass itself) */
    out->host_ns = t_launched - t0;
    return 0;
}

/* config.executor: the backend and its warm-up (graph capture, first launches). */
static json_t *exec_report(void *self)
{
    engine_exec *x = self;
    return json_pack("{s:s,s:f}", "backend", x->eng->ops->name, "warmup_s", (double)x->eng->warmup_ns / 1e9);
}

static void exec_destroy(void *self)
{
    engine_exec *x = self;
    if (x->rng) gsl_rng_free(x->rng);
    free(x->token_ids), free(x->positions), free(x->slots), free(x->qsl), free(x->seq_lens);
    free(x->tables), free(x->logits_rows), free(x->temp), free(x->topp), free(x->unif);
    free(x->picked), free(x->sampled);
    free(x);
}

static const executor_ops engine_executor_ops = {
    .name = "engine",
    .measures_host = true,
    .execute = exec_step,
    .report = exec_report,
    .destroy = exec_destroy,
};

int engine_executor_create(executor *ex, engine *eng, double temperature, double top_p, uint64_t seed,
                           terr *e)
{
    if (temperature < 0 || !(top_p > 0 && top_p <= 1))
        return terr_set(e, "sampling: temperature must be >= 0 and top_p in (0, 1]");
    const engine_opts *o = &eng->opts;
    engine_exec *x = xcalloc(1, sizeof *x);
    x->eng = eng;
    x->temperature = (float)temperature;
    x->top_p = (float)top_p;
    if (temperature > 0) {
        x->rng = gsl_rng_alloc(gsl_rng_mt19937);
        gsl_rng_set(x->rng, (unsigned long)seed);
    }
    size_t T = (size_t)o->max_tokens, B = (size_t)o->max_seqs;
    x->token_ids = xmalloc(T * sizeof(int32_t));
    x->positions = xmalloc(T * sizeof(int32_t));
    x->slots = xmalloc(T * sizeof(int32_t));
    x->qsl = xmalloc((B + 1) * sizeof(int32_t));
    x->seq_lens = xmalloc(B * sizeof(int32_t));
    x->tables = xcalloc(B * (size_t)eng->max_blocks_per_seq, sizeof(int32_t));
    x->logits_rows = xmalloc(B * sizeof(int32_t));
    x->temp = xmalloc(B * sizeof(float));
    x->topp = xmalloc(B * sizeof(float));
    x->unif = xmalloc(B * sizeof(float));
    x->picked = xmalloc(B * sizeof(int32_t));
    x->sampled = xmalloc(B * sizeof(int32_t));
    *ex = (executor){&engine_executor_ops, x};
    return 0;
}
