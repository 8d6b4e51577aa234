/*
 * The ib transport's verbs table over libibverbs (transport/ib_verbs.h).
 * An endpoint opens its own device context, so that its descriptors (the
 * completion channel's and the asynchronous events') carry only its own
 * news.  Every failure names the call, the step and device:port, because
 * a message from a cluster must say which adapter refused what.  The
 * exported verbs functions come through transport/ibv_loader.h's table.
 *
 * It has been compiled against libibverbs but never run on an adapter.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ibv_loader.h"
#include "core/log.h"
#include "transport/rdma.h"
#include "transport/ib_verbs.h"

struct hoop_ib_ep {
  const struct hoop_ibv *ibv;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_comp_channel *channel;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  uint8_t port;
  char device[64]; /* the full name, for messages */
};

/* A completion queue drained this many at a time (the stack array's). */
#define POLL_BATCH 32

/*
 * Verbs calls that return a pointer leave the reason in errno, but a
 * provider that forgets to set it must not make a failure look like 0.
 */
static int errno_or(int fallback) { return errno != 0 ? errno : fallback; }

/* "<call> on mlx5_0:1: <reason>"; returns rc. */
static int say(const struct hoop_ib_ep *ep, const char *call, int rc,
               char *why, size_t why_len) {
  snprintf(why, why_len, "%s on %s:%u: %s", call, ep->device, ep->port,
           strerror(rc));
  return rc;
}

static int set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return errno;
  return 0;
}

/*
 * A rank publishes its device's name cut to fit hoop_rdma_port.device,
 * so a name of that full length may be the start of a longer one; the
 * first device it starts is taken.
 */
static bool name_matches(const char *name, const char *published) {
  size_t len = strlen(published);
  size_t cut = sizeof ((struct hoop_rdma_port *)0)->device - 1;
  return strncmp(name, published, len) == 0 &&
         (name[len] == '\0' || len == cut);
}

static int open_device(const struct hoop_ib_open *o, struct hoop_ib_ep *ep,
                       char *why, size_t why_len) {
  int ndev = 0;
  hoop__rdma_fork_safe();
  errno = 0;
  struct ibv_device **list = ep->ibv->get_device_list(&ndev);
  if (list == NULL) {
    /* ENOSYS: the kernel has no RDMA subsystem at all. */
    int rc = errno_or(ENODEV);
    snprintf(why, why_len, "ibv_get_device_list, looking for %s: %s%s",
             o->device, strerror(rc),
             rc == ENOSYS ? " (this kernel has no RDMA support)" : "");
    return rc;
  }
  struct ibv_device *dev = NULL;
  for (int i = 0; i < ndev && dev == NULL; i++)
    if (name_matches(ep->ibv->get_device_name(list[i]), o->device))
      dev = list[i];
  int rc = 0;
  if (dev == NULL) {
    rc = ENODEV;
    snprintf(why, why_len, "no RDMA device named %s among the %d that "
             "ibv_get_device_list lists", o->device, ndev);
  } else {
    snprintf(ep->device, sizeof ep->device, "%s",
             ep->ibv->get_device_name(dev));
    errno = 0;
    ep->ctx = ep->ibv->open_device(dev);
    if (ep->ctx == NULL)
      rc = say(ep, "ibv_open_device", errno_or(ENODEV), why, why_len);
  }
  /* An open context outlives the list it was found in. */
  ep->ibv->free_device_list(list);
  return rc;
}

