/* kernel_trace.c: see kernel_trace.h. */
#include "engine/kernel_trace.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h> /* not pthread.h: with -Icore, its <sched.h> is core/sched.h */

static int cmp_start(const void *a, const void *b)
{
    const ktrace_span *x = a, *y = b;
    return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

/* Insertion sort while the records are nearly in order (one stream's kernels mostly arrive in
 * start order, a few swapped: linear), qsort once they turn out not to be. */
void ktrace_sort_spans(ktrace_span *spans, size_t n)
{
    size_t moves = 0, budget = 8 * n + 64;
    for (size_t i = 1; i < n; i++) {
        if (spans[i].start_ns >= spans[i - 1].start_ns) continue;
        ktrace_span x = spans[i];
        size_t j = i;
        for (; j > 0 && spans[j - 1].start_ns > x.start_ns; j--) {
            spans[j] = spans[j - 1];
            if (++moves > budget) {
                spans[j - 1] = x; /* a permutation again (x's slot was shifted into) */
                qsort(spans, n, sizeof *spans, cmp_start);
                return;
            }
        }
        spans[j] = x;
    }
}

kernel_kind ktrace_classify(const char *name)
{
    static const struct {
        const char *part;
        kernel_kind kind;
    } rules[] = {
        /* before "gemm": the engine's own kernels, whose names say what they are */
        {"decode_stream", KERNEL_FUSED}, {"decode_attn", KERNEL_ATTENTION}, {"prefill_attn", KERNEL_ATTENTION},
        {"prefill_wgmma", KERNEL_ATTENTION}, {"skinny_kernel", KERNEL_GEMM}, {"sample_kernel", KERNEL_SAMPLING},
        {"rmsnorm", KERNEL_ELEMENTWISE}, {"rope_", KERNEL_ELEMENTWISE}, {"silu", KERNEL_ELEMENTWISE},
        {"embed_kernel", KERNEL_ELEMENTWISE},
        /* cuBLAS and cuBLASLt */
        {"gemm", KERNEL_GEMM}, {"gemv", KERNEL_GEMM}, {"nvjet", KERNEL_GEMM}, {"xmma", KERNEL_GEMM},
        {"splitKreduce", KERNEL_GEMM},
    };
    if (!name) return KERNEL_OTHER;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strstr(name, rules[i].part)) return rules[i].kind;
    return KERNEL_OTHER;
}

/* Sum and union of sorted spans; kind_ns (KERNEL_NUM_KINDS, zeroed here) gets the sum by kind. */
static int64_t measure_sorted(const ktrace_span *spans, size_t n, int64_t *busy_ns, int64_t *kind_ns)
{
    int64_t sum = 0, busy = 0;
    uint64_t reach = 0; /* end of the union so far */
    for (int k = 0; k < KERNEL_NUM_KINDS; k++) kind_ns[k] = 0;
    for (size_t i = 0; i < n; i++) {
        const ktrace_span *s = &spans[i];
        sum += (int64_t)(s->end_ns - s->start_ns);
        kind_ns[s->kind < KERNEL_NUM_KINDS ? s->kind : KERNEL_OTHER] += (int64_t)(s->end_ns - s->start_ns);
        if (i == 0 || s->start_ns >= reach) {
            busy += (int64_t)(s->end_ns - s->start_ns);
            reach = s->end_ns;
        } else if (s->end_ns > reach) {
            busy += (int64_t)(s->end_ns - reach);
            reach = s->end_ns;
        }
    }
    *busy_ns = busy;
    return sum;
}

int64_t ktrace_spans_measure(ktrace_span *spans, size_t n, int64_t *busy_ns)
{
    int64_t kind_ns[KERNEL_NUM_KINDS];
    ktrace_sort_spans(spans, n);
    return measure_sorted(spans, n, busy_ns, kind_ns);
}

