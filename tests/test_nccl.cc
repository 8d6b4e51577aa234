// NCCL programs on hoop.  This file knows only NCCL's API: it is compiled
// twice, against hoop's include/nccl.h linked with hoop's libnccl.so.2,
// and against NVIDIA's nccl.h linked with NVIDIA's libnccl.so.2 but run
// with hoop's library in LD_PRELOAD, as a program built for NCCL would be.
// Buffers are host memory, so every case runs without a GPU.  Results are
// checked against references computed here from the inputs.
#include <gtest/gtest.h>
#include <nccl.h>

#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fork_ranks.h"

using namespace hooptest;

namespace {

// ---- ranks as forked processes ---------------------------------------------

#define CHECK_NCCL(log, call)                                                \
  do {                                                                       \
    ncclResult_t r_ = (call);                                                \
    if (r_ != ncclSuccess)                                                   \
      (log).fail("%s:%d: %s returned %d (%s): %s", __FILE__, __LINE__,       \
                 #call, (int)r_, ncclGetErrorString(r_),                      \
                 ncclGetLastError(nullptr));                                 \
  } while (0)

using RankFn = std::function<void(RankLog &, ncclComm_t, int, int)>;

// Runs fn as `n` ranks; with init, each joins one communicator first.
RunResult run_ranks(int n, const RankFn &fn, bool init = true) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    RunResult failed;
    failed.exit_codes.assign((size_t)n, 99);
    return failed;
  }
  return fork_ranks(
      n,
      [&](int r) {
        RankLog log(r);
        ncclComm_t comm = nullptr;
        if (init) {
          ncclResult_t res = ncclCommInitRank(&comm, n, id, r);
          if (res != ncclSuccess) {
            fprintf(stderr, "[rank %d] init: %s: %s\n", r,
                    ncclGetErrorString(res), ncclGetLastError(nullptr));
            return 3;
          }
        }
        fn(log, comm, r, n);
        if (comm != nullptr)
          ncclCommDestroy(comm);
        return log.ok() ? 0 : 1;
      },
      120);
}

