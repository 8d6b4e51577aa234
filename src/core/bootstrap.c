/* Rendezvous through rank 0; see bootstrap.h. */
#include "core/bootstrap.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/conn.h"

/*
 * Listening sockets opened by hoop__uid_create, waiting for this process's
 * rank 0 to adopt them.  Keeping the socket open from id creation on means
 * the port cannot be taken by someone else in between.
 */
struct root_listener {
  uint64_t comm_id;
  int fd;
};
static struct root_listener *root_listeners;
static size_t root_listeners_count, root_listeners_cap;
static pthread_mutex_t root_listeners_lock = PTHREAD_MUTEX_INITIALIZER;

static int adopt_root_listener(uint64_t comm_id) {
  int fd = -1;
  pthread_mutex_lock(&root_listeners_lock);
  for (size_t i = 0; i < root_listeners_count; i++) {
    if (root_listeners[i].comm_id == comm_id) {
      fd = root_listeners[i].fd;
      root_listeners[i] = root_listeners[--root_listeners_count];
      break;
    }
  }
  pthread_mutex_unlock(&root_listeners_lock);
  return fd;
}

hoop_result_t hoop__uid_create(const struct hoop_addr *root,
                               uint64_t comm_id,
                               const struct hoop_auth_key *key,
                               struct hoop_uid *uid) {
  int fd;
  struct hoop_addr bound;
  HOOP_CHECK(hoop__sock_listen(root, &fd, &bound));
  /*
   * The table grows without bound: a process that makes ids for ranks it
   * forks (as the tests do) keeps one listener per id it never adopts.
   */
  pthread_mutex_lock(&root_listeners_lock);
  int stored = 0;
  if (root_listeners_count == root_listeners_cap) {
    size_t cap = root_listeners_cap ? root_listeners_cap * 2 : 16;
    struct root_listener *t =
        realloc(root_listeners, cap * sizeof *root_listeners);
    if (t != NULL) {
      root_listeners = t;
      root_listeners_cap = cap;
    }
  }
  if (root_listeners_count < root_listeners_cap) {
    root_listeners[root_listeners_count++] =
        (struct root_listener){comm_id, fd};
    stored = 1;
  }
  pthread_mutex_unlock(&root_listeners_lock);
  if (!stored) {
    close(fd);
    return HOOP_ERROR(NULL, HOOP_ERR_NO_MEMORY,
                      "hoop_get_unique_id: no memory to keep the listener");
  }
  memset(uid, 0, sizeof *uid);
  uid->magic = HOOP_UID_MAGIC;
  uid->comm_id = comm_id;
  uid->root = bound;
  uid->key = *key;
  return HOOP_SUCCESS;
}

void hoop__uid_release(uint64_t comm_id) {
  int fd = adopt_root_listener(comm_id);
  if (fd >= 0)
    close(fd);
}

hoop_result_t hoop__uid_parse(const hoop_unique_id_t *id,
                              struct hoop_uid *uid) {
  memcpy(uid, id->internal, sizeof *uid);
  if (uid->magic != HOOP_UID_MAGIC ||
      (uid->root.family != AF_INET && uid->root.family != AF_INET6))
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "unique id is not one made by hoop_get_unique_id "
                      "(bad magic or address family)");
  return HOOP_SUCCESS;
}

/*
 * Stable hashes of this machine (its kernel's boot: ranks that share it
 * share its cores) and of this host: the boot, hostname and network
 * namespace.  Containers on one kernel share the boot id but not
 * (usually) their hostname or /dev/shm, and emulated hosts differ by
 * namespace; ranks with equal host hashes can share memory.  Without a
 * boot id each host counts as a machine of its own.
 */
static void identify(struct hoop_peer_info *me) {
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f != NULL) {
    if (fgets(boot, sizeof boot, f) == NULL)
      boot[0] = '\0';
    fclose(f);
  }
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  uint64_t machine = hoop__fnv1a_text(HOOP_FNV1A_BASIS, boot);
  uint64_t h = hoop__fnv1a_text(machine, host);
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0)
    h = hoop__fnv1a_step(h, (uint64_t)st.st_ino);
  me->host_hash = h;
  me->machine_hash = boot[0] != '\0' ? machine : h;
}

