/*
 * The communicator: who the ranks are, how to reach them, the connections
 * made so far, and the state that every collective shares (sequence number,
 * broken flag, last error, scratch memory).
 */
#ifndef HOOP_COMM_H
#define HOOP_COMM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hoop.h"
#include "core/auth.h"
#include "core/error.h"
#include "core/listener.h"
#include "core/peer.h"
#include "core/socket.h"

#define HOOP_MAX_RANKS 65536
#define HOOP_MAX_NSOCKS 16
#define HOOP_MIN_SOCKBUF (64 * 1024) /* HOOP_SOCKBUF_BYTES, unless 0 */

struct hoop_conn;
struct hoop_plan;
struct hoop_plan_cache;
struct hoop_wire_header;

/* An accepted data socket whose owner has not asked for it yet. */
struct hoop_pending_sock {
  struct hoop_pending_sock *next;
  int fd;
  int peer;
  int channel;
};

/*
 * What core asks of the device layer (collectives/device_*.c), which
 * installs these with its proxy on a communicator's first device call:
 * core waits for and stops queued device calls without knowing of them.
 */
struct hoop_device_ops {
  /* Waits until the queued calls have run; their first error. */
  hoop_result_t (*drain)(struct hoop_comm *comm);
  /* Stops the proxy once the queue drains and frees what it holds. */
  void (*free)(struct hoop_comm *comm);
};

struct hoop_comm {
  int rank;
  int nranks;
  uint64_t comm_id;
  struct hoop_auth_key auth_key; /* the job's secret (auth.h) */
  struct hoop_peer_info *peers;  /* [nranks] */

  /* Data dials and failure notices; it holds the session (auth.h). */
  struct hoop_listener listener;
  struct hoop_iface iface; /* name "" when no setting chose one */
  struct hoop_pending_sock *pending;
  struct hoop_conn **conns; /* [nranks * nsocks], NULL until connected */

  int timeout_ms;
  int nsocks;
  size_t slice_bytes;
  size_t sockbuf_bytes;
  size_t pipeline_bytes; /* outbox budget per channel */
  size_t oneshot_bytes;  /* 2 ranks: AUTO's one-shot all-reduce up to this */
  long long spin_ns;     /* busy-poll this long before yielding */
  long long yield_ns;    /* then yield the core this long before sleeping */
  /*
   * HOOP_ALGO or hoop_comm_set_algo; AUTO asks.  Read and written
   * atomically (hoop__comm_algo), since another thread may set it while
   * calls run; each call reads it once, when it is made.
   */
  hoop_algo_t algo;
  /*
   * Where algo came from: "default", "HOOP_ALGO" or "hoop_comm_set_algo";
   * read and written atomically with it.
   */
  const char *algo_source;
  double alpha_s;        /* cost model: seconds per message */
  double host_alpha_s;   /* ... between ranks of one host, across hosts */
  double beta_s;         /* cost model: seconds per byte on a link */
  double host_beta_s;    /* cost model: seconds per byte copied on a host */
  int single_host;       /* every rank shares this rank's host */
  int host_memory;       /* ... and reaches all of them through memory */
  int *host_index;       /* [nranks], numbered at creation (topology.c) */
  int nhosts;            /* how many numbers host_index holds */
  int ranks_per_host;    /* every host's ranks where all have as many, else 0 */
  /*
   * The ring's order: ranks by host (in host_index order), then by rank,
   * so that a ring crosses each host's link twice however the launcher
   * placed the ranks.  ring_order[place] is a rank, ring_place[rank] its
   * place (topology.c).
   */
  int *ring_order;
  int *ring_place;
  int host_cores;        /* online cores of this host */
  size_t cold_bytes;     /* calls from this size bypass the caches */
  const char *cold_source; /* why that size (static text) */

  /*
   * What another thread may read while this communicator's calls run (a
   * watchdog polling it, the device proxy failing a call): the counters,
   * last_error and broken_reason.  Held only to copy them, never across a
   * call that may fail.
   */
  pthread_mutex_t state_lock;
  hoop_stats_t stats;
  uint64_t *peer_sent;     /* [nranks] payload bytes */
  uint64_t *peer_received; /* [nranks] */

  uint64_t seq; /* collectives started, the same on every rank */
  /* HOOP_SUCCESS, or the error that broke it; read atomically. */
  hoop_result_t broken;
  int aborted;          /* set by hoop_comm_abort, read atomically */
  bool notice_received; /* a peer reported the failure that broke us */
  bool joining;         /* still in hoop_comm_init_*: notices wait */
  int busy;             /* a collective is running, read atomically */
  /*
   * Where this rank is, for peers whose call stalls and ask (inquiry.c):
   * the call it entered last, and the peer that call waits on (-1: none)
   * and since when.  Written by the thread that runs the call, read
   * atomically by the one that answers.
   */
  const char *call;
  int wait_for;
  int wait_send; /* 1: waits to send to wait_for, 0: for its data */
  long long wait_since_ms;
  /*
   * The header of the plan the call runs (NULL outside one), set by the
   * engine: what a peer waiting to connect with this rank compares with
   * its own call.
   */
  const struct hoop_wire_header *plan_header;

