/*
 * Naming the rank that a stalled call waits for.  A timeout only says
 * which link stopped moving, and in a ring every survivor's link points
 * at a neighbour, not at the rank that stopped.  So a rank whose call
 * times out asks every peer where it is, over a fresh connection to the
 * peer's listener that does not depend on the stuck data path.  A rank
 * inside a hoop call answers from its wait (connect.c's take_one); one
 * that is stopped (SIGSTOP, a debugger, swapped out), hung, or busy
 * outside hoop does not, and is named.
 *
 * Every peer is asked at once, and this rank's own listener is served
 * while the answers come: the peers time out at about the same moment
 * and ask too, and the notice of a rank that finished asking first is
 * taken as this rank's report, so that every survivor reports the same.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/auth.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"

void hoop__comm_waiting(struct hoop_comm *comm, int peer, int send,
                        long long since_ms) {
  __atomic_store_n(&comm->wait_for, peer, __ATOMIC_RELAXED);
  __atomic_store_n(&comm->wait_send, send, __ATOMIC_RELAXED);
  __atomic_store_n(&comm->wait_since_ms, since_ms, __ATOMIC_RELAXED);
}

/*
 * The ranks this one holds lost, as far as a whereabouts holds them.  A
 * rank the survivors left out holds itself lost too: a shrinking rank that
 * took it for its coordinator then moves on to the next at once.
 */
static void put_lost(const struct hoop_comm *comm,
                     struct hoop_whereabouts *w) {
  for (int p = 0; p < comm->nranks && w->nlost < HOOP_SHRINK_MAX_LOST; p++) {
    if (comm->lost[p] || (p == comm->rank && comm->excluded))
      w->lost[w->nlost++] = p;
  }
}

void hoop__comm_answer_query(struct hoop_comm *comm, int fd, int from) {
  struct hoop_whereabouts w = {
      .magic = HOOP_WIRE_MAGIC,
      .state = comm->shrinking && !comm->excluded ? HOOP_AT_SHRINKING
               : hoop__comm_broken(comm) != HOOP_SUCCESS ? HOOP_AT_BROKEN
               : comm->joining                         ? HOOP_AT_JOINING
                                                       : HOOP_AT_CALL,
      .seq = comm->seq,
      .wait_for = __atomic_load_n(&comm->wait_for, __ATOMIC_RELAXED),
      .wait_send = __atomic_load_n(&comm->wait_send, __ATOMIC_RELAXED),
  };
  if (w.wait_for >= 0)
    w.wait_ms = hoop__now_ms() -
                __atomic_load_n(&comm->wait_since_ms, __ATOMIC_RELAXED);
  if (w.wait_ms < 0)
    w.wait_ms = 0;
  const char *call = __atomic_load_n(&comm->call, __ATOMIC_RELAXED);
  snprintf(w.call, sizeof w.call, "%s", call != NULL ? call : "");
  const struct hoop_wire_header *plan =
      __atomic_load_n(&comm->plan_header, __ATOMIC_RELAXED);
  if (plan != NULL) {
    w.in_plan = 1;
    w.plan = *plan;
    w.plan.link_bytes = 0;
    w.plan.back_bytes = 0;
  }
  put_lost(comm, &w);
  if (comm->shrinking)
    comm->asked_me[from] = 1;
  if (comm->decided && !comm->excluded) {
    w.decided = 1;
    memcpy(w.next_id, comm->next_id.internal, sizeof w.next_id);
    comm->fetched[from] = 1;
  }
  /* A fresh socket's buffer takes it whole; a peer gone is no matter. */
  (void)send(fd, &w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL);
  close(fd);
}

/* How long a rank that found a peer gone waits for that peer's notice. */
#define GONE_NOTICE_MS 200

/* How long the asking rank waits for answers. */
static int answer_ms(const struct hoop_comm *comm) {
  int ms = comm->timeout_ms / 5;
  return ms < 500 ? 500 : ms > 3000 ? 3000 : ms;
}

