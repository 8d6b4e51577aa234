/*
 * Connection set-up between ranks: the handshake on every data socket,
 * dialling and accepting (the lower rank dials), the dials that arrive
 * before their owner asks for them, and failure notices and stall queries
 * (inquiry.c), which travel the same way.  Transports get a socket from
 * here through hoop_conn_setup and never see the communicator.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/conn.h"

const char *hoop__peer_desc(const struct hoop_comm *comm, int peer,
                            char *buf, size_t len) {
  char astr[HOOP_ADDR_STRLEN];
  const struct hoop_peer_info *p = &comm->peers[peer];
  snprintf(buf, len, "rank %d (%s, host %s, pid %d)", peer,
           hoop__addr_str(&p->addr, astr), p->hostname, p->pid);
  return buf;
}

/*
 * How long a wait for a peer's connection may go without looking at the
 * abort flag: hoop_comm_abort() from another thread ends a call that is
 * connecting as promptly as one that is moving data.
 */
#define ABORT_POLL_MS 50

static hoop_result_t aborted_while(struct hoop_comm *comm, const char *desc) {
  return HOOP_ERROR(comm, HOOP_ERR_ABORTED,
                    "hoop_comm_abort() was called while this rank was "
                    "connecting with %s",
                    desc);
}

static bool aborted(const struct hoop_comm *comm) {
  return __atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE) != 0;
}

/*
 * When a wait for a peer's side of a connection asks that peer whether its
 * call agrees (hoop__comm_check_agreement): first after AGREE_FIRST_MS,
 * then at twice the interval each time up to AGREE_MOST_MS, so that a peer
 * busy outside hoop for minutes is asked a few dozen times, not thousands.
 */
#define AGREE_FIRST_MS 200
#define AGREE_MOST_MS 5000

struct agreement_watch {
  int peer; /* -1: nobody to ask (the rendezvous) */
  long long next_ms;
  int every_ms;
};

static struct agreement_watch watch_peer(int peer) {
  return (struct agreement_watch){peer, hoop__now_ms() + AGREE_FIRST_MS,
                                  AGREE_FIRST_MS};
}

static hoop_result_t check_watch(struct hoop_comm *comm,
                                 struct agreement_watch *w) {
  long long now = hoop__now_ms();
  if (w->peer < 0 || now < w->next_ms)
    return HOOP_SUCCESS;
  w->every_ms = w->every_ms * 2 < AGREE_MOST_MS ? w->every_ms * 2
                                                : AGREE_MOST_MS;
  w->next_ms = now + w->every_ms;
  return hoop__comm_check_agreement(comm, w->peer);
}

/*
 * Waits until fd has something to read, serving this rank's listener
 * meanwhile: a peer that never answers (it is in another call, or failed)
 * must not hold this rank for the whole timeout when some rank has already
 * reported the failure, and dials that come in the meantime are kept.
 * `peer` is the rank on the other end, asked now and then whether its call
 * agrees (-1: none to ask).
 */
static hoop_result_t await_readable(struct hoop_comm *comm, int fd, int peer,
                                    long long deadline, const char *desc,
                                    const char *what) {
  struct agreement_watch watch = watch_peer(peer);
  struct pollfd *fds =
      malloc(sizeof *fds * (2 + (size_t)comm->listener.max_unproven));
  if (fds == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "waiting for %s", desc);
  hoop_result_t res = HOOP_SUCCESS;
  for (;;) {
    long long left = deadline - hoop__now_ms();
    if (aborted(comm)) {
      res = aborted_while(comm, desc);
      break;
    }
    if (left <= 0) {
      res = HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                       "no progress for %d ms: %s took the connection but "
                       "never sent %s (it is in no hoop call that connects "
                       "with this rank: busy elsewhere, stopped, in another "
                       "call, or hung)",
                       comm->timeout_ms, desc, what);
      break;
    }
    res = check_watch(comm, &watch);
    if (res != HOOP_SUCCESS)
      break;
    fds[0] = (struct pollfd){.fd = fd, .events = POLLIN};
    int n = 1 + hoop__listener_pollfds(&comm->listener, fds + 1);
    if (poll(fds, (nfds_t)n,
             left > ABORT_POLL_MS ? ABORT_POLL_MS : (int)left) <= 0)
      continue;
    bool listener = false;
    for (int i = 1; i < n; i++)
      listener |= fds[i].revents != 0;
    if (listener) {
      res = hoop__comm_check_notices(comm, 0);
      if (res != HOOP_SUCCESS)
        break;
    }
    if (fds[0].revents != 0)
      break;
  }
  free(fds);
  return res;
}

