// CUDA: the device reduction kernels against the host kernels (which
// test_reduce checks against independent references), and every collective
// on device buffers against reference.h, with N ranks as processes sharing
// the machine's GPU, ordered on each rank's stream; and, without a GPU, the
// CUDA IPC schedules' traffic accounting against the cost model, and the
// host's fp8 narrowing against cuda_fp8.h's (which the device kernels use).
//
// Without a GPU every GPU case skips with the reason.  The probe runs in a
// child process: a parent that initialised CUDA could not fork ranks that
// use it.
#include <gtest/gtest.h>

#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coll_check.h"
#include "gpu_probe.h"
#include "harness.h"
#include "queries.h"
#include "reference.h"

extern "C" {
#include "collectives/device_path.h"
#include "collectives/ipc_schedule.h"
#include "core/types.h"
#include "reduce/reduce.h"
#include "reduce/reduce_cuda.h"
#include "transport/cuda_ipc.h"
}

using namespace hooptest;

namespace {

#define CUDA_OK(call)                                                        \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_);   \
  } while (0)

// ---- Kernels ------------------------------------------------------------

// Random bits with the float specials (NaN, infinities, signed zeros,
// subnormals, the largest finite) mixed in often.
void random_bits(std::vector<char> &buf, hoop_dtype_t t, std::mt19937_64 &rng) {
  size_t esz = hoop_dtype_size(t), n = buf.size() / esz;
  for (size_t i = 0; i < n; i++) {
    uint64_t bits = rng();
    if (is_float(t) && rng() % 8 == 0) {
      static const uint64_t f16[] = {0x7e00, 0x7c00, 0xfc00, 0x8000, 0, 1,
                                     0x03ff, 0x7bff, 0x7d01};
      static const uint64_t bf16[] = {0x7fc0, 0x7f80, 0xff80, 0x8000, 0, 1,
                                      0x007f, 0x7f7f, 0x7f81};
      static const uint64_t f32[] = {0x7fc00000, 0x7f800000, 0xff800000,
                                     0x80000000, 0, 1, 0x007fffff,
                                     0x7f7fffff, 0x7f800001};
      static const uint64_t f64[] = {
          0x7ff8000000000000ull, 0x7ff0000000000000ull,
          0xfff0000000000000ull, 0x8000000000000000ull, 0, 1,
          0x000fffffffffffffull, 0x7fefffffffffffffull,
          0x7ff0000000000001ull};
      // E4M3 has no infinity: its 448 and 256 stand in.
      static const uint64_t e4m3[] = {0x7f, 0x7e, 0x78, 0x80, 0, 1,
                                      0x07, 0x08, 0x38};
      static const uint64_t e5m2[] = {0x7e, 0x7c, 0x7b, 0x80, 0, 1,
                                      0x03, 0x04, 0x7d};
      size_t k = rng() % 9;
      bits = t == HOOP_F16 ? f16[k] : t == HOOP_BF16 ? bf16[k]
           : t == HOOP_F32 ? f32[k] : t == HOOP_F8E4M3 ? e4m3[k]
           : t == HOOP_F8E5M2 ? e5m2[k] : f64[k];
      bits |= (rng() & 1) ? (1ull << (esz * 8 - 1)) : 0;
    } else if (is_float(t)) {
      // Keep most values in a range where sums and products stay finite.
      if (t == HOOP_F32)
        bits = (bits & 0x807fffffull) | ((uint64_t)(110 + rng() % 40) << 23);
      else if (t == HOOP_F64)
        bits = (bits & 0x800fffffffffffffull) |
               ((uint64_t)(1000 + rng() % 40) << 52);
    }
    memcpy(buf.data() + i * esz, &bits, esz);
  }
}

bool is_nan_bits(const char *p, hoop_dtype_t t) {
  uint64_t b = 0;
  memcpy(&b, p, hoop_dtype_size(t));
  switch (t) {
  case HOOP_F16: return (b & 0x7fff) > 0x7c00;
  case HOOP_BF16: return (b & 0x7fff) > 0x7f80;
  case HOOP_F8E4M3: return (b & 0x7f) == 0x7f;
  case HOOP_F8E5M2: return (b & 0x7f) > 0x7c;
  case HOOP_F32: return (b & 0x7fffffff) > 0x7f800000;
  case HOOP_F64: return (b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  default: return false;
  }
}

// Elements of got and want that differ; any NaN matches any NaN.
size_t differing(const std::vector<char> &got, const std::vector<char> &want,
                 hoop_dtype_t t, size_t *first) {
  size_t esz = hoop_dtype_size(t), n = got.size() / esz, bad = 0;
  for (size_t i = 0; i < n; i++) {
    const char *g = got.data() + i * esz, *w = want.data() + i * esz;
    if (memcmp(g, w, esz) == 0 || (is_nan_bits(g, t) && is_nan_bits(w, t)))
      continue;
    if (bad++ == 0)
      *first = i;
  }
  return bad;
}

class CudaKernels : public ::testing::TestWithParam<int> {};

TEST_P(CudaKernels, MatchHostKernelsBitForBit) {
  REQUIRE_GPU();
  in_child([&] {
    hoop_dtype_t t = (hoop_dtype_t)GetParam();
    size_t esz = hoop_dtype_size(t);
    std::mt19937_64 rng(1234 + GetParam());
    // Sizes around the 16-byte vector and odd offsets that force the scalar
    // path; the largest spans many blocks of the grid.
    const size_t counts[] = {1, 7, 8, 9, 15, 16, 17, 1000, 65537, 3000001};
    const size_t offsets[] = {0, 1};
    char *dev = nullptr;
    const size_t most = 3000001 + 1;
    CUDA_OK(cudaMalloc((void **)&dev, 3 * most * esz));
    for (int op = 0; op < HOOP_OP_COUNT; op++) {
      for (size_t count : counts) {
        for (size_t off : offsets) {
          for (bool in_place : {false, true}) {
            std::vector<char> a(count * esz), b(count * esz), want(count * esz),
                got(count * esz);
            random_bits(a, t, rng);
            random_bits(b, t, rng);
            hoop__reduce(want.data(), a.data(), b.data(), count, t,
                         (hoop_op_t)op);
            char *da = dev + off * esz, *db = da + most * esz,
                 *dd = in_place ? da : db + most * esz;
            CUDA_OK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
            ASSERT_EQ(hoop__cuda_reduce(dd, da, db, count, t, (hoop_op_t)op,
                                        nullptr),
                      0);
            CUDA_OK(cudaMemcpy(got.data(), dd, got.size(),
                               cudaMemcpyDeviceToHost));
            size_t first = 0, bad = differing(got, want, t, &first);
            EXPECT_EQ(bad, 0u) << hoop_dtype_name(t) << " "
                               << hoop_op_name((hoop_op_t)op) << " count "
                               << count << " offset " << off
                               << (in_place ? " in place" : "")
                               << ": first difference at " << first;
          }
        }
      }
    }
    for (int divisor : {1, 3, 8}) {
      const size_t count = 100003;
      std::vector<char> v(count * esz), got(count * esz);
      random_bits(v, t, rng);
      CUDA_OK(cudaMemcpy(dev, v.data(), v.size(), cudaMemcpyHostToDevice));
      hoop__reduce_div(v.data(), count, t, divisor);
      ASSERT_EQ(hoop__cuda_reduce_div(dev, count, t, divisor, nullptr), 0);
      CUDA_OK(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost));
      size_t first = 0, bad = differing(got, v, t, &first);
      EXPECT_EQ(bad, 0u) << hoop_dtype_name(t) << " / " << divisor
                         << ": first difference at " << first;
    }
    CUDA_OK(cudaFree(dev));
  });
}

