/*
 * Rendezvous: every rank connects to rank 0, says who it is and where it
 * listens for data connections; rank 0 checks the set and sends the full
 * table back.  The TCP connections are closed afterwards.
 */
#ifndef HOOP_BOOTSTRAP_H
#define HOOP_BOOTSTRAP_H

#include <assert.h>
#include <stdint.h>

#include "hoop.h"
#include "core/auth.h"
#include "core/socket.h"
#include "core/wire.h"

struct hoop_comm;

#define HOOP_UID_MAGIC 0x686f6f7055494432ULL /* "hoopUID2" */

/*
 * The inside of a hoop_unique_id_t.  The key travels with the id: whoever
 * the id is handed to is trusted to be a rank of the job.
 */
struct hoop_uid {
  uint64_t magic;
  uint64_t comm_id;
  struct hoop_addr root;
  struct hoop_auth_key key;
  uint32_t flags; /* HOOP_UID_*, as rank 0 reads them */
  uint32_t reserved;
};

/*
 * The job forms of the ranks that came within half the timeout, if some
 * never do (hoop_comm_init_env with HOOP_ELASTIC=1).
 */
#define HOOP_UID_ELASTIC 1u
static_assert(sizeof(struct hoop_uid) <= HOOP_UNIQUE_ID_BYTES,
               "a unique id holds its address and key");

/*
 * Fills a new id for a root listening on `root` (port 0 picks a free one)
 * with the job's `key`; the listening socket is kept for this process's
 * rank 0 to adopt.
 */
hoop_result_t hoop__uid_create(const struct hoop_addr *root,
                               uint64_t comm_id,
                               const struct hoop_auth_key *key,
                               struct hoop_uid *uid);

/* Closes the listener kept for `comm_id`, if this process holds it. */
void hoop__uid_release(uint64_t comm_id);

/* Reads and checks the id a user handed in. */
hoop_result_t hoop__uid_parse(const hoop_unique_id_t *id,
                              struct hoop_uid *uid);

/*
 * Runs the rendezvous for comm->rank of comm->nranks: creates comm's data
 * listener (on comm->iface when one was chosen) and fills comm->peers.
 * Bounded by comm->timeout_ms.
 */
hoop_result_t hoop__bootstrap(struct hoop_comm *comm,
                              const struct hoop_uid *uid);

#endif /* HOOP_BOOTSTRAP_H */
