/*
 * Transport selection: the first that can connect a pair of ranks wins, so
 * the list goes from the fastest (same host only) to the most general.
 * A transport that is not finished serves only a job that names it.
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

/*
 * ib: chosen only by name until it has run on RDMA hardware; so far only
 * the tests' in-process fake of verbs has driven it (transport/ib.c).
 */
static const struct hoop_transport_ops *const named_only[] = {
    &hoop__ib_transport,
};

#define NNAMED_ONLY (sizeof named_only / sizeof *named_only)

/* The transport called `name`, or NULL. */
static const struct hoop_transport_ops *transport_named(const char *name) {
  for (size_t i = 0; i < NTRANSPORTS; i++)
    if (strcmp(name, transports[i]->name) == 0)
      return transports[i];
  for (size_t i = 0; i < NNAMED_ONLY; i++)
    if (strcmp(name, named_only[i]->name) == 0)
      return named_only[i];
  return NULL;
}

const struct hoop_transport_ops *hoop__transport_pick(
    const struct hoop_peer_info *a, const struct hoop_peer_info *b) {
  const char *forced = hoop__param_transport();
  if (forced != NULL) {
    const struct hoop_transport_ops *t = transport_named(forced);
    return t != NULL && t->can_connect(a, b) ? t : NULL;
  }
  for (size_t i = 0; i < NTRANSPORTS; i++)
    if (transports[i]->can_connect(a, b))
      return transports[i];
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
  const struct hoop_transport_ops *named =
      forced != NULL ? transport_named(forced) : NULL;
  if (named != NULL && named->why_not != NULL) {
    char why[400];
    named->why_not(self, peer, why, sizeof why);
    return HOOP_ERROR(NULL, HOOP_ERR_UNSUPPORTED,
                      "HOOP_TRANSPORT=%s cannot join rank %d and %s: %s",
                      forced, setup->rank, setup->peer_desc, why);
  }
  if (forced != NULL)
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_TRANSPORT=%s: no such transport can connect "
                      "rank %d and %s (this build has: shm for ranks on one "
                      "host, tcp, and ib)",
                      forced, setup->rank, setup->peer_desc);
  return HOOP_ERROR(NULL, HOOP_ERR_UNSUPPORTED,
                    "no transport can connect rank %d and %s", setup->rank,
                    setup->peer_desc);
}
