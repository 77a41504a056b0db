/*
 * arrival.h: the stream of requests that feeds the serving loop.
 *
 * traces/ implements this for every trace format (and for synthetic generators); the loop pulls
 * one arrival at a time, in nondecreasing arrival order, so a trace of any length is replayed in
 * bounded memory.
 */
#ifndef TANDEM_ARRIVAL_H
#define TANDEM_ARRIVAL_H

#include <stdint.h>

#include "util.h"

typedef struct arrival {
    int64_t arrival_ns;   /* offset from the start of the trace, after time scaling */
    int32_t prompt_tokens;
    int32_t output_tokens;
    int32_t priority;     /* 0 when the trace has none */
    int32_t client_id;    /* 0 when the trace has none */
    int32_t num_hashes;   /* Mooncake hash_ids, else 0 */
    const uint64_t *hashes; /* (num_hashes) valid until the next call of next() */
    int64_t line;         /* line of the source file, for messages */
} arrival;

typedef struct arrival_source {
    /* Returns 1 and fills *out, 0 at the end, or -1 with e set to "FILE:LINE: what is wrong". */
    int (*next)(void *self, arrival *out, terr *e);
    void *self;
} arrival_source;

#endif
