/*
 * Collectives on CUDA device buffers, ordered on the caller's stream.
 *
 * A call on device buffers is queued and returns at once; later work on the
 * stream waits for its result.  The communicator's proxy thread sees each
 * call through, over the path its first device call picked
 * (device_path.h): CUDA IPC, the GPUs reading each other's memory, when
 * every rank is on one host (device_ipc.c), else staging chunks through
 * pinned host memory for the host collectives, over any transport
 * (device_staged.c).  Host buffer calls first wait for queued device
 * calls, so every rank runs its calls in the order it made them.
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

/* "cuda_ipc", "staged" or "none" (hoop_comm_device_path). */
const char *hoop__device_path(const struct hoop_comm *comm);

/* Stops the proxy thread (after the queue drains) and frees staging. */
void hoop__device_free(struct hoop_comm *comm);

/*
 * Send and receive on device buffers go through host memory and return
 * once done, since each message is its own size and peer and the queue
 * above serves collectives.  hoop__device_stage waits for the device calls
 * queued before it, then gives *host, `bytes` of host memory, holding the
 * device buffer's contents once the work queued on `stream` has run when
 * `copy` is set (a send), or nothing yet (a receive).
 * hoop__device_unstage copies *host back into the device buffer on
 * `stream` and waits for it when `copy` is set, and frees it.
 */
hoop_result_t hoop__device_stage(struct hoop_comm *comm, const char *what,
                                 const void *dev, size_t bytes, int copy,
                                 hoop_stream_t stream, void **host);
hoop_result_t hoop__device_unstage(struct hoop_comm *comm, const char *what,
                                   void *dev, void *host, size_t bytes,
                                   int copy, hoop_stream_t stream);

#endif /* HOOP_COLLECTIVES_DEVICE_H */
