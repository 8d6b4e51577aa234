// Tests for the shared-memory transport and the topology that picks it.
// The collective suites (test_collectives, test_algorithms, ...) run over
// shm by default, since their ranks share this host; ctest runs them again
// with HOOP_TRANSPORT=tcp.  These cases cover what is particular to shm:
// the choice itself, segments in /dev/shm, stream alignment across ring
// wrap-arounds and leaks.  A rank killed mid-collective is
// Errors.KilledRankMakesOthersFailNamingIt, which also checks /dev/shm.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "conn_pair.h"
#include "harness.h"

extern "C" {
#include "core/comm.h"
#include "core/param.h"
#include "transport/params.h"
#include "transport/fifo.h"
}

using hooptest::RankLog;
using hooptest::ScopedEnv;
using hooptest::RunResult;
using hooptest::run_ranks;
using hooptest::run_shell;

namespace {

// Segments this process created that are still linked.
int own_segments() {
  int n = 0;
  std::string prefix = "hoop-" + std::to_string(getpid()) + "-";
  DIR *dir = opendir("/dev/shm");
  if (dir == nullptr)
    return 0;
  for (struct dirent *e; (e = readdir(dir)) != nullptr;)
    n += strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
  closedir(dir);
  return n;
}

int count_dir(const char *path) {
  int n = 0;
  DIR *dir = opendir(path);
  if (dir == nullptr)
    return -1;
  for (struct dirent *e; (e = readdir(dir)) != nullptr;)
    n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

// Shared memory segments this process has mapped (unlinked ones too).
int count_shm_mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    n += line.find("/dev/shm/hoop-") != std::string::npos;
  return n;
}

// A communicator over the same ranks as `comm`, made through it.
hoop_comm_t split_new(RankLog &log, hoop_comm_t comm, int rank, int nranks) {
  hoop_unique_id_t id;
  if (rank == 0)
    RANK_EXPECT_OK(log, comm, hoop_get_unique_id(&id));
  RANK_EXPECT_OK(log, comm,
                 hoop_broadcast(comm, &id, &id, sizeof id, HOOP_U8, 0,
                                nullptr));
  hoop_comm_t fresh = nullptr;
  hoop_result_t res = hoop_comm_init_rank(&fresh, nranks, &id, rank, nullptr);
  if (res != HOOP_SUCCESS)
    log.fail("init of a new communicator: %s", hoop_last_error());
  return fresh;
}

}  // namespace

TEST(Topology, RanksOnOneHostShareMemory) {
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    for (int q = 0; q < nranks; q++) {
      hoop_rank_info_t info = HOOP_RANK_INFO_INIT;
      RANK_EXPECT_OK(log, comm, hoop_comm_rank_info(comm, q, &info));
      RANK_EXPECT(log, info.host == 0 && info.shm == 1, "rank %d: host %d shm %d",
                  q, info.host, info.shm);
      if (q == rank)
        RANK_EXPECT(log, info.pid == getpid(), "pid %d", info.pid);
      const char *name = nullptr;
      RANK_EXPECT_OK(log, comm, hoop_comm_transport(comm, rank, q, &name));
      const char *want = q == rank ? "self" : "shm";
      RANK_EXPECT(log, name != nullptr && strcmp(name, want) == 0,
                  "rank %d to %d: %s, want %s", rank, q, name, want);
    }
    hoop_rank_info_t info = HOOP_RANK_INFO_INIT;
    RANK_EXPECT(log, hoop_comm_rank_info(comm, nranks, &info) ==
                         HOOP_ERR_INVALID_ARGUMENT,
                "rank out of range accepted");
    const char *name;
    RANK_EXPECT(log, hoop_comm_transport(comm, 0, -1, &name) ==
                         HOOP_ERR_INVALID_ARGUMENT,
                "rank out of range accepted");
  });
  EXPECT_TRUE(r.all_ok());
}

