/*
 * hoop-run: start the ranks of a hoop job on this machine.
 *
 *   hoop-run -n N [options] [--] program [args...]
 *
 * Every rank is a child process running the same program.  It learns its
 * place in the job from HOOP_RANK, HOOP_WORLD_SIZE, HOOP_LOCAL_RANK and
 * HOOP_LOCAL_WORLD_SIZE, and finds rank 0 at HOOP_ROOT_ADDR.  hoop-run stays
 * for the life of the job: it labels the ranks' output lines, forwards the
 * signals that end a job, and makes sure that once a rank fails, the job
 * times out or the user interrupts it, no rank is left running.
 *
 * A rank's progress bar, text ended by a carriage return alone and redrawn
 * in place, stays one line: on a terminal hoop-run shows the latest such
 * update, labelled, on the last line and keeps the ranks' other lines
 * above it; to a file or pipe it writes only the update a newline ends.
 * HOOP_STDERR_TTY=1 tells the ranks that their stderr, a pipe, ends up on
 * a terminal that shows such updates.
 *
 * Each rank gets a process group of its own, so that stopping a rank also
 * stops whatever it started, and the kernel kills it should hoop-run die
 * without cleaning up.  Linux only: pipe2, prctl, F_GETPIPE_SZ and setns.
 *
 * With --netns PREFIX, rank r runs inside network namespace PREFIX-h<r>
 * (as tools/netsim.sh builds them), so that one machine can stand in for
 * several hosts joined by a real, rate-capped network; --ranks-per-host K
 * puts ranks r*K .. r*K+K-1 together in PREFIX-h<r>.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
  MAX_RANKS = 1024,
  DEFAULT_GRACE_MS = 3000,
  MAX_GRACE_MS = 24 * 3600 * 1000,
  EXIT_USAGE = 2,
  /* The codes GNU timeout uses, so that scripts can tell them apart. */
  EXIT_TIMEOUT = 124,
  EXIT_INTERNAL = 125,
  EXIT_CANNOT_RUN = 127,
  READ_CHUNK = 64 * 1024,
  /*
   * An unfinished line is held back until its newline arrives, so that it
   * comes out whole.  Past this size it is broken into labelled lines
   * instead: a rank that never ends its line must not exhaust our memory.
   */
  LONG_LINE = 1024 * 1024,
};

static const double MAX_TIMEOUT_S = 1e9;

/* Where tools/netsim.sh puts host 0, and its hosts' interface. */
#define NETSIM_ROOT_HOST "10.99.0.1"
#define NETSIM_IFNAME "eth0"

static const char USAGE[] =
    "Usage: hoop-run -n N [options] [--] program [args...]\n"
    "\n"
    "Start N ranks of a hoop job on this machine.\n"
    "\n"
    "Options:\n"
    "  -n N                   number of ranks, 1 to 1024\n"
    "  --root-addr HOST:PORT  where rank 0 listens (default: $HOOP_ROOT_ADDR\n"
    "                         if set, else 127.0.0.1 and a free port)\n"
    "  --no-prefix            pass the ranks' output through untouched\n"
    "                         (the default with one rank); otherwise each\n"
    "                         line is labelled \"[rank] \"\n"
    "  --grace-ms MS          time stopping ranks get before SIGKILL\n"
    "                         (default 3000)\n"
    "  --timeout SECONDS      stop the job if it runs longer than this\n"
    "  --netns PREFIX         run rank r in network namespace PREFIX-h<r>\n"
    "                         (/var/run/netns/PREFIX-h<r>, as made by\n"
    "                         tools/netsim.sh; needs root); rank 0 then\n"
    "                         listens at 10.99.0.1 and the ranks get\n"
    "                         HOOP_SOCKET_IFNAME=eth0 unless it is set\n"
    "  --ranks-per-host K     with --netns: K consecutive ranks share each\n"
    "                         namespace (rank r in PREFIX-h<r/K>), as\n"
    "                         ranks on one host do (default 1)\n"
    "  -h, --help             show this help\n"
    "\n"
    "Each rank gets HOOP_RANK, HOOP_WORLD_SIZE, HOOP_LOCAL_RANK,\n"
    "HOOP_LOCAL_WORLD_SIZE and HOOP_ROOT_ADDR in its environment, and with\n"
    "labels HOOP_STDERR_TTY=1 if hoop-run's stderr is a terminal.  Text a\n"
    "rank ends with a carriage return alone (a progress bar) is shown in\n"
    "place on a terminal's last line, under the other lines; a file gets\n"
    "only such text that a newline ends.\n"
    "SIGINT, SIGTERM and SIGHUP are passed on to the ranks.\n"
    "\n"
    "Exit status: 0 if every rank succeeds, else that of the first rank to\n"
    "fail (128+N if killed by signal N), or 128+N after receiving signal N;\n"
    "124 on timeout, 125 if hoop-run itself fails, 127 if the program cannot\n"
    "be run, 2 on bad usage.\n";

