/*
 * Collectives on device buffers over CUDA IPC (ipc_schedule.h): schedules of
 * copies and reduction kernels that read the peers' windows directly, and
 * the traffic they move.
 *
 * Chunk s of the communicator's life uses half s % 2 of every window and
 * moves this rank's counter through three phases, 3s+1 (its input is in its
 * window), 3s+2 (its share of the reduction is there) and 3s+3 (it has read
 * what it needs from the peers).  Before a rank overwrites a half it waits
 * for every peer to be done with chunk s-2, which used it last.
 *
 * All-reduce: every rank copies its chunk into its window; rank r reduces
 * slice r of every window (all ranks' slices in rank order, so every rank
 * ends with the same bits) into its result and back into its window, then
 * copies the other slices from their owners' windows.  Each rank reads
 * 2(N-1)/N of the chunk from its peers, as a ring moves.  Where waiting for
 * the peers costs more than reading (small chunks, few ranks), every rank
 * reduces the whole chunk instead (one-shot).  With the parameter server,
 * rank 0 reduces the whole chunk and the others copy it.
 * Reduce-scatter stops after the reduction; all-gather, broadcast and
 * all-to-all only copy; reduce is rank `root` reducing every window.
 */
#include <stddef.h>
#include <stdint.h>

#include "collectives/ipc_schedule.h"
#include "reduce/reduce_cuda.h"
#include "transport/cuda_ipc.h"

static uint32_t phase(uint32_t chunk, int k) {
  return HOOP_IPC_PHASES * chunk + (uint32_t)k;
}

enum { STAGED = 1, REDUCED = 2, DONE = 3 };

/*
 * Slice q of n elements split over nranks: whole 64-byte granules, so that
 * every slice starts as aligned as the chunk does and the kernels keep
 * their 16-byte loads.
 */
static void slice_of(size_t n, size_t esz, int nranks, int q, size_t *lo,
                     size_t *len) {
  size_t unit = 64 / esz;
  size_t granules = (n + unit - 1) / unit;
  size_t per = (granules + (size_t)nranks - 1) / (size_t)nranks * unit;
  *lo = (size_t)q * per < n ? (size_t)q * per : n;
  *len = n - *lo < per ? n - *lo : per;
}

struct chunk {
  const struct hoop_call *c;
  struct hoop_ipc *ipc;
  cudaStream_t s;
  size_t per_rank; /* elements per block (blocked collectives) */
  size_t first;    /* element offset of the chunk in the buffer or block */
  size_t n;        /* elements per row */
  size_t rows;
  size_t half;     /* byte offset of this chunk's half in every window */
};

static char *window(const struct chunk *k, int q) {
  return k->ipc->scratch[q] + k->half;
}

static cudaError_t copy(const struct chunk *k, void *dst, const void *src,
                        size_t elems) {
  if (elems == 0 || dst == src)
    return cudaSuccess;
  return cudaMemcpyAsync(dst, src, elems * k->c->elem_size,
                         cudaMemcpyDeviceToDevice, k->s);
}

/*
 * This rank's input chunk into its window: one row per block for the
 * collectives that send a block to each rank, else one row.
 */
static cudaError_t stage(const struct chunk *k) {
  size_t es = k->c->elem_size;
  const char *src = k->c->send + k->first * es;
  if (k->n == 0)
    return cudaSuccess;
  if (k->c->coll == HOOP_COLL_REDUCE_SCATTER ||
      k->c->coll == HOOP_COLL_ALLTOALL)
    return cudaMemcpy2DAsync(window(k, k->ipc->rank), k->n * es, src,
                             k->per_rank * es, k->n * es, k->rows,
                             cudaMemcpyDeviceToDevice, k->s);
  return copy(k, window(k, k->ipc->rank), src, k->n);
}

static cudaError_t reduce_rows(const struct chunk *k, void *dst, void *keep,
                               size_t at, size_t elems) {
  const void *src[HOOP_IPC_MAX_RANKS];
  for (int q = 0; q < k->ipc->nranks; q++)
    src[q] = window(k, q) + at * k->c->elem_size;
  return (cudaError_t)hoop__cuda_reduce_many(
      dst, keep, src, k->ipc->nranks, elems, k->c->dtype, k->c->op, k->s);
}

