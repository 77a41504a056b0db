/*
 * metrics.c: see metrics.h.
 *
 * CSV rows are formatted by hand from integer nanoseconds (fixed point: seconds with 6
 * decimals, milliseconds with 3), which is exact, locale-free and several times faster than
 * printf: a million-request replay writes millions of rows.
 */
#include "metrics.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

/* ---- a small buffered writer ---- */

typedef struct obuf {
    FILE *f;
    const char *name; /* the file's name in the output folder, for messages */
    char buf[1 << 16];
    size_t n;
} obuf;

static void ob_flush(obuf *o)
{
    if (o->f && o->n) fwrite(o->buf, 1, o->n, o->f);
    o->n = 0;
}

static void ob_reserve(obuf *o, size_t k)
{
    if (o->n + k > sizeof o->buf) ob_flush(o);
}

static void ob_str(obuf *o, const char *s)
{
    size_t k = strlen(s);
    ob_reserve(o, k);
    memcpy(o->buf + o->n, s, k);
    o->n += k;
}

static void ob_char(obuf *o, char c)
{
    ob_reserve(o, 1);
    o->buf[o->n++] = c;
}

/* "00" .. "99": two digits per division (steps.csv is millions of rows of integers) */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Writes v / 10^decimals with exactly `decimals` digits after the point (decimals <= 12; 0: an
 * integer, no point). */
static void ob_fixed(obuf *o, int64_t v, int decimals)
{
    char tmp[40];
    int k = 40;
    uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
    /* digits from the right, two at a time, until the point is passed and u is spent */
    while (u >= 100 || 40 - k < decimals) {
        const char *d = digit_pairs + 2 * (u % 100);
        u /= 100;
        tmp[--k] = d[1];
        tmp[--k] = d[0];
    }
    if (u >= 10) {
        tmp[--k] = digit_pairs[2 * u + 1];
        tmp[--k] = digit_pairs[2 * u];
    } else tmp[--k] = (char)('0' + u);
    /* drop leading zeros of the integer part (keep one) */
    int int_digits = 40 - k - decimals;
    while (int_digits > 1 && tmp[k] == '0') k++, int_digits--;
    ob_reserve(o, (size_t)(40 - k) + 2);
    if (v < 0) o->buf[o->n++] = '-';
    memcpy(o->buf + o->n, tmp + k, (size_t)int_digits);
    o->n += (size_t)int_digits;
    if (decimals == 0) return;
    o->buf[o->n++] = '.';
    memcpy(o->buf + o->n, tmp + 40 - decimals, (size_t)decimals);
    o->n += (size_t)decimals;
}

static void ob_i64(obuf *o, int64_t v) { ob_fixed(o, v, 0); }

/* ns -> microseconds, rounded half away from zero. */
static int64_t ns_to_us(double ns) { return (int64_t)llround(ns / 1000.0); }

/* Time in seconds (6 decimals) and durations in ms (3 decimals) share the microsecond grid. */
static void ob_seconds(obuf *o, int64_t ns) { ob_fixed(o, ns_to_us((double)ns), 6); }
static void ob_ms(obuf *o, double ns) { ob_fixed(o, ns_to_us(ns), 3); }

/* ---- the metrics object ---- */

const char *const kernel_kind_names[KERNEL_NUM_KINDS] = {"gemm",        "attention", "fused",
                                                        "elementwise", "sampling",  "other"};

/* A step whose row waits for its kernel time (write_kernel_time). */
typedef struct held_step {
    size_t text_end;     /* its row so far: held_text from the previous one's end to here */
    int64_t duration_ns;
    int32_t replica;
} held_step;

/* One replica's running sums (clusters only). */
typedef struct replica_acc {
    replica_summary s;
    double busy_ns, kv_usage_time_sum;
    int64_t admitted_prompt_tokens, cached_prompt_tokens;
} replica_acc;

struct metrics {
    replica_acc *reps; /* (opt.num_replicas) when > 1, else NULL */
    metrics_options opt;
    obuf *req_out, *step_out, *tok_out;
    preempt_log preempts;            /* preemptions.csv, beside steps.csv */
    char summary_path[4096];
    qhist ttft, tpot, e2el, queue;   /* ms, on a microsecond grid, one sample per finished request */
    qhist itl;                       /* ms, on a microsecond grid */
    qhist host_us, sched_us;         /* per step, on a 0.1 us grid (write_host_time) */
    qhist kernel_us;                 /* per step, on a 0.1 us grid (write_kernel_time) */
    qhist kernel_busy;               /* per step, a fraction on a 1e-4 grid (write_kernel_time) */
    double kernel_busy_ns, kernel_step_ns; /* summed over steps (write_kernel_time) */
    double kernel_kind_ns[KERNEL_NUM_KINDS], kernel_gap_ns; /* summed over steps (write_kernel_time) */
    /* Steps waiting for their kernel time, oldest first: [held_head, n_held). The kernel trace
     * settles steps some steps late (engine/kernel_trace.h), so their rows wait here. */
    held_step *held;                       /* (cap_held) */
    size_t held_head, n_held, cap_held;
    char *held_text;                       /* (cap_text) the rows before their kernel columns */
    size_t held_text_start, held_text_len, cap_text;
    obuf *row;                             /* one row, formatted before it joins held_text */
    qruns step_itl;                        /* gaps of the current step, ns */
    metrics_summary s;
    int64_t first_arrival_ns, last_end_ns;
    int64_t admitted_prompt_tokens, cached_prompt_tokens;
    double batch_size_sum, kv_usage_time_sum, kv_token_usage_time_sum, busy_ns;
};

