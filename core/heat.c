/* heat.c: see heat.h. */
#include "heat.h"

#include <assert.h>
#include <math.h>

#include "work.h"

double heat_flops(const model_config *mc, const step_shape *s)
{
    step_shape busy = *s;
    busy.prefill_tokens += s->padding_tokens;
    return step_work_of(mc, &busy).flops;
}

double heat_at(const heat *t, int64_t now_ns)
{
    int64_t idle = now_ns - t->end_ns;
    return idle > 0 ? t->h * exp(-(double)idle / HEAT_TAU_NS) : t->h;
}

void heat_add(heat *t, int64_t start_ns, int64_t ns, double load)
{
    double keep = exp(-(double)ns / HEAT_TAU_NS);
    t->h = heat_at(t, start_ns) * keep + load * (1 - keep);
    t->end_ns = start_ns + ns;
}

double heat_slope(const double *x, const double *y, const int32_t *group, size_t n, double *spread)
{
    double cnt[HEAT_MAX_GROUPS] = {0}, sx[HEAT_MAX_GROUPS] = {0}, sy[HEAT_MAX_GROUPS] = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t g = group ? group[i] : 0;
        assert(g >= 0 && g < HEAT_MAX_GROUPS);
        cnt[g]++, sx[g] += x[i], sy[g] += y[i];
    }
    double sxx = 0, sxy = 0; /* about each group's means */
    for (size_t i = 0; i < n; i++) {
        int32_t g = group ? group[i] : 0;
        double dx = x[i] - sx[g] / cnt[g];
        sxx += dx * dx, sxy += dx * (y[i] - sy[g] / cnt[g]);
    }
    *spread = n ? sqrt(sxx / (double)n) : 0;
    return sxx > 0 ? sxy / sxx : 0;
}
