/*
 * The transports this build registers with the core: the first that can
 * connect a pair of ranks wins, so the list goes from the fastest (same
 * host only) to the most general.  A transport that is not finished is
 * marked by_name_only and serves only a job that names it.
 */
#include "transport/transport.h"

const struct hoop_transport_ops *const hoop__transports[] = {
    &hoop__shm_transport,
    &hoop__tcp_transport,
    &hoop__ib_transport,
    NULL,
};
