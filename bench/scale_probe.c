/*
 * hoop-scale-probe: what one rank pays to join a communicator and make its
 * first calls, for bench/scale.py, which runs it at growing rank counts
 * beside peers/mpi_scale_probe.c (the same probe over Open MPI).
 *   hoop-run --no-prefix -n 64 hoop-scale-probe [-l 64]
 * Each rank prints one JSON line: the time of hoop_comm_init_env, of the
 * first in-place 4 KiB float all-reduce (with HOOP_RUNTIME_CONNECT=1 it
 * makes the connections), the median of 50 more, and, before the
 * communicator is destroyed, the algorithms those calls ran (auto's pick
 * decides which peers a rank connects to), the rank's peak RSS and open
 * descriptors.
 * -l MIB also times one all-reduce of MIB MiB; -a BYTES one all-to-all of
 * BYTES per peer (int32s, rounded down, at least one), then a barrier.
 * Every call's result is checked: rank r contributes r + 1 to the
 * all-reduces, so each element must be N(N+1)/2, which a float holds
 * exactly for the sums of integers this small.  A
 * wrong element or a failed call ends the rank with status 1.
 */
#define _POSIX_C_SOURCE 200809L
#include "hoop.h"
#include "scale_probe.h"

#define PROG "hoop-scale-probe"

static void fail(hoop_comm_t comm, const char *call, hoop_result_t res) {
  fprintf(stderr, "hoop-scale-probe: %s: %s: %s\n", call,
          hoop_result_name(res),
          comm != NULL ? hoop_comm_last_error(comm) : hoop_last_error());
  exit(1);
}

/* The algorithms the all-reduces ran, as "ps:51" or "ps:51,ring:1". */
static void algos_run(hoop_comm_t comm, char *out, size_t len) {
  hoop_stats_t st = HOOP_STATS_INIT;
  hoop_result_t res = hoop_comm_get_stats(comm, &st);
  if (res != HOOP_SUCCESS)
    fail(comm, "hoop_comm_get_stats", res);
  size_t used = 0;
  out[0] = '\0';
  for (int a = 0; a < HOOP_ALGO_COUNT; a++) {
    uint64_t calls = st.by_coll[HOOP_COLL_ALLREDUCE][a].calls;
    if (calls > 0 && used < len)
      used += (size_t)snprintf(out + used, len - used, "%s%s:%llu",
                               used ? "," : "", hoop_algo_name(a),
                               (unsigned long long)calls);
  }
}

/* One checked all-to-all of `bytes` per peer, then a barrier. */
static size_t alltoall_and_barrier(hoop_comm_t comm, long bytes, int rank,
                                   int nranks, double *alltoall_s,
                                   double *barrier_s) {
  size_t count = alltoall_count(bytes);
  int *send = malloc(count * (size_t)nranks * sizeof(int));
  int *recv = malloc(count * (size_t)nranks * sizeof(int));
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "hoop-scale-probe: rank %d: no memory for all-to-all\n",
            rank);
    exit(1);
  }
  fill_alltoall(send, count, rank, nranks);
  double t0 = now_s();
  hoop_result_t res = hoop_alltoall(comm, send, recv, count, HOOP_I32, NULL);
  *alltoall_s = now_s() - t0;
  if (res != HOOP_SUCCESS)
    fail(comm, "hoop_alltoall", res);
  size_t wrong = count_wrong_alltoall(PROG, recv, count, rank, nranks);
  free(send);
  free(recv);
  t0 = now_s();
  if ((res = hoop_barrier(comm)) != HOOP_SUCCESS)
    fail(comm, "hoop_barrier", res);
  *barrier_s = now_s() - t0;
  return wrong;
}

static double timed_allreduce(hoop_comm_t comm, float *buf, size_t count) {
  double t0 = now_s();
  hoop_result_t res =
      hoop_allreduce(comm, buf, buf, count, HOOP_F32, HOOP_SUM, NULL);
  double t = now_s() - t0;
  if (res != HOOP_SUCCESS)
    fail(comm, "hoop_allreduce", res);
  return t;
}

