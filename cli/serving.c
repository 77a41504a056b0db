/* serving.c: see serving.h. */
#include "cli/serving.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gsl/gsl_rng.h>

#include "cli/provenance.h"
#include "cli/version.h"
#include "core/clock.h"
#include "core/kv.h"
#include "core/serve.h"
#include "sim/profile_model.h"
#include "sim/roofline.h"
#include "sim/sim_executor.h"
#include "traces/trace.h"

/* KV blocks (GPU or host swap) a run may have: 16 Mi blocks of 16 tokens is 268 M tokens,
 * beyond any GPU; the block manager's arrays for more would be gigabytes of nothing. */
#define SERVING_MAX_BLOCKS (1 << 24)

#define O(f) offsetof(serving_options, f)

static const opt_spec serving_own_specs[] = {
    {"trace", OPT_STR, O(trace), "", "request trace (Azure 2023 / Vidur / Mooncake / tandem CSV)"},
    {"out", OPT_STR, O(out), "", "directory for requests.csv, steps.csv, summary.json"},
    {"model", OPT_STR, O(model), "llama-2-7b", "shipped model name, config.json, or checkpoint dir"},
    {"gpu", OPT_STR, O(gpu), "h200", "GPU (listed above)"},
    {"cost-model", OPT_STR, O(cost_model), "auto", "how step times are predicted (listed above)"},
    {"force-profile", OPT_BOOL, O(force_profile), "false", "use a profile:FILE measured for another model, GPU or block size (flagged in summary.json)"},
    {"scheduling-policy", OPT_STR, O(scheduling_policy), "vllm", "scheduling policy (listed above)"},
    {"max-num-seqs", OPT_I64, O(max_num_seqs), "1024", "running requests at most"},
    {"max-num-batched-tokens", OPT_I64, O(max_num_batched_tokens), "8192", "tokens per step at most"},
    {"max-model-len", OPT_I64, O(max_model_len), "0", "prompt + output at most (0: the model's max_position_embeddings)"},
    {"block-size", OPT_I64, O(block_size), KV_DEFAULT_BLOCK_SIZE_STR, "tokens per KV block"},
    {"gpu-memory-utilization", OPT_F64, O(gpu_memory_utilization), "0.9", "fraction of GPU memory for weights, activations and KV"},
    {"num-gpu-blocks-override", OPT_I64, O(num_gpu_blocks_override), "0", "use this many KV blocks (0: computed)"},
    {"enable-chunked-prefill", OPT_BOOL, O(enable_chunked_prefill), "true", "split prompts across steps"},
    {"long-prefill-token-threshold", OPT_I64, O(long_prefill_token_threshold), "0", "cap on one request's tokens per step (0: none)"},
    {"scheduler-reserve-full-isl", OPT_BOOL, O(scheduler_reserve_full_isl), "true", "admit only if the whole sequence's blocks are free (vLLM >= 0.19)"},
    {"preemption-mode", OPT_STR, O(preemption_mode), "recompute", "recompute or swap"},
    {"swap-space", OPT_F64, O(swap_space), "4", "host swap space in GiB (swap mode)"},
    {"enable-prefix-caching", OPT_BOOL, O(enable_prefix_caching), "false", "reuse cached KV blocks of equal prefixes"},
    {"async-scheduling", OPT_BOOL, O(async_scheduling), "false", "schedule the next step while this one runs (vLLM's --async-scheduling; one replica)"},
    {"goodput", OPT_STR, O(goodput), "", "SLOs for request_goodput, e.g. \"ttft:500 tpot:50 e2el:2000\" (ms)"},
    {"num-replicas", OPT_I64, O(num_replicas), "1", "model replicas behind a router, each with its own KV cache, queues and policy (sim)"},
    {"router", OPT_STR, O(router), "round-robin", "how arrivals are spread over replicas (listed above)"},
    {"router-load-cap", OPT_F64, O(router_load_cap), "1.5", "prefix-affinity skips a replica with >= F x the mean outstanding requests + 1 (0: no cap)"},
    {"tensor-parallel-size", OPT_I64, O(tensor_parallel_size), "1", "GPUs per replica, 1, 2, 4 or 8: weights and KV split, all-reduces costed (sim)"},
    {"max-concurrency", OPT_I64, O(max_concurrency), "0", "closed loop: at most N requests outstanding, later arrivals wait (vllm bench serve; 0: open loop)"},
    {"seed", OPT_I64, O(seed), "0", "seed of every random draw"},
    {"time-scale", OPT_F64, O(time_scale), "1.0", "multiply arrival times (0.5 = twice the rate)"},
    {"request-rate", OPT_RATE, O(request_rate), "0", "re-time the trace: Poisson arrivals at R req/s, seeded by --seed (inf: all at once; 0: the trace's times)"},
    {"burstiness", OPT_F64, O(burstiness), "1.0", "with --request-rate: Gamma inter-arrivals of this shape (1: Poisson; < 1 burstier), as vllm bench serve"},
    {"max-requests", OPT_I64, O(max_requests), "0", "replay only the first N requests (0: all)"},
    {"priority-classes", OPT_STR, O(priority_classes), "", "replay with priorities drawn per request: fractions F0,F1,... of classes 0,1,... (0 = most important)"},
    {"num-clients", OPT_I64, O(num_clients), "0", "replay with clients drawn uniformly from 0..N-1 (0: the trace's)"},
    {"skip-bad-rows", OPT_BOOL, O(skip_bad_rows), "false", "skip and count bad trace rows instead of failing"},
    {"requests", OPT_BOOL, O(requests), "true", "write requests.csv"},
    {"steps", OPT_BOOL, O(steps), "true", "write steps.csv"},
    {"tokens", OPT_BOOL, O(tokens), "false", "write tokens.csv: generated token ids (run only)"},
    {"max-steps", OPT_I64, O(max_steps), "0", "stop with an error after N steps (0: no limit)"},
    {"quiet", OPT_BOOL, O(quiet), "false", "print nothing on success"},
    OPT_END,
};

