/*
 * The FIFO-with-credits protocol of the memory transports (fifo.h).
 */
#include <string.h>

#include "core/copy.h"
#include "core/error.h"
#include "transport/fifo.h"

#define STREAM_ALIGN 64

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static size_t align_pad(uint64_t pos) {
  return (size_t)(-pos & (STREAM_ALIGN - 1));
}

static size_t out_room(const struct hoop_fifo *f) {
  return f->ring -
         (size_t)(f->out_head - __atomic_load_n(f->out_tail, __ATOMIC_ACQUIRE));
}

static size_t in_avail(const struct hoop_fifo *f) {
  return (size_t)(__atomic_load_n(f->in_head, __ATOMIC_ACQUIRE) - f->in_tail);
}

/* The most that fits before the ring wraps or the next slot boundary. */
static size_t piece(const struct hoop_fifo *f, uint64_t pos, size_t len) {
  size_t at = (size_t)(pos % f->ring);
  return min_size(len, min_size(f->ring - at, f->slot - at % f->slot));
}

/*
 * The padding both ends skip before a stream that begins at `pos` (see
 * hoop__fifo_begin_stream): to the ring's start once the stream would
 * begin `restart` bytes in or more, else to a 64-byte boundary.  The ring
 * is a multiple of 64, so either way the stream begins aligned, and from
 * there the padding is 0: a stream with no bytes skips nothing more.
 */
static size_t stream_pad(const struct hoop_fifo *f, uint64_t pos) {
  size_t at = (size_t)(pos % f->ring);
  if (f->restart != 0 && at >= f->restart)
    return f->ring - at;
  return align_pad(pos);
}

/*
 * Skips the padding that starts a stream, once the credit covers it;
 * false while it does not.  Both ends skip from the same stream position.
 * Padding to the ring's start is covered once the reader has consumed
 * this lap's bytes before the ring's end, and the writer may then have
 * no room left: it writes as the reader frees the lap's start.
 */
static bool skip_out_pad(struct hoop_fifo *f, size_t *room) {
  size_t pad = stream_pad(f, f->out_head);
  if (*room < pad)
    return false;
  f->out_head += pad;
  *room -= pad;
  f->out_align = false;
  return true;
}

/* The writer publishes a head past the padding only with bytes after it. */
static bool skip_in_pad(struct hoop_fifo *f) {
  size_t pad = stream_pad(f, f->in_tail);
  if (in_avail(f) < pad)
    return false;
  f->in_tail += pad;
  f->in_align = false;
  return true;
}

void hoop__fifo_begin_stream(struct hoop_fifo *f, int send) {
  if (send)
    f->out_align = true;
  else
    f->in_align = true;
}

#define PROBE_FIRST 16
#define PROBE_MOST 256

bool hoop__fifo_pace_pick(const struct hoop_fifo_pace *p) {
  if (p->ps_per_byte[0] == 0)
    return false;
  if (p->ps_per_byte[1] == 0)
    return true;
  return p->until_probe == 0 ? !p->around : p->around;
}

void hoop__fifo_pace_record(struct hoop_fifo_pace *p, bool around,
                            uint64_t ps_per_byte) {
  bool timed_both = p->ps_per_byte[0] != 0 && p->ps_per_byte[1] != 0;
  bool probe = timed_both && around != p->around;
  uint64_t *avg = &p->ps_per_byte[around];
  /*
   * A probe's last value is stale by then: it is replaced.  The way in
   * use is averaged, each piece counting at most thrice the average, so
   * that one preempted piece cannot turn the choice, and two slow ones
   * (the host moving the CPUs apart) do.
   */
  if (*avg == 0 || probe)
    *avg = ps_per_byte;
  else
    *avg = (*avg + (ps_per_byte < 3 * *avg ? ps_per_byte : 3 * *avg)) / 2;
  if (*avg == 0)
    *avg = 1; /* 0 means not timed yet */
  if (p->ps_per_byte[0] == 0 || p->ps_per_byte[1] == 0)
    return;
  bool was = p->around;
  p->around = p->ps_per_byte[0] > 2 * p->ps_per_byte[1];
  bool turned = !timed_both || p->around != was;
  if (turned)
    p->probe_every = PROBE_FIRST;
  else if (probe)
    p->probe_every = p->probe_every * 2 > PROBE_MOST ? PROBE_MOST
                                                     : p->probe_every * 2;
  if (turned || probe)
    p->until_probe = p->probe_every;
  else if (p->until_probe > 0)
    p->until_probe--;
}

