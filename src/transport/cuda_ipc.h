/*
 * The CUDA IPC transport: ranks on one host read each other's device memory
 * directly.  Every rank owns a scratch window of two chunk-sized halves in
 * device memory, exported with cudaIpcGetMemHandle and mapped by every peer
 * with cudaIpcOpenMemHandle, and one 32-bit phase counter in a host segment
 * that all ranks map and register with CUDA.  A rank's GPU advances its own
 * counter (a stream write, ordered after the copies and kernels before it)
 * and waits for its peers' counters with stream waits: no kernel spins, so
 * ranks whose processes share one GPU, whose kernels are time-sliced rather
 * than co-scheduled, cannot stall each other, and the host can read every
 * counter and release a stuck wait by storing to it.
 *
 * This is not a struct hoop_transport_ops: those move host bytes through the
 * engine, while here nothing moves until the GPU copies it.  What moves when
 * is the schedules' business (collectives/ipc_schedule.c).  Built with CUDA.
 */
#ifndef HOOP_TRANSPORT_CUDA_IPC_H
#define HOOP_TRANSPORT_CUDA_IPC_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "reduce/reduce_cuda.h"


#define HOOP_IPC_MAX_RANKS HOOP_CUDA_MAX_SOURCES

/* What a rank publishes so that its peers can map its window. */
struct hoop_ipc_export {
  cudaIpcMemHandle_t scratch;
  char segment[64]; /* rank 0's counter segment */
  int32_t device;
  int32_t ok; /* 0: this rank cannot take part, so no rank uses IPC */
};

struct hoop_ipc {
  int rank;
  int nranks;
  int device;
  size_t chunk_bytes;                     /* each of the two halves */
  char *scratch[HOOP_IPC_MAX_RANKS];      /* every rank's, mapped here */
  uint32_t *phase[HOOP_IPC_MAX_RANKS];    /* host view of the counters */
  CUdeviceptr phase_dev[HOOP_IPC_MAX_RANKS];
  void *segment;
  size_t segment_bytes;
  char segment_name[64];
  int linked;     /* this rank created the segment and has not unlinked it */
  int registered; /* the segment is registered with CUDA */
  char why[200];  /* why set-up failed, for the log */
};

/*
 * Allocates window `rank` of `nranks` on `device` (rank 0 also creates the
 * counter segment, named after comm_id) and fills *out for the peers.  On
 * failure out->ok is 0 and (*ipc)->why says why; *ipc is NULL only when
 * host memory ran out.
 */
void hoop__ipc_create(uint64_t comm_id, int rank, int nranks, int device,
                      size_t chunk_bytes, struct hoop_ipc **ipc,
                      struct hoop_ipc_export *out);

/* Maps every peer's window and the counters; 0 on success, else -1 + why. */
int hoop__ipc_attach(struct hoop_ipc *ipc,
                     const struct hoop_ipc_export *all);

/* Rank 0 unlinks the segment once every rank has mapped it. */
void hoop__ipc_unlink(struct hoop_ipc *ipc);

/* Unmaps and frees; the GPU must have finished with the window. */
void hoop__ipc_destroy(struct hoop_ipc *ipc);

/* Enqueues: this rank's counter = phase. */
cudaError_t hoop__ipc_signal(struct hoop_ipc *ipc, cudaStream_t s,
                             uint32_t phase);

/* Enqueues: wait until rank `peer`'s counter (every peer's, for -1) has
 * reached phase. */
cudaError_t hoop__ipc_wait(struct hoop_ipc *ipc, cudaStream_t s, int peer,
                           uint32_t phase);

/* Rank q's counter as the host sees it now. */
uint32_t hoop__ipc_phase(const struct hoop_ipc *ipc, int q);

/*
 * Host side, after a failure: sets every rank's counter to phase, so that
 * no GPU waits for ever on work that will not come.
 */
void hoop__ipc_release(struct hoop_ipc *ipc, uint32_t phase);

/*
 * Mailboxes in the same segment: each rank posts a small record per call
 * (HOOP_IPC_RECORD_BYTES, numbered from 1), which every peer can read while
 * the last HOOP_IPC_RECORDS are kept.  The schedules use them to check that
 * the ranks made the same calls, which the GPU cannot see.
 */
#define HOOP_IPC_RECORD_BYTES 48
#define HOOP_IPC_RECORDS 256

void hoop__ipc_post(struct hoop_ipc *ipc, uint64_t number, const void *rec);

/*
 * Copies rank q's record `number` into rec: 0 on success, -1 when q has
 * not posted it yet, 1 when it was overwritten by a later one.
 */
int hoop__ipc_read(const struct hoop_ipc *ipc, int q, uint64_t number,
                   void *rec);

#endif /* HOOP_TRANSPORT_CUDA_IPC_H */
