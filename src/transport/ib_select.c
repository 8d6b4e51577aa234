/*
 * Which port and GID a rank would use, what it publishes about them at
 * bootstrap, and whether two ranks' published ports can be joined.  All
 * but hoop__ib_publish are pure, so that tests can drive them from tables.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "hoop_build_config.h"
#include "transport/ib.h"

const char *hoop__ib_state_name(int state) {
  static const char *const names[] = {"NOP",   "DOWN",   "INIT",
                                      "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  return state >= 0 && state < HOOP_PORT_STATE_COUNT ? names[state] : "?";
}

const char *hoop__ib_link_layer_name(int link_layer) {
  return link_layer == HOOP_LINK_IB    ? "InfiniBand"
         : link_layer == HOOP_LINK_ETH ? "Ethernet (RoCE)"
                                       : "?";
}

const char *hoop__ib_gid_type_name(int type) {
  static const char *const names[] = {"none", "IB", "RoCE v1", "RoCE v2"};
  return type >= 0 && type < HOOP_GID_TYPE_COUNT ? names[type] : "?";
}

const char *hoop__ib_gid_str(const uint8_t raw[16],
                             char buf[HOOP_IB_GID_STRLEN]) {
  if (inet_ntop(AF_INET6, raw, buf, HOOP_IB_GID_STRLEN) == NULL)
    snprintf(buf, HOOP_IB_GID_STRLEN, "?");
  return buf;
}

bool hoop__ib_gid_is_ipv4(const uint8_t raw[16]) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(raw, mapped, sizeof mapped) == 0;
}

static bool gid_is_link_local(const uint8_t raw[16]) {
  return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
}

/*
 * How much a RoCE GID is worth using: version 2 (routable over UDP/IP)
 * first, then an IPv4 address (what RoCE networks are mostly set up
 * for), then an address that leaves the link.
 */
static int roce_rank(const struct hoop_ib_gid *g) {
  return (g->type == HOOP_GID_ROCE_V2) * 4 + hoop__ib_gid_is_ipv4(g->raw) * 2 +
         !gid_is_link_local(g->raw);
}

bool hoop__ib_choose_gid(const struct hoop_ib_port *port, int gid_index,
                         struct hoop_ib_gid *out, char *why, size_t why_len) {
  const struct hoop_ib_gid *best = NULL;
  for (int i = 0; i < port->ngids; i++) {
    const struct hoop_ib_gid *g = &port->gids[i];
    if (gid_index >= 0) {
      if (g->index == gid_index)
        best = g;
    } else if (best == NULL || (port->link_layer == HOOP_LINK_ETH &&
                                roce_rank(g) > roce_rank(best))) {
      best = g;
    }
  }
  if (best == NULL) {
    if (gid_index >= 0)
      snprintf(why, why_len, "%s port %u has no GID at index %d "
               "(HOOP_IB_GID_INDEX)", port->device, port->port, gid_index);
    else
      snprintf(why, why_len, "%s port %u has no GID (on Ethernet, its "
               "network interface has no address)", port->device, port->port);
    return false;
  }
  *out = *best;
  return true;
}

void hoop__ib_describe(const struct hoop_ib_port *port, int gid_index,
                       struct hoop_rdma_port *out) {
  memset(out, 0, sizeof *out);
  out->status = HOOP_RDMA_PORT;
  out->port = port->port;
  out->state = port->state;
  out->link_layer = port->link_layer;
  out->mtu = port->mtu;
  out->lid = port->lid;
  snprintf(out->device, sizeof out->device, "%s", port->device);
  out->gid_forced = gid_index >= 0;
  out->gid_index = gid_index >= 0 ? (uint8_t)gid_index : 0;
  struct hoop_ib_gid g;
  char unused[8];
  if (hoop__ib_choose_gid(port, gid_index, &g, unused, sizeof unused)) {
    out->gid_type = g.type;
    out->gid_index = g.index;
    memcpy(out->gid, g.raw, sizeof out->gid);
  }
}