enum step {
  DIALING,   /* connecting */
  CHALLENGE, /* handshake sent, reading the peer's challenge */
  ANSWER,    /* proof sent, reading its whereabouts */
  ANSWERED,
  SILENT, /* no answer in time */
  GONE,   /* refused: the process has gone */
  WRONG,  /* answered with what a rank of this job would not */
  UNASKED, /* no socket to ask it, or the question was dropped */
};

struct asked {
  int fd;
  enum step step;
  struct hoop_handshake hs;
  unsigned char buf[sizeof(struct hoop_whereabouts)];
  size_t got;
  struct hoop_whereabouts where;
  char why[160]; /* for WRONG */
};

_Static_assert(sizeof(struct hoop_auth_challenge) <=
                   sizeof(struct hoop_whereabouts),
               "one buffer reads both");

static void start(struct hoop_comm *comm, int peer, struct asked *a) {
  a->fd = -1;
  a->step = UNASKED;
  if (hoop__auth_handshake(comm->comm_id, comm->rank, peer,
                           HOOP_QUERY_CHANNEL, &a->hs) != HOOP_SUCCESS)
    return;
  int err = hoop__sock_connect_start(&comm->peers[peer].addr, &a->fd);
  /* Out of descriptors or memory here says nothing about the peer. */
  if (err == 0)
    a->step = DIALING;
  else if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM)
    a->step = GONE;
}

static void wrong(struct asked *a, const char *why) {
  snprintf(a->why, sizeof a->why, "%s", why);
  a->step = WRONG;
}

/* Reads toward `want` bytes; true once they are all in. */
static bool read_some(struct asked *a, size_t want) {
  ssize_t n = recv(a->fd, a->buf + a->got, want - a->got, MSG_DONTWAIT);
  if (n > 0) {
    a->got += (size_t)n;
    return a->got == want;
  }
  /*
   * Closed after accepting: the peer exited meanwhile, or its listener,
   * crowded, dropped the question; either way the peer cannot be judged.
   */
  if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    a->step = UNASKED;
  return false;
}

static bool send_whole(int fd, const void *buf, size_t len) {
  return send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)len;
}

/* One step of one peer's exchange (auth.h), on an event on its socket. */
static void advance(struct hoop_comm *comm, struct asked *a) {
  switch (a->step) {
  case DIALING: {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
        err != 0 || !send_whole(a->fd, &a->hs, sizeof a->hs)) {
      a->step = GONE;
      return;
    }
    a->step = CHALLENGE;
    a->got = 0;
    return;
  }
  case CHALLENGE: {
    struct hoop_auth_challenge ch;
    if (!read_some(a, sizeof ch))
      return;
    memcpy(&ch, a->buf, sizeof ch);
    struct hoop_auth_proof proof;
    if (!hoop__auth_check_challenge(&comm->auth_key, &a->hs, &ch)) {
      wrong(a, "its challenge does not prove this job's secret");
      return;
    }
    hoop__auth_proof(&comm->auth_key, &a->hs, &ch, &proof);
    if (!send_whole(a->fd, &proof, sizeof proof)) {
      a->step = GONE;
      return;
    }
    a->step = ANSWER;
    a->got = 0;
    return;
  }
  case ANSWER:
    if (!read_some(a, sizeof a->where))
      return;
    if (hoop__whereabouts_parse(a->buf, a->got, comm->nranks, &a->where,
                                a->why, sizeof a->why))
      a->step = ANSWERED;
    else
      a->step = WRONG;
    return;
  default:
    return;
  }
}

static bool asking(const struct asked *a) {
  return a->step == DIALING || a->step == CHALLENGE || a->step == ANSWER;
}

/*
 * Asks ranks lo..hi (this one left out) at once, asked[p - lo] being rank
 * p's, until all have answered or wait_ms passed; false when a notice
 * came meanwhile (it is the error now).
 */