void expect_all_ok(const RunResult &r) {
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// ---- element types, from their definitions ---------------------------------

struct TypeInfo {
  ncclDataType_t type;
  const char *name;
  size_t size;
  bool is_float;
  int ebits, mbits; // binary floating point formats; 0 for the others
  bool is_signed;
};

const TypeInfo kTypes[] = {
    {ncclInt8, "int8", 1, false, 0, 0, true},
    {ncclUint8, "uint8", 1, false, 0, 0, false},
    {ncclInt32, "int32", 4, false, 0, 0, true},
    {ncclUint32, "uint32", 4, false, 0, 0, false},
    {ncclInt64, "int64", 8, false, 0, 0, true},
    {ncclUint64, "uint64", 8, false, 0, 0, false},
    {ncclFloat16, "float16", 2, true, 5, 10, true},
    {ncclFloat32, "float32", 4, true, 8, 23, true},
    {ncclFloat64, "float64", 8, true, 11, 52, true},
    {ncclBfloat16, "bfloat16", 2, true, 8, 7, true},
    {ncclFloat8e4m3, "float8e4m3", 1, true, 4, 3, true},
    {ncclFloat8e5m2, "float8e5m2", 1, true, 5, 2, true},
};

// Bits of v in a format with ebits/mbits; v is 0 or a normal number the
// format holds exactly (the tests choose such values).
uint64_t encode(double v, const TypeInfo &t) {
  if (t.type == ncclFloat32) {
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
  }
  if (t.type == ncclFloat64) {
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
  }
  uint64_t sign = v < 0 ? 1 : 0;
  v = std::fabs(v);
  if (v == 0)
    return sign << (t.ebits + t.mbits);
  int e;
  double m = std::frexp(v, &e); // v = m * 2^e, m in [0.5, 1)
  uint64_t bias = (1u << (t.ebits - 1)) - 1;
  uint64_t exp = (uint64_t)(e - 1 + (int)bias);
  uint64_t frac = (uint64_t)std::ldexp(m * 2 - 1, t.mbits);
  return (sign << (t.ebits + t.mbits)) | (exp << t.mbits) | frac;
}

double decode(uint64_t bits, const TypeInfo &t) {
  if (t.type == ncclFloat32) {
    float f;
    uint32_t b = (uint32_t)bits;
    memcpy(&f, &b, 4);
    return f;
  }
  if (t.type == ncclFloat64) {
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
  int bias = (1 << (t.ebits - 1)) - 1;
  uint64_t frac = bits & ((1ull << t.mbits) - 1);
  uint64_t exp = (bits >> t.mbits) & ((1ull << t.ebits) - 1);
  double sign = (bits >> (t.ebits + t.mbits)) & 1 ? -1 : 1;
  if (exp == 0)
    return sign * std::ldexp((double)frac, 1 - bias - t.mbits);
  return sign * std::ldexp(1.0 + std::ldexp((double)frac, -t.mbits),
                           (int)exp - bias);
}

void store(void *buf, size_t i, double v, const TypeInfo &t) {
  char *p = (char *)buf + i * t.size;
  uint64_t bits;
  if (t.is_float)
    bits = encode(v, t);
  else
    bits = (uint64_t)(int64_t)v; // two's complement, truncated below
  memcpy(p, &bits, t.size);      // little-endian
}

double load(const void *buf, size_t i, const TypeInfo &t) {
  uint64_t bits = 0;
  memcpy(&bits, (const char *)buf + i * t.size, t.size);
  if (t.is_float)
    return decode(bits, t);
  if (t.is_signed && t.size < 8) {
    int shift = 64 - 8 * (int)t.size;
    return (double)((int64_t)(bits << shift) >> shift);
  }
  return t.is_signed ? (double)(int64_t)bits : (double)bits;
}

// Inputs whose sums, products, min and max every type holds exactly (for
// e5m2, two bits of mantissa, only 0 and 1 qualify).
double input(const TypeInfo &t, int rank, size_t i, ncclRedOp_t op) {
  unsigned k = (unsigned)(rank * 7 + i * 3);
  if (op == ncclProd)
    return k % 3 == 0 ? 2 : 1;
  if (t.type == ncclFloat8e5m2)
    return k % 2;
  if (t.type == ncclFloat8e4m3)
    return 0.5 * (k % 3);
  if (t.is_signed && !t.is_float)
    return (double)(int)(k % 5) - 2;
  return k % 5;
}

// The reduction over ranks 0..n-1 of element i, as NCCL defines the ops.
double reference(const TypeInfo &t, int n, size_t i, ncclRedOp_t op,
                 double premul) {
  double acc = input(t, 0, i, op) * premul;
  for (int r = 1; r < n; r++) {
    double v = input(t, r, i, op) * premul;
    switch (op) {
    case ncclProd:
      acc *= v;
      break;
    case ncclMax:
      acc = std::max(acc, v);
      break;
    case ncclMin:
      acc = std::min(acc, v);
      break;
    default:
      acc += v;
    }
  }
  if (op == ncclAvg)
    acc = t.is_float ? acc / n : std::trunc(acc / n);
  return acc;
}

bool close_enough(double got, double want, const TypeInfo &t,
                  ncclRedOp_t op) {
  if (op != ncclAvg || !t.is_float)
    return got == want;
  // The average divides once: allow the format's rounding.
  return std::fabs(got - want) <= std::fabs(want) * std::ldexp(1.0, -t.mbits);
}

struct Op {
  ncclRedOp_t op; // for PreMulSum: the base for inputs (ncclSum)
  const char *name;
  bool premul;
  ncclScalarResidence_t residence;
};

const Op kOps[] = {
    {ncclSum, "sum", false, ncclScalarHostImmediate},
    {ncclProd, "prod", false, ncclScalarHostImmediate},
    {ncclMax, "max", false, ncclScalarHostImmediate},
    {ncclMin, "min", false, ncclScalarHostImmediate},
    {ncclAvg, "avg", false, ncclScalarHostImmediate},
    {ncclSum, "premulsum-host", true, ncclScalarHostImmediate},
    {ncclSum, "premulsum-device", true, ncclScalarDevice},
};

// ---- every collective, type and operator ----------------------------------

void fill(std::vector<char> &buf, const TypeInfo &t, int rank, size_t count,
          ncclRedOp_t op, size_t offset = 0) {
  for (size_t i = 0; i < count; i++)
    store(buf.data(), i, input(t, rank, i + offset, op), t);
}

// Reductions: allreduce (in and out of place), reduce, reduce-scatter.
void reductions(RankLog &log, ncclComm_t comm, int rank, int n, size_t count) {
  for (const TypeInfo &t : kTypes) {
    for (const Op &o : kOps) {
      ncclRedOp_t op = o.op;
      double premul = 1;
      std::vector<char> scalar(8);
      if (o.premul) {
        premul = 2;
        store(scalar.data(), 0, 2, t);
        CHECK_NCCL(log, ncclRedOpCreatePreMulSum(&op, scalar.data(), t.type,
                                                 o.residence, comm));
      }
      std::vector<char> send(count * t.size + 1), recv(count * t.size + 1);
      fill(send, t, rank, count, o.op);
      std::vector<char> original = send;
      CHECK_NCCL(log, ncclAllReduce(send.data(), recv.data(), count, t.type,
                                    op, comm, nullptr));
      for (size_t i = 0; i < count; i++) {
        double want = reference(t, n, i, o.op, premul);
        if (!close_enough(load(recv.data(), i, t), want, t, o.op)) {
          log.fail("allreduce %s %s n=%d count=%zu [%zu]: %g, want %g",
                   t.name, o.name, n, count, i, load(recv.data(), i, t), want);
          break;
        }
      }
      if (send != original)
        log.fail("allreduce %s %s changed its input", t.name, o.name);
      // In place.
      CHECK_NCCL(log, ncclAllReduce(send.data(), send.data(), count, t.type,
                                    op, comm, nullptr));
      if (memcmp(send.data(), recv.data(), count * t.size) != 0)
        log.fail("allreduce %s %s in place differs", t.name, o.name);
      // Reduce to the last rank.
      fill(send, t, rank, count, o.op);
      std::vector<char> red(count * t.size + 1, 0);
      CHECK_NCCL(log, ncclReduce(send.data(), red.data(), count, t.type, op,
                                 n - 1, comm, nullptr));
      if (rank == n - 1 && memcmp(red.data(), recv.data(), count * t.size))
        log.fail("reduce %s %s differs from allreduce", t.name, o.name);
      // Reduce-scatter: block r of the reduction of n blocks.
      std::vector<char> big(count * (size_t)n * t.size + 1);
      for (size_t i = 0; i < count * (size_t)n; i++)
        store(big.data(), i, input(t, rank, i, o.op), t);
      std::vector<char> mine(count * t.size + 1);
      CHECK_NCCL(log, ncclReduceScatter(big.data(), mine.data(), count,
                                        t.type, op, comm, nullptr));
      for (size_t i = 0; i < count; i++) {
        double want = reference(t, n, (size_t)rank * count + i, o.op, premul);
        if (!close_enough(load(mine.data(), i, t), want, t, o.op)) {
          log.fail("reducescatter %s %s n=%d [%zu]: %g, want %g", t.name,
                   o.name, n, i, load(mine.data(), i, t), want);
          break;
        }
      }
      if (o.premul)
        CHECK_NCCL(log, ncclRedOpDestroy(op, comm));
    }
  }
}

// Data movement: broadcast, bcast, allgather (in place too), alltoall,
// gather, scatter.
void movements(RankLog &log, ncclComm_t comm, int rank, int n, size_t count) {
  // These calls move bytes only: a few element sizes suffice.
  for (const TypeInfo &ty : {kTypes[0], kTypes[6], kTypes[10], kTypes[8]}) {
    size_t es = ty.size, nb = count * es;
    auto val = [&](int r, size_t i) { return input(ty, r, i, ncclMin); };
    int root = n / 2;
    std::vector<char> a(nb + 1), b(nb + 1);
    fill(a, ty, rank, count, ncclMin);
    CHECK_NCCL(log, ncclBroadcast(a.data(), b.data(), count, ty.type, root,
                                  comm, nullptr));
    for (size_t i = 0; i < count; i++)
      if (load(b.data(), i, ty) != val(root, i)) {
        log.fail("broadcast %s [%zu]", ty.name, i);
        break;
      }
    fill(a, ty, rank, count, ncclMin);
    CHECK_NCCL(log, ncclBcast(a.data(), count, ty.type, root, comm, nullptr));
    if (memcmp(a.data(), b.data(), nb) != 0)
      log.fail("bcast %s differs from broadcast", ty.name);

    std::vector<char> all(nb * (size_t)n + 1);
    fill(a, ty, rank, count, ncclMin);
    CHECK_NCCL(log, ncclAllGather(a.data(), all.data(), count, ty.type, comm,
                                  nullptr));
    auto check_gathered = [&](const std::vector<char> &g, const char *what) {
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++)
          if (load(g.data(), (size_t)r * count + i, ty) != val(r, i)) {
            log.fail("%s %s block %d [%zu]", what, ty.name, r, i);
            return;
          }
    };
    check_gathered(all, "allgather");
    std::vector<char> inplace(nb * (size_t)n + 1);
    memcpy(inplace.data() + (size_t)rank * nb, a.data(), nb);
    CHECK_NCCL(log, ncclAllGather(inplace.data() + (size_t)rank * nb,
                                  inplace.data(), count, ty.type, comm,
                                  nullptr));
    check_gathered(inplace, "allgather in place");

    // Alltoall: block p of rank r's input = f(r, p).
    std::vector<char> s(nb * (size_t)n + 1), d(nb * (size_t)n + 1);
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++)
        store(s.data(), (size_t)p * count + i, val(rank, (size_t)p * 31 + i),
              ty);
    CHECK_NCCL(log, ncclAlltoAll(s.data(), d.data(), count, ty.type, comm,
                                 nullptr));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++)
        if (load(d.data(), (size_t)r * count + i, ty) !=
            val(r, (size_t)rank * 31 + i)) {
          log.fail("alltoall %s block %d [%zu]", ty.name, r, i);
          r = n;
          break;
        }

    // Gather to root, out of place and in place.
    std::vector<char> g(nb * (size_t)n + 1, 0);
    CHECK_NCCL(log, ncclGather(a.data(), g.data(), count, ty.type, root, comm,
                               nullptr));
    if (rank == root)
      check_gathered(g, "gather");
    std::vector<char> gi(nb * (size_t)n + 1, 0);
    memcpy(gi.data() + (size_t)rank * nb, a.data(), nb);
    CHECK_NCCL(log, ncclGather(rank == root ? gi.data() + (size_t)rank * nb
                                            : a.data(),
                               gi.data(), count, ty.type, root, comm,
                               nullptr));
    if (rank == root)
      check_gathered(gi, "gather in place");

    // Scatter from root: rank r gets block r.
    std::vector<char> sc(nb * (size_t)n + 1), out(nb + 1);
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++)
        store(sc.data(), (size_t)r * count + i, val(r, i), ty);
    CHECK_NCCL(log, ncclScatter(sc.data(), out.data(), count, ty.type, root,
                                comm, nullptr));
    for (size_t i = 0; i < count; i++)
      if (load(out.data(), i, ty) != val(rank, i)) {
        log.fail("scatter %s [%zu]", ty.name, i);
        break;
      }
  }
}

