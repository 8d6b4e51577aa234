/*
 * The staged path for calls on device buffers (device_path.h): through
 * pinned host memory and the host collectives, over any transport.
 *
 * The caller's thread enqueues every piece of GPU work at call time, on two
 * helper streams forked from the caller's stream: per chunk, a copy into a
 * pinned stage then a write of "staged" (d2h stream), and a wait for
 * "reduced" then a copy out and a write of "drained" (h2d stream).  The
 * caller's stream joins both.  The proxy thread waits for "staged", runs
 * the host collective on the stage and writes "reduced".  The three
 * counters live in mapped pinned memory; the GPU writes and waits on them
 * with stream memory operations (cuStreamWriteValue32/WaitValue32).
 *
 * So the proxy makes no CUDA call, and nothing the GPU waits for needs the
 * CUDA driver on the host: a caller blocked in a synchronous CUDA call (a
 * pageable cudaMemcpy behind the collective, say) cannot stall it.  An
 * earlier design held the caller's stream with a host function that waited
 * for the proxy's copies; CUDA forbids a host function to wait for work
 * not ordered before it, and on an H100 every multi-rank test hung once the
 * ranks copied results to pageable memory behind the collective.
 *
 * Counters count chunks over the communicator's life, so one chunk's stage
 * is free again once the chunk STAGES earlier is reduced (its input) and
 * drained (its output); comparisons are modulo 2^32, as the GPU's are.
 */
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/device_path.h"
#include "core/comm.h"
#include "core/cuda_sync.h"
#include "core/error.h"
#include "core/param.h"

#define STAGES 2 /* chunks in flight: one copied while the other moves */

/* Written by the GPU (staged, drained) or the proxy (reduced). */
struct device_flags {
  alignas(64) uint32_t staged;
  alignas(64) uint32_t reduced;
  alignas(64) uint32_t drained;
};

struct staged_path {
  struct hoop_device_path base;
  size_t chunk_bytes;

  /* The calling thread's, under the queue's enqueue lock: */
  cudaStream_t d2h, h2d;
  cudaEvent_t forked, joined_d2h, joined_h2d;
  uint32_t next_chunk;
  CUdeviceptr flags_dev;

  struct device_flags *flags; /* mapped pinned memory */
  char *stage_in[STAGES], *stage_out[STAGES];
};

/* ---- The GPU's side ------------------------------------------------------ */

/*
 * Copies chunk i of the send buffer into stage s.  A reduce-scatter or
 * all-to-all chunk is the same element range of every rank's block,
 * gathered into contiguous blocks by one 2-D copy; all-gather and
 * all-to-all results are scattered back the same way.
 */
static cudaError_t copy_in(struct staged_path *d,
                           const struct hoop_device_call *j, size_t i, int s) {
  const struct hoop_call *c = &j->call;
  size_t es = c->elem_size, n = hoop__chunk_elems(&j->k, i);
  const char *src = c->send + i * j->k.per * es;
  if (n == 0)
    return cudaSuccess;
  if (c->coll == HOOP_COLL_REDUCE_SCATTER || c->coll == HOOP_COLL_ALLTOALL)
    return cudaMemcpy2DAsync(d->stage_in[s], n * es, src, j->per_rank * es,
                             n * es, j->k.rows, cudaMemcpyDeviceToHost,
                             d->d2h);
  return cudaMemcpyAsync(d->stage_in[s], src, n * es,
                         cudaMemcpyDeviceToHost, d->d2h);
}

static cudaError_t copy_out(struct staged_path *d,
                            const struct hoop_device_call *j, size_t i,
                            int s) {
  const struct hoop_call *c = &j->call;
  size_t es = c->elem_size, n = hoop__chunk_elems(&j->k, i);
  char *dst = c->recv + i * j->k.per * es;
  if (n == 0)
    return cudaSuccess;
  if (c->coll == HOOP_COLL_ALLGATHER || c->coll == HOOP_COLL_ALLTOALL)
    return cudaMemcpy2DAsync(dst, j->per_rank * es, d->stage_out[s], n * es,
                             n * es, j->k.rows, cudaMemcpyHostToDevice,
                             d->h2d);
  return cudaMemcpyAsync(dst, d->stage_out[s], n * es,
                         cudaMemcpyHostToDevice, d->h2d);
}

static CUdeviceptr flag_addr(const struct staged_path *d, const uint32_t *f) {
  return d->flags_dev + (CUdeviceptr)((const char *)f - (const char *)d->flags);
}

static cudaError_t stream_wait(struct staged_path *d, cudaStream_t s,
                               const uint32_t *flag, uint32_t value) {
  return hoop__cuda_stream_wait(s, flag_addr(d, flag), value);
}

