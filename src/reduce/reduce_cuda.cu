/*
 * Device reduction kernels.  They follow reduce.c's rules: integer SUM and
 * PROD wrap, fp16/bf16/fp8 combine in float with one round-to-nearest-even
 * (fp8 saturating to its largest finite value), MIN/MAX are IEEE 754-2019
 * minimum/maximum (NaN wins, -0 < +0), AVG sums and divides once.  The
 * GPU's float arithmetic is IEEE in round-to-nearest-even as long as
 * nothing is fused or flushed, so the results match the host's bit for
 * bit, except the payload of a NaN: GPU arithmetic returns the canonical
 * quiet NaN where the host keeps the operand's.  (The host's fp8 NaN is
 * always 0x7f, which cuda_fp8.h's software conversion also gives.)
 *
 * The kernels are bound by memory bandwidth, so each thread moves 16 bytes
 * per load when the three pointers share 16-byte alignment, and a second
 * launch finishes the elements that do not fill a 16-byte vector.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "reduce/reduce_cuda.h"

namespace {

/* ---- Element types: storage T, arithmetic in C (wider for halves) ---- */

template <typename T> struct Plain {
  typedef T Store;
  typedef T Calc;
  __device__ static Calc load(Store s) { return s; }
  __device__ static Store store(Calc c) { return c; }
};

struct Half {
  typedef uint16_t Store;
  typedef float Calc;
  __device__ static Calc load(Store s) {
    return __half2float(__ushort_as_half(s));
  }
  __device__ static Store store(Calc c) {
    return __half_as_ushort(__float2half_rn(c));
  }
};

struct BFloat {
  typedef uint16_t Store;
  typedef float Calc;
  __device__ static Calc load(Store s) {
    return __bfloat162float(__ushort_as_bfloat16(s));
  }
  __device__ static Store store(Calc c) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(c));
  }
};

/*
 * fp8 widens exactly through fp16, which holds every fp8 value.  Narrowing
 * is cuda_fp8.h's saturating conversion: the cvt.rn.satfinite instruction
 * on sm_89 and later, an exact software version before; reduce.c's
 * f32_to_fp8() rounds and saturates the same way.
 */
template <__nv_fp8_interpretation_t Kind> struct Fp8 {
  typedef uint8_t Store;
  typedef float Calc;
  __device__ static Calc load(Store s) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(s, Kind)));
  }
  __device__ static Store store(Calc c) {
    return __nv_cvt_float_to_fp8(c, __NV_SATFINITE, Kind);
  }
};

/* ---- Operators ------------------------------------------------------- */

/* Integers wrap: compute in the unsigned type of the same width. */
template <typename T> struct Wide { typedef T U; };
template <> struct Wide<int8_t> { typedef uint32_t U; };
template <> struct Wide<uint8_t> { typedef uint32_t U; };
template <> struct Wide<int32_t> { typedef uint32_t U; };
template <> struct Wide<int64_t> { typedef uint64_t U; };

template <typename C> struct IsFloat { static const bool value = false; };
template <> struct IsFloat<float> { static const bool value = true; };
template <> struct IsFloat<double> { static const bool value = true; };

__device__ __forceinline__ float or_bits(float x, float y) {
  return __uint_as_float(__float_as_uint(x) | __float_as_uint(y));
}
__device__ __forceinline__ float and_bits(float x, float y) {
  return __uint_as_float(__float_as_uint(x) & __float_as_uint(y));
}
__device__ __forceinline__ double or_bits(double x, double y) {
  return __longlong_as_double(__double_as_longlong(x) |
                              __double_as_longlong(y));
}
__device__ __forceinline__ double and_bits(double x, double y) {
  return __longlong_as_double(__double_as_longlong(x) &
                              __double_as_longlong(y));
}

struct OpSum {
  template <typename C> __device__ static C apply(C x, C y) {
    if constexpr (IsFloat<C>::value)
      return add_rn(x, y);
    else
      return (C)((typename Wide<C>::U)x + (typename Wide<C>::U)y);
  }
  /* The _rn intrinsics are never contracted into an FMA with a product. */
  __device__ static float add_rn(float x, float y) { return __fadd_rn(x, y); }
  __device__ static double add_rn(double x, double y) {
    return __dadd_rn(x, y);
  }
};

struct OpProd {
  template <typename C> __device__ static C apply(C x, C y) {
    if constexpr (IsFloat<C>::value)
      return mul_rn(x, y);
    else
      return (C)((typename Wide<C>::U)x * (typename Wide<C>::U)y);
  }
  __device__ static float mul_rn(float x, float y) { return __fmul_rn(x, y); }
  __device__ static double mul_rn(double x, double y) {
    return __dmul_rn(x, y);
  }
};

