/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), the only cryptography
 * hoop needs: the job's key from a token and the MACs of auth.c.  They are
 * hoop's own rather than libcrypto's so that libhoop.so and libnccl.so.2
 * load wherever the C runtime does, and so that authentication never
 * depends on which OpenSSL, if any, a machine has (docs/security.md).
 * Every function wipes the copies of its input it kept, which may be
 * secrets (a token, a key).
 */
#ifndef HOOP_SHA256_H
#define HOOP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define HOOP_SHA256_BYTES 32
#define HOOP_SHA256_BLOCK_BYTES 64

struct hoop_sha256 {
  uint32_t state[8];
  uint64_t length; /* bytes hashed so far */
  uint8_t block[HOOP_SHA256_BLOCK_BYTES];
  size_t used; /* bytes of `block` filled */
};

void hoop__sha256_init(struct hoop_sha256 *s);
void hoop__sha256_update(struct hoop_sha256 *s, const void *data, size_t len);
/* Writes the digest and wipes `s`, which needs init again to be reused. */
void hoop__sha256_final(struct hoop_sha256 *s, uint8_t out[HOOP_SHA256_BYTES]);

void hoop__sha256(const void *data, size_t len,
                  uint8_t out[HOOP_SHA256_BYTES]);

/* HMAC-SHA256 under a key of any length (longer than a block: its hash). */
void hoop__hmac_sha256(const void *key, size_t key_len, const void *msg,
                       size_t msg_len, uint8_t out[HOOP_SHA256_BYTES]);

#endif /* HOOP_SHA256_H */
