// The parsers of everything that reaches a rank from outside (core/wire.h,
// transport/shm.h): a well-formed message passes, and each field taken out
// of its bounds alone is refused, saying why.  tests/fuzz throws random
// bytes at the same functions.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <functional>
#include <utility>
#include <string>
#include <vector>

extern "C" {
#include "core/comm.h"
#include "core/conn.h"
#include "core/engine.h"
#include "core/wire.h"
#include "transport/shm.h"
}

namespace {

hoop_peer_info good_info(int rank) {
  hoop_peer_info p{};
  p.addr.family = AF_INET;
  p.addr.port = 4000;
  p.addr.ip[0] = 127;
  p.addr.ip[3] = 1;
  p.rank = rank;
  p.pid = 77;
  strcpy(p.hostname, "node7");
  hoop__transports_publish(&p);
  return p;
}

hoop_hello good_hello() {
  hoop_hello h{};
  h.magic = HOOP_WIRE_MAGIC;
  h.version = HOOP_WIRE_VERSION;
  h.comm_id = 42;
  h.rank = 2;
  h.nranks = 4;
  h.info = good_info(2);
  return h;
}

bool hello_ok(const hoop_hello &h) {
  hoop_hello out;
  char why[200];
  return hoop__hello_parse(&h, sizeof h, &out, why, sizeof why);
}

// For a data listener of 4 ranks and 2 channels, which takes notices too.
bool handshake_ok(const hoop_handshake &h) {
  hoop_handshake out;
  char why[200];
  return hoop__handshake_parse(&h, sizeof h, 4, HOOP_NOTICE_CHANNEL, 1, &out,
                               why, sizeof why);
}

bool header_ok(const hoop_wire_header &h) {
  hoop_wire_header out;
  char why[200];
  return hoop__wire_header_parse(&h, sizeof h, &out, why, sizeof why);
}

bool offer_ok(const hoop_shm_offer &o) {
  hoop_shm_offer out;
  char why[200];
  return hoop__shm_offer_parse(&o, sizeof o, &out, why, sizeof why);
}

// Each spoiler takes one field of a good message out of bounds.
template <typename T>
void expect_each_refused(
    const T &good, bool (*ok)(const T &),
    const std::vector<std::pair<const char *, std::function<void(T &)>>>
        &spoilers) {
  EXPECT_TRUE(ok(good)) << "the well-formed message";
  for (const auto &s : spoilers) {
    T bad = good;
    s.second(bad);
    EXPECT_FALSE(ok(bad)) << s.first;
  }
}

} // namespace

TEST(Wire, HelloFieldsAreBounded) {
  expect_each_refused<hoop_hello>(
      good_hello(), hello_ok,
      {{"magic", [](hoop_hello &h) { h.magic++; }},
       {"version", [](hoop_hello &h) { h.version++; }},
       {"size 0", [](hoop_hello &h) { h.nranks = 0; }},
       {"size 2^31-1", [](hoop_hello &h) { h.nranks = 0x7fffffff; }},
       {"rank 2^30-1", [](hoop_hello &h) { h.rank = (1 << 30) - 1; }},
       {"rank -1", [](hoop_hello &h) { h.rank = -1; }},
       {"rank = size", [](hoop_hello &h) { h.rank = h.nranks; }},
       {"info of another rank", [](hoop_hello &h) { h.info.rank = 3; }},
       {"address family", [](hoop_hello &h) { h.info.addr.family = 99; }},
       {"port 0", [](hoop_hello &h) { h.info.addr.port = 0; }},
       {"pid 0", [](hoop_hello &h) { h.info.pid = 0; }},
       {"GPUs < 0", [](hoop_hello &h) { h.info.cuda_devices = -1; }},
       {"a transport of another name",
        [](hoop_hello &h) { h.info.blobs[0].transport[0] ^= 1; }},
       {"a transport this build lacks",
        [](hoop_hello &h) {
          strcpy(h.info.blobs[HOOP_MAX_TRANSPORTS - 1].transport, "xyz");
        }},
       {"a transport's bytes past their room",
        [](hoop_hello &h) { h.info.blobs[0].len = HOOP_BLOB_BYTES + 1; }},
       {"a transport's bytes of another length",
        [](hoop_hello &h) { h.info.blobs[0].len += 1; }},
       {"a transport's bytes of another version",
        [](hoop_hello &h) { h.info.blobs[0].data[0] ^= 0x40; }},
       {"host name without its end", [](hoop_hello &h) {
          memset(h.info.hostname, 'A', sizeof h.info.hostname);
        }}});
  hoop_hello h = good_hello(), out;
  char why[200];
  EXPECT_FALSE(hoop__hello_parse(&h, sizeof h - 1, &out, why, sizeof why));
  EXPECT_NE(strstr(why, "bytes"), nullptr) << why;
}

