/*
 * hoop_comm_init_env: rank, size and rendezvous from the environment that
 * hoop-run, torchrun, Open MPI's mpirun or Slurm's srun set up.
 *
 * The rendezvous address comes from HOOP_ROOT_ADDR, else from torchrun's
 * MASTER_ADDR and MASTER_PORT + 1 (torchrun's own store already listens on
 * MASTER_PORT).  mpirun and srun give no address: then rank 0 publishes a
 * unique id in a file named after the job and the number of such calls
 * before this one in the process, which works when all ranks share
 * one host (the common `mpirun -np 4 prog` case); jobs across hosts set
 * HOOP_ROOT_ADDR or MASTER_ADDR.  The job's secret travels in the id file
 * (readable by its user alone) or, with an address, comes from
 * HOOP_AUTH_TOKEN or HOOP_AUTH_TOKEN_FILE.  What can be checked alone (a
 * batch script that forgot srun, a bad interface setting, a missing
 * secret) fails before any rank waits.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/param.h"

struct launch_env {
  const char *source; /* which launcher's variables were used */
  int rank;
  int nranks;
  char root_addr[256]; /* "host:port", or "" */
  char job_key[128];   /* names the id file when there is no address */
};

static int env_int(const char *name, int *value) {
  const char *text = getenv(name);
  if (text == NULL || *text == '\0')
    return 0;
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > HOOP_MAX_RANKS)
    return -1;
  *value = (int)v;
  return 1;
}

static const char *env_text(const char *name) {
  const char *text = getenv(name);
  return text != NULL ? text : "";
}

static hoop_result_t read_rank_size(struct launch_env *le) {
  static const struct {
    const char *source, *rank, *size;
  } sources[] = {
      {"hoop-run", "HOOP_RANK", "HOOP_WORLD_SIZE"},
      {"torchrun", "RANK", "WORLD_SIZE"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS"},
  };
  for (size_t i = 0; i < sizeof sources / sizeof *sources; i++) {
    int r = env_int(sources[i].rank, &le->rank);
    int s = env_int(sources[i].size, &le->nranks);
    if (r == 0 && s == 0)
      continue;
    if (r != 1 || s != 1 || le->nranks < 1 || le->rank >= le->nranks)
      return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                        "hoop_comm_init_env: %s=\"%s\" and %s=\"%s\" are "
                        "not a valid rank and size",
                        sources[i].rank, env_text(sources[i].rank),
                        sources[i].size, env_text(sources[i].size));
    le->source = sources[i].source;
    return HOOP_SUCCESS;
  }
  return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                    "hoop_comm_init_env: no rank and size in the "
                    "environment (set HOOP_RANK and HOOP_WORLD_SIZE, or "
                    "start the program with hoop-run, torchrun, mpirun or "
                    "srun)");
}

/*
 * sbatch runs the batch script as one process of the job, with the job's
 * SLURM_NTASKS and SLURM_PROCID=0; the tasks themselves are started by
 * srun, whose job steps carry SLURM_STEP_ID (SLURM_STEPID, its old name)
 * and SLURM_STEP_NUM_TASKS.  Without them the other ranks will never come,
 * which would otherwise cost the whole timeout to find out.
 */
static hoop_result_t check_slurm_step(const struct launch_env *le) {
  if (strcmp(le->source, "Slurm") != 0 || le->nranks < 2 ||
      *env_text("SLURM_STEP_ID") != '\0' ||
      *env_text("SLURM_STEPID") != '\0' ||
      *env_text("SLURM_STEP_NUM_TASKS") != '\0')
    return HOOP_SUCCESS;
  return HOOP_ERROR(NULL, HOOP_ERR_INVALID_USAGE,
                    "hoop_comm_init_env: SLURM_NTASKS=%d, but only one "
                    "process of the job started; launch with srun (this "
                    "process has SLURM_PROCID=%d but no SLURM_STEP_ID: it "
                    "is the batch script itself, not a task of a job step)",
                    le->nranks, le->rank);
}

