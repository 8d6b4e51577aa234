// Traffic counters and the cost model.  After hoop_comm_reset_stats and one
// call, hoop_comm_get_stats and hoop_comm_get_peer_bytes must show exactly
// the payload each algorithm's schedule moves, per peer, computed here from
// the closed forms of each schedule (not from the library's plans): the
// ring's uneven chunks, the parameter server's star, the double binary
// tree's two halves, the broadcast/reduce chain and single tree.  Calls and
// time are counted under the collective and algorithm that ran.
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "harness.h"

using namespace hooptest;

namespace {

// Payload elements this rank sends to and receives from each peer.
struct Traffic {
  explicit Traffic(int n) : sent((size_t)n, 0), received((size_t)n, 0) {}
  void to(int peer, uint64_t elems) { sent[(size_t)peer] += elems; }
  void from(int peer, uint64_t elems) { received[(size_t)peer] += elems; }
  std::vector<uint64_t> sent, received;
};

int mod(int a, int n) { return ((a % n) + n) % n; }

// Ring chunk i of `count` elements over n ranks: the first count % n chunks
// are one element longer.
uint64_t chunk_len(size_t count, int n, int i) {
  return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

// Reduce-scatter sends every chunk but the rank's own to the next rank;
// all-gather sends every chunk but the next rank's.  Receiving mirrors it
// from the previous rank.
Traffic ring_allreduce(int n, int r, size_t count) {
  Traffic t(n);
  int next = mod(r + 1, n), prev = mod(r - 1, n);
  t.to(next, (count - chunk_len(count, n, r)) +
                 (count - chunk_len(count, n, next)));
  t.from(prev, (count - chunk_len(count, n, prev)) +
                   (count - chunk_len(count, n, r)));
  return t;
}

// Reduce-scatter and all-gather of blocks of c: N-1 blocks each way.
Traffic ring_half(int n, int r, size_t c) {
  Traffic t(n);
  t.to(mod(r + 1, n), (uint64_t)(n - 1) * c);
  t.from(mod(r - 1, n), (uint64_t)(n - 1) * c);
  return t;
}

// Root 0 receives every rank's whole buffer and sends the sum back.
Traffic ps_allreduce(int n, int r, size_t count) {
  Traffic t(n);
  for (int p = 0; p < n; p++) {
    if (p != r && (r == 0 || p == 0)) {
      t.to(p, count);
      t.from(p, count);
    }
  }
  return t;
}

// One binary tree over positions 0..n-1, position q held by rank
// rank_of(q): position p's parent is (p-1)/2 and its children 2p+1 and
// 2p+2.  `up` elements flow from child to parent, `down` from parent to
// child.
template <typename RankOf>
void add_tree(Traffic &t, int n, int p, RankOf rank_of, uint64_t up,
              uint64_t down) {
  for (int c : {2 * p + 1, 2 * p + 2}) {
    if (c < n) {
      t.from(rank_of(c), up);
      t.to(rank_of(c), down);
    }
  }
  if (p > 0) {
    t.to(rank_of((p - 1) / 2), up);
    t.from(rank_of((p - 1) / 2), down);
  }
}

// Double binary tree: tree 0 (position = rank) reduces and broadcasts the
// first count/2 elements, tree 1 (position = N-1-rank) the rest.
Traffic tree_allreduce(int n, int r, size_t count) {
  Traffic t(n);
  uint64_t h0 = count / 2, h1 = count - count / 2;
  add_tree(t, n, r, [](int q) { return q; }, h0, h0);
  add_tree(t, n, n - 1 - r, [n](int q) { return n - 1 - q; }, h1, h1);
  return t;
}

// Broadcast and reduce trees: one tree rooted at root.
Traffic rooted_tree(int n, int r, int root, size_t count, bool broadcast) {
  Traffic t(n);
  add_tree(t, n, mod(r - root, n), [n, root](int q) { return (q + root) % n; },
           broadcast ? 0 : count, broadcast ? count : 0);
  return t;
}

// Broadcast chain root, root+1, ..., root-1; reduce chain root+1, ...,
// root.  Each rank but the first receives from its predecessor and each
// but the last sends to its successor.
Traffic chain(int n, int r, int root, size_t count, bool broadcast) {
  Traffic t(n);
  int first = broadcast ? root : mod(root + 1, n);
  int pos = mod(r - first, n);
  if (pos > 0)
    t.from(mod(r - 1, n), count);
  if (pos < n - 1)
    t.to(mod(r + 1, n), count);
  return t;
}

int64_t monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t sum(const std::vector<uint64_t> &v) {
  return std::accumulate(v.begin(), v.end(), (uint64_t)0);
}

// Checks the totals and every peer's bytes against `t` (in elements of
// `esz` bytes, `calls` times over), and that the peers add up to the
// totals.
void check_bytes(RankLog &log, hoop_comm_t comm, int rank, int nranks,
                 const std::string &what, const hoop_stats_t &st,
                 const Traffic &t, size_t esz, uint64_t calls) {
  uint64_t want_sent = sum(t.sent) * esz * calls;
  uint64_t want_recv = sum(t.received) * esz * calls;
  RANK_EXPECT(log, st.bytes_sent == want_sent && st.bytes_received == want_recv,
              "%s: bytes sent/received %llu/%llu, want %llu/%llu",
              what.c_str(), (unsigned long long)st.bytes_sent,
              (unsigned long long)st.bytes_received,
              (unsigned long long)want_sent, (unsigned long long)want_recv);
  uint64_t peer_sent_total = 0, peer_recv_total = 0;
  for (int p = 0; p < nranks; p++) {
    if (p == rank)
      continue;
    uint64_t s = ~0ULL, rcv = ~0ULL;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_peer_bytes(comm, p, &s, &rcv));
    uint64_t ws = t.sent[(size_t)p] * esz * calls;
    uint64_t wr = t.received[(size_t)p] * esz * calls;
    RANK_EXPECT(log, s == ws && rcv == wr,
                "%s: peer %d sent/received %llu/%llu, want %llu/%llu",
                what.c_str(), p, (unsigned long long)s,
                (unsigned long long)rcv, (unsigned long long)ws,
                (unsigned long long)wr);
    peer_sent_total += s;
    peer_recv_total += rcv;
  }
  RANK_EXPECT(log, peer_sent_total == st.bytes_sent &&
                       peer_recv_total == st.bytes_received,
              "%s: peers sum to %llu/%llu, totals say %llu/%llu",
              what.c_str(), (unsigned long long)peer_sent_total,
              (unsigned long long)peer_recv_total,
              (unsigned long long)st.bytes_sent,
              (unsigned long long)st.bytes_received);
}

// Checks the counters after `calls` identical calls since the last reset,
// each moving `t`, counted under by_coll[coll][algo] and nowhere else;
// `wall_ns` is the time the test measured around the calls, which bounds
// the time counted inside them.
void check_counters(RankLog &log, hoop_comm_t comm, int rank, int nranks,
                    const std::string &what, hoop_coll_t coll,
                    hoop_algo_t algo, const Traffic &t, size_t esz,
                    uint64_t calls, int64_t wall_ns) {
  hoop_stats_t st;
  memset(&st, 0xff, sizeof st);
  st.size = sizeof st;
  st.version = HOOP_STATS_VERSION;
  hoop_result_t res = hoop_comm_get_stats(comm, &st);
  if (res != HOOP_SUCCESS) {
    log.fail("%s: get_stats: %s", what.c_str(), hoop_result_name(res));
    return;
  }
  check_bytes(log, comm, rank, nranks, what, st, t, esz, calls);
  uint64_t want_sent = sum(t.sent) * esz * calls;
  uint64_t want_recv = sum(t.received) * esz * calls;
  const hoop_coll_stats_t &cs = st.by_coll[coll][algo];
  RANK_EXPECT(log, cs.calls == calls, "%s: %llu calls counted, want %llu",
              what.c_str(), (unsigned long long)cs.calls,
              (unsigned long long)calls);
  RANK_EXPECT(log, cs.bytes_sent == want_sent &&
                       cs.bytes_received == want_recv,
              "%s: by_coll bytes sent/received %llu/%llu, want %llu/%llu",
              what.c_str(), (unsigned long long)cs.bytes_sent,
              (unsigned long long)cs.bytes_received,
              (unsigned long long)want_sent, (unsigned long long)want_recv);
  // 100 us of slack covers a library clock other than CLOCK_MONOTONIC.
  RANK_EXPECT(log, cs.time_ns > 0 && (int64_t)cs.time_ns <= wall_ns + 100000,
              "%s: time_ns %llu, measured around the calls %lld",
              what.c_str(), (unsigned long long)cs.time_ns,
              (long long)wall_ns);
  RANK_EXPECT(log, cs.wait_ns <= cs.time_ns,
              "%s: wait_ns %llu is more than time_ns %llu", what.c_str(),
              (unsigned long long)cs.wait_ns,
              (unsigned long long)cs.time_ns);
  for (int c = 0; c < HOOP_COLL_COUNT; c++) {
    for (int a = 0; a < HOOP_ALGO_COUNT; a++) {
      const hoop_coll_stats_t &o = st.by_coll[c][a];
      if ((c == coll && a == algo) ||
          (o.calls == 0 && o.time_ns == 0 && o.wait_ns == 0 &&
           o.bytes_sent == 0 && o.bytes_received == 0))
        continue;
      log.fail("%s: by_coll[%d][%d] is not zero (%llu calls)", what.c_str(),
               c, a, (unsigned long long)o.calls);
    }
  }
}

enum class Kind { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce };

struct Case {
  Kind kind;
  hoop_algo_t algo; // as set with hoop_comm_set_algo
  hoop_dtype_t dtype;
  size_t count; // reduce-scatter and all-gather: per-rank block
  int root;
};

hoop_coll_t coll_of(Kind k) {
  switch (k) {
  case Kind::AllReduce: return HOOP_COLL_ALLREDUCE;
  case Kind::ReduceScatter: return HOOP_COLL_REDUCE_SCATTER;
  case Kind::AllGather: return HOOP_COLL_ALLGATHER;
  case Kind::Broadcast: return HOOP_COLL_BROADCAST;
  case Kind::Reduce: return HOOP_COLL_REDUCE;
  }
  return HOOP_COLL_ALLREDUCE;
}

const char *algo_label(hoop_algo_t a) {
  switch (a) {
  case HOOP_ALGO_RING: return "ring";
  case HOOP_ALGO_TREE: return "tree";
  case HOOP_ALGO_PS: return "ps";
  case HOOP_ALGO_AUTO: return "auto";
  default: return "other";
  }
}

Traffic expected_traffic(const Case &c, int n, int r) {
  switch (c.kind) {
  case Kind::AllReduce:
    if (c.algo == HOOP_ALGO_TREE)
      return tree_allreduce(n, r, c.count);
    return c.algo == HOOP_ALGO_PS ? ps_allreduce(n, r, c.count)
                                  : ring_allreduce(n, r, c.count);
  case Kind::ReduceScatter:
  case Kind::AllGather: return ring_half(n, r, c.count);
  case Kind::Broadcast:
  case Kind::Reduce: {
    bool bcast = c.kind == Kind::Broadcast;
    return c.algo == HOOP_ALGO_TREE ? rooted_tree(n, r, c.root, c.count, bcast)
                                    : chain(n, r, c.root, c.count, bcast);
  }
  }
  return Traffic(n);
}

// One call of the case; the data is not checked here (test_collectives
// and test_algorithms do that), only what the counters say about it.
hoop_result_t call_once(hoop_comm_t comm, const Case &c,
                        std::vector<char> &send, std::vector<char> &recv) {
  switch (c.kind) {
  case Kind::AllReduce:
    return hoop_allreduce(comm, send.data(), recv.data(), c.count, c.dtype,
                          HOOP_SUM, nullptr);
  case Kind::ReduceScatter:
    return hoop_reduce_scatter(comm, send.data(), recv.data(), c.count,
                               c.dtype, HOOP_SUM, nullptr);
  case Kind::AllGather:
    return hoop_allgather(comm, send.data(), recv.data(), c.count, c.dtype,
                          nullptr);
  case Kind::Broadcast:
    return hoop_broadcast(comm, send.data(), recv.data(), c.count, c.dtype,
                          c.root, nullptr);
  case Kind::Reduce:
    return hoop_reduce(comm, send.data(), recv.data(), c.count, c.dtype,
                       HOOP_SUM, c.root, nullptr);
  }
  return HOOP_ERR_INTERNAL;
}

const char *kind_name(Kind k) {
  switch (k) {
  case Kind::AllReduce: return "allreduce";
  case Kind::ReduceScatter: return "reduce_scatter";
  case Kind::AllGather: return "allgather";
  case Kind::Broadcast: return "broadcast";
  case Kind::Reduce: return "reduce";
  }
  return "?";
}

// Resets, runs the case `calls` times and checks the counters.
void run_case(RankLog &log, hoop_comm_t comm, int rank, int nranks,
              const Case &c, uint64_t calls) {
  size_t esz = hoop_dtype_size(c.dtype);
  size_t total = c.kind == Kind::ReduceScatter || c.kind == Kind::AllGather
                     ? c.count * nranks
                     : c.count;
  std::vector<char> send(total * esz + 1), recv(total * esz + 1);
  std::string what = std::string(kind_name(c.kind)) + " " +
                     algo_label(c.algo) + " " + hoop_dtype_name(c.dtype) +
                     " count " + std::to_string(c.count) + " root " +
                     std::to_string(c.root);
  RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, c.algo));
  RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
  int64_t t0 = monotonic_ns();
  for (uint64_t i = 0; i < calls; i++) {
    hoop_result_t res = call_once(comm, c, send, recv);
    if (res != HOOP_SUCCESS) {
      log.fail("%s: %s: %s", what.c_str(), hoop_result_name(res),
               hoop_comm_last_error(comm));
      return;
    }
  }
  int64_t wall = monotonic_ns() - t0;
  // Reduce-scatter and all-gather always use the ring, whatever is set.
  bool ring_only =
      c.kind == Kind::ReduceScatter || c.kind == Kind::AllGather;
  hoop_algo_t counted = ring_only ? HOOP_ALGO_RING : c.algo;
  check_counters(log, comm, rank, nranks, what, coll_of(c.kind), counted,
                 expected_traffic(c, nranks, rank), esz, calls, wall);
}

