/*
 * The public collectives: argument checks, the choice of algorithm, then
 * the algorithm's plan run by the engine, with its traffic counted.  A
 * failure that involves a peer breaks the communicator (and shuts its
 * connections so the other ranks fail at once too); an argument error
 * returns before any byte moves and leaves it usable.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/device.h"
#include "collectives/model.h"
#include "collectives/ring.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/types.h"

static int overlap(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen > 0 && blen > 0 && x < y + blen && y < x + alen;
}

void hoop__call_buffers(const struct hoop_comm *comm,
                        const struct hoop_call *c, int *send, int *recv) {
  int root = comm->rank == c->root;
  *send = c->coll != HOOP_COLL_BROADCAST || root;
  *recv = c->coll != HOOP_COLL_REDUCE || root;
}

/*
 * Checks the arguments every collective shares.  `per_rank` is the count
 * the user passed; the whole buffer is `mult` times that.
 */
static hoop_result_t check_args(struct hoop_comm *comm, struct hoop_call *c,
                                size_t per_rank, size_t mult, int has_op) {
  const char *what = hoop__coll_call(c->coll);
  c->elem_size = hoop_dtype_size(c->dtype);
  if (c->elem_size == 0)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: dtype %d is not a hoop_dtype_t", what,
                      (int)c->dtype);
  if (has_op && (unsigned)c->op >= HOOP_OP_COUNT)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: op %d is not a hoop_op_t", what, (int)c->op);
  if (c->root < 0 || c->root >= comm->nranks)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: root %d is outside 0..%d", what, c->root,
                      comm->nranks - 1);
  if (per_rank > SIZE_MAX / mult / c->elem_size ||
      per_rank * mult > INT64_MAX / c->elem_size)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: count %zu of %s overflows the address space", what,
                      per_rank, hoop_dtype_name(c->dtype));
  c->count = per_rank * mult;
  c->bytes = c->count * c->elem_size;
  int need_send, need_recv;
  hoop__call_buffers(comm, c, &need_send, &need_recv);
  if (per_rank > 0 && ((need_send && c->send == NULL) ||
                       (need_recv && c->recv == NULL)))
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: %s is NULL with count %zu", what,
                      need_send && c->send == NULL ? "sendbuf" : "recvbuf",
                      per_rank);
  return HOOP_SUCCESS;
}

/*
 * In place means exactly NCCL's aliasing; any other overlap would read
 * bytes the call has already overwritten.
 */
static hoop_result_t check_aliasing(struct hoop_comm *comm,
                                    const struct hoop_call *c, size_t block) {
  const char *s = c->send;
  const char *r = c->recv;
  size_t own = (size_t)comm->rank * block;
  int need_send, need_recv, ok = 1;
  hoop__call_buffers(comm, c, &need_send, &need_recv);
  switch (c->coll) {
  case HOOP_COLL_REDUCE_SCATTER:
    ok = r == s + own || !overlap(s, c->bytes, r, block);
    break;
  case HOOP_COLL_ALLGATHER:
    ok = s == r + own || !overlap(s, block, r, c->bytes);
    break;
  default:
    ok = !need_send || !need_recv || s == r ||
         !overlap(s, c->bytes, r, c->bytes);
    break;
  }
  if (!ok)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: sendbuf and recvbuf overlap but are not the "
                      "in-place layout",
                      hoop__coll_call(c->coll));
  return HOOP_SUCCESS;
}

