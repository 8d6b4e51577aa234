// The name tables of the public enums, which every message and report
// takes its names from, so a value added to an enum must get a name here.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "hoop.h"

extern "C" {
#include "core/engine.h"
#include "core/types.h"
}

TEST(Names, EveryAlgorithmHasItsOwnName) {
  for (int a = 0; a < HOOP_ALGO_COUNT; a++) {
    std::string name = hoop_algo_name((hoop_algo_t)a);
    EXPECT_NE(name, "invalid-algo") << a;
    for (int b = 0; b < a; b++)
      EXPECT_NE(name, hoop_algo_name((hoop_algo_t)b)) << a << " " << b;
  }
  EXPECT_STREQ(hoop_algo_name(HOOP_ALGO_ONESHOT), "oneshot");
  EXPECT_STREQ(hoop_algo_name(HOOP_ALGO_COUNT), "invalid-algo");
}

TEST(Names, EveryCollectiveHasItsOwnName) {
  for (int c = HOOP_COLL_ALLREDUCE; c < HOOP_COLL_COUNT; c++) {
    std::string name = hoop__coll_name((hoop_coll_t)c);
    EXPECT_NE(name, "unknown-collective") << c;
    for (int d = HOOP_COLL_ALLREDUCE; d < c; d++)
      EXPECT_NE(name, hoop__coll_name((hoop_coll_t)d)) << c << " " << d;
  }
  EXPECT_STREQ(hoop__coll_name(HOOP_COLL_REDUCE_SCATTER), "reduce_scatter");
  EXPECT_STREQ(hoop__coll_name((hoop_coll_t)0), "unknown-collective");
  EXPECT_STREQ(hoop__coll_name(HOOP_COLL_COUNT), "unknown-collective");
}

// Mismatch messages describe the peer's call from its wire header; the
// engine once had its own algorithm table that lacked "oneshot".
TEST(Names, CallDescriptionUsesTheSharedTables) {
  struct hoop_wire_header h;
  memset(&h, 0, sizeof h);
  h.coll = HOOP_COLL_ALLREDUCE;
  h.dtype = HOOP_F32;
  h.op = HOOP_SUM;
  h.seq = 7;
  h.count = 100;
  h.algo = HOOP_ALGO_ONESHOT;
  char text[256];
  hoop__describe_call(&h, text, sizeof text);
  std::string s = text;
  EXPECT_EQ(s.rfind("allreduce #7 (count 100, float, sum, root 0, oneshot,", 0),
            0u)
      << s;
}

TEST(Names, ParseAlgoTakesOnlySelectableOnes) {
  EXPECT_EQ(hoop__parse_algo("RING"), HOOP_ALGO_RING);
  EXPECT_EQ(hoop__parse_algo("ps"), HOOP_ALGO_PS);
  EXPECT_EQ(hoop__parse_algo("p2p"), -1);
  EXPECT_EQ(hoop__parse_algo("oneshot"), -1);
}
