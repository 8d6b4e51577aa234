/*
 * Calls on device buffers (device.h): where buffers live, chunks, the
 * queue of calls and the proxy thread that serves both paths, and the
 * staged path, through pinned host memory, described here.  The CUDA IPC
 * path is device_ipc.c.
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
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/device_cuda.h"
#include "collectives/device.h"
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

struct device_job {
  struct device_job *next;
  struct hoop_device_call c;
};

struct hoop_device {
  int device; /* every device buffer of this comm is on it */
  size_t chunk_bytes;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct device_job *head, *tail;
  uint64_t queued, finished; /* jobs, under lock */
  int stopping;
  hoop_result_t error; /* first failure of a queued call */
  int poisoned; /* a call's GPU work was only partly queued (atomic) */

  /*
   * Used by the calling thread under enqueue_lock, which the proxy never
   * takes: queueing GPU work can block until the GPU drains its queue,
   * which may need the proxy to move on to the job being queued.
   */
  pthread_mutex_t enqueue_lock;
  cudaStream_t d2h, h2d;
  cudaEvent_t forked, joined_d2h, joined_h2d;
  uint32_t next_chunk;
  CUdeviceptr flags_dev;

  struct device_flags *flags; /* mapped pinned memory */
  char *stage_in[STAGES], *stage_out[STAGES];

  /* Set when every rank is on this host and CUDA IPC could join them all. */
  struct hoop_ipc_path *ipc;
};

/* ---- CUDA entry points -------------------------------------------------- */

/* A process without a usable driver says so once; its buffers are host. */
static int no_cuda;

static hoop_result_t cuda_error(struct hoop_comm *comm, cudaError_t e,
                                const char *what) {
  return HOOP_ERROR(comm, HOOP_ERR_SYSTEM, "%s: CUDA error %s: %s", what,
                    cudaGetErrorName(e), cudaGetErrorString(e));
}

/*
 * Makes `device` current on the calling thread (a communication thread
 * may have none current, or another) and returns the device that was, for
 * leave_device() to put back; *e gets the first error.
 */
static int enter_device(int device, cudaError_t *e) {
  int previous = device;
  *e = cudaGetDevice(&previous);
  if (*e == cudaSuccess && previous != device)
    *e = cudaSetDevice(device);
  return previous;
}

static void leave_device(int device, int previous) {
  if (previous != device)
    cudaSetDevice(previous);
}

/* -1 for host memory, else the device holding p. */
static int device_of(const void *p) {
  if (p == NULL || __atomic_load_n(&no_cuda, __ATOMIC_RELAXED))
    return -1;
  struct cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
        e == cudaErrorInitializationError)
      __atomic_store_n(&no_cuda, 1, __ATOMIC_RELAXED);
    return -1;
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged)
    return a.device;
  return -1;
}

hoop_result_t hoop__device_classify(struct hoop_comm *comm, const char *what,
                                    const void *send, const void *recv,
                                    hoop_stream_t stream, int *on_device) {
  int ds = device_of(send), dr = device_of(recv);
  *on_device = ds >= 0 || dr >= 0;
  if (*on_device && ((send != NULL && ds < 0) || (recv != NULL && dr < 0)))
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: %s is device memory but %s is host memory; "
                      "a call's buffers must be one or the other",
                      what, ds >= 0 ? "sendbuf" : "recvbuf",
                      ds >= 0 ? "recvbuf" : "sendbuf");
  if (ds >= 0 && dr >= 0 && ds != dr)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: sendbuf is on device %d, recvbuf on device %d",
                      what, ds, dr);
  struct hoop_device *d = comm->device;
  int dev = ds >= 0 ? ds : dr;
  if (*on_device && d != NULL && dev != d->device)
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "%s: buffers are on device %d but this communicator's "
                      "earlier device calls used device %d",
                      what, dev, d->device);
  if (!*on_device && stream != NULL) {
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e != cudaSuccess)
      return cuda_error(comm, e, what);
  }
  return HOOP_SUCCESS;
}

