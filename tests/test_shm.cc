// Tests for the shared-memory transport and the topology that picks it.
// The collective suites (test_collectives, test_algorithms, ...) run over
// shm by default, since their ranks share this host; ctest runs them again
// with HOOP_TRANSPORT=tcp.  These cases cover what is particular to shm:
// the choice itself, segments in /dev/shm, stream alignment across ring
// wrap-arounds and leaks, segments that grow with what a pair carries,
// and the FIFO's restart of streams at the ring's start.  A rank killed
// mid-collective is Errors.KilledRankMakesOthersFailNamingIt, which also
// checks /dev/shm.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
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
#include "transport/shm.h"
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
      // Ids made on one machine listen on loopback.
      RANK_EXPECT(log, strcmp(info.address, "127.0.0.1") == 0,
                  "rank %d listens on \"%s\"", q, info.address);
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

// What the counters say of the same (hoop_stats_t's peers_connected).
uint64_t counted_peers(hoop_comm_t comm) {
  hoop_stats_t st = HOOP_STATS_INIT;
  if (hoop_comm_get_stats(comm, &st) != HOOP_SUCCESS)
    return UINT64_MAX;
  return st.peers_connected;
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
      RANK_EXPECT(log, counted_peers(comm) == 2, "counters say %llu peers",
                  (unsigned long long)counted_peers(comm));
      RANK_EXPECT_OK(log, comm, hoop_comm_reset_stats(comm));
      RANK_EXPECT(log, counted_peers(comm) == 2,
                  "after a reset the counters say %llu peers",
                  (unsigned long long)counted_peers(comm));
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
      RANK_EXPECT(log, counted_peers(comm) == (uint64_t)n - 1,
                  "counters say %llu peers",
                  (unsigned long long)counted_peers(comm));
    });
    EXPECT_TRUE(r.all_ok()) << transport << ": " << describe(r);
  }
}

// Open descriptors of this process.
int open_fds() {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == nullptr)
    return -1;
  while (struct dirent *e = readdir(d))
    n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the directory's own
}

// hoop's shared-memory segments this process maps, and the KiB of them it
// holds in memory (smaps' Rss): what its pairs carry, not what they could.
void mapped_segments(int *count, long *rss_kb) {
  *count = 0;
  *rss_kb = 0;
  std::ifstream smaps("/proc/self/smaps");
  bool ours = false;
  for (std::string line; std::getline(smaps, line);) {
    // A mapping's header begins with its range, "start-end"; its fields
    // ("Rss:   12 kB") follow it.
    if (line.substr(0, line.find(' ')).find('-') != std::string::npos) {
      ours = line.find("/dev/shm/hoop-") != std::string::npos;
      *count += ours;
    } else if (ours && line.compare(0, 4, "Rss:") == 0) {
      *rss_kb += std::stol(line.substr(4));
    }
  }
}

// Segments in /dev/shm still named as made by this process.
int named_segments() {
  std::string prefix = "hoop-" + std::to_string(getpid()) + "-";
  int n = 0;
  DIR *d = opendir("/dev/shm");
  if (d == nullptr)
    return 0;
  while (struct dirent *e = readdir(d))
    n += strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
  closedir(d);
  return n;
}

