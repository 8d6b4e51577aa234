/*
 * Topology over what the ranks published at bootstrap: the queries, and
 * what this rank learns from it when joining (its host, its transports,
 * how the engine waits).
 */
#include "core/comm.h"
#include "core/error.h"
#include "core/types.h"
#include "core/log.h"
#include "core/param.h"
#include "hoop_build_config.h"
#include "core/conn.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

static hoop_result_t check_rank(hoop_comm_t comm, const char *what,
                                int rank) {
  if (rank < 0 || rank >= comm->nranks)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: rank %d is outside 0..%d", what, rank,
                      comm->nranks - 1);
  return HOOP_SUCCESS;
}

/*
 * The ring by host, then rank: a counting sort over the host indices
 * (every rank computes the same order from the same table).
 */
static void order_ring(struct hoop_comm *comm, int hosts, int *first) {
  int n = comm->nranks;
  memset(first, 0, sizeof *first * (size_t)(hosts + 1));
  for (int r = 0; r < n; r++)
    first[comm->host_index[r] + 1]++;
  for (int h = 0; h < hosts; h++)
    first[h + 1] += first[h];
  for (int r = 0; r < n; r++) {
    int place = first[comm->host_index[r]]++;
    comm->ring_order[place] = r;
    comm->ring_place[r] = place;
  }
}

/*
 * Hosts are numbered by their lowest rank, so every rank agrees.  Sorting
 * by host keeps it O(n log n) for large jobs.
 */
hoop_result_t hoop__comm_index_hosts(struct hoop_comm *comm) {
  int n = comm->nranks;
  struct hoop_keyed *order = malloc(sizeof *order * (size_t)n);
  /* One more than the ranks: the ring's sort reuses it (order_ring). */
  int *lowest = malloc(sizeof *lowest * ((size_t)n + 1));
  int *index = malloc(sizeof *index * (size_t)n);
  comm->ring_order = malloc(sizeof *comm->ring_order * (size_t)n);
  comm->ring_place = malloc(sizeof *comm->ring_place * (size_t)n);
  if (order == NULL || lowest == NULL || index == NULL ||
      comm->ring_order == NULL || comm->ring_place == NULL) {
    free(order);
    free(lowest);
    free(index);
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "host table");
  }
  for (int r = 0; r < n; r++)
    order[r] = (struct hoop_keyed){comm->peers[r].host_hash, r};
  qsort(order, (size_t)n, sizeof *order, hoop__keyed_cmp);
  for (int i = 0; i < n; i++)
    lowest[order[i].id] =
        i > 0 && order[i].key == order[i - 1].key ? lowest[order[i - 1].id]
                                                  : order[i].id;
  /* A host's index counts the hosts whose lowest rank comes before. */
  int hosts = 0;
  for (int r = 0; r < n; r++)
    index[r] = lowest[r] == r ? hosts++ : index[lowest[r]];
  comm->host_index = index;
  comm->nhosts = hosts;
  free(order);
  order_ring(comm, hosts, lowest);
  /* order_ring leaves lowest[h] the place after host h's last rank. */
  comm->ranks_per_host = n / hosts;
  for (int h = 0; h < hosts; h++)
    if (lowest[h] != (h + 1) * (n / hosts))
      comm->ranks_per_host = 0;
  free(lowest);
  return HOOP_SUCCESS;
}

int hoop__comm_peers_mappable(const struct hoop_comm *comm) {
  return comm->single_host && hoop__param_transport() == NULL;
}

