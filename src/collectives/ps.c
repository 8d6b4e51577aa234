/*
 * Parameter server all-reduce: every rank sends its whole buffer to the
 * root, the root reduces the contributions piece by piece as they arrive
 * (all peers' links are read at once) and sends the result back to each.
 * The root's link carries 2(N-1)K bytes per call, every other rank's 2K:
 * this is the baseline the ring's 2(N-1)K/N is measured against, so it is
 * built as well as the ring: pipelined, with no extra copies.
 *
 * The root can return piece j only once every peer has delivered it, and
 * N-1 TCP flows converging on the root's link do not progress evenly.
 * Left free, fast peers ran megabytes ahead of the slowest one; the root's
 * outbound link idled behind it and the results went out after the
 * inbound transfer ended (1.4x the duplex model on 8 emulated 1 Gbit
 * hosts).  So each result piece doubles as a credit: a peer sends piece
 * j + PS_WINDOW only once it has piece j back, which keeps the flows in
 * step.  Small pieces keep the pipeline's fill and drain short; four
 * 64 KiB pieces per peer measured best there (1.02x the model, against
 * 1.10x for two 256 KiB slices), and on shm and loopback no worse.
 */
#include "collectives/algorithms.h"
#include "core/comm.h"
#include "core/error.h"

#define PS_WINDOW 4

/* A multiple of every element size, as call->slice_bytes is. */
static size_t piece_bytes(const struct hoop_call *call) {
  return call->slice_bytes < HOOP_PS_PIECE_BYTES ? call->slice_bytes
                                                 : HOOP_PS_PIECE_BYTES;
}

static hoop_result_t build_worker(struct hoop_plan *plan,
                                  const struct hoop_call *call) {
  size_t slice = piece_bytes(call), nslices = hoop__nslices(call->bytes, slice);
  int32_t returned[PS_WINDOW]; /* the last PS_WINDOW result pieces */
  for (size_t j = 0; j < nslices; j++) {
    size_t at = j * slice, bytes = hoop__slice_len(call->bytes, slice, j);
    struct hoop_plan_op up = {
        .kind = HOOP_OP_SEND,
        .bytes = (uint32_t)bytes,
        .src = call->send + at,
        .feed = HOOP_NO_OP,
        .after = j >= PS_WINDOW ? returned[j % PS_WINDOW] : HOOP_NO_OP,
        .key = hoop__key(j, 0)};
    int32_t sent;
    HOOP_CHECK(hoop__plan_add(plan, call->root, 1, &up, &sent));
    /* In place, the result may only land once the input has gone. */
    struct hoop_plan_op down = {.kind = HOOP_OP_RECV_COPY,
                                .bytes = (uint32_t)bytes,
                                .dst = call->recv + at, .feed = HOOP_NO_OP,
                                .after = sent, .key = hoop__key(j, 0)};
    HOOP_CHECK(hoop__plan_add(plan, call->root, 0, &down,
                              &returned[j % PS_WINDOW]));
  }
  /* A zero-byte call still exchanges headers, so it checks the peers. */
  int link;
  HOOP_CHECK(hoop__plan_link(plan, call->root, 0, 1, &link));
  return hoop__plan_link(plan, call->root, 0, 0, &link);
}

static hoop_result_t build_root(struct hoop_plan *plan,
                                const struct hoop_call *call) {
  struct hoop_comm *comm = plan->comm;
  size_t slice = piece_bytes(call), nslices = hoop__nslices(call->bytes, slice);
  int n = comm->nranks, last = (call->root + n - 1) % n;
  for (size_t j = 0; j < nslices; j++) {
    size_t at = j * slice, bytes = hoop__slice_len(call->bytes, slice, j);
    int32_t sum = HOOP_NO_OP;
    /* Peers in a fixed order, so every run adds in the same order. */
    for (int i = 1; i < n; i++) {
      int peer = (call->root + i) % n;
      struct hoop_plan_op op = {
          .kind = HOOP_OP_RECV_REDUCE,
          .bytes = (uint32_t)bytes,
          .src = sum == HOOP_NO_OP ? call->send + at : call->recv + at,
          .dst = call->recv + at,
          .feed = HOOP_NO_OP,
          .after = sum,
          .key = hoop__key(j, 0),
          .finish_avg = peer == last && plan->op == HOOP_AVG,
      };
      HOOP_CHECK(hoop__plan_add(plan, peer, 0, &op, &sum));
    }
    for (int i = 1; i < n; i++) {
      struct hoop_plan_op op = {.kind = HOOP_OP_SEND, .bytes = (uint32_t)bytes,
                                .src = call->recv + at, .feed = sum,
                                .after = HOOP_NO_OP, .key = hoop__key(j, 0)};
      HOOP_CHECK(hoop__plan_add(plan, (call->root + i) % n, 1, &op, NULL));
    }
  }
  for (int i = 1; i < n; i++) {
    int link;
    HOOP_CHECK(hoop__plan_link(plan, (call->root + i) % n, 0, 1, &link));
    HOOP_CHECK(hoop__plan_link(plan, (call->root + i) % n, 0, 0, &link));
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__ps_build(struct hoop_plan *plan,
                             const struct hoop_call *call) {
  return plan->comm->rank == call->root ? build_root(plan, call)
                                        : build_worker(plan, call);
}
