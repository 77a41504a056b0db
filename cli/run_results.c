/* run_results.c: see run_results.h. */
#include "cli/run_results.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "traces/csv_reader.h"

static char *path_join(const char *dir, const char *name)
{
    char *p = xmalloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool has_summary(const char *dir)
{
    char *p = path_join(dir, "summary.json");
    bool yes = is_file(p);
    free(p);
    return yes;
}

int run_results_find(const char *path, char ***runs, int *num_runs, bool *repeats, terr *e)
{
    struct stat st;
    *runs = NULL;
    *num_runs = 0;
    *repeats = false;
    if (stat(path, &st)) return terr_set(e, "%s: cannot open: %s", path, strerror(errno));
    if (S_ISREG(st.st_mode) || has_summary(path)) {
        *runs = xmalloc(sizeof **runs);
        (*runs)[0] = xstrdup(path);
        *num_runs = 1;
        return 0;
    }
    /* repeats: the numbered subdirectories must be exactly 1..N */
    DIR *d = opendir(path);
    if (!d) return terr_set(e, "%s: cannot open: %s", path, strerror(errno));
    long max_n = 0, count = 0;
    for (struct dirent *de; (de = readdir(d));) {
        const char *s = de->d_name;
        size_t k = 0;
        while (isdigit((unsigned char)s[k])) k++;
        if (k == 0 || s[k] || s[0] == '0' || k > 6) continue;
        long n = strtol(s, NULL, 10);
        count++;
        if (n > max_n) max_n = n;
    }
    closedir(d);
    if (count == 0)
        return terr_set(e, "%s: neither a run directory (no summary.json), a directory of repeats (1/, 2/, ...) "
                           "nor a vllm bench serve result file", path);
    if (count != max_n) return terr_set(e, "%s: repeats are numbered 1..%ld but only %ld are there", path, max_n, count);
    *runs = xcalloc((size_t)max_n, sizeof **runs);
    for (long n = 1; n <= max_n; n++) {
        char name[24];
        snprintf(name, sizeof name, "%ld", n);
        (*runs)[n - 1] = path_join(path, name);
        (*num_runs)++;
        if (!has_summary((*runs)[n - 1])) {
            terr_set(e, "%s: repeat %ld has no summary.json", (*runs)[n - 1], n);
            for (int i = 0; i < *num_runs; i++) free((*runs)[i]);
            free(*runs);
            *runs = NULL;
            *num_runs = 0;
            return -1;
        }
    }
    *repeats = true;
    return 0;
}

/* ---- a tandem run directory ------------------------------------------------------------------ */

enum { C_ID, C_ARRIVAL, C_PROMPT, C_OUTPUT, C_PREEMPT, C_TTFT, C_TPOT, C_E2EL, C_QUEUE, C_STATE, NUM_REQ_COLS };
static const char *const req_cols[NUM_REQ_COLS] = {"id", "arrival_s", "prompt_tokens", "output_tokens", "preemptions",
                                                   "ttft_ms", "tpot_ms", "e2el_ms", "queue_ms", "state"};

/* A latency column: NAN when empty (a rejected request, TPOT of one token). */
static int latency(const csv_reader *rd, int k, double *v, terr *e)
{
    *v = NAN;
    return csv_reader_text(rd, k)[0] ? csv_reader_f64(rd, k, v, e) : 0;
}

static int read_requests(run_results *r, const char *path, terr *e)
{
    csv_reader rd;
    if (csv_reader_open(&rd, path, req_cols, NUM_REQ_COLS, e)) return -1;
    run_request *rows = NULL;
    int64_t *ids = NULL, n = 0;
    size_t cap = 0, cap_ids = 0;
    int got, rc = -1;
    while ((got = csv_reader_next(&rd, e)) == 1) {
        grow_array((void **)&rows, sizeof *rows, &cap, (size_t)n + 1);
        grow_array((void **)&ids, sizeof *ids, &cap_ids, (size_t)n + 1);
        run_request *q = &rows[n];
        int64_t id, prompt, output, preempt;
        if (csv_reader_i64(&rd, C_ID, &id, e) || csv_reader_f64(&rd, C_ARRIVAL, &q->arrival_s, e) ||
            csv_reader_i64(&rd, C_PROMPT, &prompt, e) || csv_reader_i64(&rd, C_OUTPUT, &output, e) ||
            csv_reader_i64(&rd, C_PREEMPT, &preempt, e) || latency(&rd, C_TTFT, &q->ttft_ms, e) ||
            latency(&rd, C_TPOT, &q->tpot_ms, e) || latency(&rd, C_E2EL, &q->e2el_ms, e) ||
            latency(&rd, C_QUEUE, &q->queue_ms, e))
            goto done;
        if (id < 0 || prompt < 0 || prompt > INT32_MAX || output < 0 || output > INT32_MAX || preempt < 0 ||
            preempt > INT32_MAX) {
            terr_set(e, "%s:%" PRId64 ": a negative or absurd id, length or count", path, csv_reader_line(&rd));
            goto done;
        }
        ids[n++] = id;
        q->prompt_tokens = (int32_t)prompt;
        q->output_tokens = (int32_t)output;
        q->preemptions = (int32_t)preempt;
        q->finished = !strcmp(csv_reader_text(&rd, C_STATE), "finished");
        if (q->finished && (isnan(q->ttft_ms) || isnan(q->e2el_ms))) {
            terr_set(e, "%s:%" PRId64 ": a finished request without ttft_ms or e2el_ms", path, csv_reader_line(&rd));
            goto done;
        }
    }
    if (got < 0) goto done;
    /* rows come in the order requests ended; ids are the trace's rows 0..n-1, each once */
    r->req = xmalloc((size_t)(n ? n : 1) * sizeof *r->req);
    bool *seen = xcalloc((size_t)(n ? n : 1), sizeof *seen);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] >= n || seen[ids[i]]) {
            terr_set(e, "%s: request id %" PRId64 " %s (ids must be 0..%" PRId64 ", once each)", path, ids[i],
                     ids[i] >= n ? "is out of range" : "appears twice", n - 1);
            free(seen);
            goto done;
        }
        seen[ids[i]] = true;
        r->req[ids[i]] = rows[i];
    }
    free(seen);
    r->num_requests = n;
    rc = 0;
