// The ib transport without an RDMA device: first the fake verbs table
// (fake_verbs.h) against the contract of transport/ib_verbs.h, so that
// what the transport is tested on is itself tested; then hoop's
// collectives over HOOP_TRANSPORT=ib on that fake, ranks as threads of
// one process, and the failures a dead peer or a port going down cause.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "conn_pair.h"
#include "fake_ib_ranks.h"
#include "fake_verbs.h"
#include "harness.h"

extern "C" {
#include "transport/ib.h"
}

namespace {

const hoop_ib_verbs *V() { return hooptest::fake_verbs(); }

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

// One endpoint with its address, opened on the fake port.
struct Ep {
  hoop_ib_ep *ep = nullptr;
  hoop_ib_local local{};

  explicit Ep(int send_depth = 64, int recv_depth = 64) {
    hoop_ib_open o{"fake0", 1, 0, send_depth, recv_depth};
    char why[256] = "";
    EXPECT_EQ(V()->open(&o, &ep, &local, why, sizeof why), 0) << why;
  }
  ~Ep() { V()->close(ep); }
  Ep(const Ep &) = delete;
  Ep &operator=(const Ep &) = delete;

  hoop_ib_mr reg(void *addr, size_t len, bool remote_write) {
    hoop_ib_mr mr{};
    char why[256] = "";
    EXPECT_EQ(V()->reg_mr(ep, addr, len, remote_write, &mr, why, sizeof why), 0)
        << why;
    return mr;
  }

  std::vector<hoop_ib_wc> poll_all() {
    std::vector<hoop_ib_wc> got;
    hoop_ib_wc wc[8];
    for (int n; (n = V()->poll(ep, wc, 8)) > 0;)
      got.insert(got.end(), wc, wc + n);
    return got;
  }
};

hoop_ib_path path_to(const hoop_ib_local &peer) {
  hoop_ib_path p{};
  p.dlid = peer.lid;
  p.mtu = peer.mtu;
  p.link_layer = peer.link_layer;
  p.dest_qpn = peer.qpn;
  memcpy(p.dgid, peer.gid, sizeof p.dgid);
  p.timeout = 20;
  p.retry_cnt = 7;
  return p;
}

int connect_to(Ep &a, const hoop_ib_path &p, std::string *why = nullptr) {
  char buf[256] = "";
  int rc = V()->connect(a.ep, &p, buf, sizeof buf);
  if (why != nullptr)
    *why = buf;
  return rc;
}

void join(Ep &a, Ep &b) {
  ASSERT_EQ(connect_to(a, path_to(b.local)), 0);
  ASSERT_EQ(connect_to(b, path_to(a.local)), 0);
}

int post_write(Ep &from, uint64_t wr_id, const void *src, uint32_t lkey,
               size_t len, const void *dst, uint32_t rkey, bool with_imm,
               uint32_t imm, std::string *why = nullptr) {
  char buf[256] = "";
  int rc = V()->post_write(from.ep, wr_id, src, lkey, len, (uintptr_t)dst, rkey,
                           with_imm, imm, buf, sizeof buf);
  if (why != nullptr)
    *why = buf;
  return rc;
}

int post_recv(Ep &on, uint64_t wr_id) {
  char why[256] = "";
  return V()->post_recv(on.ep, wr_id, why, sizeof why);
}

// Two joined endpoints, a's source and b's sink registered.
struct Pair {
  Ep a, b;
  std::vector<char> src, dst;
  hoop_ib_mr src_mr{}, dst_mr{};

  explicit Pair(size_t bytes = 4096, int depth = 64)
      : a(depth, depth), b(depth, depth), src(bytes), dst(bytes) {
    join(a, b);
    for (size_t i = 0; i < bytes; i++)
      src[i] = (char)(i * 7 + 1);
    src_mr = a.reg(src.data(), bytes, false);
    dst_mr = b.reg(dst.data(), bytes, true);
  }
  ~Pair() {
    V()->dereg_mr(a.ep, &src_mr);
    V()->dereg_mr(b.ep, &dst_mr);
  }

