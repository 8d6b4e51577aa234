/* The ring schedule as a plan; see ring.h. */
#include "collectives/ring.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"

static int mod(int a, int n) { return ((a % n) + n) % n; }

void hoop__ring_chunk(size_t count, int n, int i, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, extra = count % (size_t)n;
  size_t idx = (size_t)i;
  *len = base + (idx < extra ? 1 : 0);
  *off = idx * base + (idx < extra ? idx : extra);
}

int hoop__ring_nsteps(hoop_coll_t coll, int n) {
  return coll == HOOP_COLL_ALLREDUCE ? 2 * (n - 1) : n - 1;
}

/*
 * Reduce-scatter starts one chunk behind all-gather so that its last step
 * leaves rank r holding chunk r, which is where NCCL's reduce-scatter puts
 * rank r's block and where all-gather starts from.
 */
int hoop__ring_out_chunk(hoop_coll_t coll, int rank, int n, int step) {
  switch (coll) {
  case HOOP_COLL_REDUCE_SCATTER:
    return mod(rank - step - 1, n);
  case HOOP_COLL_ALLGATHER:
    return mod(rank - step, n);
  default:
    return step < n - 1 ? mod(rank - step - 1, n)
                        : mod(rank - (step - (n - 1)), n);
  }
}

enum hoop_ring_action hoop__ring_action(hoop_coll_t coll, int n,
                                        int step) {
  if (coll == HOOP_COLL_ALLGATHER || step >= n - 1)
    return HOOP_RING_COPY;
  return step < n - 2 ? HOOP_RING_FORWARD : HOOP_RING_FINAL;
}

size_t hoop__ring_outbox_slots(hoop_coll_t coll, int n, size_t depth,
                               int final_via_outbox) {
  int users = (coll == HOOP_COLL_ALLGATHER ? 0 : n - 2) + final_via_outbox;
  return users > 0 ? (depth + 1) * (size_t)users : 0;
}

/* Channels only pay once every one gets at least a slice per chunk. */
static int channels_for(const struct hoop_comm *comm, int n, size_t bytes) {
  size_t per = (size_t)n * comm->slice_bytes;
  size_t fit = bytes / per;
  if (fit < 1)
    fit = 1;
  return fit < (size_t)comm->nsocks ? (int)fit : comm->nsocks;
}

/*
 * How many slices each ring step may run ahead of the next.  Slices that
 * are only copied or reduced into the result need no buffer, so then a
 * step may run a whole chunk ahead; forwarded slices wait in the outbox,
 * whose budget (HOOP_PIPELINE_BYTES) bounds the depth.  All-reduce's
 * FINAL sums are sent on too, and are bounded like them on every rank
 * (the depth is in the header; whether a rank's call is in place is not):
 * with a whole chunk of lag, 2 ranks sent each sum after it had left the
 * caches and read it back from memory (callgrind's cache model: 0.5 of
 * the buffer more read per call).
 */
static size_t pipeline_depth(const struct hoop_comm *comm, int sent_on) {
  if (sent_on == 0)
    return UINT32_MAX;
  size_t per_tick = (size_t)sent_on * comm->slice_bytes;
  size_t ticks = comm->pipeline_bytes / per_tick;
  return ticks > 2 ? ticks - 1 : 1;
}

size_t hoop__ring_slot_bytes(size_t count, int n, int nchannels,
                             size_t elem_size, size_t slice) {
  size_t chunk = (count + (size_t)n - 1) / (size_t)n;
  size_t step = (chunk + (size_t)nchannels - 1) / (size_t)nchannels;
  size_t bytes = (step * elem_size + 63) / 64 * 64;
  return bytes < slice ? bytes : slice;
}

void hoop__ring_shape(const struct hoop_comm *comm, hoop_coll_t coll, int n,
                      size_t bytes, int *nchannels, size_t *depth) {
  int forwards = coll == HOOP_COLL_ALLGATHER ? 0 : n - 2;
  *nchannels = channels_for(comm, n, bytes);
  *depth = pipeline_depth(comm, coll == HOOP_COLL_ALLREDUCE ? n - 1 : forwards);
}

/* The number of the chunk at ring place p (see hoop_ring_call.chunks). */
static int chunk_at(const struct hoop_ring_call *call, int p) {
  return call->chunks != NULL ? call->chunks[p] : p;
}

/* Where chunk number `chunk` lies (see hoop_ring_call.stride). */
static void chunk_span(const struct hoop_ring_call *call, int chunk,
                       size_t *off, size_t *len) {
  if (call->stride == 0) {
    hoop__ring_chunk(call->count, call->n, chunk, off, len);
    return;
  }
  *off = (size_t)chunk * call->stride;
  *len = call->count / (size_t)call->n;
}