// Scale inside CI's time: 48 ranks over shm and 16 over TCP, connected on
// first use.  Init holds no connection, no segment and a few descriptors
// whatever N.  A ring all-reduce adds one descriptor per neighbour and,
// over shm, one segment each, of which a rank holds in memory only what
// the call needed: the header page and one step of growth (64 KiB) of
// each ring, 264 KiB for two (shm.c's SHM_HEADER_BYTES, SHM_GROW_BYTES).
// Nothing stays named in /dev/shm, and every element is right.
TEST(Scale, FortyEightRanksOverShmAndSixteenOverTcpHoldWhatTheyUse) {
  ScopedEnv lazy("HOOP_RUNTIME_CONNECT", "1");
  ScopedEnv ring("HOOP_ALGO", "ring");
  for (const char *transport : {"shm", "tcp"}) {
    ScopedEnv forced("HOOP_TRANSPORT", transport);
    bool shm = strcmp(transport, "shm") == 0;
    RunResult r = run_ranks(shm ? 48 : 16, [shm](RankLog &log,
                                                 hoop_comm_t comm, int rank,
                                                 int n) {
      int fds_init = open_fds(), segments = 0;
      long rss_kb = 0;
      mapped_segments(&segments, &rss_kb);
      RANK_EXPECT(log, fds_init <= 16 && segments == 0,
                  "after init: %d descriptors, %d segments", fds_init,
                  segments);
      std::vector<float> v(4096 + 7, float(rank + 1));
      RANK_EXPECT_OK(log, comm,
                     hoop_allreduce(comm, v.data(), v.data(), v.size(),
                                    HOOP_F32, HOOP_SUM, nullptr));
      size_t wrong = 0;
      for (float x : v)
        wrong += x != float(n * (n + 1) / 2);
      RANK_EXPECT(log, wrong == 0, "%zu of %zu sums wrong", wrong, v.size());
      int fds = open_fds();
      mapped_segments(&segments, &rss_kb);
      RANK_EXPECT(log, fds - fds_init == 2,
                  "%d descriptors after init, %d after a ring all-reduce",
                  fds_init, fds);
      RANK_EXPECT(log, segments == (shm ? 2 : 0) && rss_kb <= 264,
                  "after a ring all-reduce: %d segments, %ld KiB of them "
                  "held", segments, rss_kb);
      RANK_EXPECT(log, named_segments() == 0,
                  "%d segments of this rank still named in /dev/shm",
                  named_segments());
    });
    EXPECT_TRUE(r.all_ok()) << transport << ": " << describe(r);
  }
}

// HOOP_RUNTIME_CONNECT=0: every peer connects at init, and
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
      RANK_EXPECT(log, counted_peers(comm) == (uint64_t)n - 1,
                  "counters say %llu peers",
                  (unsigned long long)counted_peers(comm));
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

// ---- Rings that grow with use, and streams that restart at the ring's
// start (issue 38).

namespace {

// Both ends of one direction of the FIFO in this process: the ring, the
// positions as published, and how far the writer asked the ring to grow.
struct MemFifo {
  static constexpr size_t kSlot = 4096, kRing = 8 * kSlot;
  static constexpr size_t kRestart = 8192, kPage = 4096;
  static constexpr char kUntouched = 0x5a;
  std::vector<char> ring = std::vector<char>(kRing, kUntouched);
  uint64_t head = 0, tail = 0;
  size_t grown = 0;
  hoop_fifo_signal signal{};
  hoop_fifo writer{}, reader{};

