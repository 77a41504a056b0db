/*
 * work.h: what a step must compute and move on a given model, whoever runs it: the FLOPs and
 * bytes behind model FLOPs utilisation (MFU) and memory-bandwidth utilisation (MBU).
 *
 * Counted from the step's shape (core/batch.h) and the model's dimensions, for useful work only
 * (padding rows are left out, so a padded batch shows as the waste it is):
 *   flops = 2 x T x (linear weights of all layers)              every token through every GEMM
 *         + L x (2 x prefill_pairs2 + 4 x decode_keys) x q_width  QK^T and PV
 *         + 2 x E x hidden x vocab                               the LM head for emitting rows
 *   bytes = linear weights of all layers x 2 (+ the LM head when a row emits)  read once
 *         + (prefill_keys + decode_keys) x KV bytes per token    context read by attention
 *         + T x KV bytes per token                               the step's new KV written
 * with T = prefill + decode tokens, bf16 weights and KV. Activations, norms and the sampler are
 * left out: they are small next to these at every batch size the scheduler produces.
 */
#ifndef TANDEM_WORK_H
#define TANDEM_WORK_H

#include "batch.h"
#include "model_config.h"

typedef struct step_work {
    double flops;
    double bytes;
} step_work;

step_work step_work_of(const model_config *mc, const step_shape *s);

#endif
