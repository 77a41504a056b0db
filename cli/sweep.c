/*
 * sweep.c: the sweep runner, `tandem sweep` (the spec format and the directory layout are in
 * sweep.h).
 *
 * Points run in forked worker processes, up to -j at a time; a point writes into
 * points/.tmp-ID-PID/ and is renamed to points/ID/ when complete, so an interrupted sweep
 * leaves whole points or nothing, and a rerun skips what is there. Under MPI (built with
 * OpenMPI and started by mpirun), point i belongs to rank i mod size; each rank runs its own,
 * and rank 0 gathers every point's row over MPI (no shared file system needed) and writes
 * results.csv.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef TANDEM_HAVE_MPI
#include <mpi.h>
#endif

#include <xxhash.h>

#include "cli/commands.h"
#include "cli/provenance.h"
#include "cli/version.h"
#include "cli/serving.h"
#include "cli/sweep.h"
#include "traces/trace.h"

typedef struct sweep_opts {
    char *out;
    int64_t jobs;
    bool keep_requests, keep_steps, quiet, force;
    char *spec; /* the positional argument */
    /* filled by check_points, one per point: */
    char (*identity)[17]; /* what the result depends on: options, binary, input files (hashed) */
    int32_t *files_of;    /* index in files[] of the point's input files */
    char **files;         /* (num_files) distinct "ROLE PATH xxh3:HASH" lines, shared by the points */
    int32_t num_files;
} sweep_opts;

#define O(f) offsetof(sweep_opts, f)
static const opt_spec sweep_option_specs[] = {
    {"out", OPT_STR, O(out), "", "output directory (required)"},
    {"jobs", OPT_I64, O(jobs), "0", "points run at once on this machine (-j; 0: all cores, 1 per rank under MPI)"},
    {"keep-requests", OPT_BOOL, O(keep_requests), "false", "keep each point's requests.csv"},
    {"keep-steps", OPT_BOOL, O(keep_steps), "false", "keep each point's steps.csv"},
    {"quiet", OPT_BOOL, O(quiet), "false", "no progress line and no final summary"},
    {"force", OPT_BOOL, O(force), "false", "rerun every point, even those already done"},
    OPT_END,
};
#undef O

static const char *usage =
    "usage: tandem sweep SPEC --out DIR [-j N] [--keep-requests] [--keep-steps] [--force]\n"
    "       mpirun -np N tandem sweep SPEC --out DIR\n\n"
    "Runs `tandem sim` over the cross product of the options in SPEC (lines `option = v1, v2, ...`,\n"
    "options being sim flags without dashes; `lo..hi[:step]` for integer ranges) and writes\n"
    "DIR/results.csv. Rerunning after an interruption runs only the missing points, and those\n"
    "whose result would differ (stale: another tandem build, or an input file changed since).";

/* The metrics columns of results.csv, after the point's parameters. */
static const char *const metric_cols =
    "completed,num_rejected,duration,request_throughput,request_goodput,output_throughput,"
    "total_token_throughput,mean_ttft_ms,median_ttft_ms,p90_ttft_ms,p99_ttft_ms,mean_tpot_ms,"
    "median_tpot_ms,p90_tpot_ms,p99_tpot_ms,mean_itl_ms,median_itl_ms,p99_itl_ms,mean_e2el_ms,"
    "median_e2el_ms,p90_e2el_ms,p99_e2el_ms,mean_queue_ms,p99_queue_ms,num_preemptions,num_steps,"
    "busy_fraction,peak_kv_usage,mean_kv_usage,mean_batch_size,prefix_cache_hit_rate,"
    "p99.9_tpot_ms,p99.9_itl_ms,max_itl_ms,peak_kv_token_usage,mean_kv_token_usage,num_gpus,load_imbalance";

/* num_gpus: the point's --num-replicas x --tensor-parallel-size (what "fewest GPUs meeting the
 * SLO" minimises). */
