/*
 * Host reduction kernels: the arithmetic of every collective that reduces.
 * Collectives spend most of their CPU time here, so each (dtype, op) pair
 * gets its own loop that GCC can vectorise at -O3 with only the baseline
 * ISA (SSE2 on x86-64; the library is built without -march so that one
 * binary runs everywhere).
 *
 * The loops are written so that GCC's if-conversion can turn them into
 * straight-line vector code:
 *  - No `restrict`: dst may be a or b.  GCC versions the loop on a runtime
 *    overlap check, and an exact alias passes that check (each element is
 *    read before it is written), so in-place calls stay vectorised.
 *  - Floating-point operations are never conditional.  GCC will not
 *    speculate an operation that may raise an exception, so an FP add that
 *    feeds only one arm of a select keeps the loop scalar.  Selects pick
 *    between operands, or between bit patterns, instead.
 *  - Where a chain of ?: would do, some selects are spelt as AND/OR with
 *    all-ones masks: GCC turns such chains into nested mask logic that
 *    costs up to twice the instructions.
 *  - Type punning goes through memcpy(), which GCC turns into plain moves.
 *
 * Results are bit-exact whatever the optimiser does: every float operation
 * is a single IEEE operation in the default rounding mode (round to
 * nearest even), which hoop assumes throughout.  The fp16 and fp8
 * conversions never produce an f32 subnormal and give the same answer when
 * they are fed one as zero, and no fp8 sum, product or quotient by a rank
 * count is an f32 subnormal, so a caller that enabled flush-to-zero or
 * denormals-are-zero still gets exact fp16 and fp8 results.
 */
#include "reduce/reduce.h"

#include <string.h>

/* ---- Bit access ------------------------------------------------------- */

