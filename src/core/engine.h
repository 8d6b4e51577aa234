/*
 * The progress engine: runs pipelined chain schedules over transport
 * connections.  A chain is what one rank does on one channel of a ring:
 * it sends one ordered stream to its right neighbour and receives one from
 * its left, and every step after the first forwards what the previous step
 * received (reduced or copied), slice by slice.  The engine knows nothing
 * of which algorithm made the chain.
 *
 * Both streams are walked in ticks: at tick t, step k carries slice
 * t - k * depth.  With depth 1 this is slice-major order, which keeps one
 * slice per step in flight; a chunk-major order (all of step 0, then all
 * of step 1) would deadlock once a forwarded chunk outgrows the outbox.
 * A larger depth lets every step run `depth` slices ahead of the step it
 * feeds, so one late slice from a neighbour does not stall the sender;
 * forwarded slices then wait up to `depth` ticks in the outbox.
 */
#ifndef HOOP_ENGINE_H
#define HOOP_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"
#include "core/bytering.h"

struct hoop_comm;
struct hoop_conn;

enum hoop_coll {
  HOOP_COLL_ALLREDUCE = 1,
  HOOP_COLL_REDUCE_SCATTER = 2,
  HOOP_COLL_ALLGATHER = 3,
};

const char *hoop__coll_name(enum hoop_coll coll);

/*
 * The first bytes of every collective on every stream.  The receiver
 * checks it against its own call, so ranks that disagree fail loudly
 * instead of mixing up data.
 */
struct hoop_wire_header {
  uint32_t magic;
  uint8_t version;
  uint8_t coll;
  uint8_t dtype;
  uint8_t op;
  uint64_t seq;
  uint64_t count;
  uint32_t slice_bytes;
  int32_t root;
  int32_t sender;
  uint32_t depth;
  uint16_t nchannels;
  uint8_t reserved[22];
};
_Static_assert(sizeof(struct hoop_wire_header) == 64,
               "the wire header keeps data 64-byte aligned in staging");

/* "allreduce #7 (count 100, float, sum, ...)", for messages. */
void hoop__describe_call(const struct hoop_wire_header *h, char *buf,
                         size_t len);

/* What an in-step does with the bytes it receives. */
enum hoop_in_action {
  HOOP_IN_REDUCE_FORWARD, /* reduce with local data into the outbox */
  HOOP_IN_REDUCE_FINAL,   /* reduce with local data into `dst`      */
  HOOP_IN_COPY,           /* copy into `dst`                         */
};

struct hoop_chain_step {
  enum hoop_in_action action;
  size_t bytes;        /* received by this step, sent again by the next */
  char *dst;           /* for REDUCE_FINAL and COPY */
  const char *local;   /* the local operand of a reduction */
};

/*
 * One rank's part of a ring on one channel.  Out-step 0 sends `first`;
 * out-step k > 0 sends what in-step k-1 produced; in-step nsteps-1's
 * result is not forwarded.
 */
struct hoop_chain {
  struct hoop_conn *send_conn;
  struct hoop_conn *recv_conn;
  const char *first;
  size_t first_bytes;
  int nsteps;
  struct hoop_chain_step *steps; /* [nsteps] */
  size_t depth; /* slices each step runs ahead of the next */

  /* Engine state; zero-initialise. */
  size_t rounds, ticks;
  size_t out_tick, out_off, hdr_sent;
  int out_step;
  size_t in_tick, in_off, hdr_received;
  int in_step;
  int out_done, in_done;
  int want_pollin, want_pollout;
  uint64_t bytes_out, bytes_in, total_out, total_in;
  struct hoop_bytering outbox;
};

struct hoop_chain_job {
  struct hoop_comm *comm;
  struct hoop_wire_header header; /* what this rank sends and expects */
  hoop_dtype_t dtype;
  hoop_op_t op;
  size_t elem_size;
  size_t slice_bytes; /* a multiple of elem_size */
  struct hoop_chain *chains;
  int nchains;
};

/*
 * Runs every chain of the job to completion.  Each chain needs an outbox
 * (chains[i].outbox.buf and .cap, a multiple of 64) when any of its steps
 * is REDUCE_FORWARD, big enough for depth + 1 ticks of forwarded slices:
 * (depth + 1) * slice_bytes per forwarding step.  Fails, naming the peer, when a
 * peer fails, disagrees on the header, or makes no progress for the
 * communicator's timeout.
 */
hoop_result_t hoop__engine_run(struct hoop_chain_job *job);

#endif /* HOOP_ENGINE_H */
