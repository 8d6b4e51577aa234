/*
 * Communicator lifecycle (create, destroy, abort), the registry of live
 * communicators that lets every call reject a destroyed handle, the
 * broken state, and the settings a communicator starts with.  Connection
 * set-up is in connect.c.
 */
#include "core/comm.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/error.h"
#include "core/param.h"
#include "core/types.h"
#include "core/conn.h"

/* ---- registry of live communicators ---------------------------------- */

static struct hoop_comm **live;
static size_t live_count, live_cap;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static hoop_result_t registry_add(struct hoop_comm *comm) {
  hoop_result_t res = HOOP_SUCCESS;
  pthread_mutex_lock(&live_lock);
  if (live_count == live_cap) {
    size_t cap = live_cap ? live_cap * 2 : 16;
    struct hoop_comm **grown = realloc(live, cap * sizeof *live);
    if (grown == NULL) {
      res = HOOP_ERR_NO_MEMORY;
      goto out;
    }
    live = grown;
    live_cap = cap;
  }
  live[live_count++] = comm;
out:
  pthread_mutex_unlock(&live_lock);
  return res;
}

enum removal { REMOVED, NOT_LIVE, IN_USE };

/* Removes comm from the live set; with only_idle, not while it is busy. */
static enum removal registry_remove(struct hoop_comm *comm, bool only_idle) {
  enum removal result = NOT_LIVE;
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < live_count; i++) {
    if (live[i] != comm)
      continue;
    if (only_idle && __atomic_load_n(&comm->busy, __ATOMIC_ACQUIRE)) {
      result = IN_USE;
    } else {
      live[i] = live[--live_count];
      result = REMOVED;
    }
    break;
  }
  pthread_mutex_unlock(&live_lock);
  return result;
}

static bool registry_has(const struct hoop_comm *comm) {
  bool found = false;
  pthread_mutex_lock(&live_lock);
  for (size_t i = 0; i < live_count && !found; i++)
    found = live[i] == comm;
  pthread_mutex_unlock(&live_lock);
  return found;
}

static hoop_result_t not_live(const void *comm, const char *what) {
  return HOOP_ERROR(NULL, HOOP_ERR_INVALID_USAGE,
                    "%s: communicator %p is not live (destroyed, aborted "
                    "or never created)",
                    what, comm);
}

hoop_result_t hoop__comm_check_live(const struct hoop_comm *comm,
                                    const char *what) {
  if (comm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: communicator is NULL", what);
  return registry_has(comm) ? HOOP_SUCCESS : not_live(comm, what);
}

/* ---- state --------------------------------------------------------- */

hoop_result_t hoop__comm_broken(const struct hoop_comm *comm) {
  return __atomic_load_n(&comm->broken, __ATOMIC_ACQUIRE);
}

void hoop__comm_broken_reason(struct hoop_comm *comm, char *buf,
                              size_t len) {
  pthread_mutex_lock(&comm->state_lock);
  snprintf(buf, len, "%s", comm->broken_reason);
  pthread_mutex_unlock(&comm->state_lock);
}

hoop_result_t hoop__comm_device_drain(struct hoop_comm *comm) {
  const struct hoop_device_ops *ops =
      __atomic_load_n(&comm->device_ops, __ATOMIC_ACQUIRE);
  return ops != NULL ? ops->drain(comm) : HOOP_SUCCESS;
}

hoop_algo_t hoop__comm_algo(const struct hoop_comm *comm) {
  return __atomic_load_n(&comm->algo, __ATOMIC_ACQUIRE);
}

hoop_result_t hoop__comm_scratch(struct hoop_comm *comm, size_t bytes,
                                 void **ptr) {
  if (comm->scratch_bytes < bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (p == NULL)
      return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY,
                        "scratch buffer of %zu bytes", bytes);
    free(comm->scratch);
    comm->scratch = p;
    comm->scratch_bytes = bytes;
    comm->scratch_gen++;
  }
  *ptr = comm->scratch;
  return HOOP_SUCCESS;
}

