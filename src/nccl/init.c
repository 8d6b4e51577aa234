/*
 * Making NCCL communicators: init (blocking or in the background), split
 * and shrink.  Each wraps one hoop communicator.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/nccl_comm.h"

_Static_assert(sizeof(ncclUniqueId) == sizeof(hoop_unique_id_t),
               "an NCCL id carries a hoop id");

/* ---- configuration ------------------------------------------------------ */

#define CONFIG_MAGIC 0xcafebeefu

/*
 * The NCCL release whose header added each field: a program built against
 * an older header may pass a struct whose bytes there mean nothing.
 */
static const struct {
  size_t offset;
  int since;
} config_fields[] = {
    {offsetof(ncclConfig_t, blocking), 21400},
    {offsetof(ncclConfig_t, cgaClusterSize), 21400},
    {offsetof(ncclConfig_t, minCTAs), 21400},
    {offsetof(ncclConfig_t, maxCTAs), 21400},
    {offsetof(ncclConfig_t, netName), 21400},
    {offsetof(ncclConfig_t, splitShare), 21800},
    {offsetof(ncclConfig_t, trafficClass), 22200},
    {offsetof(ncclConfig_t, commName), 22300},
    {offsetof(ncclConfig_t, collnetEnable), 22300},
    {offsetof(ncclConfig_t, CTAPolicy), 22700},
    {offsetof(ncclConfig_t, shrinkShare), 22700},
    {offsetof(ncclConfig_t, nvlsCTAs), 22700},
    {offsetof(ncclConfig_t, nChannelsPerNetPeer), 22800},
    {offsetof(ncclConfig_t, nvlinkCentricSched), 22800},
};

ncclResult_t nccl__read_config(const ncclConfig_t *config, ncclConfig_t *out,
                               const char *what) {
  const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
  *out = defaults;
  if (config == NULL)
    return ncclSuccess;
  if (config->magic != CONFIG_MAGIC)
    return nccl__error(ncclInvalidArgument,
                       "%s: config->magic is 0x%x, not 0xcafebeef: "
                       "initialise it with NCCL_CONFIG_INITIALIZER",
                       what, config->magic);
  size_t min_size = offsetof(ncclConfig_t, blocking) + sizeof(int);
  if (config->size < min_size)
    return nccl__error(ncclInvalidArgument,
                       "%s: config->size %zu is too small for an ncclConfig_t",
                       what, config->size);
  size_t n = config->size < sizeof *out ? config->size : sizeof *out;
  memcpy(out, config, n);
  for (size_t i = 0; i < sizeof config_fields / sizeof config_fields[0];
       i++) {
    size_t off = config_fields[i].offset;
    if ((int)config->version < config_fields[i].since)
      memcpy((char *)out + off, (const char *)&defaults + off,
             off == offsetof(ncclConfig_t, netName) ||
                     off == offsetof(ncclConfig_t, commName)
                 ? sizeof(char *)
                 : sizeof(int));
  }
  out->size = sizeof *out;
  out->version = NCCL_VERSION_CODE;
  if (out->blocking != NCCL_CONFIG_UNDEF_INT && out->blocking != 0 &&
      out->blocking != 1)
    return nccl__error(ncclInvalidArgument,
                       "%s: config->blocking is %d (0, 1 or unset)", what,
                       out->blocking);
  return ncclSuccess;
}

static bool config_blocking(const ncclConfig_t *cfg) {
  if (cfg->blocking != NCCL_CONFIG_UNDEF_INT)
    return cfg->blocking != 0;
  const char *env = getenv("NCCL_COMM_BLOCKING");
  return env == NULL || atoi(env) != 0;
}

/* ---- initialisation ------------------------------------------------------ */

/*
 * What a background init does: join the hoop communicator, or first agree
 * on its id over a parent (split).
 */
struct init_job {
  ncclComm_t comm;
  hoop_unique_id_t id;
  ncclComm_t parent; /* split: entered, left by the job */
  hoop_comm_t parent_hc;
  int color, key;
  int nextra;        /* InitRankScalable: ids to release afterwards */
  hoop_unique_id_t *extra;
};

static ncclComm_t comm_new(int nranks, int rank, const ncclConfig_t *cfg) {
  ncclComm_t c = calloc(1, sizeof *c);
  if (c == NULL)
    return NULL;
  c->magic = NCCL_COMM_MAGIC;
  c->nranks = nranks;
  c->rank = rank;
  c->cuda_dev = nccl__cuda_current_device();
  if (cfg->commName != NULL)
    snprintf(c->name, sizeof c->name, "%s", cfg->commName);
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->changed, NULL);
  c->state = NCCL_COMM_INITIALIZING; /* not yet shared */
  return c;
}

