/* Forward and backward passes of the CNN. */
#include "cnn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERNEL 5

int cnn_init(cnn_t *c, int h, int w, int classes, int batch_cap, char *err,
             size_t errlen) {
  memset(c, 0, sizeof *c);
  c->conv1 = conv_shape_of(h, w, 1, KERNEL, CNN_CONV1);
  c->pool1_h = c->conv1.oh / 2;
  c->pool1_w = c->conv1.ow / 2;
  c->conv2 = conv_shape_of(c->pool1_h, c->pool1_w, CNN_CONV1, KERNEL, CNN_CONV2);
  c->pool2_h = c->conv2.oh / 2;
  c->pool2_w = c->conv2.ow / 2;
  if (h > 4096 || w > 4096 || c->pool2_h < 1 || c->pool2_w < 1 ||
      classes < 1) {
    snprintf(err, errlen, "the CNN takes images of 16x16 to 4096x4096 "
             "pixels and at least one class, not %dx%d with %d classes",
             h, w, classes);
    return -1;
  }
  c->flat = c->pool2_h * c->pool2_w * CNN_CONV2;
  c->classes = classes;
  size_t sizes[CNN_LAYERS] = {
      (size_t)CNN_CONV1 * (conv_fan_in(&c->conv1) + 1),
      (size_t)CNN_CONV2 * (conv_fan_in(&c->conv2) + 1),
      (size_t)CNN_HIDDEN * (c->flat + 1),
      (size_t)classes * (CNN_HIDDEN + 1)};
  for (int l = 0; l < CNN_LAYERS; l++)
    c->offset[l + 1] = c->offset[l] + sizes[l];
  c->nparams = c->offset[CNN_LAYERS];
  c->batch_cap = batch_cap;

  size_t b = (size_t)batch_cap;
  size_t col1 = b * c->conv1.oh * c->conv1.ow * conv_fan_in(&c->conv1);
  size_t col2 = b * c->conv2.oh * c->conv2.ow * conv_fan_in(&c->conv2);
  size_t n_c1 = b * c->conv1.oh * c->conv1.ow * CNN_CONV1;
  size_t n_a1 = b * c->pool1_h * c->pool1_w * CNN_CONV1;
  size_t n_c2 = b * c->conv2.oh * c->conv2.ow * CNN_CONV2;
  size_t n_a2 = b * c->flat;
  struct {
    void **at;
    size_t bytes;
  } bufs[] = {
      {(void **)&c->params, c->nparams * sizeof(float)},
      {(void **)&c->input, b * h * w * sizeof(float)},
      {(void **)&c->col1, col1 * sizeof(float)},
      {(void **)&c->col, col2 * sizeof(float)},
      {(void **)&c->c1, n_c1 * sizeof(float)},
      {(void **)&c->d1, n_c1 * sizeof(float)},
      {(void **)&c->a1, n_a1 * sizeof(float)},
      {(void **)&c->dpool1, n_a1 * sizeof(float)},
      {(void **)&c->arg1, n_a1 * sizeof(int32_t)},
      {(void **)&c->c2, n_c2 * sizeof(float)},
      {(void **)&c->d2, n_c2 * sizeof(float)},
      {(void **)&c->a2, n_a2 * sizeof(float)},
      {(void **)&c->d3, n_a2 * sizeof(float)},
      {(void **)&c->arg2, n_a2 * sizeof(int32_t)},
      {(void **)&c->mask2, b * CNN_CONV2 * sizeof(float)},
      {(void **)&c->h3, b * CNN_HIDDEN * sizeof(float)},
      {(void **)&c->dr3, b * CNN_HIDDEN * sizeof(float)},
      {(void **)&c->mask3, b * CNN_HIDDEN * sizeof(float)},
      {(void **)&c->logits, b * classes * sizeof(float)},
      {(void **)&c->dlogits, b * classes * sizeof(float)},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
    *bufs[i].at = calloc(1, bufs[i].bytes);
    if (*bufs[i].at == NULL) {
      snprintf(err, errlen, "out of memory for the CNN's buffers (batch %d)",
               batch_cap);
      cnn_free(c);
      return -1;
    }
  }
  return 0;
}

void cnn_free(cnn_t *c) {
  void *bufs[] = {c->params, c->input,  c->col1,   c->col,  c->c1,
                  c->d1,     c->a1,     c->dpool1, c->arg1, c->c2,
                  c->d2,     c->a2,     c->d3,     c->arg2, c->mask2,
                  c->h3,     c->dr3,    c->mask3,  c->logits, c->dlogits};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    free(bufs[i]);
  memset(c, 0, sizeof *c);
}

void cnn_init_params(cnn_t *c, rng_t *rng) {
  int fan_in[CNN_LAYERS] = {conv_fan_in(&c->conv1), conv_fan_in(&c->conv2),
                            c->flat, CNN_HIDDEN};
  for (int l = 0; l < CNN_LAYERS; l++) {
    float bound = 1.0f / sqrtf((float)fan_in[l]);
    for (size_t i = c->offset[l]; i < c->offset[l + 1]; i++)
      c->params[i] = (float)((2.0 * rng_uniform(rng) - 1.0) * bound);
  }
}

