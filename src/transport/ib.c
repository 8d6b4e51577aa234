/*
 * The ib transport as far as phase 1 of issue 26 goes: it judges a pair
 * of ranks from the ports they published and says why it cannot join
 * them, but it has no data path yet, so it refuses every connection,
 * saying so.  Only HOOP_TRANSPORT=ib picks it (transport.c), so that a
 * job that did not ask for it never meets that refusal.  connect never
 * succeeds, so no connection exists for the data-path functions to
 * serve, and there are none.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/rdma.h"
#include "transport/ib.h"
#include "transport/transport.h"

static bool ib_can_connect(const struct hoop_peer_info *self,
                           const struct hoop_peer_info *peer) {
  char why[256];
  return hoop__ib_select(&self->rdma, self->rank, &peer->rdma, peer->rank,
                         why, sizeof why);
}

/*
 * This rank's own lack comes with what discovery said about it, which
 * only this process knows: looking again costs little on a failing path.
 */
static void ib_why_not(const struct hoop_peer_info *self,
                       const struct hoop_peer_info *peer, char *why,
                       size_t why_len) {
  hoop__ib_select(&self->rdma, self->rank, &peer->rdma, peer->rank, why,
                  why_len);
  if (self->rdma.status == HOOP_RDMA_PORT)
    return;
  struct hoop_rdma_port again;
  char detail[256];
  hoop__rdma_publish(&again, detail, sizeof detail);
  size_t used = strlen(why);
  snprintf(why + used, why_len - used, ": %s", detail);
}

static hoop_result_t ib_connect(const struct hoop_conn_setup *setup,
                                struct hoop_conn **conn) {
  *conn = NULL;
  return HOOP_ERROR(NULL, HOOP_ERR_UNSUPPORTED,
                    "HOOP_TRANSPORT=ib: rank %d and %s have RDMA ports ib "
                    "could join, but hoop's verbs data path is not written "
                    "yet (issue 26, phase 2); use HOOP_TRANSPORT=tcp or "
                    "leave HOOP_TRANSPORT unset",
                    setup->rank, setup->peer_desc);
}

const struct hoop_transport_ops hoop__ib_transport = {
    .name = "ib",
    .can_connect = ib_can_connect,
    .why_not = ib_why_not,
    .connect = ib_connect,
};
