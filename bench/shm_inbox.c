/*
 * shm-inbox: one inbox per rank against a ring per pair of ranks, for
 * shared memory between processes on one host (issue 38, "Scale").
 *
 * hoop's shm transport gives every pair of ranks a segment holding two
 * single-producer single-consumer rings whose pages exist only once the
 * writer stores to them, so /dev/shm grows as N^2 under all-to-all.
 * Open MPI's sm (formerly vader) BTL gives every rank one receive FIFO
 * that all its peers enqueue fragments into, so /dev/shm grows as N.
 * This prototype builds both in one harness, with the same copies (one
 * memcpy into shared memory, one out of it), the same waiting (spin, then
 * sched_yield) and the same progress loop, so that the only difference
 * timed is how a fragment finds its slot:
 *
 *   pair:  per ordered pair of ranks, a ring of K slots; head and tail on
 *          their own cache lines; one segment per unordered pair holding
 *          both directions, as hoop's does.
 *   inbox: per receiving rank, F slots shared by every sender.  A sender
 *          claims the next ticket with a compare-and-swap on the inbox's
 *          tail only when that ticket's slot is free (so a full inbox never
 *          commits it to wait), fills the slot and publishes it; the
 *          receiver takes slots in ticket order and hands each back by
 *          advancing its turn.  Open MPI keeps the fragment in the sender's
 *          memory and links it into the receiver's FIFO; the fragment slots
 *          living in the receiver's segment here keep the memory per rank
 *          fixed all the same, and the copies are the same.
 *
 * Neither design pre-faults: a page of either segment comes into being on
 * its first store, which is when its writer first needs it (hoop asks for
 * the pages with MADV_POPULATE_WRITE only so that a full /dev/shm fails a
 * call rather than raising SIGBUS).
 *
 * Patterns: ring (each rank sends one message to rank+1 and receives one
 * from rank-1, a ring all-reduce's step) and a2a (each rank sends one
 * message to every peer).  Messages larger than the fragment size travel
 * as several fragments; a rank moves every send and receive it can on
 * each pass, so that no rank waits for space while its own inbox fills.
 *
 * Timing follows shared/bench-method.md: warm-up iterations, then timed
 * ones; each is a barrier, then the pattern, timed on every rank; an
 * iteration's time is the maximum over ranks, and a run's is the median
 * over iterations.  A configuration is run -r times, the pair rings and
 * an inbox of each -F size (8 and 64 slots unless told) in turn, run by
 * run (A B C A B C), and the summary gives the median of the runs and
 * their min/max, for each and for the ratio of each inbox run's time to
 * the pair run of the same repeat.  Rank r runs on CPU r mod the CPUs
 * there are, the same placement for both designs.
 *
 * Every message is checked in full after every iteration, outside the
 * timed region: word k of the message from s to d is a function of
 * (s, d, k), and the first word of every fragment also of the iteration,
 * so a lost, stale, misplaced or torn fragment is counted.  -x spoils one
 * byte of one message in one timed iteration to show the check catches
 * it.  Exit status: 0 all intact, 1 a message was wrong, 2 usage or
 * system error.
 *
 * Memory: after each run the program sums st_size (mapped) and
 * st_blocks * 512 (populated) over the run's segment files, which are
 * unlinked as soon as they are mapped so that nothing is left in /dev/shm
 * whatever ends the run.
 */
#define _GNU_SOURCE

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timing.h"

#define LINE 64
#define MAX_RANKS 256
#define MAX_LIST 16
/* Polls without progress before each further poll yields the core: with
 * more ranks than cores the peer being waited for cannot run otherwise. */
#define SPINS 64

enum pattern { PAT_RING, PAT_A2A };
enum design { DESIGN_PAIR, DESIGN_INBOX };

static const char *const pattern_name[] = {"ring", "a2a"};

struct config {
  enum pattern pattern;
  int nranks;
  size_t msg;          /* bytes per message */
  size_t frag;         /* bytes per fragment: min(msg, -c) */
  size_t nfrags;       /* fragments per message */
  unsigned ring_slots; /* K: slots per pair ring */
  unsigned box_slots;  /* F: slots per inbox */
  int warmup, iters;
  bool corrupt;
};

/* ---- Shared memory: the two designs' layouts ---------------------------- */

/* Head and tail on their own lines: the writer's stores to the tail never
 * take the line the reader stores its head to. */
struct ring {
  alignas(LINE) _Atomic uint64_t tail;
  alignas(LINE) _Atomic uint64_t head;
};

/* One inbox slot's header; the fragment follows it.  turn is 2*lap while
 * the slot is free for the ticket of that lap, 2*lap+1 once that ticket's
 * fragment is in it: zero-filled pages start every slot free for lap 0, so
 * creating an inbox stores nothing. */
