// The queries from another thread while one thread's calls run, as
// PyTorch's watchdog polls a communicator while the training thread queues
// collectives: every query must succeed (no "another thread is using this
// communicator"), every snapshot of the counters must be whole (the total
// equals the sum of its parts), and the calls must neither fail nor count
// wrongly.  Run under TSan, this is also the race detector's workload.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "harness.h"
#include "queries.h"

using namespace hooptest;

namespace {

uint64_t allreduce_calls(const hoop_stats_t &st) {
  uint64_t calls = 0;
  for (const hoop_coll_stats_t &s : st.by_coll[HOOP_COLL_ALLREDUCE])
    calls += s.calls;
  return calls;
}

class Threads : public ::testing::TestWithParam<int> {};

TEST_P(Threads, QueriesFromAnotherThreadWhileCallsRun) {
  const int calls = 10000;
  RunResult r = run_ranks(GetParam(), [&](RankLog &log, hoop_comm_t comm,
                                          int rank, int nranks) {
    std::atomic<bool> done{false};
    long queries = 0;
    RankLog watchdog_log(rank); // a log is one thread's
    std::thread watchdog([&] {
      uint64_t last_sent = 0;
      while (!done.load(std::memory_order_acquire) && watchdog_log.ok()) {
        last_sent = query_everything(watchdog_log, comm, rank, nranks,
                                     last_sent, {HOOP_ALGO_AUTO});
        // The same setting again: a different one would let ranks disagree.
        RANK_EXPECT_OK(watchdog_log, comm,
                       hoop_comm_set_algo(comm, HOOP_ALGO_AUTO));
        queries++;
        // PyTorch's watchdog polls every 100 ms; far more often still hits
        // the calls at every stage, without taking the cores they need.
        usleep(100);
      }
    });
    // 5 elements: not divisible by most rank counts, so the ring's chunks
    // differ in size.
    std::vector<float> v(5);
    for (int i = 0; i < calls && log.ok(); i++) {
      for (size_t e = 0; e < v.size(); e++)
        v[e] = (float)(rank + 1) * (float)(i % 7 + e);
      RANK_EXPECT_OK(log, comm,
                     hoop_allreduce(comm, v.data(), v.data(), v.size(),
                                    HOOP_F32, HOOP_SUM, nullptr));
      float ranks_sum = (float)(nranks * (nranks + 1) / 2);
      for (size_t e = 0; e < v.size(); e++)
        RANK_EXPECT(log, v[e] == ranks_sum * (float)(i % 7 + e),
                    "call %d element %zu: %g", i, e, (double)v[e]);
    }
    done.store(true, std::memory_order_release);
    watchdog.join();
    RANK_EXPECT(log, watchdog_log.ok(), "a query failed (above)");
    RANK_EXPECT(log, queries > 0, "the watchdog never ran a query");
    hoop_stats_t st = HOOP_STATS_INIT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
    RANK_EXPECT(log, allreduce_calls(st) == (uint64_t)calls,
                "%llu all-reduces counted, %d made",
                (unsigned long long)allreduce_calls(st), calls);
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Threads, ::testing::Values(2, 3));

}  // namespace
