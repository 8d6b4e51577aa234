/*
 * Joining a running job: a new process (a lost rank's replacement) dials
 * the job's address, HOOP_ROOT_ADDR or torchrun's, where rank 0 of the
 * running communicator listens from its first hoop_comm_grow on, and
 * proves that it holds the job's secret as every rank does.  It then waits:
 * the members admit it when they choose, at their next hoop_comm_grow
 * (collectives.c), by answering with the id of a communicator of them all,
 * in which it is ranked after them.
 *
 * The listener's communicator id is derived from the job's key, not from
 * a communicator: the job's communicators change with every shrink and
 * grow, and a newcomer knows none of them.  The communicator's own key
 * may be another (the torch backend's ranks meet with a unique id, which
 * carries a random one): a newcomer proves the job's secret at the door
 * and is handed the communicator's key in the id it joins with, as a rank
 * is handed it in its unique id.  After a shrink the new rank 0
 * listens at the same address when it can bind it (on the same host as
 * the one before); elsewhere joins wait for nobody and time out, saying so.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/param.h"

/* How long a newcomer waits between dials that found nobody listening. */
#define JOIN_REDIAL_MS 100

/* The rank numbers a joiner's handshake names: it is no rank yet. */
#define JOINER 1
#define MEMBERS 0

static uint64_t join_id(const struct hoop_auth_key *key) {
  uint64_t h = hoop__fnv1a_text(HOOP_FNV1A_BASIS, "hoop join");
  for (size_t i = 0; i < sizeof key->bytes; i++)
    h = hoop__fnv1a_step(h, key->bytes[i]);
  return h;
}

static size_t nothing_follows(int32_t channel) {
  (void)channel;
  return 0;
}

/* Rank 0 starts listening at the job's address, once per communicator. */
static void open_joins(struct hoop_comm *comm) {
  comm->join_tried = true;
  struct hoop_addr addr;
  struct hoop_auth_key key;
  if (hoop__job_address(&addr, &key) != HOOP_SUCCESS) {
    HOOP_INFO("rank 0: no process can join this job: %s", hoop_last_error());
    return;
  }
  comm->joins = (struct hoop_listener){
      .key = key,
      .comm_id = join_id(&key),
      .rank = MEMBERS,
      .nranks = 2,
      .channel_lo = HOOP_RENDEZVOUS_CHANNEL,
      .channel_hi = HOOP_RENDEZVOUS_CHANNEL,
      .payload_bytes = nothing_follows,
      .max_unproven = HOOP_LISTENER_STRANGERS,
  };
  char astr[HOOP_ADDR_STRLEN];
  if (hoop__listener_open(&comm->joins, &addr, -1) != HOOP_SUCCESS)
    HOOP_WARN("rank 0: no process can join: %s (is rank 0 on another host "
              "than %s?)",
              hoop_last_error(), hoop__addr_str(&addr, astr));
}

hoop_result_t hoop__comm_take_joiners(struct hoop_comm *comm, int *fds,
                                      int max, int *count) {
  *count = 0;
  if (comm->rank != 0)
    return HOOP_SUCCESS;
  if (!comm->join_tried)
    open_joins(comm);
  if (comm->joins.fd < 0)
    return HOOP_SUCCESS;
  while (*count < max) {
    struct hoop_proven p;
    bool got;
    HOOP_CHECK(hoop__listener_poll(&comm->joins, 0, &p, &got));
    if (!got)
      break;
    fds[(*count)++] = p.fd;
  }
  return HOOP_SUCCESS;
}

void hoop__comm_pass_joins(struct hoop_comm *from, struct hoop_comm *to) {
  if (from->joins.fd < 0 || to->rank != 0)
    return;
  to->joins = from->joins;
  to->join_tried = true;
  from->joins = (struct hoop_listener){.fd = -1};
}

bool hoop__comm_answer_joiner(int fd, const hoop_unique_id_t *id, int nranks,
                              int rank) {
  struct hoop_join_reply r = {.status = HOOP_SUCCESS,
                              .nranks = nranks,
                              .rank = rank};
  memcpy(r.id, id->internal, sizeof r.id);
  /* A joiner that went meanwhile fails the new communicator's forming. */
  bool sent = hoop__sock_send_all(NULL, fd, &r, sizeof r,
                                  hoop__now_ms() + 1000,
                                  "a joining process") == HOOP_SUCCESS;
  close(fd);
  return sent;
}