std::vector<Case> all_cases(int n) {
  std::vector<Case> cases;
  // Divisible by N (and by 2N, for the trees' halves), not divisible, and
  // several 256 KiB slices long; 1 leaves tree 0 and most chunks empty.
  const size_t counts[] = {0,
                           1,
                           7,
                           (size_t)1000 * n,
                           (size_t)1000 * n + 3,
                           (size_t)200000 * n + 1};
  std::vector<int> roots = {0, n - 1, n / 2};
  const hoop_dtype_t dtypes[] = {HOOP_F32, HOOP_U8, HOOP_F64};
  int di = 0;
  for (size_t count : counts) {
    hoop_dtype_t t = dtypes[di++ % 3];
    for (hoop_algo_t a : {HOOP_ALGO_RING, HOOP_ALGO_TREE, HOOP_ALGO_PS})
      cases.push_back({Kind::AllReduce, a, t, count, 0});
    // Set to TREE, to show the setting does not reach them.
    cases.push_back({Kind::ReduceScatter, HOOP_ALGO_TREE, t, count, 0});
    cases.push_back({Kind::AllGather, HOOP_ALGO_TREE, t, count, 0});
    for (int root : roots) {
      for (hoop_algo_t a : {HOOP_ALGO_RING, HOOP_ALGO_TREE}) {
        cases.push_back({Kind::Broadcast, a, t, count, root});
        cases.push_back({Kind::Reduce, a, t, count, root});
      }
    }
  }
  return cases;
}

