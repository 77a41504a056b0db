/*
 * gpu_price.h: what a GPU-hour costs, for `tandem search`'s cost search: a configuration costs
 * its GPU count (replicas x tensor-parallel size) x the price of one GPU-hour of its --gpu.
 *
 * The default table has one row per GPU that sim/gpu.c knows, all from one provider's list so
 * that their ratios are comparable (gpu_price.c says which, and when). Prices for the same GPU
 * differ by 2-5x across providers, commitment terms and spot markets, so they are an
 * assumption the user overrides with `--gpu-cost h200=3.5,a100-80gb=1.8`.
 */
#ifndef TANDEM_GPU_PRICE_H
#define TANDEM_GPU_PRICE_H

#include <stdio.h>

#include "core/util.h"

#define GPU_PRICE_MAX_GIVEN 16

typedef struct gpu_prices {
    int num_given;
    struct {
        char gpu[32];          /* a sim/gpu.h name */
        double usd_per_hour;   /* per GPU */
    } given[GPU_PRICE_MAX_GIVEN]; /* (num_given) from --gpu-cost, over the defaults */
} gpu_prices;

/* Parses --gpu-cost's value, "GPU=USD[,GPU=USD...]" ("" or NULL: none), into p. Every GPU must
 * be one sim knows and every price a finite number > 0. 0, or -1 with e naming --gpu-cost. */
int gpu_prices_parse(gpu_prices *p, const char *arg, terr *e);

/* USD per hour of one `gpu`: --gpu-cost's price, else the default. *source (when not NULL) says
 * where it comes from. 0, or -1 with e naming --gpu-cost when the GPU has neither. */
int gpu_price(const gpu_prices *p, const char *gpu, double *usd_per_hour, const char **source, terr *e);

/* The default table, "  gpu  USD/h  source" lines (for --help and messages). */
void gpu_price_list(FILE *f);

#endif