  MemFifo() {
    signal.publish_head = [](void *ctx, uint64_t h, size_t) {
      static_cast<MemFifo *>(ctx)->head = h;
    };
    signal.publish_tail = [](void *ctx, uint64_t t) {
      static_cast<MemFifo *>(ctx)->tail = t;
    };
    signal.grow = [](void *ctx, size_t upto, size_t *ready) {
      auto *m = static_cast<MemFifo *>(ctx);
      *ready = std::min(kRing, (upto + kPage - 1) / kPage * kPage);
      m->grown = std::max(m->grown, *ready);
      return HOOP_SUCCESS;
    };
    for (hoop_fifo *f : {&writer, &reader}) {
      f->ring = kRing;
      f->slot = kSlot;
      f->restart = kRestart;
      f->out_ring = ring.data();
      f->in_ring = ring.data();
      f->out_tail = &tail;
      f->in_head = &head;
      f->signal = &signal;
      f->ctx = this;
    }
  }
};

char stream_byte(size_t stream, size_t i) {
  return (char)(stream * 131 + i * 7 + i / 251);
}

// Runs `sizes` as streams through a MemFifo, the writer moving about three
// times as often as the reader, in random pieces.  Returns how often the
// writer stood at a restart (a stream that would begin `restart` bytes in
// or more) while the reader was still in an earlier stream.
int run_streams(MemFifo &m, const std::vector<size_t> &sizes, unsigned seed,
                std::string *error) {
  srand(seed);
  size_t ws = 0, wsent = 0, rs = 0, rgot = 0;
  bool wbegun = false, rbegun = false;
  int waited_at_restart = 0;
  std::vector<char> src, dst;
  for (long step = 0; rs < sizes.size(); step++) {
    if (step > 10000000) {
      *error = "no progress";
      return waited_at_restart;
    }
    if (ws < sizes.size() && rand() % 4 != 0) {
      if (!wbegun) {
        hoop__fifo_begin_stream(&m.writer, 1);
        wbegun = true;
      }
      size_t left = sizes[ws] - wsent;
      size_t want = 1 + (size_t)rand() % std::min(left, (size_t)9000);
      src.resize(want);
      for (size_t i = 0; i < want; i++)
        src[i] = stream_byte(ws, wsent + i);
      size_t half = want / 2;
      iovec iov[2] = {{src.data(), half}, {src.data() + half, want - half}};
      uint64_t before = m.writer.out_head;
      bool at_restart =
          wsent == 0 && before % MemFifo::kRing >= MemFifo::kRestart;
      size_t sent = 0;
      EXPECT_EQ(hoop__fifo_send(&m.writer, iov, 2, &sent), HOOP_SUCCESS);
      if (sent == 0 && at_restart && rs < ws &&
          m.head - m.tail < MemFifo::kRing)
        waited_at_restart++;
      wsent += sent;
      if (wsent == sizes[ws]) {
        ws++;
        wsent = 0;
        wbegun = false;
      }
      continue;
    }
    if (!rbegun) {
      hoop__fifo_begin_stream(&m.reader, 0);
      rbegun = true;
    }
    size_t left = sizes[rs] - rgot;
    size_t want = 1 + (size_t)rand() % std::min(left, (size_t)7000);
    const char *got_at = nullptr;
    size_t got = 0;
    if (rand() % 2) {
      dst.resize(want);
      got = hoop__fifo_recv(&m.reader, dst.data(), want, rand() % 2);
      got_at = dst.data();
    } else {
      const void *p = nullptr;
      got = hoop__fifo_peek(&m.reader, want, &p);
      got_at = static_cast<const char *>(p);
    }
    if (got > 0 && rgot == 0) {
      // Where the stream began in the ring: aligned, and never far in.
      size_t at = (size_t)((m.reader.in_tail -
                            (got_at == dst.data() ? got : 0)) %
                           MemFifo::kRing);
      if (at % 64 != 0 || at > MemFifo::kRestart) {
        *error = "stream " + std::to_string(rs) + " began at ring offset " +
                 std::to_string(at);
        return waited_at_restart;
      }
    }
    for (size_t i = 0; i < got; i++)
      if (got_at[i] != stream_byte(rs, rgot + i)) {
        *error = "stream " + std::to_string(rs) + " byte " +
                 std::to_string(rgot + i) + " is wrong";
        return waited_at_restart;
      }
    if (got_at != dst.data())
      hoop__fifo_release(&m.reader, got);
    rgot += got;
    if (rgot == sizes[rs]) {
      rs++;
      rgot = 0;
      rbegun = false;
    }
  }
  return waited_at_restart;
}

}  // namespace