static hoop_result_t build_ring(struct hoop_plan *plan,
                                const struct hoop_call *c) {
  struct hoop_comm *comm = plan->comm;
  int nch;
  size_t depth;
  hoop__ring_shape(comm, c->coll, comm->nranks, c->bytes, &nch, &depth);
  /*
   * A sum written straight into an out-of-place recv too large for the
   * caches first reads each line of it in (in place, the local operand
   * just brought it in): over shm it goes to the outbox instead, and on
   * to recv around the caches.  Over TCP the extra pass costs more than
   * the reads it saves, where the kernel's copies take the core: 4-64 MiB
   * out of place took 0.89-0.90 of the time without it, on 2 ranks
   * (bench/results/2026-11-24-cold-threshold.md).
   */
  int final_via_outbox = c->coll == HOOP_COLL_ALLREDUCE && plan->cold &&
                         c->send != c->recv && comm->host_memory;
  size_t slots = hoop__ring_outbox_slots(c->coll, comm->nranks, depth,
                                         final_via_outbox);
  size_t slot_bytes = hoop__ring_slot_bytes(c->count, comm->nranks, nch,
                                            c->elem_size, c->slice_bytes);
  char *outbox = NULL;
  plan->header.nchannels = (uint16_t)nch;
  plan->header.depth = (uint32_t)(depth < UINT32_MAX ? depth : UINT32_MAX);
  if (slots > 0)
    HOOP_CHECK(hoop__comm_scratch(comm, slots * slot_bytes * (size_t)nch,
                                  (void **)&outbox));
  struct hoop_ring_call rc = {
      .coll = c->coll,
      .n = comm->nranks,
      .place = comm->ring_place[comm->rank],
      .ranks = comm->ring_order,
      .chunks = comm->ring_order,
      .average = plan->op == HOOP_AVG,
      .nchannels = nch,
      .count = c->count,
      .send = c->send,
      .recv = c->recv,
      .slice_bytes = c->slice_bytes,
      .depth = depth,
      .final_via_outbox = final_via_outbox,
      .outbox = outbox,
      .outbox_slots = slots,
      .slot_bytes = slot_bytes,
  };
  return hoop__ring_build(plan, &rc);
}

hoop_result_t hoop__collective_build(struct hoop_plan *plan,
                                     const struct hoop_call *c) {
  if (c->coll == HOOP_COLL_BROADCAST || c->coll == HOOP_COLL_REDUCE)
    return c->algo == HOOP_ALGO_TREE ? hoop__tree_build(plan, c)
                                     : hoop__chain_build(plan, c);
  switch (c->algo) {
  case HOOP_ALGO_TREE: return hoop__tree_build(plan, c);
  case HOOP_ALGO_PS: return hoop__ps_build(plan, c);
  case HOOP_ALGO_ONESHOT: return hoop__oneshot_build(plan, c);
  case HOOP_ALGO_HIER: return hoop__hier_build(plan, c);
  default: return build_ring(plan, c);
  }
}

static struct hoop_plan_key plan_key(const struct hoop_comm *comm,
                                     const struct hoop_call *c,
                                     hoop_coll_t label, size_t header_count) {
  return (struct hoop_plan_key){
      .send = c->send,
      .recv = c->recv,
      .count = header_count,
      .scratch_gen = comm->scratch_gen,
      .coll = (int32_t)label,
      .dtype = (int32_t)c->dtype,
      .op = (int32_t)c->op,
      .root = c->root,
      .setting = (int32_t)c->setting,
  };
}

/*
 * Recent collectives' plans, run again by matching calls: enough for a
 * training step's buckets and the barrier between calls.
 */
#define HOOP_PLAN_CACHE 8

struct hoop_plan_cache {
  struct hoop_plan plans[HOOP_PLAN_CACHE];
  uint64_t used[HOOP_PLAN_CACHE]; /* seq of each plan's last call */
};

static void plan_cache_free(struct hoop_plan_cache *cache) {
  for (int i = 0; i < HOOP_PLAN_CACHE; i++)
    hoop__plan_free(&cache->plans[i]);
  free(cache);
}

/*
 * Makes the communicator's plan cache on its first call, before the call
 * takes a sequence number, so that running out of memory here is like an
 * argument error: nothing has moved and the communicator stays usable.
 */
static hoop_result_t plan_cache(struct hoop_comm *comm) {
  if (comm->plans != NULL)
    return HOOP_SUCCESS;
  comm->plans = calloc(1, sizeof *comm->plans);
  if (comm->plans == NULL) {
    /*
     * The peers are in this call already: they are told, as for any
     * failure while building a plan, rather than left to time out.
     */
    hoop_result_t res = HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "plan cache");
    hoop__comm_break(comm, res);
    return res;
  }
  comm->plans_free = plan_cache_free;
  return HOOP_SUCCESS;
}