// Scaling with the scalar in the kernel's arguments and read from device
// memory, against the host's hoop__reduce_scale.
TEST_P(CudaKernels, ScaleMatchesHostWithHostAndDeviceScalars) {
  REQUIRE_GPU();
  in_child([&] {
    hoop_dtype_t t = (hoop_dtype_t)GetParam();
    size_t esz = hoop_dtype_size(t);
    std::mt19937_64 rng(5678 + GetParam());
    const size_t counts[] = {1, 7, 17, 1000, 65537};
    const size_t most = 65537 + 1;
    char *dev = nullptr;
    CUDA_OK(cudaMalloc((void **)&dev, 2 * most * esz + esz));
    char *dscalar = dev + 2 * most * esz;
    for (size_t count : counts) {
      for (size_t off : {(size_t)0, (size_t)1}) {
        for (bool in_place : {false, true}) {
          for (int on_device = 0; on_device < 2; on_device++) {
            std::vector<char> src(count * esz), want(count * esz),
                got(count * esz), scalar(esz);
            random_bits(src, t, rng);
            random_bits(scalar, t, rng);
            hoop__reduce_scale(want.data(), src.data(), count, t,
                               scalar.data());
            char *ds = dev + off * esz, *dd = in_place ? ds : ds + most * esz;
            CUDA_OK(cudaMemcpy(ds, src.data(), src.size(),
                               cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(dscalar, scalar.data(), esz,
                               cudaMemcpyHostToDevice));
            ASSERT_EQ(hoop__cuda_reduce_scale(
                          dd, ds, count, t,
                          on_device ? (const void *)dscalar : scalar.data(),
                          on_device, nullptr),
                      0);
            CUDA_OK(cudaMemcpy(got.data(), dd, got.size(),
                               cudaMemcpyDeviceToHost));
            size_t first = 0, bad = differing(got, want, t, &first);
            EXPECT_EQ(bad, 0u) << hoop_dtype_name(t) << " count " << count
                               << " offset " << off
                               << (in_place ? " in place" : "")
                               << (on_device ? " device scalar"
                                             : " host scalar")
                               << ": first difference at " << first;
          }
        }
      }
    }
    CUDA_OK(cudaFree(dev));
  });
}

// The n-source kernel of the CUDA IPC transport, against the host kernels
// applied source by source in the same order.  fp16/bf16/fp8 combine in
// fp32 and round once, so their reference is the fp32 host kernel on the
// widened inputs, rounded at the end.
TEST_P(CudaKernels, ReduceManyMatchesHostInSourceOrder) {
  REQUIRE_GPU();
  in_child([&] {
    hoop_dtype_t t = (hoop_dtype_t)GetParam();
    size_t esz = hoop_dtype_size(t);
    bool half = t == HOOP_F16 || t == HOOP_BF16 || is_fp8(t);
    std::mt19937_64 rng(4321 + GetParam());
    const size_t counts[] = {0, 1, 7, 9, 17, 1000, 65537};
    const size_t most = 65537 + 1;
    const int max_src = 8;
    char *dev = nullptr;
    CUDA_OK(cudaMalloc((void **)&dev, (max_src + 2) * most * esz));
    for (int nsrc : {1, 2, 3, 8}) {
      for (int op = 0; op < HOOP_OP_COUNT; op++) {
        hoop_op_t combine = op == HOOP_AVG ? HOOP_SUM : (hoop_op_t)op;
        for (size_t count : counts) {
          for (size_t off : {(size_t)0, (size_t)1}) {
            std::vector<std::vector<char>> src(nsrc,
                                               std::vector<char>(count * esz));
            const void *dsrc[max_src];
            for (int k = 0; k < nsrc; k++) {
              random_bits(src[k], t, rng);
              char *at = dev + (k * most + off) * esz;
              CUDA_OK(cudaMemcpy(at, src[k].data(), src[k].size(),
                                 cudaMemcpyHostToDevice));
              dsrc[k] = at;
            }
            std::vector<char> want(count * esz);
            if (half) {
              std::vector<float> acc(count), next(count);
              for (int k = 0; k < nsrc; k++) {
                std::vector<float> &dst = k == 0 ? acc : next;
                for (size_t i = 0; i < count; i++)
                  dst[i] = (float)load_float(src[k].data(), i, t);
                if (k > 0)
                  hoop__reduce(acc.data(), acc.data(), next.data(), count,
                               HOOP_F32, combine);
              }
              for (size_t i = 0; i < count; i++)
                store_float(want.data(), i, t,
                            op == HOOP_AVG ? acc[i] / (float)nsrc : acc[i]);
            } else {
              want = src[0];
              for (int k = 1; k < nsrc; k++)
                hoop__reduce(want.data(), want.data(), src[k].data(), count, t,
                             combine);
              if (op == HOOP_AVG)
                hoop__reduce_div(want.data(), count, t, nsrc);
            }
            char *d1 = dev + (max_src * most + off) * esz,
                 *d2 = d1 + most * esz;
            ASSERT_EQ(hoop__cuda_reduce_many(d1, d2, dsrc, nsrc, count, t,
                                             (hoop_op_t)op, nullptr),
                      0);
            for (char *d : {d1, d2}) {
              std::vector<char> got(count * esz);
              CUDA_OK(cudaMemcpy(got.data(), d, got.size(),
                                 cudaMemcpyDeviceToHost));
              size_t first = 0, bad = differing(got, want, t, &first);
              EXPECT_EQ(bad, 0u) << hoop_dtype_name(t) << " "
                                 << hoop_op_name((hoop_op_t)op) << " " << nsrc
                                 << " sources, count " << count << " offset "
                                 << off << (d == d2 ? " (second output)" : "")
                                 << ": first difference at " << first;
            }
          }
        }
      }
    }
    const void *none[1] = {dev};
    EXPECT_NE(hoop__cuda_reduce_many(dev, nullptr, none, 0, 1, t, HOOP_SUM,
                                     nullptr),
              0);
    CUDA_OK(cudaFree(dev));
  });
}

// reduce.c narrows fp8 with its own code; the device kernels call
// cuda_fp8.h's __nv_cvt_float_to_fp8 with __NV_SATFINITE.  Both must give
// the same byte for every float that decides something: each pattern of
// sign, exponent and top 7 mantissa bits (every fp8 tie among them) with
// the low 16 bits zero, just above zero, and just below the next pattern,
// plus a random sample.  Runs on the host: no GPU needed.
TEST(CudaFp8, HostNarrowingMatchesCudaFp8Header) {
  auto check = [](uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    uint8_t e4 = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
    uint8_t e5 = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
    EXPECT_EQ(e4, hoop__f32_to_e4m3(f)) << std::hex << "E4M3 f=0x" << bits;
    EXPECT_EQ(e5, hoop__f32_to_e5m2(f)) << std::hex << "E5M2 f=0x" << bits;
  };
  for (uint32_t hi = 0; hi < 0x10000u && !HasFailure(); hi++) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0xffffu})
      check(hi << 16 | lo);
  }
  std::mt19937_64 rng(0xf8cda);
  for (int i = 0; i < (1 << 20) && !HasFailure(); i++)
    check((uint32_t)rng());
}

