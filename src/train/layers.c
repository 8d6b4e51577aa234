/* The layers both networks are built from; see layers.h. */
#include "layers.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void linear_forward(const float *x, int rows, int in, int out,
                    const float *wb, float *y) {
  const float *bias = wb + (size_t)out * in;
  for (int r = 0; r < rows; r++)
    memcpy(y + (size_t)r * out, bias, (size_t)out * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f,
              x, in, wb, in, 1.0f, y, out);
}

void linear_grads(const float *x, const float *dy, int rows, int in,
                  int out, float *gwb) {
  float *gb = gwb + (size_t)out * in;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows, 1.0f,
              dy, out, x, in, 1.0f, gwb, in);
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < out; o++)
      gb[o] += dy[(size_t)r * out + o];
}

void linear_input_grad(const float *dy, int rows, int in, int out,
                       const float *wb, float *dx) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out, 1.0f,
              dy, out, wb, in, 0.0f, dx, in);
}

void relu_forward(float *y, size_t n) {
  for (size_t i = 0; i < n; i++)
    y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

void relu_backward(const float *y, float *dx, size_t n) {
  for (size_t i = 0; i < n; i++)
    dx[i] = y[i] > 0.0f ? dx[i] : 0.0f;
}

conv_shape_t conv_shape_of(int h, int w, int c, int k, int out) {
  return (conv_shape_t){.h = h, .w = w, .c = c, .k = k, .out = out,
                        .oh = h - k + 1, .ow = w - k + 1};
}

/* Patch rows are (ky, kx, channel), so a kernel row is k * c contiguous
 * input values. */
void conv_im2col(const conv_shape_t *s, const float *x, int batch,
                 float *col) {
  size_t span = (size_t)s->k * s->c, fan_in = (size_t)conv_fan_in(s);
  for (int b = 0; b < batch; b++) {
    const float *img = x + (size_t)b * s->h * s->w * s->c;
    for (int oy = 0; oy < s->oh; oy++)
      for (int ox = 0; ox < s->ow; ox++) {
        float *row = col + (((size_t)b * s->oh + oy) * s->ow + ox) * fan_in;
        /* A loop, not memcpy: conv1's rows are 5 floats, which a call
         * costs more than copying. */
        for (int ky = 0; ky < s->k; ky++) {
          const float *src = img + ((size_t)(oy + ky) * s->w + ox) * s->c;
          float *dst = row + ky * span;
          for (size_t j = 0; j < span; j++)
            dst[j] = src[j];
        }
      }
  }
}

void conv_forward(const conv_shape_t *s, const float *col, int batch,
                  const float *wb, float *y) {
  linear_forward(col, batch * s->oh * s->ow, conv_fan_in(s), s->out, wb, y);
}

void conv_grads(const conv_shape_t *s, const float *col, const float *dy,
                int batch, float *gwb) {
  linear_grads(col, dy, batch * s->oh * s->ow, conv_fan_in(s), s->out, gwb);
}

void conv_input_grad(const conv_shape_t *s, const float *dy, int batch,
                     const float *wb, float *dcol, float *dx) {
  size_t span = (size_t)s->k * s->c, fan_in = (size_t)conv_fan_in(s);
  linear_input_grad(dy, batch * s->oh * s->ow, (int)fan_in, s->out, wb,
                    dcol);
  memset(dx, 0, (size_t)batch * s->h * s->w * s->c * sizeof(float));
  for (int b = 0; b < batch; b++) {
    float *img = dx + (size_t)b * s->h * s->w * s->c;
    for (int oy = 0; oy < s->oh; oy++)
      for (int ox = 0; ox < s->ow; ox++) {
        const float *row =
            dcol + (((size_t)b * s->oh + oy) * s->ow + ox) * fan_in;
        for (int ky = 0; ky < s->k; ky++) {
          float *to = img + ((size_t)(oy + ky) * s->w + ox) * s->c;
          const float *from = row + ky * span;
          for (size_t i = 0; i < span; i++)
            to[i] += from[i];
        }
      }
  }
}

void maxpool2_forward(int h, int w, int c, const float *x, int batch,
                      float *y, int32_t *arg) {
  int ph = h / 2, pw = w / 2;
  for (int b = 0; b < batch; b++) {
    const float *img = x + (size_t)b * h * w * c;
    size_t base = (size_t)b * ph * pw * c;
    for (int py = 0; py < ph; py++)
      for (int px = 0; px < pw; px++)
        for (int ch = 0; ch < c; ch++) {
          int32_t best = ((2 * py) * w + 2 * px) * c + ch;
          for (int dy = 0; dy < 2; dy++)
            for (int dx = 0; dx < 2; dx++) {
              int32_t at = ((2 * py + dy) * w + 2 * px + dx) * c + ch;
              best = img[at] > img[best] ? at : best;
            }
          size_t o = base + ((size_t)py * pw + px) * c + ch;
          y[o] = img[best];
          arg[o] = best;
        }
  }
}

void maxpool2_backward(int h, int w, int c, const float *dy,
                       const int32_t *arg, int batch, float *dx) {
  size_t in = (size_t)h * w * c, out = (size_t)(h / 2) * (w / 2) * c;
  memset(dx, 0, (size_t)batch * in * sizeof(float));
  for (int b = 0; b < batch; b++)
    for (size_t o = 0; o < out; o++)
      dx[(size_t)b * in + (size_t)arg[b * out + o]] += dy[b * out + o];
}

/* splitmix64's finaliser: a counter-based generator, so any unit's draw
 * can be made without the others'. */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t dropout_key(uint64_t seed, int64_t step, size_t sample) {
  return mix(mix(seed) ^ (mix((uint64_t)step) + sample));
}

void dropout_masks(const uint64_t *keys, int batch, uint32_t site,
                   int units, float p, float *scale) {
  float keep = 1.0f / (1.0f - p);
  for (int b = 0; b < batch; b++) {
    uint64_t base = mix(keys[b] ^ ((uint64_t)site << 48));
    for (int u = 0; u < units; u++) {
      double draw = (double)(mix(base + (uint64_t)u) >> 11) * 0x1.0p-53;
      scale[(size_t)b * units + u] = draw < p ? 0.0f : keep;
    }
  }
}

void dropout_apply(const float *scale, int batch, int positions, int units,
                   float *x) {
  for (int b = 0; b < batch; b++)
    for (int pos = 0; pos < positions; pos++) {
      float *v = x + ((size_t)b * positions + pos) * units;
      for (int u = 0; u < units; u++)
        v[u] *= scale[(size_t)b * units + u];
    }
}

int logits_correct(const float *logits, int batch, int classes,
                   const uint8_t *labels) {
  int right = 0;
  for (int b = 0; b < batch; b++) {
    const float *row = logits + (size_t)b * classes;
    int best = 0;
    for (int c = 1; c < classes; c++)
      best = row[c] > row[best] ? c : best;
    right += best == labels[b];
  }
  return right;
}

double softmax_xent(const float *logits, int batch, int classes,
                    const uint8_t *labels, float scale, float *dlogits) {
  double total = 0.0;
  for (int b = 0; b < batch; b++) {
    const float *row = logits + (size_t)b * classes;
    float *drow = dlogits + (size_t)b * classes;
    float top = row[0];
    for (int c = 1; c < classes; c++)
      top = row[c] > top ? row[c] : top;
    double sum = 0.0;
    for (int c = 0; c < classes; c++) {
      drow[c] = expf(row[c] - top);
      sum += drow[c];
    }
    total += log(sum) + top - row[labels[b]];
    for (int c = 0; c < classes; c++)
      drow[c] = (float)(drow[c] / sum) * scale;
    drow[labels[b]] -= scale;
  }
  return total;
}
