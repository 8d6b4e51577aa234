/* The cost model and the algorithm choice; see model.h. */
#include "collectives/model.h"

#include <math.h>
#include <stddef.h>

#include "collectives/algorithms.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/types.h"

/*
 * Sequential message hops of a schedule: what alpha multiplies.  A tree of
 * N ranks laid out as a binary heap is floor(log2 N) links deep.
 */
static double hops(hoop_coll_t coll, hoop_algo_t algo, double n) {
  double depth = floor(log2(n > 1 ? n : 2));
  switch (coll) {
  case HOOP_COLL_ALLREDUCE:
  case HOOP_COLL_BARRIER:
    return algo == HOOP_ALGO_TREE      ? 2 * depth
           : algo == HOOP_ALGO_PS      ? 2
           : algo == HOOP_ALGO_ONESHOT ? 1
                                       : 2 * (n - 1);
  case HOOP_COLL_BROADCAST:
  case HOOP_COLL_REDUCE:
    return algo == HOOP_ALGO_TREE ? depth : n - 1;
  default:
    return n - 1;
  }
}

/*
 * The double binary tree moved its busiest link's bytes at 0.88-0.94 of
 * the link rate on emulated 1 Gbit hosts (4 and 8 of them, 1-16 MiB; the
 * ring ran at 1.00), so the model charges it for that: without it, the
 * tree's equal bytes and fewer hops at N=4 won every size in the model and
 * lost by 6-14% from 1 MiB up.
 */
#define TREE_LINK_EFFICIENCY 0.9

/*
 * Bytes on the busiest link, one direction (each direction of a link has
 * its own capacity), of a schedule moving k bytes.  Ring: 2(N-1)/N of the
 * buffer.  Double binary tree: a half-buffer to each child and to the
 * parent in both trees, counted from the trees' shape (1.5k for N of 3 or
 * 4, 2k from 5 on).  Parameter server: (N-1)k into the root and (N-1)k
 * back out, 2(N-1)k through its link in all.  Chains k; a binary tree 2k
 * out of each inner node.
 */
static double link_bytes(hoop_coll_t coll, hoop_algo_t algo, double n,
                         double k) {
  int tree_sent, tree_reduced;
  switch (coll) {
  case HOOP_COLL_ALLREDUCE:
  case HOOP_COLL_BARRIER:
    if (algo == HOOP_ALGO_TREE) {
      hoop__tree_allreduce_load((int)n, &tree_sent, &tree_reduced);
      return tree_sent * k / 2 / TREE_LINK_EFFICIENCY;
    }
    return algo == HOOP_ALGO_PS ? (n - 1) * k : 2 * (n - 1) / n * k;
  case HOOP_COLL_BROADCAST:
  case HOOP_COLL_REDUCE:
    return algo == HOOP_ALGO_TREE ? 2 * k : k;
  default:
    return (n - 1) / n * k;
  }
}

/*
 * On one host the "links" are the cores copying: what counts is the bytes
 * (sent plus received) of the busiest rank, or of all ranks shared among
 * the cores, whichever is larger.  Every all-reduce schedule moves 4(N-1)k
 * in all, (N-1)k of it received into a reduction; they differ in how
 * unevenly.
 *
 * Over shared memory the receiver reduces straight out of the slot, reading
 * two streams and writing one where a copy reads one: a byte reduced costs
 * 1.5 bytes copied.  That sets the parameter server's root (which reduces
 * all (N-1)k) above the even schedules when ranks outnumber cores, where
 * counted as plain bytes all three tied and the server's fewer hops won.
 * Over TCP on one host the kernel's copies on both ends dominate, and
 * there the server measured fastest (4 ranks, 64 MiB: 92 ms against 106
 * for the ring and 125 for the tree), so reductions count as plain bytes.
 * bench/results/2026-11-23-allreduce-4ranks-64m-per-algorithm.md has both;
 * over shm its three were within their run-to-run spread.
 */
