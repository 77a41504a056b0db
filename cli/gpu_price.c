/*
 * gpu_price.c: the default price of a GPU-hour for each GPU that sim/gpu.c knows.
 *
 * Source: Runpod's Serverless price list, "active" workers (always-on, billed whether busy or
 * not, which is what a serving deployment sized for a fixed load pays), per second, as a copy of
 * https://docs.runpod.io/serverless/pricing read when this table was written (December 2026)
 * listed it: H200 $0.00124/s, H100 $0.00093/s, A100 80 GB $0.00060/s. One provider's list keeps the
 * ratios between GPUs meaningful (H200 / H100 1.33, H100 / A100 1.55); the level is not: the
 * same GPU rents for a fraction of this on the spot market and for more from the large clouds.
 * Pass --gpu-cost to price your own.
 */
#include "cli/gpu_price.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/gpu.h"

#define RUNPOD "Runpod Serverless active-worker prices, docs.runpod.io/serverless/pricing, Dec 2026"

static const struct {
    const char *gpu;
    double usd_per_hour;
    const char *source;
} defaults[] = {
    {"h200", 0.00124 * 3600, RUNPOD},      /* 4.464 */
    {"h100-sxm", 0.00093 * 3600, RUNPOD},  /* 3.348 */
    {"a100-80gb", 0.00060 * 3600, RUNPOD}, /* 2.16 */
};

int gpu_prices_parse(gpu_prices *p, const char *arg, terr *e)
{
    p->num_given = 0;
    if (!arg || !*arg) return 0;
    char *copy = xstrdup(arg), *save = NULL;
    int rc = 0;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        double usd;
        if (!eq) {
            rc = terr_set(e, "--gpu-cost: \"%s\" is not GPU=USD (USD per GPU-hour, e.g. h200=3.5)", item);
            break;
        }
        *eq = 0;
        if (!gpu_find(item)) {
            rc = terr_unknown(e, "gpu-cost", "GPU", item, gpu_list);
            break;
        }
        if (parse_f64(eq + 1, &usd) || !(usd > 0 && isfinite(usd))) {
            rc = terr_set(e, "--gpu-cost: %s=%s: the price must be a number of USD per GPU-hour > 0", item, eq + 1);
            break;
        }
        int i = 0;
        while (i < p->num_given && strcmp(p->given[i].gpu, item)) i++;
        if (i == GPU_PRICE_MAX_GIVEN) {
            rc = terr_set(e, "--gpu-cost: more than %d GPUs", GPU_PRICE_MAX_GIVEN);
            break;
        }
        if (i == p->num_given) p->num_given++;
        snprintf(p->given[i].gpu, sizeof p->given[i].gpu, "%s", item);
        p->given[i].usd_per_hour = usd;
    }
    free(copy);
    return rc;
}

int gpu_price(const gpu_prices *p, const char *gpu, double *usd_per_hour, const char **source, terr *e)
{
    for (int i = 0; p && i < p->num_given; i++)
        if (!strcmp(p->given[i].gpu, gpu)) {
            *usd_per_hour = p->given[i].usd_per_hour;
            if (source) *source = "--gpu-cost";
            return 0;
        }
    for (size_t i = 0; i < ARRAY_LEN(defaults); i++)
        if (!strcmp(defaults[i].gpu, gpu)) {
            *usd_per_hour = defaults[i].usd_per_hour;
            if (source) *source = defaults[i].source;
            return 0;
        }
    return terr_set(e, "--gpu-cost: no price for GPU \"%s\": give one, e.g. --gpu-cost %s=3.5", gpu, gpu);
}

void gpu_price_list(FILE *f)
{
    for (size_t i = 0; i < ARRAY_LEN(defaults); i++)
        fprintf(f, "  %-10s $%.3f per GPU-hour\n", defaults[i].gpu, defaults[i].usd_per_hour);
    fprintf(f, "  (%s; --gpu-cost GPU=USD overrides them)\n", RUNPOD);
}