/* Dials the members and proves the job's secret; *fd waits for them. */
static hoop_result_t dial_members(const struct hoop_addr *addr,
                                  const struct hoop_auth_key *key,
                                  long long deadline, const char *desc,
                                  int *fd) {
  HOOP_CHECK(hoop__sock_connect(NULL, addr, deadline, desc, false, fd));
  struct hoop_handshake hs;
  struct hoop_auth_challenge ch;
  struct hoop_auth_proof proof;
  hoop_result_t res = hoop__auth_handshake(join_id(key), JOINER, MEMBERS,
                                           HOOP_RENDEZVOUS_CHANNEL, &hs);
  if (res == HOOP_SUCCESS)
    res = hoop__sock_send_all(NULL, *fd, &hs, sizeof hs, deadline, desc);
  if (res == HOOP_SUCCESS)
    res = hoop__sock_recv_all(NULL, *fd, &ch, sizeof ch, deadline, desc);
  if (res == HOOP_SUCCESS && !hoop__auth_check_challenge(key, &hs, &ch))
    res = HOOP_ERROR(NULL, HOOP_ERR_MISMATCH,
                     "%s could not prove that it holds this job's secret "
                     "(another job, or another HOOP_AUTH_TOKEN)",
                     desc);
  if (res == HOOP_SUCCESS) {
    hoop__auth_proof(key, &hs, &ch, &proof);
    res = hoop__sock_send_all(NULL, *fd, &proof, sizeof proof, deadline,
                              desc);
  }
  if (res != HOOP_SUCCESS)
    hoop__sock_close(fd);
  return res;
}

hoop_result_t hoop__comm_join(const hoop_config_t *config,
                              struct hoop_comm **out) {
  *out = NULL;
  struct hoop_addr addr;
  struct hoop_auth_key key;
  HOOP_CHECK(hoop__job_address(&addr, &key));
  int timeout_ms = config != NULL && config->timeout_ms > 0
                       ? config->timeout_ms
                       : (int)hoop__param_timeout_ms();
  long long deadline = hoop__now_ms() + timeout_ms;
  char desc[96], astr[HOOP_ADDR_STRLEN];
  snprintf(desc, sizeof desc, "the job's rank 0 (%s)",
           hoop__addr_str(&addr, astr));
  /*
   * Until rank 0 listens for newcomers, the address may refuse, or belong
   * to the members' first rendezvous, which drops a newcomer's handshake:
   * dial again until the timeout.
   */
  int fd = -1;
  hoop_result_t res;
  while ((res = dial_members(&addr, &key, deadline, desc, &fd)) ==
             HOOP_ERR_REMOTE &&
         hoop__now_ms() + JOIN_REDIAL_MS < deadline)
    usleep(JOIN_REDIAL_MS * 1000);
  HOOP_CHECK(res);
  unsigned char bytes[sizeof(struct hoop_join_reply)];
  res = hoop__sock_recv_all(NULL, fd, bytes, sizeof bytes, deadline, desc);
  close(fd);
  if (res == HOOP_ERR_TIMEOUT)
    return HOOP_ERROR(NULL, HOOP_ERR_TIMEOUT,
                      "hoop_comm_join: %s did not let this process in within "
                      "%d ms (the members admit newcomers in "
                      "hoop_comm_grow)",
                      desc, timeout_ms);
  HOOP_CHECK(res);
  struct hoop_join_reply r;
  char why[200];
  if (!hoop__join_reply_parse(bytes, sizeof bytes, HOOP_MAX_RANKS, &r, why,
                              sizeof why))
    return HOOP_ERROR(NULL, HOOP_ERR_MISMATCH,
                      "hoop_comm_join: %s answered with %s", desc, why);
  if (r.status != HOOP_SUCCESS)
    return HOOP_ERROR(NULL, (hoop_result_t)r.status,
                      "hoop_comm_join: %s refused: %s", desc, r.message);
  hoop_unique_id_t id;
  memcpy(id.internal, r.id, sizeof id.internal);
  HOOP_INFO("hoop_comm_join: admitted as rank %d of %d", r.rank, r.nranks);
  return hoop__comm_create(out, r.nranks, r.rank, &id, config);
}
