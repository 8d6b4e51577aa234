/*
 * Tunables.  Each is one line here: its name, its environment variable and
 * its default.  The environment is read once per process; a communicator's
 * hoop_config_t overrides it.  A forked child is a new process and reads
 * again, so a setting made after fork() is seen.
 */
#ifndef HOOP_PARAM_H
#define HOOP_PARAM_H

#include <stdint.h>

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
  X(shm_slot_bytes, "HOOP_SHM_SLOT_BYTES", 256 * 1024)                      \
  X(shm_slots, "HOOP_SHM_SLOTS", 8)                                          \
  X(alpha_ns, "HOOP_ALPHA_NS", 20000)                                        \
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
 * (core/rdma_settings.c) instead of replaced by its default.
 */
#define HOOP_STRING_PARAMS(X)                                                \
  X(algo, "HOOP_ALGO", NULL)                                                 \
  X(socket_ifname, "HOOP_SOCKET_IFNAME", NULL)                              \
  X(transport, "HOOP_TRANSPORT", NULL)                                      \
  X(shm_stores, "HOOP_SHM_STORES", NULL)                                    \
  X(ib_hca, "HOOP_IB_HCA", NULL)                                             \
  X(ib_gid_index, "HOOP_IB_GID_INDEX", NULL)                                 \
  X(ib_timeout, "HOOP_IB_TIMEOUT", NULL)                                     \
  X(ib_retry_cnt, "HOOP_IB_RETRY_CNT", NULL)                                 \
  X(ib_sl, "HOOP_IB_SL", NULL)                                               \
  X(ib_tc, "HOOP_IB_TC", NULL)

#define HOOP_PARAM_DECLARE_(name, env, def) int64_t hoop__param_##name(void);
HOOP_PARAMS(HOOP_PARAM_DECLARE_)
#undef HOOP_PARAM_DECLARE_

#define HOOP_STRING_PARAM_DECLARE_(name, env, def)                           \
  const char *hoop__param_##name(void);
HOOP_STRING_PARAMS(HOOP_STRING_PARAM_DECLARE_)
#undef HOOP_STRING_PARAM_DECLARE_

/*
 * Parses an integer with an optional K, M or G suffix (powers of 1024).
 * Returns 0 on success, -1 when `text` is not such a number.
 */
int hoop__parse_size(const char *text, int64_t *value);

/* HOOP_SHM_STORES: how the shm transport writes into its FIFO. */
enum hoop_shm_stores {
  HOOP_SHM_STORES_AUTO,  /* each piece the way that times faster */
  HOOP_SHM_STORES_PLAIN, /* through the caches */
  HOOP_SHM_STORES_NT     /* around them (non-temporal stores) */
};

/* NULL (unset) is AUTO; -1 for text that is not auto, plain or nt. */
int hoop__parse_shm_stores(const char *text);

#endif /* HOOP_PARAM_H */
