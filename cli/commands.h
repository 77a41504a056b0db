/*
 * commands.h: the subcommands of `tandem`. Each parses its own options (argv[0] is the
 * command's name) and returns the exit code. Subcommands that live in other modules are
 * declared weak until every module has landed, so a partial tree still links.
 */
#ifndef TANDEM_COMMANDS_H
#define TANDEM_COMMANDS_H

int sim_main(int argc, char **argv) __attribute__((weak));
int trace_main(int argc, char **argv) __attribute__((weak));
int generate_main(int argc, char **argv) __attribute__((weak));
int sweep_main(int argc, char **argv) __attribute__((weak));
int run_main(int argc, char **argv) __attribute__((weak));

#endif