/*
 * fminf/fmaxf return the other operand for a NaN (IEEE 754-2008); hoop's
 * MIN/MAX return NaN.  x + y of two NaN-or-anything is a quiet NaN.
 */
struct OpMin {
  template <typename C> __device__ static C apply(C x, C y) {
    if constexpr (IsFloat<C>::value) {
      if (x != x || y != y)
        return x + y;
      if (x == y)
        return or_bits(x, y);
    }
    return x < y ? x : y;
  }
};

struct OpMax {
  template <typename C> __device__ static C apply(C x, C y) {
    if constexpr (IsFloat<C>::value) {
      if (x != x || y != y)
        return x + y;
      if (x == y)
        return and_bits(x, y);
    }
    return x > y ? x : y;
  }
};

/* ---- Kernels --------------------------------------------------------- */

template <typename E> union Vec {
  uint4 v;
  typename E::Store e[sizeof(uint4) / sizeof(typename E::Store)];
};

template <typename E, typename Op>
__global__ void reduce_vec(uint4 *d, const uint4 *a, const uint4 *b,
                           size_t nvec) {
  const int lanes = sizeof(uint4) / sizeof(typename E::Store);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nvec;
       i += stride) {
    Vec<E> x, y, r;
    x.v = a[i];
    y.v = b[i];
#pragma unroll
    for (int k = 0; k < lanes; k++)
      r.e[k] = E::store(Op::apply(E::load(x.e[k]), E::load(y.e[k])));
    d[i] = r.v;
  }
}

template <typename E, typename Op>
__global__ void reduce_scalar(typename E::Store *d,
                              const typename E::Store *a,
                              const typename E::Store *b, size_t n) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    d[i] = E::store(Op::apply(E::load(a[i]), E::load(b[i])));
}

/* Quotients as reduce.c takes them: double for native floats, float for
 * halves, C's truncating division for integers. */
template <typename E>
__device__ typename E::Calc quotient(typename E::Calc x, int divisor) {
  typedef typename E::Calc C;
  if constexpr (IsFloat<C>::value && sizeof(C) == sizeof(typename E::Store))
    return (C)__ddiv_rn((double)x, (double)divisor);
  else if constexpr (IsFloat<C>::value)
    return __fdiv_rn(x, (float)divisor);
  else if constexpr (std::is_signed<C>::value)
    return (C)((long long)x / divisor);
  else
    return (C)((unsigned long long)x / (unsigned)divisor);
}

template <typename E>
__global__ void divide(typename E::Store *p, size_t n, int divisor) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    p[i] = E::store(quotient<E>(E::load(p[i]), divisor));
}

/*
 * d[i] = s[i] * the scalar, as OpProd combines.  The scalar is `by`, or
 * *by_dev when that is set, read when the kernel runs: a scalar that
 * earlier work on the stream computes is the one used.
 */
template <typename E, typename V>
__global__ void scale(V *d, const V *s, size_t n, typename E::Store by,
                      const typename E::Store *by_dev) {
  typedef typename E::Store T;
  const int lanes = sizeof(V) / sizeof(T);
  union Pack {
    V v;
    T e[lanes];
  };
  typename E::Calc k = E::load(by_dev != nullptr ? *by_dev : by);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    Pack x, r;
    x.v = s[i];
#pragma unroll
    for (int j = 0; j < lanes; j++)
      r.e[j] = E::store(OpProd::apply(E::load(x.e[j]), k));
    d[i] = r.v;
  }
}

/* Passed by value: kernel parameters live in constant memory. */
struct Sources {
  const void *p[HOOP_CUDA_MAX_SOURCES];
};

/*
 * d[i] (and d2[i] when d2 is set) = s0[i] op s1[i] op ... in source order,
 * in the wide type (fp32 for halves) with one rounding at the end; AVG
 * divides the sum by the number of sources there too.
 */