struct box_slot {
  alignas(LINE) _Atomic uint64_t turn;
  uint32_t src;
  uint32_t frag;
};

struct inbox {
  alignas(LINE) _Atomic uint64_t tail;
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t slot_bytes(const struct config *c) { return round_up(c->frag, LINE); }

static size_t ring_bytes(const struct config *c) {
  return sizeof(struct ring) + c->ring_slots * slot_bytes(c);
}

static size_t box_stride(const struct config *c) {
  return sizeof(struct box_slot) + slot_bytes(c);
}

static size_t inbox_bytes(const struct config *c) {
  return sizeof(struct inbox) + c->box_slots * box_stride(c);
}

static unsigned char *ring_slot(struct ring *r, const struct config *c,
                                uint64_t pos) {
  return (unsigned char *)(r + 1) + (pos % c->ring_slots) * slot_bytes(c);
}

static struct box_slot *inbox_slot(struct inbox *b, const struct config *c,
                                   uint64_t ticket) {
  return (struct box_slot *)((unsigned char *)(b + 1) +
                             (ticket % c->box_slots) * box_stride(c));
}

/* ---- The per-fragment paths ---------------------------------------------
 * Not inlined, so that callgrind reports each design's copy path on its
 * own, apart from the polls that find nothing. */

/* One end of a pair ring, private to its process: its position and the
 * other end's last position seen, so that a poll reads the shared line only
 * when the cached one says there is nothing to do. */
struct ring_end {
  struct ring *ring;
  uint64_t pos, seen;
};

static bool ring_has_room(struct ring_end *w, const struct config *c) {
  if (w->pos - w->seen < c->ring_slots)
    return true;
  w->seen = atomic_load_explicit(&w->ring->head, memory_order_acquire);
  return w->pos - w->seen < c->ring_slots;
}

__attribute__((noinline)) static void ring_fill(struct ring_end *w,
                                                const struct config *c,
                                                const void *src, size_t len) {
  memcpy(ring_slot(w->ring, c, w->pos), src, len);
  atomic_store_explicit(&w->ring->tail, ++w->pos, memory_order_release);
}

static bool ring_has_data(struct ring_end *r) {
  if (r->seen != r->pos)
    return true;
  r->seen = atomic_load_explicit(&r->ring->tail, memory_order_acquire);
  return r->seen != r->pos;
}

__attribute__((noinline)) static void ring_drain(struct ring_end *r,
                                                 const struct config *c,
                                                 void *dst, size_t len) {
  memcpy(dst, ring_slot(r->ring, c, r->pos), len);
  atomic_store_explicit(&r->ring->head, ++r->pos, memory_order_release);
}

/* Claims the inbox's next ticket if its slot is free; false if the inbox
 * is full.  A ticket is only taken once its slot is free, so a sender never
 * holds a ticket it must wait for while its own receives pile up. */
__attribute__((noinline)) static bool inbox_claim(struct inbox *b,
                                                  const struct config *c,
                                                  uint64_t *ticket) {
  uint64_t t = atomic_load_explicit(&b->tail, memory_order_relaxed);
  for (;;) {
    uint64_t free_turn = 2 * (t / c->box_slots);
    uint64_t turn = atomic_load_explicit(&inbox_slot(b, c, t)->turn,
                                         memory_order_acquire);
    if (turn == free_turn) {
      if (atomic_compare_exchange_weak_explicit(&b->tail, &t, t + 1,
                                                memory_order_relaxed,
                                                memory_order_relaxed)) {
        *ticket = t;
        return true;
      }
    } else if (turn < free_turn) {
      return false; /* the receiver has not yet taken the last lap's */
    } else {
      t = atomic_load_explicit(&b->tail, memory_order_relaxed);
    }
  }
}

__attribute__((noinline)) static void inbox_fill(struct inbox *b,
                                                 const struct config *c,
                                                 uint64_t ticket, int src,
                                                 size_t frag, const void *data,
                                                 size_t len) {
  struct box_slot *s = inbox_slot(b, c, ticket);
  s->src = (uint32_t)src;
  s->frag = (uint32_t)frag;
  memcpy(s + 1, data, len);
  atomic_store_explicit(&s->turn, 2 * (ticket / c->box_slots) + 1,
                        memory_order_release);
}

static struct box_slot *inbox_ready(struct inbox *b, const struct config *c,
                                    uint64_t head) {
  struct box_slot *s = inbox_slot(b, c, head);
  uint64_t full = 2 * (head / c->box_slots) + 1;
  return atomic_load_explicit(&s->turn, memory_order_acquire) == full ? s
                                                                      : NULL;
}

/* Copies the slot's fragment to where its sender's message goes and hands
 * the slot to the next lap. */
__attribute__((noinline)) static void inbox_drain(struct box_slot *s,
                                                  const struct config *c,
                                                  uint64_t head,
                                                  unsigned char *dst,
                                                  size_t len) {
  memcpy(dst, s + 1, len);
  atomic_store_explicit(&s->turn, 2 * (head / c->box_slots) + 2,
                        memory_order_release);
}

/* ---- The segments of one run -------------------------------------------- */

struct segments {
  int count;
  int *fds;
  void **maps;
  size_t *sizes;
  struct ring **ring_of; /* [from * N + to], pair design */
  struct inbox **box_of; /* [rank], inbox design */
};

/* A segment created, mapped and unlinked at once: the mapping, inherited
 * by fork, and the descriptor, for fstat at the end, keep it alive, and
 * no name is left in /dev/shm however the run ends. */
static void *new_segment(struct segments *s, size_t bytes) {
  char name[64];
  bytes = round_up(bytes, 4096); /* what the mapping takes */
  snprintf(name, sizeof name, "/hoop-shm-inbox-%d-%d", (int)getpid(),
           s->count);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    perror("shm_open");
    exit(2);
  }
  shm_unlink(name);
  if (ftruncate(fd, (off_t)bytes) != 0) {
    perror("ftruncate");
    exit(2);
  }
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  s->fds[s->count] = fd;
  s->maps[s->count] = p;
  s->sizes[s->count] = bytes;
  s->count++;
  return p;
}