  int put(uint64_t wr_id, size_t off, size_t len, bool with_imm = false,
          uint32_t imm = 0, std::string *why = nullptr) {
    return post_write(a, wr_id, src.data() + off, src_mr.lkey, len,
                      dst.data() + off, dst_mr.rkey, with_imm, imm, why);
  }
};

TEST(FakeVerbs, OpenFillsTheAddressOfTheFakePort) {
  size_t before = hooptest::fake_verbs_endpoints();
  {
    Ep a, b;
    EXPECT_EQ(a.local.lid, 1);
    EXPECT_EQ(a.local.mtu, 5);
    EXPECT_EQ(a.local.link_layer, HOOP_LINK_IB);
    EXPECT_EQ(a.local.gid[0], 0xfe);
    EXPECT_EQ(a.local.gid[1], 0x80);
    EXPECT_GE(a.local.qpn, 2u);
    EXPECT_LE(a.local.qpn, 0xffffffu);
    EXPECT_NE(a.local.qpn, b.local.qpn);
    EXPECT_EQ(hooptest::fake_verbs_endpoints(), before + 2);
  }
  EXPECT_EQ(hooptest::fake_verbs_endpoints(), before);
  hoop_ib_ep *ep = nullptr;
  hoop_ib_local local{};
  char why[256] = "";
  hoop_ib_open o{"mlx5_0", 1, 0, 4, 4};
  EXPECT_EQ(V()->open(&o, &ep, &local, why, sizeof why), ENODEV);
  EXPECT_NE(strstr(why, "mlx5_0"), nullptr) << why;
  o = hoop_ib_open{"fake0", 1, 0, 0, 4};
  EXPECT_EQ(V()->open(&o, &ep, &local, why, sizeof why), EINVAL);
  EXPECT_NE(strstr(why, "ibv_create_qp"), nullptr) << why;
  EXPECT_EQ(ep, nullptr);
}

TEST(FakeVerbs, DiscoveryPublishesOneActiveInfinibandPort) {
  hoop_rdma_local_port *ports = nullptr;
  int n = 0;
  char why[256] = "";
  ASSERT_TRUE(hooptest::fake_discover(&ports, &n, why, sizeof why)) << why;
  ASSERT_EQ(n, 1);
  EXPECT_STREQ(ports[0].device, "fake0");
  EXPECT_EQ(ports[0].port, 1);
  EXPECT_EQ(ports[0].state, HOOP_PORT_ACTIVE);
  EXPECT_EQ(ports[0].mtu, 5);
  EXPECT_NE(ports[0].lid, 0);
  // Two ranks that publish it can be joined by ib.
  hoop_rdma_port a, b;
  hoop__rdma_describe(&ports[0], -1, &a);
  hoop__rdma_describe(&ports[0], -1, &b);
  free(ports);
  EXPECT_TRUE(hoop__ib_select(&a, 0, &b, 1, why, sizeof why)) << why;
}

// What a rank publishes with the discovery hook set, and after it is
// cleared; in a child, since HOOP_TRANSPORT is read once per process.
TEST(FakeVerbs, TheDiscoveryHookIsWhatARankPublishes) {
  std::string got = hooptest::ask_in_child([] {
    setenv("HOOP_TRANSPORT", "ib", 1);
    std::string out;
    for (bool hook : {true, false}) {
      hoop__rdma_set_discover(hook ? hooptest::fake_discover : nullptr);
      hoop_rdma_port mine;
      char why[400] = "";
      hoop__rdma_publish(&mine, why, sizeof why);
      out += std::to_string(mine.status) + " " + mine.device + "; ";
    }
    return out;
  });
  EXPECT_EQ(got.rfind(std::to_string(HOOP_RDMA_PORT) + " fake0; ", 0), 0u)
      << got;
  EXPECT_EQ(got.find("fake0", 6), std::string::npos) << got;
}

TEST(FakeVerbs, ConnectRefusesWhatTheRealOneWouldNamingTheStep) {
  Ep a, b;
  std::string why;
  hoop_ib_path p = path_to(b.local);
  p.dest_qpn = 0x7ffff0;
  EXPECT_EQ(connect_to(a, p, &why), EINVAL);
  EXPECT_NE(why.find("ibv_modify_qp to RTR"), std::string::npos) << why;
  EXPECT_NE(why.find("0x7ffff0"), std::string::npos) << why;
  p = path_to(b.local);
  p.mtu = 6;
  EXPECT_EQ(connect_to(a, p, &why), EINVAL);
  EXPECT_NE(why.find("MTU"), std::string::npos) << why;
  p = path_to(b.local);
  p.link_layer = HOOP_LINK_ETH;
  EXPECT_EQ(connect_to(a, p, &why), EINVAL);
  EXPECT_NE(why.find("link layer"), std::string::npos) << why;
  p = path_to(b.local);
  p.retry_cnt = 9;
  EXPECT_EQ(connect_to(a, p, &why), EINVAL);
  EXPECT_NE(why.find("ibv_modify_qp to RTS"), std::string::npos) << why;
  // A queue pair not yet connected cannot send.
  char byte = 0;
  hoop_ib_mr mr = a.reg(&byte, 1, false);
  EXPECT_EQ(post_write(a, 1, &byte, mr.lkey, 1, &byte, 0, false, 0, &why),
            EINVAL);
  EXPECT_NE(why.find("INIT"), std::string::npos) << why;
  V()->dereg_mr(a.ep, &mr);
  EXPECT_EQ(connect_to(a, path_to(b.local), &why), 0) << why;
  EXPECT_EQ(connect_to(a, path_to(b.local), &why), EINVAL);
}

TEST(FakeVerbs, AWriteMovesTheBytesAndCompletesOnBothEnds) {
  Pair p;
  ASSERT_EQ(post_recv(p.b, 700), 0);
  ASSERT_EQ(p.put(42, 100, 1000, true, 0x80000010u), 0);
  std::vector<hoop_ib_wc> sent = p.a.poll_all(), got = p.b.poll_all();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].ok);
  EXPECT_FALSE(sent[0].recv);
  EXPECT_EQ(sent[0].wr_id, 42u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok);
  EXPECT_TRUE(got[0].recv);
  EXPECT_EQ(got[0].wr_id, 700u);
  EXPECT_EQ(got[0].imm, 0x80000010u);
  EXPECT_EQ(memcmp(p.dst.data() + 100, p.src.data() + 100, 1000), 0);
  EXPECT_EQ(p.dst[99], 0);
  EXPECT_EQ(p.dst[1100], 0);
  // Without immediate data no receive is consumed or completed.
  ASSERT_EQ(p.put(43, 2000, 96), 0);
  EXPECT_EQ(p.a.poll_all().size(), 1u);
  EXPECT_TRUE(p.b.poll_all().empty());
  EXPECT_EQ(memcmp(p.dst.data() + 2000, p.src.data() + 2000, 96), 0);
}

TEST(FakeVerbs, AZeroLengthWriteCarriesOnlyItsImmediate) {
  Pair p;
  ASSERT_EQ(post_recv(p.b, 1), 0);
  // No buffer and no key: there is nothing to check them against.
  ASSERT_EQ(post_write(p.a, 9, nullptr, 0, 0, nullptr, 0, true, 12345), 0);
  std::vector<hoop_ib_wc> got = p.b.poll_all();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].imm, 12345u);
  EXPECT_EQ(got[0].wr_id, 1u);
  std::vector<hoop_ib_wc> sent = p.a.poll_all();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].wr_id, 9u);
  EXPECT_TRUE(sent[0].ok);
}

