/*
 * The RDMA verbs transport, phase 1 of issue 26: everything around the
 * data path, each piece testable without an RDMA device.
 *
 *   ib_settings.c  HOOP_IB_* read and bounded in one place; the
 *                  HOOP_IB_HCA filter over described ports
 *   ib_devices.c   the devices' ports and GIDs through libibverbs, into
 *                  the plain structs below (ib_devices_none.c in a build
 *                  without libibverbs: no devices, saying why)
 *   ib_select.c    the GID a port would use, the port a rank publishes at
 *                  bootstrap (hoop_rdma_port, core/peer.h), and whether
 *                  two ranks' published ports can be joined, and why not
 *   ib_conninfo.c  what two ranks will swap to join their queue pairs,
 *                  and its one bounded parser
 *   ib.c           the transport, which only HOOP_TRANSPORT=ib picks; it
 *                  refuses every connection, saying why, because the
 *                  data path (RDMA writes into the peer's FIFO, sharing
 *                  shm's slots and credits) is phase 2
 *
 * Apart from ib_devices.c nothing here includes verbs.h: the numbers it
 * passes around are the InfiniBand specification's, in our own enums.
 */
#ifndef HOOP_TRANSPORT_IB_H
#define HOOP_TRANSPORT_IB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/peer.h"

/* The HOOP_IB_* settings, bounded. */
struct hoop_ib_settings {
  const char *hca; /* HOOP_IB_HCA, a hoop__port_match list; NULL: all */
  int gid_index;   /* HOOP_IB_GID_INDEX 0..255, or -1: chosen per port */
  int timeout;     /* HOOP_IB_TIMEOUT 1..31: ack timeout 4.096 us * 2^n */
  int retry_cnt;   /* HOOP_IB_RETRY_CNT 0..7 */
  int sl;          /* HOOP_IB_SL 0..15, the service level */
  int tc;          /* HOOP_IB_TC 0..255, the traffic class (RoCE: DSCP) */
};

/* The settings as text, each NULL where its variable is unset. */
struct hoop_ib_setting_texts {
  const char *hca, *gid_index, *timeout, *retry_cnt, *sl, *tc;
};

/*
 * Bounds every setting; false with the first bad one named in `why`
 * ("HOOP_IB_TIMEOUT=40 is outside 1..31 (...)").
 */
bool hoop__ib_settings_parse(const struct hoop_ib_setting_texts *text,
                             struct hoop_ib_settings *out, char *why,
                             size_t why_len);

/* hoop__ib_settings_parse over this process's environment. */
bool hoop__ib_settings_read(struct hoop_ib_settings *out, char *why,
                            size_t why_len);

/* One entry of a port's GID table. */
struct hoop_ib_gid {
  uint8_t raw[16]; /* network byte order */
  uint8_t index;
  uint8_t type; /* enum hoop_gid_type */
};

#define HOOP_IB_MAX_GIDS 256

/* One port of one device, as discovery found it. */
struct hoop_ib_port {
  char device[64];
  uint8_t port;
  uint8_t state;      /* enum hoop_port_state */
  uint8_t link_layer; /* enum hoop_link_layer */
  uint8_t mtu;        /* active MTU, HOOP_MTU_MIN..HOOP_MTU_MAX */
  uint16_t lid;
  int ngids; /* the populated entries, in index order */
  struct hoop_ib_gid gids[HOOP_IB_MAX_GIDS];
};

/*
 * Every port of every RDMA device, in the order verbs lists them, in
 * *ports (free with free()).  True with *nports == 0 when there is no
 * device, `why` saying how that was learnt; false when a verbs call
 * failed, `why` naming the call, the device and the port.
 */
bool hoop__ib_discover(struct hoop_ib_port **ports, int *nports, char *why,
                       size_t why_len);

/*
 * Keeps, in order, the ports that HOOP_IB_HCA's list `spec` selects (NULL
 * selects all); returns how many, or -1 when `spec` is malformed.
 */
int hoop__ib_hca_filter(const char *spec, struct hoop_ib_port *ports,
                        int nports);

