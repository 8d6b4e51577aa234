/*
 * The CUDA IPC path for calls on device buffers (device_path.h): set-up,
 * numbering and queueing calls, and the proxy's watch over them.
 *
 * The caller's thread queues each call's GPU work (ipc_schedule.c) and
 * returns; the GPU alone moves the data.  The proxy thread then only
 * watches: it waits until this rank's counter shows the call done, checks
 * that every rank made the same call (each posts a record of it, which the
 * GPU cannot compare), and counts the traffic.  It fails the call when a
 * record differs, when the peer the GPU waits for has exited, when a
 * failure notice arrives, or when the counter stands still for the comm's
 * timeout.  A failure breaks the communicator, and every counter is then
 * released (set far past anything queued) so that no GPU waits for ever.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "collectives/collectives.h"
#include "collectives/device_path.h"
#include "collectives/ipc_schedule.h"
#include "core/comm.h"
#include "core/cuda_sync.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"
#include "core/types.h"
#include "transport/cuda_ipc.h"

/* How far past anything queued a failure sets the counters. */
#define RELEASE_JUMP (1u << 30)

struct hoop_ipc_path {
  struct hoop_device_path base;
  struct hoop_ipc *ipc;
  size_t oneshot_bytes; /* HOOP_CUDA_IPC_ONESHOT_BYTES */
  int watch_pids;       /* peers' pids mean something here (same pid ns) */
  /* The calling thread's, under the device queue's enqueue lock: */
  uint32_t chunks; /* queued over the comm's life */
  uint64_t calls;
  uint32_t queued; /* this rank's counter when all are done (atomic) */
  /* The proxy's, for counting: */
  uint64_t *sent, *received; /* [nranks] */
};

/* ---- Set-up -------------------------------------------------------------- */

static uint64_t pid_namespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Host collectives on small host buffers, for the set-up. */
static hoop_result_t host_allgather(struct hoop_comm *comm, const void *mine,
                                    void *all, size_t bytes) {
  struct hoop_call c = {.coll = HOOP_COLL_ALLGATHER,
                        .send = mine,
                        .recv = all,
                        .dtype = HOOP_U8,
                        .op = HOOP_SUM,
                        .uncounted = true};
  return hoop__collective_run(comm, &c, bytes, HOOP_COLL_ALLGATHER);
}

static hoop_result_t host_all_agree(struct hoop_comm *comm, int32_t *ok) {
  struct hoop_call c = {.coll = HOOP_COLL_ALLREDUCE,
                        .send = (const char *)ok,
                        .recv = (char *)ok,
                        .dtype = HOOP_I32,
                        .op = HOOP_MIN,
                        .uncounted = true};
  return hoop__collective_run(comm, &c, 1, HOOP_COLL_ALLREDUCE);
}

static void path_free(struct hoop_ipc_path *p) {
  if (p == NULL)
    return;
  hoop__ipc_destroy(p->ipc);
  free(p->sent);
  free(p->received);
  free(p);
}

/* What each rank publishes at set-up. */
struct offer {
  struct hoop_ipc_export x;
  uint64_t pid_ns;
  /* The schedules' settings must agree, or ranks would cut calls apart
   * differently; nothing on the GPU could tell. */
  int64_t setting[2];
};

static const char *const setting_name[2] = {"HOOP_CUDA_IPC_CHUNK_BYTES",
                                            "HOOP_CUDA_IPC_ONESHOT_BYTES"};

static hoop_result_t settings_agree(struct hoop_comm *comm,
                                    const struct offer *all) {
  for (int q = 0; q < comm->nranks; q++) {
    for (int i = 0; i < 2; i++) {
      if (all[q].setting[i] != all[0].setting[i])
        return HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                          "%s is %lld on rank %d but %lld on rank 0; every "
                          "rank must use the same",
                          setting_name[i], (long long)all[q].setting[i], q,
                          (long long)all[0].setting[i]);
    }
  }
  return HOOP_SUCCESS;
}

