/*
 * The hierarchical collectives, for ranks spread over hosts with as many
 * on each.  The all-reduce: a ring reduce-scatter inside each host (phase
 * A), a ring all-reduce of each rank's part across the hosts among the
 * ranks with the same place in theirs (B), and a ring all-gather inside
 * each host (C).  Each host's link carries 2(M-1)K/M each way for M
 * hosts, where the flat ring by host carries 2(N-1)K/N
 * (bench/results/2026-11-29-hier.md).
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
 *
 * Reduce-scatter and all-gather are the all-reduce's halves, block by
 * block: see build_reduce_scatter and build_allgather.
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

/* Stages of the all-reduce's key order on a host's links (see above). */
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

/* Where this rank sits among the hosts, and its rings' ranks. */
struct hier_place {
  int hosts, per_host; /* M, L */
  int host, local;     /* this rank's host, and its place in it */
  const int *inside;   /* this host's ranks, in the ring's order */
  int *across;         /* [hosts]: the rank at this local place on each */
};

static hoop_result_t place_rank(struct hoop_comm *comm,
                                struct hier_place *p) {
  if (!hoop__hier_applies(comm))
    return HOOP_ERROR(comm, HOOP_ERR_INTERNAL,
                      "hierarchical schedule over %d hosts of %d ranks",
                      comm->nhosts, comm->ranks_per_host);
  p->per_host = comm->ranks_per_host;
  p->hosts = comm->nhosts;
  int place = comm->ring_place[comm->rank];
  p->host = place / p->per_host;
  p->local = place % p->per_host;
  /* The ring's order holds each host's ranks together (topology.c). */
  p->inside = comm->ring_order + (size_t)p->host * p->per_host;
  p->across = malloc(sizeof *p->across * (size_t)p->hosts);
  if (p->across == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "hierarchical schedule");
  for (int h = 0; h < p->hosts; h++)
    p->across[h] = comm->ring_order[(size_t)h * p->per_host + p->local];
  return HOOP_SUCCESS;
}

/* Elements of one rank's block of a reduce-scatter or all-gather. */
static size_t rank_block(const struct hoop_call *c,
                         const struct hier_place *p) {
  return c->count / ((size_t)p->hosts * (size_t)p->per_host);
}

/* Host h's ranks in the ring's order: as chunks, their blocks. */
static const int *host_ranks(const struct hoop_comm *comm,
                             const struct hier_place *p, int h) {
  return comm->ring_order + (size_t)h * p->per_host;
}

/*
 * Ticks a stage may use: a ring runs at most rounds + (steps - 1) x depth
 * ticks, depth at most the rounds, and no chunk outgrows `bytes`.
 */
static uint64_t stage_width(const struct hier_place *p, size_t bytes,
                            size_t slice) {
  int most = p->per_host > p->hosts ? p->per_host : p->hosts;
  return (uint64_t)(hoop__nslices(bytes, slice) + 1) * (2 * (uint64_t)most);
}

/* A ring phase over `count` elements, shaped by the comm's settings. */
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

static size_t outbox_bytes(const struct hoop_ring_call *rc) {
  return rc->outbox_slots * (size_t)rc->nchannels * rc->slot_bytes;
}

/* The header names the ring across hosts, the same on every rank. */
static void set_header(struct hoop_plan *plan,
                       const struct hoop_ring_call *across) {
  plan->header.nchannels = (uint16_t)across->nchannels;
  plan->header.depth = (uint32_t)(across->depth < UINT32_MAX ? across->depth
                                                             : UINT32_MAX);
}