/*
 * Elements [*off, *off + *len) of chunk `chunk` that channel `ch` carries.
 * The schedule numbers chunks by ring place; chunk_at names the chunk at
 * a place, so reduce-scatter leaves each rank its own.
 */
static void channel_part(const struct hoop_ring_call *call, int chunk, int ch,
                         size_t *off, size_t *len) {
  size_t coff, clen;
  chunk_span(call, chunk, &coff, &clen);
  size_t nch = (size_t)call->nchannels;
  size_t lo = clen * (size_t)ch / nch, hi = clen * (size_t)(ch + 1) / nch;
  *off = coff + lo;
  *len = hi - lo;
}

/* One step's chunk as this channel sees it, in bytes and pointers. */
struct ring_step {
  enum hoop_ring_action action;
  size_t bytes;
  const char *local; /* operand of reductions; the source of step 0 */
  char *dst;         /* FINAL and COPY results */
};

static size_t window(size_t bytes, size_t round, size_t slice) {
  size_t start = round * slice;
  return bytes > start ? (bytes - start < slice ? bytes - start : slice) : 0;
}

struct ring_channel {
  int send_link, recv_link;
  struct ring_step *steps; /* [nsteps + 1]: out-step k sends steps[k] */
  int nsteps;
  int final_via_outbox;
  char *outbox;
  size_t slots, next_slot;
  int32_t *slot_reader; /* send op that last read each slot */
};

/*
 * In-step k of slice `round` (receiving out-step k + 1's chunk) and, unless
 * it is the last step, out-step k + 1 sending what it produced.
 */
static hoop_result_t add_slice(struct hoop_plan *plan,
                               const struct hoop_ring_call *call,
                               struct ring_channel *rc, int k, size_t round,
                               uint64_t recv_key, uint64_t send_key) {
  size_t slice = call->slice_bytes;
  const struct ring_step *in = &rc->steps[k + 1];
  size_t bytes = window(in->bytes, round, slice);
  size_t at = round * slice;
  if (bytes == 0)
    return HOOP_SUCCESS;
  struct hoop_plan_op recv = {.bytes = (uint32_t)bytes, .feed = HOOP_NO_OP,
                              .after = HOOP_NO_OP, .key = recv_key,
                              .group = call->group, .gate = call->gate};
  size_t slot = 0;
  if (in->action == HOOP_RING_COPY) {
    recv.kind = HOOP_OP_RECV_COPY;
    recv.dst = in->dst + at;
  } else {
    recv.kind = HOOP_OP_RECV_REDUCE;
    recv.src = in->local + at;
    recv.finish_avg = in->action == HOOP_RING_FINAL && call->average;
    if (in->action == HOOP_RING_FINAL && !rc->final_via_outbox) {
      recv.dst = in->dst + at;
    } else {
      /* Outbox slots are reused in turn, once their last send is done. */
      slot = rc->next_slot++ % rc->slots;
      recv.dst = rc->outbox + slot * call->slot_bytes;
      recv.after = rc->slot_reader[slot];
      if (in->action == HOOP_RING_FINAL)
        recv.copy_to = in->dst + at;
    }
  }
  int32_t recv_id;
  HOOP_CHECK(hoop__plan_op(plan, rc->recv_link, &recv, &recv_id));
  if (k + 1 == rc->nsteps)
    return HOOP_SUCCESS; /* the last step's result stays here */
  struct hoop_plan_op send = {.kind = HOOP_OP_SEND, .bytes = (uint32_t)bytes,
                              .src = recv.dst, .feed = recv_id,
                              .after = HOOP_NO_OP, .key = send_key,
                              .group = call->group, .gate = call->gate};
  int32_t send_id;
  HOOP_CHECK(hoop__plan_op(plan, rc->send_link, &send, &send_id));
  if (in->action == HOOP_RING_FORWARD || recv.copy_to != NULL)
    rc->slot_reader[slot] = send_id;
  return HOOP_SUCCESS;
}

