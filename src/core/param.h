/*
 * Tunables.  Each is one line here: its name, its environment variable and
 * its default.  The environment is read once per process; a communicator's
 * hoop_config_t overrides it.  A forked child is a new process and reads
 * again, so a setting made after fork() is seen.
 */
#ifndef HOOP_PARAM_H
#define HOOP_PARAM_H

#include <stdint.h>
#include <unistd.h> /* getpid, for HOOP_PARAM_GETTER */

#define HOOP_PARAMS(X)                                                       \
  X(timeout_ms, "HOOP_TIMEOUT_MS", 300000)                                   \
  X(nsocks, "HOOP_NSOCKS", 1)                                                \
  X(slice_bytes, "HOOP_SLICE_BYTES", 256 * 1024)                             \
  X(sockbuf_bytes, "HOOP_SOCKBUF_BYTES", 4 * 1024 * 1024)                   \
  X(pipeline_bytes, "HOOP_PIPELINE_BYTES", 4 * 1024 * 1024)                 \
  X(oneshot_bytes, "HOOP_ONESHOT_BYTES", 256 * 1024)                        \
  X(cold_bytes, "HOOP_COLD_BYTES", 0)                                        \
  X(spin_us, "HOOP_SPIN_US", 5)                                             \
  X(yield_us, "HOOP_YIELD_US", 2000)                                        \
  X(runtime_connect, "HOOP_RUNTIME_CONNECT", 1)                              \
  X(elastic, "HOOP_ELASTIC", 0)                                              \
  X(alpha_ns, "HOOP_ALPHA_NS", 20000)                                        \
  X(host_alpha_ns, "HOOP_HOST_ALPHA_NS", 1000)                               \
  X(link_mbps, "HOOP_LINK_MBPS", 2000)                                       \
  X(host_mbps, "HOOP_HOST_MBPS", 5000)                                       \
  X(cuda_chunk_bytes, "HOOP_CUDA_CHUNK_BYTES", 4 * 1024 * 1024)            \
  X(cuda_ipc_chunk_bytes, "HOOP_CUDA_IPC_CHUNK_BYTES", 64 * 1024 * 1024)    \
  X(cuda_ipc_oneshot_bytes, "HOOP_CUDA_IPC_ONESHOT_BYTES", 1024 * 1024 * 1024)

/*
 * Tunables that are text.  Each accessor returns the variable's value, or
 * the default when it is unset or empty; the caller validates it, so that
 * the error reaches the call that used it.  The HOOP_IB_* numbers are
 * here rather than in HOOP_PARAMS so that a bad one is refused by name
 * (transport/rdma_settings.c) instead of replaced by its default.
 */
#define HOOP_STRING_PARAMS(X)                                                \
  X(algo, "HOOP_ALGO", NULL)                                                 \
  X(socket_ifname, "HOOP_SOCKET_IFNAME", NULL)                              \
  X(transport, "HOOP_TRANSPORT", NULL)

/* For a list's X: declares, or defines (HOOP_PARAM_GETTER), its getters. */
#define HOOP_PARAM_DECLARE(name, env, def) int64_t hoop__param_##name(void);
#define HOOP_STRING_PARAM_DECLARE(name, env, def)                            \
  const char *hoop__param_##name(void);
#define HOOP_PARAM_DEFINE(name, env, def)                                    \
  HOOP_PARAM_GETTER(int64_t, name, hoop__param_read(env, def))
#define HOOP_STRING_PARAM_DEFINE(name, env, def)                             \
  HOOP_PARAM_GETTER(const char *, name, hoop__param_read_string(env, def))

HOOP_PARAMS(HOOP_PARAM_DECLARE)
HOOP_STRING_PARAMS(HOOP_STRING_PARAM_DECLARE)

/*
 * Parses an integer with an optional K, M or G suffix (powers of 1024).
 * Returns 0 on success, -1 when `text` is not such a number.
 */
int hoop__parse_size(const char *text, int64_t *value);

/*
 * The reading behind every getter, for the lists kept elsewhere (each
 * transport's own settings, transport/params.h): a number with K/M/G
 * (a malformed one warns and gives `def`), and text (empty is unset).
 */
int64_t hoop__param_read(const char *env, int64_t def);
const char *hoop__param_read_string(const char *env, const char *def);

/*
 * Defines `type hoop__param_<name>(void)` returning `read`, evaluated once
 * per process.  A cached value belongs to the process that read it:
 * run_ranks-style launchers fork after the parent has read the settings,
 * and each child may set its own.  The value is stored before its owner,
 * so a reader that sees its own pid sees its own value; racing first
 * reads store equal ones.
 */
#define HOOP_PARAM_GETTER(type, name, read)                                  \
  type hoop__param_##name(void) {                                            \
    static type cached;                                                      \
    static pid_t owner;                                                      \
    pid_t self = getpid();                                                   \
    if (__atomic_load_n(&owner, __ATOMIC_ACQUIRE) == self)                   \
      return __atomic_load_n(&cached, __ATOMIC_RELAXED);                     \
    type v = read;                                                           \
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);                          \
    __atomic_store_n(&owner, self, __ATOMIC_RELEASE);                        \
    return v;                                                                \
  }

#endif /* HOOP_PARAM_H */
