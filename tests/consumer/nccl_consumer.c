/* An NCCL program built against the installed nccl.h and libnccl.so.2:
   two ranks in one process, one group all-reduce over both. */
#include <nccl.h>
#include <stdio.h>

int main(void) {
  ncclComm_t comms[2];
  if (ncclCommInitAll(comms, 2, NULL) != ncclSuccess) {
    fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  float v[2][3] = {{1, 2, 3}, {10, 20, 30}};
  ncclGroupStart();
  for (int r = 0; r < 2; r++)
    ncclAllReduce(v[r], v[r], 3, ncclFloat, ncclSum, comms[r], NULL);
  if (ncclGroupEnd() != ncclSuccess) {
    fprintf(stderr, "ncclGroupEnd: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  for (int r = 0; r < 2; r++)
    ncclCommDestroy(comms[r]);
  if (v[0][2] != 33 || v[1][0] != 11) {
    fprintf(stderr, "wrong sums %g %g\n", v[0][2], v[1][0]);
    return 1;
  }
  int version = 0;
  ncclGetVersion(&version);
  printf("nccl consumer: sums right on NCCL API %d\n", version);
  return 0;
}
