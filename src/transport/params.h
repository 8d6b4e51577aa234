/*
 * The settings only transports read, one line each as in core/param.h
 * (whose getters these are): the core never reads them.  The HOOP_IB_*
 * numbers are text so that a bad one is refused by name
 * (transport/rdma_settings.c) instead of replaced by its default.
 */
#ifndef HOOP_TRANSPORT_PARAMS_H
#define HOOP_TRANSPORT_PARAMS_H

#include "core/param.h"

#define HOOP_TRANSPORT_PARAMS(X)                                             \
  X(shm_slot_bytes, "HOOP_SHM_SLOT_BYTES", 256 * 1024)                      \
  X(shm_slots, "HOOP_SHM_SLOTS", 8)

#define HOOP_TRANSPORT_STRING_PARAMS(X)                                      \
  X(shm_stores, "HOOP_SHM_STORES", NULL)                                    \
  X(ib_hca, "HOOP_IB_HCA", NULL)                                             \
  X(ib_gid_index, "HOOP_IB_GID_INDEX", NULL)                                 \
  X(ib_timeout, "HOOP_IB_TIMEOUT", NULL)                                     \
  X(ib_retry_cnt, "HOOP_IB_RETRY_CNT", NULL)                                 \
  X(ib_sl, "HOOP_IB_SL", NULL)                                               \
  X(ib_tc, "HOOP_IB_TC", NULL)

HOOP_TRANSPORT_PARAMS(HOOP_PARAM_DECLARE)
HOOP_TRANSPORT_STRING_PARAMS(HOOP_STRING_PARAM_DECLARE)

/* HOOP_SHM_STORES: how the shm transport writes into its FIFO. */
enum hoop_shm_stores {
  HOOP_SHM_STORES_AUTO,  /* each piece the way that times faster */
  HOOP_SHM_STORES_PLAIN, /* through the caches */
  HOOP_SHM_STORES_NT     /* around them (non-temporal stores) */
};

/* NULL (unset) is AUTO; -1 for text that is not auto, plain or nt. */
int hoop__parse_shm_stores(const char *text);

#endif /* HOOP_TRANSPORT_PARAMS_H */