/* A job and its communicator, made together: a failure leaves neither. */
static ncclResult_t job_new(struct init_job **out, int nranks, int rank,
                            const ncclConfig_t *cfg, const char *what) {
  struct init_job *job = calloc(1, sizeof *job);
  ncclComm_t c = job != NULL ? comm_new(nranks, rank, cfg) : NULL;
  if (c == NULL) {
    free(job);
    return nccl__error(ncclSystemError, "%s: out of memory", what);
  }
  job->comm = c;
  *out = job;
  return ncclSuccess;
}

/* Every rank's spare id for shrinks, gathered over the new communicator. */
static ncclResult_t make_spares(ncclComm_t c, hoop_comm_t hc) {
  if (c->nranks == 1)
    return ncclSuccess;
  c->spares = calloc((size_t)c->nranks, sizeof *c->spares);
  c->spare_used = calloc((size_t)c->nranks, sizeof *c->spare_used);
  if (c->spares == NULL || c->spare_used == NULL)
    return nccl__error(ncclSystemError, "no memory for %d spare ids",
                       c->nranks);
  hoop_unique_id_t mine;
  hoop_result_t res = hoop_get_unique_id(&mine);
  if (res != HOOP_SUCCESS)
    return nccl__from_hoop(NULL, res);
  res = hoop_allgather(hc, &mine, c->spares, sizeof mine, HOOP_U8, NULL);
  if (res != HOOP_SUCCESS) {
    hoop_unique_id_release(&mine);
    c->spare_used[c->rank] = true; /* nothing of ours left to release */
    return nccl__from_hoop(NULL, res);
  }
  return ncclSuccess;
}

static ncclResult_t join(ncclComm_t c, const hoop_unique_id_t *id) {
  hoop_comm_t hc = NULL;
  hoop_result_t res = hoop_comm_init_rank(&hc, c->nranks, id, c->rank, NULL);
  if (res != HOOP_SUCCESS)
    return nccl__from_hoop(NULL, res);
  ncclResult_t r = make_spares(c, hc);
  if (r != ncclSuccess) {
    hoop_comm_destroy(hc);
    return r;
  }
  STORE(c->hc, hc);
  return ncclSuccess;
}

static ncclResult_t split_agree(struct init_job *job, bool *member);

/* Publishes the outcome; frees the communicator when it was abandoned. */
static void init_done(ncclComm_t c, ncclResult_t r) {
  pthread_mutex_lock(&c->lock);
  bool abandoned = c->abandoned;
  c->init_result = abandoned ? ncclInvalidUsage : r;
  nccl__set_state(c, r == ncclSuccess && !abandoned ? NCCL_COMM_READY
                                              : NCCL_COMM_FAILED);
  pthread_cond_broadcast(&c->changed);
  pthread_mutex_unlock(&c->lock);
  if (abandoned) {
    nccl__wait_idle(c);
    hoop_comm_t hc = LOAD(c->hc);
    if (hc != NULL) {
      STORE(c->hc, NULL);
      hoop_comm_abort(hc);
    }
    nccl__comm_free(c);
  }
}

static ncclResult_t run_job(struct init_job *job) {
  ncclResult_t r = ncclSuccess;
  if (job->parent != NULL) {
    bool member = true;
    r = split_agree(job, &member);
    nccl__leave(job->parent);
  }
  if (r == ncclSuccess)
    r = join(job->comm, &job->id);
  for (int i = 0; i < job->nextra; i++)
    hoop_unique_id_release(&job->extra[i]);
  free(job->extra);
  init_done(job->comm, r);
  return r;
}

static void *job_thread(void *arg) {
  struct init_job *job = arg;
  run_job(job);
  free(job);
  return NULL;
}

/*
 * Runs `job` here (blocking) or on a thread of its own, answering
 * ncclInProgress at once; the job is the caller's no longer either way.
 */
