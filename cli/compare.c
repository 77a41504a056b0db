/* compare.c: see compare.h. */
#include "cli/compare.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/serving.h"
#include "core/heat.h"
#include "core/metrics.h"
#include "traces/csv_reader.h"

/* ---- request-level metrics ------------------------------------------------------------------- */

#define LAT(key, label)                                                                              \
    {"mean_" key "_ms", label " mean", "ms"}, {"median_" key "_ms", label " median", "ms"},         \
        {"p90_" key "_ms", label " p90", "ms"}, {"p99_" key "_ms", label " p99", "ms"}

const compare_metric compare_metric_defs[COMPARE_NUM_METRICS] = {
    {"output_throughput", "output throughput", "tok/s"},
    LAT("ttft", "TTFT"), LAT("tpot", "TPOT"), LAT("itl", "ITL"), LAT("e2el", "E2E"), LAT("queue", "queue"),
    {"num_preemptions", "preemptions", ""},
    {"mean_batch_size", "mean batch size", "req"},
};
#undef LAT

enum { M_LATENCY = 1, LAT_TTFT = 0, LAT_TPOT, LAT_ITL, LAT_E2EL, LAT_QUEUE, NUM_LAT };

/* mean, median, p90, p99 of s into v[0..3] (NAN when s is empty: nothing to compare) */
static void four_stats(samples *s, double *v)
{
    const double q[] = {50, 90, 99};
    v[0] = s->len ? samples_mean(s) : NAN;
    for (int i = 0; i < 3; i++) v[i + 1] = s->len ? samples_percentile(s, q[i]) : NAN;
}

void compare_metrics(run_results *r, double v[COMPARE_NUM_METRICS])
{
    samples lat[NUM_LAT] = {{0}};
    for (int64_t i = 0; i < r->num_requests; i++) {
        const run_request *q = &r->req[i];
        if (!q->finished) continue;
        const double x[NUM_LAT] = {q->ttft_ms, q->tpot_ms, NAN, q->e2el_ms, q->queue_ms};
        for (int k = 0; k < NUM_LAT; k++)
            if (!isnan(x[k])) samples_add(&lat[k], x[k]);
    }
    v[0] = run_results_number(r, "output_throughput");
    for (int k = 0; k < NUM_LAT; k++) {
        double *out = &v[M_LATENCY + 4 * k];
        if (k == LAT_ITL && r->source == RUN_TANDEM) {
            for (int i = 0; i < 4; i++) out[i] = run_results_number(r, compare_metric_defs[M_LATENCY + 4 * k + i].key);
        } else {
            four_stats(k == LAT_ITL ? &r->itl_ms : &lat[k], out);
        }
        samples_free(&lat[k]);
    }
    v[M_LATENCY + 4 * NUM_LAT] = run_results_number(r, "num_preemptions");
    v[M_LATENCY + 4 * NUM_LAT + 1] = run_results_number(r, "mean_batch_size");
}

/* ---- refusing mismatched runs ---------------------------------------------------------------- */

static const char *strip_synthetic(const char *model)
{
    return strncmp(model, "synthetic:", 10) ? model : model + 10;
}

/* The trace's content hash a run recorded (config.resolved.trace_xxh3), "" when it has none
 * (a trace read from a pipe). */
static const char *trace_xxh3(const run_results *r)
{
    json_t *h = json_object_get(json_object_get(r->config, "resolved"), "trace_xxh3");
    return json_is_string(h) ? json_string_value(h) : "";
}

/* Whether two runs replayed one trace: by the files' contents when both recorded them (the
 * same trace found under another path, on another machine, is the same trace), else by the
 * paths (resolved when both exist, as given otherwise); check_config lets differing paths
 * through then, to the request-by-request check. */
static bool same_trace(const run_results *m, const run_results *s, const char *a, const char *b)
{
    const char *ha = trace_xxh3(m), *hb = trace_xxh3(s);
    if (ha[0] && hb[0]) return !strcmp(ha, hb);
    char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
    bool same = ra && rb ? !strcmp(ra, rb) : !strcmp(a, b);
    free(ra);
    free(rb);
    return same;
}