TEST(CudaFp8, HostWideningMatchesCudaFp8Header) {
  for (int c = 0; c < 256; c++) {
    for (__nv_fp8_interpretation_t kind : {__NV_E4M3, __NV_E5M2}) {
      float want = __half2float(
          __half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, kind)));
      float got = kind == __NV_E4M3 ? hoop__e4m3_to_f32((uint8_t)c)
                                    : hoop__e5m2_to_f32((uint8_t)c);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << "code " << c;
      else
        EXPECT_EQ(0, memcmp(&want, &got, sizeof got))
            << "code " << c << ": " << want << " vs " << got;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypes, CudaKernels, ::testing::Range(0, (int)HOOP_DTYPE_COUNT),
    [](const ::testing::TestParamInfo<int> &p) {
      return std::string(hoop_dtype_name((hoop_dtype_t)p.param));
    });

// ---- Collectives on device buffers --------------------------------------

struct Case {
  Coll coll;
  hoop_dtype_t dtype;
  hoop_op_t op;
  size_t count; // reduce-scatter, all-gather, all-to-all: one rank's block
  bool in_place;
  int root;
  uint64_t seed;
};

// A device buffer with one guard element on each side, and its host image.
struct DeviceBuf {
  size_t esz = 0, n = 0;
  char *base = nullptr;
  ~DeviceBuf() { cudaFree(base); }
  char *data() { return base + esz; }
  bool alloc(size_t elems, size_t elem_size) {
    esz = elem_size;
    n = elems;
    return cudaMalloc((void **)&base, (n + 2) * esz) == cudaSuccess &&
           cudaMemset(base, 0xA5, (n + 2) * esz) == cudaSuccess;
  }
};

bool guards_intact(RankLog &log, DeviceBuf &b, const std::string &what) {
  std::vector<unsigned char> g(b.esz);
  for (size_t at : {(size_t)0, b.n + 1}) {
    cudaMemcpy(g.data(), b.base + at * b.esz, b.esz, cudaMemcpyDeviceToHost);
    for (unsigned char c : g) {
      if (c != 0xA5) {
        log.fail("%s: wrote outside the device buffer", what.c_str());
        return false;
      }
    }
  }
  return true;
}

void run_case(RankLog &log, hoop_comm_t comm, cudaStream_t stream, int rank,
              int nranks, const Case &c) {
  size_t esz = hoop_dtype_size(c.dtype);
  size_t total = coll_blocks(c.coll) ? c.count * nranks : c.count;
  std::string what = std::string(coll_name(c.coll)) + " " +
                     hoop_dtype_name(c.dtype) + " " + hoop_op_name(c.op) +
                     " count " + std::to_string(c.count) + " root " +
                     std::to_string(c.root) +
                     (c.in_place ? " in-place" : " out-of-place");
  DeviceBuf send, recv;
  if (!send.alloc(total, esz) || !recv.alloc(total, esz)) {
    log.fail("%s: cudaMalloc failed", what.c_str());
    return;
  }
  std::vector<char> host(total * esz + 1);
  hoop_op_t fill_op = c.coll == Coll::AllGather ||
                              c.coll == Coll::Broadcast ||
                              c.coll == Coll::AllToAll
                          ? HOOP_SUM
                          : c.op;
  Placement p = place(c.coll, c.in_place, send.data(), recv.data(), esz,
                      c.count, total, rank);
  fill_input(host.data(), c.dtype, fill_op, c.seed, rank, p.in_first,
             p.in_n);
  // The input travels on the stream too: the collective must wait for it.
  cudaMemcpyAsync(p.in, host.data(), p.in_n * esz, cudaMemcpyHostToDevice,
                  stream);
  hoop_result_t res = call_coll(comm, c.coll, p.in, p.out, c.count,
                                c.dtype, c.op, c.root, stream);
  if (res != HOOP_SUCCESS) {
    log.fail("%s: %s: %s", what.c_str(), hoop_result_name(res),
             hoop_comm_last_error(comm));
    return;
  }
  size_t out_n = c.coll == Coll::ReduceScatter ? c.count : total;
  // Pageable memory: this copy blocks the thread until the stream reaches
  // it, behind the collective (a host-function gate deadlocked here).
  std::vector<char> got(out_n * esz + 1);
  cudaMemcpyAsync(got.data(), p.out, out_n * esz, cudaMemcpyDeviceToHost,
                  stream);
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    log.fail("%s: cudaStreamSynchronize: %s", what.c_str(),
             cudaGetErrorString(e));
    return;
  }
  if (!check_output(log, comm, what, got.data(),
                    {c.coll, c.dtype, c.op, c.count, c.root, c.seed}, rank,
                    nranks))
    return;
  guards_intact(log, send, what);
  guards_intact(log, recv, what);
}

