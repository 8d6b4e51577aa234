/*
 * 64-bit FNV-1a, the one hash hoop uses for ids and agreement checks: it
 * needs no table, is the same on every rank and build, and spreads short
 * texts (addresses, host names) well enough for equality tests.
 */
#ifndef HOOP_HASH_H
#define HOOP_HASH_H

#include <stdint.h>

#define HOOP_FNV1A_BASIS 0xcbf29ce484222325ULL
#define HOOP_FNV1A_PRIME 0x100000001b3ULL

/*
 * One FNV-1a step.  Standard FNV-1a feeds bytes; callers that fold in
 * whole numbers (message sizes, an inode) feed each as one value, which
 * is as good for telling lists of numbers apart and cheaper.
 */
static inline uint64_t hoop__fnv1a_step(uint64_t h, uint64_t value) {
  return (h ^ value) * HOOP_FNV1A_PRIME;
}

/* Continues hash `h` (HOOP_FNV1A_BASIS to start) with the bytes of `text`. */
static inline uint64_t hoop__fnv1a_text(uint64_t h, const char *text) {
  for (const char *p = text; *p != '\0'; p++)
    h = hoop__fnv1a_step(h, (unsigned char)*p);
  return h;
}

#endif /* HOOP_HASH_H */