/*
 * The GID a queue pair on `port` would use: the one at `gid_index`, or
 * with -1, on InfiniBand index 0 and on Ethernet the best by RoCE v2
 * over v1 and an IPv4 address over IPv6.  False, saying why, when there
 * is none.
 */
bool hoop__ib_choose_gid(const struct hoop_ib_port *port, int gid_index,
                         struct hoop_ib_gid *out, char *why, size_t why_len);

/*
 * What a rank publishes for `port`.  A port without a GID to use is
 * still described, with gid_type HOOP_GID_NONE, so that its peers can
 * say so.
 */
void hoop__ib_describe(const struct hoop_ib_port *port, int gid_index,
                       struct hoop_rdma_port *out);

/*
 * The port this rank publishes at bootstrap: the first ACTIVE port that
 * HOOP_IB_HCA selects, else the first it selects.  Without one, a status
 * saying why, with the details in `why` for the log and for messages.
 */
void hoop__ib_publish(struct hoop_rdma_port *out, char *why, size_t why_len);

/*
 * Whether ranks `self_rank` and `peer_rank`, publishing `self` and
 * `peer`, can be joined by ib: both have an ACTIVE port of the same link
 * layer; on InfiniBand their GIDs share the subnet prefix; on Ethernet
 * both have a GID, of the same RoCE version and address family.  When
 * not, `why` says which rank lacks what.
 */
bool hoop__ib_select(const struct hoop_rdma_port *self, int self_rank,
                     const struct hoop_rdma_port *peer, int peer_rank,
                     char *why, size_t why_len);

/* "ACTIVE", "InfiniBand", "RoCE v2": for messages and hoop-info. */
const char *hoop__ib_state_name(int state);
const char *hoop__ib_link_layer_name(int link_layer);
const char *hoop__ib_gid_type_name(int type);

/* A GID as IPv6 text ("fe80::1", "::ffff:10.0.0.2"). */
#define HOOP_IB_GID_STRLEN 48
const char *hoop__ib_gid_str(const uint8_t raw[16],
                             char buf[HOOP_IB_GID_STRLEN]);

/* Whether a RoCE GID holds an IPv4 address (::ffff:a.b.c.d). */
bool hoop__ib_gid_is_ipv4(const uint8_t raw[16]);

#define HOOP_IB_CONNINFO_MAGIC 0x686f6962u /* "hoib" */
#define HOOP_IB_CONNINFO_VERSION 1u

/*
 * What a rank sends its peer to join their queue pairs: its port's
 * address, its queue pair, and the FIFO of slots the peer will write
 * into (sizes under the bounds HOOP_SHM_SLOT_BYTES and HOOP_SHM_SLOTS
 * have, since both transports will share one FIFO).  Fixed width, no
 * padding; both ends are one build of hoop on hosts of one byte order.
 */
struct hoop_ib_conninfo {
  uint32_t magic;
  uint32_t version;
  uint16_t lid;       /* InfiniBand: 1..0xbfff; Ethernet: 0 */
  uint8_t mtu;        /* HOOP_MTU_MIN..HOOP_MTU_MAX */
  uint8_t link_layer; /* enum hoop_link_layer of the sender's port */
  uint32_t qpn;       /* 24 bits; 0 and 1 are the special queue pairs */
  uint32_t psn;       /* 24 bits */
  uint32_t fifo_rkey; /* any value: the key is the peer's to check */
  uint64_t fifo_addr; /* 64-byte aligned; the FIFO does not wrap */
  uint32_t slot_bytes;
  uint32_t slots;
  uint8_t gid[16]; /* Ethernet: not zero */
};

#define HOOP_IB_SLOT_BYTES_MIN 4096u
#define HOOP_IB_SLOT_BYTES_MAX (64u << 20)
#define HOOP_IB_SLOTS_MIN 2u
#define HOOP_IB_SLOTS_MAX 64u

/*
 * A conninfo of `len` bytes for a port of `link_layer`: its magic and
 * version, the sender's port of the same link layer, and every field
 * within the bounds above.  False, saying why, otherwise.
 */
bool hoop__ib_conninfo_parse(const void *bytes, size_t len, int link_layer,
                             struct hoop_ib_conninfo *out, char *why,
                             size_t why_len);

#endif /* HOOP_TRANSPORT_IB_H */
