/*
 * kv_capacity.c: how many KV blocks fit on the GPU, the way vLLM sizes its cache at start-up.
 *
 * vLLM loads the weights, runs one profiling forward pass with max_num_batched_tokens tokens
 * (and a sampler pass over max_num_seqs rows), takes the peak memory it saw, and gives the
 * rest of mem x gpu_memory_utilization to the KV cache. We cannot profile, so we estimate:
 *
 *   usable      = floor(mem_bytes x gpu_memory_utilization)
 *   weights     = model_num_params x 2                                   (bf16)
 *   activations = T x 2 x (2h + max(qkv_width + q_width, 3I))           T = max_num_batched_tokens
 *                   the peak of one layer: the residual and normed hidden states (2h) live
 *                   throughout; on top of them either the attention phase (QKV output of
 *                   (heads + 2 kv_heads) x head_dim and the attention output of heads x
 *                   head_dim) or the MLP phase (gate/up output 2I and the SiLU product I);
 *                   layers run one after another, so only one layer's activations are live
 *               + min(max_num_seqs, T) x V x 4 x 2                       fp32 logits + probs
 *               + 1 GiB                                                   non-torch memory: CUDA
 *                   context, cuBLAS workspace, NCCL, CUDA graphs (vLLM measures this; ~1 GiB
 *                   is typical of one GPU with graphs captured)
 *   bytes/block = 2 x layers x block_size x kv_heads x head_dim x 2      (K and V, bf16)
 *   num_blocks  = floor((usable - weights - activations) / bytes/block)
 *
 * The estimate errs a little high (the real peak overlaps fewer tensors than the sum), which
 * errs towards fewer blocks, as vLLM's own profiling (allocator slack included) tends to.
 * Check: Llama-2-7B on the H200 at 0.9 with T = 8192 and 256 sequences leaves 14351 blocks of
 * 16 tokens (8 MiB each), ~112 GiB of KV cache.
 */
#include <math.h>

#include "sim/kv_capacity.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

/* Memory outside torch's allocator that vLLM's profiling finds (see the comment above). */
#define KV_NON_TORCH_RESERVE_BYTES (1LL << 30)
/* Sampler copies of the logits counted in the reserve: the fp32 logits and their softmax. */
#define KV_LOGITS_FP32_COPIES 2

int kv_capacity_compute(kv_capacity *cap, const model_config *mc, const gpu_spec *gpu,
                        double gpu_memory_utilization, int32_t block_size,
                        int32_t max_num_batched_tokens, int32_t max_num_seqs,
                        int32_t max_model_len, terr *e)
{
    *cap = (kv_capacity){0};
    if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
        return terr_set(e, "--gpu-memory-utilization %g: must be in (0, 1]",
                        gpu_memory_utilization);
    if (block_size <= 0) return terr_set(e, "--block-size %d: must be positive", block_size);
    if (max_num_batched_tokens <= 0)
        return terr_set(e, "--max-num-batched-tokens %d: must be positive", max_num_batched_tokens);
    if (max_num_seqs <= 0) return terr_set(e, "--max-num-seqs %d: must be positive", max_num_seqs);
    if (max_model_len <= 0)
        return terr_set(e, "--max-model-len %d: must be positive", max_model_len);

    int64_t h = mc->hidden_size, I = mc->intermediate_size, V = mc->vocab_size;
    int64_t q_width = (int64_t)mc->num_heads * mc->head_dim;
    int64_t kv_width = (int64_t)mc->num_kv_heads * mc->head_dim;
    int64_t T = max_num_batched_tokens;
    int64_t attn_phase = q_width + 2 * kv_width + q_width;
    int64_t mlp_phase = 3 * I;
    int64_t layer_peak = T * WEIGHT_DTYPE_BYTES * (2 * h + max_i64(attn_phase, mlp_phase));
    int64_t logits = min_i64(max_num_seqs, T) * V * 4 * KV_LOGITS_FP32_COPIES;

    cap->usable_bytes = (int64_t)floor((double)gpu->mem_bytes * gpu_memory_utilization);
    cap->weight_bytes = model_num_params(mc) * WEIGHT_DTYPE_BYTES;
    cap->activation_bytes = layer_peak + logits + KV_NON_TORCH_RESERVE_BYTES;
    cap->bytes_per_block = (int64_t)block_size * model_kv_bytes_per_token(mc, KV_DTYPE_BYTES);
    int64_t kv_bytes = cap->usable_bytes - cap->weight_bytes - cap->activation_bytes;
    cap->num_blocks = kv_bytes > 0 ? kv_bytes / cap->bytes_per_block : 0;

    /* What one max_model_len request needs, to say how far off the configuration is. */
    int64_t need_blocks = div_ceil_i64(max_model_len, block_size);
    double need_util = (double)(cap->weight_bytes + cap->activation_bytes +
                                need_blocks * cap->bytes_per_block) / (double)gpu->mem_bytes;
    char util_hint[96];
    if (need_util <= 1.0)
        snprintf(util_hint, sizeof util_hint, "raise --gpu-memory-utilization to at least %.2f",
                 ceil(need_util * 100.0) / 100.0);
    else
        snprintf(util_hint, sizeof util_hint,
                 "(even --gpu-memory-utilization 1.0 is not enough on %s)", gpu->name);

    if (cap->num_blocks <= 0)
        return terr_set(e,
                        "KV cache: %s on %s at --gpu-memory-utilization %.2f: usable %.2f GiB - "
                        "weights %.2f GiB - activation reserve %.2f GiB = %.2f GiB leaves no "
                        "room for one KV block (%.2f MiB); %s, use a bigger GPU, or set "
                        "--num-gpu-blocks-override",
                        mc->name, gpu->name, gpu_memory_utilization, cap->usable_bytes / GIB,
                        cap->weight_bytes / GIB, cap->activation_bytes / GIB, kv_bytes / GIB,
                        cap->bytes_per_block / MIB, util_hint);
    int64_t max_tokens = cap->num_blocks * block_size;
    if (max_tokens < max_model_len)
        return terr_set(e,
                        "KV cache: %s on %s at --gpu-memory-utilization %.2f: %lld blocks x %d "
                        "tokens = %lld tokens < --max-model-len %d (usable %.2f GiB - weights "
                        "%.2f GiB - activation reserve %.2f GiB = %.2f GiB of KV, %.2f MiB per "
                        "block); lower --max-model-len to at most %lld, %s, use a bigger GPU, "
                        "or set --num-gpu-blocks-override",
                        mc->name, gpu->name, gpu_memory_utilization, (long long)cap->num_blocks,
                        block_size, (long long)max_tokens, max_model_len,
                        cap->usable_bytes / GIB, cap->weight_bytes / GIB,
                        cap->activation_bytes / GIB, kv_bytes / GIB, cap->bytes_per_block / MIB,
                        (long long)max_tokens, util_hint);
    return 0;
}
