/*
 * The progress engine and the plans it runs.
 *
 * An algorithm describes one rank's part of a collective as a plan: a set
 * of links (one direction of one connection: an ordered byte stream) and,
 * on each link, a list of ops in stream order.  An op moves at most one
 * slice: it sends bytes from memory, or receives bytes and copies them or
 * reduces them with local data.  Ops wait for other ops through two
 * dependencies: `feed`, the op that produces what this one sends (bytes
 * may be forwarded as soon as the feed has processed them), and `after`,
 * an op that must be complete first (a buffer it still reads, an earlier
 * contribution to the same sum).  The engine knows nothing of which
 * algorithm made the plan; it moves every link as far as its ops allow,
 * without blocking on any single one.
 *
 * Both ends of a link must list the same ops in the same order.  Builders
 * give each op a key (tick, then a tie-breaker) that both ends compute the
 * same way, and the plan sorts every link by key.  Letting a step run
 * `depth` ticks ahead of the step it feeds keeps links busy while a
 * neighbour is late; a strictly slice-by-slice ring made every rank wait on
 * its neighbour once per slice.
 */
#ifndef HOOP_ENGINE_H
#define HOOP_ENGINE_H

#include <assert.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hoop.h"
#include "core/wire.h"

struct hoop_comm;
struct hoop_conn;


/* "allreduce #7 (count 100, float, sum, ...)", for messages. */
void hoop__describe_call(const struct hoop_wire_header *h, char *buf,
                         size_t len);

enum hoop_op_kind {
  HOOP_OP_SEND,        /* send `bytes` from `src`                       */
  HOOP_OP_RECV_COPY,   /* receive into `dst`                            */
  HOOP_OP_RECV_REDUCE, /* dst = received op `src` (dst may equal src)   */
};

#define HOOP_NO_OP (-1)

struct hoop_plan_op {
  uint8_t kind;
  uint8_t finish_avg; /* divide dst by nranks once reduced */
  /*
   * RECV_REDUCE: dst = local op received, rather than received op local.
   * Ranks that compute the same result apart put the operands in the same
   * order, which keeps their bits equal where an op is not (a NaN's
   * payload in a sum comes from its first operand).
   */
  uint8_t local_first;
  /*
   * Byte i may be processed once `after` has processed its byte i: the two
   * cover the same bytes in the same order, as a receive in place of the
   * slice a send reads.  A whole-op wait there deadlocks wherever both
   * ends send before they read and a slice outgrows what the link
   * buffers: neither send completes until the other end reads.
   */
  uint8_t trails;
  uint32_t bytes;     /* at most one slice */
  const char *src;    /* SEND: the bytes; RECV_REDUCE: the local operand */
  char *dst;          /* RECV_*: where the result goes */
  /*
   * RECV_REDUCE: the result is also copied here, around the caches.  A
   * ring reduces a large out-of-place result into a slot it sends from,
   * which stays in cache, and so writes the caller's buffer without first
   * reading each line of it in.
   */
  char *copy_to;
  int32_t feed;       /* SEND: op producing src (forwarded as it goes) */
  int32_t after;      /* op that must be complete before this starts */
  uint32_t done;      /* bytes sent, or received and processed */
  /*
   * Phases: `group` counts this op into a group (0: none), and the op
   * starts once every op of groups 1 to `gate` is complete (0: no gate).
   * One `after` names a single op; a plan in phases (the hierarchical
   * all-reduce: rings inside each host, then across hosts) needs "all of
   * the phases before", whose last ops differ by link and channel.
   */
  uint16_t group;
  uint16_t gate;
  uint64_t key;       /* stream order on the link, the same on both ends */
};

struct hoop_link {
  int peer;
  int channel;
  struct hoop_conn *conn; /* connected by the engine before the first run */
  int send;              /* 1: this rank writes the stream */
  struct hoop_wire_header header; /* sent, or expected, first */
  int32_t *ops;          /* indices into plan->ops, in stream order */
  int nops, cap;
  int cur;               /* first op not complete */
  uint64_t bytes;        /* payload of all ops */
  uint64_t signature;    /* send/recv: the message sizes, hashed */
  int twin;              /* the link the other way on the same connection */
  size_t hdr_done;       /* header bytes sent or received */
  int want_poll;         /* waiting on the connection, not on an op */
};

