/* sampler.c: see sampler.h. */
#include "engine/sampler.h"

#include <math.h>
#include <string.h>

int32_t sample_argmax(const float *logits, int32_t vocab)
{
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static float mass_above(const float *p, int32_t vocab, float tau)
{
    float m = 0;
    for (int32_t i = 0; i < vocab; i++)
        if (p[i] >= tau) m += p[i];
    return m;
}

int32_t sample_top_p(const float *logits, int32_t vocab, float temperature, float top_p, float u,
                     float *p)
{
    float mx = logits[0];
    for (int32_t i = 1; i < vocab; i++) mx = fmaxf(mx, logits[i]);
    float z = 0;
    for (int32_t i = 0; i < vocab; i++) {
        p[i] = expf((logits[i] - mx) / temperature);
        z += p[i];
    }
    /* Largest tau (as float bits, in [0, 1.0]) whose mass reaches top_p * z. */
    float target = top_p * z;
    uint32_t lo = 0, hi = 0x3f800000u; /* 1.0f: the largest p */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        float tau;
        memcpy(&tau, &mid, 4);
        if (mass_above(p, vocab, tau) >= target) lo = mid;
        else hi = mid - 1;
    }
    float tau;
    memcpy(&tau, &lo, 4);
    float pick = u * mass_above(p, vocab, tau), cum = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < vocab; i++) {
        if (p[i] < tau) continue;
        cum += p[i];
        last = i;
        if (cum > pick) return i;
    }
    return last; /* rounding left u * mass at the very end */
}

bool logits_finite(const float *logits, int32_t vocab)
{
    for (int32_t i = 0; i < vocab; i++)
        if (!(logits[i] < INFINITY)) return false; /* NaN or +inf */
    return true;
}

int32_t sample_row(const float *logits, int32_t vocab, float temperature, float top_p, float u,
                   float *scratch)
{
    if (!logits_finite(logits, vocab)) return SAMPLE_NOT_FINITE;
    if (temperature <= 0) return sample_argmax(logits, vocab);
    return sample_top_p(logits, vocab, temperature, top_p, u, scratch);
}
