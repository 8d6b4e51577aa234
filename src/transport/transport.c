/* Transport selection: the first that can connect a pair of ranks wins. */
#include "transport/transport.h"

#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"

static const struct hoop_transport_ops *const transports[] = {
    &hoop__tcp_transport,
};

hoop_result_t hoop__transport_connect(struct hoop_comm *comm, int peer,
                                      int channel, struct hoop_conn **conn) {
  const char *forced = getenv("HOOP_TRANSPORT");
  const struct hoop_peer_info *self = &comm->peers[comm->rank];
  const struct hoop_peer_info *other = &comm->peers[peer];
  char desc[128];
  size_t n = sizeof transports / sizeof *transports;
  for (size_t i = 0; i < n; i++) {
    const struct hoop_transport_ops *t = transports[i];
    if (forced != NULL && *forced != '\0' && strcmp(forced, t->name) != 0)
      continue;
    if (!t->can_connect(self, other))
      continue;
    HOOP_CHECK(t->connect(comm, peer, channel, conn));
    HOOP_INFO("rank %d -> %s channel %d via %s", comm->rank,
              hoop__peer_desc(comm, peer, desc, sizeof desc), channel,
              t->name);
    return HOOP_SUCCESS;
  }
  if (forced != NULL && *forced != '\0')
    return HOOP_ERROR(comm, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_TRANSPORT=%s: no such transport can connect "
                      "rank %d and %s (this build has: tcp)",
                      forced, comm->rank,
                      hoop__peer_desc(comm, peer, desc, sizeof desc));
  return HOOP_ERROR(comm, HOOP_ERR_UNSUPPORTED,
                    "no transport can connect rank %d and %s", comm->rank,
                    hoop__peer_desc(comm, peer, desc, sizeof desc));
}
