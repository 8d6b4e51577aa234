/*
 * Connection set-up between ranks: the handshake on every data socket,
 * dialling and accepting (the lower rank dials), the dials that arrive
 * before their owner asks for them, and failure notices, which travel the
 * same way.  Transports get a socket from here through hoop_conn_setup and
 * never see the communicator.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/error.h"
#include "transport/transport.h"

const char *hoop__peer_desc(const struct hoop_comm *comm, int peer,
                            char *buf, size_t len) {
  char astr[HOOP_ADDR_STRLEN];
  const struct hoop_peer_info *p = &comm->peers[peer];
  snprintf(buf, len, "rank %d (%s, host %s, pid %d)", peer,
           hoop__addr_str(&p->addr, astr), p->hostname, p->pid);
  return buf;
}

/*
 * Waits for the ack of a dialled peer.  A peer that never accepts (it is
 * in another call, or failed) must not hold this rank for the whole
 * timeout when some rank has already reported the failure, so failure
 * notices on the listening socket are watched meanwhile.
 */
static hoop_result_t await_ack(struct hoop_comm *comm, int fd,
                               long long deadline, const char *desc,
                               int32_t *status) {
  struct pollfd fds[2] = {{.fd = fd, .events = POLLIN},
                          {.fd = comm->listen_fd, .events = POLLIN}};
  while (hoop__now_ms() < deadline) {
    long long left = deadline - hoop__now_ms();
    if (poll(fds, 2, left > 1000 ? 1000 : (int)left) <= 0)
      continue;
    if (fds[1].revents & POLLIN)
      HOOP_CHECK(hoop__comm_check_notices(comm, 0));
    if (fds[0].revents)
      return hoop__sock_recv_all(comm, fd, status, sizeof *status, deadline,
                                 desc);
  }
  return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                    "%s accepted the connection but never answered the "
                    "handshake within %d ms",
                    desc, comm->timeout_ms);
}

static hoop_result_t dial(struct hoop_comm *comm, int peer, int channel,
                          long long deadline, int *out) {
  char desc[128];
  hoop__peer_desc(comm, peer, desc, sizeof desc);
  int fd;
  HOOP_CHECK(hoop__sock_connect(comm, &comm->peers[peer].addr, deadline,
                                desc, &fd));
  struct hoop_handshake hs = {HOOP_WIRE_MAGIC, HOOP_WIRE_VERSION,
                              comm->comm_id, comm->rank, peer, channel, 0};
  int32_t status = HOOP_ERR_INTERNAL;
  hoop_result_t res =
      hoop__sock_send_all(comm, fd, &hs, sizeof hs, deadline, desc);
  if (res == HOOP_SUCCESS)
    res = await_ack(comm, fd, deadline, desc, &status);
  if (res == HOOP_SUCCESS && status != HOOP_SUCCESS)
    res = HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                     "%s refused the data connection for channel %d "
                     "(communicator or protocol mismatch)",
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
  hoop_result_t res = HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                                 "rank %d failed first: %s", from, reason);
  if (!comm->joining)
    return res;
  set_broken(comm, res);
  return HOOP_SUCCESS;
}

/*
 * Accepts one connection and reads its handshake.  A data dial is acked
 * and kept in comm->pending; a failure notice becomes this call's error;
 * anything else is refused and ignored.
 */
