/* timeline.c: see timeline.h. */
#include "cli/timeline.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/csv_rows.h"

enum { PID_STEPS = 1, PID_REQUESTS = 2 };

typedef struct writer {
    FILE *f;
    bool first;
} writer;

/* Writes ev (and drops the reference). */
static void emit(writer *w, json_t *ev)
{
    char *s = json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(10));
    fprintf(w->f, "%s\n%s", w->first ? "" : ",", s);
    w->first = false;
    free(s);
    json_decref(ev);
}

static void meta(writer *w, const char *what, int pid, long long tid, const char *key, json_t *value)
{
    json_t *ev = json_pack("{s:s, s:s, s:i, s:I}", "name", what, "ph", "M", "pid", pid, "tid", (json_int_t)tid);
    json_object_set_new(ev, "args", json_pack("{s:o}", key, value));
    emit(w, ev);
}

/* A complete event ("X") of [t0, t1) seconds. */
static void span(writer *w, int pid, long long tid, const char *name, const char *cat, double t0, double t1,
                 json_t *args)
{
    json_t *ev = json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:I}", "name", name, "cat", cat, "ph", "X", "pid", pid,
                           "tid", (json_int_t)tid, "ts", (json_int_t)llround(t0 * 1e6), "dur",
                           (json_int_t)llround(fmax(t1 - t0, 0) * 1e6));
    if (args) json_object_set_new(ev, "args", args);
    emit(w, ev);
}

static json_t *num_json(const char *s)
{
    int64_t i;
    double x;
    if (!parse_i64(s, &i)) return json_integer(i);
    if (!parse_f64(s, &x)) return json_real(x);
    return json_string(s);
}

/* Column numbers of names in t (all of them must be there). */
static int columns(const csv_rows *t, const char *const *names, int n, int *c, terr *e)
{
    for (int k = 0; k < n; k++)
        if ((c[k] = csv_rows_need(t, names[k], e)) < 0) return -1;
    return 0;
}

static int number(const csv_rows *t, int c, double *v, terr *e)
{
    const char *s = csv_rows_at(t, c);
    if (parse_f64(s, v))
        return terr_set(e, "%s:%lld: %s \"%s\" is not a number", t->path, (long long)csv_rows_line(t),
                        csv_rows_name(t, c), s);
    return 0;
}

static bool exists(const char *path)
{
    struct stat st;
    return !stat(path, &st);
}

static int write_steps(writer *w, const char *path, timeline_counts *n, terr *e)
{
    static const char *const cols[] = {"step", "start_s", "duration_ms", "batch_size", "prefill_tokens",
                                       "decode_tokens", "num_prefill_seqs", "num_decode_seqs", "num_running",
                                       "num_waiting", "kv_usage", "num_preemptions"};
    enum { C_STEP, C_START, C_DUR, C_FIRST_ARG };
    csv_rows t;
    if (csv_rows_open(&t, path, e)) return -1;
    int c[ARRAY_LEN(cols)], rc = columns(&t, cols, (int)ARRAY_LEN(cols), c, e);
    if (!rc) {
        meta(w, "process_name", PID_STEPS, 0, "name", json_string("steps"));
        meta(w, "process_sort_index", PID_STEPS, 0, "sort_index", json_integer(0));
        meta(w, "thread_name", PID_STEPS, 0, "name", json_string("model steps"));
    }
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        double start, dur;
        if ((rc = number(&t, c[C_START], &start, e)) || (rc = number(&t, c[C_DUR], &dur, e))) break;
        json_t *args = json_object();
        for (size_t k = C_FIRST_ARG; k < ARRAY_LEN(cols); k++)
            json_object_set_new(args, cols[k], num_json(csv_rows_at(&t, c[k])));
        char name[64];
        snprintf(name, sizeof name, "step %s", csv_rows_at(&t, c[C_STEP]));
        const char *pre = csv_rows_at(&t, c[4]), *dec = csv_rows_at(&t, c[5]);
        const char *cat = strcmp(pre, "0") ? (strcmp(dec, "0") ? "mixed" : "prefill") : "decode";
        span(w, PID_STEPS, 0, name, cat, start, start + dur / 1000, args);
        /* counters: the viewers draw each name as a track of its own */
        json_t *ev = json_pack("{s:s, s:s, s:i, s:I}", "name", "KV cache usage", "ph", "C", "pid", PID_STEPS, "ts",
                               (json_int_t)llround(start * 1e6));
        json_object_set_new(ev, "args", json_pack("{s:o}", "kv_usage", num_json(csv_rows_at(&t, c[10]))));
        emit(w, ev);
        ev = json_pack("{s:s, s:s, s:i, s:I}", "name", "requests", "ph", "C", "pid", PID_STEPS, "ts",
                       (json_int_t)llround(start * 1e6));
        json_object_set_new(ev, "args", json_pack("{s:o, s:o}", "running", num_json(csv_rows_at(&t, c[8])),
                                                  "waiting", num_json(csv_rows_at(&t, c[9]))));
        emit(w, ev);
        n->steps++;
    }
    csv_rows_close(&t);
    return rc;
}

