// Point-to-point: blocking send/recv, groups (ring exchange, all pairs with
// sends to self, zero-byte messages, several messages to one peer), and
// all-to-all, across real processes over loopback TCP.  Every message's
// contents are generated from (seed, sender, position) so the receiver
// checks them against reference.h without trusting the sender; buffers
// carry canary guards.  Bad arguments must return clear errors, and
// sends and receives that disagree in size must fail on both ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "reference.h"

using namespace hooptest;

namespace {

// A message is `count` elements of the sender's input stream starting at
// global index `first`; distinct `first`s make distinct messages.
struct Message {
  hoop_dtype_t dtype;
  size_t count;
  size_t first;
  uint64_t seed;
};

// An outgoing message: the buffer filled, plus a copy to show that sending
// did not change it.
struct Outgoing {
  Outgoing(const Message &m, int sender)
      : buf(m.count, hoop_dtype_size(m.dtype)) {
    fill_input(buf.data(), m.dtype, HOOP_SUM, m.seed, sender, m.first,
               m.count);
    size_t bytes = m.count * hoop_dtype_size(m.dtype);
    copy.assign(buf.data(), buf.data() + bytes);
  }
  bool unchanged() {
    // An empty vector's data() may be NULL, which memcmp must not get.
    return buf.guards_intact() &&
           (copy.empty() ||
            memcmp(buf.data(), copy.data(), copy.size()) == 0);
  }
  Guarded buf;
  std::vector<char> copy;
};

// Checks a received message against the sender's input.
void check_received(RankLog &log, Guarded &buf, const Message &m, int sender,
                    const std::string &what) {
  size_t bad = 0;
  // In gather mode count_wrong compares with `sender`'s input alone; the
  // rank count (1 here) only matters for reductions.
  size_t wrong = count_wrong(buf.data(), m.dtype, HOOP_SUM, m.seed, 1,
                             m.first, m.count, 1, sender, &bad);
  if (wrong > 0)
    log.fail("%s: %zu wrong elements (first at %zu)", what.c_str(), wrong,
             bad);
  if (!buf.guards_intact())
    log.fail("%s: wrote outside the receive buffer", what.c_str());
}

std::string ranks_name(const ::testing::TestParamInfo<int> &info) {
  return std::to_string(info.param) + "ranks";
}

// ---- Blocking send/recv -------------------------------------------------

// Every ordered pair of ranks in turn, so each rank talks to each other
// rank in both directions; other ranks wait their turn.  Outside a group
// each call blocks until done, and every rank walks the same pair order,
// so the calls cannot deadlock.
class Blocking : public ::testing::TestWithParam<int> {};

TEST_P(Blocking, EveryPairEverySizeBothDirections) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    const size_t counts[] = {0, 1, (1u << 20) + 3};
    uint64_t seed = 1;
    for (hoop_dtype_t t : {HOOP_U8, HOOP_F16, HOOP_F32, HOOP_I64}) {
      for (size_t count : counts) {
        for (int src = 0; src < nranks; src++) {
          for (int dst = 0; dst < nranks; dst++) {
            if (src == dst)
              continue;
            Message m{t, count, 0, seed++};
            std::string what = std::string("send ") + hoop_dtype_name(t) +
                               " count " + std::to_string(count) + " " +
                               std::to_string(src) + "->" +
                               std::to_string(dst);
            if (rank == src) {
              Outgoing out(m, rank);
              RANK_EXPECT_OK(log, comm,
                             hoop_send(comm, out.buf.data(), count, t, dst,
                                       nullptr));
              RANK_EXPECT(log, out.unchanged(), "%s changed its buffer",
                          what.c_str());
            } else if (rank == dst) {
              Guarded in(count, hoop_dtype_size(t));
              RANK_EXPECT_OK(log, comm,
                             hoop_recv(comm, in.data(), count, t, src,
                                       nullptr));
              check_received(log, in, m, src, what);
            }
            if (!log.ok())
              return;
          }
        }
      }
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Blocking, ::testing::Values(2, 3, 5),
                         ranks_name);

// ---- Groups -------------------------------------------------------------

// Runs one group on this rank: every send in `sends` (queued in that
// order), then every receive in `recvs`, and checks what arrived.  With
// every send queued before any receive, blocking calls would deadlock as
// soon as a message outgrows the socket buffers; a group must not.
struct Exchange {
  int peer;
  Message m;
};

void run_group(RankLog &log, hoop_comm_t comm, int rank,
               const std::vector<Exchange> &sends,
               const std::vector<Exchange> &recvs, const std::string &what) {
  std::vector<Outgoing> out;
  std::vector<Guarded> in;
  out.reserve(sends.size());
  in.reserve(recvs.size());
  RANK_EXPECT_OK(log, comm, hoop_group_start());
  for (const Exchange &e : sends) {
    out.emplace_back(e.m, rank);
    RANK_EXPECT_OK(log, comm,
                   hoop_send(comm, out.back().buf.data(), e.m.count,
                             e.m.dtype, e.peer, nullptr));
  }
  for (const Exchange &e : recvs) {
    in.emplace_back(e.m.count, hoop_dtype_size(e.m.dtype));
    RANK_EXPECT_OK(log, comm,
                   hoop_recv(comm, in.back().data(), e.m.count, e.m.dtype,
                             e.peer, nullptr));
  }
  hoop_result_t res = hoop_group_end();
  if (res != HOOP_SUCCESS) {
    log.fail("%s: hoop_group_end: %s: %s", what.c_str(),
             hoop_result_name(res), hoop_comm_last_error(comm));
    return;
  }
  for (size_t k = 0; k < recvs.size(); k++)
    check_received(log, in[k], recvs[k].m, recvs[k].peer,
                   what + ", message " + std::to_string(k) + " from rank " +
                       std::to_string(recvs[k].peer));
  for (size_t k = 0; k < sends.size(); k++)
    RANK_EXPECT(log, out[k].unchanged(), "%s: send %zu changed its buffer",
                what.c_str(), k);
}

class Groups : public ::testing::TestWithParam<int> {};

// Rank r sends to r+1 and receives from r-1 (with one rank, to itself).
// The message from s starts at index 10^6 * s of s's stream, so a message
// from the wrong sender shows.
TEST_P(Groups, RingExchange) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    uint64_t seed = 100;
    std::vector<std::pair<hoop_dtype_t, size_t>> shapes;
    for (int t = 0; t < HOOP_DTYPE_COUNT; t++)
      shapes.push_back({(hoop_dtype_t)t, 1009});
    // 12 MiB each way outgrows the socket buffers of both ends.
    shapes.push_back({HOOP_F32, (size_t)3 << 20});
    for (auto &shape : shapes) {
      seed++;
      Message to_next{shape.first, shape.second, (size_t)1000000 * rank,
                      seed};
      Message from_prev{shape.first, shape.second, (size_t)1000000 * prev,
                        seed};
      run_group(log, comm, rank, {{next, to_next}}, {{prev, from_prev}},
                std::string("ring exchange ") + hoop_dtype_name(shape.first) +
                    " count " + std::to_string(shape.second));
      if (!log.ok())
        return;
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Message from s to d: its own size (zero for some pairs) and its own
// slice of s's stream, so a message delivered to the wrong rank or from
// the wrong rank fails the size check or the contents check.
Message pair_message(int s, int d, hoop_dtype_t t, size_t base,
                     uint64_t seed) {
  size_t count = (s + 2 * d) % 3 == 0 ? 0 : base + 17 * s + 5 * d;
  return {t, count, (size_t)d << 22, seed};
}

// Every rank sends to every rank, itself included, and receives from all.
// Sends go out in order r, r+1, ...; receives are posted in the opposite
// order, so a group that ran calls one by one would wait forever.
TEST_P(Groups, AllPairsIncludingSelfWithZeroByteMessages) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    uint64_t seed = 200;
    for (size_t base : {(size_t)1000, (size_t)600000}) {
      for (hoop_dtype_t t : {HOOP_U8, HOOP_BF16, HOOP_F64}) {
        seed++;
        std::vector<Exchange> sends, recvs;
        for (int k = 0; k < nranks; k++) {
          int d = (rank + k) % nranks;
          sends.push_back({d, pair_message(rank, d, t, base, seed)});
          int s = (rank + nranks - k) % nranks;
          recvs.push_back({s, pair_message(s, rank, t, base, seed)});
        }
        run_group(log, comm, rank, sends, recvs,
                  std::string("all pairs ") + hoop_dtype_name(t) + " base " +
                      std::to_string(base));
        if (!log.ok())
          return;
      }
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// A group of nothing but zero-byte messages, to every rank and from every
// rank, completes, writes nothing, and leaves the peers in step.
TEST_P(Groups, OnlyZeroByteMessages) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    for (int round = 0; round < 3; round++) {
      std::vector<Exchange> sends, recvs;
      for (int p = 0; p < nranks; p++) {
        sends.push_back({p, {HOOP_F32, 0, 0, 300}});
        recvs.push_back({p, {HOOP_F32, 0, 0, 300}});
      }
      run_group(log, comm, rank, sends, recvs, "zero-byte group");
    }
    // Had a zero-byte message left anything on a connection, this would
    // read it.
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    run_group(log, comm, rank, {{next, {HOOP_I32, 5000, 0, 301}}},
              {{prev, {HOOP_I32, 5000, 0, 301}}}, "after zero-byte groups");
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Several messages to one peer in one group arrive in call order: two of
// them have the same size, so only their contents tell them apart, and
// zero-byte ones sit between them.
TEST_P(Groups, SeveralMessagesToOnePeerMatchInCallOrder) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    const size_t counts[] = {1000, 0, 1000, 3, 0, 300000};
    auto message = [&counts](int k) {
      return Message{HOOP_I32, counts[k], (size_t)k << 20, 400};
    };
    std::vector<Exchange> sends, recvs;
    for (int p = 0; p < nranks; p++) {
      for (int k = 0; k < 6; k++) {
        sends.push_back({p, message(k)});
        recvs.push_back({p, message(k)});
      }
    }
    run_group(log, comm, rank, sends, recvs, "several messages per peer");
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Groups, ::testing::Values(1, 2, 3, 5, 8),
                         ranks_name);

// ---- All-to-all ---------------------------------------------------------

class AllToAll : public ::testing::TestWithParam<int> {};

// Block p of rank r's sendbuf holds r's stream from index p * count, so
// block r of rank p's recvbuf must hold p's stream from r * count.
TEST_P(AllToAll, EveryDtypeAndSize) {
  RunResult r = run_ranks(GetParam(), [](RankLog &log, hoop_comm_t comm,
                                         int rank, int nranks) {
    uint64_t seed = 500;
    for (int t = 0; t < HOOP_DTYPE_COUNT; t++) {
      for (size_t count : {(size_t)0, (size_t)1, (size_t)1009}) {
        hoop_dtype_t dtype = (hoop_dtype_t)t;
        size_t esz = hoop_dtype_size(dtype), total = count * nranks;
        seed++;
        Outgoing out({dtype, total, 0, seed}, rank);
        Guarded in(total, esz);
        std::string what = std::string("alltoall ") + hoop_dtype_name(dtype) +
                           " count " + std::to_string(count);
        hoop_result_t res = hoop_alltoall(comm, out.buf.data(), in.data(),
                                          count, dtype, nullptr);
        if (res != HOOP_SUCCESS) {
          log.fail("%s: %s: %s", what.c_str(), hoop_result_name(res),
                   hoop_comm_last_error(comm));
          return;
        }
        for (int p = 0; p < nranks; p++) {
          size_t bad = 0;
          size_t wrong = count_wrong(in.data() + p * count * esz, dtype,
                                     HOOP_SUM, seed, nranks, rank * count,
                                     count, 1, p, &bad);
          RANK_EXPECT(log, wrong == 0,
                      "%s: block from rank %d: %zu wrong (first at %zu)",
                      what.c_str(), p, wrong, bad);
        }
        RANK_EXPECT(log, in.guards_intact(), "%s: wrote outside recvbuf",
                    what.c_str());
        RANK_EXPECT(log, out.unchanged(), "%s: changed sendbuf",
                    what.c_str());
        if (!log.ok())
          return;
      }
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllToAll, ::testing::Values(1, 2, 3, 5, 8),
                         ranks_name);

// ---- Errors -------------------------------------------------------------

TEST(P2PErrors, BadArgumentsReturnClearErrorsAndCommStaysUsable) {
  RunResult r = run_ranks(2, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    std::vector<float> a(64, 1.0f), b(64);
    int other = 1 - rank;
    hoop_result_t res;
    for (int peer : {-1, nranks, 1000}) {
      res = hoop_send(comm, a.data(), 64, HOOP_F32, peer, nullptr);
      RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "send to %d: %s",
                  peer, hoop_result_name(res));
      res = hoop_recv(comm, b.data(), 64, HOOP_F32, peer, nullptr);
      RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "recv from %d: %s",
                  peer, hoop_result_name(res));
    }
    res = hoop_send(comm, nullptr, 64, HOOP_F32, other, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "NULL send: %s",
                hoop_result_name(res));
    res = hoop_recv(comm, nullptr, 64, HOOP_F32, other, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "NULL recv: %s",
                hoop_result_name(res));
    res = hoop_send(comm, a.data(), 64, (hoop_dtype_t)99, other, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "bad dtype: %s",
                hoop_result_name(res));
    res = hoop_send(nullptr, a.data(), 64, HOOP_F32, other, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "NULL comm: %s",
                hoop_result_name(res));
    // Ending a group that never started is a misuse, not a bad value.
    res = hoop_group_end();
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE, "group_end alone: %s",
                hoop_result_name(res));
    res = hoop_alltoall(comm, a.data(), a.data() + 1, 16, HOOP_F32, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "overlap: %s",
                hoop_result_name(res));
    res = hoop_alltoall(comm, nullptr, b.data(), 16, HOOP_F32, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "NULL alltoall: %s",
                hoop_result_name(res));
    // None of that moved a byte: a real exchange still matches up.
    Message m{HOOP_F32, 1000, 0, 600};
    run_group(log, comm, rank, {{other, m}}, {{other, m}},
              "exchange after the errors");
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(P2PErrors, DestroyedCommunicatorIsRejected) {
  RunResult r = run_alone([](RankLog &log) {
    hoop_comm_t comm = comm_alone(log);
    RANK_EXPECT_OK(log, nullptr, hoop_comm_destroy(comm));
    float x[4] = {1, 2, 3, 4}, y[4];
    hoop_result_t res = hoop_send(comm, x, 4, HOOP_F32, 0, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE, "send: %s",
                hoop_result_name(res));
    RANK_EXPECT(log, strstr(hoop_last_error(), "not live") != nullptr,
                "message: %s", hoop_last_error());
    res = hoop_recv(comm, y, 4, HOOP_F32, 0, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE, "recv: %s",
                hoop_result_name(res));
    res = hoop_alltoall(comm, x, y, 4, HOOP_F32, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE, "alltoall: %s",
                hoop_result_name(res));
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// Rank 0 sends 1000 elements; rank 1 expects `recv_count`.  Both must fail
// (MISMATCH where it was seen, REMOTE where a peer reported it) well
// before the 20 s timeout, including the sender, whose bytes fit in the
// socket buffers.
void size_mismatch_case(size_t recv_count, bool in_group) {
  RunOptions opt;
  opt.comm_timeout_ms = 20000;
  RunResult r = run_ranks(
      2,
      [recv_count, in_group](RankLog &log, hoop_comm_t comm, int rank, int) {
        std::vector<float> buf(2000, 1.0f);
        if (in_group)
          RANK_EXPECT_OK(log, comm, hoop_group_start());
        hoop_result_t res =
            rank == 0
                ? hoop_send(comm, buf.data(), 1000, HOOP_F32, 1, nullptr)
                : hoop_recv(comm, buf.data(), recv_count, HOOP_F32, 0,
                            nullptr);
        if (in_group) {
          RANK_EXPECT_OK(log, comm, res);
          res = hoop_group_end();
        }
        RANK_EXPECT(log, res == HOOP_ERR_MISMATCH || res == HOOP_ERR_REMOTE,
                    "rank %d got %s: %s", rank, hoop_result_name(res),
                    hoop_comm_last_error(comm));
        // Each end announces its link's sizes folded by FNV-1a steps from
        // 0 (size + 1, so a zero-byte message still counts).
        std::string sent = std::to_string(4001 * 1099511628211ULL);
        std::string expected =
            std::to_string((recv_count * 4 + 1) * 1099511628211ULL);
        std::string msg = hoop_comm_last_error(comm);
        RANK_EXPECT(log,
                    res != HOOP_ERR_MISMATCH ||
                        (msg.find(sent) != std::string::npos &&
                         msg.find(expected) != std::string::npos),
                    "size hashes %s and %s not in: %s", sent.c_str(),
                    expected.c_str(), msg.c_str());
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
  EXPECT_LT(r.seconds, 10.0) << "both ranks should fail at once";
}

TEST(P2PErrors, ReceiverExpectsFewerElementsBothFail) {
  size_mismatch_case(999, false);
}

TEST(P2PErrors, ReceiverExpectsMoreElementsBothFail) {
  size_mismatch_case(1001, false);
}

TEST(P2PErrors, MismatchInsideAGroupFailsOnBoth) {
  size_mismatch_case(1500, true);
}

} // namespace
