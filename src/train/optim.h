/*
 * Optimisers over a flat parameter array, with PyTorch's update rules so
 * that hoop-train and its PyTorch peer follow the same trajectory: SGD with
 * momentum and (L2) weight decay, and Adam.
 */
#ifndef HOOP_TRAIN_OPTIM_H
#define HOOP_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum { OPTIM_SGD = 0, OPTIM_ADAM = 1 } optim_kind_t;

typedef struct optim {
  optim_kind_t kind;
  float lr, momentum, weight_decay;
  float beta1, beta2, eps;
  size_t n;
  int64_t steps;  /* updates done so far (Adam's bias correction) */
  float *state[2]; /* SGD: momentum buffer; Adam: first, second moment */
} optim_t;

/* Number of state arrays of n floats that `kind` keeps. */
int optim_nstate(optim_kind_t kind);

/*
 * momentum is SGD's (ignored by Adam, which uses beta1 = 0.9, beta2 =
 * 0.999, eps = 1e-8).  Returns 0, or -1 when out of memory.  State starts
 * at zero.
 */
int optim_init(optim_t *o, optim_kind_t kind, size_t n, float lr,
               float momentum, float weight_decay);
void optim_free(optim_t *o);
void optim_step(optim_t *o, float *params, const float *grads);

/* "sgd" or "adam" to a kind; -1 for anything else. */
int optim_parse(const char *name);
const char *optim_name(optim_kind_t kind);

#endif
