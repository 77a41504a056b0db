/*
 * weights.h: which tensors a Llama-family model has, where they come from (a Hugging Face
 * checkpoint, or synthetic values made from a seed), and how the engine lays them out.
 *
 * Hugging Face names and shapes (out_features x in_features, row-major):
 *   model.embed_tokens.weight                      (V, h)
 *   model.layers.{l}.input_layernorm.weight        (h)
 *   model.layers.{l}.self_attn.q_proj.weight       (nh*hd, h)
 *   model.layers.{l}.self_attn.k_proj.weight       (nkv*hd, h)
 *   model.layers.{l}.self_attn.v_proj.weight       (nkv*hd, h)
 *   model.layers.{l}.self_attn.o_proj.weight       (h, nh*hd)
 *   model.layers.{l}.post_attention_layernorm.weight (h)
 *   model.layers.{l}.mlp.gate_proj.weight          (I, h)
 *   model.layers.{l}.mlp.up_proj.weight            (I, h)
 *   model.layers.{l}.mlp.down_proj.weight          (h, I)
 *   model.norm.weight                              (h)
 *   lm_head.weight                                 (V, h)   absent when tie_word_embeddings
 * q and k rows are in Hugging Face's "rotate_half" RoPE order (pairs (i, i + hd/2)), which the
 * engine's RoPE follows, so checkpoints load without permutation.
 *
 * Engine layout (both backends): q, k and v are stacked into one wqkv (nh*hd + 2*nkv*hd, h)
 * and gate and up into one wgu (2*I, h), so a layer runs 4 GEMMs. A tensor's place there is
 * its `fused` buffer and `row_offset`.
 *
 * Checkpoint tensors not in this list (e.g. old rotary_emb.inv_freq buffers) are ignored.
 * Accepted dtypes are BF16, F16 and F32, converted to what the backend stores.
 */
#ifndef TANDEM_WEIGHTS_H
#define TANDEM_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model_config.h"
#include "core/util.h"
#include "engine/safetensors.h"

typedef enum wt_fused {
    WF_EMBED,      /* (V, h) */
    WF_ATTN_NORM,  /* (h) per layer */
    WF_QKV,        /* (nh*hd + 2*nkv*hd, h) per layer */
    WF_O,          /* (h, nh*hd) per layer */
    WF_MLP_NORM,   /* (h) per layer */
    WF_GU,         /* (2*I, h) per layer: gate rows, then up rows */
    WF_DOWN,       /* (h, I) per layer */
    WF_FINAL_NORM, /* (h) */
    WF_LM_HEAD,    /* (V, h); the embedding when tied */
    WF_NUM
} wt_fused;

typedef struct wt_tensor {
    char name[96];      /* Hugging Face name */
    int32_t layer;      /* -1 for embedding, final norm, LM head */
    int32_t ndim;       /* 1 (norms) or 2 */
    int64_t rows, cols; /* shape; a 1-D tensor has cols == 1 */
    wt_fused fused;     /* engine buffer it goes into */
    int64_t row_offset; /* first row there */
    uint32_t synth_id;  /* stream of the synthetic generator */
    float synth_mean, synth_std;
} wt_tensor;

/* The model's tensors in canonical order (that is also the order a written checkpoint uses).
 * Returns the count; `out` (may be NULL) must hold wt_count(mc) entries. */
int32_t wt_list(const model_config *mc, wt_tensor *out);
static inline int32_t wt_count(const model_config *mc) { return wt_list(mc, NULL); }

/* Rows and columns of an engine buffer. */
void wt_fused_shape(const model_config *mc, wt_fused f, int64_t *rows, int64_t *cols);

/* Where weights come from. */
typedef struct wt_source {
    bool synthetic;
    uint64_t seed;          /* synthetic only */
    st_checkpoint ckpt;     /* checkpoint only */
} wt_source;

/* Opens `dir` (config already parsed into mc) and checks that every tensor the model needs is
 * present with the right shape and a supported dtype; errors name the file and the tensor. */
int wt_source_open_checkpoint(wt_source *s, const model_config *mc, const char *dir, terr *e);
void wt_source_synthetic(wt_source *s, uint64_t seed);
void wt_source_close(wt_source *s);

/* Reads tensor t (rows*cols values) as float32 or as bf16 bits. */
int wt_read_f32(const wt_source *s, const wt_tensor *t, float *dst, terr *e);
int wt_read_bf16(const wt_source *s, const wt_tensor *t, uint16_t *dst, terr *e);

/* Writes the weights of `s` as a Hugging Face checkpoint in `dir` (config.json and
 * model.safetensors, bf16), for comparison with other implementations. */
int wt_write_checkpoint(const wt_source *s, const model_config *mc, const char *dir, terr *e);

/* The config.json text Hugging Face needs to rebuild mc (malloc'd). */
char *model_config_to_json(const model_config *mc);

#endif
