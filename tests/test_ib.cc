// The RDMA verbs transport's phase 1 (transport/rdma.h, transport/ib.h): its
// settings, the HOOP_IB_HCA filter, the choice of GID, when a rank looks
// for its ports, whether two ranks' ports can be joined and why not, the
// connection information's parser, discovery where there are devices,
// HOOP_TRANSPORT=ib failing hoop_comm_init where ib cannot be used, and
// the real verbs table refusing a device that is not there.  All but
// discovery run from tables, so they need no RDMA device.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"

extern "C" {
#include "core/comm.h"
#include "transport/rdma.h"
#include "core/wire.h"
#include "hoop_build_config.h"
#include "transport/ib.h"
#include "transport/ib_verbs.h"
#include "transport/transport.h"
}

using hooptest::RankLog;
using hooptest::RunOptions;
using hooptest::RunResult;
using hooptest::run_ranks;

namespace {

struct SettingsResult {
  bool ok;
  hoop_rdma_settings s;
  std::string why;
};

SettingsResult parse(const hoop_rdma_setting_texts &t) {
  SettingsResult r{};
  char why[400] = "";
  r.ok = hoop__rdma_settings_parse(&t, &r.s, why, sizeof why);
  r.why = why;
  return r;
}

// The texts with one variable, named as in the environment, set.
hoop_rdma_setting_texts with(const std::string &env, const char *text) {
  hoop_rdma_setting_texts t{};
  if (env == "HOOP_IB_HCA")
    t.hca = text;
  else if (env == "HOOP_IB_GID_INDEX")
    t.gid_index = text;
  else if (env == "HOOP_IB_TIMEOUT")
    t.timeout = text;
  else if (env == "HOOP_IB_RETRY_CNT")
    t.retry_cnt = text;
  else if (env == "HOOP_IB_SL")
    t.sl = text;
  else if (env == "HOOP_IB_TC")
    t.tc = text;
  return t;
}

hoop_rdma_gid gid(int index, int type, std::vector<uint8_t> raw) {
  hoop_rdma_gid g{};
  g.index = (uint8_t)index;
  g.type = (uint8_t)type;
  memcpy(g.raw, raw.data(), raw.size() < 16 ? raw.size() : 16);
  return g;
}

const std::vector<uint8_t> kLinkLocal = {0xfe, 0x80, 0, 0, 0, 0, 0, 0,
                                         2,    0,    0, 0, 0, 0, 0, 1};
std::vector<uint8_t> ipv4(uint8_t last) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last};
}
std::vector<uint8_t> ib_gid(uint8_t subnet, uint8_t guid) {
  return {0xfe, 0x80, 0, 0, 0, 0, 0, subnet, 0, 0, 0, 0, 0, 0, 0, guid};
}

// A port as discovery would find it; gids in index order.
hoop_rdma_local_port port(const char *device, int num, int link_layer,
                          std::vector<hoop_rdma_gid> gids,
                          int state = HOOP_PORT_ACTIVE) {
  hoop_rdma_local_port p{};
  snprintf(p.device, sizeof p.device, "%s", device);
  p.port = (uint8_t)num;
  p.state = (uint8_t)state;
  p.link_layer = (uint8_t)link_layer;
  p.mtu = 3;
  p.lid = link_layer == HOOP_LINK_IB ? 7 : 0;
  p.ngids = (int)gids.size();
  for (size_t i = 0; i < gids.size(); i++)
    p.gids[i] = gids[i];
  return p;
}

// A RoCE port with the usual four GIDs: link-local and IPv4, v1 and v2.
hoop_rdma_local_port roce(const char *device, uint8_t ip) {
  return port(device, 1, HOOP_LINK_ETH,
              {gid(0, HOOP_GID_ROCE_V1, kLinkLocal),
               gid(1, HOOP_GID_ROCE_V2, kLinkLocal),
               gid(2, HOOP_GID_ROCE_V1, ipv4(ip)),
               gid(3, HOOP_GID_ROCE_V2, ipv4(ip))});
}

hoop_rdma_local_port infiniband(const char *device, uint8_t subnet,
                                uint8_t guid) {
  return port(device, 1, HOOP_LINK_IB,
              {gid(0, HOOP_GID_IB, ib_gid(subnet, guid))});
}

hoop_rdma_port published(const hoop_rdma_local_port &p, int gid_index = -1) {
  hoop_rdma_port r;
  hoop__rdma_describe(&p, gid_index, &r);
  return r;
}

hoop_rdma_port status_only(int status) {
  hoop_rdma_port r{};
  r.status = (uint8_t)status;
  return r;
}

// Puts `port` where ib's bytes go in a rank's published info, as ib's
// own publish would.
void set_ib_port(hoop_peer_info &info, const hoop_rdma_port &port) {
  for (int i = 0; hoop__transports[i] != nullptr; i++) {
    if (hoop__transports[i] == &hoop__ib_transport)
      info.blobs[i].len = (uint16_t)hoop__ib_blob_encode(
          &port, 1, info.blobs[i].data, sizeof info.blobs[i].data);
  }
}