static obuf *open_csv(const char *dir, const char *name, const char *header, terr *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        terr_set(e, "%s: cannot create: %s", path, strerror(errno));
        return NULL;
    }
    obuf *o = xcalloc(1, sizeof *o);
    o->f = f;
    o->name = name;
    ob_str(o, header);
    return o;
}

int metrics_open(metrics **out, const metrics_options *opt, terr *e)
{
    metrics *m = xcalloc(1, sizeof *m);
    m->opt = *opt;
    qhist *ms_hists[] = {&m->ttft, &m->tpot, &m->e2el, &m->queue, &m->itl};
    for (size_t i = 0; i < ARRAY_LEN(ms_hists); i++) qhist_init(ms_hists[i], 1e-3);
    qhist_init(&m->host_us, 0.1);
    qhist_init(&m->sched_us, 0.1);
    qhist_init(&m->kernel_us, 0.1);
    qhist_init(&m->kernel_busy, 1e-4);
    m->first_arrival_ns = INT64_MAX;
    m->last_end_ns = INT64_MIN;
    if (opt->num_replicas > 1) m->reps = xcalloc((size_t)opt->num_replicas, sizeof *m->reps);
    const char *replica_col = m->reps ? ",replica" : "";
    if (opt->out_dir) {
        if (mkdir_p(opt->out_dir)) {
            terr_set(e, "--out %s: cannot create directory: %s", opt->out_dir, strerror(errno));
            free(m);
            return -1;
        }
        if (opt->write_requests) {
            char head[512];
            snprintf(head, sizeof head, "%s%s\n",
                     "id,arrival_s,first_scheduled_s,first_token_s,finish_s,prompt_tokens,"
                     "output_tokens,preemptions,ttft_ms,tpot_ms,e2el_ms,queue_ms,state,"
                     "reject_reason,priority,client,cached_tokens,output_tokens_asked",
                     replica_col);
            m->req_out = open_csv(opt->out_dir, "requests.csv", head, e);
            if (!m->req_out) goto fail;
        }
        if (opt->write_steps) {
            char head[1024], kernel_cols[256] = "";
            if (opt->write_kernel_time) {
                size_t k = (size_t)snprintf(kernel_cols, sizeof kernel_cols, ",kernel_us,kernel_busy");
                for (int i = 0; i < KERNEL_NUM_KINDS; i++)
                    k += (size_t)snprintf(kernel_cols + k, sizeof kernel_cols - k, ",kernel_%s_us", kernel_kind_names[i]);
                snprintf(kernel_cols + k, sizeof kernel_cols - k, ",kernel_gap_us");
            }
            snprintf(head, sizeof head, "%s%s%s%s\n",
                     "step,start_s,duration_ms,num_running,num_waiting,batch_size,"
                     "prefill_tokens,decode_tokens,kv_blocks_used,kv_usage,"
                     "num_preemptions,swap_blocks,kv_tokens,num_prefill_seqs,"
                     "num_decode_seqs,num_emitting,padding_tokens,prefill_pairs2,"
                     "prefill_keys,decode_keys,decode_keys_sq,max_keys,gflop,gbyte,mfu,mbu",
                     opt->write_host_time ? ",host_us,sched_us" : "",
                     kernel_cols, replica_col);
            m->step_out = open_csv(opt->out_dir, "steps.csv", head, e);
            if (opt->write_kernel_time) m->row = xcalloc(1, sizeof *m->row); /* f NULL: never flushed */
            if (!m->step_out || preempt_log_open(&m->preempts, opt->out_dir, e)) goto fail;
        }
        if (opt->write_tokens) {
            m->tok_out = open_csv(opt->out_dir, "tokens.csv", "id,output_ids\n", e);
            if (!m->tok_out) goto fail;
        }
        snprintf(m->summary_path, sizeof m->summary_path, "%s/summary.json", opt->out_dir);
    }
    *out = m;
    return 0;
fail:
    metrics_free(m);
    return -1;
}

