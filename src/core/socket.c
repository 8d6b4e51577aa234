/* Deadline-bounded socket set-up helpers; see socket.h. */
#include "core/socket.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

const char *hoop__addr_str(const struct hoop_addr *addr,
                           char buf[HOOP_ADDR_STRLEN]) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int family = addr->family == AF_INET6 ? AF_INET6 : AF_INET;
  inet_ntop(family, addr->ip, ip, sizeof ip);
  snprintf(buf, HOOP_ADDR_STRLEN, family == AF_INET6 ? "[%s]:%u" : "%s:%u",
           ip, addr->port);
  return buf;
}

void hoop__addr_to_sockaddr(const struct hoop_addr *addr,
                            struct sockaddr_storage *ss, socklen_t *len) {
  memset(ss, 0, sizeof *ss);
  if (addr->family == AF_INET6) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(addr->port);
    memcpy(&s6->sin6_addr, addr->ip, 16);
    *len = sizeof *s6;
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons(addr->port);
    memcpy(&s4->sin_addr, addr->ip, 4);
    *len = sizeof *s4;
  }
}

void hoop__addr_from_sockaddr(const struct sockaddr *sa,
                              struct hoop_addr *addr) {
  memset(addr, 0, sizeof *addr);
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
    addr->family = AF_INET6;
    addr->port = ntohs(s6->sin6_port);
    memcpy(addr->ip, &s6->sin6_addr, 16);
  } else {
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
    addr->family = AF_INET;
    addr->port = ntohs(s4->sin_port);
    memcpy(addr->ip, &s4->sin_addr, 4);
  }
}

hoop_result_t hoop__addr_split(const char *text, char *host, size_t cap,
                               uint16_t *port) {
  const char *colon = strrchr(text, ':');
  if (colon == NULL || colon == text || colon[1] == '\0')
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "address \"%s\" is not host:port", text);
  const char *start = text;
  size_t hlen = (size_t)(colon - text);
  if (text[0] == '[' && hlen >= 2 && colon[-1] == ']') {
    start = text + 1;
    hlen -= 2;
  }
  if (hlen == 0 || hlen >= cap)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "host name in \"%s\" is empty or too long", text);
  memcpy(host, start, hlen);
  host[hlen] = '\0';
  char *end;
  errno = 0;
  long v = strtol(colon + 1, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > 65535 ||
      !isdigit((unsigned char)colon[1]))
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "port in address \"%s\" is not a number 0-65535",
                      text);
  *port = (uint16_t)v;
  return HOOP_SUCCESS;
}

hoop_result_t hoop__addr_parse(const char *text, struct hoop_addr *addr) {
  char host[256];
  uint16_t port;
  HOOP_CHECK(hoop__addr_split(text, host, sizeof host, &port));
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "cannot resolve host \"%s\": %s", host,
                      gai_strerror(rc));
  /* Prefer IPv4: it is what MASTER_ADDR means in practice. */
  const struct addrinfo *pick = res;
  for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
  }
  hoop__addr_from_sockaddr(pick->ai_addr, addr);
  addr->port = port;
  freeaddrinfo(res);
  return HOOP_SUCCESS;
}

/*
 * The length of an entry's name part and, in *entry_port, the port it
 * names (0: every port).  -1 when the port is not 1..255 in digits.
 */
static int entry_name_len(const char *entry, size_t len, bool with_ports,
                          int *entry_port) {
  *entry_port = 0;
  const char *colon = with_ports ? memchr(entry, ':', len) : NULL;
  if (colon == NULL)
    return (int)len;
  size_t digits = len - (size_t)(colon - entry) - 1;
  int port = 0;
  for (size_t i = 1; i <= digits; i++) {
    if (colon[i] < '0' || colon[i] > '9' || port > 255)
      return -1;
    port = port * 10 + (colon[i] - '0');
  }
  if (digits == 0 || port < 1 || port > 255)
    return -1;
  *entry_port = port;
  return (int)(colon - entry);
}

/*
 * hoop__iface_match and hoop__port_match: the whole list is read even
 * after a match, so that a malformed entry is refused whatever `name` is.
 */
static int list_match(const char *spec, const char *name, int port,
                      bool with_ports, const char **why) {
  const char *p = spec;
  bool exclude = *p == '^';
  p += exclude;
  bool exact = *p == '=';
  p += exact;
  if (*p == '\0') {
    if (why != NULL)
      *why = with_ports ? "names no device" : "names no interface";
    return -1;
  }
  bool listed = false;
  size_t name_len = strlen(name);
  for (;;) {
    size_t len = strcspn(p, ",");
    int entry_port;
    int n = entry_name_len(p, len, with_ports, &entry_port);
    if (n <= 0) {
      if (why != NULL)
        *why = n == 0 ? "has an empty entry"
                      : "has an entry whose port is not 1 to 255";
      return -1;
    }
    if (strncmp(name, p, (size_t)n) == 0 &&
        (!exact || name_len == (size_t)n) &&
        (entry_port == 0 || entry_port == port))
      listed = true;
    if (p[len] == '\0')
      return listed != exclude;
    p += len + 1;
  }
}

