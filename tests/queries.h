// Every query of the public API once, as a watchdog thread makes them
// while another thread's calls run or are queued (tests/test_threads.cc
// for host buffers, the CudaThreads tests for device buffers): each must
// succeed, no counter snapshot may be torn (the totals equal the sums of
// their parts), and none may report an error that did not happen.
#ifndef HOOP_TESTS_QUERIES_H
#define HOOP_TESTS_QUERIES_H

#include <cstring>
#include <initializer_list>

#include "harness.h"

namespace hooptest {

inline uint64_t sum_over_calls(const hoop_stats_t &st,
                               uint64_t hoop_coll_stats_t::*field) {
  uint64_t total = 0;
  for (const auto &per_coll : st.by_coll)
    for (const hoop_coll_stats_t &s : per_coll)
      total += s.*field;
  return total;
}

// `settings` are the algorithm settings the calling thread's peer thread
// may have made.  Returns the snapshot's bytes sent, which must never go
// below `last_sent`.
inline uint64_t query_everything(RankLog &log, hoop_comm_t comm, int rank,
                                 int nranks, uint64_t last_sent,
                                 std::initializer_list<hoop_algo_t> settings) {
  hoop_stats_t st = HOOP_STATS_INIT;
  RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
  uint64_t sent = sum_over_calls(st, &hoop_coll_stats_t::bytes_sent);
  uint64_t received = sum_over_calls(st, &hoop_coll_stats_t::bytes_received);
  RANK_EXPECT(log, st.bytes_sent == sent && st.bytes_received == received,
              "a torn snapshot: %llu sent in all, %llu in the parts",
              (unsigned long long)st.bytes_sent, (unsigned long long)sent);
  RANK_EXPECT(log, st.bytes_sent >= last_sent,
              "bytes sent went down: %llu after %llu",
              (unsigned long long)st.bytes_sent,
              (unsigned long long)last_sent);
  int peer = (rank + 1) % nranks;
  RANK_EXPECT_OK(log, comm,
                 hoop_comm_get_peer_bytes(comm, peer, &sent, &received));
  hoop_algo_t algo = HOOP_ALGO_COUNT;
  RANK_EXPECT_OK(log, comm, hoop_comm_get_algo(comm, &algo));
  bool expected = false;
  for (hoop_algo_t a : settings)
    expected = expected || a == algo;
  RANK_EXPECT(log, expected, "setting %s", hoop_algo_name(algo));
  double seconds = 0;
  RANK_EXPECT_OK(log, comm,
                 hoop_comm_predict(comm, HOOP_COLL_ALLREDUCE, HOOP_ALGO_AUTO,
                                   1 << 20, &seconds));
  hoop_model_t model = HOOP_MODEL_INIT;
  RANK_EXPECT_OK(log, comm, hoop_comm_get_model(comm, &model));
  hoop_rank_info_t info = HOOP_RANK_INFO_INIT;
  RANK_EXPECT_OK(log, comm, hoop_comm_rank_info(comm, peer, &info));
  const char *transport = nullptr;
  RANK_EXPECT_OK(log, comm, hoop_comm_transport(comm, rank, peer, &transport));
  int r = -1, n = -1;
  RANK_EXPECT_OK(log, comm, hoop_comm_rank(comm, &r));
  RANK_EXPECT_OK(log, comm, hoop_comm_size(comm, &n));
  RANK_EXPECT(log, r == rank && n == nranks, "rank %d of %d", r, n);
  RANK_EXPECT(log, hoop_comm_last_error(comm) != nullptr, "no last error");
  hoop_result_t async = HOOP_ERR_INTERNAL;
  RANK_EXPECT_OK(log, comm, hoop_comm_get_async_error(comm, &async));
  RANK_EXPECT(log, async == HOOP_SUCCESS, "an asynchronous error: %s: %s",
              hoop_result_name(async), hoop_comm_last_error(comm));
  const char *path = nullptr;
  RANK_EXPECT_OK(log, comm, hoop_comm_device_path(comm, &path));
  RANK_EXPECT(log,
              path != nullptr && (strcmp(path, "none") == 0 ||
                                  strcmp(path, "cuda_ipc") == 0 ||
                                  strcmp(path, "staged") == 0),
              "device path %s", path != nullptr ? path : "(null)");
  return st.bytes_sent;
}

}  // namespace hooptest

#endif  // HOOP_TESTS_QUERIES_H
