/*
 * profile_runs.c: `tandem profile --from-runs`: see profile_runs.h.
 *
 * Key decisions:
 *   - A row is a distinct shape, not a step: the profile's columns are the step_shape sums, so
 *     two steps with equal sums are the same point to the fit, and their median (with
 *     repeats = how many) is what the grid's rows hold too. The fit weights a row by its
 *     repeats (sim/profile_model.c says why), so aggregating loses nothing but the odd outlier.
 *   - The base's rows are copied as they are, never merged with a run's equal shape: a grid
 *     row is already a median of repeats measured in another state, and its samples are gone.
 *   - What the runs are of (model, GPU row, block size, backend) comes from each run's
 *     summary.json, resolved as `tandem compare` resolves it; any difference is refused rather
 *     than averaged over.
 *   - A step's time is brought to the heat of its own load (core/heat.h) before it joins its
 *     shape's row, as a grid row's is: steps of one shape taken hot and cold would otherwise
 *     average into a time no state has. heat_alpha is fitted on the runs' steps against the
 *     base, where there is one (and the runs spread in heat); else the base's.
 * Memory: every kept step's shape, time, heat and load (13 numbers) until the rows are
 * written: ~120 bytes a step.
 */
#include "cli/profile_runs.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/provenance.h"
#include "cli/run_results.h"
#include "cli/serving.h"
#include "cli/version.h"
#include "core/heat.h"
#include "core/options.h"
#include "core/stats.h"
#include "sim/profile_model.h"
#include "traces/csv_reader.h"

/* steps.csv's columns this reads; the shape ones (S_PREFILL_SEQS .. S_MAX_KEYS) in the profile's
 * column order. */
enum {
    S_START, S_DURATION, S_PREFILL_SEQS, S_DECODE_SEQS, S_EMITTING, S_PREFILL_TOKENS, S_DECODE_TOKENS, S_PADDING,
    S_PAIRS2, S_PREFILL_KEYS, S_DECODE_KEYS, S_DECODE_KEYS_SQ, S_MAX_KEYS, S_SWAP, NUM_STEP_COLS
};
static const char *const step_cols[NUM_STEP_COLS] = {
    "start_s", "duration_ms", "num_prefill_seqs", "num_decode_seqs", "num_emitting", "prefill_tokens", "decode_tokens",
    "padding_tokens", "prefill_pairs2", "prefill_keys", "decode_keys", "decode_keys_sq", "max_keys", "swap_blocks"};
#define NUM_SHAPE (S_MAX_KEYS - S_PREFILL_SEQS + 1)

typedef struct run_step {
    int64_t shape[NUM_SHAPE]; /* num_prefill_seqs .. max_keys, as the profile's columns */
    double ms;                /* duration_ms; once the heat is fitted, at the heat of its own load */
    double heat, load;        /* the GPU's heat as it started and the step's load (core/heat.h) */
} run_step;

/* What a run is of; every run and the base must agree. */
typedef struct run_identity {
    char model[128];       /* resolved name, as a profile's `# model:` */
    char model_spec[1024]; /* config.model as given */
    char gpu[64];
    char backend[32];
    int64_t block_size;
    model_config mc;       /* a run's: resolved from model_spec and gpu */
    const gpu_spec *spec;
} run_identity;

typedef struct skipped {
    int64_t swap, zero;
} skipped;

typedef struct from_runs_options {
    char *from_runs, *base, *out;
    bool quiet;
} from_runs_options;

#define O(f) offsetof(from_runs_options, f)
static const opt_spec from_runs_specs[] = {
    {"from-runs", OPT_STR, O(from_runs), "", "measured run directories (or directories of repeats), comma-separated"},
    {"base", OPT_STR, O(base), "", "a profile whose rows come first (a `tandem profile` grid of the same engine)"},
    {"out", OPT_STR, O(out), "", "profile file to write (required)"},
    {"quiet", OPT_BOOL, O(quiet), "false", "print nothing on success"},
    OPT_END,
};
#undef O