// The peers a rank holds a connection to, on any channel.
std::vector<int> connected_peers(hoop_comm_t comm) {
  std::vector<int> peers;
  for (int p = 0; p < comm->nranks; p++) {
    bool any = false;
    for (int ch = 0; ch < comm->nsocks; ch++)
      any = any || comm->conns[p * comm->nsocks + ch] != nullptr;
    if (any)
      peers.push_back(p);
  }
  return peers;
}

// HOOP_RUNTIME_CONNECT=1: a pair connects when a plan first needs it, so
// after init a rank holds no connection, after a ring all-reduce only its
// two neighbours, and after an all-to-all every peer, with every result
// right.  Over shm (6 ranks) and TCP (5).
TEST(FirstUse, RanksConnectOnlyThePeersTheirCallsUse) {
  ScopedEnv lazy("HOOP_RUNTIME_CONNECT", "1");
  ScopedEnv ring("HOOP_ALGO", "ring");
  for (const char *transport : {"shm", "tcp"}) {
    ScopedEnv forced("HOOP_TRANSPORT", transport);
    int nranks = strcmp(transport, "shm") == 0 ? 6 : 5;
    RunResult r = run_ranks(nranks, [](RankLog &log, hoop_comm_t comm,
                                       int rank, int n) {
      RANK_EXPECT(log, connected_peers(comm).empty(),
                  "%zu peers connected after init",
                  connected_peers(comm).size());
      std::vector<double> v(1001, rank + 1.0);
      RANK_EXPECT_OK(log, comm,
                     hoop_allreduce(comm, v.data(), v.data(), v.size(),
                                    HOOP_F64, HOOP_SUM, nullptr));
      double want = n * (n + 1) / 2.0;
      RANK_EXPECT(log, v[0] == want && v[1000] == want, "sum %g, want %g",
                  v[0], want);
      std::vector<int> ring_peers = {(rank + n - 1) % n, (rank + 1) % n};
      std::sort(ring_peers.begin(), ring_peers.end());
      RANK_EXPECT(log, connected_peers(comm) == ring_peers,
                  "%zu peers connected after a ring all-reduce, want 2",
                  connected_peers(comm).size());
      std::vector<int32_t> out(n), in(n, -1);
      for (int p = 0; p < n; p++)
        out[p] = rank * 100 + p;
      RANK_EXPECT_OK(log, comm,
                     hoop_alltoall(comm, out.data(), in.data(), 1, HOOP_I32,
                                   nullptr));
      for (int p = 0; p < n; p++)
        RANK_EXPECT(log, in[p] == p * 100 + rank, "from rank %d: %d", p,
                    in[p]);
      RANK_EXPECT(log, (int)connected_peers(comm).size() == n - 1,
                  "%zu peers connected after an all-to-all, want %d",
                  connected_peers(comm).size(), n - 1);
    });
    EXPECT_TRUE(r.all_ok()) << transport << ": " << describe(r);
  }
}

// HOOP_RUNTIME_CONNECT=0 (the default): every peer connects at init, and
// the calls run on those connections.
TEST(FirstUse, EagerConnectsEveryPeerAtInit) {
  ScopedEnv eager("HOOP_RUNTIME_CONNECT", "0");
  for (const char *transport : {"shm", "tcp"}) {
    ScopedEnv forced("HOOP_TRANSPORT", transport);
    RunResult r = run_ranks(5, [](RankLog &log, hoop_comm_t comm, int rank,
                                  int n) {
      RANK_EXPECT(log, (int)connected_peers(comm).size() == n - 1,
                  "%zu peers connected after init, want %d",
                  connected_peers(comm).size(), n - 1);
      std::vector<double> v(1001, rank + 1.0);
      RANK_EXPECT_OK(log, comm,
                     hoop_allreduce(comm, v.data(), v.data(), v.size(),
                                    HOOP_F64, HOOP_SUM, nullptr));
      double want = n * (n + 1) / 2.0;
      RANK_EXPECT(log, v[0] == want && v[1000] == want, "sum %g, want %g",
                  v[0], want);
    });
    EXPECT_TRUE(r.all_ok()) << transport << ": " << describe(r);
  }
}