// What this process would publish, looked up in a child so that the
// environment `setup` makes (and hoop__rdma_probe_always) stay there:
// "<status>: <why>".
std::string publish_in_child(const std::function<void()> &setup) {
  return hooptest::ask_in_child([&setup] {
    setup();
    hoop_rdma_port mine;
    char why[400] = "";
    hoop__rdma_publish(&mine, why, sizeof why);
    return std::to_string(mine.status) + ": " + why;
  });
}

std::string status_prefix(int status) {
  return std::to_string(status) + ": ";
}

std::string select_why(const hoop_rdma_port &a, const hoop_rdma_port &b,
                       bool *ok) {
  char why[400] = "";
  *ok = hoop__ib_select(&a, 0, &b, 1, why, sizeof why);
  return why;
}

}  // namespace

TEST(IbSettings, DefaultsAreNcclsWhenUnset) {
  SettingsResult r = parse(hoop_rdma_setting_texts{});
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_EQ(r.s.hca, nullptr);
  EXPECT_EQ(r.s.gid_index, -1);
  EXPECT_EQ(r.s.timeout, 20);
  EXPECT_EQ(r.s.retry_cnt, 7);
  EXPECT_EQ(r.s.sl, 0);
  EXPECT_EQ(r.s.tc, 0);
}

TEST(IbSettings, GoodValuesAreTaken) {
  struct Case {
    const char *env, *text;
    int hoop_rdma_settings::*field;
    int want;
  };
  const Case cases[] = {
      {"HOOP_IB_GID_INDEX", "-1", &hoop_rdma_settings::gid_index, -1},
      {"HOOP_IB_GID_INDEX", "0", &hoop_rdma_settings::gid_index, 0},
      {"HOOP_IB_GID_INDEX", "255", &hoop_rdma_settings::gid_index, 255},
      {"HOOP_IB_TIMEOUT", "1", &hoop_rdma_settings::timeout, 1},
      {"HOOP_IB_TIMEOUT", "31", &hoop_rdma_settings::timeout, 31},
      {"HOOP_IB_RETRY_CNT", "0", &hoop_rdma_settings::retry_cnt, 0},
      {"HOOP_IB_RETRY_CNT", "7", &hoop_rdma_settings::retry_cnt, 7},
      {"HOOP_IB_SL", "0", &hoop_rdma_settings::sl, 0},
      {"HOOP_IB_SL", "15", &hoop_rdma_settings::sl, 15},
      {"HOOP_IB_TC", "0", &hoop_rdma_settings::tc, 0},
      {"HOOP_IB_TC", "106", &hoop_rdma_settings::tc, 106},
      {"HOOP_IB_TC", "255", &hoop_rdma_settings::tc, 255},
  };
  for (const Case &c : cases) {
    SettingsResult r = parse(with(c.env, c.text));
    ASSERT_TRUE(r.ok) << c.env << "=" << c.text << ": " << r.why;
    EXPECT_EQ(r.s.*c.field, c.want) << c.env << "=" << c.text;
  }
  for (const char *hca : {"mlx5", "mlx5_0:1", "=mlx5_0", "^mlx5_1",
                          "^=mlx5_1:2", "mlx5_0:1,mlx5_1", "rxe0:255"}) {
    SettingsResult r = parse(with("HOOP_IB_HCA", hca));
    ASSERT_TRUE(r.ok) << hca << ": " << r.why;
    EXPECT_STREQ(r.s.hca, hca);
  }
}

TEST(IbSettings, BadValuesAreRefusedByName) {
  struct Case {
    const char *env, *text, *want;
  };
  const Case cases[] = {
      {"HOOP_IB_GID_INDEX", "256", "HOOP_IB_GID_INDEX=256 is outside -1..255"},
      {"HOOP_IB_GID_INDEX", "-2", "HOOP_IB_GID_INDEX=-2 is not a whole number"},
      {"HOOP_IB_GID_INDEX", "x", "HOOP_IB_GID_INDEX=x is not a whole number"},
      {"HOOP_IB_TIMEOUT", "0", "HOOP_IB_TIMEOUT=0 is outside 1..31"},
      {"HOOP_IB_TIMEOUT", "32", "HOOP_IB_TIMEOUT=32 is outside 1..31"},
      {"HOOP_IB_TIMEOUT", "-1", "HOOP_IB_TIMEOUT=-1 is not a whole number"},
      {"HOOP_IB_TIMEOUT", "20ms", "HOOP_IB_TIMEOUT=20ms is not a whole"},
      {"HOOP_IB_RETRY_CNT", "8", "HOOP_IB_RETRY_CNT=8 is outside 0..7"},
      {"HOOP_IB_RETRY_CNT", "", "HOOP_IB_RETRY_CNT= is not a whole number"},
      {"HOOP_IB_SL", "16", "HOOP_IB_SL=16 is outside 0..15"},
      {"HOOP_IB_SL", "1K", "HOOP_IB_SL=1K is outside 0..15"},
      {"HOOP_IB_TC", "256", "HOOP_IB_TC=256 is outside 0..255"},
      {"HOOP_IB_TC", "99999999999999999999", "HOOP_IB_TC=9"},
      {"HOOP_IB_HCA", "^", "HOOP_IB_HCA=^ names no device"},
      {"HOOP_IB_HCA", "=", "HOOP_IB_HCA== names no device"},
      {"HOOP_IB_HCA", "mlx5_0,,mlx5_1", "has an empty entry"},
      {"HOOP_IB_HCA", ":1", "has an empty entry"},
      {"HOOP_IB_HCA", "mlx5_0:0", "port is not 1 to 255"},
      {"HOOP_IB_HCA", "mlx5_0:256", "port is not 1 to 255"},
      {"HOOP_IB_HCA", "mlx5_0:", "port is not 1 to 255"},
      {"HOOP_IB_HCA", "mlx5_0:1a", "port is not 1 to 255"},
      {"HOOP_IB_HCA", "mlx5_0:99999999999", "port is not 1 to 255"},
  };
  for (const Case &c : cases) {
    SettingsResult r = parse(with(c.env, c.text));
    EXPECT_FALSE(r.ok) << c.env << "=" << c.text;
    EXPECT_NE(r.why.find(c.want), std::string::npos)
        << c.env << "=" << c.text << ": " << r.why;
  }
}

