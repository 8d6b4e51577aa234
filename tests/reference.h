// Independent reference for collective results: seeded inputs that every
// rank can regenerate for every other rank, element access for every
// dtype, and the reduction computed here in plain C++ (not with hoop's
// kernels).  Float inputs are chosen so that any reduction order gives the
// same bits (small integers for sums, powers of two for products), which
// lets results be compared exactly; AVG is compared within one rounding.
// The fp8 formats are decoded and encoded here from their definition.
#ifndef HOOP_TESTS_REFERENCE_H
#define HOOP_TESTS_REFERENCE_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hoop.h"

namespace hooptest {

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline bool is_fp8(hoop_dtype_t t) {
  return t == HOOP_F8E4M3 || t == HOOP_F8E5M2;
}

inline bool is_float(hoop_dtype_t t) {
  return t == HOOP_F16 || t == HOOP_F32 || t == HOOP_F64 || t == HOOP_BF16 ||
         is_fp8(t);
}

// ---- OCP fp8, from the format definition --------------------------------
//
// A code is a sign bit s, an exponent field e (4 bits in E4M3, 5 in E5M2)
// and a mantissa field m (3 or 2 bits), with bias 7 or 15.  e = 0 holds
// the subnormals m * 2^(1 - bias - mbits); other fields hold
// (2^mbits + m) * 2^(e - bias - mbits).  E5M2 keeps IEEE's specials (e all
// ones: infinity if m = 0, else NaN); E4M3 ("fn") has no infinities and
// only s.1111.111 is NaN, so e = 15 holds normal numbers up to 448.

inline int fp8_mbits(hoop_dtype_t t) { return t == HOOP_F8E4M3 ? 3 : 2; }

inline double fp8_decode(uint8_t code, hoop_dtype_t t) {
  int mbits = fp8_mbits(t), ebits = 7 - mbits;
  int bias = (1 << (ebits - 1)) - 1;
  int e = (code >> mbits) & ((1 << ebits) - 1);
  int m = code & ((1 << mbits) - 1);
  double sign = (code & 0x80) ? -1.0 : 1.0;
  bool top = e == (1 << ebits) - 1;
  if (t == HOOP_F8E5M2 && top)
    return m != 0 ? NAN : sign * INFINITY;
  if (t == HOOP_F8E4M3 && top && m == (1 << mbits) - 1)
    return NAN;
  if (e == 0)
    return sign * std::ldexp(m, 1 - bias - mbits);
  return sign * std::ldexp((1 << mbits) + m, e - bias - mbits);
}

// The largest finite code: 0x7e (448) in E4M3, 0x7b (57344) in E5M2.
inline uint8_t fp8_max_code(hoop_dtype_t t) {
  return t == HOOP_F8E4M3 ? 0x7e : 0x7b;
}

// The nearest finite code, ties to the even code (the one whose lowest
// mantissa bit is 0), found by a binary search of the finite magnitudes,
// which grow with the code.  So a magnitude past the largest finite
// value, infinity included, gets that value: the saturating rounding
// hoop promises.  Every NaN gives 0x7f.
inline uint8_t fp8_encode(double v, hoop_dtype_t t) {
  if (std::isnan(v))
    return 0x7f;
  uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  double a = std::fabs(v);
  int top = fp8_max_code(t);
  int lo = 0, hi = top; // the largest code whose magnitude is <= a
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (fp8_decode((uint8_t)mid, t) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo == top || fp8_decode((uint8_t)lo, t) == a)
    return (uint8_t)(sign | lo);
  double below = a - fp8_decode((uint8_t)lo, t);
  double above = fp8_decode((uint8_t)(lo + 1), t) - a;
  if (below != above)
    return (uint8_t)(sign | (below < above ? lo : lo + 1));
  return (uint8_t)(sign | ((lo & 1) ? lo + 1 : lo)); // a tie
}

// Rank r's element i of a test buffer, as raw bits (integers) or a value.
inline uint64_t input_bits(uint64_t seed, int rank, size_t i) {
  return mix(seed ^ mix((uint64_t)rank * 1000003ULL + i));
}

// Products of up to 8 of {-1, 1, 2, 0.5} are exact in every float type
// (2^8 <= 448, 2^-8 is an E4M3 subnormal).  Sums are of integers in
// [-5, 5], but fp8 holds every integer only up to 16 (E4M3) or 8 (E5M2):
// there the inputs are [-2, 2] or [-1, 1], whose sums over up to 8 ranks
// (the most any test runs) stay exact.
inline double input_float(uint64_t seed, hoop_dtype_t t, hoop_op_t op,
                          int rank, size_t i) {
  uint64_t h = input_bits(seed, rank, i);
  if (op == HOOP_PROD) {
    static const double v[] = {-1.0, 1.0, 2.0, 0.5};
    return v[h & 3];
  }
  int half_range = t == HOOP_F8E4M3 ? 2 : t == HOOP_F8E5M2 ? 1 : 5;
  return (double)((int)(h % (2 * half_range + 1)) - half_range);
}

inline uint16_t bf16_from_exact(double v) {
  float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, 4);
  // Round to nearest even: AVG results are not exact in bfloat16.
  bits += 0x7fff + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}

