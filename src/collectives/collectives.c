/*
 * The public collectives: argument checks, then the ring schedule run by
 * the engine.  A failure that involves a peer breaks the communicator (and
 * shuts its connections so the other ranks fail at once too); an argument
 * error returns before any byte moves and leaves it usable.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/ring.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"
#include "transport/transport.h"

struct call {
  enum hoop_coll coll;
  const void *send;
  void *recv;
  size_t count; /* elements of the whole buffer */
  size_t bytes;
  hoop_dtype_t dtype;
  hoop_op_t op;
  size_t elem_size;
};

static const char *api_name(enum hoop_coll coll) {
  switch (coll) {
  case HOOP_COLL_ALLREDUCE: return "hoop_allreduce";
  case HOOP_COLL_REDUCE_SCATTER: return "hoop_reduce_scatter";
  case HOOP_COLL_ALLGATHER: return "hoop_allgather";
  default: return "hoop collective";
  }
}

static int overlap(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen > 0 && blen > 0 && x < y + blen && y < x + alen;
}

/*
 * Checks the arguments shared by all collectives.  `per_rank` is the
 * element count the user passed; the whole buffer is `mult` times that.
 */
static hoop_result_t check_args(struct hoop_comm *comm, struct call *c,
                                size_t per_rank, size_t mult, int has_op) {
  const char *what = api_name(c->coll);
  c->elem_size = hoop_dtype_size(c->dtype);
  if (c->elem_size == 0)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: dtype %d is not a hoop_dtype_t", what,
                      (int)c->dtype);
  if (has_op && (unsigned)c->op >= HOOP_OP_COUNT)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: op %d is not a hoop_op_t", what, (int)c->op);
  if (per_rank > SIZE_MAX / mult / c->elem_size ||
      per_rank * mult > INT64_MAX / c->elem_size)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: count %zu of %s overflows the address space", what,
                      per_rank, hoop_dtype_name(c->dtype));
  c->count = per_rank * mult;
  c->bytes = c->count * c->elem_size;
  if (per_rank > 0 && (c->send == NULL || c->recv == NULL))
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: %s is NULL with count %zu", what,
                      c->send == NULL ? "sendbuf" : "recvbuf", per_rank);
  return HOOP_SUCCESS;
}

/*
 * In place means exactly NCCL's aliasing; any other overlap would read
 * bytes the call has already overwritten.
 */
static hoop_result_t check_aliasing(struct hoop_comm *comm,
                                    const struct call *c, size_t block) {
  const char *s = c->send;
  const char *r = c->recv;
  size_t own = (size_t)comm->rank * block;
  int ok;
  switch (c->coll) {
  case HOOP_COLL_ALLREDUCE:
    ok = s == r || !overlap(s, c->bytes, r, c->bytes);
    break;
  case HOOP_COLL_REDUCE_SCATTER:
    ok = r == s + own || !overlap(s, c->bytes, r, block);
    break;
  default:
    ok = s == r + own || !overlap(s, block, r, c->bytes);
    break;
  }
  if (!ok)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: sendbuf and recvbuf overlap but are not the "
                      "in-place layout",
                      api_name(c->coll));
  return HOOP_SUCCESS;
}

/*
 * One rank: the result is the input (AVG over one rank included); for
 * all-gather the copy above already made it.
 */
static void run_single(const struct call *c) {
  if (c->coll != HOOP_COLL_ALLGATHER && c->send != c->recv && c->bytes > 0)
    memmove(c->recv, c->send, c->bytes);
}

/* Channels only pay once every one gets at least a slice per chunk. */
static int channels_for(const struct hoop_comm *comm, size_t bytes) {
  size_t per = (size_t)comm->nranks * comm->slice_bytes;
  size_t n = bytes / per;
  if (n < 1)
    n = 1;
  return n < (size_t)comm->nsocks ? (int)n : comm->nsocks;
}

/*
 * How many slices each step may run ahead of the next.  Slices that are
 * only copied or reduced into the result need no buffer, so then a step
 * may run a whole chunk ahead; forwarded slices wait in the outbox, whose
 * budget (HOOP_PIPELINE_BYTES) bounds the depth.
 */
static size_t pipeline_depth(const struct hoop_comm *comm, int forwards) {
  if (forwards == 0)
    return UINT32_MAX;
  size_t per_tick = (size_t)forwards * comm->slice_bytes;
  size_t ticks = comm->pipeline_bytes / per_tick;
  return ticks > 2 ? ticks - 1 : 1;
}

static void stamp_header(struct hoop_plan *plan, const struct call *c,
                         size_t header_count, int nch, size_t depth) {
  struct hoop_comm *comm = plan->comm;
  plan->header = (struct hoop_wire_header){
      .magic = HOOP_WIRE_MAGIC,
      .version = HOOP_WIRE_VERSION,
      .coll = (uint8_t)c->coll,
      .dtype = (uint8_t)c->dtype,
      .op = (uint8_t)c->op,
      .seq = comm->seq,
      .count = header_count,
      .slice_bytes = (uint32_t)comm->slice_bytes,
      .root = -1,
      .sender = comm->rank,
      .depth = (uint32_t)(depth < UINT32_MAX ? depth : UINT32_MAX),
      .nchannels = (uint16_t)nch,
      .algo = 1,
  };
}

