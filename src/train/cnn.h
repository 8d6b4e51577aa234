/*
 * The small CNN of PyTorch's classic MNIST example, on one-channel images:
 *
 *   conv 5x5, 10 channels -> max-pool 2 -> ReLU
 *   conv 5x5, 20 channels -> Dropout2d -> max-pool 2 -> ReLU
 *   fully connected to 50 -> ReLU -> Dropout -> fully connected to classes
 *
 * (on 28x28 images the flattened features are 20 x 4 x 4 = 320, hence
 * "320-50-10").  Forward and backward are written by hand over layers.h,
 * with images channels last.  Parameters live in one flat array, layer by
 * layer in that order (weights then bias), like the MLP's.
 */
#ifndef HOOP_TRAIN_CNN_H
#define HOOP_TRAIN_CNN_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "layers.h"

#define CNN_LAYERS 4 /* conv1, conv2, fc1, fc2 */
#define CNN_CONV1 10
#define CNN_CONV2 20
#define CNN_HIDDEN 50
#define CNN_DROPOUT 0.5f

typedef struct cnn {
  conv_shape_t conv1, conv2;
  int pool1_h, pool1_w; /* conv1's output pooled: conv2's input */
  int pool2_h, pool2_w;
  int flat;             /* features into fc1: pool2_h * pool2_w * CNN_CONV2 */
  int classes;
  size_t nparams;
  size_t offset[CNN_LAYERS + 1];
  float *params;
  int batch_cap;
  float *input;        /* batch x h x w */
  float *col1;         /* conv1's im2col patches, kept for backward */
  float *col;          /* conv2's patches; then scratch for its input's */
  float *c1, *a1;      /* conv1's output; pooled and ReLU'd */
  int32_t *arg1;       /* argmax of each pooled value */
  float *c2, *a2;      /* conv2's output (after Dropout2d); pooled, ReLU'd */
  int32_t *arg2;
  float *h3;           /* fc1 after ReLU and Dropout */
  float *mask2, *mask3; /* dropout scales: batch x channels, batch x 50 */
  float *logits, *dlogits;
  float *d1, *d2, *d3; /* backward scratch, the sizes of c1, c2 and a2 */
  float *dpool1, *dr3; /* the sizes of a1 and h3 */
  int dropped;          /* the last forward pass applied the masks */
} cnn_t;

/*
 * Images of h x w pixels (at least 16 x 16, so that something is left
 * after both convolutions and pools).  Returns 0, or -1 with err set.
 */
int cnn_init(cnn_t *c, int h, int w, int classes, int batch_cap, char *err,
             size_t errlen);
void cnn_free(cnn_t *c);

/* PyTorch's defaults for Conv2d and Linear: U(+-1/sqrt(fan_in)). */
void cnn_init_params(cnn_t *c, rng_t *rng);

/*
 * Logits of the input batch in c->logits.  With dropout keys (one per
 * sample, see layers.h) it trains: both dropout layers drop; with NULL
 * it evaluates and drops nothing.
 */
void cnn_forward(cnn_t *c, int batch, const uint64_t *dropout_keys);

/*
 * Adds the gradient behind c->dlogits (scale * d(loss)/d(logits), set by
 * the loss) to grads, last layer first, calling done after each layer.
 * Must follow a forward pass of the same batch.
 */
void cnn_backward(cnn_t *c, int batch, float *grads,
                  layer_done_fn done, void *ctx);

#endif