/* How long a refused dial waits for the notice its peer sent as it went. */
#define GONE_NOTICE_MS 100

/*
 * One connection and handshake; *again says whether another dial may get
 * further: the acceptor took the connection but closed it before its
 * challenge.
 */
static hoop_result_t dial_once(struct hoop_comm *comm,
                               const struct hoop_addr *addr, int32_t to,
                               int32_t channel, long long deadline,
                               const char *desc, int *out, bool *again) {
  int fd;
  *again = false;
  /* Every rank listens before it joins; only rank 0's rendezvous may not
   * be up yet. */
  hoop_result_t res = hoop__sock_connect(
      comm, addr, deadline, desc, channel != HOOP_RENDEZVOUS_CHANNEL, &fd);
  if (res == HOOP_ERR_REMOTE) {
    /* A rank that failed told every peer why before it went. */
    hoop_result_t why = hoop__comm_check_notices(comm, GONE_NOTICE_MS);
    return why != HOOP_SUCCESS ? why : res;
  }
  HOOP_CHECK(res);
  struct hoop_handshake hs;
  struct hoop_auth_challenge ch;
  struct hoop_auth_proof proof;
  res = hoop__auth_handshake(comm->comm_id, comm->rank, to, channel, &hs);
  if (res == HOOP_SUCCESS)
    res = hoop__sock_send_all(comm, fd, &hs, sizeof hs, deadline, desc);
  if (res == HOOP_SUCCESS)
    res = await_readable(comm, fd, channel >= 0 ? to : -1, deadline, desc,
                         "its challenge");
  if (res == HOOP_SUCCESS)
    res = hoop__sock_recv_all(comm, fd, &ch, sizeof ch, deadline, desc);
  /* A notice that came meanwhile is the error, not a reason to dial on. */
  *again = res == HOOP_ERR_REMOTE && !comm->notice_received;
  if (res == HOOP_SUCCESS && !hoop__auth_check_challenge(&comm->auth_key,
                                                         &hs, &ch))
    res = HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                     "%s could not prove that it holds this job's secret: "
                     "it is not a rank of this job, or was given another "
                     "HOOP_AUTH_TOKEN",
                     desc);
  if (res == HOOP_SUCCESS) {
    hoop__auth_proof(&comm->auth_key, &hs, &ch, &proof);
    res = hoop__sock_send_all(comm, fd, &proof, sizeof proof, deadline,
                              desc);
  }
  if (res != HOOP_SUCCESS) {
    close(fd);
    return res;
  }
  *out = fd;
  return HOOP_SUCCESS;
}

/*
 * Tries of a dial whose acceptor closed before its challenge: a flood of
 * strangers may have pushed the connection out of the listener's table
 * (listener.c), and a new one gets in.
 */
#define DIAL_TRIES 3

hoop_result_t hoop__comm_dial(struct hoop_comm *comm,
                              const struct hoop_addr *addr, int32_t to,
                              int32_t channel, long long deadline,
                              const char *desc, int *out) {
  for (int tries = 1;; tries++) {
    bool again;
    hoop_result_t res =
        dial_once(comm, addr, to, channel, deadline, desc, out, &again);
    if (!again || tries == DIAL_TRIES || hoop__now_ms() >= deadline)
      return res;
    HOOP_INFO("rank %d: %s closed the connection before its challenge; "
              "dialling again",
              comm->rank, desc);
  }
}

/* Dials `peer` for a data channel and waits for it to take the socket. */
static hoop_result_t dial(struct hoop_comm *comm, int peer, int channel,
                          long long deadline, int *out) {
  char desc[128];
  hoop__peer_desc(comm, peer, desc, sizeof desc);
  int fd;
  HOOP_CHECK(hoop__comm_dial(comm, &comm->peers[peer].addr, peer, channel,
                             deadline, desc, &fd));
  int32_t status = HOOP_ERR_INTERNAL;
  hoop_result_t res =
      await_readable(comm, fd, peer, deadline, desc, "its answer");
  if (res == HOOP_SUCCESS)
    res = hoop__sock_recv_all(comm, fd, &status, sizeof status, deadline,
                              desc);
  if (res == HOOP_SUCCESS && status != HOOP_SUCCESS)
    res = HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                     "%s refused the data connection for channel %d",
                     desc, channel);
  if (res != HOOP_SUCCESS) {
    close(fd);
    return res;
  }
  *out = fd;
  return HOOP_SUCCESS;
}