int16_t hoop__dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return 0;
  int16_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < INT16_MAX;)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/*
 * What this rank could use.  GPUs are counted from the kernel's view
 * (driver directories) so that hoop-info shows them even in a build
 * without CUDA.  Each transport publishes what its peers need to judge
 * and join this rank (core/conn.h).
 */
static void learn_capabilities(struct hoop_peer_info *me) {
  me->cuda_devices = hoop__dir_entries("/proc/driver/nvidia/gpus");
  hoop__transports_publish(me);
}

static void fill_self(struct hoop_comm *comm, const struct hoop_addr *listen) {
  struct hoop_peer_info *me = &comm->peers[comm->rank];
  memset(me, 0, sizeof *me);
  me->addr = *listen;
  identify(me);
  me->rank = comm->rank;
  me->pid = (int32_t)getpid();
  gethostname(me->hostname, sizeof me->hostname - 1);
  learn_capabilities(me);
}

/*
 * Opens the data listener on `ip` (port chosen by the kernel), or on the
 * address of the interface HOOP_SOCKET_IFNAME chose.
 */
static hoop_result_t open_data_listener(struct hoop_comm *comm,
                                        const struct hoop_addr *ip) {
  const struct hoop_iface *iface = &comm->iface;
  struct hoop_addr want = iface->name[0] != '\0' ? iface->addr : *ip;
  want.port = 0;
  hoop_result_t res = hoop__comm_listen(comm, &want);
  if (res != HOOP_SUCCESS && iface->name[0] != '\0') {
    char why[HOOP_ERROR_MAX];
    snprintf(why, sizeof why, "%s", hoop_last_error());
    return HOOP_ERROR(comm, res, "%s (the address of %s, which %s chose)",
                      why, iface->name, iface->setting);
  }
  if (res != HOOP_SUCCESS)
    return res;
  fill_self(comm, &comm->listener.addr);
  return HOOP_SUCCESS;
}

static void send_reply_to_all(int *fds, int nranks,
                              const struct hoop_reply *r,
                              long long deadline) {
  for (int i = 1; i < nranks; i++) {
    if (fds[i] >= 0)
      hoop__sock_send_all(NULL, fds[i], r, sizeof *r, deadline, "a rank");
  }
}

/*
 * Checks a well-formed hello against this communicator; fills `why` if it
 * is not one of its missing ranks.
 */
static int hello_ok(const struct hoop_comm *comm, const struct hoop_hello *h,
                    const int *fds, char *why, size_t len) {
  if (h->comm_id != comm->comm_id) {
    snprintf(why, len, "a rank of another communicator (id %016llx) "
                       "connected to this one's rendezvous",
             (unsigned long long)h->comm_id);
    return 0;
  }
  if (h->nranks != comm->nranks) {
    snprintf(why, len, "rank %d says the communicator has %d ranks, rank 0 "
                       "says %d",
             h->rank, h->nranks, comm->nranks);
    return 0;
  }
  if (h->rank == 0) {
    snprintf(why, len, "a process joined as rank 0 of %d", comm->nranks);
    return 0;
  }
  if (fds[h->rank] >= 0) {
    snprintf(why, len, "two processes joined as rank %d", h->rank);
    return 0;
  }
  return 1;
}

static void list_missing(const int *fds, int nranks, char *buf, size_t len) {
  size_t used = 0;
  int shown = 0;
  buf[0] = '\0';
  for (int i = 1; i < nranks && used + 16 < len; i++) {
    if (fds[i] >= 0)
      continue;
    if (shown++ == 8) {
      snprintf(buf + used, len - used, ", ...");
      return;
    }
    used += (size_t)snprintf(buf + used, len - used, "%s%d",
                             shown > 1 ? ", " : "", i);
  }
}

/*
 * Tells a connection why it cannot join, briefly: one that does not read
 * must not hold up the others.
 */
static void refuse_hello(int fd, const char *why, long long deadline) {
  struct hoop_reply bad = {.status = HOOP_ERR_MISMATCH};
  snprintf(bad.message, sizeof bad.message, "%s", why);
  long long soon = hoop__now_ms() + 100;
  hoop__sock_send_all(NULL, fd, &bad, sizeof bad,
                      soon < deadline ? soon : deadline, "a rank");
  close(fd);
}

