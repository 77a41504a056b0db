/*
 * trace.h: streaming readers for request traces, and the synthetic trace generator.
 *
 * trace_open() detects the format from the file's first line and returns a reader that yields
 * one arrival at a time (core/arrival.h), so a trace of any length replays in bounded memory.
 *
 * Formats (detected from the header):
 *   azure     TIMESTAMP,ContextTokens,GeneratedTokens        (Azure LLM inference 2023)
 *   vidur     arrived_at,num_prefill_tokens,num_decode_tokens (Vidur / Splitwise; seconds)
 *   mooncake  JSONL: {"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}
 *   tandem    arrival_s,prompt_tokens,output_tokens[,priority][,client] (columns in any order)
 *
 * Arrival times are offsets from the first request (Azure's wall-clock stamps included),
 * multiplied by time_scale. Rows must be in nondecreasing arrival order.
 *
 * Bad input (a missing column, a non-number, a negative, zero-output or absurd length, a
 * truncated JSON line, an empty file, CRLF line ends, a BOM, time going backwards) is an error
 * "FILE:LINE: what is wrong", or with skip_bad_rows the row is skipped and counted.
 */
#ifndef TANDEM_TRACE_H
#define TANDEM_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/arrival.h"
#include "core/util.h"

/* Longest prompt or output a trace row may ask for; anything longer is an input error. */
#define TRACE_MAX_TOKENS (1 << 24)

typedef enum trace_format {
    TRACE_AZURE,
    TRACE_VIDUR,
    TRACE_MOONCAKE,
    TRACE_TANDEM,
} trace_format;

typedef struct trace_options {
    double time_scale;    /* arrival offsets are multiplied by this (0.5 = twice the rate); > 0 */
    int64_t max_requests; /* stop after this many accepted rows; <= 0: no limit */
    bool skip_bad_rows;   /* skip and count bad rows instead of failing */
} trace_options;

typedef struct trace_reader trace_reader;

/* Opens `path` and reads its header. Returns 0, or -1 with e = "FILE:LINE: what is wrong". */
int trace_open(trace_reader **out, const char *path, const trace_options *opt, terr *e);
/* The reader as the serving loop's arrival source. */
arrival_source trace_source(trace_reader *t);
trace_format trace_get_format(const trace_reader *t);
const char *trace_format_name(trace_format f);
int64_t trace_rows_read(const trace_reader *t);  /* accepted rows so far */
int64_t trace_bad_rows(const trace_reader *t);   /* rows skipped with skip_bad_rows */
void trace_close(trace_reader *t);

/* `tandem trace gen ...`: parses its own options (argv[0] is "gen"), writes tandem CSV.
 * Returns the process exit code (0 ok, 2 bad input). */
int trace_gen_main(int argc, char **argv);

#endif