static int query_port(const struct hoop_ib_open *o, struct hoop_ib_ep *ep,
                      struct hoop_ib_local *local, char *why,
                      size_t why_len) {
  struct ibv_port_attr attr;
  int rc = hoop__ibv_query_port(ep->ibv, ep->ctx, ep->port, &attr);
  if (rc != 0)
    return say(ep, "ibv_query_port", rc, why, why_len);
  if (attr.state != IBV_PORT_ACTIVE) {
    snprintf(why, why_len, "ibv_query_port on %s:%u: the port is %s, not "
             "ACTIVE", ep->device, ep->port,
             hoop__rdma_state_name((int)attr.state));
    return ENETDOWN;
  }
  local->lid = attr.lid;
  /* ibv_mtu numbers MTUs as rdma.h does; discovery clamps alike. */
  local->mtu = attr.active_mtu >= HOOP_MTU_MIN &&
                       attr.active_mtu <= HOOP_MTU_MAX
                   ? (uint8_t)attr.active_mtu
                   : HOOP_MTU_MIN;
  /* Verbs reports ports from before RoCE as unspecified: they are IB. */
  local->link_layer = attr.link_layer == IBV_LINK_LAYER_ETHERNET
                          ? HOOP_LINK_ETH
                          : HOOP_LINK_IB;
  /*
   * The _ex form returns the reason, and ENODATA for an empty entry,
   * where ibv_query_gid gives -1, or an all-zero GID as if it were one.
   */
  struct ibv_gid_entry gid;
  rc = ep->ibv->query_gid_ex(ep->ctx, ep->port, (uint32_t)o->gid_index, &gid,
                             0, sizeof gid);
  if (rc != 0) {
    snprintf(why, why_len, "ibv_query_gid_ex on %s:%u (GID index %d): %s%s",
             ep->device, ep->port, o->gid_index, strerror(rc),
             rc == ENODATA ? " (the entry is empty now)" : "");
    return rc;
  }
  memcpy(local->gid, gid.gid.raw, sizeof local->gid);
  return 0;
}