static ncclResult_t start_job(struct init_job *job, bool blocking,
                              ncclComm_t *out, const char *what) {
  ncclComm_t c = job->comm;
  if (blocking) {
    ncclResult_t r = run_job(job);
    free(job);
    if (r != ncclSuccess) {
      pncclCommDestroy(c);
      return r;
    }
    *out = c;
    return ncclSuccess;
  }
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &attr, job_thread, job);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    if (job->parent != NULL)
      nccl__leave(job->parent);
    free(job->extra);
    free(job);
    nccl__comm_free(c);
    return nccl__error(ncclSystemError, "%s: cannot start a thread: %s",
                       what, strerror(err));
  }
  *out = c;
  return ncclInProgress;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks,
                              const ncclUniqueId *id, int rank,
                              const ncclConfig_t *config,
                              hoop_unique_id_t *extra, int nextra,
                              const char *what) {
  if (out == NULL)
    return nccl__error(ncclInvalidArgument, "%s: comm is NULL", what);
  *out = NULL;
  if (nranks < 1)
    return nccl__error(ncclInvalidArgument, "%s: nranks is %d", what,
                       nranks);
  if (rank < 0 || rank >= nranks)
    return nccl__error(ncclInvalidArgument,
                       "%s: rank %d is outside 0..%d", what, rank,
                       nranks - 1);
  ncclConfig_t cfg;
  ncclResult_t r = nccl__read_config(config, &cfg, what);
  if (r != ncclSuccess)
    return r;
  struct init_job *job;
  r = job_new(&job, nranks, rank, &cfg, what);
  if (r != ncclSuccess)
    return r;
  memcpy(&job->id, id, sizeof job->id);
  if (nextra > 0) {
    job->extra = malloc(sizeof *extra * (size_t)nextra);
    if (job->extra != NULL) {
      memcpy(job->extra, extra, sizeof *extra * (size_t)nextra);
      job->nextra = nextra;
    }
  }
  return start_job(job, config_blocking(&cfg), out, what);
}

NCCL_EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (uniqueId == NULL)
    return nccl__error(ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
  hoop_unique_id_t id;
  hoop_result_t res = hoop_get_unique_id(&id);
  if (res != HOOP_SUCCESS)
    return nccl__from_hoop(NULL, res);
  memcpy(uniqueId->internal, id.internal, sizeof id.internal);
  return ncclSuccess;
}
NCCL_ALIAS(ncclGetUniqueId);

NCCL_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm,
                                                 int nranks,
                                                 ncclUniqueId commId,
                                                 int rank,
                                                 ncclConfig_t *config) {
  return init_rank(comm, nranks, &commId, rank, config, NULL, 0,
                   "ncclCommInitRankConfig");
}
NCCL_ALIAS(ncclCommInitRankConfig);

NCCL_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks,
                                           ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, &commId, rank, NULL, NULL, 0,
                   "ncclCommInitRank");
}
NCCL_ALIAS(ncclCommInitRank);

/*
 * Large jobs hand NCCL several ids to spread the rendezvous; hoop's needs
 * one, made by rank 0, and the others' listeners are closed once joined.
 */
NCCL_EXPORT ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm,
                                                   int nranks, int myrank,
                                                   int nId,
                                                   ncclUniqueId *commIds,
                                                   ncclConfig_t *config) {
  const char *what = "ncclCommInitRankScalable";
  if (commIds == NULL || nId < 1)
    return nccl__error(ncclInvalidArgument, "%s: %d ids at %p", what, nId,
                       (void *)commIds);
  return init_rank(newcomm, nranks, &commIds[0], myrank, config,
                   (hoop_unique_id_t *)(void *)(commIds + 1), nId - 1, what);
}
NCCL_ALIAS(ncclCommInitRankScalable);

struct init_all_arg {
  ncclComm_t *out;
  int ndev, rank;
  const ncclUniqueId *id;
  ncclResult_t result;
};

static void *init_all_rank(void *p) {
  struct init_all_arg *a = p;
  a->result = init_rank(&a->out[a->rank], a->ndev, a->id, a->rank, NULL,
                        NULL, 0, "ncclCommInitAll");
  return NULL;
}

/* One process, `ndev` ranks: each joins from a thread of its own. */
NCCL_EXPORT ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev,
                                          const int *devlist) {
  const char *what = "ncclCommInitAll";
  if (comm == NULL || ndev < 1)
    return nccl__error(ncclInvalidArgument, "%s: comm %p, ndev %d", what,
                       (void *)comm, ndev);
  ncclUniqueId id;
  ncclResult_t r = pncclGetUniqueId(&id);
  if (r != ncclSuccess)
    return r;
  struct init_all_arg *args = calloc((size_t)ndev, sizeof *args);
  pthread_t *threads = calloc((size_t)ndev, sizeof *threads);
  if (args == NULL || threads == NULL) {
    free(args);
    free(threads);
    hoop_unique_id_release((const hoop_unique_id_t *)(const void *)&id);
    return nccl__error(ncclSystemError, "%s: out of memory", what);
  }
  int started = 0;
  for (int i = 0; i < ndev; i++) {
    args[i] = (struct init_all_arg){comm, ndev, i, &id, ncclSuccess};
    if (pthread_create(&threads[i], NULL, init_all_rank, &args[i]) != 0)
      break;
    started++;
  }
  r = ncclSuccess;
  for (int i = 0; i < started; i++) {
    pthread_join(threads[i], NULL);
    if (r == ncclSuccess && args[i].result != ncclSuccess)
      r = args[i].result;
  }
  if (started < ndev && r == ncclSuccess)
    r = nccl__error(ncclSystemError, "%s: cannot start %d threads", what,
                    ndev);
  for (int i = 0; i < ndev && devlist != NULL && r == ncclSuccess; i++)
    comm[i]->cuda_dev = comm[i]->cuda_dev < 0 ? -1 : devlist[i];
  if (r != ncclSuccess) {
    for (int i = 0; i < started; i++) {
      if (args[i].result == ncclSuccess && comm[i] != NULL)
        pncclCommAbort(comm[i]);
      comm[i] = NULL;
    }
  }
  free(args);
  free(threads);
  return r;
}
NCCL_ALIAS(ncclCommInitAll);