static void note(json_t *notes, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(json_t *notes, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_array_append_new(notes, json_string(buf));
}

/* Options that must agree (the trace and which of its requests) and options that may differ
 * but then are part of what the comparison measures (with the value a run that predates the
 * option had). */
static const char *const must_agree[] = {"time-scale", "max-requests"};
static const struct {
    const char *key, *absent;
} should_agree[] = {{"scheduling-policy", ""}, {"max-num-seqs", ""}, {"max-num-batched-tokens", ""},
                    {"max-model-len", ""}, {"block-size", ""}, {"enable-chunked-prefill", ""},
                    {"long-prefill-token-threshold", ""}, {"enable-prefix-caching", ""},
                    {"preemption-mode", ""}, {"num-gpu-blocks-override", ""}, {"seed", ""},
                    {"async-scheduling", "false"}};

static int check_config(const run_results *m, const run_results *s, json_t *notes, terr *e)
{
    char a[4096], b[4096];
    if (m->source == RUN_VLLM) {
        json_t *id = json_object_get(m->summary, "model_id");
        run_results_config_text(s, "model", b, sizeof b);
        note(notes, "model: \"%s\" in MEASURED (vLLM), \"%s\" in SIMULATED: not checked (names differ by convention)",
             json_is_string(id) ? json_string_value(id) : "?", b);
        return 0;
    }
    run_results_config_text(m, "trace", a, sizeof a);
    run_results_config_text(s, "trace", b, sizeof b);
    if (!same_trace(m, s, a, b)) {
        const char *ha = trace_xxh3(m), *hb = trace_xxh3(s);
        if (ha[0] && hb[0])
            return terr_set(e, "trace: \"%s\" (xxh3 %s) in MEASURED, \"%s\" (xxh3 %s) in SIMULATED: the files differ", a,
                            ha, b, hb);
        /* a run that recorded no hash (read from a pipe, or older than the hash) moved, or was
         * replayed elsewhere: its requests, matched one by one below, say whether it is the same */
        note(notes, "trace: \"%s\" in MEASURED, \"%s\" in SIMULATED, and %s recorded no content hash: the "
                    "requests were matched one by one", a, b, ha[0] ? "SIMULATED" : "MEASURED");
    }
    for (size_t i = 0; i < ARRAY_LEN(must_agree); i++) {
        run_results_config_text(m, must_agree[i], a, sizeof a);
        run_results_config_text(s, must_agree[i], b, sizeof b);
        if (strcmp(a, b)) return terr_set(e, "%s: %s in MEASURED, %s in SIMULATED", must_agree[i], a, b);
    }
    run_results_config_text(m, "model", a, sizeof a);
    run_results_config_text(s, "model", b, sizeof b);
    if (strcmp(strip_synthetic(a), strip_synthetic(b)))
        return terr_set(e, "model: \"%s\" in MEASURED, \"%s\" in SIMULATED", a, b);
    for (size_t i = 0; i < ARRAY_LEN(should_agree); i++) {
        const char *key = should_agree[i].key;
        run_results_config_text(m, key, a, sizeof a);
        run_results_config_text(s, key, b, sizeof b);
        if (!a[0]) snprintf(a, sizeof a, "%s", should_agree[i].absent);
        if (!b[0]) snprintf(b, sizeof b, "%s", should_agree[i].absent);
        if (strcmp(a, b))
            note(notes, "%s: %s in MEASURED, %s in SIMULATED: the runs schedule differently, and the errors "
                        "include that", key, a[0] ? a : "none", b[0] ? b : "none");
    }
    return 0;
}

/* True when the shorter of two completed outputs stopped at its run's max_model_len. */
static bool cut_by_max_model_len(const run_request *q, int32_t mml, const run_request *longer)
{
    return q->output_tokens < longer->output_tokens && mml > 0 &&
           (int64_t)q->prompt_tokens + q->output_tokens >= mml;
}

int compare_check(const run_results *m, const run_results *s, json_t *notes, terr *e)
{
    if (s->source != RUN_TANDEM) return terr_set(e, "SIMULATED must be a `tandem sim --out` directory, not a file");
    if (check_config(m, s, notes, e)) return -1;
    if (m->num_requests != s->num_requests)
        return terr_set(e, "%" PRId64 " requests in MEASURED, %" PRId64 " in SIMULATED", m->num_requests,
                        s->num_requests);
    int64_t only_m = 0, only_s = 0;
    for (int64_t i = 0; i < m->num_requests; i++) {
        const run_request *a = &m->req[i], *b = &s->req[i];
        if (a->prompt_tokens != b->prompt_tokens)
            return terr_set(e, "request %" PRId64 ": prompt %d in MEASURED, %d in SIMULATED", i, a->prompt_tokens,
                            b->prompt_tokens);
        if (!isnan(a->arrival_s) && fabs(a->arrival_s - b->arrival_s) > 0.5e-6)
            return terr_set(e, "request %" PRId64 ": arrival %.6f s in MEASURED, %.6f s in SIMULATED", i, a->arrival_s,
                            b->arrival_s);
        only_m += a->finished && !b->finished;
        only_s += b->finished && !a->finished;
        if (!a->finished || !b->finished || a->output_tokens == b->output_tokens) continue;
        int32_t mml_m = m->max_model_len ? m->max_model_len : s->max_model_len;
        if (cut_by_max_model_len(a, mml_m, b) || cut_by_max_model_len(b, s->max_model_len, a)) continue;
        return terr_set(e, "request %" PRId64 ": output %d in MEASURED, %d in SIMULATED%s", i, a->output_tokens,
                        b->output_tokens,
                        m->source == RUN_VLLM ? " (vllm bench serve stops at EOS unless run with --ignore-eos)" : "");
    }
    if (only_m || only_s)
        note(notes, "%" PRId64 " requests completed in MEASURED only, %" PRId64 " in SIMULATED only: each side's "
                    "latencies are over its own completed requests", only_m, only_s);
    return 0;
}

/* ---- per-step re-prediction ------------------------------------------------------------------ */

const char *const step_class_names[STEP_NUM_CLASSES] = {
    "prefill", "decode_1", "decode_2-8", "decode_9-32", "decode_33-128", "decode_129+", "mixed", "other", "all"};
const char *const step_class_labels[STEP_NUM_CLASSES] = {
    "prefill", "decode 1", "decode 2-8", "decode 9-32", "decode 33-128", "decode >128", "mixed", "other", "all"};

static step_class classify(const step_shape *sh)
{
    if (sh->num_prefill_seqs && sh->num_decode_seqs) return STEP_MIXED;
    if (sh->num_prefill_seqs) return STEP_PREFILL;
    int32_t d = sh->num_decode_seqs;
    return d == 0 ? STEP_OTHER : d == 1 ? STEP_DECODE_1 : d <= 8 ? STEP_DECODE_2_8 : d <= 32 ? STEP_DECODE_9_32
                                                    : d <= 128 ? STEP_DECODE_33_128 : STEP_DECODE_129_UP;
}

/* The simulated run's cost model, made as `tandem sim` made it: its config's model, GPU,
 * block size and max_model_len go through the serving options, so they resolve (and fail)
 * exactly as they did there. */
typedef struct predictor {
    const cost_model_ops *ops;
    void *self;
    model_config mc;   /* a step's load, for the GPU's heat */
    double peak_flops;
} predictor;

static int predictor_open(predictor *p, const run_results *s, step_errors *res, terr *e)
{
    static const char *const keys[] = {"model", "gpu", "block-size", "max-model-len"};
    serving_options o = {0};
    serving_options_defaults(&o);
    char text[4096], cm[4096], force[16];
    int rc = -1;
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        run_results_config_text(s, keys[i], text, sizeof text);
        if (!text[0]) {
            terr_set(e, "%s/summary.json: config has no \"%s\"", s->path, keys[i]);
            goto done;
        }
        if (opts_set(serving_option_specs(), &o, keys[i], text, e)) goto done;
    }
    run_results_config_text(s, "cost-model", cm, sizeof cm);
    if (!cm[0]) {
        terr_set(e, "%s/summary.json: config has no \"cost-model\": SIMULATED must be a `tandem sim` run", s->path);
        goto done;
    }
    serving_setup su = {0};
    if (serving_resolve_model_gpu(&o, &su, e) || serving_resolve_cost_model(cm, &su, e)) goto done;
    p->ops = su.cost_model;
    cost_model_opts co = cost_model_opts_default();
    co.block_size = su.sched.block_size;
    co.arg = su.cost_model_arg[0] ? su.cost_model_arg : NULL;
    run_results_config_text(s, "force-profile", force, sizeof force);
    co.force = !strcmp(force, "true");
    if (!(p->self = p->ops->create(&su.model, su.gpu, &co, e))) goto done;
    p->mc = su.model;
    p->peak_flops = su.gpu->peak_bf16_flops;
    snprintf(res->cost_model, sizeof res->cost_model, "%s", cm);
    snprintf(res->gpu, sizeof res->gpu, "%s", o.gpu);
    snprintf(res->model, sizeof res->model, "%s", o.model);
    rc = 0;
done:
    serving_options_free(&o);
    return rc;
}