static const char *usage =
    "usage: tandem profile --from-runs DIR[,DIR...] [--base PROFILE] --out FILE\n\n"
    "Writes a profile calibrated on measured serving runs (`tandem run --out DIR`): the base\n"
    "profile's rows, then one row per distinct step shape of the runs' steps.csv (repeats = how\n"
    "many steps had it; median, p10, p90, min and max of their duration_ms). Steps that swapped\n"
    "are skipped and counted in the header.";

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* The run's identity from DIR/summary.json; refuses what is not a measured `tandem run`. */
static int read_identity(const char *dir, run_identity *id, terr *e)
{
    char *path = path_join(dir, "summary.json");
    json_error_t je;
    json_t *s = json_load_file(path, 0, &je), *config = json_object_get(s, "config");
    json_t *ex = json_object_get(config, "executor");
    serving_options o = {0};
    serving_options_defaults(&o);
    int rc = -1;
    char bs[32];
    if (!s) {
        terr_set(e, "%s:%d: %s", path, je.line, je.text);
    } else if (!json_is_object(ex)) {
        terr_set(e, "%s: no config.executor: not the output of `tandem run`", path);
    } else if (json_object_get(ex, "cost_model")) {
        terr_set(e, "%s: a `tandem sim` output (its steps were predicted by the %s cost model), not a measured run",
                 path, json_is_string(json_object_get(ex, "cost_model")) ? json_string_value(json_object_get(ex, "cost_model"))
                                                                       : "?");
    } else if (!json_is_string(json_object_get(ex, "backend"))) {
        terr_set(e, "%s: config.executor has no backend: not the output of `tandem run`", path);
    } else if (!json_is_string(json_object_get(config, "model")) || !json_is_string(json_object_get(config, "gpu")) ||
               !json_is_integer(json_object_get(config, "block-size"))) {
        terr_set(e, "%s: config lacks model, gpu or block-size", path);
    } else {
        snprintf(id->model_spec, sizeof id->model_spec, "%s", json_string_value(json_object_get(config, "model")));
        snprintf(id->backend, sizeof id->backend, "%s", json_string_value(json_object_get(ex, "backend")));
        id->block_size = json_integer_value(json_object_get(config, "block-size"));
        snprintf(bs, sizeof bs, "%" PRId64, id->block_size);
        serving_setup su = {0};
        if (opts_set(serving_option_specs(), &o, "model", id->model_spec, e) ||
            opts_set(serving_option_specs(), &o, "gpu", json_string_value(json_object_get(config, "gpu")), e) ||
            opts_set(serving_option_specs(), &o, "block-size", bs, e) || serving_resolve_model_gpu(&o, &su, e)) {
            char why[sizeof e->msg];
            snprintf(why, sizeof why, "%s", e->msg);
            terr_set(e, "%s: %s", path, why);
        } else {
            snprintf(id->model, sizeof id->model, "%s", su.model.name);
            snprintf(id->gpu, sizeof id->gpu, "%s", su.gpu->name);
            id->mc = su.model;
            id->spec = su.gpu;
            rc = 0;
        }
    }
    serving_options_free(&o);
    json_decref(s);
    free(path);
    return rc;
}

/* "" when a and b agree, else what differs ("model llama-3-8b, RUN's is llama-2-7b"). */
static void identity_diff(const run_identity *a, const run_identity *b, char *buf, size_t size)
{
    buf[0] = 0;
    if (strcmp(a->model, b->model)) snprintf(buf, size, "model %s, ", a->model);
    else if (strcmp(a->gpu, b->gpu)) snprintf(buf, size, "GPU %s, ", a->gpu);
    else if (a->block_size != b->block_size) snprintf(buf, size, "block size %" PRId64 ", ", a->block_size);
    else if (strcmp(a->backend, b->backend)) snprintf(buf, size, "backend %s, ", a->backend);
    if (!buf[0]) return;
    size_t l = strlen(buf);
    if (strcmp(a->model, b->model)) snprintf(buf + l, size - l, "not %s", b->model);
    else if (strcmp(a->gpu, b->gpu)) snprintf(buf + l, size - l, "not %s", b->gpu);
    else if (a->block_size != b->block_size) snprintf(buf + l, size - l, "not %" PRId64, b->block_size);
    else snprintf(buf + l, size - l, "not %s", b->backend);
}