std::vector<Case> all_cases(int nranks) {
  std::vector<Case> cases;
  // Sizes: empty, one element, a prime, not divisible by the rank count,
  // and one that spans several 64 KiB chunks (the chunk64k.* rerun).
  const size_t counts[] = {0, 1, 1009, (size_t)1000 * nranks + 1,
                           (size_t)50000 + nranks};
  uint64_t seed = 1;
  for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather,
                    Coll::Broadcast, Coll::Reduce, Coll::AllToAll}) {
    bool has_op = coll == Coll::AllReduce || coll == Coll::ReduceScatter ||
                  coll == Coll::Reduce;
    bool rooted = coll == Coll::Broadcast || coll == Coll::Reduce;
    for (int t = 0; t < HOOP_DTYPE_COUNT; t++) {
      for (int op = 0; op < (has_op ? HOOP_OP_COUNT : 1); op++) {
        for (size_t count : counts) {
          for (bool in_place : {false, true}) {
            if (in_place && coll == Coll::AllToAll)
              continue; // it has no in-place form
            int root = rooted ? (int)(seed % nranks) : 0;
            cases.push_back({coll, (hoop_dtype_t)t, (hoop_op_t)op, count,
                             in_place, root, seed++});
          }
        }
      }
    }
  }
  return cases;
}

void with_stream(RankLog &log, const std::function<void(cudaStream_t)> &fn) {
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess)
    e = cudaStreamCreate(&stream);
  if (e != cudaSuccess) {
    log.fail("CUDA set-up: %s", cudaGetErrorString(e));
    return;
  }
  fn(stream);
  cudaStreamDestroy(stream);
}

// Whether HOOP_TRANSPORT forces a host transport, which stages device calls.
bool transport_forced() {
  const char *forced = getenv("HOOP_TRANSPORT");
  return forced != nullptr && *forced != '\0';
}

#define REQUIRE_CUDA_IPC()                                                   \
  do {                                                                       \
    if (transport_forced())                                                  \
      GTEST_SKIP() << "HOOP_TRANSPORT=" << getenv("HOOP_TRANSPORT")          \
                   << " stages device calls";                                \
  } while (0)

// Runs that are meant to fail: a short timeout, so a hang shows as one.
struct FailureRun {
  RunOptions opt;
  FailureRun() {
    opt.comm_timeout_ms = 20000;
    opt.timeout_s = 60;
  }
};

// n zeroed floats of device memory (p is NULL, and the rank failed, if not).
struct DeviceFloats {
  float *p = nullptr;
  DeviceFloats(RankLog &log, size_t n) {
    if (cudaMalloc((void **)&p, n * sizeof(float)) != cudaSuccess ||
        cudaMemset(p, 0, n * sizeof(float)) != cudaSuccess) {
      log.fail("device buffer of %zu floats: cudaMalloc/cudaMemset failed",
               n);
      cudaFree(p);
      p = nullptr;
    }
  }
  ~DeviceFloats() { cudaFree(p); }
};

class CudaCollectives : public ::testing::TestWithParam<int> {};

TEST_P(CudaCollectives, EveryCollectiveDtypeOpSizeMatchesReference) {
  REQUIRE_GPU();
  RunOptions opt;
  opt.timeout_s = 500;
  RunResult r = run_ranks(
      GetParam(),
      [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        with_stream(log, [&](cudaStream_t stream) {
          for (const Case &c : all_cases(nranks)) {
            run_case(log, comm, stream, rank, nranks, c);
            if (!log.ok())
              return;
          }
          // The path these cases took is the one this run meant to test.
          const char *path = nullptr;
          const char *want = nranks == 1          ? "none"
                             : transport_forced() ? "staged"
                                                  : "cuda_ipc";
          RANK_EXPECT_OK(log, comm, hoop_comm_device_path(comm, &path));
          RANK_EXPECT(log, path != nullptr && strcmp(path, want) == 0,
                      "device calls went %s, expected %s", path, want);
          // The counters saw the device all-reduces and what they moved.
          hoop_stats_t st = HOOP_STATS_INIT;
          RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
          uint64_t calls = 0, moved = 0;
          for (int a = HOOP_ALGO_RING; a < HOOP_ALGO_COUNT; a++) {
            calls += st.by_coll[HOOP_COLL_ALLREDUCE][a].calls;
            moved += st.by_coll[HOOP_COLL_ALLREDUCE][a].bytes_received;
          }
          RANK_EXPECT(log, nranks == 1 || (calls >= 100 && moved > 0),
                      "all-reduce counters: %llu calls, %llu bytes",
                      (unsigned long long)calls, (unsigned long long)moved);
        });
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST_P(CudaCollectives, EveryAlgorithmLargeFloatSum) {
  REQUIRE_GPU();
  RunOptions opt;
  opt.timeout_s = 300;
  RunResult r = run_ranks(
      GetParam(),
      [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        with_stream(log, [&](cudaStream_t stream) {
          const size_t count = (24u << 20) / sizeof(float) + 5;
          for (hoop_algo_t algo :
               {HOOP_ALGO_RING, HOOP_ALGO_TREE, HOOP_ALGO_PS}) {
            RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, algo));
            for (bool in_place : {false, true}) {
              run_case(log, comm, stream, rank, nranks,
                       {Coll::AllReduce, HOOP_F32, HOOP_SUM, count, in_place,
                        0, 100 + (uint64_t)algo});
              if (algo != HOOP_ALGO_PS) {
                run_case(log, comm, stream, rank, nranks,
                         {Coll::Broadcast, HOOP_BF16, HOOP_SUM, count,
                          in_place, nranks - 1, 110 + (uint64_t)algo});
                run_case(log, comm, stream, rank, nranks,
                         {Coll::Reduce, HOOP_F64, HOOP_MAX, count / 2,
                          in_place, nranks / 2, 120 + (uint64_t)algo});
              }
            }
          }
          RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_AUTO));
          for (bool in_place : {false, true}) {
            run_case(log, comm, stream, rank, nranks,
                     {Coll::ReduceScatter, HOOP_F16, HOOP_SUM,
                      count / nranks + 1, in_place, 0, 130});
            run_case(log, comm, stream, rank, nranks,
                     {Coll::AllGather, HOOP_I32, HOOP_SUM,
                      count / nranks + 1, in_place, 0, 131});
          }
        });
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaCollectives,
                         ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int> &p) {
                           return std::to_string(p.param) + "ranks";
                         });