void metrics_request_done(metrics *m, const request *r)
{
    metrics_summary *s = &m->s;
    s->num_requests++;
    int64_t end = r->state == REQ_FINISHED ? r->finish_ns : r->arrival_ns;
    if (r->state == REQ_REJECTED && r->finish_ns >= 0) end = r->finish_ns;
    if (r->arrival_ns < m->first_arrival_ns) m->first_arrival_ns = r->arrival_ns;
    if (end > m->last_end_ns) m->last_end_ns = end;
    if (r->num_cached_tokens >= 0) {
        m->admitted_prompt_tokens += r->prompt_tokens;
        m->cached_prompt_tokens += r->num_cached_tokens;
    }
    if (m->reps) {
        replica_acc *ra = &m->reps[r->replica];
        ra->s.requests++;
        ra->s.completed += r->state == REQ_FINISHED;
        ra->s.rejected += r->state == REQ_REJECTED;
        ra->s.preemptions += r->num_preemptions;
        if (r->num_cached_tokens >= 0) {
            ra->admitted_prompt_tokens += r->prompt_tokens;
            ra->cached_prompt_tokens += r->num_cached_tokens;
        }
    }

    bool done = r->state == REQ_FINISHED;
    double ttft = 0, tpot = 0, e2el = 0, queue = 0;
    if (done) {
        s->completed++;
        s->total_input_tokens += r->prompt_tokens;
        s->total_output_tokens += r->num_output_tokens;
        s->num_truncated += r->num_output_tokens < r->max_output_tokens; /* stopped at max_model_len */
        ttft = (double)(r->first_token_ns - r->arrival_ns);
        e2el = (double)(r->finish_ns - r->arrival_ns);
        queue = (double)(r->first_scheduled_ns - r->arrival_ns);
        qhist_add(&m->ttft, ttft / 1e6, 1);
        qhist_add(&m->e2el, e2el / 1e6, 1);
        qhist_add(&m->queue, queue / 1e6, 1);
        if (r->num_output_tokens > 1) {
            tpot = (e2el - ttft) / (r->num_output_tokens - 1);
            qhist_add(&m->tpot, tpot / 1e6, 1);
        }
        /* vLLM counts a single-token request's TPOT as 0 when judging goodput */
        bool good = (m->opt.goodput_ttft_ms <= 0 || ttft / 1e6 <= m->opt.goodput_ttft_ms) &&
                    (m->opt.goodput_tpot_ms <= 0 || tpot / 1e6 <= m->opt.goodput_tpot_ms) &&
                    (m->opt.goodput_e2el_ms <= 0 || e2el / 1e6 <= m->opt.goodput_e2el_ms);
        s->num_good += good;
    } else {
        s->num_rejected++;
        s->rejected_by_reason[r->reject_reason]++;
    }
    s->num_preemptions += r->num_preemptions;

    if (m->tok_out && done && r->output_ids) {
        ob_i64(m->tok_out, r->id);
        ob_char(m->tok_out, ',');
        for (int32_t i = 0; i < r->num_output_tokens; i++) {
            if (i) ob_char(m->tok_out, ' ');
            ob_i64(m->tok_out, r->output_ids[i]);
        }
        ob_char(m->tok_out, '\n');
    }
    obuf *o = m->req_out;
    if (!o) return;
    ob_i64(o, r->id);
    ob_char(o, ',');
    ob_seconds(o, r->arrival_ns);
    ob_char(o, ',');
    if (r->first_scheduled_ns >= 0) ob_seconds(o, r->first_scheduled_ns);
    ob_char(o, ',');
    if (r->first_token_ns >= 0) ob_seconds(o, r->first_token_ns);
    ob_char(o, ',');
    if (done) ob_seconds(o, r->finish_ns);
    ob_char(o, ',');
    ob_i64(o, r->prompt_tokens);
    ob_char(o, ',');
    ob_i64(o, r->num_output_tokens);
    ob_char(o, ',');
    ob_i64(o, r->num_preemptions);
    ob_char(o, ',');
    if (done) ob_ms(o, ttft);
    ob_char(o, ',');
    if (done && r->num_output_tokens > 1) ob_ms(o, tpot);
    ob_char(o, ',');
    if (done) ob_ms(o, e2el);
    ob_char(o, ',');
    if (done) ob_ms(o, queue);
    ob_char(o, ',');
    ob_str(o, req_state_name(r->state));
    ob_char(o, ',');
    ob_str(o, reject_reason_name(r->reject_reason));
    ob_char(o, ',');
    ob_i64(o, r->priority);
    ob_char(o, ',');
    ob_i64(o, r->client_id);
    ob_char(o, ',');
    ob_i64(o, r->num_cached_tokens > 0 ? r->num_cached_tokens : 0);
    ob_char(o, ',');
    ob_i64(o, r->max_output_tokens);
    if (m->reps) {
        ob_char(o, ',');
        ob_i64(o, r->replica);
    }
    ob_char(o, '\n');
}

void metrics_itl(metrics *m, int64_t gap_ns) { qruns_add(&m->step_itl, gap_ns); }

void metrics_preempted(metrics *m, int64_t step, int64_t t_ns, const batch *b)
{
    preempt_log_step(&m->preempts, step, t_ns, b);
}