/* ---- Chunks -------------------------------------------------------------- */

struct hoop_chunking hoop__chunking(const struct hoop_comm *comm,
                                    const struct hoop_call *c,
                                    size_t per_rank, size_t chunk_bytes) {
  int blocks = c->coll == HOOP_COLL_REDUCE_SCATTER ||
               c->coll == HOOP_COLL_ALLGATHER ||
               c->coll == HOOP_COLL_ALLTOALL;
  struct hoop_chunking k;
  k.rows = blocks ? (size_t)comm->nranks : 1;
  k.total = blocks ? per_rank : c->count;
  size_t row = k.rows * c->elem_size;
  k.per = chunk_bytes / row > 0 ? chunk_bytes / row : 1;
  k.nchunks = k.total == 0 ? 1 : (k.total + k.per - 1) / k.per;
  return k;
}

size_t hoop__chunk_elems(const struct hoop_chunking *k, size_t i) {
  size_t lo = i * k->per;
  return k->total - lo < k->per ? k->total - lo : k->per;
}

/*
 * Copies chunk i of the send buffer into stage s.  A reduce-scatter or
 * all-to-all chunk is the same element range of every rank's block,
 * gathered into contiguous blocks by one 2-D copy; all-gather and
 * all-to-all results are scattered back the same way.
 */
