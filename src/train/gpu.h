/*
 * The MLP on a CUDA device, for hoop-train --device cuda: the parameter
 * layout, forward and backward of mlp.c, with cuBLAS for the products and
 * small kernels for bias, ReLU and the optimisers, all on one stream.  The
 * loss and the predictions stay on the host (model_loss, model_correct) and
 * read the logits, a batch x classes copy, so both devices share that
 * code.  Gradients live in device memory and are averaged by hoop on the
 * same stream.  Without CUDA (gpu_none.c) gpu_mlp_create says so.
 */
#ifndef HOOP_TRAIN_GPU_H
#define HOOP_TRAIN_GPU_H

#include <stddef.h>

#include "mlp.h"
#include "optim.h"

typedef struct gpu_mlp gpu_mlp_t;

/*
 * Device buffers shaped like m (its batch_cap rows) and o's state, holding
 * m's parameters and o's state, on CUDA device rank % (devices present):
 * ranks of one host spread over its GPUs, or share its one.  NULL with err
 * set when there is no device or no CUDA in this build.
 */
gpu_mlp_t *gpu_mlp_create(const mlp_t *m, const optim_t *o, int rank,
                          char *err, size_t errlen);
void gpu_mlp_destroy(gpu_mlp_t *g);

/* The stream every call below queues on (a cudaStream_t). */
void *gpu_mlp_stream(gpu_mlp_t *g);

/* The gradients, in m's parameter layout, in device memory. */
float *gpu_mlp_grads(gpu_mlp_t *g);

/* Copies the host's parameters and optimiser state to the device. */
int gpu_mlp_push(gpu_mlp_t *g, const mlp_t *m, const optim_t *o, char *err,
                 size_t errlen);

/* Copies the device's parameters and optimiser state to the host. */
int gpu_mlp_pull(gpu_mlp_t *g, mlp_t *m, optim_t *o, char *err,
                 size_t errlen);

/*
 * Forward of the first `batch` rows of m->act[0]; returns with the logits
 * in m->act[m->nlayers] on the host.
 */
int gpu_mlp_forward(gpu_mlp_t *g, mlp_t *m, int batch, char *err,
                    size_t errlen);

/*
 * Backward from the logits' gradient that model_loss left in m->delta[0]:
 * adds to the device gradients, calling done(ctx, l) once layer l's
 * gradient work is queued (later work on the stream sees it).
 */
int gpu_mlp_backward(gpu_mlp_t *g, const mlp_t *m, int batch,
                     layer_done_fn done, void *ctx, char *err,
                     size_t errlen);

/* One optimiser update with o's rules (o->steps counts it), then zeroes
 * the gradients; queued. */
int gpu_mlp_step(gpu_mlp_t *g, optim_t *o, char *err, size_t errlen);

/* Waits for everything queued. */
int gpu_mlp_sync(gpu_mlp_t *g, char *err, size_t errlen);

#endif
