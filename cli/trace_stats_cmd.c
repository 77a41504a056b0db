/*
 * trace_stats_cmd.c: `tandem trace stats FILE`: what a trace asks of a server, and how to
 * configure one for it.
 *
 * The trace's numbers come from one streaming pass (traces/trace_stats.h). Then the KV cache is
 * sized exactly as `tandem sim` sizes it (serving_resolve_capacity, with sim's default budgets),
 * and the length distribution becomes max_num_seqs / max_num_batched_tokens suggestions whose
 * reasoning is printed as sentences, with step times from the roofline cost model:
 *   max_num_seqs = KV blocks / the mean blocks an admitted request ends holding (prompt +
 *     output, capped at max_model_len), capped at vLLM's API-server default for the GPU class
 *     (1024 on H100/H200, 256 on A100) and rounded down to a CUDA-graph batch size;
 *   max_num_batched_tokens = the power of two that covers the p90 prompt, kept within
 *     [2048, that default's 8192 or 2048]; with chunked prefill off, at least max_model_len.
 *   The roofline model prices the trade-off: a decode-only step against one that fills the
 *   budget with a prompt's chunk, for 2048, 4096 and 8192.
 *
 * Exit codes: 0 ok, 1 an output file could not be written, 2 bad flags or a bad trace (the
 * reader's "FILE:LINE: ..." message).
 */
#include <assert.h>
#include <errno.h>
#include <gsl/gsl_histogram.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/serving.h"
#include "core/kv.h"
#include "core/serve.h"
#include "traces/trace.h"
#include "traces/trace_stats.h"

/* Width of the longest histogram bar, in characters. */
#define HIST_BAR_WIDTH 40
/* The busy fraction a suggested replica count aims at by the estimate below. The estimate counts
 * full decode batches and no queueing, so replicas run busier than it says: on the Mooncake
 * conversation trace (Llama-3.1-8B, H200) it suggests 4, and `tandem sim` runs those 95% busy. */
#define REPLICA_TARGET_BUSY 0.5

/* max_num_batched_tokens is never suggested below this (see suggest()). */
#define BATCHED_TOKENS_MIN 2048

/* ---- options ------------------------------------------------------------------------------- */

typedef struct stats_options {
    char *model, *gpu, *json, *rate_csv;
    int64_t block_size, max_model_len, max_requests, tensor_parallel_size, seed;
    double gpu_memory_utilization, time_scale, bin_seconds, request_rate, burstiness;
    bool skip_bad_rows;
    const char *file; /* the positional FILE; points into argv, not in the table */
} stats_options;

#define O(f) offsetof(stats_options, f)
static const opt_spec stats_option_specs[] = {
    {"model", OPT_STR, O(model), "llama-2-7b", "model for the capacity section: shipped name, config.json, or checkpoint dir"},
    {"gpu", OPT_STR, O(gpu), "h200", "GPU (as tandem sim --help lists them)"},
    {"gpu-memory-utilization", OPT_F64, O(gpu_memory_utilization), "0.9", "fraction of GPU memory for weights, activations and KV"},
    {"block-size", OPT_I64, O(block_size), KV_DEFAULT_BLOCK_SIZE_STR, "tokens per KV block"},
    {"tensor-parallel-size", OPT_I64, O(tensor_parallel_size), "1", "GPUs per replica, 1, 2, 4 or 8 (as tandem sim: KV per GPU, all-reduces in step times)"},
    {"max-model-len", OPT_I64, O(max_model_len), "0", "prompt + output at most (0: the model's max_position_embeddings)"},
    {"time-scale", OPT_F64, O(time_scale), "1.0", "multiply arrival times (0.5 = twice the rate)"},
    {"max-requests", OPT_I64, O(max_requests), "0", "read only the first N requests (0: all)"},
    {"request-rate", OPT_RATE, O(request_rate), "0", "re-time the trace as sim --request-rate does (Poisson; 0: its own times)"},
    {"burstiness", OPT_F64, O(burstiness), "1.0", "with --request-rate: Gamma shape of the inter-arrivals (1: Poisson)"},
    {"seed", OPT_I64, O(seed), "0", "seed of the re-timing"},
    {"skip-bad-rows", OPT_BOOL, O(skip_bad_rows), "false", "skip and count bad trace rows instead of failing"},
    {"bin-seconds", OPT_F64, O(bin_seconds), "60", "bin width of the rate-over-time series and the index of dispersion"},
    {"json", OPT_STR, O(json), "", "also write every number as JSON to this file"},
    {"rate-csv", OPT_STR, O(rate_csv), "", "write the rate series t_s,requests,rate_per_s (one row per bin) to this file"},
    OPT_END,
};
#undef O

static const char *usage =
    "usage: tandem trace stats FILE [options]\n\n"
    "Summarises a request trace (Azure 2023 / Vidur / Mooncake / tandem CSV): request count,\n"
    "span and rate over time; burstiness (inter-arrival coefficient of variation, index of\n"
    "dispersion of per-bin counts: both 1 for Poisson arrivals); prompt, output and total length\n"
    "percentiles and log2 histograms; the Mooncake prefix-sharing fraction; the KV capacity of\n"
    "--model on --gpu as `tandem sim` computes it; and suggested --max-num-seqs and\n"
    "--max-num-batched-tokens with the reasoning. Standard deviations use N - 1. Bins start at\n"
    "the first arrival; the last one ends at the last arrival, is partial, and is left out of\n"
    "the index of dispersion.\n";

static int stats_positional(void *dst, const char *arg, terr *e)
{
    stats_options *o = dst;
    if (o->file) return terr_set(e, "unexpected argument \"%s\" (one FILE only; see --help)", arg);
    o->file = arg;
    return 0;
}

/* ---- one pass over the trace ---------------------------------------------------------------- */

/* ---- what is reported ----------------------------------------------------------------------- */

/* Budgets a step time is predicted for (max_num_batched_tokens candidates). */
static const int32_t budget_candidates[] = {2048, 4096, 8192};
#define NUM_BUDGETS ((int)ARRAY_LEN(budget_candidates))

typedef struct stats_report {
    const char *file, *format;
    int64_t requests, bad_rows;
    double bin_s;
    trace_stats st;                     /* the trace's numbers */

    /* capacity */
    double gpu_util;                    /* --gpu-memory-utilization */
    int32_t block_size;                 /* tokens per KV block */
    double time_scale;
    bool max_model_len_given;
    model_config model;
    model_config shard;                 /* what one GPU of a replica holds (= model with TP 1) */
    tp_comm comm;                       /* a TP replica's all-reduces (comm.tp = 1: none) */
    const gpu_spec *gpu;
    int32_t max_model_len;
    int32_t assumed_batched_tokens, assumed_seqs; /* what the activation reserve is sized for */
    kv_capacity kv;
    int64_t fit_at[3];                  /* requests of the p50 / p90 / p99 total that fit at once */
    int64_t rejected;                   /* prompt >= max_model_len: serve_admission_check refuses */
    int64_t over_len;                   /* prompt + output > max_model_len */

    /* suggestions */
    bool have_suggestions;              /* false when no request is admitted */
    int64_t admitted;
    double admitted_mean_tokens;        /* mean of min(prompt + output, max_model_len) */
    double admitted_mean_blocks;        /* mean KV blocks one admitted request ends holding */
    int64_t kv_fit;                     /* num_blocks / admitted_mean_blocks */
    int32_t server_seqs, server_tokens; /* vLLM's API-server defaults for this GPU class */
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;     /* with chunked prefill */
    int32_t batched_tokens_no_chunking; /* with chunked prefill off */
    double decode_context;              /* tokens of context a decoding request has, typically */
    double decode_step_ms;              /* max_num_seqs decodes */
    double mixed_step_ms[NUM_BUDGETS];  /* max_num_seqs - 1 decodes + a chunk filling the budget */
    int32_t p90_prefill_steps[NUM_BUDGETS];
    int64_t kv_blocks_suggested;        /* KV blocks with the suggested budgets */
    double request_gpu_ms;              /* one replica's busy time per request, at the suggestions */
    double prefill_ms;                  /* of which prefilling the mean prompt */
    int32_t replicas_min;               /* fewer cannot keep up with the mean rate, by the estimate */
    int32_t replicas_mean, replicas_peak; /* replicas that keep each under REPLICA_TARGET_BUSY busy
                                             at the mean rate / the busiest bin's rate */
    char *reasoning[3];                 /* paragraphs: max_num_seqs, max_num_batched_tokens, notes */
} stats_report;

static void report_free(stats_report *r)
{
    trace_stats_free(&r->st);
    for (size_t i = 0; i < ARRAY_LEN(r->reasoning); i++) free(r->reasoning[i]);
}

static int32_t next_pow2(int64_t x)
{
    int32_t p = 1;
    while (p < x && p < (1 << 30)) p *= 2;
    return p;
}

/* Rounds down to a batch size vLLM captures a CUDA graph for: 1, 2, 4, then multiples of 8
 * below 256 and of 16 from 256 to 512 (VllmConfig's default capture sizes); above 512, where
 * vLLM captures no graph by default, still to a multiple of 16. */
static int32_t round_to_graph_size(int64_t n)
{
    if (n >= 256) return (int32_t)(n / 16 * 16);
    if (n >= 8) return (int32_t)(n / 8 * 8);
    return n >= 4 ? 4 : n >= 2 ? 2 : 1;
}

/* vLLM's defaults for the OpenAI API server (EngineArgs: GPUs with >= 70 GiB that are not an
 * A100 get the larger ones). */
static void vllm_server_defaults(const gpu_spec *gpu, int32_t *seqs, int32_t *tokens)
{
    bool big = gpu->mem_bytes >= 70LL * 1024 * 1024 * 1024 && !strstr(gpu->name, "a100");
    *seqs = big ? 1024 : 256;
    *tokens = big ? 8192 : 2048;
}

/* Predicted duration (ms) of a step with num_decodes decodes at `context` tokens plus one
 * prefill chunk of chunk tokens (0: none), on the roofline cost model of the shard plus a TP
 * replica's all-reduces (as tandem sim prices it). */
static double step_ms(const cost_model_ops *cm, void *self, const tp_comm *comm, int32_t num_decodes, int32_t context,
                      int32_t chunk)
{
    step_shape s = {
        .num_items = num_decodes + (chunk > 0),
        .num_prefill_seqs = chunk > 0,
        .num_decode_seqs = num_decodes,
        .num_emitting = num_decodes,
        .prefill_tokens = chunk,
        .decode_tokens = num_decodes,
        .prefill_pairs2 = (int64_t)chunk * (chunk + 1),
        .prefill_keys = chunk,
        .decode_keys = (int64_t)num_decodes * (context + 1),
        .decode_keys_sq = (int64_t)num_decodes * (context + 1) * (context + 1),
        .max_keys = max_i32(chunk, num_decodes ? context + 1 : 0),
    };
    return (double)(cm->step_ns(self, &s) + tp_step_comm_ns(comm, &s)) / NS_PER_MS;
}

