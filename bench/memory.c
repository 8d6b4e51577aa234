/*
 * hoop-bench's buffers (bench.h): host memory, or CUDA device memory with
 * one stream per process.  Device results are timed to the stream's
 * completion, as nccl-tests times them.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "hoop_build_config.h"

#if HOOP_HAVE_CUDA
#include <cuda_runtime_api.h>

static cudaStream_t stream;

int bench_memory_available(enum bench_memory m, const char **why) {
  int n = 0;
  if (m == BENCH_HOST)
    return 1;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    return 0;
  }
  return 1;
}

void *bench_alloc(enum bench_memory m, size_t bytes) {
  void *p = NULL;
  if (m == BENCH_HOST)
    return malloc(bytes);
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}

void bench_free(enum bench_memory m, void *p) {
  if (m == BENCH_HOST)
    free(p);
  else
    cudaFree(p);
}

hoop_stream_t bench_stream(enum bench_memory m) {
  if (m == BENCH_HOST)
    return NULL;
  if (stream == NULL &&
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) !=
          cudaSuccess)
    return NULL;
  return stream;
}

int bench_upload(enum bench_memory m, void *dst, const void *src,
                 size_t bytes) {
  if (m == BENCH_HOST) {
    memmove(dst, src, bytes);
    return 0;
  }
  /* On the calls' stream: a pageable cudaMemcpy may return before its DMA
     lands, and the stream does not wait for the legacy stream. */
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream) !=
             cudaSuccess ||
         cudaStreamSynchronize(stream) != cudaSuccess;
}

int bench_download(enum bench_memory m, void *dst, const void *src,
                   size_t bytes) {
  if (m == BENCH_HOST) {
    memmove(dst, src, bytes);
    return 0;
  }
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream) !=
             cudaSuccess ||
         cudaStreamSynchronize(stream) != cudaSuccess;
}

int bench_zero(enum bench_memory m, void *dst, size_t bytes) {
  if (m == BENCH_HOST) {
    memset(dst, 0, bytes);
    return 0;
  }
  return cudaMemsetAsync(dst, 0, bytes, stream) != cudaSuccess ||
         cudaStreamSynchronize(stream) != cudaSuccess;
}

int bench_sync(enum bench_memory m, hoop_stream_t s) {
  if (m == BENCH_HOST)
    return 0;
  return cudaStreamSynchronize((cudaStream_t)s) != cudaSuccess;
}

#else

int bench_memory_available(enum bench_memory m, const char **why) {
  *why = "this build of hoop has no CUDA";
  return m == BENCH_HOST;
}

void *bench_alloc(enum bench_memory m, size_t bytes) { return malloc(bytes); }
void bench_free(enum bench_memory m, void *p) { free(p); }
hoop_stream_t bench_stream(enum bench_memory m) { return NULL; }

int bench_upload(enum bench_memory m, void *dst, const void *src,
                 size_t bytes) {
  memmove(dst, src, bytes);
  return 0;
}

int bench_download(enum bench_memory m, void *dst, const void *src,
                   size_t bytes) {
  memmove(dst, src, bytes);
  return 0;
}

int bench_zero(enum bench_memory m, void *dst, size_t bytes) {
  memset(dst, 0, bytes);
  return 0;
}

int bench_sync(enum bench_memory m, hoop_stream_t s) { return 0; }

#endif