std::string ranks_name(const ::testing::TestParamInfo<int> &info) {
  return std::to_string(info.param) + "ranks";
}

class Stats : public ::testing::TestWithParam<int> {};

TEST_P(Stats, ExactPayloadBytesPerCollectiveAlgorithmAndPeer) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    for (const Case &c : all_cases(nranks)) {
      run_case(log, comm, rank, nranks, c, 1);
      if (!log.ok())
        return;
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Every counter zero; peers_connected is state, not a counter, and a
// reset leaves it.
bool all_zero(const hoop_stats_t &st) {
  hoop_stats_t zero = HOOP_STATS_INIT, counters = st;
  counters.peers_connected = 0;
  return memcmp(&counters, &zero, sizeof st) == 0;
}

TEST_P(Stats, CallsAccumulateAndResetClearsEverything) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    // Three calls count three times, bytes included.
    run_case(log, comm, rank, nranks,
             {Kind::AllReduce, HOOP_ALGO_RING, HOOP_F32,
              (size_t)1000 * nranks + 1, 0},
             3);
    // A barrier is counted as one barrier call (under whichever algorithm
    // it uses) and leaves the all-reduce's counts alone.
    hoop_stats_t before = HOOP_STATS_INIT, after = HOOP_STATS_INIT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &before));
    RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
    RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &after));
    uint64_t barrier_calls = 0;
    for (int a = 0; a < HOOP_ALGO_COUNT; a++)
      barrier_calls += after.by_coll[HOOP_COLL_BARRIER][a].calls -
                       before.by_coll[HOOP_COLL_BARRIER][a].calls;
    RANK_EXPECT(log, barrier_calls == 1, "barrier counted %llu calls",
                (unsigned long long)barrier_calls);
    const hoop_coll_stats_t &ar0 =
        before.by_coll[HOOP_COLL_ALLREDUCE][HOOP_ALGO_RING];
    const hoop_coll_stats_t &ar1 =
        after.by_coll[HOOP_COLL_ALLREDUCE][HOOP_ALGO_RING];
    RANK_EXPECT(log, memcmp(&ar0, &ar1, sizeof ar0) == 0,
                "barrier changed the all-reduce counters");

    RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
    RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &after));
    RANK_EXPECT(log, all_zero(after), "reset left counters behind");
    RANK_EXPECT(log, after.peers_connected == before.peers_connected &&
                         (nranks == 1 || after.peers_connected > 0),
                "reset changed the peers connected: %llu, before %llu",
                (unsigned long long)after.peers_connected,
                (unsigned long long)before.peers_connected);
    for (int p = 0; p < nranks; p++) {
      if (p == rank)
        continue;
      uint64_t s = ~0ULL, rcv = ~0ULL;
      RANK_EXPECT_OK(log, comm, hoop_comm_get_peer_bytes(comm, p, &s, &rcv));
      RANK_EXPECT(log, s == 0 && rcv == 0,
                  "reset left %llu/%llu bytes for peer %d",
                  (unsigned long long)s, (unsigned long long)rcv, p);
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// The bytes of a send are its payload, counted for that peer on both ends.
TEST_P(Stats, PointToPointAndAllToAllBytesPerPeer) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    // A group in which rank r sends 1000 + r doubles to r+1.  (How many
    // calls a group counts as is not specified, so only bytes are checked.)
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    std::vector<double> out(1000 + rank), in(1000 + prev);
    RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
    RANK_EXPECT_OK(log, comm, hoop_group_start());
    RANK_EXPECT_OK(log, comm, hoop_send(comm, out.data(), out.size(),
                                        HOOP_F64, next, nullptr));
    RANK_EXPECT_OK(log, comm, hoop_recv(comm, in.data(), in.size(), HOOP_F64,
                                        prev, nullptr));
    hoop_result_t res = hoop_group_end();
    RANK_EXPECT(log, res == HOOP_SUCCESS, "group_end: %s: %s",
                hoop_result_name(res), hoop_comm_last_error(comm));
    Traffic ring(nranks);
    ring.to(next, out.size());
    ring.from(prev, in.size());
    hoop_stats_t st = HOOP_STATS_INIT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
    check_bytes(log, comm, rank, nranks, "group ring exchange", st, ring, 8,
                1);

    // One blocking send from rank 0 to the last rank: one send/recv call on
    // each of the two, nothing on the others.
    RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
    int last = nranks - 1;
    std::vector<int16_t> msg(777);
    int64_t t0 = monotonic_ns();
    if (rank == 0)
      RANK_EXPECT_OK(log, comm, hoop_send(comm, msg.data(), msg.size(),
                                          HOOP_F16, last, nullptr));
    else if (rank == last)
      RANK_EXPECT_OK(log, comm, hoop_recv(comm, msg.data(), msg.size(),
                                          HOOP_F16, 0, nullptr));
    int64_t wall = monotonic_ns() - t0;
    Traffic one(nranks);
    if (rank == 0)
      one.to(last, msg.size());
    if (rank == last)
      one.from(0, msg.size());
    if (rank == 0 || rank == last) {
      check_counters(log, comm, rank, nranks, "blocking send",
                     HOOP_COLL_SENDRECV, HOOP_ALGO_P2P, one, 2, 1, wall);
    } else {
      RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
      check_bytes(log, comm, rank, nranks, "blocking send elsewhere", st, one,
                  2, 1);
    }

    // All-to-all: `count` elements to and from every other rank; the block
    // a rank keeps for itself crosses no link.
    for (size_t count : {(size_t)0, (size_t)1009}) {
      std::vector<float> a2a_out(count * nranks), a2a_in(count * nranks);
      RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
      t0 = monotonic_ns();
      RANK_EXPECT_OK(log, comm, hoop_alltoall(comm, a2a_out.data(),
                                              a2a_in.data(), count, HOOP_F32,
                                              nullptr));
      wall = monotonic_ns() - t0;
      Traffic all(nranks);
      for (int p = 0; p < nranks; p++) {
        if (p != rank) {
          all.to(p, count);
          all.from(p, count);
        }
      }
      check_counters(log, comm, rank, nranks,
                     "alltoall count " + std::to_string(count),
                     HOOP_COLL_ALLTOALL, HOOP_ALGO_P2P, all, 4, 1, wall);
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Refused, and the communicator's last error says why: a caller that asks
// hoop_comm_last_error(comm), not hoop_last_error(), learns it too.
TEST_P(Stats, BadArgumentsAreRejected) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm, int,
                                         int nranks) {
    auto refused = [&](hoop_result_t res, const char *what,
                       const char *says) {
      const char *why = hoop_comm_last_error(comm);
      RANK_EXPECT(log,
                  res == HOOP_ERR_INVALID_ARGUMENT &&
                      strstr(why, says) != nullptr,
                  "%s: %s, the communicator's last error \"%s\"", what,
                  hoop_result_name(res), why);
    };
    uint64_t s, rcv;
    for (int peer : {-1, nranks})
      refused(hoop_comm_get_peer_bytes(comm, peer, &s, &rcv), "peer",
              "hoop_comm_get_peer_bytes");
    refused(hoop_comm_get_peer_bytes(comm, 0, nullptr, &rcv), "NULL sent",
            "hoop_comm_get_peer_bytes");
    refused(hoop_comm_get_stats(comm, nullptr), "NULL stats",
            "hoop_comm_get_stats");
    hoop_stats_t unset;
    memset(&unset, 0, sizeof unset);
    refused(hoop_comm_get_stats(comm, &unset), "stats without HOOP_STATS_INIT",
            "HOOP_STATS_INIT");
    hoop_model_t model;
    memset(&model, 0, sizeof model);
    refused(hoop_comm_get_model(comm, &model), "model without HOOP_MODEL_INIT",
            "HOOP_MODEL_INIT");
    hoop_rank_info_t info;
    memset(&info, 0, sizeof info);
    refused(hoop_comm_rank_info(comm, 0, &info),
            "rank info without HOOP_RANK_INFO_INIT", "HOOP_RANK_INFO_INIT");
    refused(hoop_comm_get_algo(comm, nullptr), "NULL algo",
            "hoop_comm_get_algo");
    refused(hoop_comm_transport(comm, 0, 0, nullptr), "NULL name",
            "hoop_comm_transport");
    double secs;
    refused(hoop_comm_predict(comm, HOOP_COLL_ALLREDUCE, HOOP_ALGO_RING, 4096,
                              nullptr),
            "NULL seconds", "hoop_comm_predict");
    refused(hoop_comm_predict(comm, HOOP_COLL_ALLREDUCE, (hoop_algo_t)99, 4096,
                              &secs),
            "algo 99", "hoop_comm_predict");
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Stats, ::testing::Values(2, 3, 4, 5, 8),
                         ranks_name);

// One rank runs no schedule: every collective is a copy or nothing, and no
// byte goes to a peer.  Each call still counts once, with its time, under
// HOOP_ALGO_AUTO (no algorithm ran, whatever the setting), and all-to-all
// under p2p as on more ranks.
TEST(StatsOneRank, EachCallCountsOnceUnderAutoWithoutBytes) {
  RunResult r = run_ranks(1, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    const size_t count = 1000;
    const Traffic none(nranks);
    for (hoop_algo_t setting : {HOOP_ALGO_AUTO, HOOP_ALGO_RING,
                                HOOP_ALGO_TREE, HOOP_ALGO_PS,
                                HOOP_ALGO_HIER}) {
      RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, setting));
      for (Kind k : {Kind::AllReduce, Kind::ReduceScatter, Kind::AllGather,
                     Kind::Broadcast, Kind::Reduce}) {
        std::vector<float> in(count), out(count, -1.0f);
        std::iota(in.begin(), in.end(), 1.0f);
        std::vector<char> send(count * sizeof(float)),
            recv(count * sizeof(float));
        memcpy(send.data(), in.data(), send.size());
        memcpy(recv.data(), out.data(), recv.size());
        std::string what = std::string("1 rank, ") + kind_name(k) +
                           " set to " + algo_label(setting);
        RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
        int64_t t0 = monotonic_ns();
        RANK_EXPECT_OK(log, comm,
                       call_once(comm, {k, setting, HOOP_F32, count, 0}, send,
                                 recv));
        int64_t wall = monotonic_ns() - t0;
        memcpy(out.data(), recv.data(), recv.size());
        RANK_EXPECT(log, out == in, "%s: the result is not the input",
                    what.c_str());
        check_counters(log, comm, rank, nranks, what, coll_of(k),
                       HOOP_ALGO_AUTO, none, sizeof(float), 1, wall);
      }
    }
    RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
    int64_t t0 = monotonic_ns();
    RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
    check_counters(log, comm, rank, nranks, "1 rank, barrier",
                   HOOP_COLL_BARRIER, HOOP_ALGO_AUTO, none, 1, 1,
                   monotonic_ns() - t0);
    std::vector<float> a2a_in(count, 2.0f), a2a_out(count);
    RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
    t0 = monotonic_ns();
    RANK_EXPECT_OK(log, comm, hoop_alltoall(comm, a2a_in.data(),
                                            a2a_out.data(), count, HOOP_F32,
                                            nullptr));
    check_counters(log, comm, rank, nranks, "1 rank, alltoall",
                   HOOP_COLL_ALLTOALL, HOOP_ALGO_P2P, none, sizeof(float), 1,
                   monotonic_ns() - t0);
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// The algorithm under which the one call of `coll` since the last reset
// was counted; HOOP_ALGO_COUNT when it was not counted exactly once.
hoop_algo_t counted_under(RankLog &log, hoop_comm_t comm, hoop_coll_t coll) {
  hoop_stats_t st = HOOP_STATS_INIT;
  RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
  hoop_algo_t found = HOOP_ALGO_COUNT;
  uint64_t calls = 0;
  for (int a = 0; a < HOOP_ALGO_COUNT; a++) {
    calls += st.by_coll[coll][a].calls;
    if (st.by_coll[coll][a].calls == 1)
      found = (hoop_algo_t)a;
  }
  return calls == 1 ? found : HOOP_ALGO_COUNT;
}

// The hierarchical all-reduce, reduce-scatter and all-gather need 2 hosts
// or more with as many ranks on each; on one host they are the ring
// (hoop.h), and run, count and are priced as the ring, with the results
// right at every rank.
TEST(StatsHier, OnOneHostHierRunsCountsAndIsPricedAsTheRing) {
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_HIER));
    hoop_algo_t got = HOOP_ALGO_AUTO;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_algo(comm, &got));
    RANK_EXPECT(log, got == HOOP_ALGO_HIER, "the setting reads back as %s",
                hoop_algo_name(got));
    const size_t count = 1001;
    std::vector<float> x(count);
    for (size_t i = 0; i < count; i++)
      x[i] = float(rank * 1000 + (int)i);
    RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
    RANK_EXPECT_OK(log, comm,
                   hoop_allreduce(comm, x.data(), x.data(), count, HOOP_F32,
                                  HOOP_SUM, nullptr));
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++)
      wrong += x[i] != float(3000 + 3 * (int)i);  // ranks 0, 1, 2
    RANK_EXPECT(log, wrong == 0, "%zu of %zu sums wrong", wrong, count);
    hoop_algo_t ran = counted_under(log, comm, HOOP_COLL_ALLREDUCE);
    RANK_EXPECT(log, ran == HOOP_ALGO_RING, "counted under %s",
                hoop_algo_name(ran));
    double hier = 0, ring = 0;
    RANK_EXPECT_OK(log, comm,
                   hoop_comm_predict(comm, HOOP_COLL_ALLREDUCE,
                                     HOOP_ALGO_HIER, 1 << 20, &hier));
    RANK_EXPECT_OK(log, comm,
                   hoop_comm_predict(comm, HOOP_COLL_ALLREDUCE,
                                     HOOP_ALGO_RING, 1 << 20, &ring));
    RANK_EXPECT(log, hier == ring, "hier priced %g s, the ring %g s", hier,
                ring);
    // Reduce-scatter and all-gather likewise, block `rank` of the sum and
    // every rank's block.
    std::vector<float> all(count * nranks), block(count);
    for (size_t i = 0; i < all.size(); i++)
      all[i] = float(rank * 1000 + (int)i);
    RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
    RANK_EXPECT_OK(log, comm,
                   hoop_reduce_scatter(comm, all.data(), block.data(), count,
                                       HOOP_F32, HOOP_SUM, nullptr));
    wrong = 0;
    for (size_t i = 0; i < count; i++)
      wrong += block[i] != float(3000 + 3 * (rank * (int)count + (int)i));
    RANK_EXPECT(log, wrong == 0, "reduce-scatter: %zu of %zu sums wrong",
                wrong, count);
    for (size_t i = 0; i < count; i++)
      block[i] = float(rank * 1000 + (int)i);
    RANK_EXPECT_OK(log, comm, hoop_allgather(comm, block.data(), all.data(),
                                             count, HOOP_F32, nullptr));
    wrong = 0;
    for (size_t i = 0; i < all.size(); i++)
      wrong += all[i] != float((int)(i / count) * 1000 + (int)(i % count));
    RANK_EXPECT(log, wrong == 0, "all-gather: %zu of %zu elements wrong",
                wrong, all.size());
    for (hoop_coll_t coll : {HOOP_COLL_REDUCE_SCATTER, HOOP_COLL_ALLGATHER}) {
      ran = counted_under(log, comm, coll);
      RANK_EXPECT(log, ran == HOOP_ALGO_RING, "%s counted under %s",
                  coll == HOOP_COLL_ALLGATHER ? "all-gather"
                                              : "reduce-scatter",
                  hoop_algo_name(ran));
      RANK_EXPECT_OK(log, comm, hoop_comm_predict(comm, coll, HOOP_ALGO_HIER,
                                                  1 << 20, &hier));
      RANK_EXPECT_OK(log, comm, hoop_comm_predict(comm, coll, HOOP_ALGO_RING,
                                                  1 << 20, &ring));
      RANK_EXPECT(log, hier == ring, "hier priced %g s, the ring %g s", hier,
                  ring);
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// PS is an all-reduce schedule; broadcast and reduce have none of its kind,
// so under it they run what AUTO runs (hoop.h): the same chain or tree,
// counted under it (the chain as ring), never under ps, with the right
// result, and hoop_comm_predict prices that schedule for PS too.  On 3
// ranks a one-element call is bound by hops, the tree's one against the
// chain's two, so there the tree runs, as a forced chain would not.
TEST(StatsRooted, UnderPsBroadcastAndReduceRunAndCountWhatAutoRuns) {
  for (int n : {2, 3}) {
    RunResult r = run_ranks(n, [](RankLog &log, hoop_comm_t comm, int rank,
                                  int nranks) {
      bool tree_ran = false;
      for (bool bcast : {true, false}) {
        hoop_coll_t coll = bcast ? HOOP_COLL_BROADCAST : HOOP_COLL_REDUCE;
        for (size_t count : {(size_t)1, (size_t)1000 * nranks + 3,
                             (size_t)200000 * nranks + 1}) {
          for (int root : {0, nranks - 1}) {
            std::string what = std::string(bcast ? "broadcast" : "reduce") +
                               " under ps, count " + std::to_string(count) +
                               " root " + std::to_string(root);
            std::vector<float> send(count), recv(count);
            for (size_t i = 0; i < count; i++)
              send[i] = (float)(rank * 1000 + (int)(i % 1000));
            auto call = [&] {
              return bcast ? hoop_broadcast(comm, send.data(), recv.data(),
                                            count, HOOP_F32, root, nullptr)
                           : hoop_reduce(comm, send.data(), recv.data(),
                                         count, HOOP_F32, HOOP_SUM, root,
                                         nullptr);
            };
            RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_AUTO));
            RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
            RANK_EXPECT_OK(log, comm, call());
            hoop_algo_t ran = counted_under(log, comm, coll);
            RANK_EXPECT(log, ran == HOOP_ALGO_RING || ran == HOOP_ALGO_TREE,
                        "%s: auto's call was counted under %s", what.c_str(),
                        ran == HOOP_ALGO_COUNT ? "no one algorithm"
                                               : hoop_algo_name(ran));
            if (!log.ok())
              return;
            tree_ran |= ran == HOOP_ALGO_TREE;

            RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_PS));
            RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
            std::fill(recv.begin(), recv.end(), -1.0f);
            int64_t t0 = monotonic_ns();
            RANK_EXPECT_OK(log, comm, call());
            int64_t wall = monotonic_ns() - t0;
            check_counters(log, comm, rank, nranks, what, coll, ran,
                           ran == HOOP_ALGO_TREE
                               ? rooted_tree(nranks, rank, root, count, bcast)
                               : chain(nranks, rank, root, count, bcast),
                           sizeof(float), 1, wall);
            size_t wrong = 0;
            if (bcast || rank == root) {
              for (size_t i = 0; i < count; i++) {
                int base = (int)(i % 1000);
                int want = bcast ? root * 1000 + base
                                 : 1000 * nranks * (nranks - 1) / 2 +
                                       nranks * base;
                wrong += recv[i] != (float)want;
              }
            }
            RANK_EXPECT(log, wrong == 0, "%s: %zu elements wrong",
                        what.c_str(), wrong);

            double ps_s = -1, ran_s = -2;
            RANK_EXPECT_OK(log, comm,
                           hoop_comm_predict(comm, coll, HOOP_ALGO_PS,
                                             count * sizeof(float), &ps_s));
            RANK_EXPECT_OK(log, comm,
                           hoop_comm_predict(comm, coll, ran,
                                             count * sizeof(float), &ran_s));
            RANK_EXPECT(log, ps_s == ran_s,
                        "%s: predicted %g s for ps, %g s for the %s that ran",
                        what.c_str(), ps_s, ran_s, hoop_algo_name(ran));
            hoop_algo_t setting = HOOP_ALGO_AUTO;
            RANK_EXPECT_OK(log, comm, hoop_comm_get_algo(comm, &setting));
            RANK_EXPECT(log, setting == HOOP_ALGO_PS,
                        "%s: the setting reads back as %s", what.c_str(),
                        hoop_algo_name(setting));
          }
        }
      }
      if (nranks == 3)
        RANK_EXPECT(log, tree_ran, "no call on 3 ranks ran the tree");
    });
    EXPECT_TRUE(r.all_ok()) << n << " ranks: " << describe(r);
  }
}

