/*
 * device.h for builds without CUDA: every buffer is host memory, and a
 * stream, which only CUDA could honour, is refused.
 */
#include "collectives/device.h"
#include "core/comm.h"
#include "core/error.h"

hoop_result_t hoop__device_classify(struct hoop_comm *comm, const char *what,
                                    const void *send, const void *recv,
                                    hoop_stream_t stream, int *on_device) {
  *on_device = 0;
  if (stream != NULL)
    return HOOP_ERROR(comm, HOOP_ERR_UNSUPPORTED,
                      "%s: a CUDA stream was given, but this build of hoop "
                      "has no CUDA (configure found no toolkit)",
                      what);
  return HOOP_SUCCESS;
}

hoop_result_t hoop__device_enqueue(struct hoop_comm *comm,
                                   const struct hoop_call *c,
                                   size_t per_rank, hoop_coll_t label,
                                   hoop_stream_t stream) {
  return HOOP_ERROR(comm, HOOP_ERR_INTERNAL,
                    "device call queued in a build without CUDA");
}

hoop_result_t hoop__device_drain(struct hoop_comm *comm) {
  return HOOP_SUCCESS;
}

hoop_result_t hoop__device_async_error(struct hoop_comm *comm) {
  return HOOP_SUCCESS;
}

const char *hoop__device_path(const struct hoop_comm *comm) {
  return "none";
}

void hoop__device_free(struct hoop_comm *comm) {}

hoop_result_t hoop__device_stage(struct hoop_comm *comm, const char *what,
                                 const void *dev, size_t bytes, int copy,
                                 hoop_stream_t stream, void **host) {
  *host = NULL;
  return HOOP_ERROR(comm, HOOP_ERR_INTERNAL,
                    "%s: device buffer staged in a build without CUDA", what);
}

hoop_result_t hoop__device_unstage(struct hoop_comm *comm, const char *what,
                                   void *dev, void *host, size_t bytes,
                                   int copy, hoop_stream_t stream) {
  return HOOP_ERROR(comm, HOOP_ERR_INTERNAL,
                    "%s: device buffer staged in a build without CUDA", what);
}