/*
 * Declines (*path NULL) unless every rank is on one host, no transport is
 * forced and every rank manages (they agree through host collectives);
 * INFO says why.  Only bad settings and failing host collectives are
 * errors.
 */
static hoop_result_t ipc_open(struct hoop_comm *comm, int device,
                              struct hoop_device_path **path) {
  *path = NULL;
  if (!hoop__comm_peers_mappable(comm))
    return HOOP_SUCCESS;
  int64_t chunk = hoop__param_cuda_ipc_chunk_bytes();
  int64_t oneshot = hoop__param_cuda_ipc_oneshot_bytes();
  if (chunk < 4096 || chunk > ((int64_t)1 << 30))
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_CUDA_IPC_CHUNK_BYTES=%lld is outside 4K..1G",
                      (long long)chunk);
  if (oneshot < 0)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_CUDA_IPC_ONESHOT_BYTES=%lld is negative",
                      (long long)oneshot);
  int current = 0;
  cudaGetDevice(&current);
  struct hoop_ipc_path *p = calloc(1, sizeof *p);
  if (p != NULL)
    p->base.ops = &hoop__device_path_ipc;
  struct offer me = {.pid_ns = pid_namespace(), .setting = {chunk, oneshot}};
  struct offer *all = calloc((size_t)comm->nranks, sizeof *all);
  struct hoop_ipc_export *exports =
      calloc((size_t)comm->nranks, sizeof *exports);
  if (p != NULL) {
    hoop__ipc_create(comm->comm_id, comm->rank, comm->nranks, device,
                     (size_t)chunk, &p->ipc, &me.x);
    p->sent = calloc((size_t)comm->nranks, sizeof *p->sent);
    p->received = calloc((size_t)comm->nranks, sizeof *p->received);
  }
  /* Out of host memory, this rank still takes part, saying no. */
  if (p == NULL || p->ipc == NULL || p->sent == NULL ||
      p->received == NULL || all == NULL || exports == NULL)
    me.x.ok = 0;
  hoop_result_t res = all != NULL
                          ? host_allgather(comm, &me, all, sizeof me)
                          : HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY,
                                       "CUDA IPC set-up");
  int32_t ok = me.x.ok;
  int same_pid_ns = 1;
  if (res == HOOP_SUCCESS)
    res = settings_agree(comm, all);
  for (int q = 0; res == HOOP_SUCCESS && q < comm->nranks; q++) {
    ok = ok && all[q].x.ok;
    same_pid_ns = same_pid_ns && all[q].pid_ns == me.pid_ns;
    exports[q] = all[q].x;
  }
  if (res == HOOP_SUCCESS && ok && hoop__ipc_attach(p->ipc, exports) != 0)
    ok = 0;
  if (res == HOOP_SUCCESS)
    res = host_all_agree(comm, &ok);
  if (res == HOOP_SUCCESS && ok) {
    hoop__ipc_unlink(p->ipc);
    p->oneshot_bytes = (size_t)oneshot;
    p->watch_pids = same_pid_ns;
    *path = &p->base;
    HOOP_INFO("rank %d: device buffers move over CUDA IPC (%lld-byte "
              "chunks)", comm->rank, (long long)chunk);
  } else {
    if (res == HOOP_SUCCESS)
      HOOP_INFO("rank %d: no CUDA IPC, device buffers are staged through "
                "host memory: %s", comm->rank,
                p != NULL && p->ipc != NULL && p->ipc->why[0] != '\0'
                    ? p->ipc->why
                : me.x.ok ? "another rank could not set it up"
                          : "out of host memory");
    path_free(p);
  }
  cudaSetDevice(current);
  free(all);
  free(exports);
  return res;
}

static size_t ipc_chunk_bytes(const struct hoop_device_path *path) {
  return ((const struct hoop_ipc_path *)path)->ipc->chunk_bytes;
}