/* A cached plan built for exactly this call, or NULL. */
static struct hoop_plan *cached_plan(struct hoop_comm *comm,
                                     const struct hoop_plan_key *key) {
  struct hoop_plan_cache *cache = comm->plans;
  for (int i = 0; i < HOOP_PLAN_CACHE; i++) {
    struct hoop_plan *plan = &cache->plans[i];
    if (plan->prepared && memcmp(&plan->key, key, sizeof *key) == 0) {
      cache->used[i] = comm->seq;
      return plan;
    }
  }
  return NULL;
}

/* Builds the plan for a call in place of the least recently used one. */
static hoop_result_t build_plan(struct hoop_comm *comm,
                                const struct hoop_call *c,
                                const struct hoop_plan_key *key,
                                struct hoop_plan **out) {
  struct hoop_plan_cache *cache = comm->plans;
  int slot = 0;
  for (int i = 1; i < HOOP_PLAN_CACHE; i++) {
    if (cache->used[i] < cache->used[slot])
      slot = i;
  }
  cache->used[slot] = comm->seq;
  struct hoop_plan *plan = *out = &cache->plans[slot];
  hoop__plan_free(plan);
  hoop__plan_init(plan, comm, c->dtype, c->op);
  plan->cold = c->bytes >= comm->cold_bytes;
  plan->header = (struct hoop_wire_header){
      .magic = HOOP_WIRE_MAGIC,
      .version = HOOP_WIRE_VERSION,
      .coll = (uint8_t)key->coll,
      .dtype = (uint8_t)c->dtype,
      .op = (uint8_t)c->op,
      .count = key->count,
      .slice_bytes = (uint32_t)comm->slice_bytes,
      .root = c->root,
      .sender = comm->rank,
      .nchannels = 1,
      .algo = (uint8_t)c->algo,
  };
  hoop_result_t res = hoop__collective_build(plan, c);
  /* Building may move the scratch that this plan and others point into. */
  plan->key = *key;
  plan->key.scratch_gen = comm->scratch_gen;
  return res;
}

/*
 * Runs one collective whose arguments are checked, with its cached plan
 * or a new one.  The key's label is what the header and the counters call
 * it (a barrier runs as an all-reduce).
 */
static hoop_result_t run_plan(struct hoop_comm *comm, struct hoop_call *c,
                              const struct hoop_plan_key *key,
                              struct hoop_plan *plan, long long t0) {
  hoop_result_t res = HOOP_SUCCESS;
  if (plan == NULL)
    res = build_plan(comm, c, key, &plan);
  plan->header.seq = comm->seq;
  if (res == HOOP_SUCCESS)
    res = hoop__engine_run(plan);
  if (res == HOOP_SUCCESS) {
    if (!c->uncounted)
      hoop__stats_count(comm, plan, (hoop_coll_t)key->coll, c->algo,
                        hoop__now_ns() - t0);
    return HOOP_SUCCESS;
  }
  /*
   * Even running out of memory while building breaks the communicator: the
   * call has its sequence number and the peers are already in it, so they
   * must be told rather than left to time out.
   */
  char call_desc[240], cause[HOOP_ERROR_MAX];
  hoop__describe_call(&plan->header, call_desc, sizeof call_desc);
  snprintf(cause, sizeof cause, "%s", hoop_last_error());
  HOOP_ERROR(comm, res, "rank %d: %s failed: %s", comm->rank, call_desc,
             cause);
  hoop__comm_break(comm, res);
  hoop__plan_free(plan);
  return res;
}

/*
 * One rank runs no schedule and sends no byte, whatever the setting
 * picked: its calls count, with their time, under HOOP_ALGO_AUTO, the
 * slot that no schedule uses (hoop.h), so that the counters still say
 * what ran.
 */
static void count_single(struct hoop_comm *comm, hoop_coll_t label,
                         long long t0) {
  static const uint64_t none[1];
  hoop__stats_count_peers(comm, label, HOOP_ALGO_AUTO, hoop__now_ns() - t0,
                          none, none);
}

/*
 * One rank: the result is the input (AVG over one rank included); for
 * all-gather and broadcast hoop__collective_run already copied it.
 */
static void run_single(struct hoop_comm *comm, const struct hoop_call *c,
                       hoop_coll_t label, long long t0) {
  if (c->coll != HOOP_COLL_ALLGATHER && c->coll != HOOP_COLL_BROADCAST &&
      c->recv != NULL && c->send != c->recv && c->bytes > 0)
    memmove(c->recv, c->send, c->bytes);
  if (!c->uncounted)
    count_single(comm, label, t0);
}