static int make_qp(const struct hoop_ib_open *o, struct hoop_ib_ep *ep,
                   char *why, size_t why_len) {
  errno = 0;
  ep->pd = ep->ibv->alloc_pd(ep->ctx);
  if (ep->pd == NULL)
    return say(ep, "ibv_alloc_pd", errno_or(ENOMEM), why, why_len);
  errno = 0;
  ep->channel = ep->ibv->create_comp_channel(ep->ctx);
  if (ep->channel == NULL)
    return say(ep, "ibv_create_comp_channel", errno_or(ENOMEM), why,
               why_len);
  /* consume() reads the channel until it would block. */
  int rc = set_nonblocking(ep->channel->fd);
  if (rc != 0)
    return say(ep, "fcntl(O_NONBLOCK) of the completion channel", rc, why,
               why_len);
  errno = 0;
  ep->cq = ep->ibv->create_cq(ep->ctx, o->send_depth + o->recv_depth, NULL,
                              ep->channel, 0);
  if (ep->cq == NULL) {
    int err = errno_or(ENOMEM);
    snprintf(why, why_len, "ibv_create_cq (%d entries) on %s:%u: %s",
             o->send_depth + o->recv_depth, ep->device, ep->port,
             strerror(err));
    return err;
  }
  /* sq_sig_all stays 0: post_write signals each write itself. */
  struct ibv_qp_init_attr init = {
      .send_cq = ep->cq,
      .recv_cq = ep->cq,
      .cap = {.max_send_wr = (uint32_t)o->send_depth,
              .max_recv_wr = (uint32_t)o->recv_depth,
              .max_send_sge = 1,
              .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  errno = 0;
  ep->qp = ep->ibv->create_qp(ep->pd, &init);
  if (ep->qp == NULL) {
    int err = errno_or(ENOMEM);
    snprintf(why, why_len, "ibv_create_qp (%d sends, %d receives) on "
             "%s:%u: %s", o->send_depth, o->recv_depth, ep->device, ep->port,
             strerror(err));
    return err;
  }
  /* async_take() reads the events without waiting for one. */
  rc = set_nonblocking(ep->ctx->async_fd);
  if (rc != 0)
    return say(ep, "fcntl(O_NONBLOCK) of the async event descriptor", rc,
               why, why_len);
  struct ibv_qp_attr attr = {
      .qp_state = IBV_QPS_INIT,
      .pkey_index = 0,
      .port_num = ep->port,
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE,
  };
  rc = ep->ibv->modify_qp(ep->qp, &attr,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                              IBV_QP_ACCESS_FLAGS);
  if (rc != 0)
    return say(ep, "ibv_modify_qp to INIT", rc, why, why_len);
  return 0;
}

static void verbs_close(struct hoop_ib_ep *ep);

static int verbs_open(const struct hoop_ib_open *o, struct hoop_ib_ep **out,
                      struct hoop_ib_local *local, char *why,
                      size_t why_len) {
  *out = NULL;
  memset(local, 0, sizeof *local);
  if (o->port < 1 || o->port > UINT8_MAX) {
    snprintf(why, why_len, "port %d of %s is outside 1..%d", o->port,
             o->device, UINT8_MAX);
    return EINVAL;
  }
  const struct hoop_ibv *ibv = hoop__ibv(why, why_len);
  if (ibv == NULL)
    return ELIBACC;
  struct hoop_ib_ep *ep = calloc(1, sizeof *ep);
  if (ep == NULL) {
    snprintf(why, why_len, "no memory for an endpoint on %s:%d", o->device,
             o->port);
    return ENOMEM;
  }
  ep->ibv = ibv;
  ep->port = (uint8_t)o->port;
  int rc = open_device(o, ep, why, why_len);
  if (rc == 0)
    rc = query_port(o, ep, local, why, why_len);
  if (rc == 0)
    rc = make_qp(o, ep, why, why_len);
  if (rc != 0) {
    verbs_close(ep);
    return rc;
  }
  local->qpn = ep->qp->qp_num;
  *out = ep;
  return 0;
}

static int verbs_reg_mr(struct hoop_ib_ep *ep, void *addr, size_t len,
                        bool remote_write, struct hoop_ib_mr *mr, char *why,
                        size_t why_len) {
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (remote_write)
    access |= IBV_ACCESS_REMOTE_WRITE;
  memset(mr, 0, sizeof *mr);
  errno = 0;
  struct ibv_mr *m = ep->ibv->reg_mr(ep->pd, addr, len, access);
  if (m == NULL) {
    int rc = errno_or(ENOMEM);
    snprintf(why, why_len, "ibv_reg_mr (%zu bytes%s) on %s:%u: %s", len,
             remote_write ? ", remote write" : "", ep->device, ep->port,
             strerror(rc));
    return rc;
  }
  mr->handle = m;
  mr->lkey = m->lkey;
  mr->rkey = m->rkey;
  return 0;
}

static void verbs_dereg_mr(struct hoop_ib_ep *ep, struct hoop_ib_mr *mr) {
  if (mr->handle == NULL)
    return;
  int rc = ep->ibv->dereg_mr(mr->handle);
  if (rc != 0)
    HOOP_WARN("ibv_dereg_mr on %s:%u: %s; the region stays pinned until "
              "the process exits", ep->device, ep->port, strerror(rc));
  mr->handle = NULL;
}

/* 256..4096 bytes for MTU 1..5, or 0 for a number verbs does not use. */
static int mtu_bytes(int mtu) {
  return mtu >= HOOP_MTU_MIN && mtu <= HOOP_MTU_MAX ? 128 << mtu : 0;
}

static int verbs_connect(struct hoop_ib_ep *ep,
                         const struct hoop_ib_path *path, char *why,
                         size_t why_len) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = (enum ibv_mtu)path->mtu,
      .dest_qp_num = path->dest_qpn,
      .rq_psn = path->rq_psn,
      .max_dest_rd_atomic = 1,
      .min_rnr_timer = 12,
      .ah_attr = {.sl = (uint8_t)path->sl, .port_num = ep->port},
  };
  char where[128];
  if (path->link_layer == HOOP_LINK_ETH) {
    /* RoCE routes by GID: the LID means nothing on Ethernet. */
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, path->dgid, sizeof path->dgid);
    a.ah_attr.grh.sgid_index = (uint8_t)path->sgid_index;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = (uint8_t)path->tc;
    char gid[HOOP_RDMA_GID_STRLEN];
    snprintf(where, sizeof where, "dgid %s, GID index %d",
             hoop__rdma_gid_str(path->dgid, gid), path->sgid_index);
  } else {
    a.ah_attr.dlid = path->dlid;
    snprintf(where, sizeof where, "dlid 0x%x", path->dlid);
  }
  int rc = ep->ibv->modify_qp(ep->qp, &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) {
    snprintf(why, why_len, "ibv_modify_qp to RTR on %s:%u (dest QP 0x%x, "
             "MTU %d, %s): %s", ep->device, ep->port, path->dest_qpn,
             mtu_bytes(path->mtu), where, strerror(rc));
    return rc;
  }
  /*
   * rnr_retry 7 retries without limit: a write with immediate that finds
   * no receive posted yet waits for one instead of breaking the pair.
   */
  struct ibv_qp_attr s = {
      .qp_state = IBV_QPS_RTS,
      .timeout = (uint8_t)path->timeout,
      .retry_cnt = (uint8_t)path->retry_cnt,
      .rnr_retry = 7,
      .sq_psn = path->sq_psn,
      .max_rd_atomic = 1,
  };
  rc = ep->ibv->modify_qp(ep->qp, &s,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                              IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) {
    snprintf(why, why_len, "ibv_modify_qp to RTS on %s:%u (timeout %d, "
             "retry_cnt %d, sq_psn 0x%x): %s", ep->device, ep->port,
             path->timeout, path->retry_cnt, path->sq_psn, strerror(rc));
    return rc;
  }
  return 0;
}

