// The OCP 8-bit floats, E4M3 ("fn": no infinities, 448 the largest) and
// E5M2 (IEEE-like, 57344 the largest).  First reference.h's codec, which
// every fp8 test relies on, against values worked out by hand from the
// format and against itself on all 256 codes; then reduce.c's conversions
// and kernels against that reference: every code, every rounding tie,
// saturation, subnormals and NaN.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

extern "C" {
#include "hoop.h"
#include "reduce/reduce.h"
}

#include "reference.h"

using hooptest::fp8_decode;
using hooptest::fp8_encode;
using hooptest::fp8_max_code;

namespace {

const hoop_dtype_t kFp8[] = {HOOP_F8E4M3, HOOP_F8E5M2};

uint32_t Bits(float f)
{
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FloatFromBits(uint32_t u)
{
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

float LibDecode(uint8_t c, hoop_dtype_t t)
{
  return t == HOOP_F8E4M3 ? hoop__e4m3_to_f32(c) : hoop__e5m2_to_f32(c);
}

uint8_t LibEncode(float f, hoop_dtype_t t)
{
  return t == HOOP_F8E4M3 ? hoop__f32_to_e4m3(f) : hoop__f32_to_e5m2(f);
}

const char *Name(hoop_dtype_t t) { return hoop_dtype_name(t); }

// What encoding the value of code c gives back: c, but the one NaN for
// every NaN, and for E5M2's infinities the largest finite code, as
// encoding saturates.
uint8_t RoundTripCode(int c, hoop_dtype_t t)
{
  double v = fp8_decode((uint8_t)c, t);
  return std::isnan(v)   ? 0x7f
         : std::isinf(v) ? (uint8_t)((c & 0x80) | fp8_max_code(t))
                         : (uint8_t)c;
}

// ---- The reference itself -------------------------------------------------

TEST(Fp8Reference, DecodesValuesWorkedOutByHand)
{
  struct {
    hoop_dtype_t t;
    uint8_t code;
    double value;
  } cases[] = {
      // E4M3: s.eeee.mmm, bias 7.
      {HOOP_F8E4M3, 0x00, 0.0},
      {HOOP_F8E4M3, 0x01, 0x1p-9},     // smallest subnormal
      {HOOP_F8E4M3, 0x07, 7 * 0x1p-9}, // largest subnormal
      {HOOP_F8E4M3, 0x08, 0x1p-6},     // smallest normal
      {HOOP_F8E4M3, 0x38, 1.0},
      {HOOP_F8E4M3, 0x39, 1.125},
      {HOOP_F8E4M3, 0x40, 2.0},
      {HOOP_F8E4M3, 0x78, 256.0},      // exponent 15 is still finite
      {HOOP_F8E4M3, 0x7e, 448.0},      // largest finite
      {HOOP_F8E4M3, 0xb8, -1.0},
      {HOOP_F8E4M3, 0xfe, -448.0},
      // E5M2: s.eeeee.mm, bias 15.
      {HOOP_F8E5M2, 0x00, 0.0},
      {HOOP_F8E5M2, 0x01, 0x1p-16},
      {HOOP_F8E5M2, 0x03, 3 * 0x1p-16},
      {HOOP_F8E5M2, 0x04, 0x1p-14},
      {HOOP_F8E5M2, 0x3c, 1.0},
      {HOOP_F8E5M2, 0x3d, 1.25},
      {HOOP_F8E5M2, 0x7b, 57344.0},
      {HOOP_F8E5M2, 0x7c, INFINITY},
      {HOOP_F8E5M2, 0xbc, -1.0},
      {HOOP_F8E5M2, 0xfb, -57344.0},
      {HOOP_F8E5M2, 0xfc, -INFINITY},
  };
  for (const auto &c : cases)
    EXPECT_EQ(c.value, fp8_decode(c.code, c.t))
        << Name(c.t) << " code 0x" << std::hex << +c.code;
  for (hoop_dtype_t t : kFp8) {
    EXPECT_TRUE(std::signbit(fp8_decode(0x80, t))) << Name(t) << " -0";
    int nans = 0;
    for (int c = 0; c < 256; c++)
      nans += std::isnan(fp8_decode((uint8_t)c, t));
    EXPECT_EQ(t == HOOP_F8E4M3 ? 2 : 6, nans) << Name(t);
  }
  EXPECT_TRUE(std::isnan(fp8_decode(0x7f, HOOP_F8E4M3)));
  EXPECT_TRUE(std::isnan(fp8_decode(0xff, HOOP_F8E4M3)));
  for (int c : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff})
    EXPECT_TRUE(std::isnan(fp8_decode((uint8_t)c, HOOP_F8E5M2))) << c;
}

TEST(Fp8Reference, EveryCodeRoundTripsAndMagnitudesGrow)
{
  for (hoop_dtype_t t : kFp8) {
    for (int c = 0; c < 256; c++) {
      double v = fp8_decode((uint8_t)c, t);
      EXPECT_EQ(RoundTripCode(c, t), fp8_encode(v, t))
          << Name(t) << " code 0x" << std::hex << c;
      if (!std::isnan(v)) {
        EXPECT_EQ(-v, fp8_decode((uint8_t)(c ^ 0x80), t)) << c;
      }
    }
    for (int c = 0; c < fp8_max_code(t); c++)
      EXPECT_LT(fp8_decode((uint8_t)c, t), fp8_decode((uint8_t)(c + 1), t))
          << Name(t) << " code " << c;
  }
}

TEST(Fp8Reference, RoundsToNearestEvenAndSaturates)
{
  struct {
    hoop_dtype_t t;
    double in, out;
  } cases[] = {
      // E4M3 has 4 significant bits: [16, 32) is spaced 2 apart.
      {HOOP_F8E4M3, 17, 16},  // tie: 16 has the even mantissa
      {HOOP_F8E4M3, 19, 20},  // tie: 20 has
      {HOOP_F8E4M3, 17.5, 18},
      {HOOP_F8E4M3, -19, -20},
      {HOOP_F8E4M3, 432, 448},  // tie between 416 and 448
      {HOOP_F8E4M3, 464, 448},  // tie with 480, which does not exist
      {HOOP_F8E4M3, 1e9, 448},
      {HOOP_F8E4M3, INFINITY, 448},
      {HOOP_F8E4M3, -INFINITY, -448},
      {HOOP_F8E4M3, 0x1p-10, 0},               // half the smallest: even 0
      {HOOP_F8E4M3, 0x1.8p-10, 0x1p-9},
      {HOOP_F8E4M3, 3 * 0x1p-10, 2 * 0x1p-9},  // 1.5 units: even 2
      {HOOP_F8E4M3, 15 * 0x1p-10, 0x1p-6},     // 7.5 units: normal 2^-6
      // E5M2 has 3: [8, 16) is spaced 2 apart.
      {HOOP_F8E5M2, 9, 8},
      {HOOP_F8E5M2, 11, 12},
      {HOOP_F8E5M2, -11, -12},
      {HOOP_F8E5M2, 61440, 57344},  // IEEE would round to infinity
      {HOOP_F8E5M2, 1e9, 57344},
      {HOOP_F8E5M2, INFINITY, 57344},
      {HOOP_F8E5M2, -INFINITY, -57344},
      {HOOP_F8E5M2, 0x1p-17, 0},
      {HOOP_F8E5M2, 3 * 0x1p-17, 0x1p-15},
  };
  for (const auto &c : cases)
    EXPECT_EQ(c.out, fp8_decode(fp8_encode(c.in, c.t), c.t))
        << Name(c.t) << " " << c.in;
  for (hoop_dtype_t t : kFp8) {
    EXPECT_EQ(0x80, fp8_encode(-1e-30, t)) << Name(t);
    EXPECT_EQ(0x7f, fp8_encode(NAN, t)) << Name(t);
    EXPECT_EQ(0x7f, fp8_encode(-NAN, t)) << Name(t);
  }
}

// ---- reduce.c's conversions ------------------------------------------------

TEST(Fp8Conversion, WideningMatchesReferenceOnEveryCode)
{
  for (hoop_dtype_t t : kFp8) {
    for (int c = 0; c < 256; c++) {
      double want = fp8_decode((uint8_t)c, t);
      float got = LibDecode((uint8_t)c, t);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got) && (Bits(got) & 0x00400000u))
            << Name(t) << " code 0x" << std::hex << c << ": a quiet NaN";
      } else {
        EXPECT_EQ(Bits((float)want), Bits(got))
            << Name(t) << " code 0x" << std::hex << c;
      }
    }
  }
}

