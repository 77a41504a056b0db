/* testutil.c: see testutil.h. */
#include "testutil.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

json_t *load_json(const char *dir, const char *name)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j, "%s: %s", path, je.text);
    return j;
}

char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

cli_result run_cliv(char *const argv[])
{
    cli_result r = {0};
    char out_path[] = "/tmp/tandem-test-out-XXXXXX", err_path[] = "/tmp/tandem-test-err-XXXXXX";
    int fo = mkstemp(out_path), fe = mkstemp(err_path);
    ck_assert_msg(fo >= 0 && fe >= 0, "cannot create temp files for CLI output");
    const char *bin = getenv("TANDEM_BIN") ? getenv("TANDEM_BIN") : "build/tandem";
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork failed");
    if (pid == 0) {
        dup2(fo, 1);
        dup2(fe, 2);
        execv(bin, argv);
        fprintf(stderr, "cannot exec %s\n", bin);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    close(fo);
    close(fe);
    r.out = slurp(out_path, NULL);
    r.err = slurp(err_path, NULL);
    unlink(out_path);
    unlink(err_path);
    return r;
}

cli_result run_cli(const char *arg0, ...)
{
    char *argv[64];
    int n = 0;
    argv[n++] = "tandem";
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a && n < 63; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    return run_cliv(argv);
}

void cli_result_free(cli_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

char *make_temp_dir(const char *tag)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/tandem-%s-XXXXXX", base, tag);
    ck_assert_msg(mkdtemp(path) != NULL, "mkdtemp %s failed", path);
    return path;
}

char *write_temp_file(const char *dir, const char *name, const char *text)
{
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

int run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

/* ---- fixtures ---- */
#include "core/serve.h"

static int array_next(void *self, arrival *out, terr *e)
{
    (void)e;
    array_source *s = self;
    if (s->pos >= s->n) return 0;
    *out = s->items[s->pos++];
    return 1;
}

arrival_source array_source_make(array_source *s, const arrival *items, int n)
{
    *s = (array_source){items, n, 0};
    return (arrival_source){array_next, s};
}

static int linear_execute(void *self, const batch *b, step_result *out, terr *e)
{
    (void)e;
    linear_exec *x = self;
    out->duration_ns = x->base_ns + x->per_token_ns * b->num_tokens;
    out->sampled = NULL;
    return 0;
}

static const executor_ops linear_ops = {.name = "linear", .execute = linear_execute};

executor linear_exec_make(linear_exec *x) { return (executor){&linear_ops, x}; }

static void log_step(void *ud, int64_t step, const batch *b, int64_t start_ns, int64_t dur_ns)
{
    (void)step, (void)start_ns, (void)dur_ns;
    step_log *log = ud;
    if (log->n >= 256) return;
    char *line = log->lines[log->n++];
    size_t k = 0;
    line[0] = 0;
    for (int i = 0; i < b->num_items && k < 200; i++)
        k += (size_t)snprintf(line + k, 256 - k, "%s%lld:%d", i ? " " : "",
                              (long long)b->items[i].req->id, b->items[i].num_tokens);
    for (int i = 0; i < b->num_preempted && k < 250; i++) k += (size_t)snprintf(line + k, 256 - k, " P");
    if (b->num_padding_tokens && k < 230) k += (size_t)snprintf(line + k, 256 - k, " pad=%lld", (long long)b->num_padding_tokens);
    if (b->num_swap_out && k < 230) k += (size_t)snprintf(line + k, 256 - k, " out=%d", b->num_swap_out);
    if (b->num_swap_in && k < 230) k += (size_t)snprintf(line + k, 256 - k, " in=%d", b->num_swap_in);
}

void step_log_hook(struct serve_hooks *h, step_log *log)
{
    log->n = 0;
    h->on_step = log_step;
    h->ud = log;
}

/* ---- scenarios ---- */

scenario scenario_base(const policy_ops *policy)
{
    scenario s = {0};
    s.policy = policy;
    s.cfg = (sched_config){
        .max_num_seqs = 256,
        .max_num_batched_tokens = 8,
        .max_model_len = 64,
        .block_size = 4,
        .enable_chunked_prefill = true,
        .reserve_full_isl = true,
    };
    opts_defaults(policy_knob_specs(), &s.knobs);
    s.num_blocks = 64;
    return s;
}

void scenario_knob(scenario *s, const char *name, const char *value)
{
    terr e;
    ck_assert_msg(opts_set(policy_knob_specs(), &s->knobs, name, value, &e) == 0, "%s", e.msg);
}

arrival *scenario_add(scenario *s, int64_t t_ms, int32_t prompt, int32_t output)
{
    ck_assert(s->n < 32);
    arrival *a = &s->arrivals[s->n++];
    *a = (arrival){.arrival_ns = t_ms * MS, .prompt_tokens = prompt, .output_tokens = output};
    return a;
}

scenario_outcome *scenario_run(scenario *s)
{
    scenario_outcome *o = calloc(1, sizeof *o);
    serve_config sc = {.sched = s->cfg, .policy = s->policy,
                       .policy_knobs = policy_knobs_of(s->policy, &s->knobs), .num_gpu_blocks = s->num_blocks,
                       .num_host_blocks = s->num_host_blocks, .max_steps = 100000,
                       .async_scheduling = s->async_scheduling};
    array_source as;
    linear_exec lx = {.base_ns = MS};
    tclock clock;
    tclock_init_sim(&clock);
    serve_hooks hooks;
    step_log_hook(&hooks, &o->log);
    metrics *m;
    metrics_options mo = {0};
    terr e;
    ck_assert(metrics_open(&m, &mo, &e) == 0);
    int rc = serve_run(&sc, array_source_make(&as, s->arrivals, s->n), linear_exec_make(&lx), &clock, m,
                       &hooks, &o->res, &e);
    ck_assert_msg(rc == 0, "serve_run failed: %s", e.msg);
    ck_assert(metrics_finish(m, NULL, &o->sum, &e) == 0);
    metrics_free(m);
    ck_assert_int_eq(o->res.num_finished + o->res.num_rejected, s->n);
    ck_assert_int_eq(o->res.kv_blocks_leaked, 0);
    return o;
}

void scenario_expect(const scenario_outcome *o, const char *const *want, int n)
{
    for (int i = 0; i < n; i++) {
        ck_assert_msg(i < o->log.n, "only %d steps ran, expected step %d = \"%s\"", o->log.n, i + 1, want[i]);
        ck_assert_msg(strcmp(o->log.lines[i], want[i]) == 0, "step %d: got \"%s\", expected \"%s\"", i + 1,
                      o->log.lines[i], want[i]);
    }
}

/* ---- trace files ---- */


trace_rows read_all_opt(const char *path, const trace_options *opt)
{
    trace_rows r = {0};
    trace_reader *t;
    if (trace_open(&t, path, opt, &r.err)) {
        r.rc = -1;
        return r;
    }
    r.format = trace_format_name(t);
    arrival_source s = trace_source(t);
    size_t cap = 0;
    arrival a;
    int got;
    while ((got = s.next(s.self, &a, &r.err)) == 1) {
        if ((size_t)r.n == cap) r.a = realloc(r.a, (cap = cap ? 2 * cap : 64) * sizeof *r.a);
        if (a.num_hashes > 0) {
            uint64_t *copy = malloc((size_t)a.num_hashes * sizeof *copy);
            memcpy(copy, a.hashes, (size_t)a.num_hashes * sizeof *copy);
            if (r.n == 0) r.hashes_first = copy;
            else {
                free(r.hashes_last);
                r.hashes_last = copy;
            }
        }
        a.hashes = NULL;
        r.a[r.n++] = a;
    }
    r.rc = got < 0 ? -1 : 0;
    r.bad = trace_bad_rows(t);
    ck_assert_int_eq(trace_rows_read(t), r.n);
    trace_close(t);
    return r;
}

trace_rows read_all(const char *path) { return read_all_opt(path, NULL); }

void rows_free(trace_rows *r)
{
    free(r->a);
    free(r->hashes_first);
    free(r->hashes_last);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
void rm_tree(char *dir)
{
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