/*
 * What a collective's plan was built for.  Training repeats the same calls
 * on the same buffers, so the communicator keeps its last plan and runs it
 * again when the next call has the same key, instead of building, pairing
 * and sorting it anew (a third of a 4 KiB all-reduce over shm).  The plan
 * may point into the communicator's scratch, hence its generation.
 */
struct hoop_plan_key {
  const void *send;
  const void *recv;
  uint64_t count;        /* what the header announces */
  uint64_t scratch_gen;
  int32_t coll;          /* the header's label: a barrier is not an all-reduce */
  int32_t dtype;
  int32_t op;
  int32_t root;
  int32_t setting;       /* the communicator's algorithm setting */
  int32_t reserved;      /* zero: keeps the struct free of padding */
};
static_assert(sizeof(struct hoop_plan_key) == 56,
               "no padding, so keys compare with memcmp");

struct hoop_plan {
  struct hoop_comm *comm;
  struct hoop_plan_key key;
  int prepared; /* links paired and sorted: the plan can run again */
  struct hoop_wire_header header; /* link_bytes filled per link */
  hoop_dtype_t dtype;
  hoop_op_t op;
  size_t elem_size;
  struct hoop_plan_op *ops;
  int nops, ops_cap;
  struct hoop_link *links;
  int nlinks, links_cap;
  /*
   * Ops per group (see hoop_plan_op.group), those not complete yet, and
   * the groups from 1 up that are complete: ops gated at most that far
   * may start.
   */
  uint32_t *group_ops;
  uint32_t *group_left;
  int ngroups;
  int groups_complete;
  int cold; /* received data goes past the caches (comm->cold_bytes) */
  struct pollfd *pollfds; /* room for every link and the listening socket */
  /*
   * This run: the receiving links whose peer has not sent its header yet
   * (not joined the call), and the time spent idle while one had not:
   * waiting for a late rank, not moving data.
   */
  long long wait_ns;
  int headers_pending;
};

/* Plan building; every function records its error on the communicator. */
void hoop__plan_init(struct hoop_plan *plan, struct hoop_comm *comm,
                     hoop_dtype_t dtype, hoop_op_t op);
void hoop__plan_free(struct hoop_plan *plan);

/*
 * The link to or from `peer` on `channel`.  Building dials nobody: the
 * engine connects a plan's links when it first runs it (hoop__comm_conn).
 */
hoop_result_t hoop__plan_link(struct hoop_plan *plan, int peer, int channel,
                              int send, int *link);

/* Makes groups 1..ngroups for the plan's ops (hoop_plan_op.group). */
hoop_result_t hoop__plan_groups(struct hoop_plan *plan, int ngroups);

/* Appends an op to a link; *id gets its index for later feed/after. */
hoop_result_t hoop__plan_op(struct hoop_plan *plan, int link,
                            const struct hoop_plan_op *op, int32_t *id);

/* Appends an op to the link to or from `peer` on channel 0. */
hoop_result_t hoop__plan_add(struct hoop_plan *plan, int peer, int send,
                             struct hoop_plan_op *op, int32_t *id);

/*
 * Makes the next allocation that grows a plan fail as if memory had run
 * out.  For tests only: running out of memory while building is otherwise
 * not reachable on demand, and it happens after the call has taken its
 * sequence number, when the peers are already waiting.
 */
void hoop__plan_fail_next_alloc(void);

/*
 * Runs the plan to completion, or fails naming the peer.  A plan that ran
 * may run again (plan->header.seq updated first): its progress is reset.
 */
hoop_result_t hoop__engine_run(struct hoop_plan *plan);

/*
 * Before the engine sleeps: arms every link that waits on its connection
 * (see the transports' arm()) and writes what poll() must watch into fds,
 * which has room for plan->nlinks entries; links on one descriptor share
 * an entry.  *nfds gets the entries used, *armed the links armed.  Stops
 * with *ready set when a connection can move already.  Declared here so
 * tests can check that no link is left out.
 */
hoop_result_t hoop__engine_arm(struct hoop_plan *plan, struct pollfd *fds,
                               int *nfds, int *armed, bool *ready);

/*
 * Tick keys: the high bits order ticks, the low bits break ties between
 * ops of the same tick (step, tree, phase) identically on both ends.
 */
static inline uint64_t hoop__key(uint64_t tick, uint32_t tie) {
  return (tick << 24) | (tie & 0xffffff);
}

#endif /* HOOP_ENGINE_H */
