/*
 * libibverbs, opened with dlopen at its first use instead of linked: so
 * that libhoop.so and libnccl.so.2 load on hosts without rdma-core (most
 * machines, and every container a program built for NCCL runs in), and a
 * tcp or shm job never touches it.  Discovery (rdma_devices.c) and the ib
 * transport's verbs table (transport/ib_verbs.c) make their verbs calls
 * through this table, and nothing else calls libibverbs.
 *
 * verbs.h's types and its inline functions stay in use: ibv_post_send,
 * ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq call the provider
 * through the context's ops and need no symbol of libibverbs.  Its other
 * inline wrappers (ibv_query_port, ibv_query_gid_ex, ibv_reg_mr) call
 * exported functions and must not be used: hoop__ibv_query_port and the
 * query_gid_ex and reg_mr entries below stand for them.
 */
#ifndef HOOP_CORE_IBV_LOADER_H
#define HOOP_CORE_IBV_LOADER_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>

#define HOOP_IBV_SONAME "libibverbs.so.1"

/*
 * The exported functions hoop calls, each typed as verbs.h declares it
 * (__typeof__ reads the declaration; it references no symbol).
 */
struct hoop_ibv {
  __typeof__(ibv_get_device_list) *get_device_list;
  __typeof__(ibv_free_device_list) *free_device_list;
  __typeof__(ibv_get_device_name) *get_device_name;
  __typeof__(ibv_open_device) *open_device;
  __typeof__(ibv_close_device) *close_device;
  __typeof__(ibv_query_device) *query_device;
  /* The compatibility entry point: call hoop__ibv_query_port instead. */
  __typeof__(ibv_query_port) *query_port;
  /* What verbs.h's inline ibv_query_gid_ex calls, with the entry size. */
  __typeof__(_ibv_query_gid_ex) *query_gid_ex;
  __typeof__(ibv_fork_init) *fork_init;
  __typeof__(ibv_is_fork_initialized) *is_fork_initialized;
  __typeof__(ibv_alloc_pd) *alloc_pd;
  __typeof__(ibv_dealloc_pd) *dealloc_pd;
  __typeof__(ibv_create_comp_channel) *create_comp_channel;
  __typeof__(ibv_destroy_comp_channel) *destroy_comp_channel;
  __typeof__(ibv_create_cq) *create_cq;
  __typeof__(ibv_destroy_cq) *destroy_cq;
  __typeof__(ibv_create_qp) *create_qp;
  __typeof__(ibv_modify_qp) *modify_qp;
  __typeof__(ibv_destroy_qp) *destroy_qp;
  /*
   * The plain ibv_reg_mr, which verbs.h's inline wrapper also picks for
   * access flags without IBV_ACCESS_OPTIONAL_RANGE bits: hoop never
   * passes those.
   */
  __typeof__(ibv_reg_mr) *reg_mr;
  __typeof__(ibv_dereg_mr) *dereg_mr;
  __typeof__(ibv_get_cq_event) *get_cq_event;
  __typeof__(ibv_ack_cq_events) *ack_cq_events;
  __typeof__(ibv_get_async_event) *get_async_event;
  __typeof__(ibv_ack_async_event) *ack_async_event;
  __typeof__(ibv_wc_status_str) *wc_status_str;
  __typeof__(ibv_event_type_str) *event_type_str;
};

/*
 * This process's table: HOOP_IBV_SONAME is loaded by the first call, from
 * any thread, once.  NULL when it cannot be loaded, `why` saying so with
 * dlerror's words ("libibverbs.so.1 could not be loaded: ..."), every
 * call alike.
 */
const struct hoop_ibv *hoop__ibv(char *why, size_t why_len);

/*
 * Loads `soname` and fills *out, or says in `why` what failed: the
 * library or the first symbol missing.  hoop__ibv's work, apart so that
 * tests can load a library that is not there.  The library stays loaded
 * (libibverbs loads its providers, which must not be unloaded under it).
 */
bool hoop__ibv_load(const char *soname, struct hoop_ibv *out, char *why,
                    size_t why_len);

/*
 * verbs.h's ibv_query_port: the provider's extended query where it has
 * one, which fills every field, else the exported one.
 */
int hoop__ibv_query_port(const struct hoop_ibv *ibv, struct ibv_context *ctx,
                         uint8_t port, struct ibv_port_attr *attr);

#endif /* HOOP_CORE_IBV_LOADER_H */