static hoop_result_t build_allreduce(struct hoop_plan *plan,
                                     const struct hoop_call *c,
                                     const struct hier_place *p) {
  struct hoop_comm *comm = plan->comm;
  int ranks_per_host = p->per_host, hosts = p->hosts;
  int host = p->host, local = p->local;
  size_t esz = c->elem_size, slice = c->slice_bytes;
  size_t segments = hoop__hier_segments(c->bytes);
  /* The first segment and part are the largest: their outboxes serve all. */
  size_t off, count, part_off, part;
  hoop__ring_chunk(c->count, (int)segments, 0, &off, &count);
  hoop__ring_chunk(count, ranks_per_host, 0, &part_off, &part);
  struct hoop_ring_call a = phase(comm, HOOP_COLL_REDUCE_SCATTER,
                                  ranks_per_host, local, p->inside, esz,
                                  count, slice);
  struct hoop_ring_call b = phase(comm, HOOP_COLL_ALLREDUCE, hosts, host,
                                  p->across, esz, part, slice);
  uint64_t width = stage_width(p, count * esz, slice);
  size_t a_bytes = outbox_bytes(&a), b_bytes = outbox_bytes(&b);
  char *outbox = NULL;
  set_header(plan, &b);
  if (a_bytes + b_bytes > 0)
    HOOP_CHECK(hoop__comm_scratch(comm, a_bytes + b_bytes, (void **)&outbox));
  HOOP_CHECK(hoop__plan_groups(plan, 2 * (int)segments));
  for (size_t s = 0; s < segments; s++) {
    hoop__ring_chunk(c->count, (int)segments, (int)s, &off, &count);
    hoop__ring_chunk(count, ranks_per_host, local, &part_off, &part);
    char *seg = c->recv + off * esz, *mine = seg + part_off * esz;
    uint16_t group_a = (uint16_t)(2 * s + 1), group_b = (uint16_t)(2 * s + 2);

    a = phase(comm, HOOP_COLL_REDUCE_SCATTER, ranks_per_host, local,
              p->inside, esz, count, slice);
    a.send = c->send + off * esz;
    a.recv = mine; /* reduce-scatter's output: this rank's block */
    a.outbox = outbox;
    a.tick_base = stage_a(s) * width;
    a.group = group_a;
    a.gate = s > 0 ? (uint16_t)(group_a - 2) : 0;
    HOOP_CHECK(hoop__ring_build(plan, &a));

    b = phase(comm, HOOP_COLL_ALLREDUCE, hosts, host, p->across, esz, part,
              slice);
    b.send = b.recv = mine;
    b.outbox = outbox + a_bytes;
    b.tick_base = s * width;
    b.group = group_b;
    b.gate = group_a;
    b.average = plan->op == HOOP_AVG;
    HOOP_CHECK(hoop__ring_build(plan, &b));

    struct hoop_ring_call g = phase(comm, HOOP_COLL_ALLGATHER,
                                    ranks_per_host, local, p->inside, esz,
                                    count, slice);
    g.send = mine;
    g.recv = seg;
    g.tick_base = stage_c(s) * width;
    g.gate = group_b;
    HOOP_CHECK(hoop__ring_build(plan, &g));
  }
  return HOOP_SUCCESS;
}

/*
 * A ring among this host's ranks over segment [off, off + len) of the
 * blocks of host h's ranks: its chunk at local place i is the block of
 * h's rank i.  Reduce-scatter leaves this rank the host's sum of its
 * chunk; all-gather brings every other.
 */
static struct hoop_ring_call inside_ring(const struct hoop_comm *comm,
                                         const struct hoop_call *c,
                                         const struct hier_place *p, int h,
                                         size_t block, size_t len) {
  struct hoop_ring_call rc = phase(comm, c->coll, p->per_host, p->local,
                                   p->inside, c->elem_size,
                                   (size_t)p->per_host * len,
                                   c->slice_bytes);
  rc.chunks = host_ranks(comm, p, h);
  rc.stride = block;
  return rc;
}

/* Reduce-scatter's group of A(s, h) and of B(s), in the order below. */
static uint16_t rs_group_a(size_t s, int h, int hosts) {
  size_t b_before = s > 0 ? s - 1 : 0;
  return (uint16_t)(s * (size_t)hosts + b_before + (size_t)h + 1);
}

static uint16_t rs_group_b(size_t s, int hosts, size_t segments) {
  size_t a_before = s + 2 < segments ? s + 2 : segments;
  return (uint16_t)(a_before * (size_t)hosts + s + 1);
}

/*
 * Reduce-scatter: in segment s of every block, a ring inside the host for
 * each host h (A(s, h)) sums over this host the blocks of h's ranks, each
 * rank keeping the one at its own place in h; then a ring across the
 * hosts among the ranks of this place (B(s)) adds up those M partial sums
 * into this rank's block.  Only reduced blocks cross: each host's link
 * carries (M-1)K/M each way, where the flat ring's carries (N-1)K/N.  The
 * M partial sums wait in scratch, by host.
 *
 * The M rings of A share one outbox, so each is a group that waits for
 * the one before, and the rings of B share another; each segment's
 * partial sums have scratch of their own.  As a gate waits for every
 * group up to it, B(s) is numbered after A(s+1): A(0), A(1), B(0), A(2),
 * B(1), ... (rs_group_a, rs_group_b), so that A(s+1) runs beside B(s).
 * Numbered A(s), B(s), the rings of A(s+1) after the first waited for
 * B(s), and hoop-sim ran 16 hosts of 8 at 64 MiB in 93 ms, the flat ring
 * in 53 (56 now).
 */
