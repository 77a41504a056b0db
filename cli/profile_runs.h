/*
 * profile_runs.h: `tandem profile --from-runs DIR[,DIR...] [--base PROFILE] --out FILE`: a
 * profile calibrated on serving runs (issue 19).
 *
 * The grid that `tandem profile` measures times each shape in short bursts on an idle engine;
 * a serving engine takes its steps in another state (clocks capped after long prefills, KV
 * blocks scattered, contexts uneven). The steps a `tandem run` measured are timed in that state,
 * and steps.csv records each one's shape in the profile's own columns, so they can be profile
 * rows. This writes a profile (the format of profile_cmd.c, read by sim/profile_model.c) whose
 * rows are the base profile's rows, copied as they are, then the runs' steps, one row per
 * distinct shape: repeats = how many steps had it, median/p10/p90/min/max of their duration_ms.
 *
 * Refused (exit 2, naming the directory, FILE:LINE or flag): a directory that is not a measured
 * `tandem run` output (a `tandem sim` output, whose steps a cost model predicted; a vLLM result,
 * which has no step shapes), runs of different models, GPU rows, block sizes or backends, and a
 * base profile that disagrees with them or is malformed. Steps the profile format cannot
 * represent are skipped and counted in the header: steps that swapped blocks (their time
 * includes the copies, which the cost model prices apart), steps with static batching's padding
 * rows (the format has no padding column) and steps timed at 0.
 *
 * Output is complete or absent (core/util.h: out_atomic). Byte-identical for the same inputs
 * but for the `# date:` line.
 */
#ifndef TANDEM_PROFILE_RUNS_H
#define TANDEM_PROFILE_RUNS_H

/* The whole subcommand in this mode: argv is `profile --from-runs ...`. Returns the exit code. */
int profile_from_runs_main(int argc, char **argv);

#endif