/* The profile columns num_prefill_seqs .. max_keys as a step's shape. */
static step_shape shape_of(const int64_t *v)
{
    step_shape s = {
        .num_prefill_seqs = (int32_t)v[0], .num_decode_seqs = (int32_t)v[1], .num_emitting = (int32_t)v[2],
        .prefill_tokens = v[3], .decode_tokens = v[4], .padding_tokens = v[5], .prefill_pairs2 = v[6],
        .prefill_keys = v[7], .decode_keys = v[8], .decode_keys_sq = v[9], .max_keys = (int32_t)v[10],
    };
    s.num_items = s.num_prefill_seqs + s.num_decode_seqs;
    return s;
}

/* Appends DIR/steps.csv's representable steps to *steps, with the heat each started at (over
 * every step of the run, as the serving loop kept it); counts the others in *sk. */
static int read_steps(const char *dir, const run_identity *id, run_step **steps, size_t *n, size_t *cap,
                      int64_t *total, skipped *sk, char hash[17], terr *e)
{
    heat gpu_heat = {0};
    char *path = path_join(dir, "steps.csv");
    csv_reader rd;
    int rc = -1, got;
    *total = 0;
    if (provenance_hash_file(path, hash, e)) goto out;
    if (csv_reader_open(&rd, path, step_cols, NUM_STEP_COLS, e)) {
        if (strstr(e->msg, "missing column"))
            snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                     " (steps.csv written before steps recorded their shape, or with --no-steps)");
        goto out;
    }
    while ((got = csv_reader_next(&rd, e)) == 1) {
        double ms, start_s;
        int64_t v[NUM_STEP_COLS];
        bool bad = csv_reader_f64(&rd, S_START, &start_s, e) || csv_reader_f64(&rd, S_DURATION, &ms, e);
        for (int k = S_PREFILL_SEQS; k < NUM_STEP_COLS && !bad; k++) {
            if (csv_reader_i64(&rd, k, &v[k], e)) bad = true;
            else if (v[k] < 0 || v[k] > ((int64_t)1 << 50))
                bad = terr_set(e, "%s:%" PRId64 ": %s %" PRId64 " is out of range", path, csv_reader_line(&rd),
                               step_cols[k], v[k]);
        }
        if (!bad && !(ms >= 0 && ms < 1e12))
            bad = terr_set(e, "%s:%" PRId64 ": duration_ms %g is not a duration", path, csv_reader_line(&rd), ms);
        if (bad) {
            got = -1;
            break;
        }
        (*total)++;
        step_shape sh = shape_of(&v[S_PREFILL_SEQS]);
        int64_t start_ns = llround(start_s * 1e9), ns = llround(ms * 1e6);
        double h = heat_at(&gpu_heat, start_ns);
        double load = heat_load(heat_flops(&id->mc, &sh), ns, id->spec->peak_bf16_flops);
        heat_add(&gpu_heat, start_ns, ns, load);
        /* what the format cannot hold: the copies of a swap, priced apart from the forward pass */
        if (v[S_SWAP] > 0 || v[S_PREFILL_SEQS] + v[S_DECODE_SEQS] == 0) {
            sk->swap++;
            continue;
        }
        if (!(ms > 0) || v[S_PREFILL_TOKENS] + v[S_DECODE_TOKENS] == 0) {
            sk->zero++;
            continue;
        }
        grow_array((void **)steps, sizeof **steps, cap, *n + 1);
        run_step *st = &(*steps)[(*n)++];
        memcpy(st->shape, &v[S_PREFILL_SEQS], sizeof st->shape);
        st->ms = ms;
        st->heat = h;
        st->load = load;
    }
    csv_reader_close(&rd);
    rc = got < 0 ? -1 : 0;
out:
    free(path);
    return rc;
}

