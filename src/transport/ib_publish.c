/*
 * What a rank publishes for ib at bootstrap, as its own bytes that the
 * core carries unread (core/conn.h): how many RDMA devices its host has
 * and the port it would use, so that every peer can judge a pair and say
 * why ib cannot join it.  The one parser bounds every field before ib
 * reads any.
 */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "transport/ib.h"
#include "transport/rdma.h"

#define IB_BLOB_VERSION 1

struct ib_blob {
  uint8_t version;
  uint8_t reserved;
  int16_t verbs_devices; /* present on the host (the kernel's view) */
  struct hoop_rdma_port port;
};
_Static_assert(sizeof(struct ib_blob) == HOOP_IB_BLOB_BYTES,
               "ib.h says how many bytes ib publishes");

size_t hoop__ib_blob_encode(const struct hoop_rdma_port *port,
                            int verbs_devices, uint8_t *blob, size_t cap) {
  struct ib_blob b = {.version = IB_BLOB_VERSION,
                      .verbs_devices = (int16_t)verbs_devices,
                      .port = *port};
  if (cap < sizeof b)
    return 0;
  memcpy(blob, &b, sizeof b);
  return sizeof b;
}

void hoop__ib_publish(int rank, uint8_t *blob) {
  struct hoop_rdma_port port;
  char why[256];
  hoop__rdma_publish(&port, why, sizeof why);
  HOOP_INFO("rank %d: RDMA: %s", rank, why);
  hoop__ib_blob_encode(&port, hoop__dir_entries("/sys/class/infiniband"),
                       blob, HOOP_IB_BLOB_BYTES);
}

/*
 * The RDMA port a rank published: a status that exists and, for a
 * described port, numbers within their enums and a device name that ends
 * within its field.
 */
static bool port_parse(const struct hoop_rdma_port *r, int rank, char *why,
                       size_t why_len) {
  if (r->status >= HOOP_RDMA_STATUS_COUNT) {
    snprintf(why, why_len, "rank %d's RDMA port has status %u", rank,
             r->status);
    return false;
  }
  if (r->status != HOOP_RDMA_PORT)
    return true;
  if (r->port < 1 || r->state >= HOOP_PORT_STATE_COUNT ||
      r->link_layer < HOOP_LINK_IB || r->link_layer >= HOOP_LINK_COUNT ||
      r->mtu < HOOP_MTU_MIN || r->mtu > HOOP_MTU_MAX ||
      r->gid_type >= HOOP_GID_TYPE_COUNT || r->gid_forced > 1) {
    snprintf(why, why_len,
             "rank %d's RDMA port has port %u, state %u, link layer %u, "
             "MTU %u, GID type %u and GID setting %u",
             rank, r->port, r->state, r->link_layer, r->mtu, r->gid_type,
             r->gid_forced);
    return false;
  }
  if (memchr(r->device, '\0', sizeof r->device) == NULL) {
    snprintf(why, why_len,
             "rank %d's RDMA device name does not end within its %zu bytes",
             rank, sizeof r->device);
    return false;
  }
  return true;
}

bool hoop__ib_blob_parse(const uint8_t *blob, size_t len, int rank,
                         char *why, size_t why_len) {
  struct ib_blob b;
  memcpy(&b, blob, sizeof b);
  if (b.version != IB_BLOB_VERSION || b.verbs_devices < 0) {
    snprintf(why, why_len, "rank %d's ib facts have version %u and %d RDMA "
             "devices (this hoop: version %u)",
             rank, b.version, b.verbs_devices, IB_BLOB_VERSION);
    return false;
  }
  return port_parse(&b.port, rank, why, why_len);
}

void hoop__ib_published(const struct hoop_published *p,
                        struct hoop_rdma_port *port, int *verbs_devices) {
  struct ib_blob b;
  hoop__published_read(p, &b, sizeof b);
  if (port != NULL)
    *port = b.port;
  if (verbs_devices != NULL)
    *verbs_devices = b.verbs_devices;
}

void hoop__ib_rank_info(const struct hoop_published *p,
                        hoop_rank_info_t *info) {
  int devices;
  hoop__ib_published(p, NULL, &devices);
  info->verbs_devices = devices;
}
