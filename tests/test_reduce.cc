// Tests of the host reduction kernels (src/reduce/reduce.c).
//
// Every expected value comes from an implementation independent of the
// library: plain C++ integer arithmetic through __int128, the host's float
// and double arithmetic, the compiler's _Float16 for fp16, a bfloat16
// reference written here from the format's definition, and reference.h's
// fp8 codec (tested in test_fp8.cc).  Comparisons are bit-for-bit, except
// that any NaN matches any NaN in the types that have more than one.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

// reduce.h is a C header without C++ linkage guards.
extern "C" {
#include "hoop.h"
#include "reduce/reduce.h"
}

#include "reference.h"

namespace {

// ---- Bit helpers --------------------------------------------------------

template <typename To, typename From>
To BitCast(From from)
{
  static_assert(sizeof(To) == sizeof(From), "size mismatch");
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

uint32_t Bits(float f) { return BitCast<uint32_t>(f); }
uint64_t Bits(double d) { return BitCast<uint64_t>(d); }
float FloatFromBits(uint32_t u) { return BitCast<float>(u); }
double DoubleFromBits(uint64_t u) { return BitCast<double>(u); }
_Float16 HalfFromBits(uint16_t u) { return BitCast<_Float16>(u); }
uint16_t Bits(_Float16 h) { return BitCast<uint16_t>(h); }

bool IsHalfNan(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
bool IsBf16Nan(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

// Quiet NaNs have the top mantissa bit set, in every one of these formats.
bool IsQuietNanF32(float f) { return std::isnan(f) && (Bits(f) & 0x00400000u); }
bool IsQuietNanF64(double d)
{
  return std::isnan(d) && (Bits(d) & 0x0008000000000000ull);
}
bool IsQuietNanHalf(uint16_t h) { return IsHalfNan(h) && (h & 0x0200u); }
bool IsQuietNanBf16(uint16_t h) { return IsBf16Nan(h) && (h & 0x0040u); }

std::string Hex(const uint8_t *p, size_t n)
{
  static const char digits[] = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = n; i-- > 0;) {  // little-endian: print high byte first
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// ---- bfloat16 reference -------------------------------------------------

// A bfloat16 is the upper half of a float.
float RefBf16ToF32(uint16_t h) { return FloatFromBits(uint32_t{h} << 16); }

// Rounds to nearest even by comparing the distances to the two bfloat16
// neighbours, in double, where both differences are exact.  Past the
// largest finite bfloat16 the upper neighbour is infinity, which for
// rounding purposes sits where the next binade would start (2^128).
uint16_t RefF32ToBf16(float f)
{
  if (std::isnan(f))
    return std::signbit(f) ? 0xffc0 : 0x7fc0;
  uint32_t x = Bits(f);
  uint16_t lo = static_cast<uint16_t>(x >> 16);  // truncated toward zero
  if ((x & 0xffffu) == 0)
    return lo;
  uint16_t hi = static_cast<uint16_t>(lo + 1);  // next larger magnitude
  double v = std::fabs(static_cast<double>(f));
  double vlo = std::fabs(static_cast<double>(RefBf16ToF32(lo)));
  double vhi = (hi & 0x7fffu) == 0x7f80u
                   ? std::ldexp(1.0, 128)
                   : std::fabs(static_cast<double>(RefBf16ToF32(hi)));
  double dlo = v - vlo;
  double dhi = vhi - v;
  if (dlo < dhi)
    return lo;
  if (dhi < dlo)
    return hi;
  return (lo & 1u) ? hi : lo;
}

// ---- Dtypes and ops ------------------------------------------------------

struct DtypeInfo {
  hoop_dtype_t dtype;
  const char *name;
  size_t size;
};

const DtypeInfo kDtypes[] = {
    {HOOP_I8, "I8", 1},   {HOOP_U8, "U8", 1},     {HOOP_I32, "I32", 4},
    {HOOP_U32, "U32", 4}, {HOOP_I64, "I64", 8},   {HOOP_U64, "U64", 8},
    {HOOP_F16, "F16", 2}, {HOOP_F32, "F32", 4},   {HOOP_F64, "F64", 8},
    {HOOP_BF16, "BF16", 2}, {HOOP_F8E4M3, "F8E4M3", 1},
    {HOOP_F8E5M2, "F8E5M2", 1},
};

const DtypeInfo &Info(hoop_dtype_t dtype)
{
  for (const DtypeInfo &d : kDtypes)
    if (d.dtype == dtype)
      return d;
  ADD_FAILURE() << "unknown dtype " << dtype;
  return kDtypes[0];
}

const char *OpName(hoop_op_t op)
{
  switch (op) {
  case HOOP_SUM: return "SUM";
  case HOOP_PROD: return "PROD";
  case HOOP_MIN: return "MIN";
  case HOOP_MAX: return "MAX";
  case HOOP_AVG: return "AVG";
  default: return "BAD";
  }
}

const hoop_op_t kOps[] = {HOOP_SUM, HOOP_PROD, HOOP_MIN, HOOP_MAX, HOOP_AVG};

template <typename T>
T Load(const uint8_t *p)
{
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void Store(uint8_t *p, T v)
{
  std::memcpy(p, &v, sizeof v);
}

// ---- Reference combine ---------------------------------------------------

// Integer SUM and PROD are taken modulo 2^128, which is also exact
// modulo 2^bits of T, then reduced through the unsigned type of T's width.
using U128 = unsigned __int128;

template <typename T>
T Wrap(U128 v)
{
  using U = typename std::make_unsigned<T>::type;
  return static_cast<T>(static_cast<U>(v));
}

template <typename T>
T RefInt(hoop_op_t op, T x, T y)
{
  switch (op) {
  case HOOP_SUM:
  case HOOP_AVG: return Wrap<T>(static_cast<U128>(x) + static_cast<U128>(y));
  case HOOP_PROD:
    return Wrap<T>(static_cast<U128>(x) * static_cast<U128>(y));
  case HOOP_MIN: return x < y ? x : y;
  case HOOP_MAX: return x < y ? y : x;
  default: return 0;
  }
}

// IEEE 754-2019 minimum / maximum: NaN if either is NaN, and -0 < +0.
template <typename F>
F RefMin(F x, F y)
{
  if (x != x)
    return x;
  if (y != y)
    return y;
  if (x == y)
    return std::signbit(static_cast<double>(x)) ? x : y;
  return x < y ? x : y;
}

template <typename F>
F RefMax(F x, F y)
{
  if (x != x)
    return x;
  if (y != y)
    return y;
  if (x == y)
    return std::signbit(static_cast<double>(x)) ? y : x;
  return x > y ? x : y;
}

// F is float, double or _Float16; arithmetic is the compiler's, in F.
template <typename F>
F RefFloat(hoop_op_t op, F x, F y)
{
  switch (op) {
  case HOOP_SUM:
  case HOOP_AVG: return static_cast<F>(x + y);
  case HOOP_PROD: return static_cast<F>(x * y);
  case HOOP_MIN: return RefMin(x, y);
  case HOOP_MAX: return RefMax(x, y);
  default: return F(0);
  }
}

void RefCombine(hoop_dtype_t dtype, hoop_op_t op, const uint8_t *x,
                const uint8_t *y, uint8_t *out)
{
  switch (dtype) {
  case HOOP_I8:
    Store(out, RefInt(op, Load<int8_t>(x), Load<int8_t>(y)));
    break;
  case HOOP_U8:
    Store(out, RefInt(op, Load<uint8_t>(x), Load<uint8_t>(y)));
    break;
  case HOOP_I32:
    Store(out, RefInt(op, Load<int32_t>(x), Load<int32_t>(y)));
    break;
  case HOOP_U32:
    Store(out, RefInt(op, Load<uint32_t>(x), Load<uint32_t>(y)));
    break;
  case HOOP_I64:
    Store(out, RefInt(op, Load<int64_t>(x), Load<int64_t>(y)));
    break;
  case HOOP_U64:
    Store(out, RefInt(op, Load<uint64_t>(x), Load<uint64_t>(y)));
    break;
  case HOOP_F32:
    Store(out, RefFloat(op, Load<float>(x), Load<float>(y)));
    break;
  case HOOP_F64:
    Store(out, RefFloat(op, Load<double>(x), Load<double>(y)));
    break;
  case HOOP_F16:
    Store(out, RefFloat(op, Load<_Float16>(x), Load<_Float16>(y)));
    break;
  case HOOP_BF16: {
    // One float operation, then one rounding: since float carries more
    // than 2 * 8 + 2 bits, this equals rounding the exact result once.
    float r = RefFloat(op, RefBf16ToF32(Load<uint16_t>(x)),
                       RefBf16ToF32(Load<uint16_t>(y)));
    Store(out, RefF32ToBf16(r));
    break;
  }
  case HOOP_F8E4M3:
  case HOOP_F8E5M2: {
    // Sums and products of two fp8 values are exact in double, so this
    // rounds the exact result once.
    double r = RefFloat(op, hooptest::fp8_decode(Load<uint8_t>(x), dtype),
                        hooptest::fp8_decode(Load<uint8_t>(y), dtype));
    Store(out, hooptest::fp8_encode(r, dtype));
    break;
  }
  default:
    break;
  }
}

bool SameValue(hoop_dtype_t dtype, const uint8_t *x, const uint8_t *y)
{
  switch (dtype) {
  case HOOP_F32:
    if (std::isnan(Load<float>(x)) && std::isnan(Load<float>(y)))
      return true;
    break;
  case HOOP_F64:
    if (std::isnan(Load<double>(x)) && std::isnan(Load<double>(y)))
      return true;
    break;
  case HOOP_F16:
    if (IsHalfNan(Load<uint16_t>(x)) && IsHalfNan(Load<uint16_t>(y)))
      return true;
    break;
  case HOOP_BF16:
    if (IsBf16Nan(Load<uint16_t>(x)) && IsBf16Nan(Load<uint16_t>(y)))
      return true;
    break;
  default:
    break;
  }
  return std::memcmp(x, y, Info(dtype).size) == 0;
}

// ---- Random inputs -------------------------------------------------------

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}

  uint64_t Bits64() { return rng_(); }
  unsigned Below(unsigned n) { return static_cast<unsigned>(rng_() % n); }

  // Moderate float: a few significant bits of magnitude either side of 1,
  // so that sums and products round rather than saturate.
  float Moderate()
  {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    return std::ldexp(u(rng_), static_cast<int>(Below(21)) - 10);
  }

  // One element of `dtype` into out: a mix of specials, raw bit patterns
  // (every class of value, NaNs and subnormals included) and moderate
  // values.
  void Element(hoop_dtype_t dtype, uint8_t *out)
  {
    unsigned kind = Below(16);
    switch (dtype) {
    case HOOP_I8:
    case HOOP_U8:
    case HOOP_I32:
    case HOOP_U32:
    case HOOP_I64:
    case HOOP_U64: {
      // Little-endian: the low bytes of v are the narrower integer.
      unsigned bits = static_cast<unsigned>(Info(dtype).size * 8);
      uint64_t v = Bits64();
      if (kind == 0)  // all ones (-1 or UMAX) or the signed maximum
        v = (~uint64_t{0} >> (64 - bits)) >> Below(2);
      else if (kind == 1)  // a power of two; the top one is INT_MIN
        v = uint64_t{1} << Below(bits);
      else if (kind < 8)  // small magnitudes, either sign
        v = static_cast<uint64_t>(static_cast<int64_t>(Below(21)) - 10);
      std::memcpy(out, &v, Info(dtype).size);
      break;
    }
    case HOOP_F32: {
      static const uint32_t specials[] = {
          0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000,
          0xff800000, 0x7fc00000, 0x7f800001, 0xffc00000, 0x7f7fffff,
          0xff7fffff, 0x00800000, 0x00000001, 0x807fffff};
      float f;
      if (kind < 2)
        f = FloatFromBits(specials[Below(std::size(specials))]);
      else if (kind < 6)
        f = FloatFromBits(static_cast<uint32_t>(Bits64()));
      else
        f = Moderate();
      Store(out, f);
      break;
    }
    case HOOP_F64: {
      static const uint64_t specials[] = {
          0x0000000000000000, 0x8000000000000000, 0x3ff0000000000000,
          0xbff0000000000000, 0x7ff0000000000000, 0xfff0000000000000,
          0x7ff8000000000000, 0x7ff0000000000001, 0xfff8000000000000,
          0x7fefffffffffffff, 0xffefffffffffffff, 0x0010000000000000,
          0x0000000000000001};
      double d;
      if (kind < 2)
        d = DoubleFromBits(specials[Below(std::size(specials))]);
      else if (kind < 6)
        d = DoubleFromBits(Bits64());
      else
        d = static_cast<double>(Moderate()) + std::ldexp(Moderate(), -30);
      Store(out, d);
      break;
    }
    case HOOP_F16: {
      static const uint16_t specials[] = {
          0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
          0xfe00, 0x7bff, 0xfbff, 0x0001, 0x8001, 0x0400, 0x03ff};
      uint16_t h;
      if (kind < 2)
        h = specials[Below(std::size(specials))];
      else if (kind < 6)
        h = static_cast<uint16_t>(Bits64());
      else
        h = Bits(static_cast<_Float16>(Moderate()));
      Store(out, h);
      break;
    }
    case HOOP_BF16: {
      static const uint16_t specials[] = {
          0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0, 0x7f81,
          0xffc0, 0x7f7f, 0xff7f, 0x0001, 0x8001, 0x0080, 0x007f};
      uint16_t h;
      if (kind < 2)
        h = specials[Below(std::size(specials))];
      else if (kind < 6)
        h = static_cast<uint16_t>(Bits64());
      else
        h = static_cast<uint16_t>(Bits(Moderate()) >> 16);
      Store(out, h);
      break;
    }
    case HOOP_F8E4M3:
    case HOOP_F8E5M2: {
      // Zeros, ones, the largest finite, the smallest subnormal, E5M2's
      // infinities and the NaNs.
      static const uint8_t specials[] = {0x00, 0x80, 0x7f, 0xff, 0x01,
                                         0x81, 0x7e, 0xfe, 0x7b, 0xfb,
                                         0x7c, 0xfc, 0x38, 0x3c, 0x7d};
      uint8_t c;
      if (kind < 2)
        c = specials[Below(std::size(specials))];
      else if (kind < 8)
        c = static_cast<uint8_t>(Bits64());
      else  // sums and products of these stay mostly in range
        c = hooptest::fp8_encode(std::ldexp(Moderate(), -2), dtype);
      Store(out, c);
      break;
    }
    default:
      break;
    }
  }

  // Fills a and b with count elements each.  Some b elements copy a's, or
  // a's with the sign flipped, so that MIN/MAX see ties (signed zeros
  // among them) and SUM sees exact cancellation.
  void Pair(hoop_dtype_t dtype, size_t count, std::vector<uint8_t> *a,
            std::vector<uint8_t> *b)
  {
    size_t es = Info(dtype).size;
    a->assign(count * es, 0);
    b->assign(count * es, 0);
    for (size_t i = 0; i < count; i++) {
      uint8_t *pa = a->data() + i * es;
      uint8_t *pb = b->data() + i * es;
      Element(dtype, pa);
      unsigned kind = Below(16);
      if (kind == 0) {
        std::memcpy(pb, pa, es);
      } else if (kind == 1) {
        std::memcpy(pb, pa, es);
        pb[es - 1] ^= 0x80;  // the sign bit of every format here
      } else {
        Element(dtype, pb);
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

// ---- Buffers with guard zones --------------------------------------------

// An element buffer with kGuard elements of a known pattern either side,
// starting `skew` elements into the allocation so that the kernels see
// pointers that are not vector-aligned, and not aligned to each other.
class Guarded {
 public:
  static constexpr size_t kGuard = 16;
  static constexpr uint8_t kPattern = 0xa5;

  Guarded(size_t count, size_t es, size_t skew)
      : es_(es), count_(count), skew_(skew),
        mem_((count + 2 * kGuard + skew) * es, kPattern)
  {
  }

  uint8_t *data() { return mem_.data() + (kGuard + skew_) * es_; }

  void Set(const std::vector<uint8_t> &v)
  {
    std::copy(v.begin(), v.end(), data());
  }

  bool Holds(const std::vector<uint8_t> &v)
  {
    return std::equal(v.begin(), v.end(), data());
  }

  bool GuardsIntact() const
  {
    size_t lo = (kGuard + skew_) * es_;
    size_t hi = lo + count_ * es_;
    for (size_t i = 0; i < mem_.size(); i++)
      if ((i < lo || i >= hi) && mem_[i] != kPattern)
        return false;
    return true;
  }

 private:
  size_t es_;
  size_t count_;
  size_t skew_;
  std::vector<uint8_t> mem_;
};

::testing::AssertionResult Matches(hoop_dtype_t dtype, const uint8_t *got,
                                   const std::vector<uint8_t> &want,
                                   const std::vector<uint8_t> &a,
                                   const std::vector<uint8_t> &b)
{
  size_t es = Info(dtype).size;
  size_t count = want.size() / es;
  for (size_t i = 0; i < count; i++) {
    if (!SameValue(dtype, got + i * es, want.data() + i * es)) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << count
             << ": a=" << Hex(&a[i * es], es) << " b=" << Hex(&b[i * es], es)
             << " got=" << Hex(got + i * es, es)
             << " want=" << Hex(&want[i * es], es);
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- Every dtype x every op ---------------------------------------------

class ReduceTest
    : public ::testing::TestWithParam<std::tuple<hoop_dtype_t, hoop_op_t>> {};

TEST_P(ReduceTest, MatchesReference)
{
  const hoop_dtype_t dtype = std::get<0>(GetParam());
  const hoop_op_t op = std::get<1>(GetParam());
  const size_t es = Info(dtype).size;
  Gen gen(0x5eed0000u + 16u * dtype + op);

  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000},
                       size_t{4099}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    std::vector<uint8_t> a, b;
    gen.Pair(dtype, count, &a, &b);
    std::vector<uint8_t> want(count * es);
    for (size_t i = 0; i < count; i++)
      RefCombine(dtype, op, &a[i * es], &b[i * es], &want[i * es]);

    {
      SCOPED_TRACE("out of place");
      Guarded ga(count, es, 1), gb(count, es, 0), gd(count, es, 3);
      ga.Set(a);
      gb.Set(b);
      hoop__reduce(gd.data(), ga.data(), gb.data(), count, dtype, op);
      EXPECT_TRUE(Matches(dtype, gd.data(), want, a, b));
      EXPECT_TRUE(gd.GuardsIntact());
      EXPECT_TRUE(ga.Holds(a)) << "input a modified";
      EXPECT_TRUE(gb.Holds(b)) << "input b modified";
    }
    {
      SCOPED_TRACE("dst == a");
      Guarded ga(count, es, 1), gb(count, es, 2);
      ga.Set(a);
      gb.Set(b);
      hoop__reduce(ga.data(), ga.data(), gb.data(), count, dtype, op);
      EXPECT_TRUE(Matches(dtype, ga.data(), want, a, b));
      EXPECT_TRUE(ga.GuardsIntact());
    }
    {
      SCOPED_TRACE("dst == b");
      Guarded ga(count, es, 0), gb(count, es, 1);
      ga.Set(a);
      gb.Set(b);
      hoop__reduce(gb.data(), ga.data(), gb.data(), count, dtype, op);
      EXPECT_TRUE(Matches(dtype, gb.data(), want, a, b));
      EXPECT_TRUE(gb.GuardsIntact());
    }
  }
}

std::vector<std::tuple<hoop_dtype_t, hoop_op_t>> AllDtypeOps()
{
  std::vector<std::tuple<hoop_dtype_t, hoop_op_t>> v;
  for (const DtypeInfo &d : kDtypes)
    for (hoop_op_t op : kOps)
      v.emplace_back(d.dtype, op);
  return v;
}

// Names the cases F16_SUM, I8_MAX, ...  (A named function, not a lambda:
// the macro's own parameter is called `info`, and -Wshadow objects.)
std::string DtypeOpName(
    const ::testing::TestParamInfo<ReduceTest::ParamType> &param)
{
  return std::string(Info(std::get<0>(param.param)).name) + "_" +
         OpName(std::get<1>(param.param));
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAllOps, ReduceTest,
                         ::testing::ValuesIn(AllDtypeOps()), DtypeOpName);

// ---- fp16 conversions against _Float16 -----------------------------------

TEST(Fp16Conversion, ToF32AllBitPatterns)
{
  for (uint32_t i = 0; i < 0x10000u; i++) {
    uint16_t h = static_cast<uint16_t>(i);
    float want = static_cast<float>(HalfFromBits(h));
    float got = hoop__f16_to_f32(h);
    if (IsHalfNan(h)) {
      ASSERT_TRUE(IsQuietNanF32(got)) << "h=" << std::hex << h;
      ASSERT_TRUE(std::isnan(want));
    } else {
      ASSERT_EQ(Bits(want), Bits(got)) << "h=" << std::hex << h;
    }
  }
}

void ExpectF32ToF16(float f)
{
  uint16_t want = Bits(static_cast<_Float16>(f));
  uint16_t got = hoop__f32_to_f16(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(IsQuietNanHalf(got))
        << "f=0x" << std::hex << Bits(f) << " got=0x" << got;
    EXPECT_EQ(got & 0x8000u, (Bits(f) >> 16) & 0x8000u) << "NaN sign";
  } else {
    EXPECT_EQ(want, got) << "f=0x" << std::hex << Bits(f) << " (" << f
                         << ")";
  }
}

// Every rounding decision: for each pair of adjacent fp16 values, the
// float at their midpoint (a tie) and the floats just either side of it.
TEST(Fp16Conversion, FromF32AroundEveryMidpoint)
{
  for (uint32_t i = 0; i < 0x7c00u; i++) {  // finite, non-negative
    for (uint32_t sign : {0u, 0x8000u}) {
      float lo =
          static_cast<float>(HalfFromBits(static_cast<uint16_t>(i | sign)));
      // The next fp16 up is +inf for i = 0x7bff: use 2^16 instead, where
      // the midpoint decides overflow.
      float hi = i + 1 == 0x7c00u
                     ? std::copysign(65536.0f, lo)
                     : static_cast<float>(
                           HalfFromBits(static_cast<uint16_t>((i + 1) | sign)));
      float mid = (lo + hi) / 2;  // exact: fp16 has 11 significant bits
      ExpectF32ToF16(lo);
      ExpectF32ToF16(mid);
      ExpectF32ToF16(std::nextafter(mid, 0.0f));
      ExpectF32ToF16(std::nextafter(mid, std::copysign(INFINITY, mid)));
      if (HasFailure())
        return;
    }
  }
}

TEST(Fp16Conversion, FromF32Specials)
{
  const uint32_t cases[] = {
      0x00000000, 0x80000000, 0x00000001, 0x80000001,  // f32 subnormals
      0x007fffff, 0x00800000, 0x33000000, 0x33000001,  // around 2^-25
      0x33800000, 0x387fc000, 0x387fe000, 0x387fffff,  // fp16 subnormal top
      0x38800000, 0x477fe000, 0x477fefff, 0x477ff000,  // 65504 .. 65520
      0x477fffff, 0x47800000, 0x7f7fffff, 0x7f800000,  // overflow, inf
      0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,  // NaNs, including
      0x7f801fff, 0xff800001, 0x7fbfffff, 0x7fffe000,  // low-payload ones
  };
  for (uint32_t u : cases)
    ExpectF32ToF16(FloatFromBits(u));
}

TEST(Fp16Conversion, FromF32RandomSample)
{
  std::mt19937_64 rng(0xf16f16);
  for (int i = 0; i < (1 << 21); i++) {
    uint32_t u = static_cast<uint32_t>(rng());
    ExpectF32ToF16(FloatFromBits(u));
    // The same mantissa with an exponent in or near fp16's range.
    uint32_t e = 98u + static_cast<uint32_t>(rng() % 48);
    ExpectF32ToF16(FloatFromBits((u & 0x807fffffu) | (e << 23)));
    if (HasFailure())
      return;
  }
}

TEST(Fp16Conversion, RoundTripIsIdentity)
{
  for (uint32_t i = 0; i < 0x10000u; i++) {
    uint16_t h = static_cast<uint16_t>(i);
    uint16_t back = hoop__f32_to_f16(hoop__f16_to_f32(h));
    if (IsHalfNan(h))
      ASSERT_TRUE(IsQuietNanHalf(back)) << std::hex << h;
    else
      ASSERT_EQ(h, back) << std::hex << h;
  }
}

// ---- bf16 conversions against the reference ------------------------------

TEST(Bf16Conversion, ToF32AllBitPatterns)
{
  for (uint32_t i = 0; i < 0x10000u; i++) {
    uint16_t h = static_cast<uint16_t>(i);
    float want = RefBf16ToF32(h);
    float got = hoop__bf16_to_f32(h);
    if (IsBf16Nan(h))
      ASSERT_TRUE(IsQuietNanF32(got)) << "h=" << std::hex << h;
    else
      ASSERT_EQ(Bits(want), Bits(got)) << "h=" << std::hex << h;
  }
}

void ExpectF32ToBf16(float f)
{
  uint16_t got = hoop__f32_to_bf16(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(IsQuietNanBf16(got))
        << "f=0x" << std::hex << Bits(f) << " got=0x" << got;
    EXPECT_EQ(got & 0x8000u, (Bits(f) >> 16) & 0x8000u) << "NaN sign";
  } else {
    EXPECT_EQ(RefF32ToBf16(f), got)
        << "f=0x" << std::hex << Bits(f) << " (" << f << ")";
  }
}

TEST(Bf16Conversion, FromF32AroundEveryMidpoint)
{
  for (uint32_t i = 0; i < 0x7f80u; i++) {
    for (uint32_t sign : {0u, 0x8000u}) {
      uint32_t lo = (i | sign) << 16;
      uint32_t mid = lo | 0x8000u;  // halfway to the next bf16
      for (uint32_t u : {lo, lo | 1u, mid - 1, mid, mid + 1, lo | 0xffffu})
        ExpectF32ToBf16(FloatFromBits(u));
      if (HasFailure())
        return;
    }
  }
}

TEST(Bf16Conversion, FromF32SpecialsAndRandom)
{
  const uint32_t cases[] = {
      0x00000000, 0x80000000, 0x00000001, 0x00008000, 0x00018000,
      0x007fffff, 0x00800000, 0x7f7f7fff, 0x7f7f8000, 0x7f7fffff,
      0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
      0x7f800001, 0x7f80ffff, 0xff800001, 0x7fbfffff, 0x7fff8000,
  };
  for (uint32_t u : cases)
    ExpectF32ToBf16(FloatFromBits(u));
  std::mt19937_64 rng(0xbf16bf16);
  for (int i = 0; i < (1 << 21) && !HasFailure(); i++)
    ExpectF32ToBf16(FloatFromBits(static_cast<uint32_t>(rng())));
}

// ---- Rounding of results -------------------------------------------------

uint16_t ReduceHalfBits(hoop_dtype_t dtype, hoop_op_t op, uint16_t x,
                        uint16_t y)
{
  uint16_t d = 0xdead;
  hoop__reduce(&d, &x, &y, 1, dtype, op);
  return d;
}

float ReduceF16(hoop_op_t op, float x, float y)
{
  uint16_t hx = Bits(static_cast<_Float16>(x));
  uint16_t hy = Bits(static_cast<_Float16>(y));
  // The test values must be exact in fp16 for the case to mean anything.
  EXPECT_EQ(x, static_cast<float>(HalfFromBits(hx)));
  EXPECT_EQ(y, static_cast<float>(HalfFromBits(hy)));
  return static_cast<float>(HalfFromBits(ReduceHalfBits(HOOP_F16, op, hx, hy)));
}

TEST(Rounding, F16TiesToEven)
{
  // [2048, 4096) is spaced 2 apart: odd integers are ties.
  EXPECT_EQ(2048.0f, ReduceF16(HOOP_SUM, 2048, 1));  // 2049 -> even 2048
  EXPECT_EQ(2052.0f, ReduceF16(HOOP_SUM, 2050, 1));  // 2051 -> even 2052
  EXPECT_EQ(2052.0f, ReduceF16(HOOP_SUM, 2048, 3));  // 2051 -> 2052
  EXPECT_EQ(-2048.0f, ReduceF16(HOOP_SUM, -2048, -1));
  EXPECT_EQ(2050.0f, ReduceF16(HOOP_SUM, 2048, 1.5f));  // not a tie: up
  EXPECT_EQ(2048.0f, ReduceF16(HOOP_SUM, 2048, 0.5f));  // not a tie: down
  EXPECT_EQ(1.0f, ReduceF16(HOOP_SUM, 1, 0x1p-11f));
  EXPECT_EQ(1.0f + 0x1p-9f, ReduceF16(HOOP_SUM, 1 + 0x1p-10f, 0x1p-11f));
  // 45 * 47 = 2115, a tie between 2114 and 2116: 2116 has the even
  // mantissa.
  EXPECT_EQ(2116.0f, ReduceF16(HOOP_PROD, 45, 47));
  EXPECT_EQ(2116.0f, ReduceF16(HOOP_AVG, 1116, 999));  // AVG adds
  // Overflow: 65504 is the largest finite; 65520 is the tie with 2^16.
  EXPECT_EQ(65504.0f, ReduceF16(HOOP_SUM, 65504, 8));
  EXPECT_EQ(INFINITY, ReduceF16(HOOP_SUM, 65504, 16));
  EXPECT_EQ(-INFINITY, ReduceF16(HOOP_SUM, -65504, -16));
  EXPECT_EQ(INFINITY, ReduceF16(HOOP_PROD, 65504, 2));
  // Subnormals, spaced 2^-24: 2^-25 ties to 0, 1.5 * 2^-24 ties to 2^-23.
  EXPECT_EQ(0.0f, ReduceF16(HOOP_PROD, 0x1p-24f, 0.5f));
  EXPECT_EQ(0x1p-23f, ReduceF16(HOOP_PROD, 3 * 0x1p-24f, 0.5f));
  EXPECT_EQ(0x1p-23f, ReduceF16(HOOP_SUM, 0x1p-24f, 0x1p-24f));
  EXPECT_EQ(0x1p-14f, ReduceF16(HOOP_SUM, 0x3ffp-24f, 0x1p-24f));  // normal
  EXPECT_EQ(0x1p-24f, ReduceF16(HOOP_PROD, 0x1p-14f, 0x1p-10f));
  // 2^-24 * 0.75 is above the tie: rounds up to 2^-24, not down to 0.
  EXPECT_EQ(0x1p-24f, ReduceF16(HOOP_PROD, 0x1p-24f, 0.75f));
}

float ReduceBf16(hoop_op_t op, float x, float y)
{
  uint16_t hx = static_cast<uint16_t>(Bits(x) >> 16);
  uint16_t hy = static_cast<uint16_t>(Bits(y) >> 16);
  EXPECT_EQ(x, RefBf16ToF32(hx));
  EXPECT_EQ(y, RefBf16ToF32(hy));
  return RefBf16ToF32(ReduceHalfBits(HOOP_BF16, op, hx, hy));
}

TEST(Rounding, Bf16TiesToEven)
{
  // bf16 has 8 significant bits: [256, 512) is spaced 2 apart.
  EXPECT_EQ(256.0f, ReduceBf16(HOOP_SUM, 256, 1));
  EXPECT_EQ(260.0f, ReduceBf16(HOOP_SUM, 258, 1));
  EXPECT_EQ(-260.0f, ReduceBf16(HOOP_SUM, -258, -1));
  EXPECT_EQ(258.0f, ReduceBf16(HOOP_SUM, 256, 1.5f));
  EXPECT_EQ(1.0f, ReduceBf16(HOOP_SUM, 1, 0x1p-8f));
  EXPECT_EQ(1.0f + 0x1p-6f, ReduceBf16(HOOP_SUM, 1 + 0x1p-7f, 0x1p-8f));
  // 17 * 31 = 527: [512, 1024) is spaced 4 apart, 527 rounds to 528.
  EXPECT_EQ(528.0f, ReduceBf16(HOOP_PROD, 17, 31));
  // 19 * 27 = 513 is below the tie at 514: down to 512.
  EXPECT_EQ(512.0f, ReduceBf16(HOOP_PROD, 19, 27));
  // The largest finite bf16 is (2 - 2^-7) * 2^127; adding half an ulp
  // (2^119) is a tie that rounds to the even neighbour, infinity.
  float max = FloatFromBits(0x7f7f0000u);
  EXPECT_EQ(max, ReduceBf16(HOOP_SUM, max, 0x1p118f));
  EXPECT_EQ(INFINITY, ReduceBf16(HOOP_SUM, max, 0x1p119f));
  EXPECT_EQ(-INFINITY, ReduceBf16(HOOP_SUM, -max, -0x1p119f));
  // Subnormals: the smallest is 2^-133.
  EXPECT_EQ(0.0f, ReduceBf16(HOOP_PROD, 0x1p-133f, 0.5f));
  EXPECT_EQ(0x1p-132f, ReduceBf16(HOOP_PROD, 3 * 0x1p-133f, 0.5f));
  EXPECT_EQ(0x1p-126f, ReduceBf16(HOOP_SUM, 0x7fp-133f, 0x1p-133f));
}

// ---- NaN, infinities and signed zeros --------------------------------------

// Operands for one floating-point dtype, as bit patterns (the low bytes of
// each uint64_t are the value).
struct FloatCase {
  hoop_dtype_t dtype;
  std::vector<uint64_t> nans;    // quiet and signalling, both signs
  std::vector<uint64_t> others;  // zeros, ones, infinities, extremes
};

std::vector<FloatCase> FloatCases()
{
  return {
      {HOOP_F32,
       {0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fbfffff},
       {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000,
        0xff800000, 0x7f7fffff, 0x00000001}},
      {HOOP_F64,
       {0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001,
        0xfff0000000000001, 0x7ff7ffffffffffff},
       {0x0000000000000000, 0x8000000000000000, 0x3ff0000000000000,
        0xbff0000000000000, 0x7ff0000000000000, 0xfff0000000000000,
        0x7fefffffffffffff, 0x0000000000000001}},
      {HOOP_F16,
       {0x7e00, 0xfe00, 0x7c01, 0xfc01, 0x7dff},
       {0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7bff, 0x0001}},
      {HOOP_BF16,
       {0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7fbf},
       {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7f7f, 0x0001}},
      {HOOP_F8E4M3,
       {0x7f, 0xff},
       {0x00, 0x80, 0x38, 0xb8, 0x7e, 0xfe, 0x77, 0x01}},
      {HOOP_F8E5M2,
       {0x7e, 0xfe, 0x7d, 0xfd, 0x7f},
       {0x00, 0x80, 0x3c, 0xbc, 0x7c, 0xfc, 0x7b, 0x01}},
  };
}

bool IsQuietNan(hoop_dtype_t dtype, const uint8_t *p)
{
  switch (dtype) {
  case HOOP_F32: return IsQuietNanF32(Load<float>(p));
  case HOOP_F64: return IsQuietNanF64(Load<double>(p));
  case HOOP_F16: return IsQuietNanHalf(Load<uint16_t>(p));
  case HOOP_BF16: return IsQuietNanBf16(Load<uint16_t>(p));
  // One NaN for every fp8 result, quiet in E5M2 (top mantissa bit set).
  case HOOP_F8E4M3:
  case HOOP_F8E5M2: return Load<uint8_t>(p) == 0x7f;
  default: return false;
  }
}

TEST(NaN, AnyNanOperandGivesQuietNan)
{
  for (const FloatCase &fc : FloatCases()) {
    size_t es = Info(fc.dtype).size;
    for (hoop_op_t op : kOps) {
      for (uint64_t nan : fc.nans) {
        std::vector<uint64_t> partners = fc.others;
        partners.insert(partners.end(), fc.nans.begin(), fc.nans.end());
        for (uint64_t other : partners) {
          for (int nan_in_b = 0; nan_in_b < 2; nan_in_b++) {
            uint8_t a[8], b[8], d[8];
            std::memcpy(a, nan_in_b ? &other : &nan, es);
            std::memcpy(b, nan_in_b ? &nan : &other, es);
            hoop__reduce(d, a, b, 1, fc.dtype, op);
            EXPECT_TRUE(IsQuietNan(fc.dtype, d))
                << Info(fc.dtype).name << " " << OpName(op)
                << " a=" << Hex(a, es) << " b=" << Hex(b, es)
                << " got=" << Hex(d, es);
          }
        }
      }
    }
  }
}

TEST(NaN, NanInOneLaneDoesNotLeak)
{
  // A vector lane's NaN must not spill into its neighbours.
  std::vector<float> a(64, 1.0f), b(64, 2.0f), d(64);
  a[17] = NAN;
  b[42] = NAN;
  for (hoop_op_t op : kOps) {
    hoop__reduce(d.data(), a.data(), b.data(), d.size(), HOOP_F32, op);
    for (size_t i = 0; i < d.size(); i++)
      EXPECT_EQ(i == 17 || i == 42, std::isnan(d[i]))
          << OpName(op) << " lane " << i;
  }
}

TEST(SignedZero, MinPrefersMinusZeroMaxPlusZero)
{
  struct {
    hoop_dtype_t dtype;
    uint64_t pos, neg;
  } cases[] = {
      {HOOP_F32, 0x00000000, 0x80000000},
      {HOOP_F64, 0x0000000000000000, 0x8000000000000000},
      {HOOP_F16, 0x0000, 0x8000},
      {HOOP_BF16, 0x0000, 0x8000},
      {HOOP_F8E4M3, 0x00, 0x80},
      {HOOP_F8E5M2, 0x00, 0x80},
  };
  for (const auto &c : cases) {
    size_t es = Info(c.dtype).size;
    for (int order = 0; order < 2; order++) {
      uint64_t a = order ? c.neg : c.pos, b = order ? c.pos : c.neg;
      uint64_t d = 0;
      hoop__reduce(&d, &a, &b, 1, c.dtype, HOOP_MIN);
      EXPECT_EQ(0, std::memcmp(&d, &c.neg, es)) << Info(c.dtype).name;
      d = 0;
      hoop__reduce(&d, &a, &b, 1, c.dtype, HOOP_MAX);
      EXPECT_EQ(0, std::memcmp(&d, &c.pos, es)) << Info(c.dtype).name;
      d = 0;
      hoop__reduce(&d, &a, &b, 1, c.dtype, HOOP_SUM);  // +0 + -0 = +0
      EXPECT_EQ(0, std::memcmp(&d, &c.pos, es)) << Info(c.dtype).name;
    }
  }
}

TEST(Integer, WrapsOnOverflow)
{
  int8_t a8[] = {127, -128, -128, 100, 16};
  int8_t b8[] = {1, -1, -128, 100, 16};
  int8_t d8[5];
  hoop__reduce(d8, a8, b8, 5, HOOP_I8, HOOP_SUM);
  EXPECT_EQ(-128, d8[0]);
  EXPECT_EQ(127, d8[1]);
  EXPECT_EQ(0, d8[2]);
  EXPECT_EQ(-56, d8[3]);
  hoop__reduce(d8, a8, b8, 5, HOOP_I8, HOOP_PROD);
  EXPECT_EQ(127, d8[0]);
  EXPECT_EQ(-128, d8[1]);  // -128 * -1 = 128 wraps to -128
  EXPECT_EQ(0, d8[2]);
  EXPECT_EQ(16, d8[3]);  // 10000 mod 256
  EXPECT_EQ(0, d8[4]);

  int32_t a32[] = {INT32_MAX, INT32_MIN, 65536};
  int32_t b32[] = {1, -1, 65536};
  int32_t d32[3];
  hoop__reduce(d32, a32, b32, 3, HOOP_I32, HOOP_SUM);
  EXPECT_EQ(INT32_MIN, d32[0]);
  EXPECT_EQ(INT32_MAX, d32[1]);
  hoop__reduce(d32, a32, b32, 3, HOOP_I32, HOOP_PROD);
  EXPECT_EQ(INT32_MIN, d32[1]);
  EXPECT_EQ(0, d32[2]);

  int64_t a64[] = {INT64_MAX, INT64_MIN, int64_t{1} << 32};
  int64_t b64[] = {1, -1, int64_t{1} << 32};
  int64_t d64[3];
  hoop__reduce(d64, a64, b64, 3, HOOP_I64, HOOP_SUM);
  EXPECT_EQ(INT64_MIN, d64[0]);
  EXPECT_EQ(INT64_MAX, d64[1]);
  hoop__reduce(d64, a64, b64, 3, HOOP_I64, HOOP_PROD);
  EXPECT_EQ(INT64_MIN, d64[1]);
  EXPECT_EQ(0, d64[2]);

  uint64_t ua[] = {UINT64_MAX}, ub[] = {UINT64_MAX}, ud[1];
  hoop__reduce(ud, ua, ub, 1, HOOP_U64, HOOP_PROD);
  EXPECT_EQ(1u, ud[0]);
  hoop__reduce(ud, ua, ub, 1, HOOP_U64, HOOP_SUM);
  EXPECT_EQ(UINT64_MAX - 1, ud[0]);
}

// ---- Division (AVG) --------------------------------------------------------

template <typename T>
void CheckIntDiv(hoop_dtype_t dtype, Gen *gen)
{
  std::vector<T> values = {std::numeric_limits<T>::min(),
                           std::numeric_limits<T>::max(), 0, 1, 7, 100};
  if (std::is_signed<T>::value) {
    for (int v : {-1, -7, -8, -9, -100})
      values.push_back(static_cast<T>(v));
    values.push_back(static_cast<T>(std::numeric_limits<T>::min() + 1));
  }
  for (int i = 0; i < 1000; i++) {
    T v;
    uint64_t r = gen->Bits64();
    std::memcpy(&v, &r, sizeof v);
    values.push_back(v);
  }
  for (int divisor : {1, 2, 3, 7, 8, 64, 1000, 65537}) {
    std::vector<T> buf = values;
    hoop__reduce_div(buf.data(), buf.size(), dtype, divisor);
    for (size_t i = 0; i < values.size(); i++) {
      // C++ division truncates toward zero, as AVG promises.
      T want = static_cast<T>(static_cast<__int128>(values[i]) / divisor);
      ASSERT_EQ(want, buf[i]) << Info(dtype).name << " " << +values[i]
                              << " / " << divisor;
    }
  }
}

TEST(Div, IntegersTruncateTowardZero)
{
  Gen gen(0xd1d1);
  CheckIntDiv<int8_t>(HOOP_I8, &gen);
  CheckIntDiv<uint8_t>(HOOP_U8, &gen);
  CheckIntDiv<int32_t>(HOOP_I32, &gen);
  CheckIntDiv<uint32_t>(HOOP_U32, &gen);
  CheckIntDiv<int64_t>(HOOP_I64, &gen);
  CheckIntDiv<uint64_t>(HOOP_U64, &gen);

  int8_t i8[] = {-7, 7, -128, -1};
  hoop__reduce_div(i8, 4, HOOP_I8, 2);
  EXPECT_EQ(-3, i8[0]);
  EXPECT_EQ(3, i8[1]);
  EXPECT_EQ(-64, i8[2]);
  EXPECT_EQ(0, i8[3]);
  int32_t i32[] = {-7, INT32_MIN, -2};
  hoop__reduce_div(i32, 3, HOOP_I32, 3);
  EXPECT_EQ(-2, i32[0]);
  EXPECT_EQ(INT32_MIN / 3, i32[1]);
  EXPECT_EQ(0, i32[2]);
  uint8_t u8[] = {255};
  hoop__reduce_div(u8, 1, HOOP_U8, 200);  // divisor wider than the type
  EXPECT_EQ(1, u8[0]);
  int8_t s8[] = {-128};
  hoop__reduce_div(s8, 1, HOOP_I8, 200);
  EXPECT_EQ(0, s8[0]);
}

TEST(Div, FloatsRoundOnce)
{
  Gen gen(0xd1f1);
  const int divisors[] = {1, 2, 3, 5, 7, 8, 10, 100, 1000};
  for (const DtypeInfo &d : kDtypes) {
    hoop_dtype_t dt = d.dtype;
    if (!hooptest::is_float(dt))
      continue;
    const size_t n = 4099;
    std::vector<uint8_t> in(n * d.size);
    for (size_t i = 0; i < n; i++)
      gen.Element(dt, &in[i * d.size]);
    for (int divisor : divisors) {
      std::vector<uint8_t> want(in.size());
      for (size_t i = 0; i < n; i++) {
        const uint8_t *x = &in[i * d.size];
        uint8_t *w = &want[i * d.size];
        switch (dt) {
        case HOOP_F32:
          Store(w, Load<float>(x) / static_cast<float>(divisor));
          break;
        case HOOP_F64:
          Store(w, Load<double>(x) / divisor);
          break;
        case HOOP_F16:
          Store(w, static_cast<_Float16>(Load<_Float16>(x) /
                                         static_cast<_Float16>(divisor)));
          break;
        case HOOP_BF16:
          Store(w, RefF32ToBf16(RefBf16ToF32(Load<uint16_t>(x)) /
                                static_cast<float>(divisor)));
          break;
        default:  // fp8: double's quotient rounds the same as the exact one
          Store(w, hooptest::fp8_encode(
                       hooptest::fp8_decode(Load<uint8_t>(x), dt) / divisor,
                       dt));
          break;
        }
      }
      std::vector<uint8_t> buf = in;
      hoop__reduce_div(buf.data(), n, dt, divisor);
      EXPECT_TRUE(Matches(dt, buf.data(), want, in, in))
          << d.name << " / " << divisor;
    }
  }
}

TEST(Div, FloatSpecials)
{
  float f[] = {NAN, INFINITY, -INFINITY, -0.0f, 7.0f, 0x1p-149f};
  hoop__reduce_div(f, 6, HOOP_F32, 2);
  EXPECT_TRUE(std::isnan(f[0]));
  EXPECT_EQ(INFINITY, f[1]);
  EXPECT_EQ(-INFINITY, f[2]);
  EXPECT_TRUE(f[3] == 0 && std::signbit(f[3]));
  EXPECT_EQ(3.5f, f[4]);
  EXPECT_EQ(0.0f, f[5]);  // the smallest subnormal / 2 ties to even: 0
  uint16_t h[] = {0x7e00, 0x7c00, 0x3c00, 0x0001, 0x0003};
  hoop__reduce_div(h, 5, HOOP_F16, 2);
  EXPECT_TRUE(IsHalfNan(h[0]));
  EXPECT_EQ(0x7c00, h[1]);
  EXPECT_EQ(0x3800, h[2]);  // 0.5
  EXPECT_EQ(0x0000, h[3]);  // tie to even
  EXPECT_EQ(0x0002, h[4]);  // 1.5 units: tie to even
  uint16_t bf[] = {0x7fc0, 0xff80, 0x3f80, 0x0001};
  hoop__reduce_div(bf, 4, HOOP_BF16, 2);
  EXPECT_TRUE(IsBf16Nan(bf[0]));
  EXPECT_EQ(0xff80, bf[1]);
  EXPECT_EQ(0x3f00, bf[2]);
  EXPECT_EQ(0x0000, bf[3]);
}

// ---- Scaling (pre-multiplied sums) ---------------------------------------

// Every element times the scalar is a PROD of the two, so the reference is
// RefCombine's PROD with the scalar as the second operand.
TEST(Scale, EveryDtypeMatchesProdWithTheScalar)
{
  for (const DtypeInfo &d : kDtypes) {
    SCOPED_TRACE(d.name);
    Gen gen(0x5ca1e000u + d.dtype);
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{4099}}) {
      SCOPED_TRACE("count " + std::to_string(count));
      std::vector<uint8_t> src(count * d.size), scalar(d.size);
      for (size_t i = 0; i < count; i++)
        gen.Element(d.dtype, &src[i * d.size]);
      gen.Element(d.dtype, scalar.data());
      std::vector<uint8_t> want(src.size());
      for (size_t i = 0; i < count; i++)
        RefCombine(d.dtype, HOOP_PROD, &src[i * d.size], scalar.data(),
                   &want[i * d.size]);
      std::vector<uint8_t> scalars(src.size());
      for (size_t i = 0; i < count; i++)
        std::copy(scalar.begin(), scalar.end(), &scalars[i * d.size]);
      {
        SCOPED_TRACE("out of place");
        Guarded gs(count, d.size, 1), gd(count, d.size, 2);
        gs.Set(src);
        hoop__reduce_scale(gd.data(), gs.data(), count, d.dtype,
                           scalar.data());
        EXPECT_TRUE(Matches(d.dtype, gd.data(), want, src, scalars));
        EXPECT_TRUE(gd.GuardsIntact());
        EXPECT_TRUE(gs.Holds(src)) << "src modified";
      }
      {
        SCOPED_TRACE("in place");
        Guarded g(count, d.size, 3);
        g.Set(src);
        hoop__reduce_scale(g.data(), g.data(), count, d.dtype,
                           scalar.data());
        EXPECT_TRUE(Matches(d.dtype, g.data(), want, src, scalars));
        EXPECT_TRUE(g.GuardsIntact());
      }
    }
  }
}

// The scalar may be an element of the buffer being scaled in place: it is
// read before the first element is written.
TEST(Scale, ScalarInsideTheBufferIsReadFirst)
{
  for (const DtypeInfo &d : kDtypes) {
    Gen gen(0x5ca1e100u + d.dtype);
    const size_t count = 100;
    std::vector<uint8_t> src(count * d.size), want(src.size());
    for (size_t i = 0; i < count; i++)
      gen.Element(d.dtype, &src[i * d.size]);
    for (size_t i = 0; i < count; i++)
      RefCombine(d.dtype, HOOP_PROD, &src[i * d.size], &src[0],
                 &want[i * d.size]);
    std::vector<uint8_t> buf = src;
    hoop__reduce_scale(buf.data(), buf.data(), count, d.dtype, buf.data());
    std::vector<uint8_t> scalars(src.size());
    for (size_t i = 0; i < count; i++)
      std::copy(src.begin(), src.begin() + d.size, &scalars[i * d.size]);
    EXPECT_TRUE(Matches(d.dtype, buf.data(), want, src, scalars)) << d.name;
  }
}

TEST(Scale, KnownValues)
{
  int8_t i8[] = {100, -128, 3};
  int8_t k8 = -2;
  hoop__reduce_scale(i8, i8, 3, HOOP_I8, &k8);
  EXPECT_EQ(56, i8[0]);  // -200 wraps to 56
  EXPECT_EQ(0, i8[1]);   // 256 wraps to 0
  EXPECT_EQ(-6, i8[2]);
  uint64_t u64[] = {UINT64_MAX}, k64 = 3;
  hoop__reduce_scale(u64, u64, 1, HOOP_U64, &k64);
  EXPECT_EQ(UINT64_MAX - 2, u64[0]);
  double f64[] = {1.5, -0.0}, kd = 0.25, f64_out[2];
  hoop__reduce_scale(f64_out, f64, 2, HOOP_F64, &kd);
  EXPECT_EQ(0.375, f64_out[0]);
  EXPECT_TRUE(f64_out[1] == 0 && std::signbit(f64_out[1]));
  // 1/8 scaling in E4M3: 448 / 8 = 56 exactly; 3 * 2^-9 / 8 is below half
  // the smallest subnormal and flushes to a signed zero.
  uint8_t e4[] = {0x7e, 0x83}, k_e4 = 0x20;  // 0x20 = 2^-3
  hoop__reduce_scale(e4, e4, 2, HOOP_F8E4M3, &k_e4);
  EXPECT_EQ(0x66, e4[0]);  // 56 = 1.75 * 2^5
  EXPECT_EQ(0x80, e4[1]);
  // E5M2: 57344 * 2 saturates rather than overflowing to infinity.
  uint8_t e5[] = {0x7b, 0xbc}, k_e5 = 0x40;  // 0x40 = 2
  hoop__reduce_scale(e5, e5, 2, HOOP_F8E5M2, &k_e5);
  EXPECT_EQ(0x7b, e5[0]);
  EXPECT_EQ(0xc0, e5[1]);  // -1 * 2 = -2
}

// ---- Arguments the callers should have rejected ---------------------------

TEST(InvalidArguments, DoNothing)
{
  int32_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, d[4] = {9, 9, 9, 9};
  // Out of the lists but inside the values each enum can hold: C++ makes
  // converting anything else to the enum undefined.
  const hoop_dtype_t bad_dtypes[] = {HOOP_DTYPE_COUNT,
                                     static_cast<hoop_dtype_t>(15)};
  const hoop_op_t bad_ops[] = {HOOP_OP_COUNT, static_cast<hoop_op_t>(7)};
  for (hoop_dtype_t dt : bad_dtypes) {
    hoop__reduce(d, a, b, 4, dt, HOOP_SUM);
    hoop__reduce_div(d, 4, dt, 2);
    hoop__reduce_scale(d, a, 4, dt, b);
  }
  for (hoop_op_t op : bad_ops)
    hoop__reduce(d, a, b, 4, HOOP_I32, op);
  for (int divisor : {0, -1, -2})
    hoop__reduce_div(d, 4, HOOP_I32, divisor);
  for (int32_t v : d)
    EXPECT_EQ(9, v);
  // A zero count never touches the pointers.
  hoop__reduce(nullptr, nullptr, nullptr, 0, HOOP_F32, HOOP_SUM);
  hoop__reduce_div(nullptr, 0, HOOP_F32, 2);
  hoop__reduce_scale(nullptr, nullptr, 0, HOOP_F32, nullptr);
}

}  // namespace