/* ---- Call records -------------------------------------------------------- */

/* What every rank posts about each call, so that peers can compare. */
struct call_record {
  uint32_t label;
  uint32_t dtype;
  uint32_t op;  /* 0 where the call reduces nothing */
  int32_t root; /* -1 where it has none */
  uint64_t count;
  uint32_t ps;
  uint32_t pad; /* zero: records are compared bytewise */
};

static int label_reduces(hoop_coll_t l) {
  return l == HOOP_COLL_ALLREDUCE || l == HOOP_COLL_REDUCE ||
         l == HOOP_COLL_REDUCE_SCATTER;
}

static int label_rooted(hoop_coll_t l) {
  return l == HOOP_COLL_BROADCAST || l == HOOP_COLL_REDUCE;
}

static struct call_record record_of(const struct hoop_device_call *c) {
  struct call_record r = {
      .label = (uint32_t)c->label,
      .dtype = (uint32_t)c->call.dtype,
      .op = label_reduces(c->label) ? (uint32_t)c->call.op : 0,
      .root = label_rooted(c->label) ? c->call.root : -1,
      .count = c->per_rank,
      .ps = (uint32_t)c->ipc_ps};
  return r;
}

/* "hoop_allreduce(float sum, count 1000)" */
static void describe_record(const struct call_record *r, char *buf,
                            size_t len) {
  hoop_coll_t l = (hoop_coll_t)r->label;
  char root[32] = "";
  if (label_rooted(l))
    snprintf(root, sizeof root, ", root %d", (int)r->root);
  snprintf(buf, len, "%s(%s%s%s, count %llu%s%s)", hoop__coll_call(l),
           hoop_dtype_name((hoop_dtype_t)r->dtype),
           label_reduces(l) ? " " : "",
           label_reduces(l) ? hoop_op_name((hoop_op_t)r->op) : "",
           (unsigned long long)r->count, root,
           r->ps ? ", parameter server" : "");
}

/* Compares this call with every peer's that has posted the same number. */
static hoop_result_t compare_calls(struct hoop_comm *comm,
                                   const struct hoop_ipc_path *p,
                                   const struct hoop_device_call *c) {
  _Static_assert(sizeof(struct call_record) <= HOOP_IPC_RECORD_BYTES,
                 "a call record fits a mailbox slot");
  unsigned char raw[HOOP_IPC_RECORD_BYTES] = {0};
  struct call_record mine = record_of(c), theirs;
  for (int q = 0; q < comm->nranks; q++) {
    if (q == comm->rank || hoop__ipc_read(p->ipc, q, c->ipc_call, raw) != 0)
      continue;
    memcpy(&theirs, raw, sizeof theirs);
    if (memcmp(&theirs, &mine, sizeof mine) == 0)
      continue;
    char a[160], b[160], desc[128];
    describe_record(&mine, a, sizeof a);
    describe_record(&theirs, b, sizeof b);
    hoop__peer_desc(comm, q, desc, sizeof desc);
    return HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                      "rank %d: device call %llu differs: this rank called "
                      "%s, %s called %s",
                      comm->rank, (unsigned long long)c->ipc_call, a, desc,
                      b);
  }
  return HOOP_SUCCESS;
}

/* ---- Queueing ------------------------------------------------------------ */

/*
 * Numbers a call (its chunks, its final counter, its place among the
 * calls) and posts its record for the peers to compare.
 */
static void ipc_number(const struct hoop_comm *comm,
                       struct hoop_device_path *path,
                       struct hoop_device_call *c) {
  struct hoop_ipc_path *p = (struct hoop_ipc_path *)path;
  c->ipc_ps =
      c->label == HOOP_COLL_ALLREDUCE && c->call.setting == HOOP_ALGO_PS;
  c->start_ns = hoop__now_ns();
  c->first = p->chunks;
  p->chunks += (uint32_t)c->k.nchunks;
  c->ipc_done = HOOP_IPC_PHASES * p->chunks;
  c->ipc_call = ++p->calls;
  __atomic_store_n(&p->queued, c->ipc_done, __ATOMIC_RELEASE);
  struct call_record rec = record_of(c);
  unsigned char raw[HOOP_IPC_RECORD_BYTES] = {0};
  memcpy(raw, &rec, sizeof rec);
  hoop__ipc_post(p->ipc, c->ipc_call, raw);
}

