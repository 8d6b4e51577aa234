// Surviving a lost rank (hoop_comm_shrink): ranks are killed or stopped in
// the middle of a collective, the others agree on who is left and go on in
// a new communicator whose results equal those of a job that started with
// the survivors; a stopped rank that runs again gets an error, no place.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace hooptest;

namespace {

bool mentions(hoop_comm_t comm, const char *text) {
  return strstr(hoop_comm_last_error(comm), text) != nullptr;
}

// Sends this process `sig` from another thread `ms` from now, so that it
// dies (or stops) in the middle of whatever call it is making then.
void signal_self_after(int sig, int ms) {
  std::thread([sig, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    kill(getpid(), sig);
  }).detach();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Each rank's input, known to every rank: the reference needs no hoop.
double input(int old_rank, size_t i) {
  return static_cast<double>((old_rank + 1) * 1000 + static_cast<int>(i % 997));
}

// On the survivors' communicator: all-reduces whose result must be the sum
// over the survivors (named by their old ranks) that a job of them alone
// would compute, in and out of place, by every algorithm, at sizes that do
// not divide among them.
void expect_survivors_sum(RankLog &log, hoop_comm_t comm,
                          const std::vector<int> &kept, int old_rank) {
  for (hoop_algo_t algo : {HOOP_ALGO_RING, HOOP_ALGO_TREE, HOOP_ALGO_PS}) {
    RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, algo));
    for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{70001}}) {
      for (bool in_place : {false, true}) {
        std::vector<double> send(count), recv(count, -1.0);
        for (size_t i = 0; i < count; i++)
          send[i] = input(old_rank, i);
        double *out = in_place ? send.data() : recv.data();
        hoop_result_t res = hoop_allreduce(comm, send.data(), out, count,
                                           HOOP_F64, HOOP_SUM, nullptr);
        if (res != HOOP_SUCCESS) {
          log.fail("all-reduce of %zu after the shrink (%s): %s: %s", count,
                   hoop_algo_name(algo), hoop_result_name(res),
                   hoop_comm_last_error(comm));
          return;
        }
        for (size_t i = 0; i < count; i++) {
          double want = 0;
          for (int r : kept)
            want += input(r, i);
          if (out[i] != want) {
            log.fail("%s, %zu elements%s: [%zu] = %g, survivors' sum %g",
                     hoop_algo_name(algo), count,
                     in_place ? " in place" : "", i, out[i], want);
            return;
          }
        }
      }
    }
  }
}

struct ShrinkCase {
  int nranks;
  std::vector<int> victims;
  int sig = SIGKILL;
  hoop_algo_t algo = HOOP_ALGO_RING;
  int timeout_ms = 20000;
  // Survivors' bound on the shrink itself, from their failed call.
  double shrink_s = 5.0;
};

bool is_victim(const ShrinkCase &c, int rank) {
  return std::find(c.victims.begin(), c.victims.end(), rank) !=
         c.victims.end();
}

// A stopped rank, once the survivors let it run again: its call fails,
// and its own shrink gets an error and no communicator.
void woken_victim(RankLog &log, hoop_comm_t comm) {
  std::vector<float> v(1u << 16, 1.0f);
  hoop_result_t res = HOOP_SUCCESS;
  for (int i = 0; i < 1000 && res == HOOP_SUCCESS; i++)
    res = hoop_allreduce(comm, v.data(), v.data(), v.size(), HOOP_F32,
                         HOOP_SUM, nullptr);
  RANK_EXPECT(log, res != HOOP_SUCCESS, "a call after waking succeeded");
  hoop_comm_t next = nullptr;
  res = hoop_comm_shrink(comm, nullptr, &next, nullptr);
  RANK_EXPECT(log, res == HOOP_ERR_REMOTE && next == nullptr,
              "the woken rank's shrink got %s: %s", hoop_result_name(res),
              hoop_comm_last_error(comm));
  RANK_EXPECT(log, mentions(comm, "left this rank out") ||
                       mentions(comm, "holds this rank lost"),
              "message: %s", hoop_comm_last_error(comm));
}