struct options {
  int nranks;
  const char *root_addr; /* from --root-addr, or NULL */
  bool prefix;           /* label output lines with the rank */
  int64_t grace_ms;
  int64_t timeout_ms; /* 0 for none */
  const char *netns;  /* --netns PREFIX, or NULL */
  int per_host;       /* ranks in each namespace (--ranks-per-host) */
  char **argv;        /* the program and its arguments */
};

/* A growable byte buffer. */
struct buf {
  char *data;
  size_t len;
  size_t cap;
};

/* One of a rank's output pipes, as seen from hoop-run. */
struct stream {
  int fd;        /* read end, or -1 once closed */
  int dest;      /* STDOUT_FILENO or STDERR_FILENO */
  int rank;      /* for messages */
  char label[sizeof "[1023] "]; /* enough for MAX_RANKS */
  size_t label_len;
  struct buf partial; /* the current line, read but not yet written */
  /*
   * The last update the rank ended with a carriage return alone, until a
   * line replaces it or a newline ends it.  Never empty when the terminal
   * shows it.
   */
  struct buf status;
};

struct rank {
  pid_t pid; /* 0 once reaped */
  /*
   * The rank's process group, which also holds what the rank started; 0
   * once seen empty.  The kernel keeps the number while any member lives,
   * and we look again after every death we reap, so it cannot have been
   * handed to someone else by the time we signal it.
   */
  pid_t pgid;
  struct stream streams[2]; /* stdout, stderr; unused with --no-prefix */
  int netns_fd;             /* its network namespace with --netns, else -1 */
};

enum phase {
  JOB_RUNNING,
  JOB_STOPPING, /* asked to stop; SIGKILL at the deadline */
  JOB_KILLING,  /* SIGKILL sent; waiting for the ranks to be reaped */
};

struct job {
  const struct options *opt;
  pid_t launcher_pid;
  struct rank *ranks;
  int running; /* ranks whose main process is not yet reaped */
  enum phase phase;
  int exit_code;       /* -1 until the first failure decides it */
  int64_t deadline_ms; /* the timeout, or the SIGKILL time; -1 for none */
  struct pollfd *pollfds;
  struct stream **polled; /* the stream behind each pollfd but the first */
  struct buf out;         /* labelled lines on their way out */
  bool tty[3]; /* by descriptor: whether stdout, stderr are terminals */
  char chunk[READ_CHUNK];
};

/*
 * The signal handler writes each signal's number here and the poll loop
 * reads it, so that signals arrive as ordinary events in one place.
 */
static int signal_pipe[2] = {-1, -1};

/*
 * The stream whose status the terminal's last line shows, or NULL.  File
 * scope, because notices clear it before they print.
 */
static struct stream *shown;

/* Clears from the cursor to the line's end; after a carriage return, the
   whole line. */
static const char CLEAR_TO_END[] = "\033[K";
static const char ERASE_LINE[] = "\r\033[K";

static const int HANDLED_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD,
                                      SIGPIPE};
enum { NUM_HANDLED = sizeof HANDLED_SIGNALS / sizeof HANDLED_SIGNALS[0] };

/* How signals were set up when we started; ranks start the same way. */
static struct sigaction original_actions[NUM_HANDLED];
static sigset_t original_mask;

/* The descriptor limit we started with, which the ranks get back. */
static struct rlimit original_nofile;

/* ---- small helpers ---- */

/*
 * Linux releases the descriptor even when close() fails (EINTR, EIO), and
 * nothing is written through the ones we close, so there is nothing to
 * retry or to report.
 */
static void close_fd(int fd)
{
  int rc = close(fd);
  (void)rc;
}

