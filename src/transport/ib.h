/*
 * The RDMA verbs transport, phase 1 of issue 26: joining two ranks over
 * the RDMA ports they published (struct hoop_rdma_port, transport/rdma.h,
 * which also says how a rank finds its own), each piece testable without
 * an RDMA device.
 *
 *   ib_publish.c   what a rank publishes for ib at bootstrap (its devices
 *                  and port) and the one parser of a peer's
 *   ib_select.c    whether two ranks' published ports can be joined, and
 *                  why not
 *   ib_conninfo.c  what two ranks will swap to join their queue pairs,
 *                  and its one bounded parser
 *   ib.c           the transport, which only HOOP_TRANSPORT=ib picks; it
 *                  refuses every connection, saying why, because the
 *                  data path (RDMA writes into the peer's FIFO, sharing
 *                  shm's slots and credits) is phase 2
 *
 * Nothing here includes verbs.h: the numbers it passes around are the
 * InfiniBand specification's, in our own enums.
 */
#ifndef HOOP_TRANSPORT_IB_H
#define HOOP_TRANSPORT_IB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/conn.h"
#include "transport/rdma.h"

/* ib's publish, blob_bytes and blob_parse (core/conn.h); ib_publish.c. */
#define HOOP_IB_BLOB_BYTES 68
void hoop__ib_publish(int rank, uint8_t *blob);
bool hoop__ib_blob_parse(const uint8_t *blob, size_t len, int rank,
                         char *why, size_t why_len);

/*
 * What a rank with `port` and `verbs_devices` publishes for ib, in `blob`;
 * returns its length (0 when cap is too small).
 */
size_t hoop__ib_blob_encode(const struct hoop_rdma_port *port,
                            int verbs_devices, uint8_t *blob, size_t cap);

/*
 * The port and device count in what a rank published for ib, which
 * blob_parse has passed; a rank that published nothing reads as "did not
 * look" with no devices.  Either output may be NULL.
 */
void hoop__ib_published(const struct hoop_published *p,
                        struct hoop_rdma_port *port, int *verbs_devices);

/* ib's rank_info: the host's RDMA devices. */
void hoop__ib_rank_info(const struct hoop_published *p,
                        hoop_rank_info_t *info);

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
