/* The progress engine for plans; see engine.h. */
#include "core/engine.h"

#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/copy.h"
#include "core/error.h"
#include "core/types.h"
#include "core/wire.h"
#include "reduce/reduce.h"
#include "core/conn.h"

#define HEADER_BYTES sizeof(struct hoop_wire_header)
#define MAX_IOV 16

void hoop__describe_call(const struct hoop_wire_header *h, char *buf,
                         size_t len) {
  snprintf(buf, len, "%s #%llu (count %llu, %s, %s, root %d, %s, slice %u, "
                     "%u channel(s), depth %u)",
           hoop__coll_name((hoop_coll_t)h->coll),
           (unsigned long long)h->seq, (unsigned long long)h->count,
           hoop_dtype_name((hoop_dtype_t)h->dtype),
           hoop_op_name((hoop_op_t)h->op), h->root,
           hoop_algo_name((hoop_algo_t)h->algo),
           h->slice_bytes, h->nchannels, h->depth);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static const struct hoop_plan_op *link_op(const struct hoop_plan *p,
                                     const struct hoop_link *l, int i) {
  return &p->ops[l->ops[i]];
}

static size_t after_ready_slow(const struct hoop_plan *p,
                               const struct hoop_plan_op *o) {
  const struct hoop_plan_op *a = &p->ops[o->after];
  if (!o->trails)
    return a->done == a->bytes ? o->bytes : 0;
  size_t ready = a->done < o->bytes ? a->done : o->bytes;
  return o->kind == HOOP_OP_RECV_REDUCE ? ready / p->elem_size * p->elem_size
                                        : ready;
}

/*
 * Bytes of an op that its `after` lets it process (see `trails`); whole
 * elements for a reduction, which reads no part of one.  Most ops wait on
 * nothing, and the engine asks on every pass, so that case stays inline.
 */
static inline size_t after_ready(const struct hoop_plan *p,
                                 const struct hoop_plan_op *o) {
  if (o->gate > p->groups_complete)
    return 0;
  return o->after == HOOP_NO_OP ? o->bytes : after_ready_slow(p, o);
}

/*
 * Bytes of a send op that may go now: all of them, or as many as its feed
 * has produced when the feed covers the same bytes (forwarding as data
 * arrives); a feed of another size must finish first.
 */
static size_t send_ready(const struct hoop_plan *p, const struct hoop_plan_op *o) {
  size_t ready = after_ready(p, o);
  if (ready == 0 || o->feed == HOOP_NO_OP)
    return ready;
  const struct hoop_plan_op *f = &p->ops[o->feed];
  size_t fed = f->bytes == o->bytes ? f->done
               : f->done == f->bytes ? o->bytes : 0;
  return fed < ready ? fed : ready;
}

/* The rest of the header, then ready bytes of the ops from `cur` on. */
static int gather_out(const struct hoop_plan *p, struct hoop_link *l,
                      struct iovec *iov, size_t *total) {
  int n = 0;
  *total = 0;
  if (l->hdr_done < HEADER_BYTES) {
    iov[n].iov_base = (char *)&l->header + l->hdr_done;
    iov[n].iov_len = HEADER_BYTES - l->hdr_done;
    *total += iov[n++].iov_len;
  }
  for (int i = l->cur; i < l->nops; i++) {
    const struct hoop_plan_op *o = link_op(p, l, i);
    size_t ready = send_ready(p, o);
    if (ready <= o->done)
      break;
    const char *ptr = o->src + o->done;
    size_t len = ready - o->done;
    struct iovec *last = n > 0 ? &iov[n - 1] : NULL;
    if (last != NULL && (const char *)last->iov_base + last->iov_len == ptr) {
      last->iov_len += len;
    } else {
      if (n == MAX_IOV)
        break;
      iov[n].iov_base = (void *)ptr;
      iov[n].iov_len = len;
      n++;
    }
    *total += len;
    if (ready < o->bytes)
      break;
  }
  return n;
}

/* Moves groups_complete past every complete group. */
static void open_gates(struct hoop_plan *p) {
  while (p->groups_complete + 1 < p->ngroups &&
         p->group_left[p->groups_complete + 1] == 0)
    p->groups_complete++;
}

/* Marks a link's current op complete once all its bytes are. */
static void advance(struct hoop_plan *p, struct hoop_link *l,
                    const struct hoop_plan_op *o) {
  if (o->done == o->bytes) {
    l->cur++;
    if (o->group != 0 && --p->group_left[o->group] == 0)
      open_gates(p);
  }
}

static hoop_result_t send_progress(struct hoop_plan *p, struct hoop_link *l,
                                   int *progress) {
  struct iovec iov[MAX_IOV];
  size_t want;
  int n = gather_out(p, l, iov, &want);
  l->want_poll = 0;
  if (n == 0)
    return HOOP_SUCCESS; /* waiting for an op, not for the socket */
  size_t sent;
  HOOP_CHECK(l->conn->ops->send(l->conn, iov, n, &sent));
  l->want_poll = sent < want;
  if (sent == 0)
    return HOOP_SUCCESS;
  *progress = 1;
  size_t hdr = min_size(sent, HEADER_BYTES - l->hdr_done);
  l->hdr_done += hdr;
  sent -= hdr;
  while (sent > 0) {
    struct hoop_plan_op *o = &p->ops[l->ops[l->cur]];
    size_t take = min_size(sent, o->bytes - o->done);
    o->done += (uint32_t)take;
    sent -= take;
    advance(p, l, o);
  }
  return HOOP_SUCCESS;
}

static hoop_result_t check_header(const struct hoop_plan *p,
                                  const struct hoop_link *l,
                                  const void *bytes) {
  struct hoop_wire_header got;
  char why[200];
  if (!hoop__wire_header_parse(bytes, HEADER_BYTES, &got, why, sizeof why))
    return HOOP_ERROR(p->comm, HOOP_ERR_MISMATCH,
                      "stream from %s is out of step: %s",
                      l->conn->peer_desc, why);
  const struct hoop_wire_header *mine = &l->header;
  if (hoop__wire_same_call(&got, mine) && got.link_bytes == mine->link_bytes &&
      got.back_bytes == mine->back_bytes)
    return HOOP_SUCCESS;
  char a[240], b[240];
  hoop__describe_call(mine, a, sizeof a);
  hoop__describe_call(&got, b, sizeof b);
  const char *unit = mine->coll == HOOP_COLL_SENDRECV ? " (size hash)" : "";
  return HOOP_ERROR(p->comm, HOOP_ERR_MISMATCH,
                    "ranks disagree: this rank called %s, expecting %llu "
                    "bytes%s from %s and sending it %llu; that rank called "
                    "%s, sending %llu and expecting %llu",
                    a, (unsigned long long)mine->link_bytes, unit,
                    l->conn->peer_desc, (unsigned long long)mine->back_bytes,
                    b, (unsigned long long)got.link_bytes,
                    (unsigned long long)got.back_bytes);
}

static hoop_result_t receive_header(struct hoop_plan *p, struct hoop_link *l,
                                    int *progress) {
  size_t first = l->nops > 0 ? link_op(p, l, 0)->bytes : 0;
  const void *bytes;
  size_t avail;
  HOOP_CHECK(l->conn->ops->peek(l->conn, HEADER_BYTES + first, &bytes,
                                &avail));
  if (avail < HEADER_BYTES) {
    l->want_poll = 1;
    return HOOP_SUCCESS;
  }
  HOOP_CHECK(check_header(p, l, bytes));
  l->conn->ops->release(l->conn, HEADER_BYTES);
  l->hdr_done = HEADER_BYTES;
  p->headers_pending--;
  *progress = 1;
  return HOOP_SUCCESS;
}

/*
 * Bytes of the ops from `cur` on that are ready to receive with one system
 * call: the same kind, dependencies met (in part, for the last), and (for
 * copies) destinations that continue each other in memory.
 */
static size_t recv_run(const struct hoop_plan *p, const struct hoop_link *l) {
  const struct hoop_plan_op *prev = link_op(p, l, l->cur);
  size_t ready = after_ready(p, prev);
  size_t bytes = ready - prev->done;
  for (int i = l->cur + 1; i < l->nops && ready == prev->bytes; i++) {
    const struct hoop_plan_op *o = link_op(p, l, i);
    ready = after_ready(p, o);
    if (o->kind != prev->kind || ready == 0 ||
        (o->kind == HOOP_OP_RECV_COPY && o->dst != prev->dst + prev->bytes))
      break;
    bytes += ready;
    prev = o;
  }
  return bytes;
}

static void finish_op(struct hoop_plan *p, struct hoop_link *l,
                      struct hoop_plan_op *o, size_t moved) {
  o->done += (uint32_t)moved;
  advance(p, l, o);
}

static hoop_result_t recv_copy(struct hoop_plan *p, struct hoop_link *l,
                               size_t *moved) {
  struct hoop_plan_op *o = &p->ops[l->ops[l->cur]];
  size_t got;
  HOOP_CHECK(l->conn->ops->recv(l->conn, o->dst + o->done, recv_run(p, l),
                                p->cold, &got));
  *moved = got;
  while (got > 0) {
    o = &p->ops[l->ops[l->cur]];
    size_t take = min_size(got, o->bytes - o->done);
    finish_op(p, l, o, take);
    got -= take;
  }
  return HOOP_SUCCESS;
}

/*
 * dst = x op y over m bytes.  A result that also goes to copy_to around
 * the caches is reduced and copied a few lines at a time under one fence,
 * so that each block's non-temporal stores issue while the next block's
 * loads are in flight.  Copying the piece after reducing all of it cost a
 * pass of its own: 64 MiB out of place on 2 ranks over shm took 9.5-9.8 ms
 * that way, against 8.6-8.7 in blocks of 256 bytes (1 KiB 8.8-9.0, 4 KiB
 * 9.2-9.5), and a fence per block more than doubled it.
 */
#define STREAM_BLOCK_BYTES 256

static void reduce_op(const struct hoop_plan *p, const struct hoop_plan_op *o,
                      char *dst, const char *x, const char *y, size_t m) {
  size_t esz = p->elem_size;
  char *out = o->copy_to != NULL ? o->copy_to + o->done : NULL;
  size_t block = out != NULL ? STREAM_BLOCK_BYTES : m;
  for (size_t b = 0; b < m; b += block) {
    size_t len = min_size(block, m - b);
    hoop__reduce(dst + b, x + b, y + b, len / esz, p->dtype, p->op);
    if (o->finish_avg)
      hoop__reduce_div(dst + b, len / esz, p->dtype, p->comm->nranks);
    if (out != NULL)
      hoop__stream_cold(out + b, dst + b, len);
  }
  if (out != NULL)
    hoop__cold_fence();
}

static hoop_result_t recv_reduce(struct hoop_plan *p, struct hoop_link *l,
                                 size_t *moved) {
  size_t esz = p->elem_size;
  const void *in;
  size_t avail;
  HOOP_CHECK(l->conn->ops->peek(l->conn, recv_run(p, l), &in, &avail));
  *moved = 0;
  while (l->cur < l->nops) {
    struct hoop_plan_op *o = &p->ops[l->ops[l->cur]];
    if (o->kind != HOOP_OP_RECV_REDUCE)
      break;
    size_t ready = after_ready(p, o);
    size_t m = ready > o->done ? min_size(avail, ready - o->done) / esz * esz
                               : 0;
    if (m == 0)
      break;
    const char *local = o->src + o->done;
    if (o->local_first)
      reduce_op(p, o, o->dst + o->done, local, in, m);
    else
      reduce_op(p, o, o->dst + o->done, in, local, m);
    l->conn->ops->release(l->conn, m);
    in = (const char *)in + m;
    avail -= m;
    *moved += m;
    finish_op(p, l, o, m);
  }
  return HOOP_SUCCESS;
}

/* Receives and processes what a link has; returns when it stalls. */
static hoop_result_t recv_progress(struct hoop_plan *p, struct hoop_link *l,
                                   int *progress) {
  l->want_poll = 0;
  if (l->hdr_done < HEADER_BYTES) {
    HOOP_CHECK(receive_header(p, l, progress));
    if (l->hdr_done < HEADER_BYTES)
      return HOOP_SUCCESS;
  }
  while (l->cur < l->nops) {
    const struct hoop_plan_op *o = link_op(p, l, l->cur);
    if (after_ready(p, o) <= o->done)
      return HOOP_SUCCESS; /* waiting for another op, not the socket */
    size_t moved;
    if (o->kind == HOOP_OP_RECV_COPY)
      HOOP_CHECK(recv_copy(p, l, &moved));
    else
      HOOP_CHECK(recv_reduce(p, l, &moved));
    if (moved == 0) {
      l->want_poll = 1;
      return HOOP_SUCCESS;
    }
    *progress = 1;
  }
  return HOOP_SUCCESS;
}

static int link_done(const struct hoop_link *l) {
  return l->hdr_done == HEADER_BYTES && l->cur == l->nops;
}

static uint64_t link_moved(const struct hoop_plan *p,
                           const struct hoop_link *l) {
  uint64_t moved = 0;
  for (int i = 0; i < l->cur; i++)
    moved += link_op(p, l, i)->bytes;
  if (l->cur < l->nops)
    moved += link_op(p, l, l->cur)->done;
  return moved;
}

static hoop_result_t stalled_error(struct hoop_plan *p) {
  for (int i = 0; i < p->nlinks; i++) {
    const struct hoop_link *l = &p->links[i];
    if (link_done(l))
      continue;
    return HOOP_ERROR(p->comm, HOOP_ERR_TIMEOUT,
                      "no progress for %d ms %s %s (%llu of %llu bytes "
                      "moved on that link)",
                      p->comm->timeout_ms,
                      l->send ? "sending to" : "waiting for data from",
                      l->conn->peer_desc,
                      (unsigned long long)link_moved(p, l),
                      (unsigned long long)l->bytes);
  }
  return HOOP_ERROR(p->comm, HOOP_ERR_INTERNAL, "stalled");
}

static void add_pollfd(struct pollfd *fds, int *n, int fd, short events) {
  for (int i = 0; i < *n; i++) {
    if (fds[i].fd == fd) {
      fds[i].events |= events;
      return;
    }
  }
  fds[*n] = (struct pollfd){.fd = fd, .events = events};
  ++*n;
}

hoop_result_t hoop__engine_arm(struct hoop_plan *p, struct pollfd *fds,
                               int *nfds, int *armed, bool *ready) {
  *nfds = 0;
  *armed = 0;
  *ready = false;
  for (int i = 0; i < p->nlinks; i++) {
    struct hoop_link *l = &p->links[i];
    if (!l->want_poll || link_done(l))
      continue;
    struct pollfd want;
    HOOP_CHECK(l->conn->ops->arm(l->conn, l->send, &want, ready));
    ++*armed;
    if (*ready)
      return HOOP_SUCCESS;
    add_pollfd(fds, nfds, want.fd, want.events);
  }
  return HOOP_SUCCESS;
}

/*
 * Sleeps until a wanted connection is ready or another rank reports a
 * failure on the listening socket.  *polled gets the number of
 * connections waited on (0 means the plan has nothing to wait for); it
 * returns at once when arming finds a connection that can already move.
 */
static hoop_result_t wait_for_io(struct hoop_plan *p, long long deadline,
                                 long long idle_since_ms, int *polled) {
  struct pollfd *fds = p->pollfds;
  int n;
  bool ready;
  HOOP_CHECK(hoop__engine_arm(p, fds, &n, polled, &ready));
  if (ready || n == 0)
    return HOOP_SUCCESS;
  /* The link that stalled_error would name, for peers that ask. */
  for (int i = 0; i < p->nlinks; i++) {
    const struct hoop_link *l = &p->links[i];
    if (!link_done(l)) {
      hoop__comm_waiting(p->comm, l->conn->peer, l->send, idle_since_ms);
      break;
    }
  }
  int m = hoop__listener_pollfds(&p->comm->listener, fds + n);
  long long left = deadline - hoop__now_ms();
  if (left <= 0 ||
      poll(fds, (nfds_t)(n + m), left > 1000 ? 1000 : (int)left) <= 0)
    return HOOP_SUCCESS;
  for (int i = n; i < n + m; i++) {
    if (fds[i].revents != 0)
      return hoop__comm_check_notices(p->comm, 0);
  }
  return HOOP_SUCCESS;
}

/*
 * A closed connection is usually the echo of a failure elsewhere; if the
 * rank that failed first says why within a moment, report that instead.
 * Transports record their errors without the communicator, so the error
 * is attached to it here first.
 */
static hoop_result_t prefer_notice(struct hoop_comm *comm,
                                   hoop_result_t res) {
  hoop__error_attach(comm, res);
  if (res == HOOP_ERR_REMOTE && !comm->notice_received) {
    hoop_result_t notice = hoop__comm_check_notices(comm, 100);
    if (notice != HOOP_SUCCESS)
      return notice;
  }
  return res;
}

/* What a link's header announces: its bytes, or for send/recv a hash. */
static uint64_t announced(const struct hoop_plan *p, const struct hoop_link *l) {
  return p->header.coll == HOOP_COLL_SENDRECV ? l->signature : l->bytes;
}

/*
 * Gives every link a twin the other way on its connection (an empty one if
 * the algorithm made none), so that headers cross in both directions.
 */
static hoop_result_t pair_links(struct hoop_plan *p) {
  int n = p->nlinks;
  for (int i = 0; i < n; i++) {
    int twin = -1;
    for (int j = 0; j < p->nlinks && twin < 0; j++) {
      if (p->links[j].peer == p->links[i].peer &&
          p->links[j].channel == p->links[i].channel &&
          p->links[j].send != p->links[i].send)
        twin = j;
    }
    if (twin < 0) {
      HOOP_CHECK(hoop__plan_link(p, p->links[i].peer, p->links[i].channel,
                                 !p->links[i].send, &twin));
      p->links[twin].twin = i;
    }
    p->links[i].twin = twin;
  }
  return HOOP_SUCCESS;
}

/*
 * Connecting is the engine's: a plan names only peers and channels.  A
 * set-up blocks until the peer sets up its end, so every rank connects
 * the pairs it lacks in one global order, by peer and then channel (for
 * rank r that is the pairs (lower, r) and then (r, higher) in rank
 * order): the least pair still missing is then next on both its ranks,
 * and no two ranks wait on each other's other set-ups.
 */
static hoop_result_t connect_links(struct hoop_plan *p) {
  struct hoop_comm *comm = p->comm;
  if (p->nlinks == 0)
    return HOOP_SUCCESS;
  struct hoop_keyed *order = malloc(sizeof *order * (size_t)p->nlinks);
  if (order == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "connection order");
  for (int i = 0; i < p->nlinks; i++)
    order[i] = (struct hoop_keyed){
        (uint64_t)p->links[i].peer * HOOP_MAX_NSOCKS +
            (uint64_t)p->links[i].channel, i};
  qsort(order, (size_t)p->nlinks, sizeof *order, hoop__keyed_cmp);
  hoop_result_t res = HOOP_SUCCESS;
  for (int i = 0; i < p->nlinks && res == HOOP_SUCCESS; i++) {
    struct hoop_link *l = &p->links[order[i].id];
    res = hoop__comm_conn(comm, l->peer, l->channel, &l->conn);
  }
  free(order);
  return res;
}

/* Puts every link in key order and stamps its header. */
static hoop_result_t prepare(struct hoop_plan *p) {
  /*
   * Every collective also crosses headers with both ring neighbours, even
   * when its algorithm does not use them: if the ranks' calls differ at
   * all, some neighbours along the ring differ, so two ranks see it in
   * this call and tell the rest, and no rank waits for a peer that is in
   * another call.  Send/recv is exempt: its peers differ by design.
   */
  struct hoop_comm *comm = p->comm;
  if (p->header.coll != HOOP_COLL_SENDRECV && comm->nranks > 1) {
    int link;
    HOOP_CHECK(hoop__plan_link(p, hoop__ring_peer(comm, comm->rank, 1), 0, 1,
                               &link));
    HOOP_CHECK(hoop__plan_link(p, hoop__ring_peer(comm, comm->rank, -1), 0, 0,
                               &link));
  }
  HOOP_CHECK(pair_links(p));
  HOOP_CHECK(connect_links(p));
  /*
   * Sized now, when the links are final: a root or an all-to-all may wait
   * on every peer at once, and a descriptor left out of poll() would only
   * be noticed at the next one-second wake-up.
   */
  free(p->pollfds);
  p->pollfds = malloc(sizeof *p->pollfds *
                      ((size_t)p->nlinks + 1 +
                       (size_t)comm->listener.max_unproven));
  if (p->pollfds == NULL)
    return HOOP_ERROR(p->comm, HOOP_ERR_NO_MEMORY,
                      "poll set for %d links", p->nlinks);
  for (int i = 0; i < p->nlinks; i++) {
    struct hoop_link *l = &p->links[i];
    /*
     * A sent header says what this rank sends and expects back; a
     * received one is compared with the same from this rank's side.
     */
    l->header = p->header;
    l->header.link_bytes = announced(p, l);
    l->header.back_bytes = announced(p, &p->links[l->twin]);
    if (p->header.coll == HOOP_COLL_SENDRECV)
      l->header.count = l->bytes;
    if (l->nops < 2)
      continue;
    struct hoop_keyed *k = malloc(sizeof *k * (size_t)l->nops);
    if (k == NULL)
      return HOOP_ERROR(p->comm, HOOP_ERR_NO_MEMORY, "plan order");
    for (int j = 0; j < l->nops; j++)
      k[j] = (struct hoop_keyed){p->ops[l->ops[j]].key, l->ops[j]};
    qsort(k, (size_t)l->nops, sizeof *k, hoop__keyed_cmp);
    for (int j = 0; j < l->nops; j++)
      l->ops[j] = k[j].id;
    free(k);
  }
  return HOOP_SUCCESS;
}

/* Resets a prepared plan's progress and opens its streams for this call. */
static void start(struct hoop_plan *p) {
  p->wait_ns = 0;
  p->headers_pending = 0;
  for (int i = 0; i < p->nops; i++)
    p->ops[i].done = 0;
  for (int g = 0; g < p->ngroups; g++)
    p->group_left[g] = p->group_ops[g];
  p->groups_complete = 0;
  open_gates(p);
  for (int i = 0; i < p->nlinks; i++) {
    struct hoop_link *l = &p->links[i];
    p->headers_pending += !l->send;
    l->cur = 0;
    l->hdr_done = 0;
    l->want_poll = 0;
    l->header.seq = p->header.seq;
    if (l->conn->ops->begin_stream != NULL)
      l->conn->ops->begin_stream(l->conn, l->send);
  }
}

static hoop_result_t run(struct hoop_plan *p) {
  struct hoop_comm *comm = p->comm;
  if (!p->prepared) {
    /* A peer that closes a connection being made has usually failed. */
    hoop_result_t res = prepare(p);
    if (res != HOOP_SUCCESS)
      return prefer_notice(comm, res);
    p->prepared = 1;
  }
  start(p);
  long long deadline = hoop__now_ms() + comm->timeout_ms;
  long long idle_since_ns = hoop__now_ns();
  int idle = 0; /* the last pass over the links moved nothing */
  for (;;) {
    if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
      return HOOP_ERROR(comm, HOOP_ERR_ABORTED,
                        "hoop_comm_abort() was called during the "
                        "collective");
    /*
     * Idle with a peer's header still missing is waiting for that peer to
     * join; what the rank spends on its own first sends is not, so the
     * wait is the idle time, up to the pass that ends it.
     */
    long long pass_ns = idle && p->headers_pending > 0 ? hoop__now_ns() : 0;
    int progress = 0, done = 1;
    /* Receiving first frees what sends wait on; then receive again. */
    for (int pass = 0; pass < 2; pass++) {
      for (int i = 0; i < p->nlinks; i++) {
        struct hoop_link *l = &p->links[i];
        if (link_done(l) || (pass == 1 && l->send))
          continue;
        hoop_result_t res = l->send ? send_progress(p, l, &progress)
                                    : recv_progress(p, l, &progress);
        if (res != HOOP_SUCCESS)
          return prefer_notice(comm, res);
      }
    }
    if (progress && pass_ns != 0)
      p->wait_ns += pass_ns - idle_since_ns;
    for (int i = 0; i < p->nlinks && done; i++)
      done = link_done(&p->links[i]);
    if (done)
      return HOOP_SUCCESS;
    long long now_ns = hoop__now_ns();
    idle = !progress;
    if (progress) {
      idle_since_ns = now_ns;
      deadline = now_ns / 1000000 + comm->timeout_ms;
      continue;
    }
    /*
     * A peer's next bytes usually come within microseconds; trying again
     * for a moment is cheaper than sleeping in poll() and being woken.
     */
    long long idle_ns = now_ns - idle_since_ns;
    if (idle_ns < comm->spin_ns)
      continue;
    if (idle_ns < comm->spin_ns + comm->yield_ns) {
      sched_yield();
      continue;
    }
    if (now_ns / 1000000 >= deadline)
      return stalled_error(p);
    int polled;
    hoop_result_t res =
        wait_for_io(p, deadline, idle_since_ns / 1000000, &polled);
    if (res != HOOP_SUCCESS)
      return prefer_notice(comm, res);
    if (polled == 0)
      return HOOP_ERROR(comm, HOOP_ERR_INTERNAL,
                        "plan stalled with nothing to wait for");
  }
}

hoop_result_t hoop__engine_run(struct hoop_plan *p) {
  __atomic_store_n(&p->comm->plan_header, &p->header, __ATOMIC_RELAXED);
  hoop_result_t res = run(p);
  __atomic_store_n(&p->comm->plan_header, NULL, __ATOMIC_RELAXED);
  return res;
}
