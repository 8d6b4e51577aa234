/*
 * Shared-memory transport for ranks on one host.
 *
 * A connection is one POSIX shared memory segment with two FIFOs, one per
 * direction, run by the protocol in fifo.h: slots of HOOP_SHM_SLOT_BYTES,
 * credits, aligned streams.  Here the rings and their head and tail (each
 * on its own cache line) are in the segment, so a byte is copied once into
 * shared memory and once out of it, and publishing a position is a store.
 *
 * The TCP socket made to set the connection up stays open.  It carries a
 * wake-up byte to a rank asleep in poll(), sent only when that rank has
 * said (in its waiting flag) that it sleeps, and its end-of-file tells each
 * side that the other exited or broke, which memory alone cannot.
 *
 * The segment is unlinked as soon as both ranks have mapped it, so nothing
 * stays in /dev/shm after a crash, except when the creator dies in the
 * milliseconds between creating it and its peer mapping it.  Its name
 * begins "/hoop-<creator's pid>-", which is how hoop-run finds and removes
 * what a dead rank left (tools/hoop-run/procs.c, remove_shm_left_by).
 *
 * A segment is sparse: only its header page is there when the pair
 * connects.  Each writer makes its ring's pages exist before it first
 * writes into them, SHM_GROW_BYTES at a time (grow, below), and streams
 * restart at the ring's start once they would begin SHM_RESTART_BYTES in,
 * so a pair that carries 4 KiB calls holds a few pages, not two rings of
 * 2 MiB: 64 ranks held 501 MB of /dev/shm when every segment was filled
 * at connect.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "transport/fifo.h"
#include "transport/params.h"
#include "transport/shm.h"
#include "transport/transport.h"

#define SHM_MAGIC 0x6d656d73706f6f68ULL /* "hoopsmem" */
#define SHM_HEADER_BYTES 4096
/*
 * A ring's pages are made in steps of this many bytes.  Each step is one
 * system call, on a path that then copies as many bytes; smaller steps
 * would hold less memory for small calls (see SHM_RESTART_BYTES) and cost
 * more calls on the first trip round the ring.
 */
#define SHM_GROW_BYTES (64 * 1024)
/*
 * A stream that would begin this far into the ring or further begins at
 * its start (fifo.h): calls of up to this size keep to the first two
 * steps of the ring.  It is also the least that a run of small streams
 * may leave unread before the writer waits, as much as TCP's socket
 * buffers hold at their smallest (HOOP_SOCKBUF_BYTES).
 */
#define SHM_RESTART_BYTES (64 * 1024)

bool hoop__shm_grow_by_fallocate;

/* Linux 5.14; older headers lack it, older kernels refuse it (EINVAL). */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

struct shm_fifo {
  _Alignas(64) uint64_t head;
  _Alignas(64) uint64_t tail;
  _Alignas(64) uint32_t reader_waiting;
  _Alignas(64) uint32_t writer_waiting;
};

/* The start of a segment; the rings follow at SHM_HEADER_BYTES. */
struct shm_segment {
  uint64_t magic;
  uint64_t ring_bytes;
  struct shm_fifo fifo[2]; /* [0] lower rank to higher, [1] back */
};
_Static_assert(sizeof(struct shm_segment) <= SHM_HEADER_BYTES,
               "the segment header fits its page");

struct shm_conn {
  struct hoop_conn base;
  int fd; /* set-up, wake-ups, and the peer's end */
  struct shm_segment *seg;
  size_t seg_bytes;
  /*
   * The segment's descriptor where the kernel cannot populate a range of
   * a mapping (MADV_POPULATE_WRITE, Linux 5.14): grow then allocates the
   * pages with posix_fallocate.  -1 otherwise, the usual case.
   */
  int seg_fd;
  struct shm_fifo *out; /* this rank writes */
  struct shm_fifo *in;  /* this rank reads */
  struct hoop_fifo fifo;
};

/*
 * What a rank publishes for shm: whether it can create POSIX shared
 * memory segments (a writable /dev/shm; containers may lack one).
 */
#define SHM_BLOB_VERSION 1

struct shm_blob {
  uint8_t version;
  uint8_t can_create; /* 0 or 1 */
};

static void shm_publish(int rank, uint8_t *blob) {
  (void)rank;
  struct shm_blob b = {SHM_BLOB_VERSION, access("/dev/shm", W_OK) == 0};
  memcpy(blob, &b, sizeof b);
}