const opt_spec *serving_option_specs(void)
{
    static opt_spec *table;
    static size_t n;
    if (!table) {
        opts_join(&table, &n, serving_own_specs, 0, NULL);
        opts_join(&table, &n, policy_knob_specs(), offsetof(serving_options, knobs), NULL);
    }
    return table;
}

char *serving_usage(const char *head)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) abort();
    fprintf(f, "%s\n\nscheduling policies (--scheduling-policy):\n", head);
    policy_list(f);
    fprintf(f, "GPUs (--gpu):\n");
    gpu_list(f);
    fprintf(f, "cost models (--cost-model):\n");
    cost_model_list(f);
    fprintf(f, "routers (--router, with --num-replicas N > 1):\n");
    router_list(f);
    fprintf(f, "interconnects (--tensor-parallel-size > 1; published NCCL figures, not measured):\n");
    tp_interconnect_list(f);
    fclose(f);
    return text;
}

void serving_options_defaults(serving_options *o) { opts_defaults(serving_option_specs(), o); }
void serving_options_free(serving_options *o) { opts_free(serving_option_specs(), o); }

static int parse_goodput(const char *text, serving_setup *su, terr *e)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
        char *colon = strchr(tok, ':');
        double v;
        if (!colon || parse_f64(colon + 1, &v) || v <= 0)
            return terr_set(e, "--goodput: \"%s\" is not KEY:MS with KEY ttft, tpot or e2el and MS > 0", tok);
        *colon = 0;
        if (!strcmp(tok, "ttft")) su->goodput_ttft_ms = v;
        else if (!strcmp(tok, "tpot")) su->goodput_tpot_ms = v;
        else if (!strcmp(tok, "e2el")) su->goodput_e2el_ms = v;
        else return terr_set(e, "--goodput: unknown metric \"%s\" (ttft, tpot, e2el)", tok);
    }
    return 0;
}

int serving_positional(void *dst, const char *arg, terr *e)
{
    serving_options *o = dst;
    const char *colon = strchr(arg, ':');
    if (o->goodput && colon && (!strncmp(arg, "ttft:", 5) || !strncmp(arg, "tpot:", 5) || !strncmp(arg, "e2el:", 5))) {
        char *joined = xmalloc(strlen(o->goodput) + strlen(arg) + 2);
        sprintf(joined, "%s %s", o->goodput, arg);
        free(o->goodput);
        o->goodput = joined;
        return 0;
    }
    return terr_set(e, "unexpected argument \"%s\" (see --help)", arg);
}

static int check_range(const char *flag, int64_t v, int64_t lo, int64_t hi, terr *e)
{
    if (v < lo || v > hi) return terr_set(e, "--%s: %lld is out of range [%lld, %lld]", flag, (long long)v, (long long)lo, (long long)hi);
    return 0;
}

