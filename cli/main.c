/*
 * main.c: the `tandem` command: a table of subcommands, each a function that parses its own
 * options and returns the process exit code (0 ok, 1 runtime failure, 2 bad input or usage).
 */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

typedef struct command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"sim", sim_main, "simulate a trace under a scheduling policy with the GPU cost model"},
    {"run", run_main, "serve a trace on the real engine with the same loop and policy, in real time"},
    {"sweep", sweep_main, "run sim over the cross product of options (parallel, resumable, MPI)"},
    {"trace", trace_main, "trace tools: `trace gen` writes a synthetic trace, `trace stats` summarises one"},
    {"generate", generate_main, "run a Llama-family model on the CUDA or CPU engine"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tandem COMMAND [OPTIONS]\n\n"
               "tandem: LLM-serving scheduler research, simulated and on the GPU.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].main) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`tandem COMMAND --help` lists a command's options with their defaults.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].main && strcmp(argv[1], commands[i].name) == 0)
            return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "tandem: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return 2;
}
