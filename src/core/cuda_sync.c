/* Stream memory operations (cuda_sync.h). */
#include <pthread.h>
#include <stddef.h>

#include "core/cuda_sync.h"

typedef CUresult (*stream_value_fn)(CUstream, CUdeviceptr, cuuint32_t,
                                    unsigned int);
static stream_value_fn wait_value, write_value;
static pthread_once_t memops_once = PTHREAD_ONCE_INIT;

static stream_value_fn driver_entry(const char *name) {
  enum cudaDriverEntryPointQueryResult found;
  void *fn = NULL;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    fn = NULL;
  cudaGetLastError();
  return (stream_value_fn)fn;
}

static void load_memops(void) {
  wait_value = driver_entry("cuStreamWaitValue32");
  write_value = driver_entry("cuStreamWriteValue32");
}

int hoop__cuda_memops_available(void) {
  pthread_once(&memops_once, load_memops);
  return wait_value != NULL && write_value != NULL;
}

cudaError_t hoop__cuda_stream_wait(cudaStream_t s, CUdeviceptr addr,
                                   uint32_t value) {
  CUresult r = wait_value((CUstream)s, addr, value, CU_STREAM_WAIT_VALUE_GEQ);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}

cudaError_t hoop__cuda_stream_write(cudaStream_t s, CUdeviceptr addr,
                                    uint32_t value) {
  CUresult r = write_value((CUstream)s, addr, value,
                           CU_STREAM_WRITE_VALUE_DEFAULT);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}
