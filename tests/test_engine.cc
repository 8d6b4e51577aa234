// White-box tests of the progress engine (core/engine.h), on plans whose
// connections are fakes: what the engine does before it sleeps, which no
// collective run over real transports shows except as lost time.
#include <gtest/gtest.h>

#include <set>
#include <vector>

extern "C" {
#include "core/engine.h"
#include "transport/transport.h"
}

namespace {

// Each fake connection polls its own descriptor number, 1000 + peer; a
// connection whose peer is kReadyPeer can move already.
constexpr int kReadyPeer = 1 << 20;
int g_arm_calls = 0;

hoop_result_t fake_arm(struct hoop_conn *conn, int send, struct pollfd *pfd,
                       bool *ready) {
  g_arm_calls++;
  *ready = conn->peer == kReadyPeer;
  pfd->fd = 1000 + conn->peer;
  pfd->events = send ? POLLOUT : POLLIN;
  return HOOP_SUCCESS;
}

const struct hoop_transport_ops *fake_ops() {
  static struct hoop_transport_ops ops = [] {
    struct hoop_transport_ops o = {};
    o.name = "fake";
    o.arm = fake_arm;
    return o;
  }();
  return &ops;
}

// A plan of `npeers` connections with a link each way on every one, all
// waiting on their connection (header not yet through).
struct FakePlan {
  explicit FakePlan(int npeers)
      : conns((size_t)npeers), links((size_t)npeers * 2) {
    hoop__plan_init(&plan, nullptr, HOOP_U8, HOOP_SUM);
    for (int i = 0; i < npeers; i++) {
      conns[(size_t)i].ops = fake_ops();
      conns[(size_t)i].peer = i;
      for (int send = 0; send < 2; send++) {
        struct hoop_link &l = links[(size_t)(2 * i + send)];
        l.conn = &conns[(size_t)i];
        l.send = send;
        l.want_poll = 1;
      }
    }
    plan.links = links.data();
    plan.nlinks = (int)links.size();
    g_arm_calls = 0;
  }
  // The vectors own the links; the plan only points at them.
  std::vector<struct hoop_conn> conns;
  std::vector<struct hoop_link> links;
  struct hoop_plan plan;
};

// A parameter-server root or an all-to-all waits on every peer at once;
// the engine once armed only the first 64 connections and found the rest
// at its next one-second wake-up.
TEST(Engine, ArmsEveryWaitingConnectionBeyond64) {
  const int npeers = 70;
  FakePlan f(npeers);
  std::vector<struct pollfd> fds((size_t)f.plan.nlinks);
  int nfds = -1, armed = -1;
  bool ready = true;
  ASSERT_EQ(hoop__engine_arm(&f.plan, fds.data(), &nfds, &armed, &ready),
            HOOP_SUCCESS);
  EXPECT_FALSE(ready);
  EXPECT_EQ(armed, 2 * npeers);
  EXPECT_EQ(g_arm_calls, 2 * npeers);
  // Both directions of a connection share its descriptor's entry.
  ASSERT_EQ(nfds, npeers);
  std::set<int> seen;
  for (int i = 0; i < nfds; i++) {
    EXPECT_EQ(fds[(size_t)i].events, POLLIN | POLLOUT) << "entry " << i;
    seen.insert(fds[(size_t)i].fd);
  }
  EXPECT_EQ(seen.size(), (size_t)npeers);
  EXPECT_EQ(*seen.begin(), 1000);
  EXPECT_EQ(*seen.rbegin(), 1000 + npeers - 1);
}

TEST(Engine, ArmsOnlyLinksWaitingOnTheirConnection) {
  FakePlan f(100);
  for (size_t i = 0; i < f.links.size(); i++)
    f.links[i].want_poll = i % 3 == 0;
  std::vector<struct pollfd> fds(f.links.size());
  int nfds = 0, armed = 0;
  bool ready = true;
  ASSERT_EQ(hoop__engine_arm(&f.plan, fds.data(), &nfds, &armed, &ready),
            HOOP_SUCCESS);
  EXPECT_FALSE(ready);
  EXPECT_EQ(armed, 67); // links 0, 3, ..., 198
  EXPECT_EQ(g_arm_calls, 67);
}

TEST(Engine, ArmingStopsAtAConnectionThatCanMove) {
  FakePlan f(80);
  f.conns[75].peer = kReadyPeer;
  std::vector<struct pollfd> fds(f.links.size());
  int nfds = 0, armed = 0;
  bool ready = false;
  ASSERT_EQ(hoop__engine_arm(&f.plan, fds.data(), &nfds, &armed, &ready),
            HOOP_SUCCESS);
  EXPECT_TRUE(ready);
  EXPECT_EQ(armed, 2 * 75 + 1);
}

} // namespace
