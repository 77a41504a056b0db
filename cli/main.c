/*
 * main.c: the `tandem` command: one table of subcommands, some in a group (`tandem trace gen`).
 * Each is a function that parses its own options and returns the process exit code (0 ok,
 * 1 runtime failure, 2 bad input or usage). Whatever a command printed must have reached stdout:
 * a lost write (a full disk, a closed pipe) turns success into exit 1, for every command.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/provenance.h"
#include "cli/version.h"
#include "core/util.h"

typedef struct command {
    const char *group; /* NULL: a top-level command */
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {NULL, "sim", sim_main, "simulate a trace under a scheduling policy with the GPU cost model"},
    {NULL, "run", run_main, "serve a trace on the real engine with the same loop and policy, in real time"},
    {NULL, "compare", compare_main, "how close a simulated run is to a measured one: metrics, errors, step re-prediction"},
    {NULL, "sweep", sweep_main, "run sim over the cross product of options (parallel, resumable, MPI)"},
    {NULL, "search", search_main, "the highest request rate, or the cheapest configuration, that meets a goodput SLO (over sim)"},
    {"trace", "gen", trace_gen_main, "write a synthetic trace (tandem CSV): Poisson/Gamma arrivals"},
    {"trace", "stats", trace_stats_main, "summarise a trace: rates, burstiness, lengths, KV capacity, suggested budgets"},
    {NULL, "profile", profile_main, "measure the engine's step times over a grid of shapes, or calibrate on runs (a profile for sim)"},
    {NULL, "plot", plot_main, "figures of runs and sweeps: latency CDFs, batch/KV/queue over time, latency vs load"},
    {NULL, "timeline", timeline_main, "a run as Chrome trace / Perfetto JSON: a track per request, one for steps"},
    {"reduce", "cdf", reduce_cdf_main, "latency CDFs of runs' CSVs, as gnuplot data (the figures' input)"},
    {"reduce", "quantile", reduce_quantile_main, "values at percentiles of those CDFs (p99.9, max), weighted or not"},
    {"reduce", "group", reduce_group_main, "count, mean, p50/p90/p99, max per group of a requests.csv"},
    {"reduce", "bin", reduce_bin_main, "a steps.csv in time bins: busy, KV usage, batch size, queue"},
    {"reduce", "itl", reduce_itl_main, "every inter-token latency of a run, from its steps.csv"},
    {"reduce", "select", reduce_select_main, "rows and columns of a sweep's results.csv, with derived columns"},
    {"reduce", "pivot", reduce_pivot_main, "a long table made wide: a row per value of one column, columns per another"},
    {"reduce", "cross", reduce_cross_main, "where a metric crosses targets against a swept rate: knees, capacity"},
    {"reduce", "best", reduce_best_main, "per group, a metric's best value, where, and the first X within a factor"},
    {"reduce", "blocks", reduce_blocks_main, "some series of a gnuplot CDF file, picked by label"},
    {"reduce", "trace", reduce_trace_main, "a trace's requests, span and mean arrival rate, as CSV"},
    {NULL, "generate", generate_main, "run a Llama-family model on the CUDA or CPU engine"},
};

static bool is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h") || !strcmp(arg, "help"); }

static bool is_group(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        if (commands[i].group && !strcmp(commands[i].group, name)) return true;
    return false;
}

/* The commands of `group` (NULL: all of them). */
static void usage(FILE *f, const char *group)
{
    if (group) fprintf(f, "usage: tandem %s SUBCOMMAND [OPTIONS]\n\nsubcommands:\n", group);
    else fprintf(f, "usage: tandem COMMAND [OPTIONS]\n\n"
                    "tandem: LLM-serving scheduler research, simulated and on the GPU.\n\ncommands:\n");
    for (size_t i = 0; i < ARRAY_LEN(commands); i++) {
        const command *c = &commands[i];
        if (group && (!c->group || strcmp(c->group, group))) continue;
        char name[32];
        snprintf(name, sizeof name, "%s%s%s", group || !c->group ? "" : c->group, group || !c->group ? "" : " ", c->name);
        fprintf(f, "  %-15s %s\n", name, c->summary);
    }
    fprintf(f, "\n`tandem %s%sCOMMAND --help` lists a command's options with their defaults%s.\n", group ? group : "",
            group ? " " : "", group ? "" : "; `tandem --version` says what built this binary");
}

int main(int argc, char **argv)
{
    provenance_set_command(argc, argv);
    if (argc < 2) {
        usage(stderr, NULL);
        return 2;
    }
    if (is_help(argv[1])) {
        usage(stdout, NULL);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("tandem %s\n", tandem_version);
        return fflush(stdout) || ferror(stdout) ? 1 : 0;
    }
    const char *group = is_group(argv[1]) ? argv[1] : NULL;
    if (group) {
        if (argc < 3) {
            usage(stderr, group);
            return 2;
        }
        if (is_help(argv[2])) {
            usage(stdout, group);
            return 0;
        }
    }
    const char *name = group ? argv[2] : argv[1];
    for (size_t i = 0; i < ARRAY_LEN(commands); i++) {
        const command *c = &commands[i];
        if ((group ? c->group && !strcmp(c->group, group) : !c->group) && !strcmp(c->name, name)) {
            int code = group ? c->main(argc - 2, argv + 2) : c->main(argc - 1, argv + 1);
            if ((fflush(stdout) || ferror(stdout)) && code == 0) {
                fprintf(stderr, "tandem %s: writing to stdout failed\n", name);
                code = 1;
            }
            return code;
        }
    }
    if (group) fprintf(stderr, "tandem %s: unknown subcommand \"%s\"\n\n", group, name);
    else fprintf(stderr, "tandem: unknown command \"%s\"\n\n", name);
    usage(stderr, group);
    return 2;
}