TEST(Topology, HoopTransportForcesTcp) {
  ScopedEnv env("HOOP_TRANSPORT", "tcp");
  RunResult r = run_ranks(2, [](RankLog &log, hoop_comm_t comm, int rank,
                                int) {
    const char *name = nullptr;
    RANK_EXPECT_OK(log, comm, hoop_comm_transport(comm, rank, 1 - rank, &name));
    RANK_EXPECT(log, name != nullptr && strcmp(name, "tcp") == 0, "got %s",
                name);
    std::vector<double> v(1000, rank + 1.0);
    RANK_EXPECT_OK(log, comm,
                   hoop_allreduce(comm, v.data(), v.data(), v.size(),
                                  HOOP_F64, HOOP_SUM, nullptr));
    RANK_EXPECT(log, v[0] == 3.0 && v[999] == 3.0, "sum %g", v[0]);
  });
  EXPECT_TRUE(r.all_ok());
}

// Over shm a receiver reduces straight out of the slot (two streams read,
// one written), which the model counts as 1.5 bytes copied: the parameter
// server's root reduces all N-1 buffers, so from 2 cores on it is priced
// above the ring for large buffers and AUTO leaves it.  Over TCP on one
// host reductions count as plain bytes.
TEST(Topology, ModelChargesReductionsOutOfSharedMemory) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
    GTEST_SKIP() << "one core: every schedule is priced at all ranks' copies";
  auto check = [](bool shm) {
    return run_ranks(4, [shm](RankLog &log, hoop_comm_t comm, int, int) {
      hoop_model_t m = HOOP_MODEL_INIT;
      RANK_EXPECT_OK(log, comm, hoop_comm_get_model(comm, &m));
      RANK_EXPECT(log, m.single_host == 1 && m.host_shm == (shm ? 1 : 0),
                  "single_host %d host_shm %d", m.single_host, m.host_shm);
      if (!shm)
        return;
      size_t bytes = (size_t)64 << 20;
      double ring = -1, ps = -1, best = -1;
      hoop_coll_t ar = HOOP_COLL_ALLREDUCE;
      RANK_EXPECT_OK(log, comm,
                     hoop_comm_predict(comm, ar, HOOP_ALGO_RING, bytes, &ring));
      RANK_EXPECT_OK(log, comm,
                     hoop_comm_predict(comm, ar, HOOP_ALGO_PS, bytes, &ps));
      RANK_EXPECT_OK(log, comm,
                     hoop_comm_predict(comm, ar, HOOP_ALGO_AUTO, bytes, &best));
      RANK_EXPECT(log, ps > 1.05 * ring && best < ps,
                  "64 MiB: ps %g s, ring %g s, auto %g s", ps, ring, best);
    });
  };
  RunResult over_shm = check(true);
  EXPECT_TRUE(over_shm.all_ok()) << hooptest::describe(over_shm);
  ScopedEnv env("HOOP_TRANSPORT", "tcp");
  RunResult over_tcp = check(false);
  EXPECT_TRUE(over_tcp.all_ok()) << hooptest::describe(over_tcp);
}

TEST(Topology, UnknownTransportIsRefusedByName) {
  hooptest::ShellOutput out = run_shell(
      std::string("HOOP_TRANSPORT=pigeon ") + HOOP_RUN_PATH + " -n 2 " +
      HOOP_EXAMPLE_PATH);
  EXPECT_NE(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("HOOP_TRANSPORT=pigeon"), std::string::npos)
      << out.text;
}