TEST(FakeVerbs, ALocalBufferOutsideItsRegionIsRefusedAtPost) {
  Pair p;
  std::string why;
  EXPECT_EQ(p.put(1, 4000, 200, false, 0, &why), EINVAL);
  EXPECT_NE(why.find("lkey"), std::string::npos) << why;
  // Another endpoint's region is another protection domain.
  EXPECT_EQ(post_write(p.a, 2, p.dst.data(), p.dst_mr.lkey, 16, p.dst.data(),
                       p.dst_mr.rkey, false, 0, &why),
            EINVAL);
  EXPECT_TRUE(p.a.poll_all().empty());
  EXPECT_EQ(p.put(3, 0, 16), 0);
  EXPECT_EQ(p.a.poll_all().size(), 1u);
}

TEST(FakeVerbs, ABadRemoteKeyFailsTheWriterAndFlushesThePeer) {
  Pair p;
  ASSERT_EQ(post_recv(p.b, 11), 0);
  ASSERT_EQ(post_recv(p.b, 12), 0);
  // Past the end of the peer's region.
  ASSERT_EQ(post_write(p.a, 5, p.src.data(), p.src_mr.lkey, 64,
                       p.dst.data() + 4090, p.dst_mr.rkey, true, 1),
            0);
  std::vector<hoop_ib_wc> sent = p.a.poll_all(), got = p.b.poll_all();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_FALSE(sent[0].ok);
  EXPECT_EQ(sent[0].wr_id, 5u);
  EXPECT_STREQ(sent[0].status, "remote access error (10)");
  ASSERT_EQ(got.size(), 2u);
  for (const hoop_ib_wc &wc : got) {
    EXPECT_FALSE(wc.ok);
    EXPECT_TRUE(wc.recv);
    EXPECT_STREQ(wc.status, "work request flushed (5)");
  }
  EXPECT_EQ(got[0].wr_id, 11u);
  EXPECT_EQ(got[1].wr_id, 12u);
  EXPECT_EQ(p.dst[4090], 0) << "nothing is placed";
  // Both are in error: what either posts now is flushed.
  ASSERT_EQ(p.put(6, 0, 8), 0);
  sent = p.a.poll_all();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_STREQ(sent[0].status, "work request flushed (5)");
  ASSERT_EQ(post_recv(p.b, 13), 0);
  got = p.b.poll_all();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_STREQ(got[0].status, "work request flushed (5)");
}

TEST(FakeVerbs, ARegionWithoutRemoteWriteOrAnUnknownKeyIsRemoteAccessError) {
  for (int bad_key = 0; bad_key < 2; bad_key++) {
    Pair p;
    std::vector<char> ro(64);
    hoop_ib_mr ro_mr = p.b.reg(ro.data(), ro.size(), false);
    uint32_t rkey = bad_key ? p.dst_mr.rkey + 1000 : ro_mr.rkey;
    ASSERT_EQ(post_write(p.a, 5, p.src.data(), p.src_mr.lkey, 8, ro.data(),
                         rkey, false, 0),
              0);
    std::vector<hoop_ib_wc> sent = p.a.poll_all();
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_STREQ(sent[0].status, "remote access error (10)");
    V()->dereg_mr(p.b.ep, &ro_mr);
  }
}

TEST(FakeVerbs, AFullQueueRefusesThePostWithEnomem) {
  Pair p(4096, 2);
  std::string why;
  ASSERT_EQ(p.put(1, 0, 8), 0);
  ASSERT_EQ(p.put(2, 8, 8), 0);
  EXPECT_EQ(p.put(3, 16, 8, false, 0, &why), ENOMEM);
  EXPECT_NE(why.find("ibv_post_send"), std::string::npos) << why;
  // A send's slot frees when its completion is polled.
  hoop_ib_wc wc;
  ASSERT_EQ(V()->poll(p.a.ep, &wc, 1), 1);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(p.put(3, 16, 8), 0);
  EXPECT_EQ(post_recv(p.b, 1), 0);
  EXPECT_EQ(post_recv(p.b, 2), 0);
  EXPECT_EQ(post_recv(p.b, 3), ENOMEM);
  // A consumed receive holds its slot until its completion is polled.
  p.a.poll_all();
  ASSERT_EQ(p.put(4, 24, 8, true, 4), 0);
  EXPECT_EQ(post_recv(p.b, 3), ENOMEM);
  ASSERT_EQ(V()->poll(p.b.ep, &wc, 1), 1);
  EXPECT_EQ(post_recv(p.b, 3), 0);
}

TEST(FakeVerbs, AWriteWithImmediateWaitsForTheReceiverToPostAReceive) {
  Pair p;
  ASSERT_EQ(p.put(1, 0, 100, true, 101), 0);
  ASSERT_EQ(p.put(2, 100, 100, false), 0);
  ASSERT_EQ(p.put(3, 200, 100, true, 103), 0);
  // The receiver is not ready: the sender's queue waits in order.
  EXPECT_TRUE(p.a.poll_all().empty());
  EXPECT_TRUE(p.b.poll_all().empty());
  ASSERT_EQ(post_recv(p.b, 51), 0);
  std::vector<hoop_ib_wc> got = p.b.poll_all(), sent = p.a.poll_all();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].imm, 101u);
  EXPECT_EQ(memcmp(p.dst.data(), p.src.data(), 200), 0);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].wr_id, 1u);
  EXPECT_EQ(sent[1].wr_id, 2u);
  ASSERT_EQ(post_recv(p.b, 52), 0);
  got = p.b.poll_all();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 52u);
  EXPECT_EQ(got[0].imm, 103u);
  EXPECT_EQ(p.a.poll_all().size(), 1u);
}

TEST(FakeVerbs, WritesBeforeThePeerIsConnectedWaitForIt) {
  Ep a, b;
  ASSERT_EQ(connect_to(a, path_to(b.local)), 0);
  ASSERT_EQ(post_recv(b, 1), 0);
  ASSERT_EQ(post_write(a, 7, nullptr, 0, 0, nullptr, 0, true, 77), 0);
  EXPECT_TRUE(a.poll_all().empty());
  ASSERT_EQ(connect_to(b, path_to(a.local)), 0);
  std::vector<hoop_ib_wc> got = b.poll_all();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].imm, 77u);
  EXPECT_EQ(a.poll_all().size(), 1u);
}