static bool sends_to(const struct config *c, int from, int to) {
  if (from == to)
    return false;
  return c->pattern == PAT_A2A || to == (from + 1) % c->nranks;
}

/* Pair design: one segment per unordered pair that carries anything,
 * holding the ring each way, as hoop's segments do. */
static void make_pair_segments(struct segments *s, const struct config *c) {
  int n = c->nranks;
  size_t half = round_up(ring_bytes(c), 4096);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      if (!sends_to(c, i, j) && !sends_to(c, j, i))
        continue;
      unsigned char *p = new_segment(s, 2 * half);
      s->ring_of[i * n + j] = (struct ring *)p;
      s->ring_of[j * n + i] = (struct ring *)(p + half);
    }
}

static void make_inbox_segments(struct segments *s, const struct config *c) {
  for (int r = 0; r < c->nranks; r++)
    s->box_of[r] = new_segment(s, inbox_bytes(c));
}

static void make_segments(struct segments *s, const struct config *c,
                          enum design d) {
  int n = c->nranks, most = n * (n - 1) / 2 + n;
  s->count = 0;
  s->fds = calloc((size_t)most, sizeof *s->fds);
  s->maps = calloc((size_t)most, sizeof *s->maps);
  s->sizes = calloc((size_t)most, sizeof *s->sizes);
  s->ring_of = calloc((size_t)n * (size_t)n, sizeof *s->ring_of);
  s->box_of = calloc((size_t)n, sizeof *s->box_of);
  if (d == DESIGN_PAIR)
    make_pair_segments(s, c);
  else
    make_inbox_segments(s, c);
}

/* Mapped and populated bytes of the run's segments (tmpfs allocates a
 * page when it is first stored to, and st_blocks counts those). */
static void measure_segments(const struct segments *s, long long *mapped,
                             long long *populated) {
  *mapped = *populated = 0;
  for (int i = 0; i < s->count; i++) {
    struct stat st;
    if (fstat(s->fds[i], &st) != 0) {
      perror("fstat");
      exit(2);
    }
    *mapped += (long long)st.st_size;
    *populated += (long long)st.st_blocks * 512;
  }
}

static void free_segments(struct segments *s) {
  for (int i = 0; i < s->count; i++) {
    munmap(s->maps[i], s->sizes[i]);
    close(s->fds[i]);
  }
  free(s->fds);
  free(s->maps);
  free(s->sizes);
  free(s->ring_of);
  free(s->box_of);
}

/* ---- Control block: barrier, times, errors (not counted as /dev/shm) ---- */

struct control {
  alignas(LINE) _Atomic int arrived;
  alignas(LINE) _Atomic int generation;
  alignas(LINE) _Atomic long bad_words;
  double times[]; /* [iteration * N + rank] */
};

static void wait_a_little(int *idle) {
  if (++*idle > SPINS)
    sched_yield();
}

static void barrier(struct control *ctl, int n) {
  int gen = atomic_load_explicit(&ctl->generation, memory_order_acquire);
  if (atomic_fetch_add_explicit(&ctl->arrived, 1, memory_order_acq_rel) ==
      n - 1) {
    atomic_store_explicit(&ctl->arrived, 0, memory_order_relaxed);
    atomic_store_explicit(&ctl->generation, gen + 1, memory_order_release);
    return;
  }
  int idle = 0;
  while (atomic_load_explicit(&ctl->generation, memory_order_acquire) == gen)
    wait_a_little(&idle);
}

