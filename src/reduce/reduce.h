/*
 * Elementwise reduction kernels on host memory.  These are the only place
 * that knows how to combine two elements of a dtype; collectives call them
 * on slices as the slices arrive.
 */
#ifndef HOOP_REDUCE_H
#define HOOP_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

/*
 * dst[i] = a[i] op b[i] for i < count.  dst may be the same pointer as a or
 * b (in-place); other overlaps are not allowed.  HOOP_AVG combines like
 * HOOP_SUM: the division happens once, in hoop__reduce_div().  F16, BF16
 * and the fp8 types are combined in float and rounded to nearest-even once
 * per element; fp8 results saturate (see the fp8 conversions below).
 * Integer SUM and PROD wrap modulo 2^bits (no undefined signed overflow).
 * MIN and MAX follow IEEE 754-2019 minimum/maximum: NaN when either operand
 * is NaN, and -0 < +0.  A NaN result is always a quiet NaN (0x7f for
 * fp8).  Each element is one IEEE operation (and one rounding for the
 * narrow floats), so its bits do not depend on how the kernel was
 * compiled or vectorised.  An invalid dtype or op (callers validate them)
 * leaves dst untouched.
 */
void hoop__reduce(void *dst, const void *a, const void *b, size_t count,
                  hoop_dtype_t dtype, hoop_op_t op);

/*
 * buf[i] = buf[i] / divisor, rounded once to the dtype; integer types
 * truncate toward zero, as C division does.  divisor is a rank count: a
 * divisor below 1 (or an invalid dtype) leaves buf untouched.
 */
void hoop__reduce_div(void *buf, size_t count, hoop_dtype_t dtype,
                      int divisor);

/*
 * dst[i] = src[i] * *scalar for i < count, where scalar points at one
 * element of dtype: NCCL's pre-multiplied sum (ncclRedOpCreatePreMulSum)
 * scales each rank's input before it is summed.  Each element rounds
 * and wraps as HOOP_PROD does: once, in float, for the 16- and 8-bit
 * floats; natively for float and double; modulo 2^bits for integers.
 * dst may equal src (the scalar may lie in either); other overlaps are
 * not allowed.  An invalid dtype leaves dst untouched.
 */
void hoop__reduce_scale(void *dst, const void *src, size_t count,
                        hoop_dtype_t dtype, const void *scalar);

/*
 * IEEE binary16 and bfloat16 conversions, round to nearest even, with
 * subnormals, overflow to infinity, and NaNs kept NaN (and quiet).
 */
float hoop__f16_to_f32(uint16_t h);
uint16_t hoop__f32_to_f16(float f);
float hoop__bf16_to_f32(uint16_t h);
uint16_t hoop__f32_to_bf16(float f);

/*
 * OCP fp8 conversions.  Widening is exact (NaN gives a quiet NaN).
 * Narrowing rounds to nearest even with subnormals and saturates: a
 * magnitude past the largest finite value (448 for E4M3, 57344 for E5M2),
 * infinity included, gives that value with its sign, and every NaN gives
 * 0x7f, as CUDA's __NV_SATFINITE conversions do.
 */
float hoop__e4m3_to_f32(uint8_t b);
uint8_t hoop__f32_to_e4m3(float f);
float hoop__e5m2_to_f32(uint8_t b);
uint8_t hoop__f32_to_e5m2(float f);

#endif /* HOOP_REDUCE_H */