/* Writes st's row up to its kernel columns (the host columns included). */
static void write_row_head(const metrics *m, obuf *o, const step_stats *st)
{
    ob_i64(o, st->step);
    ob_char(o, ',');
    ob_seconds(o, st->start_ns);
    ob_char(o, ',');
    ob_ms(o, (double)st->duration_ns);
    ob_char(o, ',');
    ob_i64(o, st->num_running);
    ob_char(o, ',');
    ob_i64(o, st->num_waiting);
    ob_char(o, ',');
    ob_i64(o, st->batch_size);
    ob_char(o, ',');
    ob_i64(o, st->prefill_tokens);
    ob_char(o, ',');
    ob_i64(o, st->decode_tokens);
    ob_char(o, ',');
    ob_i64(o, st->kv_blocks_used);
    ob_char(o, ',');
    ob_fixed(o, st->kv_blocks_total ? (int64_t)st->kv_blocks_used * 10000 / st->kv_blocks_total : 0, 4);
    ob_char(o, ',');
    ob_i64(o, st->num_preemptions);
    ob_char(o, ',');
    ob_i64(o, st->num_swap_blocks);
    ob_char(o, ',');
    ob_i64(o, st->kv_tokens);
    const step_shape *sh = &st->shape;
    const int64_t shape_cols[] = {sh->num_prefill_seqs, sh->num_decode_seqs, sh->num_emitting, sh->padding_tokens,
                                  sh->prefill_pairs2,   sh->prefill_keys,    sh->decode_keys,  sh->decode_keys_sq,
                                  sh->max_keys};
    for (size_t i = 0; i < ARRAY_LEN(shape_cols); i++) {
        ob_char(o, ',');
        ob_i64(o, shape_cols[i]);
    }
    ob_char(o, ',');
    ob_fixed(o, llround(st->flops / 1e6), 3); /* GFLOP */
    ob_char(o, ',');
    ob_fixed(o, llround(st->bytes / 1e6), 3); /* GB */
    double secs = (double)st->duration_ns / 1e9;
    ob_char(o, ',');
    ob_fixed(o, m->opt.peak_flops > 0 && secs > 0 ? llround(st->flops / secs / m->opt.peak_flops * 1e4) : 0, 4);
    ob_char(o, ',');
    ob_fixed(o, m->opt.peak_bytes_s > 0 && secs > 0 ? llround(st->bytes / secs / m->opt.peak_bytes_s * 1e4) : 0, 4);
    if (m->opt.write_host_time) {
        ob_char(o, ',');
        ob_fixed(o, (st->host_ns + 5) / 10, 2); /* us */
        ob_char(o, ',');
        ob_fixed(o, (st->sched_ns + 5) / 10, 2);
    }
}

void metrics_step(metrics *m, const step_stats *st)
{
    /* the step's gaps, in ms: most decoding requests share one gap, so a few runs */
    qruns_flush(&m->step_itl, &m->itl, 1e6);
    if (st->batch) preempt_log_step(&m->preempts, st->step, st->start_ns, st->batch);
    metrics_summary *s = &m->s;
    s->num_steps++;
    m->busy_ns += (double)st->duration_ns;
    m->batch_size_sum += st->batch_size;
    s->total_flops += st->flops;
    s->total_bytes += st->bytes;
    double usage = st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0;
    if (usage > s->peak_kv_usage) s->peak_kv_usage = usage;
    m->kv_usage_time_sum += usage * (double)st->duration_ns;
    double slots = (double)st->kv_blocks_total * st->block_size;
    double tusage = slots > 0 ? (double)st->kv_tokens / slots : 0;
    if (tusage > s->peak_kv_token_usage) s->peak_kv_token_usage = tusage;
    m->kv_token_usage_time_sum += tusage * (double)st->duration_ns;
    if (m->reps) {
        replica_acc *ra = &m->reps[st->replica];
        ra->s.steps++;
        ra->busy_ns += (double)st->duration_ns;
        ra->kv_usage_time_sum += usage * (double)st->duration_ns;
        if (usage > ra->s.peak_kv_usage) ra->s.peak_kv_usage = usage;
    }
    if (m->opt.write_host_time) {
        qhist_add(&m->host_us, (double)st->host_ns / 1e3, 1);
        qhist_add(&m->sched_us, (double)st->sched_ns / 1e3, 1);
    }
    if (m->opt.write_kernel_time) { /* the row waits for the kernel columns */
        if (m->n_held == m->cap_held) {
            if (m->held_head > m->cap_held / 2) { /* compact: move what waits to the front */
                size_t off = m->held_text_start;
                for (size_t i = m->held_head; i < m->n_held; i++) m->held[i].text_end -= off;
                memmove(m->held, m->held + m->held_head, sizeof *m->held * (m->n_held - m->held_head));
                memmove(m->held_text, m->held_text + off, m->held_text_len - off);
                m->n_held -= m->held_head, m->held_head = 0;
                m->held_text_len -= off, m->held_text_start = 0;
            } else {
                grow_array((void **)&m->held, sizeof *m->held, &m->cap_held, m->n_held + 1);
            }
        }
        if (m->step_out) {
            m->row->n = 0;
            write_row_head(m, m->row, st);
            grow_array((void **)&m->held_text, 1, &m->cap_text, m->held_text_len + m->row->n);
            memcpy(m->held_text + m->held_text_len, m->row->buf, m->row->n);
            m->held_text_len += m->row->n;
        }
        m->held[m->n_held++] = (held_step){m->held_text_len, st->duration_ns, st->replica};
        return;
    }
    obuf *o = m->step_out;
    if (!o) return;
    write_row_head(m, o, st);
    if (m->reps) {
        ob_char(o, ',');
        ob_i64(o, st->replica);
    }
    ob_char(o, '\n');
}