static void metrics_row(char *buf, size_t n, const metrics_summary *s, int64_t num_gpus)
{
    char goodput[32] = ""; /* empty when the point set no SLO */
    if (!isnan(s->request_goodput)) snprintf(goodput, sizeof goodput, "%.9g", s->request_goodput);
    snprintf(buf, n,
             "ok,%lld,%lld,%.9g,%.9g,%s,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,"
             "%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%lld,%lld,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%lld,%.9g",
             (long long)s->completed, (long long)s->num_rejected, s->duration_s, s->request_throughput,
             goodput, s->output_throughput, s->total_token_throughput, s->ttft.mean, s->ttft.median,
             s->ttft.p90, s->ttft.p99, s->tpot.mean, s->tpot.median, s->tpot.p90, s->tpot.p99, s->itl.mean,
             s->itl.median, s->itl.p99, s->e2el.mean, s->e2el.median, s->e2el.p90, s->e2el.p99, s->queue.mean,
             s->queue.p99, (long long)s->num_preemptions, (long long)s->num_steps, s->busy_fraction,
             s->peak_kv_usage, s->mean_kv_usage, s->mean_batch_size, s->prefix_cache_hit_rate, s->tpot.p999,
             s->itl.p999, s->itl.max, s->peak_kv_token_usage, s->mean_kv_token_usage, (long long)num_gpus,
             s->load_imbalance);
}

/* The sim options of point `index`. */
static int point_options(const sweep_spec *spec, int64_t index, serving_options *o, terr *e)
{
    const char **vals = xmalloc((size_t)spec->num_params * sizeof *vals);
    sweep_point_values(spec, index, vals);
    *o = (serving_options){0};
    serving_options_defaults(o);
    int rc = 0;
    for (int p = 0; p < spec->num_params && rc == 0; p++)
        rc = opts_set(serving_option_specs(), o, spec->params[p].name, vals[p], e);
    free(vals);
    return rc;
}

static void describe_point(const sweep_spec *spec, int64_t index, char *buf, size_t n)
{
    const char **vals = xmalloc((size_t)spec->num_params * sizeof *vals);
    sweep_point_values(spec, index, vals);
    size_t k = 0;
    for (int p = 0; p < spec->num_params && k < n; p++)
        if (spec->params[p].num_values > 1)
            k += (size_t)snprintf(buf + k, n - k, "%s%s=%s", k ? ", " : "", spec->params[p].name, vals[p]);
    if (k == 0) snprintf(buf, n, "the only point");
    free(vals);
}

/* Content hashes of the input files, by path: each file is read once per sweep. */
typedef struct hash_cache {
    char **path, (*hex)[17];
    int n;
} hash_cache;

static int cached_hash(hash_cache *c, const char *path, char hex[17], terr *e)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->path[i], path)) return memcpy(hex, c->hex[i], 17), 0;
    if (provenance_hash_file(path, hex, e)) return -1;
    c->path = xrealloc(c->path, (size_t)(c->n + 1) * sizeof *c->path);
    c->hex = xrealloc(c->hex, (size_t)(c->n + 1) * sizeof *c->hex);
    c->path[c->n] = xstrdup(path);
    memcpy(c->hex[c->n++], hex, 17);
    return 0;
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Point `index`'s identity: its option values (the id), the binary's build id, and the content
 * hash of every file it reads: the trace, a profile given as a file, a model config file (shipped
 * configs and profiles are inside the binary). Sets so->identity[index] and so->files_of[index]
 * (the lines inputs.txt lists after the identity and the binary). */
static int point_identity(const sweep_spec *spec, int64_t index, const serving_options *o, const serving_setup *su,
                          hash_cache *cache, sweep_opts *so, terr *e)
{
    char id[17], model_file[4200] = "";
    sweep_point_id(spec, index, id);
    const char *model = strncmp(o->model, "synthetic:", 10) ? o->model : o->model + 10;
    struct stat st;
    if (is_file(model)) snprintf(model_file, sizeof model_file, "%s", model);
    else if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(model_file, sizeof model_file, "%s/config.json", model);
    const char *profile = su->cost_model_arg[0] && is_file(su->cost_model_arg) ? su->cost_model_arg : NULL;
    const struct {
        const char *role, *path;
    } files[] = {{"trace", o->trace}, {"model-config", model_file[0] ? model_file : NULL}, {"profile", profile}};
    XXH3_state_t *st3 = XXH3_createState();
    XXH3_64bits_reset(st3);
    XXH3_64bits_update(st3, id, 17);
    XXH3_64bits_update(st3, provenance_build_id(), strlen(provenance_build_id()) + 1);
    char *body = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&body, &len);
    int rc = 0;
    for (size_t k = 0; k < ARRAY_LEN(files) && rc == 0; k++) {
        if (!files[k].path) continue;
        char hex[17], line[4400];
        if ((rc = cached_hash(cache, files[k].path, hex, e))) break;
        int n = snprintf(line, sizeof line, "%s %s xxh3:%s\n", files[k].role, files[k].path, hex);
        XXH3_64bits_update(st3, line, (size_t)n);
        fputs(line, f);
    }
    fclose(f);
    snprintf(so->identity[index], 17, "%016llx", (unsigned long long)XXH3_64bits_digest(st3));
    XXH3_freeState(st3);
    int32_t k = 0;
    while (k < so->num_files && strcmp(so->files[k], body)) k++;
    if (k == so->num_files) {
        so->files = xrealloc(so->files, (size_t)(k + 1) * sizeof *so->files);
        so->files[so->num_files++] = body;
    } else free(body);
    so->files_of[index] = k;
    return rc;
}

