// What every module shares from core: the name tables of the public enums,
// which every message and report takes its names from (a value added to an
// enum must get a name here), and the FNV-1a hash behind communicator ids,
// host identities and send/recv size checks.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "harness.h"
#include "hoop.h"

extern "C" {
#include "core/comm.h"
#include "core/engine.h"
#include "core/hash.h"
#include "core/types.h"
}

// The fp8 names follow NCCL's enum (ncclFloat8e4m3), as "bfloat16" does
// ncclBfloat16; hoop-bench's -d takes these names.
TEST(Names, EveryDtypeHasItsOwnNameAndASize) {
  for (int t = 0; t < HOOP_DTYPE_COUNT; t++) {
    const char *name = hoop_dtype_name((hoop_dtype_t)t);
    ASSERT_NE(name, nullptr) << t;
    EXPECT_STRNE(name, "invalid-dtype") << t;
    EXPECT_NE(hoop_dtype_size((hoop_dtype_t)t), 0u) << name;
    for (int u = 0; u < t; u++)
      EXPECT_STRNE(name, hoop_dtype_name((hoop_dtype_t)u)) << t << " " << u;
  }
  EXPECT_STREQ(hoop_dtype_name(HOOP_F8E4M3), "float8e4m3");
  EXPECT_STREQ(hoop_dtype_name(HOOP_F8E5M2), "float8e5m2");
  EXPECT_EQ(hoop_dtype_size(HOOP_F8E4M3), 1u);
  EXPECT_EQ(hoop_dtype_size(HOOP_F8E5M2), 1u);
  EXPECT_EQ(hoop_dtype_size(HOOP_BF16), 2u);
  EXPECT_STREQ(hoop_dtype_name(HOOP_DTYPE_COUNT), "invalid-dtype");
  EXPECT_EQ(hoop_dtype_size(HOOP_DTYPE_COUNT), 0u);
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
  EXPECT_EQ(hoop__parse_algo("Hier"), HOOP_ALGO_HIER);
  EXPECT_EQ(hoop__parse_algo("p2p"), -1);
  EXPECT_EQ(hoop__parse_algo("oneshot"), -1);
}

namespace {

// FNV-1a as published (offset basis 14695981039346656037, prime 2^40 +
// 2^8 + 0xb3), written out here apart from core/hash.h.
uint64_t reference_fnv1a(uint64_t h, const std::string &bytes) {
  for (unsigned char c : bytes)
    h = (h ^ c) * 1099511628211ULL;
  return h;
}

} // namespace

TEST(Hash, KnownFnv1aValues) {
  EXPECT_EQ(hoop__fnv1a_text(HOOP_FNV1A_BASIS, ""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(hoop__fnv1a_text(HOOP_FNV1A_BASIS, "a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(hoop__fnv1a_text(HOOP_FNV1A_BASIS, "foobar"),
            0x85944171f73967e8ULL);
  // Continuing a hash is hashing the concatenation.
  EXPECT_EQ(hoop__fnv1a_text(hoop__fnv1a_text(HOOP_FNV1A_BASIS, "foo"), "bar"),
            0x85944171f73967e8ULL);
}

// Send/recv fold each message size in as one value, from 0.
TEST(Hash, StepFoldsAWholeValue) {
  EXPECT_EQ(hoop__fnv1a_step(0, 4001), 4001 * 1099511628211ULL);
  EXPECT_EQ(hoop__fnv1a_step(hoop__fnv1a_step(0, 1), 2),
            ((1 * 1099511628211ULL) ^ 2) * 1099511628211ULL);
}

// Every rank of a job started with an address derives the communicator id
// from that address text; a host is its boot id, hostname and network
// namespace.  Checked on a real one-rank communicator.
TEST(Hash, CommunicatorIdAndHostIdentityAreFnv1aOfTheirTexts) {
  std::string addr = "127.0.0.1:" + std::to_string(hooptest::free_port());
  for (const char *name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                           "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID",
                           "HOOP_SOCKET_IFNAME"})
    unsetenv(name);
  setenv("HOOP_RANK", "0", 1);
  setenv("HOOP_WORLD_SIZE", "1", 1);
  setenv("HOOP_ROOT_ADDR", addr.c_str(), 1);
  hooptest::set_test_token();
  hoop_comm_t comm;
  ASSERT_EQ(hoop_comm_init_env(&comm, nullptr), HOOP_SUCCESS)
      << hoop_last_error();
  EXPECT_EQ(comm->comm_id, reference_fnv1a(14695981039346656037ULL, addr));

  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  ASSERT_FALSE(boot.empty()) << "no /proc/sys/kernel/random/boot_id";
  struct stat st;
  ASSERT_EQ(stat("/proc/self/ns/net", &st), 0) << strerror(errno);
  const struct hoop_peer_info &me = comm->peers[0];
  uint64_t machine = reference_fnv1a(14695981039346656037ULL, boot + "\n");
  EXPECT_EQ(me.machine_hash, machine);
  uint64_t h = reference_fnv1a(machine, host);
  EXPECT_EQ(me.host_hash, (h ^ (uint64_t)st.st_ino) * 1099511628211ULL);
  EXPECT_EQ(hoop_comm_destroy(comm), HOOP_SUCCESS);
}