static hoop_result_t read_root(struct launch_env *le) {
  const char *root = getenv("HOOP_ROOT_ADDR");
  const char *maddr = getenv("MASTER_ADDR");
  const char *mport = getenv("MASTER_PORT");
  if (root != NULL && *root != '\0') {
    snprintf(le->root_addr, sizeof le->root_addr, "%s", root);
  } else if (maddr != NULL && *maddr != '\0') {
    int port;
    if (mport == NULL || env_int("MASTER_PORT", &port) != 1 || port > 65534)
      return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                        "hoop_comm_init_env: MASTER_ADDR is set but "
                        "MASTER_PORT=\"%s\" is not a port number",
                        mport ? mport : "");
    snprintf(le->root_addr, sizeof le->root_addr,
             strchr(maddr, ':') ? "[%s]:%d" : "%s:%d", maddr, port + 1);
  } else {
    const char *job = getenv("PMIX_NAMESPACE");
    if (job == NULL)
      job = getenv("OMPI_MCA_ess_base_jobid");
    if (job == NULL)
      job = getenv("SLURM_JOB_ID");
    if (job == NULL)
      return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                        "hoop_comm_init_env: no rendezvous address: set "
                        "HOOP_ROOT_ADDR=host:port (or MASTER_ADDR and "
                        "MASTER_PORT)");
    const char *step = getenv("SLURM_STEP_ID");
    snprintf(le->job_key, sizeof le->job_key, "%s.%s", job,
             step ? step : "0");
  }
  return HOOP_SUCCESS;
}

/*
 * Reads the token in `path`: the file must be this user's, a regular file
 * that nobody else may read or write, as ssh asks of its keys.  Trailing
 * white space (a newline from echo) is not part of the token.
 */
static hoop_result_t read_token_file(const char *path, char *token,
                                     size_t cap) {
  /* Non-blocking: a FIFO put in the file's place must not hang the rank. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_AUTH_TOKEN_FILE=%s: %s", path, strerror(errno));
  struct stat st;
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_uid == geteuid() && (st.st_mode & 077) == 0)
    n = read(fd, token, cap - 1);
  close(fd);
  if (n < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_AUTH_TOKEN_FILE=%s must be a file of yours that "
                      "only you can read (chmod 600)",
                      path);
  while (n > 0 && strchr(" \t\r\n", token[n - 1]) != NULL)
    n--;
  token[n] = '\0';
  return HOOP_SUCCESS;
}

/* Says once per process that HOOP_AUTH=off leaves the job open. */
static void warn_unauthenticated(void) {
  static int warned;
  if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED) == 0)
    HOOP_WARN("HOOP_AUTH=off and no HOOP_AUTH_TOKEN: this job does not "
              "authenticate its connections; any process that can reach "
              "its ports can join it, read its data and change its "
              "results");
}

/*
 * The job's key when the ranks meet at an address: from HOOP_AUTH_TOKEN,
 * or from the file HOOP_AUTH_TOKEN_FILE names.  Without either the job is
 * refused, unless HOOP_AUTH=off, which runs it with a key anyone knows.
 */