int hoop__iface_match(const char *spec, const char *name, const char **why) {
  return list_match(spec, name, 0, false, why);
}

int hoop__port_match(const char *spec, const char *name, int port,
                     const char **why) {
  return list_match(spec, name, port, true, why);
}

/* A link-local IPv6 address needs a scope id, which hoop_addr lacks. */
static bool usable_addr(const struct sockaddr *sa) {
  if (sa == NULL)
    return false;
  if (sa->sa_family == AF_INET)
    return true;
  return sa->sa_family == AF_INET6 &&
         !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/*
 * "lo 127.0.0.1, eth0 10.0.0.2, ib0 10.1.0.2 (down), ifb0 no address":
 * each interface once, with its IPv4 (else IPv6) address, cut to fit
 * `len`.
 */
static void list_interfaces(const struct ifaddrs *list, char *buf,
                            size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    bool seen = false;
    for (const struct ifaddrs *e = list; e != ifa && !seen; e = e->ifa_next)
      seen = strcmp(e->ifa_name, ifa->ifa_name) == 0;
    if (seen)
      continue;
    const struct sockaddr *best = NULL;
    for (const struct ifaddrs *e = ifa; e != NULL; e = e->ifa_next) {
      if (strcmp(e->ifa_name, ifa->ifa_name) != 0 || !usable_addr(e->ifa_addr))
        continue;
      if (best == NULL || (e->ifa_addr->sa_family == AF_INET &&
                           best->sa_family != AF_INET))
        best = e->ifa_addr;
    }
    char what[INET6_ADDRSTRLEN + 16] = "no address";
    if (best != NULL) {
      struct hoop_addr a;
      hoop__addr_from_sockaddr(best, &a);
      inet_ntop(a.family, a.ip, what, sizeof what);
    }
    if (!(ifa->ifa_flags & IFF_UP))
      snprintf(what + strlen(what), sizeof what - strlen(what), " (down)");
    int n = snprintf(buf + used, len - used, "%s%s %s", used ? ", " : "",
                     ifa->ifa_name, what);
    if (n < 0 || (size_t)n >= len - used) {
      /* Ends the list with ", ..." where the next entry did not fit. */
      if (used + 6 <= len)
        snprintf(buf + used, len - used, ", ...");
      return;
    }
    used += (size_t)n;
  }
}

hoop_result_t hoop__iface_choose(const char *setting, const char *spec,
                                 struct hoop_iface *iface) {
  const char *why;
  if (hoop__iface_match(spec, "", &why) < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "%s=%s %s (the forms: eth selects names starting "
                      "with eth, =eth0 that name only, eth0,ib either "
                      "prefix, ^docker,lo all but those, ^=docker0 all but "
                      "that name)",
                      setting, spec, why);
  struct ifaddrs *list;
  if (getifaddrs(&list) != 0)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "%s=%s: getifaddrs failed: %s",
                      setting, spec, strerror(errno));
  const struct ifaddrs *found = NULL;
  for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    if (!usable_addr(ifa->ifa_addr) || !(ifa->ifa_flags & IFF_UP) ||
        hoop__iface_match(spec, ifa->ifa_name, NULL) != 1)
      continue;
    if (ifa->ifa_addr->sa_family == AF_INET) {
      found = ifa;
      break;
    }
    if (found == NULL)
      found = ifa;
  }
  if (found == NULL) {
    char here[300];
    list_interfaces(list, here, sizeof here);
    freeifaddrs(list);
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "%s=%s: no interface matches (of those up with an "
                      "address); interfaces here: %s",
                      setting, spec, here[0] ? here : "none");
  }
  memset(iface, 0, sizeof *iface);
  snprintf(iface->name, sizeof iface->name, "%s", found->ifa_name);
  hoop__addr_from_sockaddr(found->ifa_addr, &iface->addr);
  iface->addr.port = 0;
  iface->setting = setting;
  freeifaddrs(list);
  return HOOP_SUCCESS;
}

hoop_result_t hoop__sock_listen(const struct hoop_addr *addr, int *fd,
                                struct hoop_addr *bound) {
  char astr[HOOP_ADDR_STRLEN];
  struct sockaddr_storage ss;
  socklen_t len;
  hoop__addr_to_sockaddr(addr, &ss, &len);
  int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "socket() failed: %s",
                      strerror(errno));
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s, (struct sockaddr *)&ss, len) != 0) {
    int err = errno;
    close(s);
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "bind(%s) failed: %s",
                      hoop__addr_str(addr, astr), strerror(err));
  }
  if (listen(s, 1024) != 0) {
    int err = errno;
    close(s);
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "listen(%s) failed: %s",
                      hoop__addr_str(addr, astr), strerror(err));
  }
  len = sizeof ss;
  getsockname(s, (struct sockaddr *)&ss, &len);
  hoop__addr_from_sockaddr((struct sockaddr *)&ss, bound);
  *fd = s;
  return HOOP_SUCCESS;
}