template <typename E, typename Op, typename V>
__global__ void reduce_many(V *d, V *d2, Sources src, int nsrc, size_t n,
                            int average) {
  typedef typename E::Store T;
  typedef typename E::Calc C;
  const int lanes = sizeof(V) / sizeof(T);
  union Pack {
    V v;
    T e[lanes];
  };
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    Pack x, r;
    C acc[lanes];
    x.v = ((const V *)src.p[0])[i];
#pragma unroll
    for (int k = 0; k < lanes; k++)
      acc[k] = E::load(x.e[k]);
    for (int s = 1; s < nsrc; s++) {
      x.v = ((const V *)src.p[s])[i];
#pragma unroll
      for (int k = 0; k < lanes; k++)
        acc[k] = Op::apply(acc[k], E::load(x.e[k]));
    }
#pragma unroll
    for (int k = 0; k < lanes; k++)
      r.e[k] = E::store(average ? quotient<E>(acc[k], nsrc) : acc[k]);
    d[i] = r.v;
    if (d2 != nullptr)
      d2[i] = r.v;
  }
}

const int kThreads = 256;

/* Enough blocks to cover n threads' work, capped at a few waves. */
unsigned blocks_for(size_t n) {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) !=
          cudaSuccess ||
      sms <= 0)
    sms = 1;
  size_t want = (n + kThreads - 1) / kThreads;
  size_t cap = (size_t)sms * 16;
  return (unsigned)(want < cap ? want : cap);
}

template <typename E, typename Op>
int launch_reduce(void *dst, const void *a, const void *b, size_t n,
                  cudaStream_t s) {
  typedef typename E::Store T;
  const size_t lanes = sizeof(uint4) / sizeof(T);
  uintptr_t align = (uintptr_t)dst | (uintptr_t)a | (uintptr_t)b;
  size_t nvec = align % sizeof(uint4) == 0 ? n / lanes : 0;
  if (nvec > 0)
    reduce_vec<E, Op><<<blocks_for(nvec), kThreads, 0, s>>>(
        (uint4 *)dst, (const uint4 *)a, (const uint4 *)b, nvec);
  size_t done = nvec * lanes;
  if (done < n)
    reduce_scalar<E, Op><<<blocks_for(n - done), kThreads, 0, s>>>(
        (T *)dst + done, (const T *)a + done, (const T *)b + done, n - done);
  return (int)cudaGetLastError();
}

template <typename E>
int launch_op(void *dst, const void *a, const void *b, size_t n,
              hoop_op_t op, cudaStream_t s) {
  switch (op) {
  case HOOP_SUM:
  case HOOP_AVG: return launch_reduce<E, OpSum>(dst, a, b, n, s);
  case HOOP_PROD: return launch_reduce<E, OpProd>(dst, a, b, n, s);
  case HOOP_MIN: return launch_reduce<E, OpMin>(dst, a, b, n, s);
  case HOOP_MAX: return launch_reduce<E, OpMax>(dst, a, b, n, s);
  default: return (int)cudaErrorInvalidValue;
  }
}

template <typename E, typename Op>
int launch_many(void *dst, void *dst2, const void *const *srcs, int nsrc,
                size_t n, int average, cudaStream_t s) {
  typedef typename E::Store T;
  const size_t lanes = sizeof(uint4) / sizeof(T);
  Sources src;
  uintptr_t align = (uintptr_t)dst | (uintptr_t)dst2;
  for (int k = 0; k < nsrc; k++) {
    src.p[k] = srcs[k];
    align |= (uintptr_t)srcs[k];
  }
  size_t nvec = align % sizeof(uint4) == 0 ? n / lanes : 0;
  if (nvec > 0)
    reduce_many<E, Op, uint4><<<blocks_for(nvec), kThreads, 0, s>>>(
        (uint4 *)dst, (uint4 *)dst2, src, nsrc, nvec, average);
  size_t done = nvec * lanes;
  if (done < n) {
    for (int k = 0; k < nsrc; k++)
      src.p[k] = (const T *)srcs[k] + done;
    reduce_many<E, Op, T><<<blocks_for(n - done), kThreads, 0, s>>>(
        (T *)dst + done, dst2 != nullptr ? (T *)dst2 + done : nullptr, src,
        nsrc, n - done, average);
  }
  return (int)cudaGetLastError();
}

template <typename E>
int launch_many_op(void *dst, void *dst2, const void *const *srcs, int nsrc,
                   size_t n, hoop_op_t op, cudaStream_t s) {
  switch (op) {
  case HOOP_SUM: return launch_many<E, OpSum>(dst, dst2, srcs, nsrc, n, 0, s);
  case HOOP_AVG: return launch_many<E, OpSum>(dst, dst2, srcs, nsrc, n, 1, s);
  case HOOP_PROD:
    return launch_many<E, OpProd>(dst, dst2, srcs, nsrc, n, 0, s);
  case HOOP_MIN: return launch_many<E, OpMin>(dst, dst2, srcs, nsrc, n, 0, s);
  case HOOP_MAX: return launch_many<E, OpMax>(dst, dst2, srcs, nsrc, n, 0, s);
  default: return (int)cudaErrorInvalidValue;
  }
}