TEST(IbSettings, TheEnvironmentIsReadInAFreshProcess) {
  std::string got = hooptest::ask_in_child([] {
    setenv("HOOP_IB_SL", "3", 1);
    setenv("HOOP_IB_TIMEOUT", "40", 1);
    hoop_rdma_settings s;
    char why[400] = "";
    bool ok = hoop__rdma_settings_read(&s, why, sizeof why);
    return std::string(ok ? "ok" : "refused") + ": " + why;
  });
  EXPECT_NE(got.find("refused: HOOP_IB_TIMEOUT=40 is outside 1..31"),
            std::string::npos)
      << got;
}

TEST(IbSettings, HcaFilterTable) {
  struct Case {
    const char *spec;
    std::vector<std::string> want;
  };
  const Case cases[] = {
      {nullptr,
       {"mlx5_0:1", "mlx5_0:2", "mlx5_1:1", "mlx5_10:1", "rxe0:1"}},
      {"mlx5", {"mlx5_0:1", "mlx5_0:2", "mlx5_1:1", "mlx5_10:1"}},
      // A prefix, as in NCCL: mlx5_1 selects mlx5_10 too; = stops that.
      {"mlx5_1", {"mlx5_1:1", "mlx5_10:1"}},
      {"=mlx5_1", {"mlx5_1:1"}},
      {"mlx5_0:2", {"mlx5_0:2"}},
      {"mlx5_0:2,rxe", {"mlx5_0:2", "rxe0:1"}},
      {"=mlx5_0:1,=rxe0", {"mlx5_0:1"}},  // "=" only before the list
      {"=mlx5_0:1,rxe0", {"mlx5_0:1", "rxe0:1"}},
      {"^mlx5", {"rxe0:1"}},
      {"^=mlx5_1", {"mlx5_0:1", "mlx5_0:2", "mlx5_10:1", "rxe0:1"}},
      {"^mlx5_0:1", {"mlx5_0:2", "mlx5_1:1", "mlx5_10:1", "rxe0:1"}},
      {"mlx4", {}},
      {"mlx5_0:3", {}},
  };
  for (const Case &c : cases) {
    std::vector<hoop_rdma_local_port> ports = {
        roce("mlx5_0", 1), roce("mlx5_0", 2), roce("mlx5_1", 3),
        roce("mlx5_10", 4), roce("rxe0", 5)};
    ports[1].port = 2;
    int n = hoop__rdma_hca_filter(c.spec, ports.data(), (int)ports.size());
    std::vector<std::string> got;
    for (int i = 0; i < n; i++)
      got.push_back(std::string(ports[(size_t)i].device) + ":" +
                    std::to_string(ports[(size_t)i].port));
    EXPECT_EQ(got, c.want) << (c.spec ? c.spec : "(unset)");
  }
  hoop_rdma_local_port one = roce("mlx5_0", 1);
  EXPECT_EQ(hoop__rdma_hca_filter("mlx5_0:x", &one, 1), -1);
}

TEST(IbSelect, GidChoiceTable) {
  struct Case {
    const char *name;
    hoop_rdma_local_port port;
    int setting;
    int want_index; // -1: none
    const char *why;
  };
  hoop_rdma_local_port v1_only = port("rxe0", 1, HOOP_LINK_ETH,
                              {gid(0, HOOP_GID_ROCE_V1, kLinkLocal),
                               gid(4, HOOP_GID_ROCE_V1, ipv4(1))});
  hoop_rdma_local_port v2_ipv6 = port("rxe0", 1, HOOP_LINK_ETH,
                              {gid(0, HOOP_GID_ROCE_V2, kLinkLocal),
                               gid(1, HOOP_GID_ROCE_V2,
                                   {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0,
                                    0, 0, 0, 0, 0, 0, 2})});
  const Case cases[] = {
      {"RoCE, auto: v2 with IPv4", roce("mlx5_0", 1), -1, 3, ""},
      {"RoCE, forced index", roce("mlx5_0", 1), 1, 1, ""},
      {"RoCE, forced index missing", roce("mlx5_0", 1), 7, -1,
       "mlx5_0 port 1 has no GID at index 7 (HOOP_IB_GID_INDEX)"},
      {"RoCE v1 only: IPv4 over link-local", v1_only, -1, 4, ""},
      {"RoCE v2, IPv6: global over link-local", v2_ipv6, -1, 1, ""},
      {"InfiniBand, auto: index 0", infiniband("mlx5_0", 1, 1), -1, 0, ""},
      {"no GID at all", port("rxe0", 1, HOOP_LINK_ETH, {}), -1, -1,
       "rxe0 port 1 has no GID"},
  };
  for (const Case &c : cases) {
    hoop_rdma_gid g{};
    char why[200] = "";
    bool ok = hoop__rdma_choose_gid(&c.port, c.setting, &g, why, sizeof why);
    EXPECT_EQ(ok, c.want_index >= 0) << c.name << ": " << why;
    if (ok)
      EXPECT_EQ(g.index, c.want_index) << c.name;
    else
      EXPECT_NE(std::string(why).find(c.why), std::string::npos)
          << c.name << ": " << why;
  }
}