inline double bf16_to_double(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

inline void store_float(void *buf, size_t i, hoop_dtype_t t, double v) {
  switch (t) {
  case HOOP_F16: ((_Float16 *)buf)[i] = (_Float16)v; break;
  case HOOP_F32: ((float *)buf)[i] = (float)v; break;
  case HOOP_F64: ((double *)buf)[i] = v; break;
  case HOOP_BF16: ((uint16_t *)buf)[i] = bf16_from_exact(v); break;
  case HOOP_F8E4M3:
  case HOOP_F8E5M2: ((uint8_t *)buf)[i] = fp8_encode(v, t); break;
  default: break;
  }
}

inline double load_float(const void *buf, size_t i, hoop_dtype_t t) {
  switch (t) {
  case HOOP_F16: return (double)((const _Float16 *)buf)[i];
  case HOOP_F32: return ((const float *)buf)[i];
  case HOOP_F64: return ((const double *)buf)[i];
  case HOOP_BF16: return bf16_to_double(((const uint16_t *)buf)[i]);
  case HOOP_F8E4M3:
  case HOOP_F8E5M2: return fp8_decode(((const uint8_t *)buf)[i], t);
  default: return 0;
  }
}

inline void store_bits(void *buf, size_t i, size_t esz, uint64_t bits) {
  memcpy((char *)buf + i * esz, &bits, esz); // little-endian low bytes
}

inline uint64_t load_bits(const void *buf, size_t i, size_t esz) {
  uint64_t bits = 0;
  memcpy(&bits, (const char *)buf + i * esz, esz);
  return bits;
}

template <typename T> T int_combine(T a, T b, hoop_op_t op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
  case HOOP_SUM:
  case HOOP_AVG: return (T)(U)((U)a + (U)b);
  case HOOP_PROD: return (T)(U)((uint64_t)(U)a * (uint64_t)(U)b);
  case HOOP_MIN: return a < b ? a : b;
  case HOOP_MAX: return a > b ? a : b;
  default: return a;
  }
}

template <typename T>
uint64_t int_reduce(uint64_t seed, hoop_op_t op, int nranks, size_t i) {
  T acc;
  uint64_t b0 = input_bits(seed, 0, i);
  memcpy(&acc, &b0, sizeof acc);
  for (int r = 1; r < nranks; r++) {
    T v;
    uint64_t b = input_bits(seed, r, i);
    memcpy(&v, &b, sizeof v);
    acc = int_combine<T>(acc, v, op);
  }
  if (op == HOOP_AVG)
    acc = (T)(acc / (T)nranks);
  uint64_t out = 0;
  memcpy(&out, &acc, sizeof acc);
  return out;
}

