/*
 * kernel_trace.h: what the GPU ran, from its own timestamps, through CUPTI's Activity API (the
 * library loaded at run time: engine/cuda_libs.h). Two users: the CUDA engine's kernel time per
 * step (`tandem run`'s kernel_us and kernel_busy, through the step meter below) and
 * `bench_engine_gpu profile` (engine/bench/profile_gpu.c, through the record stream).
 *
 * Key decisions:
 *   - CUPTI's activity state belongs to the process, so the trace has one client at a time:
 *     ktrace_open fails while another client holds it (or while another tool, such as Nsight
 *     Systems, holds CUPTI).
 *   - Tracing is turned on before the work to be seen is even captured, so that every CUDA graph
 *     is captured and instantiated while it is on (as `bench_engine_gpu profile` always did, where
 *     the kernels graphs replay are reported); the CUDA backend opens it before its first
 *     capture. Whether a graph instantiated before the trace reports its kernels is untested.
 *   - Records reach the client's function when CUPTI hands over a buffer: when one fills (on a
 *     thread of CUPTI's, at any time) or in ktrace_flush (forced: every buffer, before it
 *     returns). The client guards its own state. A flush does not wait for the GPU: what the
 *     client wants to see must have finished (a stream or device synchronize) before it.
 *   - Buffers come from a free list that flushes refill, so a flush per step allocates nothing
 *     once the first few buffers exist.
 *
 * Without CUPTI's headers at build time only the meter's functions exist, and opening it says
 * why it cannot.
 */
#ifndef TANDEM_KERNEL_TRACE_H
#define TANDEM_KERNEL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

#if TANDEM_HAVE_CUPTI
#include <cupti.h>

/* Called for each record of the enabled kinds, from whichever thread hands the buffer over. */
typedef void (*ktrace_record_fn)(void *ud, const CUpti_Activity *r);

/* Takes the trace for fn (records of no kind yet: ktrace_enable). Returns 0, or -1 with e set
 * (CUPTI not loadable, already taken). */
int ktrace_open(ktrace_record_fn fn, void *ud, terr *e);
/* Turns on one kind of record (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, _MEMCPY, ...). */
int ktrace_enable(CUpti_ActivityKind kind, terr *e);
/* Hands every record so far to fn (forced flush) before it returns. */
int ktrace_flush(terr *e);
/* Flushes, turns off what was enabled and lets go of the trace. */
void ktrace_close(void);

/* What did not reach fn since the last call: records CUPTI dropped (no buffer, or a full one),
 * and buffers it handed over that could not be read. */
typedef struct ktrace_losses {
    uint64_t dropped;
    uint64_t bad_buffers;
} ktrace_losses;
ktrace_losses ktrace_take_losses(void);
#endif

/* ---- the step meter: kernel time of what ran between two calls of ktrace_meter_take ---- */

typedef struct ktrace_step {
    int64_t kernel_ns; /* kernel durations summed */
    int64_t busy_ns;   /* time at least one kernel ran: the union of their intervals (kernels
                          that overlap, as programmatic dependent launch lets them, count once) */
    int32_t kernels;
    int64_t lost;      /* kernel records missing from the two figures above (dropped, no
                          timestamps, unreadable buffers): 0 when they are exact */
} ktrace_step;

typedef struct ktrace_meter ktrace_meter;

/* One kernel's run on the GPU's clock. */
typedef struct ktrace_span {
    uint64_t start_ns, end_ns;
} ktrace_span;

/* The meter's arithmetic (exported for the tests): sorts spans[n] by start and returns their
 * lengths summed; *busy_ns gets the length of their union. */
int64_t ktrace_spans_measure(ktrace_span *spans, size_t n, int64_t *busy_ns);

/* Opens the trace with kernels (CONCURRENT_KERNEL: graph kernels included) enabled. */
int ktrace_meter_open(ktrace_meter **out, terr *e);
/* After the GPU finished the work to be measured: flushes, and gives the kernels that ran
 * since the last call (or since open). */
int ktrace_meter_take(ktrace_meter *k, ktrace_step *out, terr *e);
void ktrace_meter_close(ktrace_meter *k);

#endif