static int64_t now_ms(void)
{
  struct timespec ts;

  /* CLOCK_MONOTONIC always exists on Linux; the ranks' parent-death signal
     covers the impossible failure. */
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
    abort();
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int ms_until(int64_t deadline_ms)
{
  if (deadline_ms < 0)
    return -1;
  int64_t left = deadline_ms - now_ms();
  if (left <= 0)
    return 0;
  return left > INT_MAX ? INT_MAX : (int)left;
}

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

static bool buf_append(struct buf *b, const void *data, size_t len)
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
static bool buf_appendf(struct buf *b, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  bool ok = buf_vappendf(b, fmt, ap);
  va_end(ap);
  return ok;
}

static void buf_free(struct buf *b)
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
static void vnotice(const char *fmt, va_list ap)
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
static void notice(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vnotice(fmt, ap);
  va_end(ap);
}

/* ---- options ---- */

__attribute__((format(printf, 1, 2)))
static _Noreturn void usage_error(const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vnotice(fmt, ap);
  va_end(ap);
  fputs("Try 'hoop-run --help' for more information.\n", stderr);
  exit(EXIT_USAGE);
}

static bool parse_long(const char *text, long min, long max, long *value)
{
  char *end;

  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
    return false;
  *value = v;
  return true;
}

static int64_t parse_timeout_ms(const char *text)
{
  char *end;

  errno = 0;
  double seconds = strtod(text, &end);
  /* Written so that NaN fails too. */
  if (errno != 0 || end == text || *end != '\0' ||
      !(seconds > 0 && seconds <= MAX_TIMEOUT_S))
    usage_error("--timeout wants a positive number of seconds, not '%s'",
                text);
  int64_t ms = (int64_t)(seconds * 1000);
  return ms > 0 ? ms : 1;
}

static bool valid_root_addr(const char *addr)
{
  const char *colon = strrchr(addr, ':');
  long port;

  return colon != NULL && colon != addr &&
         parse_long(colon + 1, 1, 65535, &port);
}

enum {
  OPT_ROOT_ADDR = 256,
  OPT_NO_PREFIX,
  OPT_GRACE_MS,
  OPT_TIMEOUT,
  OPT_NETNS,
  OPT_PER_HOST
};

static const struct option LONG_OPTIONS[] = {
    {"help", no_argument, NULL, 'h'},
    {"root-addr", required_argument, NULL, OPT_ROOT_ADDR},
    {"no-prefix", no_argument, NULL, OPT_NO_PREFIX},
    {"grace-ms", required_argument, NULL, OPT_GRACE_MS},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"netns", required_argument, NULL, OPT_NETNS},
    {"ranks-per-host", required_argument, NULL, OPT_PER_HOST},
    {NULL, 0, NULL, 0},
};

static _Noreturn void bad_option(int c, char **argv)
{
  if (c == ':')
    usage_error("option '%s' needs a value", argv[optind - 1]);
  /* An unknown short option is in optopt; a bad long one is only in argv
     (optopt then holds its value, or 'h' for a misused --help). */
  if (optopt > 0 && optopt < OPT_ROOT_ADDR && optopt != 'h')
    usage_error("unknown option '-%c'", optopt);
  usage_error("bad option '%s'", argv[optind - 1]);
}

