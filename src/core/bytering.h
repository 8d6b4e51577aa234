/*
 * A byte FIFO over one buffer, for staging received bytes and for the
 * outboxes of pipelined schedules.  Positions only grow; an empty ring
 * rewinds to offset 0 so that each new stream starts aligned.
 */
#ifndef HOOP_BYTERING_H
#define HOOP_BYTERING_H

#include <stddef.h>

struct hoop_bytering {
  char *buf;
  size_t cap; /* a multiple of 64, so element offsets stay aligned */
  size_t head; /* next byte to consume */
  size_t tail; /* next byte to produce */
};

static inline size_t hoop__bytering_used(const struct hoop_bytering *r) {
  return r->tail - r->head;
}

/* Contiguous bytes ready to consume, starting at *ptr. */
static inline size_t hoop__bytering_readable(const struct hoop_bytering *r,
                                             char **ptr) {
  size_t off = r->head % r->cap;
  size_t n = r->tail - r->head;
  *ptr = r->buf + off;
  return n < r->cap - off ? n : r->cap - off;
}

/* Contiguous free space to produce into, starting at *ptr. */
static inline size_t hoop__bytering_writable(const struct hoop_bytering *r,
                                             char **ptr) {
  size_t off = r->tail % r->cap;
  size_t n = r->cap - (r->tail - r->head);
  *ptr = r->buf + off;
  return n < r->cap - off ? n : r->cap - off;
}

static inline void hoop__bytering_produce(struct hoop_bytering *r, size_t n) {
  r->tail += n;
}

static inline void hoop__bytering_consume(struct hoop_bytering *r, size_t n) {
  r->head += n;
  if (r->head == r->tail)
    r->head = r->tail = 0;
}

#endif /* HOOP_BYTERING_H */