/*
 * Takes the hello of a connection that proved itself: the rank joins, or
 * the connection is told why not.  A malformed hello is ignored; a member
 * that disagrees dooms the job.
 */
static hoop_result_t take_hello(struct hoop_comm *comm, int *fds,
                                const struct hoop_proven *c,
                                long long deadline, int *joined) {
  char why[200], astr[HOOP_ADDR_STRLEN];
  struct hoop_hello h;
  bool ok = hoop__hello_parse(c->payload, sizeof h, &h, why, sizeof why);
  if (ok && (h.rank != c->hs.from || h.comm_id != comm->comm_id)) {
    snprintf(why, sizeof why, "a hello as rank %d of communicator %016llx "
                              "on a connection proved as rank %d",
             h.rank, (unsigned long long)h.comm_id, c->hs.from);
    ok = false;
  }
  if (!ok) {
    HOOP_WARN("rendezvous: ignored %s: %s", hoop__addr_str(&c->from, astr),
              why);
    refuse_hello(c->fd, why, deadline);
    return HOOP_SUCCESS;
  }
  if (hello_ok(comm, &h, fds, why, sizeof why)) {
    fds[h.rank] = c->fd;
    comm->peers[h.rank] = h.info;
    ++*joined;
    return HOOP_SUCCESS;
  }
  refuse_hello(c->fd, why, deadline);
  return HOOP_ERROR(comm, HOOP_ERR_MISMATCH, "rendezvous: %s", why);
}

_Static_assert(sizeof(struct hoop_hello) <= HOOP_LISTENER_PAYLOAD_MAX,
               "a hello fits what the rendezvous listener reads");

static size_t hello_bytes(int32_t channel) {
  (void)channel;
  return sizeof(struct hoop_hello);
}

/*
 * Takes the ranks' hellos as their connections prove themselves, through
 * a listener that reads them all at once, each with its own deadline, so
 * that connections which never speak or never prove themselves hold up no
 * one.  Takes the rendezvous socket *lfd over (and sets it to -1): the
 * listener closes it, whether it opens or not.  At the deadline an
 * elastic job goes on with the ranks that came.
 */
static hoop_result_t gather_hellos(struct hoop_comm *comm, int *lfd,
                                   int *fds, long long deadline,
                                   bool elastic) {
  struct hoop_listener l = {
      .key = comm->auth_key,
      .comm_id = comm->comm_id,
      .rank = 0,
      .nranks = comm->nranks,
      .channel_lo = HOOP_RENDEZVOUS_CHANNEL,
      .channel_hi = HOOP_RENDEZVOUS_CHANNEL,
      .payload_bytes = hello_bytes,
      .max_unproven = HOOP_LISTENER_STRANGERS +
                      (comm->nranks < 960 ? comm->nranks : 960),
  };
  hoop_result_t res = hoop__listener_open(&l, NULL, *lfd);
  *lfd = -1;
  if (res != HOOP_SUCCESS)
    return hoop__error_attach(comm, res);
  for (int joined = 1; joined < comm->nranks;) {
    long long left = deadline - hoop__now_ms();
    if (left <= 0 && elastic)
      break;
    if (left <= 0) {
      char missing[128];
      list_missing(fds, comm->nranks, missing, sizeof missing);
      res = HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                       "timed out waiting for a connection from rank(s) %s "
                       "of %d at the rendezvous (waited %d ms)",
                       missing, comm->nranks, comm->timeout_ms);
      break;
    }
    struct hoop_proven c;
    bool got;
    res = hoop__listener_poll(&l, (int)left, &c, &got);
    if (res != HOOP_SUCCESS) {
      hoop__error_attach(comm, res);
      break;
    }
    if (got && (res = take_hello(comm, fds, &c, deadline, &joined)) !=
                   HOOP_SUCCESS)
      break;
  }
  hoop__listener_close(&l);
  return res;
}

/* This rank's place in the job as it formed. */
static void take_place(struct hoop_comm *comm, int rank, int nranks) {
  comm->peers[rank] = comm->peers[comm->rank];
  comm->peers[rank].rank = rank;
  comm->rank = comm->listener.rank = rank;
  comm->nranks = comm->listener.nranks = nranks;
}