TEST(Wire, PeerTableChecksEveryEntry) {
  std::vector<hoop_peer_info> table = {good_info(0), good_info(1),
                                       good_info(2)};
  std::vector<hoop_peer_info> out(3);
  char why[200];
  size_t bytes = table.size() * sizeof table[0];
  EXPECT_TRUE(hoop__peer_table_parse(table.data(), bytes, 3, out.data(), why,
                                     sizeof why));
  EXPECT_FALSE(hoop__peer_table_parse(table.data(), bytes, 4, out.data(),
                                      why, sizeof why));
  table[2].rank = 1;
  EXPECT_FALSE(hoop__peer_table_parse(table.data(), bytes, 3, out.data(),
                                      why, sizeof why));
  table[2] = good_info(2);
  memset(table[2].hostname, 'C', sizeof table[2].hostname);
  EXPECT_FALSE(hoop__peer_table_parse(table.data(), bytes, 3, out.data(),
                                      why, sizeof why));
  EXPECT_NE(strstr(why, "rank 2's host name"), nullptr) << why;
}

TEST(Wire, ReplyStatusIsAResultAndItsTextEnds) {
  hoop_reply r{}, out;
  char why[200];
  r.status = HOOP_ERR_MISMATCH;
  memset(r.message, 'm', sizeof r.message);
  r.message[3] = '\n';
  ASSERT_TRUE(hoop__reply_parse(&r, sizeof r, &out, why, sizeof why));
  EXPECT_EQ(strlen(out.message), sizeof out.message - 1);
  EXPECT_EQ(out.message[3], '?');
  r.status = 11;
  EXPECT_FALSE(hoop__reply_parse(&r, sizeof r, &out, why, sizeof why));
  r.status = -1;
  EXPECT_FALSE(hoop__reply_parse(&r, sizeof r, &out, why, sizeof why));
}

// A successful reply places its rank in the job as it formed: a rank
// other than 0 and below a count of at most HOOP_MAX_RANKS.  A failure's
// place means nothing and is not checked.
TEST(Wire, ReplyPlaceIsARankOfTheJob) {
  hoop_reply r{}, out;
  char why[200];
  r.status = HOOP_SUCCESS;
  r.nranks = 3;
  r.rank = 2;
  ASSERT_TRUE(hoop__reply_parse(&r, sizeof r, &out, why, sizeof why)) << why;
  EXPECT_EQ(out.nranks, 3);
  EXPECT_EQ(out.rank, 2);
  for (auto bad : {std::pair<int, int>{3, 3}, {3, 0}, {3, -1}, {0, 0},
                   {HOOP_MAX_RANKS + 1, 1}}) {
    r.nranks = bad.first;
    r.rank = bad.second;
    EXPECT_FALSE(hoop__reply_parse(&r, sizeof r, &out, why, sizeof why))
        << bad.second << " of " << bad.first;
    EXPECT_NE(strstr(why, "makes this rank"), nullptr) << why;
  }
  r.status = HOOP_ERR_TIMEOUT;
  EXPECT_TRUE(hoop__reply_parse(&r, sizeof r, &out, why, sizeof why)) << why;
}

TEST(Wire, HandshakeRanksAndChannelAreBounded) {
  hoop_handshake good{};
  good.magic = HOOP_WIRE_MAGIC;
  good.version = HOOP_WIRE_VERSION;
  good.comm_id = 42;
  good.from = 0;
  good.to = 1;
  hoop_handshake notice = good;
  notice.channel = HOOP_NOTICE_CHANNEL;
  EXPECT_TRUE(handshake_ok(notice));
  notice.kind = HOOP_NOTICE_EXCLUDED;
  EXPECT_TRUE(handshake_ok(notice));
  notice.kind = HOOP_NOTICE_EXCLUDED + 1;
  EXPECT_FALSE(handshake_ok(notice));
  expect_each_refused<hoop_handshake>(
      good, handshake_ok,
      {{"magic", [](hoop_handshake &h) { h.magic = 0; }},
       {"version", [](hoop_handshake &h) { h.version = 1; }},
       {"from = size", [](hoop_handshake &h) { h.from = 4; }},
       {"from < 0", [](hoop_handshake &h) { h.from = -3; }},
       {"to 2^30", [](hoop_handshake &h) { h.to = 1 << 30; }},
       {"to self", [](hoop_handshake &h) { h.to = h.from; }},
       {"channel = nsocks", [](hoop_handshake &h) { h.channel = 2; }},
       {"the rendezvous's channel",
        [](hoop_handshake &h) { h.channel = HOOP_RENDEZVOUS_CHANNEL; }},
       {"a notice's kind on a data channel",
        [](hoop_handshake &h) { h.kind = HOOP_NOTICE_EXCLUDED; }}});
}

