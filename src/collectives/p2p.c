/*
 * Point-to-point: send, recv, groups of them, and all-to-all built from
 * them.  A group queues its calls and runs them as one plan, so every
 * message moves at once and no order of calls can deadlock.  Messages
 * between two ranks match in call order; each link's header carries a
 * hash of its message sizes, so a receive that does not match its send
 * fails on both ranks instead of splitting data differently.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/device.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/types.h"

struct p2p_request {
  int send;
  char *buf; /* host memory: the caller's, or the stage of `device` */
  size_t bytes;
  int peer;
  void *device; /* the caller's device buffer, or NULL */
  hoop_stream_t stream;
};

/* A group belongs to the thread that opened it, as in NCCL. */
static _Thread_local struct {
  int depth;
  struct hoop_comm *comm;
  struct p2p_request *reqs;
  int n, cap;
} group;

static hoop_result_t queue(struct hoop_comm *comm,
                           const struct p2p_request *req) {
  if (group.comm != NULL && group.comm != comm)
    return HOOP_ERROR(comm, HOOP_ERR_UNSUPPORTED,
                      "a hoop group spans one communicator; this call is "
                      "on another");
  if (group.n == group.cap) {
    int cap = group.cap ? group.cap * 2 : 16;
    struct p2p_request *r = realloc(group.reqs, sizeof *r * (size_t)cap);
    if (r == NULL)
      return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "group of %d calls", cap);
    group.reqs = r;
    group.cap = cap;
  }
  group.comm = comm;
  group.reqs[group.n++] = *req;
  return HOOP_SUCCESS;
}

/* Slices of one message on its link, after the link's earlier messages. */
static hoop_result_t add_message(struct hoop_plan *plan,
                                 const struct p2p_request *req,
                                 uint64_t *next_key) {
  int link;
  HOOP_CHECK(hoop__plan_link(plan, req->peer, 0, req->send, &link));
  struct hoop_link *l = &plan->links[link];
  l->signature = hoop__fnv1a_step(l->signature, req->bytes + 1);
  size_t slice = plan->comm->slice_bytes;
  for (size_t at = 0; at < req->bytes; at += slice) {
    size_t bytes = req->bytes - at < slice ? req->bytes - at : slice;
    struct hoop_plan_op op = {.bytes = (uint32_t)bytes, .feed = HOOP_NO_OP,
                              .after = HOOP_NO_OP,
                              .key = hoop__key((*next_key)++, 0)};
    if (req->send) {
      op.kind = HOOP_OP_SEND;
      op.src = req->buf + at;
    } else {
      op.kind = HOOP_OP_RECV_COPY;
      op.dst = req->buf + at;
    }
    HOOP_CHECK(hoop__plan_op(plan, link, &op, NULL));
  }
  return HOOP_SUCCESS;
}

/* Pairs sends to self with receives from self, in order, and copies. */
static hoop_result_t copy_to_self(struct hoop_comm *comm,
                                  const struct p2p_request *reqs, int n) {
  int s = 0, r = 0;
  for (;;) {
    while (s < n && !(reqs[s].send && reqs[s].peer == comm->rank))
      s++;
    while (r < n && !(!reqs[r].send && reqs[r].peer == comm->rank))
      r++;
    if (s == n && r == n)
      return HOOP_SUCCESS;
    if (s == n || r == n || reqs[s].bytes != reqs[r].bytes)
      return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                        "rank %d: sends to itself and receives from itself "
                        "do not pair up (a %zu-byte %s has no match)",
                        comm->rank, s < n ? reqs[s].bytes : reqs[r].bytes,
                        s < n ? "send" : "receive");
    if (reqs[s].bytes > 0 && reqs[r].buf != reqs[s].buf)
      memmove(reqs[r].buf, reqs[s].buf, reqs[s].bytes);
    s++;
    r++;
  }
}

