/*
 * stats.h: the statistics vLLM's benchmark reports (mean, median, std, percentiles), over two
 * kinds of sample sets.
 *
 * Percentiles follow numpy's default (linear interpolation between closest ranks) and std is
 * the population standard deviation (numpy's ddof=0), so the numbers match `vllm bench serve`
 * on the same latencies. Empty sets give 0, as vLLM's `np.mean(x or 0)` does.
 *
 * samples: one double per sample (8 bytes each; what `compare` and `profile` use on sets they
 *          read whole anyway).
 * qhist:   a histogram of bounded size, for every latency of a run (per request and per token:
 *          a long run has billions). Values are quantised to a unit (1 us for latencies in ms)
 *          below 16,384 units, and to log buckets of relative width 1/16,384 (0.006%) above:
 *          16 k keys plus 16 k per factor e of range, 8 bytes each, so 2.2 MB for latencies up
 *          to a day and 3.7 MB at most for any int64 count of nanoseconds, however many
 *          samples. Mean, std, min and max are exact (kept from the exact values);
 *          percentiles are exact on the unit-rounded values below 16,384 units (16 ms for
 *          latencies on a us grid) and within 0.003% above. Values must be finite and >= 0.
 * qruns:   a batch of integer samples gathered as (value, count) runs and handed to a qhist in
 *          ascending order of value, equal values as one add: what sorting the batch and
 *          adding each distinct value with its count gives, bit for bit (the qhist's long double
 *          sums see the same adds in the same order), without sorting every sample. A serving
 *          step's inter-token gaps are mostly one value (the requests that decoded last step
 *          share their last token's time), so a step of 256 gaps is one or a few runs.
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
    uint64_t *count;  /* (cap) samples per key (stats.c: key_of), cap grown to the largest key */
    size_t cap;
    uint64_t n;       /* samples */
    long double sum, sum_sq; /* of the exact values */
    double min, max;  /* exact */
    double unit;      /* value per key step on the linear grid (1e-3 for ms values on a us grid) */
} qhist;

/* unit: the quantum, in the values' unit (1e-3 for milliseconds quantised to microseconds).
 * Values must be finite and >= 0. */
void qhist_init(qhist *h, double unit);
void qhist_add(qhist *h, double x, uint64_t count);
void qhist_free(qhist *h);
double qhist_mean(const qhist *h);
double qhist_std(const qhist *h);
double qhist_percentile(const qhist *h, double q);

typedef struct qrun {
    int64_t value;
    uint64_t count;
} qrun;

typedef struct qruns {
    qrun *runs; /* (n) in the order they started; a value may repeat in runs not adjacent */
    size_t n, cap;
} qruns;

void qruns_grow(qruns *q); /* qruns_add's slow path: room for one more run */

/* Counts one sample: joins the last run if it has the same value, else starts a run. */
static inline void qruns_add(qruns *q, int64_t v)
{
    if (q->n && q->runs[q->n - 1].value == v) {
        q->runs[q->n - 1].count++;
        return;
    }
    if (q->n == q->cap) qruns_grow(q);
    q->runs[q->n++] = (qrun){v, 1};
}

/* Adds the runs to h in ascending value, each distinct value once as value / divisor with its
 * total count, and empties q (its storage is kept for the next batch). */
void qruns_flush(qruns *q, qhist *h, double divisor);
void qruns_free(qruns *q);

#endif
