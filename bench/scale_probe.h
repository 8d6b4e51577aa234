/*
 * What hoop-scale-probe (scale_probe.c) and peer-mpi-scale-probe
 * (peers/mpi_scale_probe.c) share, so that bench/scale.py compares the
 * libraries measured the same way: the calls' sizes, the clock, the
 * inputs and their check, and what a rank reads of itself from /proc.
 */
#ifndef HOOP_BENCH_SCALE_PROBE_H
#define HOOP_BENCH_SCALE_PROBE_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "proc_self.h"
#include "timing.h"

#define SMALL_COUNT 1024 /* 4 KiB of floats */
#define REPEATS 50

/* Rank r contributes r + 1, so every element of the sum is N(N+1)/2. */
static void fill(float *buf, size_t count, int rank) {
  for (size_t i = 0; i < count; i++)
    buf[i] = (float)(rank + 1);
}

/*
 * Returns how many elements differ from N(N+1)/2, and reports the first
 * as `prog`'s.
 */
static size_t count_wrong(const char *prog, const float *buf, size_t count,
                          int rank, int nranks, const char *what) {
  float want = (float)nranks * (float)(nranks + 1) / 2.0f;
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (buf[i] != want) {
      if (wrong == 0)
        fprintf(stderr, "%s: rank %d: %s: element %zu is %g, not %g\n", prog,
                rank, what, i, (double)buf[i], (double)want);
      wrong++;
    }
  }
  return wrong;
}

/* The int32s per peer of an all-to-all of `bytes` per peer: at least one. */
static size_t alltoall_count(long bytes) {
  return bytes >= (long)sizeof(int) ? (size_t)bytes / sizeof(int) : 1;
}

/*
 * All-to-all blocks of `count` int32s per peer: rank r sends peer p
 * r * N + p in every element of block p (exact for N up to 46,340), so
 * rank r's block s must hold s * N + r.
 */
static void fill_alltoall(int *buf, size_t count, int rank, int nranks) {
  for (int p = 0; p < nranks; p++)
    for (size_t i = 0; i < count; i++)
      buf[(size_t)p * count + i] = rank * nranks + p;
}

/* Returns how many elements differ, and reports the first as `prog`'s. */
static size_t count_wrong_alltoall(const char *prog, const int *buf,
                                   size_t count, int rank, int nranks) {
  size_t wrong = 0;
  for (int s = 0; s < nranks; s++)
    for (size_t i = 0; i < count; i++)
      if (buf[(size_t)s * count + i] != s * nranks + rank && wrong++ == 0)
        fprintf(stderr,
                "%s: rank %d: all-to-all: element %zu of block %d is %d, "
                "not %d\n",
                prog, rank, i, s, buf[(size_t)s * count + i],
                s * nranks + rank);
  return wrong;
}

#endif /* HOOP_BENCH_SCALE_PROBE_H */