/* Every point must resolve (types, vLLM's start-up rules, its cost model: a profile is read and
 * fitted here, once, and the forked workers inherit the fit), every trace must open: a bad spec
 * fails before anything runs. Computes every point's identity into so, and prints each distinct
 * warning (an option that cannot change a result) once. */
static int check_points(const sweep_spec *spec, sweep_opts *so, terr *e)
{
    hash_cache cache = {0};
    so->identity = xcalloc((size_t)spec->num_points, sizeof *so->identity);
    so->files_of = xcalloc((size_t)spec->num_points, sizeof *so->files_of);
    char **seen = NULL;
    int num_seen = 0, rc = 0;
    for (int64_t i = 0; i < spec->num_points && rc == 0; i++) {
        serving_options o;
        serving_setup su;
        terr pe;
        serving_warnings w;
        rc = point_options(spec, i, &o, &pe);
        if (rc == 0) rc = serving_resolve(&o, &su, &pe);
        if (rc == 0) rc = serving_check_cost_model(&o, &su, &pe);
        if (rc == 0) rc = serving_collect_warnings(&o, &su, false, &w, &pe);
        if (rc == 0) rc = point_identity(spec, i, &o, &su, &cache, so, &pe);
        serving_options_free(&o);
        if (rc) {
            char what[1024];
            describe_point(spec, i, what, sizeof what);
            terr_set(e, "%s: point %lld (%s): %s", spec->origin, (long long)i, what, pe.msg);
            break;
        }
        for (int k = 0; k < w.n; k++) {
            int j = 0;
            while (j < num_seen && strcmp(seen[j], w.msg[k])) j++;
            if (j < num_seen) continue;
            seen = xrealloc(seen, (size_t)(num_seen + 1) * sizeof *seen);
            seen[num_seen++] = xstrdup(w.msg[k]);
        }
    }
    if (rc == 0 && !so->quiet)
        for (int j = 0; j < num_seen; j++) fprintf(stderr, "tandem sweep: warning: %s\n", seen[j]);
    for (int j = 0; j < num_seen; j++) free(seen[j]);
    free(seen);
    for (int k = 0; k < cache.n; k++) free(cache.path[k]);
    free(cache.path);
    free(cache.hex);
    return rc;
}

static void point_dir(char *buf, size_t n, const char *out, const char *id) { snprintf(buf, n, "%s/points/%s", out, id); }

/* Whether a file starts with `text`. */
static bool starts_with(const char *path, const char *text)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = strlen(text);
    char *head = xmalloc(n + 1);
    size_t got = fread(head, 1, n, f);
    fclose(f);
    bool ok = got == n && memcmp(head, text, n) == 0;
    free(head);
    return ok;
}

typedef enum { POINT_MISSING, POINT_DONE, POINT_STALE } point_state;

/* A point is done when its row.csv was written with today's columns (its first line) and its
 * inputs.txt names the identity this run computes (same options, binary and input files).
 * Stale: there, but from another tandem or other inputs; it runs again. */
static point_state point_status(const char *out, const char *id, const char *identity)
{
    char path[4200], want[64];
    snprintf(path, sizeof path, "%s/points/%s", out, id);
    if (access(path, F_OK)) return POINT_MISSING;
    snprintf(path, sizeof path, "%s/points/%s/row.csv", out, id);
    char *cols = xmalloc(strlen(metric_cols) + 2);
    sprintf(cols, "%s\n", metric_cols);
    bool ok = starts_with(path, cols);
    free(cols);
    snprintf(path, sizeof path, "%s/points/%s/inputs.txt", out, id);
    snprintf(want, sizeof want, "identity %s\n", identity);
    return ok && starts_with(path, want) ? POINT_DONE : POINT_STALE;
}

