/*
 * Elementwise reduction kernels on device memory: the same arithmetic as
 * reduce.h, bit for bit (tests compare the two), run on a CUDA stream.
 * Built only when CMake finds CUDA (HOOP_HAVE_CUDA).
 */
#ifndef HOOP_REDUCE_CUDA_H
#define HOOP_REDUCE_CUDA_H

#include <stddef.h>

#include "hoop.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Enqueues dst[i] = a[i] op b[i], i < count, on `stream` (a cudaStream_t)
 * with the rules of hoop__reduce().  All three pointers are device memory
 * of the current device; dst may equal a or b.  Returns the launch's
 * cudaError_t (0 on success), so that callers report CUDA's own text.
 */
int hoop__cuda_reduce(void *dst, const void *a, const void *b, size_t count,
                      hoop_dtype_t dtype, hoop_op_t op, void *stream);

/* Enqueues buf[i] /= divisor with the rules of hoop__reduce_div(). */
int hoop__cuda_reduce_div(void *buf, size_t count, hoop_dtype_t dtype,
                          int divisor, void *stream);

/*
 * Enqueues dst[i] = src[i] * scalar, i < count, with the rules of
 * hoop__reduce_scale(); dst and src are device memory, dst may equal src.
 * `scalar` points at one element of dtype: in host memory when
 * scalar_on_device is 0, read before this returns (NCCL's
 * ncclScalarHostImmediate); in device memory otherwise, read when the
 * kernel runs, so it must stay valid until then (ncclScalarDevice).
 */
int hoop__cuda_reduce_scale(void *dst, const void *src, size_t count,
                            hoop_dtype_t dtype, const void *scalar,
                            int scalar_on_device, void *stream);

/* The most sources hoop__cuda_reduce_many takes (ranks sharing memory). */
#define HOOP_CUDA_MAX_SOURCES 64

/*
 * Enqueues dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], in
 * that order, and writes the same into dst2 when it is not NULL (a reduced
 * slice kept for the peers to read: reduce and forward in one pass).  The
 * combination runs in the wide type (fp32 for fp16/bf16) and rounds once;
 * AVG divides the sum by nsrc there.  Every pointer is device memory the
 * current device can reach; 1 <= nsrc <= HOOP_CUDA_MAX_SOURCES.
 */
int hoop__cuda_reduce_many(void *dst, void *dst2, const void *const *srcs,
                           int nsrc, size_t count, hoop_dtype_t dtype,
                           hoop_op_t op, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* HOOP_REDUCE_CUDA_H */