class NcclCollectives : public ::testing::TestWithParam<int> {};

TEST_P(NcclCollectives, EveryCollectiveTypeAndOperatorMatchesTheReference) {
  int n = GetParam();
  expect_all_ok(run_ranks(n, [](RankLog &log, ncclComm_t comm, int rank, int nr) {
    for (size_t count : {(size_t)0, (size_t)1, (size_t)13})
      reductions(log, comm, rank, nr, count);
    for (size_t count : {(size_t)0, (size_t)1, (size_t)13, (size_t)70001})
      movements(log, comm, rank, nr, count);
  }));
}

TEST_P(NcclCollectives, LargeAllReduce) {
  int n = GetParam();
  expect_all_ok(run_ranks(n, [](RankLog &log, ncclComm_t comm, int rank, int nr) {
    const TypeInfo &t = kTypes[7];
    size_t count = (1 << 20) + 3;
    std::vector<char> send(count * 4), recv(count * 4);
    fill(send, t, rank, count, ncclSum);
    CHECK_NCCL(log, ncclAllReduce(send.data(), recv.data(), count, t.type,
                                  ncclSum, comm, nullptr));
    for (size_t i = 0; i < count; i += 997)
      if (load(recv.data(), i, t) != reference(t, nr, i, ncclSum, 1)) {
        log.fail("large allreduce [%zu]", i);
        break;
      }
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, NcclCollectives,
                         ::testing::Values(1, 2, 3, 8));

// ---- groups ------------------------------------------------------------------

TEST(NcclGroups, SendRecvPatternsInOneGroup) {
  for (int n : {2, 3, 5}) {
    expect_all_ok(run_ranks(n, [](RankLog &log, ncclComm_t comm, int rank,
                                  int nr) {
      const size_t count = 1001;
      // Every rank sends a distinct message to every rank, itself too,
      // and the group nests.
      std::vector<std::vector<int32_t>> out((size_t)nr), in((size_t)nr);
      CHECK_NCCL(log, ncclGroupStart());
      CHECK_NCCL(log, ncclGroupStart());
      for (int p = 0; p < nr; p++) {
        out[(size_t)p].resize(count);
        in[(size_t)p].assign(count, -1);
        for (size_t i = 0; i < count; i++)
          out[(size_t)p][i] = (int32_t)(rank * 100000 + p * 1000 + (int)i);
        CHECK_NCCL(log, ncclRecv(in[(size_t)p].data(), count, ncclInt32, p,
                                 comm, nullptr));
        CHECK_NCCL(log, ncclSend(out[(size_t)p].data(), count, ncclInt32, p,
                                 comm, nullptr));
      }
      CHECK_NCCL(log, ncclGroupEnd());
      CHECK_NCCL(log, ncclGroupEnd());
      for (int p = 0; p < nr; p++)
        for (size_t i = 0; i < count; i++)
          if (in[(size_t)p][i] != (int32_t)(p * 100000 + rank * 1000 + (int)i)) {
            log.fail("from %d [%zu]: %d", p, i, in[(size_t)p][i]);
            return;
          }
      // A ring shift, with a collective in the same group.
      int32_t token = rank, got = -1;
      std::vector<int32_t> sum(3, rank), total(3, 0);
      CHECK_NCCL(log, ncclGroupStart());
      CHECK_NCCL(log, ncclSend(&token, 1, ncclInt32, (rank + 1) % nr, comm,
                               nullptr));
      CHECK_NCCL(log, ncclAllReduce(sum.data(), total.data(), 3, ncclInt32,
                                    ncclSum, comm, nullptr));
      CHECK_NCCL(log, ncclRecv(&got, 1, ncclInt32, (rank + nr - 1) % nr, comm,
                               nullptr));
      CHECK_NCCL(log, ncclGroupEnd());
      if (got != (rank + nr - 1) % nr)
        log.fail("ring shift got %d", got);
      if (total[0] != nr * (nr - 1) / 2)
        log.fail("allreduce in the group: %d", total[0]);
    }));
  }
}

// One thread, several ranks: ncclCommInitAll, then groups that span every
// communicator (how nccl-tests -g and PyTorch's coalescing drive NCCL).
TEST(NcclGroups, OneThreadDrivesSeveralCommunicators) {
  for (int n : {2, 3, 4}) {
    expect_all_ok(run_ranks(1, [n](RankLog &log, ncclComm_t, int, int) {
      std::vector<ncclComm_t> comms((size_t)n);
      CHECK_NCCL(log, ncclCommInitAll(comms.data(), n, nullptr));
      for (int r = 0; r < n; r++) {
        int rank = -1, count = -1;
        CHECK_NCCL(log, ncclCommUserRank(comms[(size_t)r], &rank));
        CHECK_NCCL(log, ncclCommCount(comms[(size_t)r], &count));
        if (rank != r || count != n)
          log.fail("comm %d: rank %d of %d", r, rank, count);
      }
      const size_t count = 4099;
      std::vector<std::vector<float>> bufs((size_t)n);
      for (int round = 0; round < 3; round++) {
        CHECK_NCCL(log, ncclGroupStart());
        for (int r = 0; r < n; r++) {
          bufs[(size_t)r].assign(count, (float)(r + round));
          CHECK_NCCL(log, ncclAllReduce(bufs[(size_t)r].data(),
                                        bufs[(size_t)r].data(), count,
                                        ncclFloat, ncclSum, comms[(size_t)r],
                                        nullptr));
        }
        CHECK_NCCL(log, ncclGroupEnd());
        float want = (float)(n * (n - 1) / 2 + n * round);
        for (int r = 0; r < n; r++)
          if (bufs[(size_t)r][count - 1] != want)
            log.fail("round %d comm %d: %g, want %g", round, r,
                     bufs[(size_t)r][count - 1], want);
      }
      // Send/recv between the communicators' ranks in one group.
      std::vector<int> out((size_t)n), in((size_t)n, -1);
      CHECK_NCCL(log, ncclGroupStart());
      for (int r = 0; r < n; r++) {
        out[(size_t)r] = 10 * r;
        CHECK_NCCL(log, ncclSend(&out[(size_t)r], 1, ncclInt32, (r + 1) % n,
                                 comms[(size_t)r], nullptr));
        CHECK_NCCL(log, ncclRecv(&in[(size_t)r], 1, ncclInt32,
                                 (r + n - 1) % n, comms[(size_t)r], nullptr));
      }
      CHECK_NCCL(log, ncclGroupEnd());
      for (int r = 0; r < n; r++)
        if (in[(size_t)r] != 10 * ((r + n - 1) % n))
          log.fail("p2p across comms: rank %d got %d", r, in[(size_t)r]);
      ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
      CHECK_NCCL(log, ncclGroupStart());
      for (int r = 0; r < n; r++)
        CHECK_NCCL(log, ncclAllReduce(bufs[(size_t)r].data(),
                                      bufs[(size_t)r].data(), count,
                                      ncclFloat, ncclSum, comms[(size_t)r],
                                      nullptr));
      CHECK_NCCL(log, ncclGroupSimulateEnd(&sim));
      if (!(sim.estimatedTime > 0))
        log.fail("simulated time %g", sim.estimatedTime);
      for (ncclComm_t c : comms)
        CHECK_NCCL(log, ncclCommDestroy(c));
    }, false));
  }
}

// ---- communicators: non-blocking init, split, shrink, abort --------------

TEST(NcclComms, NonBlockingInitIsPolledToSuccess) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  expect_all_ok(run_ranks(3, [id](RankLog &log, ncclComm_t, int rank, int n) {
    if (rank != 0)
      usleep(200 * 1000);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, rank, &config);
    if (r != ncclInProgress && r != ncclSuccess)
      log.fail("init returned %d", (int)r);
    ncclResult_t state = ncclInProgress;
    bool saw_in_progress = false;
    for (int i = 0; i < 60000 && state == ncclInProgress; i++) {
      CHECK_NCCL(log, ncclCommGetAsyncError(comm, &state));
      saw_in_progress |= state == ncclInProgress;
      if (state == ncclInProgress)
        usleep(1000);
    }
    if (state != ncclSuccess)
      log.fail("init ended with %d", (int)state);
    // Rank 0 waits for the others, who start 200 ms late.
    if (rank == 0 && !saw_in_progress)
      log.fail("rank 0 never saw ncclInProgress");
    int x = rank + 1;
    CHECK_NCCL(log, ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm,
                                  nullptr));
    if (x != n * (n + 1) / 2)
      log.fail("allreduce after init: %d", x);
    CHECK_NCCL(log, ncclCommDestroy(comm));
  }, false));
}