TEST(IbSelect, DecisionTable) {
  hoop_rdma_port down = published(port(
      "mlx5_0", 1, HOOP_LINK_ETH, {gid(3, HOOP_GID_ROCE_V2, ipv4(2))},
      HOOP_PORT_DOWN));
  hoop_rdma_port v1 = published(roce("mlx5_0", 2), 2);
  hoop_rdma_port v6 = published(port("mlx5_0", 1, HOOP_LINK_ETH,
                                     {gid(1, HOOP_GID_ROCE_V2, kLinkLocal)}));
  struct Case {
    const char *name;
    hoop_rdma_port a, b;
    bool want;
    const char *why;
  };
  const Case cases[] = {
      {"RoCE v2 both", published(roce("mlx5_0", 1)),
       published(roce("mlx5_1", 2)), true, "mlx5_0:1 and mlx5_1:1, RoCE v2"},
      {"InfiniBand, one subnet", published(infiniband("mlx5_0", 1, 1)),
       published(infiniband("mlx5_0", 1, 2)), true, "InfiniBand"},
      {"not probed there", published(roce("mlx5_0", 1)),
       status_only(HOOP_RDMA_NOT_PROBED), false,
       "rank 1 did not look for RDMA ports (a rank looks only with "
       "HOOP_TRANSPORT=ib"},
      {"no device here", status_only(HOOP_RDMA_NO_DEVICE),
       published(roce("mlx5_0", 1)), false, "rank 0 has no RDMA device"},
      {"no device there", published(roce("mlx5_0", 1)),
       status_only(HOOP_RDMA_NO_DEVICE), false, "rank 1 has no RDMA device"},
      {"a build without verbs", published(roce("mlx5_0", 1)),
       status_only(HOOP_RDMA_NOT_BUILT), false,
       "rank 1 runs a build of hoop without RDMA verbs"},
      {"a bad setting", status_only(HOOP_RDMA_BAD_SETTING),
       published(roce("mlx5_0", 1)), false,
       "rank 0 has a malformed HOOP_IB_* setting"},
      {"HOOP_IB_HCA selects nothing", published(roce("mlx5_0", 1)),
       status_only(HOOP_RDMA_NO_MATCH), false,
       "rank 1 has no port that HOOP_IB_HCA selects"},
      {"verbs failed", status_only(HOOP_RDMA_VERBS_ERROR),
       status_only(HOOP_RDMA_NO_DEVICE), false,
       "rank 0 could not list its RDMA devices"},
      {"inactive port", published(roce("mlx5_0", 1)), down, false,
       "rank 1's port mlx5_0:1 is DOWN, not ACTIVE"},
      {"InfiniBand and Ethernet", published(infiniband("mlx5_0", 1, 1)),
       published(roce("mlx5_1", 1)), false,
       "rank 0's port mlx5_0:1 is InfiniBand but rank 1's port mlx5_1:1 is "
       "Ethernet (RoCE)"},
      {"two subnets", published(infiniband("mlx5_0", 1, 1)),
       published(infiniband("mlx5_0", 2, 2)), false,
       "ranks 0 and 1 are on different InfiniBand subnets (GIDs "
       "fe80:0:0:1::1 and fe80:0:0:2::2)"},
      {"RoCE v2 and v1", published(roce("mlx5_0", 1)), v1, false,
       "rank 0's GID (index 3) is RoCE v2 but rank 1's (index 2) is RoCE v1"},
      {"RoCE v2 over IPv4 and IPv6", published(roce("mlx5_0", 1)), v6, false,
       "different address families (::ffff:10.0.0.1 and fe80::200:0:0:1)"},
      {"GID index missing there", published(roce("mlx5_0", 1), 3),
       published(port("mlx5_0", 1, HOOP_LINK_ETH,
                      {gid(0, HOOP_GID_ROCE_V2, ipv4(2))}),
                 3),
       false, "rank 1's port mlx5_0:1 has no GID at index 3 (HOOP_IB_GID_"},
      {"no GID at all", published(port("rxe0", 1, HOOP_LINK_ETH, {})),
       published(roce("mlx5_0", 1)), false,
       "rank 0's port rxe0:1 has no GID to use"},
  };
  for (const Case &c : cases) {
    bool ok;
    std::string why = select_why(c.a, c.b, &ok);
    EXPECT_EQ(ok, c.want) << c.name << ": " << why;
    EXPECT_NE(why.find(c.why), std::string::npos) << c.name << ": " << why;
  }
}