static bool ask(struct hoop_comm *comm, int lo, int hi, struct asked *asked,
                const uint8_t *skip, int wait_ms) {
  size_t n = (size_t)(hi - lo + 1);
  struct pollfd *fds =
      malloc(sizeof *fds * (n + 1 + (size_t)comm->listener.max_unproven));
  int *who = malloc(sizeof *who * n);
  if (fds == NULL || who == NULL) {
    free(fds);
    free(who);
    return true;
  }
  for (int p = lo; p <= hi; p++) {
    if (p != comm->rank && (skip == NULL || !skip[p]))
      start(comm, p, &asked[p - lo]);
  }
  long long deadline = hoop__now_ms() + wait_ms;
  for (;;) {
    int m = 0;
    for (int p = lo; p <= hi; p++) {
      const struct asked *a = &asked[p - lo];
      if (p == comm->rank || !asking(a))
        continue;
      fds[m] = (struct pollfd){
          .fd = a->fd, .events = a->step == DIALING ? POLLOUT : POLLIN};
      who[m++] = p - lo;
    }
    long long left = deadline - hoop__now_ms();
    if (m == 0 || left <= 0 ||
        __atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
      break;
    int l = hoop__listener_pollfds(&comm->listener, fds + m);
    if (poll(fds, (nfds_t)(m + l), (int)left) <= 0)
      continue;
    for (int i = 0; i < m; i++) {
      if (fds[i].revents != 0)
        advance(comm, &asked[who[i]]);
    }
    bool listener = false;
    for (int i = m; i < m + l; i++)
      listener |= fds[i].revents != 0;
    /* Shrinking ranks ask each other: each must answer while it asks. */
    if (listener && comm->shrinking) {
      if (hoop__comm_serve(comm, 0) != HOOP_SUCCESS && comm->excluded)
        break;
    } else if (listener && hoop__comm_check_notices(comm, 0) != HOOP_SUCCESS &&
               comm->notice_received) {
      break;
    }
  }
  bool gone = false;
  for (int p = lo; p <= hi; p++) {
    struct asked *a = &asked[p - lo];
    if (p == comm->rank)
      continue;
    if (asking(a))
      a->step = SILENT;
    gone |= a->step == GONE || a->step == UNASKED;
    hoop__sock_close(&a->fd);
  }
  /*
   * A peer that has gone usually broke first and left its notice, which
   * may still be on its way through this rank's listener.
   */
  if (!comm->notice_received && !comm->shrinking)
    hoop__comm_check_notices(comm, gone ? GONE_NOTICE_MS : 0);
  free(fds);
  free(who);
  return comm->shrinking || !comm->notice_received;
}

void hoop__comm_ask(struct hoop_comm *comm, const uint8_t *skip, int wait_ms,
                    struct hoop_whereabouts *where, enum hoop_answer *got) {
  int n = comm->nranks;
  struct asked *asked = calloc((size_t)n, sizeof *asked);
  for (int p = 0; p < n; p++)
    got[p] = HOOP_ANSWER_NONE;
  if (asked == NULL)
    return;
  for (int p = 0; p < n; p++)
    asked[p] = (struct asked){.fd = -1, .step = UNASKED};
  ask(comm, 0, n - 1, asked, skip, wait_ms);
  for (int p = 0; p < n; p++) {
    if (p == comm->rank || (skip != NULL && skip[p]))
      continue;
    switch (asked[p].step) {
    case ANSWERED:
      got[p] = HOOP_ANSWER_GIVEN;
      where[p] = asked[p].where;
      break;
    case SILENT:
      got[p] = HOOP_ANSWER_SILENT;
      break;
    case GONE:
      got[p] = HOOP_ANSWER_GONE;
      break;
    default:
      break;
    }
  }
  free(asked);
}

/* A bounded text that sentences are added to. */
struct text {
  char *buf;
  size_t cap, len;
};

__attribute__((format(printf, 2, 3))) static void say(struct text *t,
                                                      const char *fmt, ...) {
  if (t->len + 1 >= t->cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n > 0)
    t->len += (size_t)n < t->cap - t->len ? (size_t)n : t->cap - t->len - 1;
}

/* What the answers say, each rank put in one class. */
enum class_of {
  ME,
  STOPPED, /* did not answer, gone, wrong, broken or still joining */
  CAUSE,   /* in another call, and waits on no stopped rank */
  BEHIND,  /* in an earlier call, waiting (perhaps through others) on a
              stopped rank: a victim, not a cause */
  WITH_ME, /* in this rank's call */
  AHEAD,   /* past it, and not what this rank waits for */
  UNKNOWN, /* could not be asked */
};

static bool answered_call(const struct asked *a) {
  return a->step == ANSWERED && a->where.state == HOOP_AT_CALL;
}

static bool stopped(const struct hoop_comm *comm, int p,
                    const struct asked *a) {
  return p != comm->rank && a->step != UNASKED && !answered_call(a);
}

/* Whether p's chain of waits reaches a stopped rank. */
static bool waits_on_stopped(const struct hoop_comm *comm,
                             const struct asked *asked, int p) {
  for (int hops = 0; hops < comm->nranks; hops++) {
    int next = p == comm->rank ? comm->wait_for
                               : answered_call(&asked[p])
                                     ? asked[p].where.wait_for
                                     : -1;
    if (next < 0)
      return false;
    if (stopped(comm, next, &asked[next]))
      return true;
    p = next;
  }
  return false;
}

static void classify(const struct hoop_comm *comm, const struct asked *asked,
                     enum class_of *cls) {
  for (int p = 0; p < comm->nranks; p++) {
    const struct asked *a = &asked[p];
    if (p == comm->rank)
      cls[p] = ME;
    else if (a->step == UNASKED)
      cls[p] = UNKNOWN;
    else if (stopped(comm, p, a))
      cls[p] = STOPPED;
    else if (a->where.seq == comm->seq)
      cls[p] = WITH_ME;
    else if (a->where.seq > comm->seq && p != comm->wait_for)
      cls[p] = AHEAD;
    else
      cls[p] = waits_on_stopped(comm, asked, p) ? BEHIND : CAUSE;
  }
}

/*
 * "; ranks 0,2,3 wait" or "; rank 4 waits": the ranks of class `c`, then
 * the verb agreeing with their number; nothing when there are none.
 */
static void say_ranks(struct text *t, const struct hoop_comm *comm,
                      const enum class_of *cls, enum class_of c,
                      const char *verb, const char *verbs) {
  int count = 0;
  for (int p = 0; p < comm->nranks; p++)
    count += cls[p] == c || (c == WITH_ME && cls[p] == ME);
  if (count == 0)
    return;
  say(t, "; %s", count == 1 ? "rank " : "ranks ");
  const char *sep = "";
  for (int p = 0; p < comm->nranks; p++) {
    if (cls[p] == c || (c == WITH_ME && cls[p] == ME)) {
      say(t, "%s%d", sep, p);
      sep = ",";
    }
  }
  say(t, " %s", count == 1 ? verbs : verb);
}

/* Why rank p is not where this rank is. */
static void say_culprit(struct text *t, struct hoop_comm *comm, int p,
                        const struct asked *a, const char *call) {
  char desc[128];
  hoop__peer_desc(comm, p, desc, sizeof desc);
  switch (a->step) {
  case SILENT:
    say(t, "%s did not answer within %d ms: it is stopped, hung, or busy "
           "outside hoop",
        desc, answer_ms(comm));
    return;
  case GONE:
    say(t, "%s is gone (its listener refused the question)", desc);
    return;
  case WRONG:
    say(t, "%s answered wrongly (%s)", desc, a->why);
    return;
  default:
    break;
  }
  if (a->where.state == HOOP_AT_BROKEN)
    say(t, "%s has stopped: its communicator broke (%s)", desc,
        a->where.call);
  else if (a->where.state == HOOP_AT_JOINING)
    say(t, "%s is still joining", desc);
  else
    say(t, "%s %s %s #%llu: it is in %s, %llu collectives started", desc,
        a->where.seq < comm->seq ? "has not entered" : "is past", call,
        (unsigned long long)comm->seq, a->where.call,
        (unsigned long long)a->where.seq);
  if (a->where.wait_for >= 0)
    say(t, ", waiting %lld ms %s rank %d", (long long)a->where.wait_ms,
        a->where.wait_send ? "to send to" : "for data from",
        a->where.wait_for);
}

/* The rank p waits on (-1: none or not known), and whether to send. */
static int waits_on(const struct hoop_comm *comm, const struct asked *asked,
                    int p, int *send) {
  if (p == comm->rank) {
    *send = comm->wait_send;
    return comm->wait_for;
  }
  if (asked[p].step != ANSWERED)
    return -1;
  *send = asked[p].where.wait_send;
  return asked[p].where.wait_for;
}

/*
 * No rank is stopped or elsewhere: who waits for whom.  Two ranks that
 * each wait for the other's data in the same call lost the link between
 * them (a peer's RDMA endpoints gone while its process still answers),
 * which neither side sees as an error: a program whose two ranks both
 * receive first fails earlier, at the call's header.  Both are named, so
 * the ranks that wait on them learn where the fault is
 * (IbFailures.ADeadRankFailsEveryOtherRanksCallNamingIt, when the others
 * time out before the rank that waits on the dead one).
 */
static void say_waits(struct text *t, const struct hoop_comm *comm,
                      const struct asked *asked, const char *call) {
  say(t, "the ranks that answered are all in %s #%llu or later; waiting:",
      call, (unsigned long long)comm->seq);
  for (int p = 0; p < comm->nranks; p++) {
    int send = 0, on = waits_on(comm, asked, p, &send);
    if (on >= 0)
      say(t, " %d%s%d", p, send ? "=>" : "<=", on);
  }
  say(t, " (=> to send, <= for data)");
  for (int p = 0; p < comm->nranks; p++) {
    int send_p = 0, send_q = 0, q = waits_on(comm, asked, p, &send_p);
    if (q <= p || q >= comm->nranks || send_p)
      continue;
    if (waits_on(comm, asked, q, &send_q) == p && !send_q)
      say(t, "; rank %d and rank %d wait for data from each other: the "
             "link between them broke or lost bytes",
          p, q);
  }
}

/* Names up to three ranks of class `c`; how many there were. */
static int say_class(struct text *t, struct hoop_comm *comm,
                     const struct asked *asked, const enum class_of *cls,
                     enum class_of c, const char *call, int named) {
  int count = 0;
  for (int p = 0; p < comm->nranks; p++) {
    if (cls[p] != c)
      continue;
    if (count++ < 3) {
      say(t, "%s", named + count > 1 ? "; " : "");
      say_culprit(t, comm, p, &asked[p], call);
    }
  }
  if (count > 3)
    say(t, "; and %d more", count - 3);
  return count;
}

/*
 * The stopped ranks first (they are why the others wait), then ranks in
 * another call that wait on none of them, then where everybody else is.
 */
static void verdict(struct hoop_comm *comm, const struct asked *asked,
                    const enum class_of *cls, struct text *t) {
  const char *call = comm->call != NULL ? comm->call : "a call";
  say(t, "stall report: ");
  int named = say_class(t, comm, asked, cls, STOPPED, call, 0);
  named += say_class(t, comm, asked, cls, CAUSE, call, named);
  if (named == 0) {
    say_waits(t, comm, asked, call);
  } else {
    say_ranks(t, comm, cls, WITH_ME, "wait", "waits");
    say(t, " in %s #%llu", call, (unsigned long long)comm->seq);
    say_ranks(t, comm, cls, BEHIND, "are in earlier calls, waiting on them",
              "is in an earlier call, waiting on them");
    say_ranks(t, comm, cls, AHEAD, "are past it", "is past it");
  }
  say_ranks(t, comm, cls, UNKNOWN, "could not be asked",
            "could not be asked");
}

void hoop__comm_report_stall(struct hoop_comm *comm) {
  if (comm->nranks < 2)
    return;
  struct asked *asked = calloc((size_t)comm->nranks, sizeof *asked);
  enum class_of *cls = calloc((size_t)comm->nranks, sizeof *cls);
  if (asked == NULL || cls == NULL) {
    free(asked);
    free(cls);
    return;
  }
  for (int p = 0; p < comm->nranks; p++)
    asked[p] = (struct asked){.fd = -1, .step = UNASKED};
  char cause[HOOP_ERROR_MAX];
  snprintf(cause, sizeof cause, "%s", comm->last_error);
  if (ask(comm, 0, comm->nranks - 1, asked, NULL, answer_ms(comm))) {
    /* Held lost by a later hoop_comm_shrink, as a dead rank would be. */
    for (int p = 0; p < comm->nranks; p++)
      comm->lost[p] |= p != comm->rank && (asked[p].step == SILENT ||
                                           asked[p].step == GONE);
    char report[HOOP_ERROR_MAX];
    struct text t = {report, sizeof report, 0};
    report[0] = '\0';
    classify(comm, asked, cls);
    verdict(comm, asked, cls, &t);
    HOOP_ERROR(comm, HOOP_ERR_TIMEOUT, "%s. %s", report, cause);
  }
  free(asked);
  free(cls);
}

/*
 * How long a rank waiting to connect gives its peer to answer: a rank in a
 * hoop call answers within its listener's poll (50 ms at most), and a rank
 * outside one not at all, which here only means waiting on.
 */
#define AGREEMENT_ANSWER_MS 200

hoop_result_t hoop__comm_check_agreement(struct hoop_comm *comm, int peer) {
  const struct hoop_wire_header *mine =
      __atomic_load_n(&comm->plan_header, __ATOMIC_RELAXED);
  /* Send/recv peers differ by design. */
  if (mine == NULL || mine->coll == HOOP_COLL_SENDRECV || peer < 0 ||
      peer >= comm->nranks || peer == comm->rank)
    return HOOP_SUCCESS;
  struct asked a = {.fd = -1, .step = UNASKED};
  if (!ask(comm, peer, peer, &a, NULL, AGREEMENT_ANSWER_MS))
    return HOOP_ERR_REMOTE; /* a notice, already the last error */
  char desc[128], me[240], them[240];
  hoop__peer_desc(comm, peer, desc, sizeof desc);
  hoop__describe_call(mine, me, sizeof me);
  /*
   * Every rank listens until it destroys its communicator, so a refused
   * question means the peer has gone without a notice (it aborted, or
   * exited), and the connection it owes will never come.
   */
  if (a.step == GONE)
    return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                      "%s has gone (its listener refused this rank's "
                      "question) while this rank, in %s, waited to connect "
                      "with it",
                      desc, me);
  if (a.step != ANSWERED || a.where.state != HOOP_AT_CALL ||
      a.where.seq < comm->seq)
    return HOOP_SUCCESS;
  bool past = a.where.seq > comm->seq ||
              (a.where.in_plan && a.where.plan.coll == HOOP_COLL_SENDRECV);
  if (!past && (!a.where.in_plan || hoop__wire_same_call(mine, &a.where.plan)))
    return HOOP_SUCCESS;
  if (past)
    return HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                      "ranks disagree: this rank called %s and waits to "
                      "connect with %s, which finished that call without "
                      "the connection (it is in %s, %llu collectives "
                      "started)",
                      me, desc, a.where.call,
                      (unsigned long long)a.where.seq);
  hoop__describe_call(&a.where.plan, them, sizeof them);
  return HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                    "ranks disagree: this rank called %s and waits to "
                    "connect with %s, which called %s",
                    me, desc, them);
}
