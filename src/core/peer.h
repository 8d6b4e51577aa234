/*
 * What every rank publishes about itself at bootstrap.  Apart from comm.h
 * so that transports can judge a pair of ranks (can_connect) without
 * seeing the communicator.
 */
#ifndef HOOP_PEER_H
#define HOOP_PEER_H

#include <stdint.h>

#include "core/socket.h"

/* What a rank can do, published at bootstrap. */
#define HOOP_CAP_SHM 1u /* can create POSIX shared memory segments */

/*
 * The RDMA port a rank would use, as plain numbers that know nothing of
 * verbs, so that a transport can judge a pair from what both published.
 * Only a HOOP_RDMA_PORT description has its other fields set.
 */
enum hoop_rdma_status {
  HOOP_RDMA_NOT_PROBED = 0, /* it did not look (core/rdma.h says when) */
  HOOP_RDMA_NO_DEVICE,     /* the kernel lists no RDMA device */
  HOOP_RDMA_NOT_BUILT,     /* this build has no libibverbs */
  HOOP_RDMA_BAD_SETTING,   /* a HOOP_IB_* setting is malformed */
  HOOP_RDMA_NO_MATCH,      /* HOOP_IB_HCA selects none of the ports */
  HOOP_RDMA_VERBS_ERROR,   /* a verbs call failed while looking */
  HOOP_RDMA_PORT,          /* a port is described */
  HOOP_RDMA_STATUS_COUNT
};

/* The InfiniBand specification's port states (ibv_port_state's values). */
enum hoop_port_state {
  HOOP_PORT_NOP = 0,
  HOOP_PORT_DOWN,
  HOOP_PORT_INIT,
  HOOP_PORT_ARMED,
  HOOP_PORT_ACTIVE,
  HOOP_PORT_ACTIVE_DEFER,
  HOOP_PORT_STATE_COUNT
};

enum hoop_link_layer {
  HOOP_LINK_NONE = 0,
  HOOP_LINK_IB,  /* InfiniBand (verbs reports older IB ports unspecified) */
  HOOP_LINK_ETH, /* Ethernet: RoCE */
  HOOP_LINK_COUNT
};

enum hoop_gid_type {
  HOOP_GID_NONE = 0, /* no GID chosen (none usable, or none at the index) */
  HOOP_GID_IB,
  HOOP_GID_ROCE_V1,
  HOOP_GID_ROCE_V2,
  HOOP_GID_TYPE_COUNT
};

/* The MTU as verbs numbers it: 1 is 256 bytes, 5 is 4096. */
#define HOOP_MTU_MIN 1
#define HOOP_MTU_MAX 5

struct hoop_rdma_port {
  uint8_t status;     /* enum hoop_rdma_status */
  uint8_t port;       /* 1..255 */
  uint8_t state;      /* enum hoop_port_state */
  uint8_t link_layer; /* enum hoop_link_layer */
  uint8_t mtu;        /* active MTU, HOOP_MTU_MIN..HOOP_MTU_MAX */
  uint8_t gid_type;   /* enum hoop_gid_type of the chosen GID */
  uint8_t gid_index;  /* the chosen GID's index in the port's table */
  uint8_t gid_forced; /* 1: HOOP_IB_GID_INDEX chose it, 0: chosen alone */
  uint16_t lid;
  uint8_t reserved[6];
  uint8_t gid[16];    /* as the port reports it (network byte order) */
  char device[32];    /* cut to fit; for messages */
};

struct hoop_peer_info {
  struct hoop_addr addr; /* where it accepts data connections */
  uint64_t host_hash;    /* boot id + hostname + network namespace */
  uint64_t machine_hash; /* boot id: ranks sharing this kernel's cores */
  int32_t rank;
  int32_t pid;
  uint32_t caps;         /* HOOP_CAP_* */
  int16_t cuda_devices;  /* present on the host, used or not */
  int16_t verbs_devices;
  char hostname[64];
  struct hoop_rdma_port rdma;
};

#endif /* HOOP_PEER_H */