/*
 * Whether a rank's rendezvous connection has closed: it said hello, then
 * went (died) before the job formed.
 */
static bool gone(int fd) {
  char byte;
  ssize_t got = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return got == 0 ||
         (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/*
 * An elastic job forms of the ranks that came and are still there,
 * numbered again in their order; the rest are left out, as a shrink
 * would leave them.
 */
static void form_of_those_here(struct hoop_comm *comm, int *fds) {
  int n = comm->nranks, m = 1;
  for (int i = 1; i < n; i++) {
    if (fds[i] >= 0 && gone(fds[i])) {
      close(fds[i]);
      fds[i] = -1;
    }
  }
  char missing[128];
  list_missing(fds, n, missing, sizeof missing);
  for (int i = 1; i < n; i++) {
    if (fds[i] < 0)
      continue;
    comm->peers[m] = comm->peers[i];
    comm->peers[m].rank = m;
    fds[m] = fds[i];
    if (m++ != i)
      fds[i] = -1;
  }
  if (m == n)
    return;
  HOOP_WARN("rendezvous: rank(s) %s of %d did not come within %d ms or went "
            "before the job formed; it forms of the %d that did "
            "(HOOP_ELASTIC=1), numbered again in their order",
            missing, n, comm->timeout_ms / 2, m);
  take_place(comm, 0, m);
}

static hoop_result_t root_gather(struct hoop_comm *comm, int *lfd,
                                 long long deadline, bool elastic) {
  hoop_result_t res = HOOP_SUCCESS;
  int asked = comm->nranks;
  int *fds = malloc(sizeof(int) * (size_t)asked);
  if (fds == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "bootstrap table");
  for (int i = 0; i < asked; i++)
    fds[i] = -1;
  struct hoop_reply rep = {.status = HOOP_SUCCESS};
  memcpy(rep.session, comm->listener.session, sizeof rep.session);
  /*
   * An elastic job waits half the timeout for its ranks, so that those
   * that came still wait for the answer when it goes out.
   */
  long long wait_until =
      elastic ? hoop__now_ms() + comm->timeout_ms / 2 : deadline;
  HOOP_CHECK_GOTO(gather_hellos(comm, lfd, fds, wait_until, elastic), res,
                  fail);
  if (elastic)
    form_of_those_here(comm, fds);
  int n = comm->nranks;
  rep.nranks = n;
  for (int i = 1; i < n; i++) {
    rep.rank = i;
    res = hoop__sock_send_all(comm, fds[i], &rep, sizeof rep, deadline,
                              "a rank");
    if (res == HOOP_SUCCESS)
      res = hoop__sock_send_all(comm, fds[i], comm->peers,
                                sizeof *comm->peers * (size_t)n, deadline,
                                "a rank");
    if (res != HOOP_SUCCESS)
      goto fail;
  }
  goto out;
fail:
  rep.status = res;
  snprintf(rep.message, sizeof rep.message, "rank 0: %s", comm->last_error);
  send_reply_to_all(fds, asked, &rep, deadline);
out:
  for (int i = 0; i < asked; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  free(fds);
  return res;
}

static hoop_result_t receive_reply(struct hoop_comm *comm, int fd,
                                   long long deadline, const char *root_desc,
                                   struct hoop_reply *rep) {
  unsigned char bytes[sizeof *rep];
  char why[200];
  hoop_result_t res =
      hoop__sock_recv_all(comm, fd, bytes, sizeof bytes, deadline, root_desc);
  if (res == HOOP_ERR_TIMEOUT)
    return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                      "rendezvous: %s did not complete within %d ms (are "
                      "all %d ranks started?)",
                      root_desc, comm->timeout_ms, comm->nranks);
  if (res != HOOP_SUCCESS)
    return res;
  if (!hoop__reply_parse(bytes, sizeof bytes, rep, why, sizeof why))
    return HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                      "rendezvous: %s answered with %s", root_desc, why);
  return HOOP_SUCCESS;
}

/* Receives the peer table into comm->peers, every entry checked. */
static hoop_result_t receive_table(struct hoop_comm *comm, int fd,
                                   long long deadline,
                                   const char *root_desc) {
  size_t bytes = sizeof *comm->peers * (size_t)comm->nranks;
  void *table = malloc(bytes);
  if (table == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "rendezvous: peer table");
  char why[200];
  hoop_result_t res =
      hoop__sock_recv_all(comm, fd, table, bytes, deadline, root_desc);
  if (res == HOOP_SUCCESS &&
      !hoop__peer_table_parse(table, bytes, comm->nranks, comm->peers, why,
                              sizeof why))
    res = HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                     "rendezvous: %s sent a bad peer table: %s", root_desc,
                     why);
  free(table);
  return res;
}

