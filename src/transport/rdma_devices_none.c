/*
 * Device discovery in a build without libibverbs: no devices, and the
 * reason says that the build, not the host, lacks them.
 */
#include <stdio.h>

#include "transport/rdma.h"

void hoop__rdma_fork_safe(void) {}

bool hoop__rdma_discover(struct hoop_rdma_local_port **ports, int *nports,
                         char *why, size_t why_len) {
  *ports = NULL;
  *nports = 0;
  snprintf(why, why_len, "this build of hoop has no RDMA verbs (libibverbs "
                         "was not found when it was configured)");
  return true;
}
