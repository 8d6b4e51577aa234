/*
 * The clock and the sort order the bench programs time with, one copy
 * for all of them: seconds on CLOCK_MONOTONIC (never stepped by NTP) and
 * qsort's comparison for medians and spreads.
 */
#ifndef HOOP_BENCH_TIMING_H
#define HOOP_BENCH_TIMING_H

#include <time.h>

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif
