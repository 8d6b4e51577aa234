/*
 * Whether two ranks' published RDMA ports can be joined, and if not, which
 * rank lacks what.  A pure function of what both published, so that every
 * rank reaches the same verdict and tests can drive it from tables.
 */
#include <stdio.h>
#include <string.h>

#include "transport/rdma.h"
#include "transport/ib.h"

/* Why a rank that published `p` has no port to offer, or NULL. */
static const char *no_port(const struct hoop_rdma_port *p) {
  switch (p->status) {
  case HOOP_RDMA_PORT: return NULL;
  case HOOP_RDMA_NOT_PROBED:
    return "did not look for RDMA ports (a rank looks only with "
           "HOOP_TRANSPORT=ib until ib has run on RDMA hardware)";
  case HOOP_RDMA_NO_DEVICE: return "has no RDMA device";
  case HOOP_RDMA_NOT_BUILT: return "runs a build of hoop without RDMA verbs";
  case HOOP_RDMA_BAD_SETTING: return "has a malformed HOOP_IB_* setting";
  case HOOP_RDMA_NO_MATCH: return "has no port that HOOP_IB_HCA selects";
  default: return "could not list its RDMA devices (a verbs call failed)";
  }
}

/* Whether rank `rank`, publishing `p`, offers a usable port. */
static bool port_usable(const struct hoop_rdma_port *p, int rank, char *why,
                        size_t why_len) {
  const char *lack = no_port(p);
  if (lack != NULL) {
    snprintf(why, why_len, "rank %d %s", rank, lack);
    return false;
  }
  if (p->state != HOOP_PORT_ACTIVE) {
    snprintf(why, why_len, "rank %d's port %s:%u is %s, not ACTIVE", rank,
             p->device, p->port, hoop__rdma_state_name(p->state));
    return false;
  }
  if (p->gid_type == HOOP_GID_NONE) {
    if (p->gid_forced)
      snprintf(why, why_len, "rank %d's port %s:%u has no GID at index %u "
               "(HOOP_IB_GID_INDEX)", rank, p->device, p->port, p->gid_index);
    else
      snprintf(why, why_len, "rank %d's port %s:%u has no GID to use", rank,
               p->device, p->port);
    return false;
  }
  return true;
}

bool hoop__ib_select(const struct hoop_rdma_port *self, int self_rank,
                     const struct hoop_rdma_port *peer, int peer_rank,
                     char *why, size_t why_len) {
  if (!port_usable(self, self_rank, why, why_len) ||
      !port_usable(peer, peer_rank, why, why_len))
    return false;
  if (self->link_layer != peer->link_layer) {
    snprintf(why, why_len, "rank %d's port %s:%u is %s but rank %d's port "
             "%s:%u is %s", self_rank, self->device, self->port,
             hoop__rdma_link_layer_name(self->link_layer), peer_rank,
             peer->device, peer->port,
             hoop__rdma_link_layer_name(peer->link_layer));
    return false;
  }
  char a[HOOP_RDMA_GID_STRLEN], b[HOOP_RDMA_GID_STRLEN];
  if (self->link_layer == HOOP_LINK_IB) {
    /* Across subnets a packet needs a router and a GRH; neither is here. */
    if (memcmp(self->gid, peer->gid, 8) != 0) {
      snprintf(why, why_len,
               "ranks %d and %d are on different InfiniBand "
               "subnets (GIDs %s and %s)",
               self_rank, peer_rank, hoop__rdma_gid_str(self->gid, a),
               hoop__rdma_gid_str(peer->gid, b));
      return false;
    }
  } else if (self->gid_type != peer->gid_type) {
    snprintf(why, why_len, "rank %d's GID (index %u) is %s but rank %d's "
             "(index %u) is %s", self_rank, self->gid_index,
             hoop__rdma_gid_type_name(self->gid_type), peer_rank,
             peer->gid_index, hoop__rdma_gid_type_name(peer->gid_type));
    return false;
  } else if (self->gid_type == HOOP_GID_ROCE_V2 &&
             hoop__rdma_gid_is_ipv4(self->gid) !=
                 hoop__rdma_gid_is_ipv4(peer->gid)) {
    snprintf(why, why_len,
             "ranks %d and %d have RoCE v2 GIDs of different "
             "address families (%s and %s)",
             self_rank, peer_rank, hoop__rdma_gid_str(self->gid, a),
             hoop__rdma_gid_str(peer->gid, b));
    return false;
  }
  snprintf(why, why_len, "%s:%u and %s:%u, %s", self->device, self->port,
           peer->device, peer->port,
           self->link_layer == HOOP_LINK_IB
               ? "InfiniBand"
               : hoop__rdma_gid_type_name(self->gid_type));
  return true;
}