// Streams that would begin past the restart offset begin at the ring's
// start, with padding both ends skip by the same rule; the writer may
// reach that point while the reader is still streams behind, and must
// then put the new stream only over bytes already read.  Every byte of
// every stream must arrive as written, small streams must keep to the
// ring's first pages, and no store may land where the ring did not grow.
TEST(Fifo, StreamsRestartAtTheRingStartWhileTheReaderLags) {
  std::vector<size_t> small;
  srand(38);
  for (int i = 0; i < 3000; i++)
    small.push_back(1 + (size_t)rand() % 3000);
  for (unsigned seed : {1u, 2u, 3u}) {
    MemFifo m;
    std::string error;
    int waited = run_streams(m, small, seed, &error);
    ASSERT_TRUE(error.empty()) << error << " (seed " << seed << ")";
    EXPECT_GT(waited, 0) << "the writer never met a restart while the "
                            "reader lagged (seed " << seed << ")";
    // Streams begin at most kRestart in and carry at most 3000 bytes.
    EXPECT_LE(m.grown, MemFifo::kRestart + 3000 + MemFifo::kPage);
    EXPECT_EQ(std::count(m.ring.begin() + (long)m.grown, m.ring.end(),
                         MemFifo::kUntouched),
              (long)(MemFifo::kRing - m.grown))
        << "a store landed past what the ring grew to";
  }
  // Streams longer than the ring wrap within themselves, between small
  // ones that restart.
  std::vector<size_t> mixed;
  for (int i = 0; i < 300; i++)
    mixed.push_back(i % 50 == 7 ? 100000 + (size_t)i
                                : 1 + (size_t)i * 37 % 5000);
  MemFifo m;
  std::string error;
  run_streams(m, mixed, 4, &error);
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(m.grown, MemFifo::kRing);
}

namespace {

// Bytes of a shm test pair's segment that exist (mincore on its mapping):
// the pair connect_pair makes (comm id 0x7e57) in this process.
long pair_segment_bytes() {
  std::string name = "/dev/shm/hoop-" + std::to_string(getpid()) +
                     "-0000000000007e57-";
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(name) == std::string::npos)
      continue;
    unsigned long lo, hi;
    if (sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2)
      return -1;
    long page = sysconf(_SC_PAGESIZE);
    std::vector<unsigned char> in((hi - lo) / (unsigned long)page);
    if (mincore((void *)lo, hi - lo, in.data()) != 0)
      return -1;
    long n = 0;
    for (unsigned char b : in)
      n += b & 1;
    return n * page;
  }
  return -1;
}

// Streams `len` bytes from one end of a pair to the other, the receiver
// reading as they come.
void stream_through(hoop_conn *from, hoop_conn *to, size_t len,
                    std::string *error) {
  std::vector<char> out(len), in(len);
  for (size_t i = 0; i < len; i++)
    out[i] = stream_byte(len, i);
  from->ops->begin_stream(from, 1);
  to->ops->begin_stream(to, 0);
  size_t sent = 0, got = 0;
  for (int spins = 0; got < len && spins < 1000000; spins++) {
    if (sent < len) {
      iovec iov = {out.data() + sent, len - sent};
      size_t n = 0;
      if (from->ops->send(from, &iov, 1, &n) != HOOP_SUCCESS) {
        *error = hoop_last_error();
        return;
      }
      sent += n;
    }
    size_t n = 0;
    if (to->ops->recv(to, in.data() + got, len - got, false, &n) !=
        HOOP_SUCCESS) {
      *error = hoop_last_error();
      return;
    }
    got += n;
  }
  if (got < len || in != out)
    *error = "the stream of " + std::to_string(len) + " bytes did not "
             "arrive whole";
}

}  // namespace