TEST(FakeVerbs, TheEventFdWakesOnlyForACompletionAfterNotify) {
  Pair p;
  int fd = V()->event_fd(p.b.ep);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(post_recv(p.b, 1), 0);
  ASSERT_EQ(post_recv(p.b, 2), 0);
  ASSERT_EQ(post_recv(p.b, 3), 0);
  ASSERT_EQ(p.put(1, 0, 8, true, 1), 0);
  EXPECT_FALSE(readable(fd)) << "not armed";
  // Already queued when notify is called: no event, as with real verbs.
  ASSERT_EQ(V()->notify(p.b.ep), 0);
  EXPECT_FALSE(readable(fd));
  ASSERT_EQ(p.put(2, 8, 8, true, 2), 0);
  EXPECT_TRUE(readable(fd));
  V()->consume(p.b.ep);
  EXPECT_FALSE(readable(fd));
  // One event per notify.
  ASSERT_EQ(p.put(3, 16, 8, true, 3), 0);
  EXPECT_FALSE(readable(fd));
  EXPECT_EQ(p.b.poll_all().size(), 3u);
}

// In a child: the port stays down for the rest of the process.
TEST(FakeVerbs, APortGoingDownIsAnAsyncEventAndStopsEveryWrite) {
  hooptest::RunResult r = hooptest::run_alone([](hooptest::RankLog &log) {
    Pair p;
    char what[128] = "";
    RANK_EXPECT(log, !readable(V()->async_fd(p.a.ep)), "event early");
    RANK_EXPECT(log, V()->async_take(p.a.ep, what, sizeof what) == 0,
                "took %s", what);
    post_recv(p.b, 1);
    hooptest::fake_verbs_port_down();
    for (Ep *e : {&p.a, &p.b}) {
      RANK_EXPECT(log, readable(V()->async_fd(e->ep)), "no event");
      RANK_EXPECT(log, V()->async_take(e->ep, what, sizeof what) == 1,
                  "no event taken");
      RANK_EXPECT(log, strcmp(what, "port 1 of fake0 went down") == 0,
                  "the event is %s", what);
      RANK_EXPECT(log, !readable(V()->async_fd(e->ep)), "fd still set");
      RANK_EXPECT(log, V()->async_take(e->ep, what, sizeof what) == 0,
                  "a second event: %s", what);
    }
    RANK_EXPECT(log, p.put(1, 0, 64, true, 1) == 0, "post failed");
    RANK_EXPECT(log, p.a.poll_all().empty() && p.b.poll_all().empty(),
                "a write completed on a port that is down");
    RANK_EXPECT(log, p.dst[0] == 0, "a write was placed");
  }, 60);
  EXPECT_TRUE(r.all_ok()) << hooptest::describe(r);
}

TEST(FakeVerbs, AKilledPeerFailsWritesWithExhaustedRetries) {
  Pair p;
  ASSERT_EQ(post_recv(p.a, 21), 0);
  // One write waits for a receive when the host dies.
  ASSERT_EQ(p.put(1, 0, 8, true, 1), 0);
  hooptest::fake_verbs_kill(p.b.local.qpn);
  ASSERT_EQ(p.put(2, 8, 8), 0);
  std::vector<hoop_ib_wc> sent = p.a.poll_all();
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].wr_id, 1u);
  EXPECT_FALSE(sent[0].ok);
  EXPECT_STREQ(sent[0].status, "retry counter exceeded (12)");
  // The writer is in error now: its receive and later writes flush.
  EXPECT_EQ(sent[1].wr_id, 21u);
  EXPECT_TRUE(sent[1].recv);
  EXPECT_STREQ(sent[1].status, "work request flushed (5)");
  EXPECT_EQ(sent[2].wr_id, 2u);
  EXPECT_STREQ(sent[2].status, "work request flushed (5)");
  // The dead end delivers and completes nothing.
  EXPECT_EQ(post_recv(p.b, 1), 0);
  EXPECT_EQ(post_write(p.b, 1, nullptr, 0, 0, nullptr, 0, true, 1), 0);
  EXPECT_TRUE(p.b.poll_all().empty());
  EXPECT_TRUE(p.a.poll_all().empty());
}

TEST(FakeVerbs, AKilledRankIsEveryEndpointItsThreadOpened) {
  Ep a;
  hoop_ib_ep *theirs[2] = {nullptr, nullptr};
  hoop_ib_local their_local[2];
  std::thread([&] {
    hooptest::fake_verbs_tag_thread(3);
    hoop_ib_open o{"fake0", 1, 0, 4, 4};
    char why[256];
    for (int i = 0; i < 2; i++)
      EXPECT_EQ(V()->open(&o, &theirs[i], &their_local[i], why, sizeof why), 0);
  }).join();
  ASSERT_EQ(connect_to(a, path_to(their_local[1])), 0);
  hoop_ib_path back = path_to(a.local);
  char why[256];
  ASSERT_EQ(V()->connect(theirs[1], &back, why, sizeof why), 0) << why;
  hooptest::fake_verbs_kill_rank(3);
  ASSERT_EQ(post_write(a, 1, nullptr, 0, 0, nullptr, 0, false, 0), 0);
  std::vector<hoop_ib_wc> sent = a.poll_all();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_STREQ(sent[0].status, "retry counter exceeded (12)");
  for (hoop_ib_ep *e : theirs)
    V()->close(e);
}

