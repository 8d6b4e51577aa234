/*
 * hoop-sim's model: every rank's plan of an all-reduce, reduce-scatter or
 * all-gather, made by the library's own builders (ring.c, tree.c, ps.c,
 * oneshot.c, hier.c) for a communicator that exists only in memory, run
 * through a discrete-event model of the links.
 *
 * What is modelled:
 *   - M hosts of L ranks, placed contiguously (rank r on host r / L) or
 *     cyclically (host r % M); the ring's order by host comes from the
 *     library's own topology code (hoop__comm_index_hosts).
 *   - Each host has one network link (NIC) with its own rate and latency
 *     each way; every message between ranks on two hosts holds the
 *     sender's outbound side for bytes / rate, then, a latency later, the
 *     receiver's inbound side for bytes / rate (first come, first served
 *     on each side).
 *   - Each host has one memory link for messages between its own ranks
 *     (shared memory), with its own rate and latency, shared by all of
 *     them.
 *   - An op waits for what the plan records: its `feed` and `after`, its
 *     `gate` (every op of its rank's groups up to it complete), the
 *     op before it on its link (a send may go once the previous send on
 *     the link has been handed to the link; a receive completes in stream
 *     order), and for a receive its data.  `trails` counts as `after`.
 *
 * What is left out: the time to reduce or copy received bytes (a receive
 * completes when its last byte arrives), the engine's forwarding of a
 * slice before the whole slice is in (the model forwards whole ops), the
 * link buffers' bound on bytes in flight (W), the 64-byte headers, TCP's
 * slow start and sharing, and the hosts' cores: ranks never wait for a
 * CPU.  Calls are in place (as NCCL's: reduce-scatter's recv is the
 * rank's block of send, all-gather's send its block of recv), float32 sum.
 */
#ifndef HOOP_SIM_H
#define HOOP_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hoop_sim_config {
  /*
   * HOOP_COLL_ALLREDUCE (the default), _REDUCE_SCATTER or _ALLGATHER;
   * the two have the ring and the hierarchical schedule.
   */
  hoop_coll_t coll;
  int hosts;          /* M */
  int ranks_per_host; /* L: N = M * L ranks */
  int cyclic;         /* rank r on host r % M, else r / L */
  double link_rate;    /* bytes/s, each direction of a host's NIC */
  double link_latency; /* seconds, one way */
  double shm_rate;     /* bytes/s, a host's memory link */
  double shm_latency;  /* seconds */
  /* The library's settings the builders read (defaults as param.h). */
  size_t slice_bytes;
  size_t pipeline_bytes;
  size_t oneshot_bytes;
  int nsocks;
  /*
   * The cost model's inputs for AUTO.  Zero: taken from the simulated
   * network (alpha the link latency, host alpha the memory link's, link
   * beta 1 / link_rate, host beta 1 / shm_rate, one core: the one shared
   * memory link).
   */
  double model_alpha_s;
  double model_host_alpha_s;
  double model_link_beta_s;
  double model_host_beta_s;
  int model_host_cores;
  /*
   * The most ops to simulate.  When every rank's plan would hold more,
   * each plan is built for bytes / s (s a power of two) and every op
   * carries s times its bytes, as if slices (and the parameter server's
   * pieces) were s times larger; s never goes past what keeps one slice
   * per ring chunk, tree half or server piece.  The ring's ops, about
   * 4N^2 from N * slice bytes up, do not shrink this way.
   */
  uint64_t max_ops;
};

/* The defaults of hoop-sim's options. */
void hoop_sim_config_default(struct hoop_sim_config *cfg);

struct hoop_sim_result {
  hoop_algo_t algo;  /* the schedule simulated (AUTO resolved) */
  double time_s;     /* the last op's completion */
  uint64_t ops;      /* ops simulated, every rank's */
  uint64_t scale;    /* each op carried this many times its bytes */
  uint64_t nlinks;   /* links (one direction of a connection), all ranks */
  /* Bytes, counted as the ops carried them (times scale). */
  uint64_t max_rank_sent;   /* the most one rank sent */
  uint64_t min_rank_sent;
  uint64_t max_rank_moved;  /* the most one rank sent plus received */
  uint64_t root_moved;      /* rank 0: sent plus received */
  uint64_t max_nic_bytes;   /* the busiest NIC direction of any host */
  uint64_t cross_bytes;     /* all bytes between hosts */
  uint64_t shm_bytes;       /* all bytes within hosts */
  uint64_t total_bytes;
  /* The textbook cost next to it: see hoop_sim_closed_form. */
  double closed_form_s;
  /* Optional, [N] each, filled when not NULL. */
  uint64_t *rank_sent;
  uint64_t *rank_recv;
};

/*
 * Simulates one call of cfg->coll over a buffer of `bytes` (a multiple of
 * 4; for reduce-scatter and all-gather the whole buffer, N blocks, a
 * multiple of 4N) under `algo` (AUTO: the cost model's choice).  Returns
 * 0, or -1 with a reason in err.  The plans are built and freed one rank
 * at a time; what stays is about 18 bytes per op.
 */
int hoop_sim_call(const struct hoop_sim_config *cfg, hoop_algo_t algo,
                  size_t bytes, struct hoop_sim_result *res, char *err,
                  size_t errlen);

/* What the cost model (model.c) picks for this call on this network. */
hoop_algo_t hoop_sim_auto_choice(const struct hoop_sim_config *cfg,
                                 size_t bytes);

/*
 * The textbook alpha-beta time of `algo`, with alpha and beta those of
 * the links: across hosts (M > 1) one NIC per rank, ring
 * 2(N-1)a + 2(N-1)/N Kb, double binary tree 2 floor(log2 N) a + its
 * busiest rank's bytes b (hoop__tree_allreduce_load), parameter server
 * 2a + (N-1)Kb, hierarchical 2(M-1)(a + K/(M R)) (its ring across hosts;
 * the rest hidden); on one host (M = 1) the one memory link carries every
 * schedule's 2(N-1)K, after the same hops of the memory link's latency.
 * Reduce-scatter and all-gather: half of the ring's and the hierarchical
 * all-reduce's, (N-1)a + (N-1)/N Kb and (M-1)(a + K/(M R)).
 */
double hoop_sim_closed_form(const struct hoop_sim_config *cfg,
                            hoop_algo_t algo, size_t bytes);

/* Host of a rank under the configuration's placement. */
int hoop_sim_host_of(const struct hoop_sim_config *cfg, int rank);

#ifdef __cplusplus
}
#endif

#endif /* HOOP_SIM_H */
