/*
 * preempt_log.h: preemptions.csv, the moments a request left the running set and came back,
 * which requests.csv (a count per request) and steps.csv (a count per step) do not give. What
 * `tandem timeline` draws a request's preempted spans from.
 *
 * One row per event, in step order:
 *   step,time_s,id,event
 * event is `preempted` (KV freed, to be recomputed), `swapped` (KV copied to host memory) or
 * `resumed` (the request is in a step's batch again). time_s is the start of the step the event
 * belongs to, in seconds since the first arrival, as steps.csv's start_s. A request preempted
 * and never resumed (a run stopped early) has no `resumed` row.
 *
 * Key decision: the log keeps one bit per request id (set while preempted), so a step costs a
 * look at its items only while some request is preempted, and memory is an eighth of a byte per
 * request. Rows go out through the caller's FILE, so the file stays small: preemptions are rare.
 */
#ifndef TANDEM_PREEMPT_LOG_H
#define TANDEM_PREEMPT_LOG_H

#include <stdint.h>
#include <stdio.h>

#include "batch.h"
#include "util.h"

typedef struct preempt_log {
    FILE *f;
    char path[4096];
    uint8_t *pending;    /* (cap_bytes) bit id: preempted, not yet resumed */
    size_t cap_bytes;
    int64_t num_pending;
} preempt_log;

/* Creates DIR/preemptions.csv with its header. */
int preempt_log_open(preempt_log *l, const char *dir, terr *e);
/* The step's resumptions (items whose request was preempted), then its preemptions. */
void preempt_log_step(preempt_log *l, int64_t step, int64_t start_ns, const batch *b);
/* Closes the file; -1 with e set when a write failed. */
int preempt_log_close(preempt_log *l, terr *e);

#endif
