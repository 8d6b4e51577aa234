/*
 * What the pieces of hoop-run share: the job and its ranks' output
 * streams, and the functions one file calls in another.  main.c runs the
 * job; options.c reads the command line; output.c labels the ranks'
 * output and draws their progress bars; procs.c owns signals, the ranks'
 * environment and network namespaces, and starts the ranks; util.c holds
 * the helpers they all use, so that none of them calls back into main.c.
 */
#ifndef HOOP_RUN_H
#define HOOP_RUN_H

#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
  MAX_RANKS = 1024,
  EXIT_USAGE = 2,
  /* The codes GNU timeout uses, so that scripts can tell them apart. */
  EXIT_TIMEOUT = 124,
  EXIT_INTERNAL = 125,
  EXIT_CANNOT_RUN = 127,
  READ_CHUNK = 64 * 1024,
};

struct options {
  int nranks;
  const char *root_addr; /* from --root-addr, or NULL */
  bool prefix;           /* label output lines with the rank */
  int64_t grace_ms;
  int64_t timeout_ms; /* 0 for none */
  const char *netns;  /* --netns PREFIX, or NULL */
  int per_host;       /* ranks in each namespace (--ranks-per-host) */
  bool cyclic;        /* --cyclic: rank r on host r % hosts */
  bool elastic;       /* --elastic: a failed rank stops no other */
  int respawn;        /* --respawn N: replacements for failed ranks */
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
  bool replacement; /* started for a failed rank: it joins (HOOP_JOIN=1) */
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
  int succeeded;       /* ranks that exited with 0 */
  int respawned;       /* replacements started so far */
  int64_t deadline_ms; /* the timeout, or the SIGKILL time; -1 for none */
  /* --elastic: when replacements still running after the other ranks are
     done are stopped; -1 for none.  `finished` once they were. */
  int64_t leftovers_ms;
  bool finished;
  struct pollfd *pollfds;
  struct stream **polled; /* the stream behind each pollfd but the first */
  struct buf out;         /* labelled lines on their way out */
  bool tty[3]; /* by descriptor: whether stdout, stderr are terminals */
  char chunk[READ_CHUNK];
};

/* ---- options.c ---- */

/* Fills opt from the command line; exits with the usage status on a bad
   one, after saying what is wrong. */
void parse_options(int argc, char **argv, struct options *opt);

/* ---- output.c ---- */

bool buf_append(struct buf *b, const void *data, size_t len);
__attribute__((format(printf, 2, 3)))
bool buf_appendf(struct buf *b, const char *fmt, ...);
void buf_free(struct buf *b);

/* "hoop-run: " and the message, as one line on stderr. */
void vnotice(const char *fmt, va_list ap);
__attribute__((format(printf, 1, 2)))
void notice(const char *fmt, ...);

/* Makes fd, the read end of a pipe, rank's stdout (which 0) or stderr. */
void open_stream(struct job *job, int rank, int which, int fd);
ssize_t read_stream(struct job *job, struct stream *s);
void drain_stream(struct job *job, struct stream *s);
void finish_stream(struct job *job, struct stream *s);

/* ---- util.c ---- */

/* Closes fd; errors are ignored, as Linux frees it even then. */
void close_fd(int fd);

/* Sends sig to every rank's process group still there; a failure is only
   noticed, since the caller is already ending the job or dying. */
void signal_ranks(const struct job *job, int sig);

/* For failures of hoop-run itself: take the job down with us. */
__attribute__((format(printf, 2, 3)))
_Noreturn void die(const struct job *job, const char *fmt, ...);

/* ---- procs.c ---- */

/*
 * Removes what a dead process of the job left in /dev/shm, and says how
 * many: hoop names its segments "/hoop-<pid of the creator>-..."
 * (src/transport/shm.c, cuda_ipc.c) and unlinks each as soon as its peer
 * has mapped it, so only a process killed while it set a connection up
 * leaves any.  The pid is the one just reaped, so no live process has it.
 */
int remove_shm_left_by(pid_t pid);

void install_signal_handlers(const struct job *job);
/* The pipe on which signals arrive as bytes holding their numbers. */
int signal_fd(void);
void export_job_env(const struct job *job);
void raise_fd_limit(const struct job *job);
void open_namespaces(struct job *job);
void start_rank(struct job *job, int rank);

#endif /* HOOP_RUN_H */