/*
 * Checks a call's arguments.  `per_rank` is the count the user passed; for
 * reduce-scatter and all-gather it is one rank's block of a buffer nranks
 * times larger.
 */
static hoop_result_t check_call(struct hoop_comm *comm, struct hoop_call *c,
                                size_t per_rank) {
  int blocks = c->coll == HOOP_COLL_REDUCE_SCATTER ||
               c->coll == HOOP_COLL_ALLGATHER;
  size_t mult = blocks ? (size_t)comm->nranks : 1;
  int has_op = c->coll != HOOP_COLL_ALLGATHER &&
               c->coll != HOOP_COLL_BROADCAST;
  HOOP_CHECK(check_args(comm, c, per_rank, mult, has_op));
  return check_aliasing(comm, c, per_rank * c->elem_size);
}

hoop_result_t hoop__collective_run(struct hoop_comm *comm,
                                   struct hoop_call *c, size_t per_rank,
                                   hoop_coll_t label) {
  hoop_result_t res = HOOP_SUCCESS;
  HOOP_CHECK(hoop__comm_enter(comm, hoop__coll_call(label)));
  HOOP_CHECK_GOTO(check_call(comm, c, per_rank), res, out);
  HOOP_CHECK_GOTO(plan_cache(comm), res, out);
  c->slice_bytes = comm->slice_bytes / c->elem_size * c->elem_size;
  struct hoop_plan_key key = plan_key(comm, c, label, per_rank);
  struct hoop_plan *cached = cached_plan(comm, &key);
  c->algo = cached != NULL ? (hoop_algo_t)cached->header.algo
                           : hoop__choose_algo(comm, c->setting, c->coll,
                                               c->bytes);
  comm->seq++;
  /* The copies below are the call's work too, and one rank's whole work. */
  long long t0 = hoop__now_ns();
  /* The ring never sends a rank its own block; all-gather copies it. */
  if (c->coll == HOOP_COLL_ALLGATHER && per_rank > 0) {
    char *own = c->recv + (size_t)comm->rank * per_rank * c->elem_size;
    if (c->send != own)
      memcpy(own, c->send, per_rank * c->elem_size);
  }
  /* A broadcast root keeps its own data: only the others receive it. */
  if (c->coll == HOOP_COLL_BROADCAST && comm->rank == c->root &&
      c->send != c->recv && c->bytes > 0)
    memmove(c->recv, c->send, c->bytes);
  if (comm->nranks == 1)
    run_single(comm, c, label, t0);
  else
    res = run_plan(comm, c, &key, cached, t0);
out:
  hoop__comm_leave(comm);
  return res;
}

hoop_result_t hoop__route_call(struct hoop_comm *comm, const char *what,
                               const void *send, const void *recv,
                               hoop_stream_t stream, int *on_device) {
  HOOP_CHECK(hoop__comm_check_live(comm, what));
  HOOP_CHECK(hoop__device_classify(comm, what, send, recv, stream,
                                   on_device));
  return *on_device ? HOOP_SUCCESS : hoop__device_drain(comm);
}

/*
 * Device buffers are queued behind their stream; host buffers run now,
 * after any device calls queued before them.
 */
