/*
 * trace.h: streaming readers for request traces, and the synthetic trace generator.
 *
 * trace_open() detects the format from the file's first line and returns a reader that yields
 * one arrival at a time (core/arrival.h), so a trace of any length replays in bounded memory
 * (one 64 KiB chunk plus the longest line; trace_buffer_bytes() says how much).
 *
 * Formats (detected from the header; CSV columns are found by name, in any order):
 *   azure     TIMESTAMP,ContextTokens,GeneratedTokens        (Azure LLM inference 2023)
 *             TIMESTAMP is wall clock "2023-11-16 18:17:03.9799600" (no zone, 0-9 fraction
 *             digits), converted to ns exactly with integer arithmetic (no TZ, no timegm).
 *             The published files have CRLF line ends and no final newline: both are accepted
 *             (CRLF only in this format, and then on every line). Extra columns are ignored.
 *   vidur     arrived_at,num_prefill_tokens,num_decode_tokens (Vidur / Splitwise; arrived_at in
 *             seconds, a float). Extra columns (num_total_tokens, pd_ratio, ...) are ignored.
 *   mooncake  JSONL, one object per line (no header; line 1 is the first request):
 *             {"timestamp": ms, "input_length": N, "output_length": N, "hash_ids": [...]}
 *             hash_ids must have ceil(input_length/512) non-negative integers; they reach the
 *             loop as arrival.hashes. Other keys are ignored.
 *   tandem    arrival_s,prompt_tokens,output_tokens[,priority][,client] (what `trace gen`
 *             writes). Strict: an unknown column is an error naming it, so a misspelt column
 *             is never silently dropped. priority is an integer in [0, 2^31); client is such
 *             an integer, or a name ("tenant-a") that becomes an id 0, 1, ... in order of
 *             first appearance (the first row decides: names, or integers).
 *   lengths   num_prefill_tokens,num_decode_tokens (Vidur's ShareGPT / arXiv length files; extra
 *             columns ignored): no times, so it opens only with a request_rate to re-time it.
 *
 * Arrival times are offsets from the first accepted request (whatever the format's origin),
 * multiplied by time_scale. Rows must be in nondecreasing arrival order. Token counts are
 * integers in [1, TRACE_MAX_TOKENS]: zero prompt or zero output tokens is a bad row.
 *
 * Errors are "FILE:LINE: what is wrong" (lines 1-based; a CSV header is line 1).
 *   Always errors (file level): a missing file, an empty file, a header with no rows after it,
 *   a UTF-8 BOM, an unknown header, a missing or (tandem) unknown or duplicated column, CRLF
 *   line ends outside Azure, a line over 16 MiB, and a trace in which no row is valid.
 *   Row errors (fatal, or with skip_bad_rows skipped and counted in trace_bad_rows()): a wrong
 *   number of fields, a non-number, a negative, zero or absurd length, a bad timestamp, an
 *   empty line, a stray CR, bad or truncated JSON (e.g. a last line cut mid-object), a missing
 *   JSON field, a hash_ids count that does not match, and time going backwards.
 * A file without a final newline is fine. No byte sequence crashes a reader. After an error
 * next() keeps returning -1 with the same message.
 */
#ifndef TANDEM_TRACE_H
#define TANDEM_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arrival.h"
#include "core/util.h"

/* Longest prompt or output a trace row may ask for; anything longer is an input error. */
#define TRACE_MAX_TOKENS (1 << 24)
/* Largest time_scale: a trace's arrivals stretched 1000x is beyond any experiment, and a bound
 * checked with the flags keeps absurd values (1e300) from failing only at the row that
 * overflows. A row whose scaled time would still overflow is a FILE:LINE error. */
#define TRACE_MAX_TIME_SCALE 1000.0

typedef struct trace_options {
    double time_scale;    /* arrival offsets are multiplied by this (0.5 = twice the rate); in
                             (0, TRACE_MAX_TIME_SCALE] */
    int64_t max_requests; /* stop after this many accepted rows; <= 0: no limit */
    bool skip_bad_rows;   /* skip and count bad rows instead of failing */
    /* Re-timing, as `vllm bench serve --request-rate R --burstiness B`: > 0 replaces the rows'
     * times with Gamma inter-arrivals of shape B and mean 1/R s (B = 1: Poisson; B < 1
     * burstier), the first request at 0, drawn from a GSL generator seeded with seed; INFINITY:
     * every request at 0; 0: the trace's own times (time_scale applies only then). */
    double request_rate;  /* requests/s */
    double burstiness;    /* Gamma shape; 0 means 1 */
    uint64_t seed;
} trace_options;

/* time_scale 1, no limit, bad rows are errors. (A zeroed trace_options is invalid: scale 0.) */
trace_options trace_options_default(void);

typedef struct trace_reader trace_reader;

/* Opens `path` and reads its header. Returns 0, or -1 with e = "FILE:LINE: what is wrong".
 * opt may be NULL for the defaults. */
int trace_open(trace_reader **out, const char *path, const trace_options *opt, terr *e);
/* The reader as the serving loop's arrival source. */
arrival_source trace_source(trace_reader *t);
/* The detected format's name: "azure", "vidur", "mooncake" or "tandem". */
const char *trace_format_name(const trace_reader *t);
int64_t trace_rows_read(const trace_reader *t);  /* accepted rows so far */
int64_t trace_bad_rows(const trace_reader *t);   /* rows skipped with skip_bad_rows */
/* Whether the trace has a priority / client column. */
bool trace_has_priority(const trace_reader *t);
bool trace_has_client(const trace_reader *t);
/* Distinct client names seen so far (0 when the client column holds integer ids), and the name
 * of client id `id` (NULL if none; valid until trace_close). */
int64_t trace_num_client_names(const trace_reader *t);
const char *trace_client_name(const trace_reader *t, int64_t id);
/* Bytes the reader holds in buffers (chunk, CSV field buffer, hash array): constant in the
 * number of rows, which is what the streaming test checks. */
size_t trace_buffer_bytes(const trace_reader *t);
void trace_close(trace_reader *t);

/* Azure wall-clock stamp "YYYY-MM-DD HH:MM:SS[.f...]" (' ' or 'T' between date and time, 0-9
 * fraction digits, years 1900-2200) to ns since 1970-01-01 00:00:00 of the same clock.
 * s need not be NUL-terminated. Returns 0, or -1 if it is not such a stamp. */
int trace_azure_timestamp_ns(const char *s, size_t len, int64_t *ns);

#endif
