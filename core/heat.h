/*
 * heat.h: the GPU's recent load, which sets how fast its next step runs.
 *
 * A GPU at its power limit lowers its clocks. So a step's time depends on what ran before it:
 * a long prefill after a stretch of light decode steps finishes sooner than the same prefill
 * run back to back with others, and decodes just after heavy prefills run slower than decodes
 * alone. On an H200 serving Llama-3-8B, steps of 1024 tokens or more that followed half a
 * second of light work took 8% less time than back to back, and decodes that followed heavy
 * work 5% more (docs/costmodel.md, "The GPU's heat").
 *
 * A step's load is the tensor work it runs (core/work.h's FLOPs, padding rows included) over
 * its duration and the GPU's peak: its MFU as the GPU sees it. The heat is that load averaged
 * over time with an exponential memory of HEAT_TAU_NS; an idle GPU cools the same way. The
 * serving loop tracks a replica's heat and gives each step the heat it starts at (step_shape's
 * heat), for the cost model; a measured run's heat is recomputed from its steps.csv the same way.
 */
#ifndef TANDEM_HEAT_H
#define TANDEM_HEAT_H

#include <stdint.h>

#include "batch.h"
#include "model_config.h"

/* The memory of the average: of those tried, the one whose calibrated profiles predict held-out
 * serving runs best (docs/costmodel.md). */
#define HEAT_TAU_NS 500000000LL

typedef struct heat {
    double h;       /* the heat at end_ns */
    int64_t end_ns; /* when the last step ended */
} heat;

/* The FLOPs a step runs: core/work.h's, padding rows included (they go through every GEMM;
 * their attention is next to nothing). */
double heat_flops(const model_config *mc, const step_shape *s);

/* A step's load: flops over ns and the peak (FLOP/s); 0 without a peak or a duration. */
static inline double heat_load(double flops, int64_t ns, double peak_flops)
{
    return peak_flops > 0 && ns > 0 ? flops / ((double)ns * 1e-9) / peak_flops : 0;
}

/* The heat at now_ns, cooled since the last step ended. */
double heat_at(const heat *t, int64_t now_ns);

/* A step of load from start_ns for ns. */
void heat_add(heat *t, int64_t start_ns, int64_t ns, double load);

/* The same with a memory of tau_ns instead of HEAT_TAU_NS. */
double heat_at_memory(const heat *t, int64_t now_ns, int64_t tau_ns);
void heat_add_memory(heat *t, int64_t start_ns, int64_t ns, double load, int64_t tau_ns);

/* Less spread in heat - load than this, and a slope says nothing. */
#define HEAT_MIN_SPREAD 0.01

/* How a step's time follows the heat: the least-squares slope of y = log(time) over x = heat -
 * load, with an intercept for each group of steps (group NULL: one for all; else 0 ..
 * HEAT_MAX_GROUPS - 1, e.g. one per shape). *spread: the standard deviation of x about its
 * group's mean, 0 when there is nothing to fit (and then the slope is 0 too). explained (may be
 * NULL): the fraction of y's variance about its groups' means that the slope accounts for. */
#define HEAT_MAX_GROUPS 8
double heat_slope(const double *x, const double *y, const int32_t *group, size_t n, double *spread,
                  double *explained);

/* A timeline of steps, each with its start, duration, load (heat_load), log(time) and group. */
typedef struct heat_step {
    int64_t start_ns, ns;
    double load, log_ms;
    int32_t group;
} heat_step;

/* The slope at the memory, of the n_taus in taus_ns, whose heat explains the most of the steps'
 * times (heat_slope); *tau_ns, *spread and *explained are that memory's. */
double heat_fit_memory(const heat_step *steps, size_t n, const int64_t *taus_ns, size_t n_taus, int64_t *tau_ns,
                       double *spread, double *explained);

#endif
