/* stats.c: see stats.h. */
#include "stats.h"

#include <assert.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* numpy's linear interpolation between a (rank lo) and b (rank lo + 1) at fraction t. */
static double lerp(double a, double b, double t)
{
    double d = b - a;
    return t >= 0.5 ? b - d * (1 - t) : a + d * t;
}

/* ---- samples ---- */

void samples_add(samples *s, double x)
{
    if (s->len == s->cap) grow_array((void **)&s->v, sizeof *s->v, &s->cap, s->len + 1);
    s->v[s->len++] = x;
    s->sorted = 0;
}

void samples_free(samples *s)
{
    free(s->v);
    *s = (samples){0};
}

double samples_mean(const samples *s) { return s->len ? gsl_stats_mean(s->v, 1, s->len) : 0; }

double samples_std(const samples *s)
{
    if (!s->len) return 0;
    return sqrt(gsl_stats_tss(s->v, 1, s->len) / (double)s->len);
}

double samples_percentile(samples *s, double q)
{
    if (!s->len) return 0;
    if (!s->sorted) {
        gsl_sort(s->v, 1, s->len);
        s->sorted = 1;
    }
    double h = (q / 100.0) * (double)(s->len - 1);
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= s->len) return s->v[s->len - 1];
    return lerp(s->v[lo], s->v[lo + 1], h - (double)lo);
}

/* ---- qhist ---- */

/* Keys: a value x (in units) is u = x / unit. u below QHIST_LINEAR keys by llround(u), one key
 * per unit; above, by the log bucket floor(ln(u / QHIST_LINEAR) / ln(1 + 1/QHIST_LINEAR)),
 * offset past the linear keys, so a bucket's width is 1/QHIST_LINEAR of its value and the two
 * grids meet at the same width. Counts sit in a dense array indexed by key, grown to the
 * largest key seen: a percentile is a walk in key order, no sort. */
#define QHIST_LINEAR 16384

static double log_step(void) { return log1p(1.0 / QHIST_LINEAR); }

static size_t key_of(double u)
{
    if (!(u > 0)) return 0; /* latencies are never negative; a -0 or rounding dust is 0 */
    if (u < QHIST_LINEAR - 0.5) return (size_t)llround(u);
    return QHIST_LINEAR + (size_t)floor(log(u / QHIST_LINEAR) / log_step());
}

void qhist_init(qhist *h, double unit)
{
    *h = (qhist){.unit = unit, .min = INFINITY, .max = -INFINITY};
}

void qhist_add(qhist *h, double x, uint64_t count)
{
    if (!count) return;
    assert(isfinite(x));
    size_t k = key_of(x / h->unit);
    if (k >= h->cap) {
        size_t old = h->cap;
        grow_array((void **)&h->count, sizeof *h->count, &h->cap, k + 1);
        memset(h->count + old, 0, (h->cap - old) * sizeof *h->count);
    }
    h->count[k] += count;
    h->n += count;
    h->sum += (long double)x * count;
    h->sum_sq += (long double)x * x * count;
    if (x < h->min) h->min = x;
    if (x > h->max) h->max = x;
}

void qhist_free(qhist *h)
{
    free(h->count);
    *h = (qhist){0};
}

double qhist_mean(const qhist *h) { return h->n ? (double)(h->sum / h->n) : 0; }

double qhist_std(const qhist *h)
{
    if (!h->n) return 0;
    long double m = h->sum / h->n, var = h->sum_sq / h->n - m * m;
    return var > 0 ? (double)sqrtl(var) : 0;
}

/* The value key k stands for: exact on the linear grid; above it, the bucket's geometric
 * middle clamped to the exact extremes, and the extremes themselves in the lowest and highest
 * buckets in use, so min (p0) and max (p100) are exact. */
static double key_value(const qhist *h, size_t k, size_t first, size_t last)
{
    if (k < QHIST_LINEAR) return (double)k * h->unit;
    if (k == last) return h->max;
    if (k == first) return h->min;
    double v = QHIST_LINEAR * exp(((double)(k - QHIST_LINEAR) + 0.5) * log_step()) * h->unit;
    return v < h->min ? h->min : v > h->max ? h->max : v;
}

double qhist_percentile(const qhist *h, double q)
{
    if (!h->n) return 0;
    size_t first = 0, last = h->cap - 1;
    while (!h->count[first]) first++;
    while (!h->count[last]) last--;
    double pos = (q / 100.0) * (double)(h->n - 1);
    uint64_t lo = (uint64_t)floor(pos);
    double a = NAN, b = NAN;
    uint64_t seen = 0;
    for (size_t k = first; k <= last && isnan(b); k++) {
        if (!h->count[k]) continue;
        seen += h->count[k];
        if (isnan(a) && lo < seen) a = key_value(h, k, first, last);
        if (lo + 1 < seen) b = key_value(h, k, first, last);
    }
    if (isnan(b)) return a; /* lo is the last rank */
    return lerp(a, b, pos - (double)lo);
}

/* ---- qruns ---- */

void qruns_grow(qruns *q) { grow_array((void **)&q->runs, sizeof *q->runs, &q->cap, q->n + 1); }

static int cmp_run(const void *a, const void *b)
{
    int64_t x = ((const qrun *)a)->value, y = ((const qrun *)b)->value;
    return (x > y) - (x < y);
}

void qruns_flush(qruns *q, qhist *h, double divisor)
{
    if (q->n > 1) qsort(q->runs, q->n, sizeof *q->runs, cmp_run);
    for (size_t i = 0, j; i < q->n; i = j) {
        uint64_t count = 0;
        for (j = i; j < q->n && q->runs[j].value == q->runs[i].value; j++) count += q->runs[j].count;
        qhist_add(h, (double)q->runs[i].value / divisor, count);
    }
    q->n = 0;
}

void qruns_free(qruns *q)
{
    free(q->runs);
    *q = (qruns){0};
}
