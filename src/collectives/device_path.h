/*
 * What the device paths share (built with CUDA): how a call on device
 * buffers is cut into chunks, each a collective of its own, the queued call,
 * and the table each path fills.  device_queue.c owns the queue and the
 * proxy thread and picks a path per communicator at its first device call,
 * as transport.c picks a transport: CUDA IPC (device_ipc.c) when it can
 * join every rank, else staging through host memory (device_staged.c).
 * Neither path knows of the other.
 */
#ifndef HOOP_COLLECTIVES_DEVICE_PATH_H
#define HOOP_COLLECTIVES_DEVICE_PATH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "collectives/algorithms.h"

struct hoop_comm;
struct hoop_device_path_ops;

/* How a call's buffers split into chunks that are collectives of their own. */
struct hoop_chunking {
  size_t total;   /* elements per rank block (blocked colls) or buffer */
  size_t per;     /* of those, per chunk */
  size_t nchunks; /* at least one, so a zero-count call still runs */
  size_t rows;    /* blocks moved per chunk: nranks or 1 */
};

/* Chunks of at most chunk_bytes (all rows together). */
struct hoop_chunking hoop__chunking(const struct hoop_comm *comm,
                                    const struct hoop_call *c,
                                    size_t per_rank, size_t chunk_bytes);

/* Elements per row in chunk i. */
size_t hoop__chunk_elems(const struct hoop_chunking *k, size_t i);

/*
 * One round of the proxy's wait for the GPU, on either path: fails when a
 * call's GPU work was only partly queued (*poisoned) or the comm was
 * aborted, naming `what` it was waiting for; else yields the CPU, then
 * naps as `polls` grows.
 */
hoop_result_t hoop__device_pause(struct hoop_comm *comm, const int *poisoned,
                                 int polls, const char *what);

/* A queued call on device buffers, as both paths see it. */
struct hoop_device_call {
  struct hoop_call call;
  size_t per_rank;
  hoop_coll_t label;
  struct hoop_chunking k;
  uint32_t first; /* number of its first chunk */
  /* CUDA IPC only, set by its number(): */
  uint32_t ipc_done; /* this rank's counter when the GPU is done with it */
  uint64_t ipc_call; /* its number among the comm's IPC calls, from 1 */
  int ipc_ps;        /* an all-reduce through rank 0's window */
  long long start_ns;
};

/*
 * A path's state begins with this, as a connection begins with struct
 * hoop_conn, so that the queue can reach the path's functions.
 */
struct hoop_device_path {
  const struct hoop_device_path_ops *ops;
};

/*
 * One way of moving device buffers.  The queue serialises the calling
 * thread's part (number, enqueue) under a lock the proxy never takes, and
 * the proxy runs finish and release one call at a time, in queue order.
 */
struct hoop_device_path_ops {
  const char *name; /* hoop_comm_device_path */

  /*
   * Sets the path up for a communicator whose first device call is on
   * `device`, which is current.  Every rank calls it at the same point, so
   * it may run host collectives.  *path is NULL when the path declines (the
   * queue then tries the next); only errors return non-success.
   */
  hoop_result_t (*open)(struct hoop_comm *comm, int device,
                        struct hoop_device_path **path);

  /* The chunk size calls are cut into. */
  size_t (*chunk_bytes)(const struct hoop_device_path *p);

  /*
   * Caller's thread: gives a call its chunk numbers (and whatever else the
   * path needs to know it by) before the proxy sees it.  Calls are
   * numbered in the order they are made.
   */
  void (*number)(const struct hoop_comm *comm, struct hoop_device_path *p,
                 struct hoop_device_call *c);

  /*
   * Caller's thread, after the proxy has the call: queues its GPU work
   * behind the work on `s` and makes `s` wait for it.  The buffers' device
   * is current.  A failure leaves the call partly queued; the queue then
   * poisons the proxy's waits.
   */
  cudaError_t (*enqueue)(struct hoop_comm *comm, struct hoop_device_path *p,
                         const struct hoop_device_call *c, cudaStream_t s);

  /*
   * Proxy thread: runs (or watches) one call to its end, bounded by the
   * comm's timeout, abort and *poisoned (hoop__device_pause).  Makes no
   * CUDA call, so it cannot wait on the driver a caller holds.
   */
  hoop_result_t (*finish)(struct hoop_comm *comm, struct hoop_device_path *p,
                          const struct hoop_device_call *c,
                          const int *poisoned);

  /*
   * Proxy thread, after every call whatever `res`, its outcome: the GPU
   * must never wait for ever on a call the proxy has given up.
   */
  void (*release)(struct hoop_device_path *p,
                  const struct hoop_device_call *c, hoop_result_t res);

  /* After the proxy has stopped: waits for what still uses the path's
   * memory, then frees it all. */
  void (*close)(struct hoop_comm *comm, struct hoop_device_path *p);
};

extern const struct hoop_device_path_ops hoop__device_path_ipc;
extern const struct hoop_device_path_ops hoop__device_path_staged;

/* A failed CUDA call, as the error of `what`. */
hoop_result_t hoop__device_cuda_error(struct hoop_comm *comm, cudaError_t e,
                                      const char *what);

#endif /* HOOP_COLLECTIVES_DEVICE_PATH_H */