int serving_resolve_model_gpu(const serving_options *o, serving_setup *su, terr *e)
{
    const char *model = strncmp(o->model, "synthetic:", 10) == 0 ? o->model + 10 : o->model;
    if (model_config_load(&su->model, model, e)) return -1;
    if (!(su->gpu = gpu_find(o->gpu))) return terr_unknown(e, "gpu", "GPU", o->gpu, gpu_list);
    if (check_range("block-size", o->block_size, 1, 1024, e) ||
        check_range("max-model-len", o->max_model_len, 0, 1 << 24, e) ||
        check_range("max-requests", o->max_requests, 0, INT64_MAX, e))
        return -1;
    if (!(o->gpu_memory_utilization > 0 && o->gpu_memory_utilization <= 1))
        return terr_set(e, "--gpu-memory-utilization: %g is not in (0, 1]", o->gpu_memory_utilization);
    if (!(o->time_scale > 0 && o->time_scale <= TRACE_MAX_TIME_SCALE))
        return terr_set(e, "--time-scale: %g is not in (0, %g]", o->time_scale, TRACE_MAX_TIME_SCALE);
    if (check_range("tensor-parallel-size", o->tensor_parallel_size, 1, 8, e) ||
        tp_shard_model(&su->model, (int32_t)o->tensor_parallel_size, &su->shard, e))
        return -1;
    su->tensor_parallel = (int32_t)o->tensor_parallel_size;
    if (su->tensor_parallel > 1 && !(su->link = tp_interconnect_for(su->gpu)))
        return terr_set(e, "--tensor-parallel-size: no interconnect figures for --gpu %s", su->gpu->name);
    su->sched.block_size = (int32_t)o->block_size;
    su->sched.max_model_len = o->max_model_len ? (int32_t)o->max_model_len : su->model.max_position_embeddings;
    if (su->sched.max_model_len > su->model.max_position_embeddings)
        return terr_set(e, "--max-model-len: %d is greater than the model's max_position_embeddings (%d)",
                        su->sched.max_model_len, su->model.max_position_embeddings);
    return 0;
}

/* A KV capacity error: when the weights alone fill the GPU, the way out is more GPUs per replica. */
static int tp_hint(const serving_setup *su, terr *e)
{
    if (su->kv.weight_bytes + su->kv.activation_bytes >= su->kv.usable_bytes && su->tensor_parallel < 8) {
        size_t n = strlen(e->msg);
        snprintf(e->msg + n, sizeof e->msg - n, "; or split the model over GPUs with --tensor-parallel-size %d",
                 su->tensor_parallel * 2);
    }
    return -1;
}

int serving_resolve_capacity(const serving_options *o, serving_setup *su, terr *e)
{
    *su = (serving_setup){0};
    if (serving_resolve_model_gpu(o, su, e) ||
        check_range("max-num-seqs", o->max_num_seqs, 1, 1 << 20, e) ||
        check_range("max-num-batched-tokens", o->max_num_batched_tokens, 1, 1 << 24, e))
        return -1;
    if (kv_capacity_compute(&su->kv, &su->shard, su->gpu, o->gpu_memory_utilization, su->sched.block_size,
                            (int32_t)o->max_num_batched_tokens, (int32_t)o->max_num_seqs, su->sched.max_model_len, e))
        return tp_hint(su, e);
    return 0;
}

int serving_resolve_cost_model(const char *spec, serving_setup *su, terr *e)
{
    su->cost_model_arg[0] = 0;
    if (!strcmp(spec, "auto")) {
        /* a shipped profile times one whole model on one GPU: never a TP shard */
        const char *shipped = profile_shipped_for(&su->shard, su->gpu, su->sched.block_size);
        su->cost_model = shipped ? &profile_cost_model : &roofline_cost_model;
        if (shipped) snprintf(su->cost_model_arg, sizeof su->cost_model_arg, "%s", shipped);
        return 0;
    }
    if (!(su->cost_model = cost_model_find(spec)))
        return terr_unknown(e, "cost-model", "cost model", spec, cost_model_list);
    const char *arg = cost_model_arg(spec);
    if (arg) snprintf(su->cost_model_arg, sizeof su->cost_model_arg, "%s", arg);
    return 0;
}