void ExpectEncode(float f, hoop_dtype_t t)
{
  EXPECT_EQ(fp8_encode(f, t), LibEncode(f, t))
      << Name(t) << " f=0x" << std::hex << Bits(f) << " (" << f << ")";
}

// Every rounding decision: for each pair of neighbouring codes, both
// values, their midpoint (a tie: exact in float) and the floats either
// side of it; past the largest finite value, the tie with the next binade
// that the format lacks, and beyond.
TEST(Fp8Conversion, NarrowingAroundEveryMidpoint)
{
  for (hoop_dtype_t t : kFp8) {
    for (float sign : {1.0f, -1.0f}) {
      for (int c = 0; c < fp8_max_code(t); c++) {
        float lo = sign * (float)fp8_decode((uint8_t)c, t);
        float hi = sign * (float)fp8_decode((uint8_t)(c + 1), t);
        float mid = (lo + hi) / 2;
        for (float f : {lo, hi, mid, std::nextafter(mid, 0.0f),
                        std::nextafter(mid, 2 * hi)})
          ExpectEncode(f, t);
      }
      double max = fp8_decode(fp8_max_code(t), t);
      double half_ulp = t == HOOP_F8E4M3 ? 16 : 4096;
      float tie = sign * (float)(max + half_ulp);
      for (float f : {tie, std::nextafter(tie, 0.0f),
                      std::nextafter(tie, 2 * tie), 2 * tie,
                      sign * std::numeric_limits<float>::max(),
                      sign * INFINITY}) {
        ExpectEncode(f, t);
        EXPECT_EQ(sign > 0 ? fp8_max_code(t) : 0x80 | fp8_max_code(t),
                  LibEncode(f, t))
            << Name(t) << " " << f << " saturates";
      }
      if (HasFailure())
        return;
    }
  }
}