bool join_reply_ok(const hoop_join_reply &r) {
  hoop_join_reply out;
  char why[200];
  return hoop__join_reply_parse(&r, sizeof r, 64, &out, why, sizeof why);
}

TEST(Wire, JoinReplyPlacesTheNewcomerAfterAMember) {
  hoop_join_reply good{};
  good.status = HOOP_SUCCESS;
  good.nranks = 4;
  good.rank = 3;
  hoop_join_reply refused{};
  refused.status = HOOP_ERR_MISMATCH;
  EXPECT_TRUE(join_reply_ok(refused));
  expect_each_refused<hoop_join_reply>(
      good, join_reply_ok,
      {{"status past the last result",
        [](hoop_join_reply &r) { r.status = HOOP_ERR_INTERNAL + 1; }},
       {"negative status", [](hoop_join_reply &r) { r.status = -1; }},
       {"rank 0, a member's", [](hoop_join_reply &r) { r.rank = 0; }},
       {"rank = size", [](hoop_join_reply &r) { r.rank = 4; }},
       {"one rank", [](hoop_join_reply &r) { r.nranks = 1; }},
       {"more ranks than allowed", [](hoop_join_reply &r) { r.nranks = 65; }}});
  hoop_join_reply shown = good, out;
  memset(shown.message, '\a', sizeof shown.message);
  char why[200];
  ASSERT_TRUE(hoop__join_reply_parse(&shown, sizeof shown, 64, &out, why,
                                     sizeof why));
  EXPECT_EQ(out.message[0], '?');
  EXPECT_EQ(out.message[sizeof out.message - 1], '\0');
  EXPECT_FALSE(hoop__join_reply_parse(&good, sizeof good - 1, 64, &out, why,
                                      sizeof why));
}

TEST(Wire, NoticeTextEndsAndShowsNoControlCharacters) {
  char text[HOOP_NOTICE_BYTES], reason[64];
  memset(text, 'r', sizeof text);
  text[0] = '\033';
  hoop__notice_parse(text, sizeof text, reason, sizeof reason);
  EXPECT_EQ(strlen(reason), sizeof reason - 1);
  EXPECT_EQ(reason[0], '?');
  hoop__notice_parse("why\0later", 9, reason, sizeof reason);
  EXPECT_STREQ(reason, "why");
}

bool whereabouts_ok(const hoop_whereabouts &w) {
  hoop_whereabouts out;
  char why[200];
  return hoop__whereabouts_parse(&w, sizeof w, 4, &out, why, sizeof why);
}

TEST(Wire, WhereaboutsStateRanksAndCallAreBounded) {
  hoop_whereabouts good{};
  good.magic = HOOP_WIRE_MAGIC;
  good.state = HOOP_AT_CALL;
  good.seq = 7;
  good.wait_for = 3;
  good.wait_send = 1;
  good.wait_ms = 1200;
  strcpy(good.call, "hoop_allreduce");
  hoop_whereabouts idle = good;
  idle.wait_for = -1;
  EXPECT_TRUE(whereabouts_ok(idle));
  expect_each_refused<hoop_whereabouts>(
      good, whereabouts_ok,
      {{"magic", [](hoop_whereabouts &w) { w.magic = 0; }},
       {"state", [](hoop_whereabouts &w) { w.state = HOOP_AT_COUNT; }},
       {"waits for rank = size", [](hoop_whereabouts &w) { w.wait_for = 4; }},
       {"waits for rank -2", [](hoop_whereabouts &w) { w.wait_for = -2; }},
       {"direction 2", [](hoop_whereabouts &w) { w.wait_send = 2; }},
       {"negative wait", [](hoop_whereabouts &w) { w.wait_ms = -1; }},
       {"call without its end",
        [](hoop_whereabouts &w) { memset(w.call, 'c', sizeof w.call); }},
       {"in_plan 2", [](hoop_whereabouts &w) { w.in_plan = 2; }},
       {"a plan without a header", [](hoop_whereabouts &w) { w.in_plan = 1; }},
       {"more lost than it holds",
        [](hoop_whereabouts &w) { w.nlost = HOOP_SHRINK_MAX_LOST + 1; }},
       {"a negative count of lost", [](hoop_whereabouts &w) { w.nlost = -1; }},
       {"lost rank = size",
        [](hoop_whereabouts &w) {
          w.nlost = 2;
          w.lost[1] = 4;
        }},
       {"decided 2", [](hoop_whereabouts &w) { w.decided = 2; }}});
  hoop_whereabouts shrinking = good;
  shrinking.state = HOOP_AT_SHRINKING;
  shrinking.nlost = HOOP_SHRINK_MAX_LOST;
  shrinking.decided = 1;
  EXPECT_TRUE(whereabouts_ok(shrinking));
  hoop_whereabouts planned = good;
  planned.in_plan = 1;
  planned.plan.magic = HOOP_WIRE_MAGIC;
  planned.plan.version = HOOP_WIRE_VERSION;
  planned.plan.coll = HOOP_COLL_BROADCAST;
  planned.plan.nchannels = 1;
  EXPECT_TRUE(whereabouts_ok(planned));
  planned.plan.algo = HOOP_ALGO_COUNT;
  EXPECT_FALSE(whereabouts_ok(planned));
  hoop_whereabouts shown = good, out;
  shown.call[0] = '\n';
  char why[200];
  ASSERT_TRUE(
      hoop__whereabouts_parse(&shown, sizeof shown, 4, &out, why, sizeof why));
  EXPECT_EQ(out.call[0], '?');
  EXPECT_FALSE(hoop__whereabouts_parse(&good, sizeof good - 1, 4, &out, why,
                                       sizeof why));
}