template <typename E>
int launch_div(void *buf, size_t n, int divisor, cudaStream_t s) {
  divide<E><<<blocks_for(n), kThreads, 0, s>>>((typename E::Store *)buf, n,
                                                divisor);
  return (int)cudaGetLastError();
}

template <typename E>
int launch_scale(void *dst, const void *src, size_t n, const void *scalar,
                 int scalar_on_device, cudaStream_t s) {
  typedef typename E::Store T;
  const size_t lanes = sizeof(uint4) / sizeof(T);
  T by = 0;
  const T *by_dev = nullptr;
  if (scalar_on_device)
    by_dev = (const T *)scalar;
  else
    memcpy(&by, scalar, sizeof by);
  uintptr_t align = (uintptr_t)dst | (uintptr_t)src;
  size_t nvec = align % sizeof(uint4) == 0 ? n / lanes : 0;
  if (nvec > 0)
    scale<E, uint4><<<blocks_for(nvec), kThreads, 0, s>>>(
        (uint4 *)dst, (const uint4 *)src, nvec, by, by_dev);
  size_t done = nvec * lanes;
  if (done < n)
    scale<E, T><<<blocks_for(n - done), kThreads, 0, s>>>(
        (T *)dst + done, (const T *)src + done, n - done, by, by_dev);
  return (int)cudaGetLastError();
}

/* One switch over dtypes for every entry point. */
#define HOOP_CUDA_DTYPES(X)                                                   \
  X(HOOP_I8, Plain<int8_t>)                                                   \
  X(HOOP_U8, Plain<uint8_t>)                                                  \
  X(HOOP_I32, Plain<int32_t>)                                                 \
  X(HOOP_U32, Plain<uint32_t>)                                                \
  X(HOOP_I64, Plain<int64_t>)                                                 \
  X(HOOP_U64, Plain<uint64_t>)                                                \
  X(HOOP_F16, Half)                                                           \
  X(HOOP_F32, Plain<float>)                                                   \
  X(HOOP_F64, Plain<double>)                                                  \
  X(HOOP_BF16, BFloat)                                                        \
  X(HOOP_F8E4M3, Fp8<__NV_E4M3>)                                              \
  X(HOOP_F8E5M2, Fp8<__NV_E5M2>)

} // namespace

extern "C" int hoop__cuda_reduce(void *dst, const void *a, const void *b,
                                 size_t count, hoop_dtype_t dtype,
                                 hoop_op_t op, void *stream) {
  if (count == 0)
    return (int)cudaSuccess;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
#define CASE_(dt, E)                                                          \
  case dt: return launch_op<E>(dst, a, b, count, op, s);
    HOOP_CUDA_DTYPES(CASE_)
#undef CASE_
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int hoop__cuda_reduce_div(void *buf, size_t count,
                                     hoop_dtype_t dtype, int divisor,
                                     void *stream) {
  if (count == 0 || divisor < 1)
    return (int)cudaSuccess;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
#define CASE_(dt, E)                                                          \
  case dt: return launch_div<E>(buf, count, divisor, s);
    HOOP_CUDA_DTYPES(CASE_)
#undef CASE_
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int hoop__cuda_reduce_many(void *dst, void *dst2,
                                      const void *const *srcs, int nsrc,
                                      size_t count, hoop_dtype_t dtype,
                                      hoop_op_t op, void *stream) {
  if (nsrc < 1 || nsrc > HOOP_CUDA_MAX_SOURCES)
    return (int)cudaErrorInvalidValue;
  if (count == 0)
    return (int)cudaSuccess;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
#define CASE_(dt, E)                                                          \
  case dt: return launch_many_op<E>(dst, dst2, srcs, nsrc, count, op, s);
    HOOP_CUDA_DTYPES(CASE_)
#undef CASE_
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int hoop__cuda_reduce_scale(void *dst, const void *src,
                                       size_t count, hoop_dtype_t dtype,
                                       const void *scalar,
                                       int scalar_on_device, void *stream) {
  if (count == 0)
    return (int)cudaSuccess;
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
#define CASE_(dt, E)                                                          \
  case dt:                                                                    \
    return launch_scale<E>(dst, src, count, scalar, scalar_on_device, s);
    HOOP_CUDA_DTYPES(CASE_)
#undef CASE_
  default: return (int)cudaErrorInvalidValue;
  }
}
