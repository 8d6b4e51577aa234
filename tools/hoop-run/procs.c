/*
 * The ranks' processes: signals (caught into a pipe, passed on, put back
 * for the ranks), what the ranks find in their environment, --netns
 * namespaces, and fork and exec.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hoop-run.h"

/* Where tools/netsim.sh puts host 0, and its hosts' interface. */
#define NETSIM_ROOT_HOST "10.99.0.1"
#define NETSIM_IFNAME "eth0"

/*
 * The signal handler writes each signal's number here and the poll loop
 * reads it, so that signals arrive as ordinary events in one place.
 */
static int signal_pipe[2] = {-1, -1};

static const int HANDLED_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD,
                                      SIGPIPE};
enum { NUM_HANDLED = sizeof HANDLED_SIGNALS / sizeof HANDLED_SIGNALS[0] };

/* How signals were set up when we started; ranks start the same way. */
static struct sigaction original_actions[NUM_HANDLED];
static sigset_t original_mask;

/* The descriptor limit we started with, which the ranks get back. */
static struct rlimit original_nofile;

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

void install_signal_handlers(const struct job *job)
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

int signal_fd(void) { return signal_pipe[0]; }

/* ---- starting ranks ---- */

/*
 * Labelling output keeps two pipes per rank open here, and --netns one
 * namespace per rank, which for many ranks is more than the usual soft
 * limit of 1024 descriptors.
 */
void raise_fd_limit(const struct job *job)
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
 * Gives the job a secret of its own, unless the caller chose one (ranks of
 * one job started by several hoop-runs share theirs): 256 random bits in
 * hex, in the environment only, which other users cannot read, unlike a
 * command line.
 */
static void export_job_secret(const struct job *job)
{
  unsigned char bits[32];
  char hex[2 * sizeof bits + 1];
  const char *token = getenv("HOOP_AUTH_TOKEN");
  const char *file = getenv("HOOP_AUTH_TOKEN_FILE");

  if ((token != NULL && token[0] != '\0') || (file != NULL && file[0] != '\0'))
    return;
  if (getrandom(bits, sizeof bits, 0) != (ssize_t)sizeof bits)
    die(job, "cannot make the job's secret: getrandom: %s", strerror(errno));
  for (size_t i = 0; i < sizeof bits; i++)
    snprintf(hex + 2 * i, 3, "%02x", bits[i]);
  if (setenv("HOOP_AUTH_TOKEN", hex, 1) != 0)
    die(job, "cannot set the environment: %s", strerror(errno));
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
void export_job_env(const struct job *job)
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
      (job->opt->elastic && setenv("HOOP_ELASTIC", "1", 0) != 0) ||
      /* The data listeners must use the emulated link, not loopback. */
      (job->opt->netns != NULL &&
       setenv("HOOP_SOCKET_IFNAME", NETSIM_IFNAME, 0) != 0))
    die(job, "cannot set the environment: %s", strerror(errno));
  export_job_secret(job);
  /* Without labels the ranks write to our stderr itself, and can ask it. */
  if (job->opt->prefix &&
      (job->tty[STDERR_FILENO] ? setenv("HOOP_STDERR_TTY", "1", 1)
                               : unsetenv("HOOP_STDERR_TTY")) != 0)
    die(job, "cannot set the environment: %s", strerror(errno));
}

/*
 * The emulated host of rank r, and its place there: K consecutive ranks
 * per host, or with --cyclic the ranks dealt out over the hosts in turn.
 */
static int host_of(const struct options *o, int r)
{
  int hosts = (o->nranks + o->per_host - 1) / o->per_host;

  return o->cyclic ? r % hosts : r / o->per_host;
}

static int local_rank_of(const struct options *o, int r)
{
  int hosts = (o->nranks + o->per_host - 1) / o->per_host;

  return o->cyclic ? r / hosts : r % o->per_host;
}

/*
 * With --netns, opens every rank's namespace before any rank starts, so
 * that a missing one fails the job at once and by name.  The descriptors
 * are close-on-exec: only the child that joins one needs it.
 */
void open_namespaces(struct job *job)
{
  char path[PATH_MAX];

  if (job->opt->netns == NULL)
    return;
  for (int r = 0; r < job->opt->nranks; r++) {
    snprintf(path, sizeof path, "/var/run/netns/%s-h%d", job->opt->netns,
             host_of(job->opt, r));
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
                                         ? local_rank_of(job->opt, rank)
                                         : rank) != 0 ||
      (job->ranks[rank].replacement && setenv("HOOP_JOIN", "1", 1) != 0))
    rank_setup_failed(rank, "setenv");
  execvp(argv[0], argv);
  int rc = dprintf(STDERR_FILENO, "hoop-run: cannot run '%s': %s\n", argv[0],
                   strerror(errno));
  (void)rc;
  _exit(EXIT_CANNOT_RUN);
}

void start_rank(struct job *job, int rank)
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

/* ---- what dead ranks leave behind ---- */

int remove_shm_left_by(pid_t pid)
{
  char prefix[32];
  int removed = 0;
  DIR *dir = opendir("/dev/shm");

  if (dir == NULL)
    return 0;
  snprintf(prefix, sizeof prefix, "hoop-%ld-", (long)pid);
  size_t len = strlen(prefix);
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    if (strncmp(e->d_name, prefix, len) == 0 &&
        unlinkat(dirfd(dir), e->d_name, 0) == 0)
      removed++;
  }
  closedir(dir);
  return removed;
}
