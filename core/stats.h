/*
 * stats.h: a multiset of samples with weights, and the statistics vLLM's benchmark reports.
 *
 * Percentiles follow numpy's default (linear interpolation between closest ranks) over the
 * multiset expanded by weight; std is the population standard deviation (numpy's ddof=0), so
 * the numbers match `vllm bench serve` on the same latencies. Weights let one entry stand for
 * many equal samples: in a simulated step every decoding request sees the same inter-token
 * latency, so the ITL multiset of a million-request run stays small.
 */
#ifndef TANDEM_STATS_H
#define TANDEM_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct wsample {
    double value;
    uint64_t weight;
} wsample;

typedef struct wsamples {
    wsample *items; /* (len) */
    size_t len, cap;
    uint64_t total_weight;
    int sorted;
} wsamples;

void ws_add(wsamples *s, double value, uint64_t weight);
void ws_free(wsamples *s);
double ws_mean(const wsamples *s);      /* 0 when empty, as vLLM's `np.mean(x or 0)` */
double ws_std(const wsamples *s);       /* population std; 0 when empty */
/* q in [0, 100]; sorts s in place (once). 0 when empty. */
double ws_percentile(wsamples *s, double q);

#endif
