/* The parsers of the set-up messages and the collective header; see wire.h. */
#include "core/wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/comm.h"
#include "core/conn.h"
#include "core/engine.h"

__attribute__((format(printf, 3, 4))) static bool refuse(char *why,
                                                         size_t len,
                                                         const char *fmt,
                                                         ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return false;
}

/* Copies a message of exactly `size` bytes out of the buffer it came in. */
static bool take(void *out, size_t size, const void *bytes, size_t len,
                 const char *what, char *why, size_t why_len) {
  if (len != size)
    return refuse(why, why_len, "%s of %zu bytes, not %zu", what, len, size);
  memcpy(out, bytes, size);
  return true;
}

/* Copies text of at most `len` bytes, cut at its first NUL and to `cap`,
   with control characters made visible, since it ends up in logs. */
static void copy_text(char *dst, size_t cap, const char *src, size_t len) {
  size_t n = 0;
  while (n + 1 < cap && n < len && src[n] != '\0') {
    unsigned char c = (unsigned char)src[n];
    dst[n] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    n++;
  }
  dst[n] = '\0';
}

bool hoop__peer_info_parse(const void *bytes, int32_t rank,
                           struct hoop_peer_info *out, char *why,
                           size_t why_len) {
  struct hoop_peer_info p;
  memcpy(&p, bytes, sizeof p);
  if (p.rank != rank)
    return refuse(why, why_len, "the info of rank %d says rank %d", rank,
                  p.rank);
  if ((p.addr.family != AF_INET && p.addr.family != AF_INET6) ||
      p.addr.port == 0)
    return refuse(why, why_len,
                  "rank %d's address has family %u and port %u", rank,
                  p.addr.family, p.addr.port);
  if (p.pid <= 0 || p.cuda_devices < 0)
    return refuse(why, why_len, "rank %d's info has pid %d and %d GPUs",
                  rank, p.pid, p.cuda_devices);
  if (memchr(p.hostname, '\0', sizeof p.hostname) == NULL)
    return refuse(why, why_len,
                  "rank %d's host name does not end within its %zu bytes",
                  rank, sizeof p.hostname);
  if (!hoop__transports_parse(&p, why, why_len))
    return false;
  *out = p;
  return true;
}

bool hoop__hello_parse(const void *bytes, size_t len, struct hoop_hello *out,
                       char *why, size_t why_len) {
  struct hoop_hello h;
  if (!take(&h, sizeof h, bytes, len, "a hello", why, why_len))
    return false;
  if (h.magic != HOOP_WIRE_MAGIC || h.version != HOOP_WIRE_VERSION)
    return refuse(why, why_len,
                  "not a hoop hello of this protocol version (magic "
                  "%08x, version %u)",
                  h.magic, h.version);
  if (h.nranks < 1 || h.nranks > HOOP_MAX_RANKS || h.rank < 0 ||
      h.rank >= h.nranks)
    return refuse(why, why_len, "a hello from rank %d of %d", h.rank,
                  h.nranks);
  if (!hoop__peer_info_parse((const char *)bytes +
                                 offsetof(struct hoop_hello, info),
                             h.rank, &h.info, why, why_len))
    return false;
  *out = h;
  return true;
}

/* Whether `status` is one of the result codes of this hoop. */
static bool known_result(int32_t status) {
  switch (status) {
#define HOOP_RESULT_CASE_(name, value, text) case value:
    HOOP_RESULT_LIST(HOOP_RESULT_CASE_)
#undef HOOP_RESULT_CASE_
    return true;
  }
  return false;
}

bool hoop__reply_parse(const void *bytes, size_t len, struct hoop_reply *out,
                       char *why, size_t why_len) {
  struct hoop_reply r;
  if (!take(&r, sizeof r, bytes, len, "a reply", why, why_len))
    return false;
  if (!known_result(r.status))
    return refuse(why, why_len, "a reply with status %d", r.status);
  if (r.status == HOOP_SUCCESS &&
      (r.nranks < 1 || r.nranks > HOOP_MAX_RANKS || r.rank < 1 ||
       r.rank >= r.nranks))
    return refuse(why, why_len, "a reply that makes this rank %d of %d",
                  r.rank, r.nranks);
  out->status = r.status;
  out->nranks = r.nranks;
  out->rank = r.rank;
  copy_text(out->message, sizeof out->message, r.message, sizeof r.message);
  memcpy(out->session, r.session, sizeof out->session);
  return true;
}

bool hoop__peer_table_parse(const void *bytes, size_t len, int32_t nranks,
                            struct hoop_peer_info *out, char *why,
                            size_t why_len) {
  size_t entry = sizeof *out;
  if (nranks < 1 || nranks > HOOP_MAX_RANKS || len != entry * (size_t)nranks)
    return refuse(why, why_len, "a table of %zu bytes for %d ranks", len,
                  nranks);
  for (int32_t r = 0; r < nranks; r++) {
    if (!hoop__peer_info_parse((const char *)bytes + entry * (size_t)r, r,
                               &out[r], why, why_len))
      return false;
  }
  return true;
}