void shrink_case(const ShrinkCase &c) {
  RunOptions opt;
  opt.comm_timeout_ms = c.timeout_ms;
  std::vector<int> kept;
  for (int r = 0; r < c.nranks; r++)
    if (!is_victim(c, r))
      kept.push_back(r);
  RunResult r = run_ranks(
      c.nranks,
      [&c, &kept](RankLog &log, hoop_comm_t comm, int rank, int n) {
        std::vector<float> v(1u << 20, 1.0f);
        RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, c.algo));
        RANK_EXPECT_OK(log, comm,
                       hoop_allreduce(comm, v.data(), v.data(), 1000,
                                      HOOP_F32, HOOP_SUM, nullptr));
        std::vector<int> pids(n);
        for (int p = 0; p < n; p++) {
          hoop_rank_info_t info = HOOP_RANK_INFO_INIT;
          RANK_EXPECT_OK(log, comm, hoop_comm_rank_info(comm, p, &info));
          pids[p] = info.pid;
        }
        if (is_victim(c, rank)) {
          signal_self_after(c.sig, 30);
          // Killed, it never gets past this loop; stopped, it does once
          // it runs again.
          while (hoop_allreduce(comm, v.data(), v.data(), v.size(), HOOP_F32,
                                HOOP_SUM, nullptr) == HOOP_SUCCESS) {
          }
          woken_victim(log, comm);
          return;
        }
        hoop_result_t res = HOOP_SUCCESS;
        auto t0 = std::chrono::steady_clock::now();
        while (res == HOOP_SUCCESS && seconds_since(t0) < 60)
          res = hoop_allreduce(comm, v.data(), v.data(), v.size(), HOOP_F32,
                               HOOP_SUM, nullptr);
        RANK_EXPECT(log, res != HOOP_SUCCESS, "never noticed the loss");
        hoop_config_t cfg = HOOP_CONFIG_INIT;
        cfg.timeout_ms = c.timeout_ms;
        hoop_comm_t next = nullptr;
        std::vector<int> old_ranks(n, -1);
        auto t1 = std::chrono::steady_clock::now();
        res = hoop_comm_shrink(comm, &cfg, &next, old_ranks.data());
        double took = seconds_since(t1);
        if (res != HOOP_SUCCESS) {
          log.fail("shrink: %s: %s", hoop_result_name(res),
                   hoop_comm_last_error(comm));
          return;
        }
        RANK_EXPECT(log, took < c.shrink_s, "the shrink took %.2f s", took);
        int size = -1, me = -1;
        RANK_EXPECT_OK(log, next, hoop_comm_size(next, &size));
        RANK_EXPECT_OK(log, next, hoop_comm_rank(next, &me));
        RANK_EXPECT(log, size == (int)kept.size(), "%d ranks left, not %zu",
                    size, kept.size());
        RANK_EXPECT(log, me >= 0 && me < size && kept[(size_t)me] == rank,
                    "old rank %d is new rank %d", rank, me);
        old_ranks.resize(kept.size());
        RANK_EXPECT(log, old_ranks == kept, "old_ranks differ from the kept");
        expect_survivors_sum(log, next, kept, rank);
        // Every survivor is done with the old communicator before the
        // stopped ranks run again and find themselves left out.
        RANK_EXPECT_OK(log, next, hoop_barrier(next));
        if (c.sig == SIGSTOP && me == 0)
          for (int victim : c.victims)
            kill(pids[(size_t)victim], SIGCONT);
        hoop_comm_destroy(next);
      },
      opt);
  for (int victim : c.victims) {
    if (c.sig == SIGKILL) {
      EXPECT_EQ(r.exit_codes[(size_t)victim], 128 + SIGKILL);
      r.exit_codes[(size_t)victim] = 0;
    }
  }
  EXPECT_TRUE(r.all_ok()) << describe(r);
  std::vector<std::string> leaked = leaked_shm_segments();
  EXPECT_TRUE(leaked.empty()) << "/dev/shm/" << leaked[0];
}

TEST(Shrink, AKilledRankIsLeftOutAndTheOthersGoOn) {
  shrink_case({4, {2}});
}

TEST(Shrink, ARankOfAnOddCountIsLost) {
  shrink_case({3, {1}});
  shrink_case({5, {4}});
}

TEST(Shrink, TwoRanksLostAtOnce) {
  shrink_case({5, {1, 3}});
}

TEST(Shrink, TheParameterServersRootIsLost) {
  shrink_case({4, {0}, SIGKILL, HOOP_ALGO_PS});
}

TEST(Shrink, TheTreesRankZeroIsLostAmongEight) {
  shrink_case({8, {0, 5}, SIGKILL, HOOP_ALGO_TREE});
}

// Stopped ranks are found by the survivors' stall report at the timeout;
// the shrink then takes no second timeout.  Woken, they are left out.
TEST(Shrink, AStoppedRankIsLeftOutAndWokenGetsAnError) {
  shrink_case({4, {2}, SIGSTOP, HOOP_ALGO_RING, 1500, 1.4});
}

TEST(Shrink, AStoppedLowestRankIsLeftOut) {
  shrink_case({3, {0}, SIGSTOP, HOOP_ALGO_RING, 1500, 1.4});
}

