/*
 * A listening socket that hands out only connections which proved they
 * belong to the job (auth.h), and failure notices whose seal holds.  Rank 0's rendezvous and every rank's data
 * listener are one each.  Connections are read all at once, without
 * blocking, each against its own deadline: a connection that says nothing,
 * says it slowly or fails its proof costs the ranks nothing but a
 * descriptor for a few seconds, and at most `max_unproven` of those, so
 * that no stranger can delay a job or fill its descriptor table.
 */
#ifndef HOOP_LISTENER_H
#define HOOP_LISTENER_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hoop.h"
#include "core/auth.h"
#include "core/socket.h"
#include "core/wire.h"

/* How long a connection has to prove itself and send what follows. */
#define HOOP_LISTENER_PROOF_MS 3000

/*
 * Room for connections still proving themselves beyond those the ranks
 * themselves may open at once: strangers beyond it push out the oldest.
 */
#define HOOP_LISTENER_STRANGERS 64

/*
 * The most bytes a proven connection sends before it is handed out: a
 * notice's reason, or a rank's hello at the rendezvous (bootstrap.c
 * asserts that it fits).
 */
#define HOOP_LISTENER_PAYLOAD_MAX 1024

struct hoop_unproven;

struct hoop_listener {
  int fd; /* -1 when closed */
  struct hoop_addr addr;
  /* What a handshake must say to be for this listener. */
  struct hoop_auth_key key;
  uint64_t comm_id;
  int32_t rank;
  int32_t nranks;
  int32_t channel_lo, channel_hi;
  /* Bytes a connection for `channel` sends after its proof. */
  size_t (*payload_bytes)(int32_t channel);
  /* The communicator's, which failure notices are sealed with (auth.h). */
  uint8_t session[HOOP_AUTH_NONCE_BYTES];
  int max_unproven;
  struct hoop_unproven *unproven; /* [max_unproven] */
  int nunproven;
  struct pollfd *pollfds; /* [1 + max_unproven], for poll's own use */
};

/* A connection that proved itself, with what it sent after the proof. */
struct hoop_proven {
  int fd; /* non-blocking; the caller owns it */
  struct hoop_addr from;
  struct hoop_handshake hs;
  unsigned char payload[HOOP_LISTENER_PAYLOAD_MAX];
};

/*
 * Listens on `addr` (port 0 picks one) or, with fd >= 0, adopts that
 * listening socket.  The caller fills the rest of *l first (key, comm_id,
 * rank, nranks, channels, payload_bytes, max_unproven).
 */
hoop_result_t hoop__listener_open(struct hoop_listener *l,
                                  const struct hoop_addr *addr, int fd);

/*
 * Accepts and reads what has come, waiting up to wait_ms for a connection
 * to complete its proof.  *got says whether *out holds one.  Errors are
 * only the listener's own (poll); a bad connection is dropped, logged
 * with its address, and does not fail the call.
 */
hoop_result_t hoop__listener_poll(struct hoop_listener *l, int wait_ms,
                                  struct hoop_proven *out, bool *got);

/*
 * The descriptors to poll for this listener (its socket, then every
 * connection still proving itself); at most 1 + max_unproven.  Any event
 * on them means hoop__listener_poll has work.
 */
int hoop__listener_pollfds(const struct hoop_listener *l,
                           struct pollfd *fds);

/* Closes the socket and every connection still proving itself. */
void hoop__listener_close(struct hoop_listener *l);

#endif /* HOOP_LISTENER_H */
