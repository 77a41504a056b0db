/* stats.c: see stats.h. */
#include "stats.h"

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

void qhist_init(qhist *h, double unit)
{
    *h = (qhist){.unit = unit};
}

static size_t slot(const qhist *h, int64_t k)
{
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ULL;
    return (size_t)(x >> 20) & (h->cap - 1);
}

static void put(qhist *h, int64_t k, uint64_t c)
{
    size_t i = slot(h, k);
    while (h->key[i] != INT64_MIN && h->key[i] != k) i = (i + 1) & (h->cap - 1);
    if (h->key[i] == INT64_MIN) {
        h->key[i] = k;
        h->count[i] = 0;
        h->used++;
    }
    h->count[i] += c;
}

void qhist_add(qhist *h, double x, uint64_t count)
{
    if (!count) return;
    if (2 * (h->used + 1) > h->cap) { /* keep at most half full */
        int64_t *ok = h->key;
        uint64_t *oc = h->count;
        size_t old = h->cap;
        h->cap = old ? 2 * old : 1024;
        h->key = xmalloc(h->cap * sizeof *h->key);
        h->count = xmalloc(h->cap * sizeof *h->count);
        for (size_t i = 0; i < h->cap; i++) h->key[i] = INT64_MIN;
        h->used = 0;
        for (size_t i = 0; i < old; i++)
            if (ok[i] != INT64_MIN) put(h, ok[i], oc[i]);
        free(ok);
        free(oc);
    }
    put(h, llround(x / h->unit), count);
    h->n += count;
    h->sum += (long double)x * count;
    h->sum_sq += (long double)x * x * count;
}

void qhist_free(qhist *h)
{
    free(h->key);
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

typedef struct kc {
    int64_t key;
    uint64_t count;
} kc;

static int cmp_kc(const void *a, const void *b)
{
    int64_t x = ((const kc *)a)->key, y = ((const kc *)b)->key;
    return (x > y) - (x < y);
}

double qhist_percentile(const qhist *h, double q)
{
    if (!h->n) return 0;
    kc *e = xmalloc(h->used * sizeof *e);
    size_t n = 0;
    for (size_t i = 0; i < h->cap; i++)
        if (h->key[i] != INT64_MIN) e[n++] = (kc){h->key[i], h->count[i]};
    qsort(e, n, sizeof *e, cmp_kc);
    double pos = (q / 100.0) * (double)(h->n - 1);
    uint64_t lo = (uint64_t)floor(pos);
    double a = NAN, b = NAN;
    uint64_t seen = 0;
    for (size_t i = 0; i < n && isnan(b); i++) {
        seen += e[i].count;
        if (isnan(a) && lo < seen) a = (double)e[i].key * h->unit;
        if (lo + 1 < seen) b = (double)e[i].key * h->unit;
    }
    free(e);
    if (isnan(b)) return a; /* lo is the last rank */
    return lerp(a, b, pos - (double)lo);
}