hoop_result_t hoop_comm_rank_info(hoop_comm_t comm, int rank,
                                  hoop_rank_info_t *info) {
  HOOP_CHECK(hoop__comm_check_live(comm, "hoop_comm_rank_info"));
  if (info == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_rank_info: info is NULL");
  hoop_result_t res = hoop__check_versioned(
      "hoop_comm_rank_info", "hoop_rank_info_t", "HOOP_RANK_INFO_INIT", info,
      offsetof(hoop_rank_info_t, host), sizeof *info,
      HOOP_RANK_INFO_VERSION);
  if (res != HOOP_SUCCESS)
    return hoop__error_attach(comm, res);
  res = check_rank(comm, "hoop_comm_rank_info", rank);
  if (res == HOOP_SUCCESS) {
    const struct hoop_peer_info *p = &comm->peers[rank];
    hoop_rank_info_t full = {
        .host = comm->host_index[rank],
        .pid = p->pid,
        .cuda_devices = p->cuda_devices,
    };
    hoop__transports_rank_info(p, &full);
    memcpy(full.hostname, p->hostname, sizeof full.hostname);
    full.hostname[sizeof full.hostname - 1] = '\0';
    inet_ntop(p->addr.family, p->addr.ip, full.address, sizeof full.address);
    hoop__fill_versioned(info, &full, offsetof(hoop_rank_info_t, host));
  }
  return res;
}

hoop_result_t hoop_comm_transport(hoop_comm_t comm, int a, int b,
                                  const char **name) {
  HOOP_CHECK(hoop__comm_check_live(comm, "hoop_comm_transport"));
  if (name == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_transport: name is NULL");
  hoop_result_t res = check_rank(comm, "hoop_comm_transport", a);
  if (res == HOOP_SUCCESS)
    res = check_rank(comm, "hoop_comm_transport", b);
  if (res == HOOP_SUCCESS) {
    const struct hoop_transport_ops *t =
        a == b ? NULL
               : hoop__transport_pick(&comm->peers[a], &comm->peers[b]);
    if (a == b)
      *name = "self";
    else if (t != NULL)
      *name = t->name;
    else
      res = HOOP_ERROR(comm, HOOP_ERR_UNSUPPORTED,
                       "hoop_comm_transport: no transport can join ranks "
                       "%d and %d (HOOP_TRANSPORT names one that cannot)",
                       a, b);
  }
  return res;
}

/*
 * "shm x3" or "shm x2, tcp x1": the transports rank 0 uses to the peers
 * on its host (same_host) or on the others, "none" without such peers.
 */
static void describe_transports(const struct hoop_comm *comm, int same_host,
                                char *buf, size_t len) {
  const char *names[4];
  int counts[4], kinds = 0;
  uint64_t mine = comm->peers[comm->rank].host_hash;
  for (int peer = 0; peer < comm->nranks; peer++) {
    if (peer == comm->rank ||
        (comm->peers[peer].host_hash == mine) != same_host)
      continue;
    const struct hoop_transport_ops *t = hoop__transport_pick(
        &comm->peers[comm->rank], &comm->peers[peer]);
    const char *name = t != NULL ? t->name : "?";
    int k = 0;
    while (k < kinds && strcmp(names[k], name) != 0)
      k++;
    if (k == kinds && kinds < 4) {
      names[kinds] = name;
      counts[kinds++] = 0;
    }
    if (k < kinds)
      counts[k]++;
  }
  size_t used = 0;
  snprintf(buf, len, "none");
  for (int k = 0; k < kinds && used < len; k++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s x%d",
                             k ? ", " : "", names[k], counts[k]);
}

/*
 * Where device buffers will go, as far as it is known before the first
 * device call settles it.
 */
static const char *device_path_expected(const struct hoop_comm *comm) {
  if (!HOOP_HAVE_CUDA)
    return "none (built without CUDA)";
  return hoop__comm_peers_mappable(comm)
             ? "cuda_ipc, or staged if a rank cannot map its peers' GPU "
               "memory (settled at the first device call)"
             : "staged through host memory";
}

/*
 * Rank 0's INFO banner, the one line a bug report needs first: hoop's
 * version, the transports to peers on rank 0's host and on other hosts,
 * where device buffers will go, the algorithm setting, the size from
 * which calls bypass the caches and where rank 0 listens.
 */
void hoop__comm_log_banner(const struct hoop_comm *comm) {
  char here[64], away[64], astr[HOOP_ADDR_STRLEN], where[160];
  describe_transports(comm, 1, here, sizeof here);
  describe_transports(comm, 0, away, sizeof away);
  const char *forced = hoop__param_transport();
  hoop__addr_str(&comm->peers[comm->rank].addr, astr);
  if (comm->iface.name[0] != '\0')
    snprintf(where, sizeof where, "%s %s (%s)", comm->iface.name, astr,
             comm->iface.setting);
  else
    snprintf(where, sizeof where, "%s", astr);
  HOOP_INFO("hoop %s: communicator %016llx, %d rank%s; transports from "
            "rank %d: this host %s, other hosts %s%s%s%s; device buffers: "
            "%s; algorithm %s (%s); calls from %zu bytes bypass the caches "
            "(%s); listening on %s",
            hoop_version_string(), (unsigned long long)comm->comm_id,
            comm->nranks, comm->nranks == 1 ? "" : "s", comm->rank, here,
            away,
            forced != NULL ? " (HOOP_TRANSPORT=" : "",
            forced != NULL ? forced : "", forced != NULL ? ")" : "",
            device_path_expected(comm), hoop_algo_name(comm->algo),
            comm->algo_source, comm->cold_bytes, comm->cold_source, where);
}

/*
 * The largest data cache of cpu0 as sysfs describes it ("32768K"), 0 if
 * it cannot be read.  Not sysconf(_SC_LEVEL3_CACHE_SIZE): in this VM that
 * says 320 MiB where sysfs says 32 MiB, shared by both cores.
 */
static size_t last_level_cache_bytes(void) {
  size_t best = 0;
  for (int i = 0; i < 8; i++) {
    char path[80], type[32] = "", unit = 'B';
    unsigned long long size = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d",
             i);
    size_t end = strlen(path);
    snprintf(path + end, sizeof path - end, "/type");
    FILE *f = fopen(path, "r");
    if (f == NULL)
      break;
    int ok = fscanf(f, "%31s", type) == 1;
    fclose(f);
    if (!ok || strcmp(type, "Instruction") == 0)
      continue;
    snprintf(path + end, sizeof path - end, "/size");
    if ((f = fopen(path, "r")) == NULL)
      continue;
    ok = fscanf(f, "%llu%c", &size, &unit) >= 1;
    fclose(f);
    if (!ok)
      continue;
    size <<= unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    if (size > best)
      best = (size_t)size;
  }
  return best;
}

/*
 * From how many bytes a call's received data and out-of-place sums go
 * around the caches (hoop__copy_cold).  That pays once what the ranks on
 * this machine touch in a call, input and output each, no longer fits in
 * the cache they share: it then evicts most of its own output before it
 * is read again (a ring that forwards a received slice reads it back from
 * memory instead of cache, and still gains), and a plain store reads each
 * line in first: 64 MiB float sums over shm against Open MPI went from
 * 2.61x to 3.04-3.21x on 4 ranks and 3.21x to 3.66-3.75x on 2
 * (bench/results/2026-11-23-allreduce-shm-64m-cold-copy.md).  Before that
 * size it costs: on 2 ranks sharing 32 MiB, a 4 MiB all-reduce took
 * 0.57-0.68 of the time with plain stores
 * (bench/results/2026-11-24-cold-threshold.md).  Where the cache size is
 * unknown, from 4 MiB.
 */
static void learn_cold_bytes(struct hoop_comm *comm, int sharing) {
  int64_t set = hoop__param_cold_bytes();
  if (set > 0) {
    comm->cold_bytes = (size_t)set;
    comm->cold_source = "HOOP_COLD_BYTES";
    return;
  }
  size_t llc = last_level_cache_bytes();
  if (llc > 0) {
    comm->cold_bytes = llc / (2 * (size_t)(sharing > 0 ? sharing : 1));
    comm->cold_source = "the last-level cache over twice this machine's ranks";
  } else {
    comm->cold_bytes = (size_t)4 << 20;
    comm->cold_source = "cache size unknown";
  }
}

/* The longest yield window when this machine's ranks outnumber its cores. */
#define CROWDED_YIELD_US 200

/*
 * Where the ranks are: whether they all share this host, and how many
 * cores it has.  Busy-polling only pays when every rank on this machine
 * (emulated hosts included: they share its cores) has a core; with more
 * ranks than cores a spinning rank steals the time its peer needs to
 * answer.
 */
void hoop__comm_learn_host(struct hoop_comm *comm) {
  const struct hoop_peer_info *me = &comm->peers[comm->rank];
  int local = 0, sharing = 0;
  for (int i = 0; i < comm->nranks; i++) {
    local += comm->peers[i].host_hash == me->host_hash;
    sharing += comm->peers[i].machine_hash == me->machine_hash;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  comm->host_cores = cores > 0 ? (int)cores : 1;
  comm->single_host = local == comm->nranks;
  comm->host_memory = comm->single_host;
  for (int i = 0; i < comm->nranks && comm->host_memory; i++) {
    const struct hoop_transport_ops *t =
        i != comm->rank ? hoop__transport_pick(me, &comm->peers[i]) : NULL;
    comm->host_memory = i == comm->rank || (t != NULL && t->through_memory);
  }
  learn_cold_bytes(comm, sharing);
  int crowded = sharing > comm->host_cores;
  comm->spin_ns = crowded ? 0 : (long long)hoop__param_spin_us() * 1000;
  /*
   * Yielding lets a peer on this core run and answer, where spinning
   * would hold the core until the scheduler preempts: with both cores of
   * this machine busy, two ranks sharing the other one took 430 us per
   * 64 KiB shm all-reduce after a 200 us spin and 17 us with none.  The
   * short default spin (5 us) only saves the system calls of yielding
   * when the answer is already on its way: a 4 KiB all-reduce on 2 ranks
   * over shm took 1.5 us without it and 0.95 us with it.
   *
   * The yield window (2 ms) is long because sleeping is paid for by
   * someone else: the last rank into a call, the one its job waits for.
   * A peer asleep in poll() took 50-65 us to wake on this machine, and an
   * 87 KB all-reduce of a rank 300-1000 us late took 52-83 us against
   * 13-18 us with its peer still yielding (hoop-bench -S;
   * bench/results/2026-11-23-train-comm-late-arrival.md).  With 200 us the
   * test suite took 372 s, with 2 ms 362 s.  But where ranks outnumber
   * cores a yielding rank keeps taking turns from one with work: the
   * parameter server over TCP, 4 ranks on 2 cores, 256 KiB, took 281 us
   * (median of 8) with 2 ms against 251 with 200 us.  There the window
   * stays at 200 us.
   */
  long long yield_us = hoop__param_yield_us();
  if (crowded && yield_us > CROWDED_YIELD_US)
    yield_us = CROWDED_YIELD_US;
  comm->yield_ns = yield_us * 1000;
}
