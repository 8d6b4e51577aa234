/*
 * The FIFO-with-credits protocol of the memory transports (fifo.h).
 */
#include <string.h>

#include "core/copy.h"
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
 * Skips the padding that starts a stream aligned, once it fits; false
 * while it does not.  Both ends skip from the same stream position.
 */
static bool skip_out_pad(struct hoop_fifo *f, size_t *room) {
  size_t pad = align_pad(f->out_head);
  if (*room < pad)
    return false;
  f->out_head += pad;
  *room -= pad;
  f->out_align = false;
  return true;
}

static bool skip_in_pad(struct hoop_fifo *f) {
  size_t pad = align_pad(f->in_tail);
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

size_t hoop__fifo_send(struct hoop_fifo *f, const struct iovec *iov,
                       int iovcnt) {
  size_t room = out_room(f), done = 0;
  if (f->out_align && !skip_out_pad(f, &room))
    return 0;
  for (int i = 0; i < iovcnt && room > 0; i++) {
    const char *src = iov[i].iov_base;
    size_t len = iov[i].iov_len;
    while (len > 0 && room > 0) {
      size_t n = piece(f, f->out_head, min_size(len, room));
      char *dst = f->out_ring + f->out_head % f->ring;
      if (f->around_from != 0 && n >= f->around_from)
        hoop__copy_cold(dst, src, n);
      else
        memcpy(dst, src, n);
      f->out_head += n;
      f->signal->publish_head(f->ctx, f->out_head, n);
      src += n;
      len -= n;
      room -= n;
      done += n;
    }
  }
  return done;
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
    return out_room(f) > (f->out_align ? align_pad(f->out_head) : 0);
  return in_avail(f) > (f->in_align ? align_pad(f->in_tail) : 0);
}
