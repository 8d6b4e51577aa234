/*
 * The ring schedule.  A buffer of `count` elements is cut into nranks
 * chunks; reduce-scatter passes partial sums around the ring for nranks-1
 * steps so that rank r ends with the full reduction of chunk r, all-gather
 * passes finished chunks for nranks-1 more steps, and all-reduce is the two
 * back to back.  Every step sends the chunk the previous step received, so
 * each rank sends and receives (nranks-1)/nranks of the buffer per phase.
 */
#ifndef HOOP_RING_H
#define HOOP_RING_H

#include <stddef.h>

#include "core/engine.h"

/*
 * Chunk i of `count` elements split over n ranks: the first count % n
 * chunks get one element more than the others.
 */
void hoop__ring_chunk(size_t count, int n, int i, size_t *off, size_t *len);

/* Steps of one rank's part: n-1 per phase. */
int hoop__ring_nsteps(hoop_coll_t coll, int n);

/* The chunk `rank` sends at `step`; it receives out_chunk(step + 1). */
int hoop__ring_out_chunk(hoop_coll_t coll, int rank, int n, int step);

/* What a received step does with its bytes. */
enum hoop_ring_action {
  HOOP_RING_FORWARD, /* reduce with local data into the outbox, send on */
  HOOP_RING_FINAL,   /* reduce with local data into the result          */
  HOOP_RING_COPY,    /* copy into the result (and send on, if not last) */
};

enum hoop_ring_action hoop__ring_action(hoop_coll_t coll, int n,
                                        int step);

struct hoop_ring_call {
  hoop_coll_t coll;
  /*
   * The ring: n ranks, ranks[p] at place p, this rank at `place`.  The
   * chunk at place p is number chunks[p] (reduce-scatter leaves it there,
   * all-gather starts from it); NULL: number p.  The communicator's ring
   * passes its order for both, so that rank r's block is chunk r.
   */
  int n;
  int place;
  const int *ranks;
  const int *chunks;
  /*
   * 0: chunk c is part c of count split n ways (hoop__ring_chunk).  Else
   * it is count / n elements from c x stride: then chunks may name any
   * block of a buffer cut into more than n of them, as hier.c's rings
   * among a host's ranks do, each over one block per rank of some host.
   */
  size_t stride;
  /*
   * A ring that is one phase of a larger plan: its ticks start at
   * tick_base (so that rings sharing a link keep their order), its ops
   * count into `group` and wait for the groups up to `gate` (engine.h).
   */
  uint64_t tick_base;
  uint16_t group, gate;
  int average;  /* HOOP_AVG: the FINAL step divides by the comm's ranks */
  int nchannels;
  size_t count; /* elements of the whole buffer (nranks * block for RS/AG) */
  const char *send;
  char *recv;
  size_t slice_bytes;
  size_t depth;       /* ticks a step may run ahead of the step it feeds */
  /*
   * All-reduce's FINAL step reduces into the outbox, sends from there and
   * copies the sum into recv around the caches: for out-of-place calls too
   * large for the caches, whose recv is not the local operand already
   * read in.
   */
  int final_via_outbox;
  char *outbox;       /* nchannels * outbox_slots slots */
  size_t outbox_slots;
  size_t slot_bytes;  /* hoop__ring_slot_bytes */
};

/*
 * Slices the ring keeps in the outbox per channel: one tick more than
 * `depth`, for every forwarding step and, with final_via_outbox, the
 * FINAL step.
 */
size_t hoop__ring_outbox_slots(hoop_coll_t coll, int n, size_t depth,
                               int final_via_outbox);

struct hoop_comm;

/*
 * Bytes of an outbox slot for a ring of n ranks over `count` elements in
 * `nchannels` channels: a slice, or the most a step of one channel
 * carries where that is less, rounded up to 64 bytes.  Slots of a whole
 * slice made a 1 MiB all-reduce over a 4,096-rank ring ask for 2 GiB of
 * outbox (8,188 slots of 256 KiB) to hold steps of 256 bytes.
 */
size_t hoop__ring_slot_bytes(size_t count, int n, int nchannels,
                             size_t elem_size, size_t slice);

/*
 * Channels and pipeline depth of a ring of n ranks moving `bytes`, from
 * the communicator's settings (HOOP_NSOCKS, HOOP_SLICE_BYTES,
 * HOOP_PIPELINE_BYTES).
 */
void hoop__ring_shape(const struct hoop_comm *comm, hoop_coll_t coll, int n,
                      size_t bytes, int *nchannels, size_t *depth);

/* Adds this rank's ring ops for every channel to the plan. */
hoop_result_t hoop__ring_build(struct hoop_plan *plan,
                               const struct hoop_ring_call *call);

#endif /* HOOP_RING_H */