static cudaError_t ipc_enqueue(struct hoop_comm *comm,
                               struct hoop_device_path *path,
                               const struct hoop_device_call *c,
                               cudaStream_t s) {
  const struct hoop_ipc_path *p = (const struct hoop_ipc_path *)path;
  return hoop__ipc_schedule(p->ipc, &c->call, c->per_rank, &c->k, c->first,
                            c->ipc_ps, p->oneshot_bytes, s);
}

/* ---- Watching ------------------------------------------------------------ */

/* A peer whose process is gone (its pid is free), when pids can tell. */
static int peer_dead(const struct hoop_comm *comm,
                     const struct hoop_ipc_path *p, int q) {
  return p->watch_pids && kill(comm->peers[q].pid, 0) != 0 && errno == ESRCH;
}

/*
 * Whether a call whose counter has come through really succeeded.  A rank
 * that fails tells every peer (a failure notice, sent first) and then
 * releases every counter, so this rank's GPU may have run on with garbage:
 * a notice, or a counter released past anything queued here, says so.
 */
static hoop_result_t outcome(struct hoop_comm *comm,
                             const struct hoop_ipc_path *p,
                             const struct hoop_device_call *c, uint32_t now) {
  HOOP_CHECK(hoop__comm_check_notices(comm, 0));
  HOOP_CHECK(compare_calls(comm, p, c));
  uint32_t queued = __atomic_load_n(&p->queued, __ATOMIC_ACQUIRE);
  if ((int32_t)(now - queued) < (int32_t)(RELEASE_JUMP / 2))
    return HOOP_SUCCESS;
  HOOP_CHECK(hoop__comm_check_notices(comm, 1000));
  return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                    "rank %d: another rank failed during a call over CUDA "
                    "IPC and released every GPU's waits", comm->rank);
}

/* The peer furthest behind this rank's counter `now`, or -1. */
static int furthest_behind(const struct hoop_comm *comm,
                           const struct hoop_ipc_path *p, uint32_t now) {
  int behind = -1;
  int32_t lag = 0;
  for (int q = 0; q < comm->nranks; q++) {
    int32_t d = (int32_t)(hoop__ipc_phase(p->ipc, q) - now);
    if (q != comm->rank && d < lag) {
      lag = d;
      behind = q;
    }
  }
  return behind;
}

static hoop_result_t watch(struct hoop_comm *comm,
                           const struct hoop_ipc_path *p,
                           const struct hoop_device_call *c,
                           const int *poisoned) {
  uint32_t last = hoop__ipc_phase(p->ipc, comm->rank);
  long long moved = hoop__now_ms(), checked = moved;
  for (int polls = 0;; polls++) {
    uint32_t now = hoop__ipc_phase(p->ipc, comm->rank);
    if (hoop__counter_reached(now, c->ipc_done))
      return outcome(comm, p, c, now);
    if ((polls & 255) == 0) {
      long long t = hoop__now_ms();
      if (now != last) {
        last = now;
        moved = t;
      }
      int behind = furthest_behind(comm, p, now);
      /* For the peers that ask where this rank is (core/inquiry.c). */
      hoop__comm_waiting(comm, behind, 0, moved);
      char desc[128] = "no peer: this rank's own GPU work";
      if (behind >= 0)
        hoop__peer_desc(comm, behind, desc, sizeof desc);
      if (t - checked >= 100) {
        checked = t;
        HOOP_CHECK(hoop__comm_check_notices(comm, 0));
        HOOP_CHECK(compare_calls(comm, p, c));
        if (behind >= 0 && peer_dead(comm, p, behind))
          return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                            "rank %d: %s exited during a call over CUDA "
                            "IPC (its counter stopped at %u, this rank's "
                            "at %u)",
                            comm->rank, desc,
                            hoop__ipc_phase(p->ipc, behind), now);
      }
      if (t - moved > comm->timeout_ms)
        return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                          "rank %d: no progress for %d ms in a call over "
                          "CUDA IPC, waiting for %s (counter %u, this "
                          "rank's %u of %u)",
                          comm->rank, comm->timeout_ms, desc,
                          behind >= 0 ? hoop__ipc_phase(p->ipc, behind)
                                      : now,
                          now, c->ipc_done);
    }
    HOOP_CHECK(hoop__device_pause(comm, poisoned, polls,
                                  "the GPU ran a call over CUDA IPC"));
  }
}

