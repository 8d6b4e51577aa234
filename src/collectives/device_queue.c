/*
 * Calls on device buffers (device.h): where buffers live, chunks, the
 * queue of calls and the proxy thread that serves whichever path
 * (device_path.h) a communicator's first device call picks, and send and
 * receive through host memory.
 *
 * The calling thread numbers each call and hands it to the proxy, then
 * queues its GPU work; the proxy runs the calls to their ends one at a
 * time, in order, so that every rank's calls stay in the order they were
 * made, and records the first failure for the next call and
 * hoop_comm_get_async_error.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/device_path.h"
#include "collectives/device.h"
#include "core/comm.h"
#include "core/cuda_sync.h"
#include "core/error.h"
#include "core/param.h"
#include "core/types.h"

struct device_job {
  struct device_job *next;
  struct hoop_device_call c;
};

struct hoop_device {
  int device; /* every device buffer of this comm is on it */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct device_job *head, *tail;
  uint64_t queued, finished; /* jobs, under lock */
  int stopping;
  hoop_result_t error; /* first failure of a queued call */
  int poisoned; /* a call's GPU work was only partly queued (atomic) */

  /*
   * Taken by the calling thread to number and queue a call; the proxy
   * never takes it: queueing GPU work can block until the GPU drains its
   * queue, which may need the proxy to move on to the job being queued.
   */
  pthread_mutex_t enqueue_lock;
  /* Chosen once, read atomically by hoop__device_path from any thread. */
  struct hoop_device_path *path;
};

/* The paths in the order they are tried; staging always accepts. */
static const struct hoop_device_path_ops *const paths[] = {
    &hoop__device_path_ipc,
    &hoop__device_path_staged,
};

/* ---- CUDA entry points -------------------------------------------------- */

/* A process without a usable driver says so once; its buffers are host. */
static int no_cuda;

hoop_result_t hoop__device_cuda_error(struct hoop_comm *comm, cudaError_t e,
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
      return hoop__device_cuda_error(comm, e, what);
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
        prior != HOOP_SUCCESS
            ? prior
            : d->path->ops->finish(comm, d->path, &j->c, &d->poisoned);
    if (res != HOOP_SUCCESS && hoop__comm_broken(comm) == HOOP_SUCCESS)
      hoop__comm_break(comm, res);
    d->path->ops->release(d->path, &j->c, res);
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

static void queue_free(struct hoop_device *d) {
  pthread_mutex_destroy(&d->lock);
  pthread_mutex_destroy(&d->enqueue_lock);
  pthread_cond_destroy(&d->cond);
  free(d);
}

/*
 * The first path that accepts, set up with the buffers' device current.
 * Every rank tries them in the same order at the same call, so a path's
 * set-up may run host collectives.
 */
static hoop_result_t open_path(struct hoop_comm *comm, int device,
                               struct hoop_device_path **path) {
  *path = NULL;
  cudaError_t e;
  int previous = enter_device(device, &e);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return hoop__device_cuda_error(comm, e, "setting up device buffers");
  }
  hoop_result_t res = HOOP_SUCCESS;
  for (size_t i = 0; i < sizeof paths / sizeof paths[0] && *path == NULL &&
                     res == HOOP_SUCCESS;
       i++)
    res = paths[i]->open(comm, device, path);
  leave_device(device, previous);
  return res;
}

static hoop_result_t device_start(struct hoop_comm *comm, int device) {
  if (!hoop__cuda_memops_available())
    return HOOP_ERROR(comm, HOOP_ERR_UNSUPPORTED,
                      "device buffers need CUDA stream memory operations "
                      "(cuStreamWaitValue32), which this driver does not "
                      "offer");
  struct hoop_device *d = calloc(1, sizeof *d);
  if (d == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "device proxy");
  d->device = device;
  pthread_mutex_init(&d->lock, NULL);
  pthread_mutex_init(&d->enqueue_lock, NULL);
  pthread_cond_init(&d->cond, NULL);
  __atomic_store_n(&comm->device, d, __ATOMIC_RELEASE);
  struct hoop_device_path *path;
  hoop_result_t res = open_path(comm, device, &path);
  if (res != HOOP_SUCCESS) {
    __atomic_store_n(&comm->device, NULL, __ATOMIC_RELEASE);
    queue_free(d);
    return res;
  }
  __atomic_store_n(&d->path, path, __ATOMIC_RELEASE);
  int err = pthread_create(&d->thread, NULL, proxy_main, comm);
  if (err != 0) {
    __atomic_store_n(&comm->device, NULL, __ATOMIC_RELEASE);
    path->ops->close(comm, path);
    queue_free(d);
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
             : hoop__device_cuda_error(comm, e, hoop__coll_call(c->coll));
}

hoop_result_t hoop__device_enqueue(struct hoop_comm *comm,
                                   const struct hoop_call *c,
                                   size_t per_rank, hoop_coll_t label,
                                   hoop_stream_t stream) {
  const char *what = hoop__coll_call(label);
  int64_t chunk = hoop__param_cuda_chunk_bytes();
  if (chunk < 4096 || chunk > ((int64_t)1 << 30))
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_CUDA_CHUNK_BYTES=%lld is outside 4K..1G",
                      (long long)chunk);
  HOOP_CHECK(hoop__device_async_error(comm));
  if (comm->nranks == 1)
    return run_single_device(comm, c, stream);
  if (comm->device == NULL)
    HOOP_CHECK(device_start(comm, call_device(c)));
  struct hoop_device *d = comm->device;
  struct device_job *j = calloc(1, sizeof *j);
  if (j == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "%s: queueing", what);
  struct hoop_device_call *dc = &j->c;
  dc->call = *c;
  dc->per_rank = per_rank;
  dc->label = label;
  dc->k =
      hoop__chunking(comm, c, per_rank, d->path->ops->chunk_bytes(d->path));
  pthread_mutex_lock(&d->enqueue_lock);
  d->path->ops->number(comm, d->path, dc);
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
    e = d->path->ops->enqueue(comm, d->path, &mine, (cudaStream_t)stream);
  leave_device(d->device, previous);
  pthread_mutex_unlock(&d->enqueue_lock);
  if (e != cudaSuccess) {
    cudaGetLastError();
    __atomic_store_n(&d->poisoned, 1, __ATOMIC_RELEASE);
    return hoop__device_cuda_error(comm, e, what);
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
  if (d == NULL)
    return "none";
  const struct hoop_device_path *path =
      __atomic_load_n(&d->path, __ATOMIC_ACQUIRE);
  return path == NULL ? "none" : path->ops->name;
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
  d->path->ops->close(comm, d->path);
  __atomic_store_n(&comm->device, NULL, __ATOMIC_RELEASE);
  queue_free(d);
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
  return hoop__device_cuda_error(comm, e, what);
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
  return hoop__device_cuda_error(comm, e, what);
}