static bool take_pending(struct hoop_comm *comm, int peer, int channel,
                         int *fd) {
  for (struct hoop_pending_sock **pp = &comm->pending; *pp != NULL;
       pp = &(*pp)->next) {
    struct hoop_pending_sock *p = *pp;
    if (p->peer == peer && p->channel == channel) {
      *fd = p->fd;
      *pp = p->next;
      free(p);
      return true;
    }
  }
  return false;
}

/* Keeps the error that broke the communicator, then publishes it. */
static void set_broken(struct hoop_comm *comm, hoop_result_t result) {
  pthread_mutex_lock(&comm->state_lock);
  memcpy(comm->broken_reason, comm->last_error, sizeof comm->broken_reason);
  pthread_mutex_unlock(&comm->state_lock);
  __atomic_store_n(&comm->broken, result, __ATOMIC_RELEASE);
}

/*
 * A notice that comes while this rank is still joining is kept: joining
 * succeeds (the connections are fine) and the first call reports it.
 */
static hoop_result_t notice_error(struct hoop_comm *comm, int from,
                                  const char *reason) {
  comm->notice_received = true;
  char desc[128] = "";
  if (from >= 0 && from < comm->nranks)
    hoop__peer_desc(comm, from, desc, sizeof desc);
  else
    snprintf(desc, sizeof desc, "rank %d", from);
  hoop_result_t res = HOOP_ERROR(comm, HOOP_ERR_REMOTE, "%s failed first: %s",
                                 desc, reason);
  if (!comm->joining)
    return res;
  set_broken(comm, res);
  return HOOP_SUCCESS;
}

/*
 * The survivors of a failure formed a communicator without this rank
 * (shrink.c): whatever this rank does next with this communicator fails,
 * and a hoop_comm_shrink of its own gets no place.
 */
static hoop_result_t excluded_error(struct hoop_comm *comm, int from,
                                    const char *reason) {
  comm->excluded = true;
  comm->notice_received = true;
  char desc[128];
  hoop__peer_desc(comm, from, desc, sizeof desc);
  hoop_result_t res = HOOP_ERROR(
      comm, HOOP_ERR_REMOTE,
      "the other ranks left this rank out: %s formed a communicator of the "
      "survivors without it (%s)",
      desc, reason);
  set_broken(comm, res);
  return res;
}

/*
 * Takes one connection that has proved itself, waiting up to wait_ms for
 * it (*got says whether one came).  A data dial is acked and kept in
 * comm->pending; a failure notice becomes this call's error.
 */
static hoop_result_t take_one(struct hoop_comm *comm, int wait_ms,
                              bool *got) {
  struct hoop_proven p;
  hoop_result_t res =
      hoop__listener_poll(&comm->listener, wait_ms, &p, got);
  if (res != HOOP_SUCCESS)
    return hoop__error_attach(comm, res);
  if (!*got)
    return HOOP_SUCCESS;
  if (p.hs.channel == HOOP_NOTICE_CHANNEL) {
    char reason[HOOP_NOTICE_BYTES];
    close(p.fd);
    hoop__notice_parse(p.payload, HOOP_NOTICE_BYTES, reason, sizeof reason);
    if (p.hs.kind == HOOP_NOTICE_EXCLUDED)
      return excluded_error(comm, p.hs.from, reason);
    /* A shrinking rank's communicator broke already: old news. */
    if (comm->shrinking)
      return HOOP_SUCCESS;
    return notice_error(comm, p.hs.from, reason);
  }
  if (p.hs.channel == HOOP_QUERY_CHANNEL) {
    hoop__comm_answer_query(comm, p.fd, p.hs.from);
    return HOOP_SUCCESS;
  }
  /*
   * A proven rank dials only the higher ranks; anything else is a bug.  A
   * good dial is answered only when this rank takes it (accept_from), so
   * that the dialler waits where it can ask whether this rank's call
   * agrees with its own, rather than in its transport's set-up.
   */
  if (p.hs.from >= comm->rank) {
    int32_t status = HOOP_ERR_MISMATCH;
    hoop__sock_send_all(comm, p.fd, &status, sizeof status,
                        hoop__now_ms() + 1000, "a connecting rank");
    HOOP_WARN("rank %d: refused a data connection from rank %d, which "
              "should have waited for this rank to dial",
              comm->rank, p.hs.from);
    close(p.fd);
    return HOOP_SUCCESS;
  }
  struct hoop_pending_sock *ps = malloc(sizeof *ps);
  if (ps == NULL) {
    close(p.fd);
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "pending connection");
  }
  *ps = (struct hoop_pending_sock){comm->pending, p.fd, p.hs.from,
                                   p.hs.channel};
  comm->pending = ps;
  return HOOP_SUCCESS;
}

