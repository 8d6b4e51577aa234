/*
 * TCP socket helpers shared by the bootstrap, connection set-up and the tcp
 * transport.  The blocking helpers here are for set-up only and are all
 * bounded by a deadline; the data path uses non-blocking sockets directly.
 * Every error message names the peer through `peer`, a human description
 * such as "rank 3 (10.0.0.2:41234)".
 */
#ifndef HOOP_SOCKET_H
#define HOOP_SOCKET_H

#include <netinet/in.h>
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

/* Parses "host:port" or "[v6]:port"; the host may be a name. */
hoop_result_t hoop__addr_parse(const char *text, struct hoop_addr *addr);

/* The first IPv4 (else IPv6) address of interface `ifname`. */
hoop_result_t hoop__addr_of_interface(const char *ifname,
                                      struct hoop_addr *addr);

/* Binds and listens on addr (port 0 picks one); *bound gets the result. */
hoop_result_t hoop__sock_listen(const struct hoop_addr *addr, int *fd,
                                struct hoop_addr *bound);

/*
 * Connects to addr, retrying refused connections (the listener may not be
 * up yet) until deadline_ms on the hoop__now_ms() clock.
 */
hoop_result_t hoop__sock_connect(struct hoop_comm *comm,
                                 const struct hoop_addr *addr,
                                 long long deadline_ms, const char *peer,
                                 int *fd);

/* Accepts one connection, waiting until deadline_ms at most. */
hoop_result_t hoop__sock_accept(struct hoop_comm *comm, int listen_fd,
                                long long deadline_ms, const char *what,
                                int *fd, struct hoop_addr *from);

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