hoop_result_t hoop__comm_claim(struct hoop_comm *comm, const char *what) {
  if (comm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: communicator is NULL", what);
  /*
   * Checking liveness and claiming the communicator under one lock means
   * hoop_comm_abort() either sees this call as busy or it never starts.
   */
  pthread_mutex_lock(&live_lock);
  bool found = false;
  for (size_t i = 0; i < live_count && !found; i++)
    found = live[i] == comm;
  int was_busy = 1;
  if (found)
    was_busy = __atomic_exchange_n(&comm->busy, 1, __ATOMIC_ACQUIRE);
  pthread_mutex_unlock(&live_lock);
  if (!found)
    return not_live(comm, what);
  if (was_busy)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_USAGE,
                      "%s: another thread is using this communicator", what);
  __atomic_store_n(&comm->call, what, __ATOMIC_RELAXED);
  hoop__comm_waiting(comm, -1, 0, 0);
  return HOOP_SUCCESS;
}

hoop_result_t hoop__comm_enter(struct hoop_comm *comm, const char *what) {
  HOOP_CHECK(hoop__comm_claim(comm, what));
  hoop_result_t broken = hoop__comm_broken(comm);
  if (broken != HOOP_SUCCESS) {
    hoop__comm_leave(comm);
    char reason[HOOP_ERROR_MAX];
    hoop__comm_broken_reason(comm, reason, sizeof reason);
    return HOOP_ERROR(comm, broken,
                      "%s: communicator is broken by an earlier error and "
                      "must be destroyed; that error was: %s",
                      what, reason);
  }
  return HOOP_SUCCESS;
}

void hoop__comm_leave(struct hoop_comm *comm) {
  __atomic_store_n(&comm->busy, 0, __ATOMIC_RELEASE);
}

hoop_result_t hoop__error_attach(struct hoop_comm *comm,
                                 hoop_result_t result) {
  if (comm != NULL) {
    pthread_mutex_lock(&comm->state_lock);
    memcpy(comm->last_error, hoop_last_error(), sizeof comm->last_error);
    pthread_mutex_unlock(&comm->state_lock);
  }
  return result;
}

/* ---- lifecycle --------------------------------------------------------- */

static void comm_free(struct hoop_comm *comm) {
  if (comm == NULL)
    return;
  /* Queued device calls finish (or fail, once aborted) before teardown. */
  const struct hoop_device_ops *ops = comm->device_ops;
  if (ops != NULL)
    ops->free(comm);
  if (comm->conns != NULL) {
    for (int i = 0; i < comm->nranks * comm->nsocks; i++) {
      if (comm->conns[i] != NULL)
        comm->conns[i]->ops->close(comm->conns[i]);
    }
  }
  hoop__comm_drop_pending(comm);
  hoop__listener_close(&comm->listener);
  hoop__listener_close(&comm->joins);
  free(comm->conns);
  free(comm->peers);
  free(comm->host_index);
  free(comm->ring_order);
  free(comm->ring_place);
  free(comm->peer_sent);
  free(comm->peer_received);
  free(comm->lost);
  free(comm->asked_me);
  free(comm->fetched);
  free(comm->scratch);
  if (comm->plans != NULL)
    comm->plans_free(comm->plans);
  pthread_mutex_destroy(&comm->state_lock);
  free(comm);
}

static int64_t mbps_at_least_1(int64_t mbps) { return mbps > 0 ? mbps : 1; }

static bool config_valid(const hoop_config_t *cfg) {
  return cfg->size >= sizeof(hoop_config_t) && cfg->version != 0 &&
         cfg->version <= HOOP_CONFIG_VERSION;
}

hoop_result_t hoop__comm_iface(const hoop_config_t *config,
                               struct hoop_iface *iface) {
  const char *setting = "HOOP_SOCKET_IFNAME";
  const char *spec = hoop__param_socket_ifname();
  if (config != NULL && config_valid(config) &&
      config->socket_ifname != NULL) {
    setting = "hoop_config_t.socket_ifname";
    spec = config->socket_ifname;
  }
  memset(iface, 0, sizeof *iface);
  if (spec == NULL || *spec == '\0')
    return HOOP_SUCCESS;
  return hoop__iface_choose(setting, spec, iface);
}

