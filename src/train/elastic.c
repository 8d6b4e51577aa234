/* Epochs that survive lost ranks; see elastic.h. */
#include "elastic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Shrinks after one failure can fail in turn when more ranks go while the
 * survivors agree; each try leaves out those too.
 */
#define SHRINK_TRIES 4

/*
 * Optimiser steps between the members' looks for newcomers: a look is a
 * small broadcast, about a tenth of an MLP step's all-reduce here, and
 * every 16 steps (some 50 ms) is soon enough for one that took seconds
 * to start.
 */
#define GROW_EVERY 16

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int elastic_init(elastic_t *e, trainer_t *t) {
  memset(e, 0, sizeof *e);
  e->t = t;
  e->launched = t->nranks;
  e->step_samples = (int64_t)t->nranks * t->cfg.batch;
  e->launch_rank = malloc((size_t)t->nranks * sizeof *e->launch_rank);
  if (e->launch_rank == NULL)
    return -1;
  for (int r = 0; r < t->nranks; r++)
    e->launch_rank[r] = r;
  return 0;
}

void elastic_free(elastic_t *e) {
  free(e->launch_rank);
  e->launch_rank = NULL;
}

void elastic_take_changes(elastic_t *e, int *left, int *joined) {
  *left = e->left;
  *joined = e->joined;
  e->left = e->joined = 0;
}

/* Adds the ranks of the last shrink's lost, by launch rank, to e->who. */
static void note_lost(elastic_t *e, const int *before, int nbefore,
                      const int *kept) {
  size_t used = strlen(e->who);
  for (int old = 0, k = 0; old < nbefore && used + 16 < sizeof e->who;
       old++) {
    if (k < e->t->nranks && kept[k] == old) {
      k++;
      continue;
    }
    if (before[old] >= 0)
      used += (size_t)snprintf(e->who + used, sizeof e->who - used, "%s%d",
                               used > 0 ? "," : "", before[old]);
    else
      used += (size_t)snprintf(e->who + used, sizeof e->who - used,
                               "%sone that joined", used > 0 ? "," : "");
  }
}

/* t moves onto `next`, a communicator made from its own, with its algorithm. */
static int move_to(trainer_t *t, hoop_comm_t next, char *err, size_t errlen) {
  hoop_algo_t algo;
  if (hoop_comm_get_algo(t->comm, &algo) == HOOP_SUCCESS)
    hoop_comm_set_algo(next, algo);
  hoop_comm_destroy(t->comm);
  return trainer_rejoin(t, next, err, errlen);
}

