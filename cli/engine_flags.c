/* engine_flags.c: see engine_flags.h. */
#include "cli/engine_flags.h"

#include <stddef.h>
#include <string.h>

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
    if (su->policy && strcmp(su->policy->name, "static") == 0) {
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
