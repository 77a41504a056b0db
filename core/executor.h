/*
 * executor.h: the one seam between simulated and real execution.
 *
 * The serving loop hands an executor a batch (batch.h) and gets back how long the step took.
 * The simulator's executor asks a cost model (sim/); the real engine's executor runs the batch on
 * the GPU (or the CPU reference) and measures it. Nothing in core/ or policies/ knows which one
 * runs.
 */
#ifndef TANDEM_EXECUTOR_H
#define TANDEM_EXECUTOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "batch.h"
#include "util.h"

/* What a GPU kernel does, told by its name (engine/kernel_trace.c): GEMMs (cuBLAS's and the
 * engine's weight-streaming one), attention, one kernel doing whole layers (the engine's streamed
 * decode of one or two sequences), element-wise work (embedding, norms, RoPE, SiLU), sampling, and
 * anything else. */
typedef enum kernel_kind {
    KERNEL_GEMM,
    KERNEL_ATTENTION,
    KERNEL_FUSED,
    KERNEL_ELEMENTWISE,
    KERNEL_SAMPLING,
    KERNEL_OTHER,
    KERNEL_NUM_KINDS
} kernel_kind;

/* One step's GPU kernels, from the GPU's own timestamps: their durations summed, in all and by
 * kind, and the time at least one ran (their union: kernels that overlap count once). */
typedef struct step_kernel_time {
    int64_t kernel_ns, busy_ns;
    int64_t kind_ns[KERNEL_NUM_KINDS]; /* kernel_ns split by kind: they sum to it */
} step_kernel_time;

typedef struct step_result {
    int64_t duration_ns;    /* wall (or predicted) time of the whole step, swaps included */
    const int32_t *sampled; /* (batch->num_items) token sampled by each emitting item, or NULL
                               when the executor produces no real tokens (the simulator) */
    /* For an executor that measures real work (measures_host): the host time it spent on this
     * step serially with the device (building the step's arrays, enqueueing, reading back
     * tokens; submitted behind a running step, only what the device waited for after that
     * step's end). The serving loop adds its own scheduling time to it in steps.csv. */
    int64_t host_ns;
    /* For an executor that times the GPU's kernels (measures_kernels): the kernel time of the
     * oldest steps not yet reported (this one or earlier ones), in order, that became known
     * during this call (num_kernel_times may be 0); the array is the executor's, valid until
     * its next call. A step's kernel time comes after the step, once the GPU's records of it
     * have arrived; the rest come from settle. */
    const step_kernel_time *kernel_times;
    int32_t num_kernel_times;
} step_result;

typedef struct executor_ops {
    const char *name;
    bool measures_host; /* fills step_result's host_ns (steps.csv gains host_us, sched_us) */
    /* Whether this executor fills step_result's kernel_ns and kernel_busy_ns (steps.csv gains
     * kernel_us, kernel_busy). May be NULL: never. */
    bool (*measures_kernels)(void *self);
    /* Runs b; fills every field of out (those it has nothing for with 0 / NULL). Returns 0, or
     * -1 with e set (a real engine can fail). */
    int (*execute)(void *self, const batch *b, step_result *out, terr *e);
    /* Asynchronous scheduling (serve_config.async_scheduling), for an executor whose device runs
     * a step in the background: submit enqueues b and returns at once; collect waits for the
     * oldest submitted step (b again, unchanged since its submit) and fills out as execute
     * does. At most two steps are submitted and not collected: the loop submits the next step
     * before it collects the running one, so the device never waits for the host's scheduling.
     * A token the running step samples is fed to the next as -1 - k (request.h's pending
     * output ids). Both NULL for an executor that runs in place (the simulator's: the loop
     * calls execute when the step would be collected). */
    int (*submit)(void *self, const batch *b, terr *e);
    int (*collect)(void *self, const batch *b, step_result *out, terr *e);
    /* At the end of a run (measures_kernels): the kernel time of every step not yet reported,
     * in order, as in step_result (*out valid until the next call). Returns 0, or -1 with e
     * set. May be NULL when measures_kernels is. */
    int (*settle)(void *self, const step_kernel_time **out, int32_t *n, terr *e);
    /* Called when a request leaves the system (finished, rejected), so an engine can drop
     * per-request state. May be NULL. */
    void (*release)(void *self, const request *r);
    void (*destroy)(void *self);
    /* What summary.json should record about how steps were timed (config.executor), a new
     * JSON object. May be NULL. */
    json_t *(*report)(void *self);
} executor_ops;

typedef struct executor {
    const executor_ops *ops;
    void *self;
} executor;

#endif
