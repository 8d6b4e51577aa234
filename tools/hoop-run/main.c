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

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hoop-run.h"

/* ---- small helpers ---- */

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

/* ---- the job ---- */

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

/*
 * How long replacements may run on once every other rank has finished: a
 * replacement that got into the job ends with it, in its last call, and
 * one still waiting to join never will.
 */
#define LEFTOVERS_GRACE_MS 5000

static void stop_job(struct job *job, int sig)
{
  signal_ranks(job, sig);
  job->phase = JOB_STOPPING;
  job->deadline_ms = now_ms() + job->opt->grace_ms;
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

  while ((n = read(signal_fd(), sigs, sizeof sigs)) > 0) {
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

/* Whether the ranks still running are all replacements (and some are). */
static bool only_replacements_run(const struct job *job)
{
  for (int r = 0; r < job->opt->nranks; r++) {
    if (job->ranks[r].pid > 0 && !job->ranks[r].replacement)
      return false;
  }
  return job->running > 0;
}

static void on_rank_exit(struct job *job, int rank, pid_t pid, int status)
{
  bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  const char *then = job->running <= 1 ? ""
                     : job->opt->elastic ? "; the other ranks go on (--elastic)"
                                         : "; stopping the other ranks";

  job->ranks[rank].pid = 0;
  job->running--;
  job->succeeded += !failed;
  if (!failed && job->opt->elastic && job->leftovers_ms < 0 &&
      only_replacements_run(job))
    job->leftovers_ms = now_ms() + LEFTOVERS_GRACE_MS;
  /* Its last words go out before our verdict on it. */
  drain_stream(job, &job->ranks[rank].streams[0]);
  drain_stream(job, &job->ranks[rank].streams[1]);
  /* Once stopping, further deaths are our doing, not news. */
  if (!failed || job->phase != JOB_RUNNING)
    return;
  int code = WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                  : WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    notice("rank %d (pid %ld) was killed by signal %d (%s)%s", rank,
           (long)pid, WTERMSIG(status), strsignal(WTERMSIG(status)), then);
  else
    notice("rank %d (pid %ld) exited with code %d%s", rank, (long)pid, code,
           then);
  if (job->exit_code < 0)
    job->exit_code = code;
  if (!job->opt->elastic) {
    stop_job(job, SIGTERM);
  } else if (job->respawned < job->opt->respawn && job->running > 0) {
    job->respawned++;
    job->ranks[rank].replacement = true;
    start_rank(job, rank);
    notice("started a replacement for rank %d (pid %ld), which joins the "
           "job (%d of --respawn %d)",
           rank, (long)job->ranks[rank].pid, job->respawned,
           job->opt->respawn);
  }
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
    int left = remove_shm_left_by(pid);
    if (left > 0)
      notice("removed %d shared-memory segment(s) that pid %ld left in "
             "/dev/shm", left, (long)pid);
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

/* The replacements still running once the rest of an elastic job is done. */
static void stop_leftovers(struct job *job)
{
  char *ranks = list_ranks(job, false);
  notice("the other ranks finished %g s ago; stopping the replacement(s) "
         "of rank(s)%s, which never got into the job or did not leave it",
         (double)LEFTOVERS_GRACE_MS / 1000, ranks);
  free(ranks);
  job->finished = true;
  job->leftovers_ms = -1;
  stop_job(job, SIGTERM);
}

static void check_deadline(struct job *job)
{
  if (job->leftovers_ms >= 0 && job->phase == JOB_RUNNING &&
      now_ms() >= job->leftovers_ms) {
    stop_leftovers(job);
    return;
  }
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

  job->pollfds[n++] = (struct pollfd){.fd = signal_fd(), .events = POLLIN};
  for (int r = 0; r < job->opt->nranks; r++) {
    for (int i = 0; i < 2; i++) {
      struct stream *s = &job->ranks[r].streams[i];
      if (s->fd >= 0) {
        job->polled[n] = s;
        job->pollfds[n++] = (struct pollfd){.fd = s->fd, .events = POLLIN};
      }
    }
  }
  int64_t wake = job->deadline_ms;
  if (job->leftovers_ms >= 0 && (wake < 0 || job->leftovers_ms < wake))
    wake = job->leftovers_ms;
  if (poll(job->pollfds, n, ms_until(wake)) < 0) {
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
  job->leftovers_ms = -1;
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
  /* An elastic job that ran to its end on the ranks left succeeded. */
  if (opt.elastic && (job.phase == JOB_RUNNING || job.finished) &&
      job.succeeded > 0)
    return EXIT_SUCCESS;
  return job.exit_code < 0 ? EXIT_SUCCESS : job.exit_code;
}