size_t ktrace_attribute(const ktrace_window *win, size_t nw, int64_t first_step, const ktrace_span *spans,
                        size_t n, ktrace_step *out)
{
    size_t outside = 0, i = 0;
    for (size_t w = 0; w < nw; w++) {
        for (; i < n && spans[i].start_ns < win[w].begin_ns; i++) outside++; /* before it, after the last */
        size_t j = i;
        while (j < n && spans[j].start_ns <= win[w].end_ns) j++;
        out[w] = (ktrace_step){.step = first_step + (int64_t)w, .kernels = (int32_t)(j - i)};
        out[w].kernel_ns = measure_sorted(spans + i, j - i, &out[w].busy_ns, out[w].kind_ns);
        i = j;
    }
    return outside + (n - i);
}

/* ---- the ledger ---- */

void ktrace_ledger_init(ktrace_ledger *l)
{
    *l = (ktrace_ledger){.first_begin = UINT64_MAX, .sorted = true};
    l->cap_win = 1024, l->cap_spans = 1 << 16, l->cap_out = 1024;
    l->win = xmalloc(sizeof *l->win * l->cap_win);
    l->spans = xmalloc(sizeof *l->spans * l->cap_spans);
    l->out = xmalloc(sizeof *l->out * l->cap_out);
}

void ktrace_ledger_free(ktrace_ledger *l)
{
    free(l->win), free(l->spans), free(l->out);
    *l = (ktrace_ledger){0};
}

/* Room for n more items at the end of a[head, len): moves them to the front when that makes
 * room (settled items are let go from the front), else grows the array. */
static void make_room(void **a, size_t size, size_t *head, size_t *len, size_t *cap, size_t n)
{
    if (*len + n <= *cap) return;
    if (*head) {
        memmove(*a, (char *)*a + *head * size, (*len - *head) * size);
        *len -= *head, *head = 0;
    }
    if (*len + n > *cap) {
        while (*len + n > *cap) *cap *= 2;
        *a = xrealloc(*a, *cap * size);
    }
}

void ktrace_ledger_window(ktrace_ledger *l, ktrace_window w)
{
    make_room((void **)&l->win, sizeof *l->win, &l->win_head, &l->n_win, &l->cap_win, 1);
    if (l->first_begin == UINT64_MAX) l->first_begin = w.begin_ns;
    l->win[l->n_win++] = w;
}

void ktrace_ledger_spans(ktrace_ledger *l, const ktrace_span *spans, size_t n)
{
    if (n == 0) return;
    make_room((void **)&l->spans, sizeof *l->spans, &l->span_head, &l->n_spans, &l->cap_spans, n);
    uint64_t last = l->n_spans > l->span_head ? l->spans[l->n_spans - 1].start_ns : 0;
    for (size_t i = 0; i < n; i++) {
        l->sorted &= spans[i].start_ns >= last;
        last = spans[i].start_ns;
        if (last > l->latest_start) l->latest_start = last;
    }
    memcpy(l->spans + l->n_spans, spans, sizeof *spans * n);
    l->n_spans += n;
}

size_t ktrace_ledger_settle(ktrace_ledger *l, bool all, size_t lag, size_t max, const ktrace_step **out)
{
    *out = l->out;
    const ktrace_window *win = l->win + l->win_head;
    size_t n_win = l->n_win - l->win_head;
    /* windows [0, nf) are final: all, or a record began in window k + lag or later */
    size_t nf = 0;
    if (all) nf = n_win;
    else
        while (nf + lag < n_win && (max == 0 || nf < max) && win[nf + lag].begin_ns <= l->latest_start) nf++;
    if (nf == 0 && !(all && l->first_begin != UINT64_MAX)) return 0;
    ktrace_span *spans = l->spans + l->span_head;
    size_t n = l->n_spans - l->span_head;
    if (!l->sorted) ktrace_sort_spans(spans, n), l->sorted = true;
    /* records before the first step, then those of settled steps or between them */
    size_t i = 0;
    for (; i < n && spans[i].start_ns < l->first_begin; i++) l->counts.warmup++;
    for (; i < n && spans[i].start_ns <= l->settled_end; i++) l->counts.outside++;
    /* then the records of windows [0, nf): up to the last one's end (all: every one left) */
    size_t j = i;
    if (all) j = n;
    else
        while (j < n && spans[j].start_ns <= win[nf - 1].end_ns) j++;
    if (nf > l->cap_out) {
        while (nf > l->cap_out) l->cap_out *= 2;
        l->out = xrealloc(l->out, sizeof *l->out * l->cap_out);
        *out = l->out;
    }
    l->counts.outside += (int64_t)ktrace_attribute(win, nf, l->first_step, spans + i, j - i, l->out);
    l->span_head += j;
    if (l->span_head == l->n_spans) l->span_head = l->n_spans = 0;
    if (nf) {
        l->settled_end = win[nf - 1].end_ns;
        l->win_head += nf;
        if (l->win_head == l->n_win) l->win_head = l->n_win = 0;
        l->first_step += (int64_t)nf;
    }
    return nf;
}

