/*
 * One data-parallel replica: the model, its gradients, the optimiser and
 * the bucketed gradient averaging, joined to the other ranks by a hoop
 * communicator, on the CPU or a CUDA device.  hoop-train drives epochs
 * with it; tests drive steps.
 */
#ifndef HOOP_TRAIN_TRAINER_H
#define HOOP_TRAIN_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "ddp.h"
#include "gpu.h"
#include "hoop.h"
#include "model.h"
#include "optim.h"

typedef struct trainer_config {
  model_spec_t model;
  int batch;            /* per rank */
  optim_kind_t optim;
  float lr, momentum, weight_decay;
  size_t bucket_bytes;
  uint64_t seed;
  int cuda; /* compute on a CUDA device (gpu.h) instead of OpenBLAS: the
               MLP only */
  /*
   * Every rank draws the initial parameters from the seed itself (the same
   * on all), with no broadcast: --elastic makes no collective before its
   * first step, which it can redo without a lost rank; a newcomer then
   * takes the members' state (trainer_share_state).
   */
  int local_init;
} trainer_config_t;

typedef struct trainer {
  hoop_comm_t comm;
  int rank, nranks;
  trainer_config_t cfg;
  model_t model;
  optim_t opt;
  float *grads;
  gpu_mlp_t *gpu; /* set with cfg.cuda: parameters and gradients live there */
  ddp_t *ddp;
  double wait_s; /* blocked on gradient averaging, summed over steps */
} trainer_t;

/*
 * Builds the replica; every rank starts from rank 0's initial parameters
 * (drawn from cfg.seed, then broadcast).  Collective: every rank calls it;
 * with cfg.local_init it makes no call.
 */
int trainer_init(trainer_t *t, hoop_comm_t comm, const trainer_config_t *cfg,
                 char *err, size_t errlen);
void trainer_free(trainer_t *t);

/*
 * Moves the replica (on the CPU) onto `comm`, the survivors' communicator
 * after ranks were lost (hoop_comm_shrink): new gradient averaging, the
 * gradients cleared.  The caller owns both communicators.
 */
int trainer_rejoin(trainer_t *t, hoop_comm_t comm, char *err, size_t errlen);

/*
 * Forward (training: with dropout, keyed by the samples and the optimiser
 * step) and backward on samples idx[0..batch) of d, adding to the
 * gradients scale * d(loss sum)/d(params).  With sync set the gradients
 * are averaged across ranks during backward, the optimiser steps and the
 * gradients are cleared; without it they accumulate (gradient
 * accumulation).  Adds the summed loss and the number classified right.
 * Returns 0, or -1 with err set (the communicator is then broken).
 */
int trainer_step(trainer_t *t, const dataset_t *d, const size_t *idx,
                 int batch, float scale, int sync, double *loss_sum,
                 long *correct, char *err, size_t errlen);

/*
 * Accuracy on d across ranks: each rank classifies every nranks-th sample
 * from its rank on; the counts are summed with an all-reduce.
 */
int trainer_evaluate(trainer_t *t, const dataset_t *d, long *correct,
                     long *total, char *err, size_t errlen);

/*
 * Collective: rank 0's parameters and optimiser state to every rank (after
 * rank 0 loaded a checkpoint).
 */
int trainer_share_state(trainer_t *t, char *err, size_t errlen);

/*
 * With cfg.cuda the parameters and optimiser state live on the GPU: copies
 * them to t->model and t->opt (before a checkpoint is written).  Also
 * waits for the queued GPU work.  Nothing to do on the CPU.
 */
int trainer_pull_state(trainer_t *t, char *err, size_t errlen);

/* Waits for the queued GPU work (end of an epoch's timing); 0 on the CPU. */
int trainer_sync(trainer_t *t, char *err, size_t errlen);

#endif
