/*
 * The verbs calls the ib transport makes, behind a table in hoop's own
 * terms: ib_verbs.c fills it from libibverbs (where the build found it),
 * and the tests fill it with an in-process fake (tests/fake_verbs.cc) so
 * that ib.c's protocol, credits and failure handling run in CI, where no
 * RDMA device exists.  Nothing that includes this header includes
 * verbs.h.
 *
 * One endpoint is one reliable-connected queue pair with its own
 * protection domain, completion queue (for sends and receives both) and
 * completion channel, on one port of one device.
 */
#ifndef HOOP_TRANSPORT_IB_VERBS_H
#define HOOP_TRANSPORT_IB_VERBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hoop_ib_ep;

struct hoop_ib_open {
  const char *device; /* as published: hoop_rdma_port.device */
  int port;
  int gid_index; /* the index the rank published (hoop_rdma_port) */
  int send_depth; /* work requests outstanding at once */
  int recv_depth;
};

/* This endpoint's address, for the connection information. */
struct hoop_ib_local {
  uint16_t lid;
  uint8_t mtu;        /* the port's, HOOP_MTU_MIN..HOOP_MTU_MAX */
  uint8_t link_layer; /* enum hoop_link_layer */
  uint32_t qpn;
  uint8_t gid[16];
};

/* What moving the queue pair to RTR and RTS needs from both sides. */
struct hoop_ib_path {
  uint16_t dlid;
  uint8_t mtu; /* the smaller of the two ports' */
  uint8_t link_layer;
  uint32_t dest_qpn;
  uint32_t rq_psn; /* the peer's first PSN */
  uint32_t sq_psn; /* ours */
  uint8_t dgid[16];
  int sgid_index;
  int timeout, retry_cnt, sl, tc; /* the HOOP_IB_* settings */
};

struct hoop_ib_mr {
  void *handle;
  uint32_t lkey, rkey;
};

/* A completion, as the transport needs it. */
struct hoop_ib_wc {
  uint64_t wr_id;
  int ok;                /* the status was success */
  int flushed;           /* flushed by a queue pair in error, not failed */
  int recv;              /* a receive (an incoming write with immediate) */
  uint32_t imm;          /* receives only, host order */
  uint32_t vendor_err;
  char status[48];       /* "retry counter exceeded (12)" when !ok */
};

/*
 * Every function that can fail returns 0 or an errno value and fills
 * `why` (e.g. "ibv_modify_qp to RTR: Invalid argument"), naming the call
 * and the step, without the peer: the caller adds it.
 */
struct hoop_ib_verbs {
  const char *name; /* "libibverbs", "fake" */

  /* Opens the device and port and makes the endpoint, queue pair in INIT. */
  int (*open)(const struct hoop_ib_open *o, struct hoop_ib_ep **ep,
              struct hoop_ib_local *local, char *why, size_t why_len);

  /* Registers [addr, addr + len); `remote_write` lets the peer write it. */
  int (*reg_mr)(struct hoop_ib_ep *ep, void *addr, size_t len,
                bool remote_write, struct hoop_ib_mr *mr, char *why,
                size_t why_len);
  void (*dereg_mr)(struct hoop_ib_ep *ep, struct hoop_ib_mr *mr);

  /* INIT -> RTR -> RTS; `why` names the step that failed. */
  int (*connect)(struct hoop_ib_ep *ep, const struct hoop_ib_path *path,
                 char *why, size_t why_len);

  /*
   * Posts one signalled RDMA WRITE of len bytes (0 allowed) from `src`
   * (in the region of lkey) to raddr (rkey), carrying `imm` as immediate
   * data when `with_imm`, which consumes one receive the peer posted.
   */
  int (*post_write)(struct hoop_ib_ep *ep, uint64_t wr_id, const void *src,
                    uint32_t lkey, size_t len, uint64_t raddr, uint32_t rkey,
                    bool with_imm, uint32_t imm, char *why, size_t why_len);
  /* Posts one receive with no buffer, for a write with immediate. */
  int (*post_recv)(struct hoop_ib_ep *ep, uint64_t wr_id, char *why,
                   size_t why_len);

  /* Up to `max` completions into wc; returns how many, or < 0 on error. */
  int (*poll)(struct hoop_ib_ep *ep, struct hoop_ib_wc *wc, int max);

  /*
   * The completion channel: notify() asks for an event at the next
   * completion; the descriptor then polls readable; consume() takes and
   * acknowledges pending events without blocking.
   */
  int (*notify)(struct hoop_ib_ep *ep);
  int (*event_fd)(struct hoop_ib_ep *ep);
  void (*consume)(struct hoop_ib_ep *ep);

  /*
   * The device's asynchronous events (port down, fatal queue pair
   * errors): a descriptor that polls readable when one is pending, and
   * take() reading one without blocking; returns 1 with `what` set when
   * the event breaks this endpoint, 0 for one that does not or when none
   * was pending.
   */
  int (*async_fd)(struct hoop_ib_ep *ep);
  int (*async_take)(struct hoop_ib_ep *ep, char *what, size_t what_len);

  /* Frees everything in reverse order of creation; ep may be partial. */
  void (*close)(struct hoop_ib_ep *ep);
};

/* libibverbs' table, or NULL in a build without it. */
extern const struct hoop_ib_verbs *const hoop__ib_verbs_real;

/*
 * The table the transport uses: the real one unless a test has set
 * another (before any communicator is made).
 */
const struct hoop_ib_verbs *hoop__ib_verbs(void);
void hoop__ib_set_verbs(const struct hoop_ib_verbs *verbs);

#endif /* HOOP_TRANSPORT_IB_VERBS_H */