int serving_resolve(const serving_options *o, serving_setup *su, terr *e)
{
    *su = (serving_setup){0};
    if (!o->trace) return terr_set(e, "--trace is required (see --help)");
    if (serving_resolve_model_gpu(o, su, e)) return -1;
    if (serving_resolve_cost_model(o->cost_model, su, e)) return -1;
    if (!(su->policy = policy_find(o->scheduling_policy)))
        return terr_unknown(e, "scheduling-policy", "policy", o->scheduling_policy, policy_list);
    if (!(su->router = router_find(o->router))) return terr_unknown(e, "router", "router", o->router, router_list);
    if (check_range("num-replicas", o->num_replicas, 1, 4096, e) ||
        check_range("max-concurrency", o->max_concurrency, 0, 1 << 30, e))
        return -1;
    if (o->async_scheduling && o->num_replicas > 1)
        return terr_set(e, "--async-scheduling: one replica only (--num-replicas %lld)", (long long)o->num_replicas);
    if (!(o->router_load_cap >= 0 && isfinite(o->router_load_cap)))
        return terr_set(e, "--router-load-cap: %g must be >= 0", o->router_load_cap);
    if (check_range("max-num-seqs", o->max_num_seqs, 1, 1 << 20, e) ||
        check_range("max-num-batched-tokens", o->max_num_batched_tokens, 1, 1 << 24, e) ||
        check_range("num-gpu-blocks-override", o->num_gpu_blocks_override, 0, SERVING_MAX_BLOCKS, e) ||
        check_range("long-prefill-token-threshold", o->long_prefill_token_threshold, 0, 1 << 24, e) ||
        policy_knobs_check(&o->knobs, e) ||
        check_range("max-steps", o->max_steps, 0, INT64_MAX, e) ||
        check_range("seed", o->seed, 0, INT64_MAX, e))
        return -1;
    if (!(o->swap_space >= 0 && o->swap_space <= 1 << 20))
        return terr_set(e, "--swap-space: %g GiB is not in [0, %d]", o->swap_space, 1 << 20);
    su->policy_knobs = policy_knobs_of(su->policy, &o->knobs);

    sched_config *c = &su->sched;
    c->max_num_seqs = (int32_t)o->max_num_seqs;
    c->max_num_batched_tokens = (int32_t)o->max_num_batched_tokens;
    c->enable_chunked_prefill = o->enable_chunked_prefill;
    c->long_prefill_token_threshold = (int32_t)o->long_prefill_token_threshold;
    c->reserve_full_isl = o->scheduler_reserve_full_isl;
    c->enable_prefix_caching = o->enable_prefix_caching;
    if (!strcmp(o->preemption_mode, "recompute")) c->preemption_mode = PREEMPT_RECOMPUTE;
    else if (!strcmp(o->preemption_mode, "swap")) c->preemption_mode = PREEMPT_SWAP;
    else return terr_set(e, "--preemption-mode: \"%s\" is not recompute or swap", o->preemption_mode);

    /* vLLM's own start-up checks */
    if (c->max_num_batched_tokens < c->max_num_seqs)
        return terr_set(e, "--max-num-batched-tokens (%d) must be >= --max-num-seqs (%d)",
                        c->max_num_batched_tokens, c->max_num_seqs);
    if (!c->enable_chunked_prefill && c->max_num_batched_tokens < c->max_model_len)
        return terr_set(e, "--max-num-batched-tokens (%d) is smaller than --max-model-len (%d) with chunked "
                        "prefill off: prompts longer than the budget could never run. Raise "
                        "--max-num-batched-tokens, lower --max-model-len or --enable-chunked-prefill",
                        c->max_num_batched_tokens, c->max_model_len);

    if (kv_capacity_compute(&su->kv, &su->shard, su->gpu, o->gpu_memory_utilization, c->block_size,
                            c->max_num_batched_tokens, c->max_num_seqs, c->max_model_len,
                            o->num_gpu_blocks_override ? NULL : e) &&
        !o->num_gpu_blocks_override)
        return tp_hint(su, e);
    if (o->num_gpu_blocks_override) su->kv.num_blocks = o->num_gpu_blocks_override;
    if (su->kv.num_blocks > INT32_MAX) su->kv.num_blocks = INT32_MAX;
    double swap_blocks = o->swap_space * 1073741824.0 / (double)su->kv.bytes_per_block;
    if (c->preemption_mode == PREEMPT_SWAP && swap_blocks > SERVING_MAX_BLOCKS)
        return terr_set(e, "--swap-space: %g GiB is %.0f host blocks of %lld bytes; at most %d", o->swap_space, swap_blocks,
                        (long long)su->kv.bytes_per_block, SERVING_MAX_BLOCKS);
    su->num_host_blocks = c->preemption_mode == PREEMPT_SWAP ? (int32_t)swap_blocks : 0;
    if (o->goodput && parse_goodput(o->goodput, su, e)) return -1;
    if (check_range("num-clients", o->num_clients, 0, 1 << 24, e)) return -1;
    if (!(o->request_rate >= 0)) return terr_set(e, "--request-rate: %g must be >= 0 (0: the trace's own times)", o->request_rate);
    if (!(o->burstiness > 0 && isfinite(o->burstiness))) return terr_set(e, "--burstiness: %g must be > 0", o->burstiness);
    if (o->burstiness != 1.0 && !(o->request_rate > 0 && isfinite(o->request_rate)))
        return terr_set(e, "--burstiness %g shapes the gaps of --request-rate R: give a finite --request-rate", o->burstiness);
    if (o->priority_classes) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", o->priority_classes);
        double sum = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            double f;
            if (su->num_priority_classes == (int)ARRAY_LEN(su->priority_cdf))
                return terr_set(e, "--priority-classes: at most %d classes", (int)ARRAY_LEN(su->priority_cdf));
            if (parse_f64(tok, &f) || f < 0) return terr_set(e, "--priority-classes: \"%s\" is not a fraction", tok);
            sum += f;
            su->priority_cdf[su->num_priority_classes++] = sum;
        }
        if (su->num_priority_classes == 0 || sum < 0.999999 || sum > 1.000001)
            return terr_set(e, "--priority-classes: fractions must sum to 1 (got %g)", sum);
    }
    return 0;
}

/* Replays a trace with priorities and/or clients drawn per request from a seeded generator
 * (its own stream, so adding classes does not change the policy's random draws). */
