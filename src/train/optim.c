/* SGD with momentum and Adam, element by element as PyTorch defines them. */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int optim_nstate(optim_kind_t kind) { return kind == OPTIM_ADAM ? 2 : 1; }

int optim_init(optim_t *o, optim_kind_t kind, size_t n, float lr,
               float momentum, float weight_decay) {
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->lr = lr;
  o->momentum = momentum;
  o->weight_decay = weight_decay;
  o->beta1 = 0.9f;
  o->beta2 = 0.999f;
  o->eps = 1e-8f;
  o->n = n;
  for (int i = 0; i < optim_nstate(kind); i++) {
    o->state[i] = calloc(n > 0 ? n : 1, sizeof(float));
    if (o->state[i] == NULL) {
      optim_free(o);
      return -1;
    }
  }
  return 0;
}

void optim_free(optim_t *o) {
  free(o->state[0]);
  free(o->state[1]);
  o->state[0] = o->state[1] = NULL;
}

/* Hyper-parameters are copied to locals: read through `o` inside the
 * loops they might alias the arrays, which stops GCC vectorising. */
static void sgd_step(optim_t *o, float *p, const float *g) {
  float *buf = o->state[0];
  const float lr = o->lr, momentum = o->momentum, wd = o->weight_decay;
  const size_t n = o->n;
  /* PyTorch starts the momentum buffer at the first gradient itself, which
   * the zero-initialised buffer gives too: momentum * 0 + g. */
  if (momentum == 0.0f) {
    for (size_t i = 0; i < n; i++)
      p[i] -= lr * (g[i] + wd * p[i]);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    buf[i] = momentum * buf[i] + (g[i] + wd * p[i]);
    p[i] -= lr * buf[i];
  }
}

static void adam_step(optim_t *o, float *p, const float *g) {
  float *m = o->state[0], *v = o->state[1];
  double t = (double)o->steps;
  float c1 = (float)(1.0 - pow(o->beta1, t));
  float c2_sqrt = (float)sqrt(1.0 - pow(o->beta2, t));
  const float step = o->lr / c1, wd = o->weight_decay, eps = o->eps;
  const float b1 = o->beta1, b2 = o->beta2;
  const size_t n = o->n;
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + wd * p[i];
    m[i] = b1 * m[i] + (1.0f - b1) * d;
    v[i] = b2 * v[i] + (1.0f - b2) * d * d;
    p[i] -= step * m[i] / (sqrtf(v[i]) / c2_sqrt + eps);
  }
}

void optim_step(optim_t *o, float *params, const float *grads) {
  o->steps++;
  if (o->kind == OPTIM_ADAM)
    adam_step(o, params, grads);
  else
    sgd_step(o, params, grads);
}

int optim_parse(const char *name) {
  if (strcmp(name, "sgd") == 0)
    return OPTIM_SGD;
  if (strcmp(name, "adam") == 0)
    return OPTIM_ADAM;
  return -1;
}

const char *optim_name(optim_kind_t kind) {
  return kind == OPTIM_ADAM ? "adam" : "sgd";
}