static hoop_result_t secret_from(const char *file, char *text, size_t cap,
                                 struct hoop_auth_key *key) {
  const char *auth = env_text("HOOP_AUTH");
  const char *token = env_text("HOOP_AUTH_TOKEN");
  if (*auth != '\0' && strcmp(auth, "on") != 0 && strcmp(auth, "off") != 0)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_AUTH=%s is neither on nor off", auth);
  if (*token != '\0' && *file != '\0')
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "both HOOP_AUTH_TOKEN and HOOP_AUTH_TOKEN_FILE are "
                      "set; set one");
  if (*file != '\0') {
    HOOP_CHECK(read_token_file(file, text, cap));
    token = text;
  }
  if (*token == '\0' && strcmp(auth, "off") == 0) {
    warn_unauthenticated();
    memset(key, 0, sizeof *key);
    return HOOP_SUCCESS;
  }
  if (*token == '\0')
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_USAGE,
                      "hoop_comm_init_env: this job has no secret, so any "
                      "process that reaches its ports could join it: give "
                      "every rank the same HOOP_AUTH_TOKEN of at least %d "
                      "random characters (e.g. export HOOP_AUTH_TOKEN=$(od "
                      "-vAn -N16 -tx1 /dev/urandom | tr -d ' \\n')), or "
                      "HOOP_AUTH_TOKEN_FILE naming a file only you can read "
                      "that holds one; hoop-run sets one itself, and "
                      "HOOP_AUTH=off runs without (see docs/security.md)",
                      HOOP_AUTH_TOKEN_MIN);
  size_t len = strlen(token);
  if (len < HOOP_AUTH_TOKEN_MIN)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "%s holds a token of %zu characters; it needs at "
                      "least %d (128 random bits in hex)",
                      *file != '\0' ? "HOOP_AUTH_TOKEN_FILE" : "HOOP_AUTH_TOKEN",
                      len, HOOP_AUTH_TOKEN_MIN);
  hoop__auth_key_from_token(token, key);
  return HOOP_SUCCESS;
}

/* The file's token does not outlive reading it. */
static hoop_result_t read_secret(struct hoop_auth_key *key) {
  char text[4096];
  hoop_result_t res =
      secret_from(env_text("HOOP_AUTH_TOKEN_FILE"), text, sizeof text, key);
  hoop__auth_wipe(text, sizeof text);
  return res;
}

/* Every rank derives the same communicator id from the address. */
static uint64_t id_from_text(const char *text) {
  uint64_t h = hoop__fnv1a_text(HOOP_FNV1A_BASIS, text);
  return h ? h : 1;
}

/*
 * Calls of hoop_comm_init_env in this process that went through an id
 * file.  Every rank of a job makes the same calls, so the count names the
 * same file on every rank.  Without it a second communicator's ranks could
 * read the first one's id before rank 0 had removed it (rank 0 removes it
 * only once through its rendezvous) and wait for a listener that is gone.
 */
static unsigned id_file_generation;

static void id_file_path(const struct launch_env *le, char *buf, size_t len) {
  const char *dir = getenv("TMPDIR");
  unsigned gen = __atomic_fetch_add(&id_file_generation, 1, __ATOMIC_RELAXED);
  snprintf(buf, len, "%s/hoop-%u-%s-%u.id", dir && *dir ? dir : "/tmp",
           (unsigned)getuid(), le->job_key, gen);
}

/*
 * The id holds the job's secret, so only this user may read the file, and
 * a file someone else left in its place (in a shared $TMPDIR) is never
 * written through or trusted.
 */
static hoop_result_t publish_id(const char *path,
                                const hoop_unique_id_t *id) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                0600);
  if (fd < 0)
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "open(%s): %s", tmp,
                      strerror(errno));
  ssize_t n = write(fd, id, sizeof *id);
  close(fd);
  /* rename() makes the whole id appear at once to the readers. */
  if (n != (ssize_t)sizeof *id || rename(tmp, path) != 0) {
    unlink(tmp);
    return HOOP_ERROR(NULL, HOOP_ERR_SYSTEM, "writing %s: %s", path,
                      strerror(errno));
  }
  return HOOP_SUCCESS;
}