typedef struct relabel {
    arrival_source inner;
    const serving_setup *su;
    int64_t num_clients;
    gsl_rng *rng;
} relabel;

static int relabel_next(void *self, arrival *a, terr *e)
{
    relabel *rl = self;
    int r = rl->inner.next(rl->inner.self, a, e);
    if (r != 1) return r;
    if (rl->su->num_priority_classes) {
        double u = gsl_rng_uniform(rl->rng);
        int c = 0;
        while (c + 1 < rl->su->num_priority_classes && u >= rl->su->priority_cdf[c]) c++;
        a->priority = c;
    }
    if (rl->num_clients) a->client_id = (int32_t)gsl_rng_uniform_int(rl->rng, (unsigned long)rl->num_clients);
    return 1;
}

/* The trace's content hash (xxh3, hex) into hex when it is a regular file, else "": `tandem
 * compare` holds two runs to one trace by their files' contents, not by their paths (a run
 * measured on a GPU machine names the trace as it was found there). */
static void trace_hash(const char *path, char hex[17])
{
    struct stat st;
    terr e;
    if (stat(path, &st) || !S_ISREG(st.st_mode) || provenance_hash_file(path, hex, &e)) hex[0] = 0;
}

static json_t *config_json(const serving_options *o, const serving_setup *su, const char *format_name,
                           const char *trace_xxh3)
{
    json_t *cfg = opts_to_json(serving_option_specs(), o);
    json_t *r = json_object();
    json_object_set_new(r, "max_model_len", json_integer(su->sched.max_model_len));
    json_object_set_new(r, "num_gpu_blocks", json_integer(su->kv.num_blocks));
    json_object_set_new(r, "kv_cache_tokens", json_integer(su->kv.num_blocks * su->sched.block_size));
    json_object_set_new(r, "kv_bytes_per_block", json_integer(su->kv.bytes_per_block));
    json_object_set_new(r, "weight_bytes", json_integer(su->kv.weight_bytes));
    json_object_set_new(r, "activation_reserve_bytes", json_integer(su->kv.activation_bytes));
    json_object_set_new(r, "num_host_blocks", json_integer(su->num_host_blocks));
    json_object_set_new(r, "model_params", json_integer(model_num_params(&su->model)));
    if (o->num_replicas > 1 || su->tensor_parallel > 1) {
        json_object_set_new(r, "gpus_per_replica", json_integer(su->tensor_parallel));
        json_object_set_new(r, "num_gpus", json_integer(o->num_replicas * su->tensor_parallel));
    }
    json_object_set_new(r, "gpu", json_string(su->gpu->description));
    json_object_set_new(r, "trace_format", json_string(format_name));
    if (trace_xxh3[0]) json_object_set_new(r, "trace_xxh3", json_string(trace_xxh3));
    json_object_set_new(cfg, "resolved", r);
    return cfg;
}

void serving_trace_options(const serving_options *o, trace_options *to)
{
    *to = (trace_options){.time_scale = o->time_scale, .max_requests = o->max_requests, .skip_bad_rows = o->skip_bad_rows,
                          .request_rate = o->request_rate, .burstiness = o->burstiness, .seed = (uint64_t)o->seed};
}

