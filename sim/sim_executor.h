/*
 * sim_executor.h: the simulator's executor (core/executor.h): each step's duration is a cost
 * model's prediction for the batch; no tokens are sampled (step_result.sampled = NULL).
 */
#ifndef TANDEM_SIM_EXECUTOR_H
#define TANDEM_SIM_EXECUTOR_H

#include "core/executor.h"
#include "sim/costmodel.h"
#include "sim/tensor_parallel.h"

/* opts NULL means cost_model_opts_default(). */
int sim_executor_create(executor *ex, const cost_model_ops *cm, const model_config *mc,
                        const gpu_spec *gpu, const cost_model_opts *opts, terr *e);
/* Makes ex (from sim_executor_create, for the shard's model) a tensor-parallel replica: each
 * step also pays its all-reduces (sim/tensor_parallel.h). c is copied. */
void sim_executor_set_tp(executor *ex, const tp_comm *c);

#endif