TEST(FakeVerbs, WritesToAClosedPeerFailAndClosingLeavesNothing) {
  size_t eps = hooptest::fake_verbs_endpoints();
  size_t regions = hooptest::fake_verbs_regions();
  {
    Ep a;
    {
      Ep b;
      join(a, b);
    }
    ASSERT_EQ(post_write(a, 1, nullptr, 0, 0, nullptr, 0, true, 1), 0);
    std::vector<hoop_ib_wc> sent = a.poll_all();
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_STREQ(sent[0].status, "retry counter exceeded (12)");
  }
  {
    Pair p;
  }
  EXPECT_EQ(hooptest::fake_verbs_endpoints(), eps);
  EXPECT_EQ(hooptest::fake_verbs_regions(), regions);
  // A region left registered at close stays counted, a leak to see; in a
  // child, which the leak checker does not follow out.
  std::string left = hooptest::ask_in_child([] {
    {
      Ep a;
      char byte;
      a.reg(&byte, 1, true);
    }
    return std::to_string(hooptest::fake_verbs_regions());
  });
  EXPECT_EQ(left, std::to_string(regions + 1));
}

// A sender and a receiver thread run the shape of ib's protocol: data by
// write with immediate into a ring of slots, credit back by zero-length
// write with immediate.  Every byte must be there when its completion is
// seen, with the receiver sleeping on the event fd between completions.
TEST(FakeVerbs, TwoThreadsSeeTheBytesOfEveryCompletion) {
  const size_t kWords = 64, kSlots = 4;
  const int kMessages = 5000, kDepth = 16;
  Ep a(kDepth, kDepth), b(kDepth, kDepth);
  join(a, b);
  std::vector<uint32_t> ring(kWords * kSlots), out(kWords);
  hoop_ib_mr ring_mr = b.reg(ring.data(), ring.size() * 4, true);
  hoop_ib_mr out_mr = a.reg(out.data(), out.size() * 4, false);
  for (int i = 0; i < kDepth; i++) {
    ASSERT_EQ(post_recv(a, 0), 0);
    ASSERT_EQ(post_recv(b, 0), 0);
  }
  std::atomic<int> wrong{0}, errors{0};
  std::thread receiver([&] {
    hoop_ib_wc wc[8];
    for (int seen = 0; seen < kMessages && errors == 0;) {
      int n = V()->poll(b.ep, wc, 8);
      if (n == 0) {
        V()->notify(b.ep);
        n = V()->poll(b.ep, wc, 8);
      }
      if (n == 0) {
        pollfd pfd{V()->event_fd(b.ep), POLLIN, 0};
        ::poll(&pfd, 1, 1000);
        V()->consume(b.ep);
        continue;
      }
      for (int i = 0; i < n; i++) {
        errors += !wc[i].ok;
        if (!wc[i].ok || !wc[i].recv)
          continue;
        uint32_t m = wc[i].imm;
        const uint32_t *slot = &ring[(m % kSlots) * kWords];
        for (size_t w = 0; w < kWords; w++)
          wrong += slot[w] != m * 1000 + w;
        seen++;
        errors += post_recv(b, 0) != 0;
        errors += post_write(b, 0, nullptr, 0, 0, nullptr, 0, true, m) != 0;
      }
    }
  });
  // The sender's source is rewritten only once its last write completed.
  int credits = (int)kSlots;
  for (int m = 0; m < kMessages && errors == 0; m++) {
    for (size_t w = 0; w < kWords; w++)
      out[w] = (uint32_t)m * 1000 + (uint32_t)w;
    if (post_write(a, 0, out.data(), out_mr.lkey, kWords * 4,
                   &ring[((size_t)m % kSlots) * kWords], ring_mr.rkey, true,
                   (uint32_t)m) != 0) {
      errors++;
      break;
    }
    credits--;
    for (bool sent = false; (!sent || credits == 0) && errors == 0;) {
      hoop_ib_wc wc[8];
      int n = V()->poll(a.ep, wc, 8);
      for (int i = 0; i < n; i++) {
        errors += !wc[i].ok;
        if (!wc[i].recv) {
          sent = true;
        } else {
          credits++;
          errors += post_recv(a, 0) != 0;
        }
      }
    }
  }
  receiver.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  V()->dereg_mr(a.ep, &out_mr);
  V()->dereg_mr(b.ep, &ring_mr);
}

// ---- hoop over HOOP_TRANSPORT=ib on the fake ------------------------------

using hooptest::IbRun;
using hooptest::RankLog;
using hooptest::run_ib;

// Larger than the FIFO ring (8 slots of 256 KiB), and divisible by none
// of the rank counts but 1.
const size_t kLarge = 3 * 1024 * 1024 / 4 + 1;
const size_t kCounts[] = {0, 1, 1001, kLarge};

// Elements per rank's block in the calls that split or gather: the
// small counts as they are, the large one shared out so that the whole
// buffer stays about 3 MB.
size_t block_of(size_t count, int nranks) {
  return count == kLarge ? count / (size_t)nranks : count;
}

// Exact in float for every sum of up to 8 ranks.
float fval(int rank, size_t i) {
  return (float)((rank + 1) * (int)(i % 13 + 1));
}

int32_t ival(int rank, size_t i) {
  return (int32_t)((i * 2654435761u + (uint64_t)rank * 40503u) % 100003u) -
         50000;
}

// The first element that differs, or -1.
template <typename T>
long first_wrong(const T *got, size_t n, const std::function<T(size_t)> &want) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want(i))
      return (long)i;
  return -1;
}

#define EXPECT_ALL(log, what, got, n, want)                                    \
  do {                                                                         \
    long w_ = first_wrong(got, n, want);                                       \
    RANK_EXPECT(log, w_ < 0, "%s: element %ld of %zu wrong", what, w_,         \
                (size_t)(n));                                                  \
  } while (0)

// What every rank's fval(rank, i) sums to.
float fsum(int n, size_t i) {
  float s = 0;
  for (int q = 0; q < n; q++)
    s += fval(q, i);
  return s;
}

// The largest of every rank's ival(rank, i).
int32_t imax(int n, size_t i) {
  int32_t m = ival(0, i);
  for (int q = 1; q < n; q++)
    m = std::max(m, ival(q, i));
  return m;
}