  void *scratch; /* per-channel outboxes of the pipelined schedules */
  size_t scratch_bytes;
  uint64_t scratch_gen; /* bumped when scratch moves */

  /*
   * Recent collectives' plans, made by the first call and owned by
   * collectives.c, which installs plans_free with them: core frees them
   * without knowing what a plan is.
   */
  struct hoop_plan_cache *plans;
  void (*plans_free)(struct hoop_plan_cache *plans);

  struct hoop_device *device; /* device-buffer proxy, made on first use */
  /* Installed with it, read atomically (hoop__comm_device_drain). */
  const struct hoop_device_ops *device_ops;

  /*
   * For hoop_comm_shrink (shrink.c), touched only by the thread that runs
   * the calls (which also answers the peers' questions): the ranks this
   * one holds lost, 1 each, marked by the stall report (a rank that did
   * not answer) and by the shrink's own questions; whether it is in
   * hoop_comm_shrink, or was left out by the others; who asked this rank
   * where it is while it shrank; and on the survivors' coordinator, the id
   * it decided on and who has fetched it.
   */
  uint8_t *lost;     /* [nranks] */
  uint8_t *asked_me; /* [nranks] */
  uint8_t *fetched;  /* [nranks] */
  bool shrinking;
  bool excluded;
  bool decided;
  hoop_unique_id_t next_id;
  /*
   * Rank 0's listener for processes that join the running job (join.c),
   * opened by the first hoop_comm_grow; fd -1 when none could be.
   */
  struct hoop_listener joins;
  bool join_tried;

  char last_error[HOOP_ERROR_MAX];
  char broken_reason[HOOP_ERROR_MAX]; /* the error that broke it */
};

/*
 * HOOP_SUCCESS when `comm` is a live communicator, else an error naming
 * `what`.  Unlike hoop__comm_enter it does not claim the communicator: the
 * queries use it, and read only what is fixed at creation or kept under
 * state_lock or atomics, so that they may run beside the calls.
 */
hoop_result_t hoop__comm_check_live(const struct hoop_comm *comm,
                                    const char *what);

/*
 * Waits for the device calls queued so far, from any thread; their first
 * error, HOOP_SUCCESS when there are none.
 */
hoop_result_t hoop__comm_device_drain(struct hoop_comm *comm);

/* HOOP_SUCCESS, or the error that broke the communicator. */
hoop_result_t hoop__comm_broken(const struct hoop_comm *comm);

/* The algorithm setting, read once by each call when it is made. */
hoop_algo_t hoop__comm_algo(const struct hoop_comm *comm);

/* The error that broke the communicator, copied into buf; "" if none. */
void hoop__comm_broken_reason(struct hoop_comm *comm, char *buf, size_t len);

/* ---- connection set-up (connect.c) ------------------------------------ */

/* "rank 3 (10.0.0.2:41234, host node7, pid 12)", for error messages. */
const char *hoop__peer_desc(const struct hoop_comm *comm, int peer,
                            char *buf, size_t len);

/*
 * The connection to `peer` for `channel`.  Joining makes every peer's
 * channel 0 and the ring neighbours' other channels; any other is made on
 * first use, blocking and bounded by the communicator's timeout, and the
 * peer must be asking for the same connection at about the same time.
 * The transport gets a hoop_conn_setup whose socket opener dials (lower
 * rank) or accepts (higher rank) and handshakes.
 */
hoop_result_t hoop__comm_conn(struct hoop_comm *comm, int peer, int channel,
                              struct hoop_conn **conn);

/*
 * Marks the communicator broken by `result`, tells every peer why (unless
 * the failure was itself reported by a peer), and shuts its connections
 * down, so that peers blocked on it fail at once instead of timing out.
 */
void hoop__comm_break(struct hoop_comm *comm, hoop_result_t result);

/*
 * Waits up to wait_ms for another rank's failure notice on the listener;
 * returns HOOP_ERR_REMOTE with its text when one came.  Data dials that
 * prove themselves meanwhile are kept for the connection they are for.
 */
hoop_result_t hoop__comm_check_notices(struct hoop_comm *comm, int wait_ms);

/*
 * Opens the communicator's data listener on `addr` (port 0: any); its
 * address is then comm->listener.addr.
 */
