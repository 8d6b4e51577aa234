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
 * HOOP_SUM: the division happens once, in hoop__reduce_div().  F16 and BF16
 * are combined in float and rounded to nearest-even once per element.
 * Integer SUM and PROD wrap modulo 2^bits (no undefined signed overflow).
 * MIN and MAX return NaN when either operand is NaN.
 */
void hoop__reduce(void *dst, const void *a, const void *b, size_t count,
                  hoop_dtype_t dtype, hoop_op_t op);

/* buf[i] = buf[i] / divisor; integer types truncate toward zero. */
void hoop__reduce_div(void *buf, size_t count, hoop_dtype_t dtype,
                      int divisor);

/* IEEE binary16 and bfloat16 conversions, round to nearest even. */
float hoop__f16_to_f32(uint16_t h);
uint16_t hoop__f32_to_f16(float f);
float hoop__bf16_to_f32(uint16_t h);
uint16_t hoop__f32_to_bf16(float f);

#endif /* HOOP_REDUCE_H */
