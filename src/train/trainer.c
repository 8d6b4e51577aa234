/* A data-parallel replica and its step. */
#include "trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int comm_error(trainer_t *t, const char *what, hoop_result_t res,
                      char *err, size_t errlen) {
  snprintf(err, errlen, "%s failed: %s: %s", what, hoop_result_name(res),
           hoop_comm_last_error(t->comm));
  return -1;
}

/*
 * Every rank moves to its GPU or none does: one rank without a device
 * would leave the others waiting in their first all-reduce.
 */
static int start_gpu(trainer_t *t, char *err, size_t errlen) {
  char mine[256] = "";
  if (t->model.spec.kind == MODEL_MLP)
    t->gpu = gpu_mlp_create(&t->model.net.mlp, &t->opt, t->rank, mine,
                            sizeof mine);
  else
    snprintf(mine, sizeof mine, "--device cuda trains the MLP only; train "
             "the CNN with --device cpu");
  int32_t ok = t->gpu != NULL;
  hoop_result_t res =
      hoop_allreduce(t->comm, &ok, &ok, 1, HOOP_I32, HOOP_MIN, NULL);
  if (res != HOOP_SUCCESS)
    return comm_error(t, "agreeing on --device cuda", res, err, errlen);
  if (ok)
    return 0;
  if (mine[0] != '\0')
    snprintf(err, errlen, "%s", mine);
  else
    snprintf(err, errlen, "--device cuda: another rank has no usable CUDA "
                          "device");
  return -1;
}

int trainer_init(trainer_t *t, hoop_comm_t comm, const trainer_config_t *cfg,
                 char *err, size_t errlen) {
  memset(t, 0, sizeof *t);
  t->comm = comm;
  t->cfg = *cfg;
  hoop_comm_rank(comm, &t->rank);
  hoop_comm_size(comm, &t->nranks);
  if (cfg->batch < 1) {
    snprintf(err, errlen, "the batch size must be at least 1, not %d",
             cfg->batch);
    return -1;
  }
  int eval_batch = cfg->batch > 1000 ? cfg->batch : 1000;
  if (model_init(&t->model, &cfg->model, eval_batch, err, errlen) != 0)
    return -1;
  t->grads = calloc(t->model.nparams, sizeof *t->grads);
  if (t->grads == NULL ||
      optim_init(&t->opt, cfg->optim, t->model.nparams, cfg->lr,
                 cfg->momentum, cfg->weight_decay) != 0) {
    snprintf(err, errlen, "out of memory for %zu parameters",
             t->model.nparams);
    trainer_free(t);
    return -1;
  }
  if (t->rank == 0 || cfg->local_init) {
    rng_t rng;
    rng_seed(&rng, cfg->seed);
    model_init_params(&t->model, &rng);
  }
  hoop_result_t res =
      cfg->local_init ? HOOP_SUCCESS
                      : hoop_broadcast(comm, t->model.params,
                                       t->model.params, t->model.nparams,
                                       HOOP_F32, 0, NULL);
  if (res != HOOP_SUCCESS) {
    comm_error(t, "broadcast of the initial parameters", res, err, errlen);
    trainer_free(t);
    return -1;
  }
  if (cfg->cuda && start_gpu(t, err, errlen) != 0) {
    trainer_free(t);
    return -1;
  }
  t->ddp = ddp_create(comm, t->gpu != NULL ? gpu_mlp_grads(t->gpu) : t->grads,
                      t->gpu != NULL ? gpu_mlp_stream(t->gpu) : NULL,
                      t->model.nlayers, t->model.offset, cfg->bucket_bytes,
                      err, errlen);
  if (t->ddp == NULL) {
    trainer_free(t);
    return -1;
  }
  return 0;
}

int trainer_rejoin(trainer_t *t, hoop_comm_t comm, char *err, size_t errlen) {
  ddp_destroy(t->ddp);
  t->ddp = NULL;
  t->comm = comm;
  hoop_comm_rank(comm, &t->rank);
  hoop_comm_size(comm, &t->nranks);
  /* What the failed step had summed so far is no one's gradient. */
  memset(t->grads, 0, t->model.nparams * sizeof *t->grads);
  t->ddp = ddp_create(comm, t->grads, NULL, t->model.nlayers, t->model.offset,
                      t->cfg.bucket_bytes, err, errlen);
  return t->ddp != NULL ? 0 : -1;
}

void trainer_free(trainer_t *t) {
  ddp_destroy(t->ddp);
  gpu_mlp_destroy(t->gpu);
  optim_free(&t->opt);
  free(t->grads);
  model_free(&t->model);
  memset(t, 0, sizeof *t);
}

/* Images of another size than the model's would be read out of bounds. */
static int check_shape(const trainer_t *t, const dataset_t *d, char *err,
                       size_t errlen) {
  if (d->features == (size_t)t->model.features)
    return 0;
  snprintf(err, errlen, "the data has %dx%d images, the model takes %dx%d",
           d->rows, d->cols, t->model.spec.height, t->model.spec.width);
  return -1;
}