/* ---- One rank ----------------------------------------------------------- */

struct rank {
  const struct config *c;
  enum design design;
  int me, npeers;
  int *send_to, *recv_from; /* peers, in the order they are served */
  int *slot_of;             /* message slot in recv_buf of a sender, or -1 */
  unsigned char *send_buf, *recv_buf; /* npeers messages each */
  size_t *sent, *got;                 /* fragments so far, per peer slot */
  struct ring_end *tx, *rx;           /* pair design, per peer slot */
  struct inbox **boxes;               /* inbox design: every rank's */
  uint64_t box_head;                  /* inbox design: my next ticket */
};

static uint64_t pattern_word(int src, int dst, size_t k) {
  uint64_t x = ((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ (uint64_t)k;
  x *= 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29);
}

/* The first word of each fragment also carries the iteration, so that a
 * fragment left over from the previous one is caught. */
static uint64_t expected_word(const struct config *c, int src, int dst,
                              int iter, size_t k) {
  uint64_t w = pattern_word(src, dst, k);
  if (k % (c->frag / 8) == 0)
    w ^= (uint64_t)(iter + 1) * 0xD6E8FEB86659FD93ull;
  return w;
}

static void fill_message(const struct config *c, uint64_t *m, int src,
                         int dst, int iter) {
  for (size_t k = 0; k < c->msg / 8; k++)
    m[k] = expected_word(c, src, dst, iter, k);
}

static void stamp_message(const struct config *c, uint64_t *m, int src,
                          int dst, int iter) {
  for (size_t k = 0; k < c->msg / 8; k += c->frag / 8)
    m[k] = expected_word(c, src, dst, iter, k);
}

static long check_message(const struct config *c, const uint64_t *m, int src,
                          int dst, int iter) {
  long bad = 0;
  for (size_t k = 0; k < c->msg / 8; k++)
    if (m[k] != expected_word(c, src, dst, iter, k)) {
      if (bad == 0)
        fprintf(stderr,
                "shm-inbox: message %d->%d iteration %d word %zu is "
                "%016llx, not %016llx\n",
                src, dst, iter, k, (unsigned long long)m[k],
                (unsigned long long)expected_word(c, src, dst, iter, k));
      bad++;
    }
  return bad;
}

static unsigned char *message(unsigned char *buf, const struct config *c,
                              int slot) {
  return buf + (size_t)slot * c->msg;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p) {
    fprintf(stderr, "shm-inbox: out of memory\n");
    exit(2);
  }
  return p;
}

/* Sends start at the next rank and go round, receives at the previous one
 * and go back, so that not every rank writes to the same peer first. */
static void init_rank(struct rank *r, const struct config *c, enum design d,
                      int me, const struct segments *seg) {
  int n = c->nranks;
  memset(r, 0, sizeof *r);
  r->c = c;
  r->design = d;
  r->me = me;
  r->npeers = c->pattern == PAT_A2A ? n - 1 : 1;
  r->send_to = xcalloc((size_t)r->npeers, sizeof(int));
  r->recv_from = xcalloc((size_t)r->npeers, sizeof(int));
  r->slot_of = xcalloc((size_t)n, sizeof(int));
  for (int i = 0; i < n; i++)
    r->slot_of[i] = -1;
  for (int i = 0; i < r->npeers; i++) {
    r->send_to[i] = (me + 1 + i) % n;
    r->recv_from[i] = (me - 1 - i + n) % n;
    r->slot_of[r->recv_from[i]] = i;
  }
  r->send_buf = xcalloc((size_t)r->npeers, c->msg);
  r->recv_buf = xcalloc((size_t)r->npeers, c->msg);
  r->sent = xcalloc((size_t)r->npeers, sizeof(size_t));
  r->got = xcalloc((size_t)r->npeers, sizeof(size_t));
  for (int i = 0; i < r->npeers; i++)
    fill_message(c, (uint64_t *)message(r->send_buf, c, i), me, r->send_to[i],
                 0);
  if (d == DESIGN_PAIR) {
    r->tx = xcalloc((size_t)r->npeers, sizeof *r->tx);
    r->rx = xcalloc((size_t)r->npeers, sizeof *r->rx);
    for (int i = 0; i < r->npeers; i++) {
      r->tx[i].ring = seg->ring_of[me * n + r->send_to[i]];
      r->rx[i].ring = seg->ring_of[r->recv_from[i] * n + me];
    }
  } else {
    r->boxes = seg->box_of;
  }
}

