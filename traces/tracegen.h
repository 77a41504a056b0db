/*
 * tracegen.h: the synthetic trace generator behind `tandem trace gen`, also usable directly as
 * an arrival source (no file in between).
 *
 * Arrivals follow vLLM's benchmark (benchmark_serving.py): the first request arrives at t = 0,
 * then inter-arrival gaps ~ Gamma(shape = B, scale = 1/(rate*B)), so the mean rate is `rate`
 * and the gaps' coefficient of variation is 1/sqrt(B) (B = 1: Poisson; B < 1: burstier).
 * rate = INFINITY puts every request at t = 0. Lengths are fixed, uniform on
 * [floor(len*(1-F)), floor(len*(1+F))] as vLLM's random dataset, lognormal with the given mean,
 * or pairs drawn uniformly with replacement from a lengths file (ShareGPT / arXiv style CSV).
 *
 * Determinism: one gsl_rng (mt19937) seeded with `seed`. For every request the draws happen in a
 * fixed order: gap (not for the first request, not at infinite rate), prompt length, output
 * length (one draw for a lengths-file row), priority class, client. Same options, same seed:
 * the same arrivals, byte for byte in the CSV. (GSL's mt19937 maps seed 0 to its default
 * seed 4357, so seeds 0 and 4357 give the same stream.)
 *
 * Time is an integer ns sum of the drawn gaps (no float clock drift); each arrival is rounded
 * to the microsecond, the resolution of the CSV's arrival_s, so the source and a replay of the
 * CSV it writes yield identical arrivals.
 */
#ifndef TANDEM_TRACEGEN_H
#define TANDEM_TRACEGEN_H

#include <stdint.h>
#include <stdio.h>

#include "core/arrival.h"
#include "core/util.h"

#define TRACEGEN_MAX_PRIORITY_CLASSES 16

typedef enum tracegen_length_dist {
    TRACEGEN_LEN_FIXED,
    TRACEGEN_LEN_UNIFORM,
    TRACEGEN_LEN_LOGNORMAL,
    TRACEGEN_LEN_FILE,
} tracegen_length_dist;

typedef struct tracegen_options {
    int64_t num_requests;            /* >= 1 */
    double rate_per_s;               /* mean arrival rate (req/s); INFINITY: all at t = 0 */
    double burstiness;               /* Gamma shape B of the gaps, in [1e-3, 1e3]; 1 = Poisson */
    int32_t input_len;               /* tokens: fixed value, uniform centre or lognormal mean */
    int32_t output_len;              /* tokens, likewise */
    tracegen_length_dist length_dist;
    double range_ratio;              /* uniform: 0 <= F < 1 */
    double lognormal_sigma;          /* lognormal: sigma of ln(length), >= 0 */
    const char *lengths_file;        /* file: CSV with num_prefill_tokens,num_decode_tokens */
    int32_t max_len;                 /* every length is clamped to [1, max_len] */
    int num_priority_classes;        /* 0: no priority column */
    double priority_fraction[TRACEGEN_MAX_PRIORITY_CLASSES]; /* (num_priority_classes), sum 1 */
    int32_t num_clients;             /* 0: no client column; else ids uniform in [0, N) */
    uint64_t seed;
} tracegen_options;

/* The CLI's defaults: 1000 requests, 1 req/s Poisson, fixed 1024/128 tokens, seed 0. */
tracegen_options tracegen_options_default(void);
const char *tracegen_length_dist_name(tracegen_length_dist d);
/* "fixed", "uniform", ... to the enum; 0, or -1 if the name is unknown. */
int tracegen_length_dist_parse(const char *name, tracegen_length_dist *out);

typedef struct tracegen tracegen;

/* Checks the options (messages name the CLI flag: "--rate must be > 0") and loads the lengths
 * file ("FILE:LINE: ..."). Returns 0, or -1 with e set. */
int tracegen_open(tracegen **out, const tracegen_options *o, terr *e);
/* The generator as an arrival source: num_requests arrivals, then 0. */
arrival_source tracegen_source(tracegen *g);
/* Generates every request and writes them as tandem CSV (header
 * arrival_s,prompt_tokens,output_tokens[,priority][,client]; arrival_s with 6 decimals).
 * Returns 0, or -1 with e set if writing fails. */
int tracegen_write_csv(tracegen *g, FILE *f, terr *e);
/* Rows loaded from the lengths file (0 for other distributions). */
size_t tracegen_num_lengths(const tracegen *g);
void tracegen_close(tracegen *g);

#endif
