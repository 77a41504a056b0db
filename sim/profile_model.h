/*
 * profile_model.h: the `profile` cost model: step times learned from the engine's own
 * measurements (`tandem profile`, cli/profile_cmd.c), chosen with --cost-model profile:FILE.
 *
 * A step's time is modelled as
 *   t = G(T) + a_dk decode_keys + a_ds decode_seqs + a_dg decode_grid + a_dp decode_partition
 *       + a_pp prefill_pairs2 + a_pk prefill_keys + a_e emitting + a_d [decode only]
 *       + a_m [prefill and decode together] + a_xp padding [beside a prefill]
 *       + a_xd padding [beside decodes only]
 *       + swap_blocks x (a block's K and V over the GPU row's host link)
 * where T = prefill + decode tokens (+ padding rows, which go through every GEMM), decode_grid
 * is the decode attention grid the engine launches, in blocks (rows x partitions of the context
 * they cover: a pure-decode step's graph rows and context bucket; kernels/decode_layout.h),
 * decode_partition the tokens one such block reads, and G is piecewise linear in T with a knot
 * at every token count the profile measured (so the engine's changes of kernel path, e.g. the
 * weight-streaming GEMM up to 2 rows, are where they are), and the linear terms price
 * attention (KV read and causal pairs), the LM head and sampler, CUDA-graph replay of pure
 * decode steps and the flattened mixed pass, and what a padding row (static batching) costs
 * beyond a token: the engine runs padding rows as sequences of their own, and identical rows
 * draw less power (the grid's padded points and a static run's steps fit them; without either,
 * a padding row is priced as a token). The engine's swaps are not in the grid: they are priced
 * at the host link's rate, as the roofline prices them. Every term is linear in the unknowns,
 * so one weighted least-squares fit (GSL, weights 1/t^2: relative error is what is minimised)
 * learns all of them at once; uneven contexts enter through the sums, mixed steps through the
 * same terms as their parts.
 * A row is weighted by its repeats too (it stands for that many measured steps: a profile
 * calibrated on serving runs, `tandem profile --from-runs`, has rows seen hundreds of times
 * beside rows seen once), and a profile of up to 100,000 rows fits in a fraction of a second
 * (past 256 distinct token counts the knots are spaced evenly in log T; docs/costmodel.md).
 *
 * The sum is the time at the heat of the step's own load (the rows are settled measurements);
 * a step that starts hotter or colder (core/heat.h: the serving loop's step_shape.heat) takes it
 * x exp(heat_alpha (heat - load)), heat_alpha from the file's `# heat_alpha:` line (0 without
 * one): `tandem profile` probes it, `--from-runs` fits it on serving steps.
 *
 * A step outside the measured ranges (T past the last knot, more keys or pairs than any point
 * had) is extrapolated linearly and counted; the count is in summary.json.
 *
 * The default, --cost-model auto, is the shipped profile of the run's model and GPU when there
 * is one (configs/profiles, compiled in), else the roofline.
 *
 * The file must come from the same model, GPU row and block size as the run, or the model
 * refuses it (naming what differs) unless forced (--force-profile), which summary.json records.
 */
#ifndef TANDEM_PROFILE_MODEL_H
#define TANDEM_PROFILE_MODEL_H

#include "sim/costmodel.h"

extern const cost_model_ops profile_cost_model;

/* A profile file's CSV header row, without the newline: the shape columns (core/batch.h's
 * step_shape, as steps.csv writes them), then repeats and the time's statistics in ms. */
extern const char profile_columns_header[];
/* The same without padding_tokens: a profile with these columns is read with no padding. */
extern const char profile_columns_header_unpadded[];
/* Fewer rows than this are refused: the fit has 11 linear terms besides G's knots (and a file
 * with fewer rows than unknowns, G at each distinct token count and the terms its rows use, is
 * refused too). */
#define PROFILE_MIN_POINTS 13
/* More rows than this are refused (the fit's time and memory grow with them). */
#define PROFILE_MAX_POINTS 100000

/* The profiles shipped in configs/profiles (MODEL_GPU.csv), embedded at build time. */
struct profile_file {
    const char *name; /* "llama-2-7b_h200" */
    const char *text;
};
extern const struct profile_file shipped_profiles[]; /* ends with {0, 0} */

/* "shipped:MODEL_GPU" when a shipped profile matches the model, the GPU row and the block size
 * (what --cost-model auto then uses), else NULL. The argument profile:ARG takes: a file path,
 * or shipped:NAME. */
const char *profile_shipped_for(const model_config *mc, const gpu_spec *gpu, int32_t block_size);

#endif
