/*
 * Device buffers staged through pinned host memory (device.h): the proxy
 * thread, its queue, the gates on callers' streams, and the chunk pipeline.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/device.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"

#define STAGES 2 /* chunks in flight: one copied while the other moves */

/*
 * One queued call.  The gate on the caller's stream frees it, since the
 * stream may reach the gate after the communicator is gone.
 */
struct device_job {
  struct device_job *next;
  struct hoop_call call;
  size_t per_rank;
  hoop_coll_t label;
  cudaEvent_t input; /* the caller's stream reached the call */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done;
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

  /* Used by the proxy thread only, once made. */
  cudaStream_t d2h, h2d;
  cudaEvent_t in_ready[STAGES], out_free[STAGES];
  char *stage_in[STAGES], *stage_out[STAGES];
  size_t chunk_bytes; /* HOOP_CUDA_CHUNK_BYTES when the proxy started */
};

/* A process without a usable driver says so once; its buffers are host. */
static int no_cuda;

static hoop_result_t cuda_error(struct hoop_comm *comm, cudaError_t e,
                                const char *what) {
  return HOOP_ERROR(comm, HOOP_ERR_SYSTEM, "%s: CUDA error %s: %s", what,
                    cudaGetErrorName(e), cudaGetErrorString(e));
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

/* ---- Waiting ----------------------------------------------------------- */

/* Polls `ev` until it completes, failing after the comm's timeout. */
static hoop_result_t wait_event(struct hoop_comm *comm, cudaEvent_t ev,
                                const char *what) {
  long long deadline = hoop__now_ms() + comm->timeout_ms;
  for (int polls = 0;; polls++) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess)
      return HOOP_SUCCESS;
    if (e != cudaErrorNotReady)
      return cuda_error(comm, e, what);
    if (hoop__now_ms() > deadline)
      return HOOP_ERROR(comm, HOOP_ERR_TIMEOUT,
                        "rank %d: %s did not finish within %d ms", comm->rank,
                        what, comm->timeout_ms);
    /* Copies take microseconds to milliseconds: yield, then nap. */
    if (polls < 200) {
      sched_yield();
    } else {
      struct timespec nap = {0, 20000};
      nanosleep(&nap, NULL);
    }
  }
}

static void CUDART_CB gate(void *arg) {
  struct device_job *job = arg;
  pthread_mutex_lock(&job->lock);
  while (!job->done)
    pthread_cond_wait(&job->cond, &job->lock);
  pthread_mutex_unlock(&job->lock);
  pthread_mutex_destroy(&job->lock);
  pthread_cond_destroy(&job->cond);
  free(job);
}

/* ---- The chunk pipeline ------------------------------------------------ */

/* How a call's buffers split into chunks that are collectives of their own. */
struct chunking {
  int blocks;      /* reduce-scatter / all-gather: per-rank blocks */
  size_t total;    /* elements per block (blocks) or in the buffer */
  size_t per;      /* elements per block (or buffer) per chunk */
  size_t nchunks;  /* at least one, so a zero-count call still runs */
  size_t rows;     /* blocks copied per chunk: nranks or 1 */
};

static struct chunking chunk_call(const struct hoop_comm *comm,
                                  const struct device_job *job,
                                  size_t chunk_bytes) {
  const struct hoop_call *c = &job->call;
  size_t es = c->elem_size, n = (size_t)comm->nranks;
  struct chunking k = {0};
  k.blocks = c->coll == HOOP_COLL_REDUCE_SCATTER ||
             c->coll == HOOP_COLL_ALLGATHER;
  k.total = k.blocks ? job->per_rank : c->count;
  size_t row = k.blocks ? n * es : es;
  k.per = chunk_bytes / row > 0 ? chunk_bytes / row : 1;
  k.nchunks = k.total == 0 ? 1 : (k.total + k.per - 1) / k.per;
  k.rows = k.blocks ? n : 1;
  return k;
}

