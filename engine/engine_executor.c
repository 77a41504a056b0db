/* engine_executor.c: see engine_executor.h. */
#include "engine/engine_executor.h"

#include "core/clock.h"

#include <assert.h>
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
    /* swaps, in the order the policy made them (kv_swap.order) */
    kv_swap *swaps;
    int32_t swap_cap;
    int32_t *swap_dev, *swap_host; /* (swap_cap) one run's ids */
    uint8_t *written;              /* (max(num_blocks, num_host_blocks)) destinations of the run */
    /* the kernel trace (engine_kernel_meter, NULL when off): the kernel times settled by the
     * last call, and what the trace cost (host time: per step, and the final settle) */
    ktrace_meter *meter;
    step_kernel_time *settled; /* (cap_settled) */
    size_t cap_settled;
    int64_t trace_ns, traces, settle_ns, steps_settled, settled_at_end;
    /* steps submitted and not collected (at most two), oldest first */
    struct in_flight {
        int64_t t0, t_launched; /* host clock: the submit's start, its last enqueue */
        int64_t t_done;         /* a pass that only swapped: when its copies were done */
        bool behind;            /* submitted while the step before it ran */
    } flight[2];
    int32_t num_flight;
    int64_t last_end; /* host clock when the last collected step ended */
} engine_exec;

/* The id a step feeds the model at position p of r: a sampled id still on the device (-1 - k,
 * asynchronous scheduling) as it is, any other reduced to the vocabulary. */
static inline int32_t step_token(const request *r, int32_t p, int32_t V)
{
    int32_t o = p - r->prompt_tokens;
    if (o >= 0 && r->output_ids && o < r->num_output_tokens && r->output_ids[o] < 0) return r->output_ids[o];
    return (int32_t)(request_token_id(r, p) % (uint32_t)V);
}

static int by_order(const void *a, const void *b)
{
    return ((const kv_swap *)a)->order - ((const kv_swap *)b)->order;
}

/* The step's swaps in the policy's order, as runs of one direction that write no block twice
 * (within a run the copies are unordered). A block freed by one swap may be refilled by a later
 * one in the same pass, so the order matters. */
static int do_swaps(engine_exec *x, const batch *b, terr *e)
{
    int32_t n = b->num_swap_out + b->num_swap_in;
    if (n == 0) return 0;
    if (n > x->swap_cap) {
        x->swap_cap = n;
        x->swaps = xrealloc(x->swaps, sizeof *x->swaps * (size_t)n);
        x->swap_dev = xrealloc(x->swap_dev, sizeof *x->swap_dev * (size_t)n);
        x->swap_host = xrealloc(x->swap_host, sizeof *x->swap_host * (size_t)n);
    }
    if (b->num_swap_out) memcpy(x->swaps, b->swap_out, sizeof *x->swaps * (size_t)b->num_swap_out);
    if (b->num_swap_in) memcpy(x->swaps + b->num_swap_out, b->swap_in, sizeof *x->swaps * (size_t)b->num_swap_in);
    for (int32_t i = 0; i < b->num_swap_out; i++) x->swaps[i].order = x->swaps[i].order * 2; /* tag: out */
    for (int32_t i = b->num_swap_out; i < n; i++) x->swaps[i].order = x->swaps[i].order * 2 + 1;
    qsort(x->swaps, (size_t)n, sizeof *x->swaps, by_order);
    for (int32_t i = 0; i < n;) {
        bool out = !(x->swaps[i].order & 1);
        int32_t k = 0;
        for (; i < n && !(x->swaps[i].order & 1) == out; i++) {
            int32_t dst = out ? x->swaps[i].host_block : x->swaps[i].gpu_block;
            if (x->written[dst]) break;
            x->written[dst] = 1;
            x->swap_dev[k] = x->swaps[i].gpu_block, x->swap_host[k++] = x->swaps[i].host_block;
        }
        for (int32_t j = 0; j < k; j++) x->written[out ? x->swap_host[j] : x->swap_dev[j]] = 0;
        if (engine_swap(x->eng, out, k, x->swap_dev, x->swap_host, e)) return -1;
    }
    return 0;
}