/* Accepts until `peer` dials for `channel`, keeping other ranks' dials. */
static hoop_result_t accept_from(struct hoop_comm *comm, int peer,
                                 int channel, long long deadline, int *out) {
  char desc[128];
  hoop__peer_desc(comm, peer, desc, sizeof desc);
  struct agreement_watch watch = watch_peer(peer);
  while (!take_pending(comm, peer, channel, out)) {
    long long left = deadline - hoop__now_ms();
    if (aborted(comm))
      return aborted_while(comm, desc);
    if (left <= 0)
      return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                        "timed out waiting for a connection from %s", desc);
    HOOP_CHECK(check_watch(comm, &watch));
    bool took;
    HOOP_CHECK(take_one(comm, left > ABORT_POLL_MS ? ABORT_POLL_MS
                                                  : (int)left,
                        &took));
  }
  int32_t status = HOOP_SUCCESS;
  hoop_result_t res = hoop__sock_send_all(comm, *out, &status, sizeof status,
                                          deadline, desc);
  if (res != HOOP_SUCCESS)
    hoop__sock_close(out);
  return res;
}

hoop_result_t hoop__comm_serve(struct hoop_comm *comm, int wait_ms) {
  for (bool took = true; took; wait_ms = 0)
    HOOP_CHECK(take_one(comm, wait_ms, &took));
  return HOOP_SUCCESS;
}

hoop_result_t hoop__comm_check_notices(struct hoop_comm *comm, int wait_ms) {
  long long end = hoop__now_ms() + wait_ms;
  while (!comm->notice_received) {
    long long left = end - hoop__now_ms();
    bool took;
    hoop_result_t res = take_one(comm, left > 0 ? (int)left : 0, &took);
    if (comm->notice_received)
      return res;
    if (res != HOOP_SUCCESS || left <= 0)
      break;
  }
  return HOOP_SUCCESS;
}

/* What follows a proof on the data listener: a notice's reason, or none. */
static size_t data_payload_bytes(int32_t channel) {
  return channel == HOOP_NOTICE_CHANNEL ? HOOP_NOTICE_BYTES : 0;
}

hoop_result_t hoop__comm_listen(struct hoop_comm *comm,
                                const struct hoop_addr *addr) {
  struct hoop_listener *l = &comm->listener;
  l->key = comm->auth_key;
  l->comm_id = comm->comm_id;
  l->rank = comm->rank;
  l->nranks = comm->nranks;
  l->channel_lo = HOOP_QUERY_CHANNEL;
  l->channel_hi = comm->nsocks - 1;
  l->payload_bytes = data_payload_bytes;
  /* Every peer may dial at once, and ring neighbours on every channel. */
  l->max_unproven = HOOP_LISTENER_STRANGERS +
                    (comm->nranks < 960 ? comm->nranks : 960) + comm->nsocks;
  return hoop__listener_open(l, addr, -1);
}

/* How long a breaking rank may spend getting its notices out. */
#define NOTICE_MS 200

/*
 * Sends a sealed notice (auth.h) on a connection that has just opened;
 * false when it could not.
 */
static bool send_notice(struct hoop_comm *comm, int fd, int peer,
                        int32_t kind, const char *reason) {
  struct hoop_handshake hs;
  uint8_t seal[HOOP_AUTH_MAC_BYTES];
  if (hoop__auth_handshake(comm->comm_id, comm->rank, peer,
                           HOOP_NOTICE_CHANNEL, &hs) != HOOP_SUCCESS)
    return false;
  hs.kind = kind;
  hoop__auth_seal(&comm->auth_key, &hs, comm->listener.session, reason,
                  HOOP_NOTICE_BYTES, seal);
  struct iovec iov[3] = {{&hs, sizeof hs},
                         {seal, sizeof seal},
                         {(void *)reason, HOOP_NOTICE_BYTES}};
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 3};
  return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) ==
         (ssize_t)(sizeof hs + sizeof seal + HOOP_NOTICE_BYTES);
}

/*
 * A failing rank tells every peer why, all at once, so that ranks which
 * only see the cascade (a neighbour closing) still report the root cause.
 * A notice is sealed rather than challenged, so the peer may read it
 * whenever it next looks, long after this rank has gone (or, stopped when
 * it came, once it runs again).
 */
