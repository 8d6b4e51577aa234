/*
 * The README's example: every rank contributes rank + 1 to each element;
 * after the all-reduce every element holds 1 + 2 + ... + N.
 *
 *   hoop-run -n 4 ./example-allreduce        (or mpirun -np 4, torchrun, srun)
 */
#include <stdio.h>
#include <stdlib.h>

#include <hoop.h>

int main(void) {
  hoop_comm_t comm;
  hoop_result_t res = hoop_comm_init_env(&comm, NULL);
  if (res != HOOP_SUCCESS) {
    fprintf(stderr, "init: %s: %s\n", hoop_strerror(res), hoop_last_error());
    return 1;
  }
  int rank, nranks;
  hoop_comm_rank(comm, &rank);
  hoop_comm_size(comm, &nranks);

  size_t count = 1 << 20;
  float *grad = malloc(count * sizeof *grad);
  for (size_t i = 0; i < count; i++)
    grad[i] = (float)(rank + 1);

  /* In place: sendbuf == recvbuf.  The stream argument is for CUDA. */
  res = hoop_allreduce(comm, grad, grad, count, HOOP_F32, HOOP_SUM, NULL);
  if (res != HOOP_SUCCESS) {
    fprintf(stderr, "rank %d: %s\n", rank, hoop_comm_last_error(comm));
    hoop_comm_destroy(comm);
    return 1;
  }
  float want = nranks * (nranks + 1) / 2.0f;
  int ok = grad[0] == want && grad[count - 1] == want;
  printf("rank %d of %d: grad[0] = %g (%s)\n", rank, nranks, grad[0],
         ok ? "correct" : "WRONG");
  free(grad);
  hoop_comm_destroy(comm);
  return ok ? 0 : 1;
}