void metrics_step_kernels(metrics *m, const step_kernel_time *k, size_t n)
{
    if (!m->opt.write_kernel_time) return; /* kernel times nobody asked to write */
    assert(n <= m->n_held - m->held_head);
    for (size_t i = 0; i < n; i++) {
        const held_step *h = &m->held[m->held_head++];
        double busy = h->duration_ns > 0 ? (double)k[i].busy_ns / (double)h->duration_ns : 0;
        qhist_add(&m->kernel_us, (double)k[i].kernel_ns / 1e3, 1);
        qhist_add(&m->kernel_busy, busy, 1);
        m->kernel_busy_ns += (double)k[i].busy_ns;
        m->kernel_step_ns += (double)h->duration_ns;
        int64_t gap_ns = h->duration_ns > k[i].busy_ns ? h->duration_ns - k[i].busy_ns : 0;
        for (int j = 0; j < KERNEL_NUM_KINDS; j++) m->kernel_kind_ns[j] += (double)k[i].kind_ns[j];
        m->kernel_gap_ns += (double)gap_ns;
        obuf *o = m->step_out;
        if (o) {
            const char *row = m->held_text + m->held_text_start;
            size_t len = h->text_end - m->held_text_start;
            ob_reserve(o, len);
            if (len > sizeof o->buf) { /* cannot happen: a row is far shorter than the buffer */
                ob_flush(o);
                fwrite(row, 1, len, o->f);
            } else {
                memcpy(o->buf + o->n, row, len);
                o->n += len;
            }
            m->held_text_start = h->text_end;
            ob_char(o, ',');
            ob_fixed(o, (k[i].kernel_ns + 5) / 10, 2); /* us */
            ob_char(o, ',');
            ob_fixed(o, llround(busy * 1e4), 4);
            for (int j = 0; j < KERNEL_NUM_KINDS; j++) {
                ob_char(o, ',');
                ob_fixed(o, (k[i].kind_ns[j] + 5) / 10, 2); /* us */
            }
            ob_char(o, ',');
            ob_fixed(o, (gap_ns + 5) / 10, 2); /* us */
            if (m->reps) {
                ob_char(o, ',');
                ob_i64(o, h->replica);
            }
            ob_char(o, '\n');
        }
    }
    if (m->held_head == m->n_held) m->held_head = m->n_held = 0, m->held_text_start = m->held_text_len = 0;
}

void metrics_add_bad_rows(metrics *m, int64_t n) { m->s.num_bad_rows += n; }

static latency_stats lat_hist(const qhist *h)
{
    return (latency_stats){
        .mean = qhist_mean(h),
        .median = qhist_percentile(h, 50),
        .std = qhist_std(h),
        .p90 = qhist_percentile(h, 90),
        .p95 = qhist_percentile(h, 95),
        .p99 = qhist_percentile(h, 99),
        .p999 = qhist_percentile(h, 99.9),
        .max = h->n ? h->max : 0, /* exact */
    };
}

static void put_lat(json_t *o, const char *name, const latency_stats *l)
{
    char k[64];
    /* vLLM's key names ("p99.9_itl_ms" for a fractional percentile), plus the maximum */
    static const char *stat[] = {"mean", "median", "std", "p90", "p95", "p99", "p99.9", "max"};
    const double v[] = {l->mean, l->median, l->std, l->p90, l->p95, l->p99, l->p999, l->max};
    for (size_t i = 0; i < ARRAY_LEN(stat); i++) {
        snprintf(k, sizeof k, "%s_%s_ms", stat[i], name);
        json_object_set_new(o, k, json_real(v[i]));
    }
}

