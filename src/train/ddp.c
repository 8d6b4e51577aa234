/*
 * Bucketed, overlapped gradient averaging.  The main thread only flips
 * ready counts and queues buckets; one communication thread owns the
 * communicator during a step and runs the all-reduces in queue order,
 * which is the same on every rank because backward runs the layers in the
 * same order everywhere.
 *
 * The exception is the last bucket when the thread has nothing left to
 * do: backward is over, so there is nothing for it to overlap, and the
 * main thread reduces it itself in ddp_wait.  That saves waking the
 * thread and, where it runs on another core, fetching the gradients from
 * this core's cache (bench/results/2026-11-23-train-comm-inline-ab.md).
 */
#include "ddp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct bucket {
  size_t begin, count; /* floats of the gradient array */
  int first_layer, nlayers, ready;
};

struct ddp {
  hoop_comm_t comm;
  float *grads;
  hoop_stream_t stream;
  int nbuckets;
  struct bucket *buckets;
  int *bucket_of_layer;
  int syncing;

  pthread_t thread;
  int have_thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  int *queue; /* bucket indices, queued in backward order */
  int queued, taken, finished;
  int held; /* the last bucket, kept for ddp_wait; -1: none */
  int stop;
  double comm_s;
  /*
   * This step's time in all-reduce calls and the part of it spent waiting
   * for other ranks to join, then per finished step since the last
   * ddp_step_medians(): what a step's communication costs without the
   * ranks' compute jitter, comparable with hoop-bench's median call.
   */
  double step_comm_s, step_late_s;
  double *moving_of_step, *comm_of_step;
  size_t nsteps, steps_cap;
  char error[512];
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

ddp_counts_t ddp_allreduce_counts(hoop_comm_t comm, hoop_algo_t fallback) {
  ddp_counts_t n = {.busiest = fallback};
  hoop_stats_t s = HOOP_STATS_INIT;
  uint64_t most = 0, ns = 0, late_ns = 0;
  if (hoop_comm_get_stats(comm, &s) != HOOP_SUCCESS)
    return n;
  for (int a = 0; a < HOOP_ALGO_COUNT; a++) {
    const hoop_coll_stats_t *c = &s.by_coll[HOOP_COLL_ALLREDUCE][a];
    n.sent += c->bytes_sent;
    n.calls += c->calls;
    ns += c->time_ns;
    late_ns += c->wait_ns;
    if (c->calls > most) {
      most = c->calls;
      n.busiest = (hoop_algo_t)a;
    }
  }
  n.seconds = (double)ns * 1e-9;
  n.late_s = (double)late_ns * 1e-9;
  return n;
}

static double late_s(hoop_comm_t comm) {
  return ddp_allreduce_counts(comm, HOOP_ALGO_AUTO).late_s;
}

/*
 * All-reduces bucket b and adds its times to the step; with d->lock held,
 * which it drops during the call.  After a failure the communicator is
 * broken, so later buckets are only counted as finished, and the main
 * thread stops waiting.
 */
static void run_bucket(ddp_t *d, const struct bucket *b) {
  int failed = d->error[0] != '\0';
  pthread_mutex_unlock(&d->lock);

  /* Reading hoop's counters waits for queued device calls, so device
   * gradients (only queued here) count no wait. */
  int count_late = !failed && d->stream == NULL;
  double late0 = count_late ? late_s(d->comm) : 0.0;
  double t0 = now_s();
  hoop_result_t res = HOOP_SUCCESS;
  if (!failed)
    res = hoop_allreduce(d->comm, d->grads + b->begin, d->grads + b->begin,
                         b->count, HOOP_F32, HOOP_AVG, d->stream);
  double spent = now_s() - t0;
  double late = count_late ? late_s(d->comm) - late0 : 0.0;

  pthread_mutex_lock(&d->lock);
  d->comm_s += spent;
  d->step_comm_s += spent;
  d->step_late_s += late;
  if (res != HOOP_SUCCESS && d->error[0] == '\0')
    snprintf(d->error, sizeof d->error,
             "all-reduce of gradient bucket (layers %d-%d, %zu floats) "
             "failed: %s: %s", b->first_layer,
             b->first_layer + b->nlayers - 1, b->count,
             hoop_result_name(res), hoop_comm_last_error(d->comm));
}

static void *comm_main(void *arg) {
  ddp_t *d = arg;
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (!d->stop && d->taken == d->queued)
      pthread_cond_wait(&d->wake, &d->lock);
    if (d->stop)
      break;
    run_bucket(d, &d->buckets[d->queue[d->taken++]]);
    d->finished++;
    pthread_cond_broadcast(&d->wake);
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

ddp_t *ddp_create(hoop_comm_t comm, float *grads, hoop_stream_t stream,
                  int nlayers, const size_t *offset, size_t bucket_bytes,
                  char *err, size_t errlen) {
  int nranks;
  if (hoop_comm_size(comm, &nranks) != HOOP_SUCCESS) {
    snprintf(err, errlen, "ddp: %s", hoop_last_error());
    return NULL;
  }
  ddp_t *d = calloc(1, sizeof *d);
  if (d == NULL) {
    snprintf(err, errlen, "ddp: out of memory");
    return NULL;
  }
  pthread_mutex_init(&d->lock, NULL);
  pthread_cond_init(&d->wake, NULL);
  d->comm = comm;
  d->grads = grads;
  d->stream = stream;
  d->buckets = calloc((size_t)nlayers, sizeof *d->buckets);
  d->bucket_of_layer = calloc((size_t)nlayers, sizeof *d->bucket_of_layer);
  d->queue = calloc((size_t)nlayers, sizeof *d->queue);
  if (d->buckets == NULL || d->bucket_of_layer == NULL || d->queue == NULL) {
    snprintf(err, errlen, "ddp: out of memory");
    ddp_destroy(d);
    return NULL;
  }

  /* Walk the layers backwards; a bucket is the contiguous range from its
   * lowest layer to its highest. */
  struct bucket *b = NULL;
  for (int l = nlayers - 1; l >= 0; l--) {
    if (b == NULL || b->count * sizeof(float) >= bucket_bytes)
      b = &d->buckets[d->nbuckets++];
    b->begin = offset[l];
    b->count += offset[l + 1] - offset[l];
    b->first_layer = l;
    b->nlayers++;
    d->bucket_of_layer[l] = (int)(b - d->buckets);
  }

  if (nranks > 1) {
    if (pthread_create(&d->thread, NULL, comm_main, d) != 0) {
      snprintf(err, errlen, "ddp: cannot start the communication thread");
      ddp_destroy(d);
      return NULL;
    }
    d->have_thread = 1;
  }
  return d;
}

void ddp_destroy(ddp_t *d) {
  if (d == NULL)
    return;
  if (d->have_thread) {
    pthread_mutex_lock(&d->lock);
    d->stop = 1;
    pthread_cond_broadcast(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
  }
  pthread_cond_destroy(&d->wake);
  pthread_mutex_destroy(&d->lock);
  free(d->moving_of_step);
  free(d->comm_of_step);
  free(d->queue);
  free(d->bucket_of_layer);
  free(d->buckets);
  free(d);
}

int ddp_nbuckets(const ddp_t *d) { return d->nbuckets; }

size_t ddp_bucket_bytes(const ddp_t *d, int i) {
  return d->buckets[i].count * sizeof(float);
}

void ddp_begin_sync(ddp_t *d) {
  for (int i = 0; i < d->nbuckets; i++)
    d->buckets[i].ready = 0;
  d->syncing = 1;
  if (d->have_thread) {
    pthread_mutex_lock(&d->lock);
    d->queued = d->taken = d->finished = 0;
    d->held = -1;
    d->step_comm_s = d->step_late_s = 0.0;
    pthread_mutex_unlock(&d->lock);
  }
}

void ddp_layer_done(void *ddp, int layer) {
  ddp_t *d = ddp;
  if (!d->syncing || !d->have_thread)
    return;
  int i = d->bucket_of_layer[layer];
  struct bucket *b = &d->buckets[i];
  if (++b->ready < b->nlayers)
    return;
  pthread_mutex_lock(&d->lock);
  if (d->queued == d->nbuckets - 1 && d->finished == d->queued) {
    d->held = i;
  } else {
    d->queue[d->queued++] = i;
    pthread_cond_broadcast(&d->wake);
  }
  pthread_mutex_unlock(&d->lock);
}

/* Steps kept for ddp_step_medians(); a caller that never asks for them
 * stops adding at this many. */
#define STEPS_KEPT_MAX ((size_t)1 << 16)

/* Keeps the finished step's times; with d->lock held.  Without memory for
 * them the step is left out of the medians, which only report. */
static void record_step(ddp_t *d) {
  if (d->nsteps == STEPS_KEPT_MAX)
    return;
  if (d->nsteps == d->steps_cap) {
    size_t cap = d->steps_cap ? 2 * d->steps_cap : 1024;
    double *m = realloc(d->moving_of_step, cap * sizeof *m);
    if (m == NULL)
      return;
    d->moving_of_step = m;
    double *c = realloc(d->comm_of_step, cap * sizeof *c);
    if (c == NULL)
      return;
    d->comm_of_step = c;
    d->steps_cap = cap;
  }
  d->moving_of_step[d->nsteps] = d->step_comm_s - d->step_late_s;
  d->comm_of_step[d->nsteps++] = d->step_comm_s;
}

int ddp_wait(ddp_t *d, double *wait_s, char *err, size_t errlen) {
  if (!d->syncing)
    return 0;
  d->syncing = 0;
  if (!d->have_thread)
    return 0;
  double t0 = now_s();
  pthread_mutex_lock(&d->lock);
  /* hoop's own timeout bounds each all-reduce, so this wait ends. */
  while (d->finished < d->queued)
    pthread_cond_wait(&d->wake, &d->lock);
  /* The thread is idle and stays so (nothing more is queued this step),
   * so the communicator is this thread's. */
  if (d->held >= 0) {
    /* Counted as queued and taken before the lock drops, so that a wakeup
     * of the communication thread finds nothing to take. */
    d->queue[d->queued++] = d->held;
    d->taken++;
    run_bucket(d, &d->buckets[d->held]);
    d->finished++;
    d->held = -1;
  }
  int rc = 0;
  if (d->error[0] != '\0') {
    snprintf(err, errlen, "%s", d->error);
    rc = -1;
  } else if (d->queued != d->nbuckets) {
    snprintf(err, errlen, "ddp: only %d of %d gradient buckets were "
             "complete at the end of backward", d->queued, d->nbuckets);
    rc = -1;
  } else {
    record_step(d);
  }
  pthread_mutex_unlock(&d->lock);
  *wait_s += now_s() - t0;
  return rc;
}

double ddp_comm_seconds(ddp_t *d) {
  if (!d->have_thread)
    return 0.0;
  pthread_mutex_lock(&d->lock);
  double s = d->comm_s;
  pthread_mutex_unlock(&d->lock);
  return s;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/*
 * The per-step minimum over ranks of `v`'s first n values, in place; a
 * collective.  The ranks first agree on how many steps all of them kept.
 */
static int min_over_ranks(hoop_comm_t comm, double *v, size_t *n) {
  double kept = (double)*n;
  if (hoop_allreduce(comm, &kept, &kept, 1, HOOP_F64, HOOP_MIN, NULL) !=
      HOOP_SUCCESS)
    return -1;
  *n = (size_t)kept;
  if (hoop_allreduce(comm, v, v, *n, HOOP_F64, HOOP_MIN, NULL) !=
      HOOP_SUCCESS)
    return -1;
  return 0;
}

int ddp_step_medians(ddp_t *d, ddp_step_times_t *m, char *err,
                     size_t errlen) {
  *m = (ddp_step_times_t){0};
  if (!d->have_thread)
    return 0;
  pthread_mutex_lock(&d->lock);
  size_t n = d->nsteps;
  d->nsteps = 0;
  m->steps = n;
  if (n > 0) {
    m->comm_s = median(d->comm_of_step, n);
    /* median() sorts, so the copy the ranks combine step by step is taken
     * first. */
    memcpy(d->comm_of_step, d->moving_of_step, n * sizeof(double));
    m->moving_s = median(d->moving_of_step, n);
  }
  pthread_mutex_unlock(&d->lock);
  if (d->stream != NULL)
    return 0;
  /* The communication thread is idle between steps, so the communicator
   * is this thread's. */
  if (min_over_ranks(d->comm, d->comm_of_step, &n) != 0) {
    snprintf(err, errlen, "ddp: combining the ranks' step times failed: "
             "%s", hoop_comm_last_error(d->comm));
    return -1;
  }
  if (n > 0)
    m->last_in_s = median(d->comm_of_step, n);
  return 0;
}