static inline uint32_t f32_bits(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float f32_from_bits(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint64_t f64_bits(double f)
{
  uint64_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline double f64_from_bits(uint64_t u)
{
  double f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- fp16 / bf16 conversions ------------------------------------------ */

/*
 * The masks and range tests below use int32_t where the value allows:
 * SSE2 has signed vector compares only, and GCC pays extra instructions to
 * emulate unsigned ones.
 */

#define F32_QUIET_BIT 0x00400000u
#define F64_QUIET_BIT 0x0008000000000000ull

static inline float f16_to_f32_inline(uint16_t h)
{
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  /* Exponent and mantissa, already in their f32 positions. */
  int32_t em = (int32_t)(((uint32_t)h & 0x7fffu) << 13);
  int32_t special = em >= 0x0f800000 ? -1 : 0; /* inf or NaN */
  int32_t sub = em < 0x00800000 ? -1 : 0;      /* zero or subnormal */
  /*
   * Normal numbers only need the exponent rebiased (15 -> 127).  Inf and
   * NaN get the bias twice, which takes their all-ones exponent to the f32
   * all-ones exponent.  A subnormal m * 2^-24 is built as the normal float
   * 2^-14 * (1 + m/1024) and the 2^-14 subtracted again: exact and, unlike
   * scaling by 2^112, free of f32 subnormals.  Every lane subtracts
   * (0 when not subnormal) so that the FP operation is unconditional; as a
   * bonus, that quiets signalling NaNs.
   */
  int32_t bias = (112 << 23) + (special & (112 << 23)) + (sub & (1 << 23));
  float mag = f32_from_bits((uint32_t)(em + bias)) -
              f32_from_bits((uint32_t)sub & 0x38800000u);
  return f32_from_bits(f32_bits(mag) | sign);
}

static inline uint16_t f32_to_f16_inline(float f)
{
  uint32_t x = f32_bits(f);
  int32_t ax = (int32_t)(x & 0x7fffffffu);
  /*
   * Everything from 65520 up rounds to inf; clamping to 2^16 first lets the
   * normal path below produce that inf, and keeps NaNs (which the compare
   * sends to 2^16 as well) out of the arithmetic.  They are patched last.
   */
  float fa = f32_from_bits((uint32_t)ax);
  fa = fa < 65536.0f ? fa : 65536.0f;
  /*
   * Below 2^-14 the result is an fp16 subnormal, a multiple of 2^-24.
   * Adding 0.5 (whose ulp is 2^-24) makes the FPU round to that multiple,
   * ties to even, and leaves the count in the low mantissa bits.  Other
   * lanes add 0, which changes nothing, so that the addition is
   * unconditional.  The addend comes from a mask because GCC rewrites
   * `x + (c ? 0.5f : 0.0f)` as two conditional additions.
   */
  uint32_t tiny = ax < 0x38800000 ? 0xffffffffu : 0u;
  uint32_t tb = f32_bits(fa + f32_from_bits(tiny & 0x3f000000u));
  /*
   * From here on the fp16 bits are kept shifted left by 13, where the
   * normal path has them anyway, and shifted down once at the end.  The
   * final shift needs all 32 bits of every intermediate, which stops GCC
   * from narrowing each select to 16-bit lanes separately (SSE2 narrows
   * with long shuffle sequences).
   */
  uint32_t sub = (tb - 0x3f000000u) << 13;
  /*
   * Normal range: rebias (127 -> 15) and round the 13 dropped bits to
   * nearest even.  A carry out of the mantissa bumps the exponent, up to
   * inf for 65520 (the tie between 65504, odd, and 2^16).  This reads tb,
   * equal to fa here, not fa: were the addition used by the subnormal arm
   * alone, GCC would sink it into that arm and not vectorise the loop.
   */
  uint32_t norm = tb - (112u << 23) + 0x0fffu + ((tb >> 13) & 1u);
  uint32_t r = (sub & tiny) | (norm & ~tiny);
  /*
   * NaN lanes hold inf by now: add the quiet bit, which also keeps a NaN
   * whose payload was all in the dropped low bits from becoming inf, and
   * what fits of the payload.
   */
  uint32_t nan = ax > 0x7f800000 ? 0xffffffffu : 0u;
  r |= nan & (0x00400000u | ((uint32_t)ax & 0x007fe000u));
  return (uint16_t)((r | ((x >> 3) & 0x10000000u)) >> 13);
}

/*
 * The kernels' widening: it leaves a signalling NaN signalling, which is
 * harmless there because every kernel result goes through
 * f32_to_bf16_inline(), and that quiets every NaN.
 */
static inline float bf16_to_f32_inline(uint16_t h)
{
  return f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16_inline(float f)
{
  uint32_t x = f32_bits(f);
  int32_t ax = (int32_t)(x & 0x7fffffffu);
  /*
   * Round the low 16 bits to nearest even.  Finite values cannot wrap
   * (|x| <= 0x7f7fffff), and a carry into the exponent rounds to the next
   * binade or to inf, as it should.  NaNs are not rounded: that could wrap
   * them into the sign bit or, when the payload is all in the low bits,
   * make them inf.  They are truncated and made quiet instead.
   */
  uint32_t nan = ax > 0x7f800000 ? 0xffffffffu : 0u;
  uint32_t round = (0x7fffu + ((x >> 16) & 1u)) & ~nan;
  return (uint16_t)(((x + round) >> 16) | (nan & 0x0040u));
}

float hoop__f16_to_f32(uint16_t h)
{
  return f16_to_f32_inline(h);
}

uint16_t hoop__f32_to_f16(float f)
{
  return f32_to_f16_inline(f);
}

float hoop__bf16_to_f32(uint16_t h)
{
  /* Callers may compute with the result, so hand them a quiet NaN. */
  uint32_t u = (uint32_t)h << 16;
  if (((uint32_t)h & 0x7fffu) > 0x7f80u)
    u |= F32_QUIET_BIT;
  return f32_from_bits(u);
}

uint16_t hoop__f32_to_bf16(float f)
{
  return f32_to_bf16_inline(f);
}

/* ---- fp8 conversions -------------------------------------------------- */

/*
 * Every fp8 value is exact in float (and never an f32 subnormal), so
 * widening only rebiases.  E4M3 has no infinities: exponent 15 holds the
 * normal numbers 256..448, and only the all-ones code (0x7f, 0xff) is NaN.
 * Subnormals (m * 2^-9) use the fp16 widening's trick: build the normal
 * float 2^-6 * (1 + m/8) and subtract 2^-6 in every lane.
 */
static inline float e4m3_to_f32_inline(uint8_t b)
{
  uint32_t sign = ((uint32_t)b & 0x80u) << 24;
  /* Exponent and mantissa, already in their f32 positions. */
  int32_t em = (int32_t)(((uint32_t)b & 0x7fu) << 20);
  int32_t nan = em == 0x07f00000 ? -1 : 0;
  int32_t sub = em < 0x00800000 ? -1 : 0;
  int32_t bias = (120 << 23) + (sub & (1 << 23));
  float mag = f32_from_bits((uint32_t)(em + bias)) -
              f32_from_bits((uint32_t)sub & 0x3c800000u);
  /* The NaN code widens to 480 (0x43f00000); OR-ing in a quiet NaN's bits
     leaves a quiet NaN. */
  return f32_from_bits(f32_bits(mag) | ((uint32_t)nan & 0x7fc00000u) | sign);
}

/*
 * E5M2 is the upper byte of an IEEE binary16: same sign, same 5-bit
 * exponent and bias, the top 2 of its 10 mantissa bits.
 */
static inline float e5m2_to_f32_inline(uint8_t b)
{
  return f16_to_f32_inline((uint16_t)((uint32_t)b << 8));
}

/*
 * Float to fp8, rounded to nearest even and saturating, as CUDA's
 * __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) and the cvt.rn.satfinite
 * instruction do, so that host and device kernels agree bit for bit:
 * magnitudes past the largest finite value, infinities included, become
 * that value with their sign; every NaN becomes 0x7f.  Saturating is also
 * what NCCL's fp8 reductions do (they convert through cuda_fp8.h's
 * saturating constructors), and the only choice for E4M3, which has no
 * infinity to overflow to.
 *
 * The constants describe the format: `max` and `min_normal` as f32 bits,
 * `drop` the f32 mantissa bits it lacks (23 - 3 or 23 - 2), `rebias`
 * (127 - bias) << (its mantissa bits), and `magic` a float whose ulp is the
 * format's smallest subnormal.  The steps are those of f32_to_f16_inline().
 */
static inline uint8_t f32_to_fp8(float f, uint32_t max, uint32_t min_normal,
                                 uint32_t magic, int drop, uint32_t rebias)
{
  uint32_t x = f32_bits(f);
  int32_t ax = (int32_t)(x & 0x7fffffffu);
  /*
   * Clamping first gives the saturated result: every magnitude above the
   * largest finite value would round to it or past it.  The compare also
   * sends NaNs to the maximum, keeping them out of the arithmetic; they
   * are patched last.
   */
  float fa = f32_from_bits((uint32_t)ax);
  float fmax = f32_from_bits(max);
  fa = fa < fmax ? fa : fmax;
  /*
   * Below the smallest normal the result is a multiple of the smallest
   * subnormal: adding `magic` makes the FPU round to that multiple, ties
   * to even, and leaves the count in the low mantissa bits (up to the
   * smallest normal's code, which follows the subnormals).
   */
  uint32_t tiny = ax < (int32_t)min_normal ? 0xffffffffu : 0u;
  uint32_t tb = f32_bits(fa + f32_from_bits(tiny & magic));
  uint32_t sub = tb - magic;
  /* Normal range: round the dropped bits to nearest even, then rebias. */
  uint32_t half = (1u << (drop - 1)) - 1u;
  uint32_t norm = ((tb + half + ((tb >> drop) & 1u)) >> drop) - rebias;
  uint32_t r = (sub & tiny) | (norm & ~tiny) | ((x >> 24) & 0x80u);
  uint32_t nan = ax > 0x7f800000 ? 0xffffffffu : 0u;
  return (uint8_t)((r & ~nan) | (nan & 0x7fu));
}

/* 448 = 0x43e00000, 2^-6 = 0x3c800000, 2^14 (ulp 2^-9) = 0x46800000. */
static inline uint8_t f32_to_e4m3_inline(float f)
{
  return f32_to_fp8(f, 0x43e00000u, 0x3c800000u, 0x46800000u, 20,
                    120u << 3);
}

/* 57344 = 0x47600000, 2^-14 = 0x38800000, 2^7 (ulp 2^-16) = 0x43000000. */
static inline uint8_t f32_to_e5m2_inline(float f)
{
  return f32_to_fp8(f, 0x47600000u, 0x38800000u, 0x43000000u, 21,
                    112u << 2);
}

float hoop__e4m3_to_f32(uint8_t b)
{
  return e4m3_to_f32_inline(b);
}

uint8_t hoop__f32_to_e4m3(float f)
{
  return f32_to_e4m3_inline(f);
}

float hoop__e5m2_to_f32(uint8_t b)
{
  return e5m2_to_f32_inline(b);
}

uint8_t hoop__f32_to_e5m2(float f)
{
  return f32_to_e5m2_inline(f);
}

/* ---- Floating-point MIN and MAX --------------------------------------- */

/*
 * IEEE 754-2019 minimum/maximum: NaN wins, and -0 < +0.  When x == y the
 * two differ at most in the sign of a zero, so OR-ing the bits gives the
 * minimum and AND-ing them the maximum.  When either is a NaN, x | y is a
 * NaN too (all-ones exponent, non-zero mantissa); the quiet bit is added
 * so that a signalling NaN does not come out signalling.
 */
static inline float min_f32(float x, float y)
{
  uint32_t ux = f32_bits(x), uy = f32_bits(y);
  uint32_t lt = x < y ? 0xffffffffu : 0u;
  uint32_t eq = x == y ? 0xffffffffu : 0u;
  uint32_t un = ((x != x) | (y != y)) ? 0xffffffffu : 0u;
  uint32_t r = (lt & ux) | (~lt & uy); /* y when equal or unordered */
  r |= eq & ux;
  r |= un & (ux | F32_QUIET_BIT);
  return f32_from_bits(r);
}

static inline float max_f32(float x, float y)
{
  uint32_t ux = f32_bits(x), uy = f32_bits(y);
  uint32_t gt = x > y ? 0xffffffffu : 0u;
  uint32_t eq = x == y ? 0xffffffffu : 0u;
  uint32_t un = ((x != x) | (y != y)) ? 0xffffffffu : 0u;
  uint32_t r = (gt & ux) | (~gt & uy); /* y when equal or unordered */
  r &= ~(eq & ~ux);
  r |= un & (ux | F32_QUIET_BIT);
  return f32_from_bits(r);
}

/*
 * Same rules.  The double versions keep ?: on doubles: GCC 12 does not
 * vectorise the mask form for 64-bit lanes at the baseline ISA.
 */
static inline double min_f64(double x, double y)
{
  double m = x < y ? x : y;
  m = x == y ? f64_from_bits(f64_bits(x) | f64_bits(y)) : m;
  m = ((x != x) | (y != y))
          ? f64_from_bits(f64_bits(x) | f64_bits(y) | F64_QUIET_BIT)
          : m;
  return m;
}

static inline double max_f64(double x, double y)
{
  double m = x > y ? x : y;
  m = x == y ? f64_from_bits(f64_bits(x) & f64_bits(y)) : m;
  m = ((x != x) | (y != y))
          ? f64_from_bits(f64_bits(x) | f64_bits(y) | F64_QUIET_BIT)
          : m;
  return m;
}

/* ---- Kernels ---------------------------------------------------------- */

/*
 * One loop per (dtype, op), so that the op is decided once per call and
 * the loop body is branch-free.  EXPR combines `x` (from a) and `y` (from
 * b).  Both are loaded before dst is stored, which is what makes
 * dst == a and dst == b safe.
 */
#define KERNEL_(name, T, EXPR)                                                \
  static void name(void *dst_, const void *a_, const void *b_, size_t n)     \
  {                                                                           \
    T *d = dst_;                                                              \
    const T *a = a_;                                                          \
    const T *b = b_;                                                          \
    for (size_t i = 0; i < n; i++) {                                          \
      T x = a[i];                                                             \
      T y = b[i];                                                             \
      d[i] = EXPR;                                                            \
    }                                                                         \
  }

/*
 * Integer types: X(dtype, tag, T, U, D).  U is the unsigned type that SUM
 * and PROD compute in, so that overflow wraps instead of being undefined;
 * for 8-bit types it is `unsigned` because uint8_t would promote to int.
 * Converting the wrapped value back to T is implementation-defined in C11,
 * and modular in every compiler hoop supports.  D is the type of the
 * divisor in hoop__reduce_div: wide enough that casting the int divisor to
 * it neither truncates nor changes signedness for positive divisors.
 */
#define INT_TYPES_(X)                                                         \
  X(HOOP_I8, i8, int8_t, unsigned, int)                                       \
  X(HOOP_U8, u8, uint8_t, unsigned, int)                                      \
  X(HOOP_I32, i32, int32_t, uint32_t, int32_t)                                \
  X(HOOP_U32, u32, uint32_t, uint32_t, uint32_t)                              \
  X(HOOP_I64, i64, int64_t, uint64_t, int64_t)                                \
  X(HOOP_U64, u64, uint64_t, uint64_t, uint64_t)

/* Native floating-point types: X(dtype, tag, T, MIN, MAX). */
#define FLOAT_TYPES_(X)                                                       \
  X(HOOP_F32, f32, float, min_f32, max_f32)                                   \
  X(HOOP_F64, f64, double, min_f64, max_f64)

/*
 * Floats narrower than float, stored as their bits (T) and combined in
 * float: X(dtype, tag, T).
 */
#define NARROW_TYPES_(X)                                                      \
  X(HOOP_F16, f16, uint16_t)                                                  \
  X(HOOP_BF16, bf16, uint16_t)                                                \
  X(HOOP_F8E4M3, e4m3, uint8_t)                                               \
  X(HOOP_F8E5M2, e5m2, uint8_t)

#define INT_KERNELS_(dtype, tag, T, U, D)                                     \
  KERNEL_(tag##_sum, T, (T)((U)x + (U)y))                                     \
  KERNEL_(tag##_prod, T, (T)((U)x * (U)y))                                    \
  KERNEL_(tag##_min, T, x < y ? x : y)                                        \
  KERNEL_(tag##_max, T, x > y ? x : y)

#define FLOAT_KERNELS_(dtype, tag, T, MIN, MAX)                               \
  KERNEL_(tag##_sum, T, x + y)                                                \
  KERNEL_(tag##_prod, T, x * y)                                               \
  KERNEL_(tag##_min, T, MIN(x, y))                                            \
  KERNEL_(tag##_max, T, MAX(x, y))

/*
 * One float operation and one rounding.  Float has more than twice the
 * precision of these formats, plus two bits (24 >= 2 * 11 + 2), so the
 * rounding to float is harmless: the result is the exactly rounded one.
 */
#define NARROW_KERNELS_(dtype, tag, T)                                        \
  KERNEL_(tag##_sum, T,                                                       \
          f32_to_##tag##_inline(tag##_to_f32_inline(x) +                      \
                                tag##_to_f32_inline(y)))                      \
  KERNEL_(tag##_prod, T,                                                      \
          f32_to_##tag##_inline(tag##_to_f32_inline(x) *                      \
                                tag##_to_f32_inline(y)))                      \
  KERNEL_(tag##_min, T,                                                       \
          f32_to_##tag##_inline(min_f32(tag##_to_f32_inline(x),               \
                                        tag##_to_f32_inline(y))))             \
  KERNEL_(tag##_max, T,                                                       \
          f32_to_##tag##_inline(max_f32(tag##_to_f32_inline(x),               \
                                        tag##_to_f32_inline(y))))

INT_TYPES_(INT_KERNELS_)
FLOAT_TYPES_(FLOAT_KERNELS_)
NARROW_TYPES_(NARROW_KERNELS_)

typedef void (*kernel_fn)(void *dst, const void *a, const void *b, size_t n);

/* AVG reduces like SUM; hoop__reduce_div() divides once at the end. */
#define KERNEL_ROW_(dtype, tag)                                               \
  [dtype] = {                                                                 \
    [HOOP_SUM] = tag##_sum,                                                   \
    [HOOP_PROD] = tag##_prod,                                                 \
    [HOOP_MIN] = tag##_min,                                                   \
    [HOOP_MAX] = tag##_max,                                                   \
    [HOOP_AVG] = tag##_sum,                                                   \
  },
#define INT_ROW_(dtype, tag, T, U, D) KERNEL_ROW_(dtype, tag)
#define FLOAT_ROW_(dtype, tag, T, MIN, MAX) KERNEL_ROW_(dtype, tag)
#define NARROW_ROW_(dtype, tag, T) KERNEL_ROW_(dtype, tag)

static const kernel_fn kernels[HOOP_DTYPE_COUNT][HOOP_OP_COUNT] = {
  INT_TYPES_(INT_ROW_)
  FLOAT_TYPES_(FLOAT_ROW_)
  NARROW_TYPES_(NARROW_ROW_)
};

void hoop__reduce(void *dst, const void *a, const void *b, size_t count,
                  hoop_dtype_t dtype, hoop_op_t op)
{
  /* Casts to unsigned so that negative enum values are rejected too. */
  if ((unsigned)dtype >= HOOP_DTYPE_COUNT || (unsigned)op >= HOOP_OP_COUNT)
    return;
  kernel_fn fn = kernels[dtype][op];
  if (fn != NULL && count > 0)
    fn(dst, a, b, count);
}

/* ---- Division for AVG ------------------------------------------------- */

typedef void (*div_fn)(void *buf, size_t n, int divisor);

/* C division truncates toward zero, which is what AVG promises. */
#define INT_DIV_(dtype, tag, T, U, D)                                         \
  static void tag##_div(void *buf_, size_t n, int divisor)                    \
  {                                                                           \
    T *p = buf_;                                                              \
    D dv = (D)divisor;                                                        \
    for (size_t i = 0; i < n; i++)                                            \
      p[i] = (T)(p[i] / dv);                                                  \
  }

/*
 * In the type itself: IEEE division rounds the exact quotient once, and a
 * rank count (far below 2^24) is exact in float and double.  Dividing a
 * float in double would be as exact but does half as many per
 * instruction: it took 4x the sum before it on a 2-rank AVG.  For a power
 * of two the reciprocal is exact too, so multiplying by it rounds the same
 * quotient, and multiplies are cheaper still.
 */
#define FLOAT_DIV_(dtype, tag, T, MIN, MAX)                                   \
  static void tag##_div(void *buf_, size_t n, int divisor)                    \
  {                                                                           \
    T *p = buf_;                                                              \
    T dv = (T)divisor;                                                        \
    if ((divisor & (divisor - 1)) == 0) {                                     \
      T scale = 1 / dv;                                                       \
      for (size_t i = 0; i < n; i++)                                          \
        p[i] *= scale;                                                        \
    } else {                                                                  \
      for (size_t i = 0; i < n; i++)                                          \
        p[i] /= dv;                                                           \
    }                                                                         \
  }

/*
 * In float, like the kernels: exactly rounded as long as the divisor is
 * exact in float, which a rank count (far below 2^24) is.
 */
#define NARROW_DIV_(dtype, tag, T)                                            \
  static void tag##_div(void *buf_, size_t n, int divisor)                    \
  {                                                                           \
    T *p = buf_;                                                              \
    float dv = (float)divisor;                                                \
    for (size_t i = 0; i < n; i++)                                            \
      p[i] = f32_to_##tag##_inline(tag##_to_f32_inline(p[i]) / dv);           \
  }

INT_TYPES_(INT_DIV_)
FLOAT_TYPES_(FLOAT_DIV_)
NARROW_TYPES_(NARROW_DIV_)

#define DIV_ROW_(dtype, tag) [dtype] = tag##_div,
#define INT_DIV_ROW_(dtype, tag, T, U, D) DIV_ROW_(dtype, tag)
#define FLOAT_DIV_ROW_(dtype, tag, T, MIN, MAX) DIV_ROW_(dtype, tag)
#define NARROW_DIV_ROW_(dtype, tag, T) DIV_ROW_(dtype, tag)

static const div_fn dividers[HOOP_DTYPE_COUNT] = {
  INT_TYPES_(INT_DIV_ROW_)
  FLOAT_TYPES_(FLOAT_DIV_ROW_)
  NARROW_TYPES_(NARROW_DIV_ROW_)
};

void hoop__reduce_div(void *buf, size_t count, hoop_dtype_t dtype,
                      int divisor)
{
  /*
   * A divisor below 1 is a caller bug (it is a rank count); refusing it
   * also rules out division by zero and INT_MIN / -1.
   */
  if ((unsigned)dtype >= HOOP_DTYPE_COUNT || divisor < 1 || count == 0)
    return;
  dividers[dtype](buf, count, divisor);
}

/* ---- Scaling for pre-multiplied sums ---------------------------------- */

typedef void (*scale_fn)(void *dst, const void *src, size_t n,
                         const void *scalar);

/*
 * Each element is a PROD with the scalar, so it rounds and wraps as the
 * PROD kernels do.  The scalar is read once, before the loop, so that it
 * may lie in dst.
 */
#define INT_SCALE_(dtype, tag, T, U, D)                                       \
  static void tag##_scale(void *dst_, const void *src_, size_t n,             \
                          const void *scalar)                                 \
  {                                                                           \
    T *d = dst_;                                                              \
    const T *s = src_;                                                        \
    T k;                                                                      \
    memcpy(&k, scalar, sizeof k);                                             \
    for (size_t i = 0; i < n; i++)                                            \
      d[i] = (T)((U)s[i] * (U)k);                                             \
  }

#define FLOAT_SCALE_(dtype, tag, T, MIN, MAX)                                 \
  static void tag##_scale(void *dst_, const void *src_, size_t n,             \
                          const void *scalar)                                 \
  {                                                                           \
    T *d = dst_;                                                              \
    const T *s = src_;                                                        \
    T k;                                                                      \
    memcpy(&k, scalar, sizeof k);                                             \
    for (size_t i = 0; i < n; i++)                                            \
      d[i] = s[i] * k;                                                        \
  }

#define NARROW_SCALE_(dtype, tag, T)                                          \
  static void tag##_scale(void *dst_, const void *src_, size_t n,             \
                          const void *scalar)                                 \
  {                                                                           \
    T *d = dst_;                                                              \
    const T *s = src_;                                                        \
    T bits;                                                                   \
    memcpy(&bits, scalar, sizeof bits);                                       \
    float k = tag##_to_f32_inline(bits);                                      \
    for (size_t i = 0; i < n; i++)                                            \
      d[i] = f32_to_##tag##_inline(tag##_to_f32_inline(s[i]) * k);            \
  }

INT_TYPES_(INT_SCALE_)
FLOAT_TYPES_(FLOAT_SCALE_)
NARROW_TYPES_(NARROW_SCALE_)

#define SCALE_ROW_(dtype, tag) [dtype] = tag##_scale,
#define INT_SCALE_ROW_(dtype, tag, T, U, D) SCALE_ROW_(dtype, tag)
#define FLOAT_SCALE_ROW_(dtype, tag, T, MIN, MAX) SCALE_ROW_(dtype, tag)
#define NARROW_SCALE_ROW_(dtype, tag, T) SCALE_ROW_(dtype, tag)

static const scale_fn scalers[HOOP_DTYPE_COUNT] = {
  INT_TYPES_(INT_SCALE_ROW_)
  FLOAT_TYPES_(FLOAT_SCALE_ROW_)
  NARROW_TYPES_(NARROW_SCALE_ROW_)
};

void hoop__reduce_scale(void *dst, const void *src, size_t count,
                        hoop_dtype_t dtype, const void *scalar)
{
  if ((unsigned)dtype >= HOOP_DTYPE_COUNT || count == 0)
    return;
  scalers[dtype](dst, src, count, scalar);
}