static hoop_result_t dispatch(struct hoop_comm *comm, struct hoop_call *c,
                              size_t per_rank, hoop_coll_t label,
                              hoop_stream_t stream) {
  int on_device = 0;
  HOOP_CHECK(hoop__route_call(comm, hoop__coll_call(label), c->send,
                              c->recv, stream, &on_device));
  c->setting = hoop__comm_algo(comm);
  if (!on_device)
    return hoop__collective_run(comm, c, per_rank, label);
  HOOP_CHECK(check_call(comm, c, per_rank));
  long long t0 = hoop__now_ns();
  HOOP_CHECK(hoop__device_enqueue(comm, c, per_rank, label, stream));
  /* One rank's device call is a copy queued on the stream, and no proxy
     counts it. */
  if (comm->nranks == 1)
    count_single(comm, label, t0);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_allreduce(hoop_comm_t comm, const void *sendbuf,
                             void *recvbuf, size_t count, hoop_dtype_t dtype,
                             hoop_op_t op, hoop_stream_t stream) {
  struct hoop_call c = {.coll = HOOP_COLL_ALLREDUCE, .send = sendbuf,
                        .recv = recvbuf, .dtype = dtype, .op = op};
  return dispatch(comm, &c, count, HOOP_COLL_ALLREDUCE, stream);
}

hoop_result_t hoop_reduce_scatter(hoop_comm_t comm, const void *sendbuf,
                                  void *recvbuf, size_t recvcount,
                                  hoop_dtype_t dtype, hoop_op_t op,
                                  hoop_stream_t stream) {
  struct hoop_call c = {.coll = HOOP_COLL_REDUCE_SCATTER, .send = sendbuf,
                        .recv = recvbuf, .dtype = dtype, .op = op};
  return dispatch(comm, &c, recvcount, HOOP_COLL_REDUCE_SCATTER, stream);
}

hoop_result_t hoop_allgather(hoop_comm_t comm, const void *sendbuf,
                             void *recvbuf, size_t sendcount,
                             hoop_dtype_t dtype, hoop_stream_t stream) {
  /* The op travels in the header; all-gather's is fixed. */
  struct hoop_call c = {.coll = HOOP_COLL_ALLGATHER, .send = sendbuf,
                        .recv = recvbuf, .dtype = dtype, .op = HOOP_SUM};
  return dispatch(comm, &c, sendcount, HOOP_COLL_ALLGATHER, stream);
}

hoop_result_t hoop_broadcast(hoop_comm_t comm, const void *sendbuf,
                             void *recvbuf, size_t count, hoop_dtype_t dtype,
                             int root, hoop_stream_t stream) {
  struct hoop_call c = {.coll = HOOP_COLL_BROADCAST, .send = sendbuf,
                        .recv = recvbuf, .dtype = dtype, .op = HOOP_SUM,
                        .root = root};
  return dispatch(comm, &c, count, HOOP_COLL_BROADCAST, stream);
}

hoop_result_t hoop_reduce(hoop_comm_t comm, const void *sendbuf,
                          void *recvbuf, size_t count, hoop_dtype_t dtype,
                          hoop_op_t op, int root, hoop_stream_t stream) {
  struct hoop_call c = {.coll = HOOP_COLL_REDUCE, .send = sendbuf,
                        .recv = recvbuf, .dtype = dtype, .op = op,
                        .root = root};
  return dispatch(comm, &c, count, HOOP_COLL_REDUCE, stream);
}

hoop_result_t hoop_barrier(hoop_comm_t comm) {
  /* One byte all-reduced: every rank must have sent before any finishes. */
  char token = 0;
  struct hoop_call c = {.coll = HOOP_COLL_ALLREDUCE, .send = &token,
                        .recv = &token, .dtype = HOOP_U8, .op = HOOP_SUM};
  return dispatch(comm, &c, 1, HOOP_COLL_BARRIER, NULL);
}

/*
 * Whether the communicator that follows a shrink or a grow formed on every
 * rank: a rank that died while they formed it can leave it formed on some
 * and not on others, and those without it never enter this barrier, so it
 * fails on every rank alike.  On failure *c is destroyed and NULL, and
 * `why` holds its error.
 */
static hoop_result_t check_formed(hoop_comm_t *c, char *why, size_t len) {
  hoop_result_t res = hoop_barrier(*c);
  if (res != HOOP_SUCCESS) {
    snprintf(why, len, "%s", hoop_comm_last_error(*c));
    hoop_comm_destroy(*c);
    *c = NULL;
  }
  return res;
}

hoop_result_t hoop_comm_shrink(hoop_comm_t comm, const hoop_config_t *config,
                               hoop_comm_t *newcomm, int *old_ranks) {
  if (newcomm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_shrink: newcomm is NULL");
  HOOP_CHECK(hoop__comm_shrink(comm, config, newcomm, old_ranks));
  char why[HOOP_ERROR_MAX];
  hoop_result_t res = check_formed(newcomm, why, sizeof why);
  if (res == HOOP_SUCCESS)
    return HOOP_SUCCESS;
  return HOOP_ERROR(comm, res,
                    "hoop_comm_shrink: a survivor was lost while the others "
                    "formed their communicator (call it again to go on "
                    "without it): %s",
                    why);
}

/* The most newcomers one hoop_comm_grow admits; later ones wait for the
   next. */
#define GROW_MAX 64

/* What rank 0 tells the members in a grow. */
struct grow_offer {
  int32_t count; /* newcomers admitted */
  int32_t reserved;
  hoop_unique_id_t id;
};

/*
 * Forms the communicator of members and newcomers; on any failure the
 * members go on with `comm`, which the grow has not touched.
 */
static hoop_result_t form_grown(hoop_comm_t comm, const hoop_config_t *config,
                                const struct grow_offer *offer,
                                hoop_comm_t *newcomm) {
  int n = 0, rank = 0;
  hoop_comm_size(comm, &n);
  hoop_comm_rank(comm, &rank);
  char why[HOOP_ERROR_MAX];
  hoop_result_t res = hoop__comm_create(newcomm, n + offer->count, rank,
                                        &offer->id, config);
  if (res != HOOP_SUCCESS)
    snprintf(why, sizeof why, "%s", hoop_last_error());
  else
    res = check_formed(newcomm, why, sizeof why);
  if (res == HOOP_SUCCESS) {
    hoop__comm_pass_joins(comm, *newcomm);
    return HOOP_SUCCESS;
  }
  return HOOP_ERROR(comm, res,
                    "hoop_comm_grow: the communicator with %d newcomer(s) "
                    "did not form (this one goes on as it was): %s",
                    offer->count, why);
}

hoop_result_t hoop_comm_grow(hoop_comm_t comm, const hoop_config_t *config,
                             hoop_comm_t *newcomm, int *joined) {
  if (newcomm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_grow: newcomm is NULL");
  *newcomm = NULL;
  if (joined != NULL)
    *joined = 0;
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_comm_grow"));
  int fds[GROW_MAX], count = 0;
  hoop_result_t res = hoop__comm_take_joiners(comm, fds, GROW_MAX, &count);
  hoop__comm_leave(comm);
  struct grow_offer offer = {.count = count};
  if (res == HOOP_SUCCESS && count > 0)
    res = hoop__comm_successor_id(comm, &offer.id);
  if (res != HOOP_SUCCESS)
    offer.count = 0;
  /* Every member takes part, so that all of them learn the outcome. */
  hoop_result_t said = hoop_broadcast(comm, &offer, &offer, sizeof offer,
                                      HOOP_U8, 0, NULL);
  if (said != HOOP_SUCCESS || offer.count == 0) {
    for (int i = 0; i < count; i++)
      close(fds[i]);
    return said != HOOP_SUCCESS ? said : res;
  }
  int n = 0;
  hoop_comm_size(comm, &n);
  for (int i = 0; i < count; i++)
    hoop__comm_answer_joiner(fds[i], &offer.id, n + offer.count, n + i);
  HOOP_CHECK(form_grown(comm, config, &offer, newcomm));
  if (joined != NULL)
    *joined = offer.count;
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_join(hoop_comm_t *comm, const hoop_config_t *config) {
  if (comm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_join: comm is NULL");
  HOOP_CHECK(hoop__comm_join(config, comm));
  /* The members' check in hoop_comm_grow, from this side. */
  char why[HOOP_ERROR_MAX];
  hoop_result_t res = check_formed(comm, why, sizeof why);
  if (res == HOOP_SUCCESS)
    return HOOP_SUCCESS;
  return HOOP_ERROR(NULL, res,
                    "hoop_comm_join: the job's communicator with this "
                    "process did not form: %s",
                    why);
}

hoop_result_t hoop_comm_get_async_error(hoop_comm_t comm,
                                        hoop_result_t *error) {
  HOOP_CHECK(hoop__comm_check_live(comm, "hoop_comm_get_async_error"));
  if (error == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_get_async_error: error is NULL");
  *error = hoop__device_async_error(comm);
  return HOOP_SUCCESS;
}

hoop_result_t hoop_comm_device_path(hoop_comm_t comm, const char **name) {
  HOOP_CHECK(hoop__comm_check_live(comm, "hoop_comm_device_path"));
  if (name == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_device_path: name is NULL");
  *name = hoop__device_path(comm);
  return HOOP_SUCCESS;
}
