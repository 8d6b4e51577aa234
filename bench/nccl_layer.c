/*
 * nccl-layer: what the NCCL API costs on top of hoop's.  Every rank holds
 * two communicators over the same ranks, one made through hoop.h and one
 * through hoop's NCCL API (libnccl.so.2), and times float32 SUM all-reduce
 * through each, interleaved (A B A B ...), as ../shared/bench-method.md
 * says: per iteration a barrier then one call, the slowest rank's time,
 * the median over iterations.  Prints, per size, both medians and the
 * ratio NCCL/hoop with the spread of the per-round ratios.
 *   hoop-run -n 2 nccl-layer [-b 4K] [-b 64M] [-r rounds] [-n iters]
 * Host buffers; with -m cuda (a CUDA build on a GPU) device buffers, each
 * call timed to its stream's completion.
 */
#define _POSIX_C_SOURCE 200809L
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hoop.h"
#include "timing.h"
#if NCCL_LAYER_CUDA
#include <cuda_runtime.h>
#endif

static int on_device; /* -m cuda */

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, const char *why) {
  fprintf(stderr, "nccl-layer: %s: %s\n", what, why);
  exit(1);
}

#define HOOP_OK(call)                                                         \
  do {                                                                        \
    if ((call) != HOOP_SUCCESS)                                               \
      die(#call, hoop_last_error());                                          \
  } while (0)
#define NCCL_OK(call)                                                         \
  do {                                                                        \
    if ((call) != ncclSuccess)                                                \
      die(#call, ncclGetLastError(NULL));                                     \
  } while (0)

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'K': case 'k': v *= 1024; break;
  case 'M': case 'm': v *= 1024 * 1024; break;
  case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  default: break;
  }
  return (size_t)v;
}

/* One timed iteration: barrier, call, the slowest rank's seconds. */
static double timed(hoop_comm_t hc, ncclComm_t nc, float *buf, size_t count) {
  HOOP_OK(hoop_barrier(hc));
  double t0 = now_s();
  if (nc != NULL)
    NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, nc, NULL));
  else
    HOOP_OK(hoop_allreduce(hc, buf, buf, count, HOOP_F32, HOOP_SUM, NULL));
#if NCCL_LAYER_CUDA
  if (on_device && cudaStreamSynchronize(NULL) != cudaSuccess)
    die("cudaStreamSynchronize", cudaGetErrorString(cudaGetLastError()));
#endif
  double t = now_s() - t0;
  HOOP_OK(hoop_allreduce(hc, &t, &t, 1, HOOP_F64, HOOP_MAX, NULL));
  return t;
}

