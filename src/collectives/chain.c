/*
 * Pipelined chains for broadcast and reduce: the data flows along the ring
 * order, slice by slice, so every link carries the buffer once and a rank
 * forwards slice j while slice j+1 arrives.  Broadcast runs root, root+1,
 * ..., root-1; reduce runs root+1, ..., root, summing on the way, with the
 * partial sums of a middle rank in reused outbox slots.
 */
#include "collectives/algorithms.h"
#include "core/comm.h"
#include "core/error.h"

/* Partial-sum slots a middle rank of a reduce chain cycles through. */
#define CHAIN_SLOTS 8

static hoop_result_t build_broadcast(struct hoop_plan *plan,
                                     const struct hoop_call *call, int pos,
                                     int prev, int next) {
  size_t slice = call->slice_bytes, nslices = hoop__nslices(call->bytes, slice);
  for (size_t j = 0; j < nslices; j++) {
    size_t at = j * slice, bytes = hoop__slice_len(call->bytes, slice, j);
    int32_t got = HOOP_NO_OP;
    const char *src = call->send + at;
    if (pos > 0) {
      struct hoop_plan_op op = {.kind = HOOP_OP_RECV_COPY,
                                .bytes = (uint32_t)bytes,
                                .dst = call->recv + at, .feed = HOOP_NO_OP,
                                .after = HOOP_NO_OP, .key = hoop__key(j, 0)};
      HOOP_CHECK(hoop__plan_add(plan, prev, 0, &op, &got));
      src = call->recv + at;
    }
    if (next >= 0) {
      struct hoop_plan_op op = {.kind = HOOP_OP_SEND, .bytes = (uint32_t)bytes,
                                .src = src, .feed = got,
                                .after = HOOP_NO_OP, .key = hoop__key(j, 0)};
      HOOP_CHECK(hoop__plan_add(plan, next, 1, &op, NULL));
    }
  }
  return HOOP_SUCCESS;
}

static hoop_result_t build_reduce(struct hoop_plan *plan,
                                  const struct hoop_call *call, int pos,
                                  int prev, int next) {
  size_t slice = call->slice_bytes, nslices = hoop__nslices(call->bytes, slice);
  char *slots = NULL;
  int32_t slot_reader[CHAIN_SLOTS];
  if (pos > 0 && next >= 0) {
    HOOP_CHECK(hoop__comm_scratch(plan->comm, CHAIN_SLOTS * slice,
                                  (void **)&slots));
    for (int s = 0; s < CHAIN_SLOTS; s++)
      slot_reader[s] = HOOP_NO_OP;
  }
  for (size_t j = 0; j < nslices; j++) {
    size_t at = j * slice, bytes = hoop__slice_len(call->bytes, slice, j);
    int32_t sum = HOOP_NO_OP;
    const char *src = call->send + at;
    if (pos > 0) {
      int slot = (int)(j % CHAIN_SLOTS);
      struct hoop_plan_op op = {
          .kind = HOOP_OP_RECV_REDUCE,
          .bytes = (uint32_t)bytes,
          .src = call->send + at,
          .dst = next >= 0 ? slots + (size_t)slot * slice : call->recv + at,
          .feed = HOOP_NO_OP,
          .after = next >= 0 ? slot_reader[slot] : HOOP_NO_OP,
          .key = hoop__key(j, 0),
          .finish_avg = next < 0 && plan->op == HOOP_AVG,
      };
      HOOP_CHECK(hoop__plan_add(plan, prev, 0, &op, &sum));
      src = op.dst;
    }
    if (next >= 0) {
      struct hoop_plan_op op = {.kind = HOOP_OP_SEND, .bytes = (uint32_t)bytes,
                                .src = src, .feed = sum,
                                .after = HOOP_NO_OP, .key = hoop__key(j, 0)};
      int32_t sent;
      HOOP_CHECK(hoop__plan_add(plan, next, 1, &op, &sent));
      if (slots != NULL)
        slot_reader[j % CHAIN_SLOTS] = sent;
    }
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__chain_build(struct hoop_plan *plan,
                                const struct hoop_call *call) {
  struct hoop_comm *comm = plan->comm;
  int n = comm->nranks, r = comm->rank;
  /* Position along the chain, which follows the ring (by host); the root
   * is first for broadcast, last for reduce. */
  int first = call->coll == HOOP_COLL_BROADCAST
                  ? call->root
                  : hoop__ring_peer(comm, call->root, 1);
  int pos = (comm->ring_place[r] - comm->ring_place[first] + n) % n;
  int prev = pos > 0 ? hoop__ring_peer(comm, r, -1) : -1;
  int next = pos < n - 1 ? hoop__ring_peer(comm, r, 1) : -1;
  int link;
  /* Zero-byte calls still exchange headers with both neighbours. */
  if (prev >= 0)
    HOOP_CHECK(hoop__plan_link(plan, prev, 0, 0, &link));
  if (next >= 0)
    HOOP_CHECK(hoop__plan_link(plan, next, 0, 1, &link));
  return call->coll == HOOP_COLL_BROADCAST
             ? build_broadcast(plan, call, pos, prev, next)
             : build_reduce(plan, call, pos, prev, next);
}