/* The heat's coefficient (core/heat.h), fitted on the runs' steps against the base: the
 * least-squares line of log(measured / the base's prediction) over heat - load. The line's
 * intercept is the base's bias, which the runs' rows calibrate, so only its slope is kept. */
typedef struct heat_fit {
    double alpha;
    double spread;  /* standard deviation of heat - load over the steps */
    int64_t steps;
    char why_not[160]; /* why alpha is 0, when it is */
} heat_fit;

enum { HEAT_MIN_STEPS = 100 };

static int fit_heat(const run_identity *id, const char *base_path, const run_step *steps, size_t n, heat_fit *hf,
                    terr *e)
{
    *hf = (heat_fit){0};
    cost_model_opts co = cost_model_opts_default();
    co.block_size = (int32_t)id->block_size;
    co.arg = base_path;
    void *base = profile_cost_model.create(&id->mc, id->spec, &co, e);
    if (!base) { /* the base's rows are checked here, as the profile model reads them */
        char why[sizeof e->msg];
        snprintf(why, sizeof why, "%s", e->msg);
        return terr_set(e, "--base %s", why);
    }
    double *x = xmalloc((n + 1) * sizeof *x), *y = xmalloc((n + 1) * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        step_shape sh = shape_of(steps[i].shape);
        if (sh.padding_tokens) continue; /* identical padding rows draw less power than their load says */
        sh.heat = steps[i].load; /* the base's rows are back-to-back measurements: the heat of their load */
        double predicted = (double)profile_cost_model.step_ns(base, &sh) / 1e6;
        if (!(predicted > 0)) continue;
        x[hf->steps] = steps[i].heat - steps[i].load;
        y[hf->steps++] = log(steps[i].ms / predicted);
    }
    profile_cost_model.destroy(base);
    hf->alpha = heat_slope(x, y, NULL, (size_t)hf->steps, &hf->spread, NULL);
    free(x), free(y);
    if (hf->steps < HEAT_MIN_STEPS)
        snprintf(hf->why_not, sizeof hf->why_not, "%" PRId64 " steps, at least %d are needed", hf->steps, HEAT_MIN_STEPS);
    else if (hf->spread < HEAT_MIN_SPREAD)
        snprintf(hf->why_not, sizeof hf->why_not, "the runs' heat - load spreads %.4f, too little to fit", hf->spread);
    else if (fabs(hf->alpha) > 1)
        snprintf(hf->why_not, sizeof hf->why_not, "the fit gave %.3f, past what a clock can do", hf->alpha);
    if (hf->why_not[0]) hf->alpha = 0;
    return 0;
}

/* prefill, decode, mixed: the grid's kinds, and the rows' order */
static int kind_rank(const int64_t *shape) { return shape[0] && shape[1] ? 2 : shape[0] ? 0 : 1; }
static const char *const kind_names[] = {"prefill", "decode", "mixed"};

static int cmp_step(const void *pa, const void *pb)
{
    const run_step *a = pa, *b = pb;
    int ka = kind_rank(a->shape), kb = kind_rank(b->shape);
    if (ka != kb) return ka - kb;
    for (int k = 0; k < NUM_SHAPE; k++)
        if (a->shape[k] != b->shape[k]) return a->shape[k] < b->shape[k] ? -1 : 1;
    return (a->ms > b->ms) - (a->ms < b->ms);
}

/* The base profile: its provenance values and its rows, checked and kept as text. */
typedef struct base_profile {
    char *text;          /* the file, its rows' lines NUL-terminated in place */
    char **row;          /* (num_rows) */
    size_t num_rows, cap;
    run_identity id;
    char device[256], command[2048], hash[17];
    double heat_alpha;   /* its `# heat_alpha:` (a probed grid's), 0 without one */
    bool unpadded;       /* its rows have no padding_tokens column */
} base_profile;