/* One piece into the ring, the way f->stores says. */
static void store_piece(struct hoop_fifo *f, char *dst, const char *src,
                        size_t n) {
  if (f->stores == HOOP_FIFO_PLAIN || n < HOOP_FIFO_PACED_BYTES) {
    memcpy(dst, src, n);
    return;
  }
  if (f->stores == HOOP_FIFO_AROUND) {
    hoop__copy_cold(dst, src, n);
    return;
  }
  bool around = hoop__fifo_pace_pick(&f->pace);
  long long t0 = hoop__now_ns();
  if (around)
    hoop__copy_cold(dst, src, n);
  else
    memcpy(dst, src, n);
  long long ns = hoop__now_ns() - t0;
  hoop__fifo_pace_record(&f->pace, around,
                         (uint64_t)(ns > 0 ? ns : 0) * 1000 / n);
}

/*
 * Makes the outgoing ring writable up to `upto` bytes from its start.
 * Pieces go in order from the ring's start (or from a little past a
 * stream's padding), so what grow made writable is one range from there.
 */
static hoop_result_t make_writable(struct hoop_fifo *f, size_t upto) {
  if (f->signal->grow == NULL) {
    f->out_ready = f->ring;
    return HOOP_SUCCESS;
  }
  return f->signal->grow(f->ctx, upto, &f->out_ready);
}

hoop_result_t hoop__fifo_send(struct hoop_fifo *f, const struct iovec *iov,
                              int iovcnt, size_t *sent) {
  size_t room = out_room(f), done = 0;
  *sent = 0;
  if (f->out_align && !skip_out_pad(f, &room))
    return HOOP_SUCCESS;
  for (int i = 0; i < iovcnt && room > 0; i++) {
    const char *src = iov[i].iov_base;
    size_t len = iov[i].iov_len;
    while (len > 0 && room > 0) {
      size_t at = (size_t)(f->out_head % f->ring);
      size_t n = piece(f, f->out_head, min_size(len, room));
      if (at + n > f->out_ready) {
        hoop_result_t res = make_writable(f, at + n);
        if (res != HOOP_SUCCESS) {
          *sent = done;
          return res;
        }
      }
      store_piece(f, f->out_ring + at, src, n);
      f->out_head += n;
      f->signal->publish_head(f->ctx, f->out_head, n);
      src += n;
      len -= n;
      room -= n;
      done += n;
    }
  }
  *sent = done;
  return HOOP_SUCCESS;
}

size_t hoop__fifo_recv(struct hoop_fifo *f, void *buf, size_t len, bool cold) {
  if (f->in_align && !skip_in_pad(f))
    return 0;
  size_t avail = min_size(in_avail(f), len), done = 0;
  while (done < avail) {
    size_t n = piece(f, f->in_tail, avail - done);
    char *dst = (char *)buf + done;
    const char *src = f->in_ring + f->in_tail % f->ring;
    if (cold)
      hoop__copy_cold(dst, src, n);
    else
      memcpy(dst, src, n);
    f->in_tail += n;
    f->signal->publish_tail(f->ctx, f->in_tail);
    done += n;
  }
  return done;
}

size_t hoop__fifo_peek(struct hoop_fifo *f, size_t want, const void **ptr) {
  if (f->in_align && !skip_in_pad(f))
    return 0;
  size_t at = (size_t)(f->in_tail % f->ring);
  *ptr = f->in_ring + at;
  return min_size(min_size(in_avail(f), want), f->ring - at);
}

void hoop__fifo_release(struct hoop_fifo *f, size_t len) {
  f->in_tail += len;
  f->signal->publish_tail(f->ctx, f->in_tail);
}

bool hoop__fifo_can_move(const struct hoop_fifo *f, int send) {
  if (send)
    return out_room(f) > (f->out_align ? stream_pad(f, f->out_head) : 0);
  return in_avail(f) > (f->in_align ? stream_pad(f, f->in_tail) : 0);
}