/* Appends printf-style text to a paragraph held in *p (malloc'd). */
static void para(char **p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void para(char **p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *add;
    if (vasprintf(&add, fmt, ap) < 0) abort();
    va_end(ap);
    size_t old = *p ? strlen(*p) : 0;
    *p = xrealloc(*p, old + strlen(add) + 1);
    strcpy(*p + old, add);
    free(add);
}

static const char *pct_name[3] = {"p50", "p90", "p99"};

/* The suggestions: the numbers and the sentences that justify them. */
static int suggest(stats_report *r, const int *prompt, const int *output, terr *e)
{
    int32_t bs = r->block_size;
    sched_config cfg = {.max_model_len = r->max_model_len, .block_size = bs};
    double sum_tokens = 0, sum_blocks = 0;
    for (int64_t i = 0; i < r->requests; i++) {
        if (serve_admission_check(&cfg, (int32_t)r->kv.num_blocks, prompt[i], output[i]) != REJECT_NONE) continue;
        int64_t seq = min_i64((int64_t)prompt[i] + output[i], r->max_model_len);
        r->admitted++;
        sum_tokens += (double)seq;
        sum_blocks += (double)div_ceil_i64(seq, bs);
    }
    vllm_server_defaults(r->gpu, &r->server_seqs, &r->server_tokens);
    if (r->admitted == 0) {
        para(&r->reasoning[0], "No request of this trace fits max_model_len %d (every prompt is at least that long), "
             "so there is nothing to size the batch for: raise --max-model-len or pick a --model with a longer context.",
             r->max_model_len);
        return 0;
    }
    r->have_suggestions = true;
    r->admitted_mean_tokens = sum_tokens / (double)r->admitted;
    r->admitted_mean_blocks = sum_blocks / (double)r->admitted;
    r->kv_fit = (int64_t)floor((double)r->kv.num_blocks / r->admitted_mean_blocks);

    /* max_num_seqs: as many running sequences as the KV cache holds at the typical length. */
    int64_t seqs = r->kv_fit;
    bool capped = seqs > r->server_seqs;
    if (capped) seqs = r->server_seqs;
    r->max_num_seqs = round_to_graph_size(max_i64(seqs, 1));
    char **p = &r->reasoning[0];
    para(p, "--max-num-seqs %d: the KV cache holds %lld blocks of %d tokens. The %lld requests a server admits "
         "(prompt < max_model_len %d) end holding on average %.0f tokens of prompt + output (capped at max_model_len), "
         "%.1f blocks, so about %lld of them fit at once. The mean, not the median, is what sets this: the KV of N "
         "running requests adds up to about N times the mean length. ",
         r->max_num_seqs, (long long)r->kv.num_blocks, bs, (long long)r->admitted, r->max_model_len,
         r->admitted_mean_tokens, r->admitted_mean_blocks, (long long)r->kv_fit);
    if (capped)
        para(p, "That is more than %d, vLLM's default for the API server on %s, so the cap stays there: beyond it "
             "decode steps grow for little gain in throughput. ",
             r->server_seqs, r->gpu->name);
    else if (r->max_num_seqs > 512)
        para(p, "Rounded down to %d, a multiple of 16 (vLLM captures CUDA graphs for at most 512 sequences by "
             "default; larger decode batches run without them). ", r->max_num_seqs);
    else if (r->max_num_seqs < seqs)
        para(p, "Rounded down to %d, a batch size vLLM captures a CUDA graph for. ", r->max_num_seqs);
    else
        para(p, "%d is itself a batch size vLLM captures a CUDA graph for. ", r->max_num_seqs);
    if (!capped)
        para(p, "More running sequences than the cache holds get preempted as they grow (and recomputed); fewer "
             "leave KV memory idle. ");
    para(p, "Requests mid-decode hold less than their final length, so under steady load the cache has some slack "
         "at this setting; if `tandem sim` shows no preemptions, a larger value may still pay off.");

    /* max_num_batched_tokens: cover the p90 prompt in one step, within vLLM's range. */
    int32_t want = next_pow2((int64_t)ceil(r->st.prompt_len.p90));
    int32_t lo = BATCHED_TOKENS_MIN, hi = max_i32(r->server_tokens, lo);
    r->max_num_batched_tokens = min_i32(max_i32(want, lo), hi);
    assert(r->max_num_batched_tokens >= r->max_num_seqs); /* vLLM's start-up check: 2048 > 1024 */
    r->batched_tokens_no_chunking = max_i32(r->max_num_batched_tokens, r->max_model_len);

    const cost_model_ops *cm = cost_model_find("roofline");
    assert(cm);
    cost_model_opts cmo = cost_model_opts_default();
    cmo.block_size = bs;
    void *self = cm->create(&r->shard, r->gpu, &cmo, e);
    if (!self) return -1;
    double mean_prompt = 0, mean_output = 0;
    for (int64_t i = 0; i < r->requests; i++)
        if (prompt[i] < r->max_model_len) mean_prompt += prompt[i], mean_output += min_i64(output[i], r->max_model_len - prompt[i]);
    mean_prompt /= (double)r->admitted;
    mean_output /= (double)r->admitted;
    r->decode_context = mean_prompt + mean_output / 2;
    int32_t S = r->max_num_seqs, ctx = (int32_t)lround(r->decode_context);
    r->decode_step_ms = step_ms(cm, self, &r->comm, S, ctx, 0);
    /* --num-replicas: a request costs its replica the prefill of its prompt plus its share of
     * the decode steps it rides in (a full batch of S at the typical context) */
    r->prefill_ms = step_ms(cm, self, &r->comm, 0, 0, (int32_t)lround(mean_prompt));
    r->request_gpu_ms = r->prefill_ms + mean_output * r->decode_step_ms / S;
    double need_mean = isnan(r->st.mean_rate) ? 0 : r->st.mean_rate * r->request_gpu_ms / 1e3 / REPLICA_TARGET_BUSY;
    double need_peak = isnan(r->st.peak_bin_rate) ? 0 : r->st.peak_bin_rate * r->request_gpu_ms / 1e3 / REPLICA_TARGET_BUSY;
    r->replicas_min = (int32_t)fmax(1, ceil(need_mean * REPLICA_TARGET_BUSY));
    r->replicas_mean = (int32_t)fmax(1, ceil(need_mean));
    r->replicas_peak = (int32_t)fmax(r->replicas_mean, ceil(need_peak));
    for (int i = 0; i < NUM_BUDGETS; i++) {
        int32_t chunk = max_i32(budget_candidates[i] - (S - 1), 1);
        r->mixed_step_ms[i] = step_ms(cm, self, &r->comm, S - 1, ctx, chunk);
        r->p90_prefill_steps[i] = (int32_t)div_ceil_i64((int64_t)ceil(r->st.prompt_len.p90), chunk);
    }
    cm->destroy(self);

    int bi = 0;
    for (int i = 0; i < NUM_BUDGETS; i++)
        if (budget_candidates[i] == r->max_num_batched_tokens) bi = i;
    p = &r->reasoning[1];
    para(p, "--max-num-batched-tokens %d (chunked prefill on, as in vLLM V1): 90%% of prompts are at most %.0f tokens; ",
         r->max_num_batched_tokens, r->st.prompt_len.p90);
    if (want < lo)
        para(p, "the budget stays at %d, the smallest default vLLM uses (its API server on A100-class GPUs), which "
             "already prefills them in one step; smaller budgets leave the GEMMs too small to use the GPU well. ", lo);
    else if (want > hi)
        para(p, "covering them in one step would take %d, above %d, vLLM's API-server default on %s; longer prompts "
             "are prefilled in chunks over several steps instead. ", want, hi, r->gpu->name);
    else
        para(p, "the next power of two, %d, prefills 90%% of prompts in one step. ", want);
    if (budget_candidates[bi] == r->max_num_batched_tokens)
        para(p, "On tandem's roofline model of %s, a decode step of %d sequences at ~%d tokens of context (mean prompt + "
             "half the mean output) takes %.1f ms; filling the rest of a %d-token budget with the first chunk of a new "
             "prompt makes that step %.1f ms (later chunks of a long prompt cost more attention), the inter-token latency every running request sees while a long prompt is prefilled. ",
             r->gpu->name, S, ctx, r->decode_step_ms, r->max_num_batched_tokens, r->mixed_step_ms[bi]);
    para(p, "The trade-off: a larger budget prefills more per step (better prefill throughput and time to first token: "
         "the p90 prompt takes %d step%s at %d, %d at %d), a smaller one bounds the inter-token latency (%.1f ms "
         "per mixed step at %d, %.1f ms at %d).",
         r->p90_prefill_steps[0], r->p90_prefill_steps[0] == 1 ? "" : "s", budget_candidates[0],
         r->p90_prefill_steps[NUM_BUDGETS - 1], budget_candidates[NUM_BUDGETS - 1], r->mixed_step_ms[0],
         budget_candidates[0], r->mixed_step_ms[NUM_BUDGETS - 1], budget_candidates[NUM_BUDGETS - 1]);

    p = &r->reasoning[2];
    para(p, "With chunked prefill off (--no-enable-chunked-prefill in tandem sim and vLLM V0), the budget must be at least max_model_len, %d, or the "
         "longest prompts could never be scheduled: use %d. ",
         r->max_model_len, r->batched_tokens_no_chunking);
    kv_capacity k2;
    if (kv_capacity_compute(&k2, &r->shard, r->gpu, r->gpu_util, bs,
                            r->max_num_batched_tokens, r->max_num_seqs, r->max_model_len, NULL) == 0)
        r->kv_blocks_suggested = k2.num_blocks;
    if (r->kv_blocks_suggested)
        para(p, "With these two settings the activation reserve is sized for them, and the simulator's KV cache is "
             "%lld blocks (vs %lld above). ",
             (long long)r->kv_blocks_suggested, (long long)r->kv.num_blocks);
    if (r->st.has_hashes && r->st.repeat_fraction > 0.05)
        para(p, "%.1f%% of the %d-token prompt blocks repeat an earlier one: --enable-prefix-caching (tandem sim and "
             "vLLM) can skip up to that share of prompt blocks' prefill, if the cache keeps them. ",
             100.0 * r->st.repeat_fraction, PREFIX_HASH_BLOCK_TOKENS);
    if (!isnan(r->st.mean_rate))
        para(p, "--num-replicas %d: on the same roofline a request costs one replica about %.1f ms of GPU time (%.1f ms "
             "to prefill the mean prompt of %.0f tokens, plus its share of %.0f decode steps of %d sequences); at the "
             "mean rate of %.2f req/s fewer than %d replica%s cannot keep up, and %d keep each under %.0f%% busy by this "
             "estimate (it counts full decode batches and no queueing: real replicas run busier); the busiest %g s bin "
             "(%.2f req/s) needs %d. Spread them with --router least-outstanding%s, then check the tail latencies with "
             "tandem sim. ",
             r->replicas_mean, r->request_gpu_ms, r->prefill_ms, mean_prompt, mean_output, S, r->st.mean_rate,
             r->replicas_min, r->replicas_min == 1 ? "" : "s", r->replicas_mean, 100 * REPLICA_TARGET_BUSY, r->bin_s,
             r->st.peak_bin_rate, r->replicas_peak,
             r->st.has_hashes ? " (prefix-affinity with --enable-prefix-caching for shared prefixes)" : "");
    if (r->rejected > 0)
        para(p, "%.1f%% of the prompts are at least max_model_len long and would be rejected; a model with a context "
             "of %.0f tokens (the p99 total) would serve 99%% of the trace.",
             100.0 * (double)r->rejected / (double)r->requests, ceil(r->st.total_len.p99));
    for (size_t i = 0; i < ARRAY_LEN(r->reasoning); i++) {
        size_t n = r->reasoning[i] ? strlen(r->reasoning[i]) : 0;
        while (n > 0 && r->reasoning[i][n - 1] == ' ') r->reasoning[i][--n] = 0;
    }
    return 0;
}

/* Everything derived from the trace's statistics and the resolved model/GPU. */
static int build_report(stats_report *r, const stats_options *o, terr *e)
{
    const trace_stats *a = &r->st;
    r->requests = a->n;
    r->bin_s = o->bin_seconds;
    size_t n = (size_t)a->n;
    sched_config cfg = {.max_model_len = r->max_model_len, .block_size = r->block_size};
    for (size_t i = 0; i < n; i++) {
        /* the simulator's own rule; with a KV cache that holds max_model_len it is prompt >= it */
        r->rejected += serve_admission_check(&cfg, (int32_t)r->kv.num_blocks, a->prompt[i], a->output[i]) != REJECT_NONE;
        r->over_len += (int64_t)a->prompt[i] + a->output[i] > r->max_model_len;
    }
    int32_t bs = r->block_size;
    const double q[3] = {a->total_len.p50, a->total_len.p90, a->total_len.p99};
    for (int i = 0; i < 3; i++) r->fit_at[i] = r->kv.num_blocks / div_ceil_i64((int64_t)ceil(q[i]), bs);
    return suggest(r, a->prompt, a->output, e);
}

/* ---- text report ---------------------------------------------------------------------------- */

/* "n/a" for NAN, else x with fmt. */
static const char *num(char *buf, size_t n, const char *fmt, double x)
{
    if (isnan(x)) snprintf(buf, n, "n/a");
    else snprintf(buf, n, fmt, x);
    return buf;
}

/* Prints text wrapped at `width` columns, every line indented by `indent` spaces. */
static void print_wrapped(FILE *f, const char *text, int indent, int width)
{
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        int room = width - indent;
        const char *end = p, *brk = NULL;
        int cols = 0;
        while (*end && cols < room) {
            if (*end == ' ') brk = end;
            if (((unsigned char)*end & 0xC0) != 0x80) cols++; /* count UTF-8 characters */
            end++;
        }
        if (*end && brk) end = brk;
        fprintf(f, "%*s%.*s\n", indent, "", (int)(end - p), p);
        p = end;
    }
}