TEST(NcclComms, SplitByColorAndKey) {
  expect_all_ok(run_ranks(5, [](RankLog &log, ncclComm_t comm, int rank, int n) {
    // Ranks 0,2,4 and 1,3; rank 4 opts out; new ranks in reverse order.
    int color = rank == 4 ? NCCL_SPLIT_NOCOLOR : rank % 2;
    ncclComm_t sub = nullptr;
    CHECK_NCCL(log, ncclCommSplit(comm, color, -rank, &sub, nullptr));
    if (color == NCCL_SPLIT_NOCOLOR) {
      if (sub != nullptr)
        log.fail("NOCOLOR got a communicator");
      return;
    }
    int size = 0, me = -1;
    CHECK_NCCL(log, ncclCommCount(sub, &size));
    CHECK_NCCL(log, ncclCommUserRank(sub, &me));
    // Keys -rank order each color's ranks from the highest down.
    int want_rank = color == 0 ? (rank == 2 ? 0 : 1) : (rank == 3 ? 0 : 1);
    if (size != 2 || me != want_rank)
      log.fail("split: rank %d of %d, want %d of 2", me, size, want_rank);
    int x = rank;
    CHECK_NCCL(log, ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, sub,
                                  nullptr));
    if (x != (color == 0 ? 2 : 4))
      log.fail("allreduce on the split: %d", x);
    CHECK_NCCL(log, ncclCommDestroy(sub));
    (void)n;
  }));
}