/*
 * Waits until the GPU is done with the call, bounded by the comm's
 * timeout, a peer's exit, a failure notice, abort and *poisoned; compares
 * the ranks' calls; counts the traffic.
 */
static hoop_result_t ipc_finish(struct hoop_comm *comm,
                                struct hoop_device_path *path,
                                const struct hoop_device_call *c,
                                const int *poisoned) {
  struct hoop_ipc_path *p = (struct hoop_ipc_path *)path;
  HOOP_CHECK(watch(comm, p, c, poisoned));
  hoop_algo_t algo = hoop__ipc_traffic(p->ipc, &c->call, &c->k, c->ipc_ps,
                                       p->oneshot_bytes, p->sent,
                                       p->received);
  hoop__stats_count_peers(comm, c->label, algo, hoop__now_ns() - c->start_ns,
                          p->sent, p->received);
  return HOOP_SUCCESS;
}

/*
 * After a failure every counter jumps far past anything queued: a dead
 * peer's stays there, and live peers' GPUs, their waits released, run
 * their queued work to the end (with garbage results) and bring theirs
 * back.
 */
static void ipc_release(struct hoop_device_path *path,
                        const struct hoop_device_call *c, hoop_result_t res) {
  struct hoop_ipc_path *p = (struct hoop_ipc_path *)path;
  if (res != HOOP_SUCCESS)
    hoop__ipc_release(p->ipc, __atomic_load_n(&p->queued, __ATOMIC_ACQUIRE) +
                                  RELEASE_JUMP);
}

/*
 * The peers may still be copying out of this rank's window after its own
 * GPU is done: wait until each is done too, has exited, or the comm's
 * timeout passes, before the window is freed.  After a failure there is
 * nothing to wait for: the counters were released.
 */
static void ipc_close(struct hoop_comm *comm, struct hoop_device_path *path) {
  struct hoop_ipc_path *p = (struct hoop_ipc_path *)path;
  uint32_t done = __atomic_load_n(&p->queued, __ATOMIC_ACQUIRE);
  long long deadline = hoop__now_ms() + comm->timeout_ms;
  for (int q = 0; q < comm->nranks && hoop__comm_broken(comm) == HOOP_SUCCESS;
       q++) {
    while (q != comm->rank &&
           !hoop__counter_reached(hoop__ipc_phase(p->ipc, q), done) &&
           !peer_dead(comm, p, q) && hoop__now_ms() < deadline &&
           !__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE)) {
      struct timespec nap = {0, 100000};
      nanosleep(&nap, NULL);
    }
  }
  path_free(p);
}

const struct hoop_device_path_ops hoop__device_path_ipc = {
    .name = "cuda_ipc",
    .open = ipc_open,
    .chunk_bytes = ipc_chunk_bytes,
    .number = ipc_number,
    .enqueue = ipc_enqueue,
    .finish = ipc_finish,
    .release = ipc_release,
    .close = ipc_close,
};