// A rank that dies as the others shrink, at whatever step of it: the
// shrink fails (then the survivors shrink the same communicator again) or
// leaves it in (then their next call fails and they shrink the new one),
// until they go on without it, as a program that survives failures does.
TEST(Shrink, ARankKilledDuringTheShrinkIsLeftOutByTheNext) {
  const int n = 4;
  RunOptions opt;
  opt.comm_timeout_ms = 3000;
  RunResult r = run_ranks(
      n, [](RankLog &log, hoop_comm_t comm, int rank, int) {
        std::vector<float> v(1u << 20, 1.0f);
        if (rank == 1)
          signal_self_after(SIGKILL, 30);
        auto t0 = std::chrono::steady_clock::now();
        while (seconds_since(t0) < 60 &&
               hoop_allreduce(comm, v.data(), v.data(), v.size(), HOOP_F32,
                              HOOP_SUM, nullptr) == HOOP_SUCCESS) {
        }
        if (rank == 3)
          signal_self_after(SIGKILL, 5);
        hoop_config_t cfg = HOOP_CONFIG_INIT;
        cfg.timeout_ms = 3000;
        hoop_comm_t cur = comm;
        int size = -1;
        for (int round = 0; round < 6 && size != 2; round++) {
          hoop_comm_t next = nullptr;
          hoop_result_t res = hoop_comm_shrink(cur, &cfg, &next, nullptr);
          if (res != HOOP_SUCCESS)
            continue;
          if (cur != comm)
            hoop_comm_destroy(cur);
          cur = next;
          RANK_EXPECT_OK(log, cur, hoop_comm_size(cur, &size));
          // Rank 3 is still in it: its death fails a call soon.
          auto t1 = std::chrono::steady_clock::now();
          while (size != 2 && seconds_since(t1) < 20 &&
                 hoop_allreduce(cur, v.data(), v.data(), 1000, HOOP_F32,
                                HOOP_SUM, nullptr) == HOOP_SUCCESS) {
          }
        }
        RANK_EXPECT(log, size == 2, "%d ranks left, not 2: %s", size,
                    hoop_comm_last_error(cur));
        if (size == 2)
          expect_survivors_sum(log, cur, {0, 2}, rank);
        if (cur != comm)
          hoop_comm_destroy(cur);
      },
      opt);
  EXPECT_EQ(r.exit_codes[1], 128 + SIGKILL);
  EXPECT_EQ(r.exit_codes[3], 128 + SIGKILL);
  r.exit_codes[1] = r.exit_codes[3] = 0;
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Called on a live communicator by every rank, the shrink loses nobody.
TEST(Shrink, EveryRankShrinkingALiveCommunicatorKeepsThemAll) {
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int rank,
                                int n) {
    hoop_comm_t next = nullptr;
    std::vector<int> old_ranks(n, -1);
    RANK_EXPECT_OK(log, comm,
                   hoop_comm_shrink(comm, nullptr, &next, old_ranks.data()));
    if (next == nullptr)
      return;
    int size = -1, me = -1;
    RANK_EXPECT_OK(log, next, hoop_comm_size(next, &size));
    RANK_EXPECT_OK(log, next, hoop_comm_rank(next, &me));
    RANK_EXPECT(log, size == n && me == rank, "rank %d of %d", me, size);
    RANK_EXPECT(log, old_ranks == std::vector<int>({0, 1, 2}),
                "old_ranks %d %d %d", old_ranks[0], old_ranks[1],
                old_ranks[2]);
    expect_survivors_sum(log, next, {0, 1, 2}, rank);
    // The old communicator stays broken.
    float x = 1;
    RANK_EXPECT(log,
                hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM,
                               nullptr) != HOOP_SUCCESS,
                "the shrunk communicator still ran a call");
    hoop_comm_destroy(next);
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Shrink, OneRankShrinksToItself) {
  RunResult r = run_ranks(1, [](RankLog &log, hoop_comm_t comm, int, int) {
    hoop_comm_t next = nullptr;
    RANK_EXPECT_OK(log, comm, hoop_comm_shrink(comm, nullptr, &next, nullptr));
    if (next != nullptr) {
      expect_survivors_sum(log, next, {0}, 0);
      hoop_comm_destroy(next);
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Shrink, BadArgumentsAreErrors) {
  RunResult r = run_ranks(1, [](RankLog &log, hoop_comm_t comm, int, int) {
    RANK_EXPECT(log,
                hoop_comm_shrink(comm, nullptr, nullptr, nullptr) ==
                    HOOP_ERR_INVALID_ARGUMENT,
                "a NULL newcomm was taken");
    hoop_comm_t next = reinterpret_cast<hoop_comm_t>(&log);
    RANK_EXPECT(log,
                hoop_comm_shrink(nullptr, nullptr, &next, nullptr) ==
                        HOOP_ERR_INVALID_ARGUMENT &&
                    next == nullptr,
                "a NULL communicator was taken");
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

} // namespace
