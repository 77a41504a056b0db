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

int64_t ktrace_spans_measure(ktrace_span *spans, size_t n, int64_t *busy_ns)
{
    for (size_t i = 1; i < n; i++) /* one stream's kernels mostly arrive in start order */
        if (spans[i].start_ns < spans[i - 1].start_ns) {
            qsort(spans, n, sizeof *spans, cmp_start);
            break;
        }
    int64_t sum = 0, busy = 0;
    uint64_t reach = 0; /* end of the union so far */
    for (size_t i = 0; i < n; i++) {
        const ktrace_span *s = &spans[i];
        sum += (int64_t)(s->end_ns - s->start_ns);
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

struct ktrace_meter {
    mtx_t lock;         /* meter_record runs on whichever thread hands a buffer over */
    ktrace_span *spans; /* (cap) kernels since the last take; grown by doubling, kept */
    size_t n, cap;
    int64_t untimed;    /* records without a start or end */
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
        if (m->n == m->cap) {
            m->cap *= 2;
            m->spans = xrealloc(m->spans, sizeof *m->spans * m->cap);
        }
        m->spans[m->n++] = (ktrace_span){k->start, k->end};
    }
    mtx_unlock(&m->lock);
}

int ktrace_meter_open(ktrace_meter **out, terr *e)
{
    ktrace_meter *m = xcalloc(1, sizeof *m);
    m->cap = 4096; /* a prefill step of a 7B model launches a few hundred kernels */
    m->spans = xmalloc(sizeof *m->spans * m->cap);
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
    free(m->spans);
    free(m);
    return -1;
}

int ktrace_meter_take(ktrace_meter *m, ktrace_step *out, terr *e)
{
    if (ktrace_flush(e)) return -1;
    ktrace_losses l = ktrace_take_losses();
    mtx_lock(&m->lock);
    out->kernel_ns = ktrace_spans_measure(m->spans, m->n, &out->busy_ns);
    out->kernels = (int32_t)m->n;
    out->lost = m->untimed + (int64_t)(l.dropped + l.bad_buffers);
    m->n = 0, m->untimed = 0;
    mtx_unlock(&m->lock);
    return 0;
}

void ktrace_meter_close(ktrace_meter *m)
{
    if (!m) return;
    ktrace_close();
    mtx_destroy(&m->lock);
    free(m->spans);
    free(m);
}

#else /* built without CUPTI's headers */

int ktrace_meter_open(ktrace_meter **out, terr *e)
{
    *out = NULL;
    return terr_set(e, "kernel trace: this tandem was built without CUPTI (the Makefile found no cupti.h under "
                       "CUDA_HOME): turn the kernel trace off (--no-kernel-trace)");
}

int ktrace_meter_take(ktrace_meter *m, ktrace_step *out, terr *e)
{
    return terr_set(e, "kernel trace: built without CUPTI");
}

void ktrace_meter_close(ktrace_meter *m) {}

#endif
