/*
 * The RDMA verbs transport: one reliable-connected queue pair per peer
 * and channel, running the FIFO-with-credits protocol of fifo.h, as shm
 * does, over RDMA writes.
 *
 * Each rank registers a ring per connection for the peer to write into
 * (its incoming ring) and a ring of the same size it writes from (its
 * outgoing mirror).  A piece the FIFO publishes is copied into the mirror
 * and written by RDMA WRITE_WITH_IMM to the same offset of the peer's
 * ring; the immediate carries how far the head moved, and the receive
 * completion it makes is the reader's only news of new bytes, which RC
 * guarantees have landed by then.  Credits go back the same way: a
 * zero-length WRITE_WITH_IMM whose immediate says how far the tail moved
 * (the top bit tells the two apart).  The mirror's bytes are rewritten
 * only after the reader has returned their credit, so after the adapter
 * has read them.
 *
 * The set-up socket stays open, as shm's does: its end-of-file tells that
 * the peer exited or broke, which a queue pair learns only after its
 * retries run out.  A rank waits in poll() on one epoll descriptor that
 * holds the completion channel, the device's async events and that
 * socket.
 *
 * The verbs calls go through a table (ib_verbs.h), so that the tests run
 * all of this over an in-process fake; on RDMA hardware it has never run.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/error.h"
#include "transport/params.h"
#include "core/socket.h"
#include "transport/fifo.h"
#include "transport/ib.h"
#include "transport/ib_verbs.h"
#include "transport/transport.h"

#define IMM_CREDIT 0x80000000u /* the immediate returns credit */
#define IMM_DELTA 0x7fffffffu  /* bytes the head or tail moved */
#define WR_RECV 1u             /* in wr_id: a receive, not a write */
#define WR_CREDIT 2u           /* a write returning credit */
#define MAX_IOV_PER_SEND 64
#define CREDIT_DEPTH 64
#define RECV_PER_SEND 4 /* receives posted per send request of the peer */
#define DRAIN_MS 2000

struct ib_conn {
  struct hoop_conn base;
  const struct hoop_ib_verbs *v;
  struct hoop_ib_ep *ep;
  int fd;   /* set-up socket, kept for the peer's end-of-file */
  int epfd; /* completion channel, async events, the socket */
  size_t ring;
  char *in_ring;  /* the peer writes here */
  char *out_ring; /* this rank writes from here */
  struct hoop_ib_mr in_mr, out_mr;
  uint64_t peer_addr; /* the peer's incoming ring */
  uint32_t peer_rkey;
  uint64_t peer_head; /* bytes the peer has written into in_ring */
  uint64_t peer_tail; /* bytes the peer has consumed of ours */
  uint64_t head_sent; /* our head as last signalled */
  uint64_t tail_sent; /* our tail as last returned */
  uint64_t tail_wanted;
  int data_depth, data_inflight; /* writes carrying data */
  int credit_inflight;           /* writes returning credit */
  hoop_result_t broken;          /* once the queue pair is in error */
  bool broken_by_flush;          /* the reason so far is only a flush */
  bool shut;                     /* the communicator broke: no draining */
  char broken_why[200];
  struct hoop_fifo fifo;
};

static _Atomic(const struct hoop_ib_verbs *) verbs_override;

const struct hoop_ib_verbs *hoop__ib_verbs(void) {
  const struct hoop_ib_verbs *v = atomic_load(&verbs_override);
  return v != NULL ? v : hoop__ib_verbs_real;
}

void hoop__ib_set_verbs(const struct hoop_ib_verbs *verbs) {
  atomic_store(&verbs_override, verbs);
}

static bool ib_can_connect(const struct hoop_published *self,
                           const struct hoop_published *peer) {
  struct hoop_rdma_port a, b;
  hoop__ib_published(self, &a, NULL);
  hoop__ib_published(peer, &b, NULL);
  char why[256];
  return hoop__ib_select(&a, self->info->rank, &b, peer->info->rank, why,
                         sizeof why);
}

