/*
 * Which of this host's RDMA ports and GIDs a rank would use, and what it
 * publishes about them at bootstrap.  Looking opens every RDMA device,
 * which no job that cannot use ib should pay for on each
 * hoop_comm_init, so a rank looks only when HOOP_TRANSPORT=ib, or a tool
 * asked; otherwise it publishes that it did not look.  All but
 * hoop__rdma_publish are pure, so that tests can drive them from tables.
 */
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/param.h"
#include "transport/rdma.h"
#include "hoop_build_config.h"

const char *hoop__rdma_state_name(int state) {
  static const char *const names[] = {"NOP",   "DOWN",   "INIT",
                                      "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  return state >= 0 && state < HOOP_PORT_STATE_COUNT ? names[state] : "?";
}

const char *hoop__rdma_link_layer_name(int link_layer) {
  return link_layer == HOOP_LINK_IB    ? "InfiniBand"
         : link_layer == HOOP_LINK_ETH ? "Ethernet (RoCE)"
                                       : "?";
}

const char *hoop__rdma_gid_type_name(int type) {
  static const char *const names[] = {"none", "IB", "RoCE v1", "RoCE v2"};
  return type >= 0 && type < HOOP_GID_TYPE_COUNT ? names[type] : "?";
}

const char *hoop__rdma_gid_str(const uint8_t raw[16],
                               char buf[HOOP_RDMA_GID_STRLEN]) {
  if (inet_ntop(AF_INET6, raw, buf, HOOP_RDMA_GID_STRLEN) == NULL)
    snprintf(buf, HOOP_RDMA_GID_STRLEN, "?");
  return buf;
}

bool hoop__rdma_gid_is_ipv4(const uint8_t raw[16]) {
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
static int roce_rank(const struct hoop_rdma_gid *g) {
  return (g->type == HOOP_GID_ROCE_V2) * 4 +
         hoop__rdma_gid_is_ipv4(g->raw) * 2 + !gid_is_link_local(g->raw);
}

bool hoop__rdma_choose_gid(const struct hoop_rdma_local_port *port,
                           int gid_index, struct hoop_rdma_gid *out, char *why,
                           size_t why_len) {
  const struct hoop_rdma_gid *best = NULL;
  for (int i = 0; i < port->ngids; i++) {
    const struct hoop_rdma_gid *g = &port->gids[i];
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

void hoop__rdma_describe(const struct hoop_rdma_local_port *port, int gid_index,
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
  struct hoop_rdma_gid g;
  char unused[8];
  if (hoop__rdma_choose_gid(port, gid_index, &g, unused, sizeof unused)) {
    out->gid_type = g.type;
    out->gid_index = g.index;
    memcpy(out->gid, g.raw, sizeof out->gid);
  }
}

/* "mlx5_0:1, mlx5_1:1": the ports found, for a filter that kept none. */
static void list_ports(const struct hoop_rdma_local_port *ports, int n,
                       char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s:%u",
                             i ? ", " : "", ports[i].device, ports[i].port);
}

static atomic_bool probe_always;

/* Set by tests only, before any communicator exists, so a plain load. */
static hoop_rdma_discover_fn discover_hook;

void hoop__rdma_set_discover(hoop_rdma_discover_fn discover) {
  discover_hook = discover;
}

void hoop__rdma_probe_always(void) { atomic_store(&probe_always, true); }

/*
 * Until ib has run on RDMA hardware only HOOP_TRANSPORT=ib picks it
 * (transport.c), so that is the one job whose ranks need to know their
 * ports.  Then a
 * bad HOOP_IB_* value fails that job's init, and no other job's.
 */
static bool probe_wanted(void) {
  const char *transport = hoop__param_transport();
  return atomic_load(&probe_always) ||
         (transport != NULL && strcmp(transport, "ib") == 0);
}

void hoop__rdma_publish(struct hoop_rdma_port *out, char *why, size_t why_len) {
  memset(out, 0, sizeof *out);
  if (!probe_wanted()) {
    out->status = HOOP_RDMA_NOT_PROBED;
    snprintf(why, why_len, "not probed: the ib transport is chosen only with "
                           "HOOP_TRANSPORT=ib until it has run on RDMA "
                           "hardware");
    return;
  }
  struct hoop_rdma_settings s;
  if (!hoop__rdma_settings_read(&s, why, why_len)) {
    out->status = HOOP_RDMA_BAD_SETTING;
    return;
  }
  struct hoop_rdma_local_port *ports;
  int n;
  hoop_rdma_discover_fn discover =
      discover_hook != NULL ? discover_hook : hoop__rdma_discover;
  if (!discover(&ports, &n, why, why_len)) {
    out->status = HOOP_RDMA_VERBS_ERROR;
    return;
  }
  if (n == 0) {
    out->status = HOOP_HAVE_VERBS ? HOOP_RDMA_NO_DEVICE : HOOP_RDMA_NOT_BUILT;
    free(ports);
    return;
  }
  char found[200];
  list_ports(ports, n, found, sizeof found);
  n = hoop__rdma_hca_filter(s.hca, ports, n);
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
  hoop__rdma_describe(&ports[pick], s.gid_index, out);
  snprintf(why, why_len, "%s port %u (%s, %s)", ports[pick].device,
           ports[pick].port, hoop__rdma_state_name(ports[pick].state),
           hoop__rdma_link_layer_name(ports[pick].link_layer));
  free(ports);
}