/* ---- split and shrink --------------------------------------------------- */

struct color_key {
  int32_t color, key, rank;
};

static int by_key(const void *a, const void *b) {
  const struct color_key *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/*
 * Over the parent: every rank learns every (color, key); the first rank of
 * each color makes the new id and all ranks gather the ids.
 */
static ncclResult_t split_agree(struct init_job *job, bool *member) {
  ncclComm_t p = job->parent;
  int n = p->nranks;
  struct color_key mine = {job->color, job->key, p->rank};
  struct color_key *all = calloc((size_t)n, sizeof *all);
  hoop_unique_id_t *ids = calloc((size_t)n, sizeof *ids);
  ncclResult_t r = ncclSuccess;
  if (all == NULL || ids == NULL) {
    r = nccl__error(ncclSystemError, "ncclCommSplit: out of memory");
    goto out;
  }
  hoop_result_t res = hoop_allgather(job->parent_hc, &mine, all, 3, HOOP_I32, NULL);
  if (res != HOOP_SUCCESS) {
    r = nccl__from_hoop(p, res);
    goto out;
  }
  struct color_key *same = calloc((size_t)n, sizeof *same);
  if (same == NULL) {
    r = nccl__error(ncclSystemError, "ncclCommSplit: out of memory");
    goto out;
  }
  int count = 0;
  for (int i = 0; i < n; i++)
    if (all[i].color == job->color && job->color != NCCL_SPLIT_NOCOLOR)
      same[count++] = all[i];
  qsort(same, (size_t)count, sizeof *same, by_key);
  int newrank = -1;
  for (int i = 0; i < count; i++)
    if (same[i].rank == p->rank)
      newrank = i;
  hoop_unique_id_t made;
  memset(&made, 0, sizeof made);
  if (newrank == 0) {
    res = hoop_get_unique_id(&made);
    if (res != HOOP_SUCCESS)
      r = nccl__from_hoop(NULL, res);
  }
  /* Every rank takes part in the gather, also one whose id failed. */
  res = hoop_allgather(job->parent_hc, &made, ids, sizeof made, HOOP_U8, NULL);
  if (r == ncclSuccess && res != HOOP_SUCCESS)
    r = nccl__from_hoop(p, res);
  if (r == ncclSuccess && count > 0) {
    job->comm->nranks = count;
    job->comm->rank = newrank;
    job->id = ids[same[0].rank];
  }
  *member = count > 0;
  if (r != ncclSuccess && newrank == 0)
    hoop_unique_id_release(&made);
  free(same);
out:
  free(all);
  free(ids);
  return r;
}

NCCL_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key,
                                        ncclComm_t *newcomm,
                                        ncclConfig_t *config) {
  const char *what = "ncclCommSplit";
  if (newcomm == NULL)
    return nccl__error(ncclInvalidArgument, "%s: newcomm is NULL", what);
  *newcomm = NULL;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return nccl__error(ncclInvalidArgument,
                       "%s: color %d (a color is >= 0 or NCCL_SPLIT_NOCOLOR)",
                       what, color);
  ncclConfig_t cfg;
  ncclResult_t r = nccl__read_config(config, &cfg, what);
  if (r != ncclSuccess)
    return r;
  hoop_comm_t job_hc;
  r = nccl__enter(comm, what, &job_hc);
  if (r != ncclSuccess)
    return r;
  struct init_job *job;
  r = job_new(&job, 1, 0, &cfg, what);
  if (r != ncclSuccess) {
    nccl__leave(comm);
    return r;
  }
  job->parent = comm;
  job->parent_hc = job_hc;
  job->color = color;
  job->key = key;
  if (color == NCCL_SPLIT_NOCOLOR) {
    /* Takes part in the parent's exchange, then has no communicator. */
    bool member = false;
    r = split_agree(job, &member);
    nccl__leave(comm);
    nccl__comm_free(job->comm);
    free(job);
    return r;
  }
  return start_job(job, config_blocking(&cfg), newcomm, what);
}
NCCL_ALIAS(ncclCommSplit);

