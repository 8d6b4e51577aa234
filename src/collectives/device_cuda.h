/*
 * What the two device paths share (built with CUDA): how a call on device
 * buffers is cut into chunks, each a collective of its own, and the queued
 * call; the CUDA IPC path (device_ipc.c, ipc_schedule.c) that device_cuda.c
 * uses instead of staging when every rank is on one host.
 */
#ifndef HOOP_COLLECTIVES_DEVICE_CUDA_H
#define HOOP_COLLECTIVES_DEVICE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "collectives/algorithms.h"

struct hoop_comm;
struct hoop_ipc;

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
  /* CUDA IPC only, set by hoop__ipc_path_number(): */
  uint32_t ipc_done; /* this rank's counter when the GPU is done with it */
  uint64_t ipc_call; /* its number among the comm's IPC calls, from 1 */
  int ipc_ps;        /* an all-reduce through rank 0's window */
  long long start_ns;
};

/* ---- The CUDA IPC path (device_ipc.c) ------------------------------------ */

struct hoop_ipc_path;

/*
 * Sets up CUDA IPC for a communicator whose first device call is on
 * `device`, when every rank is on one host, no transport is forced and
 * every rank manages (they agree through host collectives); *path is NULL
 * when calls must be staged instead, and INFO says why.  Only bad settings
 * and failing host collectives are errors.
 */
hoop_result_t hoop__ipc_path_open(struct hoop_comm *comm, int device,
                                  struct hoop_ipc_path **path);

/* The chunk size calls are cut into. */
size_t hoop__ipc_path_chunk_bytes(const struct hoop_ipc_path *p);

/*
 * Numbers a call (its chunks, its final counter, its place among the
 * calls) and posts its record for the peers to compare.  The caller then
 * queues it with hoop__ipc_path_enqueue(), both in the order of its calls.
 */
void hoop__ipc_path_number(const struct hoop_comm *comm,
                           struct hoop_ipc_path *p,
                           struct hoop_device_call *call);

cudaError_t hoop__ipc_path_enqueue(struct hoop_ipc_path *p,
                                   const struct hoop_device_call *call,
                                   cudaStream_t s);

/*
 * The proxy's part: waits until the GPU is done with the call, bounded by
 * the comm's timeout, a peer's exit, a failure notice, abort and *poisoned
 * (a call that could not be queued whole); compares the ranks' calls;
 * counts the traffic.
 */
hoop_result_t hoop__ipc_path_finish(struct hoop_comm *comm,
                                    struct hoop_ipc_path *p,
                                    const struct hoop_device_call *call,
                                    const int *poisoned);

/*
 * After a failure: moves every rank's counter past anything queued, so
 * that no GPU waits for ever (their results are garbage).
 */
void hoop__ipc_path_release(struct hoop_ipc_path *p);

/* Waits until the peers are done with this rank's window, then frees. */
void hoop__ipc_path_close(struct hoop_comm *comm, struct hoop_ipc_path *p);

/* ---- The schedules (ipc_schedule.c) -------------------------------------- */

/* The counter phases a chunk goes through: staged, reduced, done. */
#define HOOP_IPC_PHASES 3

/*
 * Enqueues call c on stream s over CUDA IPC, its chunks numbered from
 * `first` (chunk numbers count over the communicator's life, the same on
 * every rank).  When the stream has run it, this rank's counter is
 * HOOP_IPC_PHASES * (first + k->nchunks).  `ps` sends an all-reduce
 * through rank 0's memory instead of splitting the reduction; otherwise an
 * all-reduce chunk is reduced whole by every rank (one-shot) when that
 * costs at most `oneshot_bytes` more memory traffic than splitting it.
 */
cudaError_t hoop__ipc_schedule(struct hoop_ipc *ipc,
                               const struct hoop_call *c, size_t per_rank,
                               const struct hoop_chunking *k, uint32_t first,
                               int ps, size_t oneshot_bytes, cudaStream_t s);

/*
 * What such a call moves between this rank and each peer q, for the
 * counters: received[q] bytes its GPU reads from q's window, sent[q] bytes
 * q reads from its own.  Returns the schedule, as the counters name it:
 * ring (split reduction, and the other collectives), ps, oneshot, or p2p
 * (all-to-all).
 */
hoop_algo_t hoop__ipc_traffic(const struct hoop_ipc *ipc,
                              const struct hoop_call *c,
                              const struct hoop_chunking *k, int ps,
                              size_t oneshot_bytes, uint64_t *sent,
                              uint64_t *received);

#endif /* HOOP_COLLECTIVES_DEVICE_CUDA_H */
