/*
 * metrics.h: what a run measured, in vLLM's terms.
 *
 * The serving loop reports each request when it ends (finished or rejected), each inter-token
 * gap, and each step. Rows stream to DIR/requests.csv (in the order requests end),
 * DIR/steps.csv and DIR/preemptions.csv (core/preempt_log.h) as they happen, and latencies go
 * into histograms of bounded size (core/stats.h), so memory does not grow with the number of
 * requests or tokens.
 * At the end, summary.json carries the keys of `vllm bench serve`'s result file (completed,
 * duration, request_throughput, output_throughput, total_token_throughput, mean_/median_/std_/
 * p99_ of ttft_ms, tpot_ms, itl_ms, e2el_ms, request_goodput) plus tandem's own (num_rejected,
 * num_preemptions, peak_kv_usage, mean_batch_size, ...), the resolved configuration and seed.
 *
 * Definitions (as vLLM's benchmark): TTFT = first token - arrival; TPOT = (e2e - TTFT) /
 * (output - 1), only for requests with more than one output token; ITL = every gap between
 * successive tokens of a request; E2EL = finish - arrival; duration = first arrival to the last
 * request's end; throughputs count completed requests only.
 */
#ifndef TANDEM_METRICS_H
#define TANDEM_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "batch.h"
#include "executor.h"
#include "preempt_log.h"
#include "request.h"
#include "util.h"

typedef struct metrics_options {
    const char *out_dir;    /* NULL: compute the summary but write no files */
    double goodput_ttft_ms; /* SLOs for request_goodput; <= 0: not part of the SLO */
    double goodput_tpot_ms;
    double goodput_e2el_ms;
    bool write_requests;    /* requests.csv (on by default in the CLI) */
    bool write_steps;       /* steps.csv (on by default in the CLI) */
    bool write_host_time;   /* steps.csv gains host_us and sched_us (an executor that measures) */
    bool host_overlaps_gpu; /* the loop schedules ahead (async_scheduling): summary.json says so */
    bool write_kernel_time; /* steps.csv gains kernel_us, kernel_busy, the kernel time by kind
                               and the gap (an executor that times the GPU's kernels: the CUDA
                               engine with its kernel trace on); they come later than the steps
                               (metrics_step_kernels) */
    bool write_tokens;      /* tokens.csv: each finished request's generated token ids, when the
                               executor produced real tokens (the engine) */
    double peak_flops;      /* the GPU's datasheet bf16 rate, for MFU (0: not reported) */
    double peak_bytes_s;    /* its datasheet memory bandwidth, for MBU (0: not reported) */
    int32_t num_replicas;   /* > 1: requests.csv and steps.csv gain a replica column and
                               summary.json a per-replica table (0 or 1: one replica) */
    json_t *summary_extra;  /* keys copied to summary.json's top level (who ran it, warnings); may be NULL */
} metrics_options;

typedef struct step_stats {
    int64_t step;           /* of its replica */
    int32_t replica;
    int32_t block_size;
    int64_t start_ns;
    int64_t duration_ns;
    int32_t num_running;    /* after scheduling */
    int32_t num_waiting;    /* waiting + preempted + swapped, after scheduling */
    int32_t batch_size;     /* requests in the step */
    int64_t prefill_tokens;
    int64_t decode_tokens;
    int32_t kv_blocks_used; /* after the step */
    int32_t kv_blocks_total;
    int64_t kv_tokens;      /* tokens whose KV the running requests hold (vs blocks: the gap is
                               partly filled blocks and reservations) */
    int32_t num_preemptions;
    int32_t num_swap_blocks; /* blocks swapped in + out */
    step_shape shape;        /* what the step computed (core/batch.h) */
    double flops, bytes;     /* its useful work (core/work.h); 0 when the model is not known */
    int64_t host_ns, sched_ns; /* measured host time (core/executor.h), when write_host_time */
    const batch *batch;      /* the step's items and preempted requests, for preemptions.csv
                                (NULL: not logged) */
} step_stats;

typedef struct latency_stats {
    double mean, median, std, p90, p95, p99, p999, max; /* ms */
} latency_stats;

