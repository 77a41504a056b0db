/*
 * trace_stats.h: what a request trace asks of a server, as numbers: one streaming pass over its
 * arrivals (trace_stats_add), then the summary (trace_stats_finish). `tandem trace stats`
 * (cli/trace_stats_cmd.c) prints them and adds what needs a model and a GPU: KV capacity and
 * suggested budgets.
 *
 * Memory: every request's prompt and output length (two int per request, 8 MB per million
 * requests), for exact percentiles (GSL sorts them and interpolates as numpy does); the
 * inter-arrival gaps as running moments (gsl_rstat), no array; the requests per bin (a growable
 * array, one long per bin, at most TRACE_STATS_MAX_BINS); Mooncake hash_ids (8 bytes per
 * block): the fraction of blocks that repeat an earlier one is 1 - distinct/total (each
 * distinct id has exactly one first occurrence), counted after sorting them.
 *
 * Conventions:
 *   - span = last arrival - first arrival; mean rate = requests / span.
 *   - standard deviations use the sample variance (N - 1), as GSL does, so the index of
 *     dispersion of Poisson counts has expectation exactly 1.
 *   - bins start at the first arrival; the last bin ends at the last arrival and is partial, so
 *     the index of dispersion uses the complete bins only; the rate series lists every bin.
 *   - "max in one second" counts whole seconds from the first arrival ([k, k+1) s), the figure
 *     SOURCES.md quotes (67 for Azure code); a sliding 1 s window can find more.
 */
#ifndef TANDEM_TRACE_STATS_H
#define TANDEM_TRACE_STATS_H

#include <gsl/gsl_histogram.h>
#include <gsl/gsl_rstat.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arrival.h"
#include "core/util.h"

/* A trace whose span makes more bins than this is refused (the counts array would not be
 * "a little memory"): 16 Mi bins, 128 MiB. */
#define TRACE_STATS_MAX_BINS ((size_t)1 << 24)

typedef struct length_summary {
    double mean, p50, p90, p99; /* tokens; percentiles interpolated like numpy's default */
    int min, max;
    gsl_histogram *hist;        /* log2 bins [2^k, 2^(k+1)) covering [min, max] */
} length_summary;

typedef struct trace_stats {
    /* ---- accumulated by trace_stats_add ---- */
    int64_t n;                   /* requests read */
    int64_t last_ns;             /* arrival of the last one (the first is at 0) */
    int *prompt, *output;        /* (n) tokens, in trace order */
    size_t len_cap;
    gsl_rstat_workspace *gaps_s; /* inter-arrival gaps in seconds */
    int64_t zero_gaps;           /* arrivals at the same instant as the one before */
    double bin_seconds;
    int64_t bin_ns;
    long *bin_count;             /* (num_bins) requests in [i, i+1) x bin_ns */
    size_t num_bins, bin_cap;
    int64_t sec, sec_count;      /* the whole second being counted, and its requests so far */
    int64_t max_sec_count, max_sec;
    unsigned long *hash;         /* (num_hash) every Mooncake hash_id (sorted by finish) */
    size_t num_hash, hash_cap;

    /* ---- summarised by trace_stats_finish ---- */
    double span_s, mean_rate;           /* NAN when the span is 0 */
    double peak_bin_rate, peak_bin_start_s;
    double gap_mean_s, gap_sd_s, gap_cv, gamma_shape; /* NAN with fewer than 2 gaps */
    double zero_gap_fraction;           /* of the gaps, those of 0 (NAN with no gap) */
    int64_t complete_bins;
    double iod;                         /* NAN with fewer than 2 complete bins */
    int64_t max_in_second;
    double max_second_start_s;
    char verdict[256];                  /* the two burstiness numbers in words */
    length_summary prompt_len, output_len, total_len;
    bool has_hashes;
    int64_t hash_blocks, distinct_hashes;
    double repeat_fraction;
} trace_stats;

/* bin_seconds: width of the rate series' bins, in [0.001, 1e9] (checked by the caller). */
void trace_stats_init(trace_stats *s, double bin_seconds);
/* Adds one arrival; -1 with e naming --bin-seconds when the bins would outgrow
 * TRACE_STATS_MAX_BINS. */
int trace_stats_add(trace_stats *s, const arrival *r, terr *e);
/* Fills the summary; needs at least one request. prompt and output stay in trace order. */
void trace_stats_finish(trace_stats *s);
void trace_stats_free(trace_stats *s);

#endif
