/* trace_stats.c: see trace_stats.h. */
#include "traces/trace_stats.h"

#include <assert.h>
#include <gsl/gsl_sort_int.h>
#include <gsl/gsl_sort_ulong.h>
#include <gsl/gsl_statistics_int.h>
#include <gsl/gsl_statistics_long.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Mooncake hash ids are sorted as unsigned long by GSL. */
_Static_assert(sizeof(unsigned long) == sizeof(uint64_t), "hash ids are sorted as unsigned long");

void trace_stats_init(trace_stats *s, double bin_seconds)
{
    *s = (trace_stats){0};
    s->gaps_s = gsl_rstat_alloc();
    s->bin_seconds = bin_seconds;
    s->bin_ns = llround(bin_seconds * NS_PER_S);
    s->sec = -1;
}

void trace_stats_free(trace_stats *a)
{
    free(a->prompt);
    free(a->output);
    free(a->bin_count);
    free(a->hash);
    if (a->gaps_s) gsl_rstat_free(a->gaps_s);
    gsl_histogram_free(a->prompt_len.hist);
    gsl_histogram_free(a->output_len.hist);
    gsl_histogram_free(a->total_len.hist);
}

/* Adds one arrival; -1 with e naming --bin-seconds when the bins would outgrow TRACE_STATS_MAX_BINS. */
int trace_stats_add(trace_stats *a, const arrival *r, terr *e)
{
    if (a->n > 0) {
        gsl_rstat_add((double)(r->arrival_ns - a->last_ns) / NS_PER_S, a->gaps_s);
        a->zero_gaps += r->arrival_ns == a->last_ns;
    }
    a->last_ns = r->arrival_ns;

    grow_array((void **)&a->prompt, sizeof *a->prompt, &a->len_cap, (size_t)a->n + 1);
    size_t cap = a->len_cap; /* both arrays share one capacity */
    a->output = xrealloc(a->output, cap * sizeof *a->output);
    a->prompt[a->n] = r->prompt_tokens;
    a->output[a->n] = r->output_tokens;
    a->n++;

    size_t bin = (size_t)(r->arrival_ns / a->bin_ns);
    if (bin >= TRACE_STATS_MAX_BINS)
        return terr_set(e, "--bin-seconds: %g s bins over this trace (already %.1f s long) make "
                        "more than %zu bins; use wider bins",
                        a->bin_seconds, (double)r->arrival_ns / NS_PER_S, TRACE_STATS_MAX_BINS);
    if (bin >= a->num_bins) {
        grow_array((void **)&a->bin_count, sizeof *a->bin_count, &a->bin_cap, bin + 1);
        memset(a->bin_count + a->num_bins, 0, (bin + 1 - a->num_bins) * sizeof *a->bin_count);
        a->num_bins = bin + 1;
    }
    a->bin_count[bin]++;

    int64_t sec = r->arrival_ns / NS_PER_S;
    if (sec != a->sec) a->sec = sec, a->sec_count = 0;
    if (++a->sec_count > a->max_sec_count) a->max_sec_count = a->sec_count, a->max_sec = sec;

    if (r->num_hashes > 0) {
        grow_array((void **)&a->hash, sizeof *a->hash, &a->hash_cap, a->num_hash + (size_t)r->num_hashes);
        for (int32_t i = 0; i < r->num_hashes; i++) a->hash[a->num_hash++] = r->hashes[i];
    }
    return 0;
}

/* Sorts v in place and summarises it. */
static void summarise_lengths(int *v, size_t n, length_summary *s)
{
    assert(n > 0);
    gsl_sort_int(v, 1, n);
    s->mean = gsl_stats_int_mean(v, 1, n);
    s->p50 = gsl_stats_int_quantile_from_sorted_data(v, 1, n, 0.50);
    s->p90 = gsl_stats_int_quantile_from_sorted_data(v, 1, n, 0.90);
    s->p99 = gsl_stats_int_quantile_from_sorted_data(v, 1, n, 0.99);
    s->min = v[0];
    s->max = v[n - 1];
    int lo = (int)floor(log2(s->min)), hi = (int)floor(log2(s->max)) + 1;
    size_t nbins = (size_t)(hi - lo);
    double *ranges = xmalloc((nbins + 1) * sizeof *ranges);
    for (size_t i = 0; i <= nbins; i++) ranges[i] = ldexp(1.0, lo + (int)i);
    s->hist = gsl_histogram_alloc(nbins);
    gsl_histogram_set_ranges(s->hist, ranges, nbins + 1);
    free(ranges);
    for (size_t i = 0; i < n; i++) gsl_histogram_increment(s->hist, v[i]);
}

