/* The cost model and the algorithm choice; see model.h. */
#include "collectives/model.h"

#include <math.h>

#include "core/comm.h"
#include "core/error.h"

/*
 * Time on the busiest link.  Ring: 2(N-1) hops, each link carries
 * 2(N-1)/N of the buffer.  Double binary tree: 2 log2(N) hops; a rank is
 * an inner node of one tree (half the buffer up, twice half down) and a
 * leaf of the other (half up), 2B in all.  Parameter server: two hops,
 * the root's link carries 2(N-1)B.  Chains: N-1 hops, B per link; a
 * binary tree: log2(N) hops, 2B out of each inner node.
 */
double hoop__predict(const struct hoop_comm *comm, hoop_coll_t coll,
                     hoop_algo_t algo, size_t bytes) {
  double n = comm->nranks, b = (double)bytes;
  double a = comm->alpha_s, beta = comm->beta_s;
  double hops_log = ceil(log2(n > 1 ? n : 2));
  switch (coll) {
  case HOOP_COLL_ALLREDUCE:
  case HOOP_COLL_BARRIER:
    if (algo == HOOP_ALGO_TREE)
      return 2 * hops_log * a + 2 * b * beta;
    if (algo == HOOP_ALGO_PS)
      return 2 * a + 2 * (n - 1) * b * beta;
    return 2 * (n - 1) * a + 2 * (n - 1) / n * b * beta;
  case HOOP_COLL_BROADCAST:
  case HOOP_COLL_REDUCE:
    if (algo == HOOP_ALGO_TREE)
      return hops_log * a + 2 * b * beta;
    return (n - 1) * a + b * beta;
  default:
    return (n - 1) * a + (n - 1) / n * b * beta;
  }
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

hoop_result_t hoop_comm_get_model(hoop_comm_t comm, double *alpha_s,
                                  double *beta_s_per_byte) {
  if (alpha_s == NULL || beta_s_per_byte == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_get_model: NULL result");
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_comm_get_model"));
  *alpha_s = comm->alpha_s;
  *beta_s_per_byte = comm->beta_s;
  hoop__comm_leave(comm);
  return HOOP_SUCCESS;
}
