/*
 * The parser of the connection information two ranks swap to join their
 * queue pairs (ib.h), under core/wire.h's rule: every field is bounded
 * here, before anything reads it, and a refusal says which field.
 */
#include <stdio.h>
#include <string.h>

#include "transport/ib.h"

_Static_assert(sizeof(struct hoop_ib_conninfo) == 56,
               "struct hoop_ib_conninfo must have no padding");

#define QPN_MAX 0xffffffu /* queue pair numbers and PSNs are 24 bits */
#define LID_UNICAST_MAX 0xbfffu

static bool zero_gid(const uint8_t gid[16]) {
  static const uint8_t zero[16];
  return memcmp(gid, zero, sizeof zero) == 0;
}

/* The sender's port: its link layer is ours, its address fits it. */
static bool port_fields(const struct hoop_ib_conninfo *c, int link_layer,
                        char *why, size_t why_len) {
  if (c->link_layer != link_layer) {
    snprintf(why, why_len, "a peer port of link layer %u, not %d",
             c->link_layer, link_layer);
    return false;
  }
  if (link_layer == HOOP_LINK_IB && (c->lid == 0 || c->lid > LID_UNICAST_MAX)) {
    snprintf(why, why_len, "LID %#x, not a unicast LID (1..%#x)", c->lid,
             LID_UNICAST_MAX);
    return false;
  }
  /* RoCE addresses by GID alone; a port there has no LID. */
  if (link_layer == HOOP_LINK_ETH && (c->lid != 0 || zero_gid(c->gid))) {
    snprintf(why, why_len, "a RoCE port with LID %#x and %s GID", c->lid,
             zero_gid(c->gid) ? "a zero" : "a");
    return false;
  }
  if (c->mtu < HOOP_MTU_MIN || c->mtu > HOOP_MTU_MAX) {
    snprintf(why, why_len, "MTU %u, not %d..%d (256..4096 bytes)", c->mtu,
             HOOP_MTU_MIN, HOOP_MTU_MAX);
    return false;
  }
  return true;
}

/* The queue pair and the FIFO the peer offers. */
static bool qp_fifo_fields(const struct hoop_ib_conninfo *c, char *why,
                           size_t why_len) {
  if (c->qpn < 2 || c->qpn > QPN_MAX || c->psn > QPN_MAX) {
    snprintf(why, why_len, "queue pair %#x with PSN %#x (24 bits each, "
             "queue pairs 0 and 1 are special)", c->qpn, c->psn);
    return false;
  }
  if (c->slot_bytes < HOOP_IB_SLOT_BYTES_MIN ||
      c->slot_bytes > HOOP_IB_SLOT_BYTES_MAX || c->slot_bytes % 64 != 0 ||
      c->slots < HOOP_IB_SLOTS_MIN || c->slots > HOOP_IB_SLOTS_MAX) {
    snprintf(why, why_len, "a FIFO of %u slots of %u bytes (%u..%u slots "
             "of 4 KiB..64 MiB, a multiple of 64)", c->slots, c->slot_bytes,
             HOOP_IB_SLOTS_MIN, HOOP_IB_SLOTS_MAX);
    return false;
  }
  /* The bounds above keep the FIFO's size within 32 bits times 64. */
  uint64_t bytes = (uint64_t)c->slot_bytes * c->slots;
  if (c->fifo_addr == 0 || c->fifo_addr % 64 != 0 ||
      c->fifo_addr > UINT64_MAX - bytes) {
    snprintf(why, why_len, "a FIFO at %#llx of %llu bytes (it must be "
             "64-byte aligned, not 0, and not wrap)",
             (unsigned long long)c->fifo_addr, (unsigned long long)bytes);
    return false;
  }
  return true;
}

bool hoop__ib_conninfo_parse(const void *bytes, size_t len, int link_layer,
                             struct hoop_ib_conninfo *out, char *why,
                             size_t why_len) {
  struct hoop_ib_conninfo c;
  if (len != sizeof c) {
    snprintf(why, why_len, "ib connection information of %zu bytes, not "
             "%zu", len, sizeof c);
    return false;
  }
  memcpy(&c, bytes, sizeof c);
  if (c.magic != HOOP_IB_CONNINFO_MAGIC ||
      c.version != HOOP_IB_CONNINFO_VERSION) {
    snprintf(why, why_len, "not hoop's ib connection information of this "
             "version (magic %08x, version %u)", c.magic, c.version);
    return false;
  }
  if (!port_fields(&c, link_layer, why, why_len) ||
      !qp_fifo_fields(&c, why, why_len))
    return false;
  *out = c;
  return true;
}