json_t *metrics_summary_json(const metrics_summary *s, const metrics_options *opt)
{
    json_t *o = json_object();
    json_object_set_new(o, "num_prompts", json_integer(s->num_requests));
    json_object_set_new(o, "completed", json_integer(s->completed));
    json_object_set_new(o, "failed", json_integer(s->num_rejected));
    json_object_set_new(o, "num_rejected", json_integer(s->num_rejected));
    json_t *why = json_object();
    for (int r = 1; r < REJECT_NUM_REASONS; r++)
        json_object_set_new(why, reject_reason_name((reject_reason)r), json_integer(s->rejected_by_reason[r]));
    json_object_set_new(o, "rejected_by_reason", why);
    json_object_set_new(o, "num_bad_rows_skipped", json_integer(s->num_bad_rows));
    json_object_set_new(o, "num_truncated", json_integer(s->num_truncated));
    json_object_set_new(o, "duration", json_real(s->duration_s));
    json_object_set_new(o, "total_input_tokens", json_integer(s->total_input_tokens));
    json_object_set_new(o, "total_output_tokens", json_integer(s->total_output_tokens));
    json_object_set_new(o, "request_throughput", json_real(s->request_throughput));
    bool slo = opt && (opt->goodput_ttft_ms > 0 || opt->goodput_tpot_ms > 0 || opt->goodput_e2el_ms > 0);
    json_object_set_new(o, "request_goodput", slo ? json_real(s->request_goodput) : json_null());
    if (slo) {
        json_t *g = json_object();
        if (opt->goodput_ttft_ms > 0) json_object_set_new(g, "ttft_ms", json_real(opt->goodput_ttft_ms));
        if (opt->goodput_tpot_ms > 0) json_object_set_new(g, "tpot_ms", json_real(opt->goodput_tpot_ms));
        if (opt->goodput_e2el_ms > 0) json_object_set_new(g, "e2el_ms", json_real(opt->goodput_e2el_ms));
        json_object_set_new(o, "goodput", g);
    }
    json_object_set_new(o, "output_throughput", json_real(s->output_throughput));
    json_object_set_new(o, "total_token_throughput", json_real(s->total_token_throughput));
    put_lat(o, "ttft", &s->ttft);
    put_lat(o, "tpot", &s->tpot);
    put_lat(o, "itl", &s->itl);
    put_lat(o, "e2el", &s->e2el);
    put_lat(o, "queue", &s->queue);
    json_object_set_new(o, "num_preemptions", json_integer(s->num_preemptions));
    json_object_set_new(o, "num_steps", json_integer(s->num_steps));
    json_object_set_new(o, "busy_time", json_real(s->busy_s));
    json_object_set_new(o, "busy_fraction", json_real(s->busy_fraction));
    json_object_set_new(o, "peak_kv_usage", json_real(s->peak_kv_usage));
    json_object_set_new(o, "mean_kv_usage", json_real(s->mean_kv_usage));
    json_object_set_new(o, "peak_kv_token_usage", json_real(s->peak_kv_token_usage));
    json_object_set_new(o, "mean_kv_token_usage", json_real(s->mean_kv_token_usage));
    json_object_set_new(o, "mean_batch_size", json_real(s->mean_batch_size));
    json_object_set_new(o, "prefix_cache_hit_rate", json_real(s->prefix_cache_hit_rate));
    json_object_set_new(o, "total_flops", json_real(s->total_flops));
    json_object_set_new(o, "total_bytes", json_real(s->total_bytes));
    json_object_set_new(o, "mfu", isnan(s->mfu) ? json_null() : json_real(s->mfu));
    json_object_set_new(o, "mbu", isnan(s->mbu) ? json_null() : json_real(s->mbu));
    if (opt->write_host_time) {
        const latency_stats *h[] = {&s->host_us, &s->sched_us};
        const char *key[] = {"host_us", "sched_us"};
        for (int i = 0; i < 2; i++)
            json_object_set_new(o, key[i], json_pack("{s:f,s:f,s:f,s:f}", "mean", h[i]->mean, "median",
                                                     h[i]->median, "p99", h[i]->p99, "max", h[i]->max));
        json_object_set_new(o, "host_overlaps_gpu", json_boolean(opt->host_overlaps_gpu));
    }
    if (opt->write_kernel_time) {
        const latency_stats *k = &s->kernel_us;
        json_object_set_new(o, "kernel_us", json_pack("{s:f,s:f,s:f,s:f}", "mean", k->mean, "median", k->median,
                                                      "p99", k->p99, "max", k->max));
        json_object_set_new(o, "kernel_busy",
                            json_pack("{s:f,s:f,s:f,s:f,s:f}", "mean", s->kernel_busy.mean, "median",
                                      s->kernel_busy.median, "p1", s->kernel_busy.p1, "min", s->kernel_busy.min,
                                      "overall", s->kernel_busy.overall));
        json_t *kinds = json_object();
        for (int i = 0; i < KERNEL_NUM_KINDS; i++)
            json_object_set_new(kinds, kernel_kind_names[i], json_real(s->kernel_kind_s[i] * 1e3));
        json_object_set_new(o, "kernel_ms_by_kind", kinds);
        json_object_set_new(o, "kernel_gap_ms", json_real(s->kernel_gap_s * 1e3));
    }
    return o;
}

