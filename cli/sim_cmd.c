/*
 * sim_cmd.c: `tandem sim`, a trace replayed through the serving loop on the cost model.
 *
 * Resolves the model, GPU and KV capacity the way vLLM does at start-up (cli/serving.h),
 * validates the budgets with vLLM's rules, then runs the loop in simulated time and writes
 * requests.csv, steps.csv and summary.json into --out. Exit codes: 0 ok, 2 bad flags or bad input
 * (a bad trace row), 1 a failure writing outputs.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "cli/serving.h"

int sim_main(int argc, char **argv)
{
    serving_options o = {0};
    terr e = {{0}};
    serving_options_defaults(&o);
    char *usage = serving_usage(
        "usage: tandem sim --trace FILE [--out DIR] [options]\n\n"
        "Replays a request trace through the serving loop and a scheduling policy, with each\n"
        "step's time predicted by a GPU cost model, and reports vLLM-style latency metrics.");
    int rc = opts_parse(serving_option_specs(), &o, argc, argv, serving_positional, usage, &e);
    free(usage);
    if (rc == 1) {
        serving_options_free(&o);
        return 0;
    }
    serving_setup su;
    if (rc || serving_resolve(&o, &su, &e)) {
        fprintf(stderr, "tandem sim: %s\n", e.msg);
        serving_options_free(&o);
        return 2;
    }
    serving_warnings warn;
    if (serving_collect_warnings(&o, &su, false, &warn, &e)) {
        fprintf(stderr, "tandem sim: %s\n", e.msg);
        serving_options_free(&o);
        return 2;
    }
    if (!o.quiet) serving_print_warnings(&warn, "sim");
    if (!o.quiet) serving_print_header(&o, &su, NULL, stdout);
    metrics_summary sum;
    int code = serving_simulate(&o, &su, &sum, &e);
    if (code) fprintf(stderr, "tandem sim: %s\n", e.msg);
    else {
        if (!o.quiet) metrics_print_summary(&sum, "simulated", stdout), serving_print_goodput(&su, &sum, stdout);
        if (o.out && !o.quiet) printf("outputs: %s/summary.json, requests.csv%s\n", o.out, o.steps ? ", steps.csv" : "");
    }
    serving_options_free(&o);
    return code;
}
