/*
 * sim_cmd.c: `tandem sim`, a trace replayed through the serving loop on the cost model.
 *
 * Resolves the model, GPU and KV capacity the way vLLM does at start-up, validates the budgets
 * with vLLM's rules, then runs the loop in simulated time and writes requests.csv, steps.csv
 * and summary.json into --out. Exit codes: 0 ok, 2 bad flags or bad input (a bad trace row),
 * 1 a failure writing outputs.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/sim_options.h"
#include "core/serve.h"
#include "policies/policies.h"
#include "sim/costmodel.h"
#include "traces/trace.h"

static const char *usage =
    "usage: tandem sim --trace FILE [--out DIR] [options]\n\n"
    "Replays a request trace through the serving loop and a scheduling policy, with each\n"
    "step's time predicted by a GPU cost model, and reports vLLM-style latency metrics.";

int sim_main(int argc, char **argv)
{
    sim_options o = {0};
    terr e = {{0}};
    sim_options_defaults(&o);
    int rc = opts_parse(sim_option_specs, &o, argc, argv, sim_positional, usage, &e);
    if (rc == 1) {
        sim_options_free(&o);
        return 0;
    }
    sim_setup su;
    if (rc || sim_resolve(&o, &su, &e)) {
        fprintf(stderr, "tandem sim: %s\n", e.msg);
        sim_options_free(&o);
        return 2;
    }
    metrics_summary sum;
    int code = sim_run(&o, &su, &sum, &e);
    if (code) fprintf(stderr, "tandem sim: %s\n", e.msg);
    else {
        if (!o.quiet) metrics_print_summary(&sum, "simulated", stdout);
        if (o.out && !o.quiet) printf("outputs: %s/summary.json, requests.csv%s\n", o.out, o.steps ? ", steps.csv" : "");
    }
    sim_setup_free(&su);
    sim_options_free(&o);
    return code;
}