/* One shrink and its bookkeeping: t moves onto the survivors. */
static int shrink_once(elastic_t *e, char *err, size_t errlen) {
  trainer_t *t = e->t;
  int nbefore = t->nranks;
  int *kept = malloc((size_t)nbefore * sizeof *kept);
  int *before = malloc((size_t)nbefore * sizeof *before);
  if (kept == NULL || before == NULL) {
    free(kept);
    free(before);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  hoop_comm_t next = NULL;
  hoop_result_t res = hoop_comm_shrink(t->comm, NULL, &next, kept);
  if (res != HOOP_SUCCESS) {
    snprintf(err, errlen, "hoop_comm_shrink: %s: %s", hoop_result_name(res),
             hoop_comm_last_error(t->comm));
    free(kept);
    free(before);
    return -1;
  }
  int rc = move_to(t, next, err, errlen);
  if (rc == 0) {
    memcpy(before, e->launch_rank, (size_t)nbefore * sizeof *before);
    for (int r = 0; r < t->nranks; r++)
      e->launch_rank[r] = before[kept[r]];
    e->left += nbefore - t->nranks;
    note_lost(e, before, nbefore, kept);
  }
  free(kept);
  free(before);
  return rc;
}

/*
 * Rank 0's state and place, [epoch, cursor, samples a step], to every rank
 * of t's.
 */
#define PLACE_FIELDS 3
static int share_place(trainer_t *t, int64_t place[PLACE_FIELDS], char *err,
                       size_t errlen) {
  if (trainer_share_state(t, err, errlen) != 0)
    return -1;
  hoop_result_t res =
      hoop_broadcast(t->comm, place, place, PLACE_FIELDS, HOOP_I64, 0, NULL);
  if (res == HOOP_SUCCESS)
    return 0;
  snprintf(err, errlen, "sharing the place in the epochs: %s: %s",
           hoop_result_name(res), hoop_comm_last_error(t->comm));
  return -1;
}

/*
 * Shrinks until the survivors share rank 0's state and place (NULL: no
 * place in the epochs to share).
 */
static int recover(elastic_t *e, int64_t *place, char *err, size_t errlen) {
  trainer_t *t = e->t;
  double t0 = now_s();
  char why[1024];
  snprintf(why, sizeof why, "%s", err);
  for (int tries = 0; tries < SHRINK_TRIES; tries++) {
    if (shrink_once(e, err, errlen) != 0)
      continue;
    if (place != NULL ? share_place(t, place, err, errlen) != 0
                      : trainer_share_state(t, err, errlen) != 0)
      continue;
    double took = now_s() - t0;
    if (t->rank == 0) {
      printf("hoop-train: rank(s) %s left; %d of %d ranks go on (recovered "
             "in %.2f s)\n",
             e->who, t->nranks, e->launched, took);
      fflush(stdout);
    }
    e->who[0] = '\0';
    return 0;
  }
  char last[1024];
  snprintf(last, sizeof last, "%s", err);
  snprintf(err, errlen, "%s; then going on without the lost ranks failed: %s",
           why, last);
  return -1;
}

int elastic_recover(elastic_t *e, char *err, size_t errlen) {
  return recover(e, NULL, err, errlen);
}

/*
 * The members' look for newcomers.  With some, t moves onto the grown
 * communicator and they get the state; rank 0 says how long the members
 * waited for that.  0, or -1 with err set.
 */
static int let_in(elastic_t *e, int64_t place[PLACE_FIELDS], char *err,
                  size_t errlen) {
  trainer_t *t = e->t;
  double start = now_s();
  hoop_comm_t next = NULL;
  int joined = 0;
  hoop_result_t res = hoop_comm_grow(t->comm, NULL, &next, &joined);
  if (res != HOOP_SUCCESS) {
    snprintf(err, errlen, "hoop_comm_grow: %s: %s", hoop_result_name(res),
             hoop_comm_last_error(t->comm));
    return -1;
  }
  if (next == NULL)
    return 0;
  int *ranks = realloc(e->launch_rank,
                       (size_t)(t->nranks + joined) * sizeof *ranks);
  if (ranks == NULL) {
    hoop_comm_destroy(next);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  e->launch_rank = ranks;
  for (int i = 0; i < joined; i++)
    ranks[t->nranks + i] = -1;
  if (move_to(t, next, err, errlen) != 0)
    return -1;
  if (share_place(t, place, err, errlen) != 0)
    return -1;
  e->joined += joined;
  if (t->rank == 0) {
    printf("hoop-train: %d rank(s) joined; %d ranks go on (the members "
           "waited %.2f s for them)\n",
           joined, t->nranks, now_s() - start);
    fflush(stdout);
  }
  return 0;
}

int elastic_join(elastic_t *e, int *epoch, char *err, size_t errlen) {
  int64_t place[PLACE_FIELDS] = {0, 0, 0};
  if (share_place(e->t, place, err, errlen) != 0)
    return -1;
  for (int r = 0; r < e->t->nranks; r++)
    e->launch_rank[r] = -1;
  *epoch = (int)place[0];
  e->cursor = place[1];
  e->step_samples = place[2];
  return 0;
}

size_t elastic_split(size_t at, size_t n, int nranks, size_t most, int rank,
                     size_t *lo, size_t *hi) {
  size_t ranks = (size_t)nranks;
  size_t step = most < n - at ? most : n - at;
  *lo = at + step * (size_t)rank / ranks;
  *hi = at + step * (size_t)(rank + 1) / ranks;
  return step;
}

int elastic_train_epoch(elastic_t *e, const dataset_t *d, int epoch,
                        uint64_t seed, double *loss_sum, long *correct,
                        size_t *samples, char *err, size_t errlen) {
  trainer_t *t = e->t;
  size_t n = d->n;
  size_t *perm = dataset_permutation(n, seed, epoch);
  if (perm == NULL) {
    snprintf(err, errlen, "out of memory for the epoch's order");
    return -1;
  }
  int64_t place[PLACE_FIELDS] = {epoch, e->cursor, e->step_samples};
  e->cursor = 0;
  while ((size_t)place[1] < n) {
    /* A rank holds at most batch_cap samples' activations. */
    size_t at = (size_t)place[1], lo, hi;
    size_t most = (size_t)t->nranks * (size_t)t->model.batch_cap;
    if ((size_t)place[2] < most)
      most = (size_t)place[2];
    size_t step = elastic_split(at, n, t->nranks, most, t->rank, &lo, &hi);
    /*
     * The epoch's last step may have fewer samples than ranks: a rank
     * without one takes part with a gradient scaled to nothing.  Scaled by
     * nranks/step, the ranks' average is the mean over the step's samples.
     */
    int none = hi == lo;
    float scale = none ? 0.0f : (float)t->nranks / (float)step;
    double loss = 0.0;
    long right = 0;
    if (trainer_step(t, d, perm + (none ? at : lo), none ? 1 : (int)(hi - lo),
                     scale, 1, &loss, &right, err, errlen) != 0) {
      if (recover(e, place, err, errlen) != 0) {
        free(perm);
        return -1;
      }
      continue;
    }
    if (!none) {
      *loss_sum += loss;
      *correct += right;
      *samples += hi - lo;
    }
    place[1] += (int64_t)step;
    /* The optimiser's count is the same on every rank, and so the looks. */
    if (t->opt.steps % GROW_EVERY == 0 && let_in(e, place, err, errlen) != 0 &&
        recover(e, place, err, errlen) != 0) {
      free(perm);
      return -1;
    }
  }
  free(perm);
  return 0;
}