int main(int argc, char **argv) {
  size_t sizes[8];
  int nsizes = 0, rounds = 9, iters = 40;
  int opt;
  while ((opt = getopt(argc, argv, "b:r:n:m:")) != -1) {
    switch (opt) {
    case 'm':
      on_device = strcmp(optarg, "cuda") == 0;
      if (!on_device && strcmp(optarg, "host") != 0)
        die("-m", "host or cuda");
#if !NCCL_LAYER_CUDA
      if (on_device)
        die("-m cuda", "this build has no CUDA");
#endif
      break;
    case 'b':
      if (nsizes < 8)
        sizes[nsizes++] = parse_size(optarg);
      break;
    case 'r':
      rounds = atoi(optarg);
      break;
    case 'n':
      iters = atoi(optarg);
      break;
    default:
      fprintf(stderr, "usage: %s [-b bytes]... [-r rounds] [-n iters] [-m host|cuda]\n",
              argv[0]);
      return 2;
    }
  }
  if (nsizes == 0) {
    sizes[nsizes++] = 4096;
    sizes[nsizes++] = 64u << 20;
  }
  if (rounds < 1 || iters < 1)
    die("options", "rounds and iters must be at least 1");

  hoop_comm_t hc;
  HOOP_OK(hoop_comm_init_env(&hc, NULL));
  int rank, nranks;
  HOOP_OK(hoop_comm_rank(hc, &rank));
  HOOP_OK(hoop_comm_size(hc, &nranks));
  ncclUniqueId id;
  if (rank == 0)
    NCCL_OK(ncclGetUniqueId(&id));
  HOOP_OK(hoop_broadcast(hc, &id, &id, sizeof id, HOOP_U8, 0, NULL));
  ncclComm_t nc;
  NCCL_OK(ncclCommInitRank(&nc, nranks, id, rank));

  if (rank == 0)
    printf("# nccl-layer: %d ranks, float32 sum all-reduce, %s buffers, "
           "%d rounds x %d iterations per API, interleaved\n"
           "# %10s %12s %12s %8s %8s %8s\n",
           nranks, on_device ? "cuda" : "host", rounds, iters, "bytes", "hoop_us", "nccl_us", "ratio",
           "min", "max");
  for (int s = 0; s < nsizes; s++) {
    size_t count = sizes[s] / sizeof(float);
    float *host = malloc(count * sizeof(float) + 1);
    float *buf = host;
    double *times = malloc(sizeof *times * (size_t)iters);
    double *hoop_med = malloc(sizeof *hoop_med * (size_t)rounds);
    double *nccl_med = malloc(sizeof *nccl_med * (size_t)rounds);
    double *ratio = malloc(sizeof *ratio * (size_t)rounds);
    if (host == NULL || times == NULL || hoop_med == NULL ||
        nccl_med == NULL || ratio == NULL)
      die("malloc", "out of memory");
    /* Checked once: rank r adds r+1. */
    for (size_t i = 0; i < count; i++)
      host[i] = (float)(rank + 1);
#if NCCL_LAYER_CUDA
    if (on_device) {
      if (cudaMalloc((void **)&buf, count * sizeof(float) + 1) != cudaSuccess ||
          cudaMemcpy(buf, host, count * sizeof(float),
                     cudaMemcpyHostToDevice) != cudaSuccess)
        die("cudaMalloc", cudaGetErrorString(cudaGetLastError()));
    }
#endif
    NCCL_OK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, nc, NULL));
#if NCCL_LAYER_CUDA
    if (on_device && cudaMemcpy(host, buf, count * sizeof(float),
                                cudaMemcpyDeviceToHost) != cudaSuccess)
      die("cudaMemcpy", cudaGetErrorString(cudaGetLastError()));
#endif
    for (size_t i = 0; i < count; i++)
      if (host[i] != (float)(nranks * (nranks + 1) / 2))
        die("check", "the NCCL API's all-reduce gave a wrong sum");
    for (int w = 0; w < 5; w++) {
      timed(hc, NULL, buf, count);
      timed(hc, nc, buf, count);
    }
    for (int r = 0; r < rounds; r++) {
      /* Alternate which API goes first, so drift hits both alike. */
      for (int k = 0; k < 2; k++) {
        int use_nccl = (k + r) % 2;
        for (int i = 0; i < iters; i++)
          times[i] = timed(hc, use_nccl ? nc : NULL, buf, count);
        (use_nccl ? nccl_med : hoop_med)[r] = median(times, iters);
      }
      ratio[r] = nccl_med[r] / hoop_med[r];
    }
    double h = median(hoop_med, rounds), n = median(nccl_med, rounds);
    double rmed = median(ratio, rounds); /* sorts: [0] min, [last] max */
    if (rank == 0)
      printf("  %10zu %12.2f %12.2f %8.3f %8.3f %8.3f\n", sizes[s], h * 1e6,
             n * 1e6, rmed, ratio[0], ratio[rounds - 1]);
#if NCCL_LAYER_CUDA
    if (on_device)
      cudaFree(buf);
#endif
    free(host);
    free(times);
    free(hoop_med);
    free(nccl_med);
    free(ratio);
  }
  NCCL_OK(ncclCommDestroy(nc));
  HOOP_OK(hoop_comm_destroy(hc));
  return 0;
}
