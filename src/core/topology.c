/* Topology queries over what the ranks published at bootstrap. */
#include "core/comm.h"
#include "core/error.h"
#include "transport/transport.h"

#include <string.h>

static hoop_result_t check_rank(hoop_comm_t comm, const char *what,
                                int rank) {
  if (rank < 0 || rank >= comm->nranks)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: rank %d is outside 0..%d", what, rank,
                      comm->nranks - 1);
  return HOOP_SUCCESS;
}

/* Hosts are numbered by their lowest rank, so every rank agrees. */
static int host_index(const struct hoop_comm *comm, int rank) {
  int host = 0;
  for (int r = 0; r < rank; r++) {
    bool first = true;
    for (int q = 0; q < r && first; q++)
      first = comm->peers[q].host_hash != comm->peers[r].host_hash;
    if (comm->peers[r].host_hash == comm->peers[rank].host_hash)
      return host;
    host += first;
  }
  return host;
}

hoop_result_t hoop_comm_rank_info(hoop_comm_t comm, int rank,
                                  hoop_rank_info_t *info) {
  if (info == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_rank_info: info is NULL");
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_comm_rank_info"));
  hoop_result_t res = check_rank(comm, "hoop_comm_rank_info", rank);
  if (res == HOOP_SUCCESS) {
    const struct hoop_peer_info *p = &comm->peers[rank];
    *info = (hoop_rank_info_t){
        .host = host_index(comm, rank),
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
