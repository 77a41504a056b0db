/*
 * sampler.h: picking a token from a row of logits, greedy or temperature + top-p, on the CPU.
 * kernels/sample.cu does the same steps on the GPU, so both backends give the same token for
 * the same logits and the same uniform draw (up to float summation order at exact boundaries).
 *
 * Algorithm (chosen because a GPU can run it without sorting the vocabulary):
 *   temperature 0: argmax, lowest id on ties.
 *   otherwise: p_i = exp((l_i - max l) / temperature), Z = sum p_i. The nucleus is {i : p_i >= tau}
 *   for the largest tau with sum_{p_i >= tau} p_i >= top_p * Z: the smallest set of most likely
 *   tokens whose probability reaches top_p (ties at the edge all included). tau is found by
 *   binary search over the bit patterns of positive floats. The token is the first id, in id
 *   order, at which the running sum of nucleus p_i exceeds u * (nucleus mass), u the caller's
 *   uniform draw in [0, 1).
 * A row holding NaN or +inf has no distribution: sample_row returns SAMPLE_NOT_FINITE for it (as
 * the GPU kernel does), and the engine stops rather than emit a made-up token.
 */
#ifndef TANDEM_SAMPLER_H
#define TANDEM_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

int32_t sample_argmax(const float *logits, int32_t vocab);
/* scratch: (vocab) floats. */
int32_t sample_top_p(const float *logits, int32_t vocab, float temperature, float top_p, float u,
                     float *scratch);
#define SAMPLE_NOT_FINITE (-1)

/* Whether every logit is finite or -inf (a masked token). */
bool logits_finite(const float *logits, int32_t vocab);
/* Greedy when temperature <= 0, else sample_top_p; SAMPLE_NOT_FINITE when !logits_finite. */
int32_t sample_row(const float *logits, int32_t vocab, float temperature, float top_p, float u,
                   float *scratch);

#endif