static size_t frag_len(const struct config *c, size_t f) {
  size_t off = f * c->frag;
  return c->msg - off < c->frag ? c->msg - off : c->frag;
}

static bool try_send(struct rank *r, int i) {
  const struct config *c = r->c;
  size_t f = r->sent[i];
  const unsigned char *data = message(r->send_buf, c, i) + f * c->frag;
  if (r->design == DESIGN_PAIR) {
    if (!ring_has_room(&r->tx[i], c))
      return false;
    ring_fill(&r->tx[i], c, data, frag_len(c, f));
  } else {
    struct inbox *b = r->boxes[r->send_to[i]];
    uint64_t ticket;
    if (!inbox_claim(b, c, &ticket))
      return false;
    inbox_fill(b, c, ticket, r->me, f, data, frag_len(c, f));
  }
  r->sent[i]++;
  return true;
}

static bool try_recv_pair(struct rank *r, int i) {
  const struct config *c = r->c;
  size_t f = r->got[i];
  if (!ring_has_data(&r->rx[i]))
    return false;
  ring_drain(&r->rx[i], c, message(r->recv_buf, c, i) + f * c->frag,
             frag_len(c, f));
  r->got[i]++;
  return true;
}

/* The inbox's next fragment, from whichever sender claimed its ticket.  A
 * header that names no expected sender or fragment is a broken transport:
 * counted as bad words and the run goes on. */
static bool try_recv_inbox(struct rank *r, struct control *ctl) {
  const struct config *c = r->c;
  struct inbox *b = r->boxes[r->me];
  struct box_slot *s = inbox_ready(b, c, r->box_head);
  if (!s)
    return false;
  int i = s->src < (uint32_t)c->nranks ? r->slot_of[s->src] : -1;
  if (i < 0 || s->frag != r->got[i]) {
    fprintf(stderr, "shm-inbox: rank %d got fragment %u from %u unasked\n",
            r->me, s->frag, s->src);
    atomic_fetch_add(&ctl->bad_words, 1);
    inbox_drain(s, c, r->box_head++, r->recv_buf, 0);
    return true;
  }
  inbox_drain(s, c, r->box_head++,
              message(r->recv_buf, c, i) + s->frag * c->frag,
              frag_len(c, s->frag));
  r->got[i]++;
  return true;
}

/* Moves every fragment it can, sends and receives alike, until the
 * iteration's messages have all gone and all come; a pass that moves
 * nothing counts toward yielding the core.  Not inlined: callgrind counts
 * the timed region as this function's inclusive cost. */
__attribute__((noinline)) static void exchange(struct rank *r, struct control *ctl) {
  const struct config *c = r->c;
  size_t want = (size_t)r->npeers * c->nfrags, sent = 0, got = 0;
  memset(r->sent, 0, (size_t)r->npeers * sizeof(size_t));
  memset(r->got, 0, (size_t)r->npeers * sizeof(size_t));
  int idle = 0;
  while (sent < want || got < want) {
    bool moved = false;
    for (int i = 0; i < r->npeers; i++)
      while (r->sent[i] < c->nfrags && try_send(r, i)) {
        sent++;
        moved = true;
      }
    if (r->design == DESIGN_PAIR) {
      for (int i = 0; i < r->npeers; i++)
        while (r->got[i] < c->nfrags && try_recv_pair(r, i)) {
          got++;
          moved = true;
        }
    } else {
      while (got < want && try_recv_inbox(r, ctl)) {
        got++;
        moved = true;
      }
    }
    if (moved)
      idle = 0;
    else
      wait_a_little(&idle);
  }
}

/* -x: one byte of rank 0's first message in the middle timed iteration,
 * spoilt in the send buffer after its stamps and mended after the send. */
static bool spoil_now(const struct rank *r, int iter) {
  const struct config *c = r->c;
  return c->corrupt && r->me == 0 && iter == c->warmup + c->iters / 2;
}

static void run_rank(const struct config *c, enum design d, int me,
                     const struct segments *seg, struct control *ctl) {
  struct rank r;
  init_rank(&r, c, d, me, seg);
  int n = c->nranks;
  for (int it = 0; it < c->warmup + c->iters; it++) {
    for (int i = 0; i < r.npeers; i++)
      stamp_message(c, (uint64_t *)message(r.send_buf, c, i), me,
                    r.send_to[i], it);
    unsigned char *spoilt = r.send_buf + c->msg / 2;
    if (spoil_now(&r, it))
      *spoilt ^= 0x40;
    barrier(ctl, n);
    double t0 = now_s();
    exchange(&r, ctl);
    double t1 = now_s();
    if (spoil_now(&r, it))
      *spoilt ^= 0x40;
    if (it >= c->warmup)
      ctl->times[(it - c->warmup) * n + me] = t1 - t0;
    long bad = 0;
    for (int i = 0; i < r.npeers; i++)
      bad += check_message(c, (const uint64_t *)message(r.recv_buf, c, i),
                           r.recv_from[i], me, it);
    if (bad)
      atomic_fetch_add(&ctl->bad_words, bad);
    /* No rank sends the next iteration's fragments into buffers still
     * being checked. */
    barrier(ctl, n);
  }
}