enum {
    S_STEP, S_START, S_DURATION, S_PREFILL_SEQS, S_DECODE_SEQS, S_EMITTING, S_PREFILL_TOKENS, S_DECODE_TOKENS, S_PADDING,
    S_PAIRS2, S_PREFILL_KEYS, S_DECODE_KEYS, S_DECODE_KEYS_SQ, S_MAX_KEYS, S_SWAP, NUM_STEP_COLS
};
static const char *const step_cols[NUM_STEP_COLS] = {
    "step", "start_s", "duration_ms", "num_prefill_seqs", "num_decode_seqs", "num_emitting", "prefill_tokens",
    "decode_tokens", "padding_tokens", "prefill_pairs2", "prefill_keys", "decode_keys", "decode_keys_sq",
    "max_keys", "swap_blocks"};

/* The kernel columns `run --kernel-trace` adds (core/metrics.c), after step_cols when present:
 * kernel_KIND_us in kernel_kind order, then kernel_gap_us. */
#define NUM_KIND_COLS (KERNEL_NUM_KINDS + 1)
static const char *const *want_with_kinds(void)
{
    static char names[NUM_KIND_COLS][48];
    static const char *want[NUM_STEP_COLS + NUM_KIND_COLS];
    if (!want[0]) {
        for (int k = 0; k < NUM_STEP_COLS; k++) want[k] = step_cols[k];
        for (int k = 0; k < KERNEL_NUM_KINDS; k++) snprintf(names[k], sizeof names[k], "kernel_%s_us", kernel_kind_names[k]);
        snprintf(names[KERNEL_NUM_KINDS], sizeof names[0], "kernel_gap_us");
        for (int k = 0; k < NUM_KIND_COLS; k++) want[NUM_STEP_COLS + k] = names[k];
    }
    return want;
}