int metrics_finish(metrics *m, json_t *config, metrics_summary *out, terr *e)
{
    if (m->n_held > m->held_head) {
        json_decref(config);
        return terr_set(e, "steps.csv: %zu steps never got their kernel time (the executor did not settle them)",
                        m->n_held - m->held_head);
    }
    metrics_summary *s = &m->s;
    s->duration_s = s->num_requests ? (double)(m->last_end_ns - m->first_arrival_ns) / 1e9 : 0;
    double d = s->duration_s;
    s->request_throughput = d > 0 ? s->completed / d : 0;
    bool slo = m->opt.goodput_ttft_ms > 0 || m->opt.goodput_tpot_ms > 0 || m->opt.goodput_e2el_ms > 0;
    s->request_goodput = !slo ? NAN : d > 0 ? s->num_good / d : 0;
    s->output_throughput = d > 0 ? s->total_output_tokens / d : 0;
    s->total_token_throughput = d > 0 ? (s->total_input_tokens + s->total_output_tokens) / d : 0;
    s->ttft = lat_hist(&m->ttft);
    s->tpot = lat_hist(&m->tpot);
    s->itl = lat_hist(&m->itl);
    s->e2el = lat_hist(&m->e2el);
    s->queue = lat_hist(&m->queue);
    s->host_us = lat_hist(&m->host_us);
    s->sched_us = lat_hist(&m->sched_us);
    s->kernel_us = lat_hist(&m->kernel_us);
    const qhist *kb = &m->kernel_busy;
    s->kernel_busy.mean = qhist_mean(kb);
    s->kernel_busy.median = qhist_percentile(kb, 50);
    s->kernel_busy.p1 = qhist_percentile(kb, 1);
    s->kernel_busy.min = kb->n ? kb->min : 0;
    s->kernel_busy.overall = m->kernel_step_ns > 0 ? m->kernel_busy_ns / m->kernel_step_ns : 0;
    for (int i = 0; i < KERNEL_NUM_KINDS; i++) s->kernel_kind_s[i] = m->kernel_kind_ns[i] / 1e9;
    s->kernel_gap_s = m->kernel_gap_ns / 1e9;
    s->busy_s = m->busy_ns / 1e9;
    /* a cluster's replicas are busy side by side: the fraction is of their time together */
    s->num_replicas = m->reps ? m->opt.num_replicas : 1;
    s->busy_fraction = d > 0 ? s->busy_s / (d * s->num_replicas) : 0;
    s->load_imbalance = 1;
    if (m->reps) {
        double max_busy = 0;
        for (int32_t i = 0; i < s->num_replicas; i++) {
            replica_acc *ra = &m->reps[i];
            ra->s.busy_s = ra->busy_ns / 1e9;
            ra->s.busy_fraction = d > 0 ? ra->s.busy_s / d : 0;
            ra->s.mean_kv_usage = ra->busy_ns > 0 ? ra->kv_usage_time_sum / ra->busy_ns : 0;
            ra->s.prefix_cache_hit_rate =
                ra->admitted_prompt_tokens ? (double)ra->cached_prompt_tokens / ra->admitted_prompt_tokens : 0;
            if (ra->busy_ns > max_busy) max_busy = ra->busy_ns;
        }
        double mean_busy = m->busy_ns / s->num_replicas;
        s->load_imbalance = mean_busy > 0 ? max_busy / mean_busy : 1;
    }
    s->mean_kv_usage = m->busy_ns > 0 ? m->kv_usage_time_sum / m->busy_ns : 0;
    s->mean_kv_token_usage = m->busy_ns > 0 ? m->kv_token_usage_time_sum / m->busy_ns : 0;
    s->mean_batch_size = s->num_steps ? m->batch_size_sum / s->num_steps : 0;
    s->mfu = m->opt.peak_flops > 0 && s->busy_s > 0 ? s->total_flops / s->busy_s / m->opt.peak_flops : NAN;
    s->mbu = m->opt.peak_bytes_s > 0 && s->busy_s > 0 ? s->total_bytes / s->busy_s / m->opt.peak_bytes_s : NAN;
    s->prefix_cache_hit_rate =
        m->admitted_prompt_tokens ? (double)m->cached_prompt_tokens / m->admitted_prompt_tokens : 0;
    if (out) *out = *s;

    int rc = 0;
    if (preempt_log_close(&m->preempts, e)) rc = -1;
    obuf *csvs[] = {m->req_out, m->step_out, m->tok_out};
    for (size_t i = 0; i < ARRAY_LEN(csvs); i++) {
        if (!csvs[i]) continue;
        ob_flush(csvs[i]);
        /* ferror: a write that failed earlier (a full disk) leaves the stream's error flag set,
         * and fclose alone reports only its own last flush */
        int bad = ferror(csvs[i]->f);
        if (fclose(csvs[i]->f) || bad) rc = terr_set(e, "%s/%s: write failed", m->opt.out_dir, csvs[i]->name);
        csvs[i]->f = NULL;
    }
    if (m->summary_path[0]) {
        json_t *o = metrics_summary_json(s, &m->opt);
        if (m->reps) {
            json_object_set_new(o, "num_replicas", json_integer(s->num_replicas));
            json_object_set_new(o, "load_imbalance", json_real(s->load_imbalance));
            json_t *arr = json_array();
            for (int32_t i = 0; i < s->num_replicas; i++) {
                const replica_summary *rs = &m->reps[i].s;
                json_t *row = json_object();
                json_object_set_new(row, "replica", json_integer(i));
                json_object_set_new(row, "requests", json_integer(rs->requests));
                json_object_set_new(row, "completed", json_integer(rs->completed));
                json_object_set_new(row, "rejected", json_integer(rs->rejected));
                json_object_set_new(row, "busy_time", json_real(rs->busy_s));
                json_object_set_new(row, "busy_fraction", json_real(rs->busy_fraction));
                json_object_set_new(row, "num_steps", json_integer(rs->steps));
                json_object_set_new(row, "mean_kv_usage", json_real(rs->mean_kv_usage));
                json_object_set_new(row, "peak_kv_usage", json_real(rs->peak_kv_usage));
                json_object_set_new(row, "prefix_cache_hit_rate", json_real(rs->prefix_cache_hit_rate));
                json_object_set_new(row, "num_preemptions", json_integer(rs->preemptions));
                json_array_append_new(arr, row);
            }
            json_object_set_new(o, "replicas", arr);
        }
        if (config) json_object_set_new(o, "config", config);
        if (m->opt.summary_extra) json_object_update(o, m->opt.summary_extra);
        config = NULL;
        /* write to a temporary name and rename, so a reader never sees half a summary */
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", m->summary_path);
        if (json_dump_file(o, tmp, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) ||
            rename(tmp, m->summary_path))
            rc = terr_set(e, "%s: cannot write", m->summary_path);
        json_decref(o);
    }
    json_decref(config);
    return rc;
}

