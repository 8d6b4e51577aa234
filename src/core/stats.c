/* The public counters: what each communicator's collectives moved. */
#include <stddef.h>
#include <string.h>

#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/types.h"

/* Adds one peer's bytes of one call; the caller holds state_lock. */
static void count_peer(struct hoop_comm *comm, hoop_coll_stats_t *s, int peer,
                       uint64_t sent, uint64_t received) {
  comm->peer_sent[peer] += sent;
  comm->peer_received[peer] += received;
  comm->stats.bytes_sent += sent;
  comm->stats.bytes_received += received;
  s->bytes_sent += sent;
  s->bytes_received += received;
  if (comm->host_index[peer] != comm->host_index[comm->rank]) {
    comm->stats.bytes_sent_off_host += sent;
    comm->stats.bytes_received_off_host += received;
  }
}

void hoop__stats_count(struct hoop_comm *comm, const struct hoop_plan *plan,
                       hoop_coll_t label, hoop_algo_t algo, long long ns) {
  pthread_mutex_lock(&comm->state_lock);
  hoop_coll_stats_t *s = &comm->stats.by_coll[label][algo];
  s->calls++;
  s->time_ns += (uint64_t)ns;
  s->wait_ns += (uint64_t)plan->wait_ns;
  for (int i = 0; i < plan->nlinks; i++) {
    const struct hoop_link *l = &plan->links[i];
    count_peer(comm, s, l->peer, l->send ? l->bytes : 0,
               l->send ? 0 : l->bytes);
  }
  pthread_mutex_unlock(&comm->state_lock);
}

void hoop__stats_count_peers(struct hoop_comm *comm, hoop_coll_t label,
                             hoop_algo_t algo, long long ns,
                             const uint64_t *sent, const uint64_t *received) {
  pthread_mutex_lock(&comm->state_lock);
  hoop_coll_stats_t *s = &comm->stats.by_coll[label][algo];
  s->calls++;
  s->time_ns += (uint64_t)ns;
  for (int peer = 0; peer < comm->nranks; peer++)
    count_peer(comm, s, peer, sent[peer], received[peer]);
  pthread_mutex_unlock(&comm->state_lock);
}

void hoop__stats_connected(struct hoop_comm *comm) {
  pthread_mutex_lock(&comm->state_lock);
  comm->stats.peers_connected++;
  pthread_mutex_unlock(&comm->state_lock);
}

/*
 * The queries wait for the device calls queued before them (their counts
 * land when the proxy runs them) but never claim the communicator: a
 * watchdog may poll it while another thread's calls run.
 */
static hoop_result_t settle(hoop_comm_t comm, const char *what) {
  HOOP_CHECK(hoop__comm_check_live(comm, what));
  hoop__comm_device_drain(comm); /* its failure is the calls' to report */
  return HOOP_SUCCESS;
}

/*
 * hoop_stats_t of versions 1 and 2, before HOOP_ALGO_HIER widened by_coll:
 * programs built then read this layout.  Their hierarchical calls count
 * under the ring, the schedule a hierarchical all-reduce is made of.
 */
#define STATS_V2_ALGOS 6
struct stats_v2 {
  size_t size;
  unsigned int version;
  uint64_t bytes_sent;
  uint64_t bytes_received;
  hoop_coll_stats_t by_coll[HOOP_COLL_COUNT][STATS_V2_ALGOS];
  uint64_t bytes_sent_off_host;
  uint64_t bytes_received_off_host;
  uint64_t peers_connected;
};

static void add_coll_stats(hoop_coll_stats_t *to, const hoop_coll_stats_t *s) {
  to->calls += s->calls;
  to->time_ns += s->time_ns;
  to->wait_ns += s->wait_ns;
  to->bytes_sent += s->bytes_sent;
  to->bytes_received += s->bytes_received;
}

static void stats_as_v2(const hoop_stats_t *s, struct stats_v2 *old) {
  *old = (struct stats_v2){
      .bytes_sent = s->bytes_sent,
      .bytes_received = s->bytes_received,
      .bytes_sent_off_host = s->bytes_sent_off_host,
      .bytes_received_off_host = s->bytes_received_off_host,
      .peers_connected = s->peers_connected,
  };
  for (int c = 0; c < HOOP_COLL_COUNT; c++) {
    for (int a = 0; a < STATS_V2_ALGOS; a++)
      old->by_coll[c][a] = s->by_coll[c][a];
    add_coll_stats(&old->by_coll[c][HOOP_ALGO_RING],
                   &s->by_coll[c][HOOP_ALGO_HIER]);
  }
}

hoop_result_t hoop_comm_get_stats(hoop_comm_t comm, hoop_stats_t *stats) {
  HOOP_CHECK(settle(comm, "hoop_comm_get_stats"));
  if (stats == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_get_stats: stats is NULL");
  unsigned int version;
  memcpy(&version, (const char *)stats + offsetof(hoop_stats_t, version),
         sizeof version);
  size_t first = offsetof(hoop_stats_t, bytes_sent);
  hoop_result_t res = hoop__check_versioned(
      "hoop_comm_get_stats", "hoop_stats_t", "HOOP_STATS_INIT", stats, first,
      version < 3 ? sizeof(struct stats_v2) : sizeof *stats,
      HOOP_STATS_VERSION);
  if (res != HOOP_SUCCESS)
    return hoop__error_attach(comm, res);
  pthread_mutex_lock(&comm->state_lock);
  if (version < 3) {
    struct stats_v2 old;
    stats_as_v2(&comm->stats, &old);
    hoop__fill_versioned(stats, &old, first);
  } else {
    hoop__fill_versioned(stats, &comm->stats, first);
  }
  pthread_mutex_unlock(&comm->state_lock);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_get_peer_bytes(hoop_comm_t comm, int peer,
                                       uint64_t *sent, uint64_t *received) {
  HOOP_CHECK(settle(comm, "hoop_comm_get_peer_bytes"));
  if (sent == NULL || received == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_get_peer_bytes: NULL result");
  if (peer < 0 || peer >= comm->nranks)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_get_peer_bytes: peer %d is outside 0..%d",
                      peer, comm->nranks - 1);
  pthread_mutex_lock(&comm->state_lock);
  *sent = comm->peer_sent[peer];
  *received = comm->peer_received[peer];
  pthread_mutex_unlock(&comm->state_lock);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_reset_stats(hoop_comm_t comm) {
  HOOP_CHECK(settle(comm, "hoop_comm_reset_stats"));
  pthread_mutex_lock(&comm->state_lock);
  uint64_t connected = comm->stats.peers_connected;
  memset(&comm->stats, 0, sizeof comm->stats);
  comm->stats.peers_connected = connected;
  memset(comm->peer_sent, 0, sizeof *comm->peer_sent * (size_t)comm->nranks);
  memset(comm->peer_received, 0,
         sizeof *comm->peer_received * (size_t)comm->nranks);
  pthread_mutex_unlock(&comm->state_lock);
  return HOOP_SUCCESS;
}
