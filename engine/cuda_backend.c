/* cuda_backend.c: placeholder while the CUDA backend is written. */
#include "engine/engine.h"

static int stub_open(void **self, const model_config *mc, const engine_opts *o,
                     const struct wt_source *src, terr *e)
{
    (void)self, (void)mc, (void)o, (void)src;
    terr_set(e, "--backend cuda: not available yet");
    return ENGINE_ERR_DEVICE;
}
const engine_backend_ops cuda_backend_ops = {.name = "cuda", .open = stub_open};
void *engine_cuda_stream(engine *eng) { (void)eng; return NULL; }
