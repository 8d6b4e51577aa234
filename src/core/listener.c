/* Accepting only connections that prove themselves; see listener.h. */
#include "core/listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"

enum stage { READ_HANDSHAKE, READ_PROOF, READ_PAYLOAD, READ_SEALED };

struct hoop_unproven {
  int fd;
  long long deadline;
  struct hoop_addr from;
  enum stage stage;
  size_t got, want; /* of the message being read, into buf */
  struct hoop_handshake hs;
  struct hoop_auth_challenge ch;
  /* A notice's seal, then its text; or what another stage reads. */
  unsigned char buf[HOOP_AUTH_MAC_BYTES + HOOP_LISTENER_PAYLOAD_MAX];
};

_Static_assert(HOOP_NOTICE_BYTES <= HOOP_LISTENER_PAYLOAD_MAX &&
                   sizeof(struct hoop_handshake) <= HOOP_LISTENER_PAYLOAD_MAX &&
                   sizeof(struct hoop_auth_proof) <=
                       HOOP_LISTENER_PAYLOAD_MAX,
               "every message a listener reads fits its buffer");

hoop_result_t hoop__listener_open(struct hoop_listener *l,
                                  const struct hoop_addr *addr, int fd) {
  l->nunproven = 0;
  l->fd = fd;
  l->unproven = calloc((size_t)l->max_unproven, sizeof *l->unproven);
  l->pollfds = calloc((size_t)l->max_unproven + 1, sizeof *l->pollfds);
  hoop_result_t res = HOOP_SUCCESS;
  if (l->unproven == NULL || l->pollfds == NULL)
    res = HOOP_ERROR(NULL, HOOP_ERR_NO_MEMORY,
                     "listener for %d connections", l->max_unproven);
  else if (fd < 0)
    res = hoop__sock_listen(addr, &l->fd, &l->addr);
  /* accept_new takes connections until the socket would block. */
  if (res == HOOP_SUCCESS)
    res = hoop__sock_set_nonblocking(l->fd);
  if (res != HOOP_SUCCESS)
    hoop__listener_close(l);
  return res;
}

/* Closes connection i and moves the last one into its place. */
static void drop(struct hoop_listener *l, int i, int level, const char *why) {
  struct hoop_unproven *c = &l->unproven[i];
  char astr[HOOP_ADDR_STRLEN];
  HOOP_LOG_AT(level,
              "rank %d: dropped the connection from %s (%s listener): %s",
              l->rank, hoop__addr_str(&c->from, astr),
              l->channel_hi == HOOP_RENDEZVOUS_CHANNEL ? "rendezvous"
                                                       : "data",
              why);
  close(c->fd);
  *c = l->unproven[--l->nunproven];
}

static void drop_oldest(struct hoop_listener *l, const char *why) {
  int oldest = 0;
  for (int i = 1; i < l->nunproven; i++) {
    if (l->unproven[i].deadline < l->unproven[oldest].deadline)
      oldest = i;
  }
  drop(l, oldest, HOOP_LOG_INFO, why);
}

/*
 * Takes what the listening socket holds.  A full table makes room by
 * dropping its oldest connection: a stranger's flood then wears itself
 * out, while a rank's connection proves itself within a round trip.
 */
static hoop_result_t accept_new(struct hoop_listener *l) {
  for (int k = 0; k < l->max_unproven; k++) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int fd = accept4(l->fd, (struct sockaddr *)&ss, &len,
                     SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return HOOP_SUCCESS;
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if ((errno == EMFILE || errno == ENFILE) && l->nunproven > 0) {
        drop_oldest(l, "out of descriptors");
        continue;
      }
      return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "accept() on rank %d's "
                        "listener: %s", l->rank, strerror(errno));
    }
    if (l->nunproven == l->max_unproven)
      drop_oldest(l, "too many connections still to prove themselves");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct hoop_unproven *c = &l->unproven[l->nunproven++];
    c->fd = fd;
    c->deadline = hoop__now_ms() + HOOP_LISTENER_PROOF_MS;
    hoop__addr_from_sockaddr((struct sockaddr *)&ss, &c->from);
    c->stage = READ_HANDSHAKE;
    c->got = 0;
    c->want = sizeof c->hs;
  }
  return HOOP_SUCCESS;
}

/*
 * Checks a whole handshake and answers it with a challenge, or for a
 * notice, which brings its seal instead, waits for that.
 */
static bool take_handshake(struct hoop_listener *l, struct hoop_unproven *c,
                           char *why, size_t why_len) {
  if (!hoop__handshake_parse(c->buf, c->got, l->nranks, l->channel_lo,
                             l->channel_hi, &c->hs, why, why_len))
    return false;
  if (c->hs.comm_id != l->comm_id || c->hs.to != l->rank) {
    snprintf(why, why_len, "a handshake for rank %d of communicator %016llx",
             c->hs.to, (unsigned long long)c->hs.comm_id);
    return false;
  }
  if (l->payload_bytes(c->hs.channel) > HOOP_LISTENER_PAYLOAD_MAX) {
    snprintf(why, why_len, "channel %d, whose payload of %zu bytes is more "
             "than a listener holds (%d)",
             c->hs.channel, l->payload_bytes(c->hs.channel),
             HOOP_LISTENER_PAYLOAD_MAX);
    return false;
  }
  if (c->hs.channel == HOOP_NOTICE_CHANNEL) {
    c->stage = READ_SEALED;
    c->want = HOOP_AUTH_MAC_BYTES + l->payload_bytes(c->hs.channel);
    return true;
  }
  c->stage = READ_PROOF;
  c->want = sizeof(struct hoop_auth_proof);
  if (hoop__auth_challenge(&l->key, &c->hs, &c->ch) != HOOP_SUCCESS) {
    snprintf(why, why_len, "no random nonce: %s", hoop_last_error());
    return false;
  }
  /* A fresh socket's buffer holds these few bytes; less is a bad peer. */
  ssize_t n = send(c->fd, &c->ch, sizeof c->ch, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != (ssize_t)sizeof c->ch) {
    snprintf(why, why_len, "the challenge could not be sent");
    return false;
  }
  return true;
}