TEST(Wire, CollectiveHeaderEnumsAreBounded) {
  hoop_wire_header good{};
  good.magic = HOOP_WIRE_MAGIC;
  good.version = HOOP_WIRE_VERSION;
  good.coll = HOOP_COLL_ALLREDUCE;
  good.dtype = HOOP_F32;
  good.op = HOOP_SUM;
  good.algo = HOOP_ALGO_RING;
  good.nchannels = 1;
  expect_each_refused<hoop_wire_header>(
      good, header_ok,
      {{"magic", [](hoop_wire_header &h) { h.magic = 1; }},
       {"collective 0", [](hoop_wire_header &h) { h.coll = 0; }},
       {"collective past the last",
        [](hoop_wire_header &h) { h.coll = HOOP_COLL_COUNT; }},
       {"dtype", [](hoop_wire_header &h) { h.dtype = HOOP_DTYPE_COUNT; }},
       {"op", [](hoop_wire_header &h) { h.op = 200; }},
       {"algorithm", [](hoop_wire_header &h) { h.algo = HOOP_ALGO_COUNT; }},
       {"no channel", [](hoop_wire_header &h) { h.nchannels = 0; }},
       {"too many channels",
        [](hoop_wire_header &h) { h.nchannels = HOOP_MAX_NSOCKS + 1; }}});
}

TEST(Wire, ShmOfferSizesCannotWrap) {
  hoop_shm_offer good{};
  strcpy(good.name, "/hoop-12-00000000000000aa-0-1-0-deadbeef");
  good.slot_bytes = 256 * 1024;
  good.ring_bytes = 8 * good.slot_bytes;
  good.segment_bytes = 4096 + 2 * good.ring_bytes;
  expect_each_refused<hoop_shm_offer>(
      good, offer_ok,
      {{"ring 2^63 + 4096",
        [](hoop_shm_offer &o) {
          o.ring_bytes = (1ULL << 63) + 4096;
          o.slot_bytes = 4096;
          o.segment_bytes = 4096 + 2 * o.ring_bytes;
        }},
       {"slot 2^62",
        [](hoop_shm_offer &o) {
          o.slot_bytes = 1ULL << 62;
          o.ring_bytes = 2 * o.slot_bytes;
          o.segment_bytes = 4096 + 2 * o.ring_bytes;
        }},
       {"one slot",
        [](hoop_shm_offer &o) {
          o.ring_bytes = o.slot_bytes;
          o.segment_bytes = 4096 + 2 * o.ring_bytes;
        }},
       {"slot not a multiple of 64",
        [](hoop_shm_offer &o) { o.slot_bytes += 1; }},
       {"segment size", [](hoop_shm_offer &o) { o.segment_bytes += 64; }},
       {"name without its end",
        [](hoop_shm_offer &o) { memset(o.name, 'h', sizeof o.name); }},
       {"name elsewhere", [](hoop_shm_offer &o) { o.name[1] = 'x'; }},
       {"name with a slash", [](hoop_shm_offer &o) { o.name[8] = '/'; }}});
}