/* ---- One run: fork the ranks, time, measure ----------------------------- */

struct run_result {
  double median, min, max; /* seconds per iteration */
  long long mapped, populated;
  long bad;
};

static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void collect_times(const struct config *c, const struct control *ctl,
                          struct run_result *res) {
  int n = c->nranks;
  double *per_iter = xcalloc((size_t)c->iters, sizeof(double));
  for (int it = 0; it < c->iters; it++)
    for (int k = 0; k < n; k++)
      if (ctl->times[it * n + k] > per_iter[it])
        per_iter[it] = ctl->times[it * n + k];
  res->median = median_of(per_iter, c->iters);
  res->min = per_iter[0];
  res->max = per_iter[c->iters - 1];
  free(per_iter);
}

/* Rank r on CPU r mod the CPUs there are: left to the scheduler, two
 * ranks on two cores land now on one core (warm caches, a copy four times
 * faster) and now on two, and a run's median is a coin toss between them. */
static void pin(int me) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return;
  int ncpus = CPU_COUNT(&allowed), k = me % ncpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, &allowed) && k-- == 0) {
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      sched_setaffinity(0, sizeof one, &one);
      return;
    }
}

static void fork_ranks(const struct config *c, enum design d,
                       const struct segments *seg, struct control *ctl) {
  pid_t parent = getpid();
  for (int me = 0; me < c->nranks; me++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      exit(2);
    }
    if (pid == 0) {
      /* A rank outliving a killed parent would spin forever. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(2);
      pin(me);
      run_rank(c, d, me, seg, ctl);
      _exit(0);
    }
  }
  bool failed = false;
  int status;
  for (int me = 0; me < c->nranks; me++) {
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failed = true;
  }
  if (failed) {
    fprintf(stderr, "shm-inbox: a rank failed\n");
    exit(2);
  }
}

static struct run_result run_once(const struct config *c, enum design d) {
  size_t ctl_bytes =
      sizeof(struct control) + (size_t)c->iters * (size_t)c->nranks * sizeof(double);
  struct control *ctl = mmap(NULL, ctl_bytes, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (ctl == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  struct segments seg;
  make_segments(&seg, c, d);
  fork_ranks(c, d, &seg, ctl);
  struct run_result res;
  collect_times(c, ctl, &res);
  measure_segments(&seg, &res.mapped, &res.populated);
  res.bad = atomic_load(&ctl->bad_words);
  free_segments(&seg);
  munmap(ctl, ctl_bytes);
  return res;
}

/* ---- Sweep and report --------------------------------------------------- */

/* What one run builds: the pair rings, or inboxes of some number of slots.
 * Several inbox sizes go into one sweep so that they share its runs' order
 * and the machine's moods with the rings they are compared to. */
struct variant {
  enum design design;
  unsigned box_slots;
  char label[16];
};

#define MAX_VARIANTS (MAX_LIST + 1)

struct options {
  int patterns[2], npatterns;
  int ranks[MAX_LIST], nranks;
  size_t sizes[MAX_LIST];
  int nsizes;
  int reps, iters, warmup; /* iters, warmup: 0 picks them from the size */
  size_t frag_max;
  unsigned ring_slots;
  struct variant variants[MAX_VARIANTS];
  int nvariants;
  long long buffer_limit;
  bool corrupt;
};

static void usage(void) {
  fprintf(stderr,
          "usage: shm-inbox [-p ring,a2a] [-n 2,4,...] [-s 64,4096,...]\n"
          "                 [-r runs] [-i iters] [-w warmup] [-d pair|inbox]\n"
          "                 [-c frag_bytes] [-k ring_slots] [-F 8,64,...]\n"
          "                 [-m buffer_limit_MiB] [-x]\n");
  exit(2);
}

static int parse_list(const char *s, long long *out) {
  int n = 0;
  char *copy = strdup(s), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *end;
    long long v = strtoll(t, &end, 10);
    if (*end || v <= 0 || n == MAX_LIST)
      usage();
    out[n++] = v;
  }
  free(copy);
  return n;
}

static void parse_patterns(struct options *o, const char *s) {
  o->npatterns = 0;
  char *copy = strdup(s), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (o->npatterns == 2)
      usage();
    if (strcmp(t, "ring") == 0)
      o->patterns[o->npatterns++] = PAT_RING;
    else if (strcmp(t, "a2a") == 0)
      o->patterns[o->npatterns++] = PAT_A2A;
    else
      usage();
  }
  free(copy);
}

