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
    bool padded_steps; /* not a flag: the engine takes static batching's padded steps whatever the
                          policy (`tandem profile` measures them) */
} engine_flags;

/* The engine's flags; offsets into an engine_flags. */
extern const opt_spec engine_flag_specs[];
/* --gpu as the engine's commands take it, default "auto"; offsets into a serving_options. */
extern const opt_spec engine_gpu_specs[];

/* The CUDA device as nvidia-smi names it, with its driver and clocks ("NVIDIA H200, 580.95.05,
 * 1980 MHz, 1980 MHz"); "cpu (the reference backend)" on the CPU backend; "unknown" when
 * nvidia-smi does not answer. */
void engine_flags_device(const char *backend, char *buf, size_t size);

/* Resolves --gpu auto into o->gpu: on the cuda backend the row whose chip the
 * device is (device: engine_flags_device's line), h200 where the device is unknown (the engine
 * then says what it found) or on the CPU backend. A device no row names is an error that asks
 * for --gpu. Another value is left as it is. Returns 0, or -1 with e set. */
int engine_flags_pick_gpu(const engine_flags *f, const char *device, serving_options *o, terr *e);

/* Opens the engine for su: the GPU gets the KV blocks of vLLM's memory accounting (or
 * --num-gpu-blocks-override), the CPU reference what max_num_seqs sequences of max_model_len
 * need unless overridden. su->kv.num_blocks becomes what the engine has. Returns 0, or the exit
 * code (1 a device failure, 2 bad input) with e set. */
int engine_flags_open(const engine_flags *f, const serving_options *o, serving_setup *su, engine *eng, terr *e);

#endif