// What a rank publishes passes through the peer table's parser, which
// bounds each of its fields.
TEST(IbSelect, PublishedPortIsBoundedByThePeerInfoParser) {
  hoop_peer_info good{};
  good.addr.family = AF_INET;
  good.addr.port = 4000;
  good.rank = 1;
  good.pid = 7;
  hoop__transports_publish(&good);
  set_ib_port(good, published(roce("mlx5_0", 1)));
  hoop_peer_info out;
  char why[200];
  ASSERT_TRUE(hoop__peer_info_parse(&good, 1, &out, why, sizeof why)) << why;
  const std::vector<std::pair<const char *, std::function<void(hoop_rdma_port &)>>>
      spoilers = {
          {"status", [](hoop_rdma_port &r) { r.status = HOOP_RDMA_STATUS_COUNT; }},
          {"port 0", [](hoop_rdma_port &r) { r.port = 0; }},
          {"state", [](hoop_rdma_port &r) { r.state = HOOP_PORT_STATE_COUNT; }},
          {"link layer none", [](hoop_rdma_port &r) { r.link_layer = 0; }},
          {"link layer", [](hoop_rdma_port &r) { r.link_layer = 9; }},
          {"MTU 0", [](hoop_rdma_port &r) { r.mtu = 0; }},
          {"MTU 6", [](hoop_rdma_port &r) { r.mtu = 6; }},
          {"GID type", [](hoop_rdma_port &r) { r.gid_type = 4; }},
          {"GID setting", [](hoop_rdma_port &r) { r.gid_forced = 2; }},
          {"device name without its end",
           [](hoop_rdma_port &r) { memset(r.device, 'm', sizeof r.device); }},
      };
  for (const auto &s : spoilers) {
    hoop_peer_info bad = good;
    hoop_rdma_port r = published(roce("mlx5_0", 1));
    s.second(r);
    set_ib_port(bad, r);
    EXPECT_FALSE(hoop__peer_info_parse(&bad, 1, &out, why, sizeof why))
        << s.first;
    EXPECT_NE(strstr(why, "rank 1's RDMA"), nullptr) << s.first << ": " << why;
  }
  // Without a port, the other fields are not read.
  hoop_peer_info none = good;
  hoop_rdma_port r = status_only(HOOP_RDMA_NO_DEVICE);
  r.mtu = 99;
  set_ib_port(none, r);
  EXPECT_TRUE(hoop__peer_info_parse(&none, 1, &out, why, sizeof why)) << why;
}

namespace {

hoop_ib_conninfo good_conninfo(int link_layer) {
  hoop_ib_conninfo c{};
  c.magic = HOOP_IB_CONNINFO_MAGIC;
  c.version = HOOP_IB_CONNINFO_VERSION;
  c.link_layer = (uint8_t)link_layer;
  c.lid = link_layer == HOOP_LINK_IB ? 0x12 : 0;
  c.mtu = 5;
  std::vector<uint8_t> g = ipv4(9);
  memcpy(c.gid, g.data(), 16);
  c.qpn = 0xabcdef;
  c.psn = 0x123456;
  c.fifo_rkey = 0xdeadbeef;
  c.fifo_addr = 0x7f0000001000ull;
  c.slot_bytes = 256 * 1024;
  c.slots = 8;
  return c;
}

std::string conninfo_why(const hoop_ib_conninfo &c, int link_layer,
                         size_t len = sizeof(hoop_ib_conninfo)) {
  hoop_ib_conninfo out;
  char why[200] = "";
  if (hoop__ib_conninfo_parse(&c, len, link_layer, &out, why, sizeof why))
    return memcmp(&out, &c, sizeof c) == 0 ? "" : "parsed, but changed";
  return why;
}

}  // namespace

TEST(IbConninfo, RoundTripsOnBothLinkLayers) {
  for (int ll : {HOOP_LINK_IB, HOOP_LINK_ETH}) {
    hoop_ib_conninfo c = good_conninfo(ll);
    unsigned char bytes[sizeof c];
    memcpy(bytes, &c, sizeof c);
    hoop_ib_conninfo out;
    char why[200] = "";
    ASSERT_TRUE(hoop__ib_conninfo_parse(bytes, sizeof bytes, ll, &out, why,
                                        sizeof why))
        << why;
    EXPECT_EQ(memcmp(&out, &c, sizeof c), 0);
  }
  // The extremes that are still in bounds.
  hoop_ib_conninfo c = good_conninfo(HOOP_LINK_IB);
  c.lid = 0xbfff;
  c.qpn = 0xffffff;
  c.psn = 0xffffff;
  c.mtu = 1;
  c.slot_bytes = 64u << 20;
  c.slots = 64;
  c.fifo_addr = UINT64_MAX - (uint64_t)c.slot_bytes * c.slots - 63;
  EXPECT_EQ(conninfo_why(c, HOOP_LINK_IB), "");
}

