/*
 * Device discovery through libibverbs: every port of every device, with
 * its state, link layer, LID, active MTU and populated GIDs, copied into
 * plain structs (transport/rdma.h) so that nothing past this file sees verbs.h.
 * The calls go through transport/ibv_loader.h: a host without libibverbs.so.1
 * has no device to find.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ibv_loader.h"
#include "core/log.h"
#include "transport/rdma.h"

static uint8_t link_layer_of(uint8_t verbs) {
  /* Verbs reports ports from before RoCE as unspecified: they are IB. */
  return verbs == IBV_LINK_LAYER_ETHERNET ? HOOP_LINK_ETH : HOOP_LINK_IB;
}

static uint8_t gid_type_of(uint32_t verbs) {
  switch (verbs) {
  case IBV_GID_TYPE_ROCE_V1: return HOOP_GID_ROCE_V1;
  case IBV_GID_TYPE_ROCE_V2: return HOOP_GID_ROCE_V2;
  default: return HOOP_GID_IB;
  }
}

static bool gid_is_zero(const uint8_t raw[16]) {
  static const uint8_t zero[16];
  return memcmp(raw, zero, sizeof zero) == 0;
}

/*
 * The populated entries of the port's GID table.  ENODATA is how verbs
 * says an entry is empty; RoCE tables fill only as addresses appear.
 */
static bool read_gids(const struct hoop_ibv *ibv, struct ibv_context *ctx,
                      const char *device, struct hoop_rdma_local_port *p,
                      int table_len, char *why, size_t why_len) {
  int n = table_len < HOOP_RDMA_MAX_GIDS ? table_len : HOOP_RDMA_MAX_GIDS;
  p->ngids = 0;
  for (int i = 0; i < n; i++) {
    struct ibv_gid_entry e;
    int rc = ibv->query_gid_ex(ctx, p->port, (uint32_t)i, &e, 0, sizeof e);
    if (rc == ENODATA)
      continue;
    if (rc != 0) {
      snprintf(why, why_len, "ibv_query_gid_ex(%s, port %u, index %d): %s",
               device, p->port, i, strerror(rc));
      return false;
    }
    if (gid_is_zero(e.gid.raw))
      continue;
    struct hoop_rdma_gid *g = &p->gids[p->ngids++];
    memcpy(g->raw, e.gid.raw, sizeof g->raw);
    g->index = (uint8_t)i;
    g->type = gid_type_of(e.gid_type);
  }
  return true;
}

static bool read_port(const struct hoop_ibv *ibv, struct ibv_context *ctx,
                      const char *device, uint8_t port,
                      struct hoop_rdma_local_port *p, char *why,
                      size_t why_len) {
  struct ibv_port_attr attr;
  int rc = hoop__ibv_query_port(ibv, ctx, port, &attr);
  if (rc != 0) {
    snprintf(why, why_len, "ibv_query_port(%s, port %u): %s", device, port,
             strerror(rc));
    return false;
  }
  memset(p, 0, offsetof(struct hoop_rdma_local_port, gids));
  snprintf(p->device, sizeof p->device, "%s", device);
  p->port = port;
  p->state = (int)attr.state < HOOP_PORT_STATE_COUNT ? (uint8_t)attr.state
                                                : HOOP_PORT_NOP;
  p->link_layer = link_layer_of(attr.link_layer);
  p->mtu = attr.active_mtu >= HOOP_MTU_MIN && attr.active_mtu <= HOOP_MTU_MAX
               ? (uint8_t)attr.active_mtu
               : HOOP_MTU_MIN;
  p->lid = attr.lid;
  return read_gids(ibv, ctx, device, p, attr.gid_tbl_len, why, why_len);
}

/* Appends the ports of one device to *ports, growing it. */
static bool read_device(const struct hoop_ibv *ibv, struct ibv_device *dev,
                        struct hoop_rdma_local_port **ports, int *nports,
                        char *why, size_t why_len) {
  const char *name = ibv->get_device_name(dev);
  bool ok = false;
  struct ibv_context *ctx = ibv->open_device(dev);
  if (ctx == NULL) {
    snprintf(why, why_len, "ibv_open_device(%s): %s", name, strerror(errno));
    return false;
  }
  struct ibv_device_attr attr;
  int rc = ibv->query_device(ctx, &attr);
  if (rc != 0) {
    snprintf(why, why_len, "ibv_query_device(%s): %s", name, strerror(rc));
    goto out_close;
  }
  struct hoop_rdma_local_port *grown =
      realloc(*ports, sizeof **ports * (size_t)(*nports + attr.phys_port_cnt));
  if (grown == NULL) {
    snprintf(why, why_len, "no memory for the ports of %s", name);
    goto out_close;
  }
  *ports = grown;
  for (int port = 1; port <= attr.phys_port_cnt; port++) {
    if (!read_port(ibv, ctx, name, (uint8_t)port, &grown[*nports], why,
                   why_len))
      goto out_close;
    (*nports)++;
  }
  ok = true;
out_close:
  ibv->close_device(ctx);
  return ok;
}

/*
 * Before a kernel 5.13 a child forked after memory was registered (data
 * loaders fork) shares the parent's registered pages and the provider's
 * queue buffers copy-on-write, and the parent's next write copies away
 * the page the adapter uses.  libibverbs keeps such memory out of
 * children only if asked before its first other call, and says when the
 * kernel makes that unneeded.
 */
static void fork_safe_once(void) {
  /* Without the library there is no verbs call to make safe. */
  const struct hoop_ibv *ibv = hoop__ibv(NULL, 0);
  if (ibv == NULL || ibv->is_fork_initialized() != IBV_FORK_DISABLED)
    return;
  int err = ibv->fork_init();
  if (err != 0)
    HOOP_WARN("ibv_fork_init: %s: a process that forks after its "
              "communicator exists may corrupt its RDMA queues",
              strerror(err));
}

void hoop__rdma_fork_safe(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, fork_safe_once);
}

bool hoop__rdma_discover(struct hoop_rdma_local_port **ports, int *nports,
                         char *why, size_t why_len) {
  *ports = NULL;
  *nports = 0;
  const struct hoop_ibv *ibv = hoop__ibv(why, why_len);
  if (ibv == NULL)
    return true;
  hoop__rdma_fork_safe();
  int ndev = 0;
  errno = 0;
  struct ibv_device **list = ibv->get_device_list(&ndev);
  if (list == NULL) {
    /* ENOSYS: the kernel has no RDMA subsystem at all. */
    snprintf(why, why_len, "ibv_get_device_list: %s%s", strerror(errno),
             errno == ENOSYS ? " (this kernel has no RDMA support)" : "");
    return errno == ENOSYS;
  }
  bool ok = true;
  for (int i = 0; i < ndev && ok; i++)
    ok = read_device(ibv, list[i], ports, nports, why, why_len);
  ibv->free_device_list(list);
  if (!ok) {
    free(*ports);
    *ports = NULL;
    *nports = 0;
  } else if (*nports == 0) {
    snprintf(why, why_len, "ibv_get_device_list lists %s", ndev == 0
             ? "no device" : "devices without ports");
  }
  return ok;
}