static bool shm_blob_parse(const uint8_t *blob, size_t len, int rank,
                           char *why, size_t why_len) {
  struct shm_blob b;
  memcpy(&b, blob, sizeof b);
  if (b.version != SHM_BLOB_VERSION || b.can_create > 1) {
    snprintf(why, why_len, "rank %d's shm facts have version %u and "
             "segments %u (this hoop: version %u)",
             rank, b.version, b.can_create, SHM_BLOB_VERSION);
    return false;
  }
  return true;
}

/* Whether a rank said it can create segments (parsed, or published none). */
static bool can_create(const struct hoop_published *p) {
  struct shm_blob b;
  hoop__published_read(p, &b, sizeof b);
  return b.can_create;
}

static void shm_rank_info(const struct hoop_published *p,
                          hoop_rank_info_t *info) {
  info->shm = can_create(p);
}

static bool shm_can_connect(const struct hoop_published *self,
                            const struct hoop_published *peer) {
  return self->info->host_hash == peer->info->host_hash &&
         can_create(self) && can_create(peer);
}

/* Checked at init, not at the first shm connection, so every rank agrees. */
static hoop_result_t shm_check_settings(void) {
  int64_t slot = hoop__param_shm_slot_bytes(), slots = hoop__param_shm_slots();
  if (slot < 4096 || slot > (64 << 20) || slot % 64 != 0)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_SHM_SLOT_BYTES=%lld is not a multiple of 64 in "
                      "4K..64M",
                      (long long)slot);
  if (slots < 2 || slots > 64)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_SHM_SLOTS=%lld is outside 2..64",
                      (long long)slots);
  if (hoop__parse_shm_stores(hoop__param_shm_stores()) < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_SHM_STORES=%s is not auto, plain or nt",
                      hoop__param_shm_stores());
  return HOOP_SUCCESS;
}

/*
 * Wakes the peer if it said it sleeps.  The caller has just published a
 * head or tail with a sequentially consistent store, and this load of the
 * flag is sequentially consistent too: the store then comes before the
 * load in the single total order of such operations, which is the waker's
 * half of the store-then-load pattern that shm_arm() completes.
 */
static void wake_peer(struct shm_conn *c, uint32_t *waiting) {
  if (__atomic_load_n(waiting, __ATOMIC_SEQ_CST) == 0 ||
      __atomic_exchange_n(waiting, 0, __ATOMIC_SEQ_CST) == 0)
    return;
  char byte = 0;
  /* A full socket already holds wake-ups; a closed one surfaces later. */
  (void)send(c->fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* The bytes are in the shared ring already; the head says so. */
static void publish_head(void *ctx, uint64_t head, size_t n) {
  (void)n;
  struct shm_conn *c = ctx;
  __atomic_store_n(&c->out->head, head, __ATOMIC_SEQ_CST);
  wake_peer(c, &c->out->reader_waiting);
}

static void publish_tail(void *ctx, uint64_t tail) {
  struct shm_conn *c = ctx;
  __atomic_store_n(&c->in->tail, tail, __ATOMIC_SEQ_CST);
  wake_peer(c, &c->in->writer_waiting);
}

/*
 * Makes the pages of this rank's outgoing ring exist up to `upto` bytes
 * from its start, to the next SHM_GROW_BYTES, before the writer stores
 * there.  A store into a page that tmpfs cannot allocate (/dev/shm full)
 * would raise SIGBUS; populating the range instead fails with an error
 * (EFAULT from MADV_POPULATE_WRITE, ENOSPC from posix_fallocate), and the
 * call fails naming the peer and what it needed.  The peer reads only
 * bytes this rank published, so it never touches a page not made here.
 */
static hoop_result_t grow(void *ctx, size_t upto, size_t *ready) {
  struct shm_conn *c = ctx;
  size_t ring = c->fifo.ring, from = *ready;
  size_t to = (upto + SHM_GROW_BYTES - 1) / SHM_GROW_BYTES * SHM_GROW_BYTES;
  if (to > ring)
    to = ring;
  size_t off = (size_t)(c->fifo.out_ring - (char *)c->seg);
  int err;
  if (c->seg_fd >= 0) {
    err = posix_fallocate(c->seg_fd, (off_t)(off + from), (off_t)(to - from));
  } else {
    /* Rings need not start on a page: round out to whole pages. */
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)c->seg + off + from, hi = lo + (to - from);
    lo &= ~(page - 1);
    hi = (hi + page - 1) & ~(page - 1);
    do
      err = madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0 ? 0
                                                                  : errno;
    while (err == EINTR);
  }
  if (err == 0) {
    *ready = to;
    return HOOP_SUCCESS;
  }
  /* EFAULT is the kernel's "a store would have raised SIGBUS". */
  return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM,
                    "shared memory with %s: /dev/shm could not give %zu "
                    "more bytes to this rank's ring (%zu of its %zu bytes "
                    "were there; a pair needs up to %zu): %s (see df "
                    "/dev/shm; smaller HOOP_SHM_SLOTS or HOOP_SHM_SLOT_BYTES "
                    "make rings smaller, HOOP_TRANSPORT=tcp avoids them)",
                    c->base.peer_desc, to - from, from, ring,
                    c->seg_bytes,
                    err == EFAULT ? "no space left there (a store would have "
                                   "raised SIGBUS)"
                                 : strerror(err));
}