static void print_histogram(FILE *f, const char *name, const length_summary *s, int64_t n)
{
    fprintf(f, "%s tokens (log2 bins)\n", name);
    double top = gsl_histogram_max_val(s->hist);
    for (size_t i = 0; i < gsl_histogram_bins(s->hist); i++) {
        double lo, hi, c = gsl_histogram_get(s->hist, i);
        gsl_histogram_get_range(s->hist, i, &lo, &hi);
        char range[48];
        snprintf(range, sizeof range, "%.0f-%.0f", lo, hi - 1);
        int bar = (int)lround(HIST_BAR_WIDTH * c / top);
        fprintf(f, "  %13s %8.0f %5.1f%% |%.*s\n", range, c, 100.0 * c / (double)n, bar,
                "########################################");
    }
}

static void print_report(FILE *f, const stats_report *r)
{
    char b1[64];
    fprintf(f, "trace: %s (%s format)\n\n", r->file, r->format);
    fprintf(f, "overview\n");
    fprintf(f, "  requests               %lld", (long long)r->requests);
    if (r->bad_rows) fprintf(f, " (%lld bad row%s skipped)", (long long)r->bad_rows, r->bad_rows == 1 ? "" : "s");
    fprintf(f, "\n  span                   %.1f s (first to last arrival)\n", r->st.span_s);
    fprintf(f, "  mean rate              %s req/s\n", num(b1, sizeof b1, "%.3f", r->st.mean_rate));
    fprintf(f, "  peak rate              %.3f req/s (the %g s bin from t = %g s)\n", r->st.peak_bin_rate, r->bin_s,
            r->st.peak_bin_start_s);

    fprintf(f, "\nburstiness\n");
    fprintf(f, "  inter-arrival mean     %s s\n", num(b1, sizeof b1, "%.4f", r->st.gap_mean_s));
    fprintf(f, "  inter-arrival CV       %s (1 for Poisson)\n", num(b1, sizeof b1, "%.3f", r->st.gap_cv));
    fprintf(f, "  index of dispersion    %s (variance/mean of %lld complete %g s bins' counts; 1 for Poisson)\n",
            num(b1, sizeof b1, "%.3f", r->st.iod), (long long)r->st.complete_bins, r->bin_s);
    fprintf(f, "  max in one second      %lld request%s (t = %.0f s)\n", (long long)r->st.max_in_second,
            r->st.max_in_second == 1 ? "" : "s", r->st.max_second_start_s);
    fprintf(f, "  gamma shape            %s (1/CV^2: `trace gen --burstiness` for the same CV)\n",
            num(b1, sizeof b1, "%.4g", r->st.gamma_shape));
    if (r->st.zero_gap_fraction > 0.01)
        fprintf(f, "  same-instant arrivals  %.1f%% of the gaps are 0: a coarse clock in the trace inflates the CV\n",
                100.0 * r->st.zero_gap_fraction);
    fprintf(f, "  => %s\n", r->st.verdict);

    fprintf(f, "\nlengths (tokens)       mean      p50      p90      p99      max\n");
    const length_summary *ls[3] = {&r->st.prompt_len, &r->st.output_len, &r->st.total_len};
    const char *names[3] = {"prompt", "output", "total"};
    for (int i = 0; i < 3; i++)
        fprintf(f, "  %-16s %10.1f %8.0f %8.0f %8.0f %8d\n", names[i], ls[i]->mean, ls[i]->p50, ls[i]->p90,
                ls[i]->p99, ls[i]->max);
    for (int i = 0; i < 3; i++) {
        fprintf(f, "\n");
        print_histogram(f, names[i], ls[i], r->requests);
    }

    if (r->st.has_hashes) {
        fprintf(f, "\nprefix sharing (Mooncake hash_ids, %d-token blocks)\n", PREFIX_HASH_BLOCK_TOKENS);
        fprintf(f, "  hash blocks            %lld, %lld distinct\n", (long long)r->st.hash_blocks,
                (long long)r->st.distinct_hashes);
        fprintf(f, "  repeat an earlier one  %.1f%% (what an unbounded prefix cache could reuse)\n",
                100.0 * r->st.repeat_fraction);
    }

    int32_t bs = r->block_size;
    fprintf(f, "\ncapacity: %s on %s%s, gpu-memory-utilization %g, block size %d\n", r->model.name, r->gpu->name,
            r->comm.tp > 1 ? (r->comm.tp == 2 ? " x 2 (tensor parallel)" : r->comm.tp == 4 ? " x 4 (tensor parallel)"
                                                                                           : " x 8 (tensor parallel)")
                           : "",
            r->gpu_util, bs);
    fprintf(f, "  KV cache               %lld blocks = %lld tokens (%.2f MiB per block; activation reserve sized\n"
               "                         for %d batched tokens and %d sequences, tandem sim's defaults)\n",
            (long long)r->kv.num_blocks, (long long)r->kv.num_blocks * bs,
            (double)r->kv.bytes_per_block / (1024.0 * 1024.0), r->assumed_batched_tokens, r->assumed_seqs);
    fprintf(f, "  max_model_len          %d%s\n", r->max_model_len,
            !r->max_model_len_given ? " (the model's max_position_embeddings)" : " (--max-model-len)");
    const double q[3] = {r->st.total_len.p50, r->st.total_len.p90, r->st.total_len.p99};
    for (int i = 0; i < 3; i++)
        fprintf(f, "  %-22s %lld at the %s total (%.0f tokens%s)\n", i ? "" : "fit at once", (long long)r->fit_at[i],
                pct_name[i], ceil(q[i]), q[i] > r->max_model_len ? ", > max_model_len" : "");
    fprintf(f, "  rejected               %lld (%.2f%%): prompt >= max_model_len, refused by vLLM and tandem sim\n",
            (long long)r->rejected, 100.0 * (double)r->rejected / (double)r->requests);
    fprintf(f, "  over max_model_len     %lld (%.2f%%): prompt + output > max_model_len; vLLM's API server rejects\n"
               "                         these when max_tokens asks for the whole output, tandem sim admits them\n"
               "                         and stops them at max_model_len\n",
            (long long)r->over_len, 100.0 * (double)r->over_len / (double)r->requests);

    fprintf(f, "\nsuggestions\n");
    for (size_t i = 0; i < ARRAY_LEN(r->reasoning); i++)
        if (r->reasoning[i]) {
            print_wrapped(f, r->reasoning[i], 2, 100);
            fprintf(f, "\n");
        }
    if (r->have_suggestions) {
        fprintf(f, "  try: tandem sim --trace %s --model %s --gpu %s", r->file, r->model.name, r->gpu->name);
        if (r->gpu_util != 0.9) fprintf(f, " --gpu-memory-utilization %g", r->gpu_util);
        if (r->block_size != KV_DEFAULT_BLOCK_SIZE) fprintf(f, " --block-size %d", r->block_size);
        if (r->comm.tp > 1) fprintf(f, " --tensor-parallel-size %d", r->comm.tp);
        if (r->max_model_len_given) fprintf(f, " --max-model-len %d", r->max_model_len);
        if (r->time_scale != 1.0) fprintf(f, " --time-scale %g", r->time_scale);
        fprintf(f, " \\\n         --max-num-seqs %d --max-num-batched-tokens %d", r->max_num_seqs,
                r->max_num_batched_tokens);
        if (r->replicas_mean > 1) fprintf(f, " --num-replicas %d --router least-outstanding", r->replicas_mean);
        fprintf(f, "\n");
    }
}

