/*
 * Connections and the transports that make them, as the core sees them: a
 * connection joins this rank to one peer for one channel and carries two
 * independent, ordered byte streams, one each way.  The core owns this
 * interface; transports (src/transport) implement it and register in
 * hoop__transports, so that every include runs from a transport to the
 * core and adding one changes nothing here.
 *
 * Every data-path function is non-blocking: it moves what it can now and
 * says how much.  The engine calls them in a loop and, when nothing moved,
 * arms each connection it waits on and sleeps in poll() on the descriptors
 * that arm() names (bounded by the timeout).  Errors are recorded with the
 * peer's rank and address before being returned; a transport never sees
 * the communicator, so it records them as the thread's last error
 * (HOOP_ERROR(NULL, ...)) and the core, which called it, attaches them to
 * the communicator (hoop__error_attach).
 */
#ifndef HOOP_CONN_H
#define HOOP_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <sys/uio.h>

#include "hoop.h"
#include "core/peer.h"

/* One rank as one transport sees it: the shared facts and its own bytes. */
struct hoop_published {
  const struct hoop_peer_info *info;
  const uint8_t *blob; /* what this transport published; len 0: nothing */
  size_t len;
};

struct hoop_conn;

/*
 * Everything a transport needs to set up one connection, filled by the
 * core (core/connect.c), as gloo hands its pairs an address and a timeout
 * rather than the context: a transport depends on this and the socket
 * layer, never on the communicator, so adding one does not touch it.
 */
struct hoop_conn_setup {
  int rank;
  int peer;
  int channel;
  uint64_t comm_id;      /* for names that must not collide across comms */
  long long deadline;    /* hoop__now_ms() clock; bounds the whole set-up */
  size_t slice_bytes;    /* the most one engine op moves (HOOP_SLICE_BYTES) */
  size_t sockbuf_bytes;  /* SO_SNDBUF/SO_RCVBUF; 0 leaves the kernel's */
  const char *peer_desc; /* "rank 3 (10.0.0.2:41234, host node7, pid 12)" */
  /*
   * What the two ranks published, each with the bytes of the transport
   * connecting them (ib opens the port this rank published).
   */
  struct hoop_published self;
  struct hoop_published other;
  /*
   * Opens the TCP socket to the peer for this channel, handshaken and
   * blocking, by the deadline: the lower rank dials and the higher
   * accepts, so both must ask for the same connection at about the same
   * time.  The caller owns the descriptor.
   */
  hoop_result_t (*open_socket)(void *ctx, int *fd);
  void *ctx;
};

struct hoop_transport_ops {
  const char *name;

  /*
   * Chosen only when HOOP_TRANSPORT names it: one that has not yet run
   * where it is meant to (ib, until it has run on RDMA hardware).
   */
  bool by_name_only;

  /*
   * It joins ranks through memory both map, so a byte reduced costs about
   * as much as one copied (comm.h's host_memory, for the cost model).
   */
  bool through_memory;

  /*
   * Optional: bounds the settings only this transport reads, at every
   * communicator's init, so that every rank refuses a bad one at once
   * instead of the first pair to connect.  Errors name the variable.
   */
  hoop_result_t (*check_settings)(void);

  /*
   * Optional: fills this rank's own bytes for its peers (what they need to
   * judge or join it), blob_bytes of them.  They reach the other
   * transports' ranks unread.
   */
  void (*publish)(int rank, uint8_t *blob);
  /*
   * With publish: how many bytes it publishes, at most HOOP_BLOB_BYTES.
   * The core refuses a peer's of any other length, so no parser checks it.
   */
  size_t blob_bytes;

  /*
   * With publish: whether a peer's blob_bytes bytes are well formed, every
   * field bounded, its version included; false with why, naming `rank`.
   * Nothing reads a peer's bytes before this passed them.
   */
  bool (*blob_parse)(const uint8_t *blob, size_t len, int rank, char *why,
                     size_t why_len);

  /*
   * Optional: the public rank information this transport owns (hoop.h's
   * hoop_rank_info_t), from what the rank published.
   */
  void (*rank_info)(const struct hoop_published *rank,
                    hoop_rank_info_t *info);

  /* Whether this transport can join these two ranks at all. */
  bool (*can_connect)(const struct hoop_published *self,
                      const struct hoop_published *peer);

  /*
   * Optional: why can_connect refuses the pair, as text naming the rank
   * that lacks what, for the error when HOOP_TRANSPORT names this
   * transport.
   */
  void (*why_not)(const struct hoop_published *self,
                  const struct hoop_published *peer, char *why,
                  size_t why_len);

  /*
   * Establishes the connection.  Blocking, bounded by setup->deadline;
   * both ranks call it for each other.  setup lives only for the call.
   */
  hoop_result_t (*connect)(const struct hoop_conn_setup *setup,
                           struct hoop_conn **conn);

  /*
   * Queues bytes from iov in order; *sent gets how many were taken (maybe
   * 0).  The caller keeps its buffers; the transport has copied what it
   * took before returning.
   */
  hoop_result_t (*send)(struct hoop_conn *conn, const struct iovec *iov,
                        int iovcnt, size_t *sent);