TEST(IbConninfo, EveryFieldOutOfBoundsIsRefusedSayingWhy) {
  struct Case {
    const char *name;
    int link_layer;
    std::function<void(hoop_ib_conninfo &)> spoil;
    const char *why;
  };
  const Case cases[] = {
      {"magic", HOOP_LINK_ETH, [](hoop_ib_conninfo &c) { c.magic++; }, "magic"},
      {"version", HOOP_LINK_ETH, [](hoop_ib_conninfo &c) { c.version = 2; },
       "version 2"},
      {"other link layer", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { c.link_layer = HOOP_LINK_IB; },
       "link layer 1, not 2"},
      {"unknown link layer", HOOP_LINK_IB,
       [](hoop_ib_conninfo &c) { c.link_layer = 7; }, "link layer 7"},
      {"IB LID 0", HOOP_LINK_IB, [](hoop_ib_conninfo &c) { c.lid = 0; },
       "LID 0, not a unicast LID"},
      {"IB multicast LID", HOOP_LINK_IB,
       [](hoop_ib_conninfo &c) { c.lid = 0xc000; }, "LID 0xc000"},
      {"RoCE with a LID", HOOP_LINK_ETH, [](hoop_ib_conninfo &c) { c.lid = 1; },
       "a RoCE port with LID 0x1"},
      {"RoCE without a GID", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { memset(c.gid, 0, sizeof c.gid); },
       "a zero GID"},
      {"MTU 0", HOOP_LINK_ETH, [](hoop_ib_conninfo &c) { c.mtu = 0; },
       "MTU 0"},
      {"MTU 6", HOOP_LINK_IB, [](hoop_ib_conninfo &c) { c.mtu = 6; }, "MTU 6"},
      {"QPN 0", HOOP_LINK_ETH, [](hoop_ib_conninfo &c) { c.qpn = 0; },
       "queue pair 0"},
      {"QPN 1", HOOP_LINK_ETH, [](hoop_ib_conninfo &c) { c.qpn = 1; },
       "queue pair 0x1"},
      {"QPN over 24 bits", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { c.qpn = 0x1000000; }, "queue pair 0x1000000"},
      {"PSN over 24 bits", HOOP_LINK_IB,
       [](hoop_ib_conninfo &c) { c.psn = 0x1000000; }, "PSN 0x1000000"},
      {"slots of 2 KiB", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { c.slot_bytes = 2048; }, "slots of 2048"},
      {"slots over 64 MiB", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { c.slot_bytes = (64u << 20) + 64; },
       "slots of 67108928"},
      {"slots not a multiple of 64", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { c.slot_bytes = 4096 + 8; }, "of 4104 bytes"},
      {"1 slot", HOOP_LINK_ETH, [](hoop_ib_conninfo &c) { c.slots = 1; },
       "a FIFO of 1 slots"},
      {"65 slots", HOOP_LINK_ETH, [](hoop_ib_conninfo &c) { c.slots = 65; },
       "a FIFO of 65 slots"},
      {"FIFO at 0", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { c.fifo_addr = 0; }, "a FIFO at 0"},
      {"FIFO unaligned", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { c.fifo_addr += 8; }, "64-byte aligned"},
      {"FIFO wrapping", HOOP_LINK_ETH,
       [](hoop_ib_conninfo &c) { c.fifo_addr = UINT64_MAX - 4095 - 63; },
       "not wrap"},
  };
  for (const Case &c : cases) {
    hoop_ib_conninfo bad = good_conninfo(c.link_layer);
    c.spoil(bad);
    std::string why = conninfo_why(bad, c.link_layer);
    EXPECT_NE(why, "") << c.name << ": passed";
    EXPECT_NE(why.find(c.why), std::string::npos) << c.name << ": " << why;
  }
  hoop_ib_conninfo c = good_conninfo(HOOP_LINK_IB);
  EXPECT_NE(conninfo_why(c, HOOP_LINK_IB, sizeof c - 1).find("55 bytes, not 56"),
            std::string::npos);
}

TEST(IbDevices, DiscoveryDescribesEveryPortItFinds) {
  hoop_rdma_local_port *ports = nullptr;
  int n = 0;
  char why[400] = "";
  ASSERT_TRUE(hoop__rdma_discover(&ports, &n, why, sizeof why)) << why;
  if (n == 0)
    GTEST_SKIP() << "no RDMA device: " << why;
  for (int i = 0; i < n; i++) {
    const hoop_rdma_local_port &p = ports[i];
    EXPECT_NE(p.device[0], '\0');
    EXPECT_GE(p.port, 1);
    EXPECT_LT(p.state, HOOP_PORT_STATE_COUNT);
    EXPECT_TRUE(p.link_layer == HOOP_LINK_IB || p.link_layer == HOOP_LINK_ETH);
    EXPECT_GE(p.mtu, HOOP_MTU_MIN);
    EXPECT_LE(p.mtu, HOOP_MTU_MAX);
    for (int g = 1; g < p.ngids; g++)
      EXPECT_LT(p.gids[g - 1].index, p.gids[g].index) << p.device;
  }
  free(ports);
  std::string got = publish_in_child([] { hoop__rdma_probe_always(); });
  EXPECT_EQ(got.rfind(status_prefix(HOOP_RDMA_PORT), 0), 0u) << got;
}