TEST(Shm, BadRingGeometryIsRefusedByName) {
  for (const char *setting :
       {"HOOP_SHM_SLOTS=1", "HOOP_SHM_SLOTS=65", "HOOP_SHM_SLOT_BYTES=100",
        "HOOP_SHM_SLOT_BYTES=5000", "HOOP_SHM_SLOT_BYTES=128M",
        "HOOP_SHM_STORES=fast"}) {
    hooptest::ShellOutput out = run_shell(std::string(setting) + " " +
                                          HOOP_RUN_PATH + " -n 2 " +
                                          HOOP_EXAMPLE_PATH);
    EXPECT_NE(out.status, 0) << setting << ": " << out.text;
    std::string name(setting, strchr(setting, '=') - setting + 1);
    EXPECT_NE(out.text.find(name), std::string::npos) << out.text;
    EXPECT_NE(out.text.find("invalid argument"), std::string::npos)
        << out.text;
  }
}

TEST(Shm, StoresSettingParses) {
  EXPECT_EQ(hoop__parse_shm_stores(nullptr), HOOP_SHM_STORES_AUTO);
  EXPECT_EQ(hoop__parse_shm_stores("auto"), HOOP_SHM_STORES_AUTO);
  EXPECT_EQ(hoop__parse_shm_stores("Plain"), HOOP_SHM_STORES_PLAIN);
  EXPECT_EQ(hoop__parse_shm_stores("NT"), HOOP_SHM_STORES_NT);
  for (const char *bad : {"", "fast", "nt ", "1", "non-temporal"})
    EXPECT_EQ(hoop__parse_shm_stores(bad), -1) << bad;
}

// HOOP_SHM_STORES=auto's choice, fed the writer's costs per byte (ps) as
// this VM measured them: near, plain 60 and around 75; far, 410 and 57.
// Returns how many of `pieces` went around the caches.
int feed(hoop_fifo_pace &pace, uint64_t plain, uint64_t around, int pieces,
         bool *last = nullptr) {
  int went_around = 0;
  for (int i = 0; i < pieces; i++) {
    bool a = hoop__fifo_pace_pick(&pace);
    went_around += a;
    hoop__fifo_pace_record(&pace, a, a ? around : plain);
    if (last != nullptr)
      *last = a;
  }
  return went_around;
}

TEST(Shm, TimedStoresKeepTheFasterWayAndFollowAMove) {
  hoop_fifo_pace pace{};
  // Near: plain throughout, but for the first try and ever rarer probes.
  EXPECT_LE(feed(pace, 60, 75, 1000), 8);
  EXPECT_FALSE(pace.around);
  EXPECT_EQ(pace.probe_every, 256u);
  // The host moves the CPUs apart: two slow pieces turn it.
  EXPECT_EQ(feed(pace, 410, 57, 2), 0);
  EXPECT_TRUE(pace.around);
  int plain = 1000 - feed(pace, 410, 57, 1000);
  EXPECT_LE(plain, 8) << "far, plain probes";
  // And back: the next probe of plain finds it fast again.
  bool last = true;
  int pieces = 0;
  while (last && pieces < 300) {
    feed(pace, 60, 75, 1, &last);
    pieces++;
  }
  EXPECT_FALSE(pace.around);
  EXPECT_LE(pieces, 257) << "pieces before plain won back";
}

TEST(Shm, TimedStoresShrugOffOneSlowPiece) {
  hoop_fifo_pace pace{};
  feed(pace, 60, 75, 100);
  ASSERT_FALSE(pace.around);
  // A piece preempted for 4 ms: 4e9 ps over 256 KiB.
  hoop__fifo_pace_record(&pace, false, 15000);
  EXPECT_FALSE(pace.around);
  EXPECT_LE(feed(pace, 60, 75, 500), 6);
  EXPECT_FALSE(pace.around);
}

TEST(Shm, SegmentsAreUnlinkedOnceMapped) {
  RunResult r = run_ranks(4, [](RankLog &log, hoop_comm_t comm, int, int) {
    // Joining connected every pair; each segment is mapped by now.
    RANK_EXPECT(log, own_segments() == 0, "%d segment(s) still linked",
                own_segments());
    RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
  });
  EXPECT_TRUE(r.all_ok());
  EXPECT_TRUE(hooptest::leaked_shm_segments().empty()) << hooptest::leaked_shm_segments()[0];
}

