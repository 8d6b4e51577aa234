/*
 * The ranks' output: each line labelled with its rank and written whole,
 * and a rank's progress bar (text a carriage return alone ends) kept on a
 * terminal's last line, under the other lines.  Also hoop-run's own
 * notices, which must not land in the middle of a bar.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "hoop-run.h"

enum {
  /*
   * An unfinished line is held back until its newline arrives, so that it
   * comes out whole.  Past this size it is broken into labelled lines
   * instead: a rank that never ends its line must not exhaust our memory.
   */
  LONG_LINE = 1024 * 1024,
};

/*
 * The stream whose status the terminal's last line shows, or NULL.  File
 * scope, because notices clear it before they print.
 */
static struct stream *shown;

/* Clears from the cursor to the line's end; after a carriage return, the
   whole line. */
static const char CLEAR_TO_END[] = "\033[K";
static const char ERASE_LINE[] = "\r\033[K";

static bool buf_reserve(struct buf *b, size_t extra)
{
  size_t cap = b->cap ? b->cap : 256;

  while (cap - b->len < extra) {
    if (cap > SIZE_MAX / 2)
      return false;
    cap *= 2;
  }
  if (cap == b->cap)
    return true;
  char *data = realloc(b->data, cap);
  if (data == NULL)
    return false;
  b->data = data;
  b->cap = cap;
  return true;
}

bool buf_append(struct buf *b, const void *data, size_t len)
{
  if (len == 0)
    return true;
  if (!buf_reserve(b, len))
    return false;
  memcpy(b->data + b->len, data, len);
  b->len += len;
  return true;
}

static bool buf_vappendf(struct buf *b, const char *fmt, va_list ap)
{
  va_list again;

  va_copy(again, ap);
  int len = vsnprintf(NULL, 0, fmt, ap);
  bool ok = len >= 0 && buf_reserve(b, (size_t)len + 1);
  if (ok) {
    vsnprintf(b->data + b->len, (size_t)len + 1, fmt, again);
    b->len += (size_t)len;
  }
  va_end(again);
  return ok;
}

__attribute__((format(printf, 2, 3)))
bool buf_appendf(struct buf *b, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  bool ok = buf_vappendf(b, fmt, ap);
  va_end(ap);
  return ok;
}

void buf_free(struct buf *b)
{
  free(b->data);
  *b = (struct buf){NULL, 0, 0};
}

/* Waits until fd takes more output; see write_all. */
static int wait_writable(int fd)
{
  struct pollfd p = {.fd = fd, .events = POLLOUT};

  while (poll(&p, 1, -1) < 0) {
    if (errno != EINTR)
      return -1;
  }
  return 0;
}

static int write_all(int fd, const char *data, size_t len)
{
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n >= 0) {
      data += n;
      len -= (size_t)n;
      continue;
    }
    if (errno == EINTR)
      continue;
    /* Our stdout may be a non-blocking file shared with another process. */
    if (errno != EAGAIN || wait_writable(fd) != 0)
      return -1;
  }
  return 0;
}

/* Clears the terminal's last line of the status shown there, so that what
   comes next starts on an empty line.  Should the terminal have gone, the
   writes of lines will say so. */
static void hide_status(void)
{
  if (shown == NULL)
    return;
  (void)write_all(shown->dest, ERASE_LINE, strlen(ERASE_LINE));
  shown = NULL;
}

/* One whole line to stderr in a single write, so that it cannot be split
   by ranks writing to the same stderr under --no-prefix. */
void vnotice(const char *fmt, va_list ap)
{
  static const char fallback[] = "hoop-run: out of memory\n";
  struct buf line = {NULL, 0, 0};
  bool ok = buf_append(&line, "hoop-run: ", strlen("hoop-run: ")) &&
            buf_vappendf(&line, fmt, ap) && buf_append(&line, "\n", 1);

  hide_status();
  /* If stderr itself fails there is nowhere left to say so. */
  if (ok)
    (void)write_all(STDERR_FILENO, line.data, line.len);
  else
    (void)write_all(STDERR_FILENO, fallback, strlen(fallback));
  buf_free(&line);
}

__attribute__((format(printf, 1, 2)))
void notice(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vnotice(fmt, ap);
  va_end(ap);
}