bool hoop__handshake_parse(const void *bytes, size_t len, int32_t nranks,
                           int32_t channel_lo, int32_t channel_hi,
                           struct hoop_handshake *out, char *why,
                           size_t why_len) {
  struct hoop_handshake h;
  if (!take(&h, sizeof h, bytes, len, "a handshake", why, why_len))
    return false;
  if (h.magic != HOOP_WIRE_MAGIC || h.version != HOOP_WIRE_VERSION)
    return refuse(why, why_len,
                  "not a hoop handshake of this protocol version (magic "
                  "%08x, version %u)",
                  h.magic, h.version);
  if (h.from < 0 || h.from >= nranks || h.to < 0 || h.to >= nranks ||
      h.from == h.to)
    return refuse(why, why_len, "a handshake from rank %d to rank %d of %d",
                  h.from, h.to, nranks);
  if (h.channel < channel_lo || h.channel > channel_hi)
    return refuse(why, why_len, "a handshake for channel %d, not %d to %d",
                  h.channel, channel_lo, channel_hi);
  if (h.kind != HOOP_NOTICE_FAILED &&
      (h.channel != HOOP_NOTICE_CHANNEL || h.kind != HOOP_NOTICE_EXCLUDED))
    return refuse(why, why_len, "a handshake of kind %d for channel %d",
                  h.kind, h.channel);
  *out = h;
  return true;
}

bool hoop__join_reply_parse(const void *bytes, size_t len, int32_t max_ranks,
                            struct hoop_join_reply *out, char *why,
                            size_t why_len) {
  struct hoop_join_reply r;
  if (!take(&r, sizeof r, bytes, len, "a join reply", why, why_len))
    return false;
  if (r.status < HOOP_SUCCESS || r.status > HOOP_ERR_INTERNAL)
    return refuse(why, why_len, "a join reply with status %d", r.status);
  if (r.status == HOOP_SUCCESS &&
      (r.nranks < 2 || r.nranks > max_ranks || r.rank < 1 ||
       r.rank >= r.nranks))
    return refuse(why, why_len, "a join reply placing it as rank %d of %d",
                  r.rank, r.nranks);
  char message[sizeof r.message];
  copy_text(message, sizeof message, r.message, sizeof r.message);
  memcpy(r.message, message, sizeof message);
  *out = r;
  return true;
}

void hoop__notice_parse(const void *bytes, size_t len, char *reason,
                        size_t cap) {
  copy_text(reason, cap, bytes, len);
}

bool hoop__whereabouts_parse(const void *bytes, size_t len, int32_t nranks,
                             struct hoop_whereabouts *out, char *why,
                             size_t why_len) {
  struct hoop_whereabouts w;
  if (!take(&w, sizeof w, bytes, len, "whereabouts", why, why_len))
    return false;
  if (w.magic != HOOP_WIRE_MAGIC)
    return refuse(why, why_len, "whereabouts with magic %08x", w.magic);
  if (w.state >= HOOP_AT_COUNT || w.wait_for < -1 || w.wait_for >= nranks ||
      (w.wait_send != 0 && w.wait_send != 1) || w.wait_ms < 0)
    return refuse(why, why_len,
                  "whereabouts in state %u, waiting %lld ms %s rank %d",
                  w.state, (long long)w.wait_ms,
                  w.wait_send == 1 ? "to send to" : "for", w.wait_for);
  if (memchr(w.call, '\0', sizeof w.call) == NULL)
    return refuse(why, why_len,
                  "a call name that does not end within its %zu bytes",
                  sizeof w.call);
  char call[sizeof w.call];
  copy_text(call, sizeof call, w.call, sizeof w.call);
  memcpy(w.call, call, sizeof call);
  if (w.in_plan > 1)
    return refuse(why, why_len, "whereabouts with in_plan %u", w.in_plan);
  struct hoop_wire_header plan = {0};
  if (w.in_plan == 1 &&
      !hoop__wire_header_parse(&w.plan, sizeof w.plan, &plan, why, why_len))
    return false;
  w.plan = plan;
  if (w.nlost < 0 || w.nlost > HOOP_SHRINK_MAX_LOST || w.decided > 1)
    return refuse(why, why_len, "whereabouts with %d lost ranks, decided %u",
                  w.nlost, w.decided);
  for (int i = 0; i < w.nlost; i++) {
    if (w.lost[i] < 0 || w.lost[i] >= nranks)
      return refuse(why, why_len, "whereabouts holding rank %d of %d lost",
                    w.lost[i], nranks);
  }
  *out = w;
  return true;
}

bool hoop__wire_header_parse(const void *bytes, size_t len,
                             struct hoop_wire_header *out, char *why,
                             size_t why_len) {
  struct hoop_wire_header h;
  if (!take(&h, sizeof h, bytes, len, "a header", why, why_len))
    return false;
  if (h.magic != HOOP_WIRE_MAGIC || h.version != HOOP_WIRE_VERSION)
    return refuse(why, why_len,
                  "expected a header (magic %08x, version %u) and got "
                  "magic %08x, version %u",
                  HOOP_WIRE_MAGIC, HOOP_WIRE_VERSION, h.magic, h.version);
  if (h.coll < 1 || h.coll >= HOOP_COLL_COUNT || h.dtype >= HOOP_DTYPE_COUNT ||
      h.op >= HOOP_OP_COUNT || h.algo >= HOOP_ALGO_COUNT ||
      h.nchannels < 1 || h.nchannels > HOOP_MAX_NSOCKS)
    return refuse(why, why_len,
                  "a header with collective %u, dtype %u, op %u, algorithm "
                  "%u and %u channel(s)",
                  h.coll, h.dtype, h.op, h.algo, h.nchannels);
  *out = h;
  return true;
}

bool hoop__wire_same_call(const struct hoop_wire_header *a,
                          const struct hoop_wire_header *b) {
  return a->coll == b->coll && a->dtype == b->dtype && a->op == b->op &&
         a->seq == b->seq && a->count == b->count && a->root == b->root &&
         a->algo == b->algo && a->slice_bytes == b->slice_bytes &&
         a->nchannels == b->nchannels && a->depth == b->depth;
}