static int verbs_post_write(struct hoop_ib_ep *ep, uint64_t wr_id,
                            const void *src, uint32_t lkey, size_t len,
                            uint64_t raddr, uint32_t rkey, bool with_imm,
                            uint32_t imm, char *why, size_t why_len) {
  const char *what = with_imm ? "RDMA write with immediate" : "RDMA write";
  if (len > UINT32_MAX) {
    snprintf(why, why_len, "ibv_post_send (%s, %zu bytes) on %s:%u: more "
             "than one scatter entry can hold", what, len, ep->device,
             ep->port);
    return EMSGSIZE;
  }
  struct ibv_sge sge = {
      .addr = (uintptr_t)src, .length = (uint32_t)len, .lkey = lkey};
  struct ibv_send_wr wr = {
      .wr_id = wr_id,
      .sg_list = len > 0 ? &sge : NULL,
      .num_sge = len > 0 ? 1 : 0,
      .opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
      .send_flags = IBV_SEND_SIGNALED,
      .imm_data = with_imm ? htonl(imm) : 0,
      .wr.rdma = {.remote_addr = raddr, .rkey = rkey},
  };
  struct ibv_send_wr *bad;
  int rc = ibv_post_send(ep->qp, &wr, &bad);
  if (rc != 0)
    snprintf(why, why_len, "ibv_post_send (%s, %zu bytes) on %s:%u: %s",
             what, len, ep->device, ep->port, strerror(rc));
  return rc;
}

static int verbs_post_recv(struct hoop_ib_ep *ep, uint64_t wr_id, char *why,
                           size_t why_len) {
  /*
   * A write with immediate lands where it was aimed: the receive only
   * carries the immediate, so it needs no buffer.
   */
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = NULL, .num_sge = 0};
  struct ibv_recv_wr *bad;
  int rc = ibv_post_recv(ep->qp, &wr, &bad);
  if (rc != 0)
    say(ep, "ibv_post_recv", rc, why, why_len);
  return rc;
}

static int verbs_poll(struct hoop_ib_ep *ep, struct hoop_ib_wc *out,
                      int max) {
  struct ibv_wc wc[POLL_BATCH];
  int want = max < POLL_BATCH ? max : POLL_BATCH;
  if (want <= 0)
    return 0;
  int n = ibv_poll_cq(ep->cq, want, wc);
  /* ibv_poll_cq's negative values are the provider's, not errnos. */
  if (n < 0)
    return -EIO;
  for (int i = 0; i < n; i++) {
    struct hoop_ib_wc *w = &out[i];
    w->wr_id = wc[i].wr_id;
    w->ok = wc[i].status == IBV_WC_SUCCESS;
    w->flushed = wc[i].status == IBV_WC_WR_FLUSH_ERR;
    /*
     * An error completion's opcode is undefined: only wr_id says what it
     * was.
     */
    w->recv = w->ok && wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM;
    w->imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
    w->vendor_err = wc[i].vendor_err;
    if (w->ok)
      w->status[0] = '\0';
    else
      snprintf(w->status, sizeof w->status, "%s (%d)",
               ep->ibv->wc_status_str(wc[i].status), (int)wc[i].status);
  }
  return n;
}

static int verbs_notify(struct hoop_ib_ep *ep) {
  return ibv_req_notify_cq(ep->cq, 0);
}

static int verbs_event_fd(struct hoop_ib_ep *ep) { return ep->channel->fd; }

/*
 * Every event taken is acknowledged, in one call since that takes a
 * lock: ibv_destroy_cq waits until all it delivered were.  The channel
 * serves only this endpoint's CQ, so each event is for it.
 */