// All-reduce with `op` (named `op_name`) at every count, in place and
// not: each rank gives val(rank, i), and every rank must get want(n, i).
template <typename T>
void allreduce_each_count(RankLog &log, hoop_comm_t comm, int rank, int n,
                          hoop_dtype_t dtype, hoop_op_t op, const char *op_name,
                          T (*val)(int, size_t), T (*want)(int, size_t)) {
  for (size_t count : kCounts) {
    for (bool in_place : {false, true}) {
      std::vector<T> send(count);
      hooptest::Guarded recv(count, sizeof(T));
      T *out = (T *)recv.data();
      T *in = in_place ? out : send.data();
      for (size_t i = 0; i < count; i++)
        in[i] = val(rank, i);
      RANK_EXPECT_OK(log, comm,
                     hoop_allreduce(comm, in, out, count, dtype, op, nullptr));
      std::string what = std::string("allreduce ") + op_name + " of " +
                         std::to_string(count) + (in_place ? " in place" : "");
      EXPECT_ALL(
          log, what.c_str(), out, count,
          std::function<T(size_t)>([n, want](size_t i) { return want(n, i); }));
      RANK_EXPECT(log, recv.guards_intact(), "%s wrote out of bounds",
                  what.c_str());
    }
  }
}

void allreduce_sum(RankLog &log, hoop_comm_t comm, int rank, int n) {
  allreduce_each_count(log, comm, rank, n, HOOP_F32, HOOP_SUM, "sum", fval,
                       fsum);
}

void allreduce_max(RankLog &log, hoop_comm_t comm, int rank, int n) {
  allreduce_each_count(log, comm, rank, n, HOOP_I32, HOOP_MAX, "max", ival,
                       imax);
}

void broadcast(RankLog &log, hoop_comm_t comm, int rank, int n) {
  int root = n - 1;
  for (size_t count : kCounts) {
    for (bool in_place : {false, true}) {
      std::vector<int32_t> send(count);
      hooptest::Guarded recv(count, sizeof(int32_t));
      int32_t *out = (int32_t *)recv.data();
      int32_t *in = in_place ? out : send.data();
      for (size_t i = 0; i < count; i++)
        in[i] = ival(rank, i);
      RANK_EXPECT_OK(
          log, comm,
          hoop_broadcast(comm, in, out, count, HOOP_I32, root, nullptr));
      std::string what = "broadcast of " + std::to_string(count) +
                         (in_place ? " in place" : "");
      EXPECT_ALL(log, what.c_str(), out, count,
                 std::function<int32_t(size_t)>(
                     [root](size_t i) { return ival(root, i); }));
      RANK_EXPECT(log, recv.guards_intact(), "%s wrote out of bounds",
                  what.c_str());
    }
  }
}

void reduce_scatter(RankLog &log, hoop_comm_t comm, int rank, int n) {
  for (size_t count : kCounts) {
    size_t block = block_of(count, n), total = block * (size_t)n;
    for (bool in_place : {false, true}) {
      hooptest::Guarded send(total, sizeof(float)), recv(block, sizeof(float));
      float *in = (float *)send.data();
      float *out = in_place ? in + (size_t)rank * block : (float *)recv.data();
      for (size_t i = 0; i < total; i++)
        in[i] = fval(rank, i);
      RANK_EXPECT_OK(log, comm,
                     hoop_reduce_scatter(comm, in, out, block, HOOP_F32,
                                         HOOP_SUM, nullptr));
      std::string what = "reduce_scatter of " + std::to_string(block) +
                         (in_place ? " in place" : "");
      size_t base = (size_t)rank * block;
      EXPECT_ALL(log, what.c_str(), out, block,
                 std::function<float(size_t)>(
                     [n, base](size_t i) { return fsum(n, base + i); }));
      RANK_EXPECT(log, send.guards_intact() && recv.guards_intact(),
                  "%s wrote out of bounds", what.c_str());
    }
  }
}

void allgather(RankLog &log, hoop_comm_t comm, int rank, int n) {
  for (size_t count : kCounts) {
    size_t block = block_of(count, n), total = block * (size_t)n;
    for (bool in_place : {false, true}) {
      std::vector<int32_t> send(block);
      hooptest::Guarded recv(total, sizeof(int32_t));
      int32_t *out = (int32_t *)recv.data();
      int32_t *in = in_place ? out + (size_t)rank * block : send.data();
      for (size_t i = 0; i < block; i++)
        in[i] = ival(rank, i);
      RANK_EXPECT_OK(log, comm,
                     hoop_allgather(comm, in, out, block, HOOP_I32, nullptr));
      std::string what = "allgather of " + std::to_string(block) +
                         (in_place ? " in place" : "");
      EXPECT_ALL(log, what.c_str(), out, total,
                 std::function<int32_t(size_t)>([block](size_t i) {
                   return ival((int)(i / block), i % block);
                 }));
      RANK_EXPECT(log, recv.guards_intact(), "%s wrote out of bounds",
                  what.c_str());
    }
  }
}

// Element i of the block rank `from` sends rank `to`.
int32_t aval(int from, int to, size_t i) { return ival(from * 16 + to, i); }

void alltoall(RankLog &log, hoop_comm_t comm, int rank, int n) {
  for (size_t count : kCounts) {
    size_t block = block_of(count, n), total = block * (size_t)n;
    std::vector<int32_t> send(total);
    hooptest::Guarded recv(total, sizeof(int32_t));
    int32_t *out = (int32_t *)recv.data();
    for (size_t i = 0; i < total; i++)
      send[i] = aval(rank, (int)(i / block), i % block);
    RANK_EXPECT_OK(
        log, comm,
        hoop_alltoall(comm, send.data(), out, block, HOOP_I32, nullptr));
    std::string what = "alltoall of " + std::to_string(block);
    EXPECT_ALL(log, what.c_str(), out, total,
               std::function<int32_t(size_t)>([rank, block](size_t i) {
                 return aval((int)(i / block), rank, i % block);
               }));
    RANK_EXPECT(log, recv.guards_intact(), "%s wrote out of bounds",
                what.c_str());
  }
}

