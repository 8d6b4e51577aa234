/*
 * hoop-bench's data: every rank's input is a function of (rank, index), so
 * any rank can compute what any result element must be without asking the
 * others; the reference below never calls hoop.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bench.h"

/*
 * OCP fp8 with `mbits` mantissa bits and exponent bias `bias`, rounded to
 * nearest (nearbyint's default mode: ties to even).  The bench's values
 * are positive, finite and far below the largest finite value, so there
 * is no NaN, infinity or saturation to handle.  A subnormal's exponent
 * field is 0 but its spacing that of exponent 1, hence the clamp; a count
 * of 2^(mbits+1) carries into the next exponent by itself.
 */
static uint8_t fp8_from(double v, int mbits, int bias) {
  uint8_t sign = v < 0 ? 0x80 : 0;
  double a = fabs(v);
  if (a == 0)
    return sign;
  int e;
  frexp(a, &e); /* a = f * 2^e, 0.5 <= f < 1 */
  int field = e - 1 + bias > 1 ? e - 1 + bias : 1;
  double n = nearbyint(ldexp(a, mbits + bias - field));
  return (uint8_t)(sign | (((field << mbits) + (int)n - (1 << mbits))));
}

static double fp8_to(uint8_t c, int mbits, int bias) {
  int field = (c & 0x7f) >> mbits, m = c & ((1 << mbits) - 1);
  double v = field ? ldexp((1 << mbits) + m, field - bias - mbits)
                   : ldexp(m, 1 - bias - mbits);
  return (c & 0x80) ? -v : v;
}

/* Exact small integers in any dtype; 16-bit floats by truncation. */
void bench_store(void *buf, size_t i, hoop_dtype_t t, double v) {
  float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, 4);
  switch (t) {
  case HOOP_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case HOOP_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case HOOP_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case HOOP_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case HOOP_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case HOOP_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case HOOP_F32: ((float *)buf)[i] = f; break;
  case HOOP_F64: ((double *)buf)[i] = v; break;
  case HOOP_BF16: ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16); break;
  case HOOP_F16: {
    int e = (int)((bits >> 23) & 0xff) - 127 + 15;
    uint16_t h = (uint16_t)((bits >> 16) & 0x8000);
    if (f != 0 && e > 0)
      h |= (uint16_t)((e << 10) | ((bits >> 13) & 0x3ff));
    ((uint16_t *)buf)[i] = h;
    break;
  }
  case HOOP_F8E4M3: ((uint8_t *)buf)[i] = fp8_from(v, 3, 7); break;
  case HOOP_F8E5M2: ((uint8_t *)buf)[i] = fp8_from(v, 2, 15); break;
  default: break;
  }
}

double bench_load(const void *buf, size_t i, hoop_dtype_t t) {
  switch (t) {
  case HOOP_I8: return ((const int8_t *)buf)[i];
  case HOOP_U8: return ((const uint8_t *)buf)[i];
  case HOOP_I32: return ((const int32_t *)buf)[i];
  case HOOP_U32: return ((const uint32_t *)buf)[i];
  case HOOP_I64: return (double)((const int64_t *)buf)[i];
  case HOOP_U64: return (double)((const uint64_t *)buf)[i];
  case HOOP_F32: return ((const float *)buf)[i];
  case HOOP_F64: return ((const double *)buf)[i];
  case HOOP_BF16: {
    uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  case HOOP_F16: {
    uint16_t h = ((const uint16_t *)buf)[i];
    int e = (h >> 10) & 0x1f;
    double m = e ? 1.0 + (h & 0x3ff) / 1024.0 : (h & 0x3ff) / 1024.0;
    double v = ldexp(m, e ? e - 15 : -14);
    return (h & 0x8000) ? -v : v;
  }
  case HOOP_F8E4M3: return fp8_to(((const uint8_t *)buf)[i], 3, 7);
  case HOOP_F8E5M2: return fp8_to(((const uint8_t *)buf)[i], 2, 15);
  default: return 0;
  }
}

/*
 * Reductions get small values (at most 13) so that sums over 8 ranks stay
 * exact even in int8 and bfloat16.  A sum over a whole period of
 * (rank + i) % 3 is the same for every i, which would let a result from
 * the wrong block pass on 3 or 6 ranks; rank 0's extra i % 11 makes
 * neighbouring blocks differ.  Data-movement collectives get values that
 * differ between any two ranks at every index (31 is invertible mod 97),
 * so a block from the wrong rank never passes; 97 is exact in every dtype.
 */
double bench_input(const struct bench_ref *ref, int rank, size_t i) {
  if (ref->reduces)
    return 1.0 + (double)(((size_t)rank + i) % 3) +
           (rank == 0 ? (double)(i % 11) : 0.0);
  return 1.0 + (double)(((size_t)rank * 31 + i) % 97);
}

double bench_reduced(const struct bench_ref *ref, size_t i) {
  double acc = bench_input(ref, 0, i);
  for (int r = 1; r < ref->nranks; r++) {
    double v = bench_input(ref, r, i);
    switch (ref->op) {
    case HOOP_PROD: acc *= v; break;
    case HOOP_MIN: acc = v < acc ? v : acc; break;
    case HOOP_MAX: acc = v > acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  if (ref->op == HOOP_AVG) {
    acc /= ref->nranks;
    /* Integer averages truncate, as hoop's kernels do. */
    if (ref->dtype != HOOP_F32 && ref->dtype != HOOP_F64 &&
        ref->dtype != HOOP_F16 && ref->dtype != HOOP_BF16 &&
        ref->dtype != HOOP_F8E4M3 && ref->dtype != HOOP_F8E5M2)
      acc = trunc(acc);
  }
  return acc;
}

void bench_layout_whole(size_t elems, int rank, int nranks, size_t esz,
                        struct bench_layout *out) {
  *out = (struct bench_layout){.count = elems, .send_elems = elems,
                               .recv_elems = elems, .bytes = elems * esz};
}

double bench_factor_one(int nranks) { return 1.0; }

double bench_factor_spread(int nranks) {
  return (double)(nranks - 1) / nranks;
}

/*
 * N-1 of N blocks go out of each rank: the ring's reduce-scatter and
 * all-gather forward them, all-to-all sends all but its own.  The
 * hierarchical schedules' busiest link is a host's: (M-1)K/M.
 */
double bench_model_spread(hoop_algo_t algo, int nranks, int nhosts,
                          double bytes) {
  if (algo == HOOP_ALGO_HIER)
    return bench_factor_spread(nhosts) * bytes;
  return bench_factor_spread(nranks) * bytes;
}

/*
 * model.c for broadcast and reduce: a chain moves the buffer once per
 * link; a binary tree's inner node sends it to (or receives it from) two
 * children.
 */
double bench_model_chain_or_tree(hoop_algo_t algo, int nranks, int nhosts,
                                 double bytes) {
  if (nranks < 2)
    return 0;
  return algo == HOOP_ALGO_TREE ? 2.0 * bytes : bytes;
}

/* One block per rank: all-gather's and all-to-all's output. */
size_t bench_result_blocks(const struct bench_ref *ref) {
  return ref->count * (size_t)ref->nranks;
}
