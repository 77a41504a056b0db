/*
 * compare.h: how close a simulated run is to a measured one (`tandem compare`, issue 19).
 *
 * Three parts, each usable alone:
 *   compare_check    refuses two runs that did not serve the same requests under the same trace
 *                    settings, naming the first difference;
 *   compare_metrics  the request-level metrics a run is judged on (output throughput, latency
 *                    percentiles, preemptions, batch size), computed the same way for any run;
 *   compare_steps    re-predicts every measured step from its shape (steps.csv's columns, see
 *                    core/batch.h's step_shape) with the cost model the simulated run used, and
 *                    summarises the relative errors per step class.
 *
 * Relative errors are signed, (simulated - measured) / measured: positive means the simulator
 * is slow (pessimistic). Step times are compared on the microsecond grid steps.csv is written
 * on, so a simulated run re-predicted by its own cost model has exactly zero error.
 */
#ifndef TANDEM_COMPARE_H
#define TANDEM_COMPARE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/run_results.h"
#include "core/executor.h"

typedef struct compare_metric {
    const char *key;   /* summary.json's (and vLLM's) name: "output_throughput", "p99_ttft_ms" */
    const char *label; /* for the terminal table: "TTFT p99" */
    const char *unit;  /* "ms", "tok/s", ... ("" for counts) */
} compare_metric;

#define COMPARE_NUM_METRICS 23
extern const compare_metric compare_metric_defs[COMPARE_NUM_METRICS];

/* v[i]: metric i of compare_metric_defs for run r; NAN where r does not record it (a vLLM
 * result has no server-side queueing, preemptions or batch sizes). Latency percentiles come
 * from r's completed requests (numpy's percentiles, core/stats.h); inter-token latencies from
 * summary.json for a tandem run (requests.csv has no per-token rows). */
void compare_metrics(run_results *r, double v[COMPARE_NUM_METRICS]);

/* 0 when measured and simulated ran the same requests under the same trace settings; else -1
 * with e naming the first difference ("request 17: prompt 512 in MEASURED, 511 in SIMULATED",
 * "max-requests: 8 in MEASURED, 0 in SIMULATED"). Refused: another request count, prompt length,
 * arrival (tandem runs only) or output length (unless the shorter was cut by max_model_len),
 * trace, time-scale, max-requests or model. Differences that are allowed but change what is
 * compared (another policy or budget, requests completed on one side only) are appended to
 * notes as strings. */
int compare_check(const run_results *measured, const run_results *simulated, json_t *notes, terr *e);

typedef enum step_class {
    STEP_PREFILL,          /* prefill chunks only */
    STEP_DECODE_1,         /* decodes only, binned by how many */
    STEP_DECODE_2_8,
    STEP_DECODE_9_32,
    STEP_DECODE_33_128,
    STEP_DECODE_129_UP,
    STEP_MIXED,            /* prefill chunks and decodes */
    STEP_OTHER,            /* no sequence (swaps only) */
    STEP_ALL,              /* every step */
    STEP_NUM_CLASSES
} step_class;

extern const char *const step_class_names[STEP_NUM_CLASSES];  /* "prefill", "decode_2-8", ... */
extern const char *const step_class_labels[STEP_NUM_CLASSES]; /* "prefill", "decode 2-8", ... */

typedef struct step_class_error {
    int64_t count;                 /* steps with a measured time > 0 */
    double median_abs, p90_abs;    /* of |predicted - measured| / measured */
    double median_signed;          /* of (predicted - measured) / measured */
    double total_measured_ms, total_predicted_ms;
    double total_bias;             /* total predicted / total measured - 1 */
} step_class_error;

/* Kernel time by kind: the measured run's (steps.csv's kernel_KIND_us and kernel_gap_us, which
 * `tandem run --kernel-trace` writes) against the cost model's parts (its explain: the
 * roofline's GEMMs, attention, element-wise work, sampler, and launch and step overhead as the
 * gap), summed over the steps that ran no fused kernel (the streamed batch-1 decode does a
 * layer's GEMMs and attention in one kernel, which no part matches). Index KERNEL_NUM_KINDS is
 * the gap. */
typedef struct kind_errors {
    bool have;             /* MEASURED has the columns and the cost model explains its steps */
    int64_t steps;         /* steps summed */
    int64_t fused_steps;   /* steps left out: they ran a fused kernel */
    double measured_ms[KERNEL_NUM_KINDS + 1], predicted_ms[KERNEL_NUM_KINDS + 1];
} kind_errors;

typedef struct step_errors {
    step_class_error cls[STEP_NUM_CLASSES];
    kind_errors kinds;
    int64_t num_steps;             /* rows of steps.csv */
    int64_t num_zero;              /* of them, measured 0 us (no relative error; left out) */
    char cost_model[4096], gpu[64], model[160]; /* what predicted them */
} step_errors;

/* Re-predicts each step of steps_csv (a measured run's) from its shape with the cost model of
 * simulated's config (model, gpu, cost-model, block-size). Writes one row per step,
 * `step,class,measured_ms,predicted_ms,rel_error`, to out when it is not NULL (rel_error empty
 * for a step measured at 0). Errors name the file and line, or the config key. */
int compare_steps(const char *steps_csv, const run_results *simulated, FILE *out, step_errors *res, terr *e);

#endif