TEST(NcclComms, ShrinkWithoutAndAfterAFailure) {
  // Healthy: ranks 0..3 drop rank 1, which takes no part.
  expect_all_ok(run_ranks(4, [](RankLog &log, ncclComm_t comm, int rank, int) {
    if (rank == 1)
      return;
    int excluded[] = {1};
    ncclComm_t small = nullptr;
    CHECK_NCCL(log, ncclCommShrink(comm, excluded, 1, &small, nullptr,
                                   NCCL_SHRINK_DEFAULT));
    int size = 0, me = -1;
    CHECK_NCCL(log, ncclCommCount(small, &size));
    CHECK_NCCL(log, ncclCommUserRank(small, &me));
    if (size != 3 || me != (rank == 0 ? 0 : rank - 1))
      log.fail("shrunk: rank %d of %d", me, size);
    int x = rank;
    CHECK_NCCL(log, ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, small,
                                  nullptr));
    if (x != 0 + 2 + 3)
      log.fail("allreduce after shrink: %d", x);
    CHECK_NCCL(log, ncclCommDestroy(small));
  }));
  // Rank 0 dies; the others see the error, then go on without it.
  RunResult run =
      run_ranks(3, [](RankLog &log, ncclComm_t comm, int rank, int) {
        if (rank == 0) {
          usleep(100 * 1000);
          kill(getpid(), SIGKILL);
        }
        std::vector<float> v(1 << 16, 1.0f);
        ncclResult_t r = ncclSuccess;
        for (int i = 0; i < 1000 && r == ncclSuccess; i++)
          r = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum,
                            comm, nullptr);
        if (r != ncclRemoteError)
          log.fail("the call with a dead peer returned %d", (int)r);
        ncclResult_t async = ncclSuccess;
        CHECK_NCCL(log, ncclCommGetAsyncError(comm, &async));
        if (async != ncclRemoteError)
          log.fail("async error after the failure: %d", (int)async);
        int excluded[] = {0};
        ncclComm_t small = nullptr;
        CHECK_NCCL(log, ncclCommShrink(comm, excluded, 1, &small, nullptr,
                                       NCCL_SHRINK_ABORT));
        int x = rank;
        CHECK_NCCL(log, ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, small,
                                      nullptr));
        if (x != 3)
          log.fail("allreduce of the survivors: %d", x);
        CHECK_NCCL(log, ncclCommDestroy(small));
      });
  EXPECT_EQ(run.exit_codes[0], 128 + SIGKILL);
  EXPECT_EQ(run.exit_codes[1], 0);
  EXPECT_EQ(run.exit_codes[2], 0);
}

