/*
 * Gradient averaging as PyTorch's DistributedDataParallel does it: the
 * gradient array is cut into buckets of whole layers, last layer first
 * (the order backward finishes them), and each bucket is all-reduced on a
 * communication thread as soon as its last layer is done, so that
 * communication overlaps the rest of the backward pass.  A last bucket
 * that finds the thread idle has nothing left to overlap, and ddp_wait
 * reduces it on the calling thread.
 */
#ifndef HOOP_TRAIN_DDP_H
#define HOOP_TRAIN_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

typedef struct ddp ddp_t;

/*
 * grads holds nlayers layers, layer l at [offset[l], offset[l + 1]) floats.
 * A bucket closes once it holds at least bucket_bytes.  With one rank
 * nothing is reduced and no thread runs.  Device gradients (a stream, NULL
 * for host memory) are averaged on the stream: the all-reduces are queued
 * behind the backward work already there, and ddp_wait returns once they
 * are queued, so later work on the stream sees the averages.  Returns NULL
 * with err set.
 */
ddp_t *ddp_create(hoop_comm_t comm, float *grads, hoop_stream_t stream,
                  int nlayers, const size_t *offset, size_t bucket_bytes,
                  char *err, size_t errlen);
/* Joins the communication thread; call only after ddp_wait. */
void ddp_destroy(ddp_t *d);

int ddp_nbuckets(const ddp_t *d);
/* Bytes of bucket i, in the order they are reduced. */
size_t ddp_bucket_bytes(const ddp_t *d, int i);

/* Starts a step whose gradients are averaged (the last micro-step). */
void ddp_begin_sync(ddp_t *d);
/* layer_done_fn: layer l's gradients are final for this step. */
void ddp_layer_done(void *ddp, int layer);

/*
 * Blocks until every bucket of the step is averaged.  Adds the time spent
 * blocked to *wait_s.  Returns 0, or -1 with the communication error in err.
 */
int ddp_wait(ddp_t *d, double *wait_s, char *err, size_t errlen);

/* Seconds the communication thread spent inside hoop_allreduce so far
 * (with device gradients, queueing them). */
double ddp_comm_seconds(ddp_t *d);

/* hoop's all-reduce counters on `comm`, summed over the algorithms. */
typedef struct ddp_counts {
  uint64_t sent, calls;
  double seconds;      /* inside the calls; device buffers: to GPU completion */
  double late_s;       /* of which waiting for the other ranks to join */
  hoop_algo_t busiest; /* the algorithm most calls used */
} ddp_counts_t;

/*
 * The counters now; busiest is `fallback` before the first all-reduce.
 * Reading them waits for queued device calls.
 */
ddp_counts_t ddp_allreduce_counts(hoop_comm_t comm, hoop_algo_t fallback);

/* Medians over the steps averaged since the last ddp_step_medians(). */
typedef struct ddp_step_times {
  size_t steps;    /* how many (the first 65536 are kept) */
  double comm_s;   /* a step's seconds in hoop_allreduce, this rank */
  double moving_s; /* the same less hoop's wait for other ranks to join */
  /*
   * Each step's least moving_s over the ranks, which is the last rank to
   * join's: its time from when all have joined to its result, as
   * hoop-bench times a call (host gradients only; 0 on the device).
   */
  double last_in_s;
} ddp_step_times_t;

/*
 * Fills *m, all zeros with one rank.  A collective on the ddp's
 * communicator with host gradients: every rank calls it after the same
 * ddp_wait.  Returns 0, or -1 with the error in err.
 */
int ddp_step_medians(ddp_t *d, ddp_step_times_t *m, char *err,
                     size_t errlen);

#endif