typedef struct metrics_summary {
    int64_t num_requests;      /* every request of the trace that reached the server */
    int64_t completed;
    int64_t num_rejected;
    int64_t rejected_by_reason[REJECT_NUM_REASONS];
    int64_t num_bad_rows;      /* trace rows skipped with --skip-bad-rows */
    int64_t num_truncated;     /* completed requests whose output stopped at max_model_len, short
                                  of what they asked (requests.csv: output_tokens_asked) */
    double duration_s;
    int64_t total_input_tokens;  /* of completed requests */
    int64_t total_output_tokens;
    double request_throughput, output_throughput, total_token_throughput;
    double request_goodput;    /* NAN when no SLO was given (summary.json: null) */
    int64_t num_good;          /* completed requests that met every SLO */
    latency_stats ttft, tpot, itl, e2el, queue;
    int64_t num_preemptions;
    int64_t num_steps;
    double busy_s;             /* sum of step durations */
    double busy_fraction;      /* busy_s / duration_s */
    double peak_kv_usage;      /* max over steps of used / total blocks */
    double mean_kv_usage;      /* time-weighted over steps */
    double peak_kv_token_usage; /* max over steps of stored tokens / (blocks x block size) */
    double mean_kv_token_usage; /* time-weighted */
    double mean_batch_size;    /* requests per step */
    double total_flops, total_bytes; /* useful work of every step (core/work.h) */
    double mfu, mbu;           /* achieved FLOP/s and bytes/s while busy over the GPU's peaks
                                  (NAN when the peaks are not known) */
    double prefix_cache_hit_rate; /* cached prompt tokens / prompt tokens of admitted requests */
    latency_stats host_us, sched_us; /* host time per step (us), when write_host_time: all of it,
                                        and the serving loop's part (steps.csv) */
    latency_stats kernel_us;   /* GPU kernel time per step (us, durations summed), when
                                  write_kernel_time */
    struct {
        double mean, median, p1, min; /* per step: kernel busy time / step wall time */
        double overall;               /* kernel busy time / step time, both summed over steps */
    } kernel_busy;             /* when write_kernel_time */
    double kernel_kind_s[KERNEL_NUM_KINDS]; /* kernel time by kind, summed over steps (s), when
                                               write_kernel_time */
    double kernel_gap_s;       /* step time during which no kernel ran, summed (s) */
    int32_t num_replicas;      /* 1 for one replica */
    double load_imbalance;     /* max / mean over replicas of busy time (1 = even; 1 for one) */
} metrics_summary;

/* One replica's share of a cluster run (summary.json's "replicas"). */
typedef struct replica_summary {
    int64_t requests, completed, rejected, preemptions, steps;
    double busy_s;             /* its load: time it spent running steps */
    double busy_fraction;      /* busy_s / the run's duration */
    double peak_kv_usage, mean_kv_usage; /* as the run's, over its own steps */
    double prefix_cache_hit_rate;
} replica_summary;

typedef struct metrics metrics;

int metrics_open(metrics **out, const metrics_options *opt, terr *e);
/* r ended (REQ_FINISHED or REQ_REJECTED); writes its row and keeps its latencies. */
void metrics_request_done(metrics *m, const request *r);
/* One inter-token gap observed in the current step. */
void metrics_itl(metrics *m, int64_t gap_ns);
/* A scheduling pass that only preempted (no step ran): its events go to preemptions.csv, as the
 * next step's. */
void metrics_preempted(metrics *m, int64_t step, int64_t t_ns, const batch *b);
/* The step ended; writes its row (with write_kernel_time: holds it until its kernel time). */
void metrics_step(metrics *m, const step_stats *s);
/* The kernel time (core/executor.h) of the oldest n steps that wait for theirs, in order: their
 * rows are completed and written. n may not exceed the steps waiting. Ignored without
 * write_kernel_time. */
void metrics_step_kernels(metrics *m, const step_kernel_time *k, size_t n);
/* kernel_kind's names as steps.csv (kernel_NAME_us) and summary.json write them: "gemm", ... */
extern const char *const kernel_kind_names[KERNEL_NUM_KINDS];
void metrics_add_bad_rows(metrics *m, int64_t n);
/* Computes the summary, writes summary.json (with `config` under "config" when not NULL; the
 * reference is stolen), flushes and closes the CSVs. */
int metrics_finish(metrics *m, json_t *config, metrics_summary *out, terr *e);
void metrics_free(metrics *m);
/* Requests ended so far (finished or rejected): what a progress line counts. */
int64_t metrics_requests_ended(const metrics *m);

/* The short human-readable table `tandem sim` prints; `what` ends the title ("simulated"). */
void metrics_print_summary(const metrics_summary *s, const char *what, FILE *f);
/* The summary as a JSON object (what summary.json holds, minus config). */
json_t *metrics_summary_json(const metrics_summary *s, const metrics_options *opt);

#endif
