/*
 * One-shot all-reduce of two ranks: each sends the other its whole buffer
 * and reduces what arrives with its own, slice by slice.  Data crosses
 * between the ranks once, where the ring sends half each way and then
 * the reduced half back (twice, one after the other), and every schedule
 * of more ranks hands over at least twice; the price is that both ranks
 * reduce the whole buffer, so the cost model takes it only for small
 * calls (HOOP_ONESHOT_BYTES).  Both ranks compute rank 0's data op rank
 * 1's, in that order: a sum of two NaNs takes its payload from the first
 * operand, so the other order would leave the ranks' results apart in
 * those bits (tests/test_algorithms.cc's OneShot found it in half sums).
 */
#include "collectives/algorithms.h"
#include "core/comm.h"
#include "core/error.h"

hoop_result_t hoop__oneshot_build(struct hoop_plan *plan,
                                  const struct hoop_call *call) {
  struct hoop_comm *comm = plan->comm;
  if (comm->nranks != 2 || call->coll != HOOP_COLL_ALLREDUCE)
    return HOOP_ERROR(comm, HOOP_ERR_INTERNAL,
                      "one-shot all-reduce on %d ranks", comm->nranks);
  int peer = 1 - comm->rank;
  size_t slice = call->slice_bytes, nslices = hoop__nslices(call->bytes, slice);
  for (size_t j = 0; j < nslices; j++) {
    size_t at = j * slice, bytes = hoop__slice_len(call->bytes, slice, j);
    struct hoop_plan_op out = {.kind = HOOP_OP_SEND,
                               .bytes = (uint32_t)bytes,
                               .src = call->send + at,
                               .feed = HOOP_NO_OP,
                               .after = HOOP_NO_OP,
                               .key = hoop__key(j, 0)};
    int32_t sent;
    HOOP_CHECK(hoop__plan_add(plan, peer, 1, &out, &sent));
    /*
     * In place, each byte of the sum may only land once that byte of the
     * input has gone.  Byte by byte, not the whole slice: both ranks send
     * before they read, so a slice larger than the link buffers would
     * leave each waiting for the other to read (see `trails`).
     */
    int in_place = call->send == call->recv;
    struct hoop_plan_op in = {.kind = HOOP_OP_RECV_REDUCE,
                              .bytes = (uint32_t)bytes,
                              .src = call->send + at,
                              .dst = call->recv + at,
                              .feed = HOOP_NO_OP,
                              .after = in_place ? sent : HOOP_NO_OP,
                              .trails = 1,
                              .key = hoop__key(j, 0),
                              .finish_avg = plan->op == HOOP_AVG,
                              .local_first = comm->rank == 0};
    HOOP_CHECK(hoop__plan_add(plan, peer, 0, &in, NULL));
  }
  /* A zero-byte call still exchanges headers, so it checks the peer. */
  int link;
  HOOP_CHECK(hoop__plan_link(plan, peer, 0, 1, &link));
  return hoop__plan_link(plan, peer, 0, 0, &link);
}
