/*
 * What hoop_comm_shrink costs as the job grows.  Run under
 * `hoop-run --elastic -n N hoop-shrink-cost`: every rank joins the job and
 * runs a warm-up all-reduce, the last rank kills itself, and the others'
 * next all-reduce fails; each survivor then times its shrink, from the
 * failed call's return to its own new communicator, and new rank 0 prints
 * the slowest and the median survivor's time (an all-gather on the new
 * communicator) with the descriptors rank 0 held before and after.  The
 * shrink's coordinator asks every survivor and is asked by every one, on
 * cores all the ranks share; this puts numbers on how that grows.
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "hoop.h"
#include "proc_self.h"
#include "timing.h"

static int fail(const char *what, hoop_comm_t comm, hoop_result_t res) {
  fprintf(stderr, "hoop-shrink-cost: %s: %s: %s\n", what,
          hoop_result_name(res),
          comm != NULL ? hoop_comm_last_error(comm) : hoop_last_error());
  return 1;
}

int main(void) {
  hoop_comm_t comm = NULL;
  hoop_result_t res = hoop_comm_init_env(&comm, NULL);
  if (res != HOOP_SUCCESS)
    return fail("init", NULL, res);
  int rank = 0, n = 0;
  hoop_comm_rank(comm, &rank);
  hoop_comm_size(comm, &n);
  float x = 1.0f;
  res = hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, NULL);
  if (res != HOOP_SUCCESS)
    return fail("warm-up all-reduce", comm, res);
  res = hoop_barrier(comm);
  if (res != HOOP_SUCCESS)
    return fail("barrier", comm, res);
  if (rank == n - 1)
    raise(SIGKILL);
  long fds_before = open_fds();
  while ((res = hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, NULL)) ==
         HOOP_SUCCESS)
    ;
  double t0 = now_s();
  hoop_comm_t next = NULL;
  res = hoop_comm_shrink(comm, NULL, &next, NULL);
  double took = (now_s() - t0) * 1e3;
  if (res != HOOP_SUCCESS)
    return fail("shrink", comm, res);
  long fds_after = open_fds();
  int left = 0;
  hoop_comm_size(next, &left);
  double *all = malloc(sizeof *all * (size_t)left);
  if (all == NULL)
    return 1;
  res = hoop_allgather(next, &took, all, 1, HOOP_F64, NULL);
  if (res != HOOP_SUCCESS)
    return fail("all-gather of the times", next, res);
  int me = 0;
  hoop_comm_rank(next, &me);
  if (me == 0) {
    qsort(all, (size_t)left, sizeof *all, cmp_double);
    printf("ranks %d: shrink to %d, slowest %.1f ms, median %.1f ms; rank "
           "0's descriptors %ld before, %ld after\n",
           n, left, all[left - 1], all[left / 2], fds_before, fds_after);
  }
  free(all);
  hoop_comm_destroy(next);
  hoop_comm_destroy(comm);
  return 0;
}