// A rank that joins late shows up as wait in its peers' counters, not in
// its own, which counts none.  With three ranks every rank is a peer of
// every other: the parameter server's root (rank 0) of the others, and
// the ring neighbours that check the call of each other.
// The structs hoop fills carry their size and version, so that a program
// built against an older, smaller one keeps working.  `Get` fills one,
// whose fields start at `first`.  Checks that a struct whose size stops at
// `old_size` gets exactly that prefix, equal to what a full-size call returns, with the guard bytes
// behind it untouched, and that sizes and versions no INIT macro makes are
// refused, naming the macro, without a byte written.
template <typename T, typename Get>
void check_versioned(RankLog &log, hoop_comm_t comm, const char *what,
                     const char *init, T init_value, size_t first,
                     size_t old_size, Get get) {
  const size_t head = offsetof(T, version) + sizeof(unsigned int);
  T full = init_value;
  RANK_EXPECT_OK(log, comm, get(&full));

  const unsigned char guard = 0xa5;
  std::vector<unsigned char> mem(sizeof(T) + 64, guard);
  T old = init_value;
  old.size = old_size;
  memcpy(mem.data(), &old, head);
  RANK_EXPECT_OK(log, comm, get((T *)(void *)mem.data()));
  memcpy(&old, mem.data(), sizeof old);
  RANK_EXPECT(log, old.size == old_size && old.version == init_value.version,
              "%s: size %zu version %u after the call", what, old.size,
              old.version);
  RANK_EXPECT(log,
              memcmp(mem.data() + first, (const char *)&full + first,
                     old_size - first) == 0,
              "%s: the %zu-byte prefix differs from a full call's", what,
              old_size);
  size_t written = 0;
  for (size_t i = old_size; i < mem.size(); i++)
    written += mem[i] != guard;
  RANK_EXPECT(log, written == 0, "%s: %zu byte(s) written past size %zu",
              what, written, old_size);

  struct Bad {
    size_t size;
    unsigned version;
  };
  for (Bad bad : {Bad{0, init_value.version}, Bad{head, init_value.version},
                  Bad{sizeof(T) + 1, init_value.version},
                  Bad{(size_t)0xa5a5a5a5a5a5a5a5ULL, init_value.version},
                  Bad{sizeof(T), 0}, Bad{sizeof(T), init_value.version + 1}}) {
    std::vector<unsigned char> bytes(sizeof(T) + 64, guard);
    T t = init_value;
    t.size = bad.size;
    t.version = bad.version;
    memcpy(bytes.data(), &t, head);
    hoop_result_t res = get((T *)(void *)bytes.data());
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT,
                "%s: size %zu version %u gave %s", what, bad.size,
                bad.version, hoop_result_name(res));
    RANK_EXPECT(log, strstr(hoop_last_error(), init) != nullptr,
                "%s: message does not name %s: %s", what, init,
                hoop_last_error());
    size_t changed = 0;
    for (size_t i = head; i < bytes.size(); i++)
      changed += bytes[i] != guard;
    RANK_EXPECT(log, changed == 0, "%s: refused, yet %zu byte(s) written",
                what, changed);
  }
}

