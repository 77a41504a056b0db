/*
 * testutil.h: small helpers shared by the test programs (Check suites).
 *
 * Tests run from the repository root. run_cli() runs build/tandem (or $TANDEM_BIN) with
 * arguments and captures its exit code, stdout and stderr, so CLI behaviour (messages, exit
 * code 2 on bad input) is tested as a user sees it.
 */
#ifndef TANDEM_TESTUTIL_H
#define TANDEM_TESTUTIL_H

#include <check.h>
#include <jansson.h>
#include <stddef.h>

typedef struct cli_result {
    int exit_code;  /* the process's exit status, or 128 + signal */
    char *out;      /* captured stdout (NUL-terminated) */
    char *err;      /* captured stderr */
} cli_result;

/* Runs the tandem binary with a NULL-terminated argument list. */
cli_result run_cli(const char *arg0, ...);
cli_result run_cliv(char *const argv[]);
void cli_result_free(cli_result *r);

/* Makes a fresh temporary directory (under $TMPDIR or /tmp); returns its path (static buffer
 * per call is not used: caller frees). */
char *make_temp_dir(const char *tag);
/* Writes `text` to dir/name; returns the malloc'd full path. */
char *write_temp_file(const char *dir, const char *name, const char *text);
/* Reads a whole file; NULL if it cannot. *len gets the size when len is not NULL. */
char *slurp(const char *path, size_t *len);

/* Parses DIR/NAME as JSON; fails the test, naming the file, when it cannot. */
json_t *load_json(const char *dir, const char *name);

/* Runs a Check suite with forking on and returns the number of failures. */
int run_suite(Suite *s);


/* ---- fixtures for scheduling tests ---- */
#include "core/arrival.h"
#include "core/executor.h"

/* An arrival source over a fixed array (no trace file). */
typedef struct array_source {
    const arrival *items;
    int n, pos;
} array_source;
arrival_source array_source_make(array_source *s, const arrival *items, int n);

/* An executor whose step costs base_ns + per_token_ns x tokens: durations are easy to compute
 * by hand. */
typedef struct linear_exec {
    int64_t base_ns, per_token_ns;
} linear_exec;
executor linear_exec_make(linear_exec *x);

/* Records each step's batch as text "id:tokens id:tokens ..." (ids in batch order), with a
 * trailing " P" per preemption in the step. */
typedef struct step_log {
    char lines[256][256];
    int n;
} step_log;
struct serve_hooks;
void step_log_hook(struct serve_hooks *h, step_log *log);

/* ---- scheduling scenarios: a config, a few arrivals, a 1 ms-per-step executor ---- */
#include "core/metrics.h"
#include "core/policy.h"
#include "core/serve.h"
#include "policies/policies.h"

#define MS 1000000LL

typedef struct scenario {
    const policy_ops *policy;
    sched_config cfg;
    policy_knobs knobs; /* every policy's own knobs, at their defaults unless scenario_knob sets one */
    int32_t num_blocks, num_host_blocks;
    bool async_scheduling;
    arrival arrivals[32];
    uint64_t hashes[32][4];
    int n;
} scenario;

typedef struct scenario_outcome {
    step_log log;
    serve_result res;
    metrics_summary sum;
} scenario_outcome;

/* max_num_seqs 256, budget 8, max_model_len 64, blocks of 4, 64 blocks, chunked prefill and
 * reserve_full_isl on. */
scenario scenario_base(const policy_ops *policy);
arrival *scenario_add(scenario *s, int64_t t_ms, int32_t prompt, int32_t output);
/* Sets a policy knob by its flag name (e.g. "chunk-size"), as the CLI would. */
void scenario_knob(scenario *s, const char *name, const char *value);
/* Runs it (asserting conservation: every request ends once, no KV block leaked); the caller
 * frees the outcome. */
scenario_outcome *scenario_run(scenario *s);
/* Asserts the first n steps are `want` (messages say which step differed and how). */
void scenario_expect(const scenario_outcome *o, const char *const *want, int n);

/* ---- trace files ---- */

#include "traces/trace.h"

/* Every arrival of a trace file, read through trace_open (rc -1 and err on an error). */
typedef struct trace_rows {
    arrival *a;    /* (n) */
    int64_t n;
    uint64_t *hashes_first, *hashes_last; /* copies of the first and last rows' hashes */
    int rc;        /* 0: read to the end; -1: error */
    terr err;
    int64_t bad;
    const char *format;
} trace_rows;
trace_rows read_all_opt(const char *path, const trace_options *opt);
trace_rows read_all(const char *path);
void rows_free(trace_rows *r);
/* Removes dir and everything under it, and frees the path. */
void rm_tree(char *dir);

#endif