#if TANDEM_HAVE_CUPTI
#include "engine/cuda_libs.h"

#define KTRACE_BUF_BYTES ((size_t)4 << 20) /* one CUPTI activity buffer */
#define KTRACE_MAX_FREE 16                 /* buffers kept for reuse */
#define KTRACE_MAX_KINDS 8

static struct {
    const cuda_cupti *api;
    bool registered; /* the buffer callbacks, registered once per process */
    bool open;
    CUpti_ActivityKind enabled[KTRACE_MAX_KINDS];
    int num_enabled;
    mtx_t lock; /* guards what follows: CUPTI may hand buffers over on a thread of its own */
    ktrace_record_fn fn;
    void *ud;
    uint8_t *free_bufs[KTRACE_MAX_FREE];
    int num_free;
    ktrace_losses losses;
} kt;
static once_flag kt_once = ONCE_FLAG_INIT;

static void init_lock(void)
{
    if (mtx_init(&kt.lock, mtx_plain) != thrd_success) abort(); /* cannot happen for a plain mutex */
}

/* "file:line: call failed: CUPTI's reason", and what to do when another tool holds CUPTI. */
static int cupti_fail(terr *e, CUptiResult st, const char *call, int line)
{
    const char *why = NULL;
    if (kt.api->cuptiGetResultString(st, &why) != CUPTI_SUCCESS || !why) why = "unknown CUPTI error";
    return terr_set(e, "%s:%d: %s failed: %s%s", __FILE__, line, call, why,
                    st == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                        ? " (another profiler, such as Nsight Systems, holds CUPTI: run without it or turn "
                          "the kernel trace off)"
                        : "");
}

#define KT_TRY(call)                                                                              \
    do {                                                                                          \
        CUptiResult st_ = kt.api->call;                                                           \
        if (st_ != CUPTI_SUCCESS) return cupti_fail(e, st_, #call, __LINE__);                     \
    } while (0)

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    mtx_lock(&kt.lock);
    uint8_t *b = kt.num_free ? kt.free_bufs[--kt.num_free] : NULL;
    mtx_unlock(&kt.lock);
    if (!b) b = aligned_alloc(8, KTRACE_BUF_BYTES); /* NULL: CUPTI drops records, and counts them */
    *buf = b;
    *size = b ? KTRACE_BUF_BYTES : 0;
    *max_records = 0;
}

/* The client's function runs under kt.lock, so that ktrace_close, which takes it, waits for a
 * hand-over in progress on CUPTI's thread before the client frees what fn writes. */