void hoop__comm_send_notices(struct hoop_comm *comm, const uint8_t *to,
                             int32_t kind, const char *text) {
  _Static_assert(HOOP_NOTICE_BYTES <= HOOP_ERROR_MAX,
                 "a notice carries the start of the error");
  char reason[HOOP_NOTICE_BYTES];
  snprintf(reason, sizeof reason, "%s", text);
  int n = comm->nranks, open = 0;
  struct pollfd *fds = calloc((size_t)n, sizeof *fds);
  if (fds == NULL)
    return;
  for (int peer = 0; peer < n; peer++) {
    fds[peer] = (struct pollfd){.fd = -1, .events = POLLOUT};
    if (peer != comm->rank && (to == NULL || to[peer]) &&
        hoop__sock_connect_start(&comm->peers[peer].addr,
                                 &fds[peer].fd) == 0)
      open++;
  }
  long long deadline = hoop__now_ms() + NOTICE_MS;
  for (long long left = NOTICE_MS; open > 0 && left > 0;
       left = deadline - hoop__now_ms()) {
    if (poll(fds, (nfds_t)n, (int)left) <= 0)
      continue;
    for (int peer = 0; peer < n; peer++) {
      if (fds[peer].fd < 0 || fds[peer].revents == 0)
        continue;
      if ((fds[peer].revents & (POLLERR | POLLHUP)) == 0)
        send_notice(comm, fds[peer].fd, peer, kind, reason);
      hoop__sock_close(&fds[peer].fd);
      open--;
    }
  }
  for (int peer = 0; peer < n; peer++)
    hoop__sock_close(&fds[peer].fd);
  free(fds);
}

struct open_ctx {
  struct hoop_comm *comm;
  int peer;
  int channel;
  long long deadline;
};

/* The transports' socket opener (hoop_conn_setup.open_socket). */
static hoop_result_t open_socket(void *arg, int *fd) {
  const struct open_ctx *o = arg;
  hoop__comm_waiting(o->comm, o->peer, 0, hoop__now_ms());
  if (o->comm->rank < o->peer)
    return dial(o->comm, o->peer, o->channel, o->deadline, fd);
  return accept_from(o->comm, o->peer, o->channel, o->deadline, fd);
}

hoop_result_t hoop__comm_conn(struct hoop_comm *comm, int peer, int channel,
                              struct hoop_conn **conn) {
  struct hoop_conn **slot = &comm->conns[peer * comm->nsocks + channel];
  if (*slot == NULL) {
    char desc[128];
    struct open_ctx ctx = {comm, peer, channel,
                           hoop__now_ms() + comm->timeout_ms};
    struct hoop_conn_setup setup = {
        .rank = comm->rank,
        .peer = peer,
        .channel = channel,
        .comm_id = comm->comm_id,
        .deadline = ctx.deadline,
        .slice_bytes = comm->slice_bytes,
        .sockbuf_bytes = comm->sockbuf_bytes,
        .peer_desc = hoop__peer_desc(comm, peer, desc, sizeof desc),
        .open_socket = open_socket,
        .ctx = &ctx,
    };
    hoop_result_t res = hoop__transport_connect(
        &comm->peers[comm->rank], &comm->peers[peer], &setup, slot);
    if (res != HOOP_SUCCESS)
      return hoop__error_attach(comm, res);
    bool first = true;
    for (int c = 0; c < comm->nsocks && first; c++)
      first = c == channel || comm->conns[peer * comm->nsocks + c] == NULL;
    if (first)
      hoop__stats_connected(comm);
  }
  *conn = *slot;
  return HOOP_SUCCESS;
}

void hoop__comm_drop_pending(struct hoop_comm *comm) {
  while (comm->pending != NULL) {
    struct hoop_pending_sock *p = comm->pending;
    comm->pending = p->next;
    close(p->fd);
    free(p);
  }
}

void hoop__comm_break(struct hoop_comm *comm, hoop_result_t result) {
  if (hoop__comm_broken(comm) != HOOP_SUCCESS)
    return;
  if (result == HOOP_ERR_TIMEOUT && !comm->notice_received)
    hoop__comm_report_stall(comm);
  set_broken(comm, result);
  /* Only the rank that saw the failure first tells the others. */
  if (!comm->notice_received && result != HOOP_ERR_ABORTED)
    hoop__comm_send_notices(comm, NULL, HOOP_NOTICE_FAILED,
                            comm->last_error);
  for (int i = 0; i < comm->nranks * comm->nsocks; i++) {
    if (comm->conns[i] != NULL)
      comm->conns[i]->ops->shutdown(comm->conns[i]);
  }
}