/* ---- JSON and the rate series -------------------------------------------------------------- */

static json_t *jnum(double x) { return isnan(x) ? json_null() : json_real(x); }

static json_t *length_json(const length_summary *s)
{
    json_t *h = json_array();
    for (size_t i = 0; i < gsl_histogram_bins(s->hist); i++) {
        double lo, hi;
        gsl_histogram_get_range(s->hist, i, &lo, &hi);
        json_array_append_new(h, json_pack("{s:I, s:I, s:I}", "lo", (json_int_t)lo, "hi", (json_int_t)hi, "count",
                                           (json_int_t)gsl_histogram_get(s->hist, i)));
    }
    return json_pack("{s:o, s:i, s:o, s:o, s:o, s:i, s:o}", "mean", jnum(s->mean), "min", s->min, "p50", jnum(s->p50),
                     "p90", jnum(s->p90), "p99", jnum(s->p99), "max", s->max, "histogram", h);
}

static json_t *report_json(const stats_report *r, const stats_options *o)
{
    const trace_stats *a = &r->st;
    json_t *root = json_object();
    json_object_set_new(root, "file", json_string(r->file));
    json_object_set_new(root, "format", json_string(r->format));
    json_object_set_new(root, "options", opts_to_json(stats_option_specs, o));
    json_object_set_new(root, "requests", json_integer(r->requests));
    json_object_set_new(root, "bad_rows", json_integer(r->bad_rows));
    json_object_set_new(root, "span_s", json_real(r->st.span_s));
    json_object_set_new(root, "mean_rate_per_s", jnum(r->st.mean_rate));
    json_object_set_new(root, "bin_seconds", json_real(r->bin_s));
    json_object_set_new(root, "peak_bin_rate_per_s", json_real(r->st.peak_bin_rate));
    json_object_set_new(root, "peak_bin_start_s", json_real(r->st.peak_bin_start_s));
    json_t *bins = json_array();
    for (size_t i = 0; i < a->num_bins; i++) json_array_append_new(bins, json_integer(a->bin_count[i]));
    json_object_set_new(root, "bin_counts", bins);

    json_object_set_new(root, "burstiness",
                        json_pack("{s:o, s:o, s:o, s:o, s:o, s:I, s:o, s:I, s:f, s:s}", "interarrival_mean_s",
                                  jnum(r->st.gap_mean_s), "zero_gap_fraction", jnum(r->st.zero_gap_fraction), "interarrival_sd_s", jnum(r->st.gap_sd_s), "interarrival_cv",
                                  jnum(r->st.gap_cv), "gamma_shape", jnum(r->st.gamma_shape), "complete_bins",
                                  (json_int_t)r->st.complete_bins, "index_of_dispersion", jnum(r->st.iod),
                                  "max_requests_in_one_second", (json_int_t)r->st.max_in_second,
                                  "max_second_start_s", r->st.max_second_start_s, "interpretation", r->st.verdict));
    json_object_set_new(root, "lengths",
                        json_pack("{s:o, s:o, s:o}", "prompt", length_json(&r->st.prompt_len), "output",
                                  length_json(&r->st.output_len), "total", length_json(&r->st.total_len)));
    json_object_set_new(root, "prefix_sharing",
                        r->st.has_hashes ? json_pack("{s:i, s:I, s:I, s:f}", "block_tokens", PREFIX_HASH_BLOCK_TOKENS,
                                                  "hash_blocks", (json_int_t)r->st.hash_blocks, "distinct_blocks",
                                                  (json_int_t)r->st.distinct_hashes, "repeat_fraction",
                                                  r->st.repeat_fraction)
                                      : json_null());

    int32_t bs = (int32_t)o->block_size;
    json_t *fit = json_object();
    const double q[3] = {r->st.total_len.p50, r->st.total_len.p90, r->st.total_len.p99};
    for (int i = 0; i < 3; i++)
        json_object_set_new(fit, pct_name[i], json_pack("{s:I, s:I}", "total_tokens", (json_int_t)ceil(q[i]),
                                                        "requests", (json_int_t)r->fit_at[i]));
    json_object_set_new(root, "capacity",
                        json_pack("{s:s, s:s, s:f, s:i, s:I, s:I, s:I, s:I, s:I, s:i, s:i, s:i, s:o, s:I, s:f, s:I, s:f}",
                                  "model", r->model.name, "gpu", r->gpu->name, "gpu_memory_utilization",
                                  o->gpu_memory_utilization, "block_size", bs, "kv_blocks",
                                  (json_int_t)r->kv.num_blocks, "kv_tokens", (json_int_t)(r->kv.num_blocks * bs),
                                  "kv_bytes_per_block", (json_int_t)r->kv.bytes_per_block, "weight_bytes",
                                  (json_int_t)r->kv.weight_bytes, "activation_reserve_bytes",
                                  (json_int_t)r->kv.activation_bytes, "assumed_max_num_batched_tokens",
                                  r->assumed_batched_tokens, "assumed_max_num_seqs", r->assumed_seqs,
                                  "max_model_len", r->max_model_len, "fit_at_once", fit, "prompt_too_long",
                                  (json_int_t)r->rejected, "prompt_too_long_fraction",
                                  (double)r->rejected / (double)r->requests, "over_max_model_len",
                                  (json_int_t)r->over_len, "over_max_model_len_fraction",
                                  (double)r->over_len / (double)r->requests));

    json_t *s = json_object();
    json_t *why = json_array();
    for (size_t i = 0; i < ARRAY_LEN(r->reasoning); i++)
        if (r->reasoning[i]) json_array_append_new(why, json_string(r->reasoning[i]));
    if (r->have_suggestions) {
        json_t *steps = json_array();
        for (int i = 0; i < NUM_BUDGETS; i++)
            json_array_append_new(steps, json_pack("{s:i, s:f, s:i}", "max_num_batched_tokens", budget_candidates[i],
                                                   "mixed_step_ms", r->mixed_step_ms[i], "p90_prompt_prefill_steps",
                                                   r->p90_prefill_steps[i]));
        json_object_set_new(s, "max_num_seqs", json_integer(r->max_num_seqs));
        json_object_set_new(s, "max_num_batched_tokens", json_integer(r->max_num_batched_tokens));
        json_object_set_new(s, "max_num_batched_tokens_without_chunked_prefill",
                            json_integer(r->batched_tokens_no_chunking));
        json_object_set_new(s, "admitted_requests", json_integer(r->admitted));
        json_object_set_new(s, "admitted_mean_tokens", json_real(r->admitted_mean_tokens));
        json_object_set_new(s, "admitted_mean_blocks", json_real(r->admitted_mean_blocks));
        json_object_set_new(s, "kv_fit_requests", json_integer(r->kv_fit));
        json_object_set_new(s, "vllm_server_default_max_num_seqs", json_integer(r->server_seqs));
        json_object_set_new(s, "vllm_server_default_max_num_batched_tokens", json_integer(r->server_tokens));
        json_object_set_new(s, "decode_context_tokens", json_real(r->decode_context));
        json_object_set_new(s, "decode_step_ms", json_real(r->decode_step_ms));
        json_object_set_new(s, "step_times", steps);
        json_object_set_new(s, "kv_blocks_with_suggestions", json_integer(r->kv_blocks_suggested));
        json_object_set_new(s, "request_gpu_ms", json_real(r->request_gpu_ms));
        json_object_set_new(s, "num_replicas", json_integer(r->replicas_mean));
        json_object_set_new(s, "num_replicas_min", json_integer(r->replicas_min));
        json_object_set_new(s, "num_replicas_peak_bin", json_integer(r->replicas_peak));
    }
    json_object_set_new(s, "reasoning", why);
    json_object_set_new(root, "suggestions", s);
    return root;
}