// Each rank sends to the next and receives from the one before, a rank
// alone to itself.
void sendrecv(RankLog &log, hoop_comm_t comm, int rank, int n) {
  int to = (rank + 1) % n, from = (rank + n - 1) % n;
  for (size_t count : kCounts) {
    std::vector<int32_t> send(count);
    hooptest::Guarded recv(count, sizeof(int32_t));
    int32_t *out = (int32_t *)recv.data();
    for (size_t i = 0; i < count; i++)
      send[i] = aval(rank, to, i);
    RANK_EXPECT_OK(log, comm, hoop_group_start());
    RANK_EXPECT_OK(log, comm,
                   hoop_send(comm, send.data(), count, HOOP_I32, to, nullptr));
    RANK_EXPECT_OK(log, comm,
                   hoop_recv(comm, out, count, HOOP_I32, from, nullptr));
    RANK_EXPECT_OK(log, comm, hoop_group_end());
    std::string what = "send/recv of " + std::to_string(count);
    EXPECT_ALL(log, what.c_str(), out, count,
               std::function<int32_t(size_t)>(
                   [from, rank](size_t i) { return aval(from, rank, i); }));
    RANK_EXPECT(log, recv.guards_intact(), "%s wrote out of bounds",
                what.c_str());
  }
}

struct Case {
  const char *name;
  void (*fn)(RankLog &, hoop_comm_t, int, int);
};

const Case kCases[] = {
    {"AllreduceSumF32", allreduce_sum},
    {"AllreduceMaxI32", allreduce_max},
    {"Broadcast", broadcast},
    {"ReduceScatter", reduce_scatter},
    {"Allgather", allgather},
    {"Alltoall", alltoall},
    {"SendRecv", sendrecv},
};

class IbCollectives : public ::testing::TestWithParam<std::tuple<int, size_t>> {
};

// Counts 0, 1, 1001 and past the ring, in place and not, against
// references computed here.
TEST_P(IbCollectives, MatchTheReference) {
  int nranks = std::get<0>(GetParam());
  const Case &c = kCases[std::get<1>(GetParam())];
  run_ib(nranks, c.fn);
}

INSTANTIATE_TEST_SUITE_P(
    Fake, IbCollectives,
    ::testing::Combine(::testing::Values(1, 2, 3, 8),
                       ::testing::Range<size_t>(0, std::size(kCases))),
    [](const ::testing::TestParamInfo<std::tuple<int, size_t>> &param) {
      return std::string(kCases[std::get<1>(param.param)].name) + "_" +
             std::to_string(std::get<0>(param.param)) + "ranks";
    });

// The smallest ring there is (two slots of 4 KiB): every call of more
// than 8 KiB waits on credit many times.
TEST(IbCollectivesSmallRing, CreditsCycleManyTimes) {
  IbRun run;
  run.env = {{"HOOP_SHM_SLOT_BYTES", "4096"}, {"HOOP_SHM_SLOTS", "2"}};
  run_ib(
      3,
      [](RankLog &log, hoop_comm_t comm, int rank, int n) {
        allreduce_sum(log, comm, rank, n);
        alltoall(log, comm, rank, n);
        sendrecv(log, comm, rank, n);
      },
      run);
}

// Every wait sleeps at once (no spinning, no yielding), so each one goes
// through arm: completions taken, the next event asked for, the queue
// polled again, and poll() on the epoll descriptor.  A wake-up lost
// between those steps leaves a rank asleep until the timeout fails it.
TEST(IbCollectivesSleeping, EveryWaitSleepsInPollAndIsWoken) {
  IbRun run;
  run.env = {{"HOOP_SPIN_US", "0"},
             {"HOOP_YIELD_US", "0"},
             {"HOOP_SHM_SLOT_BYTES", "4096"},
             {"HOOP_SHM_SLOTS", "2"},
             {"HOOP_TIMEOUT_MS", "20000"}};
  for (int n : {2, 3}) {
    run_ib(
        n,
        [](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
          allreduce_sum(log, comm, rank, nranks);
          allgather(log, comm, rank, nranks);
          sendrecv(log, comm, rank, nranks);
        },
        run);
  }
}

// Two channels per pair of ranks: a queue pair each.
TEST(IbCollectivesChannels, TwoChannelsPerPeer) {
  IbRun run;
  run.env = {{"HOOP_NSOCKS", "2"}};
  run_ib(
      3,
      [](RankLog &log, hoop_comm_t comm, int rank, int n) {
        allreduce_sum(log, comm, rank, n);
        allgather(log, comm, rank, n);
      },
      run);
}

// The engine arms a connection's receive link and then its send link
// before it sleeps.  A completion that lands in between raises the event
// the send link's arm then consumes; if that arm took the completion
// without saying so, the rank slept on bytes it had, until poll's cap.
TEST(IbArm, ACompletionTakenByTheOtherLinkMakesTheEngineLookAgain) {
  hoop__ib_set_verbs(V());
  hoop_rdma_port port{};
  port.status = HOOP_RDMA_PORT;
  port.port = 1;
  port.state = HOOP_PORT_ACTIVE;
  port.link_layer = HOOP_LINK_IB;
  snprintf(port.device, sizeof port.device, "fake0");
  {
    hooptest::ConnPair pair;
    hooptest::connect_pair(hoop__ib_transport, pair, &port);
    ASSERT_TRUE(pair.error.empty()) << pair.error;
    bool ready = false;
    hooptest::arm_both_links_in_turn(pair, &ready);
    EXPECT_TRUE(ready) << "the send link's arm took the receive link's "
                          "completion and let the engine sleep";
  }
  hoop__ib_set_verbs(nullptr);
}

// A rank destroys its communicator as soon as its last call returned,
// while its peer may still be finishing the same call: returning the
// credit for the last bytes it read, which the destroyed queue pair
// cannot take.  The peer's call has everything it needs and must not
// fail for that.  Ten rounds, since in only some does the destroy come
// before the peer's last credit write.
TEST(IbTeardown, ADestroyRightAfterTheLastCallLeavesThePeersCallWhole) {
  for (int round = 0; round < 10; round++)
    run_ib(2, allgather);
}