static hoop_result_t accept_one(struct hoop_comm *comm, long long deadline,
                                const char *waiting_for) {
  int fd;
  struct hoop_addr from;
  HOOP_CHECK(hoop__sock_accept(comm, comm->listen_fd, deadline, waiting_for,
                               &fd, &from));
  unsigned char bytes[sizeof(struct hoop_handshake)];
  if (hoop__sock_recv_all(comm, fd, bytes, sizeof bytes, deadline,
                          "a connecting rank") != HOOP_SUCCESS) {
    close(fd);
    return HOOP_SUCCESS;
  }
  struct hoop_handshake hs;
  char why[200] = "";
  bool ours = hoop__handshake_parse(bytes, sizeof bytes, comm->nranks,
                                    comm->nsocks, &hs, why, sizeof why);
  if (ours && (hs.comm_id != comm->comm_id || hs.to != comm->rank)) {
    snprintf(why, sizeof why, "for communicator %016llx, rank %d",
             (unsigned long long)hs.comm_id, hs.to);
    ours = false;
  }
  if (ours && hs.channel == HOOP_NOTICE_CHANNEL) {
    char text[HOOP_NOTICE_BYTES], reason[HOOP_NOTICE_BYTES];
    hoop_result_t got = hoop__sock_recv_all(comm, fd, text, sizeof text,
                                            deadline, "a failing rank");
    close(fd);
    hoop__notice_parse(text, sizeof text, reason, sizeof reason);
    return notice_error(comm, hs.from,
                        got == HOOP_SUCCESS ? reason : "(no reason given)");
  }
  int32_t status = ours ? HOOP_SUCCESS : HOOP_ERR_MISMATCH;
  hoop__sock_send_all(comm, fd, &status, sizeof status, deadline,
                      "a connecting rank");
  if (!ours) {
    char astr[HOOP_ADDR_STRLEN];
    HOOP_WARN("rank %d: refused a data connection from %s: %s", comm->rank,
              hoop__addr_str(&from, astr), why);
    close(fd);
    return HOOP_SUCCESS;
  }
  struct hoop_pending_sock *p = malloc(sizeof *p);
  if (p == NULL) {
    close(fd);
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "pending connection");
  }
  *p = (struct hoop_pending_sock){comm->pending, fd, hs.from, hs.channel};
  comm->pending = p;
  return HOOP_SUCCESS;
}

/* Accepts until `peer` dials for `channel`, keeping other ranks' dials. */
static hoop_result_t accept_from(struct hoop_comm *comm, int peer,
                                 int channel, long long deadline, int *out) {
  char desc[128];
  hoop__peer_desc(comm, peer, desc, sizeof desc);
  while (!take_pending(comm, peer, channel, out))
    HOOP_CHECK(accept_one(comm, deadline, desc));
  return HOOP_SUCCESS;
}

hoop_result_t hoop__comm_check_notices(struct hoop_comm *comm, int wait_ms) {
  struct pollfd p = {.fd = comm->listen_fd, .events = POLLIN};
  while (!comm->notice_received && poll(&p, 1, wait_ms) > 0) {
    /* A handshake is a few bytes already on their way. */
    hoop_result_t res = accept_one(comm, hoop__now_ms() + 1000,
                                   "a failure notice");
    if (comm->notice_received)
      return res;
    if (res != HOOP_SUCCESS)
      break;
    wait_ms = 0;
  }
  return HOOP_SUCCESS;
}

static void send_notices(struct hoop_comm *comm) {
  _Static_assert(HOOP_NOTICE_BYTES <= HOOP_ERROR_MAX,
                 "a notice carries the start of the error");
  char reason[HOOP_NOTICE_BYTES];
  memcpy(reason, comm->last_error, sizeof reason);
  long long deadline = hoop__now_ms() + 200;
  for (int peer = 0; peer < comm->nranks; peer++) {
    if (peer == comm->rank)
      continue;
    int fd;
    char desc[128];
    hoop__peer_desc(comm, peer, desc, sizeof desc);
    /* A dead peer refuses at once; one try each, never a retry loop. */
    if (hoop__sock_connect(NULL, &comm->peers[peer].addr, hoop__now_ms(),
                           desc, &fd) != HOOP_SUCCESS)
      continue;
    struct hoop_handshake hs = {HOOP_WIRE_MAGIC, HOOP_WIRE_VERSION,
                                comm->comm_id, comm->rank, peer,
                                HOOP_NOTICE_CHANNEL, 0};
    if (hoop__sock_send_all(NULL, fd, &hs, sizeof hs, deadline, desc) ==
        HOOP_SUCCESS)
      hoop__sock_send_all(NULL, fd, reason, sizeof reason, deadline, desc);
    close(fd);
  }
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
    if (res != HOOP_SUCCESS) {
      hoop__error_attach(comm);
      return res;
    }
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
  set_broken(comm, result);
  /* Only the rank that saw the failure first tells the others. */
  if (!comm->notice_received && result != HOOP_ERR_ABORTED)
    send_notices(comm);
  for (int i = 0; i < comm->nranks * comm->nsocks; i++) {
    if (comm->conns[i] != NULL)
      comm->conns[i]->ops->shutdown(comm->conns[i]);
  }
}

