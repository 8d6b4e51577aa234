/*
 * What every rank publishes about itself at bootstrap.  Apart from comm.h
 * so that transports can judge a pair of ranks (can_connect) without
 * seeing the communicator.
 */
#ifndef HOOP_PEER_H
#define HOOP_PEER_H

#include <stdint.h>

#include "core/socket.h"

/*
 * Transports a build may register (core/conn.h), and the room each has in
 * a rank's published info for what it alone reads: core carries those
 * bytes to every rank and bounds their length, and the transport's own
 * parser bounds the rest.
 */
#define HOOP_MAX_TRANSPORTS 4
#define HOOP_BLOB_BYTES 118
#define HOOP_BLOB_NAME_BYTES 8

struct hoop_blob {
  char transport[HOOP_BLOB_NAME_BYTES]; /* its publisher, NUL-padded */
  uint16_t len;                         /* bytes of data used */
  uint8_t data[HOOP_BLOB_BYTES];
};

struct hoop_peer_info {
  struct hoop_addr addr; /* where it accepts data connections */
  uint64_t host_hash;    /* boot id + hostname + network namespace */
  uint64_t machine_hash; /* boot id: ranks sharing this kernel's cores */
  int32_t rank;
  int32_t pid;
  int16_t cuda_devices;  /* present on the host, used or not */
  int16_t reserved[3];
  char hostname[64];
  struct hoop_blob blobs[HOOP_MAX_TRANSPORTS]; /* in registry order */
};

/*
 * Entries in a directory, or 0 when it does not exist: devices as the
 * kernel lists them (its driver directories), which a rank publishes
 * whether or not this build can use them.
 */
int16_t hoop__dir_entries(const char *dir);

#endif /* HOOP_PEER_H */