static void warn(serving_warnings *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(serving_warnings *w, const char *fmt, ...)
{
    if (w->n == SERVING_MAX_WARNINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg[w->n++], sizeof w->msg[0], fmt, ap);
    va_end(ap);
}

/* Whether option `name` differs from its default (knobs included). */
static bool changed(const serving_options *o, const char *name)
{
    static serving_options def;
    static json_t *def_json;
    if (!def_json) {
        serving_options_defaults(&def);
        def_json = opts_to_json(serving_option_specs(), &def);
    }
    json_t *cur = opts_to_json(serving_option_specs(), o);
    bool diff = !json_equal(json_object_get(cur, name), json_object_get(def_json, name));
    json_decref(cur);
    return diff;
}

/* `draws_seeded` is false for an executor with randomness of its own (the engine's sampling),
 * where the seed always matters. */
static void collect_warnings(const serving_options *o, const serving_setup *su, const trace_reader *tr,
                             bool draws_seeded, serving_warnings *w)
{
    w->n = 0;
    const char *pol = su->policy->name;
    if (!strcmp(pol, "priority") && !trace_has_priority(tr) && !su->num_priority_classes)
        warn(w, "--scheduling-policy priority: the trace has no priority column and --priority-classes is not "
                "given, so every request is class 0 and the run is the same as vllm's");
    if (!strcmp(pol, "fair") && !trace_has_client(tr) && !o->num_clients)
        warn(w, "--scheduling-policy fair: the trace has no client column and --num-clients is not given, so "
                "there is one client and fair share has nothing to share");
    const opt_spec *lpe = opts_find(serving_option_specs(), "length-predictor-error");
    bool predictor_noise = lpe && (!strcmp(pol, "sjf") || !strcmp(pol, "srpt")) &&
                           *(const double *)((const char *)o + lpe->offset) > 0;
    bool random = predictor_noise || su->num_priority_classes || o->num_clients ||
                  (o->request_rate > 0 && isfinite(o->request_rate));
    if (draws_seeded && o->seed != 0 && !random)
        warn(w, "--seed changes nothing here: this replay draws no random numbers (they come only from "
                "--request-rate, --priority-classes, --num-clients and sjf/srpt's --length-predictor-error)");
    /* another policy's knobs */
    for (const opt_spec *k = policy_knob_specs(); k->name; k++) {
        bool mine = false;
        for (const opt_spec *m = su->policy->knobs; m && m->name; m++) mine |= !strcmp(m->name, k->name);
        if (!mine && changed(o, k->name))
            warn(w, "--%s is a knob of another policy: --scheduling-policy %s does not read it", k->name, pol);
    }
    const opt_spec *cs = opts_find(serving_option_specs(), "chunk-size");
    if (!strcmp(pol, "sarathi") && cs && changed(o, "max-num-batched-tokens") &&
        o->max_num_batched_tokens >= *(const int64_t *)((const char *)o + cs->offset))
        warn(w, "--max-num-batched-tokens %lld: sarathi's step budget is --chunk-size (%lld), which it only caps "
                "when smaller; sweep --chunk-size instead",
             (long long)o->max_num_batched_tokens, (long long)*(const int64_t *)((const char *)o + cs->offset));
    if (o->request_rate > 0 && changed(o, "time-scale"))
        warn(w, "--time-scale %g: --request-rate re-times the trace, so its own times (and their scale) are not used",
             o->time_scale);
    if (su->sched.preemption_mode != PREEMPT_SWAP && changed(o, "swap-space"))
        warn(w, "--swap-space: only --preemption-mode swap uses host memory");
}

int serving_collect_warnings(const serving_options *o, const serving_setup *su, bool executor_draws,
                             serving_warnings *w, terr *e)
{
    trace_options to;
    serving_trace_options(o, &to);
    trace_reader *tr;
    if (trace_open(&tr, o->trace, &to, e)) return -1;
    collect_warnings(o, su, tr, !executor_draws, w);
    trace_close(tr);
    return 0;
}

void serving_print_warnings(const serving_warnings *w, const char *cmd)
{
    for (int i = 0; i < w->n; i++) fprintf(stderr, "tandem %s: warning: %s\n", cmd, w->msg[i]);
}

void serving_print_header(const serving_options *o, const serving_setup *su, const char *backend, FILE *f)
{
    fprintf(f, "tandem %s: %s on %s, policy %s, trace %s", tandem_version, o->model,
            backend && !strcmp(backend, "cpu") ? "the CPU" : su->gpu->name, su->policy->name, o->trace);
    if (o->request_rate > 0) {
        if (isinf(o->request_rate)) fprintf(f, " (all at once)");
        else if (o->burstiness != 1.0) fprintf(f, " re-timed at %g req/s, burstiness %g", o->request_rate, o->burstiness);
        else fprintf(f, " re-timed at %g req/s (Poisson)", o->request_rate);
    } else if (o->time_scale != 1.0) fprintf(f, " x%g time scale", o->time_scale);
    if (o->max_requests) fprintf(f, ", first %lld requests", (long long)o->max_requests);
    fprintf(f, "\n  max-num-seqs %lld, max-num-batched-tokens %lld, max-model-len %d, %lld KV blocks of %d tokens, "
               "%s preemption%s, seed %lld, ",
            (long long)o->max_num_seqs, (long long)o->max_num_batched_tokens, su->sched.max_model_len,
            (long long)su->kv.num_blocks, su->sched.block_size, o->preemption_mode,
            o->enable_prefix_caching ? ", prefix caching" : "", (long long)o->seed);
    if (backend) fprintf(f, "%s engine\n", backend);
    else fprintf(f, "cost model %s%s%s\n", su->cost_model->name, su->cost_model_arg[0] ? ":" : "", su->cost_model_arg);
}

void serving_print_goodput(const serving_setup *su, const metrics_summary *s, FILE *f)
{
    if (isnan(s->request_goodput)) return;
    char slo[128] = "";
    size_t k = 0;
    if (su->goodput_ttft_ms > 0) k += (size_t)snprintf(slo + k, sizeof slo - k, " TTFT <= %g ms", su->goodput_ttft_ms);
    if (su->goodput_tpot_ms > 0) k += (size_t)snprintf(slo + k, sizeof slo - k, " TPOT <= %g ms", su->goodput_tpot_ms);
    if (su->goodput_e2el_ms > 0) snprintf(slo + k, sizeof slo - k, " E2EL <= %g ms", su->goodput_e2el_ms);
    fprintf(f, "%-40s %-10.2f (%.1f%% of %lld requests meet%s)\n", "Request goodput (req/s):", s->request_goodput,
            s->num_requests ? 100.0 * (double)s->num_good / (double)s->num_requests : 0.0, (long long)s->num_requests, slo);
}

/* The progress line of a run on a terminal: requests ended of the trace's total (counted by a
 * first pass over the file), their rate in wall-clock time, and the time left at that rate. */
typedef struct progress {
    metrics *m;
    int64_t total;
    double t0, last; /* wall seconds */
} progress;

static double wall_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void progress_show(progress *p, double now)
{
    int64_t done = metrics_requests_ended(p->m);
    double el = now - p->t0, rate = el > 0 ? (double)done / el : 0, left = rate > 0 ? (double)(p->total - done) / rate : 0;
    fprintf(stderr, "\rrun: %lld/%lld requests done, %.2f req/s, %dm%02ds left   ", (long long)done, (long long)p->total,
            rate, (int)(left / 60), (int)left % 60);
    fflush(stderr);
    p->last = now;
}

static void progress_start(progress *p, const serving_options *o)
{
    trace_options to;
    serving_trace_options(o, &to);
    to.skip_bad_rows = true; /* a count only: the replay reports bad rows */
    trace_reader *tr;
    terr e;
    if (trace_open(&tr, o->trace, &to, &e) == 0) {
        arrival_source s = trace_source(tr);
        arrival a;
        while (s.next(s.self, &a, &e) == 1) p->total++;
        trace_close(tr);
    }
    p->t0 = wall_s();
    progress_show(p, p->t0);
}

static void progress_step(void *ud, int64_t step, const batch *b, int64_t start_ns, int64_t duration_ns)
{
    progress *p = ud;
    double now = wall_s();
    if (now - p->last >= 0.5) progress_show(p, now);
}

static void progress_end(progress *p)
{
    progress_show(p, wall_s());
    fputc('\n', stderr);
}

static cost_model_opts cost_model_opts_of(const serving_options *o, const serving_setup *su)
{
    cost_model_opts cmo = cost_model_opts_default();
    cmo.block_size = su->sched.block_size;
    cmo.arg = su->cost_model_arg[0] ? su->cost_model_arg : NULL;
    cmo.force = o->force_profile;
    return cmo;
}

int serving_check_cost_model(const serving_options *o, const serving_setup *su, terr *e)
{
    cost_model_opts cmo = cost_model_opts_of(o, su);
    void *m = su->cost_model->create(&su->shard, su->gpu, &cmo, e);
    if (!m) return -1;
    su->cost_model->destroy(m);
    return 0;
}

int serving_simulate(const serving_options *o, const serving_setup *su, metrics_summary *out, terr *e)
{
    executor ex;
    cost_model_opts cmo = cost_model_opts_of(o, su);
    if (sim_executor_create(&ex, su->cost_model, &su->shard, su->gpu, &cmo, e)) return 2;
    if (su->tensor_parallel > 1) {
        tp_comm c = {.tp = su->tensor_parallel, .num_layers = su->model.num_layers,
                     .hidden_size = su->model.hidden_size, .link = su->link};
        sim_executor_set_tp(&ex, &c);
    }
    tclock clock;
    tclock_init_sim(&clock);
    int code = serving_replay(o, su, ex, &clock, out, e);
    ex.ops->destroy(ex.self);
    return code;
}

int serving_replay(const serving_options *o, const serving_setup *su, executor ex, tclock *clock,
                   metrics_summary *out, terr *e)
{
    if (clock->real_time) {
        const char *flag = o->num_replicas > 1 ? "num-replicas"
                           : o->tensor_parallel_size > 1 ? "tensor-parallel-size" : NULL;
        if (flag) return terr_set(e, "--%s: the engine serves one replica on one GPU; this is a `tandem sim` option", flag), 2;
    }
    trace_options to;
    serving_trace_options(o, &to);
    trace_reader *tr;
    if (trace_open(&tr, o->trace, &to, e)) return 2;
    char trace_xxh3[17];
    trace_hash(o->trace, trace_xxh3);
    serving_warnings warn;
    collect_warnings(o, su, tr, !ex.ops->measures_host, &warn);
    json_t *extra = json_object();
    json_object_set_new(extra, "tandem", provenance_json());
    json_t *wl = json_array();
    for (int i = 0; i < warn.n; i++) json_array_append_new(wl, json_string(warn.msg[i]));
    json_object_set_new(extra, "warnings", wl);
    /* The run's folder is written as OUT.tmp-PID and put in place of OUT when complete: a run
     * that fails or is killed leaves OUT as it was. A second run into an OUT that one is writing
     * is refused: OUT.lock is held (flock, so a killed run holds nothing) until the end. */
    char final_dir[4096] = "", tmp_dir[4200] = "", lock_path[4200] = "";
    int lock_fd = -1;
    if (o->out) {
        snprintf(final_dir, sizeof final_dir, "%s", o->out);
        for (size_t n = strlen(final_dir); n > 1 && final_dir[n - 1] == '/';) final_dir[--n] = 0;
        snprintf(tmp_dir, sizeof tmp_dir, "%s.tmp-%d", final_dir, (int)getpid());
        snprintf(lock_path, sizeof lock_path, "%s.lock", final_dir);
        char parent[4096];
        snprintf(parent, sizeof parent, "%s", final_dir);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) *slash = 0, mkdir_p(parent);
        if ((lock_fd = open(lock_path, O_CREAT | O_RDWR | O_CLOEXEC, 0644)) < 0) {
            trace_close(tr);
            return terr_set(e, "--out %s: cannot create %s: %s", o->out, lock_path, strerror(errno)), 1;
        }
        if (flock(lock_fd, LOCK_EX | LOCK_NB)) {
            close(lock_fd);
            trace_close(tr);
            return terr_set(e, "--out %s: another run is writing it (it holds %s)", o->out, lock_path), 1;
        }
        remove_tree(tmp_dir);
    }
    metrics_options mo = {
        .out_dir = o->out ? tmp_dir : NULL,
        .goodput_ttft_ms = su->goodput_ttft_ms,
        .goodput_tpot_ms = su->goodput_tpot_ms,
        .goodput_e2el_ms = su->goodput_e2el_ms,
        .write_requests = o->requests,
        .write_steps = o->steps,
        .write_host_time = ex.ops->measures_host,
        .host_overlaps_gpu = o->async_scheduling,
        .write_kernel_time = ex.ops->measures_kernels && ex.ops->measures_kernels(ex.self),
        .write_tokens = o->tokens,
        /* a replica's peaks: TP GPUs side by side */
        .peak_flops = su->gpu->peak_bf16_flops * su->tensor_parallel,
        .peak_bytes_s = su->gpu->peak_mem_bw_bytes_s * su->tensor_parallel,
        .num_replicas = (int32_t)o->num_replicas,
        .summary_extra = extra,
    };
    metrics *m;
    if (metrics_open(&m, &mo, e)) {
        json_decref(extra);
        trace_close(tr);
        if (o->out) remove_tree(tmp_dir), unlink(lock_path), close(lock_fd);
        return 1;
    }
    serve_config sc = {
        .sched = su->sched,
        .policy = su->policy,
        .policy_knobs = su->policy_knobs,
        .num_gpu_blocks = (int32_t)su->kv.num_blocks,
        .num_host_blocks = su->num_host_blocks,
        .seed = (uint64_t)o->seed,
        .max_steps = o->max_steps,
        .model = &su->model,
        .peak_flops = mo.peak_flops,
        .num_replicas = (int32_t)o->num_replicas,
        .router = su->router,
        .router_load_cap = o->router_load_cap,
        .max_concurrency = o->max_concurrency,
        .cluster_loop = o->cluster_loop,
        .async_scheduling = o->async_scheduling,
    };
    serve_result res;
    int code = 0;
    relabel rl = {.inner = trace_source(tr), .su = su, .num_clients = o->num_clients};
    arrival_source src = rl.inner;
    if (su->num_priority_classes || o->num_clients) {
        rl.rng = gsl_rng_alloc(gsl_rng_mt19937);
        gsl_rng_set(rl.rng, (unsigned long)o->seed ^ 0x5eed0fc1a55e5ULL);
        src = (arrival_source){relabel_next, &rl};
    }
    progress pr = {.m = m};
    serve_hooks hooks = {.on_step = progress_step, .ud = &pr};
    if (o->progress) progress_start(&pr, o);
    if (serve_run(&sc, src, ex, clock, m, o->progress ? &hooks : NULL, &res, e)) code = 2;
    if (o->progress) progress_end(&pr);
    json_t *report = !code && ex.ops->report ? ex.ops->report(ex.self) : NULL;
    if (rl.rng) gsl_rng_free(rl.rng);
    if (!code) {
        metrics_add_bad_rows(m, trace_bad_rows(tr));
        json_t *cfg = config_json(o, su, trace_format_name(tr), trace_xxh3);
        if (trace_num_client_names(tr)) { /* requests.csv's client ids, by name */
            json_t *names = json_array();
            for (int64_t i = 0; i < trace_num_client_names(tr); i++)
                json_array_append_new(names, json_string(trace_client_name(tr, i)));
            json_object_set_new(json_object_get(cfg, "resolved"), "client_names", names);
        }
        if (report) json_object_set_new(cfg, "executor", report);
        if (metrics_finish(m, cfg, out, e)) code = 1;
    }
    metrics_free(m);
    json_decref(extra);
    trace_close(tr);
    if (o->out && !code && publish_dir(tmp_dir, final_dir, e)) code = 1;
    if (o->out && code) remove_tree(tmp_dir);
    if (o->out) unlink(lock_path), close(lock_fd);
    return code;
}