/*
 * This rank's own lack comes with what discovery said about it, which
 * only this process knows: looking again costs little on a failing path.
 */
static void ib_why_not(const struct hoop_published *self,
                       const struct hoop_published *peer, char *why,
                       size_t why_len) {
  struct hoop_rdma_port a, b;
  hoop__ib_published(self, &a, NULL);
  hoop__ib_published(peer, &b, NULL);
  hoop__ib_select(&a, self->info->rank, &b, peer->info->rank, why, why_len);
  if (a.status == HOOP_RDMA_PORT)
    return;
  struct hoop_rdma_port again;
  char detail[256];
  hoop__rdma_publish(&again, detail, sizeof detail);
  size_t used = strlen(why);
  snprintf(why + used, why_len - used, ": %s", detail);
}

/*
 * Marks the connection broken: the queue pair is in error, so nothing
 * more will be written or arrive.  What arrived before still counts: a
 * peer that read its last bytes and destroyed its communicator makes our
 * credit write for the same call fail, and the bytes of that call that
 * already landed must still be read.  So the failure is reported
 * (report) only where the call needs the queue pair: to send, or to wait
 * for bytes that are not there.
 */
static void broke(struct ib_conn *c, hoop_result_t code, const char *what) {
  if (c->broken != HOOP_SUCCESS && !c->broken_by_flush)
    return;
  c->broken = code;
  c->broken_by_flush = false;
  snprintf(c->broken_why, sizeof c->broken_why, "%s", what);
}

static hoop_result_t report(struct ib_conn *c) {
  return HOOP_ERROR(NULL, c->broken, "RDMA connection with %s: %s",
                    c->base.peer_desc, c->broken_why);
}

static void post_recv(struct ib_conn *c) {
  char why[160];
  if (c->v->post_recv(c->ep, WR_RECV, why, sizeof why) != 0)
    broke(c, HOOP_ERR_SYSTEM, why);
}

static void post_write(struct ib_conn *c, uint64_t wr_id, size_t off,
                       size_t len, uint32_t imm) {
  char why[160];
  int err = c->v->post_write(c->ep, wr_id, c->out_ring + off, c->out_mr.lkey,
                             len, c->peer_addr + off, c->peer_rkey, true, imm,
                             why, sizeof why);
  if (err != 0)
    broke(c, HOOP_ERR_SYSTEM, why);
}

/*
 * The FIFO calls this for each piece it copied into the mirror; the send
 * budget (ib_send) guarantees a free work request for it.
 */
static void publish_head(void *ctx, uint64_t head, size_t n) {
  struct ib_conn *c = ctx;
  if (c->broken != HOOP_SUCCESS)
    return;
  uint32_t delta = (uint32_t)(head - c->head_sent);
  post_write(c, 0, (size_t)((head - n) % c->ring), n, delta);
  c->head_sent = head;
  c->data_inflight++;
}

/*
 * Credit leaves once per transport call rather than once per piece
 * (flush_credit), which keeps the writes returning it few.
 */
static void publish_tail(void *ctx, uint64_t tail) {
  ((struct ib_conn *)ctx)->tail_wanted = tail;
}

static const struct hoop_fifo_signal ib_signal = {
    .publish_head = publish_head,
    .publish_tail = publish_tail,
};

