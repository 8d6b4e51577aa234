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
};

#endif /* HOOP_PEER_H */
