// Bad input and failures: every one must return a clear error, never crash,
// hang or corrupt data.  Argument errors leave the communicator usable;
// failures that involve a peer (mismatched calls, a dead or silent rank,
// abort) fail on every rank, within the timeout, naming the peer.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "hoop_build_config.h"

extern "C" {
#include "core/engine.h"
}

using namespace hooptest;

namespace {

// A correct all-reduce after the error shows the communicator still works.
void expect_usable(RankLog &log, hoop_comm_t comm, int nranks) {
  std::vector<int32_t> v(1000, 1);
  RANK_EXPECT_OK(log, comm, hoop_allreduce(comm, v.data(), v.data(), v.size(),
                                           HOOP_I32, HOOP_SUM, nullptr));
  for (int32_t x : v) {
    if (x != nranks) {
      log.fail("all-reduce after the error gave %d, not %d", x, nranks);
      return;
    }
  }
}

TEST(Errors, BadArgumentsReturnInvalidArgumentAndCommStaysUsable) {
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    std::vector<float> a(64, 1.0f), b(64);
    hoop_result_t res;
    res = hoop_allreduce(comm, nullptr, b.data(), 64, HOOP_F32, HOOP_SUM,
                         nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "null sendbuf: %s",
                hoop_result_name(res));
    RANK_EXPECT(log, mentions(comm, "sendbuf is NULL"), "message: %s",
                hoop_comm_last_error(comm));
    res = hoop_allreduce(comm, a.data(), nullptr, 64, HOOP_F32, HOOP_SUM,
                         nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "null recvbuf: %s",
                hoop_result_name(res));
    res = hoop_allreduce(comm, a.data(), b.data(), 64, (hoop_dtype_t)99,
                         HOOP_SUM, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "bad dtype: %s",
                hoop_result_name(res));
    RANK_EXPECT(log, mentions(comm, "dtype 99"), "message: %s",
                hoop_comm_last_error(comm));
    res = hoop_allreduce(comm, a.data(), b.data(), 64, HOOP_F32,
                         (hoop_op_t)-1, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "bad op: %s",
                hoop_result_name(res));
    res = hoop_allreduce(comm, a.data(), b.data(), SIZE_MAX / 2, HOOP_F32,
                         HOOP_SUM, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "overflow: %s",
                hoop_result_name(res));
    RANK_EXPECT(log, mentions(comm, "overflows"), "message: %s",
                hoop_comm_last_error(comm));
    res = hoop_reduce_scatter(comm, a.data(), b.data(), SIZE_MAX / 3,
                              HOOP_F32, HOOP_SUM, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT,
                "reduce_scatter overflow: %s", hoop_result_name(res));
    // Overlapping buffers that are not the in-place layout.
    res = hoop_allreduce(comm, a.data(), a.data() + 1, 32, HOOP_F32, HOOP_SUM,
                         nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "overlap: %s",
                hoop_result_name(res));
    res = hoop_allgather(comm, a.data(), a.data() + 1, 8, HOOP_F32, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "gather overlap: %s",
                hoop_result_name(res));
    // Count 0 with NULL buffers is a valid no-op, as in NCCL.
    RANK_EXPECT_OK(log, comm, hoop_allreduce(comm, nullptr, nullptr, 0,
                                             HOOP_F32, HOOP_SUM, nullptr));
    int got = -1;
    RANK_EXPECT(log, hoop_comm_rank(comm, nullptr) ==
                         HOOP_ERR_INVALID_ARGUMENT, "rank(NULL)");
    RANK_EXPECT_OK(log, comm, hoop_comm_rank(comm, &got));
    RANK_EXPECT(log, got == rank, "rank %d", got);
    expect_usable(log, comm, nranks);
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// A stream asks for CUDA ordering.  A build without CUDA refuses it by
// name; a CUDA build either waits for it (a GPU is there) or fails naming
// CUDA's error, and the communicator stays usable either way.
// Below 64K loopback TCP crawled on the kernel's window probes (200 ms
// each), so such values are refused at init by name; 0 and 64K are valid.
TEST(Errors, SocketBuffersBelow64KAreRefusedByName) {
  struct {
    const char *value;
    bool valid;
  } cases[] = {{"4096", false}, {"65535", false}, {"64K", true}, {"0", true}};
  for (const auto &c : cases) {
    ScopedEnv sockbuf("HOOP_SOCKBUF_BYTES", c.value);
    RunResult r = run_alone([&c](RankLog &log) {
      hoop_unique_id_t id;
      hoop_comm_t comm = nullptr;
      RANK_EXPECT_OK(log, nullptr, hoop_get_unique_id(&id));
      hoop_result_t res = hoop_comm_init_rank(&comm, 1, &id, 0, nullptr);
      if (c.valid) {
        RANK_EXPECT(log, res == HOOP_SUCCESS, "%s: %s", c.value,
                    hoop_last_error());
      } else {
        RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT &&
                             strstr(hoop_last_error(),
                                    "HOOP_SOCKBUF_BYTES") != nullptr,
                    "%s: %s: %s", c.value, hoop_result_name(res),
                    hoop_last_error());
      }
      if (comm != nullptr)
        hoop_comm_destroy(comm);
    });
    EXPECT_TRUE(r.all_ok()) << c.value << ": " << describe(r);
  }
}

TEST(Errors, StreamNeedsCuda) {
  RunResult r = run_ranks(
      2, [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        // CUDA's cudaStreamLegacy handle.
        hoop_stream_t legacy = reinterpret_cast<hoop_stream_t>(0x1);
        int64_t v = rank, sum = 0;
        hoop_result_t res = hoop_allreduce(comm, &v, &sum, 1, HOOP_I64,
                                           HOOP_SUM, legacy);
        const char *msg = hoop_comm_last_error(comm);
        if (!HOOP_HAVE_CUDA) {
          RANK_EXPECT(log, res == HOOP_ERR_UNSUPPORTED, "got %s",
                      hoop_result_name(res));
          RANK_EXPECT(log, strstr(msg, "has no CUDA") != nullptr, "%s", msg);
        } else if (res != HOOP_SUCCESS) {
          RANK_EXPECT(log, strstr(msg, "CUDA error") != nullptr, "%s", msg);
        }
        RANK_EXPECT_OK(log, comm,
                       hoop_allreduce(comm, &v, &sum, 1, HOOP_I64, HOOP_SUM,
                                      nullptr));
        RANK_EXPECT(log, sum == nranks * (nranks - 1) / 2, "sum %lld",
                    (long long)sum);
        // Host calls alone choose no device path; a NULL result is refused.
        const char *path = nullptr;
        RANK_EXPECT_OK(log, comm, hoop_comm_device_path(comm, &path));
        RANK_EXPECT(log, path != nullptr && strcmp(path, "none") == 0,
                    "device path %s", path);
        res = hoop_comm_device_path(comm, nullptr);
        RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "NULL gave %s",
                    hoop_result_name(res));
      });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Errors, DestroyedOrNullCommunicatorIsRejected) {
  RunResult r = run_alone([](RankLog &log) {
    hoop_comm_t comm = comm_alone(log);
    RANK_EXPECT_OK(log, nullptr, hoop_comm_destroy(comm));
    float x = 1;
    hoop_result_t res =
        hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE, "after destroy: %s",
                hoop_result_name(res));
    RANK_EXPECT(log, strstr(hoop_last_error(), "not live") != nullptr,
                "message: %s", hoop_last_error());
    res = hoop_comm_destroy(comm);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE, "double destroy: %s",
                hoop_result_name(res));
    res = hoop_allreduce(nullptr, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "NULL comm: %s",
                hoop_result_name(res));
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Every rank must fail at once, and every message must say what differed.
void mismatch_case(int nranks, bool other_collective) {
  RunOptions opt;
  opt.comm_timeout_ms = 20000;
  RunResult r = run_ranks(
      nranks,
      [other_collective](RankLog &log, hoop_comm_t comm, int rank,
                         int n) {
        std::vector<float> v(4096 * n, 1.0f), out(4096 * n);
        size_t count = rank == n - 1 && !other_collective ? 4097 : 4096;
        hoop_result_t res =
            other_collective && rank == n - 1
                ? hoop_allgather(comm, v.data(), out.data(), count, HOOP_F32,
                                 nullptr)
                : hoop_allreduce(comm, v.data(), out.data(), count, HOOP_F32,
                                 HOOP_SUM, nullptr);
        // A rank either sees the mismatch or is told of it by one that did.
        RANK_EXPECT(log, res == HOOP_ERR_MISMATCH || res == HOOP_ERR_REMOTE,
                    "got %s: %s", hoop_result_name(res),
                    hoop_comm_last_error(comm));
        RANK_EXPECT(log, mentions(comm, "ranks disagree"), "message: %s",
                    hoop_comm_last_error(comm));
        // The communicator is now broken, and says so.
        res = hoop_allreduce(comm, v.data(), out.data(), 4, HOOP_F32,
                             HOOP_SUM, nullptr);
        RANK_EXPECT(log, res != HOOP_SUCCESS && mentions(comm, "broken"),
                    "second call: %s: %s", hoop_result_name(res),
                    hoop_comm_last_error(comm));
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
  EXPECT_LT(r.seconds, 10.0) << "ranks should fail at once, not at the timeout";
}

TEST(Errors, MismatchedCountsFailOnEveryRank2) { mismatch_case(2, false); }
TEST(Errors, MismatchedCountsFailOnEveryRank3) { mismatch_case(3, false); }
TEST(Errors, MismatchedCountsFailOnEveryRank5) { mismatch_case(5, false); }
TEST(Errors, MismatchedCollectivesFailOnEveryRank4) {
  mismatch_case(4, true);
}

TEST(Errors, KilledRankMakesOthersFailNamingIt) {
  RunOptions opt;
  opt.comm_timeout_ms = 30000;
  RunResult r = run_ranks(
      4,
      [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        std::vector<float> v(16u << 20, 1.0f);
        // Everyone finishes one call, so the victim dies mid-stream of the
        // next one and not during set-up.
        expect_usable(log, comm, nranks);
        if (rank == 2)
          signal_self_after(SIGKILL, 30);
        for (int i = 0; i < 100; i++) {
          hoop_result_t res = hoop_allreduce(comm, v.data(), v.data(),
                                             v.size(), HOOP_F32, HOOP_SUM,
                                             nullptr);
          if (res != HOOP_SUCCESS) {
            RANK_EXPECT(log, res == HOOP_ERR_REMOTE, "got %s: %s",
                        hoop_result_name(res), hoop_comm_last_error(comm));
            RANK_EXPECT(log, mentions(comm, "rank 2 ("), "message: %s",
                        hoop_comm_last_error(comm));
            return;
          }
        }
        log.fail("never noticed that rank 2 died");
      },
      opt);
  EXPECT_EQ(r.exit_codes[2], 128 + SIGKILL);
  r.exit_codes[2] = 0;
  EXPECT_TRUE(r.all_ok()) << describe(r);
  EXPECT_LT(r.seconds, 20.0)
      << "a dead peer is seen at once, not at the timeout";
  std::vector<std::string> leaked = leaked_shm_segments();
  EXPECT_TRUE(leaked.empty()) << "/dev/shm/" << leaked[0];
}

// What hoop.h promises a survivor after a peer died mid-call: its send
// buffer as it was, the communicator broken with the first error named,
// queries still answered, and destroy working (the harness destroys it).
TEST(Errors, AFailedCallLeavesTheSendBufferAndBreaksTheCommunicator) {
  RunOptions opt;
  opt.comm_timeout_ms = 30000;
  RunResult r = run_ranks(
      3,
      [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        const size_t count = (8u << 20) + 1; // not divisible by 3
        std::vector<float> send(count), recv(count);
        for (size_t i = 0; i < count; i++)
          send[i] = static_cast<float>(rank * 1000 + i % 997);
        const std::vector<float> before = send;
        expect_usable(log, comm, nranks);
        if (rank == 1)
          signal_self_after(SIGKILL, 30);
        hoop_result_t res = HOOP_SUCCESS;
        for (int i = 0; i < 200 && res == HOOP_SUCCESS; i++)
          res = hoop_allreduce(comm, send.data(), recv.data(), count,
                               HOOP_F32, HOOP_SUM, nullptr);
        if (res == HOOP_SUCCESS) {
          log.fail("never noticed that rank 1 died");
          return;
        }
        RANK_EXPECT(log, res == HOOP_ERR_REMOTE, "got %s: %s",
                    hoop_result_name(res), hoop_comm_last_error(comm));
        RANK_EXPECT(log, send == before,
                    "the failed call wrote its send buffer");
        std::string first = hoop_comm_last_error(comm);
        res = hoop_allreduce(comm, send.data(), recv.data(), 16, HOOP_F32,
                             HOOP_SUM, nullptr);
        RANK_EXPECT(log, res == HOOP_ERR_REMOTE, "a call after it got %s",
                    hoop_result_name(res));
        RANK_EXPECT(log, mentions(comm, "broken by an earlier error") &&
                             mentions(comm, "rank 1 ("),
                    "a call after it says: %s (the first error: %s)",
                    hoop_comm_last_error(comm), first.c_str());
        int me = -1;
        hoop_stats_t st = HOOP_STATS_INIT;
        RANK_EXPECT(log, hoop_comm_rank(comm, &me) == HOOP_SUCCESS &&
                             me == rank &&
                             hoop_comm_get_stats(comm, &st) == HOOP_SUCCESS,
                    "queries on the broken communicator failed: %s",
                    hoop_comm_last_error(comm));
      },
      opt);
  EXPECT_EQ(r.exit_codes[1], 128 + SIGKILL);
  r.exit_codes[1] = 0;
  EXPECT_TRUE(r.all_ok()) << describe(r);
  std::vector<std::string> leaked = leaked_shm_segments();
  EXPECT_TRUE(leaked.empty()) << "/dev/shm/" << leaked[0];
}

TEST(Errors, SilentRankTimesOutNamingIt) {
  RunOptions opt;
  opt.comm_timeout_ms = 1000;
  RunResult r = run_ranks(
      2,
      [](RankLog &log, hoop_comm_t comm, int rank, int) {
        // The ring's second hand-over, which a peer that gave up never
        // makes; the one-shot schedule's case is OneShotLateRank below.
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_RING));
        float x = 1;
        if (rank == 1)
          std::this_thread::sleep_for(std::chrono::milliseconds(3000));
        auto t0 = std::chrono::steady_clock::now();
        hoop_result_t res =
            hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
        double secs = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
        if (rank == 0) {
          RANK_EXPECT(log, res == HOOP_ERR_TIMEOUT, "got %s: %s",
                      hoop_result_name(res), hoop_comm_last_error(comm));
          RANK_EXPECT(log, mentions(comm, "rank 1 ("), "message: %s",
                      hoop_comm_last_error(comm));
          // Asked, the rank busy outside hoop does not answer.
          RANK_EXPECT(log, mentions(comm, "did not answer within 500 ms"),
                      "message: %s", hoop_comm_last_error(comm));
          RANK_EXPECT(log, secs > 0.9 && secs < 3.0, "took %.2f s", secs);
        } else {
          // The late rank learns why its peer gave up.
          RANK_EXPECT(log, res == HOOP_ERR_REMOTE, "got %s: %s",
                      hoop_result_name(res), hoop_comm_last_error(comm));
          RANK_EXPECT(log, mentions(comm, "no progress for 1000 ms"),
                      "message: %s", hoop_comm_last_error(comm));
        }
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// A rank that stops without dying (SIGSTOP here; a debugger, a hung
// driver or swap alike) blocks its neighbours, whose links then time out
// pointing at each other.  Every survivor must still name the stopped
// rank: the first to time out asks the others where they are.
void stopped_rank_case(int nranks, int victim) {
  RunOptions opt;
  opt.comm_timeout_ms = 1500;
  RunResult r = run_ranks(
      nranks,
      [victim](RankLog &log, hoop_comm_t comm, int rank, int n) {
        std::vector<float> v(1u << 16, 1.0f);
        expect_usable(log, comm, n);
        hoop_rank_info_t info = HOOP_RANK_INFO_INIT;
        RANK_EXPECT_OK(log, comm, hoop_comm_rank_info(comm, victim, &info));
        if (rank == victim)
          signal_self_after(SIGSTOP, 20);
        std::string name = "rank " + std::to_string(victim) + " (";
        auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 <
               std::chrono::seconds(30)) {
          hoop_result_t res = hoop_allreduce(comm, v.data(), v.data(),
                                             v.size(), HOOP_F32, HOOP_SUM,
                                             nullptr);
          if (res == HOOP_SUCCESS)
            continue;
          RANK_EXPECT(log, mentions(comm, "stall report: "), "message: %s",
                      hoop_comm_last_error(comm));
          RANK_EXPECT(log, mentions(comm, (name).c_str()) &&
                               mentions(comm, "did not answer"),
                      "does not name rank %d as silent: %s", victim,
                      hoop_comm_last_error(comm));
          // The test's own clean-up: nobody else ends a stopped rank.
          kill(info.pid, SIGKILL);
          return;
        }
        log.fail("never noticed that rank %d stopped", victim);
      },
      opt);
  EXPECT_EQ(r.exit_codes[(size_t)victim], 128 + SIGKILL);
  r.exit_codes[(size_t)victim] = 0;
  EXPECT_TRUE(r.all_ok()) << describe(r);
  std::vector<std::string> leaked = leaked_shm_segments();
  EXPECT_TRUE(leaked.empty()) << "/dev/shm/" << leaked[0];
}

TEST(Errors, StoppedRankIsNamedByEverySurvivor2) { stopped_rank_case(2, 1); }
TEST(Errors, StoppedRankIsNamedByEverySurvivor3) { stopped_rank_case(3, 1); }
TEST(Errors, StoppedRankIsNamedByEverySurvivor4) { stopped_rank_case(4, 2); }
TEST(Errors, StoppedRankIsNamedByEverySurvivor8) { stopped_rank_case(8, 5); }

// A rank in another call of the same communicator, one that crosses no
// header with the others (a receive from a peer that is not its ring
// neighbour), answers when asked: the report names the call it is in and
// the one the others are in, whoever reports first.
TEST(Errors, RankInAnotherCallIsNamedWithItsCall) {
  RunOptions opt;
  opt.comm_timeout_ms = 1500;
  RunResult r = run_ranks(
      4,
      [](RankLog &log, hoop_comm_t comm, int rank, int n) {
        expect_usable(log, comm, n);
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_RING));
        std::vector<float> v(1024, 1.0f);
        hoop_result_t res =
            rank == 0 ? hoop_recv(comm, v.data(), v.size(), HOOP_F32, 2,
                                  nullptr)
                      : hoop_allreduce(comm, v.data(), v.data(), v.size(),
                                       HOOP_F32, HOOP_SUM, nullptr);
        RANK_EXPECT(log, res == HOOP_ERR_TIMEOUT || res == HOOP_ERR_REMOTE,
                    "got %s: %s", hoop_result_name(res),
                    hoop_comm_last_error(comm));
        RANK_EXPECT(log, mentions(comm, "stall report: rank ") &&
                             mentions(comm, "hoop_recv") &&
                             mentions(comm, "hoop_allreduce"),
                    "message: %s", hoop_comm_last_error(comm));
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Running out of memory while building a plan happens after the call has
// taken its sequence number, with the peers already in the call: the rank
// must break the communicator and tell them, not leave them to time out.
void out_of_memory_case(bool alltoall) {
  RunOptions opt;
  opt.comm_timeout_ms = 20000;
  RunResult r = run_ranks(
      3,
      [alltoall](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        std::vector<float> in(30, 1.0f), out(30);
        auto call = [&] {
          return alltoall ? hoop_alltoall(comm, in.data(), out.data(), 10,
                                          HOOP_F32, nullptr)
                          : hoop_allreduce(comm, in.data(), out.data(), 30,
                                           HOOP_F32, HOOP_SUM, nullptr);
        };
        if (rank == 1)
          hoop__plan_fail_next_alloc();
        auto t0 = std::chrono::steady_clock::now();
        hoop_result_t res = call();
        double secs = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
        if (rank == 1) {
          RANK_EXPECT(log, res == HOOP_ERR_NO_MEMORY, "got %s: %s",
                      hoop_result_name(res), hoop_comm_last_error(comm));
          RANK_EXPECT(log, call() != HOOP_SUCCESS,
                      "the communicator is still usable after the failure");
        } else {
          RANK_EXPECT(log, res == HOOP_ERR_REMOTE, "got %s: %s",
                      hoop_result_name(res), hoop_comm_last_error(comm));
          RANK_EXPECT(log, mentions(comm, "rank 1"), "message: %s",
                      hoop_comm_last_error(comm));
          RANK_EXPECT(log, secs < 5.0, "took %.1f s to hear of it", secs);
        }
        (void)nranks;
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// A one-shot all-reduce (2 ranks, small: oneshot.c) hands data over once,
// so a rank that comes late may find all it needs already sent by a peer
// that has since given up.  It may then return the right sum (or, where
// the peer's end is gone before it sends, an error naming it); never a
// wrong sum or a hang, and its next call fails naming the peer.
TEST(Errors, OneShotLateRankGetsTheSumOrTheErrorThenTheErrorNamingThePeer) {
  RunOptions opt;
  opt.comm_timeout_ms = 1000;
  RunResult r = run_ranks(
      2,
      [](RankLog &log, hoop_comm_t comm, int rank, int) {
        float x = 1;
        if (rank == 0) {
          hoop_result_t res =
              hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
          RANK_EXPECT(log, res == HOOP_ERR_TIMEOUT, "got %s: %s",
                      hoop_result_name(res), hoop_comm_last_error(comm));
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        hoop_result_t res =
            hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
        if (res == HOOP_SUCCESS)
          RANK_EXPECT(log, x == 2, "the late rank's sum is %g", x);
        else
          RANK_EXPECT(log, mentions(comm, "rank 0 ("), "%s: %s",
                      hoop_result_name(res), hoop_comm_last_error(comm));
        res = hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
        RANK_EXPECT(log, res != HOOP_SUCCESS && mentions(comm, "rank 0"),
                    "the next call: %s: %s", hoop_result_name(res),
                    hoop_comm_last_error(comm));
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Errors, OutOfMemoryBuildingACollectiveFailsEveryRankAtOnce) {
  out_of_memory_case(false);
}

TEST(Errors, OutOfMemoryBuildingAnAllToAllFailsEveryRankAtOnce) {
  out_of_memory_case(true);
}

TEST(Errors, AbortFromAnotherThreadEndsABlockedCall) {
  RunOptions opt;
  opt.comm_timeout_ms = 60000;
  opt.init = true;
  RunResult r = run_ranks(
      2,
      [](RankLog &log, hoop_comm_t comm, int rank, int) {
        // As in SilentRankTimesOutNamingIt: the ring needs the aborted
        // rank's second hand-over.
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_RING));
        float x = 1;
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          hoop_result_t res =
              hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
          RANK_EXPECT(log, res != HOOP_SUCCESS, "peer aborted, yet success");
          return;
        }
        std::thread aborter([comm] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          hoop_comm_abort(comm);
        });
        auto t0 = std::chrono::steady_clock::now();
        hoop_result_t res =
            hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
        double secs = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
        aborter.join();
        RANK_EXPECT(log, res == HOOP_ERR_ABORTED, "got %s",
                    hoop_result_name(res));
        RANK_EXPECT(log, secs < 1.5, "abort took %.2f s", secs);
        res = hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM, nullptr);
        RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE,
                    "use after abort: %s", hoop_result_name(res));
        _exit(log.ok() ? 0 : 1); // comm is gone: skip the harness's destroy
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

} // namespace
