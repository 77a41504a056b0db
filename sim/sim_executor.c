/*
 * sim_executor.c: the simulator's executor. It runs nothing: each step's duration is the cost
 * model's prediction for the batch (plus, for a tensor-parallel replica, its all-reduces), and no
 * tokens are sampled (step_result.sampled = NULL).
 */
#include <stdlib.h>

#include "sim/sim_executor.h"

typedef struct sim_executor {
    const cost_model_ops *cm;
    void *model; /* the cost model's state */
    tp_comm tp;  /* tp.tp <= 1: one GPU */
} sim_executor;

static int sim_execute(void *self, const batch *b, step_result *out, terr *e)
{
    sim_executor *s = self;
    step_shape shape = batch_shape(b);
    *out = (step_result){.duration_ns = s->cm->step_ns(s->model, &shape) + tp_step_comm_ns(&s->tp, &shape)};
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
    json_t *r = s->cm->report ? s->cm->report(s->model) : json_pack("{s:s}", "cost_model", s->cm->name);
    if (s->tp.tp > 1)
        json_object_set_new(r, "tensor_parallel",
                            json_pack("{s:i,s:s,s:f,s:f,s:s}", "size", s->tp.tp, "link", s->tp.link->link,
                                      "allreduce_busbw_gb_s", s->tp.link->allreduce_busbw_bytes_s / 1e9,
                                      "allreduce_latency_us", s->tp.link->allreduce_latency_ns / 1e3, "source",
                                      s->tp.link->source));
    return r;
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
    *s = (sim_executor){.cm = cm, .model = model, .tp = {.tp = 1}};
    *ex = (executor){.ops = &sim_executor_ops, .self = s};
    return 0;
}

void sim_executor_set_tp(executor *ex, const tp_comm *c)
{
    sim_executor *s = ex->self;
    s->tp = *c;
}
