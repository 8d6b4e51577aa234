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
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"

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
                               uint64_t comm_id, struct hoop_uid *uid) {
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

/* Entries in a directory, or 0 when it does not exist. */
static int16_t count_entries(const char *dir) {
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
 * What this rank could use.  Devices are counted from the kernel's view
 * (driver directories) so that hoop-info shows them even in a build
 * without CUDA or verbs.
 */
static void learn_capabilities(struct hoop_peer_info *me) {
  if (access("/dev/shm", W_OK) == 0)
    me->caps |= HOOP_CAP_SHM;
  me->cuda_devices = count_entries("/proc/driver/nvidia/gpus");
  me->verbs_devices = count_entries("/sys/class/infiniband");
}

struct hello {
  uint32_t magic;
  uint32_t version;
  uint64_t comm_id;
  int32_t rank;
  int32_t nranks;
  struct hoop_peer_info info;
};

struct reply {
  int32_t status; /* hoop_result_t */
  char message[256];
};

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
  struct hoop_addr bound;
  hoop_result_t res = hoop__sock_listen(&want, &comm->listen_fd, &bound);
  if (res != HOOP_SUCCESS && iface->name[0] != '\0') {
    char why[HOOP_ERROR_MAX];
    snprintf(why, sizeof why, "%s", hoop_last_error());
    return HOOP_ERROR(comm, res, "%s (the address of %s, which %s chose)",
                      why, iface->name, iface->setting);
  }
  if (res != HOOP_SUCCESS)
    return res;
  fill_self(comm, &bound);
  return HOOP_SUCCESS;
}

static void send_reply_to_all(int *fds, int nranks, const struct reply *r,
                              long long deadline) {
  for (int i = 1; i < nranks; i++) {
    if (fds[i] >= 0)
      hoop__sock_send_all(NULL, fds[i], r, sizeof *r, deadline, "a rank");
  }
}

/* Checks one hello against what rank 0 expects; fills `why` if bad. */
static int hello_ok(const struct hoop_comm *comm, const struct hello *h,
                    const int *fds, char *why, size_t len) {
  if (h->magic != HOOP_WIRE_MAGIC || h->version != HOOP_WIRE_VERSION) {
    snprintf(why, len, "a process that is not hoop (or another protocol "
                       "version %u) connected to the rendezvous",
             h->version);
    return 0;
  }
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
  if (h->rank <= 0 || h->rank >= comm->nranks) {
    snprintf(why, len, "a process joined as rank %d of %d", h->rank,
             comm->nranks);
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
 * A rank sends its hello as soon as it has connected; a connection that
 * has not sent one by then is not a rank (a port scan, a health check, a
 * stuck process) and is dropped, so that strays cannot pile up.
 */
#define HELLO_MS 5000

/* An accepted connection whose hello is still coming in. */
struct pending_hello {
  int fd;
  long long deadline;
  size_t got;
  struct hoop_addr from;
  struct hello h;
};

static void drop_pending(struct pending_hello *p, int *npending, int i,
                         const char *why) {
  char astr[HOOP_ADDR_STRLEN];
  if (why != NULL)
    HOOP_INFO("rendezvous: dropped the connection from %s after %zu of %zu "
              "hello bytes: %s",
              hoop__addr_str(&p[i].from, astr), p[i].got, sizeof p[i].h,
              why);
  close(p[i].fd);
  p[i] = p[--*npending];
}

/*
 * Reads what connection i has sent.  Returns 1 when its hello is
 * complete, 0 when more is to come, -1 when the connection was dropped.
 */
static int read_hello(struct pending_hello *p, int *npending, int i) {
  struct pending_hello *c = &p[i];
  ssize_t n = recv(c->fd, (char *)&c->h + c->got, sizeof c->h - c->got, 0);
  if (n > 0) {
    c->got += (size_t)n;
    return c->got == sizeof c->h;
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return 0;
  drop_pending(p, npending, i, n == 0 ? "closed" : strerror(errno));
  return -1;
}

/*
 * Takes a complete hello: the rank joins, or the connection is told why
 * not.  A stray process is ignored; a wrong member dooms the job.
 */
static hoop_result_t take_hello(struct hoop_comm *comm, int *fds,
                                struct pending_hello *c, long long deadline,
                                int *joined) {
  char why[200];
  if (hello_ok(comm, &c->h, fds, why, sizeof why)) {
    fds[c->h.rank] = c->fd;
    comm->peers[c->h.rank] = c->h.info;
    ++*joined;
    return HOOP_SUCCESS;
  }
  struct reply bad = {HOOP_ERR_MISMATCH, ""};
  snprintf(bad.message, sizeof bad.message, "%s", why);
  /* Short: a stray that does not read must not hold up the others. */
  long long soon = hoop__now_ms() + 100;
  hoop__sock_send_all(NULL, c->fd, &bad, sizeof bad,
                      soon < deadline ? soon : deadline, "a rank");
  close(c->fd);
  if (c->h.magic != HOOP_WIRE_MAGIC || c->h.comm_id != comm->comm_id) {
    char astr[HOOP_ADDR_STRLEN];
    HOOP_INFO("rendezvous: ignored %s: %s", hoop__addr_str(&c->from, astr),
              why);
    return HOOP_SUCCESS;
  }
  return HOOP_ERROR(comm, HOOP_ERR_MISMATCH, "rendezvous: %s", why);
}

/*
 * Accepts connections and reads their hellos all at once, each with its
 * own deadline: reading them one at a time let a single connection that
 * never spoke hold up every rank until the timeout.
 */
static hoop_result_t gather_hellos(struct hoop_comm *comm, int lfd, int *fds,
                                   long long deadline) {
  int n = comm->nranks, joined = 1, npending = 0, cap = 0;
  struct pending_hello *p = NULL;
  struct pollfd *pfds = NULL;
  hoop_result_t res = HOOP_SUCCESS;
  while (joined < n) {
    long long now = hoop__now_ms();
    for (int i = npending - 1; i >= 0; i--) {
      if (p[i].deadline <= now)
        drop_pending(p, &npending, i, "no hello in time");
    }
    if (now >= deadline) {
      char missing[128];
      list_missing(fds, n, missing, sizeof missing);
      res = HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                       "timed out waiting for a connection from rank(s) %s "
                       "of %d at the rendezvous (waited %d ms)",
                       missing, n, comm->timeout_ms);
      goto out;
    }
    if (npending + 1 > cap) {
      int next = cap ? cap * 2 : n + 1;
      struct pending_hello *np = realloc(p, sizeof *p * (size_t)next);
      if (np != NULL)
        p = np;
      struct pollfd *nf = realloc(pfds, sizeof *pfds * ((size_t)next + 1));
      if (nf != NULL)
        pfds = nf;
      if (np == NULL || nf == NULL) {
        res = HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "rendezvous table");
        goto out;
      }
      cap = next;
    }
    long long wake = deadline;
    pfds[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (int i = 0; i < npending; i++) {
      pfds[i + 1] = (struct pollfd){.fd = p[i].fd, .events = POLLIN};
      if (p[i].deadline < wake)
        wake = p[i].deadline;
    }
    int rc = poll(pfds, (nfds_t)npending + 1, (int)(wake - now));
    if (rc < 0 && errno != EINTR) {
      res = HOOP_ERROR(comm, HOOP_ERR_SYSTEM, "rendezvous: poll(): %s",
                       strerror(errno));
      goto out;
    }
    if (rc <= 0)
      continue;
    /* Backwards, so that dropping entry i moves one already looked at. */
    for (int i = npending - 1; i >= 0 && joined < n; i--) {
      if (pfds[i + 1].revents == 0 || read_hello(p, &npending, i) != 1)
        continue;
      struct pending_hello c = p[i];
      p[i] = p[--npending];
      HOOP_CHECK_GOTO(take_hello(comm, fds, &c, deadline, &joined), res,
                      out);
    }
    if ((pfds[0].revents & POLLIN) && joined < n) {
      struct pending_hello *c = &p[npending];
      HOOP_CHECK_GOTO(hoop__sock_accept(comm, lfd, deadline, "a rank",
                                        &c->fd, &c->from),
                      res, out);
      c->deadline = hoop__now_ms() + HELLO_MS;
      c->got = 0;
      npending++;
    }
  }
out:
  for (int i = 0; i < npending; i++)
    close(p[i].fd);
  free(pfds);
  free(p);
  return res;
}

static hoop_result_t root_gather(struct hoop_comm *comm, int lfd,
                                 long long deadline) {
  hoop_result_t res = HOOP_SUCCESS;
  int n = comm->nranks;
  int *fds = malloc(sizeof(int) * (size_t)n);
  if (fds == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "bootstrap table");
  for (int i = 0; i < n; i++)
    fds[i] = -1;
  struct reply rep = {HOOP_SUCCESS, ""};
  HOOP_CHECK_GOTO(gather_hellos(comm, lfd, fds, deadline), res, fail);
  for (int i = 1; i < n; i++) {
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
  send_reply_to_all(fds, n, &rep, deadline);
out:
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0)
      close(fds[i]);
  free(fds);
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
  HOOP_CHECK(hoop__sock_connect(comm, &uid->root, deadline, root_desc, &fd));
  /* Listen for data on the address that routes to rank 0. */
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  struct hoop_addr local;
  hoop__addr_from_sockaddr((struct sockaddr *)&ss, &local);
  HOOP_CHECK_GOTO(open_data_listener(comm, &local), res, out);
  struct hello h = {HOOP_WIRE_MAGIC, HOOP_WIRE_VERSION, comm->comm_id,
                    comm->rank, comm->nranks, comm->peers[comm->rank]};
  HOOP_CHECK_GOTO(hoop__sock_send_all(comm, fd, &h, sizeof h, deadline,
                                      root_desc),
                  res, out);
  struct reply rep;
  res = hoop__sock_recv_all(comm, fd, &rep, sizeof rep, deadline, root_desc);
  if (res == HOOP_ERR_TIMEOUT)
    res = HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                     "rendezvous: %s did not complete within %d ms (are "
                     "all %d ranks started?)",
                     root_desc, comm->timeout_ms, comm->nranks);
  if (res != HOOP_SUCCESS)
    goto out;
  if (rep.status != HOOP_SUCCESS) {
    rep.message[sizeof rep.message - 1] = '\0';
    res = HOOP_ERROR(comm, (hoop_result_t)rep.status,
                     "rendezvous failed: %s", rep.message);
    goto out;
  }
  HOOP_CHECK_GOTO(hoop__sock_recv_all(comm, fd, comm->peers,
                                      sizeof *comm->peers *
                                          (size_t)comm->nranks,
                                      deadline, root_desc),
                  res, out);
out:
  close(fd);
  return res;
}

hoop_result_t hoop__bootstrap(struct hoop_comm *comm,
                              const struct hoop_uid *uid) {
  long long deadline = hoop__now_ms() + comm->timeout_ms;
  comm->comm_id = uid->comm_id;
  if (comm->rank != 0)
    return join_root(comm, uid, deadline);

  int lfd = adopt_root_listener(uid->comm_id);
  if (lfd < 0) {
    struct hoop_addr bound;
    HOOP_CHECK(hoop__sock_listen(&uid->root, &lfd, &bound));
  }
  hoop_result_t res = open_data_listener(comm, &uid->root);
  if (res == HOOP_SUCCESS && comm->nranks > 1)
    res = root_gather(comm, lfd, deadline);
  close(lfd);
  return res;
}