void CUDART_CB sleep_100ms(void *) { usleep(100 * 1000); }

// The call returns before the stream has run it; work queued before it
// (here a delayed input copy) is what it reduces, and work queued after it
// sees the result.  A host-buffer call right after waits for the device
// call, so the ranks stay in step.
TEST(CudaStreams, CallIsOrderedOnTheStreamAndReturnsBeforeIt) {
  REQUIRE_GPU();
  RunResult r = run_ranks(
      3, [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        with_stream(log, [&](cudaStream_t stream) {
          const size_t n = 1 << 20;
          float *host = nullptr, *dev = nullptr;
          if (cudaMallocHost((void **)&host, n * sizeof(float)) != cudaSuccess ||
              cudaMalloc((void **)&dev, n * sizeof(float)) != cudaSuccess) {
            log.fail("allocation failed");
            return;
          }
          for (int round = 0; round < 3; round++) {
            cudaMemset(dev, 0xff, n * sizeof(float)); // NaN until copied
            cudaDeviceSynchronize();
            for (size_t i = 0; i < n; i++)
              host[i] = (float)(rank + 1 + round + (i % 7));
            cudaLaunchHostFunc(stream, sleep_100ms, nullptr);
            cudaMemcpyAsync(dev, host, n * sizeof(float),
                            cudaMemcpyHostToDevice, stream);
            RANK_EXPECT_OK(log, comm,
                           hoop_allreduce(comm, dev, dev, n, HOOP_F32,
                                          HOOP_SUM, stream));
            RANK_EXPECT(log, cudaStreamQuery(stream) == cudaErrorNotReady,
                        "round %d: the call waited for its stream", round);
            cudaMemcpyAsync(host, dev, n * sizeof(float),
                            cudaMemcpyDeviceToHost, stream);
            int64_t token = rank, sum = 0;
            RANK_EXPECT_OK(log, comm,
                           hoop_allreduce(comm, &token, &sum, 1, HOOP_I64,
                                          HOOP_SUM, nullptr));
            RANK_EXPECT(log, sum == nranks * (nranks - 1) / 2,
                        "host all-reduce after a device one gave %" PRId64,
                        sum);
            cudaStreamSynchronize(stream);
            size_t wrong = 0;
            for (size_t i = 0; i < n; i++) {
              float want = (float)(nranks * (nranks + 1) / 2 +
                                   nranks * (round + (int)(i % 7)));
              wrong += host[i] != want;
            }
            RANK_EXPECT(log, wrong == 0, "round %d: %zu wrong", round, wrong);
          }
          cudaFree(dev);
          cudaFreeHost(host);
        });
      });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// A reset must clear what device calls queued before it move, as reading
// the counters includes them: the call below is still behind a 100 ms
// delay on its stream when the counters are reset.
TEST(CudaStreams, ResetStatsClearsCallsStillQueued) {
  REQUIRE_GPU();
  RunResult r = run_ranks(
      2, [](RankLog &log, hoop_comm_t comm, int, int) {
        with_stream(log, [&](cudaStream_t stream) {
          DeviceFloats buf(log, 1 << 16);
          if (buf.p == nullptr)
            return;
          for (int round = 0; round < 2; round++) {
            cudaLaunchHostFunc(stream, sleep_100ms, nullptr);
            RANK_EXPECT_OK(log, comm,
                           hoop_allreduce(comm, buf.p, buf.p, 1 << 16,
                                          HOOP_F32, HOOP_SUM, stream));
            if (round == 0)
              RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
          }
          hoop_stats_t st = HOOP_STATS_INIT;
          RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
          uint64_t calls = 0;
          for (int a = 0; a < HOOP_ALGO_COUNT; a++)
            calls += st.by_coll[HOOP_COLL_ALLREDUCE][a].calls;
          RANK_EXPECT(log, calls == 1,
                      "%llu all-reduces counted, not the one after the reset",
                      (unsigned long long)calls);
          cudaStreamSynchronize(stream);
        });
      });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// ---- Queries from another thread -----------------------------------------

// tests/test_threads.cc for device calls: a watchdog thread polls every
// query while the user thread queues many device all-reduces on one
// stream, switching the algorithm setting to the parameter server halfway
// and back after the last.  A queued call carries the setting it was made
// with, so exactly the second half runs as PS, on every rank alike (ranks
// that disagreed would fail each other's header or record checks).
class CudaThreads : public ::testing::TestWithParam<int> {};

TEST_P(CudaThreads, QueriesFromAnotherThreadWhileDeviceCallsAreQueued) {
  REQUIRE_GPU();
  const int calls = 2000, half = calls / 2;
  // 5 elements: not divisible by most rank counts, so slices differ.
  const size_t n = 5;
  RunResult r = run_ranks(GetParam(), [&](RankLog &log, hoop_comm_t comm,
                                          int rank, int nranks) {
    with_stream(log, [&](cudaStream_t stream) {
      std::vector<float> in(calls * n), out(calls * n);
      for (int i = 0; i < calls; i++)
        for (size_t e = 0; e < n; e++)
          in[i * n + e] = (float)(rank + 1) * (float)(i % 7 + e);
      DeviceFloats send(log, calls * n), recv(log, calls * n);
      if (send.p == nullptr || recv.p == nullptr)
        return;
      RANK_EXPECT(log,
                  cudaMemcpy(send.p, in.data(), in.size() * sizeof(float),
                             cudaMemcpyHostToDevice) == cudaSuccess,
                  "copying the inputs to the device failed");
      RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_RING));
      std::atomic<bool> done{false};
      long queries = 0;
      RankLog watchdog_log(rank); // a log is one thread's
      std::thread watchdog([&] {
        uint64_t last_sent = 0;
        while (!done.load(std::memory_order_acquire) && watchdog_log.ok()) {
          last_sent = query_everything(watchdog_log, comm, rank, nranks,
                                       last_sent,
                                       {HOOP_ALGO_RING, HOOP_ALGO_PS});
          queries++;
          usleep(100);
        }
      });
      for (int i = 0; i < calls && log.ok(); i++) {
        if (i == half)
          RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_PS));
        RANK_EXPECT_OK(log, comm,
                       hoop_allreduce(comm, send.p + i * n, recv.p + i * n,
                                      n, HOOP_F32, HOOP_SUM, stream));
      }
      RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_RING));
      cudaError_t e = cudaStreamSynchronize(stream);
      RANK_EXPECT(log, e == cudaSuccess, "the stream: %s",
                  cudaGetErrorString(e));
      done.store(true, std::memory_order_release);
      watchdog.join();
      RANK_EXPECT(log, watchdog_log.ok(), "a query failed (above)");
      RANK_EXPECT(log, queries > 0, "the watchdog never ran a query");

      RANK_EXPECT(log,
                  cudaMemcpy(out.data(), recv.p, out.size() * sizeof(float),
                             cudaMemcpyDeviceToHost) == cudaSuccess,
                  "copying the results to the host failed");
      float ranks_sum = (float)(nranks * (nranks + 1) / 2);
      size_t wrong = 0, first = 0;
      for (size_t k = 0; k < out.size(); k++) {
        float want = ranks_sum * (float)(k / n % 7 + k % n);
        if (out[k] != want && wrong++ == 0)
          first = k;
      }
      RANK_EXPECT(log, wrong == 0,
                  "%zu elements wrong, first call %zu element %zu: %g",
                  wrong, first / n, first % n, (double)out[first]);

      hoop_stats_t st = HOOP_STATS_INIT;
      RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
      uint64_t counted = 0;
      for (const hoop_coll_stats_t &s : st.by_coll[HOOP_COLL_ALLREDUCE])
        counted += s.calls;
      uint64_t ps = st.by_coll[HOOP_COLL_ALLREDUCE][HOOP_ALGO_PS].calls;
      RANK_EXPECT(log, counted == (uint64_t)calls,
                  "%llu all-reduces counted, %d made",
                  (unsigned long long)counted, calls);
      RANK_EXPECT(log, ps == (uint64_t)(calls - half),
                  "%llu ran as PS, %d were made with PS set",
                  (unsigned long long)ps, calls - half);
      hoop_result_t async = HOOP_ERR_INTERNAL;
      RANK_EXPECT_OK(log, comm, hoop_comm_get_async_error(comm, &async));
      RANK_EXPECT(log, async == HOOP_SUCCESS, "asynchronous error %s",
                  hoop_result_name(async));
      const char *path = nullptr;
      RANK_EXPECT_OK(log, comm, hoop_comm_device_path(comm, &path));
      const char *want = transport_forced() ? "staged" : "cuda_ipc";
      RANK_EXPECT(log, path != nullptr && strcmp(path, want) == 0,
                  "device path %s, expected %s",
                  path != nullptr ? path : "(null)", want);
    });
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CudaThreads, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int> &p) {
                           return std::to_string(p.param) + "ranks";
                         });

