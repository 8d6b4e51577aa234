/* Topology queries over what the ranks published at bootstrap. */
#include "core/comm.h"
#include "core/error.h"
#include "transport/transport.h"

#include <stdlib.h>
#include <string.h>

static hoop_result_t check_rank(hoop_comm_t comm, const char *what,
                                int rank) {
  if (rank < 0 || rank >= comm->nranks)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: rank %d is outside 0..%d", what, rank,
                      comm->nranks - 1);
  return HOOP_SUCCESS;
}

struct by_host {
  uint64_t hash;
  int rank;
};

static int cmp_by_host(const void *a, const void *b) {
  const struct by_host *x = a, *y = b;
  if (x->hash != y->hash)
    return x->hash < y->hash ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/*
 * comm->host_index, made on first use: hosts are numbered by their lowest
 * rank, so every rank agrees.  Sorting by host keeps it O(n log n) for
 * large jobs.
 */
static hoop_result_t host_indices(struct hoop_comm *comm) {
  if (comm->host_index != NULL)
    return HOOP_SUCCESS;
  int n = comm->nranks;
  struct by_host *order = malloc(sizeof *order * (size_t)n);
  int *lowest = malloc(sizeof *lowest * (size_t)n);
  int *index = malloc(sizeof *index * (size_t)n);
  if (order == NULL || lowest == NULL || index == NULL) {
    free(order);
    free(lowest);
    free(index);
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "host table");
  }
  for (int r = 0; r < n; r++)
    order[r] = (struct by_host){comm->peers[r].host_hash, r};
  qsort(order, (size_t)n, sizeof *order, cmp_by_host);
  for (int i = 0; i < n; i++)
    lowest[order[i].rank] =
        i > 0 && order[i].hash == order[i - 1].hash ? lowest[order[i - 1].rank]
                                                    : order[i].rank;
  /* A host's index counts the hosts whose lowest rank comes before. */
  for (int r = 0, hosts = 0; r < n; r++)
    index[r] = lowest[r] == r ? hosts++ : index[lowest[r]];
  free(order);
  free(lowest);
  comm->host_index = index;
  return HOOP_SUCCESS;
}

int hoop__comm_peers_mappable(const struct hoop_comm *comm) {
  return comm->single_host && hoop__transport_forced() == NULL;
}

hoop_result_t hoop_comm_rank_info(hoop_comm_t comm, int rank,
                                  hoop_rank_info_t *info) {
  if (info == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_rank_info: info is NULL");
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_comm_rank_info"));
  hoop_result_t res = check_rank(comm, "hoop_comm_rank_info", rank);
  if (res == HOOP_SUCCESS)
    res = host_indices(comm);
  if (res == HOOP_SUCCESS) {
    const struct hoop_peer_info *p = &comm->peers[rank];
    *info = (hoop_rank_info_t){
        .host = comm->host_index[rank],
        .pid = p->pid,
        .shm = (p->caps & HOOP_CAP_SHM) != 0,
        .cuda_devices = p->cuda_devices,
        .verbs_devices = p->verbs_devices,
    };
    memcpy(info->hostname, p->hostname, sizeof info->hostname);
    info->hostname[sizeof info->hostname - 1] = '\0';
  }
  hoop__comm_leave(comm);
  return res;
}

hoop_result_t hoop_comm_transport(hoop_comm_t comm, int a, int b,
                                  const char **name) {
  if (name == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_transport: name is NULL");
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_comm_transport"));
  hoop_result_t res = check_rank(comm, "hoop_comm_transport", a);
  if (res == HOOP_SUCCESS)
    res = check_rank(comm, "hoop_comm_transport", b);
  if (res == HOOP_SUCCESS) {
    const struct hoop_transport_ops *t =
        a == b ? NULL : hoop__transport_pick(comm, a, b);
    if (a == b)
      *name = "self";
    else if (t != NULL)
      *name = t->name;
    else
      res = HOOP_ERROR(comm, HOOP_ERR_UNSUPPORTED,
                       "hoop_comm_transport: no transport can join ranks "
                       "%d and %d (HOOP_TRANSPORT names one that cannot)",
                       a, b);
  }
  hoop__comm_leave(comm);
  return res;
}