/* Which of its buffers this rank passes for the call (NCCL's rules). */
static void rank_buffers(const struct hoop_comm *comm,
                         const struct hoop_call *c, int *send, int *recv) {
  int root = comm->rank == c->root;
  *send = c->coll != HOOP_COLL_BROADCAST || root;
  *recv = c->coll != HOOP_COLL_REDUCE || root;
}

/*
 * Copies chunk `i` of the send buffer into stage s.  A reduce-scatter
 * chunk is the same element range of every rank's block, gathered into
 * contiguous blocks by one 2-D copy.
 */
static cudaError_t copy_in(struct hoop_device *d, const struct device_job *j,
                           const struct chunking *k, size_t i, int s) {
  const struct hoop_call *c = &j->call;
  size_t es = c->elem_size, lo = i * k->per;
  size_t n = k->total - lo < k->per ? k->total - lo : k->per;
  cudaError_t e = cudaSuccess;
  if (n > 0 && c->coll == HOOP_COLL_REDUCE_SCATTER)
    e = cudaMemcpy2DAsync(d->stage_in[s], n * es, c->send + lo * es,
                          j->per_rank * es, n * es, k->rows,
                          cudaMemcpyDeviceToHost, d->d2h);
  else if (n > 0)
    e = cudaMemcpyAsync(d->stage_in[s], c->send + lo * es, n * es,
                        cudaMemcpyDeviceToHost, d->d2h);
  if (e == cudaSuccess)
    e = cudaEventRecord(d->in_ready[s], d->d2h);
  return e;
}

/* Copies chunk `i`'s result from stage s into the receive buffer. */
static cudaError_t copy_out(struct hoop_device *d,
                            const struct device_job *j,
                            const struct chunking *k, size_t i, int s) {
  const struct hoop_call *c = &j->call;
  size_t es = c->elem_size, lo = i * k->per;
  size_t n = k->total - lo < k->per ? k->total - lo : k->per;
  cudaError_t e = cudaSuccess;
  if (n > 0 && c->coll == HOOP_COLL_ALLGATHER)
    e = cudaMemcpy2DAsync(c->recv + lo * es, j->per_rank * es,
                          d->stage_out[s], n * es, n * es, k->rows,
                          cudaMemcpyHostToDevice, d->h2d);
  else if (n > 0)
    e = cudaMemcpyAsync(c->recv + lo * es, d->stage_out[s], n * es,
                        cudaMemcpyHostToDevice, d->h2d);
  if (e == cudaSuccess)
    e = cudaEventRecord(d->out_free[s], d->h2d);
  return e;
}

/*
 * Runs one queued call: chunk i+1 is copied in while chunk i runs as a
 * host collective and chunk i-1 is copied out.
 */
static hoop_result_t run_job(struct hoop_comm *comm, struct hoop_device *d,
                             struct device_job *j) {
  const char *what = hoop__collective_name(j->label);
  struct chunking k = chunk_call(comm, j, d->chunk_bytes);
  int has_send, has_recv;
  rank_buffers(comm, &j->call, &has_send, &has_recv);
  cudaError_t e = cudaStreamWaitEvent(d->d2h, j->input, 0);
  for (int s = 0; s < STAGES && e == cudaSuccess; s++)
    e = cudaEventRecord(d->out_free[s], d->h2d);
  if (e == cudaSuccess && has_send)
    e = copy_in(d, j, &k, 0, 0);
  if (e != cudaSuccess)
    return cuda_error(comm, e, what);
  for (size_t i = 0; i < k.nchunks; i++) {
    int s = (int)(i % STAGES);
    /* The next stage's input buffer is free: its collective has run. */
    if (i + 1 < k.nchunks && has_send) {
      e = copy_in(d, j, &k, i + 1, (int)((i + 1) % STAGES));
      if (e != cudaSuccess)
        return cuda_error(comm, e, what);
    }
    if (has_send)
      HOOP_CHECK(wait_event(comm, d->in_ready[s],
                            "copying the send buffer to the host"));
    HOOP_CHECK(wait_event(comm, d->out_free[s],
                          "copying a result to the device"));
    size_t lo = i * k.per;
    size_t n = k.total - lo < k.per ? k.total - lo : k.per;
    struct hoop_call h = {.coll = j->call.coll,
                          .send = has_send ? d->stage_in[s] : NULL,
                          .recv = has_recv ? d->stage_out[s] : NULL,
                          .dtype = j->call.dtype,
                          .op = j->call.op,
                          .root = j->call.root};
    HOOP_CHECK(hoop__collective_run(comm, &h, n, j->label));
    if (has_recv) {
      e = copy_out(d, j, &k, i, s);
      if (e != cudaSuccess)
        return cuda_error(comm, e, what);
    }
  }
  for (int s = 0; s < STAGES; s++)
    HOOP_CHECK(wait_event(comm, d->out_free[s],
                          "copying a result to the device"));
  return HOOP_SUCCESS;
}