/*
 * Reads what connection c has sent and moves it through its stages.
 * Returns 1 once it has proved itself and sent its payload, 0 while more
 * is to come, -1 to drop it (the reason in `why`, at `*level`).
 */
static int advance(struct hoop_listener *l, struct hoop_unproven *c,
                   char *why, size_t why_len, int *level) {
  *level = HOOP_LOG_INFO;
  for (;;) {
    if (c->got < c->want) {
      ssize_t n = recv(c->fd, c->buf + c->got, c->want - c->got, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                     errno != EINTR)) {
        snprintf(why, why_len, "%s after %zu bytes",
                 n == 0 ? "closed" : strerror(errno), c->got);
        return -1;
      }
      if (n < 0)
        return 0;
      c->got += (size_t)n;
      if (c->got < c->want)
        continue;
    }
    *level = HOOP_LOG_WARN;
    switch (c->stage) {
    case READ_HANDSHAKE:
      if (!take_handshake(l, c, why, why_len))
        return -1;
      break;
    case READ_PROOF: {
      struct hoop_auth_proof proof;
      memcpy(&proof, c->buf, sizeof proof);
      if (!hoop__auth_check_proof(&l->key, &c->hs, &c->ch, &proof)) {
        snprintf(why, why_len,
                 "its proof for rank %d, channel %d does not match this "
                 "job's secret (a stranger, or a rank given another "
                 "HOOP_AUTH_TOKEN)",
                 c->hs.from, c->hs.channel);
        return -1;
      }
      c->stage = READ_PAYLOAD;
      c->want = l->payload_bytes(c->hs.channel);
      break;
    }
    case READ_PAYLOAD:
      return 1;
    case READ_SEALED:
      if (!hoop__auth_check_seal(&l->key, &c->hs, l->session,
                                 c->buf + HOOP_AUTH_MAC_BYTES,
                                 c->want - HOOP_AUTH_MAC_BYTES, c->buf)) {
        snprintf(why, why_len,
                 "its failure notice as rank %d is not sealed with this "
                 "communicator's secret and session (a stranger's, or "
                 "replayed from another communicator)",
                 c->hs.from);
        return -1;
      }
      memmove(c->buf, c->buf + HOOP_AUTH_MAC_BYTES,
              c->want - HOOP_AUTH_MAC_BYTES);
      c->want -= HOOP_AUTH_MAC_BYTES;
      return 1;
    }
    *level = HOOP_LOG_INFO;
    c->got = 0;
  }
}

int hoop__listener_pollfds(const struct hoop_listener *l,
                           struct pollfd *fds) {
  fds[0] = (struct pollfd){.fd = l->fd, .events = POLLIN};
  for (int i = 0; i < l->nunproven; i++)
    fds[i + 1] = (struct pollfd){.fd = l->unproven[i].fd, .events = POLLIN};
  return l->nunproven + 1;
}

static void drop_late(struct hoop_listener *l, long long now) {
  for (int i = l->nunproven - 1; i >= 0; i--) {
    if (l->unproven[i].deadline <= now)
      drop(l, i, HOOP_LOG_INFO, "it did not prove itself in time");
  }
}

/* Hands out connection i, which has proved itself. */
static void hand_out(struct hoop_listener *l, int i,
                     struct hoop_proven *out) {
  struct hoop_unproven *c = &l->unproven[i];
  out->fd = c->fd;
  out->from = c->from;
  out->hs = c->hs;
  memcpy(out->payload, c->buf, c->want);
  *c = l->unproven[--l->nunproven];
}

hoop_result_t hoop__listener_poll(struct hoop_listener *l, int wait_ms,
                                  struct hoop_proven *out, bool *got) {
  *got = false;
  struct pollfd *fds = l->pollfds;
  long long end = hoop__now_ms() + wait_ms;
  for (;;) {
    long long now = hoop__now_ms();
    drop_late(l, now);
    long long wake = end;
    for (int i = 0; i < l->nunproven; i++) {
      if (l->unproven[i].deadline < wake)
        wake = l->unproven[i].deadline;
    }
    int n = hoop__listener_pollfds(l, fds);
    int rc = poll(fds, (nfds_t)n, wake > now ? (int)(wake - now) : 0);
    if (rc < 0 && errno != EINTR)
      return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM,
                        "poll() on rank %d's listener: %s", l->rank,
                        strerror(errno));
    /* Backwards, so that dropping entry i moves one already looked at. */
    for (int i = n - 2; rc > 0 && i >= 0; i--) {
      if (fds[i + 1].revents == 0)
        continue;
      char why[300];
      int level;
      int r = advance(l, &l->unproven[i], why, sizeof why, &level);
      if (r < 0)
        drop(l, i, level, why);
      if (r > 0) {
        hand_out(l, i, out);
        *got = true;
        return HOOP_SUCCESS;
      }
    }
    if (rc > 0 && (fds[0].revents & POLLIN))
      HOOP_CHECK(accept_new(l));
    if (hoop__now_ms() >= end)
      return HOOP_SUCCESS;
  }
}

void hoop__listener_close(struct hoop_listener *l) {
  for (int i = 0; i < l->nunproven; i++)
    close(l->unproven[i].fd);
  l->nunproven = 0;
  free(l->unproven);
  l->unproven = NULL;
  free(l->pollfds);
  l->pollfds = NULL;
  hoop__sock_close(&l->fd);
}