TEST(Fp8Conversion, NarrowingSpecials)
{
  const uint32_t cases[] = {
      0x00000000, 0x80000000, 0x00000001, 0x80000001,  // f32 subnormals
      0x007fffff, 0x00800000, 0x3a800000, 0x3a800001,  // around 2^-10
      0x37000000, 0x37000001, 0x36ffffff,              // around 2^-17
      0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001,  // NaNs: quiet,
      0x7fbfffff, 0x7f801fff, 0x7fffffff, 0xffffffff,  // signalling, any
  };                                                   // payload, sign
  for (hoop_dtype_t t : kFp8) {
    for (uint32_t u : cases)
      ExpectEncode(FloatFromBits(u), t);
    EXPECT_EQ(0x80, LibEncode(-0x1p-149f, t)) << Name(t);
    EXPECT_EQ(0x7f, LibEncode(FloatFromBits(0xff800001u), t)) << Name(t);
  }
}

TEST(Fp8Conversion, NarrowingRandomSample)
{
  std::mt19937_64 rng(0xf8f8);
  for (int i = 0; i < (1 << 20) && !HasFailure(); i++) {
    uint32_t u = static_cast<uint32_t>(rng());
    // The same mantissa with an exponent in or near fp8's range.
    uint32_t e = 100u + static_cast<uint32_t>(rng() % 48);
    for (hoop_dtype_t t : kFp8) {
      ExpectEncode(FloatFromBits(u), t);
      ExpectEncode(FloatFromBits((u & 0x807fffffu) | (e << 23)), t);
    }
  }
}

TEST(Fp8Conversion, RoundTripKeepsEveryFiniteCode)
{
  for (hoop_dtype_t t : kFp8) {
    for (int c = 0; c < 256; c++) {
      EXPECT_EQ(RoundTripCode(c, t), LibEncode(LibDecode((uint8_t)c, t), t))
          << Name(t) << " code 0x" << std::hex << c;
    }
  }
}

// ---- Rounding of kernel results --------------------------------------------

// The code of v, exact in the type; the encoder saturates infinities, so
// E5M2's are spelt out.
uint8_t Code(double v, hoop_dtype_t t)
{
  if (std::isinf(v))
    return std::signbit(v) ? 0xfc : 0x7c;
  return fp8_encode(v, t);
}

// One element of `op` on the codes of x and y.
double Reduce(hoop_dtype_t t, hoop_op_t op, double x, double y)
{
  uint8_t a = Code(x, t), b = Code(y, t), d = 0x55;
  EXPECT_EQ(x, fp8_decode(a, t)) << "test value " << x << " is not exact";
  EXPECT_EQ(y, fp8_decode(b, t)) << "test value " << y << " is not exact";
  hoop__reduce(&d, &a, &b, 1, t, op);
  return fp8_decode(d, t);
}

