/*
 * Device discovery in a build without libibverbs: no devices, and the
 * reason says that the build, not the host, lacks them.
 */
#include <stdio.h>

#include "transport/ib.h"

bool hoop__ib_discover(struct hoop_ib_port **ports, int *nports, char *why,
                       size_t why_len) {
  *ports = NULL;
  *nports = 0;
  snprintf(why, why_len, "this build of hoop has no RDMA verbs (libibverbs "
                         "was not found when it was configured)");
  return true;
}