/* ---- output of the ranks ---- */

static void close_streams_to(struct job *job, int dest)
{
  for (int r = 0; r < job->opt->nranks; r++) {
    for (int i = 0; i < 2; i++) {
      struct stream *s = &job->ranks[r].streams[i];
      if (s->fd >= 0 && s->dest == dest) {
        close_fd(s->fd);
        s->fd = -1;
        buf_free(&s->partial);
        buf_free(&s->status);
        if (shown == s)
          shown = NULL;
      }
    }
  }
}

/*
 * When our stdout or stderr stops taking output (say, `| head` exited) we
 * close the pipes that feed it, so that the ranks see a broken pipe just as
 * if they had been writing there themselves.
 */
static void send_output(struct job *job, int dest)
{
  struct buf *out = &job->out;

  if (out->len == 0 || write_all(dest, out->data, out->len) == 0)
    return;
  if (errno != EPIPE)
    notice("cannot write to %s: %s",
           dest == STDOUT_FILENO ? "stdout" : "stderr", strerror(errno));
  close_streams_to(job, dest);
}

/* Moves the stream's unfinished line, then tail, to the output buffer
   behind the rank's label.  The line replaces the rank's status, as it
   would overwrite it on a terminal. */
static void take_line(struct job *job, struct stream *s, const char *tail,
                      size_t tail_len)
{
  struct buf *out = &job->out;

  if (!buf_append(out, s->label, s->label_len) ||
      !buf_append(out, s->partial.data, s->partial.len) ||
      !buf_append(out, tail, tail_len))
    die(job, "out of memory");
  s->partial.len = 0;
  s->status.len = 0;
}

/* A newline after a status keeps it, as a line, where it stood. */
static void commit_status(struct job *job, struct stream *s)
{
  struct buf *out = &job->out;

  if (!buf_append(out, s->label, s->label_len) ||
      !buf_append(out, s->status.data, s->status.len) ||
      !buf_append(out, "\n", 1))
    die(job, "out of memory");
  s->status.len = 0;
}

/*
 * The unfinished line, then text, ended by a carriage return alone: the
 * rank's new status.  An empty one is a bar's return to the line's start
 * before it draws; one of spaces only is a bar blanking itself.
 */
static void set_status(struct job *job, struct stream *s, const char *text,
                       size_t len)
{
  if (!buf_append(&s->partial, text, len))
    die(job, "out of memory");
  if (s->partial.len == 0)
    return;
  bool blank = true;
  for (size_t i = 0; i < s->partial.len && blank; i++)
    blank = s->partial.data[i] == ' ';
  s->status.len = 0;
  if (!blank && !buf_append(&s->status, s->partial.data, s->partial.len))
    die(job, "out of memory");
  s->partial.len = 0;
}

static size_t terminal_columns(int fd)
{
  struct winsize ws;

  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return 80;
}

/* Draws the stream's status, labelled, over the terminal's last line; cut
   to the terminal's width, since a wrapped line cannot be redrawn. */
static void show_status(struct job *job, struct stream *s)
{
  struct buf line = {NULL, 0, 0};
  size_t columns = terminal_columns(s->dest);
  size_t room = columns > s->label_len + 1 ? columns - s->label_len - 1 : 0;
  size_t len = s->status.len < room ? s->status.len : room;

  /* Not inside a UTF-8 character. */
  while (len > 0 && len < s->status.len &&
         ((unsigned char)s->status.data[len] & 0xC0) == 0x80)
    len--;
  if (!buf_append(&line, "\r", 1) ||
      !buf_append(&line, s->label, s->label_len) ||
      !buf_append(&line, s->status.data, len) ||
      !buf_append(&line, CLEAR_TO_END, strlen(CLEAR_TO_END)))
    die(job, "out of memory");
  (void)write_all(s->dest, line.data, line.len);
  buf_free(&line);
  shown = s;
}

/*
 * Writes the lines taken from the stream.  On a terminal they go above the
 * status line, which then shows the latest status: this stream's if it
 * just changed, else what it showed before, unless that status is gone.
 */
