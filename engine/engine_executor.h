/*
 * engine_executor.h: the real engine behind the executor seam (core/executor.h).
 *
 * The serving loop hands it the batch a policy formed; it turns the batch into the flat arrays
 * of one engine step (token ids, positions, slots from the requests' block tables, sequence
 * boundaries), runs the forward pass, samples one token for every item that reaches the end
 * of its sequence, and reports the step's wall time. The simulator's executor answers the same
 * call with a cost-model prediction; the loop and the policy cannot tell which one ran.
 */
#ifndef TANDEM_ENGINE_EXECUTOR_H
#define TANDEM_ENGINE_EXECUTOR_H

#include "core/executor.h"
#include "engine/engine.h"

/* The engine must have been opened with num_blocks and block_size equal to the scheduler's,
 * max_tokens >= max_num_batched_tokens and max_seqs >= max_num_seqs. Greedy sampling unless
 * temperature > 0 (then top_p and a GSL generator seeded with `seed`). Prompt token ids are
 * the requests' (request_token_id, reduced modulo the vocabulary). */
int engine_executor_create(executor *ex, engine *eng, double temperature, double top_p, uint64_t seed,
                           terr *e);

#endif