/* ---- The proxy thread ---------------------------------------------------- */

/*
 * Streams, events and pinned staging, made on the caller's thread before
 * its first gate exists: pinned allocations may synchronise the device,
 * which would wait forever for a stream held by a gate.
 */
static cudaError_t device_resources(struct hoop_device *d, size_t stage) {
  cudaError_t e = cudaStreamCreateWithFlags(&d->d2h, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags(&d->h2d, cudaStreamNonBlocking);
  for (int s = 0; s < STAGES && e == cudaSuccess; s++) {
    e = cudaEventCreateWithFlags(&d->in_ready[s], cudaEventDisableTiming);
    if (e == cudaSuccess)
      e = cudaEventCreateWithFlags(&d->out_free[s], cudaEventDisableTiming);
    if (e == cudaSuccess)
      e = cudaHostAlloc((void **)&d->stage_in[s], stage,
                        cudaHostAllocPortable);
    if (e == cudaSuccess)
      e = cudaHostAlloc((void **)&d->stage_out[s], stage,
                        cudaHostAllocPortable);
  }
  return e;
}

static void device_release(struct hoop_device *d) {
  for (int s = 0; s < STAGES; s++) {
    cudaFreeHost(d->stage_in[s]);
    cudaFreeHost(d->stage_out[s]);
    if (d->in_ready[s] != NULL)
      cudaEventDestroy(d->in_ready[s]);
    if (d->out_free[s] != NULL)
      cudaEventDestroy(d->out_free[s]);
  }
  if (d->d2h != NULL)
    cudaStreamDestroy(d->d2h);
  if (d->h2d != NULL)
    cudaStreamDestroy(d->h2d);
  pthread_mutex_destroy(&d->lock);
  pthread_cond_destroy(&d->cond);
  free(d);
}

static void finish(struct device_job *j) {
  pthread_mutex_lock(&j->lock);
  j->done = 1;
  pthread_cond_signal(&j->cond);
  pthread_mutex_unlock(&j->lock);
}

static void *proxy_main(void *arg) {
  struct hoop_comm *comm = arg;
  struct hoop_device *d = comm->device;
  cudaError_t e = cudaSetDevice(d->device);
  hoop_result_t setup =
      e == cudaSuccess ? HOOP_SUCCESS
                       : cuda_error(comm, e, "device proxy thread");
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (d->head == NULL && !d->stopping)
      pthread_cond_wait(&d->cond, &d->lock);
    struct device_job *j = d->head;
    if (j == NULL)
      break;
    hoop_result_t prior = setup != HOOP_SUCCESS ? setup : d->error;
    pthread_mutex_unlock(&d->lock);
    /* After a failure the ranks are out of step: later calls only fail. */
    hoop_result_t res = prior != HOOP_SUCCESS ? prior : run_job(comm, d, j);
    if (res != HOOP_SUCCESS && prior == HOOP_SUCCESS &&
        comm->broken == HOOP_SUCCESS)
      hoop__comm_break(comm, res);
    cudaEventDestroy(j->input);
    pthread_mutex_lock(&d->lock);
    d->head = j->next;
    if (d->head == NULL)
      d->tail = NULL;
    if (d->error == HOOP_SUCCESS)
      d->error = res;
    d->finished++;
    pthread_cond_broadcast(&d->cond);
    finish(j);
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

static hoop_result_t device_start(struct hoop_comm *comm, int device,
                                  size_t chunk_bytes) {
  struct hoop_device *d = calloc(1, sizeof *d);
  if (d == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "device proxy");
  d->device = device;
  d->chunk_bytes = chunk_bytes;
  pthread_mutex_init(&d->lock, NULL);
  pthread_cond_init(&d->cond, NULL);
  /* The widest chunk row: one element of every rank's block. */
  size_t row = (size_t)comm->nranks * 8;
  int current = 0;
  cudaError_t e = cudaGetDevice(&current);
  if (e == cudaSuccess)
    e = cudaSetDevice(device);
  if (e == cudaSuccess) {
    e = device_resources(d, chunk_bytes > row ? chunk_bytes : row);
    cudaSetDevice(current);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    device_release(d);
    return cuda_error(comm, e, "setting up device staging");
  }
  comm->device = d;
  int err = pthread_create(&d->thread, NULL, proxy_main, comm);
  if (err != 0) {
    comm->device = NULL;
    device_release(d);
    return HOOP_ERROR(comm, HOOP_ERR_SYSTEM,
                      "starting the device proxy thread: %s", strerror(err));
  }
  return HOOP_SUCCESS;
}

/* Devices of one process may differ per call only by comm; see classify. */
static int call_device(const struct hoop_call *c) {
  int dev = device_of(c->send);
  return dev >= 0 ? dev : device_of(c->recv);
}

/* One rank: every collective is a copy, or nothing, on the caller's stream. */
static hoop_result_t run_single_device(struct hoop_comm *comm,
                                       const struct hoop_call *c,
                                       hoop_stream_t stream) {
  if (c->coll == HOOP_COLL_REDUCE && c->recv == NULL)
    return HOOP_SUCCESS;
  if (c->bytes == 0 || c->send == c->recv)
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
  j->call = *c;
  j->per_rank = per_rank;
  j->label = label;
  pthread_mutex_init(&j->lock, NULL);
  pthread_cond_init(&j->cond, NULL);
  cudaStream_t s = (cudaStream_t)stream;
  cudaError_t e = cudaEventCreateWithFlags(&j->input, cudaEventDisableTiming);
  if (e == cudaSuccess) {
    e = cudaEventRecord(j->input, s);
    if (e == cudaSuccess)
      e = cudaLaunchHostFunc(s, gate, j);
    if (e != cudaSuccess)
      cudaEventDestroy(j->input);
  }
  if (e != cudaSuccess) {
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cond);
    free(j);
    return cuda_error(comm, e, what);
  }
  pthread_mutex_lock(&d->lock);
  if (d->tail != NULL)
    d->tail->next = j;
  else
    d->head = j;
  d->tail = j;
  d->queued++;
  pthread_cond_broadcast(&d->cond);
  pthread_mutex_unlock(&d->lock);
  return HOOP_SUCCESS;
}

hoop_result_t hoop__device_drain(struct hoop_comm *comm) {
  struct hoop_device *d = comm->device;
  if (d == NULL)
    return HOOP_SUCCESS;
  pthread_mutex_lock(&d->lock);
  while (d->finished < d->queued)
    pthread_cond_wait(&d->cond, &d->lock);
  hoop_result_t res = d->error;
  pthread_mutex_unlock(&d->lock);
  return res;
}

hoop_result_t hoop__device_async_error(struct hoop_comm *comm) {
  struct hoop_device *d = comm->device;
  if (d == NULL)
    return HOOP_SUCCESS;
  pthread_mutex_lock(&d->lock);
  hoop_result_t res = d->error;
  pthread_mutex_unlock(&d->lock);
  if (res != HOOP_SUCCESS)
    return HOOP_ERROR(comm, res,
                      "an earlier call on device buffers failed: %s",
                      comm->broken_reason);
  return HOOP_SUCCESS;
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
  device_release(d);
  comm->device = NULL;
}
