/*
 * The registered transports as one: what they publish at bootstrap, which
 * joins a pair of ranks, and connecting through it.  Only the transports'
 * own functions read their bytes; here they are carried and bounded.
 */
#include "core/conn.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/param.h"

struct hoop_published hoop__published(const struct hoop_peer_info *rank,
                                      const struct hoop_transport_ops *t) {
  struct hoop_published v = {rank, NULL, 0};
  for (int i = 0; hoop__transports[i] != NULL; i++) {
    if (hoop__transports[i] == t) {
      v.blob = rank->blobs[i].data;
      v.len = rank->blobs[i].len;
    }
  }
  return v;
}

bool hoop__published_read(const struct hoop_published *p, void *out,
                          size_t size) {
  if (p->len != size) {
    memset(out, 0, size);
    return false;
  }
  memcpy(out, p->blob, size);
  return true;
}

hoop_result_t hoop__transports_check_settings(void) {
  for (int i = 0; hoop__transports[i] != NULL; i++) {
    if (hoop__transports[i]->check_settings != NULL)
      HOOP_CHECK(hoop__transports[i]->check_settings());
  }
  return HOOP_SUCCESS;
}

void hoop__transports_publish(struct hoop_peer_info *me) {
  for (int i = 0; hoop__transports[i] != NULL && i < HOOP_MAX_TRANSPORTS;
       i++) {
    const struct hoop_transport_ops *t = hoop__transports[i];
    struct hoop_blob *b = &me->blobs[i];
    memset(b, 0, sizeof *b);
    strncpy(b->transport, t->name, sizeof b->transport - 1);
    if (t->publish != NULL && t->blob_bytes <= sizeof b->data) {
      t->publish(me->rank, b->data);
      b->len = (uint16_t)t->blob_bytes;
    }
  }
}

bool hoop__transports_parse(const struct hoop_peer_info *p, char *why,
                            size_t why_len) {
  bool end = false;
  for (int i = 0; i < HOOP_MAX_TRANSPORTS; i++) {
    const struct hoop_blob *b = &p->blobs[i];
    const struct hoop_transport_ops *t = end ? NULL : hoop__transports[i];
    end = t == NULL;
    char name[HOOP_BLOB_NAME_BYTES] = "";
    if (t != NULL)
      strncpy(name, t->name, sizeof name - 1);
    if (memcmp(b->transport, name, sizeof name) != 0) {
      char theirs[HOOP_BLOB_NAME_BYTES + 1] = "";
      for (size_t c = 0; c < sizeof b->transport && b->transport[c]; c++)
        theirs[c] = b->transport[c] < 0x20 || b->transport[c] > 0x7e
                        ? '?'
                        : b->transport[c];
      snprintf(why, why_len,
               "rank %d published transport %d as \"%s\" where this build "
               "has \"%s\": it runs a build with other transports",
               p->rank, i, theirs, name);
      return false;
    }
    size_t want = t != NULL && t->publish != NULL ? t->blob_bytes : 0;
    if (b->len != want) {
      snprintf(why, why_len,
               "rank %d published %u bytes for transport %d (\"%s\"), "
               "which publishes %zu",
               p->rank, b->len, i, name, want);
      return false;
    }
    if (t != NULL && t->blob_parse != NULL &&
        !t->blob_parse(b->data, b->len, p->rank, why, why_len))
      return false;
  }
  return true;
}

void hoop__transports_rank_info(const struct hoop_peer_info *p,
                                hoop_rank_info_t *info) {
  for (int i = 0; hoop__transports[i] != NULL; i++) {
    const struct hoop_transport_ops *t = hoop__transports[i];
    if (t->rank_info != NULL) {
      struct hoop_published v = hoop__published(p, t);
      t->rank_info(&v, info);
    }
  }
}

/* The transport called `name`, or NULL. */
static const struct hoop_transport_ops *transport_named(const char *name) {
  for (int i = 0; hoop__transports[i] != NULL; i++)
    if (strcmp(name, hoop__transports[i]->name) == 0)
      return hoop__transports[i];
  return NULL;
}

static bool joins(const struct hoop_transport_ops *t,
                  const struct hoop_peer_info *a,
                  const struct hoop_peer_info *b) {
  struct hoop_published va = hoop__published(a, t);
  struct hoop_published vb = hoop__published(b, t);
  return t->can_connect(&va, &vb);
}

const struct hoop_transport_ops *hoop__transport_pick(
    const struct hoop_peer_info *a, const struct hoop_peer_info *b) {
  const char *forced = hoop__param_transport();
  if (forced != NULL) {
    const struct hoop_transport_ops *t = transport_named(forced);
    return t != NULL && joins(t, a, b) ? t : NULL;
  }
  for (int i = 0; hoop__transports[i] != NULL; i++)
    if (!hoop__transports[i]->by_name_only && joins(hoop__transports[i], a, b))
      return hoop__transports[i];
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

/* "shm, tcp, ib (by name only)": what HOOP_TRANSPORT may name. */
static void list_transports(char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; hoop__transports[i] != NULL && used < len; i++) {
    int n = snprintf(buf + used, len - used, "%s%s%s", i > 0 ? ", " : "",
                     hoop__transports[i]->name,
                     hoop__transports[i]->by_name_only ? " (by name only)"
                                                       : "");
    used += n > 0 ? (size_t)n : 0;
  }
}

hoop_result_t hoop__transport_check(const struct hoop_peer_info *self,
                                    const struct hoop_peer_info *peer,
                                    int rank, const char *peer_desc) {
  if (hoop__transport_pick(self, peer) != NULL)
    return HOOP_SUCCESS;
  const char *forced = hoop__param_transport();
  const struct hoop_transport_ops *named =
      forced != NULL ? transport_named(forced) : NULL;
  if (named != NULL && named->why_not != NULL) {
    char why[400];
    struct hoop_published va = hoop__published(self, named);
    struct hoop_published vb = hoop__published(peer, named);
    named->why_not(&va, &vb, why, sizeof why);
    return HOOP_ERROR(NULL, HOOP_ERR_UNSUPPORTED,
                      "HOOP_TRANSPORT=%s cannot join rank %d and %s: %s",
                      forced, rank, peer_desc, why);
  }
  if (forced != NULL) {
    char have[128];
    list_transports(have, sizeof have);
    return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                      "HOOP_TRANSPORT=%s: no such transport can connect "
                      "rank %d and %s (this build has: %s)",
                      forced, rank, peer_desc, have);
  }
  return HOOP_ERROR(NULL, HOOP_ERR_UNSUPPORTED,
                    "no transport can connect rank %d and %s", rank,
                    peer_desc);
}

hoop_result_t hoop__transport_connect(const struct hoop_peer_info *self,
                                      const struct hoop_peer_info *peer,
                                      struct hoop_conn_setup *setup,
                                      struct hoop_conn **conn) {
  const struct hoop_transport_ops *t = hoop__transport_pick(self, peer);
  if (t == NULL)
    return hoop__transport_check(self, peer, setup->rank, setup->peer_desc);
  setup->self = hoop__published(self, t);
  setup->other = hoop__published(peer, t);
  HOOP_CHECK(t->connect(setup, conn));
  HOOP_INFO("rank %d -> %s channel %d via %s", setup->rank, setup->peer_desc,
            setup->channel, t->name);
  return HOOP_SUCCESS;
}
