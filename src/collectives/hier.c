/*
 * The hierarchical all-reduce, for ranks spread over hosts with as many on
 * each: a ring reduce-scatter inside each host (phase A), a ring
 * all-reduce of each rank's part across the hosts among the ranks with the
 * same place in theirs (B), and a ring all-gather inside each host (C).
 * Each host's link carries 2(M-1)K/M each way for M hosts, where the flat
 * ring by host carries 2(N-1)K/N (bench/results/2026-11-29-hier.md).
 *
 * The buffer goes in segments so that the phases overlap: segment s+1's
 * reduce-scatter and segment s-1's all-gather run while segment s crosses
 * the hosts.  Ring phases of one plan wait for each other through the
 * engine's groups: phase A of segment s is group 2s+1, B 2s+2.  A gate
 * waits for every group up to it, so B(s) starts once A(0..s) and
 * B(0..s-1) are done, C(s) once B(s) is, and A(s+1) once A(s) and
 * B(s-1) are: at most one reduce-scatter runs ahead of the hosts, and one
 * outbox per phase serves every segment.
 *
 * A and C share the links inside the host, in key order: A(0), A(1),
 * C(0), A(2), C(1), ...  With every A first, C(0) waited behind the last
 * reduce-scatter, and the all-gathers ran after the hosts' ring instead
 * of beside it (hoop-sim, 16 hosts of 8, 1 GiB: 2.07 s, the ring 1.70).
 */
#include <stdint.h>
#include <stdlib.h>

#include "collectives/algorithms.h"
#include "collectives/ring.h"
#include "core/comm.h"
#include "core/error.h"

/*
 * Segments of at least this much, at most HIER_MAX_SEGMENTS.  Each adds
 * a wait between phases, and the segments' rings across hosts run one
 * after another, each paying its 2(M-1) hops; fewer segments leave more
 * of the phases inside the hosts unhidden.  In hoop-sim the overlap won
 * even on 64 hosts of 8 (64 MiB: 117 ms in 8 segments, 198 ms in one;
 * the flat ring took 107).
 */
#define HIER_SEGMENT_BYTES ((size_t)4 << 20)
#define HIER_MAX_SEGMENTS 8

/* Stages of the key order on a host's links (see above). */
static size_t stage_a(size_t s) { return 2 * s; }
static size_t stage_c(size_t s) { return 2 * s + 3; }

size_t hoop__hier_segments(size_t bytes) {
  size_t segments = bytes / HIER_SEGMENT_BYTES;
  return segments < 1                   ? 1
         : segments > HIER_MAX_SEGMENTS ? HIER_MAX_SEGMENTS
                                        : segments;
}

int hoop__hier_applies(const struct hoop_comm *comm) {
  return comm->nhosts >= 2 && comm->ranks_per_host >= 2;
}

/* A ring phase over `bytes`, shaped by the comm's settings. */
static struct hoop_ring_call phase(const struct hoop_comm *comm,
                                   hoop_coll_t coll, int n, int place,
                                   const int *ranks, size_t elem_size,
                                   size_t count, size_t slice) {
  struct hoop_ring_call rc = {.coll = coll, .n = n, .place = place,
                              .ranks = ranks, .count = count,
                              .slice_bytes = slice};
  hoop__ring_shape(comm, coll, n, count * elem_size, &rc.nchannels,
                   &rc.depth);
  rc.outbox_slots = hoop__ring_outbox_slots(coll, n, rc.depth, 0);
  rc.slot_bytes = hoop__ring_slot_bytes(count, n, rc.nchannels, elem_size,
                                        slice);
  return rc;
}