static hoop_result_t run_ring(struct hoop_comm *comm, const struct call *c,
                              size_t header_count) {
  hoop_result_t res;
  int n = comm->nranks;
  int nch = channels_for(comm, c->bytes);
  int forwards = c->coll == HOOP_COLL_ALLGATHER ? 0 : n - 2;
  size_t depth = pipeline_depth(comm, forwards);
  size_t slots = hoop__ring_outbox_slots(c->coll, n, depth);
  struct hoop_plan plan;
  hoop__plan_init(&plan, comm, c->dtype, c->op);
  stamp_header(&plan, c, header_count, nch, depth);
  char *outbox = NULL;
  if (slots > 0)
    HOOP_CHECK_GOTO(hoop__comm_scratch(comm,
                                       slots * comm->slice_bytes *
                                           (size_t)nch,
                                       (void **)&outbox),
                    res, out);
  struct hoop_ring_call rc = {
      .coll = c->coll,
      .nchannels = nch,
      .count = c->count,
      .send = c->send,
      .recv = c->recv,
      .slice_bytes = comm->slice_bytes / c->elem_size * c->elem_size,
      .depth = depth,
      .outbox = outbox,
      .outbox_slots = slots,
  };
  HOOP_CHECK_GOTO(hoop__ring_build(&plan, &rc), res, out);
  res = hoop__engine_run(&plan);
out:
  if (res != HOOP_SUCCESS && res != HOOP_ERR_NO_MEMORY) {
    char call_desc[240], cause[HOOP_ERROR_MAX];
    hoop__describe_call(&plan.header, call_desc, sizeof call_desc);
    memcpy(cause, comm->last_error, sizeof cause);
    HOOP_ERROR(comm, res, "rank %d: %s failed: %s", comm->rank, call_desc,
               cause);
    hoop__comm_break(comm, res);
  }
  hoop__plan_free(&plan);
  return res;
}

/*
 * `per_rank` is the count the user passed; for reduce-scatter and
 * all-gather it is one rank's block of a buffer nranks times larger.
 */
static hoop_result_t run(struct hoop_comm *comm, struct call *c,
                         size_t per_rank) {
  hoop_result_t res = HOOP_SUCCESS;
  HOOP_CHECK(hoop__comm_enter(comm, api_name(c->coll)));
  int blocks = c->coll != HOOP_COLL_ALLREDUCE;
  size_t mult = blocks ? (size_t)comm->nranks : 1;
  HOOP_CHECK_GOTO(check_args(comm, c, per_rank, mult,
                             c->coll != HOOP_COLL_ALLGATHER),
                  res, out);
  HOOP_CHECK_GOTO(check_aliasing(comm, c, per_rank * c->elem_size), res,
                  out);
  comm->seq++;
  /* The ring never sends a rank its own block; all-gather copies it. */
  char *own = (char *)c->recv + (size_t)comm->rank * per_rank * c->elem_size;
  if (c->coll == HOOP_COLL_ALLGATHER && c->send != own && per_rank > 0)
    memcpy(own, c->send, per_rank * c->elem_size);
  if (comm->nranks == 1)
    run_single(c);
  else
    res = run_ring(comm, c, per_rank);
out:
  hoop__comm_leave(comm);
  return res;
}

hoop_result_t hoop_allreduce(hoop_comm_t comm, const void *sendbuf,
                             void *recvbuf, size_t count, hoop_dtype_t dtype,
                             hoop_op_t op, hoop_stream_t stream) {
  struct call c = {.coll = HOOP_COLL_ALLREDUCE, .send = sendbuf,
                   .recv = recvbuf, .dtype = dtype, .op = op};
  return run(comm, &c, count);
}

hoop_result_t hoop_reduce_scatter(hoop_comm_t comm, const void *sendbuf,
                                  void *recvbuf, size_t recvcount,
                                  hoop_dtype_t dtype, hoop_op_t op,
                                  hoop_stream_t stream) {
  struct call c = {.coll = HOOP_COLL_REDUCE_SCATTER, .send = sendbuf,
                   .recv = recvbuf, .dtype = dtype, .op = op};
  return run(comm, &c, recvcount);
}

hoop_result_t hoop_allgather(hoop_comm_t comm, const void *sendbuf,
                             void *recvbuf, size_t sendcount,
                             hoop_dtype_t dtype, hoop_stream_t stream) {
  /* The op travels in the header; all-gather's is fixed. */
  struct call c = {.coll = HOOP_COLL_ALLGATHER, .send = sendbuf,
                   .recv = recvbuf, .dtype = dtype, .op = HOOP_SUM};
  return run(comm, &c, sendcount);
}