static double host_bytes(const struct hoop_comm *comm, hoop_coll_t coll,
                         hoop_algo_t algo, double n, double k) {
  double busiest, total, busiest_reduced, total_reduced;
  switch (coll) {
  case HOOP_COLL_ALLREDUCE:
  case HOOP_COLL_BARRIER:
    total = 4 * (n - 1) * k;
    total_reduced = (n - 1) * k;
    if (algo == HOOP_ALGO_TREE) {
      /* At most: the most sent and the most reduced may be two ranks. */
      int sent, reduced;
      hoop__tree_allreduce_load((int)n, &sent, &reduced);
      busiest = sent * k;
      busiest_reduced = reduced * k / 2;
    } else if (algo == HOOP_ALGO_PS) {
      busiest = 2 * (n - 1) * k;
      busiest_reduced = (n - 1) * k;
    } else if (algo == HOOP_ALGO_ONESHOT) {
      busiest = 2 * (n - 1) * k;
      total_reduced = n * (n - 1) * k;
      busiest_reduced = (n - 1) * k;
    } else {
      busiest = 4 * (n - 1) / n * k;
      busiest_reduced = (n - 1) / n * k;
    }
    break;
  case HOOP_COLL_BROADCAST:
  case HOOP_COLL_REDUCE:
    total = 2 * (n - 1) * k;
    busiest = algo == HOOP_ALGO_TREE ? 3 * k : 2 * k;
    total_reduced = coll == HOOP_COLL_REDUCE ? (n - 1) * k : 0;
    busiest_reduced = coll == HOOP_COLL_REDUCE
                          ? (algo == HOOP_ALGO_TREE ? 2 * k : k)
                          : 0;
    break;
  default:
    total = 2 * (n - 1) * k;
    busiest = 2 * (n - 1) / n * k;
    total_reduced = busiest_reduced = 0;
    break;
  }
  if (comm->host_memory) {
    busiest += 0.5 * busiest_reduced;
    total += 0.5 * total_reduced;
  }
  double cores = comm->host_cores < n ? comm->host_cores : n;
  return busiest > total / cores ? busiest : total / cores;
}

/*
 * Latency of `nhops` sequential hops across hosts, `crossings` of them
 * between hosts: the others go between cores of one host, at
 * host_alpha_s.  The ring and the hierarchical all-reduce both pay it
 * there, so that neither wins on hops the other gets for free: with the
 * ring's free and the hierarchical one's at the network's latency, 1 MiB
 * on 512 hosts of 8 went to the ring, which hoop-sim (1 us a memory hop)
 * ran in 28.0 ms, the hierarchical all-reduce in 22.0.  The default of
 * HOOP_HOST_ALPHA_NS, 1 us, is hoop-sim's memory link's latency and about
 * what a 4 KiB hand-over between 2 ranks took over shm on this project's
 * VM (1.15 us, bench/results/2026-11-24-allreduce-shm-4k.md).
 */
static double hops_latency(const struct hoop_comm *comm, double nhops,
                           double crossings) {
  return crossings * comm->alpha_s + (nhops - crossings) * comm->host_alpha_s;
}

/*
 * An all-reduce across hosts with several ranks each, whose ranks share
 * their host's link: the hops and link bytes above assume a link per rank.
 * The ring follows the hosts (topology.c), so of its 2(N-1) sequential
 * hops (N-1 for reduce-scatter and all-gather, which go the same way)
 * only the share that crosses hosts, M of every N, pays the network's
 * latency, the rest a hop between cores' (hops_latency), and each host's
 * link carries one ring edge each way, as one rank's would.  The trees are laid
 * out by rank: a host's link carries every half-buffer its ranks exchange
 * with other hosts.  The server's host link carries the bytes of every
 * rank off the root's host.  hoop-sim showed the need: on 8-64 hosts of 8
 * ranks this model picked the tree where the ring was 8 to 15 times
 * faster (bench/results/2026-11-28-hoop-sim.md).
 *
 * The trees' busiest host link is not their time either: a half-buffer
 * goes in slices (slice_bytes), and the first must go up its tree and
 * back down before the last one is done, crossing host links each of
 * which it shares with a slice of every rank that its host gets off the
 * network at the same time (a host's ranks sit together in the heap).  So
 * the first slice comes back after twice its path's load in slices
 * (hoop__tree_allreduce_hosts), the others follow at the busiest link's
 * rate, and of its hops only the crossings pay the network's latency, the
 * others a memory hop's (as the ring's).  Priced by the busiest link
 * alone, 1 MiB on 512 hosts of 8 (2 slices a half) went to the tree,
 * which hoop-sim ran in 41.9 ms, the ring in 28.0; and 4 KiB on 8 hosts
 * of 8 to the server at 407 us, the tree's 198.5 being priced 298 with
 * all 12 hops at the network's latency.  Now the model is within
 * 0.91-1.12x of hoop-sim's tree up to 1 MiB on 2-64 hosts of 2-8 ranks
 * and 512 of 8.  Past that it can be low (0.61x at 64 MiB on 64 hosts of
 * 8), where the ring is 15 times faster anyway
 * (bench/results/2026-11-29-auto-tree.md).
 */
