/*
 * timeline.h: a run as a Chrome trace / Perfetto JSON file (the trace event format: open it in
 * ui.perfetto.dev or chrome://tracing), as Vidur exports its simulations.
 *
 * Two processes, as the viewers draw them:
 *   "steps"     one track with a slice per model step, its batch composition in args
 *               (batch_size, prefill/decode tokens and sequences, KV usage, queue), and counter
 *               tracks of KV usage and of running / waiting requests
 *   "requests"  one track per request: a slice "request ID" from arrival to its end, holding
 *               its phases: queued (arrival to first scheduled), prefill (to the first token),
 *               decode (to the end) and, nested inside those, each preempted span
 *               (preemptions.csv: preempted or swapped, to resumed)
 * Times are microseconds since the first arrival (the run's own clock, as its CSVs).
 *
 * Key decision: events are written one at a time (each encoded by jansson), never held as one
 * JSON tree, so a run of a million requests needs memory for one event, not for all of them.
 */
#ifndef TANDEM_TIMELINE_H
#define TANDEM_TIMELINE_H

#include <stdio.h>

#include "core/util.h"

typedef struct timeline_counts {
    long long requests, steps, preempted_spans;
    int have_steps, have_preemptions; /* whether steps.csv / preemptions.csv were there */
} timeline_counts;

/* Writes the timeline of run directory dir (requests.csv; steps.csv and preemptions.csv when
 * present) to out. Errors name the file and line. */
int timeline_write(FILE *out, const char *dir, timeline_counts *n, terr *e);

#endif
