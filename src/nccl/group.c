/*
 * NCCL groups.  Calls between ncclGroupStart and the outermost
 * ncclGroupEnd are queued per thread and run at the end.  One group may
 * name several communicators, as when one thread drives several ranks of
 * a job (nccl-tests -g, or ncclCommInitAll's ranks): hoop's host calls
 * block until their peers join, so each communicator's calls then run on
 * a thread of their own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/nccl_comm.h"

static _Thread_local struct {
  int depth;
  struct nccl_call *calls;
  int n, cap;
  ncclResult_t error; /* the first call that failed while queuing */
} group;

ncclResult_t nccl__submit(const struct nccl_call *call, hoop_comm_t hc) {
  if (group.depth == 0)
    return nccl__run(hc, call, 1);
  if (group.n == group.cap) {
    int cap = group.cap ? group.cap * 2 : 16;
    struct nccl_call *t = realloc(group.calls, sizeof *t * (size_t)cap);
    if (t == NULL)
      return group.error = nccl__error(ncclSystemError,
                                       "no memory for a group of %d calls",
                                       cap);
    group.calls = t;
    group.cap = cap;
  }
  group.calls[group.n++] = *call;
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t pncclGroupStart(void) {
  group.depth++;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGroupStart);

/* One communicator's share of a group. */
struct share {
  ncclComm_t comm;
  struct nccl_call *calls;
  int n;
  ncclResult_t result;
  char error[512];
  pthread_t thread;
  bool threaded;
};

static void run_share(struct share *s) {
  hoop_comm_t hc;
  s->result = nccl__enter(s->comm, "ncclGroupEnd", &hc);
  if (s->result == ncclSuccess) {
    s->result = nccl__run(hc, s->calls, s->n);
    nccl__leave(s->comm);
  }
  if (s->result != ncclSuccess)
    snprintf(s->error, sizeof s->error, "%s", nccl__last_error());
}

static void *share_thread(void *p) {
  run_share(p);
  return NULL;
}

/* Splits the calls by communicator, keeping each one's call order. */
static struct share *split_by_comm(struct nccl_call *calls, int n,
                                   int *nshares) {
  struct share *shares = calloc((size_t)n, sizeof *shares);
  struct nccl_call *sorted = malloc(sizeof *sorted * (size_t)n);
  if (shares == NULL || sorted == NULL) {
    free(shares);
    free(sorted);
    return NULL;
  }
  int k = 0;
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (j < k && shares[j].comm != calls[i].comm)
      j++;
    if (j == k)
      shares[k++].comm = calls[i].comm;
    shares[j].n++;
  }
  int at = 0;
  for (int j = 0; j < k; j++) {
    shares[j].calls = sorted + at;
    at += shares[j].n;
    shares[j].n = 0;
  }
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (shares[j].comm != calls[i].comm)
      j++;
    shares[j].calls[shares[j].n++] = calls[i];
  }
  *nshares = k;
  return shares;
}

static ncclResult_t run_group(struct nccl_call *calls, int n) {
  /* The common group (PyTorch wraps each call in one) has one comm. */
  int same = 1;
  while (same < n && calls[same].comm == calls[0].comm)
    same++;
  if (same == n) {
    struct share one = {.comm = calls[0].comm, .calls = calls, .n = n};
    run_share(&one);
    return one.result == ncclSuccess
               ? ncclSuccess
               : nccl__pass_error(one.result, one.error);
  }
  int k = 0;
  struct share *shares = split_by_comm(calls, n, &k);
  if (shares == NULL)
    return nccl__error(ncclSystemError, "ncclGroupEnd: out of memory");
  for (int j = 1; j < k; j++)
    shares[j].threaded =
        pthread_create(&shares[j].thread, NULL, share_thread, &shares[j]) ==
        0;
  run_share(&shares[0]);
  /* A share without a thread of its own runs here, after the others. */
  for (int j = 1; j < k; j++) {
    if (shares[j].threaded)
      pthread_join(shares[j].thread, NULL);
    else
      run_share(&shares[j]);
  }
  ncclResult_t r = ncclSuccess;
  for (int j = 0; j < k && r == ncclSuccess; j++)
    if (shares[j].result != ncclSuccess)
      r = nccl__pass_error(shares[j].result, shares[j].error);
  free(shares[0].calls);
  free(shares);
  return r;
}