static int base_read(base_profile *b, const char *path, terr *e)
{
    memset(b, 0, sizeof *b);
    if (provenance_hash_file(path, b->hash, e)) return terr_set(e, "--base %s: cannot read it", path);
    if (!(b->text = read_text_file(path, NULL, e))) return terr_set(e, "--base %s: cannot read it", path);
    bool header = false;
    int line_no = 0;
    for (char *line = b->text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r') line[--l] = 0;
        if (!l) continue;
        if (line[0] == '#') {
            static const struct {
                const char *key;
                size_t off, size;
            } keys[] = {
                {"# model: ", offsetof(base_profile, id.model), sizeof(((base_profile *)0)->id.model)},
                {"# model_spec: ", offsetof(base_profile, id.model_spec), sizeof(((base_profile *)0)->id.model_spec)},
                {"# gpu: ", offsetof(base_profile, id.gpu), sizeof(((base_profile *)0)->id.gpu)},
                {"# backend: ", offsetof(base_profile, id.backend), sizeof(((base_profile *)0)->id.backend)},
                {"# device: ", offsetof(base_profile, device), sizeof(((base_profile *)0)->device)},
                {"# command: ", offsetof(base_profile, command), sizeof(((base_profile *)0)->command)},
            };
            for (size_t k = 0; k < ARRAY_LEN(keys); k++)
                if (!strncmp(line, keys[k].key, strlen(keys[k].key)))
                    snprintf((char *)b + keys[k].off, keys[k].size, "%s", line + strlen(keys[k].key));
            if (!strncmp(line, "# block_size: ", 14) && parse_i64(line + 14, &b->id.block_size))
                return terr_set(e, "--base %s:%d: block_size \"%s\" is not a number", path, line_no, line + 14);
            if (!strncmp(line, "# heat_alpha: ", 14) && (parse_f64(line + 14, &b->heat_alpha) || fabs(b->heat_alpha) > 1))
                return terr_set(e, "--base %s:%d: heat_alpha \"%s\" is not a number between -1 and 1", path, line_no,
                                line + 14);
            continue;
        }
        if (!header) { /* the columns as written now, or without padding_tokens (the rows get 0) */
            if (strcmp(line, profile_columns_header) && strcmp(line, profile_columns_header_unpadded))
                return terr_set(e, "--base %s:%d: not a profile's header row (not a tandem profile?)", path, line_no);
            b->unpadded = strcmp(line, profile_columns_header) != 0;
            header = true;
            continue;
        }
        /* the rows' values are checked as the profile model reads the file (fit_heat) */
        grow_array((void **)&b->row, sizeof *b->row, &b->cap, b->num_rows + 1);
        b->row[b->num_rows++] = line;
    }
    if (!header) return terr_set(e, "--base %s: no header row (not a tandem profile?)", path);
    if (!b->id.model[0] || !b->id.gpu[0] || b->id.block_size <= 0 || !b->id.backend[0])
        return terr_set(e, "--base %s: the provenance lines (# model:, # gpu:, # block_size:, # backend:) are missing",
                        path);
    return 0;
}

static void base_free(base_profile *b)
{
    free(b->text);
    free(b->row);
}

typedef struct run_info {
    char *dir;
    char hash[17];
    int64_t steps, kept;
} run_info;

/* Writes the rows: one per distinct shape of steps (sorted), with its time's statistics. */
static int64_t write_rows(FILE *f, run_step *steps, size_t n)
{
    qsort(steps, n, sizeof *steps, cmp_step);
    int64_t rows = 0;
    samples s = {0};
    for (size_t i = 0, j; i < n; i = j) {
        s.len = 0;
        s.sorted = 0;
        for (j = i; j < n && !memcmp(steps[j].shape, steps[i].shape, sizeof steps[i].shape); j++)
            samples_add(&s, steps[j].ms);
        const int64_t *v = steps[i].shape;
        fprintf(f, "%s", kind_names[kind_rank(v)]);
        for (int k = 0; k < NUM_SHAPE; k++) fprintf(f, ",%" PRId64, v[k]);
        fprintf(f, ",%zu,%.4f,%.4f,%.4f,%.4f,%.4f\n", j - i, samples_percentile(&s, 50), samples_percentile(&s, 10),
                samples_percentile(&s, 90), samples_percentile(&s, 0), samples_percentile(&s, 100));
        rows++;
    }
    samples_free(&s);
    return rows;
}

