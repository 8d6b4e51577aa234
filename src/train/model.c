/* One view of either network; see model.h. */
#include "model.h"

#include <stdio.h>
#include <string.h>

int model_kind_parse(const char *name) {
  if (strcmp(name, "mlp") == 0)
    return MODEL_MLP;
  if (strcmp(name, "cnn") == 0)
    return MODEL_CNN;
  return -1;
}

const char *model_kind_name(model_kind_t kind) {
  return kind == MODEL_CNN ? "cnn" : "mlp";
}

static int mlp_sizes(const model_spec_t *spec, int *sizes) {
  sizes[0] = spec->height * spec->width;
  for (int l = 0; l < spec->nhidden; l++)
    sizes[l + 1] = spec->hidden[l];
  sizes[spec->nhidden + 1] = spec->classes;
  return spec->nhidden + 1;
}

int model_init(model_t *m, const model_spec_t *spec, int batch_cap,
               char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  if (spec->height < 1 || spec->width < 1 ||
      spec->nhidden < 0 || spec->nhidden > MLP_MAX_LAYERS - 1) {
    snprintf(err, errlen, "a model of %dx%d inputs with %d hidden layers "
             "(at most %d)", spec->height, spec->width, spec->nhidden,
             MLP_MAX_LAYERS - 1);
    return -1;
  }
  m->spec = *spec;
  m->batch_cap = batch_cap;
  m->features = spec->height * spec->width;
  m->classes = spec->classes;
  if (spec->kind == MODEL_CNN) {
    cnn_t *c = &m->net.cnn;
    if (cnn_init(c, spec->height, spec->width, spec->classes, batch_cap, err,
                 errlen) != 0)
      return -1;
    m->nparams = c->nparams;
    m->params = c->params;
    m->nlayers = CNN_LAYERS;
    memcpy(m->offset, c->offset, sizeof c->offset);
    m->input = c->input;
    m->logits = c->logits;
    m->dlogits = c->dlogits;
    return 0;
  }
  mlp_t *p = &m->net.mlp;
  int sizes[MLP_MAX_LAYERS + 1];
  int nlayers = mlp_sizes(spec, sizes);
  if (mlp_init(p, nlayers, sizes, batch_cap, err, errlen) != 0)
    return -1;
  m->nparams = p->nparams;
  m->params = p->params;
  m->nlayers = nlayers;
  memcpy(m->offset, p->offset, sizeof p->offset);
  m->input = p->act[0];
  m->logits = p->act[nlayers];
  m->dlogits = p->delta[0];
  return 0;
}

void model_free(model_t *m) {
  if (m->params != NULL) {
    if (m->spec.kind == MODEL_CNN)
      cnn_free(&m->net.cnn);
    else
      mlp_free(&m->net.mlp);
  }
  memset(m, 0, sizeof *m);
}

void model_describe(const model_spec_t *spec, char *buf, size_t len) {
  if (spec->kind == MODEL_CNN) {
    snprintf(buf, len, "cnn %dx%d conv%d-conv%d-%d-%d", spec->height,
             spec->width, CNN_CONV1, CNN_CONV2, CNN_HIDDEN, spec->classes);
    return;
  }
  int sizes[MLP_MAX_LAYERS + 1];
  int nlayers = mlp_sizes(spec, sizes);
  size_t used = (size_t)snprintf(buf, len, "mlp");
  for (int l = 0; l <= nlayers && used < len; l++)
    used += (size_t)snprintf(buf + used, len - used, "%c%d", l ? '-' : ' ',
                             sizes[l]);
}

void model_init_params(model_t *m, rng_t *rng) {
  if (m->spec.kind == MODEL_CNN)
    cnn_init_params(&m->net.cnn, rng);
  else
    mlp_init_params(&m->net.mlp, rng);
}

void model_gather(model_t *m, const dataset_t *d, const size_t *idx,
                  int batch) {
  for (int b = 0; b < batch; b++)
    memcpy(m->input + (size_t)b * m->features, d->x + idx[b] * d->features,
           (size_t)m->features * sizeof(float));
}

void model_forward(model_t *m, int batch, const uint64_t *dropout_keys) {
  if (m->spec.kind == MODEL_CNN)
    cnn_forward(&m->net.cnn, batch, dropout_keys);
  else
    mlp_forward(&m->net.mlp, batch);
}

int model_correct(const model_t *m, int batch, const uint8_t *labels) {
  return logits_correct(m->logits, batch, m->classes, labels);
}

double model_loss(model_t *m, int batch, const uint8_t *labels,
                  float scale) {
  return softmax_xent(m->logits, batch, m->classes, labels, scale,
                      m->dlogits);
}

void model_backward(model_t *m, int batch, float *grads, layer_done_fn done,
                    void *ctx) {
  if (m->spec.kind == MODEL_CNN)
    cnn_backward(&m->net.cnn, batch, grads, done, ctx);
  else
    mlp_backward(&m->net.mlp, batch, grads, done, ctx);
}