static void shared_links(const struct hoop_comm *comm, hoop_algo_t algo,
                         double nhops, double k, double *latency_out,
                         double *bytes_out) {
  int n = comm->nranks, hosts = comm->nhosts;
  if (hosts >= n)
    return;
  if (algo == HOOP_ALGO_RING) {
    *latency_out = hops_latency(comm, nhops, nhops * hosts / n);
  } else if (algo == HOOP_ALGO_TREE) {
    struct hoop_tree_hosts t;
    if (hoop__tree_allreduce_hosts(n, comm->host_index, hosts, &t) == 0) {
      double half = k / 2;
      double slice = (double)comm->slice_bytes < half
                         ? (double)comm->slice_bytes
                         : half;
      *latency_out = hops_latency(comm, nhops, 2 * t.crossings);
      *bytes_out = (t.halves * (half - slice) + 2 * t.path_load * slice) /
                   TREE_LINK_EFFICIENCY;
    }
  } else if (algo == HOOP_ALGO_PS) {
    int with_root = 0;
    for (int r = 0; r < n; r++)
      with_root += comm->host_index[r] == comm->host_index[0];
    *bytes_out = (n - with_root) * k;
  }
}

/*
 * The hierarchical all-reduce (M hosts of L ranks): its ring across the
 * hosts, 2(M-1) hops with 2(M-1)K/M on each host's link, beside its rings
 * inside the hosts, where each rank copies 2(L-1)K/L and the host's L ranks
 * share its cores.  Segments overlap the two but for the first segment's
 * reduce-scatter and the last one's all-gather; their rings across hosts
 * run one after another, each paying its 2(M-1) hops.  Without the inside part
 * the model chose it on 16 hosts of 8 where hoop-sim's shared memory link
 * made it 1.2x slower than the ring (one core per host, 1 MiB-1 GiB).
 *
 * Its hops inside the hosts cost a memory hop each, as the ring's
 * (hops_latency).  But a phase starts only once the one before is done on
 * the rank, and on 2 emulated hosts of 2 ranks (1 Gbit/s) small calls took
 * 37-62 us hierarchically against 27-52 for the ring and 27-35 for the
 * server (4 B-2 KiB), reduce-scatter and all-gather at 4 KiB 55-69 against
 * the ring's 32-40; from 16 KiB it was the fastest (110-132 us, the ring
 * 196).  Priced like the ring, it won the model at every size there, so
 * each phase after the first costs the network's latency: at 2 ranks a
 * host as much as the model's former price of its hops inside as network
 * ones, which grew with L (14 of them on hosts of 8, where hoop-sim found
 * it the fastest at 4 KiB on 2 hosts and 64 KiB on 8, and at 1 MiB on 512).
 */
