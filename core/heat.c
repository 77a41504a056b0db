/* heat.c: see heat.h. */
#include "heat.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "util.h"
#include "work.h"

double heat_flops(const model_config *mc, const step_shape *s)
{
    step_shape busy = *s;
    busy.prefill_tokens += s->padding_tokens;
    return step_work_of(mc, &busy).flops;
}

double heat_at_memory(const heat *t, int64_t now_ns, int64_t tau_ns)
{
    int64_t idle = now_ns - t->end_ns;
    return idle > 0 ? t->h * exp(-(double)idle / (double)tau_ns) : t->h;
}

void heat_add_memory(heat *t, int64_t start_ns, int64_t ns, double load, int64_t tau_ns)
{
    double keep = exp(-(double)ns / (double)tau_ns);
    t->h = heat_at_memory(t, start_ns, tau_ns) * keep + load * (1 - keep);
    t->end_ns = start_ns + ns;
}

double heat_at(const heat *t, int64_t now_ns)
{
    return heat_at_memory(t, now_ns, HEAT_TAU_NS);
}

void heat_add(heat *t, int64_t start_ns, int64_t ns, double load)
{
    heat_add_memory(t, start_ns, ns, load, HEAT_TAU_NS);
}

double heat_slope(const double *x, const double *y, const int32_t *group, size_t n, double *spread,
                  double *explained)
{
    double cnt[HEAT_MAX_GROUPS] = {0}, sx[HEAT_MAX_GROUPS] = {0}, sy[HEAT_MAX_GROUPS] = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t g = group ? group[i] : 0;
        assert(g >= 0 && g < HEAT_MAX_GROUPS);
        cnt[g]++, sx[g] += x[i], sy[g] += y[i];
    }
    double sxx = 0, sxy = 0, syy = 0; /* about each group's means */
    for (size_t i = 0; i < n; i++) {
        int32_t g = group ? group[i] : 0;
        double dx = x[i] - sx[g] / cnt[g], dy = y[i] - sy[g] / cnt[g];
        sxx += dx * dx, sxy += dx * dy, syy += dy * dy;
    }
    *spread = n ? sqrt(sxx / (double)n) : 0;
    if (explained) *explained = sxx > 0 && syy > 0 ? sxy * sxy / (sxx * syy) : 0;
    return sxx > 0 ? sxy / sxx : 0;
}

double heat_fit_memory(const heat_step *steps, size_t n, const int64_t *taus_ns, size_t n_taus, int64_t *tau_ns,
                       double *spread, double *explained)
{
    double *x = xcalloc(n ? n : 1, sizeof *x), *y = xcalloc(n ? n : 1, sizeof *y), best = 0;
    int32_t *group = xcalloc(n ? n : 1, sizeof *group);
    *tau_ns = 0, *spread = 0, *explained = -1;
    for (size_t k = 0; k < n_taus; k++) {
        heat t = {0};
        for (size_t i = 0; i < n; i++) {
            const heat_step *s = &steps[i];
            x[i] = heat_at_memory(&t, s->start_ns, taus_ns[k]) - s->load, y[i] = s->log_ms, group[i] = s->group;
            heat_add_memory(&t, s->start_ns, s->ns, s->load, taus_ns[k]);
        }
        double sp, ex, a = heat_slope(x, y, group, n, &sp, &ex);
        if (ex > *explained) best = a, *tau_ns = taus_ns[k], *spread = sp, *explained = ex;
    }
    free(x), free(y), free(group);
    return best;
}