  /*
   * Copies up to len received bytes into buf; *got may be 0.  `cold`: the
   * call is larger than the caches hold, so most of buf leaves the cache
   * before it is read again, and a transport that copies in user space may
   * write around the caches.
   */
  hoop_result_t (*recv)(struct hoop_conn *conn, void *buf, size_t len,
                        bool cold, size_t *got);

  /*
   * Exposes received bytes in place, for reductions that read them once:
   * *ptr and *avail describe contiguous bytes at the head of the stream.
   * The transport tries to receive up to `want` bytes but never more, so
   * that bytes of a later step are not pulled in early.  The region stays
   * valid until release() or the next peek().
   */
  hoop_result_t (*peek)(struct hoop_conn *conn, size_t want,
                        const void **ptr, size_t *avail);
  void (*release)(struct hoop_conn *conn, size_t len);

  /*
   * Prepares to sleep until the send (or receive) side can move: fills
   * *pfd with what poll() must watch.  Sets *ready instead when it can
   * move already, because a transport that signals through memory must
   * re-check after asking to be woken, or a wake-up could be missed.
   */
  hoop_result_t (*arm)(struct hoop_conn *conn, int send, struct pollfd *pfd,
                       bool *ready);

  /*
   * Optional (NULL: nothing to do).  Called on both ends when a
   * collective's stream starts on one direction of the connection, after
   * the previous one has been wholly sent or received: a transport that
   * hands out bytes in place uses it to start the stream aligned, since an
   * earlier stream may have ended at any byte.
   */
  void (*begin_stream)(struct hoop_conn *conn, int send);

  /* Wakes the peer with an error at once (used when the comm breaks). */
  void (*shutdown)(struct hoop_conn *conn);

  /* Frees everything; conn may be partly built. */
  void (*close)(struct hoop_conn *conn);
};

/* The part of every connection that the core reads. */
struct hoop_conn {
  const struct hoop_transport_ops *ops;
  int peer;
  int channel;
  uint64_t bytes_sent;
  uint64_t bytes_received;
  char peer_desc[128]; /* "rank 3 (10.0.0.2:41234, host node7)" */
};

/*
 * The transports of this build, in preference order (the first that can
 * join a pair serves it, so same-host ones come first), ending in NULL, at
 * most HOOP_MAX_TRANSPORTS: defined by the transport layer
 * (transport/transport.c), read only here in the core.
 */
extern const struct hoop_transport_ops *const hoop__transports[];

/* `rank` as transport `t` sees it. */
struct hoop_published hoop__published(const struct hoop_peer_info *rank,
                                      const struct hoop_transport_ops *t);

/*
 * A transport's own bytes as its struct of `size` bytes: copied when the
 * rank published exactly that many (blob_parse has passed them), zeroed
 * otherwise (a rank that published nothing); true when copied.
 */
bool hoop__published_read(const struct hoop_published *p, void *out,
                          size_t size);

/* Every transport's settings (check_settings), the first bad one named. */
hoop_result_t hoop__transports_check_settings(void);

/* Fills `me`'s blobs from every transport's publish. */
void hoop__transports_publish(struct hoop_peer_info *me);

/*
 * Bounds a peer's blobs: each slot names the transport registered there
 * (or is empty where none is), holds at most HOOP_BLOB_BYTES, and passes
 * that transport's blob_parse.
 */
bool hoop__transports_parse(const struct hoop_peer_info *p, char *why,
                            size_t why_len);

/* Fills the public rank information the transports own. */
void hoop__transports_rank_info(const struct hoop_peer_info *p,
                                hoop_rank_info_t *info);

/*
 * The transport that ranks publishing `a` and `b` use (or would use, for a
 * pair this rank is not part of): the first that can join them, or the one
 * HOOP_TRANSPORT names; NULL when none can.
 */
const struct hoop_transport_ops *hoop__transport_pick(
    const struct hoop_peer_info *a, const struct hoop_peer_info *b);

/* Fills the core's part of a new connection, for the transports. */
void hoop__conn_init(struct hoop_conn *conn,
                     const struct hoop_transport_ops *ops,
                     const struct hoop_conn_setup *setup);

/*
 * Whether a transport can join this rank (`self`, rank `rank`) and `peer`
 * (described as `peer_desc`): HOOP_SUCCESS, or why none can (HOOP_TRANSPORT
 * naming one that cannot, or none at all).  It connects nothing, so a
 * communicator that connects its pairs on first use still fails at init
 * when a pair could never connect.  Errors are the thread's last error.
 */
hoop_result_t hoop__transport_check(const struct hoop_peer_info *self,
                                    const struct hoop_peer_info *peer,
                                    int rank, const char *peer_desc);

/*
 * Picks the transport for this rank (`self`) and the peer (`peer`), as
 * hoop__transport_pick does, and connects through it; fills the setup's
 * published views.  Errors are the thread's last error only, as the
 * transports' are.
 */
hoop_result_t hoop__transport_connect(const struct hoop_peer_info *self,
                                      const struct hoop_peer_info *peer,
                                      struct hoop_conn_setup *setup,
                                      struct hoop_conn **conn);

#endif /* HOOP_CONN_H */
