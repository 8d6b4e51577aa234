// All-reduce with each algorithm (ring, double binary tree, parameter
// server, and whatever AUTO picks), broadcast and reduce with each of theirs
// (pipelined chain, binary tree, AUTO), and the barrier, across real
// processes over loopback TCP.  Every dtype and op, sizes 0, 1, prime, not
// divisible by N and several slices long, in place and out of place, roots
// at both ends and in the middle, for N = 1, 2, 3, 4, 5, 7 and 8.  Every
// rank checks its result against reference.h, that it wrote nothing outside
// its buffers, and that it left alone the buffers it must only read.
// Ranks that disagree on a broadcast's root or a reduce's count must all
// fail at once rather than hang.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "reference.h"

using namespace hooptest;

namespace {

enum class Coll { AllReduce, Broadcast, Reduce };

const char *coll_name(Coll c) {
  switch (c) {
  case Coll::AllReduce: return "allreduce";
  case Coll::Broadcast: return "broadcast";
  case Coll::Reduce: return "reduce";
  }
  return "?";
}

struct Case {
  Coll coll;
  hoop_dtype_t dtype;
  hoop_op_t op; // broadcast: only chooses how inputs are generated
  size_t count;
  bool in_place;
  int root;       // broadcast and reduce
  bool null_recv; // reduce: non-roots pass recvbuf = NULL
  uint64_t seed;
};

std::string describe_case(const Case &c) {
  std::string s = std::string(coll_name(c.coll)) + " " +
                  hoop_dtype_name(c.dtype);
  if (c.coll != Coll::Broadcast)
    s += std::string(" ") + hoop_op_name(c.op);
  s += " count " + std::to_string(c.count) +
       (c.in_place ? " in-place" : " out-of-place");
  if (c.coll != Coll::AllReduce)
    s += " root " + std::to_string(c.root);
  if (c.null_recv)
    s += " recvbuf=NULL off root";
  return s;
}

// Runs one case on this rank and checks what this rank can see: its result
// (all-reduce and broadcast everywhere, reduce on the root), its guards, and
// that buffers it must only read are unchanged.
void run_case(RankLog &log, hoop_comm_t comm, int rank, int nranks,
              const Case &c) {
  size_t esz = hoop_dtype_size(c.dtype);
  size_t bytes = c.count * esz;
  bool is_root = rank == c.root;
  Guarded sendg(c.count, esz), recvg(c.count, esz);
  char *send = sendg.data(), *recv = recvg.data();
  // In place the input starts in recvbuf.  A broadcast's non-root ranks
  // also hold their own input, which the result must replace (in place) or
  // which must be ignored (out of place).
  char *in = c.in_place ? recv : send;
  fill_input(in, c.dtype, c.op, c.seed, rank, 0, c.count);
  std::vector<char> in_copy(in, in + bytes);
  char *recv_arg = recv;
  if (c.coll == Coll::Reduce && !is_root && c.null_recv)
    recv_arg = nullptr;

  hoop_result_t res = HOOP_SUCCESS;
  switch (c.coll) {
  case Coll::AllReduce:
    res = hoop_allreduce(comm, in, recv_arg, c.count, c.dtype, c.op,
                         nullptr);
    break;
  case Coll::Broadcast:
    res = hoop_broadcast(comm, in, recv_arg, c.count, c.dtype, c.root,
                         nullptr);
    break;
  case Coll::Reduce:
    res = hoop_reduce(comm, in, recv_arg, c.count, c.dtype, c.op, c.root,
                      nullptr);
    break;
  }
  std::string what = describe_case(c);
  if (res != HOOP_SUCCESS) {
    log.fail("%s: %s: %s", what.c_str(), hoop_result_name(res),
             hoop_comm_last_error(comm));
    return;
  }

  size_t bad = 0, wrong = 0;
  bool result_defined = c.coll != Coll::Reduce || is_root;
  if (result_defined) {
    wrong = c.coll == Coll::Broadcast
                ? count_wrong(recv, c.dtype, c.op, c.seed, nranks, 0,
                              c.count, 1, c.root, &bad)
                : count_wrong(recv, c.dtype, c.op, c.seed, nranks, 0,
                              c.count, 0, -1, &bad);
    if (wrong > 0)
      log.fail("%s: %zu wrong elements (first at %zu)", what.c_str(), wrong,
               bad);
  } else if (recv_arg != nullptr && !c.in_place && !recvg.all_canary()) {
    // hoop.h: reduce writes recvbuf on the root only.
    log.fail("%s: wrote the recvbuf of a non-root rank", what.c_str());
  }
  // The input must survive wherever it is not also the result.
  bool input_is_result = c.in_place && result_defined;
  if (!input_is_result && memcmp(in, in_copy.data(), bytes) != 0)
    log.fail("%s: changed the input buffer", what.c_str());
  if (!sendg.guards_intact() || !recvg.guards_intact())
    log.fail("%s: wrote outside its buffers", what.c_str());
}

std::vector<int> roots_of(int nranks) {
  std::vector<int> roots = {0, nranks - 1, nranks / 2};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

std::vector<Case> all_cases(Coll coll, int nranks) {
  std::vector<Case> cases;
  // 300000 + N elements span several 256 KiB slices for every dtype wider
  // than a byte, so the pipelined paths run too.
  const size_t counts[] = {0, 1, 1009, (size_t)1000 * nranks + 1,
                           (size_t)300000 + nranks};
  std::vector<int> roots =
      coll == Coll::AllReduce ? std::vector<int>{0} : roots_of(nranks);
  int nops = coll == Coll::Broadcast ? 1 : HOOP_OP_COUNT;
  uint64_t seed = 1000 * (uint64_t)coll + 1;
  for (int root : roots) {
    for (int t = 0; t < HOOP_DTYPE_COUNT; t++) {
      for (int op = 0; op < nops; op++) {
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
          for (bool in_place : {false, true}) {
            // Half the reduces, spread over dtypes, ops and sizes, pass
            // NULL off the root, which hoop.h allows.
            bool null_recv = coll == Coll::Reduce && (t + op + ci) % 2 == 1;
            cases.push_back({coll, (hoop_dtype_t)t, (hoop_op_t)op,
                             counts[ci], in_place, root, null_recv, seed++});
          }
        }
      }
    }
  }
  return cases;
}

struct Param {
  int nranks;
  hoop_algo_t algo;
};

// Test names must be identifiers, so they do not use hoop_algo_name().
const char *algo_label(hoop_algo_t a) {
  switch (a) {
  case HOOP_ALGO_AUTO: return "auto";
  case HOOP_ALGO_RING: return "ring";
  case HOOP_ALGO_TREE: return "tree";
  case HOOP_ALGO_PS: return "ps";
  default: return "other";
  }
}

std::string param_name(const ::testing::TestParamInfo<Param> &info) {
  return std::to_string(info.param.nranks) + "ranks_" +
         algo_label(info.param.algo);
}

// Runs every case of `coll` with `algo` set on every rank, in one set of
// processes per (N, algo) to keep start-up costs down.
void run_all_cases(Coll coll, const Param &p) {
  RunOptions opt;
  opt.timeout_s = 800;
  hoop_algo_t algo = p.algo;
  RunResult r = run_ranks(
      p.nranks,
      [coll, algo](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, algo));
        for (const Case &c : all_cases(coll, nranks)) {
          run_case(log, comm, rank, nranks, c);
          if (!log.ok())
            return;
        }
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

const int kRankCounts[] = {1, 2, 3, 4, 5, 7, 8};

std::vector<Param> params(std::initializer_list<hoop_algo_t> algos) {
  std::vector<Param> ps;
  for (hoop_algo_t a : algos)
    for (int n : kRankCounts)
      ps.push_back({n, a});
  return ps;
}

class AllReduceAlgorithms : public ::testing::TestWithParam<Param> {};

TEST_P(AllReduceAlgorithms, EveryDtypeOpSizeAndPlacementMatchesReference) {
  run_all_cases(Coll::AllReduce, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Algos, AllReduceAlgorithms,
                         ::testing::ValuesIn(params({HOOP_ALGO_RING,
                                                     HOOP_ALGO_TREE,
                                                     HOOP_ALGO_PS,
                                                     HOOP_ALGO_AUTO})),
                         param_name);

class RootedAlgorithms : public ::testing::TestWithParam<Param> {};

TEST_P(RootedAlgorithms, BroadcastEveryDtypeSizeRootAndPlacement) {
  run_all_cases(Coll::Broadcast, GetParam());
}

TEST_P(RootedAlgorithms, ReduceEveryDtypeOpSizeRootAndPlacement) {
  run_all_cases(Coll::Reduce, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Algos, RootedAlgorithms,
                         ::testing::ValuesIn(params({HOOP_ALGO_RING,
                                                     HOOP_ALGO_TREE,
                                                     HOOP_ALGO_AUTO})),
                         param_name);

// 64 MiB (plus 3 floats, so the ring's chunks and the trees' halves are
// uneven) runs hundreds of slices through each algorithm's pipeline.
class LargeAllReduce : public ::testing::TestWithParam<Param> {};

TEST_P(LargeAllReduce, Float64MiBSumInAndOutOfPlace) {
  RunOptions opt;
  opt.timeout_s = 240;
  hoop_algo_t algo = GetParam().algo;
  RunResult r = run_ranks(
      GetParam().nranks,
      [algo](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, algo));
        const size_t count = (64u << 20) / sizeof(float) + 3;
        for (bool in_place : {false, true}) {
          run_case(log, comm, rank, nranks,
                   {Coll::AllReduce, HOOP_F32, HOOP_SUM, count, in_place, 0,
                    false, 77});
        }
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Algos, LargeAllReduce,
                         ::testing::Values(Param{2, HOOP_ALGO_RING},
                                           Param{2, HOOP_ALGO_TREE},
                                           Param{2, HOOP_ALGO_PS},
                                           Param{3, HOOP_ALGO_RING},
                                           Param{3, HOOP_ALGO_TREE},
                                           Param{3, HOOP_ALGO_PS}),
                         param_name);

// Ranks may differ in placement.  A large out-of-place ring all-reduce
// sums its last reduce-scatter step in the outbox and copies it out (AVG
// divides in the slot first) while its in-place neighbours sum in recv;
// the wire must not tell them apart.  (HOOP_COLD_BYTES makes the call
// large on any machine's cache.)
TEST(MixedPlacement, LargeRingAllReduceAvgOddRanksOutOfPlace) {
  ScopedEnv cold("HOOP_COLD_BYTES", "1M");
  RunOptions opt;
  opt.timeout_s = 240;
  RunResult r = run_ranks(
      3,
      [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_RING));
        const size_t count = (8u << 20) / sizeof(float) + 3;
        run_case(log, comm, rank, nranks,
                 {Coll::AllReduce, HOOP_F32, HOOP_AVG, count, rank % 2 == 0,
                  0, false, 78});
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// A large out-of-place ring all-reduce reduces its last reduce-scatter step
// a few hundred bytes at a time and streams each block to recv around the
// caches (core/engine.c).  Every dtype and op, each a little over 1 MiB
// (HOOP_COLD_BYTES) with counts that split unevenly and, for the narrow
// dtypes, recv at an odd address, must match the reference to the element.
class LargeOutOfPlace : public ::testing::TestWithParam<int> {};

TEST_P(LargeOutOfPlace, RingAllReduceEveryDtypeAndOpStreamsEveryElement) {
  ScopedEnv cold("HOOP_COLD_BYTES", "1M");
  RunOptions opt;
  opt.timeout_s = 240;
  RunResult r = run_ranks(
      GetParam(),
      [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_RING));
        uint64_t seed = 5000;
        for (int t = 0; t < HOOP_DTYPE_COUNT && log.ok(); t++) {
          size_t count = (1u << 20) / hoop_dtype_size((hoop_dtype_t)t) +
                         (size_t)(2 * nranks + 1);
          for (int op = 0; op < HOOP_OP_COUNT && log.ok(); op++)
            run_case(log, comm, rank, nranks,
                     {Coll::AllReduce, (hoop_dtype_t)t, (hoop_op_t)op, count,
                      false, 0, false, seed++});
        }
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LargeOutOfPlace, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int> &p) {
                           return std::to_string(p.param) + "ranks";
                         });

// ---- One-shot all-reduce of 2 ranks ----------------------------------------

uint64_t oneshot_calls(RankLog &log, hoop_comm_t comm) {
  hoop_stats_t st = HOOP_STATS_INIT;
  RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
  return st.by_coll[HOOP_COLL_ALLREDUCE][HOOP_ALGO_ONESHOT].calls;
}

// AUTO runs 2 ranks' all-reduces up to HOOP_ONESHOT_BYTES (set here) one
// shot and larger ones otherwise; a forced algorithm and 3 ranks never.
TEST(OneShot, AutoTakesItOnTwoRanksUpToTheThresholdOnly) {
  ScopedEnv limit("HOOP_ONESHOT_BYTES", "64K");
  for (int n : {2, 3}) {
    RunResult r = run_ranks(n, [](RankLog &log, hoop_comm_t comm, int rank,
                                  int nranks) {
      const size_t at_limit = (64u << 10) / sizeof(float);
      struct {
        hoop_algo_t setting;
        size_t count;
        bool one_shot;
      } cases[] = {{HOOP_ALGO_AUTO, 0, nranks == 2},
                   {HOOP_ALGO_AUTO, 1, nranks == 2},
                   {HOOP_ALGO_AUTO, at_limit, nranks == 2},
                   {HOOP_ALGO_AUTO, at_limit + 1, false},
                   {HOOP_ALGO_RING, 1000, false},
                   {HOOP_ALGO_PS, 1000, false}};
      uint64_t seed = 6000;
      for (const auto &c : cases) {
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, c.setting));
        for (bool in_place : {false, true}) {
          uint64_t before = oneshot_calls(log, comm);
          run_case(log, comm, rank, nranks,
                   {Coll::AllReduce, HOOP_F32, HOOP_SUM, c.count, in_place, 0,
                    false, seed++});
          uint64_t ran = oneshot_calls(log, comm) - before;
          RANK_EXPECT(log, ran == (c.one_shot ? 1u : 0u),
                      "%s, %zu floats %s: %llu one-shot calls",
                      hoop_algo_name(c.setting), c.count,
                      in_place ? "in place" : "out of place",
                      (unsigned long long)ran);
        }
      }
    });
    EXPECT_TRUE(r.all_ok()) << n << " ranks: " << describe(r);
  }
}

// Both ranks of the one shot send before they read, so a call larger than
// the link buffers once left each waiting for the other to read: shm rings
// of 8K and TCP's smallest socket buffers, with the threshold raised past
// every size.  In place is the case that waited (each byte of the sum may
// land only once that byte has gone); out of place is held to it too.
TEST(OneShot, CallsLargerThanTheLinkBuffersComplete) {
  ScopedEnv limit("HOOP_ONESHOT_BYTES", "64M");
  const char *links[][3] = {
      {"shm", "HOOP_SHM_SLOT_BYTES", "4K"},
      {"tcp", "HOOP_SOCKBUF_BYTES", "64K"},
  };
  for (const auto &link : links) {
    ScopedEnv transport("HOOP_TRANSPORT", link[0]);
    ScopedEnv slots("HOOP_SHM_SLOTS", "2");
    ScopedEnv small(link[1], link[2]);
    RunOptions opt;
    opt.comm_timeout_ms = 20000;
    RunResult r = run_ranks(
        2,
        [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
          uint64_t seed = 6100;
          for (size_t count : {size_t(65536), size_t(1u << 20) + 3})
            for (hoop_dtype_t t : {HOOP_F32, HOOP_F64, HOOP_I8})
              for (bool in_place : {true, false})
                run_case(log, comm, rank, nranks,
                         {Coll::AllReduce, t, HOOP_SUM, count, in_place, 0,
                          false, seed++});
          RANK_EXPECT(log, oneshot_calls(log, comm) == 12,
                      "%llu of 12 calls ran one shot",
                      (unsigned long long)oneshot_calls(log, comm));
        },
        opt);
    EXPECT_TRUE(r.all_ok()) << link[0] << " " << link[1] << "=" << link[2]
                            << ": " << describe(r);
  }
}

// Each rank of the one shot computes peer op own, the other own op peer.
// Arbitrary bits (NaNs with payloads, signed zeros, infinities, integers
// that overflow) must still give both ranks the same bits, for every dtype
// and op, which the reference tests, comparing values, would not see.
TEST(OneShot, BothRanksGetTheSameBitsForEveryDtypeAndOp) {
  RunResult r = run_ranks(2, [](RankLog &log, hoop_comm_t comm, int rank,
                                int) {
    const size_t bytes = 4096;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    std::vector<unsigned char> input(bytes);
    for (unsigned char &b : input) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = (unsigned char)x;
    }
    for (int t = 0; t < HOOP_DTYPE_COUNT; t++) {
      for (int op = 0; op < HOOP_OP_COUNT; op++) {
        size_t count = bytes / hoop_dtype_size((hoop_dtype_t)t);
        std::vector<unsigned char> out(bytes), both(2 * bytes);
        RANK_EXPECT_OK(log, comm,
                       hoop_allreduce(comm, input.data(), out.data(), count,
                                      (hoop_dtype_t)t, (hoop_op_t)op,
                                      nullptr));
        RANK_EXPECT_OK(log, comm,
                       hoop_allgather(comm, out.data(), both.data(), bytes,
                                      HOOP_U8, nullptr));
        RANK_EXPECT(log, memcmp(both.data(), both.data() + bytes, bytes) == 0,
                    "%s %s: the two ranks' results differ",
                    hoop_dtype_name((hoop_dtype_t)t),
                    hoop_op_name((hoop_op_t)op));
      }
    }
    RANK_EXPECT(log, oneshot_calls(log, comm) == HOOP_DTYPE_COUNT * HOOP_OP_COUNT,
                "not every call ran one shot");
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(AlgoSelection, UnselectableAlgorithmsAreRejectedAndCommStaysUsable) {
  RunResult r = run_ranks(2, [](RankLog &log, hoop_comm_t comm, int,
                                int nranks) {
    // P2P names send/recv traffic in the counters; it is no all-reduce.
    hoop_result_t res = hoop_comm_set_algo(comm, HOOP_ALGO_P2P);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "P2P: %s",
                hoop_result_name(res));
    res = hoop_comm_set_algo(comm, (hoop_algo_t)99);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "algo 99: %s",
                hoop_result_name(res));
    res = hoop_comm_set_algo(nullptr, HOOP_ALGO_RING);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "NULL comm: %s",
                hoop_result_name(res));
    std::vector<int32_t> v(1000, 1);
    RANK_EXPECT_OK(log, comm, hoop_allreduce(comm, v.data(), v.data(),
                                             v.size(), HOOP_I32, HOOP_SUM,
                                             nullptr));
    RANK_EXPECT(log, v[0] == nranks && v[999] == nranks,
                "all-reduce after the errors gave %d", v[0]);
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// ---- Barrier ------------------------------------------------------------

int64_t monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Entry and exit times of each rank in each round, in memory shared with
// the forked ranks (CLOCK_MONOTONIC is one clock for every process on the
// machine), so that the parent compares them without trusting hoop.
constexpr int kMaxRanks = 8;
constexpr int kRounds = 3;
struct BarrierTimes {
  int64_t enter[kRounds][kMaxRanks];
  int64_t leave[kRounds][kMaxRanks];
  int sleeper[kRounds];
};

class Barrier : public ::testing::TestWithParam<int> {};

TEST_P(Barrier, NoRankLeavesBeforeTheLateRankEnters) {
  int n = GetParam();
  void *mem = mmap(nullptr, sizeof(BarrierTimes), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  BarrierTimes *times = new (mem) BarrierTimes();
  // The late rank is last, first and in the middle in turn.
  const int sleepers[kRounds] = {n - 1, 0, n / 2};
  std::copy(sleepers, sleepers + kRounds, times->sleeper);
  RunResult r = run_ranks(n, [times](RankLog &log, hoop_comm_t comm,
                                     int rank, int) {
    for (int s = 0; s < kRounds; s++) {
      if (rank == times->sleeper[s])
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      times->enter[s][rank] = monotonic_ns();
      RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
      times->leave[s][rank] = monotonic_ns();
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
  if (r.all_ok()) {
    for (int s = 0; s < kRounds; s++) {
      int late = times->sleeper[s];
      for (int q = 0; q < n; q++) {
        EXPECT_GE(times->leave[s][q], times->enter[s][late])
            << "round " << s << ": rank " << q << " left "
            << (times->enter[s][late] - times->leave[s][q]) / 1000
            << " us before rank " << late << " entered";
      }
    }
  }
  munmap(mem, sizeof(BarrierTimes));
}

TEST_P(Barrier, ManyInARowThenCollectivesStillMatch) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    for (int i = 0; i < 200 && log.ok(); i++)
      RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
    // A barrier that left bytes behind or took another's would spoil this.
    run_case(log, comm, rank, nranks,
             {Coll::AllReduce, HOOP_I64, HOOP_SUM, 1009, false, 0, false, 5});
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

std::string ranks_name(const ::testing::TestParamInfo<int> &info) {
  return std::to_string(info.param) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Ranks, Barrier, ::testing::Values(1, 2, 3, 5, 8),
                         ranks_name);

// ---- Mismatched calls ---------------------------------------------------

// Every rank must fail, with MISMATCH (it saw the difference) or REMOTE (a
// peer told it), well before the 20 s timeout: in the call itself when a
// peer it exchanged with disagrees (also for ranks that in their own view
// only send, such as a broadcast root or a reduce leaf), else at its next
// call.
void mismatch_run(const Param &p, bool broadcast_roots);

// Both ways of connecting: at init every pair is connected and the
// headers show the difference; connecting on first use, ranks whose calls
// differ may each wait to connect with a peer that plans other
// connections, and the rank that asks such a peer finds the difference.
void mismatch_case(const Param &p, bool broadcast_roots) {
  for (const char *connect : {"0", "1"}) {
    SCOPED_TRACE(std::string("HOOP_RUNTIME_CONNECT=") + connect);
    ScopedEnv mode("HOOP_RUNTIME_CONNECT", connect);
    mismatch_run(p, broadcast_roots);
  }
}

void mismatch_run(const Param &p, bool broadcast_roots) {
  RunOptions opt;
  opt.comm_timeout_ms = 20000;
  hoop_algo_t algo = p.algo;
  RunResult r = run_ranks(
      p.nranks,
      [algo, broadcast_roots](RankLog &log, hoop_comm_t comm, int rank,
                              int n) {
        std::vector<float> in(4097, 1.0f), out(4097);
        bool odd = rank == n - 1;
        // A rank still setting up may already hear of the failure, which
        // then breaks the communicator before its own call.
        hoop_result_t res = hoop_comm_set_algo(comm, algo);
        if (res == HOOP_SUCCESS)
          res = broadcast_roots
                    ? hoop_broadcast(comm, in.data(), out.data(), 4096,
                                     HOOP_F32, odd ? 1 : 0, nullptr)
                    : hoop_reduce(comm, in.data(), out.data(),
                                  odd ? 4097 : 4096, HOOP_F32, HOOP_SUM, 0,
                                  nullptr);
        if (res == HOOP_SUCCESS) {
          // Every peer this rank exchanged with agreed with it: hoop checks
          // each connection both ways, not all ranks, so this rank learns
          // of the disagreement elsewhere at its next call, with the cause.
          res = hoop_barrier(comm);
        }
        RANK_EXPECT(log, res == HOOP_ERR_MISMATCH || res == HOOP_ERR_REMOTE,
                    "got %s: %s", hoop_result_name(res),
                    hoop_comm_last_error(comm));
        RANK_EXPECT(log,
                    strstr(hoop_comm_last_error(comm), "disagree") != nullptr,
                    "message: %s", hoop_comm_last_error(comm));
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
  EXPECT_LT(r.seconds, 10.0) << "ranks should fail at once, not at the timeout";
}

class RootedMismatch : public ::testing::TestWithParam<Param> {};

TEST_P(RootedMismatch, DifferentBroadcastRootsFailOnEveryRank) {
  mismatch_case(GetParam(), true);
}

TEST_P(RootedMismatch, DifferentReduceCountsFailOnEveryRank) {
  mismatch_case(GetParam(), false);
}

std::vector<Param> mismatch_params() {
  std::vector<Param> ps;
  for (hoop_algo_t a : {HOOP_ALGO_RING, HOOP_ALGO_TREE, HOOP_ALGO_AUTO})
    for (int n : {2, 3, 5})
      ps.push_back({n, a});
  return ps;
}

INSTANTIATE_TEST_SUITE_P(Algos, RootedMismatch,
                         ::testing::ValuesIn(mismatch_params()), param_name);

} // namespace