static void parse_options(int argc, char **argv, struct options *opt)
{
  bool no_prefix = false;
  long value;
  int c;

  *opt = (struct options){.grace_ms = DEFAULT_GRACE_MS, .per_host = 1};
  opterr = 0; /* we report bad options ourselves, in our own words */
  /* '+' stops at the program's name and leaves its options alone. */
  while ((c = getopt_long(argc, argv, "+:hn:", LONG_OPTIONS, NULL)) != -1) {
    switch (c) {
    case 'h':
      fputs(USAGE, stdout);
      exit(EXIT_SUCCESS);
    case 'n':
      if (!parse_long(optarg, 1, MAX_RANKS, &value))
        usage_error("-n wants a number of ranks from 1 to %d, not '%s'",
                    MAX_RANKS, optarg);
      opt->nranks = (int)value;
      break;
    case OPT_ROOT_ADDR:
      if (!valid_root_addr(optarg))
        usage_error("--root-addr wants HOST:PORT, not '%s'", optarg);
      opt->root_addr = optarg;
      break;
    case OPT_NO_PREFIX:
      no_prefix = true;
      break;
    case OPT_GRACE_MS:
      if (!parse_long(optarg, 0, MAX_GRACE_MS, &value))
        usage_error("--grace-ms wants milliseconds from 0 to %d, not '%s'",
                    MAX_GRACE_MS, optarg);
      opt->grace_ms = value;
      break;
    case OPT_TIMEOUT:
      opt->timeout_ms = parse_timeout_ms(optarg);
      break;
    case OPT_NETNS:
      if (optarg[0] == '\0' || strchr(optarg, '/') != NULL)
        usage_error("--netns wants a namespace name prefix, not '%s'",
                    optarg);
      opt->netns = optarg;
      break;
    case OPT_PER_HOST:
      if (!parse_long(optarg, 1, MAX_RANKS, &value))
        usage_error("--ranks-per-host wants a number from 1 to %d, not '%s'",
                    MAX_RANKS, optarg);
      opt->per_host = (int)value;
      break;
    default:
      bad_option(c, argv);
    }
  }
  if (opt->nranks == 0)
    usage_error("missing -n N, the number of ranks");
  if (opt->per_host > 1 && opt->netns == NULL)
    usage_error("--ranks-per-host needs --netns: without namespaces every "
                "rank shares this host already");
  if (optind >= argc)
    usage_error("missing the program to run");
  opt->argv = argv + optind;
  opt->prefix = opt->nranks > 1 && !no_prefix;
}

/* ---- the job ---- */

static void signal_ranks(const struct job *job, int sig)
{
  for (int r = 0; r < job->opt->nranks; r++) {
    pid_t pgid = job->ranks[r].pgid;
    if (pgid > 0 && kill(-pgid, sig) != 0 && errno != ESRCH)
      notice("cannot signal rank %d: %s", r, strerror(errno));
  }
}

/* For failures of hoop-run itself: take the job down with us. */
__attribute__((format(printf, 2, 3)))
static _Noreturn void die(const struct job *job, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vnotice(fmt, ap);
  va_end(ap);
  signal_ranks(job, SIGKILL);
  exit(EXIT_INTERNAL);
}

/* Lists, as " 0 3 5", the ranks whose main process is still running, or
   with whole_group, those with any process left. */
static char *list_ranks(const struct job *job, bool whole_group)
{
  struct buf list = {NULL, 0, 0};

  for (int r = 0; r < job->opt->nranks; r++) {
    const struct rank *rank = &job->ranks[r];
    bool running = whole_group ? rank->pgid > 0 : rank->pid > 0;
    if (running && !buf_appendf(&list, " %d", r))
      die(job, "out of memory");
  }
  if (!buf_append(&list, "", 1))
    die(job, "out of memory");
  return list.data;
}

static void stop_job(struct job *job, int sig)
{
  signal_ranks(job, sig);
  job->phase = JOB_STOPPING;
  job->deadline_ms = now_ms() + job->opt->grace_ms;
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
static void finish_stream(struct job *job, struct stream *s)
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
static ssize_t read_stream(struct job *job, struct stream *s)
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
static void drain_stream(struct job *job, struct stream *s)
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

/* ---- signals ---- */

static void on_signal(int sig)
{
  int saved_errno = errno;
  unsigned char byte = (unsigned char)sig;

  /* A full pipe already holds enough to wake the loop; only a burst of
     thousands of signals could lose one. */
  ssize_t rc = write(signal_pipe[1], &byte, 1);
  (void)rc;
  errno = saved_errno;
}

static void fill_handled_set(sigset_t *set)
{
  sigemptyset(set);
  for (int i = 0; i < NUM_HANDLED; i++)
    sigaddset(set, HANDLED_SIGNALS[i]);
}

static void install_signal_handlers(const struct job *job)
{
  sigset_t set;

  if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    die(job, "cannot create a pipe: %s", strerror(errno));
  for (int i = 0; i < NUM_HANDLED; i++) {
    int sig = HANDLED_SIGNALS[i];
    struct sigaction sa = {.sa_flags = SA_RESTART};

    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, NULL, &original_actions[i]) != 0)
      die(job, "sigaction: %s", strerror(errno));
    /* A signal ignored by whoever started us (nohup, say) stays ignored,
       and the ranks inherit that; we cannot do without SIGCHLD. */
    if (sig != SIGCHLD && original_actions[i].sa_handler == SIG_IGN)
      continue;
    /* A closed stdout is dealt with where we write to it. */
    sa.sa_handler = sig == SIGPIPE ? SIG_IGN : on_signal;
    if (sig == SIGCHLD)
      sa.sa_flags |= SA_NOCLDSTOP;
    if (sigaction(sig, &sa, NULL) != 0)
      die(job, "sigaction: %s", strerror(errno));
  }
  fill_handled_set(&set);
  if (sigprocmask(SIG_UNBLOCK, &set, &original_mask) != 0)
    die(job, "sigprocmask: %s", strerror(errno));
}

