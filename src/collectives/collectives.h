/*
 * What the public calls and the staged device path (device.h) share: how a
 * call is routed, which buffers a rank passes, running one call on host
 * buffers, and naming a collective in errors.
 */
#ifndef HOOP_COLLECTIVES_COLLECTIVES_H
#define HOOP_COLLECTIVES_COLLECTIVES_H

#include <stddef.h>

#include "hoop.h"

struct hoop_comm;
struct hoop_call;

/*
 * Runs a collective on host buffers, as the public call would (argument
 * checks, algorithm choice, counters).  `per_rank` is the count the user
 * passes; `label` is what the header and the counters call it.
 */
hoop_result_t hoop__collective_run(struct hoop_comm *comm,
                                   struct hoop_call *c, size_t per_rank,
                                   hoop_coll_t label);

/*
 * The first step of every public call with buffers: checks that comm is
 * live and where the buffers are (device.h).  For host buffers it also
 * waits for the device calls queued before, so every rank keeps its order.
 */
hoop_result_t hoop__route_call(struct hoop_comm *comm, const char *what,
                               const void *send, const void *recv,
                               hoop_stream_t stream, int *on_device);

/* Which buffers this rank passes for the call (NCCL's rules). */
void hoop__call_buffers(const struct hoop_comm *comm,
                        const struct hoop_call *c, int *send, int *recv);

/* All-to-all on host buffers, as hoop_alltoall runs it (p2p.c). */
hoop_result_t hoop__alltoall_run(struct hoop_comm *comm, const void *sendbuf,
                                 void *recvbuf, size_t count,
                                 hoop_dtype_t dtype);

#endif /* HOOP_COLLECTIVES_COLLECTIVES_H */