static double hier_seconds(const struct hoop_comm *comm, hoop_coll_t coll,
                           double k) {
  double m = comm->nhosts, l = comm->ranks_per_host;
  /*
   * Reduce-scatter and all-gather are one half each of the all-reduce:
   * (M-1)K/M across, (L-1)K/L copied by each rank inside, half the hops.
   * But reduce-scatter's M rings inside a host run one after another
   * (hier.c), (L-1) hops each.
   */
  double halves = coll == HOOP_COLL_REDUCE_SCATTER ||
                          coll == HOOP_COLL_ALLGATHER
                      ? 1
                      : 2;
  double inside_hops = coll == HOOP_COLL_REDUCE_SCATTER ? m * (l - 1)
                                                        : halves * (l - 1);
  /*
   * Phases that wait for the one before: reduce-scatter's rings inside
   * after the first and its ring across; the all-reduce's ring across and
   * its all-gather inside; the all-gather's ring inside.
   */
  double phase_waits = coll == HOOP_COLL_REDUCE_SCATTER ? m : halves;
  double across = halves * (m - 1) / m * k * comm->beta_s;
  double cores = comm->host_cores < l ? comm->host_cores : l;
  double per_rank = halves * (l - 1) / l * k;
  double inside = (per_rank > per_rank * l / cores ? per_rank
                                                  : per_rank * l / cores) *
                  comm->host_beta_s;
  double segments = (double)hoop__hier_segments((size_t)k);
  return (halves * (m - 1) * segments + phase_waits) * comm->alpha_s +
         inside_hops * comm->host_alpha_s +
         (across > inside ? across : inside) + inside / segments;
}

/* The collectives that the hierarchical schedules cover. */
static int hier_covers(hoop_coll_t coll) {
  return coll == HOOP_COLL_ALLREDUCE || coll == HOOP_COLL_BARRIER ||
         coll == HOOP_COLL_REDUCE_SCATTER || coll == HOOP_COLL_ALLGATHER;
}

double hoop__predict(const struct hoop_comm *comm, hoop_coll_t coll,
                     hoop_algo_t algo, size_t bytes) {
  double n = comm->nranks, k = (double)bytes;
  if (algo == HOOP_ALGO_HIER && hoop__hier_applies(comm) &&
      hier_covers(coll))
    return hier_seconds(comm, coll, k);
  double nhops = hops(coll, algo, n);
  if (comm->single_host)
    return nhops * comm->alpha_s +
           host_bytes(comm, coll, algo, n, k) * comm->host_beta_s;
  double latency = nhops * comm->alpha_s;
  double nbytes = link_bytes(coll, algo, n, k);
  if (coll == HOOP_COLL_ALLREDUCE || coll == HOOP_COLL_BARRIER ||
      (hier_covers(coll) && algo == HOOP_ALGO_RING))
    shared_links(comm, algo, nhops, k, &latency, &nbytes);
  return latency + nbytes * comm->beta_s;
}

/*
 * Reduce-scatter and all-gather have the ring and, across hosts of equal
 * size, the hierarchical schedule: `hier` runs it, the other settings but
 * `ring` the cheaper of the two (one setting covers every collective, as
 * for broadcast and reduce below).
 */
static hoop_algo_t spread_algo(const struct hoop_comm *comm,
                               hoop_algo_t setting, hoop_coll_t coll,
                               size_t bytes) {
  if (setting == HOOP_ALGO_RING || !hoop__hier_applies(comm))
    return HOOP_ALGO_RING;
  if (setting == HOOP_ALGO_HIER)
    return HOOP_ALGO_HIER;
  return hoop__predict(comm, coll, HOOP_ALGO_HIER, bytes) <
                 hoop__predict(comm, coll, HOOP_ALGO_RING, bytes)
             ? HOOP_ALGO_HIER
             : HOOP_ALGO_RING;
}

