/* stats.c: see stats.h. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>

#include "util.h"

void ws_add(wsamples *s, double value, uint64_t weight)
{
    if (weight == 0) return;
    grow_array((void **)&s->items, sizeof *s->items, &s->cap, s->len + 1);
    s->items[s->len++] = (wsample){value, weight};
    s->total_weight += weight;
    s->sorted = 0;
}

void ws_free(wsamples *s)
{
    free(s->items);
    *s = (wsamples){0};
}

double ws_mean(const wsamples *s)
{
    if (!s->total_weight) return 0;
    long double sum = 0;
    for (size_t i = 0; i < s->len; i++) sum += (long double)s->items[i].value * s->items[i].weight;
    return (double)(sum / s->total_weight);
}

double ws_std(const wsamples *s)
{
    if (!s->total_weight) return 0;
    long double mean = ws_mean(s), acc = 0;
    for (size_t i = 0; i < s->len; i++) {
        long double d = s->items[i].value - mean;
        acc += d * d * s->items[i].weight;
    }
    return (double)sqrtl(acc / s->total_weight);
}

static int cmp_value(const void *a, const void *b)
{
    double x = ((const wsample *)a)->value, y = ((const wsample *)b)->value;
    return (x > y) - (x < y);
}

/* Value at 0-based rank k of the expanded, sorted multiset. */
static double at_rank(const wsamples *s, uint64_t k)
{
    uint64_t seen = 0;
    for (size_t i = 0; i < s->len; i++) {
        seen += s->items[i].weight;
        if (k < seen) return s->items[i].value;
    }
    return s->items[s->len - 1].value;
}

double ws_percentile(wsamples *s, double q)
{
    if (!s->total_weight) return 0;
    if (!s->sorted) {
        qsort(s->items, s->len, sizeof *s->items, cmp_value);
        s->sorted = 1;
    }
    /* numpy: virtual index (q/100)(n-1), then its two-sided lerp */
    double h = (q / 100.0) * (double)(s->total_weight - 1);
    uint64_t lo = (uint64_t)floor(h);
    double t = h - (double)lo, a = at_rank(s, lo);
    if (t == 0 || lo + 1 >= s->total_weight) return a;
    double b = at_rank(s, lo + 1), d = b - a;
    return t >= 0.5 ? b - d * (1 - t) : a + d * t;
}