// Several ids for one job (large jobs spread their rendezvous so).
TEST(NcclComms, InitRankScalableWithTwoIds) {
  ncclUniqueId ids[2];
  ASSERT_EQ(ncclGetUniqueId(&ids[0]), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&ids[1]), ncclSuccess);
  std::vector<ncclUniqueId> v(ids, ids + 2);
  expect_all_ok(run_ranks(4, [v](RankLog &log, ncclComm_t, int rank, int n) {
    std::vector<ncclUniqueId> mine = v;
    ncclComm_t comm = nullptr;
    CHECK_NCCL(log, ncclCommInitRankScalable(&comm, n, rank, 2, mine.data(),
                                             nullptr));
    int x = rank;
    CHECK_NCCL(log, ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm,
                                  nullptr));
    if (x != 6)
      log.fail("allreduce: %d", x);
    CHECK_NCCL(log, ncclCommDestroy(comm));
  }, false));
}

// A revoked communicator refuses calls but can still be shrunk.
TEST(NcclComms, RevokeThenShrinkToAllRanks) {
  expect_all_ok(run_ranks(3, [](RankLog &log, ncclComm_t comm, int rank, int n) {
    CHECK_NCCL(log, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
    int x = rank;
    if (ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, nullptr) !=
        ncclInvalidUsage)
      log.fail("a call on a revoked communicator was not refused");
    ncclComm_t again = nullptr;
    CHECK_NCCL(log, ncclCommShrink(comm, nullptr, 0, &again, nullptr,
                                   NCCL_SHRINK_DEFAULT));
    CHECK_NCCL(log, ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, again,
                                  nullptr));
    if (x != n * (n - 1) / 2)
      log.fail("allreduce after revoke and shrink: %d", x);
    CHECK_NCCL(log, ncclCommDestroy(again));
  }));
}

TEST(NcclComms, AbortFromAnotherThreadEndsAWaitingCall) {
  expect_all_ok(run_ranks(2, [](RankLog &log, ncclComm_t comm, int rank, int) {
    if (rank == 1) {
      usleep(3000 * 1000); // never joins the call; outlives rank 0's wait
      return;
    }
    std::thread aborter([comm] {
      usleep(300 * 1000);
      ncclCommAbort(comm);
    });
    auto start = std::chrono::steady_clock::now();
    int x = 1;
    ncclResult_t r =
        ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, nullptr);
    double s = std::chrono::duration<double>(
                   std::chrono::steady_clock::now() - start)
                   .count();
    aborter.join();
    if (r == ncclSuccess)
      log.fail("the aborted call succeeded");
    if (s > 2.0)
      log.fail("abort took %.2f s to end the call", s);
    _exit(log.ok() ? 0 : 1); // the communicator is gone
  }));
}