int main(int argc, char **argv) {
  long large_mib = 0, alltoall_bytes = 0;
  int opt;
  while ((opt = getopt(argc, argv, "l:a:")) != -1) {
    char *end;
    long *value = opt == 'l'   ? &large_mib
                  : opt == 'a' ? &alltoall_bytes
                               : NULL;
    if (value != NULL && (*value = strtol(optarg, &end, 10)) > 0 &&
        *end == '\0')
      continue;
    fprintf(stderr, "usage: %s [-l MIB] [-a BYTES]\n", argv[0]);
    return 2;
  }

  hoop_comm_t comm = NULL;
  double t0 = now_s();
  hoop_result_t res = hoop_comm_init_env(&comm, NULL);
  double init_s = now_s() - t0;
  if (res != HOOP_SUCCESS)
    fail(NULL, "hoop_comm_init_env", res);
  int rank, nranks;
  if ((res = hoop_comm_rank(comm, &rank)) != HOOP_SUCCESS)
    fail(comm, "hoop_comm_rank", res);
  if ((res = hoop_comm_size(comm, &nranks)) != HOOP_SUCCESS)
    fail(comm, "hoop_comm_size", res);

  float small[SMALL_COUNT];
  size_t wrong = 0;
  fill(small, SMALL_COUNT, rank);
  double first_s = timed_allreduce(comm, small, SMALL_COUNT);
  wrong += count_wrong(PROG, small, SMALL_COUNT, rank, nranks, "first call");
  double calls[REPEATS];
  for (int i = 0; i < REPEATS; i++) {
    fill(small, SMALL_COUNT, rank);
    calls[i] = timed_allreduce(comm, small, SMALL_COUNT);
    wrong +=
        count_wrong(PROG, small, SMALL_COUNT, rank, nranks, "repeated call");
  }
  qsort(calls, REPEATS, sizeof calls[0], cmp_double);
  double median_us = (calls[REPEATS / 2 - 1] + calls[REPEATS / 2]) / 2 * 1e6;

  double large_s = -1;
  if (large_mib > 0) {
    size_t count = (size_t)large_mib * 1024 * 1024 / sizeof(float);
    float *large = malloc(count * sizeof(float));
    if (large == NULL) {
      fprintf(stderr, "hoop-scale-probe: rank %d: no memory for %ld MiB\n",
              rank, large_mib);
      return 1;
    }
    fill(large, count, rank);
    large_s = timed_allreduce(comm, large, count);
    wrong += count_wrong(PROG, large, count, rank, nranks, "large call");
    free(large);
  }

  double alltoall_s = -1, barrier_s = -1;
  if (alltoall_bytes > 0)
    wrong += alltoall_and_barrier(comm, alltoall_bytes, rank, nranks,
                                  &alltoall_s, &barrier_s);

  char algos[128];
  algos_run(comm, algos, sizeof algos);
  long rss_kb = peak_rss_kb();
  long fds = open_fds();
  printf("{\"impl\":\"hoop\",\"rank\":%d,\"nranks\":%d,\"pid\":%d,"
         "\"init_s\":%.6f,\"first_s\":%.6f,\"call_us_median\":%.2f,",
         rank, nranks, (int)getpid(), init_s, first_s, median_us);
  if (large_mib > 0)
    printf("\"large_mib\":%ld,\"large_s\":%.6f,", large_mib, large_s);
  if (alltoall_bytes > 0)
    printf("\"alltoall_bytes\":%ld,\"alltoall_s\":%.6f,\"barrier_s\":%.6f,",
           alltoall_bytes, alltoall_s, barrier_s);
  printf("\"algos\":\"%s\",\"rss_kb\":%ld,\"fds\":%ld,\"wrong\":%zu}\n",
         algos, rss_kb, fds, wrong);
  fflush(stdout);
  if ((res = hoop_comm_destroy(comm)) != HOOP_SUCCESS)
    fail(NULL, "hoop_comm_destroy", res);
  return wrong == 0 ? 0 : 1;
}