hoop_result_t hoop__hier_build(struct hoop_plan *plan,
                               const struct hoop_call *c) {
  struct hoop_comm *comm = plan->comm;
  if (!hoop__hier_applies(comm))
    return HOOP_ERROR(comm, HOOP_ERR_INTERNAL,
                      "hierarchical all-reduce over %d hosts of %d ranks",
                      comm->nhosts, comm->ranks_per_host);
  int ranks_per_host = comm->ranks_per_host, hosts = comm->nhosts;
  int place = comm->ring_place[comm->rank];
  int host = place / ranks_per_host, local = place % ranks_per_host;
  /* The ring's order holds each host's ranks together (topology.c). */
  const int *inside = comm->ring_order + (size_t)host * ranks_per_host;
  size_t esz = c->elem_size, slice = c->slice_bytes;
  size_t segments = hoop__hier_segments(c->bytes);
  int *across = malloc(sizeof *across * (size_t)hosts);
  if (across == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "hierarchical schedule");
  for (int h = 0; h < hosts; h++)
    across[h] = comm->ring_order[(size_t)h * ranks_per_host + local];
  /* The first segment and part are the largest: their outboxes serve all. */
  size_t off, count, part_off, part;
  hoop__ring_chunk(c->count, (int)segments, 0, &off, &count);
  hoop__ring_chunk(count, ranks_per_host, 0, &part_off, &part);
  struct hoop_ring_call a = phase(comm, HOOP_COLL_REDUCE_SCATTER,
                                  ranks_per_host, local, inside, esz, count,
                                  slice);
  struct hoop_ring_call b = phase(comm, HOOP_COLL_ALLREDUCE, hosts, host,
                                  across, esz, part, slice);
  /*
   * Ticks a stage may use: a ring runs at most rounds + (steps - 1) x depth
   * ticks, depth at most the rounds, and no chunk outgrows the segment.
   */
  int most = ranks_per_host > hosts ? ranks_per_host : hosts;
  uint64_t stage_width =
      (uint64_t)(hoop__nslices(count * esz, slice) + 1) * (2 * (uint64_t)most);
  size_t a_bytes = a.outbox_slots * (size_t)a.nchannels * a.slot_bytes;
  size_t b_bytes = b.outbox_slots * (size_t)b.nchannels * b.slot_bytes;
  char *outbox = NULL;
  plan->header.nchannels = (uint16_t)b.nchannels;
  plan->header.depth = (uint32_t)(b.depth < UINT32_MAX ? b.depth : UINT32_MAX);
  hoop_result_t res = HOOP_SUCCESS;
  if (a_bytes + b_bytes > 0)
    HOOP_CHECK_GOTO(hoop__comm_scratch(comm, a_bytes + b_bytes,
                                       (void **)&outbox),
                    res, out);
  HOOP_CHECK_GOTO(hoop__plan_groups(plan, 2 * (int)segments), res, out);
  for (size_t s = 0; s < segments; s++) {
    hoop__ring_chunk(c->count, (int)segments, (int)s, &off, &count);
    hoop__ring_chunk(count, ranks_per_host, local, &part_off, &part);
    char *seg = c->recv + off * esz, *mine = seg + part_off * esz;
    uint16_t group_a = (uint16_t)(2 * s + 1), group_b = (uint16_t)(2 * s + 2);

    a = phase(comm, HOOP_COLL_REDUCE_SCATTER, ranks_per_host, local, inside,
              esz, count, slice);
    a.send = c->send + off * esz;
    a.recv = mine; /* reduce-scatter's output: this rank's block */
    a.outbox = outbox;
    a.tick_base = stage_a(s) * stage_width;
    a.group = group_a;
    a.gate = s > 0 ? (uint16_t)(group_a - 2) : 0;
    HOOP_CHECK_GOTO(hoop__ring_build(plan, &a), res, out);

    b = phase(comm, HOOP_COLL_ALLREDUCE, hosts, host, across, esz, part,
              slice);
    b.send = b.recv = mine;
    b.outbox = outbox + a_bytes;
    b.tick_base = s * stage_width;
    b.group = group_b;
    b.gate = group_a;
    b.average = plan->op == HOOP_AVG;
    HOOP_CHECK_GOTO(hoop__ring_build(plan, &b), res, out);

    struct hoop_ring_call g = phase(comm, HOOP_COLL_ALLGATHER,
                                    ranks_per_host, local, inside, esz,
                                    count, slice);
    g.send = mine;
    g.recv = seg;
    g.tick_base = stage_c(s) * stage_width;
    g.gate = group_b;
    HOOP_CHECK_GOTO(hoop__ring_build(plan, &g), res, out);
  }
out:
  free(across);
  return res;
}