hoop_algo_t hoop__choose_algo(const struct hoop_comm *comm,
                              hoop_algo_t setting, hoop_coll_t coll,
                              size_t bytes) {
  int rooted = coll == HOOP_COLL_BROADCAST || coll == HOOP_COLL_REDUCE;
  if (coll == HOOP_COLL_REDUCE_SCATTER || coll == HOOP_COLL_ALLGATHER)
    return spread_algo(comm, setting, coll, bytes);
  if (setting == HOOP_ALGO_RING || setting == HOOP_ALGO_TREE)
    return setting;
  if (setting == HOOP_ALGO_PS && !rooted)
    return HOOP_ALGO_PS;
  if (setting == HOOP_ALGO_HIER && !rooted)
    return hoop__hier_applies(comm) ? HOOP_ALGO_HIER : HOOP_ALGO_RING;
  /*
   * AUTO, and PS or HIER for broadcast and reduce.  A parameter server is an
   * all-reduce schedule, and one setting (HOOP_ALGO's, job-wide) covers
   * every collective: a fixed chain in its place would give the broadcasts
   * of a job that set HOOP_ALGO=ps N-1 hops where the model finds the
   * tree's log2 N cheaper, which the job could not avoid short of calling
   * hoop_comm_set_algo around each one.
   *
   * Two ranks hand small calls over once (oneshot.c).  The model, which
   * has no term for a hand-over between cores, cannot place the cut: on 2
   * ranks, against what AUTO ran before, one shot took 0.74-0.77 of the
   * time at 1-16 KiB over shm and 0.47-0.58 over TCP, 0.89-1.04 at
   * 64-256 KiB over shm and 0.80-1.00 over TCP, and lost from 2 MiB over
   * TCP (1.03-1.25; bench/results/2026-11-24-oneshot-ab.md).
   */
  if (coll == HOOP_COLL_ALLREDUCE && comm->nranks == 2 &&
      bytes <= comm->oneshot_bytes)
    return HOOP_ALGO_ONESHOT;
  hoop_algo_t best = HOOP_ALGO_RING;
  double best_s = hoop__predict(comm, coll, HOOP_ALGO_RING, bytes);
  hoop_algo_t others[] = {HOOP_ALGO_TREE, HOOP_ALGO_PS, HOOP_ALGO_HIER};
  int nothers = rooted ? 1 : hoop__hier_applies(comm) ? 3 : 2;
  for (int i = 0; i < nothers; i++) {
    double s = hoop__predict(comm, coll, others[i], bytes);
    if (s < best_s) {
      best = others[i];
      best_s = s;
    }
  }
  return best;
}

hoop_result_t hoop_comm_set_algo(hoop_comm_t comm, hoop_algo_t algo) {
  HOOP_CHECK(hoop__comm_check_live(comm, "hoop_comm_set_algo"));
  if (!hoop__algo_selectable((int)algo))
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_set_algo: %d is not auto, ring, tree, ps "
                      "or hier",
                      (int)algo);
  __atomic_store_n(&comm->algo_source, "hoop_comm_set_algo",
                   __ATOMIC_RELEASE);
  __atomic_store_n(&comm->algo, algo, __ATOMIC_RELEASE);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_get_algo(hoop_comm_t comm, hoop_algo_t *algo) {
  HOOP_CHECK(hoop__comm_check_live(comm, "hoop_comm_get_algo"));
  if (algo == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_get_algo: algo is NULL");
  *algo = hoop__comm_algo(comm);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_predict(hoop_comm_t comm, hoop_coll_t coll,
                                hoop_algo_t algo, size_t bytes,
                                double *seconds) {
  HOOP_CHECK(hoop__comm_check_live(comm, "hoop_comm_predict"));
  if (seconds == NULL || coll < HOOP_COLL_ALLREDUCE ||
      coll >= HOOP_COLL_COUNT || !hoop__algo_selectable((int)algo))
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_predict: bad collective, algorithm or "
                      "NULL result");
  /* The schedule that a call made under the setting runs, priced. */
  if (algo == HOOP_ALGO_AUTO)
    algo = hoop__comm_algo(comm);
  *seconds = hoop__predict(comm, coll,
                           hoop__choose_algo(comm, algo, coll, bytes), bytes);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_get_model(hoop_comm_t comm, hoop_model_t *model) {
  HOOP_CHECK(hoop__comm_check_live(comm, "hoop_comm_get_model"));
  if (model == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_get_model: model is NULL");
  hoop_result_t res = hoop__check_versioned(
      "hoop_comm_get_model", "hoop_model_t", "HOOP_MODEL_INIT", model,
      offsetof(hoop_model_t, alpha_s), sizeof *model, HOOP_MODEL_VERSION);
  if (res != HOOP_SUCCESS)
    return hoop__error_attach(comm, res);
  hoop_model_t full = {
      .alpha_s = comm->alpha_s,
      .link_beta_s = comm->beta_s,
      .host_beta_s = comm->host_beta_s,
      .single_host = comm->single_host,
      .host_cores = comm->host_cores,
      .host_shm = comm->host_memory,
  };
  hoop__fill_versioned(model, &full, offsetof(hoop_model_t, alpha_s));
  return HOOP_SUCCESS;
}