static const struct hoop_fifo_signal shm_signal = {
    .publish_head = publish_head,
    .publish_tail = publish_tail,
    .grow = grow,
};

static void shm_begin_stream(struct hoop_conn *conn, int send) {
  hoop__fifo_begin_stream(&((struct shm_conn *)conn)->fifo, send);
}

static hoop_result_t shm_send(struct hoop_conn *conn, const struct iovec *iov,
                              int iovcnt, size_t *sent) {
  struct shm_conn *c = (struct shm_conn *)conn;
  hoop_result_t res = hoop__fifo_send(&c->fifo, iov, iovcnt, sent);
  conn->bytes_sent += *sent;
  return res;
}

static hoop_result_t shm_recv(struct hoop_conn *conn, void *buf, size_t len,
                              bool cold, size_t *got) {
  struct shm_conn *c = (struct shm_conn *)conn;
  *got = hoop__fifo_recv(&c->fifo, buf, len, cold);
  conn->bytes_received += *got;
  return HOOP_SUCCESS;
}

static hoop_result_t shm_peek(struct hoop_conn *conn, size_t want,
                              const void **ptr, size_t *avail) {
  *avail = hoop__fifo_peek(&((struct shm_conn *)conn)->fifo, want, ptr);
  return HOOP_SUCCESS;
}

static void shm_release(struct hoop_conn *conn, size_t len) {
  hoop__fifo_release(&((struct shm_conn *)conn)->fifo, len);
  conn->bytes_received += len;
}

static hoop_result_t peer_gone(struct shm_conn *c, int err) {
  return HOOP_ERROR(NULL, err == 0 ? HOOP_ERR_REMOTE : HOOP_ERR_SYSTEM,
                    "shared memory connection with %s: %s", c->base.peer_desc,
                    err == 0 ? "the peer closed it (it exited, failed or "
                               "aborted)"
                             : strerror(err));
}

/*
 * Reads wake-ups off the socket: *woken when there were any, *closed when
 * the peer is gone.
 */
static hoop_result_t drain_wakeups(struct shm_conn *c, bool *woken,
                                   bool *closed) {
  char buf[64];
  *woken = *closed = false;
  for (;;) {
    ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      *woken = true;
      continue;
    }
    if (n == 0) {
      *closed = true;
      return HOOP_SUCCESS;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return HOOP_SUCCESS;
    if (errno == ECONNRESET) {
      *closed = true;
      return HOOP_SUCCESS;
    }
    if (errno != EINTR)
      return peer_gone(c, errno);
  }
}

