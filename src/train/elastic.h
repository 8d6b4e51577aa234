/*
 * hoop-train --elastic: epochs that go on when ranks are lost.  The ranks
 * walk one permutation of the epoch's samples together, step by step, each
 * step taking the next (ranks at the start) * batch of them split evenly
 * among the ranks there are, so that however many are left each sample is
 * trained on once per epoch, and the steps are those of the run that lost
 * none: the same samples, and so the same update but for the order of the
 * sums, and the same number of updates.  When a
 * step fails because ranks died or stopped, the survivors shrink
 * (hoop_comm_shrink), take rank 0's parameters, optimiser state and place
 * in the epoch, and redo the step from there.  Every few steps the members
 * let in the processes waiting to join (a lost rank's replacement), which
 * take the same state and go on with them.
 */
#ifndef HOOP_TRAIN_ELASTIC_H
#define HOOP_TRAIN_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "hoop.h"
#include "trainer.h"

typedef struct elastic {
  trainer_t *t; /* its communicator changes with each shrink and grow */
  /* [t->nranks] each rank's rank when the job started, -1 for those that
     joined later */
  int *launch_rank;
  int launched;     /* ranks when the job started */
  int64_t cursor;   /* where the next epoch starts: 0, but for a newcomer */
  int64_t step_samples; /* a step's samples: launched * batch, rank 0's */
  int left, joined; /* ranks lost and let in since elastic_take_changes */
  char who[256];    /* launch ranks lost in the recovery under way */
} elastic_t;

/* Starts tracking the ranks of t's communicator; 0, or -1 out of memory. */
int elastic_init(elastic_t *e, trainer_t *t);
void elastic_free(elastic_t *e);

/*
 * The step that starts at place `at` of an epoch of n samples: its size
 * (up to `most`), and rank's part of it among nranks, places [*lo, *hi),
 * as even as the ranks allow (empty for some ranks when fewer samples are
 * left than ranks).
 */
size_t elastic_split(size_t at, size_t n, int nranks, size_t most, int rank,
                     size_t *lo, size_t *hi);

/*
 * Trains epoch `epoch` (from 0) of d in steps of e->step_samples samples
 * (fewer where a rank could not hold its part).  Adds this rank's summed
 * loss, samples classified right and samples trained on.  Returns 0, or
 * -1 with err set when the ranks could not go on (this rank was left out,
 * or every shrink failed).
 */
int elastic_train_epoch(elastic_t *e, const dataset_t *d, int epoch,
                        uint64_t seed, double *loss_sum, long *correct,
                        size_t *samples, char *err, size_t errlen);

/*
 * After a collective on t's communicator failed outside the steps (the
 * epoch's metrics, the evaluation): shrinks and shares rank 0's state, as
 * a failed step does.  0, or -1 with err set.
 */
int elastic_recover(elastic_t *e, char *err, size_t errlen);

/* How many ranks were lost, and let in, since the last call. */
void elastic_take_changes(elastic_t *e, int *left, int *joined);

/*
 * A newcomer's first step, on the job's communicator it joined
 * (hoop_comm_join): takes rank 0's parameters, optimiser state and place,
 * *epoch the epoch to go on with.  Every step of the members lets
 * newcomers in now and then (hoop_comm_grow) and hands them the same.
 */
int elastic_join(elastic_t *e, int *epoch, char *err, size_t errlen);

#endif
