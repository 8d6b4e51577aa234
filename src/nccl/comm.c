/*
 * A communicator's lifetime once made: the calls that enter and leave it,
 * and the ways to end it (finalize, destroy, abort, revoke).
 */
#include <stdlib.h>
#include <unistd.h>

#include "nccl/nccl_comm.h"

bool nccl__comm_valid(ncclComm_t comm) {
  return comm != NULL && comm->magic == NCCL_COMM_MAGIC;
}

void nccl__comm_free(ncclComm_t c) {
  if (c->hc != NULL)
    hoop_comm_destroy(c->hc);
  /* Our own spare was never used for a shrink: stop listening for it. */
  if (c->spares != NULL && !c->spare_used[c->rank])
    hoop_unique_id_release(&c->spares[c->rank]);
  free(c->spares);
  free(c->spare_used);
  free(c->premul);
  pthread_mutex_destroy(&c->lock);
  pthread_cond_destroy(&c->changed);
  c->magic = 0;
  free(c);
}

/*
 * A call leaves with a single decrement and never touches the struct after
 * it, so polling is what lets the struct be freed at once; destroy is rare.
 */
void nccl__wait_idle(ncclComm_t c) {
  while (LOAD(c->busy) > 0)
    usleep(100);
}

/* The slow way in: a background init to wait for, or a refusal. */
static ncclResult_t enter_slowly(ncclComm_t comm, const char *what) {
  pthread_mutex_lock(&comm->lock);
  while (LOAD(comm->state) == NCCL_COMM_INITIALIZING && !LOAD(comm->freeing))
    pthread_cond_wait(&comm->changed, &comm->lock);
  ncclResult_t r = ncclSuccess;
  int state = LOAD(comm->state);
  if (LOAD(comm->freeing))
    r = nccl__error(ncclInvalidUsage,
                    "%s: the communicator is being destroyed or aborted",
                    what);
  else if (state == NCCL_COMM_FAILED)
    r = nccl__error(comm->init_result == ncclSuccess ? ncclInvalidUsage
                                                     : comm->init_result,
                    "%s: the communicator's initialisation failed", what);
  else if (state == NCCL_COMM_REVOKED)
    r = nccl__error(ncclInvalidUsage,
                    "%s: the communicator was revoked (ncclCommRevoke or a "
                    "shrink with NCCL_SHRINK_ABORT); shrink or destroy it",
                    what);
  pthread_mutex_unlock(&comm->lock);
  return r;
}

ncclResult_t nccl__enter(ncclComm_t comm, const char *what,
                         hoop_comm_t *hc) {
  if (!nccl__comm_valid(comm))
    return nccl__error(ncclInvalidArgument, "%s: %s", what,
                       comm == NULL ? "communicator is NULL"
                                    : "not a communicator (freed?)");
  __atomic_add_fetch(&comm->busy, 1, __ATOMIC_SEQ_CST);
  if (LOAD(comm->state) != NCCL_COMM_READY || LOAD(comm->freeing)) {
    ncclResult_t r = enter_slowly(comm, what);
    if (r != ncclSuccess) {
      __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_SEQ_CST);
      return r;
    }
  }
  if (hc != NULL)
    *hc = LOAD(comm->hc);
  return ncclSuccess;
}

void nccl__leave(ncclComm_t comm) {
  __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_SEQ_CST);
}

/* ---- the end of a communicator ------------------------------------------ */

NCCL_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  hoop_comm_t hc;
  ncclResult_t r = nccl__enter(comm, "ncclCommFinalize", &hc);
  if (r != ncclSuccess)
    return r;
  /* Reading the counters waits for every device call queued before. */
  hoop_stats_t stats = HOOP_STATS_INIT;
  hoop_result_t res = hoop_comm_get_stats(hc, &stats);
  r = res == HOOP_SUCCESS ? ncclSuccess : nccl__from_hoop(comm, res);
  nccl__leave(comm);
  return r;
}
NCCL_ALIAS(ncclCommFinalize);

NCCL_EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (comm == NULL)
    return ncclSuccess; /* as NCCL: destroying nothing is no error */
  if (!nccl__comm_valid(comm))
    return nccl__error(ncclInvalidArgument,
                       "ncclCommDestroy: not a communicator (freed?)");
  pthread_mutex_lock(&comm->lock);
  if (LOAD(comm->freeing)) {
    pthread_mutex_unlock(&comm->lock);
    return nccl__error(ncclInvalidUsage,
                       "ncclCommDestroy: already being destroyed");
  }
  /* A background init ends first: its thread still uses the struct. */
  while (LOAD(comm->state) == NCCL_COMM_INITIALIZING)
    pthread_cond_wait(&comm->changed, &comm->lock);
  STORE(comm->freeing, 1);
  pthread_mutex_unlock(&comm->lock);
  nccl__wait_idle(comm);
  nccl__comm_free(comm);
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommDestroy);

NCCL_EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (comm == NULL)
    return ncclSuccess;
  if (!nccl__comm_valid(comm))
    return nccl__error(ncclInvalidArgument,
                       "ncclCommAbort: not a communicator (freed?)");
  pthread_mutex_lock(&comm->lock);
  if (LOAD(comm->freeing)) {
    bool again = comm->abandoned;
    pthread_mutex_unlock(&comm->lock);
    return again ? ncclSuccess
                 : nccl__error(ncclInvalidUsage,
                               "ncclCommAbort: already being destroyed");
  }
  STORE(comm->freeing, 1);
  if (LOAD(comm->state) == NCCL_COMM_INITIALIZING) {
    /* The init's own thread frees it when the rendezvous gives up. */
    comm->abandoned = true;
    pthread_cond_broadcast(&comm->changed);
    pthread_mutex_unlock(&comm->lock);
    return ncclSuccess;
  }
  hoop_comm_t hc = LOAD(comm->hc);
  STORE(comm->hc, NULL);
  pthread_mutex_unlock(&comm->lock);
  /* Fails the calls other threads have in flight, then frees hoop's. */
  if (hc != NULL)
    hoop_comm_abort(hc);
  nccl__wait_idle(comm);
  nccl__comm_free(comm);
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommAbort);

NCCL_EXPORT ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return nccl__error(ncclInvalidArgument,
                       "ncclCommRevoke: flags 0x%x (must be 0)",
                       (unsigned)revokeFlags);
  if (!nccl__comm_valid(comm))
    return nccl__error(ncclInvalidArgument,
                       "ncclCommRevoke: not a communicator");
  pthread_mutex_lock(&comm->lock);
  while (LOAD(comm->state) == NCCL_COMM_INITIALIZING && !LOAD(comm->freeing))
    pthread_cond_wait(&comm->changed, &comm->lock);
  hoop_comm_t hc = NULL;
  if (LOAD(comm->state) == NCCL_COMM_READY) {
    hc = LOAD(comm->hc);
    STORE(comm->hc, NULL);
    nccl__set_state(comm, NCCL_COMM_REVOKED);
  }
  pthread_mutex_unlock(&comm->lock);
  if (hc != NULL)
    hoop_comm_abort(hc);
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommRevoke);