/*
 * The ranks that stay call this; the excluded ones may be dead.  The new
 * communicator meets on the spare id of its lowest rank, which every rank
 * has held since init, so nothing travels over the parent.
 */
NCCL_EXPORT ncclResult_t pncclCommShrink(ncclComm_t comm,
                                         int *excludeRanksList,
                                         int excludeRanksCount,
                                         ncclComm_t *newcomm,
                                         ncclConfig_t *config,
                                         int shrinkFlags) {
  const char *what = "ncclCommShrink";
  if (newcomm == NULL)
    return nccl__error(ncclInvalidArgument, "%s: newcomm is NULL", what);
  *newcomm = NULL;
  if (!nccl__comm_valid(comm))
    return nccl__error(ncclInvalidArgument, "%s: not a communicator", what);
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return nccl__error(ncclInvalidArgument, "%s: unknown flags 0x%x", what,
                       (unsigned)shrinkFlags);
  int n = comm->nranks;
  if (excludeRanksCount < 0 || excludeRanksCount >= n ||
      (excludeRanksCount > 0 && excludeRanksList == NULL))
    return nccl__error(ncclInvalidArgument,
                       "%s: %d ranks to exclude of %d (at least one must "
                       "stay)",
                       what, excludeRanksCount, n);
  bool *gone = calloc((size_t)n, sizeof *gone);
  if (gone == NULL)
    return nccl__error(ncclSystemError, "%s: out of memory", what);
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < excludeRanksCount && r == ncclSuccess; i++) {
    int x = excludeRanksList[i];
    if (x < 0 || x >= n || gone[x])
      r = nccl__error(ncclInvalidArgument,
                      "%s: excluded rank %d is %s", what, x,
                      x < 0 || x >= n ? "outside the communicator"
                                      : "listed twice");
    else if (x == comm->rank)
      r = nccl__error(ncclInvalidArgument,
                      "%s: rank %d excludes itself (excluded ranks do not "
                      "call ncclCommShrink)",
                      what, x);
    else
      gone[x] = true;
  }
  ncclConfig_t cfg;
  if (r == ncclSuccess)
    r = nccl__read_config(config, &cfg, what);
  int root = -1, newrank = 0, count = 0;
  for (int i = 0; i < n && r == ncclSuccess; i++) {
    if (gone[i])
      continue;
    if (root < 0)
      root = i;
    if (i == comm->rank)
      newrank = count;
    count++;
  }
  free(gone);
  if (r != ncclSuccess)
    return r;

  pthread_mutex_lock(&comm->lock);
  while (LOAD(comm->state) == NCCL_COMM_INITIALIZING && !LOAD(comm->freeing))
    pthread_cond_wait(&comm->changed, &comm->lock);
  if (LOAD(comm->state) == NCCL_COMM_FAILED || LOAD(comm->freeing) ||
      comm->spares == NULL || comm->spare_used[root]) {
    bool reused = comm->spares != NULL && comm->spare_used[root];
    pthread_mutex_unlock(&comm->lock);
    return nccl__error(ncclInvalidUsage,
                       "%s: %s", what,
                       reused ? "this communicator was already shrunk to "
                                "the same lowest rank; shrink the new one"
                              : "the communicator cannot be shrunk (its init "
                                "failed or it is being destroyed)");
  }
  comm->spare_used[root] = true;
  hoop_comm_t abort_hc = NULL;
  if (shrinkFlags == NCCL_SHRINK_ABORT && LOAD(comm->hc) != NULL) {
    abort_hc = LOAD(comm->hc);
    STORE(comm->hc, NULL);
    nccl__set_state(comm, NCCL_COMM_REVOKED);
  }
  hoop_unique_id_t id = comm->spares[root];
  pthread_mutex_unlock(&comm->lock);
  if (abort_hc != NULL)
    hoop_comm_abort(abort_hc);

  struct init_job *job;
  r = job_new(&job, count, newrank, &cfg, what);
  if (r != ncclSuccess)
    return r;
  job->id = id;
  return start_job(job, config_blocking(&cfg), newcomm, what);
}
NCCL_ALIAS(ncclCommShrink);