TEST(IbDevices, WithoutDevicesDiscoverySaysWhy) {
  hoop_rdma_local_port *ports = nullptr;
  int n = 0;
  char why[400] = "";
  ASSERT_TRUE(hoop__rdma_discover(&ports, &n, why, sizeof why)) << why;
  free(ports);
  if (n > 0)
    GTEST_SKIP() << "this host has RDMA devices";
  EXPECT_NE(why[0], '\0');
  if (HOOP_HAVE_VERBS) {
    EXPECT_NE(strstr(why, "ibv_get_device_list"), nullptr) << why;
  }
  std::string got = publish_in_child([] { hoop__rdma_probe_always(); });
  EXPECT_EQ(got, status_prefix(HOOP_HAVE_VERBS ? HOOP_RDMA_NO_DEVICE
                                               : HOOP_RDMA_NOT_BUILT) +
                     why);
}

// Looking opens every RDMA device, so a rank looks only where ib may be
// chosen; a bad HOOP_IB_* value then matters, and only then.
TEST(IbPublish, ARankLooksOnlyWithHoopTransportIbOrWhenAsked) {
  const std::string not_probed =
      status_prefix(HOOP_RDMA_NOT_PROBED) +
      "not probed: the ib transport is chosen only with HOOP_TRANSPORT=ib "
      "until it has run on RDMA hardware";
  EXPECT_EQ(publish_in_child([] {
              unsetenv("HOOP_TRANSPORT");
              setenv("HOOP_IB_SL", "99", 1);
            }),
            not_probed);
  EXPECT_EQ(publish_in_child([] {
              setenv("HOOP_TRANSPORT", "tcp", 1);
              setenv("HOOP_IB_SL", "99", 1);
            }),
            not_probed);
  const std::string bad = status_prefix(HOOP_RDMA_BAD_SETTING) +
                          "HOOP_IB_SL=99 is outside 0..15";
  std::string got = publish_in_child([] {
    setenv("HOOP_TRANSPORT", "ib", 1);
    setenv("HOOP_IB_SL", "99", 1);
  });
  EXPECT_EQ(got.rfind(bad, 0), 0u) << got;
  got = publish_in_child([] {
    unsetenv("HOOP_TRANSPORT");
    setenv("HOOP_IB_SL", "99", 1);
    hoop__rdma_probe_always();
  });
  EXPECT_EQ(got.rfind(bad, 0), 0u) << got;
}

// Without HOOP_TRANSPORT=ib a bad HOOP_IB_* value cannot fail init, and
// no rank publishes a port it did not need to look for.
TEST(IbPublish, WithoutHoopTransportIbInitIgnoresRdma) {
  for (const char *transport : {"", "tcp"}) {
    hoop_unique_id_t id;
    ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS) << hoop_last_error();
    RunOptions opt;
    opt.init = false;
    opt.timeout_s = 60;
    RunResult r = run_ranks(
        2,
        [&id, transport](RankLog &log, hoop_comm_t, int rank, int nranks) {
          if (*transport != '\0')
            setenv("HOOP_TRANSPORT", transport, 1);
          else
            unsetenv("HOOP_TRANSPORT");
          setenv("HOOP_IB_TIMEOUT", "40", 1);
          hoop_comm_t comm = nullptr;
          hoop_result_t res =
              hoop_comm_init_rank(&comm, nranks, &id, rank, nullptr);
          RANK_EXPECT(log, res == HOOP_SUCCESS, "init gave %s: %s",
                      hoop_result_name(res), hoop_last_error());
          if (comm == nullptr)
            return;
          for (int peer = 0; peer < nranks; peer++) {
            hoop_published p =
                hoop__published(&comm->peers[peer], &hoop__ib_transport);
            hoop_rdma_port port;
            hoop__ib_published(&p, &port, nullptr);
            RANK_EXPECT(log, port.status == HOOP_RDMA_NOT_PROBED,
                        "rank %d published RDMA status %u", peer,
                        (unsigned)port.status);
          }
          hoop_comm_destroy(comm);
        },
        opt);
    hoop_unique_id_release(&id);
    EXPECT_TRUE(r.all_ok()) << "HOOP_TRANSPORT=" << transport << ": "
                            << hooptest::describe(r);
  }
}

