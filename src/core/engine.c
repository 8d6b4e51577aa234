/* The progress engine for chain schedules; see engine.h. */
#include "core/engine.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "reduce/reduce.h"
#include "transport/transport.h"

#define HEADER_BYTES sizeof(struct hoop_wire_header)
#define MAX_IOV 8

const char *hoop__coll_name(enum hoop_coll coll) {
  switch (coll) {
  case HOOP_COLL_ALLREDUCE: return "allreduce";
  case HOOP_COLL_REDUCE_SCATTER: return "reduce_scatter";
  case HOOP_COLL_ALLGATHER: return "allgather";
  }
  return "unknown-collective";
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Bytes of slice `round` of a step that moves `bytes` in all. */
static size_t window(size_t bytes, size_t round, size_t slice) {
  size_t start = round * slice;
  return bytes > start ? min_size(slice, bytes - start) : 0;
}

static size_t out_bytes(const struct hoop_chain *c, int step) {
  return step == 0 ? c->first_bytes : c->steps[step - 1].bytes;
}

/* The slice `step` carries at `tick`, or SIZE_MAX when it carries none. */
static size_t round_at(const struct hoop_chain *c, size_t tick, int step) {
  size_t lag = (size_t)step * c->depth;
  return tick >= lag && tick - lag < c->rounds ? tick - lag : SIZE_MAX;
}

/* Bytes `step` moves at `tick` in the out- or in-stream. */
static size_t window_at(const struct hoop_chain *c, size_t slice, int out,
                        size_t tick, int step) {
  size_t round = round_at(c, tick, step);
  if (round == SIZE_MAX)
    return 0;
  return window(out ? out_bytes(c, step) : c->steps[step].bytes, round,
                slice);
}

/* Moves a cursor past finished and empty windows; returns 1 at the end. */
static int advance(const struct hoop_chain *c, size_t slice, int out,
                   size_t *tick, int *step, size_t *off) {
  for (;;) {
    if (*tick >= c->ticks)
      return 1;
    if (*off < window_at(c, slice, out, *tick, *step))
      return 0;
    *off = 0;
    if (++*step == c->nsteps) {
      *step = 0;
      ++*tick;
    }
  }
}

/* How much of in-step `step`'s slice `round` is received and processed. */
static size_t processed(const struct hoop_chain *c, size_t slice,
                        size_t round, int step) {
  size_t tick = round + (size_t)step * c->depth;
  if (c->in_done || c->in_tick > tick ||
      (c->in_tick == tick && c->in_step > step))
    return window(c->steps[step].bytes, round, slice);
  if (c->in_tick == tick && c->in_step == step)
    return c->in_off;
  return 0;
}

/* Contiguous outbox bytes starting `skip` bytes past its head. */
static size_t outbox_span(const struct hoop_bytering *r, size_t skip,
                          const char **ptr) {
  size_t pos = r->head + skip;
  size_t off = pos % r->cap;
  *ptr = r->buf + off;
  return min_size(r->tail - pos, r->cap - off);
}

/*
 * Gathers what out-stream can send now, from the cursor on, into iov:
 * the rest of the header, then ready bytes of consecutive windows.
 */
static int gather_out(const struct hoop_chain_job *job,
                      const struct hoop_chain *c, struct iovec *iov,
                      size_t *total) {
  int n = 0;
  *total = 0;
  if (c->hdr_sent < HEADER_BYTES) {
    iov[n].iov_base = (char *)&job->header + c->hdr_sent;
    iov[n].iov_len = HEADER_BYTES - c->hdr_sent;
    *total += iov[n++].iov_len;
  }
  size_t slice = job->slice_bytes, tick = c->out_tick, off = c->out_off;
  int step = c->out_step;
  size_t outbox_taken = 0;
  while (!advance(c, slice, 1, &tick, &step, &off)) {
    size_t round = round_at(c, tick, step);
    size_t win = window(out_bytes(c, step), round, slice);
    const char *ptr;
    size_t avail;
    if (step == 0) {
      ptr = c->first + round * slice + off;
      avail = win - off;
    } else {
      const struct hoop_chain_step *prev = &c->steps[step - 1];
      avail = processed(c, slice, round, step - 1) - off;
      if (prev->action == HOOP_IN_REDUCE_FORWARD) {
        avail = min_size(avail, outbox_span(&c->outbox, outbox_taken, &ptr));
        outbox_taken += avail;
      } else {
        ptr = prev->dst + round * slice + off;
      }
    }
    if (avail == 0)
      break;
    /* A window that continues the previous one in memory joins its iov. */
    struct iovec *last = n > 0 ? &iov[n - 1] : NULL;
    if (last != NULL && (char *)last->iov_base + last->iov_len == ptr) {
      last->iov_len += avail;
    } else {
      if (n == MAX_IOV)
        break;
      iov[n].iov_base = (void *)ptr;
      iov[n].iov_len = avail;
      n++;
    }
    *total += avail;
    off += avail;
    if (off < win)
      break;
  }
  return n;
}

static hoop_result_t send_progress(struct hoop_chain_job *job,
                                   struct hoop_chain *c, int *progress) {
  if (c->out_done)
    return HOOP_SUCCESS;
  struct iovec iov[MAX_IOV];
  size_t want;
  int n = gather_out(job, c, iov, &want);
  if (n == 0)
    return HOOP_SUCCESS; /* waiting for the in-stream, not the socket */
  size_t sent;
  HOOP_CHECK(c->send_conn->ops->send(c->send_conn, iov, n, &sent));
  c->want_pollout = sent < want;
  if (sent == 0)
    return HOOP_SUCCESS;
  *progress = 1;
  c->bytes_out += sent;
  size_t hdr = min_size(sent, HEADER_BYTES - c->hdr_sent);
  c->hdr_sent += hdr;
  sent -= hdr;
  size_t slice = job->slice_bytes;
  while (sent > 0) {
    advance(c, slice, 1, &c->out_tick, &c->out_step, &c->out_off);
    size_t win = window_at(c, slice, 1, c->out_tick, c->out_step);
    size_t take = min_size(sent, win - c->out_off);
    if (c->out_step > 0 &&
        c->steps[c->out_step - 1].action == HOOP_IN_REDUCE_FORWARD)
      hoop__bytering_consume(&c->outbox, take);
    c->out_off += take;
    sent -= take;
  }
  c->out_done = c->hdr_sent == HEADER_BYTES &&
                advance(c, slice, 1, &c->out_tick, &c->out_step,
                        &c->out_off);
  return HOOP_SUCCESS;
}

void hoop__describe_call(const struct hoop_wire_header *h, char *buf,
                         size_t len) {
  snprintf(buf, len, "%s #%llu (count %llu, %s, %s, root %d, slice %u, "
                     "%u channel(s), depth %u)",
           hoop__coll_name((enum hoop_coll)h->coll),
           (unsigned long long)h->seq, (unsigned long long)h->count,
           hoop_dtype_name((hoop_dtype_t)h->dtype),
           hoop_op_name((hoop_op_t)h->op), h->root, h->slice_bytes,
           h->nchannels, h->depth);
}

static hoop_result_t check_header(const struct hoop_chain_job *job,
                                  const struct hoop_chain *c,
                                  const void *bytes) {
  struct hoop_wire_header got;
  memcpy(&got, bytes, sizeof got);
  const struct hoop_wire_header *mine = &job->header;
  if (got.magic != mine->magic || got.version != mine->version)
    return HOOP_ERROR(job->comm, HOOP_ERR_MISMATCH,
                      "stream from %s is out of step: expected a header "
                      "(magic %08x) and got %08x",
                      c->recv_conn->peer_desc, mine->magic, got.magic);
  if (got.coll == mine->coll && got.dtype == mine->dtype &&
      got.op == mine->op && got.seq == mine->seq &&
      got.count == mine->count && got.root == mine->root &&
      got.slice_bytes == mine->slice_bytes &&
      got.nchannels == mine->nchannels && got.depth == mine->depth)
    return HOOP_SUCCESS;
  char a[200], b[200];
  hoop__describe_call(mine, a, sizeof a);
  hoop__describe_call(&got, b, sizeof b);
  return HOOP_ERROR(job->comm, HOOP_ERR_MISMATCH,
                    "ranks disagree: this rank called %s but %s called %s",
                    a, c->recv_conn->peer_desc, b);
}

static hoop_result_t receive_header(struct hoop_chain_job *job,
                                    struct hoop_chain *c, int *progress) {
  struct hoop_conn *conn = c->recv_conn;
  size_t first = c->rounds > 0 ? window(c->steps[0].bytes, 0,
                                        job->slice_bytes)
                               : 0;
  const void *p;
  size_t avail;
  HOOP_CHECK(conn->ops->peek(conn, HEADER_BYTES + first, &p, &avail));
  if (avail < HEADER_BYTES) {
    c->want_pollin = 1;
    return HOOP_SUCCESS;
  }
  HOOP_CHECK(check_header(job, c, p));
  conn->ops->release(conn, HEADER_BYTES);
  c->hdr_received = HEADER_BYTES;
  c->bytes_in += HEADER_BYTES;
  *progress = 1;
  return HOOP_SUCCESS;
}

/*
 * Bytes from the in-cursor to the end of the run of windows that follow
 * it in the stream and continue it in memory (the same step's next
 * slice), so that one system call or one reduction covers them all.
 */
static size_t in_run(const struct hoop_chain *c, size_t slice) {
  size_t tick = c->in_tick, round = round_at(c, tick, c->in_step);
  int step = c->in_step;
  size_t off = window(c->steps[step].bytes, round, slice);
  size_t bytes = off - c->in_off;
  while (!advance(c, slice, 0, &tick, &step, &off) && step == c->in_step &&
         round_at(c, tick, step) == round + 1) {
    round++;
    off = window(c->steps[step].bytes, round, slice);
    bytes += off;
  }
  return bytes;
}

/* Moves the in-cursor `len` bytes on, across windows. */
static void in_skip(struct hoop_chain *c, size_t slice, size_t len) {
  while (len > 0) {
    size_t win = window_at(c, slice, 0, c->in_tick, c->in_step);
    size_t take = min_size(len, win - c->in_off);
    c->in_off += take;
    len -= take;
    advance(c, slice, 0, &c->in_tick, &c->in_step, &c->in_off);
  }
}

/* Receives and processes what the in-stream has; returns when it stalls. */
static hoop_result_t recv_progress(struct hoop_chain_job *job,
                                   struct hoop_chain *c, int *progress) {
  struct hoop_conn *conn = c->recv_conn;
  size_t slice = job->slice_bytes, esz = job->elem_size;
  c->want_pollin = 0;
  if (c->hdr_received < HEADER_BYTES) {
    HOOP_CHECK(receive_header(job, c, progress));
    if (c->hdr_received < HEADER_BYTES)
      return HOOP_SUCCESS;
  }
  while (!(c->in_done = advance(c, slice, 0, &c->in_tick, &c->in_step,
                                &c->in_off))) {
    const struct hoop_chain_step *s = &c->steps[c->in_step];
    size_t round = round_at(c, c->in_tick, c->in_step);
    size_t pos = round * slice + c->in_off;
    size_t left = in_run(c, slice);
    size_t moved;
    if (s->action == HOOP_IN_COPY) {
      HOOP_CHECK(conn->ops->recv(conn, s->dst + pos, left, &moved));
    } else {
      const void *in;
      size_t avail;
      HOOP_CHECK(conn->ops->peek(conn, left, &in, &avail));
      moved = min_size(avail, left) / esz * esz;
      char *out;
      if (s->action == HOOP_IN_REDUCE_FORWARD) {
        /* A full outbox waits for the out-stream, not for the socket. */
        size_t room = hoop__bytering_writable(&c->outbox, &out) / esz * esz;
        if (room == 0)
          return HOOP_SUCCESS;
        moved = min_size(moved, room);
      } else {
        out = s->dst + pos;
      }
      if (moved > 0) {
        hoop__reduce(out, in, s->local + pos, moved / esz, job->dtype,
                     job->op);
        if (s->action == HOOP_IN_REDUCE_FORWARD)
          hoop__bytering_produce(&c->outbox, moved);
        else if (job->op == HOOP_AVG)
          hoop__reduce_div(out, moved / esz, job->dtype,
                           job->comm->nranks);
        conn->ops->release(conn, moved);
      }
    }
    if (moved == 0) {
      c->want_pollin = 1;
      return HOOP_SUCCESS;
    }
    in_skip(c, slice, moved);
    c->bytes_in += moved;
    *progress = 1;
  }
  return HOOP_SUCCESS;
}

static hoop_result_t stalled_error(struct hoop_chain_job *job) {
  for (int i = 0; i < job->nchains; i++) {
    const struct hoop_chain *c = &job->chains[i];
    if (!c->in_done)
      return HOOP_ERROR(job->comm, HOOP_ERR_TIMEOUT,
                        "no progress for %d ms waiting for data from %s "
                        "(received %llu of %llu bytes)",
                        job->comm->timeout_ms, c->recv_conn->peer_desc,
                        (unsigned long long)c->bytes_in,
                        (unsigned long long)c->total_in);
    if (!c->out_done)
      return HOOP_ERROR(job->comm, HOOP_ERR_TIMEOUT,
                        "no progress for %d ms sending to %s (sent %llu of "
                        "%llu bytes)",
                        job->comm->timeout_ms, c->send_conn->peer_desc,
                        (unsigned long long)c->bytes_out,
                        (unsigned long long)c->total_out);
  }
  return HOOP_ERROR(job->comm, HOOP_ERR_INTERNAL, "stalled");
}

static void add_pollfd(struct pollfd *fds, int *n, int fd, short events) {
  for (int i = 0; i < *n; i++) {
    if (fds[i].fd == fd) {
      fds[i].events |= events;
      return;
    }
  }
  fds[*n] = (struct pollfd){.fd = fd, .events = events};
  ++*n;
}

/*
 * Sleeps until a wanted connection is ready or another rank reports a
 * failure on the listening socket.  *polled gets the number of
 * connections waited on (0 means the schedule has nothing to wait for).
 */
static hoop_result_t wait_for_io(struct hoop_chain_job *job,
                                 long long deadline, int *polled) {
  struct pollfd fds[2 * 16 + 1];
  int n = 0;
  for (int i = 0; i < job->nchains && n + 3 <= 33; i++) {
    struct hoop_chain *c = &job->chains[i];
    if (c->want_pollin && !c->in_done)
      add_pollfd(fds, &n, c->recv_conn->ops->poll_fd(c->recv_conn), POLLIN);
    if (c->want_pollout && !c->out_done)
      add_pollfd(fds, &n, c->send_conn->ops->poll_fd(c->send_conn),
                 POLLOUT);
  }
  *polled = n;
  if (n == 0)
    return HOOP_SUCCESS;
  fds[n] = (struct pollfd){.fd = job->comm->listen_fd, .events = POLLIN};
  long long left = deadline - hoop__now_ms();
  if (left > 0 && poll(fds, (nfds_t)n + 1, left > 1000 ? 1000 : (int)left) > 0 &&
      (fds[n].revents & POLLIN))
    HOOP_CHECK(hoop__comm_check_notices(job->comm, 0));
  return HOOP_SUCCESS;
}

/*
 * A closed connection is usually the echo of a failure elsewhere; if the
 * rank that failed first says why within a moment, report that instead.
 */
static hoop_result_t prefer_notice(struct hoop_comm *comm,
                                   hoop_result_t res) {
  if (res == HOOP_ERR_REMOTE && !comm->notice_received) {
    hoop_result_t notice = hoop__comm_check_notices(comm, 100);
    if (notice != HOOP_SUCCESS)
      return notice;
  }
  return res;
}

static void prepare(struct hoop_chain_job *job) {
  size_t slice = job->slice_bytes;
  for (int i = 0; i < job->nchains; i++) {
    struct hoop_chain *c = &job->chains[i];
    size_t longest = c->first_bytes;
    c->total_out = HEADER_BYTES + c->first_bytes;
    c->total_in = HEADER_BYTES;
    for (int k = 0; k < c->nsteps; k++) {
      longest = c->steps[k].bytes > longest ? c->steps[k].bytes : longest;
      c->total_in += c->steps[k].bytes;
      if (k + 1 < c->nsteps)
        c->total_out += c->steps[k].bytes;
    }
    c->rounds = (longest + slice - 1) / slice;
    if (c->depth > c->rounds)
      c->depth = c->rounds;
    c->ticks = c->rounds + (size_t)(c->nsteps - 1) * c->depth;
  }
}

hoop_result_t hoop__engine_run(struct hoop_chain_job *job) {
  struct hoop_comm *comm = job->comm;
  prepare(job);
  long long deadline = hoop__now_ms() + comm->timeout_ms;
  long long idle_since_ns = hoop__now_ns();
  for (;;) {
    if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
      return HOOP_ERROR(comm, HOOP_ERR_ABORTED,
                        "hoop_comm_abort() was called during the "
                        "collective");
    int progress = 0, done = 1;
    for (int i = 0; i < job->nchains; i++) {
      struct hoop_chain *c = &job->chains[i];
      hoop_result_t res = recv_progress(job, c, &progress);
      if (res == HOOP_SUCCESS)
        res = send_progress(job, c, &progress);
      /* Sending may have freed outbox room that the in-stream waits on. */
      if (res == HOOP_SUCCESS)
        res = recv_progress(job, c, &progress);
      if (res != HOOP_SUCCESS)
        return prefer_notice(comm, res);
      done &= c->in_done && c->out_done;
    }
    if (done)
      return HOOP_SUCCESS;
    long long now_ns = hoop__now_ns();
    if (progress) {
      idle_since_ns = now_ns;
      deadline = now_ns / 1000000 + comm->timeout_ms;
      continue;
    }
    /*
     * A peer's next bytes usually come within microseconds; trying again
     * for a moment is cheaper than sleeping in poll() and being woken.
     */
    if (now_ns - idle_since_ns < comm->spin_ns)
      continue;
    if (now_ns / 1000000 >= deadline)
      return stalled_error(job);
    int polled;
    HOOP_CHECK(wait_for_io(job, deadline, &polled));
    if (polled == 0)
      return HOOP_ERROR(comm, HOOP_ERR_INTERNAL,
                        "schedule stalled with nothing to wait for");
  }
}