static hoop_result_t apply_config(struct hoop_comm *comm,
                                  const hoop_config_t *cfg) {
  comm->timeout_ms = (int)hoop__param_timeout_ms();
  comm->nsocks = (int)hoop__param_nsocks();
  comm->slice_bytes = (size_t)hoop__param_slice_bytes();
  comm->sockbuf_bytes = (size_t)hoop__param_sockbuf_bytes();
  comm->pipeline_bytes = (size_t)hoop__param_pipeline_bytes();
  comm->oneshot_bytes = (size_t)hoop__param_oneshot_bytes();
  comm->alpha_s = (double)hoop__param_alpha_ns() * 1e-9;
  comm->host_alpha_s = (double)hoop__param_host_alpha_ns() * 1e-9;
  comm->beta_s = 1.0 / ((double)mbps_at_least_1(hoop__param_link_mbps()) *
                        1e6);
  comm->host_beta_s =
      1.0 / ((double)mbps_at_least_1(hoop__param_host_mbps()) * 1e6);
  comm->algo_source = "default";
  const char *algo = hoop__param_algo();
  if (algo != NULL) {
    int a = hoop__parse_algo(algo);
    if (a < 0)
      return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                        "HOOP_ALGO=%s is not auto, ring, tree or ps", algo);
    comm->algo = (hoop_algo_t)a;
    comm->algo_source = "HOOP_ALGO";
  }
  if (cfg != NULL) {
    if (!config_valid(cfg))
      return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                        "config was not initialised with HOOP_CONFIG_INIT "
                        "(size %zu, version %u)",
                        cfg->size, cfg->version);
    if (cfg->timeout_ms < 0 || cfg->nsocks < 0)
      return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                        "config: timeout_ms and nsocks must be >= 0");
    if (cfg->timeout_ms > 0)
      comm->timeout_ms = cfg->timeout_ms;
    if (cfg->nsocks > 0)
      comm->nsocks = cfg->nsocks;
    if (cfg->slice_bytes > 0)
      comm->slice_bytes = cfg->slice_bytes;
  }
  if (comm->timeout_ms <= 0)
    comm->timeout_ms = 300000;
  if (comm->nsocks < 1 || comm->nsocks > HOOP_MAX_NSOCKS)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_NSOCKS/nsocks=%d is outside 1..%d", comm->nsocks,
                      HOOP_MAX_NSOCKS);
  if (comm->slice_bytes < 4096 || comm->slice_bytes > (64u << 20))
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_SLICE_BYTES/slice_bytes=%zu is outside 4K..64M",
                      comm->slice_bytes);
  comm->slice_bytes &= ~(size_t)63;
  /*
   * Smaller socket buffers than a loopback segment (64K) leave the kernel
   * waiting on its 200 ms window probes: a 256 KiB all-reduce over TCP
   * with 16K took 2.6 s, with 32K 0.4 ms.  Refused rather than crawled.
   */
  if (comm->sockbuf_bytes != 0 && comm->sockbuf_bytes < HOOP_MIN_SOCKBUF)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_SOCKBUF_BYTES=%zu is below 64K (0 leaves the "
                      "kernel's autotuning)",
                      comm->sockbuf_bytes);
  return hoop__transports_check_settings();
}

