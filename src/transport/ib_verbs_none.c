/*
 * The ib transport's verbs in a build without libibverbs: there are
 * none.  Such a build publishes HOOP_RDMA_NOT_BUILT (rdma_devices_none.c
 * finds no device), so no pair is ever joined by ib to need them.
 */
#include <stddef.h>

#include "transport/ib_verbs.h"

const struct hoop_ib_verbs *const hoop__ib_verbs_real = NULL;