// ---- failures ---------------------------------------------------------

const int kTimeoutMs = 3000;

// A short HOOP_TIMEOUT_MS, so that a rank that waits in vain gives up
// soon, and `beside` on the child's main thread.
IbRun failing(const std::function<void()> &beside = nullptr) {
  static const std::string timeout = std::to_string(kTimeoutMs);
  IbRun run;
  run.env = {{"HOOP_TIMEOUT_MS", timeout.c_str()}};
  run.beside = beside;
  run.timeout_s = 120;
  return run;
}

// What the ranks of a failure test saw, each writing its own entries.
struct Calls {
  std::atomic<int> done[8] = {}; // calls that succeeded
  std::string why[8];            // the failed call's error
  long long failed_ms[8] = {};   // how long the failed call took
};

// Calls all-reduce until one fails, or `most` calls succeeded: false
// then.  A minute without failure is a failure of the test.
bool allreduce_until_failure(RankLog &log, hoop_comm_t comm, int rank,
                             Calls &calls, int most = 1 << 30) {
  std::vector<float> buf(256 * 1024 / 4, 1.0f);
  auto start = std::chrono::steady_clock::now();
  while (calls.done[rank] < most) {
    auto call = std::chrono::steady_clock::now();
    hoop_result_t res = hoop_allreduce(comm, buf.data(), buf.data(), buf.size(),
                                       HOOP_F32, HOOP_MAX, nullptr);
    auto now = std::chrono::steady_clock::now();
    if (res != HOOP_SUCCESS) {
      calls.why[rank] = hoop_comm_last_error(comm);
      calls.failed_ms[rank] =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - call)
              .count();
      return true;
    }
    calls.done[rank]++;
    if (now - start > std::chrono::seconds(60)) {
      log.fail("no call failed within 60 s");
      return false;
    }
  }
  return false;
}

// Waits until each of the first `nranks` ranks has made `n` calls.
void await_calls(const Calls &calls, int nranks, int n) {
  for (int r = 0; r < nranks; r++)
    while (calls.done[r] < n)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void expect_named(RankLog &log, const Calls &calls, int rank,
                  const std::string &name) {
  RANK_EXPECT(log, calls.why[rank].find(name) != std::string::npos,
              "the error does not name %s: %s", name.c_str(),
              calls.why[rank].c_str());
}

// A rank's host dies in the middle of a call (its endpoints are killed
// while every rank is in a loop of all-reduces): every other rank's call
// fails, well within a few timeouts, saying which rank it lost.
TEST(IbFailures, ADeadRankFailsEveryOtherRanksCallNamingIt) {
  const int n = 4, victim = 2;
  Calls calls;
  run_ib(
      n,
      [&](RankLog &log, hoop_comm_t comm, int rank, int) {
        bool failed = allreduce_until_failure(log, comm, rank, calls);
        if (rank == victim || !failed)
          return;
        expect_named(log, calls, rank, "rank " + std::to_string(victim));
        RANK_EXPECT(log, calls.failed_ms[rank] < 3 * kTimeoutMs,
                    "it failed only after %lld ms: %s", calls.failed_ms[rank],
                    calls.why[rank].c_str());
      },
      failing([&] {
        await_calls(calls, n, 3);
        hooptest::fake_verbs_kill_rank(victim);
      }));
}

// A rank stops between calls and its host dies: the others' next call
// fails naming it.  It destroys its communicator once they have failed.
TEST(IbFailures, ARankThatStopsAndDiesIsNamedByTheOthers) {
  const int n = 3, victim = 1;
  Calls calls;
  std::atomic<int> failed{0};
  run_ib(
      n,
      [&](RankLog &log, hoop_comm_t comm, int rank, int nranks) {
        if (rank == victim) {
          RANK_EXPECT(log, !allreduce_until_failure(log, comm, rank, calls, 5),
                      "a call failed before it died: %s",
                      calls.why[rank].c_str());
          hooptest::fake_verbs_kill_rank(victim);
          while (failed < nranks - 1)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          return;
        }
        if (allreduce_until_failure(log, comm, rank, calls))
          expect_named(log, calls, rank, "rank " + std::to_string(victim));
        failed++;
      },
      failing());
}

// A rank aborts its communicator between calls, closing its connections:
// the others' calls fail at once, naming it.
TEST(IbFailures, AnAbortedRankFailsTheOthersCallsNamingIt) {
  const int n = 3, victim = 1;
  Calls calls;
  run_ib(
      n,
      [&](RankLog &log, hoop_comm_t &comm, int rank, int) {
        if (rank == victim) {
          RANK_EXPECT(log, !allreduce_until_failure(log, comm, rank, calls, 3),
                      "a call failed before the abort: %s",
                      calls.why[rank].c_str());
          hoop_comm_abort(comm);
          comm = nullptr;
          return;
        }
        if (!allreduce_until_failure(log, comm, rank, calls))
          return;
        expect_named(log, calls, rank, "rank " + std::to_string(victim));
        RANK_EXPECT(log, calls.failed_ms[rank] < kTimeoutMs,
                    "it failed only after %lld ms: %s", calls.failed_ms[rank],
                    calls.why[rank].c_str());
      },
      failing());
}

// The port goes down under every rank: their calls fail naming it.
TEST(IbFailures, APortGoingDownFailsTheCallsNamingThePort) {
  const int n = 3;
  Calls calls;
  run_ib(
      n,
      [&](RankLog &log, hoop_comm_t comm, int rank, int) {
        if (!allreduce_until_failure(log, comm, rank, calls))
          return;
        expect_named(log, calls, rank, "port 1 of fake0 went down");
        RANK_EXPECT(log, calls.failed_ms[rank] < kTimeoutMs,
                    "it failed only after %lld ms: %s", calls.failed_ms[rank],
                    calls.why[rank].c_str());
      },
      failing([&] {
        await_calls(calls, n, 3);
        hooptest::fake_verbs_port_down();
      }));
}

} // namespace