static int count_shapes(run_step *steps, size_t n)
{
    qsort(steps, n, sizeof *steps, cmp_step);
    int rows = 0;
    for (size_t i = 0; i < n; i++) rows += i == 0 || memcmp(steps[i].shape, steps[i - 1].shape, sizeof steps->shape);
    return rows;
}

int profile_from_runs_main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) /* before the parse, where `--from-runs --help` is a run named --help */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            opts_help(from_runs_specs, usage, stdout);
            return 0;
        }
    from_runs_options o = {0};
    opts_defaults(from_runs_specs, &o);
    terr e = {{0}};
    int code = 2, rc = opts_parse(from_runs_specs, &o, argc, argv, NULL, usage, &e);
    run_info *runs = NULL;
    size_t num_runs = 0, runs_cap = 0, n = 0, cap = 0;
    run_step *steps = NULL;
    run_identity id = {0};
    base_profile base = {0};
    bool have_base = false;
    skipped sk = {0};
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (rc) goto fail;
    if (!o.from_runs || !o.from_runs[0]) {
        terr_set(&e, "--from-runs needs at least one run directory");
        goto fail;
    }
    if (!o.out) {
        terr_set(&e, "--out FILE is required (see --help)");
        goto fail;
    }
    /* the runs: each named directory, or its repeats */
    char *list = xstrdup(o.from_runs);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char **found = NULL;
        int num_found = 0;
        bool repeats;
        if (run_results_find(tok, &found, &num_found, &repeats, &e)) {
            free(list);
            goto fail;
        }
        for (int k = 0; k < num_found; k++) {
            grow_array((void **)&runs, sizeof *runs, &runs_cap, num_runs + 1);
            runs[num_runs++] = (run_info){.dir = found[k]};
        }
        free(found);
    }
    free(list);
    if (num_runs == 0) {
        terr_set(&e, "--from-runs names no run directory");
        goto fail;
    }
    for (size_t r = 0; r < num_runs; r++) {
        run_identity rid = {0};
        char diff[512];
        if (read_identity(runs[r].dir, &rid, &e)) goto fail;
        if (r == 0) {
            id = rid;
        } else if (identity_diff(&rid, &id, diff, sizeof diff), diff[0]) {
            terr_set(&e, "--from-runs: %s is a run of %s (%s's): the runs must share model, GPU, block size and "
                         "backend", runs[r].dir, diff, runs[0].dir);
            goto fail;
        }
        size_t before = n;
        if (read_steps(runs[r].dir, &rid, &steps, &n, &cap, &runs[r].steps, &sk, runs[r].hash, &e)) goto fail;
        runs[r].kept = (int64_t)(n - before);
    }
    if (o.base && o.base[0]) {
        char diff[512];
        if (base_read(&base, o.base, &e)) goto fail;
        have_base = true;
        identity_diff(&base.id, &id, diff, sizeof diff);
        if (diff[0]) {
            terr_set(&e, "--base %s: a profile of %s (the runs')", o.base, diff);
            goto fail;
        }
    }
    /* the runs' steps at the heat of their own load, as the base's rows and the grid's are */
    heat_fit hf = {.why_not = "no --base to hold the runs' steps against"};
    if (have_base && fit_heat(&id, o.base, steps, n, &hf, &e)) goto fail;
    bool base_heat = hf.why_not[0] && base.heat_alpha != 0; /* the runs cannot say: the base's probe can */
    if (base_heat) hf.alpha = base.heat_alpha;
    for (size_t i = 0; i < n; i++) steps[i].ms *= exp(-hf.alpha * (steps[i].heat - steps[i].load));
    int shapes = count_shapes(steps, n);
    if ((size_t)shapes + base.num_rows > PROFILE_MAX_POINTS) {
        terr_set(&e, "--from-runs: %d rows (%d shapes from the runs, %zu from the base), the profile model reads at "
                     "most %d: calibrate on fewer runs",
                 shapes + (int)base.num_rows, shapes, base.num_rows, PROFILE_MAX_POINTS);
        goto fail;
    }
    if ((size_t)shapes + base.num_rows < PROFILE_MIN_POINTS) {
        terr_set(&e, "--from-runs: %d rows (%d shapes from the runs, %zu from the base), a profile needs %d: add runs "
                     "or a --base",
                 shapes + (int)base.num_rows, shapes, base.num_rows, PROFILE_MIN_POINTS);
        goto fail;
    }

    out_atomic out;
    if (out_atomic_open(&out, o.out, "w", &e)) {
        code = 1;
        goto fail;
    }
    FILE *f = out.f;
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "# tandem profile 2\n");
    fprintf(f, "# model: %s\n# model_spec: %s\n# gpu: %s\n", id.model, id.model_spec, id.gpu);
    fprintf(f, "# device: %s\n", have_base                     ? base.device
                                 : !strcmp(id.backend, "cpu") ? "cpu (the reference backend)"
                                                              : "unknown (a run's summary.json does not record it)");
    fprintf(f, "# backend: %s\n# block_size: %" PRId64 "\n", id.backend, id.block_size);
    int64_t total = 0;
    for (size_t r = 0; r < num_runs; r++) total += runs[r].steps;
    fprintf(f, "# from_runs: %zu runs, %" PRId64 " steps, %zu kept as %d rows (one per distinct shape); skipped %" PRId64
               " that swapped, %" PRId64 " timed at 0\n",
            num_runs, total, n, shapes, sk.swap, sk.zero);
    fprintf(f, "# heat_alpha: %.4f\n", hf.alpha);
    if (base_heat)
        fprintf(f, "# heat: the base's (not fitted on the runs: %s)\n", hf.why_not);
    else if (hf.why_not[0])
        fprintf(f, "# heat: not fitted: %s\n", hf.why_not);
    else
        fprintf(f, "# heat: fitted on %" PRId64 " steps against the base (heat - load spreads %.3f); the runs' rows hold "
                   "their times at the heat of their own load\n",
                hf.steps, hf.spread);
    if (have_base)
        fprintf(f, "# base: %s xxh3:%s, %zu rows first (its command: %s)\n", o.base, base.hash, base.num_rows,
                base.command[0] ? base.command : "unknown");
    for (size_t r = 0; r < num_runs; r++)
        fprintf(f, "# run: %s/steps.csv xxh3:%s, %" PRId64 " steps, %" PRId64 " kept\n", runs[r].dir, runs[r].hash,
                runs[r].steps, runs[r].kept);
    fprintf(f, "# tandem: %s\n# date: %s\n# command: tandem", tandem_version, date);
    for (int i = 0; i < argc; i++) fprintf(f, " %s", argv[i]);
    fprintf(f, "\n%s\n", profile_columns_header);
    for (size_t i = 0; i < base.num_rows; i++) { /* a row without padding_tokens gets 0 after decode_tokens */
        const char *r = base.row[i], *c = r;
        for (int k = 0; base.unpadded && k < 6 && c; k++) c = strchr(c, ',') ? strchr(c, ',') + 1 : NULL;
        if (base.unpadded && c) fprintf(f, "%.*s0,%s\n", (int)(c - r), r, c);
        else fprintf(f, "%s\n", r);
    }
    write_rows(f, steps, n);
    if (out_atomic_close(&out, true, &e)) {
        code = 1;
        goto fail;
    }
    if (!o.quiet)
        printf("profile: %zu rows of the base and %d shapes from %zu steps of %zu runs (%" PRId64 " swapped, %" PRId64
               " at 0 skipped) -> %s\n",
               base.num_rows, shapes, n, num_runs, sk.swap, sk.zero, o.out);
    code = 0;
    goto done;
fail:
    fprintf(stderr, "tandem profile: %s\n", e.msg);
done:
    for (size_t r = 0; r < num_runs; r++) free(runs[r].dir);
    free(runs);
    free(steps);
    base_free(&base);
    opts_free(from_runs_specs, &o);
    return code;
}
