/* The ring schedule as data; see ring.h. */
#include "collectives/ring.h"

#include <string.h>

static int mod(int a, int n) { return ((a % n) + n) % n; }

void hoop__ring_chunk(size_t count, int n, int i, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, extra = count % (size_t)n;
  size_t idx = (size_t)i;
  *len = base + (idx < extra ? 1 : 0);
  *off = idx * base + (idx < extra ? idx : extra);
}

int hoop__ring_nsteps(enum hoop_coll coll, int n) {
  return coll == HOOP_COLL_ALLREDUCE ? 2 * (n - 1) : n - 1;
}

/*
 * Reduce-scatter starts one chunk behind all-gather so that its last step
 * leaves rank r holding chunk r, which is where NCCL's reduce-scatter puts
 * rank r's block and where all-gather starts from.
 */
int hoop__ring_out_chunk(enum hoop_coll coll, int rank, int n, int step) {
  switch (coll) {
  case HOOP_COLL_REDUCE_SCATTER:
    return mod(rank - step - 1, n);
  case HOOP_COLL_ALLGATHER:
    return mod(rank - step, n);
  case HOOP_COLL_ALLREDUCE:
    return step < n - 1 ? mod(rank - step - 1, n)
                        : mod(rank - (step - (n - 1)), n);
  }
  return 0;
}

enum hoop_in_action hoop__ring_in_action(enum hoop_coll coll, int n,
                                         int step) {
  if (coll == HOOP_COLL_ALLGATHER || step >= n - 1)
    return HOOP_IN_COPY;
  return step < n - 2 ? HOOP_IN_REDUCE_FORWARD : HOOP_IN_REDUCE_FINAL;
}

/* Elements [*off, *off + *len) of chunk i that channel `ch` carries. */
static void channel_part(const struct hoop_ring_call *call, int i, int ch,
                         size_t *off, size_t *len) {
  size_t coff, clen;
  hoop__ring_chunk(call->count, call->nranks, i, &coff, &clen);
  size_t nch = (size_t)call->nchannels;
  size_t lo = clen * (size_t)ch / nch, hi = clen * (size_t)(ch + 1) / nch;
  *off = coff + lo;
  *len = hi - lo;
}

void hoop__ring_chain(const struct hoop_ring_call *call, int channel,
                      struct hoop_chain *chain,
                      struct hoop_chain_step *steps) {
  int n = call->nranks, r = call->rank;
  size_t esz = call->elem_size;
  /*
   * Reduce-scatter's output and all-gather's input hold one block, not the
   * whole buffer: their element offsets are relative to block r.
   */
  size_t own_off, own_len;
  hoop__ring_chunk(call->count, n, r, &own_off, &own_len);
  size_t send_bias = call->coll == HOOP_COLL_ALLGATHER ? own_off : 0;
  size_t recv_bias = call->coll == HOOP_COLL_REDUCE_SCATTER ? own_off : 0;

  memset(chain, 0, sizeof *chain);
  chain->nsteps = hoop__ring_nsteps(call->coll, n);
  chain->steps = steps;
  size_t off, len;
  channel_part(call, hoop__ring_out_chunk(call->coll, r, n, 0), channel,
               &off, &len);
  chain->first = call->send + (off - send_bias) * esz;
  chain->first_bytes = len * esz;
  for (int k = 0; k < chain->nsteps; k++) {
    int chunk = hoop__ring_out_chunk(call->coll, r, n, k + 1);
    channel_part(call, chunk, channel, &off, &len);
    steps[k].action = hoop__ring_in_action(call->coll, n, k);
    steps[k].bytes = len * esz;
    steps[k].local = steps[k].action == HOOP_IN_COPY
                         ? NULL
                         : call->send + off * esz;
    steps[k].dst = steps[k].action == HOOP_IN_REDUCE_FORWARD
                       ? NULL
                       : call->recv + (off - recv_bias) * esz;
  }
}