static hoop_result_t build_reduce_scatter(struct hoop_plan *plan,
                                          const struct hoop_call *c,
                                          const struct hier_place *p) {
  struct hoop_comm *comm = plan->comm;
  int hosts = p->hosts;
  size_t esz = c->elem_size, slice = c->slice_bytes, block = rank_block(c, p);
  /* Each segment takes hosts + 1 groups, and groups have 16-bit numbers. */
  size_t segments = hoop__hier_segments(c->bytes);
  size_t fit = UINT16_MAX / ((size_t)hosts + 1);
  segments = segments < fit ? segments : fit;
  size_t off, len;
  hoop__ring_chunk(block, (int)segments, 0, &off, &len);
  struct hoop_ring_call a = inside_ring(comm, c, p, 0, block, len);
  struct hoop_ring_call b = phase(comm, c->coll, hosts, p->host, p->across,
                                  esz, (size_t)hosts * len, slice);
  uint64_t width = stage_width(p, len * esz, slice);
  size_t a_bytes = outbox_bytes(&a), b_bytes = outbox_bytes(&b);
  size_t sums_bytes = (size_t)hosts * block * esz;
  char *scratch = NULL;
  set_header(plan, &b);
  if (a_bytes + b_bytes + sums_bytes > 0)
    HOOP_CHECK(hoop__comm_scratch(comm, a_bytes + b_bytes + sums_bytes,
                                  (void **)&scratch));
  HOOP_CHECK(hoop__plan_groups(plan, (int)segments * (hosts + 1)));
  for (size_t s = 0; s < segments; s++) {
    hoop__ring_chunk(block, (int)segments, (int)s, &off, &len);
    char *sums = scratch + a_bytes + b_bytes + (size_t)hosts * off * esz;
    for (int h = 0; h < hosts; h++) {
      a = inside_ring(comm, c, p, h, block, len);
      a.send = c->send + off * esz;
      a.recv = sums + (size_t)h * len * esz;
      a.outbox = scratch;
      a.tick_base = (s * (size_t)hosts + (size_t)h) * width;
      a.group = rs_group_a(s, h, hosts);
      a.gate = h > 0   ? rs_group_a(s, h - 1, hosts)
               : s > 0 ? rs_group_a(s - 1, hosts - 1, hosts)
                       : 0;
      HOOP_CHECK(hoop__ring_build(plan, &a));
    }
    b = phase(comm, c->coll, hosts, p->host, p->across, esz,
              (size_t)hosts * len, slice);
    b.send = sums;
    b.recv = c->recv + off * esz;
    b.outbox = scratch + a_bytes;
    b.tick_base = s * width;
    b.group = rs_group_b(s, hosts, segments);
    /* B(s-1), numbered after A(s), waits for it too. */
    b.gate = s > 0 ? rs_group_b(s - 1, hosts, segments)
                   : rs_group_a(0, hosts - 1, hosts);
    b.average = plan->op == HOOP_AVG;
    HOOP_CHECK(hoop__ring_build(plan, &b));
  }
  return HOOP_SUCCESS;
}

/*
 * All-gather, the mirror: in segment s of every block, a ring across the
 * hosts among the ranks of this place (B(s)) brings their blocks straight
 * to their places in recv, then a ring inside the host for each host h
 * (A(s, h)) passes on the blocks of h's ranks.  Each host's link carries
 * (M-1)K/M each way.  All-gather forwards from recv, with no outbox, so
 * the M rings of A(s) run together, after B(s); B(s+1) waits for B(s)
 * and A(s-1).
 */
static hoop_result_t build_allgather(struct hoop_plan *plan,
                                     const struct hoop_call *c,
                                     const struct hier_place *p) {
  struct hoop_comm *comm = plan->comm;
  int hosts = p->hosts;
  size_t esz = c->elem_size, slice = c->slice_bytes, block = rank_block(c, p);
  size_t segments = hoop__hier_segments(c->bytes);
  size_t off, len;
  hoop__ring_chunk(block, (int)segments, 0, &off, &len);
  uint64_t width = stage_width(p, len * esz, slice);
  HOOP_CHECK(hoop__plan_groups(plan, 2 * (int)segments));
  for (size_t s = 0; s < segments; s++) {
    hoop__ring_chunk(block, (int)segments, (int)s, &off, &len);
    uint16_t group_b = (uint16_t)(2 * s + 1), group_a = (uint16_t)(2 * s + 2);
    struct hoop_ring_call b = phase(comm, c->coll, hosts, p->host,
                                    p->across, esz, (size_t)hosts * len,
                                    slice);
    /* The chunk at each host's place is its rank's block. */
    b.chunks = p->across;
    b.stride = block;
    b.send = c->send + off * esz;
    b.recv = c->recv + off * esz;
    b.tick_base = s * width;
    b.group = group_b;
    b.gate = s > 0 ? (uint16_t)(group_b - 2) : 0;
    if (s == 0)
      set_header(plan, &b);
    HOOP_CHECK(hoop__ring_build(plan, &b));
    for (int h = 0; h < hosts; h++) {
      struct hoop_ring_call a = inside_ring(comm, c, p, h, block, len);
      /* This rank's chunk: its own block, or the one B(s) brought. */
      size_t own = (size_t)a.chunks[p->local];
      a.send = c->recv + (own * block + off) * esz;
      a.recv = c->recv + off * esz;
      a.tick_base = (s * (size_t)hosts + (size_t)h) * width;
      a.group = group_a;
      a.gate = group_b;
      HOOP_CHECK(hoop__ring_build(plan, &a));
    }
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__hier_build(struct hoop_plan *plan,
                               const struct hoop_call *c) {
  struct hier_place p;
  HOOP_CHECK(place_rank(plan->comm, &p));
  hoop_result_t res =
      c->coll == HOOP_COLL_REDUCE_SCATTER ? build_reduce_scatter(plan, c, &p)
      : c->coll == HOOP_COLL_ALLGATHER    ? build_allgather(plan, c, &p)
                                          : build_allreduce(plan, c, &p);
  free(p.across);
  return res;
}
