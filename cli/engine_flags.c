/* engine_flags.c: see engine_flags.h. */
#include "cli/engine_flags.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "sim/gpu.h"

#define O(f) offsetof(engine_flags, f)
const opt_spec engine_flag_specs[] = {
    {"backend", OPT_STR, O(backend), "cuda", "engine backend: cuda or cpu"},
    {"weight-seed", OPT_I64, O(weight_seed), "0", "seed of synthetic weights (--model synthetic:NAME)"},
    {"temperature", OPT_F64, O(temperature), "0", "sampling temperature (0: greedy)"},
    {"top-p", OPT_F64, O(top_p), "1", "nucleus sampling"},
    {"cuda-graphs", OPT_BOOL, O(cuda_graphs), "true", "replay decode steps from CUDA graphs"},
    {"kernel-trace", OPT_BOOL, O(kernel_trace), "false",
     "cuda: time each step's GPU kernels with CUPTI (steps.csv: kernel_us, kernel_busy, time by kind; "
     "profile: FILE.kernels.csv); slows decode steps ~16%"},
    OPT_END,
};
#undef O

const opt_spec engine_gpu_specs[] = {
    {"gpu", OPT_STR, offsetof(serving_options, gpu), "auto",
     "GPU row (listed above) whose memory sizes the KV cache; auto: the CUDA device's (h200 on cpu)"},
    OPT_END,
};

void engine_flags_device(const char *backend, char *buf, size_t size)
{
    snprintf(buf, size, "unknown");
    if (strcmp(backend, "cuda") != 0) {
        snprintf(buf, size, "cpu (the reference backend)");
        return;
    }
    FILE *f = popen("nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader "
                    "2>/dev/null | head -1",
                    "r");
    if (!f) return;
    if (fgets(buf, (int)size, f)) buf[strcspn(buf, "\n")] = 0;
    if (!buf[0]) snprintf(buf, size, "unknown");
    pclose(f);
}

int engine_flags_pick_gpu(const engine_flags *f, const char *device, serving_options *o, terr *e)
{
    if (strcmp(o->gpu, "auto") != 0) return 0;
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(device, ","), device);
    const gpu_spec *g = gpu_find("h200");
    if (!strcmp(f->backend, "cuda") && strcmp(name, "unknown") != 0 && !(g = gpu_for_device(name)))
        return terr_set(e, "--gpu auto: no GPU row is the CUDA device (%s): name the row nearest it with --gpu "
                           "(the rows are listed under --help) and set --num-gpu-blocks-override if its memory "
                           "differs",
                        name);
    free(o->gpu);
    o->gpu = xstrdup(g->name);
    return 0;
}

int engine_flags_open(const engine_flags *f, const serving_options *o, serving_setup *su, engine *eng, terr *e)
{
    engine_opts eo;
    engine_opts_default(&eo);
    eo.model = o->model;
    eo.backend = f->backend;
    eo.weight_seed = (uint64_t)f->weight_seed;
    eo.block_size = su->sched.block_size;
    eo.max_tokens = su->sched.max_num_batched_tokens;
    eo.max_seqs = su->sched.max_num_seqs;
    /* static batching's padding rows run as sequences of their own, up to a block each, and its
     * first padded prompt of a pass may exceed the token budget (policies/static.c) */
    if (f->padded_steps || (su->policy && strcmp(su->policy->name, "static") == 0)) {
        eo.max_tokens = (int32_t)max_i64(eo.max_tokens, su->sched.max_model_len);
        eo.max_seqs += (int32_t)div_ceil_i64(eo.max_tokens, eo.block_size);
    }
    eo.num_host_blocks = su->num_host_blocks;
    eo.max_model_len = su->sched.max_model_len;
    eo.cuda_graphs = f->cuda_graphs;
    eo.kernel_trace = f->kernel_trace;
    bool cpu = strcmp(f->backend, "cpu") == 0;
    eo.num_blocks = o->num_gpu_blocks_override ? (int32_t)o->num_gpu_blocks_override
                    : cpu                      ? 0
                                               : (int32_t)su->kv.num_blocks;
    int rc = engine_open(eng, &eo, e);
    if (rc) return rc == ENGINE_ERR_DEVICE ? 1 : 2;
    su->kv.num_blocks = eng->opts.num_blocks;
    return 0;
}
