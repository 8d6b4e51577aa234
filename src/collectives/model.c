/* The cost model and the algorithm choice; see model.h. */
#include "collectives/model.h"

#include <math.h>

#include "core/comm.h"
#include "core/error.h"

/* Sequential message hops of a schedule: what alpha multiplies. */
static double hops(hoop_coll_t coll, hoop_algo_t algo, double n) {
  double log_n = ceil(log2(n > 1 ? n : 2));
  switch (coll) {
  case HOOP_COLL_ALLREDUCE:
  case HOOP_COLL_BARRIER:
    return algo == HOOP_ALGO_TREE ? 2 * log_n
           : algo == HOOP_ALGO_PS ? 2
                                  : 2 * (n - 1);
  case HOOP_COLL_BROADCAST:
  case HOOP_COLL_REDUCE:
    return algo == HOOP_ALGO_TREE ? log_n : n - 1;
  default:
    return n - 1;
  }
}

/*
 * Bytes on the busiest link, one direction (each direction of a link has
 * its own capacity), of a schedule moving k bytes.  Ring: 2(N-1)/N of the
 * buffer.  Double binary tree: up to 2k out of a rank (an inner node of
 * one tree sends half to each child, and up in both trees).  Parameter
 * server: (N-1)k into the root and (N-1)k back out, 2(N-1)k through its
 * link in all.  Chains k; a binary tree 2k out of each inner node.
 */
static double link_bytes(hoop_coll_t coll, hoop_algo_t algo, double n,
                         double k) {
  switch (coll) {
  case HOOP_COLL_ALLREDUCE:
  case HOOP_COLL_BARRIER:
    return algo == HOOP_ALGO_TREE ? 2 * k
           : algo == HOOP_ALGO_PS ? (n - 1) * k
                                  : 2 * (n - 1) / n * k;
  case HOOP_COLL_BROADCAST:
  case HOOP_COLL_REDUCE:
    return algo == HOOP_ALGO_TREE ? 2 * k : k;
  default:
    return (n - 1) / n * k;
  }
}

/*
 * On one host the "links" are the cores copying through the kernel: what
 * counts is the bytes (sent plus received) of the busiest rank, or of all
 * ranks shared among the cores, whichever is larger.  Every all-reduce
 * schedule moves 4(N-1)k in all; they differ in how unevenly.
 */
static double host_bytes(const struct hoop_comm *comm, hoop_coll_t coll,
                         hoop_algo_t algo, double n, double k) {
  double busiest, total;
  switch (coll) {
  case HOOP_COLL_ALLREDUCE:
  case HOOP_COLL_BARRIER:
    total = 4 * (n - 1) * k;
    busiest = algo == HOOP_ALGO_TREE ? (n > 2 ? 4 * k : 2 * k)
              : algo == HOOP_ALGO_PS ? 2 * (n - 1) * k
                                     : 4 * (n - 1) / n * k;
    break;
  case HOOP_COLL_BROADCAST:
  case HOOP_COLL_REDUCE:
    total = 2 * (n - 1) * k;
    busiest = algo == HOOP_ALGO_TREE ? 3 * k : 2 * k;
    break;
  default:
    total = 2 * (n - 1) * k;
    busiest = 2 * (n - 1) / n * k;
    break;
  }
  double cores = comm->host_cores < n ? comm->host_cores : n;
  return busiest > total / cores ? busiest : total / cores;
}

double hoop__predict(const struct hoop_comm *comm, hoop_coll_t coll,
                     hoop_algo_t algo, size_t bytes) {
  double n = comm->nranks, k = (double)bytes;
  double latency = hops(coll, algo, n) * comm->alpha_s;
  if (comm->single_host)
    return latency + host_bytes(comm, coll, algo, n, k) * comm->host_beta_s;
  return latency + link_bytes(coll, algo, n, k) * comm->beta_s;
}

hoop_algo_t hoop__choose_algo(const struct hoop_comm *comm, hoop_coll_t coll,
                              size_t bytes) {
  int rooted = coll == HOOP_COLL_BROADCAST || coll == HOOP_COLL_REDUCE;
  if (coll == HOOP_COLL_REDUCE_SCATTER || coll == HOOP_COLL_ALLGATHER)
    return HOOP_ALGO_RING;
  if (comm->algo == HOOP_ALGO_RING || comm->algo == HOOP_ALGO_TREE)
    return comm->algo;
  if (comm->algo == HOOP_ALGO_PS && !rooted)
    return HOOP_ALGO_PS;
  /* AUTO (and PS for broadcast/reduce, which it does not apply to). */
  hoop_algo_t best = HOOP_ALGO_RING;
  double best_s = hoop__predict(comm, coll, HOOP_ALGO_RING, bytes);
  hoop_algo_t others[] = {HOOP_ALGO_TREE, HOOP_ALGO_PS};
  for (int i = 0; i < (rooted ? 1 : 2); i++) {
    double s = hoop__predict(comm, coll, others[i], bytes);
    if (s < best_s) {
      best = others[i];
      best_s = s;
    }
  }
  return best;
}

hoop_result_t hoop_comm_set_algo(hoop_comm_t comm, hoop_algo_t algo) {
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_comm_set_algo"));
  hoop_result_t res = HOOP_SUCCESS;
  if ((unsigned)algo > HOOP_ALGO_PS)
    res = HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                     "hoop_comm_set_algo: %d is not auto, ring, tree or ps",
                     (int)algo);
  else
    comm->algo = algo;
  hoop__comm_leave(comm);
  return res;
}

hoop_result_t hoop_comm_predict(hoop_comm_t comm, hoop_coll_t coll,
                                hoop_algo_t algo, size_t bytes,
                                double *seconds) {
  if (seconds == NULL || coll < HOOP_COLL_ALLREDUCE ||
      coll >= HOOP_COLL_COUNT || (unsigned)algo > HOOP_ALGO_PS)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_predict: bad collective, algorithm or "
                      "NULL result");
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_comm_predict"));
  if (algo == HOOP_ALGO_AUTO)
    algo = hoop__choose_algo(comm, coll, bytes);
  *seconds = hoop__predict(comm, coll, algo, bytes);
  hoop__comm_leave(comm);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_get_model(hoop_comm_t comm, hoop_model_t *model) {
  if (model == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_get_model: model is NULL");
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_comm_get_model"));
  *model = (hoop_model_t){comm->alpha_s, comm->beta_s, comm->host_beta_s,
                          comm->single_host, comm->host_cores};
  hoop__comm_leave(comm);
  return HOOP_SUCCESS;
}