/* Polls fd at least once, then until deadline_ms; 1 ready, 0 timeout. */
static int wait_fd(int fd, short events, long long deadline_ms) {
  for (;;) {
    long long left = deadline_ms - hoop__now_ms();
    if (left < 0)
      left = 0;
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, left > 1000 ? 1000 : (int)left);
    if (rc > 0)
      return 1;
    if (rc < 0 && errno != EINTR)
      return -1;
    if (left == 0)
      return 0;
  }
}

int hoop__sock_connect_start(const struct hoop_addr *addr, int *fd) {
  struct sockaddr_storage ss;
  socklen_t len;
  hoop__addr_to_sockaddr(addr, &ss, &len);
  int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                 0);
  if (s < 0)
    return errno;
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(s, (const struct sockaddr *)&ss, len) != 0 &&
      errno != EINPROGRESS) {
    int err = errno;
    close(s);
    return err;
  }
  *fd = s;
  return 0;
}

/*
 * One non-blocking connect attempt, waited for until deadline_ms; returns
 * 0 or the errno that ended it.
 */
static int connect_once(const struct hoop_addr *addr, long long deadline_ms,
                        int *fd) {
  int s;
  int err = hoop__sock_connect_start(addr, &s);
  if (err != 0)
    return err;
  int ready = wait_fd(s, POLLOUT, deadline_ms);
  socklen_t elen = sizeof err;
  if (ready <= 0)
    err = ready == 0 ? ETIMEDOUT : errno;
  else if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
    err = errno;
  if (err != 0) {
    close(s);
    return err;
  }
  *fd = s;
  return 0;
}

hoop_result_t hoop__sock_connect(struct hoop_comm *comm,
                                 const struct hoop_addr *addr,
                                 long long deadline_ms, const char *peer,
                                 bool listening, int *fd) {
  char astr[HOOP_ADDR_STRLEN];
  int err;
  long long pause_ms = 1;
  for (;;) {
    err = connect_once(addr, deadline_ms, fd);
    if (err == 0)
      return HOOP_SUCCESS;
    if ((err == ECONNREFUSED || err == ECONNRESET) && listening)
      return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                        "connect to %s at %s failed: %s: nothing listens "
                        "there any more (it exited or destroyed the "
                        "communicator)",
                        peer, hoop__addr_str(addr, astr), strerror(err));
    /* Only "not listening yet" is worth a retry; anything else is final. */
    if ((err != ECONNREFUSED && err != EINTR && err != EAGAIN) ||
        hoop__now_ms() + pause_ms >= deadline_ms)
      break;
    usleep((useconds_t)(pause_ms * 1000));
    if (pause_ms < 100)
      pause_ms *= 2;
  }
  bool waited = err == ECONNREFUSED || err == ETIMEDOUT;
  return HOOP_ERROR(comm, waited ? HOOP_ERR_TIMEOUT : HOOP_ERR_SYSTEM,
                    "connect to %s at %s failed: %s%s", peer,
                    hoop__addr_str(addr, astr), strerror(err),
                    waited ? " (until the timeout; is it running and "
                             "reachable?)"
                           : "");
}

hoop_result_t hoop__sock_send_all(struct hoop_comm *comm, int fd,
                                  const void *buf, size_t len,
                                  long long deadline_ms, const char *peer) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = send(fd, (const char *)buf + done, len - done,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_fd(fd, POLLOUT, deadline_ms) > 0)
        continue;
      return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                        "timed out sending to %s (sent %zu of %zu bytes)",
                        peer, done, len);
    }
    return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                      "send to %s failed: %s (sent %zu of %zu bytes)", peer,
                      strerror(errno), done, len);
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__sock_recv_all(struct hoop_comm *comm, int fd, void *buf,
                                  size_t len, long long deadline_ms,
                                  const char *peer) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n == 0)
      return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                        "%s closed the connection (got %zu of %zu bytes)",
                        peer, done, len);
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (wait_fd(fd, POLLIN, deadline_ms) > 0)
        continue;
      return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                        "timed out waiting for %s (got %zu of %zu bytes)",
                        peer, done, len);
    }
    return HOOP_ERROR(comm, HOOP_ERR_REMOTE,
                      "recv from %s failed: %s (got %zu of %zu bytes)", peer,
                      strerror(errno), done, len);
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__sock_set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "fcntl(O_NONBLOCK): %s",
                      strerror(errno));
  return HOOP_SUCCESS;
}

void hoop__sock_close(int *fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}