done:
    csv_reader_close(&rd);
    free(rows);
    free(ids);
    return rc;
}

static int load_dir(run_results *r, const char *dir, terr *e)
{
    r->source = RUN_TANDEM;
    char *summary = path_join(dir, "summary.json"), *requests = path_join(dir, "requests.csv");
    json_error_t je;
    int rc = -1;
    r->summary = json_load_file(summary, 0, &je);
    if (!r->summary) {
        terr_set(e, "%s:%d: not JSON: %s", summary, je.line, je.text);
        goto done;
    }
    r->config = json_object_get(r->summary, "config");
    if (!json_is_object(r->config)) {
        terr_set(e, "%s: no \"config\" object: not written by tandem sim or tandem run", summary);
        goto done;
    }
    json_t *mml = json_object_get(json_object_get(r->config, "resolved"), "max_model_len");
    r->max_model_len = json_is_integer(mml) ? (int32_t)json_integer_value(mml) : 0;
    if (!is_file(requests)) {
        terr_set(e, "%s: missing (the run was written with --no-requests?)", requests);
        goto done;
    }
    if (read_requests(r, requests, e)) goto done;
    r->steps_path = path_join(dir, "steps.csv");
    if (!is_file(r->steps_path)) {
        free(r->steps_path);
        r->steps_path = NULL;
    }
    rc = 0;
done:
    free(summary);
    free(requests);
    return rc;
}

/* ---- a vllm bench serve result --------------------------------------------------------------- */

/* The per-request array `key` of n entries (n < 0: sets n); NULL with e set when it is missing
 * or of another length. */
static json_t *vllm_array(const run_results *r, const char *key, int64_t *n, terr *e)
{
    json_t *a = json_object_get(r->summary, key);
    if (!json_is_array(a)) {
        terr_set(e, "%s: no \"%s\" array: save the result with `vllm bench serve --save-result --save-detailed`",
                 r->path, key);
        return NULL;
    }
    if (*n < 0) *n = (int64_t)json_array_size(a);
    if ((int64_t)json_array_size(a) != *n) {
        terr_set(e, "%s: \"%s\" has %zu entries, \"input_lens\" %" PRId64, r->path, key, json_array_size(a), *n);
        return NULL;
    }
    return a;
}

/* Entry i of a per-request array as a number >= 0. */
static int vllm_number(const run_results *r, const char *key, json_t *a, int64_t i, double *v, terr *e)
{
    json_t *x = json_array_get(a, (size_t)i);
    if (!json_is_number(x) || !(json_number_value(x) >= 0))
        return terr_set(e, "%s: %s[%" PRId64 "] is not a number >= 0", r->path, key, i);
    *v = json_number_value(x);
    return 0;
}