// A pair's segment is sparse: after connecting, its header page; after a
// thousand 4 KiB calls each way, the rings' first pages only, since small
// streams restart at the ring's start; a 1 MiB call then grows the ring
// it goes through.
TEST(Shm, APairHoldsTheMemoryOfWhatItCarried) {
  hooptest::ConnPair pair;
  hooptest::connect_pair(hoop__shm_transport, pair);
  ASSERT_TRUE(pair.error.empty()) << pair.error;
  long at_connect = pair_segment_bytes();
  ASSERT_GT(at_connect, 0) << "no mapping of the pair's segment found";
  EXPECT_LE(at_connect, 4096);
  std::string error;
  for (int i = 0; i < 1000 && error.empty(); i++) {
    stream_through(pair.lower, pair.higher, 4000 + (size_t)i % 96, &error);
    stream_through(pair.higher, pair.lower, 4096, &error);
  }
  ASSERT_TRUE(error.empty()) << error;
  long small = pair_segment_bytes();
  // A header page, and per direction two 64 KiB steps of the ring.
  EXPECT_LE(small, 4096 + 2 * 128 * 1024) << "after 4 KiB calls";
  stream_through(pair.lower, pair.higher, 1 << 20, &error);
  ASSERT_TRUE(error.empty()) << error;
  long large = pair_segment_bytes();
  EXPECT_GE(large, small + (1 << 20) - 128 * 1024) << "after a 1 MiB call";
  EXPECT_LE(large, 4096 + (2 << 20) + 128 * 1024);
}

// A /dev/shm too small for what a pair carries fails the send naming the
// peer, /dev/shm, the bytes and the settings that shrink rings, instead of
// a SIGBUS at the store: in a child with its own mount namespace whose
// /dev/shm is a 1 MiB tmpfs, both ways of growing (populating the
// mapping, and posix_fallocate as on kernels before 5.14).
class ShmFull : public ::testing::TestWithParam<bool> {};

TEST_P(ShmFull, SendFailsNamingTheSizeAndTheSettings) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    auto say = [&](const std::string &what) {
      (void)!write(fds[1], what.data(), what.size());
      _exit(0);
    };
    // Root needs only a mount namespace; others make a user namespace too
    // (refused in a chroot, where the test is then skipped).
    uid_t uid = geteuid();
    gid_t gid = getegid();
    int flags = CLONE_NEWNS | (uid == 0 ? 0 : CLONE_NEWUSER);
    if (unshare(flags) != 0)
      say(std::string("SKIP unshare: ") + strerror(errno));
    if (uid != 0) {
      std::ofstream("/proc/self/setgroups") << "deny";
      std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
      std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m,mode=1777") != 0)
      say(std::string("SKIP mount of a small tmpfs: ") + strerror(errno));
    hoop__shm_grow_by_fallocate = GetParam();
    hooptest::ConnPair pair;
    hooptest::connect_pair(hoop__shm_transport, pair);
    if (!pair.error.empty())
      say("FAIL connecting: " + pair.error);
    std::vector<char> out(2 << 20, 1);
    pair.lower->ops->begin_stream(pair.lower, 1);
    iovec iov = {out.data(), out.size()};
    size_t sent = 0;
    hoop_result_t res = pair.lower->ops->send(pair.lower, &iov, 1, &sent);
    if (res == HOOP_SUCCESS)
      say("FAIL 2 MiB went into a 1 MiB /dev/shm: " +
          std::to_string(sent) + " bytes sent");
    say("ERROR " + std::to_string(sent) + " " + hoop_last_error());
  }
  close(fds[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    said.append(buf, (size_t)n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died: signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status)
                                                         : 0);
  if (said.rfind("SKIP ", 0) == 0)
    GTEST_SKIP() << said.substr(5);
  ASSERT_EQ(said.rfind("ERROR ", 0), 0u) << said;
  size_t sent = std::stoul(said.substr(6));
  // Slots of 256 KiB: three fit beside the header page, the fourth not.
  EXPECT_EQ(sent, 3u * 256 * 1024) << said;
  for (const char *part : {"rank 1 (the test's)", "/dev/shm",
                           "262144 more bytes", "786432 of its 2097152",
                           "HOOP_SHM_SLOTS", "HOOP_SHM_SLOT_BYTES",
                           "o space left"})
    EXPECT_NE(said.find(part), std::string::npos) << part << " in: " << said;
}

INSTANTIATE_TEST_SUITE_P(Grow, ShmFull, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &p) {
                           return p.param ? "fallocate" : "populate";
                         });
