/*
 * hoop-info: what a communicator looks like and what its cost model
 * predicts.  Start it like any hoop program:
 *
 *   hoop-run -n 8 hoop-info          (or mpirun, torchrun, srun)
 *
 * Rank 0 prints the build, the topology (each host's ranks and devices,
 * and which transport joins ranks within and across hosts), the RDMA
 * ports it sees and whether ib could join each pair of ranks, the cost
 * model's parameters (HOOP_ALPHA_NS, HOOP_LINK_MBPS or HOOP_HOST_MBPS), the
 * predicted all-reduce time
 * of each algorithm over a size sweep, which one AUTO picks, and the sizes
 * at which the predicted winner changes.
 *
 * Everything but the RDMA part uses hoop.h alone.  The RDMA part needs
 * what hoop.h does not offer, so hoop-info links the static library and
 * reads internal headers: it asks every rank to look for its RDMA ports
 * (transport/rdma.h), which no public setting does; it reads the ports the
 * ranks published from the communicator (core/comm.h); and it judges
 * each pair with ib's own selection (transport/ib.h).  Putting the ports
 * and the verdict in hoop.h would fix an ABI for a transport that has
 * never run on RDMA hardware, so what it needs to publish may change.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hoop.h"
#include "core/comm.h"
#include "transport/rdma.h"
#include "transport/ib.h"
#include "transport/transport.h"

static void die(hoop_comm_t comm, const char *what, hoop_result_t res) {
  fprintf(stderr, "hoop-info: %s: %s: %s\n", what, hoop_strerror(res),
          comm != NULL ? hoop_comm_last_error(comm) : hoop_last_error());
  exit(1);
}

static double predict(hoop_comm_t comm, hoop_algo_t algo, size_t bytes) {
  double s;
  hoop_result_t res =
      hoop_comm_predict(comm, HOOP_COLL_ALLREDUCE, algo, bytes, &s);
  if (res != HOOP_SUCCESS)
    die(comm, "hoop_comm_predict", res);
  return s;
}

/* The smallest size (to within 1%) at which `b` becomes cheaper than `a`. */
static size_t crossover(hoop_comm_t comm, hoop_algo_t a, hoop_algo_t b) {
  size_t lo = 1, hi = (size_t)1 << 40;
  if (predict(comm, b, lo) <= predict(comm, a, lo) ||
      predict(comm, b, hi) > predict(comm, a, hi))
    return 0;
  while (hi - lo > lo / 100 + 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (predict(comm, b, mid) <= predict(comm, a, mid))
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

static void print_crossover(hoop_comm_t comm, hoop_algo_t a, hoop_algo_t b) {
  size_t x = crossover(comm, a, b);
  if (x == 0)
    printf("#   %s -> %s: no crossover\n", hoop_algo_name(a), hoop_algo_name(b));
  else
    printf("#   %s -> %s: from %zu bytes (%.1f KiB) on\n", hoop_algo_name(a),
           hoop_algo_name(b), x, x / 1024.0);
}

static hoop_rank_info_t rank_info(hoop_comm_t comm, int rank) {
  hoop_rank_info_t info = HOOP_RANK_INFO_INIT;
  hoop_result_t res = hoop_comm_rank_info(comm, rank, &info);
  if (res != HOOP_SUCCESS)
    die(comm, "hoop_comm_rank_info", res);
  return info;
}

static const char *transport(hoop_comm_t comm, int a, int b) {
  const char *name;
  hoop_result_t res = hoop_comm_transport(comm, a, b, &name);
  if (res != HOOP_SUCCESS)
    die(comm, "hoop_comm_transport", res);
  return name;
}

/*
 * One line per host: its ranks, what they can use, and the transport
 * between its first two ranks and from its first rank to rank 0's host.
 * Hosts are numbered by their lowest rank, so one pass in rank order
 * meets each host's first rank before its others.
 */
static void print_topology(hoop_comm_t comm, int n) {
  printf("# topology (HOOP_TRANSPORT=%s):\n",
         getenv("HOOP_TRANSPORT") != NULL ? getenv("HOOP_TRANSPORT")
                                           : "auto");
  int *first = malloc(sizeof *first * (size_t)n);
  int *second = malloc(sizeof *second * (size_t)n);
  int *count = calloc((size_t)n, sizeof *count);
  if (first == NULL || second == NULL || count == NULL) {
    fprintf(stderr, "hoop-info: out of memory\n");
    exit(1);
  }
  int hosts = 0;
  for (int r = 0; r < n; r++) {
    int h = rank_info(comm, r).host;
    if (count[h]++ == 0) {
      first[h] = r;
      second[h] = -1;
      hosts++;
    } else if (second[h] < 0) {
      second[h] = r;
    }
  }
  for (int h = 0; h < hosts; h++) {
    hoop_rank_info_t info = rank_info(comm, first[h]);
    printf("#   host %d (%s): %d rank(s) from rank %d; shm %s, %d GPU(s), "
           "%d RDMA device(s); inside: %s; to host 0: %s\n",
           h, info.hostname, count[h], first[h], info.shm ? "yes" : "no",
           info.cuda_devices, info.verbs_devices,
           second[h] >= 0 ? transport(comm, first[h], second[h]) : "-",
           h > 0 ? transport(comm, first[h], 0) : "-");
  }
  free(first);
  free(second);
  free(count);
}

static void print_port(const struct hoop_rdma_local_port *p) {
  static const int mtu_bytes[] = {0, 256, 512, 1024, 2048, 4096};
  printf("#   %s port %u: %s, %s, LID %u, MTU %d, %d GID(s)\n", p->device,
         p->port, hoop__rdma_state_name(p->state),
         hoop__rdma_link_layer_name(p->link_layer), p->lid, mtu_bytes[p->mtu],
         p->ngids);
  for (int i = 0; i < p->ngids; i++) {
    char text[HOOP_RDMA_GID_STRLEN];
    const struct hoop_rdma_gid *g = &p->gids[i];
    printf("#     GID %3u %-40s %s%s\n", g->index,
           hoop__rdma_gid_str(g->raw, text), hoop__rdma_gid_type_name(g->type),
           g->type != HOOP_GID_IB && hoop__rdma_gid_is_ipv4(g->raw) ? ", IPv4"
                                                                 : "");
  }
}

/* The RDMA ports this rank's host has, as discovery finds them. */
static void print_rdma_devices(void) {
  struct hoop_rdma_local_port *ports;
  int n;
  char why[256];
  if (!hoop__rdma_discover(&ports, &n, why, sizeof why)) {
    printf("# RDMA devices: cannot list them: %s\n", why);
    return;
  }
  if (n == 0)
    printf("# no RDMA devices: %s\n", why);
  else
    printf("# RDMA devices (rank 0's host):\n");
  for (int i = 0; i < n; i++)
    print_port(&ports[i]);
  free(ports);
}

/*
 * Whether ib could join each pair of ranks, from the ports they
 * published; past 16 ranks, only the pairs with rank 0.
 */
static void print_ib_pairs(hoop_comm_t comm, int n) {
  printf("# ib (only with HOOP_TRANSPORT=ib; never run on RDMA "
         "hardware)%s:\n", n > 16 ? ", rank 0 to each rank" : "");
  for (int a = 0; a < n; a++) {
    for (int b = a + 1; b < n && (a == 0 || n <= 16); b++) {
      char why[400];
      struct hoop_published pa =
          hoop__published(&comm->peers[a], &hoop__ib_transport);
      struct hoop_published pb =
          hoop__published(&comm->peers[b], &hoop__ib_transport);
      struct hoop_rdma_port ports[2];
      hoop__ib_published(&pa, &ports[0], NULL);
      hoop__ib_published(&pb, &ports[1], NULL);
      bool ok = hoop__ib_select(&ports[0], a, &ports[1], b, why, sizeof why);
      printf("#   ranks %d and %d: %s: %s\n", a, b,
             ok ? "could use ib" : "no", why);
    }
  }
}

int main(void) {
  hoop_comm_t comm;
  hoop__rdma_probe_always();
  hoop_result_t res = hoop_comm_init_env(&comm, NULL);
  if (res != HOOP_SUCCESS)
    die(NULL, "hoop_comm_init_env", res);
  int rank, n;
  hoop_comm_rank(comm, &rank);
  hoop_comm_size(comm, &n);
  if (rank == 0) {
    hoop_model_t m = HOOP_MODEL_INIT;
    res = hoop_comm_get_model(comm, &m);
    if (res != HOOP_SUCCESS)
      die(comm, "hoop_comm_get_model", res);
    printf("# hoop %s, %d ranks, %s\n", hoop_version_string(), n,
           m.single_host ? "all on one host" : "on several hosts");
    print_topology(comm, n);
    print_rdma_devices();
    print_ib_pairs(comm, n);
    printf("# model: alpha %.1f us per hop; ", m.alpha_s * 1e6);
    if (m.single_host)
      printf("host copies at %.0f MB/s per core, %d cores "
             "(HOOP_HOST_MBPS)%s\n",
             1e-6 / m.host_beta_s, m.host_cores,
             m.host_shm ? "; over shm a byte reduced costs 1.5 copied" : "");
    else
      printf("links at %.0f MB/s (HOOP_LINK_MBPS)\n", 1e-6 / m.link_beta_s);
    printf("# predicted all-reduce time (us); AUTO picks the smallest, or "
           "on 2 ranks up to HOOP_ONESHOT_BYTES the one-shot schedule; "
           "hier is the ring unless hosts hold as many ranks, 2 or more\n");
    printf("# %12s %12s %12s %12s %12s %7s\n", "bytes", "ring", "tree",
           "ps", "hier", "auto");
    for (size_t bytes = 1024; bytes <= ((size_t)256 << 20); bytes *= 4) {
      double ring = predict(comm, HOOP_ALGO_RING, bytes);
      double tree = predict(comm, HOOP_ALGO_TREE, bytes);
      double ps = predict(comm, HOOP_ALGO_PS, bytes);
      double hier = predict(comm, HOOP_ALGO_HIER, bytes);
      double best = predict(comm, HOOP_ALGO_AUTO, bytes);
      /* The one-shot schedule of 2 ranks is AUTO's only, not a column. */
      const char *pick = best == ring   ? "ring"
                         : best == tree ? "tree"
                         : best == ps   ? "ps"
                         : best == hier ? "hier"
                                        : hoop_algo_name(HOOP_ALGO_ONESHOT);
      printf("  %12zu %12.1f %12.1f %12.1f %12.1f %7s\n", bytes, ring * 1e6,
             tree * 1e6, ps * 1e6, hier * 1e6, pick);
    }
    printf("# predicted crossovers:\n");
    print_crossover(comm, HOOP_ALGO_TREE, HOOP_ALGO_RING);
    print_crossover(comm, HOOP_ALGO_PS, HOOP_ALGO_TREE);
    print_crossover(comm, HOOP_ALGO_PS, HOOP_ALGO_RING);
    print_crossover(comm, HOOP_ALGO_RING, HOOP_ALGO_HIER);
    fflush(stdout);
  }
  res = hoop_barrier(comm);
  if (res != HOOP_SUCCESS)
    die(comm, "hoop_barrier", res);
  hoop_comm_destroy(comm);
  return 0;
}