// Tiny rings wrap around many times per call, and odd-sized messages leave
// each stream at an odd offset: the next collective must still start
// element-aligned, or a reduction would read across the wrap.
TEST(Shm, StreamsStayAlignedAcrossOddMessagesAndWraps) {
  ScopedEnv slot("HOOP_SHM_SLOT_BYTES", "4096");
  ScopedEnv slots("HOOP_SHM_SLOTS", "2");
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    for (size_t odd = 1; odd < 40; odd += 6) {
      std::vector<char> out(odd, (char)rank), in(odd, -1);
      RANK_EXPECT_OK(log, comm, hoop_group_start());
      RANK_EXPECT_OK(log, comm,
                     hoop_send(comm, out.data(), odd, HOOP_I8, next, nullptr));
      RANK_EXPECT_OK(log, comm,
                     hoop_recv(comm, in.data(), odd, HOOP_I8, prev, nullptr));
      RANK_EXPECT_OK(log, comm, hoop_group_end());
      RANK_EXPECT(log, in[odd - 1] == (char)prev, "p2p got %d", in[odd - 1]);
      size_t count = 3000 + odd * 101;
      std::vector<double> v(count);
      for (size_t i = 0; i < count; i++)
        v[i] = (double)(i % 97) * (rank + 1);
      RANK_EXPECT_OK(log, comm,
                     hoop_allreduce(comm, v.data(), v.data(), count, HOOP_F64,
                                    HOOP_SUM, nullptr));
      double factor = nranks * (nranks + 1) / 2.0;
      size_t wrong = 0;
      for (size_t i = 0; i < count; i++)
        wrong += v[i] != (double)(i % 97) * factor;
      RANK_EXPECT(log, wrong == 0, "%zu of %zu wrong after a %zu-byte message",
                  wrong, count, odd);
    }
  });
  EXPECT_TRUE(r.all_ok());
}

// Calls from HOOP_COLD_BYTES on (set here: by default it follows the
// machine's cache) are received with non-temporal stores, and pieces from
// 64 KiB are written into the FIFO with them under HOOP_SHM_STORES=nt, and
// now and then under auto (the default, which times both ways): every
// byte must still land, whatever the alignments (the stores need 16
// bytes, so the head and tail go through memcpy) and however the slots
// cut the stream: 256 KiB slots, and two 4 KiB ones, whose pieces end at
// odd places as the ring wraps.
struct RingCase {
  const char *slot_bytes;
  const char *stores;
};

void PrintTo(const RingCase &c, std::ostream *os) {
  *os << c.slot_bytes << "-byte slots, " << c.stores << " stores";
}

class ShmRing : public ::testing::TestWithParam<RingCase> {};

TEST_P(ShmRing, LargeCallsLandWhole) {
  ScopedEnv cold("HOOP_COLD_BYTES", "1M");
  ScopedEnv slot("HOOP_SHM_SLOT_BYTES", GetParam().slot_bytes);
  ScopedEnv slots("HOOP_SHM_SLOTS",
                  strcmp(GetParam().slot_bytes, "4096") == 0 ? "2" : "8");
  ScopedEnv stores("HOOP_SHM_STORES", GetParam().stores);
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    const size_t per_rank = (2u << 20) + 7;  // 6 MiB + 21 bytes gathered
    auto expect = [](size_t i) { return (char)(i * 7 + i / 4093); };
    for (size_t offset : {(size_t)0, (size_t)1, (size_t)13}) {
      std::vector<char> send(per_rank), gathered(per_rank * nranks + offset);
      for (size_t i = 0; i < per_rank; i++)
        send[i] = expect(rank * per_rank + i);
      RANK_EXPECT_OK(log, comm,
                     hoop_allgather(comm, send.data(),
                                    gathered.data() + offset, per_rank,
                                    HOOP_I8, nullptr));
      size_t wrong = 0;
      for (size_t i = 0; i < per_rank * nranks; i++)
        wrong += gathered[offset + i] != expect(i);
      RANK_EXPECT(log, wrong == 0, "all-gather at offset %zu: %zu bytes wrong",
                  offset, wrong);
      std::vector<char> bcast(per_rank * nranks + offset, 0);
      if (rank == 1)
        memcpy(bcast.data() + offset, gathered.data() + offset,
               per_rank * nranks);
      RANK_EXPECT_OK(log, comm,
                     hoop_broadcast(comm, bcast.data() + offset,
                                    bcast.data() + offset, per_rank * nranks,
                                    HOOP_I8, 1, nullptr));
      wrong = 0;
      for (size_t i = 0; i < per_rank * nranks; i++)
        wrong += bcast[offset + i] != expect(i);
      RANK_EXPECT(log, wrong == 0, "broadcast at offset %zu: %zu bytes wrong",
                  offset, wrong);
    }
  });
  EXPECT_TRUE(r.all_ok()) << hooptest::describe(r);
}

