/*
 * The CUDA IPC schedules (ipc_schedule.c): the copies and kernels each
 * collective's chunk runs, and the traffic they move.  Built with CUDA.
 */
#ifndef HOOP_COLLECTIVES_IPC_SCHEDULE_H
#define HOOP_COLLECTIVES_IPC_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "collectives/device_path.h"

struct hoop_ipc;

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

#endif /* HOOP_COLLECTIVES_IPC_SCHEDULE_H */