hoop_result_t hoop__comm_create(struct hoop_comm **out, int nranks, int rank,
                                const hoop_unique_id_t *id,
                                const hoop_config_t *config) {
  hoop_result_t res;
  struct hoop_uid uid;
  HOOP_CHECK(hoop__uid_parse(id, &uid));
  struct hoop_comm *comm = calloc(1, sizeof *comm);
  if (comm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_NO_MEMORY, "communicator");
  pthread_mutex_init(&comm->state_lock, NULL);
  comm->listener.fd = -1;
  comm->joins.fd = -1;
  comm->rank = rank;
  comm->nranks = nranks;
  HOOP_CHECK_GOTO(apply_config(comm, config), res, out_free);
  /* A bad interface setting fails here, before any rank waits on another. */
  HOOP_CHECK_GOTO(hoop__comm_iface(config, &comm->iface), res, out_free);
  if (comm->iface.name[0] != '\0') {
    char ip[INET6_ADDRSTRLEN] = "?";
    inet_ntop(comm->iface.addr.family, comm->iface.addr.ip, ip, sizeof ip);
    HOOP_INFO("rank %d: %s chose %s %s", rank, comm->iface.setting,
              comm->iface.name, ip);
  }
  comm->peers = calloc((size_t)nranks, sizeof *comm->peers);
  comm->conns = calloc((size_t)nranks * (size_t)comm->nsocks,
                       sizeof *comm->conns);
  comm->peer_sent = calloc((size_t)nranks, sizeof *comm->peer_sent);
  comm->peer_received = calloc((size_t)nranks, sizeof *comm->peer_received);
  comm->lost = calloc((size_t)nranks, sizeof *comm->lost);
  comm->asked_me = calloc((size_t)nranks, sizeof *comm->asked_me);
  comm->fetched = calloc((size_t)nranks, sizeof *comm->fetched);
  if (comm->peers == NULL || comm->conns == NULL ||
      comm->peer_sent == NULL || comm->peer_received == NULL ||
      comm->lost == NULL || comm->asked_me == NULL ||
      comm->fetched == NULL) {
    res = HOOP_ERROR(NULL, HOOP_ERR_NO_MEMORY, "communicator tables");
    goto out_free;
  }
  comm->joining = true;
  comm->call = "hoop_comm_init";
  comm->wait_for = -1;
  HOOP_CHECK_GOTO(hoop__bootstrap(comm, &uid), res, out_free);
  hoop__comm_learn_host(comm);
  HOOP_CHECK_GOTO(hoop__comm_index_hosts(comm), res, out_free);
  /*
   * By default (HOOP_RUNTIME_CONNECT=1) a pair connects only when a plan
   * first needs it (the engine, in the same global order), so that a rank
   * holds memory and descriptors for the peers it uses, not for every
   * rank; a pair that no transport could ever join still fails here.
   * With 0 every peer connects now (and the ring neighbours on every
   * channel), so that a bad network fails here and not mid-job.
   */
  for (int peer = 0; hoop__param_runtime_connect() && peer < nranks;
       peer++) {
    char desc[128];
    if (peer == rank)
      continue;
    res = hoop__transport_check(&comm->peers[rank], &comm->peers[peer], rank,
                                hoop__peer_desc(comm, peer, desc, sizeof desc));
    if (res != HOOP_SUCCESS) {
      hoop__error_attach(comm, res);
      goto out_free;
    }
  }
  for (int peer = 0; !hoop__param_runtime_connect() && peer < nranks;
       peer++) {
    struct hoop_conn *c;
    int ring = peer == hoop__ring_peer(comm, rank, 1) ||
               peer == hoop__ring_peer(comm, rank, -1);
    for (int ch = 0; peer != rank && ch < (ring ? comm->nsocks : 1); ch++)
      HOOP_CHECK_GOTO(hoop__comm_conn(comm, peer, ch, &c), res, out_free);
  }
  comm->joining = false;
  if (registry_add(comm) != HOOP_SUCCESS) {
    res = HOOP_ERROR(NULL, HOOP_ERR_NO_MEMORY, "communicator registry");
    goto out_free;
  }
  HOOP_INFO("rank %d of %d joined communicator %016llx (%d socket(s) per "
            "peer, slice %zu bytes, timeout %d ms)",
            rank, nranks, (unsigned long long)comm->comm_id, comm->nsocks,
            comm->slice_bytes, comm->timeout_ms);
  if (rank == 0 && hoop__log_level() >= HOOP_LOG_INFO)
    hoop__comm_log_banner(comm);
  *out = comm;
  return HOOP_SUCCESS;
out_free:
  comm_free(comm);
  return res;
}

hoop_result_t hoop__unique_id(const struct hoop_iface *iface,
                              hoop_unique_id_t *id) {
  struct hoop_addr root = {.family = AF_INET, .ip = {127, 0, 0, 1}};
  if (iface->name[0] != '\0')
    root = iface->addr;
  uint64_t comm_id = 0;
  struct hoop_auth_key key;
  while (comm_id == 0)
    HOOP_CHECK(hoop__auth_random(&comm_id, sizeof comm_id));
  HOOP_CHECK(hoop__auth_random(&key, sizeof key));
  struct hoop_uid uid;
  HOOP_CHECK(hoop__uid_create(&root, comm_id, &key, &uid));
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &uid, sizeof uid);
  return HOOP_SUCCESS;
}

