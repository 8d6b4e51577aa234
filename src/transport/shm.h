/*
 * The one message of the shm transport that crosses between processes:
 * the segment the lower rank offers over the set-up socket, and the
 * choice of stores into the FIFO.  Apart from shm.c so that the fuzz
 * target (tests/fuzz) and the unit tests can reach them.
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

/* Pieces from this size go around the caches where shm_around_from says. */
#define HOOP_SHM_AROUND_BYTES (64 * 1024)

/*
 * From how many bytes a piece written into the FIFO goes around the
 * caches (0: never), given HOOP_SHM_STORES (enum hoop_shm_stores) and the
 * last-level cache ids of the two ranks' CPUs when they connected (-1:
 * unknown).  AUTO: when both are known and differ.
 */
size_t hoop__shm_around_from(int stores, int llc_self, int llc_peer);

#endif /* HOOP_SHM_H */
