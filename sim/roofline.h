/*
 * roofline.h: the `roofline` cost model's tunable constants, for calibration.
 *
 * The model itself is reached through the registry (cost_model_find("roofline")); this header
 * exists so a calibration tool can build one with other constants (roofline_create_with) and
 * compare its predictions with the real engine's step times. Every constant is described, with
 * its source, in docs/costmodel.md; each GPU's live in its row (sim/gpu.c).
 */
#ifndef TANDEM_ROOFLINE_H
#define TANDEM_ROOFLINE_H

#include "sim/costmodel.h"

/* Creates a roofline model with the given constants (p NULL: the GPU row's); destroy it with
 * roofline_cost_model.destroy. Returns NULL with e set on error. */
void *roofline_create_with(const model_config *mc, const gpu_spec *gpu,
                           const cost_model_opts *opts, const roofline_params *p, terr *e);

extern const cost_model_ops roofline_cost_model;

#endif