/* A done point lacks what --keep-requests / --keep-steps ask for (a failed point has none). */
static bool point_lacks_files(const sweep_opts *so, const char *id)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/points/%s/error.txt", so->out, id);
    if (!access(path, F_OK)) return false;
    snprintf(path, sizeof path, "%s/points/%s/requests.csv", so->out, id);
    if (so->keep_requests && access(path, F_OK)) return true;
    snprintf(path, sizeof path, "%s/points/%s/steps.csv", so->out, id);
    return so->keep_steps && access(path, F_OK);
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    int bad = ferror(f);
    return fclose(f) || bad ? -1 : 0;
}

/* Runs point `index` into a temporary directory and renames it into place. Returns 0 when the
 * point is complete (run, or failed with its error recorded), -1 if it could not be written. */
static int run_point(const sweep_spec *spec, const sweep_opts *so, int64_t index, int rank, int size)
{
    char id[17], final_dir[4400], tmp[4400], path[9000];
    sweep_point_id(spec, index, id);
    point_dir(final_dir, sizeof final_dir, so->out, id);
    /* what an interrupted earlier attempt at this point left behind */
    char pdir[4200];
    snprintf(pdir, sizeof pdir, "%s/points", so->out);
    char prefix[64];
    snprintf(prefix, sizeof prefix, ".tmp-%s-", id);
    DIR *d = opendir(pdir);
    for (struct dirent *de; d && (de = readdir(d));) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0) {
            snprintf(path, sizeof path, "%s/%s", pdir, de->d_name);
            remove_tree(path);
        }
    }
    if (d) closedir(d);
    snprintf(tmp, sizeof tmp, "%s/points/.tmp-%s-%d", so->out, id, (int)getpid());
    if (mkdir_p(tmp)) return -1;

    serving_options o;
    serving_setup su;
    terr e = {{0}};
    char row[2048];
    int rc = point_options(spec, index, &o, &e);
    if (rc == 0) {
        free(o.out);
        o.out = xstrdup(tmp);
        o.quiet = true;
        o.requests = so->keep_requests;
        o.steps = so->keep_steps;
        rc = serving_resolve(&o, &su, &e);
    }
    metrics_summary sum;
    if (rc == 0) rc = serving_simulate(&o, &su, &sum, &e);
    int64_t num_gpus = o.num_replicas * o.tensor_parallel_size;
    serving_options_free(&o);
    if (rc == 0) metrics_row(row, sizeof row, &sum, num_gpus);
    else {
        snprintf(row, sizeof row, "error");
        snprintf(path, sizeof path, "%s/error.txt", tmp);
        write_text(path, e.msg);
    }
    snprintf(path, sizeof path, "%s/row.csv", tmp);
    char *text = xmalloc(strlen(metric_cols) + strlen(row) + 3);
    sprintf(text, "%s\n%s\n", metric_cols, row);
    char who[128];
    snprintf(who, sizeof who, "rank %d of %d, pid %d\n", rank, size, (int)getpid());
    char who_path[4500];
    snprintf(who_path, sizeof who_path, "%s/ran_by.txt", tmp);
    char inputs_path[4500];
    snprintf(inputs_path, sizeof inputs_path, "%s/inputs.txt", tmp);
    char *inputs = xmalloc(strlen(so->files[so->files_of[index]]) + strlen(tandem_version) + 200);
    sprintf(inputs, "identity %s\ntandem %s build %s\n%s", so->identity[index], tandem_version, provenance_build_id(),
            so->files[so->files_of[index]]);
    int wrc = write_text(path, text) || write_text(who_path, who) || write_text(inputs_path, inputs);
    free(inputs);
    free(text);
    if (wrc) return -1;
    remove_tree(final_dir); /* a stale point is replaced */
    if (rename(tmp, final_dir)) {
        remove_tree(tmp); /* someone else completed it meanwhile: theirs stands */
        if (point_status(so->out, id, so->identity[index]) != POINT_DONE) return -1;
    }
    return 0;
}

/* ---- progress ---- */

