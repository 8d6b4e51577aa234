/*
 * The network a trainer trains, whichever it is: the MLP (mlp.h) or the
 * CNN of PyTorch's MNIST example (cnn.h).  Both keep their parameters in
 * one flat array cut into layers, take a batch of images as rows and end
 * in logits; this is that common view, so that the trainer, data
 * parallelism and checkpoints need not know which network they carry.
 */
#ifndef HOOP_TRAIN_MODEL_H
#define HOOP_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "cnn.h"
#include "dataset.h"
#include "layers.h"
#include "mlp.h"

typedef enum { MODEL_MLP, MODEL_CNN } model_kind_t;

#define MODEL_MAX_LAYERS MLP_MAX_LAYERS

typedef struct model_spec {
  model_kind_t kind;
  int height, width;             /* input images */
  int classes;
  int nhidden;                   /* MLP: hidden layers */
  int hidden[MLP_MAX_LAYERS - 1]; /* MLP: their widths */
} model_spec_t;

typedef struct model {
  model_spec_t spec;
  size_t nparams;
  float *params;
  int nlayers; /* layer l's parameters: [offset[l], offset[l + 1]) */
  size_t offset[MODEL_MAX_LAYERS + 1];
  int batch_cap, features, classes;
  float *input;   /* batch_cap x features, filled by model_gather */
  float *logits;  /* batch_cap x classes, by model_forward */
  float *dlogits; /* their gradient, by model_loss */
  union {
    mlp_t mlp;
    cnn_t cnn;
  } net;
} model_t;

/* "mlp" or "cnn"; -1 for anything else. */
int model_kind_parse(const char *name);
const char *model_kind_name(model_kind_t kind);

/* Returns 0, or -1 with err set. */
int model_init(model_t *m, const model_spec_t *spec, int batch_cap,
               char *err, size_t errlen);
void model_free(model_t *m);

/* "mlp 784-200-200-10", "cnn 28x28 conv10-conv20-50-10": the shape, for
 * messages and to tell checkpoints apart; fits MODEL_DESCRIBE_MAX bytes. */
#define MODEL_DESCRIBE_MAX 96
void model_describe(const model_spec_t *spec, char *buf, size_t len);

void model_init_params(model_t *m, rng_t *rng);

/* Copies the rows `idx` of d into the input batch. */
void model_gather(model_t *m, const dataset_t *d, const size_t *idx,
                  int batch);

/*
 * Logits of the input batch.  dropout_keys (one per sample, from
 * dropout_key) train: the CNN's dropout layers drop; NULL evaluates.
 * The MLP has no dropout and ignores them.
 */
void model_forward(model_t *m, int batch, const uint64_t *dropout_keys);

/* How many rows of the logits predict labels. */
int model_correct(const model_t *m, int batch, const uint8_t *labels);

/* Cross-entropy summed over the batch; keeps scale * its gradient for
 * model_backward. */
double model_loss(model_t *m, int batch, const uint8_t *labels, float scale);

/* Adds the gradient behind the last model_loss to grads, last layer first,
 * calling done after each layer. */
void model_backward(model_t *m, int batch, float *grads, layer_done_fn done,
                    void *ctx);

#endif