static void verbs_consume(struct hoop_ib_ep *ep) {
  struct ibv_cq *cq;
  void *cq_context;
  unsigned int taken = 0;
  while (ep->ibv->get_cq_event(ep->channel, &cq, &cq_context) == 0)
    taken++;
  if (taken > 0)
    ep->ibv->ack_cq_events(ep->cq, taken);
}

static int verbs_async_fd(struct hoop_ib_ep *ep) { return ep->ctx->async_fd; }

static int verbs_async_take(struct hoop_ib_ep *ep, char *what,
                            size_t what_len) {
  struct ibv_async_event ev;
  if (ep->ibv->get_async_event(ep->ctx, &ev) != 0)
    return 0;
  const char *name = ep->ibv->event_type_str(ev.event_type);
  int breaks = 0;
  switch (ev.event_type) {
  case IBV_EVENT_QP_FATAL:
  case IBV_EVENT_QP_REQ_ERR:
  case IBV_EVENT_QP_ACCESS_ERR:
    breaks = ev.element.qp == ep->qp;
    if (breaks)
      snprintf(what, what_len, "%s on queue pair 0x%x of %s:%u", name,
               ep->qp->qp_num, ep->device, ep->port);
    break;
  case IBV_EVENT_CQ_ERR:
    breaks = ev.element.cq == ep->cq;
    if (breaks)
      snprintf(what, what_len, "%s on the completion queue of %s:%u", name,
               ep->device, ep->port);
    break;
  case IBV_EVENT_PORT_ERR:
    breaks = ev.element.port_num == ep->port;
    if (breaks)
      snprintf(what, what_len, "port %u of %s went down (%s)", ep->port,
               ep->device, name);
    break;
  case IBV_EVENT_DEVICE_FATAL:
    breaks = 1;
    snprintf(what, what_len, "%s on %s", name, ep->device);
    break;
  default:
    break;
  }
  ep->ibv->ack_async_event(&ev);
  return breaks;
}

/* close cannot fail, so a step that does is logged: what it held leaks. */
static void warn_close(const struct hoop_ib_ep *ep, const char *call,
                       int rc) {
  HOOP_WARN("closing the endpoint on %s:%u: %s: %s; what it holds stays "
            "until the process exits", ep->device, ep->port, call,
            strerror(rc));
}

/*
 * The caller deregisters its memory regions first: a protection domain
 * still holding one cannot be freed (EBUSY).  Each step copes with what
 * a failed open left unmade.
 */
static void verbs_close(struct hoop_ib_ep *ep) {
  if (ep == NULL)
    return;
  int rc;
  if (ep->qp != NULL && (rc = ep->ibv->destroy_qp(ep->qp)) != 0)
    warn_close(ep, "ibv_destroy_qp", rc);
  if (ep->cq != NULL && (rc = ep->ibv->destroy_cq(ep->cq)) != 0)
    warn_close(ep, "ibv_destroy_cq", rc);
  if (ep->channel != NULL &&
      (rc = ep->ibv->destroy_comp_channel(ep->channel)) != 0)
    warn_close(ep, "ibv_destroy_comp_channel", rc);
  if (ep->pd != NULL && (rc = ep->ibv->dealloc_pd(ep->pd)) != 0)
    warn_close(ep, "ibv_dealloc_pd", rc);
  if (ep->ctx != NULL) {
    errno = 0;
    if (ep->ibv->close_device(ep->ctx) != 0)
      warn_close(ep, "ibv_close_device", errno_or(EIO));
  }
  free(ep);
}

static const struct hoop_ib_verbs libibverbs = {
    .name = "libibverbs",
    .open = verbs_open,
    .reg_mr = verbs_reg_mr,
    .dereg_mr = verbs_dereg_mr,
    .connect = verbs_connect,
    .post_write = verbs_post_write,
    .post_recv = verbs_post_recv,
    .poll = verbs_poll,
    .notify = verbs_notify,
    .event_fd = verbs_event_fd,
    .consume = verbs_consume,
    .async_fd = verbs_async_fd,
    .async_take = verbs_async_take,
    .close = verbs_close,
};

const struct hoop_ib_verbs *const hoop__ib_verbs_real = &libibverbs;