/* Runs requests as one plan; `coll` labels the header and counters. */
static hoop_result_t run_requests(struct hoop_comm *comm,
                                  const struct p2p_request *reqs, int n,
                                  hoop_coll_t coll, size_t count) {
  long long t0 = hoop__now_ns();
  struct hoop_plan plan;
  hoop__plan_init(&plan, comm, HOOP_U8, HOOP_SUM);
  plan.header = (struct hoop_wire_header){
      .magic = HOOP_WIRE_MAGIC,
      .version = HOOP_WIRE_VERSION,
      .coll = (uint8_t)coll,
      .dtype = HOOP_U8,
      .seq = coll == HOOP_COLL_ALLTOALL ? comm->seq : 0,
      .count = count,
      .slice_bytes = (uint32_t)comm->slice_bytes,
      .root = -1,
      .sender = comm->rank,
      .nchannels = 1,
      .algo = HOOP_ALGO_P2P,
  };
  hoop_result_t res = copy_to_self(comm, reqs, n);
  uint64_t *keys = calloc((size_t)comm->nranks * 2, sizeof *keys);
  if (res == HOOP_SUCCESS && keys == NULL)
    res = HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "send/recv plan");
  for (int i = 0; i < n && res == HOOP_SUCCESS; i++) {
    if (reqs[i].peer != comm->rank)
      res = add_message(&plan, &reqs[i],
                        &keys[reqs[i].peer * 2 + reqs[i].send]);
  }
  free(keys);
  if (res == HOOP_SUCCESS)
    res = hoop__engine_run(&plan);
  if (res == HOOP_SUCCESS) {
    hoop__stats_count(comm, &plan, coll, HOOP_ALGO_P2P,
                      hoop__now_ns() - t0);
  } else if (res != HOOP_ERR_INVALID_ARGUMENT) {
    /* Out of memory too: the peers are in the call and must be told. */
    char cause[HOOP_ERROR_MAX];
    snprintf(cause, sizeof cause, "%s", hoop_last_error());
    HOOP_ERROR(comm, res, "rank %d: %s failed: %s", comm->rank,
               hoop__coll_name(coll), cause);
    hoop__comm_break(comm, res);
  }
  hoop__plan_free(&plan);
  return res;
}

static hoop_result_t check_message(struct hoop_comm *comm, const char *what,
                                   const void *buf, size_t count,
                                   hoop_dtype_t dtype, int peer,
                                   size_t *bytes) {
  size_t esz = hoop_dtype_size(dtype);
  if (esz == 0)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: dtype %d is not a hoop_dtype_t", what, (int)dtype);
  if (peer < 0 || peer >= comm->nranks)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: peer %d is outside 0..%d", what, peer,
                      comm->nranks - 1);
  if (count > SIZE_MAX / esz)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: count %zu overflows the address space", what,
                      count);
  if (count > 0 && buf == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: buffer is NULL with count %zu", what, count);
  *bytes = count * esz;
  return HOOP_SUCCESS;
}

/*
 * Copies received data back into the device buffers of staged requests
 * (when `res` says the messages arrived) and frees every stage; returns
 * `res`, or the first staging error after it.
 */
static hoop_result_t unstage(struct hoop_comm *comm, const char *what,
                             struct p2p_request *reqs, int n,
                             hoop_result_t res) {
  for (int i = 0; i < n; i++) {
    if (reqs[i].device == NULL)
      continue;
    hoop_result_t r = hoop__device_unstage(
        comm, what, reqs[i].device, reqs[i].buf, reqs[i].bytes,
        !reqs[i].send && res == HOOP_SUCCESS, reqs[i].stream);
    reqs[i].device = NULL;
    res = res == HOOP_SUCCESS ? r : res;
  }
  return res;
}

/*
 * Host buffers run after the device calls queued before them, so that
 * every rank keeps its call order.  A device buffer is staged through host
 * memory (device.h): a send copies it out now, once its stream has run
 * what was queued before; a receive copies in before its call returns (or
 * its group ends).
 */
static hoop_result_t point_to_point(struct hoop_comm *comm, int send,
                                    const void *buf, size_t count,
                                    hoop_dtype_t dtype, int peer,
                                    hoop_stream_t stream) {
  const char *what = send ? "hoop_send" : "hoop_recv";
  int on_device = 0;
  HOOP_CHECK(hoop__route_call(comm, what, buf, NULL, stream, &on_device));
  HOOP_CHECK(hoop__comm_enter(comm, what));
  struct p2p_request req = {.send = send, .buf = (char *)buf, .peer = peer,
                            .stream = stream};
  hoop_result_t res = check_message(comm, what, buf, count, dtype, peer,
                                    &req.bytes);
  if (res == HOOP_SUCCESS && on_device && req.bytes > 0) {
    void *stage;
    res = hoop__device_stage(comm, what, buf, req.bytes, send, stream,
                             &stage);
    if (res == HOOP_SUCCESS) {
      req.device = (void *)buf;
      req.buf = stage;
    }
  }
  if (res == HOOP_SUCCESS && group.depth > 0) {
    res = queue(comm, &req);
    if (res != HOOP_SUCCESS)
      unstage(comm, what, &req, 1, res);
  } else if (res == HOOP_SUCCESS) {
    res = unstage(comm, what, &req, 1,
                  run_requests(comm, &req, 1, HOOP_COLL_SENDRECV, 0));
  }
  hoop__comm_leave(comm);
  return res;
}