static int write_rate_csv(const char *path, const trace_stats *a, double bin_seconds)
{
    out_atomic o;
    terr e;
    if (out_atomic_open(&o, path, "w", &e)) {
        fprintf(stderr, "--rate-csv: %s\n", e.msg);
        return 1;
    }
    fprintf(o.f, "t_s,requests,rate_per_s\n");
    for (size_t i = 0; i < a->num_bins; i++)
        fprintf(o.f, "%.9g,%ld,%.9g\n", (double)i * bin_seconds, a->bin_count[i], (double)a->bin_count[i] / bin_seconds);
    if (out_atomic_close(&o, true, &e)) {
        fprintf(stderr, "--rate-csv: %s\n", e.msg);
        return 1;
    }
    return 0;
}

/* ---- the command ---------------------------------------------------------------------------- */

/* Checks the flags and resolves the model, GPU and KV capacity (before the trace is read), as
 * `tandem sim` would with its default budgets. */
static int resolve(const stats_options *o, stats_report *r, terr *e)
{
    if (!o->file) return terr_set(e, "FILE is required (see --help)");
    if (!(o->bin_seconds >= 1e-3 && o->bin_seconds <= 1e9))
        return terr_set(e, "--bin-seconds: %g is not in [0.001, 1e9]", o->bin_seconds);
    serving_options so = {0};
    serving_options_defaults(&so);
    free(so.model), so.model = xstrdup(o->model);
    free(so.gpu), so.gpu = xstrdup(o->gpu);
    so.gpu_memory_utilization = o->gpu_memory_utilization;
    so.block_size = o->block_size;
    so.max_model_len = o->max_model_len;
    so.time_scale = o->time_scale;
    so.max_requests = o->max_requests;
    so.tensor_parallel_size = o->tensor_parallel_size;
    serving_setup su;
    int rc = serving_resolve_capacity(&so, &su, e);
    if (rc == 0 || su.gpu) { /* the capacity's own error still leaves the model and GPU */
        r->model = su.model;
        r->shard = su.shard;
        r->comm = (tp_comm){.tp = su.tensor_parallel > 1 ? su.tensor_parallel : 1, .num_layers = su.model.num_layers,
                            .hidden_size = su.model.hidden_size, .link = su.link};
        r->gpu = su.gpu;
        r->max_model_len = su.sched.max_model_len;
        r->kv = su.kv;
    }
    r->assumed_batched_tokens = (int32_t)so.max_num_batched_tokens;
    r->assumed_seqs = (int32_t)so.max_num_seqs;
    serving_options_free(&so);
    r->gpu_util = o->gpu_memory_utilization;
    r->block_size = (int32_t)o->block_size;
    r->time_scale = o->time_scale;
    r->max_model_len_given = o->max_model_len != 0;
    return rc;
}