static void completed(struct ib_conn *c, const struct hoop_ib_wc *wc) {
  if (!wc->ok) {
    char what[200];
    snprintf(what, sizeof what,
             "%s failed: %s (vendor error %#x; the peer may have exited, "
             "or its host or adapter be down; see HOOP_IB_TIMEOUT and "
             "HOOP_IB_RETRY_CNT)",
             wc->wr_id & WR_RECV     ? "a receive"
             : wc->wr_id & WR_CREDIT ? "a credit write"
                                     : "an RDMA write",
             wc->status, wc->vendor_err);
    /*
     * A queue pair in error flushes what it had posted, in no order with
     * the request that failed: the failure, not a flush, is the reason.
     */
    if (c->broken == HOOP_SUCCESS || !wc->flushed) {
      broke(c, HOOP_ERR_REMOTE, what);
      c->broken_by_flush = wc->flushed;
    }
    return;
  }
  if (wc->wr_id & WR_RECV) {
    uint32_t delta = wc->imm & IMM_DELTA;
    if (wc->imm & IMM_CREDIT)
      __atomic_store_n(&c->peer_tail, c->peer_tail + delta, __ATOMIC_RELEASE);
    else
      __atomic_store_n(&c->peer_head, c->peer_head + delta, __ATOMIC_RELEASE);
    post_recv(c);
  } else if (wc->wr_id & WR_CREDIT) {
    c->credit_inflight--;
  } else {
    c->data_inflight--;
  }
}

/*
 * Takes every completion there is, in order, so that the receives that
 * completed before an error still count; returns how many.
 */
static int take_completions(struct ib_conn *c) {
  struct hoop_ib_wc wc[32];
  int total = 0;
  for (;;) {
    int n = c->v->poll(c->ep, wc, 32);
    if (n < 0) {
      broke(c, HOOP_ERR_SYSTEM, "polling the completion queue failed");
      return total;
    }
    for (int i = 0; i < n; i++)
      completed(c, &wc[i]);
    total += n;
    if (n < 32)
      return total;
  }
}

/*
 * Returns credit not yet returned, when a request is free for it;
 * otherwise a completion will free one and the next call sends it.  A
 * writer waiting on it is the peer writing to us, so this rank is in a
 * call that receives from it and comes back here.
 */
static void flush_credit(struct ib_conn *c) {
  if (c->tail_wanted == c->tail_sent || c->broken != HOOP_SUCCESS)
    return;
  /*
   * Releases post credit without polling, so the requests counted may
   * long be done: reap them rather than leave the credit until this
   * connection's next call, which may come only after its peer has
   * waited for it.
   */
  if (c->credit_inflight >= CREDIT_DEPTH)
    take_completions(c);
  if (c->credit_inflight >= CREDIT_DEPTH)
    return;
  uint32_t delta = (uint32_t)(c->tail_wanted - c->tail_sent);
  post_write(c, WR_CREDIT, 0, 0, IMM_CREDIT | delta);
  c->tail_sent = c->tail_wanted;
  c->credit_inflight++;
}

/* Takes what completed, then returns pending credit; says how much it took. */
static int progress(struct ib_conn *c) {
  int n = take_completions(c);
  flush_credit(c);
  return n;
}

static void ib_begin_stream(struct hoop_conn *conn, int send) {
  hoop__fifo_begin_stream(&((struct ib_conn *)conn)->fifo, send);
}

/* Free work requests for one call to the FIFO, as ib_send counts them. */
static int send_budget(const struct ib_conn *c) {
  return c->data_depth - c->data_inflight - (int)(c->ring / c->fifo.slot) -
         1;
}

/*
 * A call to the FIFO posts at most one write per piece: one per iov, one
 * per slot boundary crossed (the room is at most the ring) and one more.
 * Handing it only as many iovs as free work requests cover keeps every
 * post within the queue's depth.
 */
static hoop_result_t ib_send(struct hoop_conn *conn, const struct iovec *iov,
                             int iovcnt, size_t *sent) {
  struct ib_conn *c = (struct ib_conn *)conn;
  *sent = 0;
  progress(c);
  if (c->broken != HOOP_SUCCESS)
    return report(c);
  int most = send_budget(c);
  if (most <= 0)
    return HOOP_SUCCESS;
  /* The rings are registered whole (no grow): it cannot fail here. */
  (void)hoop__fifo_send(&c->fifo, iov, iovcnt < most ? iovcnt : most, sent);
  conn->bytes_sent += *sent;
  return c->broken != HOOP_SUCCESS ? report(c) : HOOP_SUCCESS;
}