static void emit(struct job *job, struct stream *s, bool status_changed)
{
  struct stream *was = shown;
  struct stream *show = was;

  if (!job->tty[s->dest]) {
    send_output(job, s->dest);
    return;
  }
  if (status_changed && s->status.len > 0)
    show = s;
  else if (was == s && s->status.len == 0)
    show = NULL;
  if (job->out.len == 0 && show == was && !status_changed)
    return;
  if (job->out.len > 0 || show == NULL)
    hide_status();
  send_output(job, s->dest);
  if (show != NULL && show->status.len > 0)
    show_status(job, show);
}

/* The first carriage return or newline in data, or NULL. */
static const char *find_line_end(const char *data, size_t len)
{
  for (size_t i = 0; i < len; i++) {
    if (data[i] == '\n' || data[i] == '\r')
      return data + i;
  }
  return NULL;
}

/* Passes on every complete line in data and keeps the unfinished rest, so
   that lines from different ranks never mix. */
static void feed_stream(struct job *job, struct stream *s, const char *data,
                        size_t len)
{
  const char *end;
  bool status_changed = false;

  job->out.len = 0;
  while ((end = find_line_end(data, len)) != NULL) {
    size_t text_len = (size_t)(end - data);
    size_t used = text_len + 1;
    if (*end == '\r') {
      /* Also a CRLF line's text, which its newline then ends. */
      set_status(job, s, data, text_len);
      status_changed = true;
    } else if (text_len == 0 && s->partial.len == 0 && s->status.len > 0) {
      commit_status(job, s);
    } else {
      take_line(job, s, data, used);
    }
    data += used;
    len -= used;
  }
  if (!buf_append(&s->partial, data, len))
    die(job, "out of memory");
  if (s->partial.len >= LONG_LINE)
    take_line(job, s, "\n", 1);
  emit(job, s, status_changed);
}

/* Ends the stream, finishing a last line that lacks its newline, or else
   keeping its last status. */
void finish_stream(struct job *job, struct stream *s)
{
  job->out.len = 0;
  if (s->partial.len > 0)
    take_line(job, s, "\n", 1);
  else if (s->status.len > 0)
    commit_status(job, s);
  emit(job, s, false);
  if (s->fd >= 0)
    close_fd(s->fd);
  s->fd = -1;
  buf_free(&s->partial);
  buf_free(&s->status);
}

/* Reads what a stream has ready and passes it on.  Returns the number of
   bytes read, 0 at the end of the stream, -1 if nothing was ready. */
ssize_t read_stream(struct job *job, struct stream *s)
{
  ssize_t n;

  do
    n = read(s->fd, job->chunk, sizeof job->chunk);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN)
    return -1;
  if (n < 0)
    notice("cannot read the output of rank %d: %s", s->rank,
           strerror(errno));
  if (n <= 0) {
    finish_stream(job, s);
    return 0;
  }
  feed_stream(job, s, job->chunk, (size_t)n);
  return n;
}

/*
 * Reads what is waiting in a stream's pipe, but no more than the pipe can
 * hold: a process that a rank left behind could otherwise keep us reading
 * for ever.
 */
void drain_stream(struct job *job, struct stream *s)
{
  if (s->fd < 0)
    return;
  int capacity = fcntl(s->fd, F_GETPIPE_SZ);
  if (capacity < 0)
    die(job, "cannot size an output pipe: %s", strerror(errno));
  for (ssize_t left = capacity; left > 0 && s->fd >= 0;) {
    ssize_t n = read_stream(job, s);
    if (n <= 0)
      break;
    left -= n;
  }
}

void open_stream(struct job *job, int rank, int which, int fd)
{
  struct stream *s = &job->ranks[rank].streams[which];
  int flags = fcntl(fd, F_GETFL);

  /* A replacement's: what the failed process started may still hold the
     old pipe open, but nothing of it is this rank's any more. */
  if (s->fd >= 0) {
    close_fd(s->fd);
    buf_free(&s->partial);
    buf_free(&s->status);
    if (shown == s)
      shown = NULL;
  }

  /* Non-blocking, so that draining a pipe can stop when it is empty. */
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    die(job, "fcntl: %s", strerror(errno));
  s->fd = fd;
  s->dest = which == 0 ? STDOUT_FILENO : STDERR_FILENO;
  s->rank = rank;
  s->label_len = (size_t)snprintf(s->label, sizeof s->label, "[%d] ", rank);
}