static hoop_result_t wait_for_id(const char *path, int timeout_ms,
                                 hoop_unique_id_t *id) {
  long long deadline = hoop__now_ms() + timeout_ms;
  for (;;) {
    /* Non-blocking: a FIFO put in the file's place must not hang us. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
      struct stat st;
      bool ours = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                  st.st_uid == geteuid() && (st.st_mode & 077) == 0;
      ssize_t n = ours ? read(fd, id, sizeof *id) : -1;
      close(fd);
      if (!ours)
        return HOOP_ERROR(NULL, HOOP_ERR_INVALID_USAGE,
                          "hoop_comm_init_env: %s is not a file of yours "
                          "that only you can read; someone else may have "
                          "put it there (remove it, or set TMPDIR)",
                          path);
      if (n == (ssize_t)sizeof *id)
        return HOOP_SUCCESS;
    }
    if (hoop__now_ms() > deadline)
      return HOOP_ERROR(NULL, HOOP_ERR_TIMEOUT,
                        "hoop_comm_init_env: rank 0 did not publish %s "
                        "within %d ms (ranks on several hosts need "
                        "HOOP_ROOT_ADDR or MASTER_ADDR/MASTER_PORT)",
                        path, timeout_ms);
    usleep(2000);
  }
}

hoop_result_t hoop__job_address(struct hoop_addr *addr,
                                struct hoop_auth_key *key) {
  struct launch_env le = {0};
  HOOP_CHECK(read_root(&le));
  if (le.root_addr[0] == '\0')
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_USAGE,
                      "joining a running job needs its address: set "
                      "HOOP_ROOT_ADDR=host:port (or MASTER_ADDR and "
                      "MASTER_PORT) as for hoop_comm_init_env");
  HOOP_CHECK(hoop__addr_parse(le.root_addr, addr));
  return read_secret(key);
}

hoop_result_t hoop_comm_init_env(hoop_comm_t *comm,
                                 const hoop_config_t *config) {
  if (comm == NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "hoop_comm_init_env: comm is NULL");
  *comm = NULL;
  struct launch_env le = {0};
  HOOP_CHECK(read_rank_size(&le));
  HOOP_CHECK(check_slurm_step(&le));
  HOOP_CHECK(read_root(&le));
  /*
   * Chosen here, so that a bad interface setting fails on every rank at
   * once rather than only in rank 0 while the others wait for its id file,
   * and so that rank 0's id carries the config's choice, not only the
   * environment's.
   */
  struct hoop_iface iface;
  HOOP_CHECK(hoop__comm_iface(config, &iface));
  int timeout_ms = config != NULL && config->timeout_ms > 0
                       ? config->timeout_ms
                       : (int)hoop__param_timeout_ms();
  hoop_unique_id_t id;
  struct hoop_uid uid = {.magic = HOOP_UID_MAGIC};
  char path[512] = "";
  if (le.root_addr[0] != '\0') {
    HOOP_CHECK(hoop__addr_parse(le.root_addr, &uid.root));
    HOOP_CHECK(read_secret(&uid.key));
    uid.comm_id = id_from_text(le.root_addr);
    memset(&id, 0, sizeof id);
    memcpy(id.internal, &uid, sizeof uid);
  } else {
    id_file_path(&le, path, sizeof path);
    if (le.rank == 0) {
      HOOP_CHECK(hoop__unique_id(&iface, &id));
      HOOP_CHECK(publish_id(path, &id));
    } else {
      HOOP_CHECK(wait_for_id(path, timeout_ms, &id));
    }
  }
  if (hoop__param_elastic()) {
    struct hoop_uid elastic;
    memcpy(&elastic, id.internal, sizeof elastic);
    elastic.flags |= HOOP_UID_ELASTIC;
    memcpy(id.internal, &elastic, sizeof elastic);
  }
  HOOP_INFO("hoop_comm_init_env: rank %d of %d from %s, rendezvous %s",
            le.rank, le.nranks, le.source,
            le.root_addr[0] ? le.root_addr : path);
  hoop_result_t res = hoop__comm_create(comm, le.nranks, le.rank, &id,
                                        config);
  /* Every rank has read the file once rank 0 is through the rendezvous. */
  if (le.rank == 0 && path[0] != '\0')
    unlink(path);
  return res;
}