TEST(Versioned, OldSizesGetTheirPrefixAndBadSizesAreRefused) {
  RunResult r = run_ranks(2, [](RankLog &log, hoop_comm_t comm, int rank,
                                int) {
    float x = 1;
    RANK_EXPECT_OK(log, comm,
                   hoop_allreduce(comm, &x, &x, 1, HOOP_F32, HOOP_SUM,
                                  nullptr));
    // As if built before the last collective row of by_coll existed.
    check_versioned<hoop_stats_t>(
        log, comm, "hoop_stats_t", "HOOP_STATS_INIT", HOOP_STATS_INIT,
        offsetof(hoop_stats_t, bytes_sent),
        offsetof(hoop_stats_t, by_coll[HOOP_COLL_COUNT - 1]),
        [comm](hoop_stats_t *st) { return hoop_comm_get_stats(comm, st); });
    check_versioned<hoop_rank_info_t>(
        log, comm, "hoop_rank_info_t", "HOOP_RANK_INFO_INIT",
        HOOP_RANK_INFO_INIT, offsetof(hoop_rank_info_t, host),
        offsetof(hoop_rank_info_t, hostname),
        [comm, rank](hoop_rank_info_t *info) {
          return hoop_comm_rank_info(comm, 1 - rank, info);
        });
    check_versioned<hoop_model_t>(
        log, comm, "hoop_model_t", "HOOP_MODEL_INIT", HOOP_MODEL_INIT,
        offsetof(hoop_model_t, alpha_s), offsetof(hoop_model_t, single_host),
        [comm](hoop_model_t *m) { return hoop_comm_get_model(comm, m); });
    // The counters were read, not moved: a full read still sees the call.
    hoop_stats_t st = HOOP_STATS_INIT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
    uint64_t calls = 0;
    for (const hoop_coll_stats_t &s : st.by_coll[HOOP_COLL_ALLREDUCE])
      calls += s.calls;
    RANK_EXPECT(log, calls == 1, "all-reduce calls %llu, not 1",
                (unsigned long long)calls);
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// hoop_stats_t as versions 1 and 2 laid it out, with 6 algorithm columns
// (before HOOP_ALGO_HIER): a program built then.
struct StatsV2 {
  size_t size;
  unsigned int version;
  uint64_t bytes_sent;
  uint64_t bytes_received;
  hoop_coll_stats_t by_coll[HOOP_COLL_COUNT][6];
  uint64_t bytes_sent_off_host;
  uint64_t bytes_received_off_host;
  uint64_t peers_connected;
};

// A version-2 caller gets its own layout: each column as a full read has
// it, and the fields after by_coll where version 2 had them, not the
// bytes of version 3's wider table.
TEST(Versioned, VersionTwoGetsItsOwnLayout) {
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int, int) {
    std::vector<float> x(5000, 1.0f);
    for (hoop_algo_t a : {HOOP_ALGO_RING, HOOP_ALGO_TREE, HOOP_ALGO_PS}) {
      RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, a));
      RANK_EXPECT_OK(log, comm,
                     hoop_allreduce(comm, x.data(), x.data(), x.size(),
                                    HOOP_F32, HOOP_SUM, nullptr));
    }
    hoop_stats_t full = HOOP_STATS_INIT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &full));
    StatsV2 old;
    memset(&old, 0xa5, sizeof old);
    old.size = sizeof old;
    old.version = 2;
    RANK_EXPECT_OK(log, comm,
                   hoop_comm_get_stats(comm, (hoop_stats_t *)(void *)&old));
    RANK_EXPECT(log, old.size == sizeof old && old.version == 2,
                "size %zu version %u after the call", old.size, old.version);
    size_t differ = 0;
    for (int c = 0; c < HOOP_COLL_COUNT; c++)
      for (int a = 0; a < 6; a++)
        differ += memcmp(&old.by_coll[c][a], &full.by_coll[c][a],
                         sizeof old.by_coll[c][a]) != 0;
    RANK_EXPECT(log, differ == 0, "%zu by_coll entries differ", differ);
    RANK_EXPECT(log,
                old.bytes_sent == full.bytes_sent &&
                    old.bytes_sent_off_host == full.bytes_sent_off_host &&
                    old.bytes_received_off_host ==
                        full.bytes_received_off_host &&
                    old.peers_connected == full.peers_connected &&
                    old.peers_connected == 2,
                "fields after by_coll: peers %llu (full %llu)",
                (unsigned long long)old.peers_connected,
                (unsigned long long)full.peers_connected);
    // Version 2 never had more: a larger size is refused, not overrun.
    std::vector<unsigned char> big(sizeof(hoop_stats_t), 0);
    size_t big_size = sizeof old + 8;
    unsigned int two = 2;
    memcpy(big.data(), &big_size, sizeof big_size);
    memcpy(big.data() + offsetof(hoop_stats_t, version), &two, sizeof two);
    hoop_result_t res =
        hoop_comm_get_stats(comm, (hoop_stats_t *)(void *)big.data());
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT,
                "version 2 with size %zu gave %s", big_size,
                hoop_result_name(res));
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(StatsWait, CountsTheTimeUntilLatePeersJoin) {
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_PS));
    std::vector<float> v(1000, 1.0f);
    RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
    RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
    const int late_ms = 200;
    if (rank == 2)
      usleep(late_ms * 1000);
    RANK_EXPECT_OK(log, comm, hoop_allreduce(comm, v.data(), v.data(),
                                             v.size(), HOOP_F32, HOOP_SUM,
                                             nullptr));
    hoop_stats_t st = HOOP_STATS_INIT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_stats(comm, &st));
    const hoop_coll_stats_t &cs =
        st.by_coll[HOOP_COLL_ALLREDUCE][HOOP_ALGO_PS];
    double wait_ms = (double)cs.wait_ns * 1e-6;
    double time_ms = (double)cs.time_ns * 1e-6;
    if (rank != 2)
      RANK_EXPECT(log, wait_ms >= 0.8 * late_ms && wait_ms <= time_ms,
                  "rank %d waited %.1f ms of %.1f for rank 2, %d ms late",
                  rank, wait_ms, time_ms, late_ms);
    else
      // Every peer's header was in before it looked: its own sends are
      // work, not waiting, so nothing at all counts.
      RANK_EXPECT(log, cs.wait_ns == 0,
                  "the late rank counted %llu ns of wait (of %.1f ms) "
                  "though its peers were there",
                  (unsigned long long)cs.wait_ns, time_ms);
    RANK_EXPECT(log, v[0] == (float)nranks, "sum %g", (double)v[0]);
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// ---- Cost model ---------------------------------------------------------