/* ---- starting ranks ---- */

/*
 * Labelling output keeps two pipes per rank open here, and --netns one
 * namespace per rank, which for many ranks is more than the usual soft
 * limit of 1024 descriptors.
 */
static void raise_fd_limit(const struct job *job)
{
  rlim_t per_rank = (job->opt->prefix ? 2 : 0) + (job->opt->netns ? 1 : 0);
  rlim_t needed = per_rank * (rlim_t)job->opt->nranks + 16;

  if (getrlimit(RLIMIT_NOFILE, &original_nofile) != 0)
    die(job, "getrlimit: %s", strerror(errno));
  if (per_rank == 0 || original_nofile.rlim_cur >= needed)
    return;
  struct rlimit raised = original_nofile;
  raised.rlim_cur = needed < raised.rlim_max ? needed : raised.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0)
    die(job, "setrlimit: %s", strerror(errno));
}

static int setenv_long(const char *name, long value)
{
  char text[sizeof "-9223372036854775808"];

  snprintf(text, sizeof text, "%ld", value);
  return setenv(name, text, 1);
}

/* Asks the kernel for a free port.  Another process could take it before
   rank 0 listens there; on a single machine that is unlikely enough. */
static int pick_free_port(const struct job *job)
{
  struct sockaddr_in addr = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      getsockname(fd, (struct sockaddr *)&addr, &len) != 0)
    die(job, "cannot find a free port: %s", strerror(errno));
  close_fd(fd);
  return ntohs(addr.sin_port);
}

/*
 * Sets what all ranks share in hoop-run's own environment, for fork to pass
 * on.  Rank 0 listens at --root-addr if given, else at an inherited
 * HOOP_ROOT_ADDR (left as it is), else at a free port on this machine:
 * 127.0.0.1, or with --netns rank 0's address on the emulated network
 * (tools/netsim.sh gives host i 10.99.0.(i+1)), where loopback would not
 * reach the other namespaces.  The port is free here; the namespace is new,
 * so it is free there too.
 */
static void export_job_env(const struct job *job)
{
  const char *root_addr = job->opt->root_addr;
  const char *inherited = getenv("HOOP_ROOT_ADDR");
  char picked[sizeof "10.99.0.1:65535"];

  if (root_addr == NULL && (inherited == NULL || inherited[0] == '\0')) {
    snprintf(picked, sizeof picked, "%s:%d",
             job->opt->netns != NULL ? NETSIM_ROOT_HOST : "127.0.0.1",
             pick_free_port(job));
    root_addr = picked;
  }
  if (setenv_long("HOOP_WORLD_SIZE", job->opt->nranks) != 0 ||
      setenv_long("HOOP_LOCAL_WORLD_SIZE", job->opt->netns != NULL
                                               ? job->opt->per_host
                                               : job->opt->nranks) != 0 ||
      (root_addr != NULL && setenv("HOOP_ROOT_ADDR", root_addr, 1) != 0) ||
      /* The data listeners must use the emulated link, not loopback. */
      (job->opt->netns != NULL &&
       setenv("HOOP_SOCKET_IFNAME", NETSIM_IFNAME, 0) != 0))
    die(job, "cannot set the environment: %s", strerror(errno));
  /* Without labels the ranks write to our stderr itself, and can ask it. */
  if (job->opt->prefix &&
      (job->tty[STDERR_FILENO] ? setenv("HOOP_STDERR_TTY", "1", 1)
                               : unsetenv("HOOP_STDERR_TTY")) != 0)
    die(job, "cannot set the environment: %s", strerror(errno));
}

/*
 * With --netns, opens every rank's namespace before any rank starts, so
 * that a missing one fails the job at once and by name.  The descriptors
 * are close-on-exec: only the child that joins one needs it.
 */