inline uint64_t expected_int(hoop_dtype_t t, uint64_t seed, hoop_op_t op,
                             int nranks, size_t i) {
  switch (t) {
  case HOOP_I8: return int_reduce<int8_t>(seed, op, nranks, i);
  case HOOP_U8: return int_reduce<uint8_t>(seed, op, nranks, i);
  case HOOP_I32: return int_reduce<int32_t>(seed, op, nranks, i);
  case HOOP_U32: return int_reduce<uint32_t>(seed, op, nranks, i);
  case HOOP_I64: return int_reduce<int64_t>(seed, op, nranks, i);
  case HOOP_U64: return int_reduce<uint64_t>(seed, op, nranks, i);
  default: return 0;
  }
}

inline double expected_float(uint64_t seed, hoop_dtype_t t, hoop_op_t op,
                             int nranks, size_t i) {
  double acc = input_float(seed, t, op, 0, i);
  for (int r = 1; r < nranks; r++) {
    double v = input_float(seed, t, op, r, i);
    switch (op) {
    case HOOP_PROD: acc *= v; break;
    case HOOP_MIN: acc = std::fmin(acc, v); break;
    case HOOP_MAX: acc = std::fmax(acc, v); break;
    default: acc += v; break;
    }
  }
  return op == HOOP_AVG ? acc / nranks : acc;
}

// Fills rank `rank`'s input for elements [first, first + n) of the global
// index space into buf[0..n).
inline void fill_input(void *buf, hoop_dtype_t t, hoop_op_t op, uint64_t seed,
                       int rank, size_t first, size_t n) {
  size_t esz = hoop_dtype_size(t);
  for (size_t k = 0; k < n; k++) {
    size_t i = first + k;
    if (is_float(t))
      store_float(buf, k, t, input_float(seed, t, op, rank, i));
    else
      store_bits(buf, k, esz, input_bits(seed, rank, i));
  }
}

// AVG divides once, so the result may differ from the reference by one
// rounding of the type (half an ulp: 2^-4 of the value in E4M3, 2^-3 in
// E5M2, whose averages here are never subnormal); every other op is exact.
inline double tolerance(hoop_dtype_t t, hoop_op_t op, double want) {
  if (op != HOOP_AVG)
    return 0;
  double rel = t == HOOP_F16 ? 1e-3 : t == HOOP_BF16 ? 8e-3
             : t == HOOP_F8E4M3 ? 0.0625 : t == HOOP_F8E5M2 ? 0.125
             : t == HOOP_F32 ? 1e-6 : 1e-14;
  return std::fabs(want) * rel;
}

// Counts elements of buf[0..n) (global index first + k) that differ from
// the reduction over nranks; when gather is set, element k instead holds
// block owner's input unreduced.
inline size_t count_wrong(const void *buf, hoop_dtype_t t, hoop_op_t op,
                          uint64_t seed, int nranks, size_t first, size_t n,
                          int gather_block = 0, int owner = -1,
                          size_t *first_bad = nullptr) {
  size_t esz = hoop_dtype_size(t), wrong = 0;
  for (size_t k = 0; k < n; k++) {
    size_t i = first + k;
    bool ok;
    if (is_float(t)) {
      double want = gather_block ? input_float(seed, t, op, owner, i)
                                 : expected_float(seed, t, op, nranks, i);
      if (gather_block || op != HOOP_AVG) {
        // Round the reference through the dtype: inputs are exact in it.
        std::vector<char> tmp(8);
        store_float(tmp.data(), 0, t, want);
        want = load_float(tmp.data(), 0, t);
      }
      double got = load_float(buf, k, t);
      ok = std::fabs(got - want) <= tolerance(t, op, want);
    } else {
      uint64_t want = gather_block ? input_bits(seed, owner, i)
                                   : expected_int(t, seed, op, nranks, i);
      uint64_t mask = esz == 8 ? ~0ULL : ((1ULL << (esz * 8)) - 1);
      ok = (load_bits(buf, k, esz) & mask) == (want & mask);
    }
    if (!ok && wrong++ == 0 && first_bad != nullptr)
      *first_bad = k;
  }
  return wrong;
}

} // namespace hooptest

#endif // HOOP_TESTS_REFERENCE_H