static hoop_result_t shm_arm(struct hoop_conn *conn, int send,
                             struct pollfd *pfd, bool *ready) {
  struct shm_conn *c = (struct shm_conn *)conn;
  bool woken, closed;
  /* Drain first: a wake-up sent after the flag below must stay queued. */
  HOOP_CHECK(drain_wakeups(c, &woken, &closed));
  uint32_t *flag = send ? &c->out->writer_waiting : &c->in->reader_waiting;
  __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
  /*
   * Store the flag, then load the peer's head or tail; the peer stores its
   * head or tail, then loads the flag (wake_peer).  Each side must see the
   * other's store or a wake-up is lost: we sleep on an old head while the
   * peer saw no flag.  hoop__fifo_can_move()'s acquire loads are not in
   * the total order of sequentially consistent operations, so without
   * this fence the load may be satisfied before the flag store is visible
   * (POWER does this, as does ARM where acquire loads compile to LDAPR;
   * x86's locked store hides it).  With the fence, either it precedes the
   * peer's flag load in that order, which then sees 1, or the peer's store
   * and load both precede it, and the re-check sees the new head or tail
   * (C11 7.17.4).
   */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  /*
   * The two directions share the socket, and the engine arms a
   * connection's send and receive link in turn: a wake-up drained here
   * may be the other link's, whose flag its waker has already cleared.
   * Then the engine must look again rather than sleep.
   */
  *ready = woken || hoop__fifo_can_move(&c->fifo, send);
  if (!*ready && closed)
    return peer_gone(c, 0);
  *pfd = (struct pollfd){.fd = c->fd, .events = POLLIN};
  return HOOP_SUCCESS;
}

static void shm_shutdown(struct hoop_conn *conn) {
  struct shm_conn *c = (struct shm_conn *)conn;
  if (c->fd >= 0)
    shutdown(c->fd, SHUT_RDWR);
}

static void shm_close(struct hoop_conn *conn) {
  struct shm_conn *c = (struct shm_conn *)conn;
  if (c == NULL)
    return;
  if (c->seg != NULL)
    munmap(c->seg, c->seg_bytes);
  if (c->seg_fd >= 0)
    close(c->seg_fd);
  hoop__sock_close(&c->fd);
  free(c);
}

/*
 * Maps the segment, populating only the header page: the rings' pages
 * come as their writers need them (grow).  The first populate also says
 * whether the kernel has MADV_POPULATE_WRITE; where it does not, the
 * descriptor is kept for posix_fallocate.
 */
static hoop_result_t map_segment(struct shm_conn *c, int fd, size_t bytes,
                                 const char *name) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM,
                      "mmap of shared memory segment %s (%zu bytes) for %s: "
                      "%s",
                      name, bytes, c->base.peer_desc, strerror(errno));
  c->seg = p;
  c->seg_bytes = bytes;
  if (!hoop__shm_grow_by_fallocate &&
      madvise(p, SHM_HEADER_BYTES, MADV_POPULATE_WRITE) == 0)
    return HOOP_SUCCESS;
  c->seg_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (c->seg_fd < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM,
                      "keeping shared memory segment %s open for %s: %s",
                      name, c->base.peer_desc, strerror(errno));
  return HOOP_SUCCESS;
}

/* The lower rank makes the segment and offers it to its peer. */
static hoop_result_t create_segment(struct shm_conn *c,
                                    const struct hoop_conn_setup *setup,
                                    struct hoop_shm_offer *o) {
  uint32_t nonce;
  if (getentropy(&nonce, sizeof nonce) != 0)
    nonce = (uint32_t)hoop__now_ns();
  /* The pid first: a leaked segment names the process that made it. */
  snprintf(o->name, sizeof o->name, "/hoop-%d-%016llx-%d-%d-%d-%08x",
           (int)getpid(), (unsigned long long)setup->comm_id, setup->rank,
           c->base.peer, c->base.channel, nonce);
  int fd = shm_open(o->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM,
                      "shm_open(%s) for %s: %s (HOOP_TRANSPORT=tcp avoids "
                      "shared memory)",
                      o->name, c->base.peer_desc, strerror(errno));
  /*
   * The segment's size, sparse; only the header page is allocated now,
   * so that a full /dev/shm is this error rather than a SIGBUS at the
   * header's first store.  The rings' pages come as they are written.
   */
  int err = ftruncate(fd, (off_t)o->segment_bytes) == 0 ? 0 : errno;
  if (err == 0)
    err = posix_fallocate(fd, 0, SHM_HEADER_BYTES);
  hoop_result_t res = HOOP_SUCCESS;
  if (err != 0)
    res = HOOP_ERROR(NULL, HOOP_ERR_SYSTEM,
                     "cannot make a segment of %llu bytes (%d of them now) "
                     "in /dev/shm for %s: %s (see df /dev/shm; "
                     "HOOP_SHM_SLOTS and HOOP_SHM_SLOT_BYTES make segments "
                     "smaller, HOOP_TRANSPORT=tcp avoids them)",
                     (unsigned long long)o->segment_bytes, SHM_HEADER_BYTES,
                     c->base.peer_desc, strerror(err));
  else
    res = map_segment(c, fd, o->segment_bytes, o->name);
  close(fd);
  if (res != HOOP_SUCCESS) {
    shm_unlink(o->name);
    return res;
  }
  c->seg->magic = SHM_MAGIC;
  c->seg->ring_bytes = o->ring_bytes;
  return HOOP_SUCCESS;
}