/* Derived as vLLM's benchmark does: a request completed when it has no error text; its E2E is
 * `latencies[i]` where the result has it, else TTFT plus the sum of its inter-token gaps (the
 * time of its last token); TPOT = (E2E - TTFT) / (output - 1) for outputs longer than one token.
 * The result records no server-side queueing, preemptions or arrivals: those stay NAN / -1. */
static int load_vllm(run_results *r, terr *e)
{
    r->source = RUN_VLLM;
    int64_t n = -1;
    json_t *in = vllm_array(r, "input_lens", &n, e), *out = in ? vllm_array(r, "output_lens", &n, e) : NULL;
    json_t *ttfts = out ? vllm_array(r, "ttfts", &n, e) : NULL, *itls = ttfts ? vllm_array(r, "itls", &n, e) : NULL;
    if (!itls) return -1;
    json_t *errors = json_object_get(r->summary, "errors"), *lat = json_object_get(r->summary, "latencies");
    if (errors && !json_is_null(errors) && !vllm_array(r, "errors", &n, e)) return -1;
    if (lat && !vllm_array(r, "latencies", &n, e)) return -1;
    r->req = xcalloc((size_t)(n ? n : 1), sizeof *r->req);
    r->num_requests = n;
    for (int64_t i = 0; i < n; i++) {
        run_request *q = &r->req[i];
        double prompt, output, ttft, e2e = 0;
        if (vllm_number(r, "input_lens", in, i, &prompt, e) || vllm_number(r, "output_lens", out, i, &output, e) ||
            vllm_number(r, "ttfts", ttfts, i, &ttft, e) || (lat && vllm_number(r, "latencies", lat, i, &e2e, e)))
            return -1;
        if (prompt > INT32_MAX || output > INT32_MAX || prompt != floor(prompt) || output != floor(output))
            return terr_set(e, "%s: input_lens[%" PRId64 "] or output_lens[%" PRId64 "] is not a token count", r->path,
                            i, i);
        json_t *err = errors ? json_array_get(errors, (size_t)i) : NULL, *gaps = json_array_get(itls, (size_t)i);
        if (!json_is_array(gaps)) return terr_set(e, "%s: itls[%" PRId64 "] is not an array", r->path, i);
        *q = (run_request){.arrival_s = NAN, .prompt_tokens = (int32_t)prompt, .output_tokens = (int32_t)output,
                           .preemptions = -1, .ttft_ms = NAN, .tpot_ms = NAN, .e2el_ms = NAN, .queue_ms = NAN};
        q->finished = (!json_is_string(err) || !json_string_length(err)) && output > 0;
        if (!q->finished) continue;
        double sum_gaps = 0;
        char key[40];
        snprintf(key, sizeof key, "itls[%" PRId64 "]", i);
        for (size_t k = 0; k < json_array_size(gaps); k++) {
            double g;
            if (vllm_number(r, key, gaps, (int64_t)k, &g, e)) return -1;
            sum_gaps += g;
            samples_add(&r->itl_ms, g * 1e3);
        }
        if (!lat) e2e = ttft + sum_gaps;
        q->ttft_ms = ttft * 1e3;
        q->e2el_ms = e2e * 1e3;
        if (q->output_tokens > 1) q->tpot_ms = (q->e2el_ms - q->ttft_ms) / (q->output_tokens - 1);
    }
    return 0;
}

int run_results_load(run_results *r, const char *path, terr *e)
{
    *r = (run_results){.path = xstrdup(path)};
    int rc;
    if (is_file(path)) {
        json_error_t je;
        r->summary = json_load_file(path, 0, &je);
        rc = r->summary ? load_vllm(r, e) : terr_set(e, "%s:%d: not JSON: %s", path, je.line, je.text);
    } else {
        rc = load_dir(r, path, e);
    }
    if (rc) run_results_free(r);
    return rc;
}

void run_results_free(run_results *r)
{
    free(r->path);
    free(r->req);
    json_decref(r->summary);
    samples_free(&r->itl_ms);
    free(r->steps_path);
    *r = (run_results){0};
}

double run_results_number(const run_results *r, const char *key)
{
    json_t *v = json_object_get(r->summary, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

void run_results_config_text(const run_results *r, const char *key, char *buf, size_t size)
{
    json_t *v = r->config ? json_object_get(r->config, key) : NULL;
    if (json_is_string(v)) snprintf(buf, size, "%s", json_string_value(v));
    else if (json_is_integer(v)) snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, size, "%.17g", json_real_value(v));
    else if (json_is_boolean(v)) snprintf(buf, size, "%s", json_is_true(v) ? "true" : "false");
    else snprintf(buf, size, "%s", "");
}
