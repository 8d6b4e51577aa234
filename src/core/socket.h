/*
 * TCP socket helpers shared by the bootstrap, connection set-up and the tcp
 * transport.  The blocking helpers here are for set-up only and are all
 * bounded by a deadline; the data path uses non-blocking sockets directly.
 * Every error message names the peer through `peer`, a human description
 * such as "rank 3 (10.0.0.2:41234)".
 */
#ifndef HOOP_SOCKET_H
#define HOOP_SOCKET_H

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "hoop.h"

struct hoop_comm;

/* An IPv4 or IPv6 address and port in a fixed-size, wire-safe form. */
struct hoop_addr {
  uint16_t family; /* AF_INET or AF_INET6 */
  uint16_t port;   /* host byte order */
  uint8_t ip[16];
};

#define HOOP_ADDR_STRLEN 64

const char *hoop__addr_str(const struct hoop_addr *addr,
                           char buf[HOOP_ADDR_STRLEN]);
void hoop__addr_to_sockaddr(const struct hoop_addr *addr,
                            struct sockaddr_storage *ss, socklen_t *len);
void hoop__addr_from_sockaddr(const struct sockaddr *sa, struct hoop_addr *addr);

/*
 * Splits "host:port" or "[v6]:port" into a host of at most cap - 1
 * characters, not empty, and a port of 0-65535 in decimal digits; looks
 * nothing up.
 */
hoop_result_t hoop__addr_split(const char *text, char *host, size_t cap,
                               uint16_t *port);

/* Parses "host:port" or "[v6]:port"; the host may be a name. */
hoop_result_t hoop__addr_parse(const char *text, struct hoop_addr *addr);

/*
 * Whether interface `name` is one that `spec` selects.  `spec` takes
 * NCCL_SOCKET_IFNAME's forms: a comma-separated list of name prefixes
 * ("eth", "eth0,ib"); "=" before the list makes every entry a whole name
 * ("=eth0,eth1"); "^" before it (and before any "=") selects every
 * interface the list does not ("^docker,lo", "^=docker0").  Returns 1 or
 * 0, or -1 when `spec` is not such a list (it is empty or has an empty
 * entry), with the reason in *why when why is not NULL.
 */
int hoop__iface_match(const char *spec, const char *name, const char **why);

/*
 * hoop__iface_match's rules for a list of devices and ports, as NCCL's
 * NCCL_IB_HCA takes them: an entry may end in ":port" (1 to 255), and then
 * selects only that port of the devices its name selects ("mlx5_0:1,
 * mlx5_1" is port 1 of mlx5_0 and every port of mlx5_1).
 */
int hoop__port_match(const char *spec, const char *name, int port,
                     const char **why);

/* An interface chosen by a HOOP_SOCKET_IFNAME-style setting. */
struct hoop_iface {
  char name[IF_NAMESIZE];
  struct hoop_addr addr;  /* port 0 */
  const char *setting;    /* what chose it, for messages */
};

/*
 * Chooses the first interface, in the kernel's order, that `spec` selects
 * (hoop__iface_match) and that is up with an IPv4 address; else the first
 * such with an IPv6 address that is not link-local.  `setting` names where
 * `spec` came from ("HOOP_SOCKET_IFNAME") in the messages; when nothing
 * fits, the message lists this host's interfaces and their addresses.
 */
hoop_result_t hoop__iface_choose(const char *setting, const char *spec,
                                 struct hoop_iface *iface);

/* Binds and listens on addr (port 0 picks one); *bound gets the result. */
hoop_result_t hoop__sock_listen(const struct hoop_addr *addr, int *fd,
                                struct hoop_addr *bound);

/*
 * Connects to addr until deadline_ms on the hoop__now_ms() clock.  While
 * the listener may not be up yet (!listening), a refused connection is
 * tried again; once it is known to be up, a refusal means that its owner
 * has gone, and fails at once (HOOP_ERR_REMOTE).
 */
hoop_result_t hoop__sock_connect(struct hoop_comm *comm,
                                 const struct hoop_addr *addr,
                                 long long deadline_ms, const char *peer,
                                 bool listening, int *fd);

/*
 * Starts a non-blocking connect to addr: 0 with *fd connected or on its
 * way (poll for POLLOUT, then SO_ERROR says how it went), else the errno.
 */
int hoop__sock_connect_start(const struct hoop_addr *addr, int *fd);

/* Moves exactly len bytes, waiting until deadline_ms at most. */
hoop_result_t hoop__sock_send_all(struct hoop_comm *comm, int fd,
                                  const void *buf, size_t len,
                                  long long deadline_ms, const char *peer);
hoop_result_t hoop__sock_recv_all(struct hoop_comm *comm, int fd, void *buf,
                                  size_t len, long long deadline_ms,
                                  const char *peer);

hoop_result_t hoop__sock_set_nonblocking(int fd);

/* Closes fd if it is open and marks it closed. */
void hoop__sock_close(int *fd);

#endif /* HOOP_SOCKET_H */