static hoop_result_t ib_recv(struct hoop_conn *conn, void *buf, size_t len,
                             bool cold, size_t *got) {
  struct ib_conn *c = (struct ib_conn *)conn;
  progress(c);
  *got = hoop__fifo_recv(&c->fifo, buf, len, cold);
  conn->bytes_received += *got;
  flush_credit(c);
  return *got == 0 && c->broken != HOOP_SUCCESS ? report(c) : HOOP_SUCCESS;
}

static hoop_result_t ib_peek(struct hoop_conn *conn, size_t want,
                             const void **ptr, size_t *avail) {
  struct ib_conn *c = (struct ib_conn *)conn;
  progress(c);
  *avail = hoop__fifo_peek(&c->fifo, want, ptr);
  return *avail == 0 && c->broken != HOOP_SUCCESS ? report(c) : HOOP_SUCCESS;
}

static void ib_release(struct hoop_conn *conn, size_t len) {
  struct ib_conn *c = (struct ib_conn *)conn;
  hoop__fifo_release(&c->fifo, len);
  conn->bytes_received += len;
  flush_credit(c);
}

/* Whether the set-up socket says the peer's end is gone. */
static bool peer_closed(struct ib_conn *c) {
  char buf[16];
  ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                    errno != EINTR);
}

static hoop_result_t ib_arm(struct hoop_conn *conn, int send,
                            struct pollfd *pfd, bool *ready) {
  struct ib_conn *c = (struct ib_conn *)conn;
  char what[160];
  if (c->v->async_take(c->ep, what, sizeof what) != 0)
    broke(c, HOOP_ERR_SYSTEM, what);
  /*
   * Events taken, then the next one asked for, then the queue polled:
   * a completion that came before the request makes no event, so it must
   * be found by this poll or the rank would sleep past it.
   */
  c->v->consume(c->ep);
  if (c->v->notify(c->ep) != 0)
    broke(c, HOOP_ERR_SYSTEM, "asking for completion events failed");
  /*
   * The engine arms the send and the receive link of one connection in
   * turn, and the event consumed above may have announced what the other
   * link sleeps on: a completion taken now is news, so the engine looks
   * again rather than sleep past it.
   */
  *ready = progress(c) > 0 || (hoop__fifo_can_move(&c->fifo, send) &&
                               (!send || send_budget(c) > 0));
  if (!*ready && c->broken == HOOP_SUCCESS && peer_closed(c)) {
    /*
     * A peer closes once its last writes are acknowledged, which may be
     * before their completions show here: look once more.
     */
    *ready = progress(c) > 0;
    if (!*ready)
      broke(c, HOOP_ERR_REMOTE,
            "the peer closed it (it exited, failed or aborted)");
  }
  if ((!*ready || send) && c->broken != HOOP_SUCCESS)
    return report(c);
  *pfd = (struct pollfd){.fd = c->epfd, .events = POLLIN};
  return HOOP_SUCCESS;
}

static void ib_shutdown(struct hoop_conn *conn) {
  struct ib_conn *c = (struct ib_conn *)conn;
  c->shut = true;
  if (c->fd >= 0)
    shutdown(c->fd, SHUT_RDWR);
}

/*
 * A call returns once its last writes are posted, not done; the peer may
 * still be reading them.  So an orderly close waits for them (bounded: a
 * peer that is gone makes them fail, but only after the adapter's
 * retries) before the memory they are read from goes away.
 */
static void drain(struct ib_conn *c) {
  long long deadline = hoop__now_ms() + DRAIN_MS;
  while (c->data_inflight + c->credit_inflight > 0 &&
         c->broken == HOOP_SUCCESS && hoop__now_ms() < deadline)
    if (take_completions(c) == 0)
      sched_yield();
}

