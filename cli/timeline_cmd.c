/*
 * timeline_cmd.c: `tandem timeline DIR [--out FILE]`: a run as Chrome trace / Perfetto JSON
 * (cli/timeline.h), for a look at what each request and each step did.
 *
 * Exit codes: 0 ok, 1 the file could not be written, 2 bad flags or a folder that is not a run.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/timeline.h"
#include "core/options.h"

typedef struct timeline_options {
    char *out;
    bool quiet;
    const char *dir; /* the positional; points into argv */
} timeline_options;

#define O(f) offsetof(timeline_options, f)
static const opt_spec timeline_specs[] = {
    {"out", OPT_STR, O(out), "", "the JSON file to write (default DIR/timeline.json)"},
    {"quiet", OPT_BOOL, O(quiet), "false", "print nothing on success"},
    OPT_END,
};
#undef O

static const char *usage =
    "usage: tandem timeline DIR [--out FILE] [--quiet]\n\n"
    "A run directory (tandem sim|run --out DIR) as a Chrome trace / Perfetto JSON file: one track\n"
    "per request (queued, prefill, decode, preempted spans) and one for the model steps (batch\n"
    "composition in each step's args, KV usage and queue as counters). Open it in\n"
    "https://ui.perfetto.dev or chrome://tracing. Steps need steps.csv, preempted spans\n"
    "preemptions.csv (both written by default).\n";

static int take_positional(void *dst, const char *arg, terr *e)
{
    timeline_options *o = dst;
    if (o->dir) return terr_set(e, "unexpected argument \"%s\" (one run directory)", arg);
    o->dir = arg;
    return 0;
}

int timeline_main(int argc, char **argv)
{
    timeline_options o = {0};
    terr e = {{0}};
    int code = 2;
    opts_defaults(timeline_specs, &o);
    int rc = opts_parse(timeline_specs, &o, argc, argv, take_positional, usage, &e);
    if (rc == 1) {
        code = 0;
        goto done;
    }
    if (!rc && !o.dir) rc = terr_set(&e, "missing the run directory\n%s", usage);
    if (rc) {
        fprintf(stderr, "tandem timeline: %s\n", e.msg);
        goto done;
    }
    char path[4200], tmp[4300];
    if (o.out && *o.out) snprintf(path, sizeof path, "%s", o.out);
    else snprintf(path, sizeof path, "%s/timeline.json", o.dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "tandem timeline: %s: cannot write\n", tmp);
        code = 1;
        goto done;
    }
    timeline_counts n;
    rc = timeline_write(f, o.dir, &n, &e);
    bool written = !ferror(f);
    written = !fclose(f) && written;
    if (rc) {
        fprintf(stderr, "tandem timeline: %s\n", e.msg);
        unlink(tmp);
        goto done;
    }
    if (!written || rename(tmp, path)) {
        fprintf(stderr, "tandem timeline: %s: cannot write\n", path);
        unlink(tmp);
        code = 1;
        goto done;
    }
    code = 0;
    if (o.quiet) goto done;
    printf("timeline: %s: %lld requests, %lld steps, %lld preempted spans\n", path, n.requests, n.steps,
           n.preempted_spans);
    if (!n.have_steps) printf("  no steps.csv in %s (run with --steps): no steps track\n", o.dir);
    if (!n.have_preemptions) printf("  no preemptions.csv in %s: preempted spans are not shown\n", o.dir);
    printf("  open it in https://ui.perfetto.dev (or chrome://tracing)\n");
done:
    opts_free(timeline_specs, &o);
    return code;
}
