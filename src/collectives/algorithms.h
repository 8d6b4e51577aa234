/*
 * What every algorithm's plan builder gets: one collective call, checked
 * and sized.  Builders add this rank's ops to a plan and touch nothing
 * else; collectives.c chooses the builder, runs the plan and counts it.
 */
#ifndef HOOP_ALGORITHMS_H
#define HOOP_ALGORITHMS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/engine.h"

struct hoop_call {
  hoop_coll_t coll;
  /*
   * The communicator's algorithm setting when the call was made: a queued
   * device call keeps it, so that a later hoop_comm_set_algo cannot make
   * ranks run it differently.
   */
  hoop_algo_t setting;
  hoop_algo_t algo; /* what the setting chose for this call */
  const char *send;
  char *recv;
  size_t count; /* elements of the whole buffer */
  size_t bytes;
  hoop_dtype_t dtype;
  hoop_op_t op;
  size_t elem_size;
  int root;           /* broadcast, reduce and the parameter server */
  size_t slice_bytes; /* a multiple of elem_size */
  /*
   * hoop's own set-up traffic (the CUDA IPC path's handshake), which the
   * user's counters leave out: they count the calls the user made.
   */
  bool uncounted;
};

/*
 * This rank's plan of a checked call, from the builder its algorithm
 * names; a ring gets the channels and pipeline depth the communicator's
 * settings give it, and its outbox in the communicator's scratch.  The
 * one place that maps a call to a builder: the library's calls and
 * tools/hoop-sim both come here.
 */
hoop_result_t hoop__collective_build(struct hoop_plan *plan,
                                     const struct hoop_call *call);

/* Double binary tree: allreduce, broadcast and reduce. */
hoop_result_t hoop__tree_build(struct hoop_plan *plan,
                               const struct hoop_call *call);

/*
 * The double binary tree all-reduce's traffic at its busiest rank, in
 * half-buffers: the most any rank sends (it receives as many) and the most
 * any rank reduces.  For the cost model; tree.c owns the trees' shape.
 */
void hoop__tree_allreduce_load(int nranks, int *max_sent, int *max_reduced);

/*
 * The same all-reduce across hosts that share one link each
 * (host_index[r]: rank r's host, from 0 to hosts - 1).  The trees are laid
 * out by rank, so ranks of one host share their host's link with their
 * other-host edges.  For the cost model, from the trees' shape:
 */
struct hoop_tree_hosts {
  /* The most half-buffers one host's ranks send to other hosts (as many
   * come back). */
  int halves;
  /* The most edges between hosts on one tree's path from a rank up to
   * its root: the hops a slice waits on the network, each way. */
  int crossings;
  /* The most, on such a path, of what its edges between hosts carry
   * together: for each, the edges from other hosts into its lower end's
   * host at as many crossings from the root (those ranks get their slices
   * off the network at once).  Slices the host links carry while one
   * slice goes the length of the path. */
  int path_load;
};

/* Fills `out`; 0, or -1 when out of memory. */
int hoop__tree_allreduce_hosts(int nranks, const int *host_index, int hosts,
                               struct hoop_tree_hosts *out);

/*
 * Parameter server (root = call->root): allreduce, in pieces of at most
 * HOOP_PS_PIECE_BYTES (less where the slice is smaller).
 */
#define HOOP_PS_PIECE_BYTES ((size_t)64 << 10)
hoop_result_t hoop__ps_build(struct hoop_plan *plan,
                             const struct hoop_call *call);

struct hoop_comm;

/*
 * Hierarchical all-reduce (hier.c): a ring inside each host, one across
 * the hosts, one inside again; reduce-scatter the first two, all-gather
 * the last two.  It applies where there are 2 hosts or more with as many
 * ranks (2 or more) on each (comm->ranks_per_host).
 */
int hoop__hier_applies(const struct hoop_comm *comm);

/* How many segments it cuts `bytes` into, to overlap its phases. */
size_t hoop__hier_segments(size_t bytes);
hoop_result_t hoop__hier_build(struct hoop_plan *plan,
                               const struct hoop_call *call);

/* Two ranks, each reducing the whole buffer: allreduce (oneshot.c). */
hoop_result_t hoop__oneshot_build(struct hoop_plan *plan,
                                  const struct hoop_call *call);

/* Pipelined chain from (broadcast) or to (reduce) the root. */
hoop_result_t hoop__chain_build(struct hoop_plan *plan,
                                const struct hoop_call *call);

/* How many slices `bytes` makes (none for zero bytes), and slice j's length. */
static inline size_t hoop__nslices(size_t bytes, size_t slice) {
  return (bytes + slice - 1) / slice;
}

static inline size_t hoop__slice_len(size_t bytes, size_t slice, size_t j) {
  size_t start = j * slice;
  return bytes - start < slice ? bytes - start : slice;
}

#endif /* HOOP_ALGORITHMS_H */
