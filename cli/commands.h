/*
 * commands.h: the subcommands of `tandem` (the table is in cli/main.c). Each parses its own
 * options with core/options.h (argv[0] is the command's name) and returns the exit code: 0 ok,
 * 1 a runtime failure (writing outputs, the device), 2 bad flags or bad input.
 */
#ifndef TANDEM_COMMANDS_H
#define TANDEM_COMMANDS_H

int sim_main(int argc, char **argv);
int run_main(int argc, char **argv);
int sweep_main(int argc, char **argv);
int trace_gen_main(int argc, char **argv);
int trace_stats_main(int argc, char **argv);
int generate_main(int argc, char **argv);
int profile_main(int argc, char **argv);
int compare_main(int argc, char **argv);
int search_main(int argc, char **argv);
int plot_main(int argc, char **argv);
int timeline_main(int argc, char **argv);
int reduce_cdf_main(int argc, char **argv);
int reduce_group_main(int argc, char **argv);
int reduce_bin_main(int argc, char **argv);
int reduce_itl_main(int argc, char **argv);
int reduce_select_main(int argc, char **argv);
int reduce_cross_main(int argc, char **argv);
int reduce_quantile_main(int argc, char **argv);
int reduce_pivot_main(int argc, char **argv);
int reduce_best_main(int argc, char **argv);
int reduce_blocks_main(int argc, char **argv);
int reduce_trace_main(int argc, char **argv);

#endif