// PyTorch's watchdog polls every communicator from its own thread.
TEST(NcclComms, WatchdogPollingDuringTenThousandCalls) {
  expect_all_ok(run_ranks(2, [](RankLog &log, ncclComm_t comm, int rank, int n) {
    std::atomic<bool> done{false};
    std::atomic<long> polls{0}, bad{0};
    std::thread watchdog([&] {
      while (!done.load()) {
        ncclResult_t e = ncclInProgress;
        if (ncclCommGetAsyncError(comm, &e) != ncclSuccess ||
            e != ncclSuccess)
          bad++;
        polls++;
        usleep(1000);
      }
    });
    // Big enough that the calls outlast many of the watchdog's polls.
    std::vector<float> v(4096);
    for (int i = 0; i < 10000; i++) {
      std::fill(v.begin(), v.end(), (float)(rank + i));
      ncclResult_t r = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat,
                                     ncclSum, comm, nullptr);
      if (r != ncclSuccess || v[4095] != (float)(n * i + 1)) {
        log.fail("call %d: result %d value %g", i, (int)r, v[4095]);
        break;
      }
    }
    done = true;
    watchdog.join();
    if (bad.load() != 0)
      log.fail("%ld false errors in %ld polls", bad.load(), polls.load());
    if (polls.load() < 10)
      log.fail("the watchdog polled only %ld times", polls.load());
  }));
}

// ---- the library ------------------------------------------------------------

// Whichever way the program was linked, the NCCL it runs on is hoop's: the
// only libnccl mapped is the one this build made.
TEST(NcclLibrary, TheLibraryRunningIsHoops) {
  char want[PATH_MAX];
  ASSERT_NE(realpath(HOOP_NCCL_LIBRARY, want), nullptr);
  FILE *maps = fopen("/proc/self/maps", "r");
  ASSERT_NE(maps, nullptr);
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, maps) != nullptr) {
    const char *path = strchr(line, '/');
    if (path == nullptr || strstr(path, "libnccl") == nullptr)
      continue;
    std::string p(path);
    p.erase(p.find_last_not_of("\n") + 1);
    EXPECT_EQ(p, want) << "another libnccl is mapped";
    found++;
  }
  fclose(maps);
  EXPECT_GT(found, 0);
}

// ---- bad input and queries --------------------------------------------------

TEST(NcclErrors, BadArgumentsAreRefusedWithATextAndTheRightCode) {
  expect_all_ok(run_ranks(2, [](RankLog &log, ncclComm_t comm, int rank, int) {
    int x = 0;
    auto expect = [&](ncclResult_t got, ncclResult_t want, const char *what,
                      const char *needle) {
      if (got != want)
        log.fail("%s returned %d, want %d", what, (int)got, (int)want);
      const char *text = ncclGetLastError(comm);
      if (text == nullptr || strstr(text, needle) == nullptr)
        log.fail("%s: last error \"%s\" lacks \"%s\"", what,
                 text ? text : "(null)", needle);
    };
    expect(ncclAllReduce(&x, &x, 1, (ncclDataType_t)12, ncclSum, comm,
                         nullptr),
           ncclInvalidArgument, "bad dtype", "datatype");
    expect(ncclAllReduce(&x, &x, 1, ncclInt32, (ncclRedOp_t)77, comm,
                         nullptr),
           ncclInvalidArgument, "bad op", "op 77");
    expect(ncclBroadcast(&x, &x, 1, ncclInt32, 2, comm, nullptr),
           ncclInvalidArgument, "bad root", "root 2");
    expect(ncclSend(&x, 1, ncclInt32, -1, comm, nullptr),
           ncclInvalidArgument, "bad peer", "peer -1");
    expect(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, nullptr, nullptr),
           ncclInvalidArgument, "NULL comm", "NULL");
    expect(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument,
           "destroying a built-in op", "ncclRedOpDestroy");
    expect(ncclGroupEnd(), ncclInvalidUsage, "group end without start",
           "ncclGroupStart");
    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    bad.magic = 0x1234;
    ncclComm_t sub = nullptr;
    expect(ncclCommSplit(comm, 0, 0, &sub, &bad), ncclInvalidArgument,
           "config without the magic", "NCCL_CONFIG_INITIALIZER");
    // The communicator still works after argument errors.
    x = rank + 1;
    CHECK_NCCL(log, ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm,
                                  nullptr));
    if (x != 3)
      log.fail("allreduce after the errors: %d", x);
  }));
}