typedef struct progress {
    bool tty;
    int64_t total, done, skipped, failed, stale; /* stale: of those to run, how many were there but stale */
    struct timespec start;
} progress;

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void progress_show(const progress *p)
{
    if (!p->tty) return;
    double el = since(&p->start), rate = el > 0 ? (double)p->done / el : 0;
    int64_t left = p->total - p->done - p->skipped - p->failed;
    double eta = rate > 0 ? (double)left / rate : 0;
    fprintf(stderr, "\rsweep: %lld/%lld points done (%lld skipped), %.2f points/s, %dm%02ds left   ",
            (long long)(p->done + p->skipped), (long long)p->total, (long long)p->skipped, rate,
            (int)(eta / 60), (int)eta % 60);
    fflush(stderr);
}

/* ---- the local pool ---- */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

/* Runs `todo` points with up to `jobs` worker processes, or one after another in this process
 * under MPI (where forking is unsafe; mpirun delivers Ctrl-C to every rank). Workers die with
 * the sweep (PR_SET_PDEATHSIG: a kill -9 of the sweep leaves none running), and Ctrl-C stops
 * them at once, -j 1 included: the point being run is lost, never half-written. */
static void run_pool(const sweep_spec *spec, const sweep_opts *so, const int64_t *todo, int64_t n, int jobs,
                     bool in_process, int rank, int size, progress *pr)
{
    if (in_process) {
        for (int64_t i = 0; i < n && !interrupted; i++) {
            if (run_point(spec, so, todo[i], rank, size)) pr->failed++;
            else pr->done++;
            progress_show(pr);
        }
        return;
    }
    pid_t *pids = xcalloc((size_t)jobs, sizeof *pids);
    int64_t next = 0, running = 0;
    while ((next < n && !interrupted) || running > 0) {
        while (next < n && running < jobs && !interrupted) {
            pid_t parent = getpid(), pid = fork();
            if (pid == 0) {
                signal(SIGINT, SIG_DFL);
                signal(SIGTERM, SIG_DFL);
                if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent) _exit(1); /* it died already */
                _exit(run_point(spec, so, todo[next], rank, size) ? 1 : 0);
            }
            if (pid < 0) break;
            for (int k = 0; k < jobs; k++)
                if (!pids[k]) {
                    pids[k] = pid;
                    break;
                }
            next++;
            running++;
        }
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) {
                if (interrupted)
                    for (int k = 0; k < jobs; k++)
                        if (pids[k]) kill(pids[k], SIGTERM);
                continue;
            }
            break;
        }
        for (int k = 0; k < jobs; k++)
            if (pids[k] == pid) pids[k] = 0;
        running--;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) pr->done++;
        else pr->failed++;
        progress_show(pr);
    }
    free(pids);
}

/* ---- results.csv ---- */

static void csv_field(FILE *f, const char *v)
{
    if (!strpbrk(v, ",\"\n")) {
        fputs(v, f);
        return;
    }
    fputc('"', f);
    for (; *v; v++) {
        if (*v == '"') fputc('"', f);
        fputc(*v, f);
    }
    fputc('"', f);
}

/* The point's row (row.csv's second line), or NULL if it is missing or stale. */
static char *read_row(const char *out, const char *id, const char *identity)
{
    if (point_status(out, id, identity) != POINT_DONE) return NULL;
    char path[4300];
    snprintf(path, sizeof path, "%s/points/%s/row.csv", out, id);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *row = strchr(buf, '\n');
    if (!row) return NULL;
    row++;
    row[strcspn(row, "\n")] = 0;
    return xstrdup(row);
}

static int write_results(const sweep_spec *spec, const char *out, char **rows, terr *e)
{
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/results.csv", out);
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return terr_set(e, "%s: cannot write: %s", tmp, strerror(errno));
    fputs("point,id,", f);
    for (int p = 0; p < spec->num_params; p++) {
        csv_field(f, spec->params[p].name);
        fputc(',', f);
    }
    fprintf(f, "status,%s\n", metric_cols);
    const char **vals = xmalloc((size_t)spec->num_params * sizeof *vals);
    for (int64_t i = 0; i < spec->num_points; i++) {
        char id[17];
        sweep_point_id(spec, i, id);
        sweep_point_values(spec, i, vals);
        fprintf(f, "%lld,%s,", (long long)i, id);
        for (int p = 0; p < spec->num_params; p++) {
            csv_field(f, vals[p]);
            fputc(',', f);
        }
        fprintf(f, "%s\n", rows[i] ? rows[i] : "missing");
    }
    free(vals);
    int bad = ferror(f); /* a write that failed earlier: fclose reports only its own */
    if (fclose(f) || bad || rename(tmp, path)) {
        unlink(tmp);
        return terr_set(e, "%s: cannot write", path);
    }
    return 0;
}