static const float *layer(const cnn_t *c, int l) {
  return c->params + c->offset[l];
}

/* Pool, then ReLU: the order of the PyTorch example (max commutes with
 * ReLU, so only the cost differs). */
static void pool_relu(int h, int w, int ch, const float *x, int batch,
                      float *y, int32_t *arg) {
  maxpool2_forward(h, w, ch, x, batch, y, arg);
  relu_forward(y, (size_t)batch * (h / 2) * (w / 2) * ch);
}

void cnn_forward(cnn_t *c, int batch, const uint64_t *dropout_keys) {
  const conv_shape_t *s1 = &c->conv1, *s2 = &c->conv2;
  conv_im2col(s1, c->input, batch, c->col1);
  conv_forward(s1, c->col1, batch, layer(c, 0), c->c1);
  pool_relu(s1->oh, s1->ow, CNN_CONV1, c->c1, batch, c->a1, c->arg1);

  conv_im2col(s2, c->a1, batch, c->col);
  conv_forward(s2, c->col, batch, layer(c, 1), c->c2);
  c->dropped = dropout_keys != NULL;
  if (c->dropped) {
    dropout_masks(dropout_keys, batch, 2, CNN_CONV2, CNN_DROPOUT, c->mask2);
    dropout_apply(c->mask2, batch, s2->oh * s2->ow, CNN_CONV2, c->c2);
  }
  pool_relu(s2->oh, s2->ow, CNN_CONV2, c->c2, batch, c->a2, c->arg2);

  linear_forward(c->a2, batch, c->flat, CNN_HIDDEN, layer(c, 2), c->h3);
  relu_forward(c->h3, (size_t)batch * CNN_HIDDEN);
  if (c->dropped) {
    dropout_masks(dropout_keys, batch, 3, CNN_HIDDEN, CNN_DROPOUT, c->mask3);
    dropout_apply(c->mask3, batch, 1, CNN_HIDDEN, c->h3);
  }
  linear_forward(c->h3, batch, CNN_HIDDEN, c->classes, layer(c, 3),
                 c->logits);
}

static void finished(layer_done_fn done, void *ctx, int l) {
  if (done != NULL)
    done(ctx, l);
}

void cnn_backward(cnn_t *c, int batch, float *grads,
                  layer_done_fn done, void *ctx) {
  const conv_shape_t *s1 = &c->conv1, *s2 = &c->conv2;
  /* fc2, then back through Dropout and ReLU into fc1. */
  linear_grads(c->h3, c->dlogits, batch, CNN_HIDDEN, c->classes,
               grads + c->offset[3]);
  finished(done, ctx, 3);
  linear_input_grad(c->dlogits, batch, CNN_HIDDEN, c->classes, layer(c, 3),
                    c->dr3);
  if (c->dropped)
    dropout_apply(c->mask3, batch, 1, CNN_HIDDEN, c->dr3);
  /* h3 is 0 where the ReLU or the mask zeroed it; the mask has already
   * zeroed the gradient of dropped units, so h3 serves as the ReLU's
   * output here. */
  relu_backward(c->h3, c->dr3, (size_t)batch * CNN_HIDDEN);

  /* fc1, then back through ReLU, pool and Dropout2d into conv2. */
  linear_grads(c->a2, c->dr3, batch, c->flat, CNN_HIDDEN,
               grads + c->offset[2]);
  finished(done, ctx, 2);
  linear_input_grad(c->dr3, batch, c->flat, CNN_HIDDEN, layer(c, 2), c->d3);
  relu_backward(c->a2, c->d3, (size_t)batch * c->flat);
  maxpool2_backward(s2->oh, s2->ow, CNN_CONV2, c->d3, c->arg2, batch, c->d2);
  if (c->dropped)
    dropout_apply(c->mask2, batch, s2->oh * s2->ow, CNN_CONV2, c->d2);

  /* conv2: its patches are still in col, the last the forward pass made;
   * once its weight gradients are in, col is scratch for its input's. */
  conv_grads(s2, c->col, c->d2, batch, grads + c->offset[1]);
  finished(done, ctx, 1);
  conv_input_grad(s2, c->d2, batch, layer(c, 1), c->col, c->dpool1);
  relu_backward(c->a1, c->dpool1,
                (size_t)batch * c->pool1_h * c->pool1_w * CNN_CONV1);
  maxpool2_backward(s1->oh, s1->ow, CNN_CONV1, c->dpool1, c->arg1, batch,
                    c->d1);

  /* conv1's patches are kept from forward: making them again took 6% of a
   * CNN training step (perf, one rank). */
  conv_grads(s1, c->col1, c->d1, batch, grads + c->offset[0]);
  finished(done, ctx, 0);
}