/* Logits of the gathered batch in t->model.logits, on the host. */
static int forward(trainer_t *t, int batch, const uint64_t *dropout_keys,
                   char *err, size_t errlen) {
  if (t->gpu != NULL)
    return gpu_mlp_forward(t->gpu, &t->model.net.mlp, batch, err, errlen);
  model_forward(&t->model, batch, dropout_keys);
  return 0;
}

int trainer_step(trainer_t *t, const dataset_t *d, const size_t *idx,
                 int batch, float scale, int sync, double *loss_sum,
                 long *correct, char *err, size_t errlen) {
  if (batch < 1 || batch > t->model.batch_cap) {
    snprintf(err, errlen, "a step of %d samples; this trainer takes 1..%d",
             batch, t->model.batch_cap);
    return -1;
  }
  if (check_shape(t, d, err, errlen) != 0)
    return -1;
  uint8_t labels[batch];
  uint64_t keys[batch];
  for (int b = 0; b < batch; b++) {
    labels[b] = d->y[idx[b]];
    keys[b] = dropout_key(t->cfg.seed, t->opt.steps, idx[b]);
  }
  model_gather(&t->model, d, idx, batch);
  if (forward(t, batch, keys, err, errlen) != 0)
    return -1;
  *correct += model_correct(&t->model, batch, labels);
  *loss_sum += model_loss(&t->model, batch, labels, scale);
  if (sync)
    ddp_begin_sync(t->ddp);
  if (t->gpu != NULL) {
    if (gpu_mlp_backward(t->gpu, &t->model.net.mlp, batch, ddp_layer_done,
                         t->ddp, err, errlen) != 0)
      return -1;
  } else {
    model_backward(&t->model, batch, t->grads, ddp_layer_done, t->ddp);
  }
  if (!sync)
    return 0;
  if (ddp_wait(t->ddp, &t->wait_s, err, errlen) != 0)
    return -1;
  if (t->gpu != NULL)
    return gpu_mlp_step(t->gpu, &t->opt, err, errlen);
  optim_step(&t->opt, t->model.params, t->grads);
  memset(t->grads, 0, t->model.nparams * sizeof *t->grads);
  return 0;
}

int trainer_evaluate(trainer_t *t, const dataset_t *d, long *correct,
                     long *total, char *err, size_t errlen) {
  if (check_shape(t, d, err, errlen) != 0)
    return -1;
  int cap = t->model.batch_cap;
  size_t *idx = malloc((size_t)cap * sizeof *idx);
  uint8_t *labels = malloc((size_t)cap);
  if (idx == NULL || labels == NULL) {
    free(idx);
    free(labels);
    snprintf(err, errlen, "out of memory for evaluation");
    return -1;
  }
  double counts[2] = {0.0, 0.0};
  size_t next = (size_t)t->rank;
  while (next < d->n) {
    int batch = 0;
    for (; batch < cap && next < d->n; next += (size_t)t->nranks) {
      idx[batch] = next;
      labels[batch++] = d->y[next];
    }
    model_gather(&t->model, d, idx, batch);
    if (forward(t, batch, NULL, err, errlen) != 0) {
      free(idx);
      free(labels);
      return -1;
    }
    counts[0] += model_correct(&t->model, batch, labels);
    counts[1] += batch;
  }
  free(idx);
  free(labels);
  hoop_result_t res = hoop_allreduce(t->comm, counts, counts, 2,
                                     HOOP_F64, HOOP_SUM, NULL);
  if (res != HOOP_SUCCESS)
    return comm_error(t, "all-reduce of the test accuracy", res, err,
                      errlen);
  *correct = (long)counts[0];
  *total = (long)counts[1];
  return 0;
}

int trainer_share_state(trainer_t *t, char *err, size_t errlen) {
  hoop_result_t res = hoop_broadcast(t->comm, t->model.params,
                                     t->model.params, t->model.nparams,
                                     HOOP_F32, 0, NULL);
  for (int i = 0; i < optim_nstate(t->opt.kind) && res == HOOP_SUCCESS; i++)
    res = hoop_broadcast(t->comm, t->opt.state[i], t->opt.state[i],
                         t->opt.n, HOOP_F32, 0, NULL);
  int64_t steps = t->opt.steps;
  if (res == HOOP_SUCCESS)
    res = hoop_broadcast(t->comm, &steps, &steps, 1, HOOP_I64, 0, NULL);
  if (res != HOOP_SUCCESS)
    return comm_error(t, "broadcast of the checkpointed state", res, err,
                      errlen);
  t->opt.steps = steps;
  if (t->gpu != NULL)
    return gpu_mlp_push(t->gpu, &t->model.net.mlp, &t->opt, err, errlen);
  return 0;
}

int trainer_pull_state(trainer_t *t, char *err, size_t errlen) {
  if (t->gpu == NULL)
    return 0;
  return gpu_mlp_pull(t->gpu, &t->model.net.mlp, &t->opt, err, errlen);
}

int trainer_sync(trainer_t *t, char *err, size_t errlen) {
  return t->gpu != NULL ? gpu_mlp_sync(t->gpu, err, errlen) : 0;
}
