/*
 * The GPU side of the NCCL layer in builds without CUDA: every buffer is
 * host memory and there is no device to name.
 */
#include <stdlib.h>

#include "nccl/nccl_comm.h"
#include "reduce/reduce.h"

int nccl__cuda_current_device(void) { return -1; }

bool nccl__is_device_memory(const void *p) {
  (void)p;
  return false;
}

/* Page-aligned like device allocations, so alignment bugs show up alike. */
ncclResult_t nccl__mem_alloc(void **ptr, size_t size) {
  if (posix_memalign(ptr, 4096, size) != 0)
    return nccl__error(ncclSystemError, "ncclMemAlloc: no memory for %zu "
                                        "bytes", size);
  return ncclSuccess;
}

ncclResult_t nccl__mem_free(void *ptr) {
  free(ptr);
  return ncclSuccess;
}

ncclResult_t nccl__scale(const struct nccl_premul *s, const void *src,
                         size_t count, hoop_dtype_t dtype, void *dst,
                         cudaStream_t stream) {
  (void)stream;
  hoop__reduce_scale(dst, src, count, dtype,
                     s->residence == ncclScalarHostImmediate
                         ? (const void *)s->value
                         : s->device_scalar);
  return ncclSuccess;
}

ncclResult_t nccl__temp_alloc(void **p, size_t bytes, bool device,
                              cudaStream_t stream) {
  (void)device;
  (void)stream;
  *p = malloc(bytes ? bytes : 1);
  return *p != NULL ? ncclSuccess
                    : nccl__error(ncclSystemError,
                                  "no memory for %zu bytes of scaled input",
                                  bytes);
}

void nccl__temp_free(void *p, bool device, cudaStream_t stream) {
  (void)device;
  (void)stream;
  free(p);
}
