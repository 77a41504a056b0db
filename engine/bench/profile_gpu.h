/*
 * profile_gpu.h: what `bench_engine_gpu profile` measures inside whole engine steps: a per-kernel
 * trace of a region from the GPU's own timestamps (CUPTI Activity API, kernels replayed from CUDA
 * graphs included) and the GPU's clocks and power (NVML, loaded at run time). profile_gpu.c says
 * how to read the output.
 *
 * Use: prof_init once, before any engine is opened; then per region prof_begin, the steps,
 * prof_end, prof_report. Functions that can fail print why and return -1.
 */
#ifndef TANDEM_PROFILE_GPU_H
#define TANDEM_PROFILE_GPU_H

#include <stdbool.h>

#define PROF_MAX_STEPS 64 /* steps one region may hold */

/* Turns tracing on (kernels, memcpys, memsets) and opens NVML if the driver has it. */
int prof_init(void);
/* Flushes and turns tracing off. */
void prof_shutdown(void);
/* Waits for the device; records from here on are kept (earlier ones are dropped). */
int prof_begin(void);
/* Waits for the device and collects every record since prof_begin. */
int prof_end(void);

/* Prints the records of the last region: `steps` engine steps run back to back, whose wall times
 * (CUDA events around each) are wall_ms[steps]. `layers` divides per-layer figures; by_shape adds
 * the table by (kernel, grid, block). */
void prof_report(const char *title, int steps, const float *wall_ms, int layers, bool by_shape);

/* One line "CLOCKS <when>: SM clock, power, temperature, clock-limit reasons" (NVML); nothing if
 * NVML is absent. */
void prof_clocks(const char *when);
/* Samples SM clock and power every millisecond on a thread until prof_watch_stop, which prints
 * their min / mean / max as "CLOCKS <when>: ...". */
void prof_watch_start(void);
void prof_watch_stop(const char *when);

#endif
