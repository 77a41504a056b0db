/*
 * stats.h: the statistics vLLM's benchmark reports (mean, median, std, percentiles), over two
 * kinds of sample sets.
 *
 * Percentiles follow numpy's default (linear interpolation between closest ranks) and std is
 * the population standard deviation (numpy's ddof=0), so the numbers match `vllm bench serve`
 * on the same latencies. Empty sets give 0, as vLLM's `np.mean(x or 0)` does.
 *
 * samples: one double per sample (per-request latencies: a million requests cost 8 MB each).
 * qhist:   a histogram of values quantised to 1 us, for the inter-token latencies, of which a
 *          long run has billions. Memory grows with the number of distinct microsecond values,
 *          not with the number of samples. Mean and std are exact (kept as sums of the exact
 *          values); percentiles are exact on the microsecond-rounded values, which is the
 *          resolution tandem writes everywhere.
 */
#ifndef TANDEM_STATS_H
#define TANDEM_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct samples {
    double *v; /* (len) */
    size_t len, cap;
    int sorted;
} samples;

void samples_add(samples *s, double x);
void samples_free(samples *s);
double samples_mean(const samples *s);
double samples_std(const samples *s);
/* q in [0, 100]; sorts s in place once. */
double samples_percentile(samples *s, double q);

typedef struct qhist {
    int64_t *key;     /* (cap) value in us, or INT64_MIN for an empty slot */
    uint64_t *count;  /* (cap) */
    size_t cap, used;
    uint64_t n;       /* samples */
    long double sum, sum_sq; /* of the exact values */
    double unit;      /* value per key step (e.g. 1e-3 for ms values on a us grid) */
} qhist;

/* unit: the quantum, in the values' unit (1e-3 for milliseconds quantised to microseconds). */
void qhist_init(qhist *h, double unit);
void qhist_add(qhist *h, double x, uint64_t count);
void qhist_free(qhist *h);
double qhist_mean(const qhist *h);
double qhist_std(const qhist *h);
double qhist_percentile(const qhist *h, double q);

#endif