int64_t metrics_requests_ended(const metrics *m) { return m->s.num_requests; }

void metrics_free(metrics *m)
{
    if (!m) return;
    preempt_log_close(&m->preempts, NULL);
    obuf *bufs[] = {m->req_out, m->step_out, m->tok_out};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) {
        if (bufs[i] && bufs[i]->f) fclose(bufs[i]->f);
        free(bufs[i]);
    }
    free(m->reps);
    qhist_free(&m->ttft);
    qhist_free(&m->tpot);
    qhist_free(&m->itl);
    qhist_free(&m->host_us);
    qhist_free(&m->sched_us);
    qhist_free(&m->kernel_us);
    qhist_free(&m->kernel_busy);
    qhist_free(&m->e2el);
    qhist_free(&m->queue);
    qruns_free(&m->step_itl);
    free(m->held), free(m->held_text), free(m->row);
    free(m);
}

void metrics_print_summary(const metrics_summary *s, const char *what, FILE *f)
{
    fprintf(f, "============ Serving Benchmark Result (%s) ============\n", what);
    fprintf(f, "%-40s %-10lld\n", "Successful requests:", (long long)s->completed);
    fprintf(f, "%-40s %-10lld\n", "Rejected requests:", (long long)s->num_rejected);
    if (s->num_bad_rows) fprintf(f, "%-40s %-10lld\n", "Bad trace rows skipped:", (long long)s->num_bad_rows);
    if (s->num_truncated)
        fprintf(f, "%-40s %-10lld\n", "Outputs cut at max_model_len:", (long long)s->num_truncated);
    fprintf(f, "%-40s %-10.2f\n", "Benchmark duration (s):", s->duration_s);
    fprintf(f, "%-40s %-10lld\n", "Total input tokens:", (long long)s->total_input_tokens);
    fprintf(f, "%-40s %-10lld\n", "Total generated tokens:", (long long)s->total_output_tokens);
    fprintf(f, "%-40s %-10.2f\n", "Request throughput (req/s):", s->request_throughput);
    fprintf(f, "%-40s %-10.2f\n", "Output token throughput (tok/s):", s->output_throughput);
    fprintf(f, "%-40s %-10.2f\n", "Total token throughput (tok/s):", s->total_token_throughput);
    const struct {
        const char *title, *name;
        const latency_stats *l;
    } rows[] = {{"Time to First Token", "TTFT", &s->ttft},
                {"Time per Output Token (excl. 1st token)", "TPOT", &s->tpot},
                {"Inter-token Latency", "ITL", &s->itl},
                {"End-to-end Latency", "E2EL", &s->e2el}};
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        fprintf(f, "%s\n", rows[i].title);
        fprintf(f, "  %-38s %-10.2f\n", "Mean (ms):", rows[i].l->mean);
        fprintf(f, "  %-38s %-10.2f\n", "Median (ms):", rows[i].l->median);
        fprintf(f, "  %-38s %-10.2f\n", "P99 (ms):", rows[i].l->p99);
    }
    fprintf(f, "%-40s %-10lld\n", "Preemptions:", (long long)s->num_preemptions);
    fprintf(f, "%-40s %-10lld\n", "Model steps:", (long long)s->num_steps);
    fprintf(f, "%-40s %-10.2f\n", "Mean batch size (requests):", s->mean_batch_size);
    fprintf(f, "%-40s %-10.3f\n", "Peak KV cache usage:", s->peak_kv_usage);
    fprintf(f, "%-40s %-10.3f\n", "GPU busy fraction:", s->busy_fraction);
    if (s->num_replicas > 1)
        fprintf(f, "%-40s %-10.3f\n", "Load imbalance (max/mean busy):", s->load_imbalance);
    if (!isnan(s->mfu)) fprintf(f, "%-40s %-10.3f\n", "Model FLOPs utilisation (MFU):", s->mfu);
    if (!isnan(s->mbu)) fprintf(f, "%-40s %-10.3f\n", "Memory bandwidth utilisation (MBU):", s->mbu);
    if (s->prefix_cache_hit_rate > 0)
        fprintf(f, "%-40s %-10.3f\n", "Prefix cache hit rate:", s->prefix_cache_hit_rate);
    fprintf(f, "==============================================================\n");
}
