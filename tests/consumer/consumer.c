/*
 * A program built against an installed hoop the ways a user builds one
 * (tests/install_consumer.sh): one all-reduce under hoop-run, checked, so
 * that a library that links but does not work fails too.
 */
#include <stdint.h>
#include <stdio.h>

#include <hoop.h>

int main(void) {
  hoop_comm_t comm;
  hoop_result_t res = hoop_comm_init_env(&comm, NULL);
  if (res != HOOP_SUCCESS) {
    fprintf(stderr, "consumer: init: %s: %s\n", hoop_strerror(res),
            hoop_last_error());
    return 1;
  }
  int rank, nranks;
  hoop_comm_rank(comm, &rank);
  hoop_comm_size(comm, &nranks);

  int64_t v[3] = {rank + 1, rank + 1, rank + 1};
  res = hoop_allreduce(comm, v, v, 3, HOOP_I64, HOOP_SUM, NULL);
  if (res != HOOP_SUCCESS) {
    fprintf(stderr, "consumer: rank %d: all-reduce: %s\n", rank,
            hoop_comm_last_error(comm));
    hoop_comm_destroy(comm);
    return 1;
  }
  int64_t want = (int64_t)nranks * (nranks + 1) / 2;
  int ok = v[0] == want && v[1] == want && v[2] == want;
  printf("consumer: rank %d of %d, hoop %s: all-reduce %s\n", rank, nranks,
         hoop_version_string(), ok ? "correct" : "WRONG");
  hoop_comm_destroy(comm);
  return ok ? 0 : 1;
}