bool hoop__shm_offer_parse(const void *bytes, size_t len,
                           struct hoop_shm_offer *out, char *why,
                           size_t why_len) {
  struct hoop_shm_offer o;
  if (len != sizeof o) {
    snprintf(why, why_len, "an offer of %zu bytes, not %zu", len, sizeof o);
    return false;
  }
  memcpy(&o, bytes, sizeof o);
  size_t name_len = strnlen(o.name, sizeof o.name);
  if (name_len == sizeof o.name || strncmp(o.name, "/hoop-", 6) != 0 ||
      strspn(o.name + 1, "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") !=
          name_len - 1) {
    snprintf(why, why_len, "a segment name that is not /hoop-... within "
                           "%zu bytes",
             sizeof o.name);
    return false;
  }
  /* Each bound keeps the products below from wrapping around. */
  if (o.slot_bytes < 4096 || o.slot_bytes > (64u << 20) ||
      o.slot_bytes % 64 != 0 || o.ring_bytes % o.slot_bytes != 0 ||
      o.ring_bytes / o.slot_bytes < 2 || o.ring_bytes / o.slot_bytes > 64 ||
      o.segment_bytes != SHM_HEADER_BYTES + 2 * o.ring_bytes) {
    snprintf(why, why_len,
             "rings of %llu bytes in slots of %llu, in a segment of %llu",
             (unsigned long long)o.ring_bytes,
             (unsigned long long)o.slot_bytes,
             (unsigned long long)o.segment_bytes);
    return false;
  }
  *out = o;
  return true;
}

/*
 * The higher rank maps what its peer offered, then unlinks it.  The
 * segment must belong to this user: another local user could not have
 * made one the peer offers, short of guessing its name first.
 */
static hoop_result_t open_segment(struct shm_conn *c,
                                  const struct hoop_shm_offer *o) {
  const char *name = o->name;
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM,
                      "shm_open(%s) offered by %s: %s (is /dev/shm shared "
                      "between the two? HOOP_TRANSPORT=tcp avoids it)",
                      name, c->base.peer_desc, strerror(errno));
  shm_unlink(name);
  struct stat st;
  hoop_result_t res;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != o->segment_bytes ||
      st.st_uid != geteuid())
    res = HOOP_ERROR(NULL, HOOP_ERR_MISMATCH,
                     "shared memory segment %s from %s is not the size "
                     "offered or not this user's",
                     name, c->base.peer_desc);
  else
    res = map_segment(c, fd, o->segment_bytes, name);
  close(fd);
  if (res == HOOP_SUCCESS && (c->seg->magic != SHM_MAGIC ||
                              c->seg->ring_bytes != o->ring_bytes))
    res = HOOP_ERROR(NULL, HOOP_ERR_MISMATCH,
                     "shared memory segment %s from %s has a bad header",
                     name, c->base.peer_desc);
  return res;
}

/* Slot and ring sizes from the environment (checked when the comm was made). */
static void geometry(struct hoop_shm_offer *o) {
  o->slot_bytes = (uint64_t)hoop__param_shm_slot_bytes();
  o->ring_bytes = o->slot_bytes * (uint64_t)hoop__param_shm_slots();
  o->segment_bytes = SHM_HEADER_BYTES + 2 * o->ring_bytes;
}

/* Lower rank: create, offer, and wait until the peer has mapped it. */
static hoop_result_t connect_lower(struct shm_conn *c,
                                   const struct hoop_conn_setup *setup) {
  long long deadline = setup->deadline;
  struct hoop_shm_offer o = {0};
  geometry(&o);
  HOOP_CHECK(create_segment(c, setup, &o));
  int32_t status = HOOP_ERR_INTERNAL;
  hoop_result_t res = hoop__sock_send_all(NULL, c->fd, &o, sizeof o,
                                          deadline, c->base.peer_desc);
  if (res == HOOP_SUCCESS)
    res = hoop__sock_recv_all(NULL, c->fd, &status, sizeof status,
                              deadline, c->base.peer_desc);
  /* Normally the peer has unlinked it already; after a failure it has not. */
  shm_unlink(o.name);
  if (res == HOOP_SUCCESS && status != HOOP_SUCCESS)
    res = HOOP_ERROR(NULL, HOOP_ERR_REMOTE,
                     "%s could not map shared memory segment %s (its own "
                     "error says why)",
                     c->base.peer_desc, o.name);
  HOOP_CHECK(res);
  c->fifo.ring = (size_t)o.ring_bytes;
  c->fifo.slot = (size_t)o.slot_bytes;
  return HOOP_SUCCESS;
}