/* The steps the meter settled (all: every one, after a forced flush) into x->settled; returns
 * how many, or -1 with e set. */
static int64_t settle(engine_exec *x, bool all, terr *e)
{
    const ktrace_step *k;
    size_t n;
    if (ktrace_meter_settle(x->meter, all, &k, &n, e)) return -1;
    grow_array((void **)&x->settled, sizeof *x->settled, &x->cap_settled, n);
    for (size_t i = 0; i < n; i++) {
        assert(k[i].step == x->steps_settled + (int64_t)i); /* one window per step, in order */
        x->settled[i] = (step_kernel_time){k[i].kernel_ns, k[i].busy_ns, {0}};
        memcpy(x->settled[i].kind_ns, k[i].kind_ns, sizeof k[i].kind_ns);
    }
    x->steps_settled += (int64_t)n;
    return (int64_t)n;
}

/* After the step's sync: closes its window on the kernel trace and hands up the kernel times
 * that became known (earlier steps', settled without waiting). *spent_ns: the host time the
 * trace took here, serial with the GPU. */
static int end_kernel_window(engine_exec *x, step_result *out, int64_t *spent_ns, terr *e)
{
    *spent_ns = 0;
    if (!x->meter) return 0;
    int64_t t0 = clock_mono_ns();
    ktrace_meter_end(x->meter);
    int64_t n = settle(x, false, e);
    if (n < 0) return -1;
    out->kernel_times = x->settled;
    out->num_kernel_times = (int32_t)n;
    *spent_ns = clock_mono_ns() - t0;
    x->trace_ns += *spent_ns, x->traces++;
    return 0;
}

/* Before the step's first enqueue: opens its window. */
static void begin_kernel_window(engine_exec *x)
{
    if (!x->meter) return;
    int64_t t0 = clock_mono_ns();
    ktrace_meter_begin(x->meter);
    x->trace_ns += clock_mono_ns() - t0;
}

/* Enqueues b: its swaps, its forward pass and its sampling (the ids stay on the device until
 * exec_collect). */
