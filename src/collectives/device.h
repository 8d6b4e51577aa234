/*
 * Collectives on CUDA device buffers, ordered on the caller's stream.
 *
 * A call on device buffers is queued and returns at once.  The caller's
 * stream gets a gate (a host function) that holds the stream's later work
 * until the call is done; the communicator's proxy thread waits for the
 * stream's earlier work, then runs the call in chunks staged through pinned
 * host memory: device-to-host copies of the next chunk, the host collective
 * on this one (any transport), and host-to-device copies of the previous
 * one overlap.  Host-buffer calls first wait for queued device calls, so
 * every rank runs its calls in the order it made them.
 *
 * Without CUDA (HOOP_HAVE_CUDA 0) every buffer is host memory and a call
 * that names a stream fails with HOOP_ERR_UNSUPPORTED.
 */
#ifndef HOOP_COLLECTIVES_DEVICE_H
#define HOOP_COLLECTIVES_DEVICE_H

#include <stddef.h>

#include "hoop.h"

struct hoop_comm;
struct hoop_call;

/*
 * Sets *on_device when the call's buffers are device (or managed) memory.
 * Fails for host and device buffers mixed in one call, buffers on two
 * devices, or a stream in a build without CUDA.  For host buffers with a
 * stream it waits for the stream first, so that work queued there before
 * the call (a kernel writing pinned memory, say) is visible to it.
 */
hoop_result_t hoop__device_classify(struct hoop_comm *comm, const char *what,
                                    const void *send, const void *recv,
                                    hoop_stream_t stream, int *on_device);

/*
 * Queues a call on device buffers, its arguments checked, behind the work
 * already on `stream`, and returns.  `per_rank` and `label` are as for
 * hoop__collective_run().
 */
hoop_result_t hoop__device_enqueue(struct hoop_comm *comm,
                                   const struct hoop_call *c,
                                   size_t per_rank, hoop_coll_t label,
                                   hoop_stream_t stream);

/*
 * Waits until the communicator's queued device calls have run; returns the
 * first error one of them met (it also broke the communicator).
 */
hoop_result_t hoop__device_drain(struct hoop_comm *comm);

/* The first error of a queued call, HOOP_SUCCESS if none; never waits. */
hoop_result_t hoop__device_async_error(struct hoop_comm *comm);

/* Stops the proxy thread (after the queue drains) and frees staging. */
void hoop__device_free(struct hoop_comm *comm);

#endif /* HOOP_COLLECTIVES_DEVICE_H */