/*
 * One-shot reads N windows whole on every rank instead of N slices, (N-2)N
 * chunks more memory traffic in all (none with 2 ranks), but it skips a
 * wait for every peer, and on a GPU that time-slices the ranks' processes
 * such a wait costs a round of context switches: measured on an H100,
 * about 0.2 ms with 2 ranks and 2 ms with 8 (bench/results).
 */
static int oneshot_pays(const struct chunk *k, size_t oneshot_bytes) {
  size_t n = (size_t)k->ipc->nranks;
  return (n - 2) * n * k->n * k->c->elem_size <= oneshot_bytes;
}

static cudaError_t allreduce(const struct chunk *k, uint32_t s, int ps,
                             size_t oneshot_bytes) {
  struct hoop_ipc *ipc = k->ipc;
  size_t es = k->c->elem_size;
  char *out = k->c->recv + k->first * es;
  int me = ipc->rank;
  cudaError_t e = cudaSuccess;
  if (!ps && oneshot_pays(k, oneshot_bytes))
    return reduce_rows(k, out, NULL, 0, k->n);
  if (ps) {
    if (me == 0)
      e = reduce_rows(k, out, window(k, 0), 0, k->n);
    if (e == cudaSuccess)
      e = hoop__ipc_signal(ipc, k->s, phase(s, REDUCED));
    if (e == cudaSuccess && me != 0)
      e = hoop__ipc_wait(ipc, k->s, 0, phase(s, REDUCED));
    if (e == cudaSuccess && me != 0)
      e = copy(k, out, window(k, 0), k->n);
    return e;
  }
  size_t lo, len;
  slice_of(k->n, es, ipc->nranks, me, &lo, &len);
  if (len > 0)
    e = reduce_rows(k, out + lo * es, window(k, me) + lo * es, lo, len);
  if (e == cudaSuccess)
    e = hoop__ipc_signal(ipc, k->s, phase(s, REDUCED));
  if (e == cudaSuccess)
    e = hoop__ipc_wait(ipc, k->s, -1, phase(s, REDUCED));
  for (int q = 0; q < ipc->nranks && e == cudaSuccess; q++) {
    slice_of(k->n, es, ipc->nranks, q, &lo, &len);
    if (q != me)
      e = copy(k, out + lo * es, window(k, q) + lo * es, len);
  }
  return e;
}

/* Row `row` of every window into this rank's blocks (all-gather: row 0). */
static cudaError_t gather_rows(const struct chunk *k, int row) {
  size_t es = k->c->elem_size;
  cudaError_t e = cudaSuccess;
  for (int q = 0; q < k->ipc->nranks && e == cudaSuccess; q++) {
    char *dst = k->c->recv + ((size_t)q * k->per_rank + k->first) * es;
    const char *src = window(k, q) + (size_t)row * k->n * es;
    if (q == k->ipc->rank)
      src = k->c->send + ((size_t)row * k->per_rank + k->first) * es;
    e = copy(k, dst, src, k->n);
  }
  return e;
}

static cudaError_t run_chunk(const struct chunk *k, uint32_t s, int ps,
                             size_t oneshot_bytes) {
  const struct hoop_call *c = k->c;
  struct hoop_ipc *ipc = k->ipc;
  int me = ipc->rank;
  int stages = c->coll != HOOP_COLL_BROADCAST || me == c->root;
  /* Peers may still read this half for chunk s - 2. */
  cudaError_t e = hoop__ipc_wait(ipc, k->s, -1, phase(s - 2, DONE));
  if (e == cudaSuccess && stages)
    e = stage(k);
  if (e == cudaSuccess)
    e = hoop__ipc_signal(ipc, k->s, phase(s, STAGED));
  if (e == cudaSuccess)
    e = hoop__ipc_wait(ipc, k->s,
                       c->coll == HOOP_COLL_BROADCAST ? c->root : -1,
                       phase(s, STAGED));
  if (e != cudaSuccess)
    return e;
  size_t es = c->elem_size;
  switch (c->coll) {
  case HOOP_COLL_ALLREDUCE:
    e = allreduce(k, s, ps, oneshot_bytes);
    break;
  case HOOP_COLL_REDUCE_SCATTER:
    e = reduce_rows(k, c->recv + k->first * es, NULL, (size_t)me * k->n,
                    k->n);
    break;
  case HOOP_COLL_REDUCE:
    if (me == c->root)
      e = reduce_rows(k, c->recv + k->first * es, NULL, 0, k->n);
    break;
  case HOOP_COLL_BROADCAST:
    e = copy(k, c->recv + k->first * es,
             me == c->root ? c->send + k->first * es : window(k, c->root),
             k->n);
    break;
  case HOOP_COLL_ALLGATHER:
    e = gather_rows(k, 0);
    break;
  case HOOP_COLL_ALLTOALL:
    e = gather_rows(k, me);
    break;
  default:
    e = cudaErrorInvalidValue;
    break;
  }
  if (e == cudaSuccess)
    e = hoop__ipc_signal(ipc, k->s, phase(s, DONE));
  return e;
}