hoop_result_t hoop__comm_successor_id(struct hoop_comm *comm,
                                      hoop_unique_id_t *id) {
  struct hoop_addr root = comm->listener.addr;
  root.port = 0;
  uint64_t comm_id = 0;
  while (comm_id == 0)
    HOOP_CHECK(hoop__auth_random(&comm_id, sizeof comm_id));
  struct hoop_uid uid;
  HOOP_CHECK(hoop__uid_create(&root, comm_id, &comm->auth_key, &uid));
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &uid, sizeof uid);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_get_unique_id(hoop_unique_id_t *id) {
  if (id == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_get_unique_id: id is NULL");
  struct hoop_iface iface;
  HOOP_CHECK(hoop__comm_iface(NULL, &iface));
  return hoop__unique_id(&iface, id);
}

hoop_result_t hoop_unique_id_release(const hoop_unique_id_t *id) {
  if (id == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_unique_id_release: id is NULL");
  struct hoop_uid uid;
  HOOP_CHECK(hoop__uid_parse(id, &uid));
  hoop__uid_release(uid.comm_id);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_init_rank(hoop_comm_t *comm, int nranks,
                                  const hoop_unique_id_t *id, int rank,
                                  const hoop_config_t *config) {
  if (comm == NULL || id == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_init_rank: %s is NULL",
                      comm == NULL ? "comm" : "id");
  *comm = NULL;
  if (nranks < 1 || nranks > HOOP_MAX_RANKS)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_init_rank: nranks=%d is outside 1..%d",
                      nranks, HOOP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_init_rank: rank=%d is outside 0..%d", rank,
                      nranks - 1);
  return hoop__comm_create(comm, nranks, rank, id, config);
}

hoop_result_t hoop_comm_destroy(hoop_comm_t comm) {
  if (comm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_destroy: communicator is NULL");
  /* Like ncclCommDestroy, let calls queued on streams finish first. */
  if (registry_has(comm))
    hoop__comm_device_drain(comm);
  switch (registry_remove(comm, true)) {
  case NOT_LIVE:
    return not_live(comm, "hoop_comm_destroy");
  case IN_USE:
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_USAGE,
                      "hoop_comm_destroy: a collective is still running "
                      "on this communicator (use hoop_comm_abort)");
  case REMOVED:
    break;
  }
  comm_free(comm);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_abort(hoop_comm_t comm) {
  if (comm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_abort: communicator is NULL");
  if (registry_remove(comm, false) != REMOVED)
    return not_live(comm, "hoop_comm_abort");
  __atomic_store_n(&comm->aborted, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < comm->nranks * comm->nsocks; i++) {
    if (comm->conns[i] != NULL)
      comm->conns[i]->ops->shutdown(comm->conns[i]);
  }
  /* A collective in another thread sees the flag within one poll round. */
  while (__atomic_load_n(&comm->busy, __ATOMIC_ACQUIRE))
    sched_yield();
  comm_free(comm);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_rank(hoop_comm_t comm, int *rank) {
  if (comm == NULL || rank == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_rank: NULL argument");
  if (!registry_has(comm))
    return not_live(comm, "hoop_comm_rank");
  *rank = comm->rank;
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_size(hoop_comm_t comm, int *nranks) {
  if (comm == NULL || nranks == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_size: NULL argument");
  if (!registry_has(comm))
    return not_live(comm, "hoop_comm_size");
  *nranks = comm->nranks;
  return HOOP_SUCCESS;
}

const char *hoop_comm_last_error(hoop_comm_t comm) {
  /* A copy per thread: the proxy may write the communicator's meanwhile. */
  static _Thread_local char copy[HOOP_ERROR_MAX];
  if (comm == NULL || !registry_has(comm))
    return "communicator is not live (destroyed, aborted or never created)";
  pthread_mutex_lock(&comm->state_lock);
  memcpy(copy, comm->last_error, sizeof copy);
  pthread_mutex_unlock(&comm->state_lock);
  return copy;
}