/* preemptions.csv, as spans per request id: (*spans)[k] = {id, from_s, to_s, swapped}. */
typedef struct pspan {
    int64_t id;
    double from, to; /* to: NAN while not resumed */
    bool swapped;
} pspan;

static int cmp_pspan(const void *a, const void *b)
{
    const pspan *x = a, *y = b;
    if (x->id != y->id) return (x->id > y->id) - (x->id < y->id);
    return (x->from > y->from) - (x->from < y->from);
}

static int read_preemptions(const char *path, pspan **out, size_t *num, terr *e)
{
    static const char *const cols[] = {"time_s", "id", "event"};
    csv_rows t;
    *out = NULL;
    *num = 0;
    if (csv_rows_open(&t, path, e)) return -1;
    int c[3], rc = columns(&t, cols, 3, c, e);
    size_t cap = 0;
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        double time, idf;
        if ((rc = number(&t, c[0], &time, e)) || (rc = number(&t, c[1], &idf, e))) break;
        int64_t id = (int64_t)idf;
        const char *ev = csv_rows_at(&t, c[2]);
        if (!strcmp(ev, "resumed")) {
            size_t k = *num;
            while (k > 0 && (*out)[k - 1].id != id) k--;
            if (k == 0 || !isnan((*out)[k - 1].to))
                rc = terr_set(e, "%s:%lld: request %lld resumed without being preempted", path,
                              (long long)csv_rows_line(&t), (long long)id);
            else (*out)[k - 1].to = time;
        } else if (!strcmp(ev, "preempted") || !strcmp(ev, "swapped")) {
            grow_array((void **)out, sizeof **out, &cap, *num + 1);
            (*out)[(*num)++] = (pspan){id, time, NAN, ev[0] == 's'};
        } else {
            rc = terr_set(e, "%s:%lld: unknown event \"%s\" (preempted, swapped or resumed)", path,
                          (long long)csv_rows_line(&t), ev);
        }
    }
    csv_rows_close(&t);
    if (!rc) qsort(*out, *num, sizeof **out, cmp_pspan);
    return rc;
}