cudaError_t hoop__ipc_schedule(struct hoop_ipc *ipc,
                              const struct hoop_call *c, size_t per_rank,
                              const struct hoop_chunking *k, uint32_t first,
                              int ps, size_t oneshot_bytes, cudaStream_t s) {
  cudaError_t e = cudaSuccess;
  for (size_t i = 0; i < k->nchunks && e == cudaSuccess; i++) {
    uint32_t chunk = first + (uint32_t)i;
    struct chunk ck = {.c = c,
                       .ipc = ipc,
                       .s = s,
                       .per_rank = per_rank,
                       .first = i * k->per,
                       .n = hoop__chunk_elems(k, i),
                       .rows = k->rows,
                       .half = (chunk % 2) * ipc->chunk_bytes};
    e = run_chunk(&ck, chunk, ps, oneshot_bytes);
  }
  return e;
}

hoop_algo_t hoop__ipc_traffic(const struct hoop_ipc *ipc,
                              const struct hoop_call *c,
                              const struct hoop_chunking *k, int ps,
                              size_t oneshot_bytes, uint64_t *sent,
                              uint64_t *received) {
  int me = ipc->rank, nr = ipc->nranks;
  size_t es = c->elem_size;
  hoop_algo_t algo = c->coll == HOOP_COLL_ALLTOALL ? HOOP_ALGO_P2P
                     : ps && c->coll == HOOP_COLL_ALLREDUCE ? HOOP_ALGO_PS
                                                            : HOOP_ALGO_RING;
  for (int q = 0; q < nr; q++)
    sent[q] = received[q] = 0;
  for (size_t i = 0; i < k->nchunks; i++) {
    size_t n = hoop__chunk_elems(k, i), lo, mine, theirs;
    struct chunk ck = {.c = c, .ipc = (struct hoop_ipc *)ipc, .n = n};
    int oneshot = c->coll == HOOP_COLL_ALLREDUCE && !ps &&
                  oneshot_pays(&ck, oneshot_bytes);
    if (oneshot)
      algo = HOOP_ALGO_ONESHOT;
    slice_of(n, es, nr, me, &lo, &mine);
    for (int q = 0; q < nr; q++) {
      if (q == me)
        continue;
      /* What this rank reads from q, and what q reads from this rank. */
      size_t from_q = n, to_q = n;
      slice_of(n, es, nr, q, &lo, &theirs);
      switch (c->coll) {
      case HOOP_COLL_ALLREDUCE:
        if (ps) {
          from_q = me == 0 ? n : q == 0 ? n : 0;
          to_q = me == 0 || q == 0 ? n : 0;
        } else if (!oneshot) {
          from_q = to_q = mine + theirs;
        }
        break;
      case HOOP_COLL_BROADCAST:
        from_q = q == c->root ? n : 0;
        to_q = me == c->root ? n : 0;
        break;
      case HOOP_COLL_REDUCE:
        from_q = me == c->root ? n : 0;
        to_q = q == c->root ? n : 0;
        break;
      default: /* reduce-scatter, all-gather, all-to-all: a row each way */
        break;
      }
      received[q] += from_q * es;
      sent[q] += to_q * es;
    }
  }
  return algo;
}