static int exec_submit(void *self, const batch *b, terr *e)
{
    engine_exec *x = self;
    engine *eng = x->eng;
    const engine_opts *o = &eng->opts;
    assert(x->num_flight < 2);
    struct in_flight *f = &x->flight[x->num_flight];
    *f = (struct in_flight){.t0 = clock_mono_ns(), .behind = x->num_flight > 0};
    begin_kernel_window(x); /* its cost is in the launch time below */
    if (do_swaps(x, b, e)) return -1;
    if (b->num_items == 0) { /* a pass that only swapped out: waited for here, nothing behind it yet */
        if (engine_sync(eng, e)) return -1;
        f->t_launched = f->t_done = clock_mono_ns();
        x->num_flight++;
        return 0;
    }
    /* Padding rows (static batching) run through the model as sequences of their own on the pad
     * block: one row each beside decoding requests (a finished member of the batch still
     * decodes), else up to a block of rows each, whose attention is negligible, as the cost
     * model assumes. */
    int32_t bs = o->block_size, pad = engine_pad_block(eng);
    bool all_decode = b->num_prefill_tokens == 0;
    int64_t P = b->num_padding_tokens, pad_rows_per_seq = all_decode ? 1 : bs;
    int64_t pad_seqs = (P + pad_rows_per_seq - 1) / pad_rows_per_seq;
    if (b->num_items + pad_seqs > o->max_seqs || b->num_tokens + P > o->max_tokens)
        return terr_set(e, "a step of %d requests / %lld tokens (%lld of them padding) exceeds the engine's %d / %d",
                        b->num_items, (long long)(b->num_tokens + P), (long long)P, o->max_seqs, o->max_tokens);
    /* block table rows as long as the step's longest table: dense, so the rows that the engine
     * checks and copies up share cache lines */
    int32_t stride = 1, T = 0, N = 0, B = b->num_items, V = eng->mc.vocab_size;
    for (int32_t i = 0; i < b->num_items; i++) stride = max_i32(stride, b->items[i].req->blocks.len);
    for (int32_t i = 0; i < b->num_items; i++) {
        const sched_item *it = &b->items[i];
        const request *r = it->req;
        int32_t end = it->context_tokens + it->num_tokens;
        if ((end + bs - 1) / bs > r->blocks.len || r->blocks.len > eng->max_blocks_per_seq)
            return terr_set(e, "request %lld holds %d blocks for %d tokens (the engine's tables hold %d)",
                            (long long)r->id, r->blocks.len, end, eng->max_blocks_per_seq);
        x->qsl[i] = T;
        for (int32_t p = it->context_tokens; p < end; p++, T++) {
            x->token_ids[T] = step_token(r, p, V);
            x->positions[T] = p;
            x->slots[T] = r->blocks.ids[p / bs] * bs + p % bs;
        }
        x->seq_lens[i] = end;
        memcpy(x->tables + (size_t)i * stride, r->blocks.ids, (size_t)r->blocks.len * sizeof(int32_t));
        if (it->emits_token) x->logits_rows[N++] = T - 1;
    }
    for (int64_t left = P; left > 0; B++) {
        int32_t n = (int32_t)min_i64(left, pad_rows_per_seq);
        x->qsl[B] = T;
        for (int32_t p = 0; p < n; p++, T++) {
            x->token_ids[T] = 0;
            x->positions[T] = p;
            x->slots[T] = pad * bs + p;
        }
        x->seq_lens[B] = n;
        x->tables[(size_t)B * stride] = pad;
        left -= n;
    }
    x->qsl[B] = T;
    eng_step s = {
        .num_tokens = T,
        .num_seqs = B,
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
    for (int32_t k = 0; k < N; k++) {
        x->temp[k] = x->temperature;
        x->topp[k] = x->top_p;
        x->unif[k] = x->rng ? (float)gsl_rng_uniform(x->rng) : 0.0f;
    }
    if (engine_forward(eng, &s, e)) return -1;
    f->t_launched = clock_mono_ns();
    /* sampling is queued behind the forward pass (on the GPU backend, while it runs) */
    eng_sampling sp = {.temperature = x->temp, .top_p = x->topp, .uniform = x->unif};
    if (engine_sample_start(eng, &sp, e)) return -1;
    x->num_flight++;
    return 0;
}

/* Waits for the oldest submitted step (b) and reports it: its sampled ids, and its time from
 * its submit, or from the end of the step it was queued behind, to its end. */
static int exec_collect(void *self, const batch *b, step_result *out, terr *e)
{
    engine_exec *x = self;
    engine *eng = x->eng;
    assert(x->num_flight > 0);
    struct in_flight f = x->flight[0];
    x->flight[0] = x->flight[1];
    x->num_flight--;
    *out = (step_result){0}; /* no kernel times unless the trace settles some */
    int64_t trace_ns;
    /* the sampling's wait is the step's (a sync would also wait for a step queued behind) */
    if (b->num_items && engine_sample_wait(eng, x->picked, NULL, e)) return -1;
    if (end_kernel_window(x, out, &trace_ns, e)) return -1;
    for (int32_t i = 0, k = 0; i < b->num_items; i++) x->sampled[i] = b->items[i].emits_token ? x->picked[k++] : -1;
    /* The step began at its submit or, queued behind a running step, when the host saw that one
     * end. Host work serial with the device: its preparation and launches (on the CPU backend
     * the launch is the forward pass itself) and the kernel trace's bookkeeping; queued behind
     * a running step, what was left of them when that step ended (the device waited that long,
     * the loop's scheduling after that end included). */
    int64_t t_end = f.t_done ? f.t_done : clock_mono_ns(), prev_end = x->last_end;
    int64_t start = f.behind ? max_i64(f.t0, prev_end) : f.t0;
    x->last_end = t_end;
    out->duration_ns = max_i64(t_end - start, 1);
    out->sampled = b->num_items ? x->sampled : NULL;
    out->host_ns = !b->num_items ? out->duration_ns
                   : f.behind    ? max_i64(f.t_launched - prev_end, 0) + trace_ns
                                 : f.t_launched - f.t0 + trace_ns;
    return 0;
}

static int exec_step(void *self, const batch *b, step_result *out, terr *e)
{
    return exec_submit(self, b, e) ? -1 : exec_collect(self, b, out, e);
}

/* The end of a run: a forced flush, and the kernel time of every step not yet reported. */
static int exec_settle(void *self, const step_kernel_time **out, int32_t *n, terr *e)
{
    engine_exec *x = self;
    *out = x->settled, *n = 0;
    if (!x->meter) return 0;
    int64_t t0 = clock_mono_ns();
    int64_t k = settle(x, true, e);
    if (k < 0) return -1;
    *out = x->settled, *n = (int32_t)k;
    x->settle_ns += clock_mono_ns() - t0;
    x->settled_at_end += k;
    return 0;
}

/* config.executor: the backend, its warm-up (graph capture, first launches), and the kernel
 * trace: whether it ran, its mean cost a step (host time, in every step's duration and
 * host_us), the final settle's (after the last step, in no step) and how many steps waited for
 * it (the others settled during the run, as CUPTI handed records over), and the records in no
 * step's figures (lost and outside_steps 0: kernel_us and kernel_busy are exact; warmup: the
 * warm-up's and graph captures' kernels, before the first step). */
static json_t *exec_report(void *self)
{
    engine_exec *x = self;
    json_t *o = json_pack("{s:s,s:f,s:b}", "backend", x->eng->ops->name, "warmup_s",
                          (double)x->eng->warmup_ns / 1e9, "kernel_trace", x->meter != NULL);
    if (x->meter) {
        ktrace_counts c = ktrace_meter_counts(x->meter);
        json_object_set_new(o, "kernel_trace_us_per_step",
                            json_real(x->traces ? (double)x->trace_ns / 1e3 / (double)x->traces : 0));
        json_object_set_new(o, "kernel_trace_settle_ms", json_real((double)x->settle_ns / 1e6));
        json_object_set_new(o, "kernel_trace_steps_settled_at_end", json_integer(x->settled_at_end));
        json_object_set_new(o, "kernel_records_lost", json_integer(c.lost));
        json_object_set_new(o, "kernel_records_outside_steps", json_integer(c.outside));
        json_object_set_new(o, "kernel_records_warmup", json_integer(c.warmup));
    }
    return o;
}

static bool exec_measures_kernels(void *self) { return ((engine_exec *)self)->meter != NULL; }

static void exec_destroy(void *self)
{
    engine_exec *x = self;
    if (x->rng) gsl_rng_free(x->rng);
    free(x->token_ids), free(x->positions), free(x->slots), free(x->qsl), free(x->seq_lens);
    free(x->tables), free(x->logits_rows), free(x->temp), free(x->topp), free(x->unif);
    free(x->swaps), free(x->swap_dev), free(x->swap_host), free(x->written);
    free(x->picked), free(x->sampled), free(x->settled);
    free(x);
}

static const executor_ops engine_executor_ops = {
    .name = "engine",
    .measures_host = true,
    .measures_kernels = exec_measures_kernels,
    .execute = exec_step,
    .submit = exec_submit,
    .collect = exec_collect,
    .settle = exec_settle,
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
    x->meter = engine_kernel_meter(eng);
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
    x->written = xcalloc((size_t)max_i32(o->num_blocks, o->num_host_blocks), 1);
    *ex = (executor){&engine_executor_ops, x};
    return 0;
}
