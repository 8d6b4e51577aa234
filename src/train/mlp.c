/* Forward and backward passes of the MLP. */
#include "mlp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"

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

void mlp_forward(mlp_t *m, int batch) {
  for (int l = 0; l < m->nlayers; l++) {
    int in = m->sizes[l], out = m->sizes[l + 1];
    linear_forward(m->act[l], batch, in, out, m->params + m->offset[l],
                   m->act[l + 1]);
    if (l + 1 < m->nlayers)
      relu_forward(m->act[l + 1], (size_t)batch * out);
  }
}

void mlp_backward(mlp_t *m, int batch, float *grads, layer_done_fn done,
                  void *ctx) {
  int cur = 0;
  for (int l = m->nlayers - 1; l >= 0; l--) {
    int in = m->sizes[l], out = m->sizes[l + 1];
    linear_grads(m->act[l], m->delta[cur], batch, in, out,
                 grads + m->offset[l]);
    if (done != NULL)
      done(ctx, l);
    if (l > 0) {
      float *dx = m->delta[cur ^ 1];
      linear_input_grad(m->delta[cur], batch, in, out,
                        m->params + m->offset[l], dx);
      relu_backward(m->act[l], dx, (size_t)batch * in);
      cur ^= 1;
    }
  }
}