static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buf, size_t size,
                                      size_t valid)
{
    mtx_lock(&kt.lock);
    CUpti_Activity *r = NULL;
    while (buf && kt.fn && valid > 0) {
        CUptiResult st = kt.api->cuptiActivityGetNextRecord(buf, valid, &r);
        if (st == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
        if (st != CUPTI_SUCCESS) {
            kt.losses.bad_buffers++;
            break;
        }
        kt.fn(kt.ud, r);
    }
    size_t dropped = 0;
    if (kt.api->cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
        kt.losses.dropped += dropped;
    else
        kt.losses.bad_buffers++; /* cannot say what was lost */
    if (buf && kt.num_free < KTRACE_MAX_FREE) kt.free_bufs[kt.num_free++] = buf, buf = NULL;
    mtx_unlock(&kt.lock);
    free(buf);
}

int ktrace_open(ktrace_record_fn fn, void *ud, terr *e)
{
    call_once(&kt_once, init_lock);
    const cuda_cupti *api = cuda_cupti_get(e);
    if (!api) return -1;
    if (kt.open) return terr_set(e, "kernel trace: CUPTI's activity trace is already in use in this process");
    kt.api = api;
    if (!kt.registered) {
        KT_TRY(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
        kt.registered = true;
    }
    mtx_lock(&kt.lock);
    kt.fn = fn, kt.ud = ud;
    kt.losses = (ktrace_losses){0};
    mtx_unlock(&kt.lock);
    kt.open = true;
    kt.num_enabled = 0;
    return 0;
}

int ktrace_enable(CUpti_ActivityKind kind, terr *e)
{
    if (!kt.open || kt.num_enabled == KTRACE_MAX_KINDS)
        return terr_set(e, "kernel trace: not open, or %d kinds enabled already", kt.num_enabled);
    KT_TRY(cuptiActivityEnable(kind));
    kt.enabled[kt.num_enabled++] = kind;
    return 0;
}

int ktrace_flush(terr *e)
{
    KT_TRY(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    return 0;
}

void ktrace_close(void)
{
    if (!kt.open) return;
    kt.api->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (int i = 0; i < kt.num_enabled; i++) kt.api->cuptiActivityDisable(kt.enabled[i]);
    kt.num_enabled = 0;
    mtx_lock(&kt.lock);
    kt.fn = NULL, kt.ud = NULL;
    mtx_unlock(&kt.lock);
    kt.open = false;
}

ktrace_losses ktrace_take_losses(void)
{
    mtx_lock(&kt.lock);
    ktrace_losses l = kt.losses;
    kt.losses = (ktrace_losses){0};
    mtx_unlock(&kt.lock);
    return l;
}

/* ---- the step meter ---- */

/* Steps settle once records of a step this many windows later have arrived (kernel_trace.h,
 * ktrace_ledger): CUPTI's in-order buffers need 1; the rest is a margin. */
#define KTRACE_SETTLE_LAG 8
/* At most this many steps settle after one step (a buffer handed over holds tens of steps'
 * records): a few hundred records each, some microseconds, and the backlog still shrinks. */
#define KTRACE_SETTLE_MAX 4

struct ktrace_meter {
    /* filled on whichever thread hands a buffer over, emptied by settle */
    mtx_t lock;
    ktrace_span *inbox; /* (cap_in) records not yet in the ledger */
    size_t n_in, cap_in;
    int64_t untimed;    /* records without a start or end */
    struct {
        const char *name; /* CUPTI shares one name string among a kernel's records */
        uint8_t kind;
    } kinds[256];       /* classified names, by the string's address (direct-mapped) */
    /* the host's thread only */
    ktrace_span *taken; /* (cap_taken) the inbox, swapped out by settle */
    size_t cap_taken;
    ktrace_ledger ledger;
    uint64_t begin_ns;  /* the open step's, on CUPTI's clock */
    int64_t lost;       /* untimed records and CUPTI's losses taken so far */
};

static void meter_record(void *ud, const CUpti_Activity *r)
{
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) return;
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
    ktrace_meter *m = ud;
    mtx_lock(&m->lock);
    if (k->start == 0 || k->end < k->start) {
        m->untimed++;
    } else {
        if (m->n_in == m->cap_in) m->inbox = xrealloc(m->inbox, sizeof *m->inbox * (m->cap_in *= 2));
        size_t slot = ((uintptr_t)k->name >> 4) % (sizeof m->kinds / sizeof m->kinds[0]);
        if (!k->name || m->kinds[slot].name != k->name)
            m->kinds[slot].name = k->name, m->kinds[slot].kind = (uint8_t)ktrace_classify(k->name);
        m->inbox[m->n_in++] = (ktrace_span){k->start, k->end, m->kinds[slot].kind};
    }
    mtx_unlock(&m->lock);
}

int ktrace_meter_open(ktrace_meter **out, terr *e)
{
    ktrace_meter *m = xcalloc(1, sizeof *m);
    m->cap_in = m->cap_taken = 1 << 15; /* a prefill step of a 7B model launches a few hundred kernels */
    m->inbox = xmalloc(sizeof *m->inbox * m->cap_in);
    m->taken = xmalloc(sizeof *m->taken * m->cap_taken);
    ktrace_ledger_init(&m->ledger);
    if (mtx_init(&m->lock, mtx_plain) != thrd_success) abort();
    if (ktrace_open(meter_record, m, e)) goto fail;
    if (ktrace_enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, e)) {
        ktrace_close();
        goto fail;
    }
    *out = m;
    return 0;
fail:
    mtx_destroy(&m->lock);
    ktrace_ledger_free(&m->ledger);
    free(m->inbox), free(m->taken);
    free(m);
    return -1;
}

/* cuptiGetTimestamp cannot fail once CUPTI is loaded (its one error is a NULL argument). */
static uint64_t cupti_now(void)
{
    uint64_t t = 0;
    kt.api->cuptiGetTimestamp(&t);
    return t;
}

void ktrace_meter_begin(ktrace_meter *m) { m->begin_ns = cupti_now(); }

void ktrace_meter_end(ktrace_meter *m)
{
    ktrace_ledger_window(&m->ledger, (ktrace_window){m->begin_ns, cupti_now()});
}

int ktrace_meter_settle(ktrace_meter *m, bool all, const ktrace_step **out, size_t *n, terr *e)
{
    *n = 0;
    if (all) {
        if (ktrace_flush(e)) return -1;
        ktrace_losses l = ktrace_take_losses(); /* waits for a hand-over in progress: only here */
        m->lost += (int64_t)(l.dropped + l.bad_buffers);
        mtx_lock(&m->lock);
    } else if (mtx_trylock(&m->lock) != thrd_success) {
        return 0; /* CUPTI's thread is handing records over: next time */
    }
    /* swap the inbox out, so that the lock is held for no copy */
    ktrace_span *in = m->inbox;
    size_t n_in = m->n_in, cap_in = m->cap_in;
    m->inbox = m->taken, m->cap_in = m->cap_taken, m->n_in = 0;
    m->taken = in, m->cap_taken = cap_in;
    m->lost += m->untimed, m->untimed = 0;
    mtx_unlock(&m->lock);
    ktrace_ledger_spans(&m->ledger, m->taken, n_in);
    *n = ktrace_ledger_settle(&m->ledger, all, KTRACE_SETTLE_LAG, KTRACE_SETTLE_MAX, out);
    return 0;
}

ktrace_counts ktrace_meter_counts(const ktrace_meter *m)
{
    ktrace_counts c = m->ledger.counts;
    c.lost = m->lost;
    return c;
}

void ktrace_meter_close(ktrace_meter *m)
{
    if (!m) return;
    ktrace_close();
    mtx_destroy(&m->lock);
    ktrace_ledger_free(&m->ledger);
    free(m->inbox), free(m->taken);
    free(m);
}

#else /* built without CUPTI's headers */

int ktrace_meter_open(ktrace_meter **out, terr *e)
{
    *out = NULL;
    return terr_set(e, "kernel trace: this tandem was built without CUPTI (the Makefile found no cupti.h under "
                       "CUDA_HOME): turn the kernel trace off (--no-kernel-trace)");
}

/* Never called: no meter opens. */
void ktrace_meter_begin(ktrace_meter *m) {}
void ktrace_meter_end(ktrace_meter *m) {}
int ktrace_meter_settle(ktrace_meter *m, bool all, const ktrace_step **out, size_t *n, terr *e)
{
    *n = 0;
    return terr_set(e, "kernel trace: built without CUPTI");
}
ktrace_counts ktrace_meter_counts(const ktrace_meter *m) { return (ktrace_counts){0}; }
void ktrace_meter_close(ktrace_meter *m) {}

#endif