namespace {

// Two ranks that force ib, with HOOP_IB_TIMEOUT set where ib_timeout is
// given, must each fail init as unsupported with an error that holds
// every text needles(rank) lists.
void expect_forced_ib_init_fails(
    const char *ib_timeout,
    const std::function<std::vector<std::string>(int rank)> &needles) {
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS) << hoop_last_error();
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = 60;
  RunResult r = run_ranks(
      2,
      [&id, ib_timeout, &needles](RankLog &log, hoop_comm_t, int rank,
                                  int nranks) {
        setenv("HOOP_TRANSPORT", "ib", 1);
        if (ib_timeout != nullptr)
          setenv("HOOP_IB_TIMEOUT", ib_timeout, 1);
        hoop_comm_t comm = nullptr;
        hoop_result_t res = hoop_comm_init_rank(&comm, nranks, &id, rank,
                                                nullptr);
        std::string err = hoop_last_error();
        RANK_EXPECT(log, res == HOOP_ERR_UNSUPPORTED, "init gave %s: %s",
                    hoop_result_name(res), err.c_str());
        for (const std::string &needle : needles(rank))
          RANK_EXPECT(log, err.find(needle) != std::string::npos,
                      "error lacks \"%s\": %s", needle.c_str(), err.c_str());
        if (comm != nullptr)
          hoop_comm_destroy(comm);
      },
      opt);
  hoop_unique_id_release(&id);
  EXPECT_TRUE(r.all_ok()) << hooptest::describe(r);
}

}  // namespace

TEST(IbTransport, ForcedWithoutDevicesFailsInitNamingRankAndReason) {
  hoop_rdma_local_port *ports = nullptr;
  int n = 0;
  char why[400] = "";
  hoop__rdma_discover(&ports, &n, why, sizeof why);
  free(ports);
  if (n > 0)
    GTEST_SKIP() << "this host has RDMA devices, so ib is not impossible";
  expect_forced_ib_init_fails(nullptr, [](int rank) {
    std::string who = "HOOP_TRANSPORT=ib cannot join rank " +
                      std::to_string(rank) + " and rank " +
                      std::to_string(1 - rank);
    std::string lack = "rank " + std::to_string(rank) +
                       (HOOP_HAVE_VERBS
                            ? " has no RDMA device: ibv_get_device_list"
                            : " runs a build of hoop without RDMA verbs");
    return std::vector<std::string>{who, lack};
  });
}

TEST(IbTransport, ForcedWithABadSettingFailsInitNamingIt) {
  expect_forced_ib_init_fails("40", [](int rank) {
    return std::vector<std::string>{"rank " + std::to_string(rank) +
                                    " has a malformed HOOP_IB_* setting: "
                                    "HOOP_IB_TIMEOUT=40 is outside 1..31"};
  });
}

TEST(IbTransport, HoopInfoShowsThePortsAndEachPair) {
  hooptest::ShellOutput out = hooptest::run_shell(
      std::string("env -u HOOP_TRANSPORT ") + HOOP_RUN_PATH + " -n 3 " +
      HOOP_INFO_PATH);
  ASSERT_EQ(out.status, 0) << out.text;
  bool none = out.text.find("# no RDMA devices: ") != std::string::npos;
  EXPECT_TRUE(none || out.text.find("# RDMA devices") != std::string::npos)
      << out.text;
  for (const char *pair : {"ranks 0 and 1: ", "ranks 0 and 2: ",
                           "ranks 1 and 2: "})
    EXPECT_NE(out.text.find(pair), std::string::npos) << pair << out.text;
  // hoop-info asks every rank to look, HOOP_TRANSPORT or not.
  EXPECT_EQ(out.text.find("did not look"), std::string::npos) << out.text;
  if (none) {
    EXPECT_NE(out.text.find("ranks 1 and 2: no: rank 1 "), std::string::npos)
        << out.text;
  }
}

// softroce.sh check makes nothing: it only says whether Soft-RoCE can be
// set up here, and plainly why not.
TEST(SoftRoce, CheckSaysWhetherThisKernelCanDoIt) {
  hooptest::ShellOutput out = hooptest::run_shell(
      std::string(HOOP_SOURCE_DIR) + "/tools/softroce.sh check");
  if (out.status == 0) {
    EXPECT_NE(out.text.find("this kernel has rdma_rxe"), std::string::npos)
        << out.text;
    return;
  }
  EXPECT_EQ(out.status, 77) << out.text;
  EXPECT_NE(out.text.find("cannot set up Soft-RoCE here: "), std::string::npos)
      << out.text;
}

// The real verbs table opens only a device that exists, and says which
// it looked for.  No host has this one, so it fails alike whether the
// kernel lists devices or has no RDMA support at all, and the endpoint
// the caller then closes is NULL.
TEST(IbVerbs, OpeningADeviceThatIsNotThereFailsNamingIt) {
  const hoop_ib_verbs *verbs = hoop__ib_verbs_real;
  if (verbs == nullptr)
    GTEST_SKIP() << "this build of hoop has no libibverbs, so no real "
                    "verbs table";
  EXPECT_STREQ(verbs->name, "libibverbs");
  hoop_ib_open o{};
  o.device = "hoop-no-such-device";
  o.port = 1;
  o.send_depth = 4;
  o.recv_depth = 4;
  char sentinel;
  hoop_ib_ep *ep = reinterpret_cast<hoop_ib_ep *>(&sentinel);
  hoop_ib_local local{};
  char why[400] = "";
  int rc = verbs->open(&o, &ep, &local, why, sizeof why);
  EXPECT_NE(rc, 0) << why;
  EXPECT_EQ(ep, nullptr);
  EXPECT_NE(strstr(why, "hoop-no-such-device"), nullptr)
      << "errno " << rc << " (" << strerror(rc) << "): " << why;
  verbs->close(ep);
}
