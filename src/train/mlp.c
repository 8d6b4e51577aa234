/* Forward and backward passes of the MLP. */
#include "mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mlp_init(mlp_t *m, int nlayers, const int *sizes, int batch_cap,
             char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  if (nlayers < 1 || nlayers > MLP_MAX_LAYERS) {
    snprintf(err, errlen, "an MLP has 1 to %d layers, not %d",
             MLP_MAX_LAYERS, nlayers);
    return -1;
  }
  int widest = 0;
  for (int l = 0; l <= nlayers; l++) {
    if (sizes[l] < 1 || sizes[l] > (1 << 16)) {
      snprintf(err, errlen, "layer width %d is outside 1..65536", sizes[l]);
      return -1;
    }
    widest = sizes[l] > widest ? sizes[l] : widest;
  }
  m->nlayers = nlayers;
  memcpy(m->sizes, sizes, (size_t)(nlayers + 1) * sizeof *sizes);
  for (int l = 0; l < nlayers; l++)
    m->offset[l + 1] = m->offset[l] +
                       (size_t)sizes[l + 1] * ((size_t)sizes[l] + 1);
  m->nparams = m->offset[nlayers];
  m->batch_cap = batch_cap;
  m->params = calloc(m->nparams, sizeof *m->params);
  int ok = m->params != NULL;
  for (int l = 0; l <= nlayers; l++) {
    m->act[l] = malloc((size_t)batch_cap * (size_t)sizes[l] * sizeof(float));
    ok = ok && m->act[l] != NULL;
  }
  for (int i = 0; i < 2; i++) {
    m->delta[i] = malloc((size_t)batch_cap * (size_t)widest * sizeof(float));
    ok = ok && m->delta[i] != NULL;
  }
  if (!ok) {
    snprintf(err, errlen, "out of memory for an MLP of %zu parameters",
             m->nparams);
    mlp_free(m);
    return -1;
  }
  return 0;
}

void mlp_free(mlp_t *m) {
  free(m->params);
  for (int l = 0; l <= MLP_MAX_LAYERS; l++)
    free(m->act[l]);
  free(m->delta[0]);
  free(m->delta[1]);
  memset(m, 0, sizeof *m);
}

void mlp_init_params(mlp_t *m, rng_t *rng) {
  for (int l = 0; l < m->nlayers; l++) {
    float bound = 1.0f / sqrtf((float)m->sizes[l]);
    float *p = m->params + m->offset[l];
    size_t n = m->offset[l + 1] - m->offset[l];
    for (size_t i = 0; i < n; i++)
      p[i] = (float)((2.0 * rng_uniform(rng) - 1.0) * bound);
  }
}

void mlp_gather(mlp_t *m, const dataset_t *d, const size_t *idx, int batch) {
  for (int b = 0; b < batch; b++)
    memcpy(m->act[0] + (size_t)b * d->features, d->x + idx[b] * d->features,
           d->features * sizeof(float));
}

void mlp_forward(mlp_t *m, int batch) {
  for (int l = 0; l < m->nlayers; l++) {
    int in = m->sizes[l], out = m->sizes[l + 1];
    const float *w = m->params + m->offset[l];
    const float *bias = w + (size_t)out * in;
    float *y = m->act[l + 1];
    for (int b = 0; b < batch; b++)
      memcpy(y + (size_t)b * out, bias, (size_t)out * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in,
                1.0f, m->act[l], in, w, in, 1.0f, y, out);
    if (l + 1 < m->nlayers)
      for (size_t i = 0; i < (size_t)batch * out; i++)
        y[i] = y[i] > 0.0f ? y[i] : 0.0f;
  }
}

int mlp_correct(const mlp_t *m, int batch, const uint8_t *labels) {
  int classes = m->sizes[m->nlayers], right = 0;
  const float *z = m->act[m->nlayers];
  for (int b = 0; b < batch; b++) {
    const float *row = z + (size_t)b * classes;
    int best = 0;
    for (int c = 1; c < classes; c++)
      best = row[c] > row[best] ? c : best;
    right += best == labels[b];
  }
  return right;
}

double mlp_loss(mlp_t *m, int batch, const uint8_t *labels, float scale) {
  int classes = m->sizes[m->nlayers];
  const float *z = m->act[m->nlayers];
  float *dz = m->delta[0];
  double total = 0.0;
  for (int b = 0; b < batch; b++) {
    const float *row = z + (size_t)b * classes;
    float *drow = dz + (size_t)b * classes;
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

void mlp_backward(mlp_t *m, int batch, float *grads, mlp_layer_done_fn done,
                  void *ctx) {
  int cur = 0;
  for (int l = m->nlayers - 1; l >= 0; l--) {
    int in = m->sizes[l], out = m->sizes[l + 1];
    const float *dy = m->delta[cur];
    float *gw = grads + m->offset[l];
    float *gb = gw + (size_t)out * in;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch,
                1.0f, dy, out, m->act[l], in, 1.0f, gw, in);
    for (int b = 0; b < batch; b++)
      for (int o = 0; o < out; o++)
        gb[o] += dy[(size_t)b * out + o];
    if (done != NULL)
      done(ctx, l);
    if (l > 0) {
      /* dx = dy * W, masked by the ReLU that produced act[l]. */
      float *dx = m->delta[cur ^ 1];
      const float *w = m->params + m->offset[l];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out,
                  1.0f, dy, out, w, in, 0.0f, dx, in);
      const float *a = m->act[l];
      for (size_t i = 0; i < (size_t)batch * in; i++)
        dx[i] = a[i] > 0.0f ? dx[i] : 0.0f;
      cur ^= 1;
    }
  }
}