static void open_namespaces(struct job *job)
{
  char path[PATH_MAX];

  if (job->opt->netns == NULL)
    return;
  for (int r = 0; r < job->opt->nranks; r++) {
    snprintf(path, sizeof path, "/var/run/netns/%s-h%d", job->opt->netns,
             r / job->opt->per_host);
    job->ranks[r].netns_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (job->ranks[r].netns_fd < 0)
      die(job,
          "--netns %s: cannot open rank %d's network namespace %s: %s%s",
          job->opt->netns, r, path, strerror(errno),
          errno == ENOENT ? " (create the namespaces first, e.g. "
                            "tools/netsim.sh up N RATE)"
                          : "");
  }
}

static _Noreturn void rank_setup_failed(int rank, const char *what)
{
  /* Nowhere is left to report a failure to report. */
  int rc = dprintf(STDERR_FILENO, "hoop-run: cannot start rank %d: %s: %s\n",
                   rank, what, strerror(errno));
  (void)rc;
  _exit(EXIT_CANNOT_RUN);
}

/* Runs in the child: makes it rank `rank` and runs the program. */
static _Noreturn void exec_rank(const struct job *job, int rank, int out_fd,
                                int err_fd)
{
  char **argv = job->opt->argv;

  for (int i = 0; i < NUM_HANDLED; i++) {
    if (sigaction(HANDLED_SIGNALS[i], &original_actions[i], NULL) != 0)
      rank_setup_failed(rank, "sigaction");
  }
  if (sigprocmask(SIG_SETMASK, &original_mask, NULL) != 0)
    rank_setup_failed(rank, "sigprocmask");
  if (setrlimit(RLIMIT_NOFILE, &original_nofile) != 0)
    rank_setup_failed(rank, "setrlimit");
  if (setpgid(0, 0) != 0)
    rank_setup_failed(rank, "setpgid");
  /* EPERM here means hoop-run lacks CAP_SYS_ADMIN: run it as root. */
  if (job->ranks[rank].netns_fd >= 0 &&
      setns(job->ranks[rank].netns_fd, CLONE_NEWNET) != 0)
    rank_setup_failed(rank, "setns (joining its --netns namespace)");
  /* Checking the parent after asking covers a death just before. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    rank_setup_failed(rank, "prctl");
  if (getppid() != job->launcher_pid)
    _exit(EXIT_CANNOT_RUN);
  if (out_fd >= 0 && (dup2(out_fd, STDOUT_FILENO) < 0 ||
                      dup2(err_fd, STDERR_FILENO) < 0))
    rank_setup_failed(rank, "dup2");
  if (setenv_long("HOOP_RANK", rank) != 0 ||
      setenv_long("HOOP_LOCAL_RANK", job->opt->netns != NULL
                                         ? rank % job->opt->per_host
                                         : rank) != 0)
    rank_setup_failed(rank, "setenv");
  execvp(argv[0], argv);
  int rc = dprintf(STDERR_FILENO, "hoop-run: cannot run '%s': %s\n", argv[0],
                   strerror(errno));
  (void)rc;
  _exit(EXIT_CANNOT_RUN);
}

static void open_stream(struct job *job, int rank, int which, int fd)
{
  struct stream *s = &job->ranks[rank].streams[which];
  int flags = fcntl(fd, F_GETFL);

  /* Non-blocking, so that draining a pipe can stop when it is empty. */
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    die(job, "fcntl: %s", strerror(errno));
  s->fd = fd;
  s->dest = which == 0 ? STDOUT_FILENO : STDERR_FILENO;
  s->rank = rank;
  s->label_len = (size_t)snprintf(s->label, sizeof s->label, "[%d] ", rank);
}

static void start_rank(struct job *job, int rank)
{
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  sigset_t handled, previous;

  if (job->opt->prefix &&
      (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0))
    die(job, "cannot create pipes for rank %d: %s", rank, strerror(errno));
  /* Blocked until the child has put back the original handlers, so that
     ours never run in it. */
  fill_handled_set(&handled);
  if (sigprocmask(SIG_BLOCK, &handled, &previous) != 0)
    die(job, "sigprocmask: %s", strerror(errno));
  pid_t pid = fork();
  if (pid == 0)
    exec_rank(job, rank, out[1], err[1]);
  int fork_errno = errno;
  if (sigprocmask(SIG_SETMASK, &previous, NULL) != 0)
    die(job, "sigprocmask: %s", strerror(errno));
  if (pid < 0)
    die(job, "cannot start rank %d: %s", rank, strerror(fork_errno));
  /* The child does this too; doing it here as well means no signal to the
     rank's group can come before the group exists.  EACCES: it has
     already done so and exec'd. */
  if (setpgid(pid, pid) != 0 && errno != EACCES && errno != ESRCH)
    die(job, "setpgid: %s", strerror(errno));
  job->ranks[rank].pid = pid;
  job->ranks[rank].pgid = pid;
  job->running++;
  if (job->opt->prefix) {
    close_fd(out[1]);
    close_fd(err[1]);
    open_stream(job, rank, 0, out[0]);
    open_stream(job, rank, 1, err[0]);
  }
}