/* ---- main ---- */

static int take_spec(void *dst, const char *arg, terr *e)
{
    sweep_opts *so = dst;
    if (so->spec) return terr_set(e, "unexpected argument \"%s\": one SPEC file only", arg);
    so->spec = xstrdup(arg);
    return 0;
}

static bool started_by_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int sweep_main(int argc, char **argv)
{
    /* -j N / -jN is the one short option, as make's */
    char **args = xcalloc((size_t)argc + 2, sizeof *args);
    int n = 0;
    char jbuf[64];
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-j") && i + 1 < argc) {
            args[n++] = "--jobs";
            args[n++] = argv[++i];
        } else if (!strncmp(argv[i], "-j", 2) && argv[i][2]) {
            snprintf(jbuf, sizeof jbuf, "--jobs=%s", argv[i] + 2);
            args[n++] = jbuf;
        } else {
            args[n++] = argv[i];
        }
    }
    sweep_opts so = {0};
    opts_defaults(sweep_option_specs, &so);
    terr e = {{0}};
    int rc = opts_parse(sweep_option_specs, &so, n, args, take_spec, usage, &e);
    free(args);
    int code = 2;
    sweep_spec spec = {0};
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (rc) goto fail;
    if (!so.spec) {
        terr_set(&e, "a SPEC file is required (see --help)");
        goto fail;
    }
    if (!so.out) {
        terr_set(&e, "--out DIR is required");
        goto fail;
    }
    if (so.jobs < 0 || so.jobs > 4096) {
        terr_set(&e, "--jobs: %lld is out of range [0, 4096]", (long long)so.jobs);
        goto fail;
    }
    if (sweep_spec_load(&spec, so.spec, &e) || check_points(&spec, &so, &e)) goto fail;

    int rank = 0, size = 1;
    bool mpi = started_by_mpirun();
#ifdef TANDEM_HAVE_MPI
    if (mpi) {
        MPI_Init(NULL, NULL);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
#else
    if (mpi) {
        terr_set(&e, "started by mpirun, but this tandem was built without MPI (install libopenmpi-dev and rebuild)");
        goto fail;
    }
#endif
    char pdir[4200];
    snprintf(pdir, sizeof pdir, "%s/points", so.out);
    if (mkdir_p(pdir)) {
        terr_set(&e, "--out %s: cannot create %s: %s", so.out, pdir, strerror(errno));
        code = 1;
        goto fail_mpi;
    }
    /* A second sweep into DIR while one runs would race it for the same points and results.csv:
     * refused. DIR/.lock is held (flock: a killed sweep holds nothing) until this process and
     * its workers exit. Under MPI the ranks share DIR by design. */
    if (!mpi) {
        char lock[4300];
        snprintf(lock, sizeof lock, "%s/.lock", so.out);
        int lock_fd = open(lock, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
        if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB)) {
            if (lock_fd < 0) terr_set(&e, "--out %s: cannot create %s: %s", so.out, lock, strerror(errno));
            else terr_set(&e, "--out %s: another sweep is writing it (it holds %s)", so.out, lock);
            if (lock_fd >= 0) close(lock_fd);
            code = 1;
            goto fail_mpi;
        }
    }

    /* this rank's points that are not done yet */
    int64_t *todo = xmalloc((size_t)spec.num_points * sizeof *todo), ntodo = 0;
    progress pr = {.tty = !so.quiet && isatty(2)};
    clock_gettime(CLOCK_MONOTONIC, &pr.start);
    for (int64_t i = rank; i < spec.num_points; i += size) {
        char id[17];
        sweep_point_id(&spec, i, id);
        pr.total++;
        point_state ps = point_status(so.out, id, so.identity[i]);
        if (ps == POINT_DONE && !so.force && !point_lacks_files(&so, id)) pr.skipped++;
        else todo[ntodo++] = i, pr.stale += ps == POINT_STALE;
    }
    int jobs = so.jobs ? (int)so.jobs : mpi ? 1 : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    progress_show(&pr);
    run_pool(&spec, &so, todo, ntodo, jobs, mpi, rank, size, &pr);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(todo);
    if (pr.tty) fputc('\n', stderr);
    if (interrupted) {
        fprintf(stderr, "tandem sweep: interrupted; %lld points done are kept: rerun the same command to finish\n",
                (long long)(pr.done + pr.skipped));
        code = 130;
        goto fail_mpi_quiet;
    }

    /* gather every point's row: this rank's from its point directories, the others' over MPI */
    char **rows = xcalloc((size_t)spec.num_points, sizeof *rows);
    for (int64_t i = rank; i < spec.num_points; i += size) {
        char id[17];
        sweep_point_id(&spec, i, id);
        rows[i] = read_row(so.out, id, so.identity[i]);
    }
