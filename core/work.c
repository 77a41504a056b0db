/* work.c: see work.h. */
#include "work.h"

step_work step_work_of(const model_config *mc, const step_shape *s)
{
    if (s->num_items == 0) return (step_work){0};
    double h = mc->hidden_size, I = mc->intermediate_size, L = mc->num_layers, V = mc->vocab_size;
    double q_width = (double)mc->num_heads * mc->head_dim, kv_width = (double)mc->num_kv_heads * mc->head_dim;
    double linear_per_layer = h * (q_width + 2 * kv_width) + q_width * h + h * 2 * I + I * h;
    double T = (double)(s->prefill_tokens + s->decode_tokens), E = s->num_emitting;
    double kv_per_token = (double)model_kv_bytes_per_token(mc, KV_DTYPE_BYTES);
    step_work w;
    w.flops = 2 * T * linear_per_layer * L +
              L * (2 * (double)s->prefill_pairs2 + 4 * (double)s->decode_keys) * q_width + 2 * E * h * V;
    w.bytes = linear_per_layer * L * WEIGHT_DTYPE_BYTES + (E > 0 ? h * V * WEIGHT_DTYPE_BYTES : 0) +
              (double)(s->prefill_keys + s->decode_keys) * kv_per_token + T * kv_per_token;
    return w;
}
