/*
 * The GPU side of the NCCL layer: which device a rank uses, where a buffer
 * lives, NCCL's allocator, and PreMulSum's scaling on the caller's stream.
 * Host buffers take the host path, so a CUDA build serves ranks without a
 * GPU as well.
 */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "nccl/nccl_comm.h"
#include "reduce/reduce.h"
#include "reduce/reduce_cuda.h"

int nccl__cuda_current_device(void) {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

bool nccl__is_device_memory(const void *p) {
  if (p == NULL)
    return false;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* Device memory where there is a GPU; host memory for a rank without. */
ncclResult_t nccl__mem_alloc(void **ptr, size_t size) {
  if (nccl__cuda_current_device() >= 0) {
    cudaError_t e = cudaMalloc(ptr, size);
    if (e != cudaSuccess)
      return nccl__error(ncclUnhandledCudaError,
                         "ncclMemAlloc: cudaMalloc(%zu): %s", size,
                         cudaGetErrorString(e));
    return ncclSuccess;
  }
  if (posix_memalign(ptr, 4096, size) != 0)
    return nccl__error(ncclSystemError,
                       "ncclMemAlloc: no memory for %zu bytes", size);
  return ncclSuccess;
}

ncclResult_t nccl__mem_free(void *ptr) {
  if (!nccl__is_device_memory(ptr)) {
    free(ptr);
    return ncclSuccess;
  }
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess)
    return nccl__error(ncclUnhandledCudaError, "ncclMemFree: cudaFree: %s",
                       cudaGetErrorString(e));
  return ncclSuccess;
}

ncclResult_t nccl__scale(const struct nccl_premul *s, const void *src,
                         size_t count, hoop_dtype_t dtype, void *dst,
                         cudaStream_t stream) {
  bool immediate = s->residence == ncclScalarHostImmediate;
  bool scalar_on_device = !immediate && nccl__is_device_memory(s->device_scalar);
  const void *scalar = immediate ? (const void *)s->value : s->device_scalar;
  if (!nccl__is_device_memory(src)) {
    unsigned char value[8];
    if (scalar_on_device) {
      /* Host buffers finish within the call: read the scalar now. */
      cudaError_t e = cudaMemcpy(value, scalar, hoop_dtype_size(dtype),
                                 cudaMemcpyDeviceToHost);
      if (e != cudaSuccess)
        return nccl__error(ncclUnhandledCudaError,
                           "PreMulSum: reading the device scalar: %s",
                           cudaGetErrorString(e));
      scalar = value;
    }
    hoop__reduce_scale(dst, src, count, dtype, scalar);
    return ncclSuccess;
  }
  int e = hoop__cuda_reduce_scale(dst, src, count, dtype, scalar,
                                  scalar_on_device, stream);
  if (e != 0)
    return nccl__error(ncclUnhandledCudaError,
                       "PreMulSum: scaling kernel: %s",
                       cudaGetErrorString((cudaError_t)e));
  return ncclSuccess;
}

ncclResult_t nccl__temp_alloc(void **p, size_t bytes, bool device,
                              cudaStream_t stream) {
  if (!device) {
    *p = malloc(bytes ? bytes : 1);
    return *p != NULL ? ncclSuccess
                      : nccl__error(ncclSystemError,
                                    "no memory for %zu bytes of scaled input",
                                    bytes);
  }
  cudaError_t e = cudaMallocAsync(p, bytes ? bytes : 1, stream);
  if (e != cudaSuccess)
    return nccl__error(ncclUnhandledCudaError,
                       "cudaMallocAsync(%zu) for scaled input: %s", bytes,
                       cudaGetErrorString(e));
  return ncclSuccess;
}

/* Ordered after the call that reads it on the same stream. */
void nccl__temp_free(void *p, bool device, cudaStream_t stream) {
  if (device)
    cudaFreeAsync(p, stream);
  else
    free(p);
}
