/*
 * The pieces both networks are built from, on row-major batches (one row
 * per sample, or per output position of a convolution): fully connected
 * layers over cblas_sgemm, ReLU, square convolution as im2col plus
 * sgemm, 2x2 max pooling, inverted dropout with masks drawn from a key,
 * and softmax cross-entropy.  A layer's parameters are its weights
 * [out][in] followed by its bias [out].
 */
#ifndef HOOP_TRAIN_LAYERS_H
#define HOOP_TRAIN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* Called during backward once layer l's gradients are final. */
typedef void (*layer_done_fn)(void *ctx, int layer);

/* y[rows][out] = x[rows][in] * W^T + b. */
void linear_forward(const float *x, int rows, int in, int out,
                    const float *wb, float *y);

/* Adds dL/dW and dL/db to gwb, given dy = dL/dy. */
void linear_grads(const float *x, const float *dy, int rows, int in,
                  int out, float *gwb);
/* dx = dL/dx = dy * W: apart from linear_grads, so that the layer's
 * gradients can be handed on (to the all-reduce) before it runs. */
void linear_input_grad(const float *dy, int rows, int in, int out,
                       const float *wb, float *dx);

void relu_forward(float *y, size_t n);
/* dx *= (y > 0), y being the ReLU's output. */
void relu_backward(const float *y, float *dx, size_t n);

/*
 * A square k x k convolution, stride 1, no padding, on images stored
 * [batch][h][w][c] (channels last), so that every output position is one
 * row of a matrix product.
 */
typedef struct conv_shape {
  int h, w, c;  /* input */
  int k, out;   /* kernel side, output channels */
  int oh, ow;   /* h - k + 1, w - k + 1 */
} conv_shape_t;

conv_shape_t conv_shape_of(int h, int w, int c, int k, int out);
/* Columns of the im2col matrix: weights per output channel. */
static inline int conv_fan_in(const conv_shape_t *s) {
  return s->k * s->k * s->c;
}

/* col[batch * oh * ow][k * k * c], the patch under every output position. */
void conv_im2col(const conv_shape_t *s, const float *x, int batch,
                 float *col);
/* y[batch * oh * ow][out] from the patches. */
void conv_forward(const conv_shape_t *s, const float *col, int batch,
                  const float *wb, float *y);
/* Adds dL/dW and dL/db to gwb, given dy[batch * oh * ow][out]. */
void conv_grads(const conv_shape_t *s, const float *col, const float *dy,
                int batch, float *gwb);
/* dx = dL/dx (batch x h x w x c), with dcol as scratch of im2col's size. */
void conv_input_grad(const conv_shape_t *s, const float *dy, int batch,
                     const float *wb, float *dcol, float *dx);

/*
 * 2x2 max pooling, stride 2, channels last; a trailing odd row or column
 * is dropped (PyTorch's floor mode).  arg gets, per output, the input
 * index of its maximum.
 */
void maxpool2_forward(int h, int w, int c, const float *x, int batch,
                      float *y, int32_t *arg);
/* dx (zeroed first, batch x h x w x c) gets dy at every argmax. */
void maxpool2_backward(int h, int w, int c, const float *dy,
                       const int32_t *arg, int batch, float *dx);

/*
 * The dropout key of one sample in one optimiser step: the same on every
 * rank and in any batch, so N ranks drop what one process with an N-times
 * batch drops.
 */
uint64_t dropout_key(uint64_t seed, int64_t step, size_t sample);

/*
 * Inverted dropout: keeps each unit with probability 1 - p and scales it
 * by 1 / (1 - p); scale[b][unit] gets 0 or 1 / (1 - p).  Sample b's mask
 * depends only on keys[b] and `site` (which dropout layer), never on the
 * batch it is in, so N ranks drop the same units of a sample as one
 * process would.
 */
void dropout_masks(const uint64_t *keys, int batch, uint32_t site,
                   int units, float p, float *scale);

/*
 * x[b][pos][unit] *= scale[b][unit]: one position per sample drops single
 * values (Dropout), many drop whole channels (Dropout2d, channels last).
 */
void dropout_apply(const float *scale, int batch, int positions, int units,
                   float *x);

/* Predicted class of each row of the logits; how many match labels. */
int logits_correct(const float *logits, int batch, int classes,
                   const uint8_t *labels);

/*
 * Softmax cross-entropy summed over the batch; dlogits gets scale times
 * its gradient.
 */
double softmax_xent(const float *logits, int batch, int classes,
                    const uint8_t *labels, float scale, float *dlogits);

#endif
