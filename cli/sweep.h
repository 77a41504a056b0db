/*
 * sweep.h: `tandem sweep SPEC --out DIR`: the cross product of `sim` options, run in parallel,
 * resumable, on one machine or across several under MPI.
 *
 * A spec is a text file of lines
 *
 *     # comment
 *     trace             = traces/samples/azure_conv_2023.csv
 *     scheduling-policy = vllm, static, orca
 *     max-num-seqs      = 64, 128, 256
 *     seed              = 0..9            # integer range, inclusive; 0..100:10 steps by 10
 *     goodput           = "ttft:500 tpot:50"
 *
 * Each key is a `sim` flag without its dashes; values are separated by commas (double quotes
 * keep commas and spaces inside one value). The sweep is the cross product of every line, in
 * spec order (the last line varies fastest). `out` and `quiet` belong to the sweep and may not
 * be set. Every point is checked (types, then vLLM's start-up rules) before anything runs, so a
 * bad spec fails at once with SPEC:LINE or the point that cannot run.
 *
 * Layout of DIR:
 *   points/ID/        one directory per point, ID a hash of its option values, renamed into
 *                     place when the point is complete (so a point is there whole or not at all):
 *                     summary.json, row.csv (the metric columns, then its results.csv row),
 *                     inputs.txt (the point's identity: a hash of its option values, the
 *                     binary's build id and the content hash of every file it reads, each file
 *                     listed with its hash), ran_by.txt, and requests.csv / steps.csv with
 *                     --keep-requests / --keep-steps
 *   results.csv       every point's parameters and summary metrics, in spec order, rewritten
 *                     (atomically) at the end of every run
 * Rerunning the same command runs only the points that are missing or stale: written with other
 * columns, or with another identity (a trace regenerated at the same path, another build of
 * tandem). --force reruns all; --keep-requests / --keep-steps rerun the points that lack them.
 */
#ifndef TANDEM_SWEEP_H
#define TANDEM_SWEEP_H

#include <stdint.h>

#include "core/util.h"

typedef struct sweep_param {
    char *name;     /* a sim option name */
    char **values;  /* (num_values) as written (ranges expanded) */
    int num_values;
    int line;       /* in the spec, for messages */
} sweep_param;

typedef struct sweep_spec {
    char *origin;           /* the spec's path, for messages */
    sweep_param *params;    /* (num_params) in spec order */
    int num_params;
    int64_t num_points;     /* product of the value counts */
} sweep_spec;

/* Parses spec text; `origin` names it in messages ("SPEC:LINE: what is wrong"). Checks every
 * key against the sim options and every value against its option's type. */
int sweep_spec_parse(sweep_spec *s, const char *text, const char *origin, terr *e);
int sweep_spec_load(sweep_spec *s, const char *path, terr *e);
void sweep_spec_free(sweep_spec *s);

/* Values of point `index` (0-based, spec order, last parameter fastest): vals[p] for param p. */
void sweep_point_values(const sweep_spec *s, int64_t index, const char **vals);
/* A 16-hex-digit id of point `index`'s option values: stable across runs and spec reorderings
 * of unrelated lines, so a rerun finds the points already done. */
void sweep_point_id(const sweep_spec *s, int64_t index, char id[17]);

#endif