// Send and receive on device buffers, staged through host memory: a group
// in which every rank sends to the next, receives from the one before,
// sends to itself and sends an empty message, with the inputs written on
// the stream behind a 100 ms delay (the send must wait for them); then a
// single send and receive between ranks 0 and 1 outside any group.
TEST(CudaP2p, SendRecvAndGroupsOnDeviceBuffers) {
  REQUIRE_GPU();
  RunResult r = run_ranks(
      3, [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        with_stream(log, [&](cudaStream_t stream) {
          const size_t n = (1 << 20) + 3;
          const size_t bytes = n * sizeof(int32_t);
          int32_t *out = nullptr, *in = nullptr, *self_in = nullptr;
          if (cudaMalloc((void **)&out, bytes) != cudaSuccess ||
              cudaMalloc((void **)&in, bytes) != cudaSuccess ||
              cudaMalloc((void **)&self_in, bytes) != cudaSuccess) {
            log.fail("cudaMalloc failed");
            return;
          }
          std::vector<int32_t> host(n), got(n);
          for (size_t i = 0; i < n; i++)
            host[i] = (int32_t)(rank * 1000003 + i);
          cudaMemset(in, 0xff, bytes);
          cudaMemset(self_in, 0xff, bytes);
          cudaDeviceSynchronize();
          cudaLaunchHostFunc(stream, sleep_100ms, nullptr);
          cudaMemcpyAsync(out, host.data(), bytes, cudaMemcpyHostToDevice,
                          stream);
          int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
          RANK_EXPECT_OK(log, comm, hoop_group_start());
          RANK_EXPECT_OK(log, comm,
                         hoop_send(comm, out, n, HOOP_I32, next, stream));
          RANK_EXPECT_OK(log, comm,
                         hoop_recv(comm, in, n, HOOP_I32, prev, stream));
          RANK_EXPECT_OK(log, comm,
                         hoop_send(comm, out, n, HOOP_I32, rank, stream));
          RANK_EXPECT_OK(log, comm,
                         hoop_recv(comm, self_in, n, HOOP_I32, rank, stream));
          RANK_EXPECT_OK(log, comm,
                         hoop_send(comm, out, 0, HOOP_I32, next, stream));
          RANK_EXPECT_OK(log, comm,
                         hoop_recv(comm, in, 0, HOOP_I32, prev, stream));
          RANK_EXPECT_OK(log, comm, hoop_group_end());
          cudaMemcpyAsync(got.data(), in, bytes, cudaMemcpyDeviceToHost,
                          stream);
          cudaStreamSynchronize(stream);
          size_t wrong = 0;
          for (size_t i = 0; i < n; i++)
            wrong += got[i] != (int32_t)(prev * 1000003 + i);
          RANK_EXPECT(log, wrong == 0, "from rank %d: %zu wrong", prev,
                      wrong);
          cudaMemcpy(got.data(), self_in, bytes, cudaMemcpyDeviceToHost);
          wrong = 0;
          for (size_t i = 0; i < n; i++)
            wrong += got[i] != host[i];
          RANK_EXPECT(log, wrong == 0, "to itself: %zu wrong", wrong);
          if (rank < 2) {
            hoop_result_t res =
                rank == 0 ? hoop_send(comm, out, n, HOOP_I32, 1, stream)
                          : hoop_recv(comm, in, n, HOOP_I32, 0, stream);
            RANK_EXPECT_OK(log, comm, res);
            if (rank == 1) {
              cudaMemcpyAsync(got.data(), in, bytes, cudaMemcpyDeviceToHost,
                              stream);
              cudaStreamSynchronize(stream);
              wrong = 0;
              for (size_t i = 0; i < n; i++)
                wrong += got[i] != (int32_t)i;
              RANK_EXPECT(log, wrong == 0, "single recv: %zu wrong", wrong);
            }
          }
          cudaFree(out);
          cudaFree(in);
          cudaFree(self_in);
        });
      });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Calls a rank cannot serve on device buffers fail with a reason, on the
// calling rank, before any byte moves; the communicator stays usable.
TEST(CudaErrors, MixedOrUnsupportedBuffersAreRefused) {
  REQUIRE_GPU();
  RunResult r = run_ranks(
      2, [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        with_stream(log, [&](cudaStream_t stream) {
          float *dev = nullptr;
          std::vector<float> host(64, 1.0f);
          if (cudaMalloc((void **)&dev, 64 * sizeof(float)) != cudaSuccess) {
            log.fail("cudaMalloc failed");
            return;
          }
          hoop_result_t res = hoop_allreduce(comm, host.data(), dev, 64,
                                             HOOP_F32, HOOP_SUM, stream);
          RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT,
                      "mixed buffers gave %s", hoop_result_name(res));
          RANK_EXPECT(log,
                      strstr(hoop_comm_last_error(comm), "host memory") !=
                          nullptr,
                      "message: %s", hoop_comm_last_error(comm));
          // Still usable: a real call on both ranks works.
          cudaMemcpy(dev, host.data(), 64 * sizeof(float),
                     cudaMemcpyHostToDevice);
          RANK_EXPECT_OK(log, comm,
                         hoop_allreduce(comm, dev, dev, 64, HOOP_F32,
                                        HOOP_SUM, stream));
          cudaStreamSynchronize(stream);
          cudaMemcpy(host.data(), dev, 64 * sizeof(float),
                     cudaMemcpyDeviceToHost);
          RANK_EXPECT(log, host[63] == (float)nranks, "got %f", host[63]);
          cudaFree(dev);
        });
      });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Over CUDA IPC a peer's GPU waits for this rank's counters.  A rank that
// exits between calls must not leave its peers' streams waiting for ever:
// their proxies notice, name it, break the communicator and release the
// waits, and the stream completes (its results are garbage).
TEST(CudaIpc, PeerThatExitsIsNamedAndItsPeersStreamsFinish) {
  REQUIRE_GPU();
  REQUIRE_CUDA_IPC();
  FailureRun run;
  RunResult r = run_ranks(
      3,
      [&run](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        with_stream(log, [&](cudaStream_t stream) {
          const size_t n = 1 << 20;
          DeviceFloats buf(log, n);
          float *dev = buf.p;
          if (dev == nullptr)
            return;
          RANK_EXPECT_OK(log, comm,
                         hoop_allreduce(comm, dev, dev, n, HOOP_F32,
                                        HOOP_SUM, stream));
          cudaStreamSynchronize(stream);
          const char *path = nullptr;
          RANK_EXPECT_OK(log, comm, hoop_comm_device_path(comm, &path));
          RANK_EXPECT(log, path != nullptr && strcmp(path, "cuda_ipc") == 0,
                      "device calls went %s", path);
          RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
          if (rank == nranks - 1)
            _exit(0);
          RANK_EXPECT_OK(log, comm,
                         hoop_allreduce(comm, dev, dev, n, HOOP_F32,
                                        HOOP_SUM, stream));
          // Returns once the proxy released the waits; the copies that
          // ran after the release may have read a dead process's memory,
          // which CUDA may report here, so only the hoop error is checked.
          // A rank released by another's failure may end the call on its
          // stream before its own proxy has judged it: the error comes
          // within the timeout, so it is polled for as a watchdog would.
          cudaStreamSynchronize(stream);
          hoop_result_t async = HOOP_SUCCESS;
          auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(run.opt.comm_timeout_ms);
          do {
            RANK_EXPECT_OK(log, comm,
                           hoop_comm_get_async_error(comm, &async));
            if (async == HOOP_SUCCESS)
              usleep(1000);
          } while (async == HOOP_SUCCESS &&
                   std::chrono::steady_clock::now() < deadline);
          RANK_EXPECT(log,
                      async == HOOP_ERR_REMOTE || async == HOOP_ERR_TIMEOUT,
                      "async error %s", hoop_result_name(async));
          char who[32];
          snprintf(who, sizeof who, "rank %d", nranks - 1);
          RANK_EXPECT(log, strstr(hoop_comm_last_error(comm), who) != nullptr,
                      "the error does not name %s: %s", who,
                      hoop_comm_last_error(comm));
        });
      },
      run.opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Ranks that would cut calls into chunks differently are refused at the
// first device call, on every rank, instead of corrupting data.
TEST(CudaIpc, DifferentChunkSettingsAreRefusedOnEveryRank) {
  REQUIRE_GPU();
  REQUIRE_CUDA_IPC();
  RunResult r = run_ranks(
      2, [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        // Read once per process, at the first device call.
        setenv("HOOP_CUDA_IPC_CHUNK_BYTES", rank == 0 ? "1M" : "2M", 1);
        with_stream(log, [&](cudaStream_t stream) {
          DeviceFloats buf(log, 1024);
          float *dev = buf.p;
          if (dev == nullptr)
            return;
          hoop_result_t res = hoop_allreduce(comm, dev, dev, 1024, HOOP_F32,
                                             HOOP_SUM, stream);
          RANK_EXPECT(log, res == HOOP_ERR_MISMATCH, "gave %s",
                      hoop_result_name(res));
          RANK_EXPECT(log,
                      strstr(hoop_comm_last_error(comm),
                             "HOOP_CUDA_IPC_CHUNK_BYTES") != nullptr,
                      "message: %s", hoop_comm_last_error(comm));
        });
      });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// The GPU cannot see that ranks made different calls; the ranks' posted
// call records can, so every rank fails, naming both calls, instead of
// returning garbage.
TEST(CudaIpc, DifferentCallsFailOnEveryRank) {
  REQUIRE_GPU();
  REQUIRE_CUDA_IPC();
  FailureRun run;
  RunResult r = run_ranks(
      3,
      [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        with_stream(log, [&](cudaStream_t stream) {
          const size_t n = 4096;
          DeviceFloats buf(log, n);
          float *dev = buf.p;
          if (dev == nullptr)
            return;
          RANK_EXPECT_OK(log, comm,
                         rank == nranks - 1
                             ? hoop_broadcast(comm, dev, dev, n, HOOP_F32, 0,
                                              stream)
                             : hoop_allreduce(comm, dev, dev, n, HOOP_F32,
                                              HOOP_SUM, stream));
          cudaStreamSynchronize(stream);
          hoop_result_t async = HOOP_SUCCESS;
          for (int i = 0; i < 200 && async == HOOP_SUCCESS; i++) {
            RANK_EXPECT_OK(log, comm,
                           hoop_comm_get_async_error(comm, &async));
            usleep(10000);
          }
          RANK_EXPECT(log,
                      async == HOOP_ERR_MISMATCH || async == HOOP_ERR_REMOTE,
                      "async error %s", hoop_result_name(async));
          RANK_EXPECT(log,
                      strstr(hoop_comm_last_error(comm), "differs") !=
                              nullptr &&
                          strstr(hoop_comm_last_error(comm),
                                 "hoop_broadcast") != nullptr,
                      "error: %s", hoop_comm_last_error(comm));
        });
      },
      run.opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// ---- CUDA IPC traffic, host arithmetic only -----------------------------

struct TrafficCase {
  hoop_coll_t coll;
  int ps;
  size_t oneshot_bytes;
  hoop_algo_t algo;
  // Bytes all ranks together read from peers, in units of count * esz,
  // as the schedule's model says, for n ranks and root.
  double (*model)(int n, int root, int rank);
};

// Every rank's view of one call: what it reads from and gives to each
// peer.  What a rank reads from q must be what q says it gave it, and the
// sum over ranks must be the model's.
void check_traffic(const TrafficCase &t, int n, size_t count, size_t per,
                   int root) {
  const size_t esz = 4;
  bool blocks = t.coll == HOOP_COLL_REDUCE_SCATTER ||
                t.coll == HOOP_COLL_ALLGATHER || t.coll == HOOP_COLL_ALLTOALL;
  struct hoop_chunking k;
  k.rows = blocks ? (size_t)n : 1;
  k.total = count;
  k.per = per;
  k.nchunks = count == 0 ? 1 : (count + per - 1) / per;
  struct hoop_call c = {};
  c.coll = t.coll;
  c.dtype = HOOP_F32;
  c.op = HOOP_SUM;
  c.elem_size = esz;
  c.root = root;
  std::vector<std::vector<uint64_t>> sent(n, std::vector<uint64_t>(n)),
      received(n, std::vector<uint64_t>(n));
  std::string what = std::string(hoop__coll_name(t.coll)) + " " +
                     hoop_algo_name(t.algo) + " on " + std::to_string(n) +
                     " ranks, count " + std::to_string(count) + ", chunk " +
                     std::to_string(per) + ", root " + std::to_string(root);
  double total = 0, model = 0;
  for (int r = 0; r < n; r++) {
    struct hoop_ipc ipc = {};
    ipc.rank = r;
    ipc.nranks = n;
    hoop_algo_t algo =
        hoop__ipc_traffic(&ipc, &c, &k, t.ps, t.oneshot_bytes,
                          sent[r].data(), received[r].data());
    // One-shot costs nothing extra with 2 ranks or nothing to move.
    bool free_oneshot = t.coll == HOOP_COLL_ALLREDUCE && !t.ps &&
                        (n == 2 || count == 0);
    EXPECT_EQ(algo, free_oneshot ? HOOP_ALGO_ONESHOT : t.algo) << what;
    EXPECT_EQ(sent[r][r] + received[r][r], 0u) << what << ": rank " << r;
    for (int q = 0; q < n; q++)
      total += (double)received[r][q];
    model += t.model(n, root, r) * (double)(count * esz);
  }
  for (int r = 0; r < n; r++)
    for (int q = 0; q < n; q++)
      EXPECT_EQ(received[r][q], sent[q][r])
          << what << ": rank " << r << " reads " << received[r][q]
          << " B from rank " << q << ", which gives " << sent[q][r];
  EXPECT_EQ(total, model) << what;
}

TEST(CudaIpcTraffic, EveryScheduleMatchesItsModelAndBothEndsAgree) {
  const size_t huge = (size_t)1 << 40;
  const TrafficCase cases[] = {
      // Split: the reduction reads N-1 slices, the copies N-1 more.
      {HOOP_COLL_ALLREDUCE, 0, 0, HOOP_ALGO_RING,
       [](int n, int, int) { return 2.0 * (n - 1) / n; }},
      {HOOP_COLL_ALLREDUCE, 0, huge, HOOP_ALGO_ONESHOT,
       [](int n, int, int) { return (double)(n - 1); }},
      {HOOP_COLL_ALLREDUCE, 1, huge, HOOP_ALGO_PS,
       [](int n, int, int r) { return r == 0 ? (double)(n - 1) : 1.0; }},
      {HOOP_COLL_REDUCE_SCATTER, 0, 0, HOOP_ALGO_RING,
       [](int n, int, int) { return (double)(n - 1); }},
      {HOOP_COLL_ALLGATHER, 0, 0, HOOP_ALGO_RING,
       [](int n, int, int) { return (double)(n - 1); }},
      {HOOP_COLL_ALLTOALL, 0, 0, HOOP_ALGO_P2P,
       [](int n, int, int) { return (double)(n - 1); }},
      {HOOP_COLL_BROADCAST, 0, 0, HOOP_ALGO_RING,
       [](int, int root, int r) { return r == root ? 0.0 : 1.0; }},
      {HOOP_COLL_REDUCE, 0, 0, HOOP_ALGO_RING,
       [](int n, int root, int r) { return r == root ? n - 1.0 : 0.0; }},
  };
  for (const TrafficCase &t : cases)
    for (int n : {2, 3, 5, 8})
      for (size_t count : {(size_t)0, (size_t)1, (size_t)1000,
                           (size_t)(1 << 20) + 3})
        for (size_t per : {(size_t)64, (size_t)4096, (size_t)1 << 22})
          check_traffic(t, n, count, per, n - 1);
}

} // namespace
