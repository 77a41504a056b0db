/*
 * sim_executor.c: the simulator's executor. It runs nothing: each step's duration is the cost
 * model's prediction for the batch, and no tokens are sampled (step_result.sampled = NULL).
 */
#include <stdlib.h>

#include "sim/sim_executor.h"

typedef struct sim_executor {
    const cost_model_ops *cm;
    void *model; /* the cost model's state */
} sim_executor;

static int sim_execute(void *self, const batch *b, step_result *out, terr *e)
{
    sim_executor *s = self;
    step_shape shape = batch_shape(b);
    out->duration_ns = s->cm->step_ns(s->model, &shape);
    out->sampled = NULL;
    return 0;
}

static void sim_destroy(void *self)
{
    sim_executor *s = self;
    s->cm->destroy(s->model);
    free(s);
}

static json_t *sim_report(void *self)
{
    sim_executor *s = self;
    return s->cm->report ? s->cm->report(s->model) : json_pack("{s:s}", "cost_model", s->cm->name);
}

static const executor_ops sim_executor_ops = {
    .name = "sim",
    .execute = sim_execute,
    .release = NULL,
    .destroy = sim_destroy,
    .report = sim_report,
};

int sim_executor_create(executor *ex, const cost_model_ops *cm, const model_config *mc,
                        const gpu_spec *gpu, const cost_model_opts *opts, terr *e)
{
    void *model = cm->create(mc, gpu, opts, e);
    if (!model) return -1;
    sim_executor *s = xmalloc(sizeof *s);
    *s = (sim_executor){.cm = cm, .model = model};
    *ex = (executor){.ops = &sim_executor_ops, .self = s};
    return 0;
}