/* The kind a cost model's part stands for (index KERNEL_NUM_KINDS: the gap, time no kernel
 * runs), or -1 for a part that is no kernel work of the step (swaps: copies, not kernels). */
static int part_kind(const char *part)
{
    static const struct {
        const char *name;
        int kind;
    } map[] = {{"qkv", KERNEL_GEMM},           {"o_proj", KERNEL_GEMM},          {"gate_up", KERNEL_GEMM},
               {"down", KERNEL_GEMM},          {"lm_head", KERNEL_GEMM},         {"attn_prefill", KERNEL_ATTENTION},
               {"attn_decode", KERNEL_ATTENTION}, {"elementwise", KERNEL_ELEMENTWISE}, {"embed_norm", KERNEL_ELEMENTWISE},
               {"sampler", KERNEL_SAMPLING},   {"launch_bound", KERNEL_NUM_KINDS}, {"overhead", KERNEL_NUM_KINDS},
               {"swap", -1}};
    for (size_t i = 0; i < ARRAY_LEN(map); i++)
        if (!strcmp(map[i].name, part)) return map[i].kind;
    return KERNEL_OTHER;
}

/* Adds one measured step's kernel columns and its predicted parts to k (rd holds the kernel
 * columns after step_cols). */
static int add_kinds(kind_errors *k, const csv_reader *rd, const predictor *p, const step_shape *sh, terr *e)
{
    double measured[NUM_KIND_COLS];
    for (int i = 0; i < NUM_KIND_COLS; i++)
        if (csv_reader_f64(rd, NUM_STEP_COLS + i, &measured[i], e)) return -1;
    if (measured[KERNEL_FUSED] > 0) {
        k->fused_steps++;
        return 0;
    }
    cost_breakdown bd;
    p->ops->explain(p->self, sh, &bd);
    for (int i = 0; i < NUM_KIND_COLS; i++) k->measured_ms[i] += measured[i] / 1e3;
    for (int i = 0; i < bd.num_parts; i++) {
        int kind = part_kind(bd.parts[i].name);
        if (kind >= 0) k->predicted_ms[kind] += bd.parts[i].time_s * 1e3;
    }
    k->steps++;
    return 0;
}