/* In reverse order of ib_connect. */
static void ib_close(struct hoop_conn *conn) {
  struct ib_conn *c = (struct ib_conn *)conn;
  if (c == NULL)
    return;
  if (c->ep != NULL && !c->shut)
    drain(c);
  if (c->epfd >= 0)
    close(c->epfd);
  if (c->ep != NULL) {
    if (c->out_mr.handle != NULL)
      c->v->dereg_mr(c->ep, &c->out_mr);
    if (c->in_mr.handle != NULL)
      c->v->dereg_mr(c->ep, &c->in_mr);
    c->v->close(c->ep);
  }
  if (c->out_ring != NULL)
    munmap(c->out_ring, c->ring);
  if (c->in_ring != NULL)
    munmap(c->in_ring, c->ring);
  hoop__sock_close(&c->fd);
  free(c);
}

static hoop_result_t verbs_failed(struct ib_conn *c, int err,
                                  const char *why) {
  return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "RDMA connection with %s: %s%s",
                    c->base.peer_desc, why,
                    err == ENOMEM ? " (ulimit -l too low for registered "
                                    "memory?)"
                                  : "");
}

/*
 * A ring of its own pages, left out of forked children: a child that
 * shared them copy-on-write would make the parent's next write copy the
 * page the adapter no longer writes into (data loaders fork after the
 * communicator exists).  rdma-core's ibv_fork_init does the same for
 * every registration, but only if the program calls it.
 */
static char *ring_alloc(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  if (madvise(p, bytes, MADV_DONTFORK) != 0) {
    int err = errno;
    munmap(p, bytes);
    errno = err;
    return NULL;
  }
  return p;
}

/* The rings, registered, and the queue pair in INIT with its receives. */
static hoop_result_t make_endpoint(struct ib_conn *c,
                                   const struct hoop_conn_setup *setup,
                                   struct hoop_ib_local *local) {
  size_t slots = (size_t)hoop__param_shm_slots();
  c->ring = (size_t)hoop__param_shm_slot_bytes() * slots;
  if (c->ring > IMM_DELTA)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_USAGE,
                      "ib's rings of HOOP_SHM_SLOT_BYTES x HOOP_SHM_SLOTS = "
                      "%zu bytes exceed what an immediate can count (2 GiB "
                      "- 1)",
                      c->ring);
  c->in_ring = ring_alloc(c->ring);
  c->out_ring = ring_alloc(c->ring);
  if (c->in_ring == NULL || c->out_ring == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_NO_MEMORY, "ib rings of %zu bytes for "
                      "%s: %s", c->ring, c->base.peer_desc, strerror(errno));
  c->data_depth = (int)slots + 2 + MAX_IOV_PER_SEND;
  int depth = c->data_depth + CREDIT_DEPTH;
  /*
   * A write that landed holds a receive until this rank polls, which the
   * peer's send queue does not wait for: extra receives keep the peer
   * from stalling on receiver-not-ready retries while this rank is busy.
   */
  int recv_depth = depth * RECV_PER_SEND;
  struct hoop_rdma_port port;
  hoop__ib_published(&setup->self, &port, NULL);
  struct hoop_ib_open o = {.device = port.device,
                           .port = port.port,
                           .gid_index = port.gid_index,
                           .send_depth = depth,
                           .recv_depth = recv_depth};
  char why[200];
  struct hoop_ib_ep *ep = NULL;
  int err = c->v->open(&o, &ep, local, why, sizeof why);
  c->ep = err == 0 ? ep : NULL;
  if (err == 0)
    err = c->v->reg_mr(c->ep, c->in_ring, c->ring, true, &c->in_mr, why,
                       sizeof why);
  if (err == 0)
    err = c->v->reg_mr(c->ep, c->out_ring, c->ring, false, &c->out_mr, why,
                       sizeof why);
  if (err != 0)
    return verbs_failed(c, err, why);
  for (int i = 0; i < recv_depth && c->broken == HOOP_SUCCESS; i++)
    post_recv(c);
  return c->broken != HOOP_SUCCESS ? report(c) : HOOP_SUCCESS;
}

