/* gpu.h for builds without CUDA: --device cuda is refused, saying why. */
#include <stdio.h>

#include "gpu.h"

gpu_mlp_t *gpu_mlp_create(const mlp_t *m, const optim_t *o, int rank,
                          char *err, size_t errlen) {
  snprintf(err, errlen, "--device cuda: this hoop-train was built without "
                        "CUDA (configure found no toolkit)");
  return NULL;
}

/* Unreachable without a gpu_mlp_t; here so that the trainer links. */
void gpu_mlp_destroy(gpu_mlp_t *g) {}
void *gpu_mlp_stream(gpu_mlp_t *g) { return NULL; }
float *gpu_mlp_grads(gpu_mlp_t *g) { return NULL; }

static int no_cuda(char *err, size_t errlen) {
  snprintf(err, errlen, "no CUDA in this build");
  return -1;
}

int gpu_mlp_push(gpu_mlp_t *g, const mlp_t *m, const optim_t *o, char *err,
                 size_t errlen) {
  return no_cuda(err, errlen);
}

int gpu_mlp_pull(gpu_mlp_t *g, mlp_t *m, optim_t *o, char *err,
                 size_t errlen) {
  return no_cuda(err, errlen);
}

int gpu_mlp_forward(gpu_mlp_t *g, mlp_t *m, int batch, char *err,
                    size_t errlen) {
  return no_cuda(err, errlen);
}

int gpu_mlp_backward(gpu_mlp_t *g, const mlp_t *m, int batch,
                     layer_done_fn done, void *ctx, char *err,
                     size_t errlen) {
  return no_cuda(err, errlen);
}

int gpu_mlp_step(gpu_mlp_t *g, optim_t *o, char *err, size_t errlen) {
  return no_cuda(err, errlen);
}

int gpu_mlp_sync(gpu_mlp_t *g, char *err, size_t errlen) {
  return no_cuda(err, errlen);
}
