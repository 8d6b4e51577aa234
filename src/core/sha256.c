/* SHA-256 as FIPS 180-4 section 6.2 gives it, and HMAC as RFC 2104 does. */
#include "core/sha256.h"

#include <string.h>

/* The first 32 bits of the fractional parts of the cube roots of the first
   64 primes (FIPS 180-4, 4.2.2). */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, unsigned n) {
  return (x >> n) | (x << (32 - n));
}

static uint32_t get_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

static void put_be32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void compress(uint32_t state[8], const uint8_t block[64]) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = get_be32(block + 4 * t);
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) +
                  ((e & f) ^ (~e & g)) + K[t] + w[t];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) +
                  ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
  /* The schedule is the block itself, which may be a key pad. */
  explicit_bzero(w, sizeof w);
}

void hoop__sha256_init(struct hoop_sha256 *s) {
  /* The first 32 bits of the fractional parts of the square roots of the
     first 8 primes (FIPS 180-4, 5.3.3). */
  static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                      0xa54ff53a, 0x510e527f, 0x9b05688c,
                                      0x1f83d9ab, 0x5be0cd19};
  memcpy(s->state, initial, sizeof initial);
  s->length = 0;
  s->used = 0;
}

void hoop__sha256_update(struct hoop_sha256 *s, const void *data, size_t len) {
  const uint8_t *p = data;
  s->length += len;
  while (len > 0) {
    size_t n = sizeof s->block - s->used;
    if (n > len)
      n = len;
    memcpy(s->block + s->used, p, n);
    s->used += n;
    p += n;
    len -= n;
    if (s->used == sizeof s->block) {
      compress(s->state, s->block);
      s->used = 0;
    }
  }
}

void hoop__sha256_final(struct hoop_sha256 *s,
                        uint8_t out[HOOP_SHA256_BYTES]) {
  /* Padding (5.1.1): a 1 bit, zeros up to 8 bytes short of a block's end,
     then the message's length in bits, big-endian. */
  uint64_t bits = s->length * 8;
  s->block[s->used++] = 0x80;
  if (s->used > sizeof s->block - 8) {
    memset(s->block + s->used, 0, sizeof s->block - s->used);
    compress(s->state, s->block);
    s->used = 0;
  }
  memset(s->block + s->used, 0, sizeof s->block - 8 - s->used);
  put_be32(s->block + 56, (uint32_t)(bits >> 32));
  put_be32(s->block + 60, (uint32_t)bits);
  compress(s->state, s->block);
  for (int i = 0; i < 8; i++)
    put_be32(out + 4 * i, s->state[i]);
  explicit_bzero(s, sizeof *s);
}

void hoop__sha256(const void *data, size_t len,
                  uint8_t out[HOOP_SHA256_BYTES]) {
  struct hoop_sha256 s;
  hoop__sha256_init(&s);
  hoop__sha256_update(&s, data, len);
  hoop__sha256_final(&s, out);
}

void hoop__hmac_sha256(const void *key, size_t key_len, const void *msg,
                       size_t msg_len, uint8_t out[HOOP_SHA256_BYTES]) {
  uint8_t pad[HOOP_SHA256_BLOCK_BYTES] = {0};
  if (key_len > sizeof pad)
    hoop__sha256(key, key_len, pad);
  else if (key_len > 0)
    memcpy(pad, key, key_len);

  /* H((K ^ ipad) || text), then H((K ^ opad) || inner). */
  uint8_t inner[HOOP_SHA256_BYTES];
  struct hoop_sha256 s;
  for (size_t i = 0; i < sizeof pad; i++)
    pad[i] ^= 0x36;
  hoop__sha256_init(&s);
  hoop__sha256_update(&s, pad, sizeof pad);
  hoop__sha256_update(&s, msg, msg_len);
  hoop__sha256_final(&s, inner);
  for (size_t i = 0; i < sizeof pad; i++)
    pad[i] ^= 0x36 ^ 0x5c;
  hoop__sha256_init(&s);
  hoop__sha256_update(&s, pad, sizeof pad);
  hoop__sha256_update(&s, inner, sizeof inner);
  hoop__sha256_final(&s, out);
  explicit_bzero(pad, sizeof pad);
  explicit_bzero(inner, sizeof inner);
}
