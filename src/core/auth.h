/*
 * Proving that both ends of a connection belong to the same job.  Every
 * job has a secret key of 256 bits (random in a unique id, or derived from
 * HOOP_AUTH_TOKEN); every rendezvous and data connection between its
 * processes starts with a mutual challenge-response before either side
 * reads or sends anything else:
 *
 *   dialler  -> acceptor  handshake (wire.h): who dials whom, nonce Nd
 *   acceptor -> dialler   challenge: nonce Na, MAC("acceptor")
 *   dialler  -> acceptor  proof: MAC("dialler")
 *
 * where MAC(role) is HMAC-SHA256 under the key over the role, the protocol
 * version, the communicator id, both ranks, the channel, the kind of
 * notice (0 on other connections) and both nonces.
 * Each side checks the other's MAC over its own fresh nonce, so a
 * recorded exchange proves nothing in another; the roles differ, so a
 * stranger cannot bounce one side's MAC back to it.  The acceptor proves
 * itself first: a dialler never computes a MAC for a peer that has not
 * shown it holds the key.
 *
 * A failure notice is the one message that cannot wait for a challenge:
 * its receiver may be busy outside any call when it comes, and its sender
 * is on its way out.  It is sealed instead: MAC("notice") over its
 * handshake, the communicator's session (a nonce rank 0 draws for each
 * communicator and hands out with the peer table) and its text, so that
 * it counts only in this communicator, from this sender, to this
 * receiver.  Replayed within the communicator it repeats news the
 * receiver already has: the communicator broke.
 */
#ifndef HOOP_AUTH_H
#define HOOP_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hoop.h"
#include "core/wire.h"

#define HOOP_AUTH_KEY_BYTES 32

struct hoop_auth_key {
  uint8_t bytes[HOOP_AUTH_KEY_BYTES];
};

/* The shortest HOOP_AUTH_TOKEN taken: 128 bits written in hex. */
#define HOOP_AUTH_TOKEN_MIN 32

/* Fills buf with bytes from the kernel's random source; fails rather than
   fall back to anything guessable. */
hoop_result_t hoop__auth_random(void *buf, size_t len);

/* Overwrites a secret in memory so that the compiler cannot skip it. */
void hoop__auth_wipe(void *buf, size_t len);

/* The key of a job whose ranks share the text `token`. */
void hoop__auth_key_from_token(const char *token, struct hoop_auth_key *key);

/* Fills the dialler's handshake, with a fresh nonce. */
hoop_result_t hoop__auth_handshake(uint64_t comm_id, int32_t from,
                                   int32_t to, int32_t channel,
                                   struct hoop_handshake *hs);

/* The acceptor's answer to `hs`, with a fresh nonce. */
hoop_result_t hoop__auth_challenge(const struct hoop_auth_key *key,
                                   const struct hoop_handshake *hs,
                                   struct hoop_auth_challenge *ch);

/* Whether the acceptor that sent `ch` holds the key. */
bool hoop__auth_check_challenge(const struct hoop_auth_key *key,
                                const struct hoop_handshake *hs,
                                const struct hoop_auth_challenge *ch);

/* The dialler's proof for the exchange of `hs` and `ch`. */
void hoop__auth_proof(const struct hoop_auth_key *key,
                      const struct hoop_handshake *hs,
                      const struct hoop_auth_challenge *ch,
                      struct hoop_auth_proof *proof);

/* Whether the dialler that sent `proof` holds the key. */
bool hoop__auth_check_proof(const struct hoop_auth_key *key,
                            const struct hoop_handshake *hs,
                            const struct hoop_auth_challenge *ch,
                            const struct hoop_auth_proof *proof);

/* The seal of a failure notice with `text` (auth.h's comment says why). */
void hoop__auth_seal(const struct hoop_auth_key *key,
                     const struct hoop_handshake *hs,
                     const uint8_t session[HOOP_AUTH_NONCE_BYTES],
                     const void *text, size_t len,
                     uint8_t seal[HOOP_AUTH_MAC_BYTES]);

bool hoop__auth_check_seal(const struct hoop_auth_key *key,
                           const struct hoop_handshake *hs,
                           const uint8_t session[HOOP_AUTH_NONCE_BYTES],
                           const void *text, size_t len,
                           const uint8_t seal[HOOP_AUTH_MAC_BYTES]);

#endif /* HOOP_AUTH_H */