/* Swaps connection information over the set-up socket and checks it. */
static hoop_result_t swap_conninfo(struct ib_conn *c,
                                   const struct hoop_ib_local *local,
                                   uint32_t psn, long long deadline,
                                   struct hoop_ib_conninfo *peer) {
  struct hoop_ib_conninfo mine = {
      .magic = HOOP_IB_CONNINFO_MAGIC,
      .version = HOOP_IB_CONNINFO_VERSION,
      .lid = local->lid,
      .mtu = local->mtu,
      .link_layer = local->link_layer,
      .qpn = local->qpn,
      .psn = psn,
      .fifo_rkey = c->in_mr.rkey,
      .fifo_addr = (uint64_t)(uintptr_t)c->in_ring,
      .slot_bytes = (uint32_t)c->fifo.slot,
      .slots = (uint32_t)(c->ring / c->fifo.slot),
  };
  memcpy(mine.gid, local->gid, sizeof mine.gid);
  unsigned char bytes[sizeof mine];
  HOOP_CHECK(hoop__sock_send_all(NULL, c->fd, &mine, sizeof mine, deadline,
                                 c->base.peer_desc));
  HOOP_CHECK(hoop__sock_recv_all(NULL, c->fd, bytes, sizeof bytes, deadline,
                                 c->base.peer_desc));
  char why[200];
  if (!hoop__ib_conninfo_parse(bytes, sizeof bytes, local->link_layer, peer,
                               why, sizeof why))
    return HOOP_ERROR(NULL, HOOP_ERR_MISMATCH,
                      "%s sent malformed RDMA connection information: %s "
                      "(different hoop versions?)",
                      c->base.peer_desc, why);
  if (peer->slot_bytes != mine.slot_bytes || peer->slots != mine.slots)
    return HOOP_ERROR(NULL, HOOP_ERR_MISMATCH,
                      "%s has FIFOs of %u slots of %u bytes, this rank %u "
                      "of %u: set HOOP_SHM_SLOTS and HOOP_SHM_SLOT_BYTES "
                      "alike on every rank",
                      c->base.peer_desc, peer->slots, peer->slot_bytes,
                      mine.slots, mine.slot_bytes);
  return HOOP_SUCCESS;
}

static hoop_result_t join_queue_pairs(struct ib_conn *c,
                                      const struct hoop_conn_setup *setup,
                                      const struct hoop_ib_local *local,
                                      uint32_t psn,
                                      const struct hoop_ib_conninfo *peer) {
  struct hoop_rdma_settings s;
  char why[200];
  if (!hoop__rdma_settings_read(&s, why, sizeof why))
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_USAGE, "%s", why);
  struct hoop_rdma_port self_port;
  hoop__ib_published(&setup->self, &self_port, NULL);
  struct hoop_ib_path path = {
      .dlid = peer->lid,
      .mtu = local->mtu < peer->mtu ? local->mtu : peer->mtu,
      .link_layer = local->link_layer,
      .dest_qpn = peer->qpn,
      .rq_psn = peer->psn,
      .sq_psn = psn,
      .sgid_index = self_port.gid_index,
      .timeout = s.timeout,
      .retry_cnt = s.retry_cnt,
      .sl = s.sl,
      .tc = s.tc,
  };
  memcpy(path.dgid, peer->gid, sizeof path.dgid);
  int err = c->v->connect(c->ep, &path, why, sizeof why);
  if (err != 0)
    return verbs_failed(c, err, why);
  /*
   * Neither side writes before both queue pairs can receive: a write
   * that reaches a queue pair still in INIT is dropped and retried, and
   * the retries may run out first.
   */
  char byte = 1;
  HOOP_CHECK(hoop__sock_send_all(NULL, c->fd, &byte, 1, setup->deadline,
                                 c->base.peer_desc));
  HOOP_CHECK(hoop__sock_recv_all(NULL, c->fd, &byte, 1, setup->deadline,
                                 c->base.peer_desc));
  c->peer_addr = peer->fifo_addr;
  c->peer_rkey = peer->fifo_rkey;
  return HOOP_SUCCESS;
}

