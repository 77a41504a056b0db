/*
 * gnuplot.h: drawing a figure with one of the gnuplot scripts in plots/, for the commands that draw (plot,
 * compare). The scripts, not C, own what a figure looks like; C hands them data files.
 */
#ifndef TANDEM_GNUPLOT_H
#define TANDEM_GNUPLOT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/util.h"

/* plots/ of the checkout the binary was built in (build/tandem -> plots/), else ./plots. */
bool gnuplot_find_scripts(char *buf, size_t n);

/* In args, where the output prefix goes when it is not the script's first argument. */
#define GNUPLOT_OUT "{OUT}"

/* Runs gnuplot [-e SET]... -c PLOTS/SCRIPT DIR/.NAME.tmp ARGS... and renames the .png and .svg it
 * wrote to DIR/NAME.{png,svg}. sets (nsets) are gnuplot commands such as "logx=1". Returns 0, 1
 * when gnuplot is not installed, -1 when it failed (e set). */
int gnuplot_draw(const char *plots, const char *script, const char *dir, const char *name, const char *const *sets,
                 int nsets, const char *const *args, int nargs, terr *e);

#endif
