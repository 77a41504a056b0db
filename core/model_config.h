/*
 * model_config.h: a decoder-only Llama-family model's shape, read from a Hugging Face
 * config.json. Shared by the cost model (sim/) and the engine (engine/).
 *
 * `--model` takes a shipped name (configs/models/NAME.json, compiled into the binary), a path to
 * a config.json, or a checkpoint directory holding one.
 */
#ifndef TANDEM_MODEL_CONFIG_H
#define TANDEM_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util.h"

typedef enum rope_scaling_type { ROPE_SCALING_NONE, ROPE_SCALING_LLAMA3 } rope_scaling_type;

typedef struct model_config {
    char name[128];              /* shipped name or the path it came from */
    int32_t hidden_size;         /* h */
    int32_t intermediate_size;   /* MLP width */
    int32_t num_layers;
    int32_t num_heads;
    int32_t num_kv_heads;        /* < num_heads: grouped-query attention */
    int32_t head_dim;            /* h / num_heads unless the config says otherwise */
    int32_t vocab_size;
    int32_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    rope_scaling_type rope_scaling;
    double rope_factor;              /* llama3 scaling */
    double rope_low_freq_factor;
    double rope_high_freq_factor;
    int32_t rope_original_max_pos;
    bool tie_word_embeddings;
    int32_t dtype_bytes;         /* of the checkpoint's torch_dtype: 2 (bf16/fp16) or 4 */
    int32_t bos_token_id, eos_token_id;
} model_config;

/* Bytes per element as tandem serves every model: bf16 weights and a bf16 KV cache. */
#define WEIGHT_DTYPE_BYTES 2
#define KV_DTYPE_BYTES 2

/* One shipped config, embedded at build time (see the Makefile). */
struct model_config_file {
    const char *name;
    const char *json;
};
extern const struct model_config_file model_config_files[]; /* ends with {0, 0} */

/* Resolves `spec` (shipped name, config.json path, or checkpoint directory) and parses it. */
int model_config_load(model_config *mc, const char *spec, terr *e);
/* Parses config.json text; `origin` names it in messages. */
int model_config_parse(model_config *mc, const char *json_text, const char *origin, terr *e);

int64_t model_num_params(const model_config *mc);
/* Bytes of KV cache per token over all layers (K and V) at `dtype_bytes` per element. */
int64_t model_kv_bytes_per_token(const model_config *mc, int dtype_bytes);
void model_config_list(FILE *f); /* the shipped names, one per line */

#endif