static hoop_result_t connect_higher(struct shm_conn *c, long long deadline) {
  unsigned char bytes[sizeof(struct hoop_shm_offer)];
  HOOP_CHECK(hoop__sock_recv_all(NULL, c->fd, bytes, sizeof bytes, deadline,
                                 c->base.peer_desc));
  struct hoop_shm_offer o;
  char why[200];
  hoop_result_t res;
  if (!hoop__shm_offer_parse(bytes, sizeof bytes, &o, why, sizeof why))
    res = HOOP_ERROR(NULL, HOOP_ERR_MISMATCH,
                     "%s offered a malformed shared memory segment: %s "
                     "(different hoop versions?)",
                     c->base.peer_desc, why);
  else
    res = open_segment(c, &o);
  int32_t status = res;
  hoop_result_t sent = hoop__sock_send_all(NULL, c->fd, &status,
                                           sizeof status, deadline,
                                           c->base.peer_desc);
  HOOP_CHECK(res);
  HOOP_CHECK(sent);
  c->fifo.ring = (size_t)o.ring_bytes;
  c->fifo.slot = (size_t)o.slot_bytes;
  return HOOP_SUCCESS;
}

static hoop_result_t shm_connect(const struct hoop_conn_setup *setup,
                                 struct hoop_conn **out) {
  hoop_result_t res;
  struct shm_conn *c = calloc(1, sizeof *c);
  if (c == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_NO_MEMORY, "shm connection");
  c->fd = -1;
  c->seg_fd = -1;
  hoop__conn_init(&c->base, &hoop__shm_transport, setup);
  HOOP_CHECK_GOTO(setup->open_socket(setup->ctx, &c->fd), res, out_close);
  bool lower = setup->rank < setup->peer;
  HOOP_CHECK_GOTO(lower ? connect_lower(c, setup)
                        : connect_higher(c, setup->deadline),
                  res, out_close);
  HOOP_CHECK_GOTO(hoop__sock_set_nonblocking(c->fd), res, out_close);
  char *rings = (char *)c->seg + SHM_HEADER_BYTES;
  size_t ring = c->fifo.ring;
  c->out = &c->seg->fifo[lower ? 0 : 1];
  c->in = &c->seg->fifo[lower ? 1 : 0];
  c->fifo.out_ring = rings + (lower ? 0 : ring);
  c->fifo.in_ring = rings + (lower ? ring : 0);
  c->fifo.out_tail = &c->out->tail;
  c->fifo.in_head = &c->in->head;
  c->fifo.signal = &shm_signal;
  c->fifo.ctx = c;
  c->fifo.restart = SHM_RESTART_BYTES;
  /* The setting was checked when the communicator was made. */
  switch (hoop__parse_shm_stores(hoop__param_shm_stores())) {
  case HOOP_SHM_STORES_PLAIN: c->fifo.stores = HOOP_FIFO_PLAIN; break;
  case HOOP_SHM_STORES_NT: c->fifo.stores = HOOP_FIFO_AROUND; break;
  default: c->fifo.stores = HOOP_FIFO_TIMED; break;
  }
  *out = &c->base;
  return HOOP_SUCCESS;
out_close:
  shm_close(&c->base);
  return res;
}

const struct hoop_transport_ops hoop__shm_transport = {
    .name = "shm",
    .through_memory = true,
    .check_settings = shm_check_settings,
    .publish = shm_publish,
    .blob_bytes = sizeof(struct shm_blob),
    .blob_parse = shm_blob_parse,
    .rank_info = shm_rank_info,
    .can_connect = shm_can_connect,
    .connect = shm_connect,
    .send = shm_send,
    .recv = shm_recv,
    .peek = shm_peek,
    .release = shm_release,
    .arm = shm_arm,
    .begin_stream = shm_begin_stream,
    .shutdown = shm_shutdown,
    .close = shm_close,
};