static cudaError_t stream_write(struct staged_path *d, cudaStream_t s,
                                const uint32_t *flag, uint32_t value) {
  return hoop__cuda_stream_write(s, flag_addr(d, flag), value);
}

/*
 * Enqueues a job's GPU side behind the work on `user`, and makes `user`
 * wait for it.  Counter values are chunk numbers plus one.
 */
static cudaError_t enqueue_gpu(struct hoop_comm *comm, struct staged_path *d,
                               const struct hoop_device_call *j,
                               cudaStream_t user) {
  int has_send, has_recv;
  hoop__call_buffers(comm, &j->call, &has_send, &has_recv);
  cudaError_t e = cudaEventRecord(d->forked, user);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(d->d2h, d->forked, 0);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(d->h2d, d->forked, 0);
  for (size_t i = 0; i < j->k.nchunks && e == cudaSuccess; i++) {
    uint32_t c = j->first + (uint32_t)i;
    int s = (int)(c % STAGES);
    /* Stage s's input is free once chunk c - STAGES is reduced. */
    e = stream_wait(d, d->d2h, &d->flags->reduced, c - STAGES + 1);
    if (e == cudaSuccess && has_send)
      e = copy_in(d, j, i, s);
    if (e == cudaSuccess)
      e = stream_write(d, d->d2h, &d->flags->staged, c + 1);
    if (e == cudaSuccess)
      e = stream_wait(d, d->h2d, &d->flags->reduced, c + 1);
    if (e == cudaSuccess && has_recv)
      e = copy_out(d, j, i, s);
    if (e == cudaSuccess)
      e = stream_write(d, d->h2d, &d->flags->drained, c + 1);
  }
  if (e == cudaSuccess)
    e = cudaEventRecord(d->joined_d2h, d->d2h);
  if (e == cudaSuccess)
    e = cudaEventRecord(d->joined_h2d, d->h2d);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(user, d->joined_d2h, 0);
  if (e == cudaSuccess)
    e = cudaStreamWaitEvent(user, d->joined_h2d, 0);
  return e;
}

static void staged_number(const struct hoop_comm *comm,
                          struct hoop_device_path *path,
                          struct hoop_device_call *c) {
  struct staged_path *d = (struct staged_path *)path;
  c->first = d->next_chunk;
  d->next_chunk += (uint32_t)c->k.nchunks;
}

static cudaError_t staged_enqueue(struct hoop_comm *comm,
                                  struct hoop_device_path *path,
                                  const struct hoop_device_call *c,
                                  cudaStream_t s) {
  return enqueue_gpu(comm, (struct staged_path *)path, c, s);
}

/* ---- The proxy's side ---------------------------------------------------- */

/* Waits for a counter the GPU writes, failing after the comm's timeout. */
static hoop_result_t wait_flag(struct hoop_comm *comm, const int *poisoned,
                               const uint32_t *flag, uint32_t value,
                               const char *what) {
  long long deadline = hoop__now_ms() + comm->timeout_ms;
  for (int polls = 0;; polls++) {
    if (hoop__counter_reached(__atomic_load_n(flag, __ATOMIC_ACQUIRE), value))
      return HOOP_SUCCESS;
    if ((polls & 255) == 0 && hoop__now_ms() > deadline)
      return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                        "rank %d: timed out after %d ms %s", comm->rank,
                        comm->timeout_ms, what);
    HOOP_CHECK(hoop__device_pause(comm, poisoned, polls, what));
  }
}

static hoop_result_t staged_finish(struct hoop_comm *comm,
                                   struct hoop_device_path *path,
                                   const struct hoop_device_call *j,
                                   const int *poisoned) {
  struct staged_path *d = (struct staged_path *)path;
  int has_send, has_recv;
  hoop__call_buffers(comm, &j->call, &has_send, &has_recv);
  for (size_t i = 0; i < j->k.nchunks; i++) {
    uint32_t c = j->first + (uint32_t)i;
    int s = (int)(c % STAGES);
    HOOP_CHECK(wait_flag(comm, poisoned, &d->flags->staged, c + 1,
                         "waiting for the stream to reach the call and copy "
                         "its input to the host"));
    HOOP_CHECK(wait_flag(comm, poisoned, &d->flags->drained, c - STAGES + 1,
                         "waiting for an earlier result's copy to the "
                         "device"));
    struct hoop_call h = {.coll = j->call.coll,
                          .send = has_send ? d->stage_in[s] : NULL,
                          .recv = has_recv ? d->stage_out[s] : NULL,
                          .dtype = j->call.dtype,
                          .op = j->call.op,
                          .root = j->call.root,
                          .setting = j->call.setting};
    size_t n = hoop__chunk_elems(&j->k, i);
    HOOP_CHECK(h.coll == HOOP_COLL_ALLTOALL
                   ? hoop__alltoall_run(comm, h.send, h.recv, n, h.dtype)
                   : hoop__collective_run(comm, &h, n, j->label));
    __atomic_store_n(&d->flags->reduced, c + 1, __ATOMIC_RELEASE);
  }
  return HOOP_SUCCESS;
}

