/*
 * The one message of the shm transport that crosses between processes:
 * the segment the lower rank offers over the set-up socket.  Apart from
 * shm.c so that its fuzz target (tests/fuzz) can reach the parser, and
 * the tests its one hook.
 */
#ifndef HOOP_SHM_H
#define HOOP_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hoop_shm_offer {
  char name[64];
  uint64_t segment_bytes;
  uint64_t ring_bytes;
  uint64_t slot_bytes;
};

/*
 * Bounds an offer of `len` bytes: a name "/hoop-..." of letters, digits
 * and dashes that ends within its field; slots of 4K-64M, a multiple of
 * 64; 2-64 slots per ring (the bounds HOOP_SHM_SLOT_BYTES and
 * HOOP_SHM_SLOTS are held to); and a segment of exactly the header and
 * two rings.  Returns true, or false with the reason in `why`.
 */
bool hoop__shm_offer_parse(const void *bytes, size_t len,
                           struct hoop_shm_offer *out, char *why,
                           size_t why_len);

/*
 * For tests: connections made while this is set grow their rings with
 * posix_fallocate, as on kernels without MADV_POPULATE_WRITE (before
 * Linux 5.14), instead of populating the mapping.
 */
extern bool hoop__shm_grow_by_fallocate;

#endif /* HOOP_SHM_H */