/* ---- running ---- */

static void on_launcher_signal(struct job *job, int sig)
{
  if (job->phase != JOB_RUNNING) {
    signal_ranks(job, sig);
    return;
  }
  notice("received signal %d (%s); passing it on to the ranks", sig,
         strsignal(sig));
  job->exit_code = 128 + sig;
  stop_job(job, sig);
}

static void handle_signals(struct job *job)
{
  unsigned char sigs[64];
  ssize_t n;

  while ((n = read(signal_pipe[0], sigs, sizeof sigs)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      /* Children are reaped on every turn of the loop anyway. */
      if (sigs[i] != SIGCHLD)
        on_launcher_signal(job, sigs[i]);
    }
  }
  /* We hold the write end, so the pipe never ends; empty is done. */
  if (n < 0 && errno != EAGAIN && errno != EINTR)
    die(job, "cannot read the signal pipe: %s", strerror(errno));
}

static void on_rank_exit(struct job *job, int rank, pid_t pid, int status)
{
  bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  const char *then = job->running > 0 ? "; stopping the other ranks" : "";

  job->ranks[rank].pid = 0;
  job->running--;
  /* Its last words go out before our verdict on it. */
  drain_stream(job, &job->ranks[rank].streams[0]);
  drain_stream(job, &job->ranks[rank].streams[1]);
  /* Once stopping, further deaths are our doing, not news. */
  if (!failed || job->phase != JOB_RUNNING)
    return;
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    job->exit_code = 128 + sig;
    notice("rank %d (pid %ld) was killed by signal %d (%s)%s", rank,
           (long)pid, sig, strsignal(sig), then);
  } else {
    job->exit_code = WEXITSTATUS(status);
    notice("rank %d (pid %ld) exited with code %d%s", rank, (long)pid,
           job->exit_code, then);
  }
  stop_job(job, SIGTERM);
}

static int find_rank(const struct job *job, pid_t pid)
{
  for (int r = 0; r < job->opt->nranks; r++) {
    if (job->ranks[r].pid == pid)
      return r;
  }
  return -1;
}

static void forget_empty_groups(struct job *job)
{
  for (int r = 0; r < job->opt->nranks; r++) {
    struct rank *rank = &job->ranks[r];
    if (rank->pid == 0 && rank->pgid > 0 && kill(-rank->pgid, 0) != 0 &&
        errno == ESRCH)
      rank->pgid = 0;
  }
}

static void reap_children(struct job *job)
{
  bool reaped = false;
  int status;
  pid_t pid;

  while ((pid = waitpid(-1, &status, WNOHANG)) != 0) {
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid < 0 && errno == ECHILD)
      break;
    if (pid < 0)
      die(job, "waitpid: %s", strerror(errno));
    reaped = true;
    int r = find_rank(job, pid);
    /* Others are orphans of the ranks, which come to us as subreaper, or
       children that whoever exec'd us left behind. */
    if (r >= 0)
      on_rank_exit(job, r, pid, status);
  }
  if (reaped)
    forget_empty_groups(job);
}

/* A job being stopped also waits, up to the grace period, for whatever its
   ranks started. */
static bool job_active(const struct job *job)
{
  if (job->running > 0)
    return true;
  if (job->phase != JOB_STOPPING)
    return false;
  for (int r = 0; r < job->opt->nranks; r++) {
    if (job->ranks[r].pgid > 0)
      return true;
  }
  return false;
}