static hoop_result_t join_root(struct hoop_comm *comm,
                               const struct hoop_uid *uid,
                               long long deadline) {
  char root_desc[96], astr[HOOP_ADDR_STRLEN];
  snprintf(root_desc, sizeof root_desc, "rank 0 (rendezvous %s)",
           hoop__addr_str(&uid->root, astr));
  int fd = -1;
  hoop_result_t res;
  HOOP_CHECK(hoop__comm_dial(comm, &uid->root, 0, HOOP_RENDEZVOUS_CHANNEL,
                             deadline, root_desc, &fd));
  /* Listen for data on the address that routes to rank 0. */
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  struct hoop_addr local;
  hoop__addr_from_sockaddr((struct sockaddr *)&ss, &local);
  HOOP_CHECK_GOTO(open_data_listener(comm, &local), res, out);
  struct hoop_hello h = {HOOP_WIRE_MAGIC, HOOP_WIRE_VERSION, comm->comm_id,
                         comm->rank, comm->nranks, comm->peers[comm->rank]};
  HOOP_CHECK_GOTO(hoop__sock_send_all(comm, fd, &h, sizeof h, deadline,
                                      root_desc),
                  res, out);
  struct hoop_reply rep;
  res = receive_reply(comm, fd, deadline, root_desc, &rep);
  if (res != HOOP_SUCCESS)
    goto out;
  if (rep.status != HOOP_SUCCESS) {
    res = HOOP_ERROR(comm, (hoop_result_t)rep.status,
                     "rendezvous failed: %s", rep.message);
    goto out;
  }
  memcpy(comm->listener.session, rep.session, sizeof rep.session);
  if (rep.nranks > comm->nranks) {
    res = HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                     "rendezvous: %s says the job has %d ranks, not %d",
                     root_desc, rep.nranks, comm->nranks);
    goto out;
  }
  if (rep.nranks < comm->nranks) {
    HOOP_WARN("rendezvous: the job formed of %d of its %d ranks "
              "(HOOP_ELASTIC=1): rank %d as launched is now rank %d",
              rep.nranks, comm->nranks, comm->rank, rep.rank);
    take_place(comm, rep.rank, rep.nranks);
  } else if (rep.rank != comm->rank) {
    res = HOOP_ERROR(comm, HOOP_ERR_MISMATCH,
                     "rendezvous: %s made rank %d rank %d of all %d",
                     root_desc, comm->rank, rep.rank, comm->nranks);
    goto out;
  }
  res = receive_table(comm, fd, deadline, root_desc);
out:
  close(fd);
  return res;
}

hoop_result_t hoop__bootstrap(struct hoop_comm *comm,
                              const struct hoop_uid *uid) {
  long long deadline = hoop__now_ms() + comm->timeout_ms;
  comm->comm_id = uid->comm_id;
  comm->auth_key = uid->key;
  if (comm->rank != 0)
    return join_root(comm, uid, deadline);

  int lfd = adopt_root_listener(uid->comm_id);
  if (lfd < 0) {
    struct hoop_addr bound;
    HOOP_CHECK(hoop__sock_listen(&uid->root, &lfd, &bound));
  }
  hoop_result_t res = open_data_listener(comm, &uid->root);
  if (res == HOOP_SUCCESS)
    res = hoop__auth_random(comm->listener.session,
                            sizeof comm->listener.session);
  if (res == HOOP_SUCCESS && comm->nranks > 1)
    res = root_gather(comm, &lfd, deadline,
                      (uid->flags & HOOP_UID_ELASTIC) != 0);
  hoop__sock_close(&lfd);
  return res;
}
