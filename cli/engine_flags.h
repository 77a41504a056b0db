/*
 * engine_flags.h: how `tandem run` and `tandem profile` open the real engine: the engine's own
 * flags, and the engine sized from a resolved serving setup (cli/serving.h), so a profile
 * measures steps exactly as a run takes them (same backend, CUDA graphs, KV cache size).
 */
#ifndef TANDEM_ENGINE_FLAGS_H
#define TANDEM_ENGINE_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/serving.h"
#include "core/options.h"
#include "engine/engine.h"

typedef struct engine_flags {
    char *backend;
    int64_t weight_seed;
    double temperature, top_p;
    bool cuda_graphs;
    bool kernel_trace;
} engine_flags;

/* The engine's flags; offsets into an engine_flags. */
extern const opt_spec engine_flag_specs[];

/* Opens the engine for su: the GPU gets the KV blocks of vLLM's memory accounting (or
 * --num-gpu-blocks-override), the CPU reference what max_num_seqs sequences of max_model_len
 * need unless overridden. su->kv.num_blocks becomes what the engine has. Returns 0, or the exit
 * code (1 a device failure, 2 bad input) with e set. */
int engine_flags_open(const engine_flags *f, const serving_options *o, serving_setup *su, engine *eng, terr *e);

#endif