/* Where each step's chunk of this channel lies; returns the longest. */
static size_t describe_steps(const struct hoop_plan *plan,
                             const struct hoop_ring_call *call, int ch,
                             struct ring_channel *rc) {
  int n = call->n, place = call->place, own = chunk_at(call, place);
  size_t esz = plan->elem_size;
  /*
   * Reduce-scatter's output and all-gather's input hold one block, not the
   * whole buffer: their element offsets are relative to this rank's block.
   */
  size_t own_off, own_len;
  chunk_span(call, own, &own_off, &own_len);
  size_t send_bias = call->coll == HOOP_COLL_ALLGATHER ? own_off : 0;
  size_t recv_bias = call->coll == HOOP_COLL_REDUCE_SCATTER ? own_off : 0;
  size_t longest = 0;
  for (int k = 0; k <= rc->nsteps; k++) {
    size_t off, len;
    channel_part(call,
                 chunk_at(call, hoop__ring_out_chunk(call->coll, place, n, k)),
                 ch, &off, &len);
    struct ring_step *s = &rc->steps[k];
    s->action = k == 0 ? HOOP_RING_COPY
                       : hoop__ring_action(call->coll, n, k - 1);
    s->bytes = len * esz;
    s->local = call->send + (off - (k == 0 ? send_bias : 0)) * esz;
    s->dst = call->recv + (off - recv_bias) * esz;
    longest = s->bytes > longest ? s->bytes : longest;
  }
  return longest;
}

static hoop_result_t build_channel(struct hoop_plan *plan,
                                   const struct hoop_ring_call *call,
                                   int ch, struct ring_channel *rc) {
  size_t slice = call->slice_bytes;
  size_t longest = describe_steps(plan, call, ch, rc);
  size_t rounds = (longest + slice - 1) / slice;
  size_t depth = call->depth < rounds ? call->depth : rounds;
  size_t ticks = rounds + (size_t)(rc->nsteps - 1) * depth;
  /*
   * At tick t, step k carries slice t - k * depth (see engine.h).  In-step
   * k is the left neighbour's out-step k, so both use the key (tick, k).
   * Only the steps with a slice at tick t are visited, those with
   * t - rounds < k * depth <= t, so a plan costs what it holds: O(N) ops
   * for a small call, not the O(N^2) of every (tick, step) pair.
   */
  for (size_t t = 0; t < ticks; t++) {
    size_t k_first = t < rounds ? 0 : (t - rounds) / depth + 1;
    size_t k_last = t / depth;
    if (k_last > (size_t)rc->nsteps - 1)
      k_last = (size_t)rc->nsteps - 1;
    for (int k = (int)k_first; k <= (int)k_last; k++) {
      size_t round = t - (size_t)k * depth;
      uint64_t key = hoop__key(call->tick_base + t, (uint32_t)k);
      size_t first = window(rc->steps[0].bytes, round, slice);
      if (k == 0 && first > 0) {
        struct hoop_plan_op send = {.kind = HOOP_OP_SEND,
                               .bytes = (uint32_t)first,
                               .src = rc->steps[0].local + round * slice,
                               .feed = HOOP_NO_OP, .after = HOOP_NO_OP,
                               .key = key, .group = call->group,
                               .gate = call->gate};
        HOOP_CHECK(hoop__plan_op(plan, rc->send_link, &send, NULL));
      }
      HOOP_CHECK(add_slice(
          plan, call, rc, k, round, key,
          hoop__key(call->tick_base + t + depth, (uint32_t)(k + 1))));
    }
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__ring_build(struct hoop_plan *plan,
                               const struct hoop_ring_call *call) {
  struct hoop_comm *comm = plan->comm;
  int n = call->n;
  int next = call->ranks[(call->place + 1) % n];
  int prev = call->ranks[(call->place + n - 1) % n];
  struct ring_channel rc = {.nsteps = hoop__ring_nsteps(call->coll, n),
                            .final_via_outbox = call->final_via_outbox};
  hoop_result_t res = HOOP_SUCCESS;
  rc.slots = call->outbox_slots;
  rc.steps = calloc((size_t)rc.nsteps + 1, sizeof *rc.steps);
  rc.slot_reader = calloc(rc.slots + 1, sizeof *rc.slot_reader);
  if (rc.steps == NULL || rc.slot_reader == NULL) {
    res = HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "ring schedule");
    goto out;
  }
  for (int ch = 0; ch < call->nchannels; ch++) {
    HOOP_CHECK_GOTO(hoop__plan_link(plan, next, ch, 1, &rc.send_link), res,
                    out);
    HOOP_CHECK_GOTO(hoop__plan_link(plan, prev, ch, 0, &rc.recv_link), res,
                    out);
    rc.outbox = call->outbox + (size_t)ch * rc.slots * call->slot_bytes;
    rc.next_slot = 0;
    for (size_t i = 0; i < rc.slots; i++)
      rc.slot_reader[i] = HOOP_NO_OP;
    HOOP_CHECK_GOTO(build_channel(plan, call, ch, &rc), res, out);
  }
out:
  free(rc.steps);
  free(rc.slot_reader);
  return res;
}