static long long parse_number(const char *s) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end || v < 0)
    usage();
  return v;
}

static void add_variant(struct options *o, enum design d, unsigned slots) {
  struct variant *v = &o->variants[o->nvariants++];
  v->design = d;
  v->box_slots = slots;
  if (d == DESIGN_PAIR)
    snprintf(v->label, sizeof v->label, "pair");
  else
    snprintf(v->label, sizeof v->label, "inbox%u", slots);
}

/* The pair rings first, then an inbox per -F size: the order of each
 * repeat, and the pair run is what each inbox run's ratio is taken to. */
static void make_variants(struct options *o, const char *designs,
                          const long long *slots, int nslots) {
  bool pair = !designs || strcmp(designs, "pair") == 0;
  bool inbox = !designs || strcmp(designs, "inbox") == 0;
  if (!pair && !inbox)
    usage();
  o->nvariants = 0;
  if (pair)
    add_variant(o, DESIGN_PAIR, 0);
  for (int i = 0; inbox && i < nslots; i++)
    add_variant(o, DESIGN_INBOX, (unsigned)slots[i]);
}

static void parse_options(struct options *o, int argc, char **argv) {
  long long list[MAX_LIST], slots[MAX_LIST] = {8, 64};
  int nslots = 2;
  const char *designs = NULL;
  *o = (struct options){.patterns = {PAT_RING, PAT_A2A}, .npatterns = 2,
                        .ranks = {2, 4, 8}, .nranks = 3,
                        .sizes = {64, 4096, 65536}, .nsizes = 3,
                        .reps = 5, .frag_max = 65536, .ring_slots = 8,
                        .buffer_limit = 3072};
  int opt;
  while ((opt = getopt(argc, argv, "p:n:s:r:i:w:d:c:k:F:m:x")) != -1) {
    switch (opt) {
    case 'p': parse_patterns(o, optarg); break;
    case 'n':
      o->nranks = parse_list(optarg, list);
      for (int i = 0; i < o->nranks; i++) {
        if (list[i] < 2 || list[i] > MAX_RANKS)
          usage();
        o->ranks[i] = (int)list[i];
      }
      break;
    case 's':
      o->nsizes = parse_list(optarg, list);
      for (int i = 0; i < o->nsizes; i++) {
        if (list[i] % 64 != 0)
          usage();
        o->sizes[i] = (size_t)list[i];
      }
      break;
    case 'r': o->reps = (int)parse_number(optarg); break;
    case 'i': o->iters = (int)parse_number(optarg); break;
    case 'w': o->warmup = (int)parse_number(optarg); break;
    case 'd': designs = optarg; break;
    case 'c': o->frag_max = (size_t)parse_number(optarg); break;
    case 'k': o->ring_slots = (unsigned)parse_number(optarg); break;
    case 'F': nslots = parse_list(optarg, slots); break;
    case 'm': o->buffer_limit = parse_number(optarg); break;
    case 'x': o->corrupt = true; break;
    default: usage();
    }
  }
  if (optind != argc || o->reps < 1 || o->frag_max < 64 ||
      o->frag_max % 64 != 0 || o->ring_slots < 1)
    usage();
  make_variants(o, designs, slots, nslots);
}

/* Enough iterations to move ~16 MiB per rank, 5-100 of them; enough
 * warm-up to have written every slot once, so that first-touch page
 * faults fall outside the timed iterations for every variant. */
static void pick_counts(struct config *c, const struct options *o) {
  size_t per_rank = c->msg * (size_t)(c->pattern == PAT_A2A ? c->nranks - 1 : 1);
  size_t it = ((size_t)16 << 20) / per_rank;
  c->iters = o->iters ? o->iters : (int)(it < 5 ? 5 : it > 100 ? 100 : it);
  size_t slots = c->ring_slots;
  for (int v = 0; v < o->nvariants; v++)
    if (o->variants[v].box_slots > slots)
      slots = o->variants[v].box_slots;
  c->warmup = o->warmup ? o->warmup : 1 + (int)((slots + c->nfrags - 1) / c->nfrags);
}

/* Send and receive buffers of every rank together, in MiB. */
static long long buffers_mib(const struct config *c) {
  long long peers = c->pattern == PAT_A2A ? c->nranks - 1 : 1;
  return 2 * (long long)c->nranks * peers * (long long)c->msg >> 20;
}

