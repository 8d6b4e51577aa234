/* The job secret and the connection handshake's MACs; see auth.h. */
#include "core/auth.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "core/error.h"
#include "core/sha256.h"

/* A key and a MAC are each one SHA-256 digest. */
_Static_assert(HOOP_AUTH_KEY_BYTES == HOOP_SHA256_BYTES &&
                   HOOP_AUTH_MAC_BYTES == HOOP_SHA256_BYTES,
               "the key and the MACs are SHA-256 digests");

hoop_result_t hoop__auth_random(void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = getrandom((char *)buf + done, len - done, 0);
    if (n > 0)
      done += (size_t)n;
    else if (errno != EINTR)
      return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "getrandom(): %s",
                        strerror(errno));
  }
  return HOOP_SUCCESS;
}

void hoop__auth_wipe(void *buf, size_t len) { explicit_bzero(buf, len); }

void hoop__auth_key_from_token(const char *token, struct hoop_auth_key *key) {
  /* The label, its NUL included, keeps this key apart from any other use
     of the same text. */
  static const char label[] = "hoop job secret v1";
  struct hoop_sha256 s;
  hoop__sha256_init(&s);
  hoop__sha256_update(&s, label, sizeof label);
  hoop__sha256_update(&s, token, strnlen(token, 4096));
  hoop__sha256_final(&s, key->bytes);
}

hoop_result_t hoop__auth_handshake(uint64_t comm_id, int32_t from,
                                   int32_t to, int32_t channel,
                                   struct hoop_handshake *hs) {
  memset(hs, 0, sizeof *hs);
  hs->magic = HOOP_WIRE_MAGIC;
  hs->version = HOOP_WIRE_VERSION;
  hs->comm_id = comm_id;
  hs->from = from;
  hs->to = to;
  hs->channel = channel;
  return hoop__auth_random(hs->nonce, sizeof hs->nonce);
}

static void put32(unsigned char **p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    *(*p)++ = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char **p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    *(*p)++ = (unsigned char)(v >> (8 * i));
}

/*
 * MAC(role) over the handshake, a second nonce and any text, the fields
 * laid out little-endian one after the other so that no two inputs read
 * alike.
 */
static void mac(const struct hoop_auth_key *key, const char *role,
                const struct hoop_handshake *hs,
                const uint8_t nonce[HOOP_AUTH_NONCE_BYTES], const void *text,
                size_t text_len, uint8_t out[HOOP_AUTH_MAC_BYTES]) {
  unsigned char msg[16 + 4 + 8 + 4 * 4 + 2 * HOOP_AUTH_NONCE_BYTES +
                    HOOP_NOTICE_BYTES];
  unsigned char *p = msg;
  memset(p, 0, 16);
  memcpy(p, role, strnlen(role, 16));
  p += 16;
  put32(&p, hs->version);
  put64(&p, hs->comm_id);
  put32(&p, (uint32_t)hs->from);
  put32(&p, (uint32_t)hs->to);
  put32(&p, (uint32_t)hs->channel);
  put32(&p, (uint32_t)hs->kind);
  memcpy(p, hs->nonce, HOOP_AUTH_NONCE_BYTES);
  p += HOOP_AUTH_NONCE_BYTES;
  memcpy(p, nonce, HOOP_AUTH_NONCE_BYTES);
  p += HOOP_AUTH_NONCE_BYTES;
  if (text_len > HOOP_NOTICE_BYTES)
    text_len = HOOP_NOTICE_BYTES;
  if (text_len > 0)
    memcpy(p, text, text_len);
  p += text_len;
  hoop__hmac_sha256(key->bytes, sizeof key->bytes, msg, (size_t)(p - msg),
                    out);
}

/* Whether two MACs are equal, in a time that does not depend on where they
   differ: an early exit would tell a forger how many leading bytes of a
   guess were right. */
static bool same_mac(const uint8_t a[HOOP_AUTH_MAC_BYTES],
                     const uint8_t b[HOOP_AUTH_MAC_BYTES]) {
  /* volatile keeps the compiler from stopping at the first difference. */
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < HOOP_AUTH_MAC_BYTES; i++)
    diff |= a[i] ^ b[i];
  return diff == 0;
}

hoop_result_t hoop__auth_challenge(const struct hoop_auth_key *key,
                                   const struct hoop_handshake *hs,
                                   struct hoop_auth_challenge *ch) {
  HOOP_CHECK(hoop__auth_random(ch->nonce, sizeof ch->nonce));
  mac(key, "acceptor", hs, ch->nonce, NULL, 0, ch->mac);
  return HOOP_SUCCESS;
}

bool hoop__auth_check_challenge(const struct hoop_auth_key *key,
                                const struct hoop_handshake *hs,
                                const struct hoop_auth_challenge *ch) {
  uint8_t want[HOOP_AUTH_MAC_BYTES];
  mac(key, "acceptor", hs, ch->nonce, NULL, 0, want);
  return same_mac(want, ch->mac);
}

void hoop__auth_proof(const struct hoop_auth_key *key,
                      const struct hoop_handshake *hs,
                      const struct hoop_auth_challenge *ch,
                      struct hoop_auth_proof *proof) {
  mac(key, "dialler", hs, ch->nonce, NULL, 0, proof->mac);
}

bool hoop__auth_check_proof(const struct hoop_auth_key *key,
                            const struct hoop_handshake *hs,
                            const struct hoop_auth_challenge *ch,
                            const struct hoop_auth_proof *proof) {
  uint8_t want[HOOP_AUTH_MAC_BYTES];
  mac(key, "dialler", hs, ch->nonce, NULL, 0, want);
  return same_mac(want, proof->mac);
}

void hoop__auth_seal(const struct hoop_auth_key *key,
                     const struct hoop_handshake *hs,
                     const uint8_t session[HOOP_AUTH_NONCE_BYTES],
                     const void *text, size_t len,
                     uint8_t seal[HOOP_AUTH_MAC_BYTES]) {
  mac(key, "notice", hs, session, text, len, seal);
}

bool hoop__auth_check_seal(const struct hoop_auth_key *key,
                           const struct hoop_handshake *hs,
                           const uint8_t session[HOOP_AUTH_NONCE_BYTES],
                           const void *text, size_t len,
                           const uint8_t seal[HOOP_AUTH_MAC_BYTES]) {
  uint8_t want[HOOP_AUTH_MAC_BYTES];
  mac(key, "notice", hs, session, text, len, want);
  return same_mac(want, seal);
}