int trace_stats_main(int argc, char **argv)
{
    stats_options o = {0};
    stats_report r = {0};
    terr e = {{0}};
    int code = 2;
    opts_defaults(stats_option_specs, &o);
    int rc = opts_parse(stats_option_specs, &o, argc, argv, stats_positional, usage, &e);
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (rc || resolve(&o, &r, &e)) {
        fprintf(stderr, "tandem trace stats: %s\n", e.msg);
        goto done;
    }

    trace_options to = {.time_scale = o.time_scale, .max_requests = o.max_requests, .skip_bad_rows = o.skip_bad_rows,
                        .request_rate = o.request_rate, .burstiness = o.burstiness, .seed = (uint64_t)o.seed};
    trace_reader *tr;
    if (!(o.request_rate >= 0) || !(o.burstiness > 0 && isfinite(o.burstiness))) {
        fprintf(stderr, "tandem trace stats: --%s: %g must be %s\n", o.request_rate >= 0 ? "burstiness" : "request-rate",
                o.request_rate >= 0 ? o.burstiness : o.request_rate, o.request_rate >= 0 ? "> 0" : ">= 0");
        goto done;
    }
    if (o.burstiness != 1.0 && !(o.request_rate > 0 && isfinite(o.request_rate))) {
        fprintf(stderr, "tandem trace stats: --burstiness %g shapes the gaps of --request-rate R: give a finite --request-rate\n",
                o.burstiness);
        goto done;
    }
    if (trace_open(&tr, o.file, &to, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        goto done;
    }
    trace_stats *a = &r.st;
    trace_stats_init(a, o.bin_seconds);
    arrival_source src = trace_source(tr);
    arrival in;
    while ((rc = src.next(src.self, &in, &e)) == 1)
        if (trace_stats_add(a, &in, &e)) {
            rc = -1;
            break;
        }
    r.file = o.file;
    r.format = trace_format_name(tr);
    r.bad_rows = trace_bad_rows(tr);
    trace_close(tr);
    if (rc < 0) {
        fprintf(stderr, "%s\n", e.msg);
        goto done;
    }
    if (a->n == 0) {
        fprintf(stderr, "%s: no requests\n", o.file);
        goto done;
    }
    trace_stats_finish(a);
    if (build_report(&r, &o, &e)) {
        fprintf(stderr, "tandem trace stats: %s\n", e.msg);
        goto done;
    }
    print_report(stdout, &r);
    code = 0;
    if (fflush(stdout)) code = 1;
    if (o.json) {
        json_t *j = report_json(&r, &o);
        out_atomic jo;
        terr je = {{0}};
        int bad = out_atomic_open(&jo, o.json, "w", &je);
        if (!bad) bad = out_atomic_close(&jo, json_dumpf(j, jo.f, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) == 0, &je) ? 1 : 0;
        if (bad) {
            fprintf(stderr, "--json: %s\n", je.msg[0] ? je.msg : "cannot write");
            code = 1;
        }
        json_decref(j);
    }
    if (o.rate_csv && write_rate_csv(o.rate_csv, a, o.bin_seconds)) code = 1;

done:
    report_free(&r);
    opts_free(stats_option_specs, &o);
    return code;
}
