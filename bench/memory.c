/*
 * hoop-bench's buffers (bench.h): host memory, or CUDA device memory with
 * one stream per process.  Device results are timed to the stream's
 * completion, as nccl-tests times them.  Without CUDA only host memory is
 * available (bench_memory_available says so), so the device branches are
 * never reached there.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "hoop_build_config.h"

#if HOOP_HAVE_CUDA
#include <cuda_runtime_api.h>

static cudaStream_t stream;

/*
 * Copies and zeroing go on the calls' stream: a pageable cudaMemcpy may
 * return before its DMA lands, and the stream does not wait for the
 * legacy stream.
 */
static int on_stream(cudaError_t e) {
  return e != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess;
}
#endif

int bench_memory_available(enum bench_memory m, const char **why) {
  if (m == BENCH_HOST)
    return 1;
#if HOOP_HAVE_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    return 0;
  }
  return 1;
#else
  *why = "this build of hoop has no CUDA";
  return 0;
#endif
}

void *bench_alloc(enum bench_memory m, size_t bytes) {
  if (m == BENCH_HOST)
    return malloc(bytes);
  void *p = NULL;
#if HOOP_HAVE_CUDA
  if (cudaMalloc(&p, bytes) != cudaSuccess)
    p = NULL;
#endif
  return p;
}

void bench_free(enum bench_memory m, void *p) {
  if (m == BENCH_HOST)
    free(p);
#if HOOP_HAVE_CUDA
  else
    cudaFree(p);
#endif
}

hoop_stream_t bench_stream(enum bench_memory m) {
  if (m == BENCH_HOST)
    return NULL;
#if HOOP_HAVE_CUDA
  if (stream == NULL &&
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
          cudaSuccess)
    return NULL;
  return stream;
#else
  return NULL;
#endif
}

int bench_upload(enum bench_memory m, void *dst, const void *src,
                 size_t bytes) {
  if (m == BENCH_HOST) {
    memmove(dst, src, bytes);
    return 0;
  }
#if HOOP_HAVE_CUDA
  return on_stream(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                   stream));
#else
  return 1;
#endif
}

int bench_download(enum bench_memory m, void *dst, const void *src,
                   size_t bytes) {
  if (m == BENCH_HOST) {
    memmove(dst, src, bytes);
    return 0;
  }
#if HOOP_HAVE_CUDA
  return on_stream(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                   stream));
#else
  return 1;
#endif
}

int bench_zero(enum bench_memory m, void *dst, size_t bytes) {
  if (m == BENCH_HOST) {
    memset(dst, 0, bytes);
    return 0;
  }
#if HOOP_HAVE_CUDA
  return on_stream(cudaMemsetAsync(dst, 0, bytes, stream));
#else
  return 1;
#endif
}

int bench_sync(enum bench_memory m, hoop_stream_t s) {
  if (m == BENCH_HOST)
    return 0;
#if HOOP_HAVE_CUDA
  return cudaStreamSynchronize((cudaStream_t)s) != cudaSuccess;
#else
  return 1;
#endif
}