static int write_requests(writer *w, const char *path, const pspan *ps, size_t nps, timeline_counts *n, terr *e)
{
    static const char *const cols[] = {"id",          "arrival_s",     "first_scheduled_s", "first_token_s",
                                       "finish_s",    "state",         "prompt_tokens",     "output_tokens",
                                       "preemptions", "priority",      "ttft_ms",           "e2el_ms",
                                       "reject_reason"};
    enum { C_ID, C_ARR, C_SCHED, C_FIRST, C_FIN, C_STATE, C_FIRST_ARG };
    csv_rows t;
    if (csv_rows_open(&t, path, e)) return -1;
    int c[ARRAY_LEN(cols)], rc = columns(&t, cols, (int)ARRAY_LEN(cols), c, e);
    if (!rc) {
        meta(w, "process_name", PID_REQUESTS, 0, "name", json_string("requests"));
        meta(w, "process_sort_index", PID_REQUESTS, 0, "sort_index", json_integer(1));
    }
    for (int more; !rc && (more = csv_rows_next(&t, e)) != 0;) {
        if (more < 0) {
            rc = -1;
            break;
        }
        double idf, arr, fin = NAN, sched = NAN, first = NAN;
        if ((rc = number(&t, c[C_ID], &idf, e)) || (rc = number(&t, c[C_ARR], &arr, e))) break;
        if (*csv_rows_at(&t, c[C_FIN]) && (rc = number(&t, c[C_FIN], &fin, e))) break;
        if (isnan(fin)) fin = arr; /* rejected on arrival: an empty span, its reason in args */
        if (*csv_rows_at(&t, c[C_SCHED]) && (rc = number(&t, c[C_SCHED], &sched, e))) break;
        if (*csv_rows_at(&t, c[C_FIRST]) && (rc = number(&t, c[C_FIRST], &first, e))) break;
        long long id = (long long)idf;
        char name[64];
        snprintf(name, sizeof name, "request %lld", id);
        meta(w, "thread_name", PID_REQUESTS, id, "name", json_string(name));
        meta(w, "thread_sort_index", PID_REQUESTS, id, "sort_index", json_integer(id));
        json_t *args = json_object();
        for (size_t k = C_FIRST_ARG; k < ARRAY_LEN(cols); k++)
            if (*csv_rows_at(&t, c[k])) json_object_set_new(args, cols[k], num_json(csv_rows_at(&t, c[k])));
        const char *state = csv_rows_at(&t, c[C_STATE]);
        span(w, PID_REQUESTS, id, name, state, arr, fin, args);
        /* phases: each ends where the next begins; a rejected request only queued */
        double q_end = isnan(sched) ? fin : sched;
        span(w, PID_REQUESTS, id, "queued", "queued", arr, q_end, NULL);
        if (!isnan(sched)) span(w, PID_REQUESTS, id, "prefill", "prefill", sched, isnan(first) ? fin : first, NULL);
        if (!isnan(first)) span(w, PID_REQUESTS, id, "decode", "decode", first, fin, NULL);
        /* the request's preempted spans (ps is sorted by id) */
        size_t lo = 0, hi = nps;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (ps[mid].id < id) lo = mid + 1;
            else hi = mid;
        }
        for (size_t k = lo; k < nps && ps[k].id == id; k++) {
            span(w, PID_REQUESTS, id, ps[k].swapped ? "preempted (swapped)" : "preempted (recompute)", "preempted",
                 ps[k].from, isnan(ps[k].to) ? fin : ps[k].to, NULL);
            n->preempted_spans++;
        }
        n->requests++;
    }
    csv_rows_close(&t);
    return rc;
}

int timeline_write(FILE *out, const char *dir, timeline_counts *n, terr *e)
{
    char req[4200], steps[4200], pre[4200];
    snprintf(req, sizeof req, "%s/requests.csv", dir);
    snprintf(steps, sizeof steps, "%s/steps.csv", dir);
    snprintf(pre, sizeof pre, "%s/preemptions.csv", dir);
    memset(n, 0, sizeof *n);
    if (!exists(req))
        return terr_set(e, "%s: not a run directory (no requests.csv; `tandem sim --out DIR` writes one)", dir);
    n->have_steps = exists(steps);
    n->have_preemptions = exists(pre);
    pspan *ps = NULL;
    size_t nps = 0;
    if (n->have_preemptions && read_preemptions(pre, &ps, &nps, e)) return -1;
    writer w = {out, true};
    fprintf(out, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    int rc = n->have_steps ? write_steps(&w, steps, n, e) : 0;
    if (!rc) rc = write_requests(&w, req, ps, nps, n, e);
    fprintf(out, "\n]}\n");
    free(ps);
    return rc;
}