void trace_stats_finish(trace_stats *a)
{
    trace_stats *r = a;
    assert(a->n > 0);
    r->span_s = (double)a->last_ns / NS_PER_S;
    r->mean_rate = a->last_ns > 0 ? (double)a->n / r->span_s : NAN;

    size_t peak = 0;
    for (size_t i = 1; i < a->num_bins; i++)
        if (a->bin_count[i] > a->bin_count[peak]) peak = i;
    r->peak_bin_rate = (double)a->bin_count[peak] / a->bin_seconds;
    r->peak_bin_start_s = (double)peak * (double)a->bin_ns / NS_PER_S;

    size_t ngaps = gsl_rstat_n(a->gaps_s);
    r->gap_mean_s = ngaps ? gsl_rstat_mean(a->gaps_s) : NAN;
    r->gap_sd_s = ngaps >= 2 ? gsl_rstat_sd(a->gaps_s) : NAN;
    r->zero_gap_fraction = ngaps ? (double)a->zero_gaps / (double)ngaps : NAN;
    r->gap_cv = ngaps >= 2 && r->gap_mean_s > 0 ? r->gap_sd_s / r->gap_mean_s : NAN;
    r->gamma_shape = r->gap_cv > 0 ? 1.0 / (r->gap_cv * r->gap_cv) : NAN;

    r->complete_bins = a->last_ns / a->bin_ns;
    if (r->complete_bins >= 2) {
        size_t k = (size_t)r->complete_bins;
        double mean = gsl_stats_long_mean(a->bin_count, 1, k);
        r->iod = gsl_stats_long_variance_m(a->bin_count, 1, k, mean) / mean;
    } else {
        r->iod = NAN;
    }
    r->max_in_second = a->max_sec_count;
    r->max_second_start_s = (double)a->max_sec;

    /* a one-line reading of the two burstiness numbers */
    char cvs[128] = "", iods[128] = "";
    double cv = r->gap_cv, d = r->iod;
    if (ngaps >= 2 && r->gap_mean_s == 0) snprintf(cvs, sizeof cvs, "every request arrives at the same instant");
    else if (isnan(cv)) snprintf(cvs, sizeof cvs, "too few arrivals for an inter-arrival CV");
    else if (cv < 0.8) snprintf(cvs, sizeof cvs, "more regular than Poisson: CV %.3g < 1", cv);
    else if (cv <= 1.25) snprintf(cvs, sizeof cvs, "close to Poisson between arrivals: CV %.3g ≈ 1", cv);
    else if (cv <= 3) snprintf(cvs, sizeof cvs, "bursty: CV %.3g > 1", cv);
    else snprintf(cvs, sizeof cvs, "bursty: CV %.3g ≫ 1", cv);
    char per[32];
    if (a->bin_seconds == 60) snprintf(per, sizeof per, "per-minute");
    else snprintf(per, sizeof per, "per-%g s", a->bin_seconds);
    if (isnan(d)) snprintf(iods, sizeof iods, "; too few complete %g s bins for a dispersion", a->bin_seconds);
    else if (d < 2) snprintf(iods, sizeof iods, "; steady %s rate (dispersion %.3g ≈ 1)", per, d);
    else if (d < 10) snprintf(iods, sizeof iods, "; the %s rate varies more than Poisson (dispersion %.3g > 1)", per, d);
    else snprintf(iods, sizeof iods, "; the %s rate swings widely (dispersion %.3g ≫ 1)", per, d);
    snprintf(r->verdict, sizeof r->verdict, "%s%s", cvs, iods);

    if (a->num_hash > 0) {
        r->has_hashes = true;
        gsl_sort_ulong(a->hash, 1, a->num_hash);
        size_t distinct = 1;
        for (size_t i = 1; i < a->num_hash; i++) distinct += a->hash[i] != a->hash[i - 1];
        r->hash_blocks = (int64_t)a->num_hash;
        r->distinct_hashes = (int64_t)distinct;
        r->repeat_fraction = 1.0 - (double)distinct / (double)a->num_hash;
    }

    /* the lengths: summarised from copies, so the pairs stay in trace order */
    size_t n = (size_t)a->n;
    int *tmp = xmalloc(n * sizeof *tmp);
    for (size_t i = 0; i < n; i++) tmp[i] = a->prompt[i] + a->output[i];
    summarise_lengths(tmp, n, &r->total_len);
    memcpy(tmp, a->prompt, n * sizeof *tmp);
    summarise_lengths(tmp, n, &r->prompt_len);
    memcpy(tmp, a->output, n * sizeof *tmp);
    summarise_lengths(tmp, n, &r->output_len);
    free(tmp);
}