/* Ends the outermost group: what to run, or the error met while queuing. */
static ncclResult_t take_group(const char *what, struct nccl_call **calls,
                               int *n) {
  *calls = NULL;
  *n = 0;
  if (group.depth == 0)
    return nccl__error(ncclInvalidUsage, "%s without ncclGroupStart", what);
  if (--group.depth > 0)
    return ncclSuccess;
  ncclResult_t r = group.error;
  group.error = ncclSuccess;
  if (r == ncclSuccess) {
    *calls = group.calls;
    *n = group.n;
  } else {
    free(group.calls);
  }
  group.calls = NULL;
  group.n = group.cap = 0;
  return r;
}

NCCL_EXPORT ncclResult_t pncclGroupEnd(void) {
  struct nccl_call *calls;
  int n;
  ncclResult_t r = take_group("ncclGroupEnd", &calls, &n);
  if (r == ncclSuccess && n > 0)
    r = run_group(calls, n);
  free(calls);
  return r;
}
NCCL_ALIAS(ncclGroupEnd);

static hoop_coll_t coll_of(enum nccl_kind kind) {
  switch (kind) {
  case NCCL_K_ALLREDUCE:
    return HOOP_COLL_ALLREDUCE;
  case NCCL_K_BROADCAST:
    return HOOP_COLL_BROADCAST;
  case NCCL_K_REDUCE:
    return HOOP_COLL_REDUCE;
  case NCCL_K_ALLGATHER:
    return HOOP_COLL_ALLGATHER;
  case NCCL_K_REDUCE_SCATTER:
    return HOOP_COLL_REDUCE_SCATTER;
  case NCCL_K_ALLTOALL:
    return HOOP_COLL_ALLTOALL;
  default:
    return HOOP_COLL_SENDRECV;
  }
}

/*
 * The group's predicted time from hoop's cost model, without running it:
 * each communicator's calls one after another, the communicators side by
 * side.
 */
NCCL_EXPORT ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  const char *what = "ncclGroupSimulateEnd";
  if (simInfo == NULL || simInfo->magic != 0x74685283u ||
      simInfo->size < sizeof *simInfo) {
    struct nccl_call *calls;
    int n;
    take_group(what, &calls, &n);
    free(calls);
    return nccl__error(ncclInvalidArgument,
                       "%s: simInfo is NULL or not initialised with "
                       "NCCL_SIM_INFO_INITIALIZER",
                       what);
  }
  struct nccl_call *calls;
  int n;
  ncclResult_t r = take_group(what, &calls, &n);
  double longest = 0;
  int k = 0;
  struct share *shares = n > 0 ? split_by_comm(calls, n, &k) : NULL;
  for (int j = 0; j < k && r == ncclSuccess; j++) {
    hoop_comm_t hc;
    r = nccl__enter(shares[j].comm, what, &hc);
    if (r != ncclSuccess)
      break;
    double total = 0;
    for (int i = 0; i < shares[j].n && r == ncclSuccess; i++) {
      const struct nccl_call *c = &shares[j].calls[i];
      size_t bytes = c->count * hoop_dtype_size(c->dtype);
      if (c->kind == NCCL_K_ALLGATHER || c->kind == NCCL_K_REDUCE_SCATTER ||
          c->kind == NCCL_K_ALLTOALL)
        bytes *= (size_t)shares[j].comm->nranks;
      double s = 0;
      hoop_result_t res =
          hoop_comm_predict(hc, coll_of(c->kind), HOOP_ALGO_AUTO, bytes, &s);
      if (res != HOOP_SUCCESS)
        r = nccl__from_hoop(NULL, res);
      total += s;
    }
    nccl__leave(shares[j].comm);
    if (total > longest)
      longest = total;
  }
  if (shares != NULL)
    free(shares[0].calls);
  free(shares);
  free(calls);
  if (r == ncclSuccess)
    simInfo->estimatedTime = (float)(longest * 1e6);
  return r;
}
NCCL_ALIAS(ncclGroupSimulateEnd);