TEST(Fp8Rounding, E4M3TiesToEvenAndSaturates)
{
  const hoop_dtype_t t = HOOP_F8E4M3;
  EXPECT_EQ(16, Reduce(t, HOOP_SUM, 16, 1));    // 17: tie, even 16
  EXPECT_EQ(20, Reduce(t, HOOP_SUM, 18, 1));    // 19: tie, even 20
  EXPECT_EQ(18, Reduce(t, HOOP_SUM, 16, 1.5));  // 17.5: not a tie
  EXPECT_EQ(-20, Reduce(t, HOOP_SUM, -18, -1));
  EXPECT_EQ(20, Reduce(t, HOOP_PROD, 3, 7));    // 21: tie, even 20
  EXPECT_EQ(24, Reduce(t, HOOP_PROD, 5, 5));    // 25: tie, even 24
  EXPECT_EQ(20, Reduce(t, HOOP_AVG, 18, 1));    // AVG adds
  // Overflow saturates: E4M3 has no infinity.
  EXPECT_EQ(448, Reduce(t, HOOP_SUM, 448, 16));  // 464: tie
  EXPECT_EQ(448, Reduce(t, HOOP_SUM, 448, 448));
  EXPECT_EQ(-448, Reduce(t, HOOP_SUM, -448, -448));
  EXPECT_EQ(448, Reduce(t, HOOP_PROD, 256, 2));
  EXPECT_EQ(448, Reduce(t, HOOP_PROD, -448, -448));
  // Subnormals are multiples of 2^-9.
  EXPECT_EQ(0, Reduce(t, HOOP_PROD, 0x1p-9, 0.5));  // tie, even 0
  EXPECT_EQ(0x1p-8, Reduce(t, HOOP_PROD, 3 * 0x1p-9, 0.5));
  EXPECT_EQ(0x1p-8, Reduce(t, HOOP_SUM, 0x1p-9, 0x1p-9));
  EXPECT_EQ(0x1p-6, Reduce(t, HOOP_SUM, 7 * 0x1p-9, 0x1p-9));
  EXPECT_EQ(0x1p-9, Reduce(t, HOOP_PROD, 0x1p-6, 0x1p-3));
}

TEST(Fp8Rounding, E5M2TiesToEvenAndSaturates)
{
  const hoop_dtype_t t = HOOP_F8E5M2;
  EXPECT_EQ(8, Reduce(t, HOOP_SUM, 8, 1));
  EXPECT_EQ(12, Reduce(t, HOOP_SUM, 10, 1));
  EXPECT_EQ(-12, Reduce(t, HOOP_SUM, -10, -1));
  EXPECT_EQ(24, Reduce(t, HOOP_PROD, 5, 5));  // 25 is nearer 24 than 28
  EXPECT_EQ(57344, Reduce(t, HOOP_SUM, 57344, 4096));  // the tie with 2^16
  EXPECT_EQ(57344, Reduce(t, HOOP_PROD, 57344, 2));
  EXPECT_EQ(-57344, Reduce(t, HOOP_PROD, 57344, -2));
  // Infinite results saturate too, as cuda_fp8.h's __NV_SATFINITE does.
  EXPECT_EQ(57344, Reduce(t, HOOP_SUM, INFINITY, 1));
  EXPECT_EQ(-57344, Reduce(t, HOOP_MIN, -INFINITY, 1));
  EXPECT_EQ(57344, Reduce(t, HOOP_MAX, INFINITY, 1));
  EXPECT_EQ(0, Reduce(t, HOOP_PROD, 0x1p-16, 0.5));
  EXPECT_EQ(0x1p-15, Reduce(t, HOOP_PROD, 3 * 0x1p-16, 0.5));
}

TEST(Fp8Rounding, NanResultsAreTheOneNan)
{
  for (hoop_dtype_t t : kFp8) {
    for (hoop_op_t op : {HOOP_SUM, HOOP_PROD, HOOP_MIN, HOOP_MAX, HOOP_AVG}) {
      for (int nan_code : {0x7f, 0xff}) {
        uint8_t nan = (uint8_t)nan_code, one = fp8_encode(1.0, t), d = 0;
        hoop__reduce(&d, &nan, &one, 1, t, op);
        EXPECT_EQ(0x7f, d) << Name(t) << " " << hoop_op_name(op);
        hoop__reduce(&d, &one, &nan, 1, t, op);
        EXPECT_EQ(0x7f, d) << Name(t) << " " << hoop_op_name(op);
      }
    }
  }
  // E5M2: infinity minus infinity, and zero times infinity.
  uint8_t inf = 0x7c, minus_inf = 0xfc, zero = 0x00, d = 0;
  hoop__reduce(&d, &inf, &minus_inf, 1, HOOP_F8E5M2, HOOP_SUM);
  EXPECT_EQ(0x7f, d);
  hoop__reduce(&d, &zero, &inf, 1, HOOP_F8E5M2, HOOP_PROD);
  EXPECT_EQ(0x7f, d);
}

}  // namespace