double predict(RankLog &log, hoop_comm_t comm, hoop_algo_t algo,
               size_t bytes) {
  double secs = -1;
  RANK_EXPECT_OK(log, comm, hoop_comm_predict(comm, HOOP_COLL_ALLREDUCE, algo,
                                              bytes, &secs));
  RANK_EXPECT(log, std::isfinite(secs) && secs > 0,
              "%s at %zu bytes: %g s", algo_label(algo), bytes, secs);
  return secs;
}

class Predict : public ::testing::TestWithParam<int> {};

TEST_P(Predict, AllReduceModelRanksAlgorithmsSensibly) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm, int,
                                         int nranks) {
    hoop_model_t model = HOOP_MODEL_INIT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_model(comm, &model));
    RANK_EXPECT(log, model.alpha_s > 0 && model.link_beta_s > 0 &&
                         model.host_beta_s > 0 && model.host_cores >= 1,
                "alpha %g s, link beta %g s/B, host beta %g s/B, %d cores",
                model.alpha_s, model.link_beta_s, model.host_beta_s,
                model.host_cores);
    // run_ranks forks every rank on this machine.
    RANK_EXPECT(log, model.single_host == 1, "single_host %d",
                model.single_host);
    // More bytes never take less time.
    for (hoop_algo_t a : {HOOP_ALGO_RING, HOOP_ALGO_TREE, HOOP_ALGO_PS}) {
      double prev = 0;
      for (size_t bytes = 1024; bytes <= ((size_t)1 << 30); bytes *= 4) {
        double s = predict(log, comm, a, bytes);
        RANK_EXPECT(log, s >= prev, "%s: %g s at %zu bytes < %g s before",
                    algo_label(a), s, bytes, prev);
        prev = s;
      }
    }
    // AUTO is priced as the algorithm it picks: one of the three, or on 2
    // ranks up to HOOP_ONESHOT_BYTES (256 KiB) the one-shot schedule, which
    // hands over once and so is priced below them.
    for (size_t bytes : {(size_t)4096, (size_t)1 << 20, (size_t)256 << 20}) {
      double a = predict(log, comm, HOOP_ALGO_AUTO, bytes);
      double ring = predict(log, comm, HOOP_ALGO_RING, bytes);
      double tree = predict(log, comm, HOOP_ALGO_TREE, bytes);
      double ps = predict(log, comm, HOOP_ALGO_PS, bytes);
      bool one_shot = nranks == 2 && bytes <= ((size_t)256 << 10);
      RANK_EXPECT(log,
                  one_shot ? a < ring && a < tree && a < ps
                           : a == ring || a == tree || a == ps,
                  "%zu bytes: auto %g s, ring %g, tree %g, ps %g", bytes, a,
                  ring, tree, ps);
    }
    if (nranks == 8) {
      // Small messages: the tree's 2 log N hops beat the ring's 2(N-1).
      double ring = predict(log, comm, HOOP_ALGO_RING, 4096);
      double tree = predict(log, comm, HOOP_ALGO_TREE, 4096);
      RANK_EXPECT(log, tree < ring, "4 KiB: tree %g s, ring %g s", tree,
                  ring);
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Large messages, when every rank has a core of its own.  (With more ranks
// than cores the model charges every all-reduce for all ranks' copies
// shared among the cores, which ring, tree and PS make alike, so their
// bandwidth terms come close or tie; test_shm checks what separates the
// server from the others over shm.)
TEST_P(Predict, LargeAllReduceOrderingWhenEveryRankHasACore) {
  int n = GetParam();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < n)
    GTEST_SKIP() << n << " ranks on " << cores
                 << " cores: the model prices the shared cores, not links";
  RunResult r = run_ranks(n, [](RankLog &log, hoop_comm_t comm, int,
                                int nranks) {
    hoop_model_t model = HOOP_MODEL_INIT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_model(comm, &model));
    RANK_EXPECT(log, model.host_cores >= nranks,
                "model sees %d cores for %d ranks", model.host_cores, nranks);
    if (nranks == 8) {
      // The tree's busiest rank moves 4K bytes, the ring's 4(N-1)/N K.
      double ring = predict(log, comm, HOOP_ALGO_RING, (size_t)256 << 20);
      double tree = predict(log, comm, HOOP_ALGO_TREE, (size_t)256 << 20);
      RANK_EXPECT(log, ring < tree, "256 MiB: ring %g s, tree %g s", ring,
                  tree);
    }
    if (nranks >= 3) {
      // The server moves 2(N-1) buffers, a ring rank 4(N-1)/N.
      double ring = predict(log, comm, HOOP_ALGO_RING, (size_t)64 << 20);
      double ps = predict(log, comm, HOOP_ALGO_PS, (size_t)64 << 20);
      RANK_EXPECT(log, ps > ring, "64 MiB: ps %g s, ring %g s", ps, ring);
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Predict, ::testing::Values(2, 3, 5, 8),
                         ranks_name);

} // namespace