hoop_result_t hoop__comm_listen(struct hoop_comm *comm,
                                const struct hoop_addr *addr);

/*
 * Connects to `addr` as this rank and proves it to the rank `to` there
 * for `channel` (a data channel, or HOOP_RENDEZVOUS_CHANNEL), once that
 * rank has proved itself.  Failure notices are watched meanwhile.
 */
hoop_result_t hoop__comm_dial(struct hoop_comm *comm,
                              const struct hoop_addr *addr, int32_t to,
                              int32_t channel, long long deadline,
                              const char *desc, int *fd);

/* Closes the accepted dials that nobody asked for, at teardown. */
void hoop__comm_drop_pending(struct hoop_comm *comm);

/*
 * For a rank in hoop_comm_shrink: takes what has come to the listener,
 * waiting up to wait_ms for the first: questions are answered, failure
 * notices are old news, and a notice that the survivors left this rank
 * out sets comm->excluded and is the error.
 */
hoop_result_t hoop__comm_serve(struct hoop_comm *comm, int wait_ms);

/*
 * Sends a notice of `kind` (wire.h) saying `text` to every rank marked in
 * `to` (NULL: every peer), giving them a moment together.
 */
void hoop__comm_send_notices(struct hoop_comm *comm, const uint8_t *to,
                             int32_t kind, const char *text);

/* ---- stalls (inquiry.c) ----------------------------------------------- */

/*
 * Records that this rank's call waits on `peer` (-1: on nobody) since
 * since_ms, for the peers that ask.
 */
void hoop__comm_waiting(struct hoop_comm *comm, int peer, int send,
                        long long since_ms);

/* Answers rank `from`'s query on the proven connection fd, and closes it. */
void hoop__comm_answer_query(struct hoop_comm *comm, int fd, int from);

/* What asking a peer where it is came to (hoop__comm_ask). */
enum hoop_answer {
  HOOP_ANSWER_GIVEN,   /* it answered; the whereabouts holds what */
  HOOP_ANSWER_SILENT,  /* no answer in time */
  HOOP_ANSWER_GONE,    /* its listener refused: the process has gone */
  HOOP_ANSWER_NONE,    /* not asked, or it answered what no rank would */
};

/*
 * Asks every peer p with skip[p] == 0 at once where it is, for up to
 * wait_ms, serving this rank's listener meanwhile (as hoop__comm_serve
 * does): got[p] says what came of it, where[p] holds a given answer.
 * For hoop_comm_shrink, whose communicator is broken already.
 */
void hoop__comm_ask(struct hoop_comm *comm, const uint8_t *skip, int wait_ms,
                    struct hoop_whereabouts *where, enum hoop_answer *got);

/*
 * After this rank's call timed out: asks every peer where it is and puts
 * what they said (who did not answer, who is behind, who waits with this
 * rank) in front of the communicator's last error.  A failure notice that
 * comes meanwhile, from a rank that got there first, becomes the error
 * instead.
 */
void hoop__comm_report_stall(struct hoop_comm *comm);

/*
 * For a rank that has waited a while to connect with `peer` while running
 * a collective's plan: asks the peer where it is, and fails with
 * HOOP_ERR_MISMATCH, naming both calls, when the peer is in the same call
 * with different arguments, or past it (it finished the call without the
 * connection that this rank's plan needs).  Ranks whose calls differ plan
 * different connections, and each may wait for a peer that is connecting
 * elsewhere, in a cycle that only the timeout would end; the header check
 * on the links (engine.c) catches only ranks that are connected.  A peer
 * whose listener refuses the question has gone (HOOP_ERR_REMOTE).
 * Anything else (no answer, the peer behind, send/recv, no plan) is
 * HOOP_SUCCESS: the wait goes on, bounded by the timeout.
 */
hoop_result_t hoop__comm_check_agreement(struct hoop_comm *comm, int peer);

/* ---- elsewhere in core -------------------------------------------------- */

/* Adds what a finished plan moved, and its time, to the counters. */
void hoop__stats_count(struct hoop_comm *comm, const struct hoop_plan *plan,
                       hoop_coll_t label, hoop_algo_t algo, long long ns);

/* Adds one call that moved sent[peer] / received[peer] bytes, without a
 * plan (CUDA IPC). */
void hoop__stats_count_peers(struct hoop_comm *comm, hoop_coll_t label,
                             hoop_algo_t algo, long long ns,
                             const uint64_t *sent, const uint64_t *received);

/* Counts a peer that this rank has just made its first connection with. */
void hoop__stats_connected(struct hoop_comm *comm);

/* Scratch of at least `bytes`, reused across calls. */
hoop_result_t hoop__comm_scratch(struct hoop_comm *comm, size_t bytes,
                                 void **ptr);

