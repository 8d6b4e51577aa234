/*
 * The helpers every file of hoop-run uses: closing a descriptor, signalling
 * every rank, and dying.  They live apart from main.c so that the files
 * main.c drives never call back into it.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hoop-run.h"

/*
 * Linux releases the descriptor even when close() fails (EINTR, EIO), and
 * nothing is written through the ones we close, so there is nothing to
 * retry or to report.
 */
void close_fd(int fd)
{
  int rc = close(fd);
  (void)rc;
}

void signal_ranks(const struct job *job, int sig)
{
  for (int r = 0; r < job->opt->nranks; r++) {
    pid_t pgid = job->ranks[r].pgid;
    if (pgid > 0 && kill(-pgid, sig) != 0 && errno != ESRCH)
      notice("cannot signal rank %d: %s", r, strerror(errno));
  }
}

__attribute__((format(printf, 2, 3)))
_Noreturn void die(const struct job *job, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  vnotice(fmt, ap);
  va_end(ap);
  signal_ranks(job, SIGKILL);
  exit(EXIT_INTERNAL);
}
