/*
 * Stream memory operations: the GPU writes a 32-bit counter, or waits until
 * one reaches a value, in stream order, without a kernel and without the
 * host.  The staged device path and the CUDA IPC transport both signal
 * through them.  Found through cudaGetDriverEntryPointByVersion, so the
 * library needs no -lcuda.  Built only with CUDA.
 */
#ifndef HOOP_CORE_CUDA_SYNC_H
#define HOOP_CORE_CUDA_SYNC_H

#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

/* Whether this driver offers them; loads them on first use. */
int hoop__cuda_memops_available(void);

/*
 * Enqueues a wait until the counter at addr reaches value, compared as
 * (int32_t)(*addr - value) >= 0 so that counters may wrap.  The driver's
 * CUresult has no runtime text, so a failure comes back as
 * cudaErrorNotSupported.
 */
cudaError_t hoop__cuda_stream_wait(cudaStream_t s, CUdeviceptr addr,
                                   uint32_t value);

/* Enqueues *addr = value, after the stream's earlier writes are visible. */
cudaError_t hoop__cuda_stream_write(cudaStream_t s, CUdeviceptr addr,
                                    uint32_t value);

/* Host side of the same comparison. */
static inline int hoop__counter_reached(uint32_t counter, uint32_t value) {
  return (int32_t)(counter - value) >= 0;
}

#endif /* HOOP_CORE_CUDA_SYNC_H */