static cudaError_t copy_in(struct hoop_device *d, const struct hoop_device_call *j,
                           size_t i, int s) {
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

static cudaError_t copy_out(struct hoop_device *d, const struct hoop_device_call *j,
                            size_t i, int s) {
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

static CUdeviceptr flag_addr(const struct hoop_device *d, const uint32_t *f) {
  return d->flags_dev + (CUdeviceptr)((const char *)f - (const char *)d->flags);
}

static cudaError_t stream_wait(struct hoop_device *d, cudaStream_t s,
                               const uint32_t *flag, uint32_t value) {
  return hoop__cuda_stream_wait(s, flag_addr(d, flag), value);
}

static cudaError_t stream_write(struct hoop_device *d, cudaStream_t s,
                                const uint32_t *flag, uint32_t value) {
  return hoop__cuda_stream_write(s, flag_addr(d, flag), value);
}

/*
 * Enqueues a job's GPU side behind the work on `user`, and makes `user`
 * wait for it.  Counter values are chunk numbers plus one.
 */
static cudaError_t enqueue_gpu(struct hoop_comm *comm, struct hoop_device *d,
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

/* ---- The proxy thread ---------------------------------------------------- */

hoop_result_t hoop__device_pause(struct hoop_comm *comm, const int *poisoned,
                                 int polls, const char *what) {
  if (__atomic_load_n(poisoned, __ATOMIC_ACQUIRE))
    return HOOP_ERROR(comm, HOOP_ERR_SYSTEM,
                      "rank %d: a call's GPU work could not be queued "
                      "whole, so it cannot finish (while %s)",
                      comm->rank, what);
  if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
    return HOOP_ERROR(comm, HOOP_ERR_ABORTED, "rank %d: aborted while %s",
                      comm->rank, what);
  /* GPU work takes microseconds to milliseconds: yield, then nap. */
  if (polls < 2000) {
    sched_yield();
  } else {
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
  return HOOP_SUCCESS;
}

/* Waits for a counter the GPU writes, failing after the comm's timeout. */
static hoop_result_t wait_flag(struct hoop_comm *comm, struct hoop_device *d,
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
    HOOP_CHECK(hoop__device_pause(comm, &d->poisoned, polls, what));
  }
}

static hoop_result_t run_job(struct hoop_comm *comm, struct hoop_device *d,
                             const struct hoop_device_call *j) {
  if (d->ipc != NULL)
    return hoop__ipc_path_finish(comm, d->ipc, j, &d->poisoned);
  int has_send, has_recv;
  hoop__call_buffers(comm, &j->call, &has_send, &has_recv);
  for (size_t i = 0; i < j->k.nchunks; i++) {
    uint32_t c = j->first + (uint32_t)i;
    int s = (int)(c % STAGES);
    HOOP_CHECK(wait_flag(comm, d, &d->flags->staged, c + 1,
                         "waiting for the stream to reach the call and copy "
                         "its input to the host"));
    HOOP_CHECK(wait_flag(comm, d, &d->flags->drained, c - STAGES + 1,
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

static void *proxy_main(void *arg) {
  struct hoop_comm *comm = arg;
  struct hoop_device *d = comm->device;
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (d->head == NULL && !d->stopping)
      pthread_cond_wait(&d->cond, &d->lock);
    struct device_job *j = d->head;
    if (j == NULL)
      break;
    hoop_result_t prior = d->error;
    pthread_mutex_unlock(&d->lock);
    /* After a failure the ranks are out of step: later calls only fail. */
    hoop_result_t res =
        prior != HOOP_SUCCESS ? prior : run_job(comm, d, &j->c);
    if (res != HOOP_SUCCESS && hoop__comm_broken(comm) == HOOP_SUCCESS)
      hoop__comm_break(comm, res);
    /*
     * Whatever happened, the GPU must not wait for this job forever.  Over
     * IPC every counter jumps far past anything queued: a dead peer's
     * stays there, and live peers' GPUs, their waits released, run their
     * queued work to the end (with garbage results) and bring theirs back.
     */
    if (d->ipc == NULL)
      __atomic_store_n(&d->flags->reduced,
                       j->c.first + (uint32_t)j->c.k.nchunks,
                       __ATOMIC_RELEASE);
    else if (res != HOOP_SUCCESS)
      hoop__ipc_path_release(d->ipc);
    pthread_mutex_lock(&d->lock);
    d->head = j->next;
    if (d->head == NULL)
      d->tail = NULL;
    if (d->error == HOOP_SUCCESS)
      d->error = res;
    d->finished++;
    pthread_cond_broadcast(&d->cond);
    free(j);
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

/* ---- Set-up and teardown ------------------------------------------------- */

static cudaError_t device_resources(struct hoop_device *d, size_t stage) {
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
static void device_release(struct hoop_device *d) {
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
  pthread_mutex_destroy(&d->lock);
  pthread_mutex_destroy(&d->enqueue_lock);
  pthread_cond_destroy(&d->cond);
  free(d);
}

static hoop_result_t device_start(struct hoop_comm *comm, int device,
                                  size_t chunk_bytes) {
  if (!hoop__cuda_memops_available())
    return HOOP_ERROR(comm, HOOP_ERR_UNSUPPORTED,
                      "device buffers need CUDA stream memory operations "
                      "(cuStreamWaitValue32), which this driver does not "
                      "offer");
  struct hoop_device *d = calloc(1, sizeof *d);
  if (d == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "device proxy");
  d->device = device;
  d->chunk_bytes = chunk_bytes;
  pthread_mutex_init(&d->lock, NULL);
  pthread_mutex_init(&d->enqueue_lock, NULL);
  pthread_cond_init(&d->cond, NULL);
  /* The widest chunk row: one element of every rank's block. */
  size_t row = (size_t)comm->nranks * 8;
  cudaError_t e;
  int previous = enter_device(device, &e);
  if (e == cudaSuccess)
    e = device_resources(d, chunk_bytes > row ? chunk_bytes : row);
  leave_device(device, previous);
  if (e != cudaSuccess) {
    cudaGetLastError();
    device_release(d);
    return cuda_error(comm, e, "setting up device staging");
  }
  __atomic_store_n(&comm->device, d, __ATOMIC_RELEASE);
  hoop_result_t res = hoop__ipc_path_open(comm, device, &d->ipc);
  if (res != HOOP_SUCCESS) {
    __atomic_store_n(&comm->device, NULL, __ATOMIC_RELEASE);
    device_release(d);
    return res;
  }
  int err = pthread_create(&d->thread, NULL, proxy_main, comm);
  if (err != 0) {
    __atomic_store_n(&comm->device, NULL, __ATOMIC_RELEASE);
    device_release(d);
    return HOOP_ERROR(comm, HOOP_ERR_SYSTEM,
                      "starting the device proxy thread: %s", strerror(err));
  }
  static const struct hoop_device_ops ops = {.drain = hoop__device_drain,
                                             .free = hoop__device_free};
  __atomic_store_n(&comm->device_ops, &ops, __ATOMIC_RELEASE);
  return HOOP_SUCCESS;
}

static int call_device(const struct hoop_call *c) {
  int dev = device_of(c->send);
  return dev >= 0 ? dev : device_of(c->recv);
}

/* One rank: every collective is a copy, or nothing, on the caller's stream. */
static hoop_result_t run_single_device(struct hoop_comm *comm,
                                       const struct hoop_call *c,
                                       hoop_stream_t stream) {
  if (c->recv == NULL || c->bytes == 0 || c->send == c->recv)
    return HOOP_SUCCESS;
  cudaError_t e = cudaMemcpyAsync(c->recv, c->send, c->bytes,
                                  cudaMemcpyDeviceToDevice,
                                  (cudaStream_t)stream);
  return e == cudaSuccess
             ? HOOP_SUCCESS
             : cuda_error(comm, e, hoop__collective_name(c->coll));
}

hoop_result_t hoop__device_enqueue(struct hoop_comm *comm,
                                   const struct hoop_call *c,
                                   size_t per_rank, hoop_coll_t label,
                                   hoop_stream_t stream) {
  const char *what = hoop__collective_name(label);
  int64_t chunk = hoop__param_cuda_chunk_bytes();
  if (chunk < 4096 || chunk > ((int64_t)1 << 30))
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_CUDA_CHUNK_BYTES=%lld is outside 4K..1G",
                      (long long)chunk);
  HOOP_CHECK(hoop__device_async_error(comm));
  if (comm->nranks == 1)
    return run_single_device(comm, c, stream);
  if (comm->device == NULL)
    HOOP_CHECK(device_start(comm, call_device(c), (size_t)chunk));
  struct hoop_device *d = comm->device;
  struct device_job *j = calloc(1, sizeof *j);
  if (j == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "%s: queueing", what);
  struct hoop_device_call *dc = &j->c;
  dc->call = *c;
  dc->per_rank = per_rank;
  dc->label = label;
  dc->k = hoop__chunking(comm, c, per_rank,
                         d->ipc != NULL ? hoop__ipc_path_chunk_bytes(d->ipc)
                                        : d->chunk_bytes);
  pthread_mutex_lock(&d->enqueue_lock);
  if (d->ipc != NULL) {
    hoop__ipc_path_number(comm, d->ipc, dc);
  } else {
    dc->first = d->next_chunk;
    d->next_chunk += (uint32_t)dc->k.nchunks;
  }
  /*
   * The proxy gets the job first, so that it works through the chunks
   * while the rest are queued; it may finish and free the job meanwhile,
   * hence the copy.
   */
  struct hoop_device_call mine = *dc;
  pthread_mutex_lock(&d->lock);
  if (d->tail != NULL)
    d->tail->next = j;
  else
    d->head = j;
  d->tail = j;
  d->queued++;
  pthread_cond_broadcast(&d->cond);
  pthread_mutex_unlock(&d->lock);
  /* Kernels and copies go to the buffers' device, whichever device the
   * calling thread has current (a communication thread may have none). */
  cudaError_t e;
  int previous = enter_device(d->device, &e);
  if (e == cudaSuccess)
    e = d->ipc != NULL
            ? hoop__ipc_path_enqueue(d->ipc, &mine, (cudaStream_t)stream)
            : enqueue_gpu(comm, d, &mine, (cudaStream_t)stream);
  leave_device(d->device, previous);
  pthread_mutex_unlock(&d->enqueue_lock);
  if (e != cudaSuccess) {
    cudaGetLastError();
    __atomic_store_n(&d->poisoned, 1, __ATOMIC_RELEASE);
    return cuda_error(comm, e, what);
  }
  return HOOP_SUCCESS;
}

/* The first failure of a queued call, after the queue empties if `wait`. */
static hoop_result_t queue_error(struct hoop_comm *comm, int wait) {
  /* Any thread may ask (a query, a watchdog), so the proxy is found
   * atomically; device_start publishes it. */
  struct hoop_device *d = __atomic_load_n(&comm->device, __ATOMIC_ACQUIRE);
  if (d == NULL)
    return HOOP_SUCCESS;
  pthread_mutex_lock(&d->lock);
  while (wait && d->finished < d->queued)
    pthread_cond_wait(&d->cond, &d->lock);
  hoop_result_t res = d->error;
  pthread_mutex_unlock(&d->lock);
  if (res != HOOP_SUCCESS) {
    char reason[HOOP_ERROR_MAX];
    hoop__comm_broken_reason(comm, reason, sizeof reason);
    return HOOP_ERROR(comm, res,
                      "an earlier call on device buffers failed: %s", reason);
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__device_drain(struct hoop_comm *comm) {
  return queue_error(comm, 1);
}

hoop_result_t hoop__device_async_error(struct hoop_comm *comm) {
  return queue_error(comm, 0);
}

const char *hoop__device_path(const struct hoop_comm *comm) {
  const struct hoop_device *d =
      __atomic_load_n(&comm->device, __ATOMIC_ACQUIRE);
  return d == NULL ? "none" : d->ipc != NULL ? "cuda_ipc" : "staged";
}

void hoop__device_free(struct hoop_comm *comm) {
  struct hoop_device *d = comm->device;
  if (d == NULL)
    return;
  pthread_mutex_lock(&d->lock);
  d->stopping = 1;
  pthread_cond_broadcast(&d->cond);
  pthread_mutex_unlock(&d->lock);
  pthread_join(d->thread, NULL);
  hoop__ipc_path_close(comm, d->ipc);
  __atomic_store_n(&comm->device, NULL, __ATOMIC_RELEASE);
  device_release(d);
}

/* ---- Send and receive ------------------------------------------------ */

/* A copy on `stream`, on the device of the buffer, waited for. */
static cudaError_t copy_and_wait(int device, void *dst, const void *src,
                                 size_t bytes, enum cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  cudaError_t e;
  int previous = enter_device(device, &e);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(dst, src, bytes, kind, stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(stream);
  leave_device(device, previous);
  return e;
}

hoop_result_t hoop__device_stage(struct hoop_comm *comm, const char *what,
                                 const void *dev, size_t bytes, int copy,
                                 hoop_stream_t stream, void **host) {
  *host = NULL;
  HOOP_CHECK(hoop__device_drain(comm));
  *host = malloc(bytes);
  if (*host == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY,
                      "%s: %zu bytes of host memory to stage a device buffer",
                      what, bytes);
  if (!copy)
    return HOOP_SUCCESS;
  cudaError_t e = copy_and_wait(device_of(dev), *host, dev, bytes,
                                cudaMemcpyDeviceToHost, (cudaStream_t)stream);
  if (e == cudaSuccess)
    return HOOP_SUCCESS;
  cudaGetLastError();
  free(*host);
  *host = NULL;
  return cuda_error(comm, e, what);
}

hoop_result_t hoop__device_unstage(struct hoop_comm *comm, const char *what,
                                   void *dev, void *host, size_t bytes,
                                   int copy, hoop_stream_t stream) {
  cudaError_t e = cudaSuccess;
  if (copy)
    e = copy_and_wait(device_of(dev), dev, host, bytes,
                      cudaMemcpyHostToDevice, (cudaStream_t)stream);
  free(host);
  if (e == cudaSuccess)
    return HOOP_SUCCESS;
  cudaGetLastError();
  return cuda_error(comm, e, what);
}