/*
 * Whatever happened, the GPU must not wait for this call for ever: its
 * chunks count as reduced (with garbage, after a failure).
 */
static void staged_release(struct hoop_device_path *path,
                           const struct hoop_device_call *c,
                           hoop_result_t res) {
  struct staged_path *d = (struct staged_path *)path;
  __atomic_store_n(&d->flags->reduced, c->first + (uint32_t)c->k.nchunks,
                   __ATOMIC_RELEASE);
}

/* ---- Set-up and teardown ------------------------------------------------- */

static cudaError_t staged_resources(struct staged_path *d, size_t stage) {
  cudaError_t e = cudaStreamCreateWithFlags(&d->d2h, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags(&d->h2d, cudaStreamNonBlocking);
  cudaEvent_t *events[] = {&d->forked, &d->joined_d2h, &d->joined_h2d};
  for (int i = 0; i < 3 && e == cudaSuccess; i++)
    e = cudaEventCreateWithFlags(events[i], cudaEventDisableTiming);
  if (e == cudaSuccess)
    e = cudaHostAlloc((void **)&d->flags, sizeof *d->flags,
                      cudaHostAllocMapped | cudaHostAllocPortable);
  if (e == cudaSuccess) {
    memset(d->flags, 0, sizeof *d->flags);
    void *dev = NULL;
    e = cudaHostGetDevicePointer(&dev, d->flags, 0);
    d->flags_dev = (CUdeviceptr)(uintptr_t)dev;
  }
  for (int s = 0; s < STAGES && e == cudaSuccess; s++) {
    e = cudaHostAlloc((void **)&d->stage_in[s], stage, cudaHostAllocPortable);
    if (e == cudaSuccess)
      e = cudaHostAlloc((void **)&d->stage_out[s], stage,
                        cudaHostAllocPortable);
  }
  return e;
}

/* Waits for the helper streams (the proxy released every counter first). */
static void staged_free(struct staged_path *d) {
  if (d->d2h != NULL)
    cudaStreamSynchronize(d->d2h);
  if (d->h2d != NULL)
    cudaStreamSynchronize(d->h2d);
  for (int s = 0; s < STAGES; s++) {
    cudaFreeHost(d->stage_in[s]);
    cudaFreeHost(d->stage_out[s]);
  }
  cudaFreeHost(d->flags);
  cudaEvent_t events[] = {d->forked, d->joined_d2h, d->joined_h2d};
  for (int i = 0; i < 3; i++) {
    if (events[i] != NULL)
      cudaEventDestroy(events[i]);
  }
  if (d->d2h != NULL)
    cudaStreamDestroy(d->d2h);
  if (d->h2d != NULL)
    cudaStreamDestroy(d->h2d);
  free(d);
}

static hoop_result_t staged_open(struct hoop_comm *comm, int device,
                                 struct hoop_device_path **path) {
  *path = NULL;
  struct staged_path *d = calloc(1, sizeof *d);
  if (d == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "device staging");
  d->base.ops = &hoop__device_path_staged;
  /* In range: the queue checks it at every device call. */
  d->chunk_bytes = (size_t)hoop__param_cuda_chunk_bytes();
  /* The widest chunk row: one element of every rank's block. */
  size_t row = (size_t)comm->nranks * 8;
  cudaError_t e = staged_resources(
      d, d->chunk_bytes > row ? d->chunk_bytes : row);
  if (e != cudaSuccess) {
    cudaGetLastError();
    staged_free(d);
    return hoop__device_cuda_error(comm, e, "setting up device staging");
  }
  *path = &d->base;
  return HOOP_SUCCESS;
}

static size_t staged_chunk_bytes(const struct hoop_device_path *path) {
  return ((const struct staged_path *)path)->chunk_bytes;
}

static void staged_close(struct hoop_comm *comm,
                         struct hoop_device_path *path) {
  staged_free((struct staged_path *)path);
}

const struct hoop_device_path_ops hoop__device_path_staged = {
    .name = "staged",
    .open = staged_open,
    .chunk_bytes = staged_chunk_bytes,
    .number = staged_number,
    .enqueue = staged_enqueue,
    .finish = staged_finish,
    .release = staged_release,
    .close = staged_close,
};