#ifdef TANDEM_HAVE_MPI
    if (mpi && size > 1) {
        /* each rank sends "index\trow\n" lines; rank 0 receives them all */
        size_t cap = 1024, len = 0;
        char *mine = xmalloc(cap);
        for (int64_t i = rank; i < spec.num_points; i += size) {
            if (!rows[i]) continue;
            size_t need = strlen(rows[i]) + 32;
            while (len + need >= cap) mine = xrealloc(mine, cap *= 2);
            len += (size_t)sprintf(mine + len, "%lld\t%s\n", (long long)i, rows[i]);
        }
        int mylen = (int)len, *lens = NULL, *displs = NULL;
        char *all = NULL;
        if (rank == 0) lens = xcalloc((size_t)size, sizeof *lens), displs = xcalloc((size_t)size, sizeof *displs);
        MPI_Gather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
        int total = 0;
        if (rank == 0) {
            for (int r = 0; r < size; r++) displs[r] = total, total += lens[r];
            all = xmalloc((size_t)total + 1);
        }
        MPI_Gatherv(mine, mylen, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            all[total] = 0;
            for (char *line = all, *nl; *line; line = nl + 1) {
                nl = strchr(line, '\n');
                *nl = 0;
                char *tab = strchr(line, '\t');
                long long i = strtoll(line, NULL, 10);
                if (tab && i >= 0 && i < spec.num_points && !rows[i]) rows[i] = xstrdup(tab + 1);
            }
        }
        free(mine);
        free(all);
        free(lens);
        free(displs);
        /* every rank's points count in the final line */
        int64_t mine4[4] = {pr.done, pr.skipped, pr.failed, pr.stale}, all4[4] = {0};
        MPI_Reduce(mine4, all4, 4, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
        pr.done = all4[0], pr.skipped = all4[1], pr.failed = all4[2], pr.stale = all4[3];
    }
#endif
    code = 0;
    if (rank == 0) {
        int64_t errors = 0, missing = 0;
        for (int64_t i = 0; i < spec.num_points; i++) {
            if (!rows[i]) missing++;
            else if (!strncmp(rows[i], "error", 5)) errors++;
        }
        if (write_results(&spec, so.out, rows, &e)) {
            fprintf(stderr, "tandem sweep: %s\n", e.msg);
            code = 1;
        } else if (!so.quiet) {
            char stale[48] = "";
            if (pr.stale) snprintf(stale, sizeof stale, " (%lld stale)", (long long)pr.stale);
            printf("sweep: %lld points (%lld run now%s, %lld already done, %lld errors, %lld missing) -> %s/results.csv\n",
                   (long long)spec.num_points, (long long)pr.done, stale, (long long)pr.skipped, (long long)errors,
                   (long long)missing, so.out);
        }
        if (missing) {
            fprintf(stderr, "tandem sweep: %lld points did not complete; rerun the same command to retry them\n",
                    (long long)missing);
            code = 1;
        }
    }
    for (int64_t i = 0; i < spec.num_points; i++) free(rows[i]);
    free(rows);
fail_mpi_quiet:
#ifdef TANDEM_HAVE_MPI
    if (mpi) MPI_Finalize();
#endif
    goto done;
fail_mpi:
#ifdef TANDEM_HAVE_MPI
    if (mpi) MPI_Finalize();
#endif
fail:
    fprintf(stderr, "tandem sweep: %s\n", e.msg);
done:
    for (int32_t i = 0; i < so.num_files; i++) free(so.files[i]);
    free(so.files);
    free(so.files_of);
    free(so.identity);
    sweep_spec_free(&spec);
    free(so.spec);
    opts_free(sweep_option_specs, &so);
    return code;
}