hoop_result_t hoop_send(hoop_comm_t comm, const void *buf, size_t count,
                        hoop_dtype_t dtype, int peer, hoop_stream_t stream) {
  return point_to_point(comm, 1, buf, count, dtype, peer, stream);
}

hoop_result_t hoop_recv(hoop_comm_t comm, void *buf, size_t count,
                        hoop_dtype_t dtype, int peer, hoop_stream_t stream) {
  return point_to_point(comm, 0, buf, count, dtype, peer, stream);
}

hoop_result_t hoop_group_start(void) {
  group.depth++;
  return HOOP_SUCCESS;
}

hoop_result_t hoop_group_end(void) {
  if (group.depth == 0)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_USAGE,
                      "hoop_group_end without hoop_group_start");
  if (--group.depth > 0)
    return HOOP_SUCCESS;
  struct hoop_comm *comm = group.comm;
  int n = group.n;
  group.comm = NULL;
  group.n = 0;
  if (comm == NULL)
    return HOOP_SUCCESS;
  hoop_result_t res = hoop__comm_enter(comm, "hoop_group_end");
  if (res != HOOP_SUCCESS)
    return unstage(comm, "hoop_group_end", group.reqs, n, res);
  res = unstage(comm, "hoop_group_end", group.reqs, n,
                run_requests(comm, group.reqs, n, HOOP_COLL_SENDRECV, 0));
  hoop__comm_leave(comm);
  return res;
}

/* All-to-all's arguments; *block is one peer's share in bytes. */
static hoop_result_t check_alltoall(struct hoop_comm *comm, const void *send,
                                    const void *recv, size_t count,
                                    hoop_dtype_t dtype, size_t *block) {
  const char *what = "hoop_alltoall";
  int n = comm->nranks;
  HOOP_CHECK(check_message(comm, what, send, count, dtype, 0, block));
  HOOP_CHECK(check_message(comm, what, recv, count, dtype, 0, block));
  if (*block > SIZE_MAX / (size_t)n)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: count %zu overflows", what, count);
  uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
  size_t total = *block * (size_t)n;
  if (total > 0 && s < r + total && r < s + total)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: sendbuf and recvbuf overlap", what);
  return HOOP_SUCCESS;
}

hoop_result_t hoop__alltoall_run(struct hoop_comm *comm, const void *sendbuf,
                                 void *recvbuf, size_t count,
                                 hoop_dtype_t dtype) {
  HOOP_CHECK(hoop__comm_enter(comm, "hoop_alltoall"));
  int n = comm->nranks;
  size_t block = 0;
  hoop_result_t res = check_alltoall(comm, sendbuf, recvbuf, count, dtype,
                                     &block);
  struct p2p_request *reqs = NULL;
  if (res == HOOP_SUCCESS) {
    reqs = malloc(sizeof *reqs * 2 * (size_t)n);
    if (reqs == NULL)
      res = HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "alltoall");
  }
  if (res == HOOP_SUCCESS) {
    const char *s = sendbuf;
    char *r = recvbuf;
    for (int p = 0; p < n; p++) {
      reqs[2 * p] = (struct p2p_request){
          .send = 1, .buf = (char *)s + (size_t)p * block, .bytes = block,
          .peer = p};
      reqs[2 * p + 1] = (struct p2p_request){
          .send = 0, .buf = r + (size_t)p * block, .bytes = block, .peer = p};
    }
    comm->seq++;
    res = run_requests(comm, reqs, 2 * n, HOOP_COLL_ALLTOALL, count);
  }
  free(reqs);
  hoop__comm_leave(comm);
  return res;
}

hoop_result_t hoop_alltoall(hoop_comm_t comm, const void *sendbuf,
                            void *recvbuf, size_t count, hoop_dtype_t dtype,
                            hoop_stream_t stream) {
  int on_device = 0;
  HOOP_CHECK(hoop__route_call(comm, "hoop_alltoall", sendbuf, recvbuf,
                              stream, &on_device));
  if (!on_device)
    return hoop__alltoall_run(comm, sendbuf, recvbuf, count, dtype);
  size_t block = 0;
  HOOP_CHECK(check_alltoall(comm, sendbuf, recvbuf, count, dtype, &block));
  struct hoop_call c = {.coll = HOOP_COLL_ALLTOALL, .send = sendbuf,
                        .recv = recvbuf, .dtype = dtype,
                        .count = count * (size_t)comm->nranks,
                        .bytes = block * (size_t)comm->nranks,
                        .elem_size = hoop_dtype_size(dtype)};
  return hoop__device_enqueue(comm, &c, count, HOOP_COLL_ALLTOALL, stream);
}