INSTANTIATE_TEST_SUITE_P(
    Slots, ShmRing,
    ::testing::Values(RingCase{"262144", "plain"}, RingCase{"4096", "plain"},
                      RingCase{"262144", "nt"}, RingCase{"262144", "auto"}),
    [](const ::testing::TestParamInfo<RingCase> &p) {
      return std::string("slot") + p.param.slot_bytes + "_" + p.param.stores;
    });

TEST(Shm, ManyCommunicatorsLeakNoSegmentsFdsOrMappings) {
  RunResult r = run_ranks(3, [](RankLog &log, hoop_comm_t comm, int rank,
                                int nranks) {
    int fds = -1, maps = -1;
    for (int round = 0; round < 40 && log.ok(); round++) {
      // The first round sets up what stays (the library's own state).
      if (round == 1) {
        fds = count_dir("/proc/self/fd");
        maps = count_shm_mappings();
      }
      hoop_comm_t fresh = split_new(log, comm, rank, nranks);
      if (fresh == nullptr)
        return;
      std::vector<int32_t> v(100000, rank);
      RANK_EXPECT_OK(log, fresh,
                     hoop_allreduce(fresh, v.data(), v.data(), v.size(),
                                    HOOP_I32, HOOP_SUM, nullptr));
      RANK_EXPECT(log, v[99999] == nranks * (nranks - 1) / 2, "sum %d",
                  v[99999]);
      RANK_EXPECT_OK(log, fresh, hoop_comm_destroy(fresh));
    }
    RANK_EXPECT(log, count_dir("/proc/self/fd") == fds, "fds %d -> %d", fds,
                count_dir("/proc/self/fd"));
    RANK_EXPECT(log, count_shm_mappings() == maps, "mappings %d -> %d", maps,
                count_shm_mappings());
    RANK_EXPECT(log, own_segments() == 0, "%d segment(s) linked",
                own_segments());
  });
  EXPECT_TRUE(r.all_ok());
  EXPECT_TRUE(hooptest::leaked_shm_segments().empty());
}

// The engine arms a connection's receive link and then its send link
// before it sleeps, and both directions of a shm connection share one
// socket for wake-ups.  A wake-up for the receive link that arrives in
// between is drained by the send link's arm; its waker has cleared the
// flag, so no second one comes.  Arming must then say "look again":
// once, it said "sleep", and the rank slept on data until poll's 1 s cap.
TEST(Shm, AWakeUpDrainedByTheOtherLinkMakesTheEngineLookAgain) {
  hooptest::ConnPair pair;
  hooptest::connect_pair(hoop__shm_transport, pair);
  ASSERT_TRUE(pair.error.empty()) << pair.error;
  bool ready = false;
  hooptest::arm_both_links_in_turn(pair, &ready);
  EXPECT_TRUE(ready) << "the send link's arm drained the receive link's "
                        "wake-up and let the engine sleep";
}
