/*
 * run_results.h: a finished serving run read back from its files, for `tandem compare`.
 *
 * Two sources give the same per-request rows:
 *   - a tandem run directory (`tandem sim|run --out DIR`): requests.csv, summary.json (with the
 *     run's options under "config") and, when it was written, steps.csv;
 *   - a `vllm bench serve` result saved with --save-result --save-detailed: one JSON object whose
 *     per-request arrays (input_lens, output_lens, ttfts, itls, errors, and in newer versions
 *     latencies) are indexed like the benchmark's dataset, so index i is trace row i.
 * A third layout is a directory of repeats, DIR/1, DIR/2, ... (what `tandem run --repeat N`
 * writes), each a run directory: run_results_find lists them.
 *
 * Key decision: every latency is read per request and summarised here with core/stats.h
 * (numpy's percentiles), never copied from the other tool's summary, so both sides of a
 * comparison are computed by the same code. Only what is not per request comes from the
 * summary: throughput, preemptions, mean batch size, and tandem's inter-token latencies (its
 * requests.csv has no per-token rows).
 */
#ifndef TANDEM_RUN_RESULTS_H
#define TANDEM_RUN_RESULTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/stats.h"
#include "core/util.h"

typedef enum run_source { RUN_TANDEM, RUN_VLLM } run_source;

typedef struct run_request {
    double arrival_s;      /* NAN when the source does not record it (vLLM) */
    int32_t prompt_tokens;
    int32_t output_tokens; /* generated; 0 for a request that failed or was rejected */
    int32_t preemptions;   /* -1 when not recorded (vLLM) */
    bool finished;         /* completed, as vLLM counts them */
    double ttft_ms, tpot_ms, e2el_ms, queue_ms; /* NAN when undefined or not recorded */
} run_request;

typedef struct run_results {
    run_source source;
    char *path;             /* the directory or file, for messages */
    run_request *req;       /* (num_requests) indexed by request id (trace row) */
    int64_t num_requests;
    json_t *summary;        /* summary.json, or the whole vLLM result (owned) */
    json_t *config;         /* summary's "config" (borrowed); NULL for vLLM */
    int32_t max_model_len;  /* config.resolved.max_model_len; 0 when unknown (vLLM) */
    samples itl_ms;         /* vLLM: every inter-token gap of completed requests; tandem: empty */
    char *steps_path;       /* DIR/steps.csv when present, else NULL */
} run_results;

/* What path holds: a vLLM result file or a run directory (*num_runs = 1, (*runs)[0] = path), or
 * a directory of repeats (DIR/1 ... DIR/N, each with a summary.json). *repeats tells which.
 * Errors name the path and what was looked for. The caller frees each path and the array
 * (nothing is left to free on an error). */
int run_results_find(const char *path, char ***runs, int *num_runs, bool *repeats, terr *e);
/* Reads a run directory or a vLLM result file. Errors are "FILE[:LINE]: what is wrong". */
int run_results_load(run_results *r, const char *path, terr *e);
void run_results_free(run_results *r);

/* A number of summary.json (or the vLLM result) by key; NAN when absent or not a number. */
double run_results_number(const run_results *r, const char *key);
/* config[key] as text (strings as they are, numbers, true/false); "" when absent or null. */
void run_results_config_text(const run_results *r, const char *key, char *buf, size_t size);

#endif
