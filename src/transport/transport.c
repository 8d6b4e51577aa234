/*
 * Transport selection: the first that can connect a pair of ranks wins, so
 * the list goes from the fastest (same host only) to the most general.
 */
#include "transport/transport.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/param.h"

static const struct hoop_transport_ops *const transports[] = {
    &hoop__shm_transport,
    &hoop__tcp_transport,
};

#define NTRANSPORTS (sizeof transports / sizeof *transports)

const struct hoop_transport_ops *hoop__transport_pick(
    const struct hoop_peer_info *a, const struct hoop_peer_info *b) {
  const char *forced = hoop__param_transport();
  for (size_t i = 0; i < NTRANSPORTS; i++) {
    const struct hoop_transport_ops *t = transports[i];
    if (forced != NULL && strcmp(forced, t->name) != 0)
      continue;
    if (t->can_connect(a, b))
      return t;
  }
  return NULL;
}

void hoop__conn_init(struct hoop_conn *conn,
                     const struct hoop_transport_ops *ops,
                     const struct hoop_conn_setup *setup) {
  conn->ops = ops;
  conn->peer = setup->peer;
  conn->channel = setup->channel;
  snprintf(conn->peer_desc, sizeof conn->peer_desc, "%s", setup->peer_desc);
}

hoop_result_t hoop__transport_connect(const struct hoop_peer_info *self,
                                      const struct hoop_peer_info *peer,
                                      const struct hoop_conn_setup *setup,
                                      struct hoop_conn **conn) {
  const struct hoop_transport_ops *t = hoop__transport_pick(self, peer);
  if (t != NULL) {
    HOOP_CHECK(t->connect(setup, conn));
    HOOP_INFO("rank %d -> %s channel %d via %s", setup->rank,
              setup->peer_desc, setup->channel, t->name);
    return HOOP_SUCCESS;
  }
  const char *forced = hoop__param_transport();
  if (forced != NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_TRANSPORT=%s: no such transport can connect "
                      "rank %d and %s (this build has: shm for ranks on one "
                      "host, tcp)",
                      forced, setup->rank, setup->peer_desc);
  return HOOP_ERROR(NULL, HOOP_ERR_UNSUPPORTED,
                    "no transport can connect rank %d and %s", setup->rank,
                    setup->peer_desc);
}
