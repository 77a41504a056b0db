/*
 * kernel_trace.h: what the GPU ran, from its own timestamps, through CUPTI's Activity API (the
 * library loaded at run time: engine/cuda_libs.h). Two users: the CUDA engine's kernel time per
 * step (`tandem run`'s kernel_us, kernel_busy and kernel time by kind, through the step meter
 * below) and
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
 *   - Buffers come from a free list that flushes and hand-overs refill: nothing is allocated
 *     per step once the first few buffers exist.
 *   - The step meter never flushes per step (a forced flush cost ~1.1 ms a step on the H200).
 *     It attributes kernels by time instead: each step marks a window on CUPTI's clock
 *     (cuptiGetTimestamp: a clock read, no lock, no flush) and a kernel belongs to the step whose
 *     window holds its start, whenever its record arrives. Steps settle late (the ledger
 *     below), and all of them after one forced flush at the end of a run.
 *
 * Without CUPTI's headers at build time only the meter's functions exist, and opening it says
 * why it cannot.
 */
#ifndef TANDEM_KERNEL_TRACE_H
#define TANDEM_KERNEL_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/executor.h"
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

/* ---- the step meter: each step's kernels, attributed by time ---- */

/* What a kernel does, from its name as CUPTI reports it (mangled or not): cuBLAS's GEMMs
 * (gemm, gemv, nvjet, xmma, splitKreduce in the name) and the engine's weight-streaming one
 * (skinny_kernel) are GEMMs; the engine's decode and prefill attention kernels attention; its
 * streamed decode of one or two sequences (decode_stream_kernel) fused; embedding, RMSNorm, RoPE
 * and SiLU element-wise; sample_kernel sampling; the rest (a NULL name included) other. */
kernel_kind ktrace_classify(const char *name);

/* One kernel's run, on CUPTI's clock (cuptiGetTimestamp's, which the records' timestamps share). */
typedef struct ktrace_span {
    uint64_t start_ns, end_ns;
    uint8_t kind; /* kernel_kind */
} ktrace_span;

/* A step's host-side window on the same clock: from just before its first enqueue to just after
 * its sync. Steps are serialized (each is synced before the next is launched), so every kernel
 * of a step starts inside its window and windows do not overlap. */
typedef struct ktrace_window {
    uint64_t begin_ns, end_ns;
} ktrace_window;

typedef struct ktrace_step {
    int64_t step;      /* its number: 0 for the first window after open */
    int64_t kernel_ns; /* kernel durations summed */
    int64_t kind_ns[KERNEL_NUM_KINDS]; /* kernel_ns by kind */
    int64_t busy_ns;   /* time at least one kernel ran: the union of their intervals (kernels
                          that overlap, as programmatic dependent launch lets them, count once) */
    int32_t kernels;
} ktrace_step;

/* Kernel records that are in no step's figures. */
typedef struct ktrace_counts {
    int64_t warmup;  /* began before the first step's window: the warm-up and graph captures */
    int64_t outside; /* began later but in no window (between steps), or reached the meter after
                        their step was settled: 0 when the figures are exact */
    int64_t lost;    /* dropped by CUPTI (no buffer, a full one), unreadable, or without
                        timestamps: 0 when the figures are exact */
} ktrace_counts;

/* The meter's arithmetic (exported for the tests): sorts spans[n] by start and returns their
 * lengths summed; *busy_ns gets the length of their union. */
int64_t ktrace_spans_measure(ktrace_span *spans, size_t n, int64_t *busy_ns);

/* Attributes kernels to steps: each span to the window that contains its start. win[nw] in time
 * order and disjoint; spans[n] sorted by start (ktrace_sort_spans). out[nw] gets each window's
 * figures (out[i].step = first_step + i). Returns how many spans began in no window. */
size_t ktrace_attribute(const ktrace_window *win, size_t nw, int64_t first_step, const ktrace_span *spans,
                        size_t n, ktrace_step *out);
/* Sorts spans[n] by start (a pass when they already are, as one stream's mostly arrive). */
void ktrace_sort_spans(ktrace_span *spans, size_t n);

/* The meter's bookkeeping, without CUPTI (the tests drive it with synthetic records): windows
 * in, records in (in any order, any time later), settled steps out, oldest first.
 *
 * A step is settled (its figures final, its window and records let go) either by
 * ktrace_ledger_settle(all = true), after which the caller promises no record of a closed window
 * is still on its way (a forced CUPTI flush after the last sync), or once records that began
 * `lag` windows later have arrived: CUPTI fills its buffers in launch order and hands them over
 * in order, so a record of step k + lag means step k's records were in earlier buffers. A
 * record that contradicts this (one of a settled step) is counted in `outside`, never silently
 * added. Memory: the windows and records of unsettled steps, which is what CUPTI delivers late
 * (a buffer's worth of records: tens of steps) plus lag. */
typedef struct ktrace_ledger {
    ktrace_window *win;  /* (cap_win) [win_head, n_win): windows of unsettled steps, in order;
                            win[win_head] is step first_step's */
    size_t win_head, n_win, cap_win;
    int64_t first_step;
    ktrace_span *spans;  /* (cap_spans) [span_head, n_spans): records of unsettled steps (and
                            of none, until classified) */
    size_t span_head, n_spans, cap_spans;
    bool sorted;         /* spans[span_head, n_spans) are in start order */
    ktrace_step *out;    /* (cap_out) the last settle's steps */
    size_t cap_out;
    uint64_t first_begin;  /* step 0's window's begin (UINT64_MAX before it) */
    uint64_t settled_end;  /* the last settled window's end (0: none) */
    uint64_t latest_start; /* the latest start among records received */
    ktrace_counts counts;
} ktrace_ledger;

void ktrace_ledger_init(ktrace_ledger *l);
void ktrace_ledger_free(ktrace_ledger *l);
/* The next step's window (after the last one's end). */
void ktrace_ledger_window(ktrace_ledger *l, ktrace_window w);
/* Records received, in any order. */
void ktrace_ledger_spans(ktrace_ledger *l, const ktrace_span *spans, size_t n);
/* Settles what is final (everything when all; else at most max steps, 0: no bound) and returns
 * how many steps it settled: the oldest unsettled ones, in order, in *out (valid until the next
 * call). */
size_t ktrace_ledger_settle(ktrace_ledger *l, bool all, size_t lag, size_t max, const ktrace_step **out);

/* The meter: the ledger fed by CUPTI. Its cost on a step is two timestamps and an append (begin,
 * end); records reach it on CUPTI's thread, whenever a buffer fills, and steps are settled
 * without a forced flush (ktrace_meter_settle), except once at the end. */
typedef struct ktrace_meter ktrace_meter;

/* Opens the trace with kernels (CONCURRENT_KERNEL: graph kernels included) enabled. */
int ktrace_meter_open(ktrace_meter **out, terr *e);
/* Before the step's first enqueue. */
void ktrace_meter_begin(ktrace_meter *k);
/* After its sync. */
void ktrace_meter_end(ktrace_meter *k);
/* The steps settled now, oldest first, in *out (valid until the next call; *n = 0: none).
 * all = false: without waiting, what CUPTI has handed over (nothing when its thread holds the
 * records now). all = true: forces a CUPTI flush first and settles every ended step; only
 * between steps. */
int ktrace_meter_settle(ktrace_meter *k, bool all, const ktrace_step **out, size_t *n, terr *e);
/* What no step's figures hold, so far. */
ktrace_counts ktrace_meter_counts(const ktrace_meter *k);
void ktrace_meter_close(ktrace_meter *k);

#endif