static void check_deadline(struct job *job)
{
  if (job->deadline_ms < 0 || now_ms() < job->deadline_ms)
    return;
  char *ranks = list_ranks(job, job->phase != JOB_RUNNING);
  if (job->phase == JOB_RUNNING) {
    notice("timed out after %g s; ranks still running:%s; stopping them",
           (double)job->opt->timeout_ms / 1000, ranks);
    job->exit_code = EXIT_TIMEOUT;
    stop_job(job, SIGTERM);
  } else {
    notice("processes of ranks%s still running after %lld ms; killing them",
           ranks, (long long)job->opt->grace_ms);
    signal_ranks(job, SIGKILL);
    job->phase = JOB_KILLING;
    job->deadline_ms = -1;
  }
  free(ranks);
}

/* Sleeps until a signal, output from a rank, or the deadline. */
static void wait_for_events(struct job *job)
{
  nfds_t n = 0;

  job->pollfds[n++] = (struct pollfd){.fd = signal_pipe[0], .events = POLLIN};
  for (int r = 0; r < job->opt->nranks; r++) {
    for (int i = 0; i < 2; i++) {
      struct stream *s = &job->ranks[r].streams[i];
      if (s->fd >= 0) {
        job->polled[n] = s;
        job->pollfds[n++] = (struct pollfd){.fd = s->fd, .events = POLLIN};
      }
    }
  }
  if (poll(job->pollfds, n, ms_until(job->deadline_ms)) < 0) {
    if (errno == EINTR)
      return;
    die(job, "poll: %s", strerror(errno));
  }
  if (job->pollfds[0].revents != 0)
    handle_signals(job);
  for (nfds_t i = 1; i < n; i++) {
    /* Writing out one stream can close others; see send_output. */
    if (job->pollfds[i].revents != 0 && job->polled[i]->fd >= 0)
      read_stream(job, job->polled[i]);
  }
}

static void run_job(struct job *job)
{
  for (;;) {
    reap_children(job);
    if (!job_active(job))
      break;
    check_deadline(job);
    wait_for_events(job);
  }
  for (int r = 0; r < job->opt->nranks; r++) {
    for (int i = 0; i < 2; i++) {
      struct stream *s = &job->ranks[r].streams[i];
      drain_stream(job, s);
      if (s->fd >= 0)
        finish_stream(job, s);
    }
  }
}

/* ---- setup ---- */

/*
 * Opens /dev/null on any of fds 0-2 that is closed, so that a pipe we
 * create cannot land there and then be closed by exec in the ranks.
 */
static void ensure_std_fds(void)
{
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
      continue;
    if (open("/dev/null", O_RDWR) != fd)
      exit(EXIT_INTERNAL); /* with fd 2 possibly closed, no way to say */
  }
}

static void init_job(struct job *job, const struct options *opt)
{
  int nfds = 1 + 2 * opt->nranks;

  job->opt = opt;
  job->launcher_pid = getpid();
  job->exit_code = -1;
  job->phase = JOB_RUNNING;
  job->deadline_ms = opt->timeout_ms > 0 ? now_ms() + opt->timeout_ms : -1;
  job->tty[STDOUT_FILENO] = isatty(STDOUT_FILENO);
  job->tty[STDERR_FILENO] = isatty(STDERR_FILENO);
  job->ranks = calloc((size_t)opt->nranks, sizeof *job->ranks);
  job->pollfds = calloc((size_t)nfds, sizeof *job->pollfds);
  job->polled = calloc((size_t)nfds, sizeof *job->polled);
  if (job->ranks == NULL || job->pollfds == NULL || job->polled == NULL) {
    notice("out of memory");
    exit(EXIT_INTERNAL);
  }
  /* Orphans of the ranks come to us, so that they are reaped and their
     deaths wake us while we wait for a stopping rank's group to empty. */
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    notice("prctl: %s", strerror(errno));
    exit(EXIT_INTERNAL);
  }
  for (int r = 0; r < opt->nranks; r++) {
    job->ranks[r].streams[0].fd = -1;
    job->ranks[r].streams[1].fd = -1;
    job->ranks[r].netns_fd = -1;
  }
}

int main(int argc, char **argv)
{
  static struct job job; /* static: it holds a large read buffer */
  struct options opt;

  parse_options(argc, argv, &opt);
  ensure_std_fds();
  init_job(&job, &opt);
  install_signal_handlers(&job);
  export_job_env(&job);
  raise_fd_limit(&job);
  open_namespaces(&job);
  for (int r = 0; r < opt.nranks; r++)
    start_rank(&job, r);
  run_job(&job);
  return job.exit_code < 0 ? EXIT_SUCCESS : job.exit_code;
}