/*
 * Every collective starts with enter: comm must be a live communicator,
 * not broken, and not in use by another thread.  leave undoes enter, and
 * claim, which is enter for a broken communicator too (hoop_comm_shrink).
 */
hoop_result_t hoop__comm_enter(struct hoop_comm *comm, const char *what);
hoop_result_t hoop__comm_claim(struct hoop_comm *comm, const char *what);
void hoop__comm_leave(struct hoop_comm *comm);

/*
 * The interface that config's socket_ifname, else HOOP_SOCKET_IFNAME,
 * selects; iface->name is "" when neither names one.  A config that was
 * not made with HOOP_CONFIG_INIT is ignored here (hoop__comm_create
 * rejects it).
 */
hoop_result_t hoop__comm_iface(const hoop_config_t *config,
                               struct hoop_iface *iface);

/*
 * Whether the ranks may map each other's memory (CUDA IPC): all of them on
 * one host, emulated hosts counting as apart, and no transport forced by
 * HOOP_TRANSPORT.  Valid once the communicator is joined.
 */
int hoop__comm_peers_mappable(const struct hoop_comm *comm);

/*
 * Where the ranks are, once they are known: whether they all share this
 * host and reach each other by shm, its cores, and from those how long
 * the engine spins and yields (topology.c).
 */
void hoop__comm_learn_host(struct hoop_comm *comm);

/*
 * Numbers the hosts (comm->host_index) and orders the ring by them
 * (comm->ring_order, ring_place) once the peers are known, so that
 * hoop_comm_rank_info only reads.
 */
hoop_result_t hoop__comm_index_hosts(struct hoop_comm *comm);

/* The rank `steps` places after `rank` along the ring (negative: before). */
static inline int hoop__ring_peer(const struct hoop_comm *comm, int rank,
                                  int steps) {
  int n = comm->nranks;
  return comm->ring_order[((comm->ring_place[rank] + steps) % n + n) % n];
}

/* Rank 0's one-line INFO banner for a new communicator (topology.c). */
void hoop__comm_log_banner(const struct hoop_comm *comm);

/*
 * A new unique id whose root is `iface`'s address (loopback when it names
 * none), with rank 0's listener already open there.  hoop_get_unique_id
 * passes the environment's interface; hoop_comm_init_env passes the one
 * its config chose, so that rank 0 listens where the config says.
 */
hoop_result_t hoop__unique_id(const struct hoop_iface *iface,
                              hoop_unique_id_t *id);

/*
 * hoop_comm_shrink's agreement and the survivors' communicator (shrink.c),
 * short of the check that it formed everywhere, which takes a collective.
 */
hoop_result_t hoop__comm_shrink(struct hoop_comm *comm,
                                const hoop_config_t *config,
                                struct hoop_comm **newcomm, int *old_ranks);

/*
 * An id for the communicator that follows this one (after a shrink or a
 * grow): this rank as its rank 0, at this rank's address, with the job's
 * key, so that the secret stays the job's.
 */
hoop_result_t hoop__comm_successor_id(struct hoop_comm *comm,
                                      hoop_unique_id_t *id);

/* ---- joining a running job (join.c) ------------------------------------ */

/*
 * On rank 0: the processes that have dialled the job's address and proved
 * its secret since the last call, up to max; their sockets in fds.
 * Elsewhere none.  The first call opens the listener.
 */
hoop_result_t hoop__comm_take_joiners(struct hoop_comm *comm, int *fds,
                                      int max, int *count);

/*
 * Hands the listener for newcomers on to the communicator that follows
 * `from` (after a shrink or a grow) when this process is its rank 0: the
 * address can be bound only once, and `from` lives until its owner
 * destroys it.
 */
void hoop__comm_pass_joins(struct hoop_comm *from, struct hoop_comm *to);

/* Tells a joiner its place in communicator `id`, and closes fd; false
   when it has gone. */
bool hoop__comm_answer_joiner(int fd, const hoop_unique_id_t *id, int nranks,
                              int rank);

/*
 * A newcomer's side: dials the job's address, proves its secret, waits to
 * be admitted and joins the communicator it is given, short of the check
 * that it formed everywhere (collectives.c).
 */
hoop_result_t hoop__comm_join(const hoop_config_t *config,
                              struct hoop_comm **out);

/*
 * The job's address and secret from the environment, as
 * hoop_comm_init_env reads them (env.c).
 */
hoop_result_t hoop__job_address(struct hoop_addr *addr,
                                struct hoop_auth_key *key);

/* Joins a communicator: bootstrap, then the ring neighbours' connections. */
hoop_result_t hoop__comm_create(struct hoop_comm **out, int nranks, int rank,
                                const hoop_unique_id_t *id,
                                const hoop_config_t *config);

#endif /* HOOP_COMM_H */