/* Row -> step_shape: the integer sums steps.csv records (core/metrics.c writes them). */
static int read_shape(const csv_reader *rd, step_shape *sh, terr *e)
{
    int64_t v[NUM_STEP_COLS];
    for (int k = S_PREFILL_SEQS; k < NUM_STEP_COLS; k++) {
        if (csv_reader_i64(rd, k, &v[k], e)) return -1;
        if (v[k] < 0 || (v[k] > INT32_MAX && k != S_PAIRS2 && k != S_DECODE_KEYS_SQ && k != S_PREFILL_KEYS &&
                         k != S_DECODE_KEYS))
            return terr_set(e, "%s:%" PRId64 ": %s %" PRId64 " is out of range", csv_reader_path(rd),
                            csv_reader_line(rd), step_cols[k], v[k]);
    }
    *sh = (step_shape){
        .num_items = (int32_t)(v[S_PREFILL_SEQS] + v[S_DECODE_SEQS]),
        .num_prefill_seqs = (int32_t)v[S_PREFILL_SEQS],
        .num_decode_seqs = (int32_t)v[S_DECODE_SEQS],
        .num_emitting = (int32_t)v[S_EMITTING],
        .prefill_tokens = v[S_PREFILL_TOKENS],
        .decode_tokens = v[S_DECODE_TOKENS],
        .padding_tokens = v[S_PADDING],
        .prefill_pairs2 = v[S_PAIRS2],
        .prefill_keys = v[S_PREFILL_KEYS],
        .decode_keys = v[S_DECODE_KEYS],
        .decode_keys_sq = v[S_DECODE_KEYS_SQ],
        .max_keys = (int32_t)v[S_MAX_KEYS],
        .swap_blocks = (int32_t)v[S_SWAP],
    };
    return 0;
}

static void summarise(step_class_error *c, samples *abs_err, samples *signed_err, const int64_t *total_us)
{
    c->count = (int64_t)abs_err->len;
    c->total_measured_ms = (double)total_us[0] / 1e3;
    c->total_predicted_ms = (double)total_us[1] / 1e3;
    c->median_abs = c->count ? samples_percentile(abs_err, 50) : NAN;
    c->p90_abs = c->count ? samples_percentile(abs_err, 90) : NAN;
    c->median_signed = c->count ? samples_percentile(signed_err, 50) : NAN;
    c->total_bias = c->total_measured_ms > 0 ? c->total_predicted_ms / c->total_measured_ms - 1 : NAN;
}

