/*
 * A multi-layer perceptron: linear layers with ReLU between them, ending
 * in logits (the loss is model.h's), forward and backward written by hand
 * over layers.h.  Parameters live in one flat array, layer by layer (each
 * layer's weights [out][in] then its bias), so that gradients of whole
 * layers are contiguous ranges that data parallelism can reduce in
 * buckets.
 */
#ifndef HOOP_TRAIN_MLP_H
#define HOOP_TRAIN_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "layers.h"

#define MLP_MAX_LAYERS 8

typedef struct mlp {
  int nlayers;                   /* linear layers */
  int sizes[MLP_MAX_LAYERS + 1]; /* widths: input, hidden..., classes */
  size_t nparams;
  size_t offset[MLP_MAX_LAYERS + 1]; /* layer l's parameters start here */
  float *params;
  int batch_cap;
  /* act[0] is the input batch, act[l + 1] layer l's output after ReLU
   * (the logits for the last layer). */
  float *act[MLP_MAX_LAYERS + 1];
  float *delta[2]; /* backward ping-pong, batch_cap x widest layer */
} mlp_t;

/* sizes has nlayers + 1 widths.  Returns 0, or -1 with err set. */
int mlp_init(mlp_t *m, int nlayers, const int *sizes, int batch_cap,
             char *err, size_t errlen);
void mlp_free(mlp_t *m);

/* PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
void mlp_init_params(mlp_t *m, rng_t *rng);

/* Logits of the input batch, in m->act[m->nlayers]. */
void mlp_forward(mlp_t *m, int batch);

/*
 * Adds the gradient behind delta[0] (scale * d(loss)/d(logits), which the
 * loss leaves there) to grads (same layout as params), last layer first,
 * calling done after each layer.
 */
void mlp_backward(mlp_t *m, int batch, float *grads, layer_done_fn done,
                  void *ctx);

#endif
