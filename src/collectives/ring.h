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

/* Steps of one rank's chain: n-1 per phase. */
int hoop__ring_nsteps(enum hoop_coll coll, int n);

/* The chunk `rank` sends at `step`; it receives out_chunk(step + 1). */
int hoop__ring_out_chunk(enum hoop_coll coll, int rank, int n, int step);

enum hoop_in_action hoop__ring_in_action(enum hoop_coll coll, int n,
                                         int step);

struct hoop_ring_call {
  enum hoop_coll coll;
  int rank;
  int nranks;
  int nchannels;
  size_t count; /* elements of the whole buffer (nranks * block for RS/AG) */
  size_t elem_size;
  const char *send;
  char *recv;
};

/*
 * Fills channel `channel`'s chain (everything but connections and outbox)
 * and its steps[hoop__ring_nsteps()].  Channel c carries the c-th of
 * nchannels equal parts of every chunk.
 */
void hoop__ring_chain(const struct hoop_ring_call *call, int channel,
                      struct hoop_chain *chain,
                      struct hoop_chain_step *steps);

#endif /* HOOP_RING_H */