static void print_run(const struct config *c, const struct variant *v,
                      int rep, const struct run_result *r) {
  printf("run %-4s %3d %8zu %-8s %d %10.1f %10.1f %10.1f %12lld %12lld %ld\n",
         pattern_name[c->pattern], c->nranks, c->msg, v->label, rep,
         r->median * 1e6, r->min * 1e6, r->max * 1e6, r->mapped, r->populated,
         r->bad);
  fflush(stdout);
}

/* Median and extremes of x[k] / y[k] over the repeats (y NULL: of x). */
static void spread(const struct run_result *x, const struct run_result *y,
                   int reps, int stride, double out[3]) {
  double *v = xcalloc((size_t)reps, sizeof(double));
  for (int k = 0; k < reps; k++)
    v[k] = x[k * stride].median / (y ? y[k * stride].median : 1.0);
  out[0] = median_of(v, reps);
  out[1] = v[0];
  out[2] = v[reps - 1];
  free(v);
}

/* One line per variant: its median of the runs' medians [min max], the
 * ratio to the pair run of the same repeat, median [min max], and its
 * segments' bytes in the last repeat. */
static void print_summary(const struct config *c, const struct options *o,
                          const struct run_result *runs) {
  int nv = o->nvariants;
  bool has_pair = o->variants[0].design == DESIGN_PAIR;
  for (int v = 0; v < nv; v++) {
    double t[3], ratio[3];
    spread(runs + v, NULL, o->reps, nv, t);
    if (has_pair && v > 0)
      spread(runs + v, runs, o->reps, nv, ratio);
    const struct run_result *last = &runs[(o->reps - 1) * nv + v];
    char ratios[64] = "x      -                ";
    if (has_pair && v > 0)
      snprintf(ratios, sizeof ratios, "x %6.3f [%6.3f %6.3f]", ratio[0],
               ratio[1], ratio[2]);
    printf("sum %-4s %3d %8zu %-8s %10.1f [%10.1f %10.1f]  %s  %12lld "
           "%12lld\n",
           pattern_name[c->pattern], c->nranks, c->msg, o->variants[v].label,
           t[0] * 1e6, t[1] * 1e6, t[2] * 1e6, ratios, last->mapped,
           last->populated);
  }
  fflush(stdout);
}

static long sweep_one(const struct options *o, struct config *c) {
  int nv = o->nvariants;
  struct run_result *runs = xcalloc((size_t)(o->reps * nv), sizeof *runs);
  long bad = 0;
  for (int k = 0; k < o->reps; k++)
    for (int v = 0; v < nv; v++) {
      const struct variant *var = &o->variants[v];
      c->box_slots = var->box_slots;
      runs[k * nv + v] = run_once(c, var->design);
      bad += runs[k * nv + v].bad;
      print_run(c, var, k, &runs[k * nv + v]);
    }
  print_summary(c, o, runs);
  free(runs);
  return bad;
}

static void print_header(const struct options *o) {
  printf("# shm-inbox: fragment <= %zu B, pair ring %u slots, inboxes of -F "
         "slots; %d repeats, variants in this order in each:",
         o->frag_max, o->ring_slots, o->reps);
  for (int v = 0; v < o->nvariants; v++)
    printf(" %s", o->variants[v].label);
  printf("\n# run pattern N bytes variant rep median_us min_us max_us "
         "shm_mapped_B shm_populated_B bad_words\n"
         "# sum pattern N bytes variant median_us [min max] over repeats  "
         "x time/pair's in the same repeat: median [min max]  "
         "shm_mapped_B shm_populated_B\n");
}

int main(int argc, char **argv) {
  struct options o;
  parse_options(&o, argc, argv);
  /* Descriptors are kept for every segment of a run, 2,080 at 64 ranks. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  print_header(&o);
  long bad = 0;
  for (int p = 0; p < o.npatterns; p++)
    for (int si = 0; si < o.nsizes; si++)
      for (int ni = 0; ni < o.nranks; ni++) {
        size_t msg = o.sizes[si];
        struct config c = {
            .pattern = (enum pattern)o.patterns[p],
            .nranks = o.ranks[ni],
            .msg = msg,
            .frag = msg < o.frag_max ? msg : o.frag_max,
            .ring_slots = o.ring_slots,
            .corrupt = o.corrupt,
        };
        c.nfrags = (msg + c.frag - 1) / c.frag;
        pick_counts(&c, &o);
        if (buffers_mib(&c) > o.buffer_limit) {
          printf("skip %-4s %3d %8zu: buffers of %lld MiB over -m %lld\n",
                 pattern_name[c.pattern], c.nranks, c.msg, buffers_mib(&c),
                 o.buffer_limit);
          continue;
        }
        bad += sweep_one(&o, &c);
      }
  if (bad)
    fprintf(stderr, "shm-inbox: %ld bad words\n", bad);
  return bad ? 1 : 0;
}
