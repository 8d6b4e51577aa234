/*
 * hoop-cuda-kernels: the device reduction kernels' bandwidth against the
 * device's own device-to-device copy, measured in the same run.  A copy
 * moves 2 bytes per byte copied (read + write), a reduction dst = a op b
 * moves 3; both are reported as bytes moved per second, so the ratio says
 * how close the kernel comes to the memory system's limit.  Before each
 * timed launch a write of twice the L2's size evicts the buffers from it:
 * repeated runs on the same buffers would otherwise serve a copy that fits
 * in L2 (16 MiB copies 32 MiB on an H100's 50 MB) from cache while the
 * reduction, moving half as much again, spills, and the ratio would
 * compare the cache with the memory rather than the kernel with the copy.
 *
 *   hoop-cuda-kernels [-b minbytes] [-e maxbytes] [-n iters]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "hoop.h"
#include "reduce/reduce_cuda.h"

#define CUDA_CHECK(call)                                                     \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "hoop-cuda-kernels: %s: %s\n", #call,                  \
              cudaGetErrorString(e_));                                       \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Evicts the L2 by writing `flush_bytes` elsewhere (see the top). */
static char *flush_buf;
static size_t flush_bytes;

/* Median milliseconds of `iters` runs of one launch kind, timed by events. */
static float median_ms(int iters, int kind, void *dst, void *a, void *b,
                       size_t bytes, hoop_dtype_t t, hoop_op_t op) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  float *ms = malloc(sizeof *ms * (size_t)iters);
  size_t count = bytes / hoop_dtype_size(t);
  for (int i = -2; i < iters; i++) { /* two warm-ups */
    CUDA_CHECK(cudaMemsetAsync(flush_buf, i & 0xff, flush_bytes, NULL));
    CUDA_CHECK(cudaEventRecord(start, NULL));
    if (kind == 0)
      CUDA_CHECK(cudaMemcpyAsync(dst, a, bytes, cudaMemcpyDeviceToDevice,
                                 NULL));
    else if (hoop__cuda_reduce(dst, a, b, count, t, op, NULL) != 0)
      CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(stop, NULL));
    CUDA_CHECK(cudaEventSynchronize(stop));
    if (i >= 0)
      CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
  }
  qsort(ms, (size_t)iters, sizeof *ms, cmp_float);
  float m = ms[iters / 2];
  free(ms);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return m;
}

int main(int argc, char **argv) {
  size_t min_bytes = 1 << 20, max_bytes = (size_t)1 << 30;
  int iters = 20, ch;
  while ((ch = getopt(argc, argv, "b:e:n:")) != -1) {
    switch (ch) {
    case 'b': min_bytes = strtoull(optarg, NULL, 0); break;
    case 'e': max_bytes = strtoull(optarg, NULL, 0); break;
    case 'n': iters = atoi(optarg); break;
    default:
      fprintf(stderr, "usage: hoop-cuda-kernels [-b bytes] [-e bytes] "
                      "[-n iters]\n");
      return 2;
    }
  }
  if (iters < 1 || min_bytes < 16 || min_bytes > max_bytes) {
    fprintf(stderr, "hoop-cuda-kernels: need -n >= 1, 16 <= -b <= -e\n");
    return 2;
  }
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  char *a, *b, *d;
  flush_bytes = 2 * (size_t)(prop.l2CacheSize > 0 ? prop.l2CacheSize : 1);
  CUDA_CHECK(cudaMalloc((void **)&flush_buf, flush_bytes));
  CUDA_CHECK(cudaMalloc((void **)&a, max_bytes));
  CUDA_CHECK(cudaMalloc((void **)&b, max_bytes));
  CUDA_CHECK(cudaMalloc((void **)&d, max_bytes));
  /* Ones everywhere: finite in every dtype and op, never zeros. */
  CUDA_CHECK(cudaMemset(a, 0x3c, max_bytes));
  CUDA_CHECK(cudaMemset(b, 0x3c, max_bytes));
  printf("# hoop-cuda-kernels on %s: median of %d, GB/s = bytes read + "
         "written per second (copy 2x, reduce 3x the buffer), L2 (%d B) "
         "flushed before each run\n",
         prop.name, iters, prop.l2CacheSize);
  printf("# %12s %9s %6s %10s %10s %10s %10s %7s\n", "bytes", "dtype", "op",
         "copy_us", "copy_GBps", "reduce_us", "red_GBps", "ratio");
  const hoop_dtype_t types[] = {HOOP_F32, HOOP_BF16, HOOP_F16, HOOP_F64,
                                HOOP_I32, HOOP_I8, HOOP_F8E4M3};
  const hoop_op_t ops[] = {HOOP_SUM, HOOP_MAX};
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    float copy_ms = median_ms(iters, 0, d, a, b, bytes, HOOP_F32, HOOP_SUM);
    double copy_bw = 2.0 * (double)bytes / copy_ms / 1e6;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        float red_ms = median_ms(iters, 1, d, a, b, bytes, types[t], ops[o]);
        double red_bw = 3.0 * (double)bytes / red_ms / 1e6;
        printf("  %12zu %9s %6s %10.1f %10.1f %10.1f %10.1f %7.3f\n", bytes,
               hoop_dtype_name(types[t]), hoop_op_name(ops[o]),
               copy_ms * 1e3, copy_bw, red_ms * 1e3, red_bw,
               red_bw / copy_bw);
      }
    }
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
  cudaFree(flush_buf);
  return 0;
}
