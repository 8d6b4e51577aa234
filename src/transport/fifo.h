/*
 * The byte FIFO with credits that the memory transports run, one per
 * direction of a connection: shm over a segment both ranks map, ib over
 * RDMA writes into the peer's registered ring.  They differ only in how
 * bytes and positions reach the peer, which is what struct
 * hoop_fifo_signal and the position pointers below say; the slots, the
 * credits and the alignment of streams live here, once, so every shm
 * test also tests the protocol ib runs.
 *
 * A ring of `ring` bytes per direction.  Positions only grow: the writer's
 * head counts bytes it has published, the reader's tail bytes it has
 * consumed, and the room the writer has is its credit, ring - (head -
 * tail).  The writer publishes at least at every slot boundary so that the
 * reader starts on a slice while the rest is still being written, and a
 * piece never wraps, so what it publishes is one contiguous range.  The
 * reader copies or reduces straight out of the ring.
 *
 * A ring need not be all there when the connection opens: the writer asks
 * the transport for the pages of its outgoing ring before it first writes
 * into them (hoop_fifo_signal.grow), so that a pair holds the memory it
 * has carried, not the memory it might.  And so that small calls keep to
 * the same few pages instead of walking the ring, a stream that would
 * begin `restart` bytes or more into the ring begins at its start instead
 * (see hoop__fifo_begin_stream).
 *
 * Not thread-safe: one thread drives a connection at a time.
 */
#ifndef HOOP_TRANSPORT_FIFO_H
#define HOOP_TRANSPORT_FIFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "hoop.h"

/* How positions reach the peer: the part each transport supplies. */
struct hoop_fifo_signal {
  /*
   * Bytes [head - n, head) of this rank's outgoing ring hold data and the
   * reader may have everything up to `head` (any bytes before head - n
   * not yet published are stream padding, never read).
   */
  void (*publish_head)(void *ctx, uint64_t head, size_t n);
  /* The reader has consumed everything up to `tail`: credit returned. */
  void (*publish_tail)(void *ctx, uint64_t tail);
  /*
   * Makes at least bytes [0, upto) of the outgoing ring writable, where
   * the transport provides them on demand (shm's segments are sparse),
   * and sets *ready to how many are.  Called before the writer first
   * stores past *ready; an error (no room in /dev/shm, say) fails the
   * send instead of a SIGBUS at the store.  NULL where the whole ring is
   * there from the start (ib's registered rings).
   */
  hoop_result_t (*grow)(void *ctx, size_t upto, size_t *ready);
};

/*
 * How the writer stores pieces of HOOP_FIFO_PACED_BYTES and more into the
 * ring.  Plain stores leave the lines in this core's cache for the reader
 * to take; where the two cores sit apart (another die or socket, or a VM's
 * CPUs the host runs apart) each plain store first waits for the line the
 * reader last held, and non-temporal stores, around the caches, are far
 * faster although the reader then reads from memory.  Memory transports
 * that choose leave it to timing (HOOP_FIFO_TIMED).
 */
enum hoop_fifo_stores {
  HOOP_FIFO_PLAIN, /* the zero value: what ib's staging rings use */
  HOOP_FIFO_AROUND,
  HOOP_FIFO_TIMED /* each way timed, the faster kept (hoop_fifo_pace) */
};

#define HOOP_FIFO_PACED_BYTES (64 * 1024)

/*
 * HOOP_FIFO_TIMED's record, per direction, in picoseconds per byte the
 * writer spent storing a piece (0 until timed).  Plain stays the choice
 * unless it takes more than twice as long: from the writer's side, on
 * this project's VM, plain took 50-67 ps/B and around 73-84 near, 400-424
 * and 56-60 far, and the whole call was 1.3-1.5 times slower around near
 * and 3 times slower plain far
 * (bench/results/2026-11-24-shm-ceiling-and-placement.md).  The other way
 * is tried again after `probe_every` pieces, which doubles (16 to 256)
 * each time it loses and starts over when it wins.
 */
struct hoop_fifo_pace {
  uint64_t ps_per_byte[2]; /* [0] plain, [1] around */
  uint32_t until_probe;
  uint32_t probe_every;
  bool around; /* the faster way now */
};

/* Which way the next piece goes: true for around the caches. */
bool hoop__fifo_pace_pick(const struct hoop_fifo_pace *p);

/* Records what a piece that went `around` (or not) cost, in ps/B. */
void hoop__fifo_pace_record(struct hoop_fifo_pace *p, bool around,
                            uint64_t ps_per_byte);

struct hoop_fifo {
  size_t ring; /* bytes per direction, a multiple of slot */
  size_t slot; /* publish at least this often; a multiple of 64 */
  /*
   * A stream that would begin at this ring offset or past it begins at
   * the ring's start; 0 for never.  A multiple of 64.
   */
  size_t restart;
  char *out_ring;       /* outgoing bytes are written here */
  const char *in_ring;  /* incoming bytes are read here */
  /*
   * The peer's positions as this rank sees them, loaded with acquire:
   * how far it has consumed what this rank wrote, and how far it has
   * written what this rank reads.
   */
  const uint64_t *out_tail;
  const uint64_t *in_head;
  const struct hoop_fifo_signal *signal;
  void *ctx;
  enum hoop_fifo_stores stores;
  struct hoop_fifo_pace pace;
  uint64_t out_head; /* this rank's own positions */
  uint64_t in_tail;
  size_t out_ready; /* bytes from out_ring's start that grow made writable */
  bool out_align; /* skip to a 64-byte boundary before the next write */
  bool in_align;  /* and before the next read */
};

/*
 * Copies what fits of iov into the ring, publishing each piece, and sets
 * *sent to how many bytes it took.  Fails only where signal->grow fails,
 * with *sent what went before.
 */
hoop_result_t hoop__fifo_send(struct hoop_fifo *f, const struct iovec *iov,
                              int iovcnt, size_t *sent);

/* Copies up to len received bytes out (around the caches when `cold`);
 * returns how many. */
size_t hoop__fifo_recv(struct hoop_fifo *f, void *buf, size_t len, bool cold);

/* Exposes up to `want` contiguous received bytes in place at *ptr;
 * returns how many.  They stay until hoop__fifo_release. */
size_t hoop__fifo_peek(struct hoop_fifo *f, size_t want, const void **ptr);
void hoop__fifo_release(struct hoop_fifo *f, size_t len);

/* Whether the next send (or receive) would move at least a byte. */
bool hoop__fifo_can_move(const struct hoop_fifo *f, int send);

/*
 * A stream starts on this direction.  Both ends skip the same padding
 * before its first byte, worked out from the position where the last
 * stream ended, which they share: to the ring's start when that position
 * is `restart` bytes or more into the ring, else to the next 64-byte
 * boundary, since the last stream may have ended at any byte and
 * reductions read elements in place.  Skipping to the ring's start costs
 * no credit rule of its own: the padding counts as written bytes, so the
 * writer puts the new stream only over bytes the reader has consumed,
 * however far it lags in the streams before.  What a run of small
 * streams can leave unread before the writer waits is then `restart`
 * bytes and the last stream, not the whole ring; one stream still has
 * the whole ring.
 */
void hoop__fifo_begin_stream(struct hoop_fifo *f, int send);

#endif /* HOOP_TRANSPORT_FIFO_H */