int compare_steps(const char *steps_csv, const run_results *simulated, FILE *out, step_errors *res, terr *e)
{
    memset(res, 0, sizeof *res);
    predictor p = {0};
    csv_reader rd;
    if (predictor_open(&p, simulated, res, e)) return -1;
    /* with the kernel columns when the run has them and the cost model has parts to hold them to */
    res->kinds.have = p.ops->explain && !csv_reader_open(&rd, steps_csv, want_with_kinds(), NUM_STEP_COLS + NUM_KIND_COLS, e);
    if (!res->kinds.have && csv_reader_open(&rd, steps_csv, step_cols, NUM_STEP_COLS, e)) {
        if (strstr(e->msg, "missing column"))
            snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                     ": steps.csv written before steps recorded their shape; rerun the measurement");
        p.ops->destroy(p.self);
        return -1;
    }
    samples abs_err[STEP_NUM_CLASSES] = {{0}}, signed_err[STEP_NUM_CLASSES] = {{0}};
    int64_t total_us[STEP_NUM_CLASSES][2] = {{0}}; /* measured, predicted: exact sums */
    if (out) fprintf(out, "step,class,measured_ms,predicted_ms,rel_error\n");
    int got, rc = -1;
    heat gpu_heat = {0}; /* the measured GPU's, from the run's timeline, as the serving loop kept it */
    while ((got = csv_reader_next(&rd, e)) == 1) {
        step_shape sh;
        int64_t step;
        double ms, start_s;
        if (csv_reader_i64(&rd, S_STEP, &step, e) || csv_reader_f64(&rd, S_START, &start_s, e) ||
            csv_reader_f64(&rd, S_DURATION, &ms, e) || read_shape(&rd, &sh, e))
            goto done;
        if (!(ms >= 0 && ms < 1e12)) {
            terr_set(e, "%s:%" PRId64 ": duration_ms %g is not a duration", steps_csv, csv_reader_line(&rd), ms);
            goto done;
        }
        int64_t start_ns = llround(start_s * 1e9), ns = llround(ms * 1e6);
        sh.heat = heat_at(&gpu_heat, start_ns);
        heat_add(&gpu_heat, start_ns, ns, heat_load(heat_flops(&p.mc, &sh), ns, p.peak_flops));
        if (res->kinds.have && add_kinds(&res->kinds, &rd, &p, &sh, e)) goto done;
        /* both on steps.csv's microsecond grid, rounded as core/metrics.c rounds */
        int64_t measured_us = llround(ms * 1e3), predicted_us = llround((double)p.ops->step_ns(p.self, &sh) / 1e3);
        step_class c = classify(&sh);
        res->num_steps++;
        double rel = measured_us ? (double)(predicted_us - measured_us) / (double)measured_us : NAN;
        if (out) {
            fprintf(out, "%" PRId64 ",%s,%.3f,%.3f,", step, step_class_names[c], measured_us / 1e3, predicted_us / 1e3);
            if (!isnan(rel)) fprintf(out, "%.6g", rel);
            fputc('\n', out);
        }
        if (!measured_us) {
            res->num_zero++;
            continue;
        }
        const step_class into[] = {c, STEP_ALL};
        for (size_t k = 0; k < ARRAY_LEN(into); k++) {
            samples_add(&abs_err[into[k]], fabs(rel));
            samples_add(&signed_err[into[k]], rel);
            total_us[into[k]][0] += measured_us;
            total_us[into[k]][1] += predicted_us;
        }
    }
    if (got < 0) goto done;
    for (int c = 0; c < STEP_NUM_CLASSES; c++) summarise(&res->cls[c], &abs_err[c], &signed_err[c], total_us[c]);
    rc = 0;
done:
    for (int c = 0; c < STEP_NUM_CLASSES; c++) {
        samples_free(&abs_err[c]);
        samples_free(&signed_err[c]);
    }
    csv_reader_close(&rd);
    p.ops->destroy(p.self);
    return rc;
}