// nccl_device.h's host functions, declared here since that header needs
// CUDA C++.  Programs built against NCCL 2.28 (PyTorch 2.11) reference them
// whether or not they use them; hoop answers the team queries and refuses
// to make a device communicator, saying why.
struct DeviceTeam {
  int nRanks, rank, stride;
};
extern "C" {
ncclResult_t ncclDevCommCreate(ncclComm_t, const void *, void *);
ncclResult_t ncclDevCommDestroy(ncclComm_t, const void *);
DeviceTeam ncclTeamWorld(ncclComm_t);
DeviceTeam ncclTeamLsa(ncclComm_t);
DeviceTeam ncclTeamRail(ncclComm_t);
int ncclTeamRankToWorld(ncclComm_t, DeviceTeam, int);
int ncclTeamRankToLsa(ncclComm_t, DeviceTeam, int);
}

TEST(NcclDeviceApi, TeamsAnswerAndDeviceCommunicatorsAreRefused) {
  expect_all_ok(run_ranks(3, [](RankLog &log, ncclComm_t comm, int rank,
                                int n) {
    DeviceTeam world = ncclTeamWorld(comm), lsa = ncclTeamLsa(comm),
               rail = ncclTeamRail(comm);
    if (world.nRanks != n || world.rank != rank || world.stride != 1)
      log.fail("world team {%d, %d, %d}", world.nRanks, world.rank,
               world.stride);
    if (lsa.nRanks != 1 || lsa.rank != 0)
      log.fail("LSA team {%d, %d, %d}, not this rank alone", lsa.nRanks,
               lsa.rank, lsa.stride);
    if (rail.nRanks != n || rail.rank != rank)
      log.fail("rail team {%d, %d, %d}, not the world", rail.nRanks,
               rail.rank, rail.stride);
    for (int r = 0; r < n; r++) {
      if (ncclTeamRankToWorld(comm, world, r) != r)
        log.fail("world rank %d maps to %d", r,
                 ncclTeamRankToWorld(comm, world, r));
    }
    if (ncclTeamRankToWorld(comm, lsa, 0) != rank ||
        ncclTeamRankToLsa(comm, world, rank) != 0)
      log.fail("this rank is not LSA rank 0 of its team");
    char requirements[256] = {0}, devcomm[4096];
    ncclResult_t r = ncclDevCommCreate(comm, requirements, devcomm);
    const char *why = ncclGetLastError(comm);
    if (r != ncclInvalidUsage || strstr(why, "device API") == nullptr)
      log.fail("ncclDevCommCreate returned %d: %s", (int)r, why);
    if (ncclDevCommDestroy(comm, devcomm) != ncclInvalidArgument)
      log.fail("ncclDevCommDestroy of what was never made was not refused");
    // The communicator still works.
    int x = 1;
    CHECK_NCCL(log, ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm,
                                  nullptr));
    if (x != n)
      log.fail("allreduce after the device API calls: %d", x);
  }));
  DeviceTeam none = ncclTeamWorld(nullptr);
  EXPECT_EQ(none.nRanks, 0);
  EXPECT_NE(strstr(ncclGetLastError(nullptr), "ncclTeamWorld"), nullptr);
}

TEST(NcclQueries, VersionStringsMemoryAndRegistrations) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_GE(version, NCCL_VERSION(2, 28, 0));
  for (int r = 0; r < ncclNumResults; r++)
    EXPECT_GT(strlen(ncclGetErrorString((ncclResult_t)r)), 0u);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  expect_all_ok(run_ranks(2, [](RankLog &log, ncclComm_t comm, int rank, int n) {
    int count = 0, me = -1, dev = 99;
    CHECK_NCCL(log, ncclCommCount(comm, &count));
    CHECK_NCCL(log, ncclCommUserRank(comm, &me));
    CHECK_NCCL(log, ncclCommCuDevice(comm, &dev));
    if (count != n || me != rank || dev < -1)
      log.fail("count %d rank %d device %d", count, me, dev);
    void *buf = nullptr;
    CHECK_NCCL(log, ncclMemAlloc(&buf, 1 << 20));
    void *handle = nullptr;
    CHECK_NCCL(log, ncclCommRegister(comm, buf, 1 << 20, &handle));
    ncclWindow_t win = nullptr;
    CHECK_NCCL(log, ncclCommWindowRegister(comm, buf, 1 << 20, &win,
                                           NCCL_WIN_DEFAULT));
    if (dev < 0) {
      // A rank without a GPU gets host memory from ncclMemAlloc.
      auto *f = (float *)buf;
      for (int i = 0; i < 1000; i++)
        f[i] = (float)rank;
      CHECK_NCCL(log, ncclAllReduce(f, f, 1000, ncclFloat, ncclSum, comm,
                                    nullptr));
      if (f[999] != (float)(n * (n - 1) / 2))
        log.fail("allreduce in ncclMemAlloc memory: %g", f[999]);
    }
    CHECK_NCCL(log, ncclCommWindowDeregister(comm, win));
    CHECK_NCCL(log, ncclCommDeregister(comm, handle));
    if (ncclCommDeregister(comm, nullptr) != ncclInvalidArgument)
      log.fail("deregistering NULL was not refused");
    CHECK_NCCL(log, ncclCommFinalize(comm));
    CHECK_NCCL(log, ncclMemFree(buf));
  }));
}

} // namespace