static hoop_result_t watch_all(struct ib_conn *c) {
  c->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (c->epfd < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "epoll_create1 for %s: %s",
                      c->base.peer_desc, strerror(errno));
  int fds[3] = {c->v->event_fd(c->ep), c->v->async_fd(c->ep), c->fd};
  for (int i = 0; i < 3; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fds[i], &ev) != 0)
      return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "epoll_ctl for %s: %s",
                        c->base.peer_desc, strerror(errno));
  }
  return HOOP_SUCCESS;
}

static hoop_result_t ib_connect(const struct hoop_conn_setup *setup,
                                struct hoop_conn **out) {
  *out = NULL;
  const struct hoop_ib_verbs *v = hoop__ib_verbs();
  if (v == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_UNSUPPORTED,
                      "HOOP_TRANSPORT=ib: this hoop was built without "
                      "libibverbs (install libibverbs-dev and rebuild)");
  struct ib_conn *c = calloc(1, sizeof *c);
  if (c == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_NO_MEMORY, "ib connection");
  c->fd = c->epfd = -1;
  c->v = v;
  hoop__conn_init(&c->base, &hoop__ib_transport, setup);
  c->fifo.slot = (size_t)hoop__param_shm_slot_bytes();
  struct hoop_ib_local local;
  struct hoop_ib_conninfo peer;
  uint32_t psn = 0;
  hoop_result_t res;
  /*
   * The socket first: if this rank fails below, closing it tells the
   * peer at once instead of at its deadline.
   */
  HOOP_CHECK_GOTO(setup->open_socket(setup->ctx, &c->fd), res, out_close);
  HOOP_CHECK_GOTO(make_endpoint(c, setup, &local), res, out_close);
  HOOP_CHECK_GOTO(hoop__auth_random(&psn, sizeof psn), res, out_close);
  psn &= 0xffffff;
  HOOP_CHECK_GOTO(swap_conninfo(c, &local, psn, setup->deadline, &peer), res,
                  out_close);
  HOOP_CHECK_GOTO(join_queue_pairs(c, setup, &local, psn, &peer), res,
                  out_close);
  HOOP_CHECK_GOTO(hoop__sock_set_nonblocking(c->fd), res, out_close);
  HOOP_CHECK_GOTO(watch_all(c), res, out_close);
  c->fifo.ring = c->ring;
  c->fifo.out_ring = c->out_ring;
  c->fifo.in_ring = c->in_ring;
  c->fifo.out_tail = &c->peer_tail;
  c->fifo.in_head = &c->peer_head;
  c->fifo.signal = &ib_signal;
  c->fifo.ctx = c;
  /*
   * Streams do not restart at the ring's start here (restart 0): the
   * rings are registered whole at connect, so restarting would save no
   * memory, and its padding would make a writer wait for credit, which
   * over RDMA returns once per call, not per piece.
   */
  c->fifo.restart = 0;
  c->fifo.out_ready = c->ring;
  *out = &c->base;
  return HOOP_SUCCESS;
out_close:
  ib_close(&c->base);
  return res;
}

const struct hoop_transport_ops hoop__ib_transport = {
    .name = "ib",
    .by_name_only = true,
    .publish = hoop__ib_publish,
    .blob_bytes = HOOP_IB_BLOB_BYTES,
    .blob_parse = hoop__ib_blob_parse,
    .rank_info = hoop__ib_rank_info,
    .can_connect = ib_can_connect,
    .why_not = ib_why_not,
    .connect = ib_connect,
    .send = ib_send,
    .recv = ib_recv,
    .peek = ib_peek,
    .release = ib_release,
    .arm = ib_arm,
    .begin_stream = ib_begin_stream,
    .shutdown = ib_shutdown,
    .close = ib_close,
};