/* "mlx5_0:1, mlx5_1:1": the ports found, for a filter that kept none. */
static void list_ports(const struct hoop_ib_port *ports, int n, char *buf,
                       size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s:%u",
                             i ? ", " : "", ports[i].device, ports[i].port);
}

void hoop__ib_publish(struct hoop_rdma_port *out, char *why, size_t why_len) {
  memset(out, 0, sizeof *out);
  struct hoop_ib_settings s;
  if (!hoop__ib_settings_read(&s, why, why_len)) {
    out->status = HOOP_RDMA_BAD_SETTING;
    return;
  }
  struct hoop_ib_port *ports;
  int n;
  if (!hoop__ib_discover(&ports, &n, why, why_len)) {
    out->status = HOOP_RDMA_VERBS_ERROR;
    return;
  }
  if (n == 0) {
    out->status = HOOP_HAVE_VERBS ? HOOP_RDMA_NO_DEVICE : HOOP_RDMA_NOT_BUILT;
    return;
  }
  char found[200];
  list_ports(ports, n, found, sizeof found);
  n = hoop__ib_hca_filter(s.hca, ports, n);
  if (n <= 0) {
    snprintf(why, why_len, "HOOP_IB_HCA=%s selects none of the ports (%s)",
             s.hca, found);
    out->status = HOOP_RDMA_NO_MATCH;
    free(ports);
    return;
  }
  int pick = 0;
  for (int i = n - 1; i >= 0; i--)
    if (ports[i].state == HOOP_PORT_ACTIVE)
      pick = i;
  hoop__ib_describe(&ports[pick], s.gid_index, out);
  snprintf(why, why_len, "%s port %u (%s, %s)", ports[pick].device,
           ports[pick].port, hoop__ib_state_name(ports[pick].state),
           hoop__ib_link_layer_name(ports[pick].link_layer));
  free(ports);
}

/* Why a rank that published `p` has no port to offer, or NULL. */
static const char *no_port(const struct hoop_rdma_port *p) {
  switch (p->status) {
  case HOOP_RDMA_PORT: return NULL;
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
             p->device, p->port, hoop__ib_state_name(p->state));
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
             hoop__ib_link_layer_name(self->link_layer), peer_rank,
             peer->device, peer->port,
             hoop__ib_link_layer_name(peer->link_layer));
    return false;
  }
  char a[HOOP_IB_GID_STRLEN], b[HOOP_IB_GID_STRLEN];
  if (self->link_layer == HOOP_LINK_IB) {
    /* Across subnets a packet needs a router and a GRH; neither is here. */
    if (memcmp(self->gid, peer->gid, 8) != 0) {
      snprintf(why, why_len, "ranks %d and %d are on different InfiniBand "
               "subnets (GIDs %s and %s)", self_rank, peer_rank,
               hoop__ib_gid_str(self->gid, a), hoop__ib_gid_str(peer->gid, b));
      return false;
    }
  } else if (self->gid_type != peer->gid_type) {
    snprintf(why, why_len, "rank %d's GID (index %u) is %s but rank %d's "
             "(index %u) is %s", self_rank, self->gid_index,
             hoop__ib_gid_type_name(self->gid_type), peer_rank,
             peer->gid_index, hoop__ib_gid_type_name(peer->gid_type));
    return false;
  } else if (self->gid_type == HOOP_GID_ROCE_V2 &&
             hoop__ib_gid_is_ipv4(self->gid) !=
                 hoop__ib_gid_is_ipv4(peer->gid)) {
    snprintf(why, why_len, "ranks %d and %d have RoCE v2 GIDs of different "
             "address families (%s and %s)", self_rank, peer_rank,
             hoop__ib_gid_str(self->gid, a), hoop__ib_gid_str(peer->gid, b));
    return false;
  }
  snprintf(why, why_len, "%s:%u and %s:%u, %s", self->device, self->port,
           peer->device, peer->port,
           self->link_layer == HOOP_LINK_IB
               ? "InfiniBand"
               : hoop__ib_gid_type_name(self->gid_type));
  return true;
}
